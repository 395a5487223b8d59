"""Input handling (issue "Interoperate…" §4): byte-order marks, duplicate passage ids, empty
answer lists, and one-line errors for a missing path or a directory where a file belongs, in
every binary."""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import logging
import os
import subprocess
import sys

import pytest

from dense_cf.datasets import formats
from dense_cf.datasets.formats import DataFormatError, SkipReport
from dense_cf.files import UserError
from dense_cf.retrieval.corpus import load_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOM = "\ufeff"
CORPUS = "id\ttext\ttitle\n1\tThe tower was built in 1820.\tTower\n2\tA bridge.\tBridge\n"
QA = "who built the tower?\t['Ann']\nwhen was the bridge opened?\t['1901', '1902']\n"
GOLD = {"data": [{"question": "who built the tower?", "context": "Ann built it.", "title": "Tower"}]}


def _write(path, text, gz=False):
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return str(path)


@pytest.mark.parametrize("gz", [False, True])
def test_a_byte_order_mark_is_accepted_in_every_format(tmp_path, gz):
    ext = ".gz" if gz else ""
    for bom in ("", BOM):
        tag = "bom" if bom else "plain"
        corpus = _write(tmp_path / f"c_{tag}.tsv{ext}", bom + CORPUS, gz)
        qa = _write(tmp_path / f"q_{tag}.csv{ext}", bom + QA, gz)
        gold = _write(tmp_path / f"g_{tag}.json{ext}", bom + json.dumps(GOLD), gz)
        bi = _write(tmp_path / f"b_{tag}.json{ext}", bom + json.dumps([{
            "question": "q?", "answers": ["a"], "positive_ctxs": [{"title": "t", "text": "a b"}],
            "negative_ctxs": [], "hard_negative_ctxs": []}]), gz)
        got = (list(formats.read_corpus_tsv(corpus, skip_bad=False)),
               list(formats.read_qa_csv(qa, skip_bad=False)),
               list(formats.read_gold_info(gold, skip_bad=False)),
               [e.question for e in formats.read_biencoder(bi, skip_bad=False)])
        if not bom:
            want = got
    assert got == want
    assert want[0][0] == ("1", "The tower was built in 1820.", "Tower")  # the header row skipped
    assert want[1][0] == ("who built the tower?", ["Ann"]) and want[3] == ["q?"]


def test_a_bom_inside_a_file_is_not_stripped(tmp_path):
    """Only a leading mark is one; elsewhere U+FEFF is text and stays."""
    corpus = _write(tmp_path / "c.tsv", CORPUS.replace("A bridge.", BOM + "A bridge."))
    rows = list(formats.read_corpus_tsv(corpus, skip_bad=False))
    assert rows[1][1] == BOM + "A bridge."


def test_duplicate_passage_ids_keep_the_first_and_are_counted(tmp_path, caplog):
    text = CORPUS + "1\tAnother text under id 1.\tOther\n3\tThird.\tT\n2\tAgain two.\tB\n007\tSeven.\tS\n7\tSeven.\tS\n"
    path = _write(tmp_path / "dup.tsv", text)
    report = SkipReport()
    rows = list(formats.read_corpus_tsv(path, report=report))
    assert [r[0] for r in rows] == ["1", "2", "3", "007", "7"]   # "007" and "7" are different ids
    assert rows[0][1] == "The tower was built in 1820."           # keep-first
    assert report.count(reason="duplicate id") == 2 and report.total == 2
    assert "line 4" in report.summary() or "4" in report.summary()
    with pytest.raises(DataFormatError) as e:
        list(formats.read_corpus_tsv(path, skip_bad=False))
    assert (e.value.record, e.value.field, e.value.reason) == (4, "id", "duplicate id")
    assert path in str(e.value) and "duplicate passage id '1'" in str(e.value)
    corpus = load_corpus(path)
    assert len(corpus) == 5 and corpus.skipped == {"duplicate id": 2}


def test_seen_ids_grow_for_large_decimal_ids():
    seen = formats._SeenIds()
    assert all(seen.add(str(i)) for i in (0, 21_015_324, 5, 99_999_999_999))
    assert not seen.add("21015324") and not seen.add("0") and seen.add("00") and not seen.add("00")
    assert not seen.add("99999999999")
    # One huge id must not cost a huge bitmap (it took 12.5 GB): big ids go to the set.
    assert len(seen.bits) <= formats._SeenIds.BITS_LIMIT // 8 and "99999999999" in seen.other


def test_empty_answer_lists_are_kept_and_counted(tmp_path, caplog):
    path = _write(tmp_path / "qa.csv", QA + "a question with no answer\t[]\n")
    with caplog.at_level(logging.WARNING):
        rows = list(formats.read_qa_csv(path, skip_bad=False))
    assert rows[-1] == ("a question with no answer", []) and len(rows) == 3
    assert "1 question(s) with an empty answer list" in caplog.text and path in caplog.text


