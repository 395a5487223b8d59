"""Retrieval result files: DPR's results JSON and TREC run/qrels files (docs/method.md §6).

DPR's ``dense_retriever.py`` ``save_results`` writes ``json.dumps(merged, indent=4) + "\\n"``
where ``merged`` is a list of ``{"question", "answers", "ctxs": [{"id", "title", "text",
"score", "has_answer"}]}``, with ``score`` written as ``str(score)`` (a numpy float32 from
faiss, so e.g. ``"80.67729"``). We write the same bytes for the same inputs; ids pass through
unchanged (DPR ids look like ``"wiki:123"`` or plain ``"123"``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Sequence

import numpy as np

from dense_cf.eval.metrics import Retrieved, hits_for_question
from dense_cf.eval.report import atomic_open

__all__ = [
    "hits_from_results",
    "read_dpr_results",
    "retrieved_from_results",
    "write_dpr_results",
    "write_trec_qrels",
    "write_trec_run",
]

_WS = re.compile(r"\s")


def _py(value: Any) -> Any:
    # numpy scalars (e.g. int64 ids) are not JSON-serialisable; everything else passes through.
    return value.item() if isinstance(value, np.generic) else value


def _score_str(score: Any) -> str:
    # str() of the numpy scalar, as DPR does on faiss's float32 scores; for a Python float this
    # equals str(score), and a 0-d jax/numpy array becomes its numpy scalar first.
    return str(np.asarray(score)[()])


def write_dpr_results(path: str | os.PathLike, questions: Sequence[str],
                      answers_list: Sequence[Sequence[str]],
                      retrieved: Sequence[Sequence[Retrieved]],
                      hits: Sequence[Sequence[bool]] | None = None, *, mode: str = "string",
                      score_as_str: bool = True) -> None:
    """Write DPR's retrieval results JSON (DPR ``save_results`` format), atomically.

    ``retrieved[i]`` is the ranked list of ``(pid, title, text, score)``. ``hits`` are the
    per-passage ``has_answer`` flags; when None they are computed with ``mode`` (docs/method.md §6).
    ``score_as_str=False`` writes scores as JSON numbers instead of DPR's strings.
    """
    n = len(questions)
    if not (len(answers_list) == n == len(retrieved)):
        raise ValueError(f"length mismatch: {n} questions, {len(answers_list)} answer lists, "
                         f"{len(retrieved)} result lists")
    if hits is None:
        hits = [hits_for_question(a, [p[2] for p in r], mode)
                for a, r in zip(answers_list, retrieved)]
    elif len(hits) != n:
        raise ValueError(f"{len(hits)} hit lists for {n} questions")
    merged = []
    for i, question in enumerate(questions):
        if len(hits[i]) != len(retrieved[i]):
            # DPR writes len(hits) contexts; a mismatch would silently drop or misalign them.
            raise ValueError(f"question {i}: {len(hits[i])} hit flags for "
                             f"{len(retrieved[i])} passages")
        merged.append({
            "question": question,
            "answers": list(answers_list[i]),
            "ctxs": [
                {
                    "id": _py(pid),
                    "title": title,
                    "text": text,
                    "score": _score_str(score) if score_as_str else float(score),
                    "has_answer": bool(hit),
                }
                for (pid, title, text, score), hit in zip(retrieved[i], hits[i])
            ],
        })
    # json.dump streams the same text as DPR's json.dumps(merged, indent=4) without building
    # one multi-hundred-MB string for a full test set.
    with atomic_open(path) as f:
        json.dump(merged, f, indent=4)
        f.write("\n")


def read_dpr_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Load a DPR results JSON (ours or DPR's) as the list of per-question dicts."""
    with open(path, encoding="utf-8-sig") as f:  # -sig: a leading byte-order mark is dropped
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of questions, got {type(data).__name__}")
    return data


def retrieved_from_results(results: Sequence[dict[str, Any]]) -> list[list[Retrieved]]:
    """Ranked ``(id, title, text, float score)`` lists from loaded DPR results."""
    return [[(c["id"], c.get("title"), c.get("text"), float(c["score"])) for c in r["ctxs"]]
            for r in results]


