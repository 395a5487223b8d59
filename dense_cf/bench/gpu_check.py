"""The figures of ``tools/gpu/check.sh``: one command per stage, each printing as it goes.

``--mode``:

* ``pack_minilm`` / ``unpack_minilm``: all-MiniLM-L6-v2 as bfloat16 bits (45 MB, the size a
  device call can carry; float32 is 91 MB) and back to a float32 safetensors directory. Both the
  GPU run and the CPU reference load the unpacked weights, so they start from the same numbers.
* ``demo``: a finished ``dense_cf.main`` run of the demo config: wall time per stage
  (training, its compile, checkpoints, retrieval = export + index + search + report, AAR,
  robustness) and top-k / MRR / AAR / AA beside the reference file of the CPU float32 run of
  the same config and seed (``--reference``); ``--write_reference`` writes that file instead.
* ``loop``: a finished paper-shape ``dense_cf.main`` run: steps/s in the loop (after the
  compile) against the isolated step of ``dense_cf.bench.accelerator`` (``--isolated``), model
  FLOP/s and MFU, checkpoint save times, peak device memory.
* ``loops``: several finished runs of one config that differ only in how batches are laid out
  (``--variants name=workdir,...``: padded, ``data.length_buckets``, ``data.pack_row_len``):
  each one's loop figures, the padding it removed and its compiles, and its speed-up over the
  first. The runs see the same batches, so ms/step compares directly.
* ``input_rate``: the run's input pipeline alone (its config, data and ``data.pipeline``):
  host-local batches/s and questions/s, to set against what the loop consumes.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import statistics
import time
from typing import Any

import jax
import ml_dtypes
import numpy as np
from absl import flags
from safetensors.numpy import load_file, save_file

from dense_cf import app as _app
from dense_cf import methods
from dense_cf.bench import accelerator as accel
from dense_cf.bench.jax_search import cpu_model
from dense_cf.files import write_json
from dense_cf.inputs.source import GrainOptions
from dense_cf.models.hf import resolve_model_dir
from dense_cf.train.loop import batch_spec
from dense_cf.train.run import RunDir, build_model, load_config, run_tokenizer

FLAGS = flags.FlagValues()
_MODE = flags.DEFINE_enum("mode", None, ["pack_minilm", "unpack_minilm", "demo", "loop", "loops",
                                         "input_rate"], "What to do (module docstring).",
                          flag_values=FLAGS)
_SRC = flags.DEFINE_string("src", "minilm", "pack/unpack: the model directory (or 'minilm').",
                           flag_values=FLAGS)
_DST = flags.DEFINE_string("dst", "", "pack/unpack: the directory to write.", flag_values=FLAGS)
_WORKDIR = flags.DEFINE_string("workdir", "", "The run directory.", flag_values=FLAGS)
_REFERENCE = flags.DEFINE_string("reference", "", "demo: the CPU float32 reference JSON.",
                                 flag_values=FLAGS)
_WRITE_REF = flags.DEFINE_bool("write_reference", False, "demo: write --reference from this run.",
                               flag_values=FLAGS)
_ISOLATED = flags.DEFINE_string("isolated", "", "loop: dense_cf.bench.accelerator's --out JSON.",
                                flag_values=FLAGS)
_VARIANTS = flags.DEFINE_list("variants", [], "loops: name=workdir pairs, the first the reference.",
                              flag_values=FLAGS)
_BATCHES = flags.DEFINE_integer("batches", 40, "input_rate: timed batches.", flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", "", "Write the figures as JSON here.", flag_values=FLAGS)

BF16_FILE = "model_bf16.npz"


def _copy_small_files(src: str, dst: str) -> None:
    """Everything of a model directory but its weights (configs, tokenizer, 1_Pooling/...)."""
    shutil.copytree(src, dst, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.safetensors", BF16_FILE, "__pycache__"))


def _say(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------- weights


def pack_minilm(src: str, dst: str) -> dict[str, Any]:
    """Float weights rounded to bfloat16 and stored as their uint16 bits (npz), the rest as is."""
    src = resolve_model_dir(src)
    os.makedirs(dst, exist_ok=True)
    tensors = {}
    for fn in sorted(glob.glob(os.path.join(src, "*.safetensors"))):
        tensors.update(load_file(fn))
    packed = {k: (v.astype(ml_dtypes.bfloat16).view(np.uint16) if v.dtype.kind == "f" else v)
              for k, v in tensors.items()}
    _copy_small_files(src, dst)
    np.savez(os.path.join(dst, BF16_FILE), **packed)
    return {"tensors": len(packed), "bytes": os.path.getsize(os.path.join(dst, BF16_FILE))}


def unpack_minilm(src: str, dst: str) -> dict[str, Any]:
    """:func:`pack_minilm`'s directory as a float32 safetensors model directory."""
    os.makedirs(dst, exist_ok=True)
    with np.load(os.path.join(src, BF16_FILE)) as z:
        tensors = {k: (z[k].view(ml_dtypes.bfloat16).astype(np.float32) if z[k].dtype == np.uint16
                       else z[k]) for k in z.files}
    _copy_small_files(src, dst)
    save_file(tensors, os.path.join(dst, "model.safetensors"))
    return {"tensors": len(tensors), "dir": dst}


