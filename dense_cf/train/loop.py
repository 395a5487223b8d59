"""The training loop: data → sharded state → jitted step → metrics → checkpoints → validation.

Side effects (files, logging, checkpoints) live here; the math lives in ``step.py``/``losses.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from flax import linen as nn

from dense_cf.data import pipeline
from dense_cf.losses import loss_kwargs_from_config
from dense_cf.models import dual_encoder as de
from dense_cf.models.bert import axis_rules_for
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import tokenizer_for_run
from dense_cf.train import mesh as mesh_lib
from dense_cf.train.checkpoint import Checkpointer, abstract_like
from dense_cf.train.metrics import MetricWriter, quiet_library_logs
from dense_cf.train.state import TrainState, make_optimizer
from dense_cf.train.step import embed_batch, make_eval_step, make_train_step

CONSOLE_KEYS = ("loss", "l_dpr", "l_chn", "l_cpp", "rank_acc", "examples_per_s", "step_time_s")


def needs_counterfactual(config) -> bool:
    """The batch carries p* only if some loss term uses it (λ, τ1 or τ2 non-zero)."""
    return bool(config.loss.lam or config.loss.tau1 or config.loss.tau2)


def resolve_data_file(config, key: str) -> str | None:
    """Path of ``config.data.<key>`` (relative names are under ``config.data.data_dir``)."""
    name = config.data.get(key)
    if not name:
        return None
    path = name if os.path.isabs(name) else os.path.join(config.data.data_dir, name)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"data file for config.data.{key} is missing: {path}\n"
            f"  get DPR's files (SPEC §8, https://dl.fbaipublicfiles.com/dpr/; resumable, "
            f"checksummed, --manual_dir for offline hosts):\n"
            f"    python -m dense_cf.data.prepare --datasets nq --splits train,dev,test,gold,corpus "
            f"--data_dir {config.data.data_dir}\n"
            f"  (see docs/datasets.md); or run on the "
            f"synthetic benchmark: python -m dense_cf.data.synthetic --out=DIR and "
            f"--config=configs/demo.py --config.data.data_dir=DIR")
    return path


def maybe_generate_synthetic(config) -> None:
    """The demo config generates the synthetic benchmark into data_dir when it is absent."""
    syn = config.data.get("synthetic")
    if not syn or not syn.get("generate"):
        return
    train = os.path.join(config.data.data_dir, config.data.train_file)
    if host0_value(os.path.exists(train)):  # every host must take the same branch (barrier below)
        return
    from dense_cf.data import synthetic
    if jax.process_index() == 0:
        logging.info("generating the synthetic benchmark in %s", config.data.data_dir)
        synthetic.generate(config.data.data_dir, num_passages=syn.num_passages, seed=syn.seed,
                           test_questions=syn.get("test_questions") or None,
                           questions_per_passage=int(syn.get("questions_per_passage", 1)))
    # The other hosts must not read half-written files (data_dir is shared storage multi-host).
    host0_first(lambda: None, "synthetic-data")


def host0_value(value: bool) -> bool:
    """Host 0's ``value`` on every host (branches around collectives must agree)."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils
    return bool(multihost_utils.broadcast_one_to_all(np.asarray(value)))


def host0_first(fn, name: str):
    """``fn()`` on host 0, a barrier, then ``fn()`` on the other hosts; returns its result.

    For idempotent cached files: on shared storage host 0 is the only writer and the others
    read what it wrote; on host-local disks every host writes its own copy.
    """
    if jax.process_count() == 1:
        return fn()
    from jax.experimental import multihost_utils
    out = fn() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices(f"dense_cf:{name}")
    return out if jax.process_index() == 0 else fn()


def build_model(config, load_pretrained: bool = True):
    """(model, HF params or None for random init / not loaded, tokenizer directory)."""
    model, model_dir = de.model_from_config(config)
    if config.model.tokenizer:
        tok_dir = resolve_model_dir(config.model.tokenizer)
    else:  # a random "tiny" model borrows MiniLM's uncased vocabulary
        tok_dir = model_dir or resolve_model_dir("minilm")
    # de.load_pretrained = load_hf_bert_params + the rows of added tokens (DCSR's <sent>).
    hf_params = de.load_pretrained(config, model, model_dir, tok_dir) \
        if model_dir and load_pretrained else None
    return model, hf_params, tok_dir


