"""One-off migration (issue 48): writes the machine-readable sibling ``x.rows.json`` of each
stored report under docs/results that ``tools/rederive_claims.py`` reads, from its markdown.

``python tools/migrate_results_json.py [--results docs/results] [--check]``

This is the one place that parses the old markdown tables (by regex); reports written since
issue 48 get their sibling from the code that writes the markdown (``eval.report.write_rows``),
and rederive_claims reads only the siblings. Each row is keyed by its metric id
(``eval.outcomes``): a stored label is mapped to the id whose label it is, and the mapping is
checked both ways (an unknown label fails, naming the file). ``--check`` rewrites nothing and
exits 1 when a sibling differs from what the markdown gives.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from dense_cf.eval import claims as C
from dense_cf.eval import outcomes
from dense_cf.eval import report as report_lib

# The replicate reports (their per-claim tables), in the order rederive_claims reads them.
REPLICATE = ("replicate_seed0.md", "replicate_h0_seeds012.md", "replicate_dcsr_300steps_seed0.md",
             "replicate_attribution_seed0.md", "replicate_mixed20k_seeds012.md",
             "replicate_oe_seeds012.md", "replicate_h0_tau02_seeds012.md",
             "replicate_bm25_seeds012.md", "replicate_ablation_seeds012.md",
             "replicate_dcsr_manyq_seeds012.md")
# Other reports: {file pattern: {table name: the line the table follows}}.
MULTIHOP = {"retrieval": "## Paired on the same test questions"}
MULTIHOP_READER = {**MULTIHOP, "reader": "Paired on the same questions"}
OTHER = {"multihop_60steps_seed0.md": MULTIHOP,
         r"multihop_reader_60steps_seed\d+\.md": MULTIHOP_READER,
         "demo_2026-11-28.md": {"em: picl vs dpr": "### EM: picl (B) against dpr (A)"}}
DATA_STATS = r"data_stats_seed(\d+)\.md"


def _sections(text: str) -> list[tuple[str, int, str]]:
    """``(claim id, seed, its table)`` of a replicate report, in file order."""
    return [(m.group(1), int(m.group(2)), m.group(3)) for m in re.finditer(
        r"^## (\S+) \(seed (\d+)\):.*?\n\n(?:[^|\n].*\n\n)?((?:\|.*\n?)+)", text, re.M)]


def _table_after(text: str, marker: str) -> str:
    rest = text[text.index(marker):]
    m = re.search(r"((?:^\|.*\n?)+)", rest, re.M)
    return m.group(1) if m else ""


def _label_id(label: str, where: str) -> str:
    """The metric id whose display label is ``label``."""
    ids = [*outcomes.METRICS, *(f"e2e.{x}@{k}" for x in ("em", "f1") for k in range(1, 101)),
           *(f"multihop.{r}.r@{k}" for r in ("chain", "mdr", "hop1", "hop2", "answer")
             for k in range(1, 101))]
    by_label = {outcomes.metric(i).label: i for i in ids}
    mid = by_label.get(label)
    if mid is None:
        m = re.fullmatch(r"AAR \((\w+)\)", label)
        mid = f"aar.sentence.type.{m.group(1)}" if m else None
    if mid is None:
        m = re.fullmatch(r"top-(\d+): (\S+)", label)
        mid = f"retrieval.top{m.group(1)}.domain.{m.group(2)}" if m else None
    if mid is None or outcomes.metric(mid).label != label:
        raise ValueError(f"{where}: no metric id has the label {label!r}")
    return mid


def _keyed(table: str, where: str, rename: dict[str, str] | None = None
           ) -> dict[str, dict[str, str]]:
    out = {}
    for row in C.parse_check_table(table):
        mid = _label_id(row.pop("metric"), where)
        out[mid] = {(rename or {}).get(k, k): v for k, v in row.items()}
    return out


def replicate_rows(path: str) -> dict:
    text = open(path, encoding="utf-8").read()
    name = os.path.basename(path)
    return {"tables": [{"claim": cid, "seed": seed, "rows": _keyed(t, f"{name} {cid}")}
                       for cid, seed, t in _sections(text)]}


def data_stats_rows(path: str) -> dict:
    """The swap and trend tables (the trend's ρ cell as ``B − A``, as the study's claim rows
    hold it) and the per-fraction series: from the study's summary stored beside the report
    (``data_stats_seedN.json``, full precision) where there is one, else the report's table
    (1 decimal)."""
    text = open(path, encoding="utf-8").read()
    name = os.path.basename(path)
    summary = path[:-3] + ".json"
    if os.path.exists(summary):
        with open(summary, encoding="utf-8") as f:
            fractions, source = json.load(f)["table"], os.path.basename(summary)
    else:
        fractions = C.parse_check_table(_table_after(text, "| fraction |"))
        source = name + " (per-fraction table, 1 decimal)"
    return {"fractions": fractions, "fractions_from": source, "tables": {
        "swap": _keyed(_table_after(text, "Passage encoder 40 % vs 100 %"), name),
        "trend": _keyed(_table_after(text, "| metric | n | ρ |"), name, {"ρ": "B − A"})}}


def other_rows(path: str, markers: dict[str, str]) -> dict:
    text = open(path, encoding="utf-8").read()
    name = os.path.basename(path)
    return {"tables": {t: _keyed(_table_after(text, marker), f"{name} {t}")
                       for t, marker in markers.items() if marker in text}}


def siblings(results: str) -> dict[str, dict]:
    """``{report file: its sibling's content}`` for every report rederive_claims reads."""
    out = {}
    for name in sorted(os.listdir(results)):
        path = os.path.join(results, name)
        if name in REPLICATE:
            out[name] = replicate_rows(path)
        elif re.fullmatch(DATA_STATS, name):
            out[name] = data_stats_rows(path)
        else:
            for pattern, markers in OTHER.items():
                if re.fullmatch(pattern, name):
                    out[name] = other_rows(path, markers)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="docs/results")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    stale = []
    for name, content in siblings(args.results).items():
        path = os.path.join(args.results, name)
        if args.check:
            try:
                stored = report_lib.read_rows(path)
            except FileNotFoundError:
                stale.append(name)
                continue
            if stored != json.loads(json.dumps({"report": name, **content}, ensure_ascii=False)):
                stale.append(name)
        else:
            print(report_lib.write_rows(path, content.pop("tables"), **content))
    if stale:
        print("siblings missing or different from the markdown: " + ", ".join(stale))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
