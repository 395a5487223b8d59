"""Per-item outcomes of an evaluated run: their one owner (issue 48).

An evaluation's product is its per-item outcomes; comparisons and claims are built from them.
This module is the only one that knows where they are saved and how two runs' items pair:

* :class:`Metric`: a metric's stable id (``retrieval.top1``, ``aar.sentence``, ...), its display
  label (the row name of a paired table), its kind (``rate``: 0/1 per item; ``mean``: a number
  per item; ``rank``: a first-hit rank per item, from which top-k rates and MRR follow) and the
  scale and digits its figures are shown with. :func:`metric` resolves an id; labels are
  spelled here and nowhere else.
* The file names of every evaluator's reports (:data:`REPORT`, :data:`AAR`,
  :func:`aar_scores_name`, :data:`ROBUSTNESS`, :data:`E2E`); each file is written by its
  evaluator alone, with these names.
* :class:`Outcomes` and :func:`write`: the generic store an evaluator without a report format of
  its own writes (``outcomes_<evaluator>.json``: item keys and one value per item and metric).
* :func:`read`: one run's saved outcomes, from the generic store and from the reports the
  built-in evaluators write (so the reports already on disk, and docs/results, stay
  re-derivable).
* :func:`pair`: every metric two runs both saved, their items paired, as :class:`Paired` values
  ready for a paired test (``analysis.compare``), plus notes on the pairing.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections import Counter
from typing import Any, Sequence

import numpy as np

from dense_cf.files import write_json
from dense_cf.synthetic.distractors import HELDOUT_KINDS, check_kinds
from dense_cf.train.run import RunDir

__all__ = ["AAR", "DID_FAMILIES", "DID_KINDS", "E2E", "FAMILIES", "KINDS", "METRICS", "Metric",
           "Outcomes", "Paired", "REPORT", "RESULTS", "ROBUSTNESS", "TESTS", "RunOutcomes",
           "aar_scores_name", "did_kind", "did_metric", "did_spec", "evaluated", "family_label",
           "family_prefix", "find_eval_dir", "metric", "outcomes_name", "pair", "pair_questions",
           "read", "read_aar", "read_aar_scores", "read_json", "read_report", "write"]

# ------------------------------------------------------------------ file names

REPORT = "report.json"          # eval.retrieval (top-k, MRR, per-question first-hit ranks);
#                                 eval.multihop writes its chain figures under the same name
RESULTS = "retrieval.json"      # eval.retrieval: the DPR result file (questions of old reports)
AAR = "aar.json"                # eval.aar: AAR / AA score per strategy
ROBUSTNESS = "robustness.json"  # eval.robustness: top-k / MRR per distractor count K
E2E = "e2e.json"                # eval.e2e (one retriever's reader figures and outcomes)
_AAR_SCORES = ("aar_scores_", ".npz")  # eval.aar / eval.multihop: per-triplet scores
_OUTCOMES = ("outcomes_", ".json")     # the generic store (:func:`write`)


def aar_scores_name(strategy: str) -> str:
    """The per-triplet score file of one counterfactual strategy (or multi-hop hop)."""
    return f"{_AAR_SCORES[0]}{strategy}{_AAR_SCORES[1]}"


def outcomes_name(evaluator: str) -> str:
    """The generic outcome file of ``evaluator`` (:func:`write`)."""
    return f"{_OUTCOMES[0]}{evaluator}{_OUTCOMES[1]}"


def _strip(name: str, affix: tuple[str, str]) -> str:
    return name[len(affix[0]):-len(affix[1])]


def _glob(eval_dir: str, affix: tuple[str, str]) -> list[str]:
    return sorted(glob.glob(os.path.join(eval_dir, f"{affix[0]}*{affix[1]}")))


# ------------------------------------------------------------------ metrics

# "rho": a rank correlation over runs or settings (one figure, no per-item values).
KINDS = ("rate", "mean", "rank", "rho")
_VALUE_TYPES = {"rate": bool, "mean": float, "rank": None}  # per-item values of each kind
# The paired test of each kind (stats.compare_outcomes; a rank is paired as rates and a mean).
TESTS = {"rate": "binary", "mean": "mean"}


@dataclasses.dataclass(frozen=True)
class Metric:
    """A metric: stable ``id``, display ``label``, ``kind`` (one of :data:`KINDS`), and how its
    figures are shown (``scale``: None is the paired test's default, 100 for rates; ``digits``)."""

    id: str
    label: str
    kind: str
    scale: float | None = None
    digits: int = 2

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"metric {self.id}: kind {self.kind!r} is not one of {KINDS}")
        if not self.id or not self.label:
            raise ValueError(f"metric {self.id!r}: needs an id and a label")


