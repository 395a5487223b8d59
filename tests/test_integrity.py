"""Issue 49: nothing silently wrong. Every artefact a later stage trusts carries the sha256 its
producer recorded (``files.write_sums``), and its consumer checks it: a checkpoint step whose
bytes changed falls back to the newest intact step with a warning; a changed export shard,
index file, negatives file or HF export is refused with one line naming the file."""

from __future__ import annotations

import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dense_cf import files
from dense_cf.train.checkpoint import Checkpointer, abstract_like


def flip_byte(path: str, at: float = 0.5) -> None:
    """Overwrites one byte in the middle of ``path`` (size unchanged): bit rot, a stray write."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(int(size * at))
        b = f.read(1)
        f.seek(int(size * at))
        f.write(bytes([b[0] ^ 0x5A]))


# ------------------------------------------------------------------------------ the helpers
def test_sums_detect_a_changed_byte_and_name_the_file(tmp_path):
    a, b = tmp_path / "a.bin", tmp_path / "sub" / "b.bin"
    b.parent.mkdir()
    a.write_bytes(os.urandom(10_000))
    b.write_bytes(b"x" * 100)
    sums = tmp_path / files.SUMS_NAME
    files.write_sums(sums, [a, b])
    assert files.read_sums(sums) == {"a.bin": files.file_sha256(a), "sub/b.bin": files.file_sha256(b)}
    files.verify_sums(sums, "rebuild it")
    flip_byte(str(a))
    with pytest.raises(files.IntegrityError, match=r"a\.bin: content does not match .*; rebuild it$"):
        files.verify_sums(sums, "rebuild it")
    files.verify_sums(sums, "x", only=["sub/b.bin"])  # only the files asked for
    os.remove(b)
    assert [p for p, problem in files.check_sums(sums) if problem] == [str(a), str(b)]


# ------------------------------------------------------------------------------ checkpoints
def _state(shift: float):
    p = {"w": jnp.arange(4096.0).reshape(64, 64) + shift, "b": jnp.full((64,), shift)}
    return {"params": p, "opt": optax.adam(1e-3).init(p)}


def _largest_param_file(step_dir: str) -> str:
    paths = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(step_dir, "state")) for f in fs]
    return max(paths, key=os.path.getsize)


@pytest.mark.parametrize("async_save", [True, False])
def test_a_flipped_byte_in_a_checkpoint_falls_back_to_the_intact_step(tmp_path, caplog, async_save):
    """Before: the damaged step 2 restored with rc 0, no warning and other parameters."""
    d = str(tmp_path / "checkpoints")
    c = Checkpointer(d, async_save=async_save, save_interval_steps=1)
    c.save(1, _state(1.0), {"pos": 1})
    c.save(2, _state(2.0), {"pos": 2})
    c.close()
    assert all(os.path.exists(os.path.join(d, s, files.SUMS_NAME)) for s in ("1", "2"))
    victim = _largest_param_file(os.path.join(d, "2"))
    flip_byte(victim)
    c = Checkpointer(d, async_save=False, save_interval_steps=1)
    with pytest.raises(files.IntegrityError, match=f"{victim}: content does not match"):
        c.restore_params(abstract_like(_state(0.0)["params"]))  # evaluation: refused
    with caplog.at_level(logging.WARNING):
        state, data, step = c.restore(abstract_like(_state(0.0)))
    assert step == 1 and data == {"pos": 1}
    np.testing.assert_array_equal(np.asarray(state["params"]["w"]),
                                  np.asarray(_state(1.0)["params"]["w"]))
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("step 2" in m and "IntegrityError" in m and victim in m for m in msgs), msgs
    assert any("newest step 2 unreadable; resumed from step 1" in m for m in msgs), msgs
    c.close()


# ------------------------------------------------------------------ a failed save (issue 49 §4)
def _failing_finalize(monkeypatch, delay: float = 0.0):
    """Orbax's last act of a save (renaming the finished temporary step into place) fails with
    an I/O error, as on a disk that went bad; the step was fully written under its tmp name."""
    import asyncio

    from orbax.checkpoint._src.path import atomicity

    async def finalize(self, *args, **kwargs):
        await asyncio.sleep(delay)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", finalize)


def _left(d: str) -> list[str]:
    return sorted(os.listdir(d))


@pytest.mark.parametrize("async_save", [True, False])
def test_a_failed_save_removes_its_temporary_step_before_the_error(tmp_path, monkeypatch, async_save):
    """Before: an I/O error (not a full disk) left ``2.orbax-checkpoint-tmp`` beside step 1
    until the next start."""
    d = str(tmp_path / "checkpoints")
    c = Checkpointer(d, async_save=async_save, save_interval_steps=1)
    c.save(1, _state(1.0), {"pos": 1})
    c.wait()
    _failing_finalize(monkeypatch)
    with pytest.raises(Exception, match="Input/output error"):
        c.save(2, _state(2.0), {"pos": 2})
        c.wait()
    assert _left(d) == ["1"]  # checked right after the failure, not after a restart


def test_an_error_elsewhere_during_a_failing_save_removes_its_temporary_step(tmp_path, monkeypatch):
    """Training stops on another error (the metric writer's) while an async save is in flight
    and then fails: before, the first error propagated and the save's temporary step stayed."""
    d = str(tmp_path / "checkpoints")
    c = Checkpointer(d, async_save=True, save_interval_steps=1)
    c.save(1, _state(1.0), {"pos": 1})
    c.wait()
    _failing_finalize(monkeypatch, delay=0.3)
    with pytest.raises(RuntimeError, match="the metric writer failed"):
        with c.abandon_on_error():
            c.save(2, _state(2.0), {"pos": 2})
            raise RuntimeError("the metric writer failed")
    assert _left(d) == ["1"]


# ------------------------------------------------------------------ exports and indexes
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from dense_cf.synthetic import generate as synthetic
    d = tmp_path_factory.mktemp("world")
    synthetic.generate(str(d), num_passages=300, seed=3)
    return d


@pytest.fixture(scope="module")
def run_dir(world, tmp_path_factory):
    from helpers import tiny_synthetic_config

    from dense_cf.train import loop
    workdir = str(tmp_path_factory.mktemp("run"))
    loop.train(tiny_synthetic_config(world, **{"train.num_steps": 1}), workdir)
    return workdir


def _nan_into(path: str, row: int = 3) -> None:
    """A few float32 NaNs written over row ``row`` of an .npy shard (size unchanged)."""
    arr = np.load(path, mmap_mode="r")
    offset = os.path.getsize(path) - arr.nbytes + row * arr.shape[1] * arr.itemsize
    del arr
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(np.full(4, np.nan, np.float32).tobytes())


def test_a_changed_export_shard_or_index_file_is_refused_naming_it(world, run_dir, tmp_path):
    """Before: NaNs written into an export shard, then the evaluation re-run from the kept
    export: rc 0, no warning, another report. Now the reuse, every reader of the export and the
    saved index refuse the changed file in one line; deleting it re-encodes just its shard."""
    from dense_cf.index.shards import ExportShards
    from dense_cf.retrieval import export, retriever
    from dense_cf.retrieval.corpus import load_corpus
    from dense_cf.train.run import RunDir, load_run
    run, corpus = load_run(run_dir), load_corpus(str(world / "psgs_synth.tsv"))
    work = str(tmp_path / "eval")
    kw = dict(kind="flat", batch_size=64, dtype="float32", shard_size=100)
    retriever.ensure_index(run, corpus, work, **kw)
    out = RunDir(work).export(run.step)
    sums = files.read_sums(os.path.join(out, files.SUMS_NAME))
    assert {"manifest.json", "embeddings-00002.npy", "pids-00000.txt", "shard-00001.json"} <= set(sums)
    before = export.load_embeddings(out)
    _, timing = retriever.ensure_index(run, corpus, work, **kw)  # intact: reused as before
    assert timing["encoded_this_run"] == 0 and timing["index_reused"]

    victim = os.path.join(out, "embeddings-00001.npy")
    _nan_into(victim)
    for read in (lambda: retriever.ensure_index(run, corpus, work, **kw),
                 lambda: export.load_embeddings(out), lambda: ExportShards(out)):
        with pytest.raises(files.IntegrityError) as e:
            read()
        assert str(e.value).startswith(f"{victim}: content does not match the sha256 recorded")
        assert "delete that file and run the same command again" in str(e.value)
    os.remove(victim)
    _, timing = retriever.ensure_index(run, corpus, work, **kw)
    assert timing["encoded_this_run"] == 100  # that shard only
    np.testing.assert_array_equal(export.load_embeddings(out), before)

    index_dir = RunDir(work).index(run.step, "flat")
    shard = os.path.join(index_dir, "shard-00000.faiss")
    flip_byte(shard, 0.7)
    with pytest.raises(files.IntegrityError, match=f"{shard}: content does not match.*delete "
                                                   f"{index_dir} and run the same command again"):
        retriever.ensure_index(run, corpus, work, **kw)


# ------------------------------------------------------------------ mined negatives
def test_changed_mined_negatives_are_refused_by_the_reader(world, tmp_path):
    """Before: a BM25 negatives file changed after mining was trained on as it was. Now the
    biencoder reader (every trainer reads through it) refuses it in one line; deleting the
    checksum file is the way to use a file changed on purpose."""
    from dense_cf.cli import mine_bm25
    from dense_cf.datasets import formats
    out = str(tmp_path / "bm25-negs.json")
    mine_bm25.run_cli(["--input", str(world / "biencoder-synth-train.json"),
                       "--corpus", str(world / "psgs_synth.tsv"), "--num_negatives", "3",
                       "--top_k", "10", "--output", out])
    assert files.read_sums(out + ".sha256") == {"bm25-negs.json": files.file_sha256(out)}
    n = len(formats.read_biencoder(out))
    text = open(out, encoding="utf-8").read()
    at = text.index('"text": "') + len('"text": "')
    with open(out, "r+b") as f:  # one letter of a passage changed: still valid JSON
        f.seek(len(text[:at].encode()))
        f.write(b"Q")
    with pytest.raises(files.IntegrityError, match=f"{out}: content does not match .*rebuild it "
                       f"with the command that wrote it .*delete {out}.sha256"):
        formats.read_biencoder(out)
    os.remove(out + ".sha256")
    assert len(formats.read_biencoder(out)) == n


# ------------------------------------------------------------------ the HF export
def test_a_changed_hf_export_is_refused_before_its_weights_are_used(run_dir, tmp_path):
    """Before: bytes changed inside an exported ``model.safetensors`` (size unchanged) loaded
    as other weights, silently. Now every tower directory has its SHA256SUMS and the one
    safetensors reader checks it."""
    from dense_cf.models import checkpoints
    from dense_cf.retrieval import model_export
    from dense_cf.train.run import load_run
    out = str(tmp_path / "hf")
    model_export.export_run(run_dir, out)
    config = load_run(run_dir).model.config
    source = checkpoints.tower_source(out, "question")
    weights = os.path.join(source.model_dir, "model.safetensors")
    assert "model.safetensors" in files.read_sums(os.path.join(source.model_dir, files.SUMS_NAME))
    intact = checkpoints.load_tower(source, config)
    size = os.path.getsize(weights)
    flip_byte(weights, 0.9)  # inside the tensor data, past the header
    assert os.path.getsize(weights) == size
    with pytest.raises(files.IntegrityError, match=f"{weights}: content does not match.*export it "
                                                   "again .*export_hf --overwrite"):
        checkpoints.load_tower(source, config)
    os.remove(os.path.join(source.model_dir, files.SUMS_NAME))  # the old code's view: no check
    changed = checkpoints.load_tower(source, config)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(intact),
                                                        jax.tree.leaves(changed)))


