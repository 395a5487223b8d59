"""StoredCorpus: the streamed corpus of retrieval evaluation equals the corpus read whole."""

import os

import numpy as np
import pytest

from dense_cf.datasets.formats import DataFormatError
from dense_cf.index.faiss_index import IndexSpec, build_index
from dense_cf.retrieval.corpus import StoredCorpus, load_corpus, open_corpus
from dense_cf.retrieval.retriever import retrieve


def _write_tsv(path, n, bad_line=None):
    lines = ["id\ttext\ttitle"]
    for i in range(n):
        lines.append(f"p{i}\tpassage {i} says \"{i * 7}\" with a tab-free text\tTitle {i % 5}")
    if bad_line is not None:
        lines.insert(bad_line, "p_bad\tonly two columns")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_stored_corpus_equals_whole_corpus_and_counts_skips(tmp_path):
    tsv = _write_tsv(tmp_path / "c.tsv", 40, bad_line=7)
    whole = load_corpus(tsv)
    stored = open_corpus(tsv, str(tmp_path / "store"))
    assert isinstance(stored, StoredCorpus)
    assert len(stored) == len(whole) == 40
    assert list(stored.rows()) == list(whole.rows())
    assert [stored.get(r) for r in range(40)] == [whole.get(r) for r in range(40)]
    assert stored.skipped == whole.skipped and sum(stored.skipped.values()) == 1
    assert stored.path == whole.path
    # Reopened: the store is reused (not rewritten) and still reports the skipped row.
    mtime = os.path.getmtime(tmp_path / "store" / "passages.jsonl")
    again = open_corpus(tsv, str(tmp_path / "store"))
    assert os.path.getmtime(tmp_path / "store" / "passages.jsonl") == mtime
    assert again.skipped == whole.skipped and len(again) == 40


def test_stored_corpus_strict_names_file_line_and_field(tmp_path):
    tsv = _write_tsv(tmp_path / "c.tsv", 10, bad_line=3)
    with pytest.raises(DataFormatError) as e:
        open_corpus(tsv, str(tmp_path / "store"), skip_bad=False)
    msg = str(e.value)
    assert "c.tsv" in msg and "3" in msg
    assert not os.path.exists(tmp_path / "store" / "store.json")  # nothing half-built is kept


def test_stored_corpus_of_another_file_size_is_an_error(tmp_path):
    tsv = _write_tsv(tmp_path / "c.tsv", 10)
    open_corpus(tsv, str(tmp_path / "store"))
    _write_tsv(tmp_path / "c.tsv", 12)
    with pytest.raises(ValueError, match="store"):
        open_corpus(tsv, str(tmp_path / "store"))


def test_retrieve_from_stored_corpus_equals_whole_corpus(tmp_path):
    tsv = _write_tsv(tmp_path / "c.tsv", 64)
    whole, stored = load_corpus(tsv), open_corpus(tsv, str(tmp_path / "store"))
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(64, 16)).astype(np.float32)
    index = build_index(vecs, None, IndexSpec(kind="flat"))
    q = rng.normal(size=(5, 16)).astype(np.float32)
    a, b = retrieve(index, q, whole, 10), retrieve(index, q, stored, 10)
    assert a == b and all(len(r) == 10 for r in a)
    # The top hit is the exact inner-product maximum, read back by row from the store.
    best = np.argmax(q @ vecs.T, axis=1)
    assert [r[0][0] for r in b] == [f"p{i}" for i in best]
