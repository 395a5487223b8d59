"""MiniLM tokenizer: padding/truncation off, lower-casing, special ids, vocab.txt fallback."""

import shutil

import pytest

from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer, special_ids

TEXT = "Who wrote HAMLET? Café naïve, unbelievably."


@pytest.fixture(scope="module")
def minilm_dir():
    return resolve_model_dir("minilm")


@pytest.fixture(scope="module")
def tok(minilm_dir):
    return load_tokenizer(minilm_dir)


def test_no_padding_to_128(tok):
    assert tok.padding is None and tok.truncation is None
    enc = tok.encode("hello")
    assert enc.tokens == ["[CLS]", "hello", "[SEP]"] and enc.attention_mask == [1, 1, 1]
    lens = [len(e.ids) for e in tok.encode_batch(["a", "a b c"])]
    assert lens == [3, 5]


def test_no_truncation(tok):
    assert len(tok.encode("word " * 600).ids) == 602  # > 128 (json default) and > 512


def test_lowercases_and_strips_accents(tok):
    enc = tok.encode(TEXT)
    assert enc.tokens[:5] == ["[CLS]", "who", "wrote", "hamlet", "?"]
    assert "cafe" in enc.tokens and "naive" in enc.tokens
    assert tok.encode("HAMLET").ids == tok.encode("hamlet").ids


def test_special_ids(tok):
    assert special_ids(tok) == {"cls": 101, "sep": 102, "pad": 0, "unk": 100, "mask": 103}
    enc = tok.encode("q", "p")
    assert enc.ids[0] == 101 and enc.ids.count(102) == 2 and enc.type_ids == [0, 0, 0, 1, 1]


def test_vocab_txt_fallback_matches_tokenizer_json(tmp_path, minilm_dir, tok):
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(f"{minilm_dir}/{name}", tmp_path / name)
    fb = load_tokenizer(str(tmp_path))
    for text in (TEXT, "東京 is in Japan; x-ray 3.14 don't", "word " * 200):
        assert fb.encode(text).ids == tok.encode(text).ids
    assert fb.encode("a", "b").type_ids == tok.encode("a", "b").type_ids
    assert special_ids(fb) == special_ids(tok)


def test_vocab_txt_cased(tmp_path, minilm_dir):
    shutil.copy(f"{minilm_dir}/vocab.txt", tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    fb = load_tokenizer(str(tmp_path))
    assert fb.encode("Hamlet").ids != fb.encode("hamlet").ids


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_tokenizer(str(tmp_path))
