"""Training and export levers, measured in one prepared run (tools/gpu/levers.sh).

    python -m dense_cf.bench.levers --part=layer --size=tiny --out=levers.jsonl

One part per call; every figure is appended to ``--out`` as one JSON line as soon as it is
measured (a timeout keeps what was done). Parts (``--part``):

- ``layer``: one ``BertLayer`` forward + backward (``value_and_grad`` over params and input)
  at the passage tower's shape ([384, 256, 768] bf16 at ``--size=full``) for each in-process
  variant of ``--variants`` (:data:`LAYER_VARIANTS`): ms per layer, analytic TFLOP/s, MFU.
- ``flags``: the ``layer`` baseline (and gelu_new where the flag is about its epilogue) again in a
  subprocess per XLA flag of :data:`FLAG_VARIANTS`; an unknown flag aborts only that subprocess,
  recorded as ``accepted: false``.
- ``hlo``: where the baseline layer step's time goes, from its optimised HLO: every top-level
  instruction classified (matmul, attention, layernorm/reduction, elementwise) with its FLOPs and
  bytes, each class's share of a roofline time estimate (an estimate, not a profile), beside
  the measured step; plus the optimizer update (AdamW + clip over one BERT-base tower pair)
  timed alone.
- ``attn``: ``jax.nn.dot_product_attention`` forward + backward at [384, 256, 12, 64]: XLA with a
  padding mask, cuDNN without a mask and with ``key_value_seq_lengths`` (cuDNN only on a GPU).
- ``encode``: device-only passage encoding (``DualEncoder.encode_passage``) at token-budget
  bucket shapes: passages/s, MFU.
- ``pack``: :mod:`dense_cf.bench.packing` (real tokens/s, packed vs padded) on ``--corpus``.
- ``decide``: reads ``--out`` and prints which levers the rules of
  ``../shared/reviews/gpu-levers.md`` §6 adopt (:func:`decide`).

MFU is analytic model FLOPs / time / peak dense bf16 of the device kind
(:data:`dense_cf.bench.accelerator.PEAK_BF16_FLOPS`; null on a CPU).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf.bench import packing
from dense_cf.bench.accelerator import BERT_BASE, peak_bf16_flops, timed
from dense_cf.models.bert import BertConfig, BertEncoder, BertLayer, remat_policy
from dense_cf.parallel.xla_flags import env_with_xla_flags

FLAGS = flags.FlagValues()
_PART = flags.DEFINE_string("part", "layer", "layer | flags | hlo | attn | encode | pack | decide",
                            flag_values=FLAGS)
_SIZE = flags.DEFINE_enum("size", "tiny", ["tiny", "full"], "full: the paper's shapes (a GPU); "
                          "tiny: the CPU smoke sizes.", flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", "", "JSON-lines file the figures are appended to.",
                           flag_values=FLAGS)
_VARIANTS = flags.DEFINE_list("variants", [], "layer: the variants to time (default all of "
                              "LAYER_VARIANTS).", flag_values=FLAGS)
_LABEL = flags.DEFINE_string("label", "", "Tag added to every line (the flags part sets it).",
                             flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("steps", 0, "Timed iterations (0: 20 full, 3 tiny).",
                              flag_values=FLAGS)
_CORPUS = flags.DEFINE_string("corpus", "", "pack: a DPR corpus TSV (real passage lengths).",
                              flag_values=FLAGS)
_TOK = flags.DEFINE_string("tokenizer", "minilm", "pack: the vocabulary.", flag_values=FLAGS)
_FLAG_TIMEOUT = flags.DEFINE_integer("flag_timeout", 90, "flags: seconds per subprocess.",
                                     flag_values=FLAGS)

# name -> BertConfig overrides (plus "remat": a layer remat policy). The baseline is the
# accelerator config the real loop runs (bf16, dropout 0.1, no attention dropout, dot_product
# attention = cuDNN on a GPU, XLA elsewhere).
LAYER_VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "dropout0": {"dropout_rate": 0.0},
    "ln_remat": {"layer_norm_remat": True},
    "remat_matmul_outputs": {"remat": "matmul_outputs"},
    "remat_dots_no_batch": {"remat": "dots_with_no_batch_dims_saveable"},
    "fused_qkv": {"fused_qkv": True},
    "gelu_new": {"hidden_act": "gelu_new"},
    "attn_xla": {"attention_impl": "xla"},
    "ln_remat+fused_qkv": {"layer_norm_remat": True, "fused_qkv": True},
}
# Variants that change the model's function (adoption also needs the CPU suite + demo metrics).
MODEL_CHANGING = ("gelu_new", "dropout0")

# label -> (XLA flag, variants to run under it); §4.2 item 7 of the levers review.
FLAG_VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cublaslt": ("--xla_gpu_enable_cublaslt=true", ("baseline", "gelu_new")),
    "cudnn_gemm_fusion_2": ("--xla_gpu_cudnn_gemm_fusion_level=2", ("baseline",)),
    "no_remat_pass": ("--xla_disable_hlo_passes=rematerialization", ("baseline",)),
    "no_command_buffer": ("--xla_gpu_enable_command_buffer=", ("baseline",)),
    "no_triton_gemm": ("--xla_gpu_enable_triton_gemm=false", ("baseline",)),
}
# Not swept: --xla_gpu_enable_latency_hiding_scheduler=true and jax_optimization_level=O1 target
# collective overlap (gpu-levers.md §4.2: ~0 on one GPU); each subprocess costs ~15 s of the
# device run.
# Flags a CPU XLA accepts (the smoke test runs one accepted and one aborting variant).
CPU_FLAG_VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "no_remat_pass": ("--xla_disable_hlo_passes=rematerialization", ("baseline",)),
    "unknown_flag": ("--xla_this_flag_does_not_exist=true", ("baseline",)),
}

# Decision thresholds, fixed before the run (gpu-levers.md §6).
FLAG_GAIN = 0.03
MODEL_GAIN = 0.05
ATTN_TFLOPS_FLOOR = 150.0
STEP_MFU_GOAL = 0.45
EXPORT_MFU_GOAL = 0.40
# Fixed 30 Nov 2026, before any A/B run: the export levers (token table, token-budget batches,
# 3 in flight, background writer) become the accelerator default if the export part runs
# >= 10 % more passages/s end to end than export_base (none of them) in the same run, with the
# token table's vectors equal to the TSV path's.
EXPORT_LEVERS_GAIN = 0.10


@dataclasses.dataclass(frozen=True)
class Shapes:
    """Layer/attention/encode shapes of one ``--size``."""

    rows: int
    length: int
    bert: dict[str, int]
    encode: tuple[tuple[int, int], ...]  # (batch, length) token-budget buckets
    steps: int


SHAPES = {
    "full": Shapes(384, 256, BERT_BASE, ((4096, 32), (2048, 64), (1024, 128), (512, 256)), 20),
    "tiny": Shapes(4, 16, dict(vocab_size=512, hidden_size=32, num_layers=2, num_heads=2,
                               intermediate_size=128, max_position_embeddings=64),
                   ((16, 8), (8, 16)), 3),
}


class Sink:
    """Appends one JSON line per figure to ``path`` (flushed at once) and echoes it."""

    def __init__(self, path: str, label: str = "") -> None:
        self.path, self.label = path, label
        self.device = jax.devices()[0].device_kind

    def __call__(self, part: str, **fig: Any) -> None:
        rec = {"part": part, "device": self.device, **({"label": self.label} if self.label else {}),
               **fig}
        line = json.dumps(rec, sort_keys=True, default=float)
        print(line, flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


def _peak() -> float | None:
    return peak_bf16_flops(jax.devices()[0].device_kind)[0]


def _mfu(flops: float, seconds: float) -> float | None:
    peak = _peak()
    return None if peak is None else flops / seconds / peak


def _median_time(fn: Callable[[], Any], steps: int, warmup: int = 1) -> float:
    return float(np.median(timed(fn, steps, warmup)))


def layer_flops(cfg: BertConfig, rows: int, length: int) -> float:
    """Model FLOPs of one layer's forward + backward: 6·N·T + 12·H·S²·rows."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    n = 4 * h * h + 2 * h * i
    return 3.0 * (2.0 * n * rows * length + 4.0 * h * rows * length ** 2)


