"""End to end at scale: a synthetic corpus of ``--num_passages`` through data → train → passage
store → export → index → retrieval evaluation, one process per stage, with each stage's wall
time, peak RSS and disk (docs/scale.md "End to end at scale").

    python -m dense_cf.bench.scale --out runs/scale_1m [--num_passages 1000000] \\
        [--config configs/scale_1m.py] [--override train.num_steps=50] \\
        [--stages data,train,store,export,index,eval] [--redo]

Stages, each a child process so that its peak RSS (``ru_maxrss`` of that child, from
``os.wait4``) is its own:

- ``data``: ``synthetic.generate`` writes the corpus TSV, ``--train_questions`` training and
  ``--test_questions`` test questions (BM25 hard negatives for at most ``--max_mined``);
- ``train``: ``python -m dense_cf.main`` on ``--config`` (tiny model by default);
- ``store``: the corpus's passage store, written in one streamed pass
  (``eval.retrieval.run_corpus``);
- ``export``: the passage vectors (``retriever.export_corpus``: streamed rows, resumable shards);
- ``index``: the ``eval.index`` index of the export (``retriever.ensure_index``; the export is
  checked and reused);
- ``eval``: ``eval.retrieval.evaluate_run``, the retrieval evaluation binary's function, which
  reuses the store, export and index: question encoding, search, DPR metrics, result files.

A finished stage leaves ``OUT/stages/<stage>.json`` and is skipped when the command runs again
(``--redo`` runs it anyway); an interrupted export resumes from its shards. The table gives
each stage's wall seconds, passages per second, peak RSS, and the bytes on disk of what it
wrote; ``OUT/scale.json`` and ``OUT/scale.md`` keep it, with the linear projection of every
stage to ``--project_n`` passages on one host and on ``--project_hosts`` (:func:`project`;
``--baseline OTHER_OUT``, a run at another size, makes it a two-point line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Sequence

from absl import flags, logging

from dense_cf import app as _app
from dense_cf import files
from dense_cf.bench.rss import peak_rss_bytes
from dense_cf.eval import report as report_lib
from dense_cf.eval.retrieval import evaluate_run, run_corpus
from dense_cf.retrieval.retriever import ensure_index, export_corpus
from dense_cf.synthetic import generate as synthetic
from dense_cf.train.run import load_config, load_run

FLAGS = flags.FlagValues()
_OUT = flags.DEFINE_string("out", "runs/scale_1m", "Output directory (resumable).",
                           flag_values=FLAGS)
_N = flags.DEFINE_integer("num_passages", 1_000_000, "Corpus passages.", flag_values=FLAGS)
_CONFIG = flags.DEFINE_string("config", "configs/scale_1m.py",
                              "Config file of the run (main's --config; ':arg' allowed).",
                              flag_values=FLAGS)
_OVERRIDE = flags.DEFINE_multi_string("override", [],
                                      "KEY=VALUE config override for training (main's "
                                      "--config.KEY=VALUE), repeatable.", flag_values=FLAGS)
_STAGES = flags.DEFINE_list("stages", "data,train,store,export,index,eval", "Stages to run.",
                            flag_values=FLAGS)
_REDO = flags.DEFINE_bool("redo", False, "Run finished stages again.", flag_values=FLAGS)
_TRAIN_Q = flags.DEFINE_integer("train_questions", 10_000, "Training questions.",
                                flag_values=FLAGS)
_TEST_Q = flags.DEFINE_integer("test_questions", 1_000, "Test questions.", flag_values=FLAGS)
_MAX_MINED = flags.DEFINE_integer("max_mined", 2_000,
                                  "Questions per split given BM25 hard negatives.",
                                  flag_values=FLAGS)
_SEED = flags.DEFINE_integer("seed", 0, "Generator seed.", flag_values=FLAGS)
_PROJECT_N = flags.DEFINE_integer("project_n", 21_015_324,
                                  "Passages to project to (psgs_w100).", flag_values=FLAGS)
_HOSTS = flags.DEFINE_integer("project_hosts", 8, "Hosts of the multi-host projection.",
                              flag_values=FLAGS)
_BASELINE = flags.DEFINE_string("baseline", None,
                                "OUT of a run at another --num_passages: the projection is the "
                                "line through both measurements (else proportional).",
                                flag_values=FLAGS)
_STAGE = flags.DEFINE_string("stage", None, "Internal: run one stage in this process.",
                             flag_values=FLAGS)

STAGES = ("data", "train", "store", "export", "index", "eval")
# Stages whose work splits over hosts (data-parallel export; each host indexes its share of the
# rows). Data generation, the passage store (one sequential pass over the TSV), training at a
# fixed step count and the evaluation (search is single-host today) do not shrink with hosts.
PARALLEL_STAGES = ("export", "index")


def _paths(out: str) -> dict[str, str]:
    return {"data": os.path.join(out, "data"), "run": os.path.join(out, "run"),
            "stages": os.path.join(out, "stages")}


# ------------------------------------------------------------------------------------------
# Children: one stage each
# ------------------------------------------------------------------------------------------

def _stage_data(out: str) -> dict[str, Any]:
    n = _N.value
    res = synthetic.generate(_paths(out)["data"], n, _SEED.value,
                             train_per_passage=_TRAIN_Q.value / n, dev_frac=0.05,
                             test_questions=_TEST_Q.value, num_hard_negatives=1,
                             max_mined=_MAX_MINED.value)
    return {"output": _paths(out)["data"], "counts": {k: v for k, v in res["counts"].items()
                                                      if isinstance(v, (int, float))},
            "timing": res["timing"]}


def _run_and_corpus(out: str):
    run = load_run(_paths(out)["run"])
    rd, corpus = run_corpus(_paths(out)["run"], run.config)
    return run, rd, corpus


def _stage_store(out: str) -> dict[str, Any]:
    cfg = load_config(_paths(out)["run"])  # the store needs the config, not the model
    rd, corpus = run_corpus(_paths(out)["run"], cfg)
    return {"output": cfg.eval.corpus_store or rd.corpus_store(), "passages": len(corpus),
            "skipped": corpus.skipped}


def _stage_export(out: str) -> dict[str, Any]:
    run, rd, corpus = _run_and_corpus(out)
    e = run.config.eval
    manifest, seconds = export_corpus(run, corpus, rd.root, sentences=run.method.unit == "sentence",
                                      batch_size=e.batch_size, dtype=e.embedding_dtype,
                                      shard_size=e.shard_size)
    return {"output": rd.export(run.step), "passages": len(corpus), "export_s": seconds,
            "passages_per_s": manifest.get("passages_per_s"),
            "encoded_this_run": manifest.get("encoded_this_run"), "dtype": manifest.get("dtype"),
            "dim": manifest.get("dim")}


def _stage_index(out: str) -> dict[str, Any]:
    run, rd, corpus = _run_and_corpus(out)
    e = run.config.eval
    _, timing = ensure_index(run, corpus, rd.root, kind=e.index, batch_size=e.batch_size,
                             dtype=e.embedding_dtype, shard_size=e.shard_size)
    return {"output": rd.index(run.step, e.index), "passages": len(corpus), "index": e.index,
            **{k: v for k, v in timing.items() if isinstance(v, (int, float, bool))}}


def _stage_eval(out: str) -> dict[str, Any]:
    summary = evaluate_run(_paths(out)["run"])
    return {"output": summary["out_dir"], "passages": summary["corpus_size"],
            "questions": summary["n_questions"], "top_k": summary["top_k"], "mrr": summary["mrr"],
            "index": summary["index"],
            "timing": {k: v for k, v in summary["timing"].items()
                       if isinstance(v, (int, float, bool))}}


_CHILD = {"data": _stage_data, "store": _stage_store, "export": _stage_export,
          "index": _stage_index, "eval": _stage_eval}


# ------------------------------------------------------------------------------------------
# Parent: the stages in order, measured
# ------------------------------------------------------------------------------------------

def _child_cmd(stage: str, out: str) -> list[str]:
    if stage == "train":
        return [sys.executable, "-m", "dense_cf.main", f"--config={_CONFIG.value}",
                f"--workdir={_paths(out)['run']}",
                f"--config.data.data_dir={os.path.abspath(_paths(out)['data'])}",
                *(f"--config.{kv}" for kv in _OVERRIDE.value)]
    return [sys.executable, "-m", "dense_cf.bench.scale", f"--stage={stage}", f"--out={out}",
            f"--num_passages={_N.value}", f"--train_questions={_TRAIN_Q.value}",
            f"--test_questions={_TEST_Q.value}", f"--max_mined={_MAX_MINED.value}",
            f"--seed={_SEED.value}"]


def run_stage(stage: str, out: str) -> dict[str, Any]:
    """Runs ``stage`` in a child process; returns its record (wall, peak RSS, disk, details)."""
    record_path = os.path.join(_paths(out)["stages"], f"{stage}.json")
    logging.info("scale: stage %s …", stage)
    t0 = time.perf_counter()
    proc = subprocess.Popen(_child_cmd(stage, out))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise RuntimeError(f"stage {stage} failed (exit {code}): {' '.join(_child_cmd(stage, out))}")
    detail_path = os.path.join(_paths(out)["stages"], f"{stage}.detail.json")
    detail = {"output": os.path.join(_paths(out)["run"], "checkpoints")}
    if os.path.exists(detail_path):
        with open(detail_path) as f:
            detail = json.load(f)
    rec = {"stage": stage, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
           "peak_rss_bytes": peak_rss_bytes(usage),
           "disk_bytes": files.tree_bytes(detail["output"]), "passages": _N.value, **detail}
    files.write_json(record_path, rec)
    logging.info("scale: stage %s: %.1f s, peak RSS %.2f GB, disk %.2f GB", stage, wall,
                 rec["peak_rss_bytes"] / 1e9, rec["disk_bytes"] / 1e9)
    return rec


def _line(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float]:
    """(intercept, slope) of the line through two points; through the origin when x0 == x1."""
    if x1 == x0:
        return 0.0, y1 / x1
    slope = (y1 - y0) / (x1 - x0)
    return y1 - slope * x1, slope


def project(records: Sequence[dict[str, Any]], target_n: int, hosts: int,
            baseline: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each stage's wall time and disk at ``target_n`` passages, on one host and on ``hosts``.

    With ``baseline`` (the same stages measured at another corpus size) each quantity is the
    straight line through the two measurements, so fixed costs (start-up, compiles, the test
    questions' result files) stay fixed; without it, proportional to the passages. Training
    runs a fixed number of steps whatever the corpus, so it is carried over as measured. A stage
    in :data:`PARALLEL_STAGES` gives each host ``target_n / hosts`` passages. Peak RSS is not
    extrapolated: what grows with the corpus (an in-RAM index, the generator's lists) is not
    linear in general, and what streams is bounded by a shard; each row carries the measured
    peaks (``peak_rss_measured``: [passages, bytes] per size) instead.
    """
    base = {r["stage"]: r for r in baseline or ()}
    out = []
    for r in records:
        b = base.get(r["stage"])
        per_host = target_n / (hosts if r["stage"] in PARALLEL_STAGES else 1)

        def at(key: str, n: float, r=r, b=b) -> float:
            if r["stage"] == "train":
                return float(r[key])
            if b is None:
                return float(r[key]) * n / r["passages"]
            a, m = _line(b["passages"], b[key], r["passages"], r[key])
            return max(a + m * n, 0.0)

        measured = sorted({(x["passages"], x["peak_rss_bytes"]) for x in (b, r) if x})
        out.append({"stage": r["stage"], "fit": "two-point" if b else "proportional",
                    "one_host_s": at("wall_s", target_n), "hosts_s": at("wall_s", per_host),
                    "disk_bytes": at("disk_bytes", target_n),
                    "disk_bytes_per_host": at("disk_bytes", per_host),
                    "peak_rss_measured": [list(m) for m in measured]})
    return out


