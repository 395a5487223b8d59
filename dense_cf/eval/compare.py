"""Paired comparison of two evaluated runs from their saved per-item outcomes (issue 16).

``python -m dense_cf.eval.compare RUN_A RUN_B [--step_a N] [--step_b N]`` (the binary is
``dense_cf/cli/compare.py``; this module is the library). ``RUN`` is a run directory (its
latest ``eval/step_N``, or ``--step_*``) or an eval directory itself (``.../eval/step_N``, or a
``corpora/<name>/eval/step_N`` of another corpus).

Items are paired, never pooled:

* retrieval (``report.json``: per-question ``first_hit_rank`` and, since issue 16, the question
  texts; older reports take them from ``retrieval.json``): questions are paired by text (k-th
  occurrence with k-th occurrence when a text repeats). Runs evaluated on different question
  sets are refused. Top-k hits (docs/method.md §6; k up to the shallower run's depth) get the
  exact McNemar test; MRR (reciprocal ranks, 0 without a hit) a paired bootstrap.
* answer-awareness (``aar_scores_<strategy>.npz``: per-triplet sim(q,p+), sim(q,p*) and the
  gold-record index): triplets are paired by gold-record index; the intersection is compared
  and what only one run scored is counted. AAR / AA score outcomes (pos > cf; a tie is a
  mismatch, docs/method.md §5) get McNemar; the mean gap pos − cf a paired bootstrap. Score files
  that carry question texts must agree on them (else refused: another gold file).
* robustness (``robustness.json``), when both runs have it on the same questions: top-k and
  MRR at the largest distractor count K both runs evaluated.
* end-to-end QA (``e2e.json`` of one retriever in ``READER/e2e/step_N/<label>/``,
  docs/readers.md): questions paired by text as for retrieval; EM@k gets McNemar, F1@k a paired
  bootstrap.

Each run's own figures over the paired items carry 95 % intervals (Wilson for rates, percentile
bootstrap for means); every row says whether B − A is significant at 0.05.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import sys
from collections import Counter
from typing import Any, Sequence

import numpy as np
from absl import app, flags

from dense_cf import app as _app
from dense_cf.eval import report as report_lib
from dense_cf.eval import stats
from dense_cf.eval.aar_math import QUESTION_TYPES
from dense_cf.text.answers import question_type
from dense_cf.train.run import RunDir

__all__ = ["RunOutcomes", "aar_by_type_rows", "compare", "compare_outcome_sets", "find_eval_dir", "load_outcomes",
           "markdown", "pair_questions"]

STRATEGY_LABELS = {"sentence": "AAR", "answer": "AA score"}


@dataclasses.dataclass
class RunOutcomes:
    """Per-item outcomes of one evaluated run step (whatever of them was saved)."""

    eval_dir: str
    method: str | None = None
    step: int | None = None
    questions: list[str] | None = None
    first_hit_rank: list[int | None] | None = None
    depth: int | None = None  # passages retrieved per question
    ks: tuple[int, ...] = ()
    report_path: str = ""
    # strategy -> {"pos", "cf", "gold_index", "questions" (or None), "path"}
    aar: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    robustness: dict[str, Any] | None = None
    # end-to-end QA: {"questions", "em": {k: [0/1]}, "f1": {k: [float]}, "path"}
    e2e: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        name = self.method or "?"
        return name if self.step is None else f"{name} (step {self.step})"


def _step_of(path: str) -> int | None:
    m = re.fullmatch(r"step_(\d+)", os.path.basename(os.path.normpath(path)))
    return int(m.group(1)) if m else None


def _has_outcomes(d: str) -> bool:
    return (os.path.exists(os.path.join(d, "report.json"))
            or os.path.exists(os.path.join(d, "e2e.json"))
            or bool(glob.glob(os.path.join(d, "aar_scores_*.npz"))))


def find_eval_dir(path: str, step: int | None = None) -> str:
    """The eval directory of ``path``: itself when it holds reports, else ``RUN/eval/step_N``
    for ``step`` (default: the largest N present)."""
    if step is None and _has_outcomes(path):
        return path
    root = os.path.dirname(RunDir(path).eval(0))
    if step is not None:
        d = RunDir(path).eval(step)
        if not os.path.isdir(d):
            raise FileNotFoundError(f"{d}: no evaluation of step {step}")
        return d
    steps = [s for s in (_step_of(d) for d in glob.glob(os.path.join(root, "step_*"))
                         if os.path.isdir(d)) if s is not None]
    if not steps:
        raise FileNotFoundError(f"{path}: no reports and no {root}/step_N evaluation directory")
    return RunDir(path).eval(max(steps))


def load_outcomes(path: str, step: int | None = None) -> RunOutcomes:
    """Loads the per-item outcomes saved in ``path``'s eval directory (:func:`find_eval_dir`)."""
    d = find_eval_dir(path, step)
    out = RunOutcomes(eval_dir=d, step=_step_of(d))
    rep_path = os.path.join(d, "report.json")
    if os.path.exists(rep_path):
        with open(rep_path) as f:
            rep = json.load(f)
        out.report_path = rep_path
        out.method = rep.get("method")
        out.step = rep.get("step", out.step)
        out.first_hit_rank = rep.get("first_hit_rank")
        out.depth = rep.get("k")
        out.ks = tuple(sorted(int(k) for k in rep.get("top_k", {})))
        out.questions = rep.get("questions")
        if out.questions is None and out.first_hit_rank is not None:
            res_path = os.path.join(d, "retrieval.json")  # reports written before issue 16
            if os.path.exists(res_path):
                with open(res_path) as f:
                    out.questions = [r["question"] for r in json.load(f)]
    for p in sorted(glob.glob(os.path.join(d, "aar_scores_*.npz"))):
        strategy = os.path.basename(p)[len("aar_scores_"):-len(".npz")]
        with np.load(p) as z:
            gold = z["gold_index"] if "gold_index" in z.files else z["index"]
            out.aar[strategy] = {"pos": z["pos"].astype(np.float64),
                                 "cf": z["cf"].astype(np.float64),
                                 "gold_index": gold.astype(np.int64),
                                 "questions": ([str(q) for q in z["questions"]]
                                               if "questions" in z.files else None),
                                 "path": p}
    rob_path = os.path.join(d, "robustness.json")
    if os.path.exists(rob_path):
        with open(rob_path) as f:
            rob = json.load(f)
        out.robustness = {"questions": rob["questions"], "ks": [int(k) for k in rob["ks"]],
                          "k": int(rob["k"]), "path": rob_path,
                          "first_hit_rank": {int(K): v for K, v in rob["first_hit_rank"].items()}}
        if "heldout" in rob:  # the held-out distractor family (eval.robustness_heldout)
            h = rob["heldout"]
            out.robustness["heldout"] = {
                "questions": h["questions"],
                "first_hit_rank": {int(K): v for K, v in h["first_hit_rank"].items()}}
        out.method = out.method or rob.get("method")
    e2e_path = os.path.join(d, "e2e.json")
    if os.path.exists(e2e_path):
        with open(e2e_path) as f:
            e2e = json.load(f)
        if "em_outcomes" in e2e:  # one retriever's file (the top-level one has no outcomes)
            out.e2e = {"questions": e2e["questions"], "path": e2e_path,
                       "em": {int(k): v for k, v in e2e["em_outcomes"].items()},
                       "f1": {int(k): v for k, v in e2e["f1_outcomes"].items()}}
            out.method = out.method or e2e.get("retriever")
    if not out.method and os.path.exists(os.path.join(d, "aar.json")):
        with open(os.path.join(d, "aar.json")) as f:
            out.method = json.load(f).get("method")
    return out


