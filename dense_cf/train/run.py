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
    ROOT/reader_data/step_N/SPLIT/ a retriever's results on SPLIT questions (reader training data)
    ROOT/e2e/step_N/               a reader's end-to-end QA reports
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import linen as nn

from dense_cf import methods
from dense_cf.configs.base import merge_over_base
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.files import file_key, write_json
from dense_cf.models.tokenizer import tokenizer_for_run
from dense_cf.parallel import jit_cache
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train.checkpoint import Checkpointer
from dense_cf.train.state import TrainState

__all__ = ["Run", "RunDir", "axis_rules", "build_model", "init_state", "load_config", "load_run",
           "method_of", "model_slug", "model_workdir", "pretrained_run"]


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

    def e2e(self, step: int) -> str:
        """End-to-end QA reports of a reader run (``python -m dense_cf.eval.e2e``)."""
        return os.path.join(self.root, "e2e", f"step_{step}")

    def reader_data(self, step: int, split: str) -> str:
        """A retriever's results on the ``split`` questions, the reader's training input."""
        return os.path.join(self.root, "reader_data", f"step_{step}", split)

    def corpus_store(self) -> str:
        """The corpus's passage store for retrieval evaluation (``retrieval.corpus.open_corpus``)."""
        return os.path.join(self.root, "corpus_store")

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


def method_of(config) -> methods.Method:
    """The :class:`~dense_cf.methods.Method` that ``config.method`` names: the one place the
    training layer turns the name into the object. A training run resolves it once (``Run``
    carries it); the helpers below take it as ``method=`` and look it up only when not given."""
    return methods.get(config.method)


def build_model(config, load_pretrained: bool = True, *, method: methods.Method | None = None):
    """(model, pretrained params or None for random init / not loaded, tokenizer directory), as
    the method's :class:`~dense_cf.methods.ModelSpec` builds them."""
    method = method or method_of(config)
    return method.model.build(method, config, load_pretrained)


def axis_rules(config, model, mesh, *, method: methods.Method | None = None):
    """The run's logical axis rules on ``mesh`` (the method's model decides what divides)."""
    return (method or method_of(config)).model.axis_rules(model, mesh.shape["model"],
                                                          config.mesh.get("logical_axis_rules"))


def run_tokenizer(config, tok_dir: str, workdir: str | None = None, *, save: bool = False,
                  method: methods.Method | None = None):
    """The run's tokenizer: the base vocabulary plus its method's added tokens."""
    return tokenizer_for_run((method or method_of(config)).added_tokens, tok_dir, workdir,
                             save=save)


def _dummies_key(dummies: tuple) -> tuple:
    return tuple((d.shape, str(d.dtype), np.asarray(d).tobytes()) for d in dummies)


def param_init_fn(config, model, *, method: methods.Method | None = None
                  ) -> Callable[[jax.Array], Any]:
    """``rng -> params`` (boxed with their logical axes) of ``model`` on its method's dummy
    inputs. One function object per model value and dummies, so that what is jitted over it
    (the sharded init, its ``eval_shape``) is shared by the runs of a process
    (``parallel.jit_cache``)."""
    dummies = (method or method_of(config)).model.dummy_inputs(config)

    def build() -> Callable[[jax.Array], Any]:
        def init_fn(r):
            return model.init(r, *dummies)["params"]
        return init_fn

    return jit_cache.cached("param_init", (model, _dummies_key(dummies)), build)


@functools.lru_cache(maxsize=32)
def _abstract(init_fn: Callable) -> Any:
    return jax.eval_shape(init_fn, jax.random.key(0))


def init_state(config, model, hf_params, tx, mesh, rules, rng, *,
               method: methods.Method | None = None) -> TrainState:
    """Params initialised (or loaded) directly into their shardings; optimizer state follows."""
    method = method or method_of(config)
    spec = method.model
    init_fn = param_init_fn(config, model, method=method)
    abstract = _abstract(init_fn)
    shardings = mesh_lib.tree_shardings(abstract, mesh, rules)
    if hf_params is not None:
        placed = spec.place_pretrained(model, hf_params)
        params = jax.device_put(placed, shardings)
    else:
        params = mesh_lib.init_sharded(_unboxed(init_fn), rng, shardings)
    opt_state = _jit_opt_init(tx)(params)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_state)