# ----------------------------------------------------------------------------- demo


def demo_figures(workdir: str) -> dict[str, Any]:
    """Stage wall times and the headline metrics of a finished demo run's ``summary.json``."""
    with open(RunDir(workdir).summary) as f:
        s = json.load(f)
    ev = s.get("eval", {})
    ret = ev.get("retrieval", {})
    t = s.get("timing", {})
    stages = {"train (loop)": t.get("train_s"), "  first step (compile)": sum(t.get("compile_s", [])),
              "  checkpoint saves": sum(t.get("checkpoint_save_s", [])) + t.get("checkpoint_close_s", 0),
              **{f"eval: {k}": v for k, v in ev.get("wall_s", {}).items()}}
    timing = ret.get("timing", {})
    for k in ("export_s", "index_s", "search_s"):
        if k in timing:
            stages[f"  retrieval {k[:-2]}"] = timing[k]
    metrics = {f"top-{k}": v for k, v in ret.get("top_k", {}).items()}
    if "mrr" in ret:
        metrics["MRR x100"] = 100 * ret["mrr"]
    for name, strat in ev.get("aar", {}).get("strategies", {}).items():
        if "aar" in strat:
            metrics[f"AAR {name} %"] = 100 * strat["aar"]
    rob = ev.get("robustness", {})
    for k, row in (rob.get("table") or {}).items():
        metrics[f"robust top-1 @K={k}"] = row["top_k"]["1"]
    return {"device": s.get("device_memory", {}).get("device"), "step": s.get("step"),
            "stages_s": stages, "metrics": metrics, "device_memory": s.get("device_memory")}


def print_demo(fig: dict[str, Any], ref: dict[str, Any] | None) -> None:
    _say(f"demo run on {fig['device']} (step {fig['step']})")
    _say(f"{'stage':<28}{'seconds':>10}" + (f"{'CPU ref':>10}" if ref else ""))
    for k, v in fig["stages_s"].items():
        r = (ref or {}).get("stages_s", {}).get(k)
        shown = "-" if v is None else f"{v:.1f}"
        _say(f"{k:<28}{shown:>10}" + (f"{r:10.1f}" if r is not None else ""))
    _say(f"{'metric':<28}{'this run':>10}" + (f"{'CPU f32':>10}{'diff':>8}" if ref else ""))
    for k, v in fig["metrics"].items():
        r = (ref or {}).get("metrics", {}).get(k)
        line = f"{k:<28}{v:10.2f}"
        if r is not None:
            line += f"{r:10.2f}{v - r:+8.2f}"
        _say(line)


# ----------------------------------------------------------------------------- loop


