"""Shared test helpers (imported by test modules; pytest puts tests/ on sys.path)."""

import importlib.util
import json
import os
import socket

from dense_cf.configs.base import base_config
from dense_cf.datasets.formats import BiencoderExample, Passage, write_biencoder


def load_tool(name: str):
    """tools/<name>.py as a module (tools/ is not a package)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "tools", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_tower_data(d, dev: bool = True) -> None:
    """24 tiny "when was tower i built?" examples as ``train.json`` (+ the first 8 as
    ``dev.json``): a hand-made biencoder set for CLI/loop tests that need no synthetic benchmark."""
    exs = []
    for i in range(24):
        pos = Passage(title=f"Tower {i}", text=f"The tower {i} stands in town {i % 5}. "
                                               f"It was built in {1800 + i}. It is tall.")
        hard = [Passage(title=f"Tower {i + 1}", text=f"The tower {i + 1} is old. It is grey.")]
        exs.append(BiencoderExample(f"when was tower {i} built?", [str(1800 + i)], [pos], [], hard))
    write_biencoder(os.path.join(d, "train.json"), exs)
    if dev:
        write_biencoder(os.path.join(d, "dev.json"), exs[:8])


def tiny_tower_config(data_dir, **overrides):
    """A tiny random-BERT PiCL config over ``write_tower_data(data_dir)``: 6 steps of 8 on a 4x2
    mesh, checkpoints and dev evaluation every 3 (the loop and resume tests)."""
    c = base_config()
    c.model.name_or_path = "tiny"
    c.model.tiny_hidden, c.model.tiny_layers, c.model.tiny_heads = 32, 1, 2
    c.data.data_dir = str(data_dir)
    c.data.train_file, c.data.dev_file = "train.json", "dev.json"
    c.data.max_q_len, c.data.max_p_len = 12, 24
    c.method = "picl"  # with PiCL's own loss weights
    c.train.global_batch = 8
    c.train.num_steps = 6
    c.train.log_every = 2
    c.train.checkpoint_every = 3
    c.train.eval_every = 3
    c.optim.warmup_steps = 2
    c.optim.learning_rate = 1e-3
    c.mesh.data, c.mesh.model = 4, 2
    return apply_overrides(c, overrides)


def tiny_run(method="picl", max_p_len=48):
    """An untrained tiny ``Run`` of ``method`` (random weights) on a 2x1 mesh, for export tests."""
    from dense_cf.train.run import Run, build_model, run_tokenizer
    cfg = tiny_synthetic_config("/nonexistent", method=method, **{"data.max_p_len": max_p_len})
    model, _, tok_dir = build_model(cfg, load_pretrained=False)
    mesh, rules, params, _ = sharded_params(model, cfg.data.max_p_len, 2, 1)
    return Run(config=cfg, model=model, params=params, tokenizer=run_tokenizer(cfg, tok_dir),
               step=0, mesh=mesh, rules=rules)


def tiny_synthetic_config(data_dir, **overrides):
    """A tiny random-BERT PiCL config over a synthetic benchmark written to ``data_dir``.

    ``overrides`` use dotted keys, e.g. ``**{"train.num_steps": 3}``.
    """
    c = base_config()
    c.method = "picl"
    c.model.name_or_path = "tiny"
    c.model.tiny_layers = 1
    c.data.data_dir = str(data_dir)
    c.data.train_file, c.data.dev_file = "biencoder-synth-train.json", "biencoder-synth-dev.json"
    c.data.corpus_file, c.data.test_file = "psgs_synth.tsv", "synth-test.qa.csv"
    c.data.gold_file = "synth-test_gold_info.json"
    c.data.max_q_len, c.data.max_p_len = 24, 64
    c.train.global_batch = 8
    c.train.log_every = 1
    c.train.eval_every = 0
    c.optim.warmup_steps = 1
    c.mesh.data = 2
    c.eval.k = 20
    c.eval.ks = (1, 5, 20)
    c.eval.batch_size = 64
    c.eval.embedding_dtype = "float32"
    c.eval.shard_size = 128
    return apply_overrides(c, overrides)


def apply_overrides(config, overrides):
    """Sets dotted keys (``{"train.num_steps": 3}``) on a ConfigDict, like ``--config.x.y=v``."""
    for key, value in overrides.items():
        node = config
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value
    return config


def random_batch(n, lq, lp, num_hard, vocab, *, seed=0, valid_p=None):
    """A random PiCL batch (q / pos / hard / cf ids and masks, 0-4 padding tokens per row).

    Token ids are drawn from ``[5, vocab)``. ``hard_valid`` / ``cf_valid`` are all True, or,
    with ``valid_p``, True with that probability (drawn after the ids, from the same generator).
    """
    import numpy as np

    r = np.random.default_rng(seed)

    def ids(*shape):
        x = r.integers(5, vocab, size=shape).astype(np.int32)
        m = np.ones(shape, np.int32)
        m[..., shape[-1] - r.integers(0, 4):] = 0   # some padding
        return x * m, m

    b = {}
    b["q_ids"], b["q_mask"] = ids(n, lq)
    b["pos_ids"], b["pos_mask"] = ids(n, lp)
    b["hard_ids"], b["hard_mask"] = ids(n, num_hard, lp)
    b["cf_ids"], b["cf_mask"] = ids(n, lp)
    if valid_p is None:
        b["hard_valid"] = np.ones((n, num_hard), bool)
        b["cf_valid"] = np.ones(n, bool)
    else:
        b["hard_valid"] = r.random((n, num_hard)) < valid_p
        b["cf_valid"] = r.random(n) < valid_p
    return b


def sharded_params(model, lp, data, model_parallel):
    """``(mesh, rules, params, shardings)``: ``model`` (a DualEncoder) initialised from key 0 on
    a ``data x model_parallel`` mesh of the first devices, sharded by its logical axis rules."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    from dense_cf.models.bert import axis_rules_for
    from dense_cf.parallel import mesh as mesh_lib

    mesh = mesh_lib.make_mesh(data, model_parallel, devices=jax.devices()[: data * model_parallel])
    rules = axis_rules_for(model.config, model_parallel)
    ids = jnp.ones((1, lp), jnp.int32)
    init = lambda r: model.init(r, ids, ids, ids, ids)["params"]  # noqa: E731
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        sh = mesh_lib.tree_shardings(jax.eval_shape(init, jax.random.key(0)), mesh, rules)
        params = jax.jit(lambda r: nn.meta.unbox(init(r)), out_shardings=sh)(jax.random.key(0))
    return mesh, rules, params, sh


