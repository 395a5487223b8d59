"""The pre-tokenised corpus (dense_cf.retrieval.token_table): its rows equal
``tokenize_passages``, an export from it equals the TSV export bit for bit, it is reused while
the corpus and tokenizer are unchanged and rebuilt when they change."""

import os

import numpy as np
import pytest
from helpers import tiny_run

from dense_cf.datasets.formats import read_corpus_tsv
from dense_cf.inputs.tokens import tokenize_passages
from dense_cf.retrieval import export, token_table

MAX_P_LEN = 24


def _write_tsv(path, n=40, extra=""):
    lines = ["id\ttext\ttitle"]
    for i in range(n):
        words = " ".join(f"word{j % 17} fact{i}" for j in range(3 + (i * 7) % 23))  # some > 24
        title = "" if i % 5 == 0 else f"Title {i}{extra}"
        lines.append(f"p{i}\t{words}. Ünïcode {i}\t{title}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def run():
    return tiny_run("dpr")


def test_table_rows_equal_tokenize_passages(tmp_path, run):
    tsv = _write_tsv(tmp_path / "psgs.tsv")
    table = token_table.open_table(tsv, run.tokenizer, MAX_P_LEN)
    rows = list(read_corpus_tsv(tsv))
    ids, mask = tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                  MAX_P_LEN)
    t_ids, t_mask = table.tokenize(rows)
    assert t_ids.dtype == ids.dtype and t_mask.dtype == mask.dtype
    np.testing.assert_array_equal(t_ids, ids)
    np.testing.assert_array_equal(t_mask, mask)
    assert mask.sum(1).max() == MAX_P_LEN and mask.sum(1).min() < MAX_P_LEN  # cut and padded
    # any order, any subset
    np.testing.assert_array_equal(table.tokenize(rows[::-3])[0], ids[::-3])
    assert table.meta["corpus"] == export.rows_fingerprint(rows, source=os.path.abspath(tsv))
    assert table.tokens.dtype == np.uint16


def test_export_from_table_equals_tsv_export_bit_for_bit(tmp_path, run):
    tsv = _write_tsv(tmp_path / "psgs.tsv")
    rows = list(read_corpus_tsv(tsv))
    table = token_table.open_table(tsv, run.tokenizer, MAX_P_LEN)
    a = export.export_passages(run, rows, str(tmp_path / "a"), shard_size=16, batch_size=8,
                               dtype="float32", max_p_len=MAX_P_LEN)
    b = export.export_passages(run, rows, str(tmp_path / "b"), shard_size=16, batch_size=8,
                               dtype="float32", max_p_len=MAX_P_LEN, tokenize=table.tokenize)
    assert a["count"] == b["count"] == 40 and a["corpus"]["sha256"] == b["corpus"]["sha256"]
    for name in sorted(os.listdir(tmp_path / "a")):
        if name.startswith(("embeddings-", "ids-", "pids-")):
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_reused_then_rebuilt_when_the_corpus_changes(tmp_path, run):
    tsv = _write_tsv(tmp_path / "psgs.tsv")
    first = token_table.open_table(tsv, run.tokenizer, MAX_P_LEN)
    meta = os.path.join(first.path, token_table.TABLE_JSON)
    stamp = os.stat(meta).st_mtime_ns
    again = token_table.open_table(tsv, run.tokenizer, MAX_P_LEN)
    assert again.path == first.path and os.stat(meta).st_mtime_ns == stamp  # reused
    other_len = token_table.open_table(tsv, run.tokenizer, MAX_P_LEN + 8)
    assert other_len.path != first.path and other_len.max_p_len == MAX_P_LEN + 8
    _write_tsv(tmp_path / "psgs.tsv", extra=" changed")
    rebuilt = token_table.open_table(tsv, run.tokenizer, MAX_P_LEN)
    assert rebuilt.meta["corpus"]["sha256"] != first.meta["corpus"]["sha256"]
    rows = list(read_corpus_tsv(tsv))
    ids, _ = tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows], MAX_P_LEN)
    np.testing.assert_array_equal(rebuilt.tokenize(rows)[0], ids)


def test_unknown_passage_id_is_named(tmp_path, run):
    table = token_table.open_table(_write_tsv(tmp_path / "psgs.tsv"), run.tokenizer, MAX_P_LEN)
    with pytest.raises(ValueError, match="passage id 'nope' is not in the token table"):
        table.tokenize([("p1", "x", "y"), ("nope", "x", "y")])
