"""DCSR model side (docs/method.md §4): ``<sent>`` vocabulary extension of tokenizer and embeddings."""

import json

import numpy as np
import pytest

from dense_cf.configs.base import base_config
from dense_cf.models.hf import CheckpointError, extend_word_embeddings, resolve_model_dir
from dense_cf.models.tokenizer import SENT_TOKEN, tokenizer_for_run
from dense_cf.train import run as run_lib


def _tree(v=4, h=3):
    emb = np.arange(v * h, dtype=np.float32).reshape(v, h)
    return {"embeddings": {"word_embeddings": {"embedding": emb}, "LayerNorm": {"scale": 1}},
            "layer_0": {"x": 2}}


def test_extend_word_embeddings_inits():
    t = _tree()
    old = t["embeddings"]["word_embeddings"]["embedding"]
    out = extend_word_embeddings(t, 5, [4], init="mean")
    new = out["embeddings"]["word_embeddings"]["embedding"]
    assert new.shape == (5, 3)
    np.testing.assert_array_equal(new[:4], old)            # pretrained rows untouched
    np.testing.assert_allclose(new[4], old.mean(axis=0))   # [4.5, 5.5, 6.5]
    assert out["layer_0"] == {"x": 2} and t["embeddings"]["word_embeddings"]["embedding"].shape == (4, 3)
    new = extend_word_embeddings(t, 5, [4], init="cls", source_ids={"[CLS]": 1, "[SEP]": 2})
    np.testing.assert_array_equal(new["embeddings"]["word_embeddings"]["embedding"][4], old[1])
    new = extend_word_embeddings(t, 5, [4], init="normal")["embeddings"]["word_embeddings"]["embedding"]
    assert 0 < np.abs(new[4]).max() < 0.2
    with pytest.raises(ValueError, match="needs the id"):
        extend_word_embeddings(t, 5, [4], init="sep")
    with pytest.raises(CheckpointError, match="shrink"):
        extend_word_embeddings(t, 3, [2])


def test_minilm_gets_a_sent_row(tmp_path):
    c = base_config()
    c.method = "dcsr"
    c.model.name_or_path = "minilm"
    c.dcsr.sent_init = "mean"
    model, params, model_dir = run_lib.build_model(c)
    assert model.config.vocab_size == 30523
    assert set(params) == {"question", "passage"}  # one tree per tower
    emb = params["passage"]["embeddings"]["word_embeddings"]["embedding"]
    np.testing.assert_array_equal(params["question"]["embeddings"]["word_embeddings"]["embedding"], emb)
    assert emb.shape == (30523, 384)
    np.testing.assert_allclose(emb[30522], emb[:30522].mean(axis=0), rtol=1e-5, atol=1e-6)
    c.dcsr.sent_init = "cls"  # the former default: a copy of [CLS]'s row (id 101)
    emb = run_lib.build_model(c)[1]["passage"]["embeddings"]["word_embeddings"]["embedding"]
    np.testing.assert_array_equal(emb[30522], emb[101])
    tok = run_lib.run_tokenizer(c, model_dir, str(tmp_path), save=True)
    assert tok.token_to_id(SENT_TOKEN) == 30522
    assert tok.encode("a <sent> b", add_special_tokens=False).tokens == ["a", SENT_TOKEN, "b"]
    saved = json.load(open(tmp_path / "tokenizer" / "added_tokens.json"))
    assert saved == {SENT_TOKEN: 30522}
    # DPR runs keep the pretrained vocabulary.
    c.method = "dpr"
    assert run_lib.build_model(c, load_pretrained=False)[0].config.vocab_size == 30522


def test_saved_run_tokenizer_must_match(tmp_path):
    c = base_config()
    c.method = "dcsr"
    d = resolve_model_dir("minilm")
    tokenizer_for_run((SENT_TOKEN,), d, str(tmp_path), save=True)
    assert tokenizer_for_run((SENT_TOKEN,), d, str(tmp_path)).token_to_id(SENT_TOKEN) == 30522
    # A saved tokenizer whose <sent> id differs (its base vocabulary had one more word) is
    # refused: the checkpoint's embedding rows would be read with the wrong ids.
    path = tmp_path / "tokenizer" / "tokenizer.json"
    j = json.load(open(path))
    j["model"]["vocab"]["zzzextra"] = 30522
    for t in j["added_tokens"]:
        if t["content"] == SENT_TOKEN:
            t["id"] = 30523
    json.dump(j, open(path, "w"))
    with pytest.raises(ValueError, match="differ"):
        tokenizer_for_run((SENT_TOKEN,), d, str(tmp_path))


def _marker_cosines(init: str) -> tuple[float, float]:
    """Untrained MiniLM with ``dcsr.sent_init = init`` on three synthetic-style passages: mean
    cosine between the marker outputs of one passage, and between a marker and [CLS]."""
    import jax

    from dense_cf.inputs import tokens
    c = base_config()
    c.method, c.model.name_or_path, c.dcsr.sent_init = "dcsr", "minilm", init
    model, params, model_dir = run_lib.build_model(c)
    tok = run_lib.run_tokenizer(c, model_dir)
    texts = ["Dahlton remained active as a geologist. Dahlton died in Fenmere in 1958. "
             "Dahlton was awarded the Lindler Fellowship in 1977. Dahlton kept a diary.",
             "The Silent Carriage is a 1965 play. The play received mixed reviews at first. "
             "The play was written by Helga Bellini over several winters.",
             "The society is based in Cranford. In 1938, the society merged with a bank. "
             "Visitors often remarked on generous pensions."]
    t = tokens.tokenize_marked_passages(tok, ["A", "B", "C"], texts, max_len=64, max_sents=8,
                                        sent_token=SENT_TOKEN)
    hid = np.asarray(jax.jit(lambda p, i, m: model.apply(
        {"params": p}, i, m, method=model.encode_passage_tokens))(params, t["ids"], t["mask"]))
    unit = hid / np.linalg.norm(hid, axis=-1, keepdims=True)
    between, to_cls = [], []
    for i in range(3):
        m = unit[i, t["positions"][i][t["valid"][i]]]
        assert len(m) >= 3
        c_ = m @ m.T
        between.append(c_[np.triu_indices(len(m), 1)].mean())
        to_cls.append((m @ unit[i, 0]).mean())
    return float(np.mean(between)), float(np.mean(to_cls))


def test_default_sent_init_gives_sentence_specific_vectors():
    # A <sent> row copied from [CLS] makes every marker output the passage's [CLS] output on
    # MiniLM (cosine > 0.9999), so "sentence" vectors are one passage vector; the default must
    # start the markers apart (docs/dcsr.md, "Sentence vectors collapse with sent_init=cls").
    between, to_cls = _marker_cosines("cls")
    assert between > 0.9999 and to_cls > 0.9999
    between, to_cls = _marker_cosines(base_config().dcsr.sent_init)
    assert between < 0.99 and to_cls < 0.9