_FIRST = ("Alba", "Bruno", "Carla", "Dario", "Elena", "Fabio", "Gina", "Hugo")
_LAST = ("Marsh", "Nolte", "Orsini", "Pratt", "Quill", "Rossi")
_LAND = ("Arvelia", "Borgund", "Calmora", "Dunvale", "Eskaria", "Fenwick", "Galdor", "Haldor",
         "Istra", "Jorvik", "Kelmar", "Lundar")
_CITY = ("Amsel", "Brisk", "Corva", "Delm", "Ebro", "Farn", "Gest", "Holm", "Ilse", "Jarn",
         "Kost", "Lorn")


def hotpot_world(n_people=12, n_comparison=4, seed=0):
    """A hand-built two-hop world as HotpotQA examples and its corpus paragraphs.

    Person i (title "First Last") was born in land i and in a year; land i's capital is a city.
    Bridge question i: "What is the capital of the land where <person i> was born?" (hop 1: the
    person, support sentence 1; hop 2: the land, support sentence 1; answer the city).
    Comparison questions: "Who was born first, A or B?" (support: the birth-year sentences).
    Every context holds the two gold paragraphs and two distractors. Returns (examples,
    paragraphs) with paragraphs [(title, sentences)] of every person and land.
    """
    import random

    from dense_cf.datasets.hotpotqa import HotpotExample

    r = random.Random(seed)
    people = [f"{_FIRST[i % len(_FIRST)]} {_LAST[i // len(_FIRST)]}" for i in range(n_people)]
    lands = list(_LAND[:n_people])
    cities = list(_CITY[:n_people])
    years = [1900 + 3 * i for i in range(n_people)]
    r.shuffle(years)
    paras = {}
    for i, (p, land, city) in enumerate(zip(people, lands, cities)):
        paras[p] = (f"{p} is a painter.", f" {p} was born in {land}.",
                    f" {p} was born in {years[i]}.", f" {p} likes tea.")
        paras[land] = (f"{land} is a small land.", f" The capital of {land} is {city}.",
                       f" {land} has high mountains.")
    titles = list(paras)

    def context(gold):
        others = [t for t in titles if t not in gold]
        r.shuffle(others)
        ctx = list(gold) + others[:2]
        r.shuffle(ctx)
        return tuple((t, paras[t]) for t in ctx)

    examples = []
    for i, (p, land, city) in enumerate(zip(people, lands, cities)):
        # The second hop first, as HotpotQA often lists it (bridge_order must fix the order).
        examples.append(HotpotExample(
            id=f"b{i}", question=f"What is the capital of the land where {p} was born?",
            answer=city, type="bridge", supporting_facts=((land, 1), (p, 1)),
            context=context((p, land))))
    for j in range(n_comparison):
        a, b = r.sample(range(n_people), 2)
        older = people[a] if years[a] < years[b] else people[b]
        examples.append(HotpotExample(
            id=f"c{j}", question=f"Who was born first, {people[a]} or {people[b]}?",
            answer=older, type="comparison",
            supporting_facts=((people[a], 2), (people[b], 2)),
            context=context((people[a], people[b]))))
    return examples, [(t, paras[t]) for t in titles]