def _rank_metrics(prefix: str, label: str, ks: Sequence[int]) -> list[Metric]:
    """The rows a first-hit rank gives: top-k hit rates, then MRR (×100)."""
    return ([Metric(f"{prefix}.top{k}", f"{label}top-{k}", "rate") for k in ks]
            + [Metric(f"{prefix}.mrr", f"{label}MRR (×100)", "mean", scale=100.0)])


_AAR_LABELS = {"sentence": "AAR", "answer": "AA score"}


def _aar_metrics(strategy: str) -> list[Metric]:
    """A counterfactual strategy's rows: the rate sim(q,p+) > sim(q,p*), then the mean gap."""
    return [Metric(f"aar.{strategy}", _AAR_LABELS.get(strategy, f"AAR ({strategy})"), "rate"),
            Metric(f"aar.{strategy}.gap", f"mean sim(q,p+) − sim(q,p*) ({strategy})", "mean",
                   digits=4)]


def _e2e_metrics(k: int) -> list[Metric]:
    return [Metric(f"e2e.em@{k}", f"EM@{k}", "rate"),
            Metric(f"e2e.f1@{k}", f"F1@{k}", "mean", scale=100.0)]


def _aar_type_metric(strategy: str, qtype: str) -> Metric:
    """A strategy's rate on the triplets of one question type (PiCL Table 6)."""
    return Metric(f"aar.{strategy}.type.{qtype}",
                  f"{_aar_metrics(strategy)[0].label} ({qtype})", "rate")


def _domain_metric(k: int, domain: str) -> Metric:
    """An in-domain run's passage-encoder marginal P − question-encoder marginal Q at top-k on
    its own test questions (studies.marginalize; the encoder-attribution paper's §9)."""
    return Metric(f"retrieval.top{k}.domain.{domain}", f"top-{k}: {domain}", "mean",
                  scale=100.0)


# Rank correlations of an encoder's marginal with a training-data statistic over fractions
# (studies.data_stats): (id tail, side, statistic as shown).
_RHO = {"p_coverage": ("P", "unique coverage"), "q_examples": ("Q", "#examples")}


def _rho_metric(k: int, tail: str) -> Metric:
    side, stat = _RHO[tail]
    return Metric(f"attribution.rho.top{k}.{tail}", f"top-{k}: ρ({side} marginal, {stat})", "rho")


# Multi-hop retrieval rows (studies.multihop): per-question hits at k of each rank.
_MULTIHOP = {"chain": "chain", "mdr": "MDR", "hop1": "hop-1", "hop2": "hop-2",
             "answer": "answer"}


def _multihop_metric(rank: str, k: int) -> Metric:
    return Metric(f"multihop.{rank}.r@{k}", f"{_MULTIHOP[rank]} R@{k}", "rate")


def _multihop_aar_metric(hop: str) -> Metric:
    return Metric(f"multihop.aar.{hop}", f"AAR {hop}", "rate")


# Robustness as a drop (issue 50): the per-item difference-in-differences of hit@k between two
# distractor counts. Held-out kinds alternate in the order the run recorded
# (robustness.json heldout.kinds, eval.robustness_heldout_kinds; default
# synthetic.distractors.HELDOUT_KINDS), so one step of K from K0 adds kind K0 mod len(kinds); a
# kind that cannot be built for a passage is skipped there and the next one fills in
# (distractors.heldout_variants), so the step's kind is the round robin's. A value swap cannot
# be told from p+ (a control).
_KIND_NAMES = {"value_swap": "value swap (control)"}  # the others: the kind's name, "_" as " "
DID_FAMILIES = {"heldout": "held-out", "pstar": "p*"}


def _kind_name(kind: str) -> str:
    return _KIND_NAMES.get(kind, kind.replace("_", " "))


DID_KINDS = tuple(_kind_name(k) for k in HELDOUT_KINDS)  # the default kinds' names, in order