def layer_config(shapes: Shapes, variant: str) -> tuple[BertConfig, str | None]:
    """(config, remat policy or None) of a :data:`LAYER_VARIANTS` entry."""
    over = dict(LAYER_VARIANTS[variant])
    policy = over.pop("remat", None)
    base = dict(dtype="bfloat16", dropout_rate=0.1, attention_dropout_rate=0.0,
                attention_impl="dot_product")
    return BertConfig(**shapes.bert, **{**base, **over}), policy


def layer_params(cfg: BertConfig, seed: int = 0) -> Any:
    """One layer's float32 params, initialised on the host from a 1 x 8 input (their shapes do
    not depend on the input's, and every lever keeps the same param tree): one CPU compile,
    not an op-by-op forward at [384, 256, 768] on the device per variant."""
    layer = BertLayer(cfg)
    x = jnp.zeros((1, 8, cfg.hidden_size), cfg.compute_dtype)
    bias = jnp.zeros((1, 1, 1, 8), jnp.float32)
    return packing.init_params(
        lambda r: nn.meta.unbox(layer.init({"params": r}, x, bias, True)["params"]),
        jax.random.key(seed))


def layer_loss(cfg: BertConfig, policy: str | None, rows: int, length: int) -> Callable:
    """loss(params, x, dropout key) of one layer (mean square of its output), every key real."""
    cls = BertLayer if policy is None else nn.remat(BertLayer, static_argnums=(3,),
                                                   policy=remat_policy(policy))
    layer = cls(cfg)
    mask_bias = jnp.zeros((rows, 1, 1, length), jnp.float32)

    def loss(p, x, rng):
        y = layer.apply({"params": p}, x, mask_bias, False, rngs={"dropout": rng})
        return jnp.mean(jnp.square(y.astype(jnp.float32)))

    return loss