# ----------------------------------------------------------------------------- every binary

_CHILD = r"""
import runpy, sys
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def _cases(tmp):
    """(binary, argv, the path the error must name)."""
    good_bi = os.path.join(tmp, "train.json")
    missing = os.path.join(tmp, "missing.json")
    norun = os.path.join(tmp, "norun")
    return [
        ("dense_cf.main", ["--config=configs/picl_nq.py", f"--workdir={tmp}/w",
                           "--config.model.name_or_path=tiny", f"--config.data.data_dir={tmp}/nodata"],
         f"{tmp}/nodata"),
        ("dense_cf.cli.eval_aar", [f"--workdir={norun}"], norun),
        ("dense_cf.cli.eval_retrieval", [f"--workdir={norun}"], norun),
        ("dense_cf.cli.eval_robustness", [f"--workdir={norun}"], norun),
        ("dense_cf.cli.eval_aar", ["--model=/no/such/model"], "/no/such/model"),
        ("dense_cf.cli.export_hf", [f"--workdir={norun}", f"--out={tmp}/out"], norun),
        ("dense_cf.cli.mine_model", [f"--workdir={norun}", f"--input={good_bi}",
                                     f"--corpus={tmp}/c.tsv", f"--output={tmp}/o.json"], norun),
        ("dense_cf.cli.marginalize", [f"--workdirs={norun},{norun}2", f"--test={tmp}/t.csv",
                                      f"--out={tmp}/m"], norun),
        ("dense_cf.cli.stats", [f"--input={missing}"], missing),
        ("dense_cf.cli.stats", [f"--input={tmp}"], tmp),
        ("dense_cf.cli.evidence", [f"--input={missing}", f"--output={tmp}/ev.jsonl"], missing),
        ("dense_cf.cli.evidence", [f"--input={tmp}", f"--output={tmp}/ev.jsonl"], tmp),
        ("dense_cf.cli.mine_bm25", [f"--input={missing}", f"--corpus={tmp}/c.tsv",
                                    f"--output={tmp}/o.json"], missing),
        ("dense_cf.cli.mine_bm25", [f"--input={good_bi}", f"--corpus={tmp}", f"--output={tmp}/o.json"], tmp),
        ("dense_cf.cli.prepare", ["--datasets=nq", "--splits=test", f"--data_dir={tmp}/d",
                                  f"--manual_dir={tmp}/nomanual"], f"{tmp}/nomanual"),
        ("dense_cf.cli.prepare_tfds", ["--config=nq", f"--data_dir={tmp}/d",
                                       f"--manual_dir={tmp}/nomanual"], f"{tmp}/nomanual"),
        ("dense_cf.cli.compare", [norun, f"{norun}2"], norun),
        ("dense_cf.cli.synthetic", [f"--out={good_bi}/sub", "--num_passages=20"], good_bi),
        ("dense_cf.demo", [f"--workdir={good_bi}"], good_bi),
    ]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("bad_paths"))
    _write(os.path.join(tmp, "train.json"), "[]")
    _write(os.path.join(tmp, "c.tsv"), CORPUS)
    env = dict(os.environ, JAX_PLATFORMS="cpu", DENSE_CF_TRACEBACK="0")

    def run(case):
        name, argv, _ = case
        r = subprocess.run([sys.executable, "-c", _CHILD, name, *argv], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
        return r

    cases = _cases(tmp)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, cases))
    return [(c, r) for c, r in zip(cases, results)], tmp


def test_every_binary_names_a_bad_path_in_one_line(outcomes):
    problems = []
    for (name, argv, path), r in outcomes[0]:
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith(("error:", "FATAL"))]
        if r.returncode == 0 or "Traceback" in r.stderr or len(errors) != 1 or path not in errors[0]:
            problems.append(f"{name} {argv}: exit {r.returncode}\n{r.stderr[-1500:]}")
    assert not problems, "\n\n".join(problems)


def test_a_failed_command_creates_no_run_directory(outcomes):
    _, tmp = outcomes
    assert not os.path.exists(os.path.join(tmp, "norun"))
    assert not os.path.exists(os.path.join(tmp, "out"))


def test_user_errors_cover_path_and_format_errors():
    from dense_cf import app as _app
    from dense_cf.models.hf import CheckpointError
    assert issubclass(DataFormatError, UserError) and issubclass(CheckpointError, UserError)
    assert _app.user_message(IsADirectoryError(21, "Is a directory", "/x")) == \
        "/x: is a directory, expected a file"
    assert _app.user_message(FileNotFoundError(2, "No such file", "/y")) == "/y: no such file or directory"
    assert _app.user_message(FileNotFoundError("custom: /z not found")) == "custom: /z not found"
