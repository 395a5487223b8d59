"""The share of namesake passages among the training hard negatives (issue 50 item 1): the
held-out ``namesake`` kind is not fully held out where training already shows such passages."""

import json
import os

import pytest
from helpers import load_tool

from dense_cf.studies import replicate as rep
from dense_cf.synthetic import distractors

WORLD = ["Marta Lindqvist (chemist)", "Marta Lindqvist (engineer)", "Oskar Brandt (painter)",
         "The Silent Harbour (1964 film)", "The Silent Harbour (1971 film)",
         "The Silent Harbour (1980 novel)", "1987 Eskholm Marathon", "1990 Eskholm Marathon",
         "Eskholm"]


def test_counts_by_hand():
    examples = [
        ("Marta Lindqvist (chemist)", ["Marta Lindqvist (engineer)", "Oskar Brandt (painter)",
                                       "Marta Lindqvist (chemist)"]),
        # a film and a novel of one name are not namesakes (the kind is part of the name key)
        ("The Silent Harbour (1964 film)", ["The Silent Harbour (1980 novel)",
                                            "The Silent Harbour (1971 film)"]),
        ("1987 Eskholm Marathon", ["1990 Eskholm Marathon"]),
        ("Eskholm", ["Oskar Brandt (painter)"]),      # no disambiguator: never a namesake
        ("Oskar Brandt (painter)", []),
    ]
    got = distractors.namesake_negative_counts(examples, WORLD)
    assert got == {"examples": 5, "hard_negatives": 7, "namesake": 3, "same_entity": 1,
                   "other": 3, "examples_with_namesake_negative": 3,
                   "positives_with_world_namesake": 3, "namesake_share": 3 / 7}
    assert distractors.name_key("The Silent Harbour (1964 film)") == "The Silent Harbour|film"
    assert distractors.name_key("Eskholm") is None


def test_a_title_outside_the_world_is_an_error():
    with pytest.raises(ValueError, match="training example 1: titles \\['Nobody \\(poet\\)'\\]"):
        distractors.namesake_negative_counts(
            [("Eskholm", []), ("Eskholm", ["Nobody (poet)"])], WORLD)


def _key(title):
    """The shared name, spelled out again from the world's title forms: "Name (1964 film)"
    (a work: its kind is part of the name), "1987 Name" (an event), "Name (occupation)"."""
    if title.endswith(")") and " (" in title:
        name, dis = title[:-1].rsplit(" (", 1)
        year, _, kind = dis.partition(" ")
        return f"{name}|{kind}" if year.isdigit() and len(year) == 4 and kind else name
    year, _, name = title.partition(" ")
    return name if year.isdigit() and len(year) == 4 and name else None


def _brute_force(data_dir):
    """The same count from the raw training file, without the module's reader."""
    train = json.load(open(os.path.join(data_dir, "biencoder-synth-train.json")))
    n = namesake = 0
    for ex in train:
        pos = ex["positive_ctxs"][0]["title"]
        for h in ex["hard_negative_ctxs"]:
            n += 1
            namesake += h["title"] != pos and _key(pos) is not None and _key(h["title"]) == _key(pos)
    return n, namesake