def _fmt_s(s: float) -> str:
    return f"{s:.1f} s" if s < 600 else (f"{s / 60:.1f} min" if s < 36_000 else f"{s / 3600:.1f} h")


def tables(records: Sequence[dict[str, Any]], proj: Sequence[dict[str, Any]], target_n: int,
           hosts: int) -> tuple[str, str]:
    """The measured table and the projection table (markdown)."""
    rows = [{"stage": r["stage"], "wall": _fmt_s(r["wall_s"]), "CPU s": f"{r['cpu_s']:.0f}",
             "passages/s": (f"{r['passages'] / r['wall_s']:,.0f}" if r["stage"] != "train"
                            else "—"),
             "peak RSS": f"{r['peak_rss_bytes'] / 1e9:.2f} GB",
             "disk": f"{r['disk_bytes'] / 1e9:.3f} GB"} for r in records]
    measured = report_lib.markdown_table(rows, list(rows[0]))
    prow = [{"stage": p["stage"], "1 host": _fmt_s(p["one_host_s"]),
             f"{hosts} hosts": _fmt_s(p["hosts_s"]),
             "disk": f"{p['disk_bytes'] / 1e9:.1f} GB",
             f"disk per host ({hosts})": f"{p['disk_bytes_per_host'] / 1e9:.1f} GB",
             "peak RSS measured": " → ".join(f"{b / 1e9:.2f} GB at {n:,}"
                                             for n, b in p["peak_rss_measured"]),
             "fit": p["fit"]} for p in proj]
    total = {"stage": "total", "1 host": _fmt_s(sum(p["one_host_s"] for p in proj)),
             f"{hosts} hosts": _fmt_s(sum(p["hosts_s"] for p in proj)),
             "disk": f"{sum(p['disk_bytes'] for p in proj) / 1e9:.1f} GB",
             f"disk per host ({hosts})": f"{sum(p['disk_bytes_per_host'] for p in proj) / 1e9:.1f} GB",
             "peak RSS measured": "", "fit": ""}
    projected = report_lib.markdown_table(prow + [total], list(prow[0]))
    return measured, projected


