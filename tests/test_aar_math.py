"""Tests for dense_cf.eval.aar_math: AAR / AA score, break-downs, figures (docs/method.md §5)."""

import json
import math
import os

import numpy as np
import pytest

from dense_cf.eval.aar_math import (
    aar,
    aar_by_type,
    histogram_plot,
    mismatches,
    score_diff_stats,
    score_diffs,
    topk_vs_distractors_plot,
)
from dense_cf.eval.report import markdown_table, to_jsonable, write_json, write_markdown

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_aar_ties_count_as_mismatches():
    pos = [2.0, 1.0, 3.0, 0.5]
    cf = [1.0, 1.0, 3.5, 0.4]  # aware, tie, unaware, aware
    assert mismatches(pos, cf).tolist() == [False, True, True, False]
    assert aar(pos, cf) == 0.5
    # float32 ties stay ties (no spurious difference from a float64 conversion).
    p32 = np.array([0.1, 0.7], dtype=np.float32)
    assert aar(p32, p32.copy()) == 0.0


def test_aar_all_aware_and_all_unaware():
    assert aar([3, 2, 1], [0, 0, 0]) == 1.0
    assert aar([0, 0, 0], [3, 2, 1]) == 0.0
    assert aar([1, 1], [1, 1]) == 0.0  # all ties: fully unaware