# ------------------------------------------------------------------ inputs changed under a run
def _own_copy(world, run_dir, tmp_path):
    """A copy of the run whose config names a copy of the world: its corpus is the run's own
    (evaluated in the run directory, where the store and export are reused)."""
    import shutil
    w, r = tmp_path / "world", tmp_path / "run"
    shutil.copytree(world, w)
    shutil.copytree(run_dir, r, ignore=shutil.ignore_patterns("*.lock"))
    cfg = r / "config.json"
    cfg.write_text(cfg.read_text().replace(str(world), str(w)))
    return w, str(r)


def _swap_lines(path, i: int, j: int) -> None:
    lines = open(path, encoding="utf-8").read().split("\n")
    lines[i], lines[j] = lines[j], lines[i]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def test_an_evaluation_against_a_changed_corpus_is_refused_or_rebuilt_on_request(world, run_dir,
                                                                                  tmp_path):
    """Before: a passage edited (same size) or rows reordered after the export: rc 0, no
    warning, the old passages and vectors used. Now refused in one line naming the file; with
    ``rebuild_changed_corpus`` the store is rebuilt and only the changed shards re-encoded."""
    from dense_cf.eval.retrieval import evaluate_run
    from dense_cf.index.passage_store import CorpusChangedError
    w, work = _own_copy(world, run_dir, tmp_path)
    corpus = w / "psgs_synth.tsv"
    first = evaluate_run(work)
    assert first["timing"]["encoded_this_run"] == 300
    again = evaluate_run(work)  # unchanged: all reused
    assert again["timing"]["encoded_this_run"] == 0 and again["timing"]["index_reused"]

    original = corpus.read_bytes()
    text = original.decode()
    at = text.index("violinist from") + 1  # one letter of row 1's text, size unchanged
    corpus.write_bytes((text[:at] + ("X" if text[at] != "X" else "Y") + text[at + 1:]).encode())
    with pytest.raises(CorpusChangedError, match=f"{corpus} changed since .*corpus_store was "
                                                 r"built .*\(sha256 .* recorded, now .*"
                                                 "--rebuild_changed_corpus"):
        evaluate_run(work)
    corpus.write_bytes(original)
    _swap_lines(corpus, 5, 250)  # rows reordered: same bytes, other order
    with pytest.raises(CorpusChangedError):
        evaluate_run(work)

    rebuilt = evaluate_run(work, rebuild_changed_corpus=True)
    # Rows 4 and 249 moved: the two shards (128 passages each) holding them are re-encoded.
    assert rebuilt["timing"]["encoded_this_run"] == 256 and not rebuilt["timing"]["index_reused"]
    assert evaluate_run(work)["timing"]["encoded_this_run"] == 0  # and now it is the corpus