def did_metric(family: str, k_from: int, k_to: int, k: int,
               kinds: Sequence[str] | None = None) -> Metric:
    """The drop of ``family`` (:data:`DID_FAMILIES`) from ``k_from`` to ``k_to`` distractors at
    top-``k``, B − A in points (> 0: B loses less). ``kinds``: the held-out kinds the runs
    recorded, in their order (None: ``HELDOUT_KINDS``). A one-step held-out drop is labelled by
    the kind that step adds; a selection other than the default is part of the id
    (``robustness.did.heldout:value_swap+...+rule_paraphrase.k3_4.top5``), so a check registered
    for one selection is never fed by runs of another."""
    if family not in DID_FAMILIES or not 0 <= k_from < k_to:
        raise KeyError(f"no drop metric for family {family!r}, K={k_from}→{k_to}")
    kinds = HELDOUT_KINDS if kinds is None else check_kinds(kinds)
    tag = f":{'+'.join(kinds)}" if family == "heldout" and kinds != HELDOUT_KINDS else ""
    if family == "heldout" and k_to == k_from + 1:
        name = _kind_name(kinds[k_from % len(kinds)])
    elif tag:
        name = f"{DID_FAMILIES[family]} ({', '.join(map(_kind_name, kinds))})"
    else:
        name = DID_FAMILIES[family]
    return Metric(f"robustness.did.{family}{tag}.k{k_from}_{k_to}.top{k}",
                  f"drop DiD {name} K={k_from}→{k_to}: top-{k}", "mean", scale=100.0)


def did_spec(metric_id: str) -> tuple[str, tuple[str, ...], int, int, int] | None:
    """``(family, kinds, K from, K to, k)`` of a drop metric id (:func:`did_metric`), else None
    (also for a kind selection that ``check_kinds`` refuses)."""
    parts = metric_id.split(".")
    if parts[:2] != ["robustness", "did"] or len(parts) != 5:
        return None
    family, _, tag = parts[2].partition(":")
    a, _, b = parts[3][1:].partition("_")
    if not (parts[3][:1] == "k" and a.isdigit() and b.isdigit() and parts[4][:3] == "top"
            and parts[4][3:].isdigit()) or family not in DID_FAMILIES \
            or (tag and family != "heldout"):
        return None
    try:
        kinds = check_kinds(tag.split("+")) if tag else HELDOUT_KINDS
    except ValueError:
        return None
    return family, kinds, int(a), int(b), int(parts[4][3:])


def did_kind(metric_id: str) -> str | None:
    """The held-out kind a one-step held-out drop id adds (``namesake`` for K 2→3 of the
    default selection), else None."""
    spec = did_spec(metric_id)
    if spec is None or spec[0] != "heldout" or spec[3] != spec[2] + 1:
        return None
    return spec[1][spec[2] % len(spec[1])]


# The metric table: every id the built-in evaluators save at their usual settings. Ids with
# another k, K, strategy, question type or domain follow the same pattern (:func:`metric`).
METRICS: dict[str, Metric] = {m.id: m for m in (
    *_rank_metrics("retrieval", "", (1, 5, 20, 100)),
    *_aar_metrics("sentence"), *_aar_metrics("answer"),
    *_rank_metrics("robustness.k5", "K=5 distractors: ", (1, 5, 20, 100)),
    *_rank_metrics("robustness.heldout.k5", "K=5 held-out distractors: ", (1, 5, 20, 100)),
    *_e2e_metrics(1), *_e2e_metrics(5), *_e2e_metrics(20),
    *(_rho_metric(k, t) for k in (1, 5, 20) for t in _RHO),
    *(_multihop_metric(r, k) for r in _MULTIHOP for k in (2, 10, 20)),
    *(_multihop_aar_metric(h) for h in ("hop1", "hop2")),
    *(did_metric(f, a, b, k) for f, a, b in (("heldout", 0, 5), ("pstar", 0, 5),
                                             ("heldout", 0, 1), ("heldout", 1, 2),
                                             ("heldout", 2, 3)) for k in (1, 5)))}

# Check families (eval.claims): one check per row whose id starts with the family's prefix.
FAMILIES = {".by_type": ".type.", ".by_domain": ".domain."}