def layer_step(cfg: BertConfig, policy: str | None, rows: int, length: int, seed: int = 0,
               params: Any = None):
    """(jitted value_and_grad of one layer over params and input, params, input, dropout key)."""
    k1, k3 = jax.random.split(jax.random.key(seed + 1))
    x = jax.random.normal(k1, (rows, length, cfg.hidden_size), jnp.float32).astype(cfg.compute_dtype)
    params = layer_params(cfg, seed) if params is None else params
    loss = layer_loss(cfg, policy, rows, length)
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    return step, params, x, k3


def run_layer(sink: Sink, shapes: Shapes, variants: Sequence[str], steps: int) -> None:
    params = layer_params(layer_config(shapes, "baseline")[0])  # one param tree for all
    for name in variants:
        cfg, policy = layer_config(shapes, name)
        t0 = time.perf_counter()
        try:
            step, params, x, rng = layer_step(cfg, policy, shapes.rows, shapes.length,
                                              params=params)
            compiled = step.lower(params, x, rng).compile()
            compile_s = time.perf_counter() - t0
            sec = _median_time(lambda: compiled(params, x, rng), steps)
        except Exception as err:  # noqa: BLE001 - one variant failing must not lose the rest
            sink("layer", variant=name, ok=False, error=str(err).splitlines()[0][:300])
            continue
        flops = layer_flops(cfg, shapes.rows, shapes.length)
        sink("layer", variant=name, ok=True, ms=sec * 1e3, compile_s=round(compile_s, 2),
             tflops=flops / sec / 1e12, mfu=_mfu(flops, sec), rows=shapes.rows,
             length=shapes.length, xla_flags=os.environ.get("XLA_FLAGS", ""))


def run_flags(sink: Sink, size: str, out: str, timeout: int) -> None:
    """Each flag of the sweep in its own subprocess (an unknown XLA flag aborts the process)."""
    table = FLAG_VARIANTS if jax.default_backend() == "gpu" else CPU_FLAG_VARIANTS
    for label, (flag, variants) in table.items():
        env = env_with_xla_flags(flag)
        cmd = [sys.executable, "-m", "dense_cf.bench.levers", "--part=layer", f"--size={size}",
               f"--out={out}", f"--variants={','.join(variants)}", f"--label=flag:{label}",
               f"--steps={_STEPS.value}"]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            rc, tail = r.returncode, (r.stderr or "")[-400:]
        except subprocess.TimeoutExpired:
            rc, tail = 124, f"timed out after {timeout} s"
        sink("flags", flag=flag, label=label, accepted=rc == 0, rc=rc,
             wall_s=round(time.perf_counter() - t0, 1),
             **({} if rc == 0 else {"error": " ".join(tail.split())[-300:]}))


# --- HLO summary ------------------------------------------------------------------------------

_DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s8": 1, "u8": 1, "pred": 1,
                "f64": 8, "s64": 8, "u64": 8, "s16": 2, "u16": 2}
