"""Export/index reuse is keyed by the corpus content (dense_cf/retrieval/export.py module docstring).

An untrained tiny run (no training: random weights are enough to tell corpora apart) exports
small in-memory corpora through ``retrieval.ensure_index`` / ``ensure_sentence_index``.
"""

import json
import os

import numpy as np
import pytest
from helpers import tiny_run

from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import Corpus
from dense_cf.retrieval.retriever import INDEX_SOURCE, ensure_index, ensure_sentence_index

N, SHARD = 30, 8  # 4 shards, the last one short


_run = tiny_run


@pytest.fixture(scope="module")
def run():
    return _run("picl")


def _corpus(name, topic, n=N):
    """Ids 1..n (as synthetic corpora have them): corpora differ only in their text."""
    ids = [str(i + 1) for i in range(n)]
    texts = [f"{topic} fact number {i}. It is about {topic} and item {i % 7}." for i in range(n)]
    titles = [f"{topic.title()} {i}" for i in range(n)]
    return Corpus(ids, texts, titles, path=f"/data/{name}.tsv")


class _NoEncoding:
    """An encoder that fails the test if anything is encoded."""

    batch_size = 16

    def passages(self, *a):
        raise AssertionError("re-encoded a corpus whose export should have been reused")

    sentences = passages


def _ensure(run, corpus, workdir, encoder, fn=ensure_index, shard_size=SHARD):
    return fn(run, corpus, str(workdir), kind="flat", batch_size=16, dtype="float32",
              shard_size=shard_size, encoder=encoder)


def _export_dir(workdir):
    return os.path.join(str(workdir), "export", "step_0")


def test_rows_fingerprint_is_order_and_boundary_sensitive():
    rows = [("1", "ab", "t"), ("2", "c", "u")]
    fp = export.rows_fingerprint(rows, source="x")
    assert fp["passages"] == 2 and fp["source"] == "x"
    assert export.rows_fingerprint(iter(rows))["sha256"] == fp["sha256"]   # a name is no identity
    assert export.rows_fingerprint(rows[::-1])["sha256"] != fp["sha256"]
    # Field boundaries count: "ab"+"t" is not "a"+"bt" (length-prefixed fields).
    assert export.rows_fingerprint([("1", "a", "bt"), ("2", "c", "u")])["sha256"] != fp["sha256"]


def test_same_corpus_is_reused_without_encoding(run, tmp_path):
    a = _corpus("a", "river")
    enc = export.Encoder(run, 16)
    index, timing = _ensure(run, a, tmp_path, enc)
    assert timing["encoded_this_run"] == N and not timing["index_reused"] and index.ntotal == N
    manifest = json.load(open(os.path.join(_export_dir(tmp_path), "manifest.json")))
    assert manifest["corpus"] == export.rows_fingerprint(a.rows(), source="/data/a.tsv")
    before = export.load_embeddings(_export_dir(tmp_path))
    # Same content under another name, and another shard_size (the directory keeps its own).
    same = Corpus(list(a.ids), list(a.texts), list(a.titles), path="/elsewhere/copy.tsv")
    index2, timing2 = _ensure(run, same, tmp_path, _NoEncoding(), shard_size=5)
    assert timing2["encoded_this_run"] == 0 and timing2["index_reused"] and index2.ntotal == N
    np.testing.assert_array_equal(export.load_embeddings(_export_dir(tmp_path)), before)
    assert json.load(open(os.path.join(_export_dir(tmp_path), "manifest.json")))["shard_size"] == SHARD


def test_same_size_other_corpus_is_refused_not_reused(run, tmp_path):
    a, b = _corpus("a", "river"), _corpus("b", "mountain")
    assert a.ids == b.ids and len(a) == len(b)
    enc = export.Encoder(run, 16)
    _ensure(run, a, tmp_path, enc)
    before = export.load_embeddings(_export_dir(tmp_path))
    with pytest.raises(ValueError) as e:
        _ensure(run, b, tmp_path, _NoEncoding())
    msg = str(e.value)
    assert "/data/a.tsv" in msg and "/data/b.tsv" in msg and "another corpus" in msg
    # A prefix of the corpus (whole shards, so every shard matches) is another corpus too.
    prefix = Corpus(a.ids[:16], a.texts[:16], a.titles[:16], path="/data/a16.tsv")
    with pytest.raises(ValueError, match="prefix"):
        _ensure(run, prefix, tmp_path, _NoEncoding())
    # Nothing was overwritten: corpus a is still served without encoding.
    _, timing = _ensure(run, a, tmp_path, _NoEncoding())
    assert timing["encoded_this_run"] == 0 and timing["index_reused"]
    np.testing.assert_array_equal(export.load_embeddings(_export_dir(tmp_path)), before)
    # Elsewhere, b gets its own vectors (they differ: the model sees other text).
    _, timing_b = _ensure(run, b, tmp_path / "other", enc)
    assert timing_b["encoded_this_run"] == N
    assert not np.allclose(export.load_embeddings(_export_dir(tmp_path / "other")), before)


