"""Accelerator benchmark: train step and passage export at the paper's shapes, with MFU.

    python -m dense_cf.bench.accelerator --out=accel.json                 # GPU/TPU: paper shapes
    python -m dense_cf.bench.accelerator --shapes=small --out=small.json  # CPU smoke run

Prints the device inventory, then for the PiCL train step and for passage encoding (export):
step time (median of ``--steps`` timed calls after ``--warmup``, each ended by
``block_until_ready``), examples/s, peak device memory (``memory_stats()['peak_bytes_in_use']``
where the backend has it, plus XLA's compiled ``memory_analysis``), FLOPs per step both from
XLA's ``cost_analysis`` and from an analytic count, achieved FLOP/s and MFU.

Paper shapes (docs/method.md §9): BERT-base towers (12 layers, hidden 768, 12 heads, vocab 30522, random
weights), 128 questions of 64 tokens (``data.max_q_len``'s default), each with its positive, one
hard negative and one counterfactual (384 passages of 256 tokens), bfloat16 compute with float32
master weights and Adam state, PiCL loss (λ=0.2, τ1=τ2=1), hidden dropout 0.1, attention
dropout 0 with ``--attention_impl=dot_product`` (cuDNN fused attention on GPU; see
``configs/picl_nq_accel.py``). GradCache chunks: ``--grad_cache_chunks=0`` tries 1 and doubles
on out-of-memory (predicted from the compiled memory analysis, or raised at run time).

MFU = analytic model FLOPs / step time / (devices x peak dense bf16 FLOP/s of the device kind,
:data:`PEAK_BF16_FLOPS`, sources in docs/feasibility.md). The analytic count is the standard
one: 6·N·T for the weight matmuls (N non-embedding parameters of the tower that reads the tokens,
T tokens; forward 2·N·T, backward 4·N·T) plus 12·L·H·S² per sequence of length S for the
attention scores and context (forward 4·L·H·S²). It counts neither remat's nor GradCache's
recomputation (those are hardware FLOPs, not model FLOPs). XLA's count is printed beside it; it
omits custom calls (on GPU the cuBLAS matmuls and cuDNN attention: 2.24e12 of 5.72e13 on the
H100) and counts a ``lax.scan`` body once (GradCache), so it is reported as ``None`` for
chunks > 1 and is not used for MFU.

JAX search (``eval.index=jax``, docs/scale.md): exact inner-product top-k over clustered random
vectors (``bench.index``'s mixture; N rows of the model's hidden size D, paper shapes 2^20 x 768)
sharded over every device, float32 and bfloat16 corpora: load seconds, compile seconds (the
first batch), queries/s of one ``search`` in batches (``bench.jax_search.time_search``), device
bytes of the corpus, ``memory_stats`` after the search, and R@k of bfloat16 against float32.
Its peer, faiss Flat over the same vectors and queries in this process, runs where faiss imports
and is skipped with the reason otherwise (GPU hosts without the ``[gpu]`` extra).

Imports no TensorFlow (``tests/test_tf_free.py``) and no faiss (``tests/test_no_faiss.py``): the
state and batches are built here from ``train.step``/``train.state``/``bench.common``, not
through ``train.loop``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
import types
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf import methods
from dense_cf.bench.common import batch_shapes, random_batch
from dense_cf.bench.index import clustered_queries, clustered_vectors, recall_at
from dense_cf.bench.jax_search import peer_skipped, time_search
from dense_cf.bench.peak import measure_matmul_peak
from dense_cf.configs.base import base_config
from dense_cf.files import human_bytes
from dense_cf.index import IndexSpec, build_index
from dense_cf.index.jax_search import JaxSearchSpec, build_jax_index, memory_per_device
from dense_cf.methods.contrastive import PICL_LOSS
from dense_cf.models.bert import BertConfig, axis_rules_for
from dense_cf.models.dual_encoder import DualEncoder
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.retrieval.export import Encoder
from dense_cf.train.state import TrainState, make_optimizer
from dense_cf.train.step import jit_train_step

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12,
                 intermediate_size=3072, max_position_embeddings=512)
TINY = dict(vocab_size=2048, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=128,
            max_position_embeddings=64)

# Peak dense (no sparsity) bfloat16 tensor FLOP/s per chip, matched against
# ``jax.devices()[0].device_kind`` in order (first substring match wins, so "H100 PCIe" precedes
# "H100"). Sources: NVIDIA H100/H200/A100 datasheets, Cloud TPU system-architecture pages; see
# docs/feasibility.md.
PEAK_BF16_FLOPS: tuple[tuple[str, str, float], ...] = (
    ("H100 PCIe", "NVIDIA H100 PCIe", 756e12),
    ("H100", "NVIDIA H100 SXM", 989.4e12),
    ("H200", "NVIDIA H200", 989.4e12),
    ("A100", "NVIDIA A100", 312e12),
    ("TPU v4", "TPU v4", 275e12),
    ("TPU v5 lite", "TPU v5e", 197e12),
    ("TPU v5e", "TPU v5e", 197e12),
    ("TPU v5p", "TPU v5p", 459e12),
    ("TPU v5", "TPU v5p", 459e12),
    ("TPU v6 lite", "TPU v6e", 918e12),
    ("TPU v6e", "TPU v6e", 918e12),
)

PICL = methods.get("picl")  # the paper's batch: questions, hard negatives, counterfactuals
SEARCH_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """One benchmark run. ``shapes``: "small" (tiny BERT, CPU) or "paper" (BERT-base)."""

    shapes: str = "small"
    dtype: str = "bfloat16"
    attention_impl: str = "dot_product"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    remat: bool = False
    remat_policy: str = "nothing_saveable"
    grad_cache_chunks: int = 0  # 0: 1, doubled on out-of-memory
    global_batch: int = 0  # 0: the shapes' default (paper 128)
    max_q_len: int = 0  # 0: the shapes' default (paper 64)
    max_p_len: int = 0  # 0: the shapes' default (paper 256)
    steps: int = 10
    warmup: int = 2
    export_batch: int = 0  # 0: the shapes' default (paper 1024)
    export_batches: int = 8
    check_sharding: bool = True
    matmul_peak: bool = True
    export: bool = True
    search: bool = True
    search_n: int = 0  # 0: the shapes' default (paper 2^20 corpus rows)
    search_queries: int = 0  # 0: the shapes' default (paper 1024)
    search_k: int = 100
    rng_impl: str = ""  # dropout key's PRNG implementation; "": jax's default (the loop's)
    seed: int = 0
    # training levers (BertConfig; issue 47): off = the measured baseline
    layer_norm_remat: bool = False
    fused_qkv: bool = False
    hidden_act: str = "gelu"


def peak_bf16_flops(device_kind: str) -> tuple[float | None, str | None]:
    """(peak dense bf16 FLOP/s per chip, table entry) for a jax ``device_kind``; (None, None)
    for kinds not in :data:`PEAK_BF16_FLOPS` (e.g. CPUs)."""
    for key, name, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_kind.lower():
            return flops, name
    return None, None


def _shape_defaults(opts: BenchOptions) -> dict[str, int]:
    if opts.shapes == "paper":
        d = dict(b=128, lq=64, lp=256, export_batch=1024, search_n=1 << 20, search_queries=1024,
                 search_batch=256)
    elif opts.shapes == "small":
        d = dict(b=8, lq=16, lp=32, export_batch=16, search_n=4096, search_queries=64,
                 search_batch=32)
    else:
        raise ValueError(f"--shapes must be small or paper, got {opts.shapes!r}")
    d["b"] = opts.global_batch or d["b"]
    d["lq"] = opts.max_q_len or d["lq"]
    d["lp"] = opts.max_p_len or d["lp"]
    d["export_batch"] = opts.export_batch or d["export_batch"]
    d["search_n"] = opts.search_n or d["search_n"]
    d["search_queries"] = opts.search_queries or d["search_queries"]
    return d


def bert_config(opts: BenchOptions, dtype: str | None = None):

    base = BERT_BASE if opts.shapes == "paper" else TINY
    return BertConfig(**base, dtype=dtype or opts.dtype, attention_impl=opts.attention_impl,
                      dropout_rate=opts.dropout, attention_dropout_rate=opts.attention_dropout,
                      remat=opts.remat, remat_policy=opts.remat_policy,
                      layer_norm_remat=opts.layer_norm_remat, fused_qkv=opts.fused_qkv,
                      hidden_act=opts.hidden_act)


def count_params(cfg) -> tuple[int, int]:
    """(all, non-embedding) parameters of ONE BERT tower (biases and LayerNorms included)."""
    h, i, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    emb = (cfg.vocab_size + cfg.max_position_embeddings + cfg.type_vocab_size) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return emb + n * layer, n * layer


def encoder_flops(cfg, sequences: int, length: int, passes: int = 1) -> float:
    """Model FLOPs of encoding ``sequences`` of ``length`` tokens; ``passes``: 1 forward,
    3 forward + backward. 2·N·T for the weight matmuls, 4·L·H·S² per sequence for attention."""
    _, non_emb = count_params(cfg)
    tokens = sequences * length
    fwd = 2.0 * non_emb * tokens + 4.0 * cfg.num_layers * cfg.hidden_size * sequences * length**2
    return passes * fwd


def train_step_flops(cfg, b: int, passages: int, lq: int, lp: int) -> float:
    """Model FLOPs of one train step: both towers forward + backward (loss matmuls, O(B²·H), are
    <0.1% at the paper's shapes and left out)."""
    return encoder_flops(cfg, b, lq, passes=3) + encoder_flops(cfg, passages, lp, passes=3)


def _xla_cost(compiled) -> tuple[float | None, dict[str, float]]:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float(cost.get("flops", 0.0)) if cost else None
    ma = compiled.memory_analysis()
    mem = {}
    if ma is not None:
        mem = {k: int(getattr(ma, f"{k}_size_in_bytes")) for k in
               ("argument", "output", "alias", "temp", "generated_code")}
        mem["total"] = mem["argument"] + mem["temp"] + mem["output"] - mem["alias"]
    return flops or None, mem


_T0 = time.perf_counter()


def _log(msg: str) -> None:
    """Progress on stderr with seconds since import (a slow compile shows where it is)."""

    print(f"[accelerator {time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def _is_oom(err: BaseException) -> bool:
    s = str(err)
    return "RESOURCE_EXHAUSTED" in s or "out of memory" in s.lower()


def _memory(device) -> dict[str, int | None]:
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    stats = stats or {}
    return {"peak_bytes_in_use": stats.get("peak_bytes_in_use"),
            "bytes_in_use": stats.get("bytes_in_use"), "bytes_limit": stats.get("bytes_limit")}


def timed(fn: Callable[[], Any], steps: int, warmup: int) -> list[float]:
    """Seconds of each of ``steps`` calls of ``fn`` (blocked until ready), after ``warmup``."""
    for _ in range(warmup):
        jax.block_until_ready(fn())
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return times


def device_inventory() -> dict[str, Any]:
    """Backend, versions and every device (kind, memory limit)."""

    devs = jax.devices()
    client = devs[0].client
    return {
        "backend": jax.default_backend(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "flax": flax.__version__, "optax": optax.__version__,
        "platform_version": getattr(client, "platform_version", None),
        "python": platform.python_version(), "host": platform.node(),
        "process_count": jax.process_count(), "device_count": len(devs),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "devices": [{"id": d.id, "kind": d.device_kind, "platform": d.platform,
                     "process": d.process_index, "bytes_limit": _memory(d)["bytes_limit"]}
                    for d in devs],
    }


class _Setup:
    """Model, optimizer, mesh and batch of one benchmark configuration."""

    def __init__(self, opts: BenchOptions, dtype: str | None = None, devices=None,
                 global_batch: int | None = None, warmup_steps: int = 1237):


        d = _shape_defaults(opts)
        self.opts, self.b, self.lq, self.lp = opts, global_batch or d["b"], d["lq"], d["lp"]
        self.h = 1
        self.passages = self.b * (1 + self.h + 1)  # positive, hard negative, counterfactual
        self.cfg = bert_config(opts, dtype)
        self.model = DualEncoder(self.cfg)
        self.mesh = mesh_lib.make_mesh(-1, 1, devices=devices)
        self.rules = axis_rules_for(self.cfg, 1)
        optim = base_config().optim
        optim.warmup_steps = warmup_steps
        self.tx, self.schedule = make_optimizer(optim, total_steps=10_000)
        self.batch_np = random_batch(batch_shapes(self.b, self.h, self.lq, self.lp, True),
                                     self.cfg.vocab_size, seed=opts.seed)
        self._nn = nn
        self.trained_params = None  # set by bench_train: the export then encodes with these

    def context(self):
        """The mesh and logical rules every trace/call of this set-up runs under."""


        stack = contextlib.ExitStack()
        stack.enter_context(jax.set_mesh(self.mesh))
        stack.enter_context(self._nn.logical_axis_rules(self.rules))
        return stack

    def init_params(self, host: bool | None = None):
        """Random float32 params in their shardings (``parallel.mesh.init_sharded``: on the
        host CPU by default on GPU/TPU)."""


        q = jnp.ones((1, self.lq), jnp.int32)
        p = jnp.ones((1, self.lp), jnp.int32)

        def init_fn(r):
            return self.model.init(r, q, q, p, p)["params"]

        def init(r):
            return self._nn.meta.unbox(init_fn(r))

        # rbg, not the default threefry: cheap to compile; the weights are random either way.
        rng = jax.random.key(self.opts.seed, impl="rbg")
        shardings = mesh_lib.tree_shardings(jax.eval_shape(init_fn, rng), self.mesh, self.rules)
        return mesh_lib.init_sharded(init, rng, shardings, host=host)

    def init_state(self):


        params = self.init_params()
        return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=jax.jit(self.tx.init)(params))

    def train_step(self, state, chunks: int, dropout: bool = True):


        return jit_train_step(PICL, self.model, self.tx, state, self.mesh,
                              loss_hparams=PICL.loss_hparams(PICL_LOSS), schedule=self.schedule,
                              dropout=dropout, grad_cache_chunks=chunks)

    def global_batch(self):

        return mesh_lib.global_batch(self.batch_np, self.mesh)


def bench_train(setup: _Setup, opts: BenchOptions) -> dict[str, Any]:
    """Compiles (with the OOM fallback over GradCache chunks) and times the train step."""

    dev = jax.devices()[0]
    data = setup.mesh.shape["data"]
    per_device = setup.b // data
    chunks = opts.grad_cache_chunks or 1
    tried: list[dict[str, Any]] = []
    rng = jax.random.key(1, impl=opts.rng_impl or None)
    while True:
        with setup.context():
            state = setup.init_state()
            batch = setup.global_batch()
            step = setup.train_step(state, chunks)
            _log(f"train: state ready; compiling with grad_cache_chunks={chunks}")
            t0 = time.perf_counter()
            try:
                compiled = step.lower(state, batch, rng).compile()
                compile_s = time.perf_counter() - t0
                xla_flops, mem = _xla_cost(compiled)
                _log(f"train: compiled in {compile_s:.1f}s; memory_analysis {mem}")
                limit = _memory(dev)["bytes_limit"]
                if limit and mem.get("total", 0) > limit:
                    raise MemoryError(f"RESOURCE_EXHAUSTED (predicted): memory_analysis total "
                                      f"{mem['total']} B > bytes_limit {limit} B")
                holder = {"state": state}

                def call():
                    holder["state"], m = compiled(holder["state"], batch, rng)
                    return holder["state"], m

                times = timed(call, opts.steps, opts.warmup)
                metrics = jax.device_get(call()[1])
                _log(f"train: median step {statistics.median(times) * 1e3:.1f} ms")
                setup.trained_params = holder["state"].params
                break
            except Exception as err:  # noqa: BLE001 - only out-of-memory is retried
                if not _is_oom(err) or opts.grad_cache_chunks or per_device % (chunks * 2):
                    raise
                tried.append({"grad_cache_chunks": chunks, "error": str(err).splitlines()[0][:300]})
                _log(f"train: out of memory with {chunks} chunk(s): {tried[-1]['error']}")
                del state
                chunks *= 2
    step_s = statistics.median(times)
    n_params = sum(x.size for x in jax.tree.leaves(holder["state"].params))
    model_flops = train_step_flops(setup.cfg, setup.b, setup.passages, setup.lq, setup.lp)
    return {
        "global_batch": setup.b, "questions": setup.b, "passages": setup.passages,
        "max_q_len": setup.lq, "max_p_len": setup.lp, "grad_cache_chunks": chunks,
        "oom_fallbacks": tried, "params": int(n_params), "compile_s": round(compile_s, 2),
        "step_s_median": step_s, "step_s_min": min(times), "step_s_all": times,
        "questions_per_s": setup.b / step_s, "passages_per_s": setup.passages / step_s,
        "examples_per_s": setup.b / step_s,
        "flops_model": model_flops, "flops_xla": xla_flops if chunks == 1 else None,
        "achieved_flops_model": model_flops / step_s,
        "achieved_flops_xla": (xla_flops / step_s) if (xla_flops and chunks == 1) else None,
        "memory_analysis_bytes": mem, "memory_stats_after": _memory(dev),
        "loss": float(metrics["loss"]), "grad_norm": float(metrics["grad_norm"]),
    }


def bench_export(setup: _Setup, opts: BenchOptions) -> dict[str, Any]:
    """Passage encoding at ``max_p_len``: the jitted sharded encoder on device-resident batches
    (compute), and the project's ``Encoder.passages`` from host arrays to host embeddings."""


    eb = _shape_defaults(opts)["export_batch"]
    data = setup.mesh.shape["data"]
    eb = max(data, eb // data * data)
    with setup.context():
        params = setup.trained_params
        if params is None:
            params = setup.init_params()
        run = types.SimpleNamespace(model=setup.model, params=params, mesh=setup.mesh,
                                    rules=setup.rules, config={"method": "dpr"},
                                    method=methods.get("dpr"))
        enc = Encoder(run, eb, length_buckets=())  # full-length random rows: one fixed shape
        r = np.random.default_rng(opts.seed + 1)
        ids = r.integers(1000, setup.cfg.vocab_size, size=(eb, setup.lp)).astype(np.int32)
        mask = np.ones_like(ids)
        g = mesh_lib.global_batch({"ids": ids, "mask": mask}, setup.mesh)
        psh = jax.tree.map(lambda x: x.sharding, params)
        bsh = mesh_lib.batch_sharding(setup.mesh)

        def f(p, i, m):
            return setup.model.apply({"params": p}, i, m, method=setup.model.encode_passage)

        t0 = time.perf_counter()
        compiled = jax.jit(f, in_shardings=(psh, bsh, bsh)).lower(params, g["ids"],
                                                                  g["mask"]).compile()
        compile_s = time.perf_counter() - t0
        xla_flops, mem = _xla_cost(compiled)
        _log(f"export: compiled in {compile_s:.1f}s")
        times = timed(lambda: compiled(params, g["ids"], g["mask"]), opts.steps, opts.warmup)
        _log(f"export: median batch {statistics.median(times) * 1e3:.1f} ms; Encoder.passages")
        # End to end through the project's Encoder: host ids in, host float32 embeddings out.
        n = eb * opts.export_batches
        all_ids = np.tile(ids, (opts.export_batches, 1))
        all_mask = np.ones_like(all_ids)
        enc.passages(all_ids[:eb], all_mask[:eb])  # compile + warm-up
        t0 = time.perf_counter()
        emb = enc.passages(all_ids, all_mask)
        e2e_s = time.perf_counter() - t0
        _log(f"export: Encoder.passages {n / e2e_s:.0f} passages/s")
    step_s = statistics.median(times)
    flops = encoder_flops(setup.cfg, eb, setup.lp, passes=1)
    return {
        "batch": eb, "max_p_len": setup.lp, "compile_s": round(compile_s, 2),
        "step_s_median": step_s, "step_s_all": times, "passages_per_s": eb / step_s,
        "flops_model": flops, "flops_xla": xla_flops, "achieved_flops_model": flops / step_s,
        "memory_analysis_bytes": mem,
        "encoder_passages": n, "encoder_s": e2e_s, "encoder_passages_per_s": n / e2e_s,
        "embedding_shape": list(emb.shape), "embedding_finite": bool(np.isfinite(emb).all()),
    }


def bench_search(opts: BenchOptions, dim: int) -> dict[str, Any]:
    """JAX search over every device, float32 and bfloat16, and the faiss Flat peer where faiss
    imports (module docstring). R@k: bfloat16 and faiss against float32 jax."""
    d = _shape_defaults(opts)
    n, nq, batch = d["search_n"], d["search_queries"], d["search_batch"]
    k = min(opts.search_k, n)
    dev = jax.devices()[0]
    t0 = time.perf_counter()
    vectors = clustered_vectors(n, dim, seed=opts.seed)
    queries = clustered_queries(nq, dim, seed=opts.seed)
    out: dict[str, Any] = {"n": n, "dim": dim, "queries": nq, "batch": batch, "k": k,
                           "data": "bench.index clustered mixture, float32",
                           "data_s": time.perf_counter() - t0, "runs": []}
    ref_ids = None
    for dtype in SEARCH_DTYPES:
        spec = JaxSearchSpec(dtype=dtype, query_batch_size=batch)
        t0 = time.perf_counter()
        index = build_jax_index(vectors, spec=spec)
        load_s = time.perf_counter() - t0
        in_use = _memory(dev)["bytes_in_use"]
        timing, _, ids = time_search(index, queries, k, batch, compile_first=True)
        ref_ids = ids if ref_ids is None else ref_ids
        run = {"searcher": "jax", "dtype": dtype, "approx": spec.approx,
               "devices": index.num_shards, "load_s": load_s, **timing,
               "device_bytes": index.device_bytes,
               "per_device": memory_per_device(n, dim, index.num_shards, spec),
               "bytes_in_use_after_load": in_use, "memory_stats_after": _memory(dev),
               "recall_at_k_vs_float32": recall_at(ids, ref_ids, k)}
        out["runs"].append(run)
        _log(f"search: jax {dtype} {n} x {dim} on {index.num_shards} device(s): "
             f"{run['qps']:.0f} q/s (compile {run['compile_s']:.1f}s)")
        del index
    skipped = peer_skipped()
    if skipped is None:
        t0 = time.perf_counter()
        index = build_index(vectors, None, IndexSpec(kind="flat", query_batch_size=batch))
        build_s = time.perf_counter() - t0
        timing, _, ids = time_search(index, queries, k, batch, compile_first=False)
        out["peer"] = {"searcher": "faiss flat", "dtype": "float32", "on_gpu": index.on_gpu,
                       "build_s": build_s, **timing, "recall_at_k_vs_float32": recall_at(ids, ref_ids, k)}
        _log(f"search: faiss flat {out['peer']['qps']:.0f} q/s")
        del index
    else:
        out["peer"] = {"searcher": "faiss flat", "skipped": skipped}
        _log(f"search: faiss flat peer skipped: {skipped}")
    return out


def check_sharding(opts: BenchOptions) -> dict[str, Any]:
    """One train step on all devices vs on one device from the same state and batch: loss and
    updated params (and the gradient norm). float32 compute and no dropout, so the two differ
    only by reduction order; no warm-up in the schedule, so the step really moves the params."""

    n = jax.device_count()
    b = 2 * n
    lr = 2e-5
    out: dict[str, Any] = {"devices": n, "global_batch": b, "dtype": "float32"}
    results = []
    for devices in (jax.devices(), jax.devices()[:1]):
        s = _Setup(dataclasses.replace(opts, remat=False), dtype="float32", devices=devices,
                   global_batch=b, warmup_steps=0)
        with s.context():
            state = s.init_state()
            step = s.train_step(state, 1, dropout=False)
            state, m = step(state, s.global_batch(), jax.random.key(1))
            results.append((float(m["loss"]), float(m["grad_norm"]),
                            jax.device_get(state.params)))
    (loss_n, gn_n, p_n), (loss_1, gn_1, p_1) = results
    diff = max(float(np.max(np.abs(a - c))) for a, c in zip(jax.tree.leaves(p_n),
                                                            jax.tree.leaves(p_1)))
    out.update(loss_sharded=loss_n, loss_single=loss_1,
               loss_rel_diff=abs(loss_n - loss_1) / max(abs(loss_1), 1e-12),
               grad_norm_rel_diff=abs(gn_n - gn_1) / max(abs(gn_1), 1e-12),
               params_max_abs_diff=diff, params_tolerance=0.5 * lr)
    # Adam's first update is lr·g/(|g|+eps): ±lr where |g| >> eps, but steep (slope lr/eps) for
    # gradients near 0, where reduction-order noise moves it by a fraction of lr. A wrong
    # sharding (e.g. in-batch negatives of one shard only) changes the loss and most updates.
    out["ok"] = bool(out["loss_rel_diff"] < 1e-5 and out["grad_norm_rel_diff"] < 1e-4
                     and diff <= out["params_tolerance"])
    return out


def run_benchmark(opts: BenchOptions) -> dict[str, Any]:
    """Every measurement of one configuration as a JSON-able dict (see the module docstring)."""

    inv = device_inventory()
    kind = inv["devices"][0]["kind"]
    peak, peak_name = peak_bf16_flops(kind)
    n_dev = inv["device_count"]
    out: dict[str, Any] = {"inventory": inv, "options": dataclasses.asdict(opts),
                           "peak_bf16_flops_per_device": peak, "peak_table_entry": peak_name,
                           "mfu_flops": "model (analytic 6·N·T + attention)"}
    setup = _Setup(opts)
    out["model"] = {k: getattr(setup.cfg, k) for k in
                    ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "dtype", "param_dtype", "attention_impl", "dropout_rate",
                     "attention_dropout_rate", "remat", "remat_policy")}
    out["model"]["params_per_tower"], out["model"]["non_embedding_params_per_tower"] = \
        count_params(setup.cfg)
    _log(f"{n_dev} x {kind}; options {opts}")
    # The train step first (the headline figure). peak_bytes_in_use only grows, so the export's
    # own footprint is its memory_analysis; its peak_bytes_in_use is the process's running peak.
    out["train"] = bench_train(setup, opts)
    out["train"]["peak_bytes_in_use"] = _memory(jax.devices()[0])["peak_bytes_in_use"]
    out["train"]["mfu"] = out["train"]["achieved_flops_model"] / (peak * n_dev) if peak else None
    _log(f"train: MFU {out['train']['mfu']}")
    if opts.export:
        out["export"] = bench_export(setup, opts)
        out["export"]["peak_bytes_in_use"] = _memory(jax.devices()[0])["peak_bytes_in_use"]
        out["export"]["mfu"] = (out["export"]["achieved_flops_model"] / (peak * n_dev)
                                if peak else None)
    else:
        out["export"] = None
    # After the export: the corpus is freed before the next one, but peak_bytes_in_use is
    # the process's running peak, so the search reports bytes_in_use after loading.
    out["search"] = bench_search(opts, setup.cfg.hidden_size) if opts.search else None
    if opts.matmul_peak:

        n = 8192 if inv["backend"] in ("gpu", "tpu") else 512
        out["matmul_peak_bf16_flops_measured"] = measure_matmul_peak(n=n, dtype=jnp.bfloat16)
        out["matmul_n"] = n
    _log("done")
    if opts.check_sharding and n_dev > 1:
        out["sharding_check"] = check_sharding(opts)
    else:
        out["sharding_check"] = {"skipped": f"{n_dev} device(s)" if n_dev <= 1 else "disabled"}
    return out


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def search_summary(se: dict[str, Any] | None) -> str:
    """The search part of :func:`summary`: one line per searcher."""
    if not se:
        return "search: skipped"
    lines = [f"search: {se['n']} x {se['dim']} corpus, {se['queries']} queries, batch "
             f"{se['batch']}, k={se['k']}"]
    for r in se["runs"]:
        lines.append(
            f"  jax {r['dtype']:<8} {r['devices']} device(s)  {r['qps']:.0f} q/s  compile "
            f"{r['compile_s']:.2f}s  load {r['load_s']:.2f}s  corpus "
            f"{human_bytes(r['device_bytes'])} on devices  R@{se['k']} vs float32 {r['recall_at_k_vs_float32']:.4f}")
    peer = se["peer"]
    if "skipped" in peer:
        lines.append(f"  faiss flat peer skipped: {peer['skipped']}")
    else:
        lines.append(f"  faiss flat ({'GPU' if peer['on_gpu'] else 'CPU'})  {peer['qps']:.0f} q/s"
                     f"  build {peer['build_s']:.2f}s  R@{se['k']} vs jax float32 "
                     f"{peer['recall_at_k_vs_float32']:.4f}")
    return "\n".join(lines)


def summary(res: dict[str, Any]) -> str:
    """A short human-readable table of a :func:`run_benchmark` result."""
    inv, tr, ex = res["inventory"], res["train"], res["export"] or {}
    gib = 2.0**30
    lines = [f"backend {inv['backend']}  jax {inv['jax']}  devices {inv['device_count']} x "
             f"{inv['devices'][0]['kind']}  peak bf16/device "
             f"{_fmt((res['peak_bf16_flops_per_device'] or 0) / 1e12)} TFLOP/s "
             f"({res['peak_table_entry']})",
             f"model {res['model']['dtype']} attention={res['model']['attention_impl']} "
             f"remat={res['model']['remat']} chunks={tr['grad_cache_chunks']}"]
    peak_t = (tr.get("peak_bytes_in_use") or 0) / gib
    lines.append(
        f"train : {tr['questions']} q + {tr['passages']} p ({tr['max_q_len']}/{tr['max_p_len']} "
        f"tok)  step {tr['step_s_median'] * 1e3:.1f} ms  {tr['questions_per_s']:.1f} q/s  "
        f"{tr['achieved_flops_model'] / 1e12:.1f} TFLOP/s model"
        + (f" ({tr['achieved_flops_xla'] / 1e12:.1f} XLA)" if tr["achieved_flops_xla"] else "")
        + (f"  MFU {tr['mfu'] * 100:.1f}%" if tr["mfu"] is not None else "")
        + f"  peak mem {peak_t:.2f} GiB")
    lines.append("export: skipped" if not ex else
        f"export: batch {ex['batch']} x {ex['max_p_len']} tok  {ex['step_s_median'] * 1e3:.1f} ms"
        f"  {ex['passages_per_s']:.0f} p/s  {ex['achieved_flops_model'] / 1e12:.1f} TFLOP/s"
        + (f"  MFU {ex['mfu'] * 100:.1f}%" if ex["mfu"] is not None else "")
        + f"  | Encoder.passages {ex['encoder_passages_per_s']:.0f} p/s")
    lines.append(search_summary(res["search"]))
    if "matmul_peak_bf16_flops_measured" in res:
        lines.append(f"measured bf16 matmul peak ({res['matmul_n']}^3): "
                     f"{res['matmul_peak_bf16_flops_measured'] / 1e12:.1f} TFLOP/s")
    lines.append(f"sharding check: {res['sharding_check']}")
    return "\n".join(lines)


FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_SHAPES = flags.DEFINE_enum("shapes", "auto", ["auto", "small", "paper"],
                            "small: tiny BERT (CPU); paper: BERT-base at docs/method.md §9 shapes; auto: "
                            "paper on GPU/TPU, small on CPU.", flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", "", "Write the JSON result here.", flag_values=FLAGS)
_DTYPE = flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32", "float16"],
                           "Compute dtype (master weights and Adam state stay float32).", flag_values=FLAGS)
_ATTN = flags.DEFINE_enum("attention_impl", "dot_product",
                          ["einsum", "dot_product", "xla", "cudnn"], "BertConfig.attention_impl.", flag_values=FLAGS)
_DROPOUT = flags.DEFINE_float("dropout", 0.1, "Hidden dropout.", flag_values=FLAGS)
_ATTN_DROPOUT = flags.DEFINE_float("attention_dropout", 0.0,
                                   "Attention-probability dropout (> 0 forces the einsum path).", flag_values=FLAGS)
_REMAT = flags.DEFINE_bool("remat", False, "Rematerialise encoder layers.", flag_values=FLAGS)
_REMAT_POLICY = flags.DEFINE_string("remat_policy", "nothing_saveable", "jax checkpoint policy.", flag_values=FLAGS)
_LN_REMAT = flags.DEFINE_bool("layer_norm_remat", False, "LayerNorm recomputed from its bf16 "
                               "input (BertConfig.layer_norm_remat).", flag_values=FLAGS)
_FUSED_QKV = flags.DEFINE_bool("fused_qkv", False, "One QKV matmul (BertConfig.fused_qkv).",
                               flag_values=FLAGS)
_ACT = flags.DEFINE_string("hidden_act", "gelu", "gelu (BERT's erf) | gelu_new (tanh).",
                           flag_values=FLAGS)
_CHUNKS = flags.DEFINE_integer("grad_cache_chunks", 0, "GradCache chunks; 0: 1, doubled on OOM.", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 0, "Questions per step; 0: the shapes' default.", flag_values=FLAGS)
_LQ = flags.DEFINE_integer("max_q_len", 0, "Question tokens; 0: the shapes' default (paper 64).", flag_values=FLAGS)
_LP = flags.DEFINE_integer("max_p_len", 0, "Passage tokens; 0: the shapes' default (paper 256).", flag_values=FLAGS)
_STEPS = flags.DEFINE_integer("steps", 10, "Timed steps (median reported).", flag_values=FLAGS)
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps after compilation.", flag_values=FLAGS)
_EXPORT_BATCH = flags.DEFINE_integer("export_batch", 0, "Passages per export batch; 0: default.", flag_values=FLAGS)
_EXPORT_BATCHES = flags.DEFINE_integer("export_batches", 8, "Batches through Encoder.passages.", flag_values=FLAGS)
_CHECK = flags.DEFINE_bool("check_sharding", True, "With >1 device: sharded == single-device.", flag_values=FLAGS)
_MATMUL = flags.DEFINE_bool("matmul_peak", True, "Also measure a bf16 matmul's FLOP/s.", flag_values=FLAGS)
_EXPORT = flags.DEFINE_bool("export", True, "Also time passage encoding (export).", flag_values=FLAGS)
_SEARCH = flags.DEFINE_bool("search", True, "Also time JAX search (eval.index=jax).", flag_values=FLAGS)
_SEARCH_N = flags.DEFINE_integer("search_n", 0, "Search corpus rows; 0: the shapes' default "
                                 "(paper 2^20).", flag_values=FLAGS)
_SEARCH_QUERIES = flags.DEFINE_integer("search_queries", 0, "Search queries; 0: the shapes' "
                                       "default (paper 1024).", flag_values=FLAGS)
_SEARCH_K = flags.DEFINE_integer("search_k", 100, "Search depth k.", flag_values=FLAGS)
_RNG = flags.DEFINE_enum("rng_impl", "", ["", "threefry2x32", "rbg", "unsafe_rbg"],
                         "PRNG of the dropout key; '' = jax's default (what the training loop "
                         "uses).", flag_values=FLAGS)


def main(argv) -> None:
    del argv

    shapes = _SHAPES.value
    if shapes == "auto":
        shapes = "paper" if jax.default_backend() in ("gpu", "tpu") else "small"
    opts = BenchOptions(
        shapes=shapes, dtype=_DTYPE.value, attention_impl=_ATTN.value, dropout=_DROPOUT.value,
        attention_dropout=_ATTN_DROPOUT.value, remat=_REMAT.value,
        remat_policy=_REMAT_POLICY.value, grad_cache_chunks=_CHUNKS.value,
        global_batch=_BATCH.value, max_q_len=_LQ.value, max_p_len=_LP.value, steps=_STEPS.value,
        warmup=_WARMUP.value, export_batch=_EXPORT_BATCH.value,
        export_batches=_EXPORT_BATCHES.value, check_sharding=_CHECK.value,
        matmul_peak=_MATMUL.value, export=_EXPORT.value, search=_SEARCH.value,
        search_n=_SEARCH_N.value, search_queries=_SEARCH_QUERIES.value, search_k=_SEARCH_K.value,
        rng_impl=_RNG.value, layer_norm_remat=_LN_REMAT.value, fused_qkv=_FUSED_QKV.value,
        hidden_act=_ACT.value)
    res = run_benchmark(opts)
    print(json.dumps(res["inventory"], indent=1))
    print(summary(res))
    if _OUT.value:
        with open(_OUT.value, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