def write_hotpot_world(d, **kw):
    """``hotpot_world`` written as ``hotpot_train.json`` (every question), ``hotpot_dev.json``
    and ``hotpot_test.json`` (the first 8) and ``corpus.tsv`` under ``d``; returns the examples."""
    from dense_cf.datasets.hotpotqa import write_corpus, write_hotpot

    examples, paras = hotpot_world(**kw)
    write_hotpot(os.path.join(d, "hotpot_train.json"), examples)
    write_hotpot(os.path.join(d, "hotpot_dev.json"), examples[:8])
    write_hotpot(os.path.join(d, "hotpot_test.json"), examples[:6] + examples[-2:])
    write_corpus(paras, os.path.join(d, "corpus.tsv"))
    return examples


def tiny_mdr_config(data_dir, method="mdr-eadpr", **overrides):
    """A tiny random-BERT MDR config over ``write_hotpot_world(data_dir)``."""
    c = base_config()
    c.method = method  # with the method's own loss weights
    c.model.name_or_path = "tiny"
    c.model.tiny_layers = 1
    c.model.shared = True
    c.data.data_dir = str(data_dir)
    c.data.train_file, c.data.dev_file = "hotpot_train.json", "hotpot_dev.json"
    c.data.test_file, c.data.corpus_file, c.data.gold_file = "hotpot_test.json", "corpus.tsv", ""
    c.data.max_q_len, c.data.max_p_len = 24, 40
    c.data.num_hard = 1
    c.multihop.max_hop2_len = 56
    c.multihop.beam_size, c.multihop.hop2_k, c.multihop.top_chains = 4, 4, 10
    c.multihop.ks = (2, 10)
    c.train.global_batch = 8
    c.train.num_steps = 3
    c.train.log_every = 1
    c.train.eval_every = 0
    c.optim.warmup_steps = 1
    c.mesh.data = 2
    c.eval.batch_size = 32
    c.eval.embedding_dtype = "float32"
    c.eval.shard_size = 64
    return apply_overrides(c, overrides)


TOY_CODES = ("alpha", "bravo", "charlie", "delta", "echo", "golf", "hotel", "india", "kilo",
             "lima", "oscar", "papa", "romeo", "sierra", "tango", "victor")


def write_toy_reader_results(path, n, seed, *, passages=4):
    """A DPR retrieval results file of a toy QA task a tiny reader learns in ~100 steps:
    "what is the code of item i?"; one passage per question says "... its code is CODE ...", the
    others (no answer) do not; the answer passage sits at a random rank."""
    import json

    import numpy as np

    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        code = TOY_CODES[rng.integers(len(TOY_CODES))]
        pos = {"id": f"p{i}", "title": f"item {i}", "has_answer": True, "score": "1.0",
               "text": f"the item {i} is kept in room {rng.integers(100)} and its code is {code} today."}
        ctxs = [{"id": f"n{i}_{j}", "title": f"item {i}", "has_answer": False, "score": "0.5",
                 "text": f"the item {i} is kept in room {rng.integers(100)} and it is old."}
                for j in range(passages - 1)]
        ctxs.insert(int(rng.integers(passages)), pos)
        records.append({"question": f"what is the code of item {i}?", "answers": [code], "ctxs": ctxs})
    with open(path, "w") as f:
        json.dump(records, f, indent=1)
    return records