def pipeline_spec(config, tokenizer, *, shuffle: bool = True) -> pipeline.PipelineSpec:
    strategy = config.data.counterfactual if needs_counterfactual(config) else "none"
    if needs_counterfactual(config) and strategy == "none":
        raise ValueError("the loss uses counterfactuals (λ/τ1/τ2 > 0) but "
                         "config.data.counterfactual is 'none'")
    return pipeline.PipelineSpec(
        global_batch=config.train.global_batch, max_q_len=config.data.max_q_len,
        max_p_len=config.data.max_p_len, num_hard=config.data.num_hard, strategy=strategy,
        window=config.data.window, pad_id=tokenizer.token_to_id("[PAD]") or 0,
        sep_id=tokenizer.token_to_id("[SEP]"), seed=config.seed, shuffle=shuffle)


def load_split(config, tokenizer, key: str, max_examples: int = 0) -> pipeline.Preprocessed | None:
    path = resolve_data_file(config, key)
    if path is None:
        return None
    cache = config.data.cache_dir or os.path.join(os.path.dirname(os.path.abspath(path)), ".cache")
    return pipeline.load_biencoder_split(
        path, tokenizer, cache_dir=cache, max_q_len=config.data.max_q_len,
        max_p_len=config.data.max_p_len, max_hard=config.data.max_hard_stored,
        answer_mode=config.data.answer_mode, evidence_file=config.data.evidence_file or None,
        max_examples=max_examples,
        fraction=float(config.data.get("train_fraction", 1.0)) if key == "train_file" else 1.0,
        fraction_seed=int(config.data.get("train_fraction_seed", 0)))


def init_state(config, model, hf_params, tx, mesh, rules, rng) -> TrainState:
    """Params initialised (or loaded) directly into their shardings; optimizer state follows."""
    lq, lp = config.data.max_q_len, config.data.max_p_len
    dummy_q = jnp.ones((1, lq), jnp.int32)
    dummy_p = jnp.ones((1, lp), jnp.int32)

    def init_fn(r):
        return model.init(r, dummy_q, dummy_q, dummy_p, dummy_p)["params"]

    abstract = jax.eval_shape(init_fn, rng)
    shardings = mesh_lib.tree_shardings(abstract, mesh, rules)
    if hf_params is not None:
        placed = de.pretrained_params(model, hf_params, boxed=False)
        params = jax.device_put(placed, shardings)
    else:
        params = jax.jit(lambda r: nn.meta.unbox(init_fn(r)), out_shardings=shardings)(rng)
    opt_state = jax.jit(tx.init)(params)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_state)


def _mean_metrics(history: list[dict[str, Any]]) -> dict[str, float]:
    host = jax.device_get(history)
    return {k: float(np.mean([h[k] for h in host])) for k in host[0]}


def evaluate(eval_fn, params, data: pipeline.Preprocessed, spec: pipeline.PipelineSpec, mesh,
             max_batches: int = 0, make_dataset=pipeline.make_dataset) -> dict[str, float]:
    """One pass over the dev set in fixed-size batches (the tail smaller than a batch is skipped
    and the count logged, since shapes are fixed)."""
    dev_spec = dataclasses.replace(spec, shuffle=False)
    ds = make_dataset(data, dev_spec, repeat=False, process_index=jax.process_index(),
                      process_count=jax.process_count())
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


@dataclasses.dataclass
class Run:
    """A trained run loaded for inference (export, evaluation)."""

    config: ml_collections.ConfigDict
    model: de.DualEncoder
    params: Any
    tokenizer: Any
    step: int
    mesh: Any
    rules: Any


def load_config(workdir: str) -> ml_collections.ConfigDict:
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {workdir} is not a dense_cf run directory")
    with open(path) as f:
        return ml_collections.ConfigDict(json.load(f))


