"""What every study shares: run naming per seed, the common flags, reuse of finished runs,
paired comparison of two runs and the summary over seeds (docs/ARCHITECTURE.md, "Studies").

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
from typing import Any, Callable, Mapping, Sequence

import ml_collections
from absl import flags

from dense_cf import methods
from dense_cf.configs.base import base_config, resolve_paths
from dense_cf.eval import compare as compare_lib
from dense_cf.eval import stats
from dense_cf.eval.report import markdown_table
from dense_cf.experiment import train_and_evaluate
from dense_cf.files import atomic_open, write_json
from dense_cf.train.run import RunDir

__all__ = ["StudyFlags", "compare_runs", "define_seeds", "define_study_flags",
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


def finished_eval_dir(workdir: str, config: ml_collections.ConfigDict,
                      required: Sequence[str] = ("report.json", "aar.json")) -> str | None:
    """The eval directory of a run in ``workdir`` that finished ``config``'s steps and was
    evaluated (the ``required`` reports are there); None when it must (still) be trained or
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
    if not os.path.exists(rd.summary):
        return None
    with open(rd.summary) as f:
        summary = json.load(f)
    if summary.get("step") != config.train.num_steps or "eval" not in summary:
        return None
    d = rd.eval(summary["step"])
    ok = all(os.path.exists(os.path.join(d, f)) for f in required)
    return d if ok else None


Trainer = Callable[[ml_collections.ConfigDict, str], dict[str, Any]]


def train_or_reuse(workdir: str, config: ml_collections.ConfigDict, *,
                   required: Sequence[str] = ("report.json", "aar.json"),
                   train: Trainer = train_and_evaluate) -> tuple[str, bool]:
    """``(eval directory, trained here?)`` of ``config``'s run in ``workdir``: a run that finished
    and was evaluated (:func:`finished_eval_dir`) is read back, not touched; otherwise
    ``train(config, workdir)`` trains (resuming its checkpoint) and evaluates it."""
    done = finished_eval_dir(workdir, config, required)
    if done is not None:
        return done, False
    train(config, workdir).pop("run", None)  # the Run holds device arrays: let it go
    done = finished_eval_dir(workdir, config, required)
    if done is None:
        raise RuntimeError(f"{workdir}: no evaluation after training")
    return done, True


def train_or_read(workdir: str, config: ml_collections.ConfigDict, *,
                  train: Trainer = train_and_evaluate) -> tuple[dict[str, Any], bool]:
    """``(summary, trained here?)``: the run's saved ``summary.json`` (step, training figures
    and its ``eval``), after training and evaluating it unless it had finished
    (:func:`train_or_reuse`). Read back from the file either way, so a study's tables are the
    same whether its runs were trained now or reused (JSON keys: ``top_k["5"]``)."""
    _, trained = train_or_reuse(workdir, config, required=(), train=train)
    with open(RunDir(workdir).summary) as f:
        return json.load(f), trained


# ------------------------------------------------------------------ paired comparison

def compare_runs(a: tuple[str, int | None], b: tuple[str, int | None], names: tuple[str, str], *,
                 n_resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Runs ``a`` and ``b`` (``(run directory, step)``) paired on the same test items
    (:func:`dense_cf.eval.compare.compare`: McNemar on hits, paired bootstrap on means)."""
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
