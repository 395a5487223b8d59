"""The real-length Wikipedia corpus adapter (dense_cf.datasets.wiki_offline, docs/scale.md)."""

import json
import os
import re

import pytest

from dense_cf.cli import wiki_corpus
from dense_cf.datasets import formats, wiki_offline
from dense_cf.datasets.formats import DataFormatError, SkipReport


def _write(tmp_path, data) -> str:
    path = os.path.join(tmp_path, "summaries.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return path


def test_word_blocks_split_like_psgs_w100():
    text = " ".join(f"w{i}" for i in range(250))
    blocks = wiki_offline.word_blocks(text, 100)
    assert [len(b.split()) for b in blocks] == [100, 100, 50]
    assert " ".join(blocks).split() == text.split()          # nothing lost, order kept
    assert wiki_offline.word_blocks("a\nb\tc", 2) == ["a b", "c"]
    with pytest.raises(ValueError):
        wiki_offline.word_blocks("a", 0)


def test_bad_records_are_counted_and_strict_names_record_and_field(tmp_path):
    data = {
        "Alpha": {"title": "Alpha", "extract": "one two three"},
        "Beta": ["not", "an", "object"],
        "Gamma": {"title": "Gamma"},
        "Delta": {"title": "Delta", "extract": "   "},
        "Eps": {"title": 7, "extract": "x y\nz"},
    }
    path = _write(tmp_path, data)
    report = SkipReport()
    got = list(wiki_offline.iter_summaries(path, report=report))
    assert got == [("Alpha", "one two three"), ("Eps", "x y\nz")]   # title falls back to key
    assert report.count(reason="bad record") == 1
    assert report.count(reason="missing extract") == 1
    assert report.count(reason="empty extract") == 1
    with pytest.raises(DataFormatError, match=r"record 1 .*'\(record\)'.*'Beta'"):
        list(wiki_offline.iter_summaries(path, strict=True))
    with open(path, "w") as f:
        f.write("[1, 2")
    with pytest.raises(DataFormatError, match="summaries.json"):
        list(wiki_offline.iter_summaries(path))


def test_cli_writes_a_dpr_corpus(tmp_path):
    data = {"A": {"title": "A", "extract": " ".join(["a"] * 130)},
            "B": {"title": "B\tb", "extract": "b c"}}
    src = _write(tmp_path, data)
    out = os.path.join(tmp_path, "corpus")
    stats = wiki_corpus.run_cli([f"--out={out}", f"--source={src}", "--words=100"])
    assert (stats["articles"], stats["passages"], stats["words_total"]) == (2, 3, 132)
    rows = list(formats.read_corpus_tsv(os.path.join(out, "psgs.tsv.gz")))
    assert [(pid, title, len(text.split())) for pid, text, title in rows] == [
        ("1", "A", 100), ("2", "A", 30), ("3", "B b", 2)]
    stats = wiki_corpus.run_cli([f"--out={out}", f"--source={src}", "--max_passages=2"])
    assert stats["passages"] == 2


def test_the_installed_package_gives_real_length_passages(tmp_path):
    try:
        path = wiki_offline.summaries_path()
    except Exception as e:  # the Makefile installs it; a bare venv says how
        assert re.search("make install", str(e))
        pytest.skip(str(e))
    n = sum(1 for _ in wiki_offline.iter_summaries(path))
    assert n == 10033
    stats = wiki_offline.write_corpus(os.path.join(tmp_path, "psgs.tsv.gz"), source=path,
                                      max_passages=500)
    assert stats["passages"] == 500 and stats["skipped"] == 0
    assert 40 < stats["mean_words"] <= 100
