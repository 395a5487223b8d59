"""eval.outcomes: the metric table, the generic outcome store and the pairing (issue 48)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dense_cf.analysis import compare as compare_lib
from dense_cf.eval import outcomes


def test_metric_table_ids_and_labels_are_unique_and_resolve():
    ms = list(outcomes.METRICS.values())
    assert len({m.label for m in ms}) == len(ms)
    for m in ms:
        assert outcomes.metric(m.id) == m
    assert outcomes.metric("aar.sentence").label == "AAR"
    assert outcomes.metric("aar.answer").label == "AA score"
    assert outcomes.metric("aar.window.gap") == outcomes.Metric(
        "aar.window.gap", "mean sim(q,p+) − sim(q,p*) (window)", "mean", digits=4)
    assert outcomes.metric("retrieval.top50").label == "top-50"
    assert outcomes.metric("retrieval.mrr").scale == 100.0
    assert outcomes.metric("robustness.k10.top5").label == "K=10 distractors: top-5"
    assert outcomes.metric("robustness.heldout.k3.mrr").label == "K=3 held-out distractors: MRR (×100)"
    assert outcomes.metric("e2e.f1@10").kind == "mean"
    for bad in ("retrieval", "retrieval.topx", "robustness.other.k5.top1", "e2e.xx@1", "nope.top1"):
        with pytest.raises(KeyError, match="unknown metric id"):
            outcomes.metric(bad)
    with pytest.raises(ValueError, match="kind"):
        outcomes.Metric("x.y", "x", "median")


def _write(eval_dir, keys, values, **kw):
    m = (outcomes.Metric("toy.hit", "toy hit", "rate"),
         outcomes.Metric("toy.score", "toy score", "mean", digits=3))
    return outcomes.write(str(eval_dir), "toy", outcomes.Outcomes(
        keys=keys, values={"toy.hit": values[0], "toy.score": values[1]}, metrics=m, **kw))


def test_generic_store_round_trips_and_pairs_by_key(tmp_path):
    a, b = tmp_path / "a" / "eval" / "step_3", tmp_path / "b" / "eval" / "step_3"
    keys = ["q1", "q2", "q1", "q3"]
    path = _write(a, keys, ([1, 0, 1, 1], [0.5, 0.25, 1.0, 0.0]), method="toy-a")
    assert os.path.basename(path) == outcomes.outcomes_name("toy")
    # B lists the same items in another order (q1 twice: k-th occurrence with k-th).
    _write(b, ["q3", "q1", "q2", "q1"], ([0, 0, 0, 1], [0.0, 1.0, 0.5, 0.75]), method="toy-b")
    ra = outcomes.read(str(tmp_path / "a"))
    assert ra.eval_dir == str(a) and ra.step == 3 and ra.method == "toy-a"
    got, path_a = ra.generic["toy"]
    assert got.keys == keys and got.values["toy.hit"] == [1, 0, 1, 1]
    pairs, notes = outcomes.pair(ra, outcomes.read(str(tmp_path / "b")))
    assert [p.metric.id for p in pairs] == ["toy.hit", "toy.score"]
    np.testing.assert_array_equal(pairs[0].a, [True, False, True, True])
    np.testing.assert_array_equal(pairs[0].b, [False, False, True, False])
    np.testing.assert_array_equal(pairs[1].b, [1.0, 0.5, 0.75, 0.0])
    assert notes == ["toy: 4 items paired (by key)"]
    res = compare_lib.compare(str(tmp_path / "a"), str(tmp_path / "b"), n_resamples=200,
                              verbose=False)
    assert [(r["id"], r["metric"]) for r in res["rows"]] == [("toy.hit", "toy hit"),
                                                              ("toy.score", "toy score")]


def test_pairing_refuses_other_items_and_bad_files(tmp_path):
    _write(tmp_path / "a", ["q1", "q2"], ([1, 0], [0.1, 0.2]))
    _write(tmp_path / "b", ["q1", "q9"], ([1, 0], [0.1, 0.2]))
    with pytest.raises(ValueError, match="different question sets"):
        outcomes.pair(outcomes.read(str(tmp_path / "a")), outcomes.read(str(tmp_path / "b")))
    with pytest.raises(ValueError, match="has 1 values for 2 items"):
        _write(tmp_path / "c", ["q1", "q2"], ([1], [0.1, 0.2]))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / outcomes.outcomes_name("x")).write_text(json.dumps({"keys": []}))
    with pytest.raises(ValueError, match="not an outcome file"):
        outcomes.read(str(tmp_path / "d"))
    with pytest.raises(ValueError, match="share no saved per-item outcomes"):
        outcomes.pair(outcomes.read(str(tmp_path / "a")), outcomes.RunOutcomes(str(tmp_path)))


def test_rank_outcomes_give_top_k_and_mrr(tmp_path):
    m = (outcomes.Metric("toy.rank", "toy", "rank"),)
    for name, ranks, depth in (("a", [1, 3, None, 2], 10), ("b", [2, 1, 4, None], 3)):
        outcomes.write(str(tmp_path / name), "toy", outcomes.Outcomes(
            keys=["w", "x", "y", "z"], values={"toy.rank": ranks}, metrics=m, ks=(1, 3, 5),
            depth=depth))
    pairs, _ = outcomes.pair(outcomes.read(str(tmp_path / "a")), outcomes.read(str(tmp_path / "b")))
    assert [(p.metric.id, p.metric.label) for p in pairs] == [
        ("toy.top1", "toy: top-1"), ("toy.top3", "toy: top-3"), ("toy.mrr", "toy: MRR (×100)")]
    np.testing.assert_array_equal(pairs[1].a, [True, True, False, True])
    # MRR counts hits up to the shallower depth (3): B's rank 4 is no hit.
    np.testing.assert_allclose(pairs[2].b, [0.5, 1.0, 0.0, 0.0])


def test_built_in_reports_are_read_under_their_names(tmp_path):
    d = tmp_path / "run" / "eval" / "step_2"
    d.mkdir(parents=True)
    (d / outcomes.REPORT).write_text(json.dumps({"method": "dpr", "k": 5, "top_k": {"1": 0.5},
                                                 "first_hit_rank": [1, None],
                                                 "questions": ["a", "b"]}))
    np.savez(d / outcomes.aar_scores_name("sentence"), pos=np.array([0.9, 0.1], np.float32),
             cf=np.array([0.2, 0.3], np.float32), gold_index=np.array([4, 7]))
    got = outcomes.read(str(tmp_path / "run"))
    assert (got.method, got.step, got.first_hit_rank) == ("dpr", 2, [1, None])
    assert got.aar["sentence"]["gold_index"].tolist() == [4, 7]
    assert outcomes.read_aar_scores(str(d), "sentence", dtype=None)["pos"].dtype == np.float32
    pairs, notes = outcomes.pair(got, got)
    assert [p.metric.id for p in pairs] == ["retrieval.top1", "retrieval.mrr", "aar.sentence",
                                            "aar.sentence.gap"]
    assert outcomes.evaluated(str(d), (outcomes.REPORT,))
    assert not outcomes.evaluated(str(d), (outcomes.REPORT, outcomes.AAR))
    with pytest.raises(FileNotFoundError, match="no such report"):
        outcomes.read_aar(str(d), required=True)