def run_all(out: str, stages: Sequence[str], redo: bool) -> dict[str, Any]:
    """Runs the missing (or, with ``redo``, all) ``stages`` in order; returns every record."""
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ValueError(f"unknown stages {unknown}; known: {', '.join(STAGES)}")
    os.makedirs(_paths(out)["stages"], exist_ok=True)
    records = []
    for stage in STAGES:
        path = os.path.join(_paths(out)["stages"], f"{stage}.json")
        if stage in stages and (redo or not os.path.exists(path)):
            records.append(run_stage(stage, out))
        elif os.path.exists(path):
            with open(path) as f:
                records.append(json.load(f))
            logging.info("scale: stage %s: done before (%s)", stage, path)
    return {"records": records}


def main(argv: Sequence[str]) -> dict[str, Any] | None:
    _app.no_positional(argv)
    out = _OUT.value
    if _STAGE.value:  # child
        detail = _CHILD[_STAGE.value](out)
        files.write_json(os.path.join(_paths(out)["stages"], f"{_STAGE.value}.detail.json"),
                         detail)
        return None
    t0 = time.perf_counter()
    res = run_all(out, _STAGES.value, _REDO.value)
    records = res["records"]
    baseline = None
    if _BASELINE.value:
        with open(os.path.join(_BASELINE.value, "scale.json")) as f:
            baseline = json.load(f)["records"]
    proj = project(records, _PROJECT_N.value, _HOSTS.value, baseline)
    measured, projected = tables(records, proj, _PROJECT_N.value, _HOSTS.value)
    cmd = " ".join(["python -m dense_cf.bench.scale"] + sys.argv[1:])
    ev = next((r for r in records if r["stage"] == "eval"), None)
    quality = (f"top-k {ev['top_k']}, MRR {ev['mrr']:.4f} over {ev['questions']} questions "
               f"(index {ev['index']})" if ev else "no eval stage")
    result = {"command": cmd, "num_passages": _N.value, "cpus": os.cpu_count(),
              "records": records, "projection": proj, "project_n": _PROJECT_N.value,
              "project_hosts": _HOSTS.value, "total_s": time.perf_counter() - t0}
    files.write_json(os.path.join(out, "scale.json"), result)
    report_lib.write_markdown(
        os.path.join(out, "scale.md"), f"End to end at {_N.value:,} passages",
        [("Command", f"`{cmd}` ({os.cpu_count()} CPUs)"),
         ("Measured per stage", measured), ("Retrieval", quality),
         (f"Linear projection to {_PROJECT_N.value:,} passages", projected)])
    print(cmd)
    print(measured)
    print(quality)
    print(f"\nprojection to {_PROJECT_N.value:,} passages (linear; {_HOSTS.value} hosts split "
          f"{', '.join(PARALLEL_STAGES)}):")
    print(projected)
    return result


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
