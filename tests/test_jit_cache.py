"""Jitted functions shared by value within a process (dense_cf/parallel/jit_cache.py,
docs/ARCHITECTURE.md "Compiles"): equal keys share, the context splits, and a train step shared
by two runs gives each the parameters it gives alone."""

from __future__ import annotations

import jax
import ml_collections
import numpy as np
from flax import linen as nn
from helpers import tiny_tower_config, write_tower_data

from dense_cf.parallel import jit_cache
from dense_cf.train import loop
from dense_cf.train.state import make_optimizer


def _optim(**kw) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict(dict(learning_rate=1e-3, warmup_steps=2, decay="linear",
                                       grad_clip=2.0, b1=0.9, b2=0.999, eps=1e-8,
                                       weight_decay=0.0))
    c.update(kw)
    return c


def test_equal_keys_share_and_the_context_splits():
    built = []

    def build():
        built.append(object())
        return built[-1]

    a = jit_cache.cached("t", ("k",), build)
    assert jit_cache.cached("t", ("k",), build) is a and len(built) == 1
    assert jit_cache.cached("other kind", ("k",), build) is not a
    with nn.logical_axis_rules([("mlp", "model")]):      # the trace reads the rules
        assert jit_cache.cached("t", ("k",), build) is not a
    flag = jax.config.read("jax_disable_most_optimizations")
    try:                                                   # XLA's switch is read at compile
        jax.config.update("jax_disable_most_optimizations", not flag)
        assert jit_cache.cached("t", ("k",), build) is not a
    finally:
        jax.config.update("jax_disable_most_optimizations", flag)
    assert jit_cache.cached("t", ("k",), build) is a and len(built) == 4


def test_identity_keys_compare_by_object():
    d = {"unhashable": [1]}
    assert jit_cache.Identity(d) == jit_cache.Identity(d)
    assert jit_cache.Identity(d) != jit_cache.Identity(dict(d))
    assert hash(jit_cache.Identity(d)) == hash(jit_cache.Identity(d))


def test_make_optimizer_gives_one_object_per_setting():
    tx, sched = make_optimizer(_optim(), 10)
    assert make_optimizer(_optim(), 10) == (tx, sched)
    assert make_optimizer(_optim(), 11)[0] is not tx             # the schedule's length
    assert make_optimizer(_optim(learning_rate=2e-3), 10)[0] is not tx
    assert make_optimizer(_optim(weight_decay=0.01), 10)[0] is not tx


def test_runs_sharing_a_train_step_train_as_they_would_alone(tmp_path):
    """Seed 0, seed 1, then seed 0 again in this process: the later runs reuse the first's
    jitted step (donated state and all), and the repeat ends bit-identical to the first."""
    write_tower_data(str(tmp_path))
    over = {"train.eval_every": 0, "train.checkpoint_every": 100}
    _, a = loop.train(tiny_tower_config(tmp_path, seed=0, **over), str(tmp_path / "a"))
    entries = len(jit_cache._CACHE)
    _, b = loop.train(tiny_tower_config(tmp_path, seed=1, **over), str(tmp_path / "b"))
    _, a2 = loop.train(tiny_tower_config(tmp_path, seed=0, **over), str(tmp_path / "a2"))
    assert len(jit_cache._CACHE) == entries                  # nothing new was built
    leaves = [jax.tree.leaves(jax.device_get(r.params)) for r in (a, b, a2)]
    for x, y in zip(leaves[0], leaves[2]):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(leaves[0], leaves[1]))
