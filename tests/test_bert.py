"""Flax BERT encoder: shapes, partitioning metadata, bf16, remat, padding invariance, sharding."""

import os
import subprocess
import sys
import textwrap

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import child_pythonpath

from dense_cf.models.bert import DEFAULT_LOGICAL_AXIS_RULES, BertConfig, BertEncoder, axis_rules_for

CFG = BertConfig.tiny(vocab_size=64, hidden=32, layers=2, heads=2)
KNOWN_AXES = {"vocab", "embed", "mlp", "heads", "kv", None}


def _batch(b=3, length=7, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, CFG.vocab_size, size=(b, length)).astype(np.int32)
    lens = np.array([length, length - 2, 2][:b])
    mask = (np.arange(length)[None] < lens[:, None]).astype(np.int32)
    return jnp.asarray(ids * mask), jnp.asarray(mask)


def _apply(cfg):
    # jit: eager op-by-op dispatch of a whole BERT is slower than compiling the tiny model.
    return jax.jit(BertEncoder(cfg).apply, static_argnames="deterministic")


@pytest.fixture(scope="module")
def variables():
    ids, mask = _batch()
    return jax.jit(BertEncoder(CFG).init)(jax.random.key(0), ids, mask)


def test_init_apply_shapes(variables):
    ids, mask = _batch()
    out = _apply(CFG)(variables, ids, mask)
    assert out.shape == (3, 7, 32) and out.dtype == jnp.float32
    p = nn.unbox(variables)["params"]
    assert set(p) == {"embeddings", "layer_0", "layer_1"}
    assert p["layer_0"]["attention"]["query"]["kernel"].shape == (32, 2, 16)
    assert p["layer_0"]["attention"]["output"]["kernel"].shape == (2, 16, 32)
    assert p["layer_1"]["intermediate"]["kernel"].shape == (32, 128)
    assert p["embeddings"]["word_embeddings"]["embedding"].shape == (64, 32)


def test_every_param_has_logical_axes(variables):
    leaves = jax.tree_util.tree_leaves_with_path(
        variables["params"], is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned)
    )
    assert len(leaves) == 5 + 2 * 16
    for path, leaf in leaves:
        assert isinstance(leaf, nn.LogicallyPartitioned), path
        assert len(leaf.names) == leaf.value.ndim, path
        assert set(leaf.names) <= KNOWN_AXES, (path, leaf.names)
        if path[-1].key in ("scale",) or "norm" in str(path).lower():
            assert leaf.names == ("embed",), path
    specs = nn.get_partition_spec(variables)["params"]
    assert tuple(specs["layer_0"]["intermediate"]["kernel"]) == ("embed", "mlp")
    assert tuple(specs["embeddings"]["word_embeddings"]["embedding"]) == ("vocab", "embed")


def test_bfloat16_compute_is_finite(variables):
    ids, mask = _batch()
    cfg = CFG.replace(dtype=jnp.bfloat16)
    assert cfg.dtype == "bfloat16" and cfg.param_dtype == "float32"
    out = _apply(cfg)(variables, ids, mask)
    assert out.dtype == jnp.bfloat16
    assert np.isfinite(np.asarray(out, np.float32)).all()
    ref = _apply(CFG)(variables, ids, mask)
    assert np.abs(np.asarray(out, np.float32) - np.asarray(ref)).max() < 0.1


def test_remat_same_output_and_grads(variables):
    ids, mask = _batch()

    def loss(params, cfg, deterministic):
        out = BertEncoder(cfg).apply(
            {"params": params}, ids, mask, deterministic=deterministic,
            rngs={"dropout": jax.random.key(1, impl="rbg")},  # threefry dropout compiles ~4x slower on CPU
        )
        return jnp.sum(out[:, 0] ** 2), out

    cfg = CFG.replace(num_layers=1)  # remat wraps each layer the same way; one keeps compiles short
    params = dict(variables["params"])
    del params["layer_1"]
    grad = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=(1, 2))
    for deterministic in (True, False):
        (l0, o0), g0 = grad(params, cfg, deterministic)
        (l1, o1), g1 = grad(params, cfg.replace(remat=True), deterministic)
        np.testing.assert_allclose(o0, o1, atol=1e-5)
        np.testing.assert_allclose(l0, l1, rtol=1e-5)
        # Same maths, different fusion/order under remat: float32 round-off only.
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4), nn.unbox(g0), nn.unbox(g1))


def test_remat_param_tree_unchanged(variables):
    ids, mask = _batch()
    v = jax.eval_shape(BertEncoder(CFG.replace(remat=True)).init, jax.random.key(0), ids, mask)
    assert jax.tree.structure(nn.unbox(v)) == jax.tree.structure(nn.unbox(variables))


