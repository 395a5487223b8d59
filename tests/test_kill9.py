"""kill -9 in the middle of a long job, then the same command again: identical final outputs
(issue 17 §5) for export, index build, BM25 mining and evidence annotation.

Each child process runs the real job with one test-side hook: right after the job's first
durable write (a finished export shard, the index shard files before the manifest, the first
mined shard, the first flushed chunk of evidence) it touches a marker and sleeps. The parent
then sends SIGKILL, so no ``finally`` or ``atexit`` runs, as after an OOM kill or a preemption.
The same job is then run again to completion and compared byte for byte (decompressed for gzip)
with an uninterrupted run.
"""

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from helpers import child_pythonpath, tiny_synthetic_config

from dense_cf import files
from dense_cf.synthetic import generate as synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Imported by every child: stop the process forever once ``marker`` is written.
_STOP = """
import os, sys, time
MARKER = {marker!r}
def stop_here():
    with open(MARKER, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(3600)
"""


def _kill_at_marker(body: str, tmp_path, timeout: float = 240.0) -> None:
    """Runs ``body`` (Python; may call ``stop_here()``) in a child, SIGKILLs it at the marker."""
    marker = str(tmp_path / "stopped")
    code = textwrap.dedent(_STOP.format(marker=marker)) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=child_pythonpath(ROOT, os.path.join(ROOT, "tests")),
               JAX_PLATFORMS="cpu")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    try:
        while not os.path.exists(marker):
            if p.poll() is not None:
                out, err = p.communicate()
                pytest.fail(f"the job ended (status {p.returncode}) before its kill point:\n"
                            f"{err[-3000:]}")
            if time.monotonic() - t0 > timeout:
                pytest.fail("the job never reached its kill point")
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL


def _read(path: str) -> bytes:
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        return f.read()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("world")
    synthetic.generate(str(d), num_passages=300, seed=3)
    return d