def assert_cut_batch_matches(method, model, params, loss_hparams, full, cut):
    """Without dropout, a batch cut to a length bucket (``inputs.buckets.trim_batch``) gives the
    full batch's loss (rel 1e-5) and gradients (rtol 1e-3, atol 1e-6): padding is masked."""
    import jax
    import numpy as np
    import pytest

    from dense_cf.train.step import batch_loss

    def loss_and_grads(batch):
        def f(p):
            return batch_loss(method, model, p, batch, loss_hparams=loss_hparams, mesh=None,
                              deterministic=True)[0]
        return jax.jit(jax.value_and_grad(f))(jax.device_get(params))

    (l_full, g_full), (l_cut, g_cut) = loss_and_grads(full), loss_and_grads(cut)
    assert float(l_cut) == pytest.approx(float(l_full), rel=1e-5)
    for a, c in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_cut)):
        np.testing.assert_allclose(c, a, rtol=1e-3, atol=1e-6)


def tiny_reader_config(train_file, dev_file="", **overrides):
    """A tiny random-BERT extractive reader (method "reader") on a retrieval results file."""
    c = base_config()
    c.method = "reader"
    c.model.name_or_path = "tiny"
    c.model.tiny_layers = 2
    c.model.dropout = 0.0
    c.reader.train_file, c.reader.dev_file = str(train_file), str(dev_file)
    c.reader.passages, c.reader.max_len, c.reader.max_q_len = 4, 48, 16
    c.train.global_batch, c.train.log_every, c.train.eval_every = 8, 10, 0
    c.train.num_steps, c.train.checkpoint_every = 100, 50
    c.optim.learning_rate, c.optim.warmup_steps = 2e-3, 10
    c.mesh.data = 2
    return apply_overrides(c, overrides)


