"""A run directory and the trained run in it: the one place that knows their layout.

Everything to the right of ``train`` (export, retrieval, evaluation, mining) loads runs through
this module and never imports the training loop. Layout (docs/ARCHITECTURE.md)::

    WORKDIR/config.json            the run's config (merged over the base config on load)
    WORKDIR/summary.json           final training metrics
    WORKDIR/metrics.jsonl, tb/     training metrics (JSONL, TensorBoard)
    WORKDIR/checkpoints/           orbax: train state + data-iterator state
    WORKDIR/tokenizer/             the run's tokenizer when its method adds tokens
    ROOT/export/step_N/            embeddings of a corpus (ROOT = WORKDIR for the run's corpus,
    ROOT/index/step_N_<kind>/      its index             WORKDIR/corpora/<name>-<hash> otherwise)
    ROOT/eval/step_N/              evaluation reports
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from dense_cf import methods
from dense_cf.configs.base import merge_over_base
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.files import file_key, write_json
from dense_cf.models import dual_encoder as de
from dense_cf.models.bert import axis_rules_for
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer, tokenizer_for_run
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train.checkpoint import Checkpointer, abstract_like
from dense_cf.train.state import TrainState, make_optimizer

__all__ = ["Run", "RunDir", "build_model", "init_state", "load_config", "load_run", "model_slug",
           "model_workdir", "pretrained_run"]


@dataclasses.dataclass(frozen=True)
class RunDir:
    """Paths of a run directory (module docstring); ``root`` holds one corpus's artifacts."""

    workdir: str
    root: str = ""

    def __post_init__(self) -> None:
        if not self.root:
            object.__setattr__(self, "root", self.workdir)

    @property
    def config(self) -> str:
        return os.path.join(self.workdir, "config.json")

    @property
    def summary(self) -> str:
        return os.path.join(self.workdir, "summary.json")

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.workdir, "checkpoints")

    def export(self, step: int) -> str:
        return os.path.join(self.root, "export", f"step_{step}")

    def index(self, step: int, kind: str) -> str:
        return os.path.join(self.root, "index", f"step_{step}_{kind}")

    def eval(self, step: int) -> str:
        return os.path.join(self.root, "eval", f"step_{step}")

    def mine(self) -> str:
        return os.path.join(self.workdir, "mine")

    def for_corpus(self, config, corpus_path: str, subdir: str = "corpora") -> RunDir:
        """Where artifacts of ``corpus_path`` live: the run's own corpus (config.data.corpus_file)
        uses the run directory; any other gets ``WORKDIR/<subdir>/<name>-<hash>/`` so the run's
        own export is never overwritten (reuse is content-keyed either way)."""
        try:
            own = os.path.abspath(resolve_data_file(config.data, "corpus_file"))
        except (ValueError, FileNotFoundError):
            own = None
        if own == os.path.abspath(corpus_path):
            return RunDir(self.workdir)
        return RunDir(self.workdir, os.path.join(self.workdir, subdir, file_tag(corpus_path)))


def file_tag(path: str) -> str:
    """``<stem>-<hash of path, size, mtime>``: a directory name for artifacts of one file."""
    h = hashlib.sha1(json.dumps(file_key(path)).encode())
    return f"{os.path.basename(path).split('.')[0]}-{h.hexdigest()[:10]}"


def load_config(workdir: str) -> ml_collections.ConfigDict:
    path = RunDir(workdir).config
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {workdir} is not a dense_cf run directory")
    with open(path) as f:
        return merge_over_base(json.load(f))


def build_model(config, load_pretrained: bool = True):
    """(model, HF params or None for random init / not loaded, tokenizer directory)."""
    method = methods.get(config.method)
    sources = de.tower_sources(config.model)
    if config.model.tokenizer:
        tok_dir = resolve_model_dir(config.model.tokenizer)
    elif sources:  # the towers of DPR checkpoints share BERT's vocabulary: the passage tower's
        tok_dir = sources["passage"].tokenizer_dir or sources["passage"].model_dir
    else:  # a random "tiny" model borrows MiniLM's uncased vocabulary
        tok_dir = resolve_model_dir("minilm")
    extra = method.added_tokens
    if sources and extra:  # a checkpoint exported by a run of this method has them already
        base = load_tokenizer(tok_dir)
        extra = tuple(t for t in extra if base.token_to_id(t) is None)
    model, sources = de.model_from_config(config, num_added_tokens=len(extra))
    hf_params = None
    if sources and load_pretrained:  # HF weights + rows for the method's added tokens
        hf_params = de.load_pretrained(model, sources, tok_dir, extra=extra,
                                       init=method.added_token_init(config), seed=config.seed)
    return model, hf_params, tok_dir