def test_checkpoints_record_their_training_inputs_and_a_resume_on_changed_data_is_warned(
        world, run_dir, tmp_path, caplog):
    """Every sealed step holds inputs.json (sha256 of the train and dev files, covered by its
    SHA256SUMS); a resume on a train file changed since says so in one warning naming it."""
    import json

    from helpers import tiny_synthetic_config

    from dense_cf.train import loop
    rec = json.loads(open(os.path.join(run_dir, "checkpoints", "1", "inputs.json")).read())
    train = world / "biencoder-synth-train.json"
    assert rec["train_file"] == {"path": str(train), "bytes": train.stat().st_size,
                                 "mtime_ns": train.stat().st_mtime_ns,
                                 "sha256": files.file_sha256(train)}
    assert set(rec) == {"train_file", "dev_file"}
    assert "inputs.json" in files.read_sums(os.path.join(run_dir, "checkpoints", "1", files.SUMS_NAME))

    w, work = _own_copy(world, run_dir, tmp_path)
    data = json.loads((w / "biencoder-synth-train.json").read_text())
    (w / "biencoder-synth-train.json").write_text(json.dumps(data[::-1]))  # reordered
    with caplog.at_level(logging.WARNING):
        loop.train(tiny_synthetic_config(w, **{"train.num_steps": 2}), work)
    msgs = [r.getMessage() for r in caplog.records if "changed since step 1" in r.getMessage()]
    assert len(msgs) == 1 and "biencoder-synth-train.json (config.data.train_file)" in msgs[0], msgs
    now = json.loads(open(os.path.join(work, "checkpoints", "2", "inputs.json")).read())
    assert now["train_file"]["sha256"] == files.file_sha256(w / "biencoder-synth-train.json")


