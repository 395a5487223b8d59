"""Flax T5 (dense_cf/models/t5.py) against HF PyTorch goldens, and HF safetensors loading.

Fixtures: tests/fixtures/t5_tiny/{v1_0,v1_1} from tools/make_golden_t5.py (random tiny HF
T5ForConditionalGeneration, torch 2.13): v1.0 = ReLU + tied, scaled head; v1.1 = gated GELU +
untied head. Reference logits in float32 and float64.
"""

import functools
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from dense_cf.models import hf_t5, t5
from dense_cf.models.hf import CheckpointError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "t5_tiny")
VARIANTS = ("v1_0", "v1_1")


def _ll(model):
    return jax.jit(functools.partial(t5.answer_log_likelihood, model))


def _golden(variant):
    return dict(np.load(os.path.join(FIXTURES, variant, "golden.npz")))


@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_matches_hf_golden(variant):
    params, cfg = hf_t5.load_hf_t5_params(os.path.join(FIXTURES, variant))
    g = _golden(variant)
    model = t5.T5ForConditionalGeneration(cfg)
    enc = jax.jit(lambda p, i, m: model.apply({"params": p}, i, m, method=model.encode))(
        params, g["input_ids"], g["attention_mask"])
    real = g["attention_mask"][..., None] > 0  # HF's padded encoder rows are not meaningful
    np.testing.assert_allclose(np.where(real, enc, 0), np.where(real, g["encoder_last_hidden_state"], 0),
                               atol=2e-5)
    # decoder inputs: our shift_right must equal HF's _shift_right
    dec_in = t5.shift_right(jnp.asarray(g["labels"]), cfg.decoder_start_token_id, cfg.pad_token_id)
    np.testing.assert_array_equal(dec_in, g["decoder_input_ids"])
    logits = jax.jit(model.apply)({"params": params}, g["input_ids"], g["attention_mask"], dec_in)
    np.testing.assert_allclose(logits, g["logits"], atol=2e-5)
    np.testing.assert_allclose(logits, g["logits_f64"], atol=2e-5)
    # HF's loss = mean token cross-entropy over labels != -100.
    total, mean = _ll(model)(params, g["input_ids"], g["attention_mask"], g["labels"])
    n = (g["labels"] >= 0).sum(-1)
    np.testing.assert_allclose(-np.sum(total) / n.sum(), g["loss"], rtol=1e-5)
    np.testing.assert_allclose(mean * n, total, rtol=1e-6)


def test_variant_flags_follow_the_checkpoint():
    _, c0 = hf_t5.load_hf_t5_params(os.path.join(FIXTURES, "v1_0"))
    _, c1 = hf_t5.load_hf_t5_params(os.path.join(FIXTURES, "v1_1"))
    assert (c0.feed_forward_proj, c0.tie_word_embeddings, c0.scale_decoder_outputs) == ("relu", True, True)
    assert (c1.feed_forward_proj, c1.tie_word_embeddings, c1.scale_decoder_outputs) == ("gated-gelu", False, False)