def test_per_world_and_world_seed_on_tiny_worlds(tmp_path):
    """Both worlds of the registry's runs (sibling and other-entity negatives), per world seed
    under --vary_world: generated, then read back from the training file and the corpus."""
    out = str(tmp_path)
    kw = dict(steps=2, model="tiny", num_passages=150, test_questions=40)
    rows = rep.namesake_negatives(["dpr", "dpr_h0", "dpr_oe", "picl_oe"], out, seeds=(0, 1),
                                  vary_world=True, **kw)
    assert [(r["world seed"], r["hard negatives"], r["runs"]) for r in rows] == [
        (0, "sibling", "dpr"), (0, "sibling", "dpr_h0"), (0, "other_entity", "dpr_oe, picl_oe"),
        (1, "sibling", "dpr"), (1, "sibling", "dpr_h0"), (1, "other_entity", "dpr_oe, picl_oe")]
    # dpr_h0 trains on in-batch negatives only: the file's hard negatives are not its.
    assert [r["in training"] for r in rows] == [True, False, True] * 2
    assert rep.namesake_cell(rows[1]).startswith("none: in-batch negatives only")
    for r in rows:
        cfg = rep.run_config(r["runs"].split(",")[0], out, seed=r["world seed"],
                             vary_world=True, **kw)
        assert r["world"] == os.path.basename(cfg.data.data_dir)
        n, namesake = _brute_force(cfg.data.data_dir)
        assert (r["hard_negatives"], r["namesake"]) == (n, namesake) and n > 0
        assert r["namesake"] + r["same_entity"] + r["other"] == n
        assert r["namesake_share"] == pytest.approx(namesake / n)
        if r["hard negatives"] == "other_entity":
            assert r["same_entity"] == 0   # the generator skips the gold entity's passages
        else:
            assert r["same_entity"] > 0    # sibling negatives: the gold entity's passages
    # Without --vary_world the seeds share world 0.
    assert [r["world seed"] for r in rep.namesake_negatives(["dpr_oe"], out, seeds=(0, 1),
                                                            **kw)] == [0]


def _claim(checks, pooled=None):
    return {"id": "c", "per_seed": {0: {"checks": checks}, 1: {"checks": checks}},
            "pooled": pooled}


def test_the_per_kind_rows_print_the_share_beside_the_namesake_kind():
    def entry(k0, k1, verdict):
        mid = rep.did_id("heldout", k0, k1, 5)
        return {"id": mid, "metric": rep.outcomes.metric(mid).label, "expect": "up",
                "diff_shown": 1.5, "95% CI": "[+0.10, +2.90]", "p at δ0": "0.04",
                "verdict": verdict}
    checks = [entry(0, 5, "reproduced"), entry(0, 1, "reproduced"), entry(2, 3, "reversed")]
    share = {"world": "w", "namesake": 16, "hard_negatives": 30, "namesake_share": 16 / 30}
    rows = rep.did_kind_rows([_claim(checks, {"checks": checks})],
                             {("c", 0): share, ("c", 1): {**share, "namesake": 0,
                                                          "namesake_share": 0.0}})
    # K 0→5 is not one kind; K 0→1 is the value swap, K 2→3 the namesake.
    assert [(r["seed"], r["kind"]) for r in rows] == [
        (s, k) for s in ("0", "1", "pooled") for k in ("value_swap", "namesake")]
    by = {(r["seed"], r["kind"]): r for r in rows}
    assert by["0", "value_swap"]["training negatives of this kind"] == "—"
    assert by["0", "namesake"]["training negatives of this kind"] == (
        "53.3 % of the training hard negatives are namesake passages (16 of 30, w): "
        "not fully held out")
    assert by["1", "namesake"]["training negatives of this kind"].endswith("(0 of 30, w): held out")
    pooled = by["pooled", "namesake"]["training negatives of this kind"]
    assert pooled.startswith("seed 0: 53.3 %") and "; seed 1: 0.0 %" in pooled
    assert by["0", "namesake"]["verdict"] == "reversed"
    assert rep.namesake_cell(None) == "not measured"


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
    return load_tool("measure_namesake_negatives")


def test_the_documented_shares_are_the_measured_ones():
    """docs/replication.md states no share by hand: its table is the tool's markdown of the
    stored measurement, which covers both worlds at world seeds 0-2."""
    tool = _tool()
    stored = json.load(open(os.path.join(ROOT, "docs", "results", "namesake_negatives.json")))
    text = open(os.path.join(ROOT, "docs", "replication.md"), encoding="utf-8").read()
    block = text[text.index(tool.BEGIN) + len(tool.BEGIN):text.index(tool.END)]
    assert block.strip() == tool.markdown(stored).strip()
    assert {(r["world seed"], r["hard negatives"]) for r in stored["rows"]} == {
        (s, h) for s in (0, 1, 2) for h in ("sibling", "other_entity")}
    for r in stored["rows"]:
        assert r["namesake"] + r["same_entity"] + r["other"] == r["hard_negatives"]
        assert r["namesake_share"] == pytest.approx(r["namesake"] / r["hard_negatives"])
    assert stored["stamp"]["commit"] and stored["stamp"]["dirty"] is False