def _occurrence_keys(questions: Sequence[str]) -> list[tuple[str, int]]:
    seen: Counter = Counter()
    keys = []
    for q in questions:
        keys.append((q, seen[q]))
        seen[q] += 1
    return keys


def pair_questions(qa: Sequence[str], qb: Sequence[str], path_a: str,
                    path_b: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices pairing two question lists (k-th occurrence of a text with its k-th); raises
    when they are not the same question set."""
    if list(qa) == list(qb):
        ia = np.arange(len(qa))
        return ia, ia
    ka, kb = _occurrence_keys(qa), _occurrence_keys(qb)
    if set(ka) != set(kb):
        only = len(set(ka) - set(kb)) + len(set(kb) - set(ka))
        raise ValueError(f"{path_a} and {path_b} were evaluated on different question sets "
                         f"({len(qa)} vs {len(qb)} questions, {only} not in both); refusing "
                         f"to compare")
    pos_b = {k: i for i, k in enumerate(kb)}
    return np.arange(len(qa)), np.array([pos_b[k] for k in ka])


def _ranks(first: Sequence[int | None]) -> np.ndarray:
    """First-hit ranks as floats, inf for no hit."""
    return np.array([np.inf if r is None else float(r) for r in first])


def _retrieval_rows(ra: np.ndarray, rb: np.ndarray, ks: Sequence[int], depth: int | None,
                    prefix: str, **kw) -> list[dict[str, Any]]:
    rows = []
    for k in ks:
        rows.append(stats.compare_outcomes(f"{prefix}top-{k}", ra <= k, rb <= k, **kw))
    cut = np.inf if depth is None else depth

    def rr(r: np.ndarray) -> np.ndarray:
        return np.where(r <= cut, 1.0 / r, 0.0)

    rows.append(stats.compare_outcomes(f"{prefix}MRR (×100)", rr(ra), rr(rb), kind="mean",
                                       scale=100.0, **kw))
    return rows


def compare_outcome_sets(a: RunOutcomes, b: RunOutcomes, *, seed: int = 0,
                         n_resamples: int = stats.DEFAULT_RESAMPLES,
                         names: tuple[str, str] | None = None) -> dict[str, Any]:
    """Paired rows (``stats.compare_outcomes``) for everything both runs saved, and notes on
    the pairing. Raises ``ValueError`` when the runs' question sets (or the questions behind
    paired triplets) differ."""
    names = names or (f"A: {a.label}", f"B: {b.label}")
    kw = {"seed": seed, "n_resamples": n_resamples, "names": names}
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    if a.first_hit_rank is not None and b.first_hit_rank is not None:
        if a.questions is None or b.questions is None:
            raise ValueError(f"{a.report_path or a.eval_dir} or {b.report_path or b.eval_dir} "
                             f"lacks the question texts (report.json 'questions' or "
                             f"retrieval.json): cannot pair questions")
        ia, ib = pair_questions(a.questions, b.questions, a.report_path, b.report_path)
        ra, rb = _ranks(a.first_hit_rank)[ia], _ranks(b.first_hit_rank)[ib]
        depths = [x for x in (a.depth, b.depth) if x is not None]
        depth = min(depths) if depths else None
        ks = [k for k in sorted(set(a.ks) & set(b.ks)) if depth is None or k <= depth]
        rows += _retrieval_rows(ra, rb, ks, depth, "", **kw)
        notes.append(f"retrieval: {len(ia)} questions paired"
                     + ("" if list(a.questions) == list(b.questions) else " (by text)")
                     + (f"; depths differ ({a.depth} vs {b.depth}): MRR counts hits up to rank "
                        f"{depth}" if a.depth != b.depth else ""))
    order = list(STRATEGY_LABELS)  # AAR, AA score, then any other strategy by name
    shared = sorted((s for s in a.aar if s in b.aar),
                    key=lambda s: (order.index(s) if s in order else len(order), s))
    for strategy in shared:
        sa, sb = a.aar[strategy], b.aar[strategy]
        common, ia, ib = np.intersect1d(sa["gold_index"], sb["gold_index"], assume_unique=False,
                                        return_indices=True)
        label = STRATEGY_LABELS.get(strategy, f"AAR ({strategy})")
        notes.append(f"{label} ({strategy} p*): {len(common)} triplets paired by gold record "
                     f"(A scored {len(sa['pos'])}, B {len(sb['pos'])}; "
                     f"{len(sa['pos']) - len(common)} only in A, "
                     f"{len(sb['pos']) - len(common)} only in B)")
        if sa["questions"] is not None and sb["questions"] is not None:
            bad = sum(sa["questions"][i] != sb["questions"][j] for i, j in zip(ia, ib))
            if bad:
                raise ValueError(f"{sa['path']} and {sb['path']} were evaluated on different "
                                 f"question sets ({bad} paired gold records have different "
                                 f"questions); refusing to compare")
        else:
            notes.append(f"{label}: paired by gold-record index only (score files without "
                         f"question texts)")
        if not len(common):
            continue
        pa, ca, pb, cb = sa["pos"][ia], sa["cf"][ia], sb["pos"][ib], sb["cf"][ib]
        rows.append(stats.compare_outcomes(label, pa > ca, pb > cb, **kw))
        rows.append(stats.compare_outcomes(f"mean sim(q,p+) − sim(q,p*) ({strategy})",
                                           pa - ca, pb - cb, kind="mean", digits=4, **kw))
    if a.robustness and b.robustness:
        qa, qb = a.robustness["questions"], b.robustness["questions"]
        counts = sorted(set(a.robustness["first_hit_rank"]) & set(b.robustness["first_hit_rank"]))
        if counts and qa == qb:
            K = counts[-1]
            depth = min(a.robustness["k"], b.robustness["k"])
            ks = [k for k in sorted(set(a.robustness["ks"]) & set(b.robustness["ks"]))
                  if k <= depth]
            rows += _retrieval_rows(_ranks(a.robustness["first_hit_rank"][K]),
                                    _ranks(b.robustness["first_hit_rank"][K]), ks, depth,
                                    f"K={K} distractors: ", **kw)
            notes.append(f"robustness: {len(qa)} questions, K={K} near-duplicate distractors "
                         f"per question")
        else:
            why = "no common K" if not counts else "the runs have different questions"
            notes.append(f"robustness: not compared ({why})")
        ha, hb = a.robustness.get("heldout"), b.robustness.get("heldout")
        if ha and hb:
            counts = sorted(set(ha["first_hit_rank"]) & set(hb["first_hit_rank"]))
            if counts and ha["questions"] == hb["questions"]:
                K = counts[-1]
                depth = min(a.robustness["k"], b.robustness["k"])
                ks = [k for k in sorted(set(a.robustness["ks"]) & set(b.robustness["ks"]))
                      if k <= depth]
                # Named apart from the p* rows, whose names the claims registry uses.
                rows += _retrieval_rows(_ranks(ha["first_hit_rank"][K]),
                                        _ranks(hb["first_hit_rank"][K]), ks, depth,
                                        f"K={K} held-out distractors: ", **kw)
                notes.append(f"robustness (held-out): {len(ha['questions'])} questions, K={K} "
                             f"held-out distractors per question (value swap, paraphrase, "
                             f"namesake)")
            else:
                why = "no common K" if not counts else "the runs have different questions"
                notes.append(f"robustness (held-out): not compared ({why})")
    if a.e2e and b.e2e:
        ia, ib = pair_questions(a.e2e["questions"], b.e2e["questions"], a.e2e["path"],
                                b.e2e["path"])
        for k in sorted(set(a.e2e["em"]) & set(b.e2e["em"])):
            rows.append(stats.compare_outcomes(f"EM@{k}", np.asarray(a.e2e["em"][k], bool)[ia],
                                               np.asarray(b.e2e["em"][k], bool)[ib], **kw))
            rows.append(stats.compare_outcomes(f"F1@{k}", np.asarray(a.e2e["f1"][k], float)[ia],
                                               np.asarray(b.e2e["f1"][k], float)[ib], kind="mean",
                                               scale=100.0, **kw))
        notes.append(f"end-to-end QA: {len(ia)} questions paired"
                     + ("" if a.e2e["questions"] == b.e2e["questions"] else " (by text)"))
    if not rows:
        raise ValueError(f"{a.eval_dir} and {b.eval_dir} share no saved per-item outcomes "
                         f"(report.json, aar_scores_*.npz, robustness.json, e2e.json)")
    return {"a": a.label, "b": b.label, "a_dir": a.eval_dir, "b_dir": b.eval_dir,
            "names": list(names), "rows": rows, "notes": notes, "seed": seed,
            "n_resamples": n_resamples}


def aar_by_type_rows(a: RunOutcomes, b: RunOutcomes, strategy: str = "sentence", *,
                     seed: int = 0, n_resamples: int = stats.DEFAULT_RESAMPLES,
                     names: tuple[str, str] = ("A", "B")) -> list[dict[str, Any]]:
    """Paired AAR rows per question type (PiCL Table 6; ``question_type``), exact McNemar on
    the triplets of each type both runs scored; ``[]`` when either run lacks the strategy's
    per-triplet scores or their question texts."""
    sa, sb = a.aar.get(strategy), b.aar.get(strategy)
    if not sa or not sb or sa["questions"] is None or sb["questions"] is None:
        return []
    _, ia, ib = np.intersect1d(sa["gold_index"], sb["gold_index"], return_indices=True)
    types = np.array([question_type(sa["questions"][i]) for i in ia], dtype=object)
    aware_a = sa["pos"][ia] > sa["cf"][ia]
    aware_b = sb["pos"][ib] > sb["cf"][ib]
    rows = []
    for t in QUESTION_TYPES:
        sel = types == t
        if sel.any():
            rows.append(stats.compare_outcomes(f"AAR ({t})", aware_a[sel], aware_b[sel],
                                               seed=seed, n_resamples=n_resamples, names=names))
    return rows


def markdown(result: dict[str, Any], title: bool = True) -> str:
    """The paired table, one sentence per row on significance, the pairing notes."""
    na, nb = result["names"]
    cols = ["metric", "n", na, nb, "B − A", "test", "p",
            f"significant at {stats.ALPHA:g}"]
    parts = []
    if title:
        parts.append(f"# Paired comparison: {na} vs {nb}\n\nA: `{result['a_dir']}`  \n"
                     f"B: `{result['b_dir']}`")
    parts.append(report_lib.markdown_table(result["rows"], cols))
    parts.append("\n".join(f"- {r['sentence']}" for r in result["rows"]))
    parts.append(
        "Figures over the paired items with 95 % intervals (Wilson for rates, percentile "
        f"bootstrap for means, {result['n_resamples']} resamples, seed {result['seed']}); "
        "B − A for means with its paired-bootstrap 95 % interval; McNemar counts are "
        "(only A right) vs (only B right).\n\n" + "\n".join(f"- {n}" for n in result["notes"]))
    return "\n\n".join(parts) + "\n"


def compare(run_a: str, run_b: str, *, step_a: int | None = None, step_b: int | None = None,
            seed: int = 0, n_resamples: int = stats.DEFAULT_RESAMPLES,
            names: tuple[str, str] | None = None, verbose: bool = True) -> dict[str, Any]:
    """Loads both runs' per-item outcomes, pairs them and returns ``compare_outcome_sets``'s
    result with its ``markdown`` (printed unless ``verbose=False``)."""
    result = compare_outcome_sets(load_outcomes(run_a, step_a), load_outcomes(run_b, step_b),
                                  seed=seed, n_resamples=n_resamples, names=names)
    result["markdown"] = markdown(result)
    if verbose:
        print(result["markdown"])
    return result


# The binary ``python -m dense_cf.eval.compare`` (alias ``dense_cf.cli.compare``); its --help text:
USAGE = """Paired comparison of two evaluated runs: ``python -m dense_cf.cli.compare RUN_A RUN_B``.