def loop_figures(workdir: str, isolated: str = "") -> dict[str, Any]:
    """Loop step rate, MFU, checkpoint times and memory of a finished paper-shape run."""
    rd = RunDir(workdir)
    config = load_config(workdir)
    with open(rd.summary) as f:
        s = json.load(f)
    lines = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
    times = [x["train/step_time_s"] for x in lines if "train/step_time_s" in x]
    step_s = statistics.median(times[1:]) if len(times) > 1 else (times[0] if times else None)
    b, d = int(config.train.global_batch), config.data
    method = methods.get(config.method)
    cf = 1 if method.needs_counterfactual(config.loss) else 0
    # The run's own network (config.json of a checkpoint, or the tiny_* sizes of a random one).
    bert = build_model(config, load_pretrained=False)[0].config
    flops = accel.train_step_flops(bert, b, b * (1 + int(d.num_hard) + cf), int(d.max_q_len),
                                   int(d.max_p_len))
    dev = s.get("device_memory", {})
    peak, peak_name = accel.peak_bf16_flops(dev.get("device") or "")
    out = {"device": dev.get("device"), "steps": s.get("step"), "global_batch": b,
           "passages_per_question": 1 + int(d.num_hard) + cf, "max_q_len": int(d.max_q_len),
           "max_p_len": int(d.max_p_len), "loop_step_s_median": step_s,
           "loop_steps_per_s": 1 / step_s if step_s else None,
           "questions_per_s": b / step_s if step_s else None,
           "model_tflops_per_step": flops / 1e12,
           "mfu": flops / step_s / peak if (step_s and peak) else None, "peak": peak_name,
           "timing": s.get("timing"), "device_memory": dev}
    removed = [x["train/padding_removed"] for x in lines if "train/padding_removed" in x]
    out["padding_removed"] = statistics.median(removed) if removed else 0.0
    out["steady_step_s"] = steady_step_s(s.get("timing") or {}, int(s.get("step") or 0))
    if isolated and os.path.exists(isolated):
        with open(isolated) as f:
            iso = json.load(f)
        t = iso.get("train", iso)
        iso_s = t.get("step_s_median")
        out["isolated_step_s"] = iso_s
        out["loop_over_isolated"] = step_s / iso_s if (step_s and iso_s) else None
    return out


def steady_step_s(timing: dict[str, Any], steps: int) -> float | None:
    """Mean seconds of a step that compiled nothing: the loop's time less its compiles (each
    with the one step it ran) and checkpoint saves, over the other steps. The logged
    step_time_s keeps only the first compile out; a run with length buckets or packed rows
    compiles each new shape inside a logged window."""
    compiles = timing.get("compile_s") or []
    rest = steps - len(compiles)
    if "train_s" not in timing or rest <= 0:
        return None
    spent = (timing["train_s"] - sum(compiles) - sum(timing.get("checkpoint_save_s") or [])
             - float(timing.get("checkpoint_close_s") or 0.0))
    return spent / rest if spent > 0 else None


def print_loop(fig: dict[str, Any]) -> None:
    _say(f"paper-shape loop on {fig['device']}: {fig['steps']} steps of {fig['global_batch']} "
         f"questions x {fig['passages_per_question']} passages, Lq {fig['max_q_len']} "
         f"Lp {fig['max_p_len']}")
    if fig["loop_step_s_median"]:
        _say(f"  loop: {fig['loop_step_s_median'] * 1e3:.1f} ms/step (median after compile), "
             f"{fig['loop_steps_per_s']:.2f} steps/s, {fig['questions_per_s']:.0f} questions/s")
    if fig.get("mfu") is not None:
        _say(f"  MFU {100 * fig['mfu']:.1f}% of {fig['peak']} "
             f"({fig['model_tflops_per_step']:.1f} model TFLOP per step)")
    if fig.get("isolated_step_s"):
        _say(f"  isolated step {fig['isolated_step_s'] * 1e3:.1f} ms: loop/isolated = "
             f"{fig['loop_over_isolated']:.3f}")
    t = fig.get("timing") or {}
    saves = t.get("checkpoint_save_s") or []
    _say(f"  compile {sum(t.get('compile_s', [])):.1f} s; checkpoint saves "
         f"{', '.join(f'{x:.2f}' for x in saves)} s; close {t.get('checkpoint_close_s', 0):.2f} s")
    m = fig.get("device_memory") or {}
    if m.get("peak_bytes_in_use"):
        _say(f"  device memory peak {m['peak_bytes_in_use'] / 2**30:.2f} GiB of "
             f"{(m.get('bytes_limit') or 0) / 2**30:.1f} GiB")


def parse_variants(items: list[str]) -> list[tuple[str, str]]:
    """``["name=workdir", ...]`` -> ``[(name, workdir)]`` (names unique, at least one)."""
    out = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--variants takes name=workdir pairs, got {item!r}")
        out.append((name, path))
    if not out or len({n for n, _ in out}) != len(out):
        raise ValueError(f"--variants needs at least one pair and unique names, got {items}")
    return out


