"""Config checks at load time: enums, ranges, model names and data files, before any work.

A typo such as ``--config.data.counterfactual=windw`` used to pass start-up and fail seconds
later inside tf.data. :func:`validate` raises one :class:`ConfigError` listing every problem,
each naming the field, the value and what is allowed (with a "did you mean" for enums).
"""

from __future__ import annotations

import os
import re

import ml_collections

from dense_cf.configs.checks import enum as _enum
from dense_cf.configs.checks import number as _range
from dense_cf.files import UserError
from dense_cf.index import kinds as index_kinds
from dense_cf.index.jax_search import DTYPES as JAX_DTYPES
from dense_cf.index.jax_search import SELECTS as JAX_SELECTS
from dense_cf.inputs import dpr as dpr_inputs
from dense_cf.inputs.cf_masks import STRATEGIES as CF_STRATEGIES
from dense_cf.inputs.source import PIPELINES
from dense_cf.models.bert import ATTENTION_IMPLS, DTYPES, HIDDEN_ACTS, REMAT_POLICIES
from dense_cf.models.dual_encoder import POOLINGS
from dense_cf.synthetic.distractors import HELDOUT_KINDS
from dense_cf.synthetic.distractors import KINDS as HELDOUT_KIND_REGISTRY
from dense_cf.synthetic.world import HARD_NEGATIVES, WORLDS
from dense_cf.text.answers import MODES as ANSWER_MODES
from dense_cf.text.counterfactuals import TEXT_STRATEGIES
from dense_cf.train.run import method_of

__all__ = ["ConfigError", "problems", "validate"]

# "org/name" or "name" on the Hugging Face hub; anything else must be an existing directory.
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_BUILTIN_MODELS = ("tiny", "minilm")


class ConfigError(UserError):
    """The config has values that cannot work (listed, field by field)."""


def pack_problem(method, row_len: int) -> str | None:
    """Why ``data.pack_row_len=row_len`` cannot work for ``method``, or None."""
    if row_len and not method.pack_groups:
        return (f"config.data.pack_row_len={row_len}: method {method.name}'s batches cannot be "
                "packed (its embed function reads no packed groups, Method.pack_groups); set "
                "data.pack_row_len=0")
    return None


