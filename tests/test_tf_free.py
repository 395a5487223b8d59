"""The TF-free core: model building/loading, the train step (plain and GradCache), export encoding
and the accelerator benchmark import and run with TensorFlow (and TFDS) unimportable.

TensorFlow is only for tf.data/TFDS input pipelines; accelerator hosts (the H100 image used in
docs/feasibility.md) have no TensorFlow. After a package move, edit :data:`TF_FREE_MODULES` only.
"""

import os
import subprocess
import sys
import textwrap

from helpers import child_pythonpath, xla_flags

# Every module that must import without TensorFlow. One list, so a restructure edits one place.
TF_FREE_MODULES = [
    "dense_cf.configs.base",
    "dense_cf.losses",
    "dense_cf.methods",
    "dense_cf.models.bert",
    "dense_cf.models.dual_encoder",
    "dense_cf.models.hf",
    "dense_cf.models.tokenizer",
    "dense_cf.train.checkpoint",
    "dense_cf.train.gradcache",
    "dense_cf.parallel.mesh",
    "dense_cf.train.run",
    "dense_cf.train.state",
    "dense_cf.train.step",
    "dense_cf.inputs.tokens",
    "dense_cf.retrieval.export",
    "dense_cf.bench.common",
    "dense_cf.bench.peak",
    "dense_cf.bench.accelerator",
    "dense_cf.bench.levers",
    "dense_cf.bench.packing",
    "dense_cf.inputs.packing",
    "dense_cf.retrieval.token_table",
]
# The project's export encoder (a class with ``passages(ids, mask)``), as "module:attribute".
ENCODER = "dense_cf.retrieval.export:Encoder"

_SCRIPT = textwrap.dedent("""
    import importlib, os, sys, tempfile, types
    for name in ("tensorflow", "tensorflow_datasets"):
        sys.modules[name] = None  # any `import tensorflow` now raises ImportError

    modules = {modules!r}
    for m in modules:
        importlib.import_module(m)

    import jax, jax.numpy as jnp, numpy as np
    from flax import linen as nn
    from dense_cf.bench.common import batch_shapes, random_batch
    from dense_cf.configs.base import base_config
    from dense_cf.models import hf
    from dense_cf.models.bert import BertConfig
    from dense_cf.models.dual_encoder import DualEncoder, model_from_config, pretrained_params
    from dense_cf import methods
    from dense_cf.parallel import mesh as mesh_lib
    from dense_cf.train.state import TrainState, make_optimizer
    from dense_cf.train.step import make_train_step
    mod, attr = {encoder!r}.split(":")
    Encoder = getattr(importlib.import_module(mod), attr)

    # Model building: "tiny" from the run config, then an HF safetensors round trip.
    cfg = base_config()
    cfg.model.name_or_path = "tiny"
    cfg.model.tiny_hidden, cfg.model.tiny_layers, cfg.model.tiny_vocab = 32, 1, 2048
    model, _ = model_from_config(cfg)
    bert = model.config.replace(max_position_embeddings=32)
    model = DualEncoder(bert)
    ids = jnp.ones((1, 16), jnp.int32)
    params = nn.meta.unbox(model.init(jax.random.key(0), ids, ids, ids, ids)["params"])
    with tempfile.TemporaryDirectory() as d:
        hf.save_hf_bert(params["passage"], bert, d)
        loaded = hf.load_hf_bert_params(d, BertConfig.from_hf_json(d))
    params = nn.meta.unbox(pretrained_params(model, loaded))
    try:  # MiniLM's packaged weights, where installed (the Makefile installs them)
        hf.load_hf_bert_params(hf.resolve_model_dir("minilm"),
                               BertConfig.from_hf_json(hf.resolve_model_dir("minilm")))
        print("minilm loaded")
    except ImportError:
        print("minilm package not installed")

    # One train step, plain and with GradCache, on a 2-device data mesh.
    mesh = mesh_lib.make_mesh(2, 1, devices=jax.devices()[:2])
    tx, sched = make_optimizer(cfg.optim, total_steps=10)
    batch = random_batch(batch_shapes(4, 1, 8, 16, True), bert.vocab_size)
    loss = dict(lam=0.2, tau1=1.0, tau2=1.0, use_dpr=True)
    with jax.set_mesh(mesh):
        for chunks in (1, 2):
            state = TrainState(step=jnp.zeros((), jnp.int32), params=params,
                               opt_state=tx.init(params))
            step = jax.jit(make_train_step(methods.get("picl"), model, tx, loss_hparams=loss, mesh=mesh,
                                           grad_cache_chunks=chunks))
            state, m = step(state, mesh_lib.global_batch(batch, mesh), jax.random.key(1))
            assert np.isfinite(float(m["loss"])), m
        params = jax.device_put(params, mesh_lib.replicated(mesh))
        run = types.SimpleNamespace(model=model, params=params, mesh=mesh, rules=(),
                                    config={{"method": "dpr"}}, method=methods.get("dpr"))
        emb = Encoder(run, 4, length_buckets=(8,)).passages(batch["pos_ids"], batch["pos_mask"])
    assert emb.shape == (4, 32) and np.isfinite(emb).all(), emb.shape

    leaked = [m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tensorflow_datasets")
              and sys.modules[m] is not None]
    assert not leaked, leaked
    print("TF-FREE OK")
""")