def compare_loops(figs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The loop figures of runs that saw the same batches, with each one's speed-up over the
    first (> 1: faster) in steady steps (:func:`steady_step_s`, compiles left out) and its
    number of compiled step shapes."""
    names = list(figs)
    ref = figs[names[0]].get("steady_step_s")
    rows = {}
    for name, f in figs.items():
        step = f.get("steady_step_s")
        rows[name] = {"steady_step_s": step, "loop_step_s_median": f.get("loop_step_s_median"),
                      "padding_removed": f.get("padding_removed"),
                      "compiles": len((f.get("timing") or {}).get("compile_s") or []),
                      "speedup_vs_" + names[0]: (ref / step) if (ref and step) else None}
    return {"reference": names[0], "rows": rows, "runs": figs}


def print_loops(out: dict[str, Any]) -> None:
    ref = out["reference"]
    _say(f"{'variant':<12}{'steady ms/step':>16}{'logged median':>15}{'vs ' + ref:>14}"
         f"{'padding removed':>17}{'compiles':>10}")
    for name, r in out["rows"].items():
        up = r["speedup_vs_" + ref]
        _say(f"{name:<12}{(r['steady_step_s'] or 0) * 1e3:16.1f}"
             f"{(r['loop_step_s_median'] or 0) * 1e3:15.1f}{(up or 0):13.2f}x"
             f"{100 * (r['padding_removed'] or 0):16.1f}%{r['compiles']:10d}")


# ----------------------------------------------------------------------------- input rate


def input_rate(workdir: str, batches: int) -> dict[str, Any]:
    """Batches/s of the run's own input pipeline on this host (after 3 warm-up batches)."""
    config = load_config(workdir)
    method = methods.get(config.method)
    _, _, tok_dir = build_model(config, load_pretrained=False)
    tokenizer = run_tokenizer(config, tok_dir, workdir)
    data = method.inputs.prepare(config, tokenizer, method.inputs.load(
        config, tokenizer, "train_file", config.data.max_train_examples))
    spec = batch_spec(config, tokenizer)
    it = method.inputs.batch_iterator(
        data, spec, pipeline=config.data.pipeline,
        grain_options=GrainOptions(int(config.data.grain_threads), int(config.data.grain_prefetch)))
    for _ in range(3):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - t0
    return {"pipeline": config.data.pipeline, "threads": int(config.data.grain_threads),
            "cpus": os.cpu_count(), "batches": batches, "global_batch": spec.global_batch,
            "batches_per_s": batches / dt, "questions_per_s": batches * spec.global_batch / dt}


def main(argv) -> None:
    del argv
    mode = _MODE.value
    if mode == "pack_minilm":
        out = pack_minilm(_SRC.value, _DST.value)
        _say(f"packed {out['tensors']} tensors, {out['bytes'] / 1e6:.1f} MB -> {_DST.value}")
    elif mode == "unpack_minilm":
        out = unpack_minilm(_SRC.value, _DST.value)
        _say(f"unpacked {out['tensors']} tensors -> {_DST.value}")
    elif mode == "demo":
        out = demo_figures(_WORKDIR.value)
        if _WRITE_REF.value:
            write_json(_REFERENCE.value, out)
            _say(f"wrote the reference {_REFERENCE.value}")
        ref = None
        if _REFERENCE.value and not _WRITE_REF.value and os.path.exists(_REFERENCE.value):
            with open(_REFERENCE.value) as f:
                ref = json.load(f)
        print_demo(out, ref)
    elif mode == "loop":
        out = loop_figures(_WORKDIR.value, _ISOLATED.value)
        print_loop(out)
    elif mode == "loops":
        out = compare_loops({name: loop_figures(path)
                             for name, path in parse_variants(_VARIANTS.value)})
        print_loops(out)
    else:
        out = input_rate(_WORKDIR.value, _BATCHES.value)
        _say(f"input pipeline ({out['pipeline']}, {out['threads']} threads, {out['cpus']} CPUs): "
             f"{out['batches_per_s']:.1f} batches/s = {out['questions_per_s']:.0f} questions/s "
             f"(global batch {out['global_batch']})")
    out["jax_backend"] = jax.default_backend()
    out["host_cpu"] = f"{cpu_model()} ({os.cpu_count()} cpus)"
    if _OUT.value:
        write_json(_OUT.value, out)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
