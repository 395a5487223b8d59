"""docs/replication.md "In short" reports the other-entity AA scores against the untrained
checkpoint (issue 50 item 1: DPR ends below it). Its figures are held to the stored report:
the rows sibling's AA cells and the untrained checkpoint the report measured."""

import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")


def _aa(claim):
    """{seed: (A, B)} AA score (%) of ``claim`` in replicate_oe_seeds012 (its rows sibling)."""
    sib = json.load(open(os.path.join(RESULTS, "replicate_oe_seeds012.rows.json")))
    return {t["seed"]: tuple(float(t["rows"]["aar.answer"][c].split()[0]) for c in ("A", "B"))
            for t in sib["tables"] if t["claim"] == claim}


def test_in_short_states_the_stored_aa_against_the_untrained_checkpoint():
    report = json.load(open(os.path.join(RESULTS, "replicate_oe_seeds012.json")))
    (untrained,) = [u["AA score (%)"] for u in report["untrained"]
                    if u["world"].endswith("other_entity")]
    picl, eadpr = _aa("picl-robust-oe"), _aa("eadpr-aa-oe")
    assert sorted(picl) == sorted(eadpr) == [0, 1, 2]
    assert all(picl[s][0] == eadpr[s][0] for s in picl)  # the same DPR runs

    def seq(xs, fmt):
        xs = [format(x, fmt) for x in xs]
        return ", ".join(xs[:-1]) + " and " + xs[-1]
    dpr = [picl[s][0] for s in (0, 1, 2)]
    want = [
        f"DPR's AA ends at {seq(dpr, '.2f')} % against the untrained model's {untrained:.2f} %",
        f"PiCL's AA is {seq([picl[s][1] - untrained for s in (0, 1, 2)], '+.1f')} points "
        f"({', '.join(f'{picl[s][1]:.2f}' for s in (0, 1, 2))} %)",
        f"EADPR's {seq([eadpr[s][1] - untrained for s in (0, 1, 2)], '+.1f')}",
    ]
    text = " ".join(open(os.path.join(ROOT, "docs", "replication.md"),
                         encoding="utf-8").read().split())
    for sentence in want:
        assert sentence in text, sentence
    assert sum(a < untrained for a in dpr) == 2  # "DPR ends below it" in 2 of 3 seeds