def family_prefix(metric_id: str) -> str | None:
    """``aar.sentence.by_type`` -> ``aar.sentence.type.`` (every question type's row);
    ``retrieval.top1.by_domain`` -> ``retrieval.top1.domain.``; None for a single metric."""
    for suffix, infix in FAMILIES.items():
        if metric_id.endswith(suffix):
            return metric_id[:-len(suffix)] + infix
    return None


def family_label(metric_id: str) -> str:
    """A family's display name: its base metric's label and ``by type`` / ``by domain``."""
    for suffix in FAMILIES:
        if metric_id.endswith(suffix):
            return f"{metric(metric_id[:-len(suffix)]).label} {suffix[1:].replace('_', ' ')}"
    return metric(metric_id).label


def _parametrised_other(metric_id: str) -> Metric | None:
    """Question-type, domain, ρ, multi-hop and drop ids (their tails may hold dots)."""
    head, sep, tail = metric_id.partition(".type.")
    if sep and head.startswith("aar.") and head.count(".") == 1 and tail:
        return _aar_type_metric(head[4:], tail)
    head, sep, tail = metric_id.partition(".domain.")
    if sep and head.startswith("retrieval.top") and head[13:].isdigit() and tail:
        return _domain_metric(int(head[13:]), tail)
    parts = metric_id.split(".")
    if parts[:2] == ["attribution", "rho"] and len(parts) == 4 and parts[3] in _RHO \
            and parts[2][:3] == "top" and parts[2][3:].isdigit():
        return _rho_metric(int(parts[2][3:]), parts[3])
    if parts[0] == "multihop" and len(parts) == 3:
        if parts[1] == "aar" and parts[2] in ("hop1", "hop2"):
            return _multihop_aar_metric(parts[2])
        r, _, k = parts[2].partition("@")
        if parts[1] in _MULTIHOP and r == "r" and k.isdigit():
            return _multihop_metric(parts[1], int(k))
    spec = did_spec(metric_id)
    if spec is not None:
        family, kinds, a, b, k = spec
        try:
            return did_metric(family, a, b, k, kinds)
        except KeyError:
            return None
    return None


def _parametrised(metric_id: str) -> Metric | None:
    other = _parametrised_other(metric_id)
    if other is not None:
        return other
    parts = metric_id.split(".")
    tail = parts[-1]
    if parts[0] == "aar" and len(parts) in (2, 3) and (len(parts) == 2 or tail == "gap"):
        return _aar_metrics(parts[1])[len(parts) - 2]
    if parts[0] == "e2e" and len(parts) == 2 and "@" in tail:
        name, _, k = tail.partition("@")
        if k.isdigit() and name in ("em", "f1"):
            return _e2e_metrics(int(k))[("em", "f1").index(name)]
    head = ".".join(parts[:-1])
    if tail != "mrr" and not (tail.startswith("top") and tail[3:].isdigit()):
        return None
    ks = [int(tail[3:])] if tail != "mrr" else []
    if head == "retrieval":
        label = ""
    elif parts[0] == "robustness" and parts[-2][:1] == "k" and parts[-2][1:].isdigit():
        held = "held-out " if parts[1:-2] == ["heldout"] else ""
        if parts[1:-2] not in ([], ["heldout"]):
            return None
        label = f"K={parts[-2][1:]} {held}distractors: "
    else:
        return None
    rows = _rank_metrics(head, label, ks)
    return rows[0] if ks else rows[-1]


def metric(metric_id: str) -> Metric:
    """The metric called ``metric_id`` (the table, or an id of the same pattern with another
    k, K or strategy); raises ``KeyError`` for an unknown id."""
    found = METRICS.get(metric_id) or _parametrised(metric_id)
    if found is None:
        raise KeyError(f"unknown metric id {metric_id!r} (e.g. {', '.join(list(METRICS)[:6])})")
    return found


# ------------------------------------------------------------------ the generic store

