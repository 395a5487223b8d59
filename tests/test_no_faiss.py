"""``eval.index=jax`` without faiss: the index package, the retriever and the benchmarks import,
and a JaxIndex builds, searches, saves and loads with faiss unimportable; building or loading a
faiss index raises an ImportError naming faiss and its install line (docs/scale.md, "Without
faiss"). The GPU hosts this project is lent have JAX but no faiss."""

import json
import os
import subprocess
import sys
import textwrap

from helpers import child_pythonpath, xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every module on the eval.index=jax path that must import without faiss.
FAISS_FREE_MODULES = [
    "dense_cf.index",
    "dense_cf.index.jax_search",
    "dense_cf.index.rerank",
    "dense_cf.retrieval.retriever",
    "dense_cf.eval.retrieval",
    "dense_cf.eval.evaluators",
    "dense_cf.eval.robustness",
    "dense_cf.bench.jax_search",
    "dense_cf.bench.accelerator",
]

_SCRIPT = textwrap.dedent("""
    import importlib, json, os, sys, tempfile
    sys.modules["faiss"] = None  # any `import faiss` now raises ImportError

    for m in {modules!r}:
        importlib.import_module(m)

    import numpy as np
    from dense_cf import index as index_pkg
    from dense_cf.index import jax_search
    from dense_cf.retrieval import retriever

    assert not index_pkg.faiss_available()
    rng = np.random.default_rng(0)
    # Integer vectors: scores are exact in float32, so ties are decided by the documented order
    # (score descending, lower id first; of rows tied at the k-th place the lowest ids).
    x = rng.integers(-3, 4, (203, 16)).astype(np.float32)
    q = rng.integers(-3, 4, (9, 16)).astype(np.float32)
    ids = np.arange(203, dtype=np.int64) * 3 + 7
    k = 10
    s = q @ x.T
    order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    want_s, want_i = np.take_along_axis(s, order, 1), ids[order]

    index = jax_search.build_jax_index(x, ids, jax_search.JaxSearchSpec(block_rows=16))
    assert index.num_shards == 2, index
    got_s, got_i = index.search(q, k)
    np.testing.assert_array_equal(got_s, want_s)
    np.testing.assert_array_equal(got_i, want_i)

    with tempfile.TemporaryDirectory() as d:
        emb = os.path.join(d, "emb")
        os.makedirs(emb)
        for part, (lo, hi) in enumerate([(0, 120), (120, 203)]):
            np.save(os.path.join(emb, f"embeddings-{{part:05d}}.npy"), x[lo:hi])
            np.save(os.path.join(emb, f"ids-{{part:05d}}.npy"), ids[lo:hi])
        saved = os.path.join(d, "jax-index")
        jax_search.build_jax_index_from_dir(emb, progress=False).save(saved)
        loaded = index_pkg.kinds.load(saved)
        assert isinstance(loaded, jax_search.JaxIndex), loaded
        s2, i2 = loaded.search(q, k)
        np.testing.assert_array_equal(s2, want_s)
        np.testing.assert_array_equal(i2, want_i)

        # The retriever's eval.index=jax path: built and saved, then reused.
        manifest = {{"corpus": {{"sha256": "0" * 64, "passages": 203}}, "count": 203,
                     "settings": {{}}}}
        for reuse in (False, True):
            ix, reused = retriever.load_or_build_index(emb, os.path.join(d, "step_jax"), "jax",
                                                       manifest)
            assert reused is reuse and isinstance(ix, jax_search.JaxIndex)
            np.testing.assert_array_equal(ix.search(q, k)[1], want_i)

        # faiss kinds: a clear ImportError when built or loaded.
        errors = []
        try:
            index_pkg.build_index(x, None, index_pkg.IndexSpec(kind="flat"))
        except ImportError as e:
            errors.append(str(e))
        faiss_dir = os.path.join(d, "faiss-index")
        os.makedirs(faiss_dir)
        with open(os.path.join(faiss_dir, "index.json"), "w") as f:
            json.dump({{"format": "dense_cf.index", "version": 1, "kind": "flat", "dim": 16,
                       "ntotal": 203, "spec": {{"kind": "flat"}}, "shards": []}}, f)
        try:
            index_pkg.kinds.load(faiss_dir)
        except ImportError as e:
            errors.append(str(e))
    print("ERRORS " + json.dumps(errors))
    assert sys.modules["faiss"] is None
    print("FAISS-FREE OK")
""")


