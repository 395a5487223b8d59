"""Answer-awareness math (docs/method.md §5): AAR / AA score, break-downs and figures. Pure numpy.

Given triplets (q, p, p*) with scores ``pos = sim(q, p)`` and ``cf = sim(q, p*)``:

    AAR = 1 - (1/T) * sum_i 1[pos_i <= cf_i]            (PiCL Def. 3, EADPR "AA score")

A tie is a mismatch: the retriever did not prefer the answer-bearing passage. PiCL's AAR
(``sentence`` counterfactuals) and EADPR's AA score (``answer`` counterfactuals) are the same
formula on different p*; which one you get depends only on the p* you score.

Empty inputs and non-finite scores raise ``ValueError``: an AAR over nothing is undefined and
``NaN <= x`` is False, so a NaN score would silently count as "aware".

Triplets come from gold records joined with the test qa file (:func:`join_gold_with_qa`);
every gold record's fate is counted by reason (:class:`ReasonCounts`), so none leaves an
evaluation uncounted.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Sequence

import numpy as np

from dense_cf.eval.report import atomic_open, markdown_table
from dense_cf.text.answers import question_type

__all__ = [
    "AAR_FATES",
    "JOIN_REASONS",
    "LOSS_REASONS",
    "LOST_AT_JOIN",
    "QUESTION_TYPES",
    "REASON_LABELS",
    "GoldJoin",
    "ReasonCounts",
    "aar",
    "aar_by_type",
    "histogram_plot",
    "join_gold_with_qa",
    "mismatches",
    "norm_question",
    "reason_table",
    "score_diff_stats",
    "score_diffs",
    "topk_vs_distractors_plot",
]

# PiCL Table 6's six types plus the remainder, in a fixed report order.
QUESTION_TYPES: tuple[str, ...] = ("how", "what", "when", "where", "which", "who", "other")


def _pair(pos_scores: Any, cf_scores: Any) -> tuple[np.ndarray, np.ndarray]:
    # float64 holds every float16/bfloat16/float32 value exactly, so order and ties are kept.
    pos = np.asarray(pos_scores, dtype=np.float64)
    cf = np.asarray(cf_scores, dtype=np.float64)
    if pos.ndim != 1 or cf.ndim != 1 or pos.shape != cf.shape:
        raise ValueError(f"need two 1-D score arrays of equal length, got shapes "
                         f"{pos.shape} and {cf.shape}")
    if pos.size == 0:
        raise ValueError("no triplets: AAR is undefined for an empty set")
    if not (np.isfinite(pos).all() and np.isfinite(cf).all()):
        raise ValueError("scores must be finite (a NaN would silently count as answer-aware)")
    return pos, cf


def mismatches(pos_scores: Any, cf_scores: Any) -> np.ndarray:
    """Boolean mask of answerability-relevance mismatches, ``sim(q,p) <= sim(q,p*)`` (docs/method.md §5)."""
    pos, cf = _pair(pos_scores, cf_scores)
    return pos <= cf


def aar(pos_scores: Any, cf_scores: Any) -> float:
    """AAR = 1 - mean(sim(q,p) <= sim(q,p*)) in [0, 1]; ties count as mismatches (docs/method.md §5)."""
    return float(1.0 - mismatches(pos_scores, cf_scores).mean())


def aar_by_type(questions: Sequence[str], pos_scores: Any,
                cf_scores: Any) -> dict[str, dict[str, float | int]]:
    """AAR per question type (``question_type``; PiCL Table 6), as ``{type: {"aar", "count"}}``.

    Only types that occur are listed, in :data:`QUESTION_TYPES` order.
    """
    miss = mismatches(pos_scores, cf_scores)
    if len(questions) != miss.size:
        raise ValueError(f"{len(questions)} questions for {miss.size} score pairs")
    types = np.array([question_type(q) for q in questions], dtype=object)
    out: dict[str, dict[str, float | int]] = {}
    for t in QUESTION_TYPES:
        sel = types == t
        count = int(sel.sum())
        if count:
            out[t] = {"aar": float(1.0 - miss[sel].mean()), "count": count}
    return out


def score_diffs(pos_scores: Any, cf_scores: Any) -> np.ndarray:
    """``sim(q,p+) - sim(q,p*)`` per triplet (float64)."""
    pos, cf = _pair(pos_scores, cf_scores)
    return pos - cf


def _stats(d: np.ndarray) -> dict[str, float | int]:
    if d.size == 0:  # an empty group (e.g. no unaware triplet) has no statistics
        return {"count": 0, "mean": float("nan"), "std": float("nan"), "median": float("nan")}
    return {"count": int(d.size), "mean": float(d.mean()), "std": float(d.std()),
            "median": float(np.median(d))}


def score_diff_stats(pos_scores: Any, cf_scores: Any) -> dict[str, Any]:
    """Score differences split as in PiCL Table 5 (docs/method.md §5).

    ``{"aware" | "unaware" | "all": {"count", "mean", "std", "median"}, "aar": float}`` where
    aware means diff > 0 and unaware diff <= 0 (so ties are unaware, matching :func:`aar`).
    ``std`` is the population standard deviation (ddof=0); empty groups give NaN statistics.
    """
    d = score_diffs(pos_scores, cf_scores)
    aware = d > 0
    return {"aware": _stats(d[aware]), "unaware": _stats(d[~aware]), "all": _stats(d),
            "aar": float(aware.mean())}


def _new_figure(figsize: tuple[float, float], ncols: int = 1):
    # A bare Figure (no pyplot): no global state, no GUI backend, safe in threads and tests.
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, (fig.add_subplot() if ncols == 1 else fig.subplots(1, ncols, sharey=True))


def _save_png(fig: Any, path: str | os.PathLike) -> None:
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=150)


def histogram_plot(diffs_by_run: Mapping[str, Any], path: str | os.PathLike,
                   bins: int | Sequence[float] = 50, density: bool = False,
                   title: str | None = None) -> None:
    """Overlaid histograms of ``sim(q,p+) - sim(q,p*)`` per run with a line at 0 (PiCL Fig. 6).

    All runs share one set of bin edges so the bars are comparable; writes a PNG.
    """
    if not diffs_by_run:
        raise ValueError("no runs to plot")
    arrays = {name: np.asarray(d, dtype=np.float64).ravel() for name, d in diffs_by_run.items()}
    pooled = np.concatenate(list(arrays.values()))
    pooled = pooled[np.isfinite(pooled)]
    if pooled.size == 0:
        raise ValueError("no finite score differences to plot")
    edges = np.histogram_bin_edges(pooled, bins=bins)
    fig, ax = _new_figure((6.4, 4.2))
    for name, d in arrays.items():
        d = d[np.isfinite(d)]
        share = float((d > 0).mean()) if d.size else float("nan")
        ax.hist(d, bins=edges, alpha=0.5, density=density, histtype="stepfilled",
                edgecolor="black", linewidth=0.4,
                label=f"{name} (n={d.size}, {100 * share:.1f}% > 0)")
    ax.axvline(0.0, color="black", linestyle="--", linewidth=1.0)
    ax.set_xlabel(r"$\mathrm{sim}(q, p^+) - \mathrm{sim}(q, p^*)$")
    ax.set_ylabel("density" if density else "number of triplets")
    ax.set_title(title or "Score differences: original vs. counterfactual passage")
    ax.legend(fontsize="small")
    _save_png(fig, path)


def topk_vs_distractors_plot(table: Mapping[str, Mapping[Any, Mapping[Any, float]]],
                             path: str | os.PathLike, title: str | None = None,
                             ylabel: str = "top-k accuracy (%)") -> None:
    """Top-k accuracy vs. number of added distractors K (EADPR Fig. 5); writes a PNG.

    ``table[run][K][k]`` is the top-k accuracy of ``run`` with K distractors per question
    (string keys, e.g. from JSON, are accepted). One panel per k, one line per run (colour and
    marker). K is drawn at evenly spaced positions labelled with its values (0, 1, 2, 5, ... would
    crowd a linear axis), and runs are nudged sideways by a fraction of a step so that lines
    at the same value (e.g. all runs at 100 % top-20) stay visible. No shading: the intervals
    are in the report's tables.
    """
    if not table:
        raise ValueError("no runs to plot")
    # Normalise keys to ints (JSON turns them into strings) and values to floats.
    norm = {run: {int(K): {int(k): float(v) for k, v in accs.items()}
                  for K, accs in per_K.items()}
            for run, per_K in table.items()}
    all_k = sorted({k for per_K in norm.values() for accs in per_K.values() for k in accs})
    all_K = sorted({K for per_K in norm.values() for K in per_K})
    pos = {K: i for i, K in enumerate(all_K)}
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    styles = ["-", "--", "-.", ":"]
    n_runs = len(norm)
    width = 0.25 if n_runs > 1 else 0.0   # total sideways spread of the runs, in K steps
    fig, axes = _new_figure((3.0 * len(all_k) + 1.0, 3.6), ncols=len(all_k))
    axes = np.atleast_1d(axes)
    for ax, k in zip(axes, all_k):
        for r, (run, per_K) in enumerate(norm.items()):
            pts = [(pos[K], per_K[K][k]) for K in sorted(per_K) if k in per_K[K]]
            if not pts:
                continue
            px, py = np.array(pts, dtype=np.float64).T
            dx = (r / (n_runs - 1) - 0.5) * width if n_runs > 1 else 0.0
            ax.plot(px + dx, py, color=f"C{r % 10}", linestyle=styles[r % len(styles)],
                    marker=markers[r % len(markers)], markersize=5, label=run)
        ax.set_xticks(range(len(all_K)), [str(K) for K in all_K])
        ax.set_xlim(-0.5, len(all_K) - 0.5)
        ax.set_title(f"top-{k}", fontsize="medium")
        ax.set_xlabel("distractors per question (K)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(n_runs, 4), fontsize="small",
               frameon=False)
    fig.suptitle(title or "Robustness to near-duplicate distractors")
    _save_png(fig, path)


# ---------------------------------------------------------------------------------------------
# Gold-triplet join and the fate of every gold record (docs/method.md §5).

# Where a gold record's answers came from; the join-stage counts sum to the gold records.
JOIN_REASONS: tuple[str, ...] = ("joined_by_position", "joined_by_occurrence",
                                 "answers_from_gold", "no_qa_record", "malformed_gold_record")
# Losses decided at the join, carried into every evaluation's fate counts.
LOST_AT_JOIN: tuple[str, ...] = ("no_qa_record", "malformed_gold_record")
# Fate of a gold record in an AAR / AA-score evaluation (one strategy); sums to the gold records.
AAR_FATES: tuple[str, ...] = ("scored", *LOST_AT_JOIN, "answer_not_in_context",
                              "truncated_by_max_p_len", "no_counterfactual")
REASON_LABELS: dict[str, str] = {
    "joined_by_position": "answers joined by position",
    "joined_by_occurrence": "answers joined by k-th occurrence of the question text",
    "answers_from_gold": "answers carried by the gold record",
    "no_qa_record": "lost: no qa record",
    "malformed_gold_record": "lost: malformed gold record (skipped by the reader)",
    "answer_not_in_context": "lost: answer not found in the gold context",
    "truncated_by_max_p_len": "lost: answer truncated away by max_p_len",
    "no_counterfactual": "lost: no counterfactual under this strategy",
    "no_distractor": "lost: no answer-free distractor",
    "scored": "scored",
    "evaluated": "evaluated",
}
# Reasons under which a gold record leaves an evaluation (named with an example in the log).
LOSS_REASONS: frozenset[str] = frozenset(r for r, label in REASON_LABELS.items()
                                         if label.startswith("lost"))


@dataclasses.dataclass
class ReasonCounts:
    """Records counted by reason (fixed keys in report order) with the first example of each."""

    reasons: tuple[str, ...]
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    first: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.counts) - set(self.reasons)
        if unknown:
            raise ValueError(f"unknown reasons {sorted(unknown)}; expected {self.reasons}")
        self.counts = {r: int(self.counts.get(r, 0)) for r in self.reasons}

    def add(self, reason: str, example: str = "", n: int = 1) -> None:
        """Counts ``n`` records under ``reason``; the first non-empty example is kept."""
        if reason not in self.counts:
            raise KeyError(f"unknown reason {reason!r}; expected one of {self.reasons}")
        self.counts[reason] += n
        if n and example and reason not in self.first:
            self.first[reason] = example

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def check_total(self, expected: int, what: str) -> None:
        """Raises unless the counts add up to ``expected`` records (none uncounted)."""
        if self.total != expected:
            raise RuntimeError(f"{what}: {self.total} records counted by reason, expected "
                               f"{expected}: {self.counts}")

    def carry(self, reasons: tuple[str, ...], keys: Sequence[str]) -> "ReasonCounts":
        """New counts over ``reasons`` starting with ``keys``' counts and examples from here."""
        out = ReasonCounts(reasons)
        for key in keys:
            out.add(key, self.first.get(key, ""), self.counts[key])
        return out

    def summary(self, lost_only: bool = False) -> str:
        """One line: ``reason n (first: example)``, zero counts left out."""
        parts = []
        for r, n in self.counts.items():
            lost = r in LOSS_REASONS
            if n and (lost or not lost_only):
                ex = f" (first: {self.first[r]})" if lost and r in self.first else ""
                parts.append(f"{r} {n}{ex}")
        return "; ".join(parts) or "none"

    def lost(self) -> int:
        """Records under a loss reason."""
        return sum(n for r, n in self.counts.items() if r in LOSS_REASONS)

    def to_json(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "first": dict(self.first)}


