"""Memory benchmark: peak memory of the train step vs. batch size, with and without GradCache.

    python -m dense_cf.bench.memory --batches 8,16,32,64 --chunks 1,4          # MiniLM, float32
    python -m dense_cf.bench.memory --batches 8 --chunks 1 --paper_chunks 1,16  # + BERT-base paper batch

Every configuration runs in a fresh subprocess on ONE CPU device (so peak RSS is its own) and
reports: XLA's compiled ``memory_analysis()`` of the jitted train step (argument, output and
temp bytes; temp = activations and other intermediates), the process's peak RSS after one step
(``ru_maxrss``; includes the Python/JAX runtime, the model and the optimizer state), the RSS
before compiling, and the step time. The paper set-up (docs/method.md §9: 128 questions + 128 hard
negatives + 128 counterfactuals, BERT-base, passages of 256 tokens, questions of 64) is
compiled only, from abstract shapes (nothing is allocated), and also gives XLA's FLOP count.

Caveat: on XLA:CPU remat does not lower ``memory_analysis`` (the CPU compiler re-fuses the
recomputation), so remat is not benchmarked here; GradCache bounds liveness with a loop and
shows on every backend. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from dense_cf import methods
from dense_cf.bench.common import batch_shapes, random_batch
from dense_cf.bench.rss import peak_rss_mb, rss_bytes
from dense_cf.configs.base import base_config
from dense_cf.methods.contrastive import PICL_LOSS
from dense_cf.models.bert import BertConfig
from dense_cf.models.dual_encoder import DualEncoder
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import run as loop
from dense_cf.train.state import TrainState, make_optimizer
from dense_cf.train.step import jit_train_step

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12,
                 intermediate_size=3072)




def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One configuration; runs in its own process."""


    b, chunks, lq, lp, h = spec["batch"], spec["chunks"], spec["lq"], spec["lp"], spec["hard"]
    cfg = base_config()
    cfg.model.name_or_path = spec["model"]
    cfg.model.dtype = spec["dtype"]
    if spec["cf"]:
        cfg.loss.update(PICL_LOSS)
    tx, _ = make_optimizer(cfg.optim, total_steps=1000)
    out: dict[str, Any] = {"model": spec["model"], "batch": b, "chunks": chunks,
                           "passages": b * (1 + h + int(spec["cf"])), "max_q_len": lq,
                           "max_p_len": lp}

    shapes = batch_shapes(b, h, lq, lp, spec["cf"])
    if spec["compile_only"]:
        model = DualEncoder(BertConfig(**BERT_BASE, dtype=spec["dtype"]))
        ids = jnp.ones((1, lp), jnp.int32)
        params = jax.eval_shape(lambda: nn.meta.unbox(
            model.init(jax.random.key(0), ids, ids, ids, ids)["params"]))
        state = jax.eval_shape(lambda p: TrainState(step=jnp.zeros((), jnp.int32), params=p,
                                                    opt_state=tx.init(p)), params)
    else:
        model, hf_params, _ = loop.build_model(cfg)
        mesh = mesh_lib.make_mesh(1, 1, devices=jax.devices()[:1])
        cfg.data.max_q_len, cfg.data.max_p_len = lq, lp
        with jax.set_mesh(mesh):
            state = loop.init_state(cfg, model, hf_params, tx, mesh, (), jax.random.key(0))
        del hf_params
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
    out["params_m"] = round(n_params / 1e6, 2)
    method = methods.get(cfg.method)
    step = jit_train_step(method, model, tx, state, None,
                          loss_hparams=method.loss_hparams(cfg.loss), grad_cache_chunks=chunks)
    rng = jax.random.key(1)
    out["rss_before_compile_mb"] = round(rss_bytes() / 2**20, 1)
    t0 = time.perf_counter()
    compiled = step.lower(state, shapes, rng).compile()
    out["compile_s"] = round(time.perf_counter() - t0, 1)
    ma = compiled.memory_analysis()
    gib = 2.0 ** 30
    out["xla_argument_gib"] = round(ma.argument_size_in_bytes / gib, 3)
    out["xla_output_gib"] = round(ma.output_size_in_bytes / gib, 3)
    out["xla_alias_gib"] = round(ma.alias_size_in_bytes / gib, 3)
    out["xla_temp_gib"] = round(ma.temp_size_in_bytes / gib, 3)
    # Donated state aliases the output: live bytes = arguments + temp + non-aliased outputs.
    out["xla_total_gib"] = round((ma.argument_size_in_bytes + ma.temp_size_in_bytes
                                  + ma.output_size_in_bytes - ma.alias_size_in_bytes) / gib, 3)
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    # XLA counts a while-loop body once, so FLOPs are only meaningful without chunking.
    out["xla_flops"] = float(cost.get("flops", 0.0)) if (cost and chunks == 1) else None
    if not spec["compile_only"]:
        batch = random_batch(shapes, model.config.vocab_size)
        t0 = time.perf_counter()
        state, m = compiled(state, batch, rng)
        jax.block_until_ready(m)
        out["step_s"] = round(time.perf_counter() - t0, 2)
        out["loss"] = round(float(m["loss"]), 4)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def _run(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("XLA_FLAGS", None)  # one CPU device: the process's RSS is this configuration's
    cmd = [sys.executable, "-m", "dense_cf.bench.memory", "--_worker", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(spec, error=f"timeout after {timeout:.0f}s")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return dict(spec, error=f"exit {p.returncode}: {' | '.join(tail)}")
    return json.loads(lines[-1])


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [fmt.format(*cols), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(r.get(c, "")) if r.get(c) is not None else "-" for c in cols))
              for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--_worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--batches", default="8,16,32,64", help="questions per batch")
    ap.add_argument("--chunks", default="1,4", help="GradCache chunks (1 = off)")
    ap.add_argument("--max_q_len", type=int, default=32)
    ap.add_argument("--max_p_len", type=int, default=64)
    ap.add_argument("--num_hard", type=int, default=1)
    ap.add_argument("--no_counterfactual", action="store_true", help="DPR batch (no p*)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--paper_chunks", default="1,16",
                    help="compile-only BERT-base paper batch with these chunk counts ('' = skip)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json_out", default="")
    args = ap.parse_args(argv)

    if args._worker:
        print(json.dumps(_worker(json.loads(args._worker))), flush=True)
        return

    rows = []
    base = dict(model=args.model, lq=args.max_q_len, lp=args.max_p_len, hard=args.num_hard,
                cf=not args.no_counterfactual, dtype=args.dtype, compile_only=False)
    for b in (int(x) for x in args.batches.split(",") if x):
        for c in (int(x) for x in args.chunks.split(",") if x):
            rows.append(_run(dict(base, batch=b, chunks=c), args.timeout))
            print(json.dumps(rows[-1]), flush=True)
    cols = ["model", "batch", "passages", "chunks", "xla_temp_gib", "xla_argument_gib",
            "xla_total_gib", "rss_before_compile_mb", "peak_rss_mb", "compile_s", "step_s", "error"]
    print(f"\n{args.model}, {args.dtype}, 1 CPU device, q/p lengths "
          f"{args.max_q_len}/{args.max_p_len}, hard negatives {args.num_hard}, "
          f"counterfactual {not args.no_counterfactual}")
    print(_table(rows, [c for c in cols if any(c in r for r in rows)]))

    paper = []
    for c in (int(x) for x in args.paper_chunks.split(",") if x):
        paper.append(_run(dict(model="bert-base", lq=64, lp=256, hard=1, cf=True,
                               dtype=args.dtype, compile_only=True, batch=128, chunks=c),
                          args.timeout))
        print(json.dumps(paper[-1]), flush=True)
    if paper:
        print(f"\nPaper batch (docs/method.md §9), BERT-base, {args.dtype}, one device, compile-only:")
        print(_table(paper, [c for c in ["batch", "passages", "chunks", "params_m", "xla_temp_gib",
                                         "xla_argument_gib", "xla_total_gib", "xla_flops",
                                         "compile_s", "error"] if any(c in r for r in paper)]))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"runs": rows, "paper": paper}, f, indent=2)


if __name__ == "__main__":
    main()