def test_jax_index_without_faiss():
    script = _SCRIPT.format(modules=FAISS_FREE_MODULES)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath(ROOT),
               XLA_FLAGS=xla_flags(2))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0 and "FAISS-FREE OK" in p.stdout, p.stdout[-2000:] + p.stderr[-4000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("ERRORS "))
    errors = json.loads(line[len("ERRORS "):])
    assert len(errors) == 2, errors  # the build and the load both raised ImportError
    assert "building a faiss 'flat' index needs faiss" in errors[0], errors[0]
    assert "loading the faiss 'flat' index in" in errors[1], errors[1]
    for message in errors:
        assert 'pip install -e ".[cpu]"' in message and "faiss-cpu" in message, message
        assert "eval.index=jax" in message, message


def _report(index_kind: str, root: str) -> dict:
    """The retrieval report (index, top-k, MRR, per-question first-hit ranks) of an untrained
    tiny run over ``root``/synth, searched with ``index_kind``."""
    from helpers import sharded_params, tiny_synthetic_config

    from dense_cf.eval.retrieval import evaluate_run
    from dense_cf.train.run import Run, build_model, run_tokenizer

    cfg = tiny_synthetic_config(os.path.join(root, "synth"), **{"eval.embedding_dtype": "float32"})
    model, _, tok_dir = build_model(cfg, load_pretrained=False)
    mesh, rules, params, _ = sharded_params(model, cfg.data.max_p_len, 2, 1)
    run = Run(config=cfg, model=model, params=params, tokenizer=run_tokenizer(cfg, tok_dir),
              step=0, mesh=mesh, rules=rules)
    rep = evaluate_run(os.path.join(root, "run-" + index_kind), run=run, index_kind=index_kind,
                       out_dir=os.path.join(root, "e-" + index_kind))
    ranks = json.load(open(os.path.join(rep["out_dir"], "report.json")))["first_hit_rank"]
    return {"index": rep["index"], "top_k": rep["top_k"], "mrr": rep["mrr"],
            "first_hit_rank": ranks}


# _report with faiss unimportable, in a child process.
_EVAL_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.modules["faiss"] = None
    sys.path.insert(0, "tests")
    from test_no_faiss import _report
    print("REPORT " + json.dumps(_report("jax", sys.argv[1])))
""")


def test_retrieval_eval_with_jax_index_without_faiss(tmp_path):
    """``eval.retrieval`` with ``eval.index=jax`` end to end (export, index, search, report) in
    a process without faiss gives the per-question ranks of a faiss flat evaluation of the same
    untrained tiny run in a process with faiss (this one)."""
    from dense_cf.synthetic import generate as synthetic
    synthetic.generate(str(tmp_path / "synth"), num_passages=300, seed=1)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=child_pythonpath(ROOT),
               XLA_FLAGS=xla_flags(2))
    p = subprocess.run([sys.executable, "-c", _EVAL_SCRIPT, str(tmp_path)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("REPORT ")]
    assert p.returncode == 0 and lines, p.stdout[-2000:] + p.stderr[-4000:]
    # The faiss flat peer in this process (it has faiss; the same 2-device mesh as the child),
    # through JSON as the child's (integer keys become strings).
    reports = {"jax": json.loads(lines[-1][len("REPORT "):]),
               "flat": json.loads(json.dumps(_report("flat", str(tmp_path))))}
    assert reports["jax"]["index"] == "jax" and reports["flat"]["index"] == "flat"
    assert reports["jax"]["first_hit_rank"] == reports["flat"]["first_hit_rank"]
    assert reports["jax"]["top_k"] == reports["flat"]["top_k"]