@dataclasses.dataclass
class Outcomes:
    """One evaluator's per-item outcomes: ``keys`` (one string per item: what pairs items across
    runs, e.g. the question text), ``values`` (metric id -> one value per item: 0/1 for a rate, a
    number for a mean, a first-hit rank or None for a rank) and the metrics they measure. A rank
    metric also needs ``ks`` (the top-k rates to report) and ``depth`` (ranks counted)."""

    keys: list[str]
    values: dict[str, list[Any]]
    metrics: tuple[Metric, ...]
    ks: tuple[int, ...] = ()
    depth: int | None = None
    method: str | None = None

    def __post_init__(self) -> None:
        per_run = [m.id for m in self.metrics if m.kind not in _VALUE_TYPES]
        if per_run:
            raise ValueError(f"outcomes: {per_run} have no per-item values (kind rho)")
        ids = [m.id for m in self.metrics]
        if sorted(ids) != sorted(self.values):
            raise ValueError(f"outcomes: values for {sorted(self.values)} but metrics "
                             f"{sorted(ids)}")
        for mid, v in self.values.items():
            if len(v) != len(self.keys):
                raise ValueError(f"outcomes: metric {mid} has {len(v)} values for "
                                 f"{len(self.keys)} items")


def write(eval_dir: str, evaluator: str, outcomes: Outcomes) -> str:
    """Saves ``outcomes`` as ``eval_dir/outcomes_<evaluator>.json`` (atomic); returns the path."""
    path = os.path.join(eval_dir, outcomes_name(evaluator))
    os.makedirs(eval_dir, exist_ok=True)
    write_json(path, {"evaluator": evaluator, "method": outcomes.method,
                      "keys": [str(k) for k in outcomes.keys],
                      "metrics": [dataclasses.asdict(m) for m in outcomes.metrics],
                      "ks": list(outcomes.ks), "depth": outcomes.depth,
                      "values": outcomes.values})
    return path


def _read_generic(path: str) -> tuple[str, Outcomes]:
    try:
        with open(path) as f:
            raw = json.load(f)
        metrics = tuple(Metric(**m) for m in raw["metrics"])
        out = Outcomes(keys=raw["keys"], values=raw["values"], metrics=metrics,
                       ks=tuple(int(k) for k in raw.get("ks", ())), depth=raw.get("depth"),
                       method=raw.get("method"))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not an outcome file ({type(e).__name__}: {e})") from e
    return raw.get("evaluator") or _strip(os.path.basename(path), _OUTCOMES), out


# ------------------------------------------------------------------ the reader

def read_json(eval_dir: str, name: str, *, required: bool = False) -> Any:
    """A report ``name`` of ``eval_dir`` as JSON; None when absent (``FileNotFoundError`` if
    ``required``)."""
    path = os.path.join(eval_dir, name)
    if not os.path.isfile(path):
        if required:
            raise FileNotFoundError(f"{path}: no such report")
        return None
    with open(path) as f:
        return json.load(f)


def read_report(eval_dir: str, *, required: bool = False) -> dict[str, Any] | None:
    """The retrieval (or multi-hop chain) report of ``eval_dir`` (:func:`read_json`)."""
    return read_json(eval_dir, REPORT, required=required)


def read_aar(eval_dir: str, *, required: bool = False) -> dict[str, Any] | None:
    """The answer-awareness report of ``eval_dir`` (:func:`read_json`)."""
    return read_json(eval_dir, AAR, required=required)


def read_aar_scores(eval_dir: str, strategy: str, *,
                    dtype: Any = np.float64) -> dict[str, Any] | None:
    """One strategy's per-triplet scores: ``{"pos", "cf", "gold_index", "questions" (or None),
    "path"}``, the scores as ``dtype`` (None: as saved); None when absent."""
    path = os.path.join(eval_dir, aar_scores_name(strategy))
    if not os.path.isfile(path):
        return None
    with np.load(path) as z:
        gold = z["gold_index"] if "gold_index" in z.files else z["index"]
        pos, cf = (z["pos"], z["cf"]) if dtype is None else (z["pos"].astype(dtype),
                                                               z["cf"].astype(dtype))
        return {"pos": pos, "cf": cf,
                "gold_index": gold.astype(np.int64),
                "questions": [str(q) for q in z["questions"]] if "questions" in z.files else None,
                "path": path}


def evaluated(eval_dir: str, required: Sequence[str]) -> bool:
    """Whether ``eval_dir`` holds every report of ``required`` (file names)."""
    return all(os.path.exists(os.path.join(eval_dir, name)) for name in required)


def _step_of(path: str) -> int | None:
    base = os.path.basename(os.path.normpath(path))
    head, _, n = base.partition("_")
    return int(n) if head == "step" and n.isdigit() else None


