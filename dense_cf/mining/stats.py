"""Training-data statistics of a DPR biencoder file (docs/method.md §7; encoder attribution paper §6).

``python -m dense_cf.cli.stats --input biencoder.json[.gz] [--threshold 2] [--alpha 1.3]
[--fractions 0.1,0.25,...,1.0] [--seed 0] [--positives first|all] [--out stats.json]``

For the whole file and for uniform random subsets of it (the data-efficiency setting):

* **corpus coverage** = number of distinct positive passages. A passage is identified by its
  ``passage_id`` when the record has one, else by (title, text) -- the paper's "different
  texts and titles".
* **positive passage overlap** = share of the distinct positive passages that are the positive
  of at least ``threshold`` training questions. docs/method.md §7 reads the definition as "more than one
  question" (default ``threshold = 2``); the paper's wording ("can answer more than two
  training questions") corresponds to ``threshold = 3``.
* **unique passage coverage** = coverage × (1 − overlap)^α, α = 1.3 (paper, Table 3).

* **hard negatives from the positive's article** = share of ``hard_negative_ctxs`` whose title
  is a counted positive's title (case and spacing ignored; a disambiguated title such as
  "Mercury (planet)" is another article), and the examples with at least one. Whether DPR's
  BM25 negatives come from the gold article or from others decides what a counterfactual
  passage adds (docs/replication.md, "Why PiCL shows nothing with BM25 hard negatives here").

Only ``positive_ctxs[0]`` counts by default (what training uses: one positive per question,
as in the paper); ``--positives all`` counts every listed positive of a question.

Subsets are nested: one permutation of the valid records, seeded by ``seed``, and the subset
of fraction f is its first ``round(f * N)`` records (:func:`subset_mask`), so 10 % ⊂ 25 % ⊂ ….
Training with ``config.data.train_fraction = f`` and ``config.data.train_fraction_seed = seed``
uses exactly the same subset (``pipeline.load_biencoder_split`` calls :func:`subset_mask`).
The file is streamed; bad records are skipped, counted and reported (they are not part of N).
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Sequence

import numpy as np

from dense_cf.datasets import formats
from dense_cf.datasets.subsets import subset_mask

DEFAULT_FRACTIONS = (0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0)


def passage_key(p: formats.Passage) -> str:
    """Identity of a passage: ``id:<passage_id>`` if present, else a digest of title + text."""
    if p.passage_id not in (None, ""):
        return f"id:{p.passage_id}"
    h = hashlib.blake2b(digest_size=12)
    h.update(p.title.encode("utf-8"))
    h.update(b"\x00")
    h.update(p.text.encode("utf-8"))
    return "tt:" + h.hexdigest()


def coverage_stats(positives: Sequence[Sequence[int]], num_passages: int, *, threshold: int = 2,
                   alpha: float = 1.3) -> dict[str, Any]:
    """Statistics of one set of questions; ``positives[i]`` = passage indices of question i.

    A question lists a passage at most once (duplicates within a question are ignored), so a
    passage's count is the number of distinct questions it is the positive of.
    """
    if threshold < 1:
        raise ValueError(f"threshold must be >= 1, got {threshold}")
    counts = np.zeros(num_passages, dtype=np.int64)
    for pids in positives:
        for p in set(pids):
            counts[p] += 1
    return stats_from_counts(counts, len(positives), threshold=threshold, alpha=alpha)


def unique_coverage(coverage: float, overlap: float, alpha: float = 1.3) -> float:
    """coverage × (1 − overlap)^α (the paper's Table 3, α = 1.3; docs/method.md §7)."""
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must lie in [0, 1], got {overlap}")
    return float(coverage) * (1.0 - float(overlap)) ** float(alpha)


def stats_from_counts(counts: np.ndarray, num_questions: int, *, threshold: int = 2,
                      alpha: float = 1.3) -> dict[str, Any]:
    """coverage, overlap, unique coverage from per-passage question counts (docs/method.md §7)."""
    counts = np.asarray(counts)
    coverage = int((counts > 0).sum())
    overlapping = int((counts >= threshold).sum())
    overlap = overlapping / coverage if coverage else 0.0
    hist = np.bincount(counts[counts > 0]) if coverage else np.zeros(1, np.int64)
    return {
        "questions": int(num_questions),
        "coverage": coverage,
        "overlapping_passages": overlapping,
        "overlap": overlap,
        "unique_coverage": unique_coverage(coverage, overlap, alpha),
        "questions_per_positive": {int(c): int(n) for c, n in enumerate(hist) if c and n},
    }


def collect(examples: Iterable[formats.BiencoderExample], positives: str = "first"
            ) -> tuple[list[list[int]], int, dict[str, Any]]:
    """Positive passage indices per example, the number of distinct passages, and the hard
    negatives that carry a counted positive's title (one pass: the file is streamed)."""
    if positives not in ("first", "all"):
        raise ValueError(f"positives must be 'first' or 'all', got {positives!r}")
    index: dict[str, int] = {}
    out: list[list[int]] = []
    titles = {"hard_negatives": 0, "same_title": 0, "examples_with_hard_negatives": 0,
              "examples_with_same_title": 0}
    for ex in examples:
        ctxs = ex.positive_ctxs[:1] if positives == "first" else ex.positive_ctxs
        out.append([index.setdefault(passage_key(p), len(index)) for p in ctxs])
        if ex.hard_negative_ctxs:
            gold = {formats.fold(p.title) for p in ctxs}
            same = sum(formats.fold(n.title) in gold for n in ex.hard_negative_ctxs)
            titles["hard_negatives"] += len(ex.hard_negative_ctxs)
            titles["same_title"] += same
            titles["examples_with_hard_negatives"] += 1
            titles["examples_with_same_title"] += int(same > 0)
    titles["share"] = (titles["same_title"] / titles["hard_negatives"]
                       if titles["hard_negatives"] else None)
    return out, len(index), titles


def dataset_stats(positives: Sequence[Sequence[int]], num_passages: int, *,
                  fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0,
                  threshold: int = 2, alpha: float = 1.3) -> dict[str, Any]:
    """Full-set statistics and those of nested random subsets (normalised to the full set)."""
    n = len(positives)
    full = coverage_stats(positives, num_passages, threshold=threshold, alpha=alpha)
    subsets = []
    for f in sorted(set(float(x) for x in fractions)):
        mask = subset_mask(n, f, seed)
        st = coverage_stats([p for p, m in zip(positives, mask) if m], num_passages,
                            threshold=threshold, alpha=alpha)
        st["fraction"] = f
        # Undefined (NaN; null in JSON) when the full set's value is 0, e.g. 100 % overlap.
        st["coverage_norm"] = (st["coverage"] / full["coverage"] if full["coverage"]
                               else float("nan"))
        st["unique_coverage_norm"] = (st["unique_coverage"] / full["unique_coverage"]
                                      if full["unique_coverage"] else float("nan"))
        subsets.append(st)
    return {"full": full, "subsets": subsets}


def file_stats(path: str, *, fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0,
               threshold: int = 2, alpha: float = 1.3, positives: str = "first") -> dict[str, Any]:
    """:func:`dataset_stats` of a biencoder file (streamed; bad records skipped and counted)."""
    report = formats.SkipReport()
    pos, n_pass, titles = collect(formats.iter_biencoder(path, skip_bad=True, report=report),
                                  positives)
    out = dataset_stats(pos, n_pass, fractions=fractions, seed=seed, threshold=threshold,
                        alpha=alpha)
    return {"file": path, "valid_records": len(pos), "skipped_records": report.total,
            "skip_summary": report.summary() if report.total else "",
            "params": {"threshold": threshold, "alpha": alpha, "seed": seed,
                       "positives": positives, "fractions": sorted(set(fractions))},
            **out, "hard_negative_titles": titles}


def markdown(stats: dict[str, Any]) -> str:
    p = stats["params"]
    lines = [f"{stats['file']}: {stats['valid_records']} records "
             f"({stats['skipped_records']} bad, skipped); overlap = positives of >= "
             f"{p['threshold']} questions; unique = coverage x (1 - overlap)^{p['alpha']}", "",
             "| fraction | questions | coverage | overlap (%) | unique coverage | coverage (norm) "
             "| unique (norm) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for s in stats["subsets"]:
        lines.append(f"| {s['fraction']:.2f} | {s['questions']} | {s['coverage']} | "
                     f"{100 * s['overlap']:.2f} | {s['unique_coverage']:.1f} | "
                     f"{s['coverage_norm']:.3f} | {s['unique_coverage_norm']:.3f} |")
    t = stats.get("hard_negative_titles")
    if t is not None:
        lines.append("")
        if t["hard_negatives"]:
            lines.append(f"hard negatives with a positive's title (the positive's article): "
                         f"{t['same_title']} of {t['hard_negatives']} "
                         f"({100 * t['share']:.1f} %); examples with one: "
                         f"{t['examples_with_same_title']} of "
                         f"{t['examples_with_hard_negatives']} with hard negatives")
        else:
            lines.append("hard negatives with a positive's title: no record has hard negatives")
    return "\n".join(lines)


if __name__ == "__main__":  # the design card's command; its binary is cli/stats.py
    from dense_cf import app
    from dense_cf.cli import stats
    app.run(stats.main, stats.FLAGS, stats.USAGE)