def run_tokenizer(config, tok_dir: str, workdir: str | None = None, *, save: bool = False):
    """The run's tokenizer: the base vocabulary plus its method's added tokens."""
    return tokenizer_for_run(methods.get(config.method).added_tokens, tok_dir, workdir, save=save)


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
    tok_dir: str | None = None   # the base tokenizer's files (the run's adds its method's tokens)

    @property
    def method(self) -> methods.Method:
        return methods.get(self.config.method)


def load_run(workdir: str, step: int | None = None, mesh=None) -> Run:
    """Restores the latest (or given) checkpoint's params into ``mesh`` (default: all devices)."""
    config = load_config(workdir)
    mesh = mesh or mesh_lib.make_mesh(-1, config.mesh.model)
    model, _, tok_dir = build_model(config, load_pretrained=False)
    rules = axis_rules_for(model.config, mesh.shape["model"], config.mesh.get("logical_axis_rules"))
    ckpt = Checkpointer(RunDir(workdir).checkpoints, async_save=False)
    if ckpt.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint under {workdir}/checkpoints: train the run first")
    # The optimizer only shapes the restore target (Adam moments mirror the params).
    tx, _ = make_optimizer(config.optim, total_steps=max(config.train.num_steps, 1))
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        template = init_state(config, model, None, tx, mesh, rules, jax.random.key(0))
        state, _, restored_step = ckpt.restore(abstract_like(template), step)
    ckpt.close()
    return Run(config=config, model=model, params=state.params,
               tokenizer=run_tokenizer(config, tok_dir, workdir),
               step=restored_step, mesh=mesh, rules=rules, tok_dir=tok_dir)


def pretrained_run(config: ml_collections.ConfigDict, mesh=None) -> Run:
    """An untrained encoder (``config.model``: any checkpoint :mod:`dense_cf.models.checkpoints`
    reads) as a :class:`Run` at step 0, so the evaluations take it like a trained run."""
    mesh = mesh or mesh_lib.make_mesh(-1, config.mesh.model)
    model, hf_params, tok_dir = build_model(config)
    if hf_params is None:
        raise ValueError("model.name_or_path='tiny' is a random model: evaluate a checkpoint")
    rules = axis_rules_for(model.config, mesh.shape["model"], config.mesh.get("logical_axis_rules"))
    lq, lp = config.data.max_q_len, config.data.max_p_len
    abstract = jax.eval_shape(lambda: model.init(
        jax.random.key(0), jnp.ones((1, lq), jnp.int32), jnp.ones((1, lq), jnp.int32),
        jnp.ones((1, lp), jnp.int32), jnp.ones((1, lp), jnp.int32))["params"])
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        shardings = mesh_lib.tree_shardings(abstract, mesh, rules)
        params = jax.device_put(de.pretrained_params(model, hf_params, boxed=False), shardings)
    return Run(config=config, model=model, params=params, tokenizer=run_tokenizer(config, tok_dir),
               step=0, mesh=mesh, rules=rules, tok_dir=tok_dir)


def model_slug(model: ml_collections.ConfigDict) -> str:
    """A directory name for an evaluated checkpoint: the model's (or towers') base names, the
    pooling, and a hash of the full model spec (two checkpoints with one name stay apart)."""
    def name(spec: str) -> str:
        return os.path.basename(os.path.normpath(spec)) or "model"

    if model.question_path or model.passage_path:
        base = (f"q-{name(model.question_path or model.name_or_path)}"
                f"_p-{name(model.passage_path or model.name_or_path)}")
    else:
        base = name(model.name_or_path)
    spec = json.dumps({k: model.get(k) for k in ("name_or_path", "question_path", "passage_path",
                                                 "pooling", "normalize", "shared", "tokenizer")},
                      sort_keys=True)
    pool = model.pooling + ("-norm" if model.normalize and model.pooling != "auto" else "")
    return f"{base}-{pool}-{hashlib.sha1(spec.encode()).hexdigest()[:8]}"


def model_workdir(config: ml_collections.ConfigDict, out_root: str) -> str:
    """``out_root/<model_slug>``, holding the evaluated model's ``config.json`` (as a trained
    run's directory does), so exports, indexes and reports land beside it and are reused."""
    workdir = os.path.join(out_root, model_slug(config.model))
    os.makedirs(workdir, exist_ok=True)
    write_json(RunDir(workdir).config, config.to_dict())
    return workdir