# ------------------------------------------------------------------ python -m dense_cf.cli.verify
def test_verify_checks_a_whole_run_directory(world, run_dir, tmp_path, capsys):
    """Every checksummed artefact of a run: OK, then FAILED naming the changed file; a
    checkpoint step without checksums is UNVERIFIED; a changed training input is CHANGED."""
    import json
    import subprocess
    import sys

    from dense_cf.cli import verify
    from dense_cf.eval.retrieval import evaluate_run
    from dense_cf.retrieval import model_export
    w, work = _own_copy(world, run_dir, tmp_path)
    evaluate_run(work)
    model_export.export_run(work, os.path.join(work, "hf"))
    assert verify.run_cli([work]) == 0
    out = capsys.readouterr().out.splitlines()
    artefacts = {ln.split()[1].rstrip(":") for ln in out if ln.startswith("OK ")}
    assert {"checkpoints/1", "export/step_1", "index/step_1_flat", "hf/question_encoder",
            "hf/passage_encoder"} <= artefacts, out
    assert out[-1].startswith(f"{work}: ") and " 0 FAILED, 0 UNVERIFIED, 0 CHANGED" in out[-1]

    victim = os.path.join(work, "export", "step_1", "embeddings-00000.npy")
    _nan_into(victim)
    os.remove(os.path.join(work, "checkpoints", "1", files.SUMS_NAME))
    inputs = os.path.join(work, "checkpoints", "1", "inputs.json")  # the copy's, not the world's
    with open(inputs) as f:
        text = f.read()
    with open(inputs, "w") as f:
        f.write(text.replace(str(world), str(w)))
    data = json.loads((w / "biencoder-synth-dev.json").read_text())
    (w / "biencoder-synth-dev.json").write_text(json.dumps(data[1:]))
    r = subprocess.run([sys.executable, "-m", "dense_cf.cli.verify", work], capture_output=True,
                       text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert "FAILED     export/step_1: embeddings-00000.npy: content does not match" in r.stdout, r.stdout
    assert any(ln.startswith("UNVERIFIED checkpoints/1") for ln in lines), lines
    assert any(ln.startswith("CHANGED    input dev_file of checkpoints/1") for ln in lines), lines
    assert lines[-1].endswith("1 FAILED, 1 UNVERIFIED, 1 CHANGED")


# ------------------------------------------------------------------ the token table (issue 47)
def test_a_changed_token_table_is_refused_when_opened(world, run_dir, tmp_path):
    """The pre-tokenised corpus carries SHA256SUMS; a byte changed in its tokens is refused
    (before: an export from it encoded other tokens, silently)."""
    import shutil

    from dense_cf.retrieval import token_table
    from dense_cf.train.run import load_run
    corpus = str(tmp_path / "psgs.tsv")
    shutil.copy(world / "psgs_synth.tsv", corpus)
    tok = load_run(run_dir).tokenizer
    table = token_table.open_table(corpus, tok, 64)
    assert set(files.read_sums(os.path.join(table.path, files.SUMS_NAME))) == {
        "tokens.npy", "offsets.npy", "pid_hash.npy", "pid_row.npy", "table.json"}
    victim = os.path.join(table.path, "tokens.npy")
    flip_byte(victim, 0.6)
    with pytest.raises(files.IntegrityError, match=f"{victim}: content does not match.*delete "
                                                   f"{table.path} and run the same command again"):
        token_table.open_table(corpus, tok, 64)


# ------------------------------------------- passage stores, BM25 indexes, mining parts, caches
def _change_letter(path: str, after: str, nth: int = 0) -> None:
    """The byte after the ``nth`` occurrence of ``after`` in ``path`` changed to another letter
    (size unchanged, the file still parses): a stray write that looks right."""
    data = open(path, "rb").read()
    at = -1
    for _ in range(nth + 1):
        at = data.index(after.encode(), at + 1)
    at += len(after)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"Z" if data[at:at + 1] == b"Q" else b"Q")