def reason_table(columns: Mapping[str, ReasonCounts], join: ReasonCounts | None = None) -> str:
    """Markdown table: one row per reason (join stage first), one count column per entry."""
    rows: list[dict[str, Any]] = []
    total = next(iter(columns.values())).total if columns else (join.total if join else 0)
    rows.append({"stage": "", "reason": "gold records", **{c: total for c in columns}})
    if join is not None:
        for r in join.reasons:
            rows.append({"stage": "join", "reason": REASON_LABELS.get(r, r),
                         **{c: join.counts[r] for c in columns}})
    reasons = [r for c in columns.values() for r in c.reasons]
    for r in dict.fromkeys(reasons):
        rows.append({"stage": "fate", "reason": REASON_LABELS.get(r, r),
                     **{c: counts.counts.get(r, 0) for c, counts in columns.items()}})
    return markdown_table(rows, ["stage", "reason", *columns])


def norm_question(question: str) -> str:
    """Question text as joined: lower-cased, whitespace collapsed, trailing '?' dropped."""
    return " ".join(question.lower().split()).rstrip("?").strip()


def _gold_answers(record: Mapping[str, Any]) -> list[str] | None:
    # DPR's gold info has no answers; a record that carries a non-empty list of str uses it.
    ans = record.get("answers")
    if isinstance(ans, list) and ans and all(isinstance(a, str) for a in ans):
        return list(ans)
    return None


