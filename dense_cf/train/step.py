"""Pure train / eval steps. The loop jits them with explicit shardings and a donated state.

In-batch negatives span the GLOBAL batch (SPEC §1): passage embeddings, computed where their
examples live (sharded over ``data``), are constrained to be replicated before scoring. That
constraint is the cross-device all-gather; its transpose (a reduce-scatter) carries the
gradients back to the devices that encoded each passage.

``grad_cache_chunks > 1`` computes the same step with gradient caching (``gradcache.py``): the
loss still sees the whole gathered global batch, encoder activations live one chunk at a time.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from dense_cf.losses import contrastive_loss
from dense_cf.train import gradcache
from dense_cf.train.state import TrainState


def embed_batch(model, params, batch: dict[str, jax.Array], *, deterministic: bool,
                rngs: dict[str, jax.Array] | None = None):
    """Question embeddings [B, D] and passage embeddings (pos [B,D], hard [B,h,D], cf [B,D]|None).

    Passages of an example are stacked as [B, 1 + h (+1), L] and flattened, so each device encodes
    the passages of its own examples in one encoder call.
    """
    q = model.apply({"params": params}, batch["q_ids"], batch["q_mask"], deterministic=deterministic,
                    rngs=rngs, method=model.encode_question)
    b, h = batch["hard_ids"].shape[:2]
    has_cf = "cf_ids" in batch
    parts_ids = [batch["pos_ids"][:, None], batch["hard_ids"]]
    parts_mask = [batch["pos_mask"][:, None], batch["hard_mask"]]
    if has_cf:
        parts_ids.append(batch["cf_ids"][:, None])
        parts_mask.append(batch["cf_mask"][:, None])
    ids = jnp.concatenate(parts_ids, axis=1)
    mask = jnp.concatenate(parts_mask, axis=1)
    n = ids.shape[1]
    p = model.apply({"params": params}, ids.reshape(b * n, -1), mask.reshape(b * n, -1),
                    deterministic=deterministic, rngs=rngs, method=model.encode_passage)
    p = p.reshape(b, n, -1)
    return q, p[:, 0], p[:, 1:1 + h], (p[:, 1 + h] if has_cf else None)


def _gather(x, mesh: Mesh | None):
    """All-gather over the mesh (replicate); identity without a mesh."""
    if x is None or mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P()))


# ``embed_fn(model, params, batch, *, deterministic, rngs) -> (q [B,D], pos [B,D], hard [B,h,D],
# cf [B,D] | None)``: every output row belongs to one example of the (host/device-local) batch, so
# a method with another input format (DCSR's sentence vectors) plugs in its own embedding
# function and reuses the loss, the gather and the train step unchanged.
EmbedFn = Callable[..., tuple]


def embeddings_loss(embs: tuple, batch, *, loss_kwargs: dict[str, Any], mesh: Mesh | None):
    """The contrastive loss (SPEC §3) of per-example embeddings ``(q, pos, hard, cf|None)``:
    gathers them over the mesh (global in-batch negatives, SPEC §1), then scores."""
    q, pos, hard, cf = (_gather(x, mesh) for x in embs)
    hard_valid = _gather(batch["hard_valid"], mesh)
    cf_valid = _gather(batch["cf_valid"], mesh) if cf is not None else None
    return contrastive_loss(q, pos, hard, hard_valid, cf, cf_valid, **loss_kwargs)


def batch_loss(model, params, batch, *, loss_kwargs: dict[str, Any], mesh: Mesh | None,
               deterministic: bool, rngs=None, embed_fn: EmbedFn = embed_batch,
               grad_cache_chunks: int = 1):
    """``(loss, metrics)`` of a batch; ``grad_cache_chunks > 1`` encodes it chunk by chunk
    (forward memory of one chunk; differentiating it stores every chunk's residuals)."""
    if grad_cache_chunks > 1:
        embs = gradcache.chunked_embed(embed_fn, model, params, batch,
                                       num_chunks=grad_cache_chunks, mesh=mesh,
                                       deterministic=deterministic, rngs=rngs)
    else:
        embs = embed_fn(model, params, batch, deterministic=deterministic, rngs=rngs)
    return embeddings_loss(embs, batch, loss_kwargs=loss_kwargs, mesh=mesh)


def make_train_step(model, tx: optax.GradientTransformation, *, loss_kwargs: dict[str, Any],
                    mesh: Mesh | None, schedule: optax.Schedule | None = None,
                    dropout: bool = True, embed_fn: EmbedFn = embed_batch,
                    grad_cache_chunks: int = 1) -> Callable:
    """``(state, batch, rng) -> (state, metrics)``; pure, to be jitted by the caller.

    ``grad_cache_chunks > 1`` (``train.grad_cache_chunks``) takes the gradient with GradCache
    (``gradcache.py``): the same loss over the gathered global batch, encoder activations of one
    chunk (global batch / chunks examples, a slice of every device's) at a time.
    """
    if grad_cache_chunks < 1:
        raise ValueError(f"train.grad_cache_chunks must be >= 1, got {grad_cache_chunks}")

    def train_step(state: TrainState, batch, rng):
        rngs = {"dropout": jax.random.fold_in(rng, state.step)} if dropout else None

        if grad_cache_chunks > 1:
            (loss, metrics), grads = gradcache.grad_cache_value_and_grad(
                lambda embs: embeddings_loss(embs, batch, loss_kwargs=loss_kwargs, mesh=mesh),
                embed_fn, model, state.params, batch, num_chunks=grad_cache_chunks, mesh=mesh,
                deterministic=not dropout, rngs=rngs)
        else:
            def loss_fn(params):
                return batch_loss(model, params, batch, loss_kwargs=loss_kwargs, mesh=mesh,
                                  deterministic=not dropout, rngs=rngs, embed_fn=embed_fn)

            (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = dict(metrics, grad_norm=optax.global_norm(grads))
        if schedule is not None:
            metrics["learning_rate"] = schedule(state.step)
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

    return train_step


def make_eval_step(model, *, loss_kwargs: dict[str, Any], mesh: Mesh | None,
                   embed_fn: EmbedFn = embed_batch, grad_cache_chunks: int = 1) -> Callable:
    """``(params, batch) -> metrics`` without dropout (dev-set validation); with
    ``grad_cache_chunks > 1`` the batch is encoded chunk by chunk like the train step's pass 1."""

    def eval_step(params, batch):
        _, metrics = batch_loss(model, params, batch, loss_kwargs=loss_kwargs, mesh=mesh,
                                deterministic=True, embed_fn=embed_fn,
                                grad_cache_chunks=grad_cache_chunks)
        return metrics

    return eval_step