def _failed(root) -> list[str]:
    from dense_cf.cli import verify
    return [f.line() for f in verify.verify_tree(str(root), inputs=False) if f.status != "OK"]


def test_a_changed_passage_store_is_refused_naming_the_file(world, tmp_path):
    """Before: a letter changed in a passage store's ``passages.jsonl`` (size unchanged) was
    served as the passage's text to mining and export, silently. Now the store's SHA256SUMS
    (written last by its build) is checked when it is opened."""
    import re
    import shutil

    from dense_cf.index.passage_store import open_store
    corpus, d = str(world / "psgs_synth.tsv"), str(tmp_path / "store")
    row = open_store(corpus, d).get(0)
    assert set(files.read_sums(os.path.join(d, files.SUMS_NAME))) == {
        "passages.jsonl", "offsets.npy", "store.json"}
    assert _failed(tmp_path) == []
    data = os.path.join(d, "passages.jsonl")
    _change_letter(data, '", "')  # inside row 0
    with pytest.raises(files.IntegrityError, match=re.escape(
            f"{data}: content does not match the sha256 recorded") + ".*" + re.escape(
            f"; delete {d} and run the same command again (the passage store is rebuilt")):
        open_store(corpus, d)
    assert len(failed := _failed(tmp_path)) == 1 and "passages.jsonl: content does not match" in \
        failed[0], failed
    os.remove(os.path.join(d, files.SUMS_NAME))  # the old code's view: no check, other text
    assert open_store(corpus, d).get(0) != row
    assert _failed(tmp_path) == ["UNVERIFIED store: a passage store without SHA256SUMS"]
    shutil.rmtree(d)  # what the error says: rebuilt, as before
    assert open_store(corpus, d).get(0) == row