def test_aar_rejects_empty_mismatched_and_nan():
    with pytest.raises(ValueError, match="empty"):
        aar([], [])
    with pytest.raises(ValueError):
        aar([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        aar([float("nan")], [0.0])  # NaN <= x is False: would count as aware


def test_aar_by_type_hand_computed():
    questions = [
        "who wrote hamlet",            # who: aware
        "Who is the king of spain",    # who: unaware (tie)
        "who sang thriller",           # who: aware
        "when did ww2 end",            # when: unaware
        "what is the capital of peru", # what: aware
        "name the tallest mountain",   # other: aware
        "how many moons and who saw",  # how (first word wins): unaware
    ]
    pos = [5.0, 1.0, 2.0, 0.0, 3.0, 1.0, 0.0]
    cf = [4.0, 1.0, 1.0, 1.0, 2.0, 0.0, 2.0]
    out = aar_by_type(questions, pos, cf)
    assert list(out) == ["how", "what", "when", "who", "other"]  # fixed order, present only
    assert out["who"] == {"aar": pytest.approx(2 / 3), "count": 3}
    assert out["when"] == {"aar": 0.0, "count": 1}
    assert out["what"] == {"aar": 1.0, "count": 1}
    assert out["other"] == {"aar": 1.0, "count": 1}
    assert out["how"] == {"aar": 0.0, "count": 1}
    assert sum(v["count"] for v in out.values()) == len(questions)
    # The count-weighted mean of the per-type AARs is the overall AAR.
    weighted = sum(v["aar"] * v["count"] for v in out.values()) / len(questions)
    assert weighted == pytest.approx(aar(pos, cf))
    with pytest.raises(ValueError):
        aar_by_type(questions[:3], pos, cf)


def test_score_diff_stats_hand_computed():
    pos = [3.0, 2.0, 1.0, 1.0, 0.0]
    cf = [1.0, 1.5, 1.0, 2.0, 3.0]  # diffs 2, 0.5, 0 (tie), -1, -3
    assert score_diffs(pos, cf).tolist() == [2.0, 0.5, 0.0, -1.0, -3.0]
    s = score_diff_stats(pos, cf)
    assert s["aware"] == {"count": 2, "mean": 1.25, "std": 0.75, "median": 1.25}
    assert s["unaware"]["count"] == 3  # the tie is unaware
    assert s["unaware"]["mean"] == pytest.approx(-4 / 3)
    assert s["unaware"]["median"] == -1.0
    assert s["unaware"]["std"] == pytest.approx(np.sqrt(((0 + 4 / 3) ** 2 + (-1 + 4 / 3) ** 2
                                                         + (-3 + 4 / 3) ** 2) / 3))
    assert s["all"]["count"] == 5
    assert s["all"]["mean"] == pytest.approx(-1.5 / 5)
    assert s["all"]["median"] == 0.0
    assert s["aar"] == pytest.approx(aar(pos, cf)) == pytest.approx(0.4)
    # An empty group gets NaN statistics, and the report writer turns them into null.
    s2 = score_diff_stats([1.0, 2.0], [0.0, 0.0])
    assert s2["unaware"]["count"] == 0 and math.isnan(s2["unaware"]["mean"])
    assert to_jsonable(s2)["unaware"]["mean"] is None


def test_histogram_plot_writes_png(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "fig6" / "hist.png"
    histogram_plot({"DPR": rng.normal(0, 1, 300), "DPR+PiCL": rng.normal(0.8, 1, 300)},
                   path, bins=30)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert not list(path.parent.glob(".*.tmp"))  # the atomic temp file is gone
    with pytest.raises(ValueError):
        histogram_plot({}, tmp_path / "x.png")


def test_topk_vs_distractors_plot_writes_png(tmp_path):
    table = {"DPR": {0: {5: 68.0, 20: 80.0}, 10: {5: 55.0, 20: 72.0}, 20: {5: 48.0, 20: 66.0}},
             "EADPR": {"0": {"5": 70.0, "20": 81.0}, "20": {"5": 62.0, "20": 76.0}}}
    path = tmp_path / "fig5.png"
    topk_vs_distractors_plot(table, path)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000


def test_report_json_markdown(tmp_path):
    obj = {"aar": np.float32(0.5), "n": np.int64(3), "arr": np.arange(3), "nan": float("nan"),
           "top_k": {np.int64(1): 0.25, 5: 0.75}, "pair": (1, 2)}
    write_json(tmp_path / "r.json", obj)
    back = json.loads((tmp_path / "r.json").read_text())
    assert back == {"aar": 0.5, "n": 3, "arr": [0, 1, 2], "nan": None,
                    "top_k": {"1": 0.25, "5": 0.75}, "pair": [1, 2]}
    table = markdown_table([{"run": "DPR", "aar": 0.6612, "n": 1382},
                            {"run": "a|b", "aar": None}], ["run", "aar", "n"])
    assert table.splitlines() == ["| run | aar | n |", "|---|---:|---:|",
                                  "| DPR | 0.66 | 1382 |", "| a\\|b |  |  |"]
    write_markdown(tmp_path / "r.md", "AAR", [("Table", table)])
    text = (tmp_path / "r.md").read_text()
    assert text.startswith("# AAR\n\n## Table\n\n| run | aar | n |")


# --- Gold-triplet join (issue 19): every gold record joined with its own answers or counted ---

SMITH = "Where was John Smith born?"


def _gold(*questions, **answers_at):
    return [dict({"question": q, "title": f"T{i}", "context": f"C{i}"},
                 **({"answers": answers_at[f"a{i}"]} if f"a{i}" in answers_at else {}))
            for i, q in enumerate(questions)]


def test_join_duplicate_question_texts_by_position():
    from dense_cf.eval.aar_math import join_gold_with_qa
    gold = _gold(SMITH, "Who wrote Blue Hills?", SMITH, SMITH)
    qa = [(SMITH, ["Oslo"]), ("who wrote  blue hills", ["Ann Berg"]), (SMITH, ["Lima"]),
          (SMITH + " ", ["Cairo"])]
    j = join_gold_with_qa(gold, qa)
    # The old text join (setdefault) gave all three John Smiths "Oslo".
    assert j.mode == "position" and j.index == [0, 1, 2, 3]
    assert j.answers == [["Oslo"], ["Ann Berg"], ["Lima"], ["Cairo"]]
    assert j.counts.counts == {"joined_by_position": 4, "joined_by_occurrence": 0,
                               "answers_from_gold": 0, "no_qa_record": 0,
                               "malformed_gold_record": 0}
    assert j.counts.total == len(gold) and j.qa_unused == 0


def test_join_other_order_by_occurrence_and_missing_partner():
    from dense_cf.eval.aar_math import join_gold_with_qa
    gold = _gold(SMITH, "Who wrote Blue Hills?", SMITH, "What is the capital of Narnia?", SMITH)
    qa = [("Who wrote Blue Hills?", ["Ann Berg"]), (SMITH, ["Oslo"]), ("Who is nobody?", ["x"]),
          (SMITH, ["Lima"]), (SMITH, ["Cairo"])]
    j = join_gold_with_qa(gold, qa)
    assert j.mode == "occurrence"
    # k-th John Smith of the gold file <-> k-th John Smith of the qa file.
    assert j.index == [0, 1, 2, 4]
    assert j.answers == [["Oslo"], ["Ann Berg"], ["Lima"], ["Cairo"]]
    assert j.counts.counts == {"joined_by_position": 0, "joined_by_occurrence": 4,
                               "answers_from_gold": 0, "no_qa_record": 1,
                               "malformed_gold_record": 0}
    assert j.counts.first["no_qa_record"] == "gold record 3: 'What is the capital of Narnia?'"
    assert j.counts.lost() == 1 and j.qa_unused == 1
    assert "no_qa_record 1 (first: gold record 3:" in j.counts.summary(lost_only=True)
    # Same records, fewer qa rows: a positional join is impossible, the occurrence join still is.
    j2 = join_gold_with_qa(gold[:3], qa[:2] + qa[3:4])
    assert j2.mode == "occurrence" and j2.answers == [["Oslo"], ["Ann Berg"], ["Lima"]]


def test_join_prefers_answers_carried_by_the_gold_record():
    from dense_cf.eval.aar_math import join_gold_with_qa
    gold = _gold(SMITH, SMITH, "Lost?", "Odd?", a0=["Bergen"], a2=["Paris"], a3="not a list")
    j = join_gold_with_qa(gold, [(SMITH, ["Oslo"]), (SMITH, ["Lima"]), ("Odd?", ["y"])])
    assert j.index == [0, 1, 2, 3] and j.answers == [["Bergen"], ["Lima"], ["Paris"], ["y"]]
    assert j.counts.counts["answers_from_gold"] == 2
    assert j.counts.counts["joined_by_occurrence"] == 2 and j.counts.counts["no_qa_record"] == 0
    assert j.gold_answers_ignored == 1  # "not a list" falls back to the qa partner


def test_reason_counts_invariant_and_table():
    from dense_cf.eval.aar_math import AAR_FATES, JOIN_REASONS, LOST_AT_JOIN, ReasonCounts, reason_table
    join = ReasonCounts(JOIN_REASONS)
    join.add("joined_by_position", "gold record 0: 'a'", 3)
    join.add("no_qa_record", "gold record 3: 'b'")
    join.add("no_qa_record", "gold record 4: 'c'")
    assert join.total == 5 and join.first["no_qa_record"] == "gold record 3: 'b'"
    join.check_total(5, "join")
    with pytest.raises(RuntimeError, match="expected 6"):
        join.check_total(6, "join")
    with pytest.raises(KeyError):
        join.add("scored")
    with pytest.raises(ValueError):
        ReasonCounts(JOIN_REASONS, counts={"bogus": 1})
    fates = join.carry(AAR_FATES, LOST_AT_JOIN)
    assert fates.counts["no_qa_record"] == 2 and fates.first == {"no_qa_record": join.first[
        "no_qa_record"]}
    fates.add("scored", n=2)
    fates.add("truncated_by_max_p_len", "gold record 1: 'd'")
    assert list(fates.counts) == list(AAR_FATES) and fates.total == 5 and fates.lost() == 3
    lines = reason_table({"sentence": fates}, join).splitlines()
    assert lines[0] == "| stage | reason | sentence |"
    assert "|  | gold records | 5 |" in lines
    assert "| join | answers joined by position | 3 |" in lines
    assert "| fate | lost: answer truncated away by max_p_len | 1 |" in lines
    assert len(lines) == 2 + 1 + len(JOIN_REASONS) + len(AAR_FATES)


def test_robustness_plot_has_one_panel_per_k_and_categorical_K(tmp_path, monkeypatch):
    """One panel per k, K at evenly spaced positions labelled by value, no shaded areas, and
    runs at the same value nudged apart so both stay visible."""
    from matplotlib.figure import Figure
    figs = []
    real_savefig = Figure.savefig

    def keep(self, *a, **kw):
        figs.append(self)
        return real_savefig(self, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    t = {run: {K: {1: 50.0 - K, 20: 100.0} for K in (0, 1, 2, 5, 20)} for run in ("a", "b")}
    topk_vs_distractors_plot(t, tmp_path / "r.png")
    (fig,) = figs
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["top-1", "top-20"]
    for ax in axes:
        assert [lbl.get_text() for lbl in ax.get_xticklabels()] == ["0", "1", "2", "5", "20"]
        assert list(ax.get_xticks()) == [0, 1, 2, 3, 4]
        assert not ax.collections  # no fill_between bands
    xa, xb = (line.get_xdata() for line in axes[1].get_lines())
    assert (xa != xb).all()  # both runs at 100 %: drawn side by side, not over each other
    assert os.path.getsize(tmp_path / "r.png") > 1000