Also ``python -m dense_cf.eval.compare RUN_A RUN_B``. ``RUN`` is a run directory (its latest
``eval/step_N`` unless ``--step_a``/``--step_b``) or an eval directory. Prints the markdown
table of :mod:`dense_cf.eval.compare` (McNemar on top-k hits and AAR / AA outcomes, paired
bootstrap on MRR and mean score gaps, 95 % intervals, significance at 0.05 in words);
``--out`` also writes it, ``--json_out`` the raw numbers.
"""

FLAGS = flags.FlagValues()
_STEP_A = flags.DEFINE_integer("step_a", None, "Step of RUN_A's evaluation (default: latest).", flag_values=FLAGS)
_STEP_B = flags.DEFINE_integer("step_b", None, "Step of RUN_B's evaluation (default: latest).", flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Bootstrap seed.", flag_values=FLAGS)
_RESAMPLES = flags.DEFINE_integer("n_resamples", 10_000, "Bootstrap resamples.", flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", None, "Also write the markdown report here.", flag_values=FLAGS)
_NAMES = flags.DEFINE_list("names", None, "Two labels for RUN_A and RUN_B in the table (default: "
                           "method and step), e.g. DPR,MiniLM-untrained.", flag_values=FLAGS)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Also write the rows and notes as JSON here.", flag_values=FLAGS)


def main(argv: Sequence[str]) -> None:
    if len(argv) != 3:
        raise app.UsageError("usage: python -m dense_cf.cli.compare RUN_A RUN_B [flags]")
    names = _NAMES.value
    if names is not None and len(names) != 2:
        raise app.UsageError(f"--names takes two labels, got {len(names)}")
    try:
        result = compare(argv[1], argv[2], step_a=_STEP_A.value,
                                     step_b=_STEP_B.value, seed=_SEED.value,
                                     n_resamples=_RESAMPLES.value, verbose=False,
                                     names=tuple(names) if names else None)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(result["markdown"])
    if _OUT.value:
        with report_lib.atomic_open(_OUT.value) as f:
            f.write(result["markdown"])
        _app.say_written(_OUT.value, "report")
    if _JSON_OUT.value:
        report_lib.write_json(_JSON_OUT.value, {k: v for k, v in result.items()
                                                if k != "markdown"})
        _app.say_written(_JSON_OUT.value, "JSON")


def run_cli(argv: Sequence[str]) -> None:
    """``main`` in-process on ``argv`` (RUN_A RUN_B and flags, no program name)."""
    main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