def _has_outcomes(d: str) -> bool:
    return (os.path.exists(os.path.join(d, REPORT)) or os.path.exists(os.path.join(d, E2E))
            or bool(_glob(d, _AAR_SCORES)) or bool(_glob(d, _OUTCOMES)))


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
    # the generic store: evaluator -> (Outcomes, path)
    generic: dict[str, tuple[Outcomes, str]] = dataclasses.field(default_factory=dict)

    @property
    def label(self) -> str:
        name = self.method or "?"
        return name if self.step is None else f"{name} (step {self.step})"


def read(path: str, step: int | None = None) -> RunOutcomes:
    """Loads the per-item outcomes saved in ``path``'s eval directory (:func:`find_eval_dir`):
    the generic outcome files and the built-in evaluators' reports."""
    d = find_eval_dir(path, step)
    out = RunOutcomes(eval_dir=d, step=_step_of(d))
    rep = read_report(d)
    if rep is not None:
        out.report_path = os.path.join(d, REPORT)
        out.method = rep.get("method")
        out.step = rep.get("step", out.step)
        out.first_hit_rank = rep.get("first_hit_rank")
        out.depth = rep.get("k")
        out.ks = tuple(sorted(int(k) for k in rep.get("top_k", {})))
        out.questions = rep.get("questions")
        if out.questions is None and out.first_hit_rank is not None:
            results = read_json(d, RESULTS)  # reports written before issue 16
            if results is not None:
                out.questions = [r["question"] for r in results]
    for p in _glob(d, _AAR_SCORES):
        strategy = _strip(os.path.basename(p), _AAR_SCORES)
        out.aar[strategy] = read_aar_scores(d, strategy)
    rob = read_json(d, ROBUSTNESS)
    if rob is not None:
        out.robustness = {"questions": rob["questions"], "ks": [int(k) for k in rob["ks"]],
                          "k": int(rob["k"]), "path": os.path.join(d, ROBUSTNESS),
                          "first_hit_rank": {int(K): v for K, v in rob["first_hit_rank"].items()}}
        if "heldout" in rob:  # the held-out distractor family (eval.robustness_heldout)
            h = rob["heldout"]
            out.robustness["heldout"] = {
                "questions": h["questions"],
                # robustness.json written before issue 50 has no "kinds": the default three
                "kinds": tuple(h.get("kinds", HELDOUT_KINDS)),
                "first_hit_rank": {int(K): v for K, v in h["first_hit_rank"].items()}}
        out.method = out.method or rob.get("method")
    e2e = read_json(d, E2E)
    if e2e is not None and "em_outcomes" in e2e:  # one retriever's file (not the summary)
        out.e2e = {"questions": e2e["questions"], "path": os.path.join(d, E2E),
                   "em": {int(k): v for k, v in e2e["em_outcomes"].items()},
                   "f1": {int(k): v for k, v in e2e["f1_outcomes"].items()}}
        out.method = out.method or e2e.get("retriever")
    for p in _glob(d, _OUTCOMES):
        name, outcomes = _read_generic(p)
        out.generic[name] = (outcomes, p)
        out.method = out.method or outcomes.method
    if not out.method:
        aar = read_aar(d)
        if aar is not None:
            out.method = aar.get("method")
    return out


# ------------------------------------------------------------------ pairing

def _occurrence_keys(keys: Sequence[str]) -> list[tuple[str, int]]:
    seen: Counter = Counter()
    out = []
    for q in keys:
        out.append((q, seen[q]))
        seen[q] += 1
    return out


