"""The one model input format (docs/method.md §8): training, export and HF's tokenizer agree.

A passage is ``[CLS] title [SEP] text [SEP]``; a passage with an empty title is
``[CLS] text [SEP]``, as DPR's tensorizer and HF ``tokenizer(text)`` encode it.
"""

import os

import numpy as np
import pytest
from tokenizers import Tokenizer

from dense_cf.datasets.formats import BiencoderExample, Passage
from dense_cf.inputs import dpr as pipeline
from dense_cf.inputs import tokens
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer

PASSAGES = [("Eiffel Tower", "The Eiffel Tower is in Paris. It was built in 1889."),
            ("", "Mount Everest is the highest mountain. It is in Nepal."),
            ("Short", "Tiny."),
            ("", "A title-less passage that is long enough to be truncated by the encoder "
                 "window of the test, with many words after it " * 3)]
MAX_P, MAX_Q = 32, 16


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(resolve_model_dir("minilm"))


@pytest.fixture(scope="module")
def hf_tok():
    """HF's own fast tokenizer of all-MiniLM-L6-v2 (the tokenizer.json transformers loads),
    with its special-token template, truncation and padding as HF applies them."""
    t = Tokenizer.from_file(os.path.join(resolve_model_dir("minilm"), "tokenizer.json"))
    t.enable_truncation(MAX_P)
    t.no_padding()
    return t


def _hf(hf_tok, title, text):
    enc = hf_tok.encode(title, text) if title else hf_tok.encode(text)  # DPR's tensorizer rule
    return enc.ids


def test_passages_match_hf_tokenizer_with_and_without_titles(tok, hf_tok):
    ids, mask = tokens.tokenize_passages(tok, [t for t, _ in PASSAGES], [x for _, x in PASSAGES],
                                         MAX_P)
    for i, (title, text) in enumerate(PASSAGES):
        want = _hf(hf_tok, title, text)
        n = int(mask[i].sum())
        if len(want) < MAX_P:  # HF truncates a pair by its longest side; compare whole rows
            assert ids[i, :n].tolist() == want, (title, text)
        else:  # truncated: same prefix, final [SEP] kept
            assert ids[i, :n - 1].tolist() == want[:n - 1] and ids[i, n - 1] == want[-1]
        assert (ids[i, n:] == 0).all() and mask[i, :n].all()
    no_title = ids[1, :3].tolist()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    assert no_title[0] == cls_id and sep_id not in no_title[1:3]  # not "[CLS] [SEP] text"


def test_questions_match_hf_tokenizer(tok, hf_tok):
    qs = ["who built the eiffel tower?", "where is mount everest?"]
    ids, mask = tokens.tokenize_questions(tok, qs, MAX_Q)
    for i, q in enumerate(qs):
        assert ids[i, :int(mask[i].sum())].tolist() == hf_tok.encode(q).ids


def test_export_token_ids_equal_the_training_pipelines(tok):
    """The training batch (cache + batch source) and export encode the same passage identically."""
    exs = [BiencoderExample(f"question {i}?", ["x"], [Passage(title=t, text=x)], [], [])
           for i, (t, x) in enumerate(PASSAGES)]
    data = pipeline.preprocess(exs, tok, max_q_len=MAX_Q, max_p_len=MAX_P, max_hard=0)
    spec = pipeline.PipelineSpec(global_batch=1, max_q_len=MAX_Q, max_p_len=MAX_P, num_hard=0,
                                 strategy="none", pad_id=0, sep_id=tok.token_to_id("[SEP]"),
                                 shuffle=False)
    batch = next(pipeline.make_eval_dataset(data, spec, batch_size=len(exs)))
    ids, mask = tokens.tokenize_passages(tok, [t for t, _ in PASSAGES], [x for _, x in PASSAGES],
                                         MAX_P)
    np.testing.assert_array_equal(batch["pos_ids"], ids)
    np.testing.assert_array_equal(batch["pos_mask"], mask)
    q_ids, q_mask = tokens.tokenize_questions(tok, [e.question for e in exs], MAX_Q)
    np.testing.assert_array_equal(batch["q_ids"], q_ids)
    np.testing.assert_array_equal(batch["q_mask"], q_mask)


def test_title_less_head_has_no_sentence_ids(tok):
    bodies, sents, heads, _ = tokens.passage_rows(tok, ["", "T"], ["One. Two.", "One. Two."],
                                                  keep=64)
    assert heads == [1, 3] and sents[0][0] == -1 and sents[0][1] == 0
    assert bodies[0][1:] == bodies[1][3:]
