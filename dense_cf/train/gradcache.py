"""Gradient caching (GradCache, Gao et al. 2021): large contrastive batches in small memory.

The contrastive loss (docs/method.md §3) couples every example of the GLOBAL batch through in-batch
negatives (docs/method.md §1), so plain gradient accumulation would change the loss. GradCache splits the
step in three instead, for any ``embed_fn`` of ``step.py``:

1. **Pass 1** (no activations kept): embeddings of the whole batch, computed chunk by chunk in a
   ``lax.scan``; nothing is differentiated, so each chunk's activations die with the chunk.
2. **Loss**: the loss and its gradient w.r.t. the embeddings, once, on the full global batch (the
   caller gathers embeddings across ``data`` inside ``loss_of_embeddings``, as without GradCache).
3. **Pass 2**: each chunk is re-encoded under ``jax.vjp`` and the cached embedding gradients are
   pulled back to the parameters, accumulated in a second ``lax.scan``.

Peak activation memory is one chunk's instead of the batch's, for one extra forward pass (~1/3
more compute than the plain step). The gradients equal the plain step's up to float summation
order, see ``tests/test_gradcache.py``.

Chunks are over EXAMPLES and respect the batch sharding: a batch leaf ``[B, ...]`` sharded over
the ``data`` axis (d shards) is viewed as ``[d, C, m, ...]`` (m = B / (d·C)) and chunk c is
``[:, c]``, i.e. the c-th slice of EVERY device's local examples. Each device therefore encodes m
of its own examples per chunk (no data movement, all devices busy), and an example's embedding
lands back in its original row.

Dropout: chunk c draws its dropout masks from ``fold_in(key, c)`` (``key`` itself when C = 1, so
one chunk reproduces the plain step exactly), and pass 2 replays the same key, so the two passes
see the same masks and the cached gradients are exact. Masks are drawn per encoder call, so with
dropout on and C > 1 the step is an equally valid but differently-sampled stochastic step than
the unchunked one (as in the original GradCache, which replays the RNG state per chunk).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["chunk_rngs", "chunked_embed", "grad_cache_value_and_grad", "merge_chunks",
           "split_chunks"]


def _data_shards(mesh: Mesh | None) -> int:
    return 1 if mesh is None else int(mesh.shape["data"])


def _constrain(x: jax.Array, mesh: Mesh | None, spec: P) -> jax.Array:
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def _check(tree: Any, num_chunks: int, mesh: Mesh | None) -> tuple[int, int, int]:
    """(B, d, m) of a tree of [B, ...] leaves; a clear error when B does not split evenly."""
    if num_chunks < 1:
        raise ValueError(f"train.grad_cache_chunks must be >= 1, got {num_chunks}")
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError("GradCache: empty batch")
    sizes = {x.shape[0] if x.ndim else None for x in leaves}
    if len(sizes) != 1 or None in sizes:
        shapes = jax.tree.map(lambda x: tuple(x.shape), tree)
        raise ValueError(f"GradCache chunks over examples: every batch field must have the same "
                         f"leading (example) dimension, got {shapes}")
    b = sizes.pop()
    d = _data_shards(mesh)
    if b % (d * num_chunks):
        raise ValueError(
            f"GradCache: global batch {b} is not divisible by data shards ({d}) x "
            f"train.grad_cache_chunks ({num_chunks}); each chunk takes the same number of "
            f"examples from every device")
    return b, d, b // (d * num_chunks)


def split_chunks(tree: Any, num_chunks: int, mesh: Mesh | None) -> Any:
    """``[B, ...]`` leaves → ``[C, B/C, ...]``; chunk c = the c-th slice of every data shard's rows.

    Row r of chunk c is global example ``(r // m)·(B/d) + c·m + r % m`` (d data shards,
    m = B/(d·C)); chunk rows stay sharded over ``data`` with each device holding its own examples.
    """
    _, d, m = _check(tree, num_chunks, mesh)

    def split(x):
        rest = x.shape[1:]
        none = (None,) * len(rest)
        y = _constrain(x.reshape(d, num_chunks, m, *rest), mesh, P("data", None, None, *none))
        y = _constrain(jnp.swapaxes(y, 0, 1), mesh, P(None, "data", None, *none))
        return _constrain(y.reshape(num_chunks, d * m, *rest), mesh, P(None, "data", *none))

    return jax.tree.map(split, tree)


def merge_chunks(tree: Any, mesh: Mesh | None) -> Any:
    """Inverse of :func:`split_chunks`: ``[C, B/C, ...]`` → ``[B, ...]`` in the original order."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return tree
    num_chunks, rows = leaves[0].shape[:2]
    d = _data_shards(mesh)
    m = rows // d

    def merge(y):
        rest = y.shape[2:]
        none = (None,) * len(rest)
        y = _constrain(y.reshape(num_chunks, d, m, *rest), mesh, P(None, "data", None, *none))
        y = _constrain(jnp.swapaxes(y, 0, 1), mesh, P("data", None, None, *none))
        return _constrain(y.reshape(num_chunks * d * m, *rest), mesh, P("data", *none))

    return jax.tree.map(merge, tree)


