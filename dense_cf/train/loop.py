"""The training loop: data → sharded state → jitted step → metrics → checkpoints → validation.

Side effects (files, logging, checkpoints) live here; the math lives in ``step.py`` and the
method's loss. ``train()`` trains and nothing else: evaluation after training is
``dense_cf.experiment.train_and_evaluate``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from flax import linen as nn
from jax.experimental import multihost_utils

from dense_cf import methods
from dense_cf.configs.base import resolve_paths
from dense_cf.console import quiet_library_logs
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.files import atomic_open, workdir_lock, write_json
from dense_cf.inputs import buckets as bucket_lib
from dense_cf.inputs import dpr as dpr_inputs
from dense_cf.inputs import packing
from dense_cf.inputs.source import GrainOptions
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.parallel.hosts import host0_first, is_host0
from dense_cf.progress import Progress, timed
from dense_cf.train.checkpoint import Checkpointer, abstract_like
from dense_cf.train.metric_writer import MetricWriter
from dense_cf.train.preemption import Preempted, StopSignals
from dense_cf.train.run import Run, RunDir, axis_rules, build_model, init_state, method_of, run_tokenizer
from dense_cf.train.state import make_optimizer
from dense_cf.train.step import jit_eval_step, jit_train_step
from dense_cf.train.validate import pack_problem, validate

# The data files a checkpoint records the sha256 of (questions, positives and negatives).
INPUT_FILES = ("train_file", "dev_file")


def _input_files(config: ml_collections.ConfigDict) -> dict[str, str]:
    """{key: path} of the :data:`INPUT_FILES` the config names as local files."""
    out = {}
    for key in INPUT_FILES:
        with contextlib.suppress(ValueError, OSError):  # unset, or not a local file (TFDS)
            if config.data.get(key):
                out[key] = resolve_data_file(config.data, key)
    return out

# Shown when a method's loss reports them (retrievers: l_dpr...; the reader: l_select, l_span).
CONSOLE_KEYS = ("loss", "l_dpr", "l_chn", "l_cpp", "l_select", "l_span", "rank_acc", "span_acc",
                "examples_per_s", "step_time_s", "padding_removed")


def batch_spec(config, tokenizer, *, shuffle: bool = True, method: methods.Method | None = None):
    """The method's batch spec for this config."""
    method = method or method_of(config)
    return method.inputs.spec(config, tokenizer, shuffle=shuffle,
                              counterfactual=method.needs_counterfactual(config.loss))


def length_bucketer(method, config):
    """``batch -> (batch, padding share removed)`` cutting host-local batches to
    ``config.data.length_buckets`` (``inputs.buckets.trim_batch``), or None when off.

    On several hosts the longest row of each group is the maximum over all hosts, so every host
    cuts to the same shape. A pure function of the (global) batch: resume stays exact.
    """
    boundaries = tuple(int(b) for b in config.data.length_buckets)
    groups = method.inputs.length_groups
    if not boundaries:
        return None
    if not groups:
        logging.warning("data.length_buckets=%s ignored: %s batches declare no length groups "
                        "(Inputs.length_groups); every batch is padded to full length",
                        boundaries, method.name)
        return None

    def cut(batch):
        need = None
        if jax.process_count() > 1:
            local = bucket_lib.group_needs(batch, groups)
            longest = multihost_utils.process_allgather(
                np.asarray([v[1] for v in local.values()], np.int32)).reshape(-1, len(local))
            need = dict(zip(local, longest.max(axis=0).tolist()))
        batch, counts = bucket_lib.trim_batch(batch, groups, boundaries, need)
        return batch, bucket_lib.padding_removed(counts["tokens"], counts["tokens_at_max"])

    return cut