def pair_questions(qa: Sequence[str], qb: Sequence[str], path_a: str,
                   path_b: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices pairing two question (item key) lists, k-th occurrence of a text with its k-th;
    raises when they are not the same set."""
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


@dataclasses.dataclass
class Paired:
    """One metric's outcomes of runs A and B on the same items, in the same order."""

    metric: Metric
    a: np.ndarray
    b: np.ndarray


def _ranks(first: Sequence[int | None]) -> np.ndarray:
    """First-hit ranks as floats, inf for no hit."""
    return np.array([np.inf if r is None else float(r) for r in first])


def _rank_pairs(prefix: str, label: str, ra: np.ndarray, rb: np.ndarray, ks: Sequence[int],
                depth: int | None) -> list[Paired]:
    cut = np.inf if depth is None else depth

    def rr(r: np.ndarray) -> np.ndarray:
        return np.where(r <= cut, 1.0 / r, 0.0)

    ms = _rank_metrics(prefix, label, ks)
    return ([Paired(m, ra <= k, rb <= k) for m, k in zip(ms, ks)]
            + [Paired(ms[-1], rr(ra), rr(rb))])


def _shared_ks(ks_a: Sequence[int], ks_b: Sequence[int], depth: int | None) -> list[int]:
    return [k for k in sorted(set(ks_a) & set(ks_b)) if depth is None or k <= depth]


def _pair_retrieval(a: RunOutcomes, b: RunOutcomes, notes: list[str]) -> list[Paired]:
    if a.first_hit_rank is None or b.first_hit_rank is None:
        return []
    if a.questions is None or b.questions is None:
        raise ValueError(f"{a.report_path or a.eval_dir} or {b.report_path or b.eval_dir} "
                         f"lacks the question texts ({REPORT} 'questions' or {RESULTS}): "
                         f"cannot pair questions")
    ia, ib = pair_questions(a.questions, b.questions, a.report_path, b.report_path)
    ra, rb = _ranks(a.first_hit_rank)[ia], _ranks(b.first_hit_rank)[ib]
    depths = [x for x in (a.depth, b.depth) if x is not None]
    depth = min(depths) if depths else None
    notes.append(f"retrieval: {len(ia)} questions paired"
                 + ("" if list(a.questions) == list(b.questions) else " (by text)")
                 + (f"; depths differ ({a.depth} vs {b.depth}): MRR counts hits up to rank "
                    f"{depth}" if a.depth != b.depth else ""))
    return _rank_pairs("retrieval", "", ra, rb, _shared_ks(a.ks, b.ks, depth), depth)


def _pair_aar(a: RunOutcomes, b: RunOutcomes, notes: list[str]) -> list[Paired]:
    out: list[Paired] = []
    order = list(_AAR_LABELS)  # AAR, AA score, then any other strategy by name
    shared = sorted((s for s in a.aar if s in b.aar),
                    key=lambda s: (order.index(s) if s in order else len(order), s))
    for strategy in shared:
        sa, sb = a.aar[strategy], b.aar[strategy]
        common, ia, ib = np.intersect1d(sa["gold_index"], sb["gold_index"], assume_unique=False,
                                        return_indices=True)
        rate, gap = _aar_metrics(strategy)
        notes.append(f"{rate.label} ({strategy} p*): {len(common)} triplets paired by gold "
                     f"record (A scored {len(sa['pos'])}, B {len(sb['pos'])}; "
                     f"{len(sa['pos']) - len(common)} only in A, "
                     f"{len(sb['pos']) - len(common)} only in B)")
        if sa["questions"] is not None and sb["questions"] is not None:
            bad = sum(sa["questions"][i] != sb["questions"][j] for i, j in zip(ia, ib))
            if bad:
                raise ValueError(f"{sa['path']} and {sb['path']} were evaluated on different "
                                 f"question sets ({bad} paired gold records have different "
                                 f"questions); refusing to compare")
        else:
            notes.append(f"{rate.label}: paired by gold-record index only (score files without "
                         f"question texts)")
        if not len(common):
            continue
        pa, ca, pb, cb = sa["pos"][ia], sa["cf"][ia], sb["pos"][ib], sb["cf"][ib]
        out += [Paired(rate, pa > ca, pb > cb), Paired(gap, pa - ca, pb - cb)]
    return out


def _pair_robustness(a: RunOutcomes, b: RunOutcomes, notes: list[str]) -> list[Paired]:
    if not (a.robustness and b.robustness):
        return []
    out: list[Paired] = []
    depth = min(a.robustness["k"], b.robustness["k"])
    ks = _shared_ks(a.robustness["ks"], b.robustness["ks"], depth)
    families = [("", "robustness", a.robustness, b.robustness, "near-duplicate")]
    ha, hb = a.robustness.get("heldout"), b.robustness.get("heldout")
    if ha and hb:
        families.append(("held-out ", "robustness.heldout", ha, hb,
                         "held-out"))
    for held, prefix, fa, fb, what in families:
        counts = sorted(set(fa["first_hit_rank"]) & set(fb["first_hit_rank"]))
        name = "robustness" + (" (held-out)" if held else "")
        if not counts or fa["questions"] != fb["questions"]:
            why = "no common K" if not counts else "the runs have different questions"
            notes.append(f"{name}: not compared ({why})")
            continue
        K = counts[-1]
        # The held-out rows are named apart from the p* rows.
        out += _rank_pairs(f"{prefix}.k{K}", f"K={K} {held}distractors: ",
                           _ranks(fa["first_hit_rank"][K]), _ranks(fb["first_hit_rank"][K]),
                           ks, depth)
        notes.append(f"{name}: {len(fa['questions'])} questions, K={K} {what} distractors per "
                     f"question" + (" (value swap, paraphrase, namesake)" if held else ""))
    return out


def _pair_e2e(a: RunOutcomes, b: RunOutcomes, notes: list[str]) -> list[Paired]:
    if not (a.e2e and b.e2e):
        return []
    ia, ib = pair_questions(a.e2e["questions"], b.e2e["questions"], a.e2e["path"],
                            b.e2e["path"])
    out: list[Paired] = []
    for k in sorted(set(a.e2e["em"]) & set(b.e2e["em"])):
        em, f1 = _e2e_metrics(k)
        out += [Paired(em, np.asarray(a.e2e["em"][k], bool)[ia],
                       np.asarray(b.e2e["em"][k], bool)[ib]),
                Paired(f1, np.asarray(a.e2e["f1"][k], float)[ia],
                       np.asarray(b.e2e["f1"][k], float)[ib])]
    notes.append(f"end-to-end QA: {len(ia)} questions paired"
                 + ("" if a.e2e["questions"] == b.e2e["questions"] else " (by text)"))
    return out


def _pair_generic(a: RunOutcomes, b: RunOutcomes, notes: list[str]) -> list[Paired]:
    out: list[Paired] = []
    for name in sorted(set(a.generic) & set(b.generic)):
        (oa, pa), (ob, pb) = a.generic[name], b.generic[name]
        ia, ib = pair_questions(oa.keys, ob.keys, pa, pb)
        shared = {m.id for m in ob.metrics}
        depths = [x for x in (oa.depth, ob.depth) if x is not None]
        depth = min(depths) if depths else None
        for m in oa.metrics:
            if m.id not in shared:
                continue
            va, vb = oa.values[m.id], ob.values[m.id]
            dtype = _VALUE_TYPES[m.kind]
            if dtype is None:  # a rank: its top-k rates and MRR
                prefix = m.id[:-len(".rank")] if m.id.endswith(".rank") else m.id
                out += _rank_pairs(prefix, f"{m.label}: ", _ranks(va)[ia], _ranks(vb)[ib],
                                   _shared_ks(oa.ks, ob.ks, depth), depth)
            else:
                out.append(Paired(m, np.asarray(va, dtype)[ia], np.asarray(vb, dtype)[ib]))
        notes.append(f"{name}: {len(ia)} items paired"
                     + ("" if list(oa.keys) == list(ob.keys) else " (by key)"))
    return out


def pair(a: RunOutcomes, b: RunOutcomes) -> tuple[list[Paired], list[str]]:
    """Every metric both runs saved, on the items both evaluated, with notes on the pairing.

    Questions pair by text (k-th occurrence with k-th), and runs evaluated on different
    question sets are refused (``ValueError``); AAR triplets pair by gold-record index (the
    intersection, what only one run scored is counted in the notes; paired records must have
    the same question); robustness at the largest distractor count K both runs evaluated;
    top-k up to the shallower run's depth, MRR counting hits up to it."""
    notes: list[str] = []
    pairs = (_pair_retrieval(a, b, notes) + _pair_aar(a, b, notes)
             + _pair_robustness(a, b, notes) + _pair_e2e(a, b, notes)
             + _pair_generic(a, b, notes))
    if not pairs:
        raise ValueError(f"{a.eval_dir} and {b.eval_dir} share no saved per-item outcomes "
                         f"({REPORT}, {aar_scores_name('*')}, {ROBUSTNESS}, {E2E}, "
                         f"{outcomes_name('*')})")
    return pairs, notes