def chunk_rngs(rngs: dict[str, jax.Array] | None, chunk: jax.Array | int,
               num_chunks: int) -> dict[str, jax.Array] | None:
    """The rngs of chunk ``chunk``: the step's own when there is one chunk, else folded in."""
    if rngs is None or num_chunks == 1:
        return rngs
    return {k: jax.random.fold_in(v, chunk) for k, v in rngs.items()}


def _chunk_loop(fn: Callable, carry: Any, xs: Any, num_chunks: int):
    """``lax.scan`` over chunks (one chunk's activations live at a time)."""
    return jax.lax.scan(fn, carry, (jnp.arange(num_chunks), xs))


def chunked_embed(embed_fn: Callable, model, params, batch: dict[str, jax.Array], *,
                  num_chunks: int, mesh: Mesh | None, deterministic: bool,
                  rngs: dict[str, jax.Array] | None = None) -> tuple:
    """``embed_fn``'s outputs for the whole batch, computed ``num_chunks`` chunks at a time.

    Forward-only use keeps one chunk's activations (pass 1, chunked evaluation). It is also
    differentiable, then storing every chunk's residuals: the reference that GradCache's
    gradients equal exactly, dropout masks included (tests).
    """
    chunks = split_chunks(batch, num_chunks, mesh)

    def body(carry, xs):
        c, chunk = xs
        out = embed_fn(model, params, chunk, deterministic=deterministic,
                       rngs=chunk_rngs(rngs, c, num_chunks))
        return carry, out

    _, ys = _chunk_loop(body, None, chunks, num_chunks)
    return merge_chunks(ys, mesh)


def grad_cache_value_and_grad(
    loss_of_embeddings: Callable[[Any], tuple[jax.Array, Any]],
    embed_fn: Callable, model, params, batch: dict[str, jax.Array], *, num_chunks: int,
    mesh: Mesh | None, deterministic: bool, rngs: dict[str, jax.Array] | None = None,
) -> tuple[tuple[jax.Array, Any], Any]:
    """``((loss, aux), grads)`` like ``jax.value_and_grad(has_aux=True)`` of
    ``loss_of_embeddings(embed_fn(params, batch))`` w.r.t. ``params``, in one chunk's memory.

    ``loss_of_embeddings(embs) -> (loss, aux)`` takes the full batch's embeddings (the pytree
    ``embed_fn`` returns, rows sharded over ``data``) and does the cross-device gather itself.
    Gradients flow through the floating leaves; boolean masks in the pytree pass through.
    """
    # Pass 1: no vjp is taken here, so XLA frees each chunk's activations inside the loop.
    frozen = jax.lax.stop_gradient(params)
    embs = chunked_embed(embed_fn, model, frozen, batch, num_chunks=num_chunks, mesh=mesh,
                         deterministic=deterministic, rngs=rngs)
    # Only floating leaves (the vectors) are differentiated; masks ride along unchanged.
    leaves, treedef = jax.tree.flatten(embs)
    fidx = _float_indices(leaves)

    def loss_of_floats(floats):
        full = list(leaves)
        for i, v in zip(fidx, floats):
            full[i] = v
        return loss_of_embeddings(jax.tree.unflatten(treedef, full))

    (loss, aux), emb_grads = jax.value_and_grad(loss_of_floats, has_aux=True)(
        [leaves[i] for i in fidx])

    # Pass 2: re-encode each chunk with the same rngs and pull the cached gradients back.
    chunks = split_chunks(batch, num_chunks, mesh)
    grad_chunks = split_chunks(emb_grads, num_chunks, mesh)

    def body(acc, xs):
        c, (chunk, g) = xs

        def encode(p):
            out = embed_fn(model, p, chunk, deterministic=deterministic,
                           rngs=chunk_rngs(rngs, c, num_chunks))
            out_leaves = jax.tree.leaves(out)
            return [out_leaves[i] for i in fidx]

        out, pullback = jax.vjp(encode, params)
        g = jax.tree.map(lambda o, t: t.astype(o.dtype), out, g)
        (gp,) = pullback(g)
        return jax.tree.map(jnp.add, acc, gp), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    grads, _ = _chunk_loop(body, zeros, (chunks, grad_chunks), num_chunks)
    return (loss, aux), grads


def _float_indices(leaves: list) -> list[int]:
    return [i for i, x in enumerate(leaves) if jnp.issubdtype(x.dtype, jnp.floating)]