_SHAPE = re.compile(r"\b(f32|bf16|f16|s32|u32|s8|u8|pred|f64|s64|u64|s16|u16)\[([0-9,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\((.*)$")
_PARAM = re.compile(r"%?([\w.\-]+):\s*(?:f32|bf16|f16|s32|u32|s8|u8|pred|f64|s64|u64|s16|u16)"
                    r"\[([0-9,]*)\]")
CLASSES = ("matmul", "attention", "layernorm", "gelu", "dropout/rng", "elementwise")
_TRIVIAL = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast", "copy-start",
            "copy-done", "after-all", "partition-id", "replica-id")


def _dims(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d]


def _shape_bytes(text: str) -> int:
    return sum(int(np.prod(_dims(dims) or [1])) * _DTYPE_BYTES[dt] for dt, dims in _SHAPE.findall(text))


def _computations(hlo: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (header line, body lines); the entry computation's name is prefixed "ENTRY:"."""
    comps: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in hlo.splitlines():
        m = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if m and not line.startswith(" "):
            name = ("ENTRY:" if m.group(1) else "") + m.group(2)
            comps[name] = (line, [])
        elif name is not None and line.strip() and line.strip() != "}":
            comps[name][1].append(line)
    return comps


def _shape_table(header: str, body: list[str]) -> dict[str, list[int]]:
    table = {n: _dims(d) for n, d in _PARAM.findall(header.split("->")[0])}
    for ln in body:
        m = _INSTR.match(ln)
        if m:
            sh = _SHAPE.search(m.group(2))
            if sh:
                table[m.group(1)] = _dims(sh.group(2))
    return table


def _bytes_table(header: str, body: list[str]) -> dict[str, int]:
    """name -> bytes of every parameter and instruction result of a computation."""
    table = {}
    for name, dt_dims in re.findall(r"%?([\w.\-]+):\s*((?:f32|bf16|f16|s32|u32|s8|u8|pred|f64|s64|"
                                    r"u64|s16|u16)\[[0-9,]*\])", header.split("->")[0]):
        table[name] = _shape_bytes(dt_dims)
    for ln in body:
        m = _INSTR.match(ln)
        if m:
            table[m.group(1)] = _shape_bytes(m.group(2))
    return table


def _instr_bytes(m: re.Match, table: dict[str, int]) -> int:
    """Bytes an entry instruction reads and writes: its result plus each operand (by name; the
    operand list may or may not print shapes)."""
    operands = re.findall(r"%([\w.\-]+)", m.group(4).split("), ")[0])
    return _shape_bytes(m.group(2)) + sum(table.get(o, 0) for o in operands)


def _dot_flops(line: str, table: dict[str, list[int]]) -> float:
    """2 · output elements · contracted size of an HLO ``dot`` or cuBLAS gemm call."""
    m = _INSTR.match(line)
    if not m:
        return 0.0
    out = _SHAPE.search(m.group(2))
    operands = re.findall(r"%([\w.\-]+)", m.group(4).split(")")[0])
    if not out or not operands or operands[0] not in table:
        return 0.0
    lhs = table[operands[0]]
    c = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", line) or \
        re.search(r'"lhs_contracting_dimensions":\[([0-9",]*)\]', line)
    contract = _dims(c.group(1).replace('"', "")) if c else [len(lhs) - 1]
    k = int(np.prod([lhs[d] for d in contract if d < len(lhs)] or [1]))
    return 2.0 * float(np.prod(_dims(out.group(2)) or [1])) * k


def _batched(line: str) -> bool:
    return bool(re.search(r"lhs_batch_dims=\{[0-9]", line)
                or re.search(r'"lhs_batch_dimensions":\["?[0-9]', line))


