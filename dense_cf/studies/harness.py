"""What every study shares: a study as data (:class:`Study`: its runs and the pairs it
compares), run naming per seed, the common flags, training or reuse of its runs
(:func:`train_study`), paired comparison (:func:`compare_study`) and the summary over seeds
(docs/ARCHITECTURE.md, "Studies").

A study trains runs named ``<name>`` for seed 0 and ``<name>_seed<N>`` for seed N > 0, beside
each other under its ``--out`` (:func:`run_dir`); a study over seeds that writes one directory
per seed puts seed N > 0 in ``<out>_seed<N>`` beside ``--out`` (:func:`seed_out`). Seed 0 has no
suffix so that the directories of studies run before ``--seeds`` existed are reused. This module
is the only place that spells the suffix (``tests/test_study_harness.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from typing import Any, Callable, Mapping, Sequence

import ml_collections
from absl import flags, logging

from dense_cf import methods
from dense_cf.analysis import compare as compare_lib
from dense_cf.configs.base import base_config, resolve_paths
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.eval import aar as aar_lib
from dense_cf.eval import aar_math, outcomes, stats
from dense_cf.eval import evaluators as evaluators_lib
from dense_cf.eval.aar import evaluate_aar
from dense_cf.eval.report import markdown_table
from dense_cf.experiment import train_and_evaluate
from dense_cf.files import (
    atomic_open,
    code_version,
    content_sha256,
    read_json,
    sha256_hex,
    stamp_line,
    utc_now,
    write_json,
)
from dense_cf.inputs import cf_masks
from dense_cf.inputs import dpr as dpr_inputs
from dense_cf.models import bert as bert_lib
from dense_cf.models import dual_encoder as dual_encoder_lib
from dense_cf.models import matmul as matmul_lib
from dense_cf.models.hf import resolve_model_dir
from dense_cf.progress import format_duration
from dense_cf.retrieval import export as export_lib
from dense_cf.train.run import RunDir, model_workdir, pretrained_run

__all__ = ["Compared", "Study", "StudyFlags", "StudyRun", "Trained", "compare_runs",
           "compare_study", "train_study", "untrained_aar", "define_seeds", "define_study_flags",
           "finished_eval_dir", "parse_seeds", "print_over_seeds", "run_dir", "seed_name",
           "seed_out", "spread_section", "study_over_seeds", "summarise_seeds", "train_or_read",
           "train_or_reuse", "with_new_defaults"]


# ------------------------------------------------------------------ naming

def seed_name(name: str, seed: int) -> str:
    """``name`` for seed 0, ``<name>_seed<N>`` for seed N > 0."""
    return name + (f"_seed{int(seed)}" if int(seed) else "")


def run_dir(out: str, name: str, seed: int) -> str:
    """The run directory of run ``name`` at ``seed`` under a study's ``out``."""
    return os.path.join(out, seed_name(name, seed))


def seed_out(out: str, seed: int) -> str:
    """Seed ``seed``'s study directory: ``out`` for seed 0, ``<out>_seed<N>`` beside it."""
    return seed_name(os.path.normpath(out), seed)


def parse_seeds(values: Sequence[str | int]) -> list[int]:
    """``--seeds`` as integers, in the order given; refuses an empty list and repeats."""
    seeds = [int(v) for v in values]
    if not seeds:
        raise ValueError("--seeds: give at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds repeats a seed: {seeds}")
    return seeds


# ------------------------------------------------------------------ flags

SEEDS_HELP = ("Training seeds (config.seed): every run is trained once per seed (seed N > 0 in "
              "<name>_seedN); with several, the mean and spread over seeds too.")


def define_seeds(flag_values: flags.FlagValues, help: str = SEEDS_HELP) -> flags.FlagHolder:
    """``--seeds`` (default ``0``) on ``flag_values``."""
    return flags.DEFINE_list("seeds", ["0"], help, flag_values=flag_values)