def sequence_packer(method, config, mesh):
    """``batch -> (batch, padding share removed)`` packing host-local batches into rows of
    ``config.data.pack_row_len`` tokens (``inputs.packing.pack_batch``, one pack per data shard
    of this host), or None when off. Row counts round up to ``data.pack_rows_multiple`` (a few
    shapes, each compiled once); on several hosts each is the maximum over all hosts, so every
    host builds the same global shape. A pure function of the (global) batch: resume stays
    exact."""
    row_len = int(config.data.get("pack_row_len", 0))
    if not row_len:
        return None
    problem = pack_problem(method, row_len)
    if problem:  # the config check says so first; callers that skip it (benchmarks) get it here
        raise ValueError(problem)
    groups = method.pack_groups
    multiple = int(config.data.get("pack_rows_multiple", 1))
    shards = mesh.shape["data"] // jax.process_count()

    def pack(batch):
        local = packing.rows_needed(batch, groups, row_len, shards)
        need = np.asarray(list(local.values()), np.int32)
        if jax.process_count() > 1:
            need = multihost_utils.process_allgather(need).reshape(-1, len(local)).max(axis=0)
        rows = {k: int(-(-int(n) // multiple) * multiple) for k, n in zip(local, need)}
        batch, stats = packing.pack_batch(batch, groups, row_len, shards, rows=rows)
        return batch, 1.0 - stats["slots"] / stats["slots_padded"]

    return pack


def batch_shape_key(batch: dict[str, Any]) -> tuple:
    """A batch's (key, shape) pairs: equal keys share one compiled step."""
    return tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()))


def device_memory() -> dict[str, int | None]:
    """Peak and current bytes of the first local device (None where the backend keeps no
    statistics, e.g. some CPU builds)."""
    dev = jax.local_devices()[0]
    stats = (dev.memory_stats() if hasattr(dev, "memory_stats") else None) or {}
    return {"device": dev.device_kind, "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
            "bytes_in_use": stats.get("bytes_in_use"), "bytes_limit": stats.get("bytes_limit")}


def _mean_metrics(history: list[dict[str, Any]]) -> dict[str, float]:
    host = jax.device_get(history)
    return {k: float(np.mean([h[k] for h in host])) for k in host[0]}


def evaluate(eval_fn, params, data, spec, mesh, max_batches: int = 0,
             make_dataset=dpr_inputs.make_dataset, pipeline: str = "tfdata") -> dict[str, float]:
    """One pass over the dev set in fixed-size batches (the tail smaller than a batch is skipped
    and the count logged, since shapes are fixed)."""
    dev_spec = dataclasses.replace(spec, shuffle=False)
    ds = make_dataset(data, dev_spec, repeat=False, process_index=jax.process_index(),
                      process_count=jax.process_count(), pipeline=pipeline)
    out = []
    for i, batch in enumerate(ds.as_numpy_iterator()):
        if max_batches and i >= max_batches:
            break
        out.append(eval_fn(params, mesh_lib.global_batch(batch, mesh)))
    if not out:
        return {}
    m = _mean_metrics(out)
    m["examples"] = len(out) * spec.global_batch
    m["skipped_tail"] = data.num_examples - (len(out) * spec.global_batch) if not max_batches else 0
    return m


def train(config: ml_collections.ConfigDict, workdir: str) -> tuple[dict[str, Any], Run]:
    """Trains (or resumes) a run in ``workdir``.

    Returns the summary of the final metrics (also written to ``summary.json``) and the trained
    :class:`Run` (final params in their shardings, for evaluation in the same process). Holds
    the workdir lock (``files.workdir_lock``, process 0 only) throughout, so a second trainer or
    evaluator on the same workdir refuses at once. On SIGTERM/SIGINT it finishes the step in
    flight, saves it and raises :class:`~dense_cf.train.preemption.Preempted` (lock released).
    """
    config = prepare(config)
    with StopSignals() as stop, lock_workdir(config, workdir):  # released before a late signal
        return _train(config, workdir, stop)


def prepare(config: ml_collections.ConfigDict, *, check_files: bool = True
            ) -> ml_collections.ConfigDict:
    """The config a run trains with: paths resolved against the launch directory (saved
    absolute), the method's loss weights filled in (config.json records them), checked
    (``validate``: a bad value fails in a second, before the lock and any work)."""
    config = resolve_paths(config)
    config = methods.with_loss_defaults(config)
    validate(config, check_files=check_files)
    return config


def lock_workdir(config: ml_collections.ConfigDict, workdir: str):
    """The workdir lock of a training run (process 0 only; ``files.workdir_lock``)."""
    return (workdir_lock(workdir, f"training {config.method}", warn=logging.warning) if is_host0()
            else contextlib.nullcontext())


def train_prepared(config: ml_collections.ConfigDict, workdir: str) -> tuple[dict[str, Any], Run]:
    """:func:`train` for a caller that already ran :func:`prepare` and holds
    :func:`lock_workdir` (``experiment.train_and_evaluate``): set-up runs once per training run."""
    with StopSignals() as stop:
        return _train(config, workdir, stop)


def _train(config: ml_collections.ConfigDict, workdir: str,
           stop: StopSignals) -> tuple[dict[str, Any], Run]:
    rd = RunDir(workdir)
    os.makedirs(workdir, exist_ok=True)
    quiet_library_logs()
    method = method_of(config)  # once per training run: everything below receives the object
    if is_host0():
        with atomic_open(rd.config) as f:
            f.write(config.to_json_best_effort(indent=2))
    mesh = mesh_lib.make_mesh(config.mesh.data, config.mesh.model)
    model, hf_params, tok_dir = build_model(config, method=method)
    rules = axis_rules(config, model, mesh, method=method)
    tokenizer = run_tokenizer(config, tok_dir, workdir, save=is_host0(), method=method)

    train_data, dev_data = host0_first(lambda: (  # one writer per tokenised-cache file
        method.inputs.load(config, tokenizer, "train_file", config.data.max_train_examples),
        method.inputs.load(config, tokenizer, "dev_file", config.data.max_dev_examples)),
        "token-cache")
    if train_data is None:
        raise ValueError("config.data.train_file is empty: nothing to train on")
    train_data, dev_data = (method.inputs.prepare(config, tokenizer, d)
                            for d in (train_data, dev_data))
    spec = batch_spec(config, tokenizer, method=method)
    spe = dpr_inputs.steps_per_epoch(train_data.num_examples, spec.global_batch)
    total_steps = config.train.num_steps or int(config.train.num_epochs * spe)
    logging.info("train %s: %d examples, %d steps/epoch, %d steps; %s", method.name,
                 train_data.num_examples, spe, total_steps, train_data.stats)

    tx, schedule = make_optimizer(config.optim, total_steps)
    loss_hparams = method.loss_hparams(config.loss)
    rng = jax.random.key(config.seed)
    init_rng, dropout_rng = jax.random.split(rng)

    writer = MetricWriter(workdir)
    # The config beside the curves (TensorBoard's Text tab), as config.json has it.
    writer.tensorboard_text("config", "```\n" + config.to_json_best_effort(indent=2) + "\n```")
    ckpt = Checkpointer(rd.checkpoints, max_to_keep=config.train.keep_checkpoints,
                        save_interval_steps=config.train.checkpoint_every,
                        async_save=config.train.async_checkpoint, remove_partial=True)
    chunks = int(config.train.grad_cache_chunks)
    # An error in the loop removes a save's half-written step before it propagates.
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules), ckpt.abandon_on_error():
        state = init_state(config, model, hf_params, tx, mesh, rules, init_rng, method=method)
        hf_params = None
        it = method.inputs.batch_iterator(
            train_data, spec, process_index=jax.process_index(), process_count=jax.process_count(),
            pipeline=config.data.pipeline,
            grain_options=GrainOptions(int(config.data.grain_threads),
                                       int(config.data.grain_prefetch)))
        if ckpt.latest_step() is not None:
            state, data_state, _ = ckpt.restore(abstract_like(state))
            it.set_state(data_state)
        if is_host0():  # each step records the hashes of the files it was trained from
            ckpt.record_inputs(_input_files(config))
        state_sh = jax.tree.map(lambda x: x.sharding, state)
        step_fn = jit_train_step(method, model, tx, state, mesh, loss_hparams=loss_hparams,
                                 schedule=schedule, dropout=config.train.dropout,
                                 grad_cache_chunks=chunks)
        eval_fn = jit_eval_step(method, model, state_sh.params, mesh, loss_hparams=loss_hparams,
                                grad_cache_chunks=chunks)

        step = int(state.step)
        stop_at = min(total_steps, config.train.stop_at_step or total_steps)
        history, last = [], {}
        t_last, steps_since = time.perf_counter(), 0
        dev_metrics: dict[str, float] = {}
        # Rate, elapsed and ETA for the console; a time-based line between step-based ones.
        progress = Progress("train", stop_at, unit="steps", start=step, enabled=is_host0())
        compiled = False
        # Wall times for the run summary: the whole loop, the first step (compile), each
        # checkpoint save's blocking part (all of it with train.async_checkpoint=False).
        timing: dict[str, Any] = {"checkpoint_save_s": []}
        t_train = time.perf_counter()
        bucketer = length_bucketer(method, config)
        packer = sequence_packer(method, config, mesh)
        shapes: set[tuple] = set()  # batch shapes compiled (one per length bucket combination)
        preempted = False
        while step < stop_at:
            ckpt.check()  # a background save that failed stops the run before another step
            local_batch = next(it)
            removed = None
            if bucketer is not None:  # each bucket shape compiles once (jit's cache)
                local_batch, removed = bucketer(local_batch)
            if packer is not None:  # as are the few packed row counts
                local_batch, removed_pk = packer(local_batch)
                removed = 1.0 - (1.0 - (removed or 0.0)) * (1.0 - removed_pk)
            batch = mesh_lib.global_batch(local_batch, mesh)
            shape = batch_shape_key(local_batch)
            if compiled and shape in shapes:
                state, metrics = step_fn(state, batch, dropout_rng)
            else:
                # The first call compiles (tens of seconds on a real model): say so, and time it
                # apart from the steady-state rate. Blocking once makes the time the compile's
                # plus one step's rather than the dispatch's. A new length bucket compiles too.
                what = f" for a new batch shape ({len(shapes) + 1} so far)" if compiled else ""
                t_compile = time.perf_counter()
                with timed(f"train: compiling the train step{what}",
                           "train: compiled and ran the first step" + what, enabled=is_host0()):
                    state, metrics = step_fn(state, batch, dropout_rng)
                    jax.block_until_ready(metrics)
                timing.setdefault("compile_s", []).append(time.perf_counter() - t_compile)
                shapes.add(shape)
            step += 1
            steps_since += 1
            if removed is not None:  # share of token positions at full padding not computed
                metrics = dict(metrics, padding_removed=removed)
            history.append(metrics)
            is_log_step = step % config.train.log_every == 0 or step == stop_at
            if not compiled:
                compiled = True
                progress.set(step, log=False)
                progress.restart_rate()
                # The next time-based line is due every_s from now, not at once: a line one
                # step after the compile would show a dispatch-only rate and a meaningless ETA.
                progress.mark_logged()
                if not is_log_step:  # keep the compile out of step_time_s where a later step can
                    t_last, steps_since = time.perf_counter(), 0
            else:
                progress.set(step, log=not is_log_step)
            if is_log_step:
                m = _mean_metrics(history)
                dt = time.perf_counter() - t_last
                m["step_time_s"] = dt / steps_since
                m["examples_per_s"] = spec.global_batch * steps_since / dt
                last = writer.write(step, m)
                writer.console(step, total_steps, last, tuple(f"train/{k}" for k in CONSOLE_KEYS),
                               label="train", extra=progress.stats())
                progress.mark_logged()
                history, t_last, steps_since = [], time.perf_counter(), 0
            preempted = stop.agreed()  # every host: the same answer after the same step
            if preempted or step % config.train.checkpoint_every == 0 or step == stop_at:
                t_save = time.perf_counter()
                ckpt.save(step, state, it.get_state(), force=True)
                timing["checkpoint_save_s"].append(time.perf_counter() - t_save)
            if preempted:
                break
            if dev_data is not None and config.train.eval_every and (
                    step % config.train.eval_every == 0 or step == total_steps):
                dev_metrics = evaluate(eval_fn, state.params, dev_data, spec, mesh,
                                       config.train.eval_max_batches, method.inputs.make_dataset,
                                       config.data.pipeline)
                dev_scalars = writer.write(step, dev_metrics, prefix="dev")
                writer.console(step, total_steps, dev_scalars,
                               ("dev/loss", "dev/rank_acc", "dev/span_acc", "dev/mean_pos_rank"),
                               label="dev")
                t_last = time.perf_counter()  # keep validation out of the step time
        if compiled:
            progress.done()
        t_close = time.perf_counter()
        ckpt.close()  # waits for the last save: on preemption the save is synchronous
        timing["checkpoint_close_s"] = time.perf_counter() - t_close
        timing["train_s"] = time.perf_counter() - t_train
    writer.close()
    if preempted:
        raise Preempted(step, rd.checkpoints, stop.signame)
    if not last and os.path.exists(rd.summary):  # resumed a finished run: keep its metrics
        with open(rd.summary) as f:
            previous = json.load(f)
        last, dev_metrics = previous.get("train", {}), dev_metrics or previous.get("dev", {})
    summary = {"step": step, "total_steps": total_steps, "train": last,
               "dev": dev_metrics, "data": {k: v for k, v in train_data.stats.items()},
               "timing": timing, "device_memory": device_memory()}
    if is_host0():
        write_json(rd.summary, summary)
    run = Run(config=config, model=model, params=state.params, tokenizer=tokenizer, step=step,
              mesh=mesh, rules=rules, method=method)
    return summary, run