@dataclasses.dataclass
class GoldJoin:
    """Result of :func:`join_gold_with_qa`: gold records that have answers, in gold order."""

    index: list[int]            # position of each joined record among the gold records
    answers: list[list[str]]
    mode: str                   # "position" or "occurrence"
    counts: ReasonCounts        # JOIN_REASONS; sums to the number of gold records
    qa_unused: int              # qa records that no gold record was joined to
    gold_answers_ignored: int   # gold "answers" fields that are not a non-empty list of str


def join_gold_with_qa(gold_records: Sequence[Mapping[str, Any]],
                      qa_records: Sequence[tuple[str, Sequence[str]]]) -> GoldJoin:
    """Answers for every gold record (``question``, optional ``answers``) from the qa records.

    By position when both have the same length and the normalised question texts
    (:func:`norm_question`) agree at every position; otherwise the k-th occurrence of a text
    among the gold records is joined with its k-th occurrence among the qa records (texts
    repeat when names collide: "Where was John Smith born?" of three John Smiths). A gold
    record's own ``answers`` (a non-empty list of str) win over its qa partner's; a record
    with neither is counted as ``no_qa_record``. Every gold record is counted once.
    """
    g_norm = [norm_question(r["question"]) for r in gold_records]
    q_norm = [norm_question(q) for q, _ in qa_records]
    partner: list[int | None]
    if len(g_norm) == len(q_norm) and g_norm == q_norm:
        mode, partner = "position", list(range(len(g_norm)))
    else:
        mode = "occurrence"
        queues: dict[str, list[int]] = {}
        for j in reversed(range(len(q_norm))):  # reversed: pop() yields occurrences in order
            queues.setdefault(q_norm[j], []).append(j)
        partner = [queues[t].pop() if queues.get(t) else None for t in g_norm]
    counts = ReasonCounts(JOIN_REASONS)
    out = GoldJoin([], [], mode, counts, len(qa_records) - sum(p is not None for p in partner),
                   0)
    for i, (rec, p) in enumerate(zip(gold_records, partner)):
        example = f"gold record {i}: {rec['question']!r}"
        own = _gold_answers(rec)
        out.gold_answers_ignored += int(own is None and "answers" in rec)
        if own is not None:
            counts.add("answers_from_gold", example)
            answers = own
        elif p is None:
            counts.add("no_qa_record", example)
            continue
        else:
            counts.add(f"joined_by_{mode}", example)
            answers = list(qa_records[p][1])
        out.index.append(i)
        out.answers.append(answers)
    counts.check_total(len(gold_records), "gold-triplet join")
    return out