def classify_hlo(hlo: str) -> dict[str, dict[str, float]]:
    """Per class of :data:`CLASSES`: top-level instructions, FLOPs (weight and attention
    matmuls, inside fusions too) and bytes (operands + result) of an optimised HLO's entry
    computation. A fusion is classed by what it holds: a batched dot, a cuDNN attention call or
    softmax under ``attention/`` -> attention; any other dot or gemm -> matmul; then by the
    ``op_name``s of its ops: LayerNorm, GELU (erf/tanh), dropout (its RNG), else elementwise."""
    comps = _computations(hlo)
    entry_key = next((k for k in comps if k.startswith("ENTRY:")), None)
    out = {c: {"ops": 0, "flops": 0.0, "bytes": 0.0} for c in CLASSES}
    if entry_key is None:
        return out
    header, entry = comps[entry_key]
    entry_table = _shape_table(header, entry)
    entry_bytes = _bytes_table(header, entry)

    def called(line: str) -> list[str]:
        names = re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", line)
        return [n for n in names if n in comps]

    def body(names: list[str], depth: int = 0) -> list[tuple[str, dict[str, list[int]]]]:
        rows = []
        for n in names:
            h, lines = comps[n]
            table = _shape_table(h, lines)
            for ln in lines:
                rows.append((ln, table))
                if depth < 3:
                    rows += body(called(ln), depth + 1)
        return rows

    for line in entry:
        m = _INSTR.match(line)
        if not m or m.group(3) in _TRIVIAL:
            continue
        rows = [(line, entry_table)] + body(called(line))
        text = "\n".join(r[0] for r in rows)
        names = " ".join(re.findall(r'op_name="([^"]*)"', text))
        target = " ".join(re.findall(r'custom_call_target="([^"]+)"', text)).lower()
        dots = [(ln, t) for ln, t in rows if re.search(r"\s(dot|custom-call)\(", ln)
                and (" dot(" in ln or "gemm" in ln.lower() or "matmul" in ln.lower())]
        flops = sum(_dot_flops(ln, t) for ln, t in dots)
        if "fmha" in target or "attention" in target or any(_batched(ln) for ln, _ in dots) or (
                "attention/" in names and re.search(r"reduce_max|softmax|/exp\b", names)):
            cls = "attention"
        elif dots:
            cls = "matmul"
        elif re.search(r"_norm/|LayerNorm/", names):
            cls = "layernorm"
        elif re.search(r"/erf|/tanh|gelu", names):
            cls = "gelu"
        elif "Dropout" in names or "rng" in m.group(3):
            cls = "dropout/rng"
        else:
            cls = "elementwise"
        out[cls]["ops"] += 1
        out[cls]["flops"] += flops
        out[cls]["bytes"] += _instr_bytes(m, entry_bytes)
    return out


# H200 SXM: 4.8 TB/s HBM3e (NVIDIA datasheet); a rough CPU figure elsewhere.
def _bandwidth() -> float:
    kind = jax.devices()[0].device_kind.lower()
    for key, bw in (("h200", 4.8e12), ("h100", 3.35e12), ("a100", 2.0e12)):
        if key in kind:
            return bw
    return 20e9


def roofline_shares(classes: dict[str, dict[str, float]], peak: float, bandwidth: float
                    ) -> dict[str, float]:
    """Each class's share of the summed per-class roofline time max(FLOPs/peak, bytes/bw)."""
    est = {c: max(v["flops"] / peak, v["bytes"] / bandwidth) for c, v in classes.items()}
    total = sum(est.values()) or 1.0
    return {c: t / total for c, t in est.items()}


def run_hlo(sink: Sink, shapes: Shapes, steps: int) -> None:
    cfg, policy = layer_config(shapes, "baseline")
    step, params, x, rng = layer_step(cfg, policy, shapes.rows, shapes.length)
    compiled = step.lower(params, x, rng).compile()
    sec = _median_time(lambda: compiled(params, x, rng), steps)
    classes = classify_hlo(compiled.as_text())
    peak = _peak() or 1e12  # CPU: an order of magnitude, the shares are what is printed
    shares = roofline_shares(classes, peak, _bandwidth())
    for c in CLASSES:
        sink("hlo", scope="layer", cls=c, ops=classes[c]["ops"], gflops=classes[c]["flops"] / 1e9,
             gbytes=classes[c]["bytes"] / 1e9, share_est=round(shares[c], 4),
             ms_est=round(shares[c] * sec * 1e3, 3))
    sink("hlo", scope="layer", cls="total", ms=sec * 1e3)
    # The optimizer: AdamW + clip over two towers' parameters (float32), timed alone.
    n_params = 2 * _tower_params(shapes.bert)
    p = {"w": jnp.zeros((n_params,), jnp.float32)}
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-5, weight_decay=0.0))
    state = tx.init(p)

    @jax.jit
    def update(p, s, g):
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    g = {"w": jnp.full((n_params,), 1e-3, jnp.float32)}
    osec = _median_time(lambda: update(p, state, g), steps)
    sink("hlo", scope="step", cls="optimizer", params=n_params, ms=osec * 1e3,
         layers_per_step=2 * shapes.bert["num_layers"])