@dataclasses.dataclass(frozen=True)
class StudyFlags:
    """The flags every study command has: ``--out --seeds --steps --lr --model --batch``."""

    out: flags.FlagHolder
    seeds: flags.FlagHolder
    steps: flags.FlagHolder
    lr: flags.FlagHolder
    model: flags.FlagHolder
    batch: flags.FlagHolder

    def seed_list(self) -> list[int]:
        return parse_seeds(self.seeds.value)


def define_study_flags(flag_values: flags.FlagValues, *, out: str | None, steps: int,
                       lr: float = 5e-5, model: str = "minilm", batch: int = 16,
                       help: Mapping[str, str] | None = None) -> StudyFlags:
    """Defines the common flags on a study's own ``flag_values`` (tests import several studies
    in one process) with the study's defaults; ``help`` replaces a flag's help text."""
    text = {"out": "Directory for data and runs" + (" (default: a temp dir)." if out is None
                                                     else "."),
            "seeds": SEEDS_HELP, "steps": "Training steps per run.",
            "lr": "Learning rate.", "model": "model.name_or_path (minilm, tiny, a HF dir).",
            "batch": "Global batch (questions).", **(help or {})}
    fv = flag_values
    return StudyFlags(out=flags.DEFINE_string("out", out, text["out"], flag_values=fv),
                      seeds=define_seeds(fv, text["seeds"]),
                      steps=flags.DEFINE_integer("steps", steps, text["steps"], flag_values=fv),
                      lr=flags.DEFINE_float("lr", lr, text["lr"], flag_values=fv),
                      model=flags.DEFINE_string("model", model, text["model"], flag_values=fv),
                      batch=flags.DEFINE_integer("batch", batch, text["batch"], flag_values=fv))


# ------------------------------------------------------------------ reuse of finished runs

