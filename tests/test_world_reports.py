"""The world-draw report of issue 50 item 2 (``studies.replicate --vary_world``) is a registered
report of tools/rederive_claims.py: read when stored, its claims take every seed from it, and
its difference-in-differences rows pool over seeds as the live report does."""

import json
import os
import shutil
from types import SimpleNamespace

import pytest
from helpers import load_tool

from dense_cf.eval import claims as C
from dense_cf.eval import report as report_lib
from dense_cf.studies import replicate as rep
from dense_cf.studies.registry import CLAIMS_BY_ID

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")


def _tool():
    return load_tool("rederive_claims")


def _results_copy(tmp_path):
    """The stored reports as they were before any world-draw report (the tests write their
    own): every report but the stored WORLD_REPORTS."""
    worlds = tuple(w[:-len(".md")] + "." for w in _tool().WORLD_REPORTS)
    for name in os.listdir(RESULTS):
        if name.startswith(worlds):
            continue
        if name.endswith((".md", ".rows.json")) or name.startswith("data_stats_seed"):
            shutil.copy(os.path.join(RESULTS, name), tmp_path / name)
    return str(tmp_path)


def _did_entries(seed):
    """picl-robust-did-oe's checks on made-up per-item outcomes (B loses less at K = 5)."""
    n = 60
    qs = [f"q{i}" for i in range(n)]

    def run(clean, hard):
        return SimpleNamespace(robustness={
            "questions": qs, "first_hit_rank": {0: clean},
            "heldout": {"questions": qs, "kinds": ["value_swap", "paraphrase", "namesake"],
                        "first_hit_rank": {5: hard}}})
    a = run([1] * 50 + [None] * 10, [1] * (20 - seed) + [None] * (40 + seed))
    b = run([1] * 52 + [None] * 8, [1] * (30 + seed) + [None] * (30 - seed))
    rows = rep.did_rows(a, b, ("A", "B"), specs=[("heldout", 0, 5)], n_resamples=300)
    return C.evaluate_checks(rows, CLAIMS_BY_ID["picl-robust-did-oe"].checks, ("A", "B"))


def _write_world_report(results, name, tables, vary_world=True):
    path = os.path.join(results, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("# a world-draw report (fixture)\n")
    report_lib.write_rows(path, tables)
    with open(path[:-3] + ".json", "w", encoding="utf-8") as f:
        json.dump({"setup": {"vary_world": vary_world, "seeds": [0, 1, 2]}}, f)


def test_the_world_report_is_registered_and_replaces_a_claims_seeds(tmp_path):
    tool = _tool()
    assert "replicate_worlds_seeds012.md" in tool.WORLD_REPORTS
    assert not set(tool.WORLD_REPORTS) & set(tool.REPORTS)
    results = _results_copy(tmp_path)
    before = tool.rederive(results)
    assert [r["seed"] for r in before if r["claim"] == "picl-aar-oe"] == ["0", "pooled 0,1,2"]
    assert [r["verdict"] for r in before if r["claim"] == "picl-robust-did-oe"] == [
        "not run (no stored result at the current setting)"]
    live = {s: _did_entries(s) for s in (0, 1, 2)}
    aar_oe = next(t for t in report_lib.read_rows(os.path.join(
        results, "replicate_oe_seeds012.md"))["tables"]
        if t["claim"] == "picl-aar-oe" and t["seed"] == 0)
    name = "replicate_worlds_seeds012.md"
    _write_world_report(results, name, [
        *({"claim": "picl-robust-did-oe", "seed": s,
           "rows": report_lib.keyed_rows(e, rep.CHECK_COLUMNS)} for s, e in live.items()),
        {"claim": "picl-aar-oe", "seed": 0, "rows": aar_oe["rows"]}])
    rows = tool.rederive(results)
    did = [r for r in rows if r["claim"] == "picl-robust-did-oe"]
    assert [(r["seed"], r["report"]) for r in did] == [("0", name), ("pooled 0,1,2", name)]
    # The stored rows pool as the live ones do: the exact sign-flip test over every item.
    pooled_live = C.pool_claim(list(live.values()))
    assert did[1]["verdict"] == pooled_live["verdict_text"]
    stored = C.rejudge(tool._rows(report_lib.read_rows(os.path.join(results, name))[
        "tables"][0]["rows"]), CLAIMS_BY_ID["picl-robust-did-oe"].checks)
    assert stored[0]["did_hist"] == live[0][0]["did_hist"]
    for got, want in zip(C.pool_claim([
            C.rejudge(tool._rows(t["rows"]), CLAIMS_BY_ID["picl-robust-did-oe"].checks)
            for t in report_lib.read_rows(os.path.join(results, name))["tables"][:3]])["checks"],
            pooled_live["checks"]):
        assert got["test"] == want["test"] and got["p_null"] == pytest.approx(want["p_null"])
    # A claim the world report holds takes no seed from the one-world reports.
    assert [(r["seed"], r["report"]) for r in rows if r["claim"] == "picl-aar-oe"] == [
        ("0", name)]
    # Claims it does not hold are as before.
    keep = {(r["claim"], r.get("seed")): r for r in before
            if r["claim"] not in ("picl-aar-oe", "picl-robust-did-oe")}
    after = {(r["claim"], r.get("seed")): r for r in rows
             if r["claim"] not in ("picl-aar-oe", "picl-robust-did-oe")}
    assert after == keep


def test_a_world_report_must_say_it_varied_the_world(tmp_path):
    tool = _tool()
    results = _results_copy(tmp_path)
    name = tool.WORLD_REPORTS[0]
    _write_world_report(results, name, [], vary_world=False)
    with pytest.raises(ValueError, match="setup.vary_world is False"):
        tool.rederive(results)
    os.remove(os.path.join(results, name[:-3] + ".json"))
    with pytest.raises(ValueError, match="missing; a world-draw report needs the JSON"):
        tool.rederive(results)