def _tower_params(bert: dict[str, int]) -> int:
    h, i, n, v = bert["hidden_size"], bert["intermediate_size"], bert["num_layers"], bert["vocab_size"]
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return (v + bert["max_position_embeddings"] + 2) * h + 2 * h + n * layer


# --- attention and encode ---------------------------------------------------------------------

def run_attn(sink: Sink, shapes: Shapes, steps: int) -> None:
    b, s = shapes.rows, shapes.length
    n = shapes.bert["num_heads"]
    d = shapes.bert["hidden_size"] // n
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (b, s, n, d), jnp.float32).astype(jnp.bfloat16) for kk in keys)
    lengths = jnp.full((b,), s, jnp.int32)
    mask = jnp.ones((b, 1, 1, s), bool)
    flops = 3.0 * 4.0 * b * n * d * s * s  # forward 4·B·N·D·S², backward 2x
    cases = {
        "xla_mask": dict(mask=mask, implementation="xla"),
        "cudnn_no_mask": dict(implementation="cudnn"),
        "cudnn_padding": dict(key_value_seq_lengths=lengths, implementation="cudnn"),
    }
    for name, kw in cases.items():
        if kw["implementation"] == "cudnn" and jax.default_backend() != "gpu":
            sink("attn", case=name, ok=False, error="skipped: cuDNN needs a GPU")
            continue

        def f(q, k, v, kw=kw):
            return jnp.sum(jax.nn.dot_product_attention(q, k, v, **kw).astype(jnp.float32))

        try:
            g = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))
            sec = _median_time(lambda g=g: g(q, k, v), steps)
        except Exception as err:  # noqa: BLE001 - record and go on
            sink("attn", case=name, ok=False, error=str(err).splitlines()[0][:300])
            continue
        sink("attn", case=name, ok=True, ms=sec * 1e3, tflops=flops / sec / 1e12,
             shape=[b, s, n, d])


def run_encode(sink: Sink, shapes: Shapes, steps: int) -> None:
    from_cfg = BertConfig(**shapes.bert, dtype="bfloat16", attention_impl="dot_product",
                          dropout_rate=0.0, attention_dropout_rate=0.0)
    # The passage tower alone (what the export runs), random weights.
    enc = BertEncoder(from_cfg)
    ids0 = jnp.ones((1, 8), jnp.int32)
    params = packing.init_params(lambda r: nn.meta.unbox(enc.init(r, ids0, ids0))["params"],
                                 jax.random.key(0))
    n_layer = 4 * from_cfg.hidden_size ** 2 + 2 * from_cfg.hidden_size * from_cfg.intermediate_size

    @jax.jit
    def f(p, ids, mask):
        return enc.apply({"params": p}, ids, mask)[:, 0].astype(jnp.float32)

    for batch, length in shapes.encode:
        ids = jax.random.randint(jax.random.key(1), (batch, length), 1000 % from_cfg.vocab_size,
                                 from_cfg.vocab_size, jnp.int32)
        mask = jnp.ones_like(ids)
        sec = _median_time(lambda ids=ids, mask=mask: f(params, ids, mask), steps)
        flops = from_cfg.num_layers * (2.0 * n_layer * batch * length
                                       + 4.0 * from_cfg.hidden_size * batch * length ** 2)
        sink("encode", batch=batch, length=length, ms=sec * 1e3, passages_per_s=batch / sec,
             tflops=flops / sec / 1e12, mfu=_mfu(flops, sec))


# --- decision rules ---------------------------------------------------------------------------