def test_unfinished_or_unfingerprinted_exports_are_re_encoded(run, tmp_path):
    a, b = _corpus("a", "river"), _corpus("b", "mountain")
    enc = export.Encoder(run, 16)
    _ensure(run, b, tmp_path / "ref_b", enc)
    want_b = export.load_embeddings(_export_dir(tmp_path / "ref_b"))
    # An interrupted export of a (no manifest) is overwritten shard by shard with b's rows,
    # and the index built from a is rebuilt.
    _ensure(run, a, tmp_path, enc)
    os.remove(os.path.join(_export_dir(tmp_path), "manifest.json"))
    index, timing = _ensure(run, b, tmp_path, enc)
    assert timing["encoded_this_run"] == N and not timing["index_reused"]
    np.testing.assert_array_equal(export.load_embeddings(_export_dir(tmp_path)), want_b)
    q = want_b[:3] + 0.5
    np.testing.assert_array_equal(index.search(q, 1)[1][:, 0], np.argmax(q @ want_b.T, axis=1))
    # An export from before fingerprints (no manifest "corpus", no shard records) and its index
    # (no export_source.json) cannot be verified: both are redone.
    exp = _export_dir(tmp_path)
    manifest = json.load(open(os.path.join(exp, "manifest.json")))
    for key in ("corpus", "settings", "shard_size"):
        del manifest[key]
    json.dump(manifest, open(os.path.join(exp, "manifest.json"), "w"))
    for name in os.listdir(exp):
        if name.startswith("shard-"):
            os.remove(os.path.join(exp, name))
    os.remove(os.path.join(str(tmp_path), "index", "step_0_flat", INDEX_SOURCE))
    _, timing = _ensure(run, b, tmp_path, enc)
    assert timing["encoded_this_run"] == N and not timing["index_reused"]
    # A longer leftover export is trimmed to this corpus's shards (index builders list them all),
    # and temp files of a killed writer (export and index) are removed.
    short = Corpus(b.ids[:10], b.texts[:10], b.titles[:10], path="/data/b10.tsv")
    os.remove(os.path.join(exp, "manifest.json"))
    index_dir = os.path.join(str(tmp_path), "index", "step_0_flat")
    for d, name in ((exp, "embeddings-00003.npy"), (index_dir, "shard-00000.faiss")):
        open(os.path.join(d, f".{name}.k1ll3d.tmp"), "wb").close()
    index, timing = _ensure(run, short, tmp_path, enc)
    assert index.ntotal == 10 and timing["encoded_this_run"] == 2   # shard 0 kept, shard 1 new
    assert sorted(n for n in os.listdir(exp) if n.startswith("embeddings-")) == [
        "embeddings-00000.npy", "embeddings-00001.npy"]
    assert not [n for d in (exp, index_dir) for n in os.listdir(d) if n.endswith(".tmp")]


def test_dcsr_sentence_export_is_keyed_by_the_corpus(tmp_path):
    run = _run("dcsr")
    a, b = _corpus("a", "river"), _corpus("b", "mountain")
    enc = export.Encoder(run, 16)
    index, timing, spid, kbar = _ensure(run, a, tmp_path, enc, fn=ensure_sentence_index)
    assert timing["encoded_this_run"] == N and index.ntotal == len(spid) >= N
    assert kbar == pytest.approx(len(spid) / N)
    index, timing, spid2, _ = _ensure(run, a, tmp_path, _NoEncoding(), fn=ensure_sentence_index)
    assert timing["encoded_this_run"] == 0 and timing["index_reused"]
    np.testing.assert_array_equal(spid, spid2)
    with pytest.raises(ValueError, match="/data/b.tsv"):
        _ensure(run, b, tmp_path, _NoEncoding(), fn=ensure_sentence_index)
