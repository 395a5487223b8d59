"""Tests for dense_cf.eval.results: DPR results JSON and TREC run/qrels files (docs/method.md §6)."""

import json

import numpy as np
import pytest

from dense_cf.eval.results import (
    hits_from_results,
    read_dpr_results,
    retrieved_from_results,
    write_dpr_results,
    write_trec_qrels,
    write_trec_run,
)

QUESTIONS = ["who wrote hamlet", "capital of peru"]
ANSWERS = [["Shakespeare"], ["Lima"]]
RETRIEVED = [
    [("wiki:1", "Hamlet", "Written by Shakespeare.", np.float32(80.5)),
     ("wiki:2", "Shakespeare", "A play.", np.float32(79.25))],
    [("3", "Peru", "Lima is the capital.", 12.0), ("4", "Chile", "Santiago.", 11.0),
     ("5", "Lima", "A city.", 13.5)],
]
HITS = [[True, False], [True, False, False]]


def dpr_save_results(questions, answers, retrieved, hits):
    """DPR's save_results body (merged_data construction + json.dumps), as the oracle."""
    merged_data = []
    for i, q in enumerate(questions):
        ids = [p[0] for p in retrieved[i]]
        docs = [(p[2], p[1]) for p in retrieved[i]]
        scores = [str(p[3]) for p in retrieved[i]]
        merged_data.append({
            "question": q, "answers": answers[i],
            "ctxs": [{"id": ids[c], "title": docs[c][1], "text": docs[c][0],
                      "score": scores[c], "has_answer": hits[i][c]}
                     for c in range(len(hits[i]))],
        })
    return json.dumps(merged_data, indent=4) + "\n"


def test_dpr_json_matches_dpr_bytes_and_round_trips(tmp_path):
    path = tmp_path / "out" / "results.json"
    write_dpr_results(path, QUESTIONS, ANSWERS, RETRIEVED, HITS)
    assert path.read_text() == dpr_save_results(QUESTIONS, ANSWERS, RETRIEVED, HITS)
    data = read_dpr_results(path)
    assert [set(r) for r in data] == [{"question", "answers", "ctxs"}] * 2
    ctx = data[0]["ctxs"][0]
    assert list(ctx) == ["id", "title", "text", "score", "has_answer"]
    assert ctx == {"id": "wiki:1", "title": "Hamlet", "text": "Written by Shakespeare.",
                   "score": "80.5", "has_answer": True}
    assert data[1]["ctxs"][0]["id"] == "3" and data[1]["ctxs"][0]["score"] == "12.0"
    assert isinstance(data[0]["ctxs"][1]["has_answer"], bool)
    assert hits_from_results(data) == HITS
    back = retrieved_from_results(data)
    assert back == [[(p[0], p[1], p[2], float(p[3])) for p in row] for row in RETRIEVED]


def test_dpr_json_computes_hits_and_numeric_scores(tmp_path):
    path = tmp_path / "r.json"
    ids = [[np.int64(7), np.int64(8)]]  # numpy ids become JSON ints
    retrieved = [[(ids[0][0], "T", "Lima is here.", 1.5), (ids[0][1], "Lima", "no", 1.0)]]
    write_dpr_results(path, ["q"], [["Lima"]], retrieved, score_as_str=False)
    ctxs = read_dpr_results(path)[0]["ctxs"]
    assert [c["id"] for c in ctxs] == [7, 8]
    assert [c["score"] for c in ctxs] == [1.5, 1.0]
    assert [c["has_answer"] for c in ctxs] == [True, False]  # title "Lima" is ignored
    with pytest.raises(ValueError):
        write_dpr_results(path, ["q"], [["Lima"]], retrieved, [[True]])


def test_trec_run_format_ranks_and_order(tmp_path):
    path = tmp_path / "run.trec"
    write_trec_run(path, None, RETRIEVED, run_name="dpr")
    lines = path.read_text().splitlines()
    assert lines == [
        "0 Q0 wiki:1 1 80.5 dpr",
        "0 Q0 wiki:2 2 79.25 dpr",
        "1 Q0 5 1 13.5 dpr",  # re-sorted by descending score
        "1 Q0 3 2 12.0 dpr",
        "1 Q0 4 3 11.0 dpr",
    ]
    for line in lines:
        qid, q0, docid, rank, score, tag = line.split()
        assert q0 == "Q0" and int(rank) >= 1 and float(score) > 0
    write_trec_run(path, ["q1", "q2"], RETRIEVED, run_name="x", score_fmt=".6f")
    assert path.read_text().splitlines()[2] == "q2 Q0 5 1 13.500000 x"


def test_trec_run_ties_keep_order_and_bad_ids(tmp_path):
    path = tmp_path / "run.trec"
    tied = [[("b", "", "", 1.0), ("a", "", "", 2.0), ("c", "", "", 1.0)]]
    write_trec_run(path, ["7"], tied)
    assert [ln.split()[2:4] for ln in path.read_text().splitlines()] == [
        ["a", "1"], ["b", "2"], ["c", "3"]]
    with pytest.raises(ValueError, match="whitespace"):
        write_trec_run(path, ["q 1"], tied)
    with pytest.raises(ValueError, match="twice"):
        write_trec_run(path, None, [[("a", "", "", 1.0), ("a", "", "", 0.5)]])
    with pytest.raises(ValueError, match="unique"):
        write_trec_run(path, ["x", "x"], RETRIEVED)


def test_trec_qrels(tmp_path):
    path = tmp_path / "qrels.txt"
    write_trec_qrels(path, None, HITS, RETRIEVED)
    assert path.read_text().splitlines() == [
        "0 0 wiki:1 1", "0 0 wiki:2 0", "1 0 3 1", "1 0 4 0", "1 0 5 0"]
    # A duplicate within a query is judged once, relevant if any copy was.
    write_trec_qrels(path, ["q"], [[False, True]], [[("d", "", "", 2.0), ("d", "", "", 1.0)]])
    assert path.read_text() == "q 0 d 1\n"
    with pytest.raises(ValueError):
        write_trec_qrels(path, None, [[True]], RETRIEVED)