def test_a_changed_bm25_index_file_is_refused_naming_it(world, tmp_path):
    """Before: a byte changed in a saved BM25 index (its score matrix, its store) was loaded
    and searched as it was. Now every file of the index directory is in its SHA256SUMS and
    :meth:`BM25Index.load` (mining, ``open_store`` on an index directory) checks it first."""
    import re

    from dense_cf.index.bm25 import ANSERINI, BM25Index
    from dense_cf.index.passage_store import open_store
    corpus, d = str(world / "psgs_synth.tsv"), str(tmp_path / "bm25")
    index = BM25Index.open(corpus, d, **ANSERINI)
    sums = files.read_sums(os.path.join(d, files.SUMS_NAME))
    assert {"meta.json", "passages.jsonl", "offsets.npy"} <= set(sums)
    scores = [n for n in sums if n.startswith("bm25/") and n.endswith(".npy")]
    assert scores, sorted(sums)
    victim = max((os.path.join(d, n) for n in scores), key=os.path.getsize)
    del index
    flip_byte(victim, 0.6)
    for load in (lambda: BM25Index.open(corpus, d, **ANSERINI), lambda: open_store(corpus, d)):
        with pytest.raises(files.IntegrityError, match=re.escape(
                f"{victim}: content does not match") + ".*" + re.escape(
                f"; delete {d} and run the same command again (the BM25 index is rebuilt")):
            load()
    assert len(failed := _failed(tmp_path)) == 1 and os.path.basename(victim) in failed[0], failed