def read_lines(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def decide(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The §6 rules over one run's lines: a flag is adopted if it cuts the layer step ≥ 3 %, a
    model lever ≥ 5 % (model-changing ones then still need the CPU suite and the demo metrics);
    attention below 150 TF/s puts packing/attention work first; the export levers are adopted at
    >= 1.10x export_base end to end with equal vectors. Returns the verdicts."""
    base = next((r["ms"] for r in lines if r["part"] == "layer" and r.get("ok")
                 and r["variant"] == "baseline" and not r.get("label")), None)
    verdicts: list[dict[str, Any]] = []
    if base is None:
        return {"baseline_ms": None, "verdicts": [], "note": "no baseline layer figure"}
    for r in lines:
        if r["part"] != "layer" or not r.get("ok"):
            continue
        label = r.get("label", "")
        if r["variant"] == "baseline" and not label:
            continue
        flag = label.startswith("flag:")
        # A flag run of a model lever compares against that lever without the flag.
        ref = base
        if flag and r["variant"] != "baseline":
            ref = next((x["ms"] for x in lines if x["part"] == "layer" and x.get("ok")
                        and x["variant"] == r["variant"] and not x.get("label")), base)
        gain = 1.0 - r["ms"] / ref
        need = FLAG_GAIN if flag and r["variant"] == "baseline" else MODEL_GAIN
        adopt = gain >= need
        verdicts.append({
            "lever": (label + " " if label else "") + r["variant"], "ms": r["ms"], "ref_ms": ref,
            "gain": round(gain, 4), "threshold": need, "adopt": adopt,
            **({"needs": "CPU suite + demo metrics"} if adopt and any(
                m in r["variant"] for m in MODEL_CHANGING) else {}),
        })
    attn = {r["case"]: r["tflops"] for r in lines if r["part"] == "attn" and r.get("ok")}
    best_attn = max(attn.values()) if attn else None
    enc = [r["mfu"] for r in lines if r["part"] == "encode" and r.get("mfu") is not None]
    exports = {r["part"]: r for r in lines if r["part"] in ("export", "export_base")}
    speedup = None
    if {"export", "export_base"} <= set(exports) and exports["export_base"].get("passages_per_s"):
        speedup = exports["export"]["passages_per_s"] / exports["export_base"]["passages_per_s"]
    return {
        "baseline_ms": base, "verdicts": verdicts,
        "attention_tflops": attn,
        "prioritise_packing_and_attention": (best_attn is not None
                                             and best_attn < ATTN_TFLOPS_FLOOR),
        "export_device_mfu_best": max(enc) if enc else None,
        "export_device_goal_met": (max(enc) >= EXPORT_MFU_GOAL) if enc else None,
        "export_levers_speedup": speedup,
        "export_levers_adopt": (None if speedup is None else bool(
            speedup >= 1 + EXPORT_LEVERS_GAIN and exports["export"].get("token_table_equal"))),
    }


def main(argv: Sequence[str]) -> None:
    del argv
    shapes = SHAPES[_SIZE.value]
    steps = _STEPS.value or shapes.steps
    sink = Sink(_OUT.value, _LABEL.value)
    part = _PART.value
    if part == "layer":
        run_layer(sink, shapes, _VARIANTS.value or list(LAYER_VARIANTS), steps)
    elif part == "flags":
        run_flags(sink, _SIZE.value, _OUT.value, _FLAG_TIMEOUT.value)
    elif part == "hlo":
        run_hlo(sink, shapes, steps)
    elif part == "attn":
        run_attn(sink, shapes, steps)
    elif part == "encode":
        run_encode(sink, shapes, steps)
    elif part == "pack":
        # one round: each layout's line as soon as it is timed (the compiles dominate the part)
        for fig in packing.measure(_CORPUS.value, _TOK.value, _SIZE.value,
                                   batches=1 if _SIZE.value == "tiny" else 3, rounds=1):
            sink("pack", **fig)
    elif part == "decide":
        result = decide(read_lines(_OUT.value))
        for v in result["verdicts"]:
            print(f"{'ADOPT' if v['adopt'] else 'keep '} {v['lever']:<40} {v['ms']:9.3f} ms vs "
                  f"{v['ref_ms']:9.3f} ms ({100 * v['gain']:+.1f} %, needs "
                  f"{100 * v['threshold']:.0f} %){' ' + v['needs'] if 'needs' in v else ''}")
        if result.get("export_levers_speedup") is not None:
            print(f"{'ADOPT' if result['export_levers_adopt'] else 'keep '} export levers "
                  f"{' ' * 27} {result['export_levers_speedup']:.2f}x export_base's passages/s "
                  f"(needs {1 + EXPORT_LEVERS_GAIN:.2f}x and equal vectors)")
        print(json.dumps({k: v for k, v in result.items() if k != "verdicts"}, default=float))
        sink("decide", **result)
    else:
        raise SystemExit(f"--part must be layer|flags|hlo|attn|encode|pack|decide, got {part!r}")


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