def problems(config: ml_collections.ConfigDict, *, check_files: bool = True) -> list[str]:
    """Every problem found in ``config`` (a complete config: see ``configs.base``); a method's
    own block and loss weights are checked by the method (``Method.config_problems``)."""
    out: list[str] = []
    try:
        method = method_of(config)
    except ValueError as e:
        out.append(str(e))
        method = None
    m, d, t, o, ev = config.model, config.data, config.train, config.optim, config.eval
    name = str(m.name_or_path)
    if name not in _BUILTIN_MODELS and not os.path.isdir(name) and (
            not _HUB_NAME.match(name) or os.path.isabs(name) or name.startswith(".")):
        out.append(f"config.model.name_or_path={name!r} is neither tiny, minilm, an existing "
                   f"directory nor a hub name like 'bert-base-uncased' or 'org/name'")
    _enum(out, "model.pooling", m.pooling, POOLINGS)
    _enum(out, "model.dtype", m.dtype, DTYPES)
    _enum(out, "model.remat_policy", m.remat_policy, REMAT_POLICIES)
    _enum(out, "model.attention_impl", m.attention_impl, ATTENTION_IMPLS)
    if m.get("matmul_dtype"):
        _enum(out, "model.matmul_dtype", m.matmul_dtype, DTYPES)
    if m.get("hidden_act"):
        _enum(out, "model.hidden_act", m.hidden_act, HIDDEN_ACTS)
    _range(out, "model.dropout", m.dropout, 0, 1, hi_open=True)
    if m.attention_dropout is not None:
        _range(out, "model.attention_dropout", m.attention_dropout, 0, 1, hi_open=True)

    _enum(out, "data.counterfactual", d.counterfactual, CF_STRATEGIES)
    _enum(out, "data.pipeline", d.pipeline, PIPELINES)
    if int(d.grain_threads) < 1 or int(d.grain_prefetch) < 1:
        out.append(f"config.data.grain_threads={d.grain_threads} and grain_prefetch="
                   f"{d.grain_prefetch} must be >= 1")
    if d.counterfactual == "evidence" and not d.evidence_file:
        out.append("config.data.counterfactual='evidence' needs config.data.evidence_file "
                   "(python -m dense_cf.cli.evidence writes one)")
    _enum(out, "data.answer_mode", d.answer_mode, ANSWER_MODES)
    _range(out, "data.max_q_len", d.max_q_len, 1, 512)
    _range(out, "data.max_p_len", d.max_p_len, 1, 512)
    _range(out, "data.num_hard", d.num_hard, 0)
    _range(out, "data.window", d.window, 0)
    _range(out, "data.train_fraction", d.train_fraction, 0, 1, lo_open=True)
    for b in d.length_buckets:
        _range(out, "data.length_buckets[]", b, 1)
    _range(out, "data.pack_row_len", d.get("pack_row_len", 0), 0)
    _range(out, "data.pack_rows_multiple", d.get("pack_rows_multiple", 1), 1)
    if d.get("pack_row_len", 0) and int(t.grad_cache_chunks) > 1:
        out.append(f"config.data.pack_row_len={d.pack_row_len} and config.train.grad_cache_chunks="
                   f"{t.grad_cache_chunks}: GradCache cuts the batch into example chunks, which "
                   "packed rows are not; use one of the two")

    _range(out, "optim.learning_rate", o.learning_rate, 0, lo_open=True)
    _range(out, "optim.warmup_steps", o.warmup_steps, 0)
    _range(out, "optim.grad_clip", o.grad_clip, 0)
    _range(out, "optim.b1", o.b1, 0, 1, hi_open=True)
    _range(out, "optim.b2", o.b2, 0, 1, hi_open=True)
    _enum(out, "optim.decay", o.get("decay", "linear"), ("linear", "constant"))
    _range(out, "train.global_batch", t.global_batch, 1)
    _range(out, "train.num_steps", t.num_steps, 0)
    if not t.num_steps:
        _range(out, "train.num_epochs", t.num_epochs, 0, lo_open=True)
    _range(out, "train.grad_cache_chunks", t.grad_cache_chunks, 1)
    if (isinstance(t.grad_cache_chunks, int) and isinstance(t.global_batch, int) and t.grad_cache_chunks > 0
            and t.global_batch % t.grad_cache_chunks):
        out.append(f"config.train.grad_cache_chunks={t.grad_cache_chunks} must divide "
                   f"config.train.global_batch={t.global_batch}")
    for f in ("log_every", "checkpoint_every", "keep_checkpoints"):
        _range(out, f"train.{f}", t[f], 1)
    _range(out, "train.eval_every", t.eval_every, 0)  # 0: no dev evaluation

    _enum(out, "eval.index", ev.index, index_kinds.names())
    _enum(out, "eval.jax.dtype", ev.jax.dtype, JAX_DTYPES)
    _range(out, "eval.jax.recall_target", ev.jax.recall_target, 0, 1, lo_open=True)
    _range(out, "eval.jax.query_batch_size", ev.jax.query_batch_size, 0)  # 0: sized to the device
    _range(out, "eval.jax.block_rows", ev.jax.block_rows, 1)
    _enum(out, "eval.jax.select", ev.jax.select, JAX_SELECTS)
    for f in ("chunk_rows", "chunk_k", "rescan_chunks"):
        _range(out, f"eval.jax.{f}", ev.jax[f], 1)
    _range(out, "eval.jax.bin_rows", ev.jax.get("bin_rows", 0), 0)  # 0: the platform's
    _range(out, "eval.jax.prune_bins", ev.jax.get("prune_bins", 0), 0)  # 0: off
    if all(isinstance(ev.jax[f], int) for f in ("chunk_k", "chunk_rows")) \
            and ev.jax.chunk_k >= ev.jax.chunk_rows:
        out.append(f"config.eval.jax.chunk_k={ev.jax.chunk_k} must be < "
                   f"config.eval.jax.chunk_rows={ev.jax.chunk_rows}")
    _range(out, "eval.index_nlist", ev.index_nlist, 0)
    _range(out, "eval.index_pq_m", ev.index_pq_m, 0)
    _range(out, "eval.index_train_size", ev.index_train_size, 1)
    _range(out, "eval.index_nprobe", ev.index_nprobe, 1)
    _range(out, "eval.rerank", ev.rerank, 0)
    _range(out, "eval.k", ev.k, 1)
    for k in ev.ks:
        _range(out, "eval.ks[]", k, 1)
    _enum(out, "eval.embedding_dtype", ev.embedding_dtype, ("float16", "float32"))
    for s in ev.aar_strategies:
        _enum(out, "eval.aar_strategies[]", s, TEXT_STRATEGIES)
    for c in ev.robustness_counts:
        _range(out, "eval.robustness_counts[]", c, 0)
    kinds = tuple(ev.get("robustness_heldout_kinds", HELDOUT_KINDS))
    for kind in kinds:
        _enum(out, "eval.robustness_heldout_kinds[]", kind, tuple(HELDOUT_KIND_REGISTRY))
    if not kinds or len(set(kinds)) != len(kinds):
        out.append(f"config.eval.robustness_heldout_kinds={kinds} must name distinct kinds "
                   "(at least one)")
    for b in ev.length_buckets:
        _range(out, "eval.length_buckets[]", b, 1)
    if config.mesh.data != -1:
        _range(out, "mesh.data", config.mesh.data, 1)
    _range(out, "mesh.model", config.mesh.model, 1)

    if d.synthetic.generate:
        _enum(out, "data.synthetic.world", d.synthetic.get("world", "entity"), WORLDS)
        _enum(out, "data.synthetic.hard_negatives", d.synthetic.get("hard_negatives", "sibling"),
              HARD_NEGATIVES)
    if method is not None:  # its loss weights and its own config block (docs/method.md §3)
        out += method.config_problems(config)
        problem = pack_problem(method, d.get("pack_row_len", 0))
        if problem:
            out.append(problem)
    if check_files and not d.synthetic.generate:
        # The files this method's Inputs.load reads (an unknown method: DPR's, the default).
        out += (method.inputs.file_problems if method else dpr_inputs.file_problems)(config)
    return out


def validate(config: ml_collections.ConfigDict, *, check_files: bool = True) -> None:
    """Raises :class:`ConfigError` naming every problem of :func:`problems`; else returns."""
    found = problems(config, check_files=check_files)
    if found:
        raise ConfigError("bad config: " + "; ".join(found))