def test_core_imports_and_runs_without_tensorflow():
    script = _SCRIPT.format(modules=TF_FREE_MODULES, encoder=ENCODER)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath(root),
               XLA_FLAGS=xla_flags(2))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       cwd=root, timeout=300)
    assert p.returncode == 0 and "TF-FREE OK" in p.stdout, p.stdout[-2000:] + p.stderr[-4000:]


def test_the_lazy_tensorflow_keeps_it_off_the_gpus(monkeypatch):
    """Pipelines reach TensorFlow through ``inputs.lazy.tf``: its first use goes through
    ``console.tensorflow_for_host`` (GPUs hidden from TF), later uses reuse the module."""
    from dense_cf.inputs import lazy
    calls = []
    fake = type("tf", (), {"constant": staticmethod(lambda x: ("constant", x))})
    monkeypatch.setattr(lazy, "tensorflow_for_host", lambda: calls.append(1) or fake)
    tf = lazy._LazyModule("tensorflow")
    assert calls == []                                       # importing costs nothing
    assert tf.constant(3) == ("constant", 3) and tf.constant(4) == ("constant", 4)
    assert calls == [1]


def test_the_metric_writer_does_not_import_tensorflow(tmp_path):
    """TensorBoard's writer reaches TensorFlow through ``tensorboard.compat.tf`` when it is
    installed (~5 s per process, and outside ``inputs.lazy``'s GPU guard): the metric writer
    switches it to tensorboard's own stub, and its event file still holds the scalar."""
    script = textwrap.dedent(f"""
        import sys
        from dense_cf.train.metric_writer import MetricWriter
        w = MetricWriter({str(tmp_path)!r})
        w.write(3, {{"loss": 0.25}})
        w.close()
        print("TF LOADED" if "tensorflow" in sys.modules else "TF NOT LOADED")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0 and "TF NOT LOADED" in r.stdout, r.stdout + r.stderr[-2000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(3, 0.25)]


def test_an_evaluator_runs_without_tensorflow(tmp_path):
    """An evaluation binary builds no tf.data pipeline, so it starts (and here refuses a
    workdir with no run, in one line) on a host where TensorFlow cannot be imported."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = tmp_path / "no_run"
    script = textwrap.dedent(f"""
        import runpy, sys
        sys.modules["tensorflow"] = sys.modules["tensorflow_datasets"] = None
        sys.argv = ["dense_cf.eval.retrieval", "--workdir={missing}"]
        runpy.run_module("dense_cf.eval.retrieval", run_name="__main__")
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath(root))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       cwd=root, timeout=300)
    assert p.returncode != 0 and str(missing) in p.stderr, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "tensorflow" not in p.stderr.lower(), p.stderr[-3000:]