def write_tiny_t5_tokenizer(path, words, extra_chars=""):
    """A T5-style ``tokenizer.json`` (Unigram + Metaspace + "$A </s>"): ``<pad>`` 0, ``</s>`` 1,
    ``<unk>`` 2, single characters (plus ``extra_chars``) and ``words`` as whole pieces.
    Returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(c, -4.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789.,?!'\\" + extra_chars]
    vocab += [("\u2581" + w, -1.0) for w in dict.fromkeys(words)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=2))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok.save(str(path))
    return len(vocab)


FID_WORDS = ("question title context what is the code of item its and it old kept room today"
             .split() + list(TOY_CODES))


def tiny_fid_config(train_file, tok_dir, dev_file="", **overrides):
    """A tiny random-T5 FiD reader (method "fid") on a retrieval results file; ``tok_dir`` holds
    a tokenizer from :func:`write_tiny_t5_tokenizer`."""
    c = base_config()
    c.method = "fid"
    c.model.name_or_path = "tiny"
    c.model.tokenizer = str(tok_dir)
    c.model.tiny_hidden, c.model.tiny_layers, c.model.tiny_heads = 32, 1, 2
    c.model.dropout = 0.0
    c.reader.train_file, c.reader.dev_file = str(train_file), str(dev_file)
    c.fid.n_passages, c.fid.max_len, c.fid.max_answer_len, c.fid.decode_len = 4, 48, 4, 4
    c.train.global_batch, c.train.log_every, c.train.eval_every = 8, 10, 0
    c.train.num_steps, c.train.checkpoint_every = 100, 50
    c.optim.learning_rate, c.optim.warmup_steps, c.optim.grad_clip = 3e-3, 10, 0.5
    c.mesh.data = 2
    return apply_overrides(c, overrides)


def communicate_all(procs, timeout: float) -> list[tuple[int, str, str]]:
    """``(returncode, stdout, stderr)`` of each child process, in order; any still running
    when one times out (or the test fails) is killed, so no trainer outlives its test."""
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def child_pythonpath(*paths) -> str:
    """PYTHONPATH for a child process: ``paths`` first, then the parent's own PYTHONPATH, so a
    site carried that way (the GPU image's wheels, tools/gpu/check.sh) stays importable."""
    return os.pathsep.join([str(p) for p in paths] + [p for p in [os.environ.get("PYTHONPATH")] if p])


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for a child process with ``devices`` simulated CPU devices: the suite's other
    flags (tests/conftest.py) kept, the device count replaced."""
    rest = [f for f in os.environ.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")]
    return " ".join([f"--xla_force_host_platform_device_count={devices}", *rest])


def free_port() -> int:
    """A free localhost TCP port (for a multi-process run's coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_available() -> bool:
    """Whether this jaxlib has gloo CPU collectives, which multi-process CPU runs need."""
    try:
        from jax._src.lib import _jax
        return hasattr(_jax, "make_gloo_tcp_collectives")
    except ImportError:
        return False


# ``python -c STEP_HOOK <dense_cf.main flags>``: dense_cf.main with one test-side hook. After
# logging a step it appends ``STEP <n>`` to $STEP_MARKER and sleeps 0.3 s (from step 6 on,
# $STEP_SLEEP_LATE s), so a test can act at a step it picks while the run is still training
# (the next step may be in flight by then).
STEP_HOOK = """
import os, sys, time
from dense_cf.train import metric_writer
_real = metric_writer.MetricWriter.write
def _write(self, step, metrics, **kw):
    out = _real(self, step, metrics, **kw)
    with open(os.environ["STEP_MARKER"], "a") as f:
        f.write(f"STEP {int(step)}\\n")
    # The full-disk test gives a background save time to fail before the next step from step 6
    # on (STEP_SLEEP_LATE): 0.3 s was not always enough on a loaded 2-core machine.
    time.sleep(float(os.environ.get("STEP_SLEEP_LATE", "0.3")) if int(step) >= 6 else 0.3)
    return out
metric_writer.MetricWriter.write = _write
from dense_cf.main import run
sys.argv = ["dense_cf.main", *sys.argv[1:]]
run()
"""


# ``python -c NO_TF_MAIN <dense_cf.main flags>``: dense_cf.main with TensorFlow, TFDS and faiss
# unimportable, the situation of a JAX GPU host.
NO_TF_MAIN = ("import runpy, sys\n"
              "for m in ('tensorflow', 'tensorflow_datasets', 'faiss'):\n"
              "    sys.modules[m] = None\n"
              "sys.argv = ['dense_cf.main'] + sys.argv[1:]\n"
              "runpy.run_module('dense_cf.main', run_name='__main__')\n")


# ``--config.<key>=<value>`` overrides for dense_cf.main (with configs/picl_nq.py): the tiny
# 8-step PiCL run on write_tower_data's train.json of the fault and multi-host tests.
TINY_MAIN_STEPS = 8
TINY_MAIN_OVERRIDES = {
    "model.name_or_path": "tiny", "model.tiny_layers": 1, "model.tiny_hidden": 32,
    "model.tiny_heads": 2, "data.train_file": "train.json", "data.dev_file": "",
    "data.max_q_len": 12, "data.max_p_len": 24, "train.global_batch": 8,
    "train.num_steps": TINY_MAIN_STEPS, "train.log_every": 1, "train.checkpoint_every": 100,
    "train.eval_every": 0, "optim.warmup_steps": 2, "optim.learning_rate": 1e-3}


def logged_steps(workdir) -> list[int]:
    """The steps of a run's metrics.jsonl, in the order they were logged."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f]


def compare_pairs(dirs, steps, pairs, seed=0, label=None):
    """``harness.compare_study(..., catch=True)`` over hand-made runs: ``dirs`` name -> run
    directory, ``steps`` name -> evaluated step; ``(A, B, result or error)`` per pair, named
    ``label(name, seed)`` (default the run names), as the demo passes them to its sections."""
    from dense_cf.studies import harness
    study = harness.Study("test", tuple(harness.StudyRun(n, lambda s: None) for n in dirs),
                          tuple(pairs))
    trained = {(n, seed): harness.Trained(n, seed, d, None, {"step": steps[n]}, False, 0.0)
               for n, d in dirs.items()}
    name = label or (lambda n, _seed: n)
    return [(name(c.a, c.seed), name(c.b, c.seed), c.result)
            for c in harness.compare_study(study, trained, [seed], label=label, catch=True)]
