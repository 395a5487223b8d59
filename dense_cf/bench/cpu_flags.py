"""XLA CPU flag sweep: ``python -m dense_cf.bench.cpu_flags`` (prints numbers; no asserts).

Which ``XLA_FLAGS`` (and which ``model.attention_impl``) make the demo's train step and export
faster on this CPU, measured against the baseline in one command (issue 46 item 2):

1. **Probe.** Each variant's flags are tried in a child process first (a tiny jitted matmul):
   XLA aborts the whole process on a flag it does not know, so an unknown flag is reported as
   "rejected" instead of killing the sweep.
2. **Workers.** Every accepted variant gets one long-lived child process (flags must be set
   before JAX starts) that loads MiniLM, compiles the train step the loop jits at the demo's
   shapes (``--global_batch`` 16, PiCL: one counterfactual per question, ``--num_hard`` 0, Lq 32,
   Lp 96, dropout on, float32) and the export encoder (``retrieval.export.Encoder``, fixed
   padding, ``--export_batch`` full-length passages), then waits for commands on stdin.
3. **Rounds.** ``--rounds`` rounds, each timing ``--steps`` train steps and one export batch in
   every worker, the order rotated per round (``vs_torch.alternate``); only one worker runs at a
   time, the others block on stdin. The table gives each variant's median seconds and its
   ratio to the baseline's (> 1: faster), with the sign test over the paired rounds.

Float32 throughout: ``--xla_cpu_enable_fast_math`` and other flags that change results are not
in the default list. ``--variants name=SETTINGS[@attention_impl];...`` replaces the list;
SETTINGS are XLA flags (``--...``) and environment variables of the worker (``NAME=VALUE``, e.g.
``DENSE_CF_THREEFRY=rolled``: dropout's threefry as jax lowers it, ``parallel.cpu_rng``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Sequence

import jax
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf.bench.common import batch_shapes, cpu_description, jitted_train_step, random_batch
from dense_cf.bench.vs_torch import alternate, paired_summary, step_config
from dense_cf.files import UserError
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.parallel.xla_flags import env_with_xla_flags, probe
from dense_cf.retrieval import export
from dense_cf.train import run as loop

FLAGS = flags.FlagValues()
_VARIANTS = flags.DEFINE_string("variants", "", "Semicolon list of name=SETTINGS[@attention_impl], "
                                "SETTINGS: --xla flags and NAME=VALUE environment variables "
                                "(empty: DEFAULT_VARIANTS). The first is the baseline.",
                                flag_values=FLAGS)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Timed rounds.", flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("steps", 2, "Train steps per round and variant.", flag_values=FLAGS)
_EXPORT_BATCH = flags.DEFINE_integer("export_batch", 128, "Passages per export call.",
                                     flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 16, "Questions per train step.", flag_values=FLAGS)
_LQ = flags.DEFINE_integer("max_q_len", 32, "Question length.", flag_values=FLAGS)
_LP = flags.DEFINE_integer("max_p_len", 96, "Passage length.", flag_values=FLAGS)
_HARD = flags.DEFINE_integer("num_hard", 0, "Hard negatives per question (the demo: 0).",
                             flag_values=FLAGS)
_PROBE_ONLY = flags.DEFINE_bool("probe_only", False, "Only probe which flags XLA accepts.",
                                flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the figures here.", flag_values=FLAGS)

# (name, XLA_FLAGS, model.attention_impl or "" for the config's default). Float32-exact only.
DEFAULT_VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("baseline", "", ""),
    ("einsum attention", "", "einsum"),
    ("xnnpack", "--xla_cpu_use_xnnpack=true", ""),
    ("xnn graph fusion", "--xla_cpu_experimental_xnn_graph_fusion_mode="
                         "XNN_GRAPH_FUSION_MODE_GREEDY", ""),
    ("ynn dot fusion", "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_DOT", ""),
    ("onednn", "--xla_cpu_use_onednn=true", ""),
    ("onednn dot fusion", "--xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_DOT", ""),
    ("concurrency scheduler", "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED",
     ""),
    ("vector width 512", "--xla_cpu_prefer_vector_width=512", ""),
    ("opt preset fast runtime", "--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_RUNTIME", ""),
    ("eigen single thread", "--xla_cpu_multi_thread_eigen=false", ""),
    ("2 host devices", "--xla_force_host_platform_device_count=2", ""),
    ("threefry rolled (jax's)", "DENSE_CF_THREEFRY=rolled", ""),
)


def split_env(flags_and_env: str) -> tuple[str, dict[str, str]]:
    """A variant's settings -> ``(XLA flags, environment)``: ``--`` tokens are XLA flags,
    ``NAME=VALUE`` tokens environment variables of the worker (e.g. ``DENSE_CF_THREEFRY=rolled``)."""
    xla, env = [], {}
    for tok in flags_and_env.split():
        if tok.startswith("-"):
            xla.append(tok)
        else:
            name, sep, value = tok.partition("=")
            if not sep or not name:
                raise UserError(f"a variant's settings are --xla_flags or NAME=VALUE, got {tok!r}")
            env[name] = value
    return " ".join(xla), env


def parse_variants(spec: str) -> list[tuple[str, str, str]]:
    """``"a=FLAGS@impl;b=FLAGS"`` -> ``[(name, flags, attention_impl)]``; empty: the defaults."""
    if not spec.strip():
        return list(DEFAULT_VARIANTS)
    out = []
    for part in spec.split(";"):
        name, sep, rest = part.partition("=")
        if not sep or not name.strip():
            raise UserError(f"--variants takes name=XLA_FLAGS[@attention_impl];..., got {part!r}")
        xla, _, impl = rest.partition("@")
        out.append((name.strip(), xla.strip(), impl.strip()))
    if len({n for n, _, _ in out}) != len(out):
        raise UserError(f"--variants repeats a name: {spec!r}")
    return out


# ------------------------------------------------------------------ the worker (child process)

def _worker(impl: str, b: int, lq: int, lp: int, hard: int, export_batch: int) -> None:
    """Compiles the train step and the export encoder, then serves ``train N`` / ``export``
    commands on stdin, answering one JSON line of seconds each."""
    cfg = step_config("minilm", global_batch=b, max_q_len=lq, max_p_len=lp, num_hard=hard,
                      counterfactual=True, attention_impl=impl or None)
    model, hf_params, _ = loop.build_model(cfg)
    mesh = mesh_lib.make_mesh(-1, 1)
    step, state, rules = jitted_train_step(cfg, model, hf_params, mesh, dropout=True)
    batch = random_batch(batch_shapes(b, hard, lq, lp, True), model.config.vocab_size)
    rng = jax.random.key(1)
    run = loop.pretrained_run(cfg)
    enc = export.Encoder(run, export_batch, length_buckets=())
    p = random_batch(batch_shapes(export_batch, 0, lq, lp, False), model.config.vocab_size, seed=2)
    box = {"state": state}
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        gbatch = mesh_lib.global_batch(batch, mesh)
        t0 = time.perf_counter()
        step = step.lower(state, gbatch, rng).compile()
        compile_s = time.perf_counter() - t0
        box["state"], m = step(box["state"], gbatch, rng)
        jax.block_until_ready(m)
        enc.passages(p["pos_ids"], p["pos_mask"])  # compiles the export shape
        print(json.dumps({"ready": True, "compile_s": compile_s,
                          "devices": jax.device_count()}), flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            t0 = time.perf_counter()
            if cmd[0] == "train":
                for _ in range(int(cmd[1])):
                    box["state"], m = step(box["state"], gbatch, rng)
                    jax.block_until_ready(m)
            else:
                enc.passages(p["pos_ids"], p["pos_mask"])
            print(json.dumps({"s": time.perf_counter() - t0}), flush=True)


class _Worker:
    def __init__(self, name: str, xla_flags: str, impl: str, argv: Sequence[str]):
        self.name = name
        xla, env = split_env(xla_flags)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dense_cf.bench.cpu_flags", "--worker", impl or "-", *argv],
            env={**env_with_xla_flags(xla), **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.name!r} exited ({self.proc.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, cmd: str) -> float:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return float(self._read()["s"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv) -> dict[str, Any]:
    del argv
    variants = parse_variants(_VARIANTS.value)
    out: dict[str, Any] = {"cpu": cpu_description(), "load_average_start": _load(),
                           "shapes": {"global_batch": _BATCH.value, "max_q_len": _LQ.value,
                                      "max_p_len": _LP.value, "num_hard": _HARD.value,
                                      "export_batch": _EXPORT_BATCH.value},
                           "probe": {}}
    print(f"cpu: {out['cpu']}; load average {out['load_average_start']}", flush=True)
    accepted = []
    for name, xla, impl in variants:
        ok, why = probe(split_env(xla)[0])
        out["probe"][name] = {"flags": xla, "attention_impl": impl or "default", "accepted": ok,
                              "error": why}
        print(f"probe {name:<26} {xla or '(none)'}: {'accepted' if ok else 'rejected: ' + why}",
              flush=True)
        if ok:
            accepted.append((name, xla, impl))
    if _PROBE_ONLY.value or len(accepted) < 2:
        return out
    argv = [str(x) for x in (_BATCH.value, _LQ.value, _LP.value, _HARD.value, _EXPORT_BATCH.value)]
    workers: dict[str, _Worker] = {}
    try:
        for name, xla, impl in accepted:
            try:
                workers[name] = _Worker(name, xla, impl, argv)
                print(f"worker {name}: compiled in {workers[name].ready['compile_s']:.1f} s",
                      flush=True)
            except RuntimeError as e:  # a flag XLA takes but a real program cannot run with
                out["probe"][name]["error"] = str(e)
                print(f"worker {name}: failed ({e})", flush=True)
        names = list(workers)
        compile_s = {n: float(w.ready["compile_s"]) for n, w in workers.items()}
        steps = _STEPS.value

        def contender(n: str):
            def fn(_r: int) -> None:
                box[n] = (workers[n].ask(f"train {steps}") / steps, workers[n].ask("export"))
            return n, fn

        box: dict[str, tuple[float, float]] = {}
        train_s: dict[str, list[float]] = {n: [] for n in names}
        export_s: dict[str, list[float]] = {n: [] for n in names}

        def record(r: int, _wall: dict[str, float]) -> None:
            for n in names:
                train_s[n].append(box[n][0])
                export_s[n].append(box[n][1])
            print(f"round {r}: " + ", ".join(f"{n} {box[n][0]:.2f}/{box[n][1]:.2f} s"
                                             for n in names), flush=True)

        alternate([contender(n) for n in names], _ROUNDS.value, on_round=record)
    finally:
        for w in workers.values():
            w.close()
    base = names[0]
    rows = []
    for n in names:
        t = paired_summary(train_s[n], train_s[base]) if n != base else None
        e = paired_summary(export_s[n], export_s[base]) if n != base else None
        rows.append({"variant": n, "flags": out["probe"][n]["flags"],
                     "attention_impl": out["probe"][n]["attention_impl"],
                     "compile_s": compile_s[n],
                     "train_step_s": statistics.median(train_s[n]),
                     "train_vs_baseline": t["speedup"] if t else 1.0,
                     "train_sign": t["sign_test"] if t else None,
                     "export_s": statistics.median(export_s[n]),
                     "export_vs_baseline": e["speedup"] if e else 1.0,
                     "export_sign": e["sign_test"] if e else None})
    out.update(rows=rows, train_s=train_s, export_s=export_s, load_average_end=_load())
    print(f"load average at end {out['load_average_end']}")
    print(f"{'variant':<26} {'compile s':>9} {'train s':>8} {'x base':>7} {'faster':>7} "
          f"{'export s':>9} {'x base':>7} {'faster':>7}  flags")

    def faster(sign: dict[str, Any] | None) -> str:  # rounds this variant beat the baseline
        return f"{sign['ours_faster']}/{_ROUNDS.value}" if sign else ""

    for r in rows:
        print(f"{r['variant']:<26} {r['compile_s']:>9.1f} {r['train_step_s']:>8.3f} "
              f"{r['train_vs_baseline']:>6.2f}x "
              f"{faster(r['train_sign']):>7} {r['export_s']:>9.3f} "
              f"{r['export_vs_baseline']:>6.2f}x {faster(r['export_sign']):>7}  "
              f"{r['flags'] or '-'} {r['attention_impl']}")
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        impl, *nums = sys.argv[2:]
        _worker("" if impl == "-" else impl, *(int(x) for x in nums))
    else:
        _app.run(main, FLAGS, __doc__)
