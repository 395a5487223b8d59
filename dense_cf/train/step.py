"""Pure train / eval steps over a method's ``embed`` and ``loss`` (docs/ARCHITECTURE.md).

The loop jits them with explicit shardings and a donated state. In-batch negatives span the
GLOBAL batch (docs/method.md §1): the method's per-example :class:`~dense_cf.methods.Embeddings`,
computed where their examples live (sharded over ``data``), are constrained to be replicated
before the loss sees them. That constraint is the cross-device all-gather; its transpose (a
reduce-scatter) carries the gradients back to the devices that encoded each row.

``grad_cache_chunks > 1`` computes the same step with gradient caching (``gradcache.py``): the
loss still sees the whole gathered global batch, encoder activations live one chunk at a time.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from dense_cf.methods import Method
from dense_cf.parallel import cpu_rng, jit_cache
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.parallel.jit_cache import Identity, shardings_key
from dense_cf.train import gradcache
from dense_cf.train.state import TrainState

__all__ = ["batch_loss", "gather", "gathered_loss", "jit_eval_step", "jit_train_step", "make_eval_step",
           "make_train_step"]


def gather(tree: Any, mesh: Mesh | None) -> Any:
    """All-gather every leaf over the mesh (replicate); identity without a mesh."""
    if mesh is None:
        return tree
    return jax.tree.map(
        lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P())), tree)


def gathered_loss(method: Method, embs: Any, *, loss_hparams: dict[str, Any],
                  mesh: Mesh | None) -> tuple[jax.Array, dict]:
    """The method's loss over the global batch: gathers the embeddings (when the method asks,
    ``Method.gather``), then scores."""
    return method.loss(gather(embs, mesh) if method.gather else embs, **loss_hparams)


def batch_loss(method: Method, model, params, batch, *, loss_hparams: dict[str, Any],
               mesh: Mesh | None, deterministic: bool, rngs=None, grad_cache_chunks: int = 1):
    """``(loss, metrics)`` of a batch; ``grad_cache_chunks > 1`` encodes it chunk by chunk
    (forward memory of one chunk; differentiating it stores every chunk's residuals)."""
    if grad_cache_chunks > 1:
        embs = gradcache.chunked_embed(method.embed, model, params, batch,
                                       num_chunks=grad_cache_chunks, mesh=mesh,
                                       deterministic=deterministic, rngs=rngs)
    else:
        embs = method.embed(model, params, batch, deterministic=deterministic, rngs=rngs)
    return gathered_loss(method, embs, loss_hparams=loss_hparams, mesh=mesh)


def make_train_step(method: Method, model, tx: optax.GradientTransformation, *,
                    loss_hparams: dict[str, Any], mesh: Mesh | None,
                    schedule: optax.Schedule | None = None, dropout: bool = True,
                    grad_cache_chunks: int = 1) -> Callable:
    """``(state, batch, rng) -> (state, metrics)``; pure, to be jitted by the caller.

    ``grad_cache_chunks > 1`` (``train.grad_cache_chunks``) takes the gradient with GradCache
    (``gradcache.py``): the same loss over the gathered global batch, encoder activations of one
    chunk (global batch / chunks examples, a slice of every device's) at a time.
    """
    if grad_cache_chunks < 1:
        raise ValueError(f"train.grad_cache_chunks must be >= 1, got {grad_cache_chunks}")
    if grad_cache_chunks > 1 and not method.gather:
        raise ValueError(f"train.grad_cache_chunks={grad_cache_chunks}: GradCache caches the "
                         f"gradients of gathered embeddings; {method.name} has a per-example loss")

    def train_step(state: TrainState, batch, rng):
        rngs = {"dropout": jax.random.fold_in(rng, state.step)} if dropout else None

        if grad_cache_chunks > 1:
            (loss, metrics), grads = gradcache.grad_cache_value_and_grad(
                lambda embs: gathered_loss(method, embs, loss_hparams=loss_hparams, mesh=mesh),
                method.embed, model, state.params, batch, num_chunks=grad_cache_chunks,
                mesh=mesh, deterministic=not dropout, rngs=rngs)
        else:
            def loss_fn(params):
                return batch_loss(method, model, params, batch, loss_hparams=loss_hparams,
                                  mesh=mesh, deterministic=not dropout, rngs=rngs)

            (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = dict(metrics, grad_norm=optax.global_norm(grads))
        if schedule is not None:
            metrics["learning_rate"] = schedule(state.step)
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

    return train_step


def _hparams_key(loss_hparams: dict[str, Any]) -> tuple:
    return tuple(sorted(loss_hparams.items()))


def jit_train_step(method: Method, model, tx: optax.GradientTransformation, state: Any,
                   mesh: Mesh | None, *, loss_hparams: dict[str, Any],
                   schedule: optax.Schedule | None = None, dropout: bool = True,
                   grad_cache_chunks: int = 1) -> Callable:
    """:func:`make_train_step` jitted as the training loop runs it: the state donated and kept
    in its shardings, the batch split over ``data``, rng and metrics replicated. ``mesh=None``
    (one device, no shardings) jits it with the state donated only. The one place that jits a
    train step: the loop and every benchmark use it, so what a benchmark times is the loop's.

    Shared within the process (``parallel.jit_cache``) by method, model value, optimizer and
    schedule objects (``state.make_optimizer`` returns the same ones for the same values),
    mesh and state shardings: the runs of a study over seeds trace and compile it once."""
    # Dropout's bits as one fused kernel on the CPU (the same bits; DENSE_CF_THREEFRY=rolled
    # keeps jax's loop, parallel.cpu_rng), before any train step is traced.
    cpu_rng.unroll_threefry_on_cpu()
    state_sh = None if mesh is None else jax.tree.map(lambda x: x.sharding, state)
    key = (Identity(method), model, tx, schedule, mesh, _hparams_key(loss_hparams), bool(dropout),
           int(grad_cache_chunks), shardings_key(state_sh))

    def build() -> Callable:
        fn = make_train_step(method, model, tx, loss_hparams=loss_hparams, mesh=mesh,
                             schedule=schedule, dropout=dropout,
                             grad_cache_chunks=grad_cache_chunks)
        if mesh is None:
            return jax.jit(fn, donate_argnums=(0,))
        repl = mesh_lib.replicated(mesh)
        return jax.jit(fn, in_shardings=(state_sh, mesh_lib.batch_sharding(mesh), repl),
                       out_shardings=(state_sh, repl), donate_argnums=(0,))

    return jit_cache.cached("train_step", key, build)


def jit_eval_step(method: Method, model, params_shardings: Any, mesh: Mesh, *,
                  loss_hparams: dict[str, Any], grad_cache_chunks: int = 1) -> Callable:
    """:func:`make_eval_step` jitted for the loop's dev-set validation (params in their
    shardings, the batch split over ``data``, metrics replicated), shared like
    :func:`jit_train_step`."""
    key = (Identity(method), model, mesh, _hparams_key(loss_hparams), int(grad_cache_chunks),
           shardings_key(params_shardings))

    def build() -> Callable:
        fn = make_eval_step(method, model, loss_hparams=loss_hparams, mesh=mesh,
                            grad_cache_chunks=grad_cache_chunks)
        return jax.jit(fn, in_shardings=(params_shardings, mesh_lib.batch_sharding(mesh)),
                       out_shardings=mesh_lib.replicated(mesh))

    return jit_cache.cached("eval_step", key, build)


def make_eval_step(method: Method, model, *, loss_hparams: dict[str, Any], mesh: Mesh | None,
                   grad_cache_chunks: int = 1) -> Callable:
    """``(params, batch) -> metrics`` without dropout (dev-set validation); with
    ``grad_cache_chunks > 1`` the batch is encoded chunk by chunk like the train step's pass 1."""

    def eval_step(params, batch):
        _, metrics = batch_loss(method, model, params, batch, loss_hparams=loss_hparams,
                                mesh=mesh, deterministic=True,
                                grad_cache_chunks=grad_cache_chunks)
        return metrics

    return eval_step