@functools.lru_cache(maxsize=32)
def _unboxed(init_fn: Callable) -> Callable:
    return lambda r: nn.meta.unbox(init_fn(r))


def _jit_opt_init(tx) -> Callable:
    # Through jit_cache like every shared jit: its key carries the compile context too.
    return jit_cache.cached("opt_init", (tx,), lambda: jax.jit(tx.init))


@dataclasses.dataclass
class Run:
    """A trained run loaded for inference (export, evaluation)."""

    config: ml_collections.ConfigDict
    model: Any   # the method's network (a DualEncoder for retrievers)
    params: Any
    tokenizer: Any
    step: int
    mesh: Any
    rules: Any
    tok_dir: str | None = None   # the base tokenizer's files (the run's adds its method's tokens)
    method: methods.Method | None = None  # config.method's object (resolved here when not given)

    def __post_init__(self) -> None:
        if self.method is None:
            self.method = method_of(self.config)


def abstract_params(config, model, mesh, rules, *, method: methods.Method | None = None) -> Any:
    """The model's parameters as ShapeDtypeStructs carrying their shardings on ``mesh``, from
    ``jax.eval_shape``: nothing is initialised or allocated (a restore target)."""
    boxed = _abstract(param_init_fn(config, model, method=method))
    shardings = mesh_lib.tree_shardings(boxed, mesh, rules)
    # The values under the logical-axis boxes (nn.meta.unbox would apply their sharding
    # constraints, which needs arrays).
    shapes = jax.tree.map(lambda x: x.unbox(apply_constraint=False) if isinstance(x, nn.Partitioned) else x,
                          boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        shapes, shardings)


def load_run(workdir: str, step: int | None = None, mesh=None) -> Run:
    """Restores the latest (or given) checkpoint's params into ``mesh`` (default: all devices).

    Evaluation needs the params alone: their shapes come from ``jax.eval_shape`` and only
    ``state.params`` is read from the checkpoint (no optimizer, no random init, no Adam
    moments; docs/ARCHITECTURE.md, "Stages talk through files")."""
    config = load_config(workdir)
    method = method_of(config)
    mesh = mesh or mesh_lib.make_mesh(-1, config.mesh.model)
    model, _, tok_dir = build_model(config, load_pretrained=False, method=method)
    rules = axis_rules(config, model, mesh, method=method)
    ckpt = Checkpointer(RunDir(workdir).checkpoints, async_save=False)
    if ckpt.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint under {workdir}/checkpoints: train the run first")
    try:
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            params, restored_step = ckpt.restore_params(
                abstract_params(config, model, mesh, rules, method=method), step)
    finally:
        ckpt.close()
    return Run(config=config, model=model, params=params,
               tokenizer=run_tokenizer(config, tok_dir, workdir, method=method),
               step=restored_step, mesh=mesh, rules=rules, tok_dir=tok_dir, method=method)


def pretrained_run(config: ml_collections.ConfigDict, mesh=None) -> Run:
    """An untrained encoder (``config.model``: any checkpoint :mod:`dense_cf.models.checkpoints`
    reads) as a :class:`Run` at step 0, so the evaluations take it like a trained run."""
    method = method_of(config)
    mesh = mesh or mesh_lib.make_mesh(-1, config.mesh.model)
    model, hf_params, tok_dir = build_model(config, method=method)
    if hf_params is None:
        raise ValueError("model.name_or_path='tiny' is a random model: evaluate a checkpoint")
    rules = axis_rules(config, model, mesh, method=method)
    spec = method.model
    abstract = _abstract(param_init_fn(config, model, method=method))
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        shardings = mesh_lib.tree_shardings(abstract, mesh, rules)
        params = jax.device_put(spec.place_pretrained(model, hf_params), shardings)
    return Run(config=config, model=model, params=params,
               tokenizer=run_tokenizer(config, tok_dir, method=method),
               step=0, mesh=mesh, rules=rules, tok_dir=tok_dir, method=method)


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