def hits_from_results(results: Sequence[dict[str, Any]]) -> list[list[bool]]:
    """Per-question ``has_answer`` lists stored in loaded DPR results."""
    return [[bool(c["has_answer"]) for c in r["ctxs"]] for r in results]


def _qids(qids: Sequence[Any] | None, n: int) -> list[str]:
    out = [str(i) for i in range(n)] if qids is None else [str(_py(q)) for q in qids]
    if len(out) != n:
        raise ValueError(f"{len(out)} question ids for {n} questions")
    if len(set(out)) != n:
        raise ValueError("question ids must be unique")
    return out


def _field(value: Any, what: str) -> str:
    # TREC files are whitespace-separated: an id with a space would shift every column.
    s = str(_py(value))
    if not s or _WS.search(s):
        raise ValueError(f"{what} {s!r} is empty or contains whitespace")
    return s


def write_trec_run(path: str | os.PathLike, qids: Sequence[Any] | None,
                   retrieved: Sequence[Sequence[Retrieved]], run_name: str = "dense_cf",
                   score_fmt: str | None = None) -> None:
    """Write a TREC run: ``qid Q0 docid rank score run_name`` per line, atomically.

    Passages are sorted by descending score (stable: ties keep retrieval order) and ranked
    from 1. ``qids`` defaults to the 0-based question index. Scores print as ``repr(float)``
    (exact, so no ties are introduced) unless ``score_fmt`` is given, e.g. ``".6f"`` as
    pyserini writes; both parse with trec_eval and pyserini. Duplicate docids within a
    query are rejected (trec_eval refuses them).
    """
    ids = _qids(qids, len(retrieved))
    tag = _field(run_name, "run_name")
    with atomic_open(path) as f:
        for qid, row in zip(ids, retrieved):
            qid = _field(qid, "qid")
            order = sorted(range(len(row)), key=lambda j: -float(row[j][3]))
            seen: set[str] = set()
            for rank, j in enumerate(order, start=1):
                docid = _field(row[j][0], "docid")
                if docid in seen:
                    raise ValueError(f"query {qid}: docid {docid} retrieved twice")
                seen.add(docid)
                score = float(row[j][3])
                s = repr(score) if score_fmt is None else format(score, score_fmt)
                f.write(f"{qid} Q0 {docid} {rank} {s} {tag}\n")


def write_trec_qrels(path: str | os.PathLike, qids: Sequence[Any] | None,
                     hits: Sequence[Sequence[bool]],
                     retrieved: Sequence[Sequence[Retrieved]]) -> None:
    """Write TREC qrels ``qid 0 docid rel`` with rel = has_answer (1/0) of each retrieved passage.

    Only retrieved passages are judged, so the qrels reproduce the run's answer-bearing
    labels (docs/method.md §6) rather than true corpus-wide relevance; a passage retrieved twice for one
    query is written once (relevant if any copy was). trec_eval normally leaves queries with
    no relevant document out of its averages, whereas our top-k and MRR count them as misses,
    so its recip_rank is comparable with :func:`~dense_cf.eval.metrics.mrr` only after
    rescaling by the share of queries that have a hit.
    """
    ids = _qids(qids, len(retrieved))
    if len(hits) != len(retrieved):
        raise ValueError(f"{len(hits)} hit lists for {len(retrieved)} questions")
    with atomic_open(path) as f:
        for qid, row, flags in zip(ids, retrieved, hits):
            qid = _field(qid, "qid")
            if len(flags) != len(row):
                raise ValueError(f"query {qid}: {len(flags)} hit flags for {len(row)} passages")
            rel: dict[str, int] = {}
            for passage, hit in zip(row, flags):
                docid = _field(passage[0], "docid")
                rel[docid] = max(rel.get(docid, 0), int(bool(hit)))
            for docid, r in rel.items():
                f.write(f"{qid} 0 {docid} {r}\n")
