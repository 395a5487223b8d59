"""The share of namesake passages among the training hard negatives, per world of the
replication runs and per world seed (issue 50 item 1): the held-out ``namesake`` distractor
kind imitates these passages, so where training shows them that kind is not fully held out.

``python tools/measure_namesake_negatives.py --out /tmp/worlds [--seeds 0,1,2]
[--runs dpr,dpr_oe] [--json docs/results/namesake_negatives.json]``

Each world is the one ``studies.replicate --vary_world`` trains the run in at that seed (the
registry's own config, 2,000 passages, 300 test questions); a world not under ``--out`` is
generated there first (seconds). Counts: ``distractors.namesake_negative_counts`` over the
training file and the world's corpus. Prints the markdown table docs/replication.md holds
(:func:`markdown`; tests/test_namesake_negatives.py checks the doc against the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Sequence

from dense_cf.eval import report as report_lib
from dense_cf.files import code_version, utc_now, write_json
from dense_cf.studies import replicate as rep

# docs/replication.md holds markdown() of docs/results/namesake_negatives.json between these.
BEGIN = "<!-- namesake negatives: tools/measure_namesake_negatives.py -->"
END = "<!-- end of namesake negatives -->"
COLUMNS = ["world seed", "hard negatives", "runs", "hard negatives in the training file",
           "namesake passages",
           "share (%)", "examples with one", "positives with a namesake in the world"]


def measure(out: str, runs: Sequence[str], seeds: Sequence[int]) -> dict[str, Any]:
    """The rows of :func:`studies.replicate.namesake_negatives` at the registry's budget."""
    budget = {"steps": 100, "num_passages": 2000, "test_questions": 300, "vary_world": True}
    started = utc_now()
    rows = rep.namesake_negatives(runs, out, seeds, **budget)
    return {"rows": rows, "runs": list(runs), "seeds": list(seeds), "budget": budget,
            "stamp": {**code_version(), "started": started, "finished": utc_now()}}


def markdown(result: dict[str, Any]) -> str:
    """The table docs/replication.md shows."""
    for r in result["rows"]:
        if not r["in training"]:
            raise ValueError(f"{r['runs']}: trained on in-batch negatives only; measure runs "
                             "that train on the world's hard negatives")
    return report_lib.markdown_table([
        {"world seed": r["world seed"], "hard negatives": r["hard negatives"], "runs": r["runs"],
         "hard negatives in the training file": r["hard_negatives"], "namesake passages": r["namesake"],
         "share (%)": f"{100 * r['namesake_share']:.1f}" if r["hard_negatives"] else "—",
         "examples with one": f"{r['examples_with_namesake_negative']} of {r['examples']}",
         "positives with a namesake in the world":
             f"{r['positives_with_world_namesake']} of {r['examples']}"}
        for r in result["rows"]], COLUMNS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where the worlds are (generated if absent)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--runs", default="dpr,dpr_oe",
                    help="registry runs whose worlds to measure (one row per distinct world)")
    ap.add_argument("--json", default="", help="also write the result here")
    args = ap.parse_args()
    res = measure(args.out, args.runs.split(","), [int(s) for s in args.seeds.split(",")])
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        write_json(args.json, res)
    print(markdown(res))
    print(json.dumps(res["stamp"]))


if __name__ == "__main__":
    main()