def test_a_changed_mining_part_is_refused_when_it_is_reused(world, tmp_path):
    """Before: a letter changed in a finished shard's ``part-K.jsonl`` was reused by the rerun
    and assembled into the negatives file, whose new checksum then vouched for it. Now each
    part has its ``.sha256``, checked on reuse and assembly; deleting the part (what the error
    says) mines that shard again, giving the intact output."""
    import re

    from dense_cf.mining.negatives import mine_bm25
    inp, corpus = str(world / "biencoder-synth-train.json"), str(world / "psgs_synth.tsv")
    out = str(tmp_path / "negs.json")
    kw = dict(num_negatives=3, top_k=10, shard_size=8, keep_parts=True,
              index_dir=str(tmp_path / "idx"))
    first = mine_bm25(inp, corpus, out, **kw)
    assert first["shards"] >= 2
    intact = open(out, "rb").read()
    part = os.path.join(out + ".parts", "part-00001.jsonl")
    assert files.read_sums(part + ".sha256") == {"part-00001.jsonl": files.file_sha256(part)}
    _change_letter(part, '"text": "', nth=2)
    done = os.path.join(out + ".parts", "part-00001.done.json")
    with pytest.raises(files.IntegrityError, match=re.escape(
            f"{part}: content does not match") + ".*" + re.escape(
            f"; delete {part} and {done} and run the same command again (shard 1 is computed "
            "again; the other shards are kept)") + "$"):
        mine_bm25(inp, corpus, out, **kw)
    assert open(out, "rb").read() == intact  # nothing assembled from the changed part
    assert any("part-00001.jsonl: content does not match" in f for f in _failed(tmp_path))
    os.remove(part)
    os.remove(done)
    again = mine_bm25(inp, corpus, out, **kw)
    assert again["reused_shards"] == first["shards"] - 1 and again["mined_this_run"] == 8
    assert open(out, "rb").read() == intact


def test_a_changed_token_cache_is_refused_naming_it(world, tmp_path):
    """Before: a byte changed in a tokenised training cache (``.npz``) was a raw
    ``BadZipFile: Bad CRC-32 for file 'body_values.npy'`` traceback naming no file (zip's own
    CRC), or read as it was where the CRC does not reach (the zip headers). Now every cache has
    ``<cache>.sha256``, checked before it is read (every tokenise-once cache goes through
    ``inputs.tokens.save_tables`` / ``load_tables``); deleting it tokenises again."""
    import re

    from dense_cf.inputs import dpr
    from dense_cf.models.hf import resolve_model_dir
    from dense_cf.models.tokenizer import load_tokenizer
    tok = load_tokenizer(resolve_model_dir("minilm"))
    cache_dir = tmp_path / "cache"
    kw = dict(cache_dir=str(cache_dir), max_q_len=16, max_p_len=32, max_hard=2)
    path = str(world / "biencoder-synth-train.json")
    a = dpr.load_biencoder_split(path, tok, **kw)
    (cache,) = [str(p) for p in cache_dir.iterdir() if p.suffix == ".npz"]
    assert files.read_sums(cache + ".sha256") == {os.path.basename(cache): files.file_sha256(cache)}
    flip_byte(cache, 0.5)
    with pytest.raises(files.IntegrityError, match=re.escape(
            f"{cache}: content does not match") + ".*" + re.escape(
            "; delete it and run the same command again (the data file is tokenised again "
            "into a new cache)") + "$"):
        dpr.load_biencoder_split(path, tok, **kw)
    assert len(failed := _failed(tmp_path)) == 1 and os.path.basename(cache) in failed[0], failed
    os.remove(cache)
    b = dpr.load_biencoder_split(path, tok, **kw)
    np.testing.assert_array_equal(a.body.values, b.body.values)


def test_concurrent_writers_of_one_cache_write_equal_bytes(tmp_path):
    """Hosts sharing a file system may write the same cache at once: equal tables must be
    equal bytes (np.savez stamps no clock), so whichever ``.sha256`` lands matches the file.
    (A guard for the reasoning, not a fault: it passes on the old code too.)"""
    import time

    from dense_cf.inputs.tokens import Ragged, load_tables, save_tables
    r = Ragged.from_rows([np.arange(7), np.arange(3)], np.int32)
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    save_tables(a, ragged={"q": r}, dense={"v": np.arange(4)}, stats={"n": 2})
    time.sleep(2.1)  # past zip's 2-second time resolution
    save_tables(b, ragged={"q": r}, dense={"v": np.arange(4)}, stats={"n": 2})
    assert open(a, "rb").read() == open(b, "rb").read()
    rag, dense, stats = load_tables(b, ["q"], ["v"])
    np.testing.assert_array_equal(rag["q"].values, r.values)
    assert stats == {"n": 2} and dense["v"].tolist() == [0, 1, 2, 3]
