"""Markdown report writers; JSON and every other file go through the atomic writer in
``dense_cf.files`` (re-exported here for report code)."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

import numpy as np

from dense_cf.eval.stats import DEFAULT_RESAMPLES
from dense_cf.files import atomic_open, to_jsonable, write_json

__all__ = ["COLUMNS", "JSON_UNITS", "ROWS_SUFFIX", "atomic_open", "columns_section",
           "keyed_rows", "markdown_table", "read_rows", "rows_name", "to_jsonable", "write_json",
           "write_markdown", "write_rows"]

# What every report column means (docs/reports.md lists the same). Markdown shows every rate
# (top-k, MRR, AAR, AA score) as a percentage; score gaps stay in similarity units.
COLUMNS: dict[str, str] = {
    "top-k": "percentage of test questions with an answer-bearing passage (DPR has_answer, "
             "docs/method.md §6) among the first k retrieved",
    "MRR": "mean over questions of 1/rank of the first answer-bearing passage (0 if none in the "
           "retrieved list), as a percentage (MRR × 100)",
    "AAR": "answer-aware rate (PiCL eq. 3): percentage of (q, p+, p*) triplets with "
           "sim(q,p+) > sim(q,p*), p* being p+ without its answer-bearing sentence "
           "(`sentence` strategy, docs/method.md §5); a tie counts as unaware",
    "AA score": "EADPR's answer-awareness score: AAR with p* = p+ with the answer string masked "
                "(`answer` strategy)",
    "mean diff": "score gap: mean of sim(q,p+) − sim(q,p*) (dot products of the encoders' "
                 "vectors) over the triplets; `aware` = triplets with gap > 0, `unaware` = the "
                 "rest",
    "triplets": "gold records scored: (question, gold passage p+, counterfactual p*) triplets; "
                "the others are counted by reason in the Triplets table",
    "95% CI": "95 % interval: Wilson for rates (top-k, AAR, AA score), percentile bootstrap "
              f"({DEFAULT_RESAMPLES:,} resamples, seed 0) for MRR and mean gaps",
    "K": "synthetic near-duplicate distractors added to the corpus per test question "
         "(the gold passage with its evidence removed, docs/method.md §5)",
    "top-k (corpus)": "top-k counting hits on the original corpus passages only",
    "corpus": "passages in the index: the corpus plus the distractors added at this K",
    "distractors/q": "distractors actually added per question, on average (a question with "
                     "fewer than K distinct answer-free variants gets all it has)",
    "questions short": "questions with fewer than K distractors available",
    "retrieved distractors": "distractors among all questions' retrieved lists (top k, every "
                             "question)",
    "with answer": "retrieved distractors of OTHER questions that happen to contain the answer "
                   "(counted as hits, as DPR's has_answer does; a question's own distractors "
                   "never contain it)",
    "corpus-only top-k": "top-k (%) counting only answer-bearing corpus passages, not distractors",
    "distractors above 1st corpus hit": "mean number of distractors ranked above the first "
                                        "answer-bearing corpus passage, over questions with one",
    "own above 1st corpus hit": "the same, counting only the question's own distractors",
    "Q marginal": "eq. 7 (docs/method.md §7): the question encoder's top-k (%) averaged over "
                  "every passage encoder; `P marginal` likewise for the passage encoder; "
                  "`tandem` = the encoder pair trained together; `% tandem` / `% in-domain` = "
                  "the marginal as a percentage of the tandem's / in-domain run's top-k",
    "chain R@k": "multi-hop (docs/multihop.md): percentage of questions with a chain holding "
                 "both supporting passages among the top-k passage chains (beam search, best "
                 "chain score s(q,p1) + s(q⊕p1,p2) first)",
    "MDR R@k": "multi-hop: percentage of questions whose two supporting passages are both "
               "among the passages of the top-k chains (MDR's passage EM)",
    "hop-1 R@k": "multi-hop: percentage of questions with the first-hop passage (either "
                 "passage of a comparison question) among the top k for the question alone",
    "hop-2 R@k": "multi-hop: percentage of questions with the second-hop passage among the top "
                 "k (other than p1) for the hop-2 query built from the gold first-hop passage",
    "answer R@k": "multi-hop: percentage of questions (yes/no answers left out) with the answer "
                  "(DPR has_answer on 'title text') in a passage of the top-k chains",
    "AAR (hop)": "multi-hop answer-awareness: percentage of triplets (query, p, p*) with "
                 "sim(query,p) > sim(query,p*), p* the supporting passage without its "
                 "supporting sentence(s); hop 1 queries with the question, hop 2 with "
                 "question ⊕ gold p1",
    "EM@k": "end-to-end exact match: percentage of test questions whose reader answer, read "
            "from the retriever's first k passages, equals a gold answer after SQuAD/DPR "
            "normalisation (docs/readers.md)",
    "F1@k": "mean over test questions of the best token F1 between the reader answer and a gold "
            "answer, as a percentage",
    "train loss": "mean training loss over the last `train.log_every` steps",
    "train l_dpr": "its DPR term (docs/method.md §3)",
    "dev loss": "loss on the dev set at the final evaluation",
    "dev rank_acc": "share of dev questions whose positive scores above every in-batch and hard "
                    "negative",
}

# The scale of each rate in report JSON files (written as ``"units"`` in each of them). JSON
# keeps the scales it always had, so older runs still compare: top-k in percent, fractions for
# the rest.
JSON_UNITS: dict[str, str] = {
    "top_k": "percent (0-100)", "top_k_corpus": "percent (0-100)", "top_k_ci": "percent (0-100)",
    "mrr": "fraction (0-1)", "mrr_ci": "fraction (0-1)", "aar": "fraction (0-1)",
    "aar_ci": "fraction (0-1)", "score_diff": "similarity (dot product)",
    "score_diff_ci": "similarity (dot product)", "matrix": "percent (0-100)",
    "matrix_ci": "percent (0-100)", "mrr_matrix": "fraction (0-1)",
    "em": "percent (0-100)", "em_ci": "percent (0-100)", "f1": "percent (0-100)",
    "f1_ci": "percent (0-100)",
}


def columns_section(names: Sequence[str]) -> tuple[str, str]:
    """A ``("Columns", text)`` section defining ``names`` (keys of :data:`COLUMNS`)."""
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise KeyError(f"no definition for report column(s) {unknown}; add them to COLUMNS")
    return "Columns", "\n".join(f"- **{n}**: {COLUMNS[n]}." for n in names)


def _cell(value: Any, floatfmt: str) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, floatfmt)
    # Pipes and newlines would break the table row.
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str],
                   floatfmt: str = ".2f") -> str:
    """GitHub markdown table of ``rows`` restricted to ``columns`` (missing cells empty).

    Floats use ``floatfmt``; ints, bools and strings print as is. Numeric columns are
    right-aligned.
    """
    if not columns:
        raise ValueError("markdown_table needs at least one column")

    def numeric(col: str) -> bool:
        vals = [r.get(col) for r in rows if r.get(col) is not None]
        return bool(vals) and all(isinstance(v, (int, float, np.number))
                                  and not isinstance(v, bool) for v in vals)

    header = "| " + " | ".join(_cell(c, floatfmt) for c in columns) + " |"
    rule = "|" + "|".join("---:" if numeric(c) else "---" for c in columns) + "|"
    body = ["| " + " | ".join(_cell(r.get(c), floatfmt) for c in columns) + " |" for r in rows]
    return "\n".join([header, rule, *body])


# The machine-readable sibling of a markdown report: its paired tables keyed by metric id
# (``x.md`` -> ``x.rows.json``); tools/rederive_claims.py reads these, never the markdown.
ROWS_SUFFIX = ".rows.json"


def rows_name(report: str) -> str:
    """The sibling of report ``report`` (a path or file name ending in ``.md``)."""
    if not report.endswith(".md"):
        raise ValueError(f"{report}: a report's rows sibling needs a .md name")
    return report[:-3] + ROWS_SUFFIX


def keyed_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str],
               floatfmt: str = ".2f") -> dict[str, dict[str, str]]:
    """``{row id: {column: cell}}`` of paired rows (each with its metric ``id``): the cells
    exactly as :func:`markdown_table` prints them, the ``metric`` label left out (it follows
    from the id: ``eval.outcomes.metric``)."""
    out: dict[str, dict[str, str]] = {}
    for r in rows:
        if "id" not in r:
            raise ValueError(f"row {r.get('metric')!r} has no metric id")
        if r["id"] in out:
            raise ValueError(f"metric id {r['id']} appears twice in one table")
        out[r["id"]] = {c: _cell(r.get(c), floatfmt) for c in columns if c != "metric"}
    return out


def write_rows(report: str | os.PathLike, tables: dict[str, Any], **extra: Any) -> str:
    """Writes ``report``'s sibling (:func:`rows_name`): ``{"report": its file name, "tables":
    tables, **extra}`` (``tables``: name -> :func:`keyed_rows`, or a list of such entries);
    returns its path."""
    path = rows_name(os.fspath(report))
    write_json(path, {"report": os.path.basename(os.fspath(report)), **extra, "tables": tables},
               indent=1)
    return path


def read_rows(report: str | os.PathLike) -> dict[str, Any]:
    """The sibling of ``report`` (:func:`write_rows`); ``FileNotFoundError`` naming it when
    absent."""
    path = rows_name(os.fspath(report))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no rows sibling of {report} (tools/"
                                "migrate_results_json.py writes those of the stored reports)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_markdown(path: str | os.PathLike, title: str,
                   sections: Sequence[tuple[str, str]]) -> None:
    """Write a markdown file: ``# title`` then ``## heading`` + text per section, atomically."""
    parts = [f"# {title}", ""]
    for heading, text in sections:
        parts += [f"## {heading}", "", text.rstrip("\n"), ""]
    with atomic_open(path) as f:
        f.write("\n".join(parts))