@pytest.fixture(scope="module")
def run_dir(world, tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate
    workdir = str(tmp_path_factory.mktemp("run"))
    train_and_evaluate(tiny_synthetic_config(world, **{"train.num_steps": 1}), workdir)
    return workdir


def test_kill9_during_export_then_rerun_is_identical(world, run_dir, tmp_path):
    from dense_cf.retrieval import export
    from dense_cf.retrieval.corpus import load_corpus
    from dense_cf.train.run import load_run
    corpus_path = str(world / "psgs_synth.tsv")
    killed, clean = str(tmp_path / "killed"), str(tmp_path / "clean")
    _kill_at_marker(f"""
        from dense_cf.retrieval import export
        from dense_cf.retrieval.corpus import load_corpus
        from dense_cf.train.run import load_run
        real = export._ShardedExport.write
        def write_then_stop(self, *a, **kw):
            real(self, *a, **kw)
            stop_here()                      # the first shard is on disk; no manifest yet
        export._ShardedExport.write = write_then_stop
        export.export_passages(load_run({run_dir!r}), load_corpus({corpus_path!r}).rows(),
                               {killed!r}, shard_size=100, dtype="float32")
        """, tmp_path)
    assert not os.path.exists(os.path.join(killed, "manifest.json"))
    run = load_run(run_dir)
    corpus = load_corpus(corpus_path)
    again = export.export_passages(run, corpus.rows(), killed, shard_size=100, dtype="float32")
    assert again["skipped_done"] == 100 and again["encoded_this_run"] == 200
    full = export.export_passages(run, corpus.rows(), clean, shard_size=100, dtype="float32")
    np.testing.assert_array_equal(export.load_embeddings(killed), export.load_embeddings(clean))
    assert export.load_passage_ids(killed) == export.load_passage_ids(clean) == corpus.ids
    for name in sorted(os.listdir(clean)):
        if name not in ("manifest.json", "SHA256SUMS"):  # the manifest has this run's timing
            assert _read(os.path.join(killed, name)) == _read(os.path.join(clean, name)), name
    sums = [{k: v for k, v in files.read_sums(os.path.join(d, "SHA256SUMS")).items()
             if k != "manifest.json"} for d in (killed, clean)]
    assert sums[0] == sums[1] and len(sums[0]) == 12  # 3 shards x 4 files
    drop = ("encoded_this_run", "skipped_done", "passages_per_s", "seconds", "timing")
    assert ({k: v for k, v in again.items() if k not in drop}
            == {k: v for k, v in full.items() if k not in drop})


def test_kill9_during_index_save_then_rerun_is_identical(world, run_dir, tmp_path):
    from dense_cf.retrieval import export
    from dense_cf.retrieval.corpus import load_corpus
    from dense_cf.retrieval.retriever import load_or_build_index
    from dense_cf.train.run import load_run
    emb = str(tmp_path / "emb")
    manifest = export.export_passages(load_run(run_dir), load_corpus(str(world / "psgs_synth.tsv")).rows(),
                                      emb, shard_size=100, dtype="float32")
    killed, clean = str(tmp_path / "idx_killed"), str(tmp_path / "idx_clean")
    _kill_at_marker(f"""
        import json
        from dense_cf import files
        from dense_cf.index import faiss_index
        from dense_cf.retrieval.retriever import load_or_build_index
        real = files.write_json
        def stop_before_manifest(path, *a, **kw):
            if os.path.basename(path) == faiss_index.MANIFEST_NAME:
                stop_here()                  # shard files written, manifest not yet
            return real(path, *a, **kw)
        files.write_json = stop_before_manifest
        manifest = json.load(open(os.path.join({emb!r}, "manifest.json")))
        load_or_build_index({emb!r}, {killed!r}, "flat", manifest)
        """, tmp_path)
    assert any(n.endswith(".faiss") for n in os.listdir(killed))   # half-saved
    index, reused = load_or_build_index(emb, killed, "flat", manifest)
    assert not reused                       # a half-saved index is never taken as valid
    load_or_build_index(emb, clean, "flat", manifest)
    assert sorted(os.listdir(killed)) == sorted(os.listdir(clean))
    for name in os.listdir(clean):
        assert _read(os.path.join(killed, name)) == _read(os.path.join(clean, name)), name
    _, reused = load_or_build_index(emb, killed, "flat", manifest)
    assert reused


def test_kill9_during_bm25_mining_then_rerun_is_identical(world, tmp_path):
    from dense_cf.cli import mine_bm25
    args = ["--input", str(world / "biencoder-synth-train.json"),
            "--corpus", str(world / "psgs_synth.tsv"), "--num_negatives", "5", "--top_k", "20",
            "--shard_size", "40", "--index_dir", str(tmp_path / "bm25")]
    killed, clean = str(tmp_path / "killed.json.gz"), str(tmp_path / "clean.json.gz")
    _kill_at_marker(f"""
        from dense_cf.cli import mine_bm25
        from dense_cf.mining import writers
        real = writers.ShardedParts.write
        def write_then_stop(self, *a, **kw):
            real(self, *a, **kw)
            stop_here()                      # one mined shard on disk
        writers.ShardedParts.write = write_then_stop
        mine_bm25.run_cli({args!r} + ["--output", {killed!r}])
        """, tmp_path)
    assert not os.path.exists(killed) and os.path.isdir(killed + ".parts")
    again = mine_bm25.run_cli(args + ["--output", killed])
    assert again["reused_shards"] == 1
    mine_bm25.run_cli(args + ["--output", clean])
    assert _read(killed) == _read(clean)
    assert json.loads(_read(killed))  # a complete JSON list


@pytest.mark.optimized  # MiniLM scorer: 24 -> 17 s with XLA's optimisations
def test_kill9_during_evidence_annotation_then_rerun_is_identical(world, tmp_path):
    from dense_cf.cli import evidence
    from dense_cf.datasets.formats import read_biencoder, write_biencoder
    small = str(tmp_path / "train.json")
    write_biencoder(small, list(read_biencoder(str(world / "biencoder-synth-train.json")))[:12])
    args = ["--input", small, "--scorer", "minilm", "--chunk_examples", "4", "--batch_size", "16"]
    killed, clean = str(tmp_path / "killed.jsonl"), str(tmp_path / "clean.jsonl")
    _kill_at_marker(f"""
        from dense_cf.cli import evidence
        real = os.fsync
        def fsync_then_stop(fd):
            real(fd)
            if os.readlink(f"/proc/self/fd/{{fd}}") == {killed!r}:
                stop_here()                  # the first chunk is flushed and synced
        os.fsync = fsync_then_stop
        evidence.run_cli({args!r} + ["--output", {killed!r}])
        """, tmp_path)
    done = [json.loads(ln) for ln in open(killed)]
    assert 0 < len(done) < 12
    evidence.run_cli(args + ["--output", killed])
    evidence.run_cli(args + ["--output", clean])
    assert _read(killed) == _read(clean)


# ------------------------------------------------ staging directories after a kill (issue 34 §3)
def _stray(parent, keep) -> list[str]:
    return sorted(n for n in os.listdir(parent) if n not in keep)


def test_kill9_during_directory_builds_leaves_nothing_after_the_rerun(world, tmp_path):
    """export_hf (``write_export``), the passage store and a BM25 index are each built in a
    staging directory renamed into place; each is killed mid-build, then run again: the new
    build removes the dead one's staging directory, and nothing but the result remains. An
    ``--overwrite`` export swaps the old directory out without leaving it behind."""
    from helpers import tiny_run

    from dense_cf.index.bm25 import BM25Index
    from dense_cf.index.passage_store import open_store
    from dense_cf.retrieval import model_export
    corpus = str(world / "psgs_synth.tsv")
    out = tmp_path / "export"
    out.mkdir()
    _kill_at_marker(f"""
        sys.path.insert(0, "tests")
        from helpers import tiny_run
        from dense_cf.models import checkpoints
        from dense_cf.retrieval import model_export
        real = checkpoints.save_tower
        def save_then_stop(*a, **kw):
            real(*a, **kw)
            stop_here()                      # one tower written into the staging directory
        checkpoints.save_tower = save_then_stop
        model_export.write_export(tiny_run(), {str(out / "hf")!r})
        """, tmp_path)
    assert [n for n in os.listdir(out) if n.startswith("hf.tmp-")]  # what the kill left
    run = tiny_run()
    model_export.write_export(run, str(out / "hf"))
    assert _stray(out, {"hf"}) == []
    model_export.write_export(run, str(out / "hf"), overwrite=True)
    assert _stray(out, {"hf"}) == [] and "export.json" in os.listdir(out / "hf")

    idx = tmp_path / "indexes"
    idx.mkdir()
    os.remove(str(tmp_path / "stopped"))
    _kill_at_marker(f"""
        from dense_cf.index import passage_store
        from dense_cf.index.passage_store import open_store
        real = passage_store.PassageStore.write
        def write_then_stop(*a, **kw):
            real(*a, **kw)
            stop_here()                      # the rows written, no store.json yet
        passage_store.PassageStore.write = staticmethod(write_then_stop)
        open_store({corpus!r}, {str(idx / "store")!r})
        """, tmp_path)
    os.remove(str(tmp_path / "stopped"))
    rows = [(f"p{i}", f"passage {i} word{i}", f"Title {i}") for i in range(50)]
    _kill_at_marker(f"""
        from dense_cf.index import bm25
        real = bm25.write_meta_json
        def stop_at_meta(path, obj):
            stop_here()                      # the index written, meta.json (its mark) not yet
        bm25.write_meta_json = stop_at_meta
        bm25.BM25Index.build({rows!r}, {str(idx / "bm25")!r}, k1=0.9, b=0.4)
        """, tmp_path)
    assert len([n for n in os.listdir(idx) if ".tmp-" in n]) == 2
    assert len(open_store(corpus, str(idx / "store"))) == 300
    BM25Index.build(rows, str(idx / "bm25"), k1=0.9, b=0.4)
    assert _stray(idx, {"store", "bm25"}) == []