def test_padding_invariance(variables):
    ids, mask = _batch()
    apply = _apply(CFG)
    out = apply(variables, ids, mask)
    ids2 = jnp.pad(ids, ((0, 0), (0, 5)))
    mask2 = jnp.pad(mask, ((0, 0), (0, 5)))
    out2 = apply(variables, ids2, mask2)
    np.testing.assert_allclose(out2[:, 0], out[:, 0], atol=1e-5)
    valid = np.asarray(mask, bool)
    np.testing.assert_allclose(np.asarray(out2[:, :7])[valid], np.asarray(out)[valid], atol=1e-5)


def test_all_padding_row_is_finite(variables):
    ids, mask = _batch()
    out = _apply(CFG)(variables, ids, jnp.zeros_like(mask))
    assert np.isfinite(np.asarray(out)).all()


def test_too_long_input_raises():
    ids = jnp.ones((1, CFG.max_position_embeddings + 1), jnp.int32)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        jax.eval_shape(BertEncoder(CFG).init, jax.random.key(0), ids, ids)


def test_config_hashable_and_hf_json(tmp_path):
    assert hash(CFG) == hash(BertConfig.tiny(vocab_size=64, hidden=32, layers=2, heads=2))
    (tmp_path / "config.json").write_text(
        '{"vocab_size": 99, "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,'
        ' "intermediate_size": 96, "hidden_act": "gelu", "hidden_dropout_prob": 0.2}'
    )
    c = BertConfig.from_hf_json(str(tmp_path), dtype="bfloat16")
    assert (c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.head_dim) == (99, 48, 3, 4, 12)
    assert c.dropout_rate == 0.2 and c.dtype == "bfloat16" and c.compute_dtype == jnp.bfloat16
    with pytest.raises(ValueError):
        BertConfig.tiny(hidden=30, heads=4)


def test_axis_rules_for_divisibility():
    rules = dict(DEFAULT_LOGICAL_AXIS_RULES)
    assert rules["batch"] == "data" and rules["heads"] == "model" and rules["vocab"] is None
    base = BertConfig.tiny(vocab_size=30522, hidden=768, heads=12, intermediate=3072)
    r8 = dict(axis_rules_for(base, 8))
    assert r8["heads"] is None and r8["mlp"] == "model" and r8["vocab"] is None
    r2 = dict(axis_rules_for(base, 2))
    assert r2["heads"] == "model" and r2["vocab"] == "model"


def _sharded_check(mesh) -> None:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    model = BertEncoder(CFG.replace(num_layers=1))  # one layer covers every sharded param kind
    ids, mask = _batch(b=3, length=8)
    ids, mask = jnp.concatenate([ids, ids[:1]]), jnp.concatenate([mask, mask[:1]])  # batch 4
    # rbg keys: compile much faster than threefry on CPU; the partitioning path is the same.
    def init():
        return model.init(jax.random.key(0, impl="rbg"), ids, mask)
    rules = DEFAULT_LOGICAL_AXIS_RULES
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract = jax.eval_shape(init)
        shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, rules)
        v = jax.jit(init, out_shardings=shardings)()
        k = v["params"]["layer_0"]["attention"]["query"]["kernel"].value
        assert k.sharding.spec == P(None, "model", None), k.sharding.spec
        w = v["params"]["layer_0"]["output"]["kernel"].value
        assert w.sharding.spec == P("model", None), w.sharding.spec
        data = NamedSharding(mesh, P("data", None))
        out = jax.jit(model.apply)(v, jax.device_put(ids, data), jax.device_put(mask, data))
    host = jax.tree.map(np.asarray, nn.unbox(v))  # same values, unsharded, no mesh
    ref = jax.jit(model.apply)(host, ids, mask)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)


def _mesh(axis_type, devices=None):
    return jax.make_mesh((2, 2), ("data", "model"), axis_types=(axis_type,) * 2, devices=devices)


def test_explicit_mesh_axes_give_clear_error():
    ids, mask = _batch()
    mesh = jax.make_mesh((1, 1), ("data", "model"), axis_types=(jax.sharding.AxisType.Explicit,) * 2,
                         devices=jax.devices()[:1])
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="AxisType.Auto"):
        BertEncoder(CFG).init(jax.random.key(0), ids, mask)


def test_sharded_init_and_apply_on_2x2_mesh():
    if jax.device_count() >= 4:
        _sharded_check(_mesh(jax.sharding.AxisType.Auto, jax.devices()[:4]))
        return
    # No simulated devices in this process (conftest not used): run in a fresh interpreter.
    code = textwrap.dedent(
        """
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
        import jax
        import test_bert
        test_bert._sharded_check(test_bert._mesh(jax.sharding.AxisType.Auto))
        print("OK")
        """
    )
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=child_pythonpath(here, os.path.dirname(here)))
    r = subprocess.run([sys.executable, "-c", code], cwd=here, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]