def test_transformers4_style_v11_config(tmp_path):
    """Hub v1.1 configs say tie_word_embeddings=false and have no scale_decoder_outputs key."""
    d = tmp_path / "v11"
    shutil.copytree(os.path.join(FIXTURES, "v1_1"), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("scale_decoder_outputs")
    cfg["tie_word_embeddings"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    params, c = hf_t5.load_hf_t5_params(str(d))
    assert not c.scale_decoder_outputs and not c.tie_word_embeddings
    g = _golden("v1_1")
    logits = jax.jit(t5.T5ForConditionalGeneration(c).apply)(
        {"params": params}, g["input_ids"], g["attention_mask"], g["decoder_input_ids"])
    np.testing.assert_allclose(logits, g["logits"], atol=2e-5)


@pytest.mark.parametrize("gated", [False, True])
def test_safetensors_round_trip(tmp_path, gated):
    cfg = t5.T5Config(vocab_size=40, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_decoder_layers=1,
                      num_heads=2, feed_forward_proj="gated-gelu" if gated else "relu",
                      tie_word_embeddings=not gated, scale_decoder_outputs=not gated)
    params = jax.tree.map(np.asarray, t5.init_params(cfg, jax.random.key(3)))
    hf_t5.save_hf_t5(params, cfg, str(tmp_path))
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert ("lm_head.weight" in keys) == gated
    assert "decoder.block.0.layer.2.DenseReluDense.wo.weight" in keys  # HF layout, 1 decoder layer
    loaded, cfg2 = hf_t5.load_hf_t5_params(str(tmp_path))
    assert cfg2 == cfg
    jax.tree.map(np.testing.assert_array_equal, loaded, params)


def test_fixture_load_save_load(tmp_path):
    src = os.path.join(FIXTURES, "v1_1")
    params, cfg = hf_t5.load_hf_t5_params(src)
    hf_t5.save_hf_t5(params, cfg, str(tmp_path))
    again, cfg2 = hf_t5.load_hf_t5_params(str(tmp_path))
    assert cfg2.replace() == cfg
    jax.tree.map(np.testing.assert_array_equal, again, params)


def test_checkpoint_mismatch_is_reported(tmp_path):
    src = os.path.join(FIXTURES, "v1_0")
    shutil.copytree(src, tmp_path / "m")
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    del tensors["encoder.block.1.layer.1.DenseReluDense.wi.weight"]
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing \(1\): encoder\.block\.1\.layer\.1\.DenseReluDense\.wi"):
        hf_t5.load_hf_t5_params(str(tmp_path / "m"))
    _, cfg = hf_t5.load_hf_t5_params(src)
    with pytest.raises(CheckpointError, match="missing"):
        hf_t5.load_hf_t5_params(src, cfg.replace(num_layers=3))


def test_relative_position_buckets():
    rel = jnp.arange(-200, 201)
    bi = np.asarray(t5.relative_position_bucket(rel, True, 32, 128))
    causal = np.asarray(t5.relative_position_bucket(rel, False, 32, 128))
    zero = 200
    assert bi[zero] == 0 and causal[zero] == 0
    # bidirectional: exact buckets up to 8 on each side, future offsets in the upper half
    np.testing.assert_array_equal(bi[zero - 7:zero + 1], [7, 6, 5, 4, 3, 2, 1, 0])
    np.testing.assert_array_equal(bi[zero + 1:zero + 8], np.arange(17, 24))
    assert bi.max() == 31 and bi[-1] == 31 and bi[0] == 15  # clipped beyond max_distance
    assert np.all(np.diff(bi[:zero + 1]) <= 0)  # monotone in distance
    # causal: every future position shares bucket 0; the past uses all 32 buckets
    assert np.all(causal[zero:] == 0)
    np.testing.assert_array_equal(causal[zero - 15:zero + 1], np.arange(15, -1, -1))
    assert causal[0] == 31


def test_scores_do_not_depend_on_padding():
    params, cfg = hf_t5.load_hf_t5_params(os.path.join(FIXTURES, "v1_0"))
    model = t5.T5ForConditionalGeneration(cfg)
    g = _golden("v1_0")
    ids, mask, labels = g["input_ids"][1:2], g["attention_mask"][1:2], g["labels"][:1]
    n = int(mask.sum())
    tight = _ll(model)(params, ids[:, :n], mask[:, :n], labels)
    wide_ids = np.pad(ids[:, :n], ((0, 1), (0, 17)))
    wide_mask = np.pad(mask[:, :n], ((0, 1), (0, 17)))
    wide_labels = np.pad(labels, ((0, 1), (0, 6)), constant_values=-100)
    wide = _ll(model)(params, wide_ids, wide_mask, wide_labels)
    np.testing.assert_allclose(wide[0][:1], tight[0], atol=1e-5)
    np.testing.assert_allclose(wide[1][:1], tight[1], atol=1e-6)
    assert float(wide[0][1]) == 0.0  # an all-padding row: no labels, no score, no NaN


def test_missing_tokenizer_json_is_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        hf_t5.load_t5_tokenizer(str(tmp_path))