def _as_json(c: ml_collections.ConfigDict) -> dict[str, Any]:
    return json.loads(c.to_json_best_effort())


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [k for key in sorted(set(a) | set(b))
                for k in _diff_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


def config_key(config: ml_collections.ConfigDict) -> str:
    """A config as one canonical string: two runs with the same key are the same run."""
    return json.dumps(_as_json(config), sort_keys=True)


# Fields that choose how the same math is computed, not what is computed: a finished run that
# differs only in them is reused. model.attention_impl: the einsum and jax.nn.dot_product_attention
# paths agree within float tolerance (tests/test_attention.py), training under attention
# dropout takes the einsum path either way, and the demo's figures came out the same with both.
IMPLEMENTATION_FIELDS = ("model.attention_impl",)
# Fields that only initialise rows of tokens a method adds (dcsr.sent_init: DCSR's <sent>): for
# a method that adds no token they change nothing, so a finished run is reused across them (DPR
# runs saved before sent_init's default changed from cls to normal).
ADDED_TOKEN_FIELDS = ("dcsr.sent_init",)


def _ignored_fields(config: ml_collections.ConfigDict) -> tuple[str, ...]:
    """Config fields whose difference does not change ``config``'s run."""
    unused = () if methods.get(config.method).added_tokens else ADDED_TOKEN_FIELDS
    return IMPLEMENTATION_FIELDS + unused


def with_new_defaults(saved: Any, defaults: Any) -> Any:
    """``saved`` (a run's config as JSON) plus every field of ``defaults`` it lacks.

    Config fields are added with defaults that keep the behaviour from before them (e.g.
    ``data.synthetic.world = "entity"``, the ``reader`` and ``multihop`` blocks), so a run saved
    before a field existed was trained as if it had the default."""
    if not (isinstance(saved, dict) and isinstance(defaults, dict)):
        return saved
    out = dict(saved)
    for key, value in defaults.items():
        out[key] = with_new_defaults(saved[key], value) if key in saved else value
    return out


def _report_of(required: str) -> str:
    """The file that says evaluator ``required`` ran: its report."""
    return evaluators_lib.get(required).report


def finished_eval_dir(workdir: str, config: ml_collections.ConfigDict,
                      required: Sequence[str] = ("retrieval", "aar")) -> str | None:
    """The eval directory of a run in ``workdir`` that finished ``config``'s steps and was
    evaluated (the reports of the ``required`` evaluators are there); None when it must (still) be trained or
    evaluated. Raises when ``workdir`` holds a run of another config."""
    rd = RunDir(workdir)
    if not os.path.exists(rd.config):
        return None
    with open(rd.config) as f:
        saved = json.load(f)
    # The run saved its config with absolute paths (resolve_paths): compare like with like, so
    # a relative --out finds its own finished runs. Fields added since it was saved count at
    # their defaults, so finished runs stay reusable when the config grows.
    saved = with_new_defaults(saved, _as_json(base_config()))
    # Unset loss weights are the method's, on both sides (training saves them filled in).
    saved = _as_json(methods.with_loss_defaults(ml_collections.ConfigDict(saved)))
    diff = [k for k in _diff_keys(saved, _as_json(resolve_paths(methods.with_loss_defaults(config))))
            if k not in _ignored_fields(config)]
    if diff:
        raise ValueError(f"{workdir} holds a run trained with another config (differs in "
                         f"{', '.join(diff)}); use another --out")
    summary = _saved_summary(workdir)
    if not _at_last_step(summary, config) or "eval" not in summary:
        return None
    d = rd.eval(summary["step"])
    return d if outcomes.evaluated(d, [_report_of(n) for n in required]) else None


def _saved_summary(workdir: str) -> dict[str, Any] | None:
    """The run's ``summary.json``; None before training saved one."""
    path = RunDir(workdir).summary
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _at_last_step(summary: Mapping[str, Any] | None, config: ml_collections.ConfigDict) -> bool:
    return summary is not None and summary.get("step") == config.train.num_steps


def trained_through(workdir: str, config: ml_collections.ConfigDict) -> bool:
    """Whether the run in ``workdir`` finished training ``config``'s steps: its summary is at
    the last step (evaluated or not)."""
    return _at_last_step(_saved_summary(workdir), config)


Trainer = Callable[[ml_collections.ConfigDict, str], dict[str, Any]]


def train_or_reuse(workdir: str, config: ml_collections.ConfigDict, *,
                   required: Sequence[str] = ("retrieval", "aar"),
                   train: Trainer = train_and_evaluate) -> tuple[str, bool]:
    """``(eval directory, trained here?)`` of ``config``'s run in ``workdir``: a run that finished
    and was evaluated (:func:`finished_eval_dir`) is read back, not touched; otherwise
    ``train(config, workdir)`` trains (resuming its checkpoint) and evaluates it."""
    done = finished_eval_dir(workdir, config, required)
    if done is not None:
        return done, False
    mark_run_started(workdir)
    train(config, workdir).pop("run", None)  # the Run holds device arrays: let it go
    done = finished_eval_dir(workdir, config, required)
    if done is None:
        raise RuntimeError(f"{workdir}: no evaluation after training")
    record_run_times(workdir)
    return done, True


RUN_TIMES = "run_times.json"


def _read_run_times(workdir: str) -> dict[str, Any] | None:
    path = os.path.join(workdir, RUN_TIMES)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def mark_run_started(workdir: str) -> None:
    """Writes that an invocation starts training the run in ``workdir`` now (``finished``: None).
    When an earlier invocation started and never finished (killed, then resumed from its
    checkpoint), its start and commit stay, and this one is appended to ``resumed``: a report
    gives when the run's training really began, not when its last piece did."""
    now = {"started": utc_now(), **code_version()}
    prior = _read_run_times(workdir)
    if prior is not None and prior.get("finished") is None:
        record = {**prior, "resumed": [*prior.get("resumed", []), now]}
    else:
        record = {**now, "finished": None}
    os.makedirs(workdir, exist_ok=True)
    write_json(os.path.join(workdir, RUN_TIMES), record)


def record_run_times(workdir: str) -> None:
    """Writes that the run in ``workdir`` finished now, completing the record
    :func:`mark_run_started` began (its first start, commit and dirty flag, and any
    ``resumed``), for every report that uses the run (issue 50: reports carry each run's start
    and end)."""
    prior = _read_run_times(workdir)
    if prior is None or prior.get("finished") is not None:
        raise RuntimeError(f"{os.path.join(workdir, RUN_TIMES)}: no unfinished start to complete "
                           "(mark_run_started comes first)")
    write_json(os.path.join(workdir, RUN_TIMES), {**prior, "finished": utc_now()})


def report_stamp(started: str, workdirs: Mapping[str, str]) -> dict[str, Any]:
    """A report's stamp: the commit and dirty flag now, the invocation's ``started`` and now as
    its end, and each run's times (:func:`run_times`) under ``runs`` ({label: workdir})."""
    return {**code_version(), "started": started, "finished": utc_now(),
            "runs": {k: run_times(w) for k, w in workdirs.items()}}


def stamp_markdown(stamp: Mapping[str, Any]) -> str:
    """The stamp as markdown: one line (``files.stamp_line``) and one line per run."""
    runs = "".join(f"\n- {k}: {format_run_times(t, code='`')}"
                   for k, t in stamp.get("runs", {}).items())
    return stamp_line(dict(stamp)) + (f"\n\nRuns (trained, UTC):{runs}" if runs else "")


def format_run_times(times: Mapping[str, Any], code: str = "") -> str:
    """``started → finished at <commit>`` of :func:`run_times` (``code``: the commit's quotes),
    with each resumption ``(resumed <time> at <commit>)``; a run still training ends in "…"."""
    def at(t: Mapping[str, Any]) -> str:
        return (f" at {code}{t['commit'][:10]}{code}{' (dirty)' if t.get('dirty') else ''}"
                if t.get("commit") else "")
    out = f"{times['started']} → {times['finished'] or '…'}{at(times)}"
    return out + "".join(f" (resumed {r['started']}{at(r)})" for r in times.get("resumed", ()))


def run_times(workdir: str) -> dict[str, Any]:
    """When the run in ``workdir`` was trained (:func:`train_or_reuse` writes it): ``{"started",
    "finished", "commit", "dirty"}`` (UTC; ``finished`` None while it trains) and, when it was
    resumed, ``resumed`` (``[{"started", "commit", "dirty"}]``), or ``{"started": "unknown",
    ...}`` for a run trained before issue 50 stamped runs."""
    return _read_run_times(workdir) or {
        "started": "unknown (before issue 50)", "finished": "unknown (before issue 50)",
        "commit": None, "dirty": None}


def train_or_read(workdir: str, config: ml_collections.ConfigDict, *,
                  required: Sequence[str] = (),
                  train: Trainer = train_and_evaluate) -> tuple[dict[str, Any], bool]:
    """``(summary, trained here?)``: the run's saved ``summary.json`` (step, training figures
    and its ``eval``), after training and evaluating it unless it had finished
    (:func:`train_or_reuse`). Read back from the file either way, so a study's tables are the
    same whether its runs were trained now or reused (JSON keys: ``top_k["5"]``)."""
    _, trained = train_or_reuse(workdir, config, required=required, train=train)
    with open(RunDir(workdir).summary) as f:
        return json.load(f), trained


def seed_from_trained(trained: "Trained", workdir: str, config: ml_collections.ConfigDict
                      ) -> None:
    """Makes ``workdir`` hold ``trained``'s model at its final step, so that training ``config``
    there has no step left and only evaluates (an evaluation-only run: ``StudyRun.trained_by``).
    ``config`` may differ from ``trained.config`` in ``eval.*`` only: anything else would mean
    another model, and is refused naming the fields. The checkpoint is copied, not linked, so
    nothing written in ``workdir`` can touch the trained run's files; an existing checkpoint
    in ``workdir`` (an earlier, interrupted evaluation) is kept."""
    diff = [k for k in _diff_keys(_as_json(trained.config), _as_json(config))
            if not k.startswith("eval.")]
    if diff:
        raise ValueError(f"{workdir}: an evaluation-only run of {trained.name} may change eval.* "
                         f"only; its config differs in {', '.join(diff)}")
    src = os.path.join(RunDir(trained.workdir).checkpoints, str(trained.step))
    dst_root = RunDir(workdir).checkpoints
    if os.path.isdir(dst_root) and os.listdir(dst_root):
        return
    if not os.path.isdir(src):
        raise FileNotFoundError(f"{src}: {trained.name}'s final checkpoint (step {trained.step}) "
                                f"is missing; {workdir} evaluates that model")
    partial = dst_root + ".partial"  # a copy cut short is never taken for the checkpoint
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(src, os.path.join(partial, str(trained.step)))
    os.makedirs(dst_root, exist_ok=True)
    os.replace(os.path.join(partial, str(trained.step)), os.path.join(dst_root, str(trained.step)))
    os.rmdir(partial)


# ------------------------------------------------------------------ a study as data

@dataclasses.dataclass(frozen=True)
class StudyRun:
    """One run of a study: its ``name`` (its directory: :func:`run_dir`) and its config at a
    seed (a function of ``dense_cf.configs.studies``); ``required``: the evaluators whose
    reports in its eval directory make a finished run reusable (:func:`finished_eval_dir`);
    ``trained_by``: "" (the run trains) or an earlier run of the study whose trained model this
    run evaluates under its own config, which may differ from that run's in ``eval.*`` only
    (:func:`seed_from_trained`: nothing is trained again)."""

    name: str
    config: Callable[[int], ml_collections.ConfigDict]
    required: tuple[str, ...] = ("retrieval", "aar")
    trained_by: str = ""


@dataclasses.dataclass(frozen=True)
class Study:
    """A study's definition: its runs, each trained once per seed, and the pairs ``(A, B)`` of
    run names compared at each seed on the same test items (:func:`compare_study`)."""

    name: str
    runs: tuple[StudyRun, ...]
    pairs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        names = [r.name for r in self.runs]
        if len(set(names)) != len(names):
            raise ValueError(f"study {self.name}: run names repeat: {names}")
        unknown = sorted({n for pair in self.pairs for n in pair} - set(names))
        if unknown:
            raise ValueError(f"study {self.name}: pairs name runs it does not have: {unknown}")
        for i, r in enumerate(self.runs):
            if r.trained_by and r.trained_by not in names[:i]:
                raise ValueError(f"study {self.name}: run {r.name} is trained_by "
                                 f"{r.trained_by!r}, which is not an earlier run of the study")


@dataclasses.dataclass
class Trained:
    """A study's run at one seed, trained here or read back from its directory."""

    name: str
    seed: int
    workdir: str
    config: ml_collections.ConfigDict
    summary: dict[str, Any]        # its summary.json (step, training figures, ``eval``)
    trained: bool                  # trained (or resumed) by this call
    seconds: float                 # this call's time on it
    same_as: str | None = None     # an earlier run of the same config, whose directory it is
    run: Any = None                # the trained Run, when train_study(reuse=False)

    @property
    def step(self) -> int:
        return int(self.summary["step"])

    @property
    def eval_dir(self) -> str:
        return RunDir(self.workdir).eval(self.step)


def train_study(study: Study, out: str, seeds: Sequence[int], *, reuse: bool = True,
                workdir: Callable[[str, int], str] | None = None,
                train: Trainer = train_and_evaluate) -> dict[tuple[str, int], Trained]:
    """Every run of ``study`` at every seed (seed by seed, runs in order), keyed ``(name,
    seed)``, in ``workdir(name, seed)`` (default :func:`run_dir` under ``out``).

    ``reuse``: a run that finished and was evaluated with the same config is read back, not
    touched (:func:`train_or_reuse`); otherwise ``train`` trains it, resuming its checkpoint,
    and the trained ``Run`` is dropped. ``reuse=False``: ``train`` is called on every run (it
    resumes a finished one and evaluates it again, ``trained`` False and its run times kept)
    and its ``Run`` kept in ``Trained.run``, for a study that goes on with the trained models
    (a reader stage). Either way a run whose
    config equals an earlier one's is that run (``same_as``). Logs each run with the elapsed
    time and an ETA from the runs trained so far."""
    seeds = parse_seeds(list(seeds))
    where = workdir or (lambda name, seed: run_dir(out, name, seed))
    jobs = [(seed, r) for seed in seeds for r in study.runs]
    done: dict[tuple[str, int], Trained] = {}
    by_config: dict[str, Trained] = {}
    trained_s, n_trained, t_start = 0.0, 0, time.perf_counter()
    for i, (seed, spec) in enumerate(jobs, 1):
        cfg = spec.config(seed)
        wd = where(spec.name, seed)
        left = len(jobs) - i + 1
        eta = format_duration(trained_s / n_trained * left) if n_trained else "unknown"
        logging.info("%s: run %d of %d: %s (seed %d) -> %s; elapsed %s, ETA %s", study.name, i,
                     len(jobs), spec.name, seed, wd,
                     format_duration(time.perf_counter() - t_start), eta)
        key = config_key(cfg)
        if key in by_config:
            first = by_config[key]
            logging.info("%s: %s has the config of %s; reusing %s", study.name, spec.name,
                         first.name, first.workdir)
            done[spec.name, seed] = dataclasses.replace(
                first, name=spec.name, trained=False, seconds=0.0, same_as=first.name)
            continue
        t0 = time.perf_counter()
        run = None
        if spec.trained_by:
            seed_from_trained(done[spec.trained_by, seed], wd, cfg)
        if reuse:
            summary, trained = train_or_read(wd, cfg, required=spec.required, train=train)
        else:
            # A run whose training had finished is only resumed at its last step and evaluated
            # again: its training times stay as they were, and it does not count towards the
            # ETA. Its evaluation does not decide this (the data-stats runs have none of their
            # own), and a start left unfinished by a killed invocation is completed.
            prior = _read_run_times(wd)
            trained = (not trained_through(wd, cfg)
                       or (prior is not None and prior.get("finished") is None))
            if trained:
                mark_run_started(wd)
            summary = dict(train(cfg, wd))
            run = summary.pop("run", None)
            if trained:
                record_run_times(wd)
        seconds = time.perf_counter() - t0
        if trained:
            trained_s, n_trained = trained_s + seconds, n_trained + 1
        logging.info("%s: %s (seed %d) %s in %s", study.name, spec.name, seed,
                     "trained and evaluated" if trained else "finished earlier, read back",
                     format_duration(seconds))
        done[spec.name, seed] = by_config[key] = Trained(spec.name, seed, wd, cfg, summary,
                                                         trained, seconds, run=run)
    return done


@dataclasses.dataclass(frozen=True)
class Compared:
    """Pair ``(a, b)`` of a study at one seed: ``analysis.compare``'s result, or the error that
    stopped it (:func:`compare_study` with ``catch``)."""

    a: str
    b: str
    seed: int
    result: dict[str, Any] | Exception


def compare_study(study: Study, trained: Mapping[tuple[str, int], Trained],
                  seeds: Sequence[int], *, label: Callable[[str, int], str] | None = None,
                  n_resamples: int = stats.DEFAULT_RESAMPLES, bootstrap_seed: int = 0,
                  catch: bool = False) -> list[Compared]:
    """``study.pairs`` at each seed (seed by seed), paired on the same test items
    (:func:`compare_runs`), named ``label(name, seed)`` in the result (default: the run names).
    A pair whose two runs are one run (``Trained.same_as``) is left out. ``catch``: a pair that
    cannot be compared (no report, other test items) gives its error instead of raising."""
    name = label or (lambda n, _seed: n)
    out = []
    for seed in seeds:
        for a, b in study.pairs:
            ta, tb = trained[a, seed], trained[b, seed]
            if ta.workdir == tb.workdir:
                continue
            try:
                res: dict[str, Any] | Exception = compare_runs(
                    (ta.workdir, ta.step), (tb.workdir, tb.step), (name(a, seed), name(b, seed)),
                    n_resamples=n_resamples, seed=bootstrap_seed)
            except (ValueError, FileNotFoundError) as e:
                if not catch:
                    raise
                res = e
            out.append(Compared(a, b, int(seed), res))
    return out


# ------------------------------------------------------------------ the untrained checkpoint

UNTRAINED_STRATEGIES = ("sentence", "answer")
# The code an untrained AAR depends on: a change to any of these files is a new cache key.
_AAR_CODE = (aar_lib, aar_math, cf_masks, dpr_inputs, export_lib, bert_lib, matmul_lib,
             dual_encoder_lib)


def cache_root() -> str | None:
    """Where results are cached across runs and work directories: ``$DENSE_CF_CACHE``, default
    ``~/.cache/dense_cf``; ``DENSE_CF_CACHE=off`` turns caching off (None)."""
    root = os.environ.get("DENSE_CF_CACHE", "")
    if root.lower() == "off":
        return None
    return root or os.path.join(os.path.expanduser("~"), ".cache", "dense_cf")


def _file_sha(path: str) -> str:
    def chunks():
        with open(path, "rb") as f:
            yield from iter(lambda: f.read(1 << 20), b"")
    return content_sha256(chunks())


def untrained_aar_key(cfg: ml_collections.ConfigDict) -> str:
    """The cache key of an untrained AAR (``files.sha256_hex``): the checkpoint's files and
    the gold and test files by content, the model and data settings the AAR reads, the
    strategies, and the source of the code that computes it (so a code change recomputes)."""
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    weights = {os.path.relpath(os.path.join(root, name), model_dir):
               _file_sha(os.path.join(root, name))
               for root, _, names in os.walk(model_dir) for name in sorted(names)}
    data = {f: _file_sha(resolve_data_file(cfg.data, f)) for f in ("gold_file", "test_file")}
    code = {m.__name__: _file_sha(m.__file__) for m in _AAR_CODE}
    settings = {"model": cfg.model.to_dict(), "max_q_len": cfg.data.max_q_len,
                "max_p_len": cfg.data.max_p_len, "answer_mode": cfg.data.answer_mode,
                "window": cfg.data.window, "strategies": UNTRAINED_STRATEGIES}
    return sha256_hex("untrained_aar", weights, data, code, settings)


def untrained_aar(cfg: ml_collections.ConfigDict, out: str) -> dict[str, Any] | None:
    """The AAR report (sentence p* and answer-removed: AAR and AA score) of ``cfg``'s checkpoint
    before any training, read with ``cfg``'s pooling, on its test triplets, written under
    ``out`` (``model_workdir``). A trained row below it was degraded by training (issue 32
    item 6). ``None`` for a random ``tiny`` model, which has no checkpoint worth scoring.

    Computed once per world and model: the report is cached under :func:`cache_root`
    (``untrained_aar/<untrained_aar_key>.json``) and read back by any later run with the same
    checkpoint, data files, settings and code, whatever its work directory (``cached_from``
    then names the first run's report directory)."""
    if cfg.model.name_or_path == "tiny" or not cfg.data.gold_file:
        return None
    root = cache_root()
    path = (os.path.join(root, "untrained_aar", untrained_aar_key(cfg) + ".json")
            if root else None)
    cached = read_json(path) if path else None
    if isinstance(cached, dict) and cached.get("strategies"):
        logging.info("untrained AAR: cached in %s (from %s)", path, cached.get("out_dir"))
        return {**cached, "cached_from": cached.get("out_dir"), "cache_file": path}
    result = evaluate_aar(model_workdir(cfg, out), run=pretrained_run(cfg),
                          strategies=UNTRAINED_STRATEGIES)
    if path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_json(path, result)
        except OSError as e:  # a read-only home: the run goes on, uncached
            logging.warning("untrained AAR: not cached (%s)", e)
    return result


# ------------------------------------------------------------------ paired comparison

def compare_runs(a: tuple[str, int | None], b: tuple[str, int | None], names: tuple[str, str], *,
                 n_resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Runs ``a`` and ``b`` (``(run directory, step)``) paired on the same test items
    (:func:`dense_cf.analysis.compare.compare`: McNemar on hits, paired bootstrap on means)."""
    return compare_lib.compare(a[0], b[0], step_a=a[1], step_b=b[1], seed=seed, names=names,
                               n_resamples=n_resamples, verbose=False)


# ------------------------------------------------------------------ over seeds

def spread_section(seeds: Sequence[int], spread: Sequence[dict[str, Any]],
                   columns: Sequence[str] | None = None, intro: str = "") -> str:
    """Markdown: ``## Mean ± std [min, max] over seeds [...]`` and ``spread``'s table
    (``stats.seed_table`` rows; ``columns`` default to the first row's)."""
    return (f"## Mean ± std [min, max] over seeds {list(seeds)}\n\n" + intro
            + markdown_table(list(spread), list(columns or spread[0])))


def summarise_seeds(results: Sequence[dict[str, Any]],
                    summarise: Callable[[Sequence[dict[str, Any]]], dict[str, Any]], out: str, *,
                    files: Mapping[int, str], files_key: str = "summaries",
                    stem: str = "over_seeds") -> dict[str, Any]:
    """With one result: it. With several: ``summarise(results)`` (``seeds`` and ``markdown``
    among its keys) plus ``files`` (each seed's own report) under ``files_key``, written to
    ``out/<stem>.{json,md}`` (the JSON without the markdown), and the results under
    ``per_seed``."""
    if len(results) == 1:
        return results[0]
    res = summarise(results)
    res[files_key] = {s: files[s] for s in res["seeds"]}
    # Each seed's report carries its runs' times; this summary, the commit it was written at.
    res["stamp"] = {**code_version(), "written": utc_now()}
    write_json(os.path.join(out, f"{stem}.json"), {k: v for k, v in res.items() if k != "markdown"})
    with atomic_open(os.path.join(out, f"{stem}.md")) as f:
        f.write(res["markdown"])
    return {**res, "per_seed": list(results)}


def study_over_seeds(study: Callable[..., dict[str, Any]],
                     summarise: Callable[[Sequence[dict[str, Any]]], dict[str, Any]], out: str,
                     seeds: Sequence[int], **kw: Any) -> dict[str, Any]:
    """``study`` (``study(out, seed=, **kw)``, writing ``summary.json`` in its ``out``) once per
    seed into :func:`seed_out`; :func:`summarise_seeds` of the results, with each seed's
    ``summary.json`` under ``summaries``."""
    results = [study(seed_out(out, int(s)), seed=int(s), **kw) for s in seeds]
    files = {int(s): os.path.join(os.path.abspath(seed_out(out, int(s))), "summary.json")
             for s in seeds}
    return summarise_seeds(results, summarise, out, files=files)


def print_over_seeds(out: str, seeds: Sequence[int], res: dict[str, Any]) -> None:
    """A study command's output: its ``summary.json`` path as JSON; with several seeds first
    the over-seeds tables, and the JSON adds the seeds' summaries and ``over_seeds.json``."""
    summary = os.path.join(os.path.abspath(out), "summary.json")
    if len(seeds) == 1:
        print(json.dumps({"summary": summary}))
        return
    print("\n" + res["markdown"])
    print(json.dumps({"summary": summary, "summaries": res["summaries"],
                      "over_seeds": os.path.join(os.path.abspath(out), "over_seeds.json")}))