def load_run(workdir: str, step: int | None = None, mesh=None) -> Run:
    """Restores the latest (or given) checkpoint's params into ``mesh`` (default: all devices)."""
    config = load_config(workdir)
    mesh = mesh or mesh_lib.make_mesh(-1, config.mesh.model)
    model, _, tok_dir = build_model(config, load_pretrained=False)
    rules = axis_rules_for(model.config, mesh.shape["model"], config.mesh.get("logical_axis_rules"))
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False)
    if ckpt.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint under {workdir}/checkpoints: train the run first")
    # The optimizer only shapes the restore target (Adam moments mirror the params).
    tx, _ = make_optimizer(config.optim, total_steps=max(config.train.num_steps, 1))
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        template = init_state(config, model, None, tx, mesh, rules, jax.random.key(0))
        state, _, restored_step = ckpt.restore(abstract_like(template), step)
    ckpt.close()
    return Run(config=config, model=model, params=state.params,
               tokenizer=tokenizer_for_run(config, tok_dir, workdir),
               step=restored_step, mesh=mesh, rules=rules)


def evaluate_after_training(run: Run, workdir: str) -> dict[str, Any]:
    """Retrieval (top-k, MRR) and answer-awareness reports of the final checkpoint."""
    from dense_cf.eval.aar import evaluate_aar
    from dense_cf.eval.retrieval import evaluate_run
    out = {"retrieval": evaluate_run(workdir, run=run)}
    if run.config.data.get("gold_file") and run.config.method == "dcsr":
        logging.warning("AAR/robustness skipped: not defined for DCSR's sentence vectors "
                        "(docs/dcsr.md)")
        out["aar"] = {"skipped": "DCSR run: passage-level AAR is not supported"}
    elif run.config.data.get("gold_file"):
        out["aar"] = evaluate_aar(workdir, run=run)
        counts = tuple(int(c) for c in run.config.eval.robustness_counts)
        if counts:
            from dense_cf.eval.robustness import evaluate_robustness
            out["robustness"] = evaluate_robustness(workdir, run=run, counts=counts,
                                                    max_distractors=max(counts))
    return out


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) a run in ``workdir``; returns a summary of the final metrics."""
    os.makedirs(workdir, exist_ok=True)
    quiet_library_logs()
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(config.to_json_best_effort(indent=2))
    maybe_generate_synthetic(config)
    mesh = mesh_lib.make_mesh(config.mesh.data, config.mesh.model)
    model, hf_params, tok_dir = build_model(config)
    rules = axis_rules_for(model.config, mesh.shape["model"], config.mesh.get("logical_axis_rules"))
    tokenizer = tokenizer_for_run(config, tok_dir, workdir, save=jax.process_index() == 0)

    train_data, dev_data = host0_first(lambda: (  # one writer per tokenised-cache file
        load_split(config, tokenizer, "train_file", config.data.max_train_examples),
        load_split(config, tokenizer, "dev_file", config.data.max_dev_examples)), "token-cache")
    spec = pipeline_spec(config, tokenizer)
    inputs, embed_fn = pipeline, embed_batch
    if config.method == "dcsr":  # sentence markers, sentence samples, own embed_fn (SPEC §4)
        from dense_cf.data import dcsr as inputs
        embed_fn = inputs.embed_sentences
        train_data, dev_data = (inputs.prepare(config, tokenizer, d) for d in (train_data, dev_data))
        spec = inputs.spec_from_config(config, tokenizer)
    spe = pipeline.steps_per_epoch(train_data.num_examples, spec.global_batch)
    total_steps = config.train.num_steps or int(config.train.num_epochs * spe)
    logging.info("train: %d examples, %d steps/epoch, %d steps; %s", train_data.num_examples,
                 spe, total_steps, train_data.stats)

    tx, schedule = make_optimizer(config.optim, total_steps)
    loss_kwargs = loss_kwargs_from_config(config)
    rng = jax.random.key(config.seed)
    init_rng, dropout_rng = jax.random.split(rng)

    writer = MetricWriter(workdir)
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=config.train.keep_checkpoints,
                        save_interval_steps=config.train.checkpoint_every,
                        async_save=config.train.async_checkpoint)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = init_state(config, model, hf_params, tx, mesh, rules, init_rng)
        hf_params = None
        it = inputs.BatchIterator(train_data, spec, process_index=jax.process_index(),
                                  process_count=jax.process_count())
        if ckpt.latest_step() is not None:
            state, data_state, _ = ckpt.restore(abstract_like(state))
            it.set_state(data_state)
        state_sh = jax.tree.map(lambda x: x.sharding, state)
        repl = mesh_lib.replicated(mesh)
        step_fn = jax.jit(
            make_train_step(model, tx, loss_kwargs=loss_kwargs, mesh=mesh, schedule=schedule,
                            dropout=config.train.dropout, embed_fn=embed_fn,
                            grad_cache_chunks=config.train.get("grad_cache_chunks", 1)),
            in_shardings=(state_sh, mesh_lib.batch_sharding(mesh), repl),
            out_shardings=(state_sh, repl), donate_argnums=(0,))
        eval_fn = jax.jit(make_eval_step(model, loss_kwargs=loss_kwargs, mesh=mesh, embed_fn=embed_fn,
                                         grad_cache_chunks=config.train.get("grad_cache_chunks", 1)),
                          in_shardings=(state_sh.params, mesh_lib.batch_sharding(mesh)),
                          out_shardings=repl)

        step = int(state.step)
        stop_at = min(total_steps, config.train.stop_at_step or total_steps)
        history, last = [], {}
        t_last, steps_since = time.perf_counter(), 0
        dev_metrics: dict[str, float] = {}
        while step < stop_at:
            batch = mesh_lib.global_batch(next(it), mesh)
            state, metrics = step_fn(state, batch, dropout_rng)
            step += 1
            steps_since += 1
            history.append(metrics)
            if step % config.train.log_every == 0 or step == stop_at:
                m = _mean_metrics(history)
                dt = time.perf_counter() - t_last
                m["step_time_s"] = dt / steps_since
                m["examples_per_s"] = spec.global_batch * steps_since / dt
                last = writer.write(step, m)
                writer.console(step, total_steps, last, tuple(f"train/{k}" for k in CONSOLE_KEYS),
                               label="train")
                history, t_last, steps_since = [], time.perf_counter(), 0
            if step % config.train.checkpoint_every == 0 or step == stop_at:
                ckpt.save(step, state, it.get_state(), force=True)
            if dev_data is not None and config.train.eval_every and (
                    step % config.train.eval_every == 0 or step == total_steps):
                dev_metrics = evaluate(eval_fn, state.params, dev_data, spec, mesh,
                                       config.train.eval_max_batches, inputs.make_dataset)
                dev_scalars = writer.write(step, dev_metrics, prefix="dev")
                writer.console(step, total_steps, dev_scalars,
                               ("dev/loss", "dev/rank_acc", "dev/mean_pos_rank"), label="dev")
                t_last = time.perf_counter()  # keep validation out of the step time
        ckpt.close()
    writer.close()
    summary_path = os.path.join(workdir, "summary.json")
    if not last and os.path.exists(summary_path):  # resumed a finished run: keep its metrics
        with open(summary_path) as f:
            previous = json.load(f)
        last, dev_metrics = previous.get("train", {}), dev_metrics or previous.get("dev", {})
    summary = {"step": step, "total_steps": total_steps, "train": last,
               "dev": dev_metrics, "data": {k: v for k, v in train_data.stats.items()}}
    if config.eval.after_training and step == total_steps and jax.process_count() > 1:
        # Export/index/report writers are not multi-host safe yet (every host would build and
        # save the index); the checkpoint restores in one process for evaluation instead.
        msg = (f"skipped on {jax.process_count()} hosts; run `python -m dense_cf.eval.retrieval "
               f"--workdir {workdir}` (and dense_cf.eval.aar) on one host")
        logging.warning("eval.after_training %s", msg)
        summary["eval"] = {"skipped": msg}
    elif config.eval.after_training and step == total_steps:
        run = Run(config=config, model=model, params=state.params, tokenizer=tokenizer, step=step,
                  mesh=mesh, rules=rules)
        summary["eval"] = evaluate_after_training(run, workdir)
    if jax.process_index() == 0:
        from dense_cf.eval.report import write_json
        write_json(summary_path, summary)
    summary["state"] = state
    return summary
