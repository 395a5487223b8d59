"""The extractive reader (docs/readers.md): answer spans in tokenised passages, the reader row
format, span decoding, the loss, a tiny reader learning a toy task, exact resume, bad input."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_cut_batch_matches, tiny_reader_config, write_toy_reader_results

from dense_cf import methods
from dense_cf.datasets.formats import DataFormatError, RetrievalRecord, RetrievedPassage, iter_retrieval_results
from dense_cf.inputs import reader as reader_inputs
from dense_cf.inputs.tokens import question_row, reader_passage, reader_row
from dense_cf.losses import reader_loss
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.reader import best_spans, extend_to_words
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.text.qa_eval import qa_scores
from dense_cf.train.loop import train
from dense_cf.train.run import load_run


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(resolve_model_dir("minilm"))


def _ctx(i, text, title="T", has=None):
    return RetrievedPassage(id=str(i), title=title, text=text, has_answer=has)


def _pieces(tok, data, entry):
    """The answer word pieces of every gold span of positive ``entry``, as text."""
    pid = int(data.pos_pid[entry])
    text = data.passages.row(pid)[int(data.text_start[pid]):]
    return [tok.decode(text[s:e + 1].tolist()) for s, e in
            zip(data.span_start.row(entry), data.span_end.row(entry))]


def test_spans_at_passage_ends_multiple_occurrences_and_cut_answers(tok):
    records = [
        # two occurrences, one at the very end of the text; a negative; a flagged passage
        # whose answer the matcher does not find (counted, neither positive nor negative)
        RetrievalRecord("who built it?", ["Ann Lee"], [
            _ctx(0, "Ann Lee built it. Later it was sold by Ann Lee"),
            _ctx(1, "Nobody knows who built the tower."),
            _ctx(2, "Annlee is not the answer.", has=True)]),
        # the answer at the very start; two answers, one inside the other: each keeps its span
        RetrievalRecord("when?", ["1990", "May 1990"], [_ctx(3, "1990 was dry; in May 1990 it rained.")]),
        # the only occurrence lies beyond max_len: the question is skipped and counted
        RetrievalRecord("what colour?", ["green"], [_ctx(4, "word " * 60 + "green")]),
        # no retrieved passage has the answer
        RetrievalRecord("where?", ["Oslo"], [_ctx(5, "It is in Bergen.")]),
    ]
    data = reader_inputs.preprocess(records, tok, max_len=48, max_q_len=16, max_spans=10)
    st = data.stats
    assert (st["questions"], st["kept"], st["skipped_questions"]) == (4, 2, 2)
    assert st["no_answer_passage"] == 1 and st["no_span_in_window"] == 1
    assert st["has_answer_without_span"] == 1 and st["spans_cut_by_max_len"] == 1
    assert data.pos.row(0).tolist() == [0] and len(data.neg.row(0)) == 1
    assert _pieces(tok, data, 0) == ["ann lee", "ann lee"]
    text0 = data.passages.row(int(data.pos_pid[0]))
    assert data.span_end.row(0)[-1] == len(text0) - int(data.text_start[int(data.pos_pid[0])]) - 1
    assert sorted(_pieces(tok, data, 1)) == ["1990", "1990", "may 1990"]
    assert data.span_start.row(1)[0] == 0  # the answer is the first word of the text


def test_max_spans_and_max_positives_are_counted(tok):
    text = "x Bo y Bo z Bo"
    rec = RetrievalRecord("q?", ["Bo"], [_ctx(i, text + f" {i}") for i in range(3)])
    data = reader_inputs.preprocess([rec], tok, max_len=48, max_q_len=16, max_spans=2,
                                    max_positives=2)
    assert len(data.pos.row(0)) == 2 and data.stats["positives_over_max"] == 1
    assert all(len(data.span_start.row(e)) == 2 for e in range(2))
    assert data.stats["spans_over_max_spans"] == 2  # one dropped per kept positive


def test_reader_row_is_the_bert_pair_encoding(tok):
    """[CLS] q [SEP] title [SEP] text [SEP] with token types 0 / 1: HF's pair encoding of
    (question, title [SEP] text); an empty title drops its part."""
    q, title, text = "when was it built?", "Tower 5", "It was built in 1805."
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    q_row = question_row(enc(q), 16, cls_id, sep_id)
    passage, start = reader_passage(title, enc(title), enc(text), sep_id)
    row, lo, hi = reader_row(q_row, passage, start, 64, sep_id)
    pair = tok.encode(q, f"{title} [SEP] {text}")
    assert row == pair.ids
    assert tok.decode(row[lo:hi]) == "it was built in 1805."
    passage, start = reader_passage("", [], enc(text), sep_id)
    assert reader_row(q_row, passage, start, 64, sep_id)[0] == tok.encode(q, text).ids
    cut, lo, hi = reader_row(q_row, passage, start, 12, sep_id)  # truncation keeps the last [SEP]
    assert len(cut) == 12 and cut[-1] == sep_id and hi == 11 and lo == len(q_row)


def test_batches_put_the_positive_first_with_its_spans(tok, tmp_path):
    write_toy_reader_results(tmp_path / "r.json", 6, seed=0, passages=3)
    cfg = tiny_reader_config(tmp_path / "r.json", **{"reader.passages": 4})
    data = reader_inputs.load_config_split(cfg, tok, "train_file")
    spec = reader_inputs.spec_from_config(cfg, tok, shuffle=False)
    b = reader_inputs.make_batch(data, spec, 0, np.arange(3))
    assert b["ids"].shape == (3, 4, 48) and b["starts"].shape == (3, 10)
    # 2 negatives per question: the 4th slot is empty and masked out of the selection softmax
    assert b["passage_valid"].tolist() == [[True, True, True, False]] * 3
    for i in range(3):
        row = b["ids"][i, 0]
        answer = tok.decode(row[b["starts"][i, 0]:b["ends"][i, 0] + 1].tolist())
        assert f"its code is {answer} today" in tok.decode(row[b["mask"][i, 0] > 0].tolist())
        assert b["span_valid"][i].sum() == 1
        q_len = int(np.argmax(row == tok.token_to_id("[SEP]"))) + 1
        types = b["type_ids"][i, 0]
        assert (types[:q_len] == 0).all() and (types[q_len:b["mask"][i, 0].sum()] == 1).all()
    # shuffled batches are a pure function of (seed, epoch, examples)
    shuffled = reader_inputs.spec_from_config(cfg, tok, shuffle=True)
    x, y = (reader_inputs.make_batch(data, shuffled, 3, np.arange(3)) for _ in range(2))
    assert all(np.array_equal(x[k], y[k]) for k in x)


def test_best_spans_on_hand_built_logits():
    L = 10
    start, end = np.zeros((5, L), np.float32), np.zeros((5, L), np.float32)
    lo, hi = np.full(5, 3), np.full(5, 9)  # text at positions 3..8
    start[0, 7], end[0, 8] = 5, 5                   # a span ending on the last text token
    start[1, 3], end[1, 6] = 5, 5                   # too long for max 3 ...
    end[1, 4] = 1                                   # ... so the best allowed one
    start[2, 6], end[2, 4] = 9, 9                   # end before start: never a span
    start[3, :3], end[3, :3], end[3, 9] = 99, 99, 99  # question / final [SEP] logits ignored
    start[3, 5], end[3, 5] = 1, 1
    hi[4] = 3                                       # no text at all
    s, e, score, found = (np.asarray(x) for x in best_spans(jnp.asarray(start), jnp.asarray(end),
                                                            jnp.asarray(lo), jnp.asarray(hi), 3))
    assert (s[0], e[0], score[0]) == (7, 8, 10)
    assert (s[1], e[1], score[1]) == (3, 4, 6)
    assert s[2] <= e[2] and e[2] - s[2] < 3 and score[2] == 9
    assert (s[3], e[3], score[3]) == (5, 5, 2)
    assert found.tolist() == [True, True, True, True, False]


def test_extend_to_words():
    words = [0, 1, 1, 1, 2, 3, 3]  # "a bbb c dd" as word pieces
    assert extend_to_words(2, 2, words) == (1, 3)
    assert extend_to_words(3, 5, words) == (1, 6)
    assert extend_to_words(0, 0, words) == (0, 0)
    with pytest.raises(ValueError, match="outside"):
        extend_to_words(3, 9, words)


def test_loss_marginalises_over_occurrences_and_masks():
    sel = jnp.array([[2.0, 1.0, 50.0]])
    valid = jnp.array([[True, True, False]])  # the masked slot's logit must not count
    start = jnp.array([[9.0, 0.0, 1.0, 2.0, 0.5]])
    end = jnp.array([[9.0, 0.5, 0.0, 1.5, 1.0]])
    text = jnp.array([[False, True, True, True, True]])  # position 0 is the question
    starts, ends = jnp.array([[1, 3, 0]]), jnp.array([[2, 4, 0]])
    span_valid = jnp.array([[True, True, False]])
    loss, m = reader_loss(sel, valid, start, end, text, starts, ends, span_valid)
    ls = np.log(np.exp(2) + np.exp(1)) - 2
    ps = np.exp([0, 1, 2, 0.5]) / np.exp([0, 1, 2, 0.5]).sum()
    pe = np.exp([0.5, 0, 1.5, 1]) / np.exp([0.5, 0, 1.5, 1]).sum()
    lspan = -np.log(ps[0] * pe[1] + ps[2] * pe[3])
    np.testing.assert_allclose(float(m["l_select"]), ls, rtol=1e-5)
    np.testing.assert_allclose(float(m["l_span"]), lspan, rtol=1e-5)
    np.testing.assert_allclose(float(loss), ls + lspan, rtol=1e-5)
    assert float(m["rank_acc"]) == 1.0 and float(m["span_acc"]) == 0.0  # argmax (3, 3) is no gold span
    g = jax.grad(lambda s: reader_loss(sel, valid, s, end, text, starts, ends, span_valid)[0])(start)
    assert float(g[0, 0]) == 0.0  # no gradient through positions outside the text


def test_tiny_reader_learns_the_toy_task(tmp_path):
    write_toy_reader_results(tmp_path / "train.json", 256, seed=0)
    test = write_toy_reader_results(tmp_path / "test.json", 48, seed=1)
    summary, run = train(tiny_reader_config(tmp_path / "train.json"), str(tmp_path / "run"))
    assert summary["data"]["kept"] == 256 and summary["train"]["train/rank_acc"] > 0.9
    recs = [r for _, r in iter_retrieval_results(tmp_path / "test.json")]
    preds = run.method.predict(run, [r.question for r in recs], [r.ctxs for r in recs], [1, 4])
    em4, _ = qa_scores([p.text for p in preds[4]], [r.answers for r in recs])
    assert np.mean(em4) >= 0.9
    # read from the answer passage, wherever the retriever ranked it
    hits = [p for p, e in zip(preds[4], em4) if e]
    assert all(p.passage_id.startswith("p") for p in hits)
    assert {p.passage_rank for p in hits} == {0, 1, 2, 3}
    em1, _ = qa_scores([p.text for p in preds[1]], [r.answers for r in recs])
    top1 = [r["ctxs"][0]["has_answer"] for r in test]
    assert np.mean(em1) <= np.mean(top1)  # at k = 1 only questions whose top passage answers

    # The CPU call cap (eval.cpu_call_tokens) changes only how many rows a call reads: the same
    # predictions with no cap and with calls of a few rows (scores within float tolerance).
    for cap in (0, 96):
        cfg = run.config.copy_and_resolve_references()
        cfg.eval.cpu_call_tokens = cap
        other = dataclasses.replace(run, config=cfg)
        again = other.method.predict(other, [r.question for r in recs], [r.ctxs for r in recs],
                                     [1, 4], batch_size=16)
        for k in (1, 4):
            assert [(p.text, p.passage_id) for p in again[k]] == [(p.text, p.passage_id)
                                                                  for p in preds[k]]
            np.testing.assert_allclose([p.score or 0.0 for p in again[k]], [p.score or 0.0 for p in preds[k]],
                                       rtol=1e-5, atol=1e-5)


def test_killed_then_resumed_reader_equals_an_uninterrupted_one(tmp_path):
    write_toy_reader_results(tmp_path / "train.json", 40, seed=0)
    over = {"train.num_steps": 12, "train.checkpoint_every": 6, "train.global_batch": 4}
    cfg = lambda **o: tiny_reader_config(tmp_path / "train.json", **over, **o)  # noqa: E731
    _, whole = train(cfg(), str(tmp_path / "whole"))
    train(cfg(**{"train.stop_at_step": 6}), str(tmp_path / "cut"))  # killed at a checkpoint
    _, resumed = train(cfg(), str(tmp_path / "cut"))
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7),
                 jax.device_get(whole.params), jax.device_get(resumed.params))
    loaded = load_run(str(tmp_path / "whole"))
    assert loaded.method.kind == "reader" and loaded.step == 12
    with open(tmp_path / "whole" / "metrics.jsonl") as f:
        assert {"train/l_select", "train/l_span", "train/span_acc"} <= set(json.loads(f.readline()))


def test_bad_records_are_named_and_counted(tmp_path, tok):
    good = {"question": "q?", "answers": ["a"], "ctxs": [{"id": 1, "title": None, "text": "a b"}]}
    bad = {"question": "q2?", "answers": ["a"], "ctxs": [{"id": "2", "title": "t", "text": 5}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps([good, bad]))
    with pytest.raises(DataFormatError, match=r"r.json: record 1 .*field 'ctxs\[0\].text'"):
        list(iter_retrieval_results(path, skip_bad=False))
    got = list(iter_retrieval_results(path))
    assert got[1] == (1, None) and got[0][1].ctxs[0].title == "" and got[0][1].ctxs[0].id == "1"
    data = reader_inputs.load_results_split(str(path), tok, cache_dir=None, max_len=32, max_q_len=8)
    assert data.stats["skipped_records"] == 1 and data.stats["kept"] == 1
    cfg = tiny_reader_config(tmp_path / "missing.json")
    assert "reader_data --retriever RUN --split train" in reader_inputs.file_problems(cfg)[0]


def test_only_readers_predict():
    with pytest.raises(ValueError, match="only a reader has a predict"):
        methods.Method(name="x", loss=lambda e: e, predict=methods.get("reader").predict)
    reader = methods.get("reader")
    assert reader.kind == "reader" and not reader.gather and reader.predict is not None


def test_reader_rows_cut_to_a_length_bucket_give_the_same_loss_and_gradients(tmp_path):
    """``data.length_buckets`` cuts the reader's [b, P, L] rows (one length group): the training
    loop runs with it (and logs the padding removed), and without dropout a cut batch's loss and
    gradients equal the full batch's within float tolerance (the span loss masks all but the
    passage text; text_lo/hi and the gold spans lie within a row's tokens)."""
    from dense_cf.inputs import buckets

    write_toy_reader_results(tmp_path / "train.json", 16, seed=0)
    bounds = (24, 32, 40)
    cfg = tiny_reader_config(tmp_path / "train.json", **{
        "train.num_steps": 2, "train.checkpoint_every": 2, "train.global_batch": 4,
        "train.log_every": 1, "data.length_buckets": bounds})
    _, run = train(cfg, str(tmp_path / "run"))
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        removed = [json.loads(x).get("train/padding_removed") for x in f]
    assert len(removed) == 2 and all(r is not None and 0 < r < 1 for r in removed)

    data = reader_inputs.load_config_split(run.config, run.tokenizer, "train_file")
    spec = reader_inputs.spec_from_config(run.config, run.tokenizer)
    full = reader_inputs.make_batch(data, spec, 0, np.arange(4))
    cut, counts = buckets.trim_batch(full, run.method.inputs.length_groups, bounds)
    longest = int(buckets.row_lengths(full["mask"]).max())
    assert cut["ids"].shape == full["ids"].shape[:2] + (buckets.fit_bucket(longest, bounds + (48,)),)
    assert cut["ids"].shape[-1] < full["ids"].shape[-1] and counts["tokens"] < counts["tokens_at_max"]
    assert int(cut["text_hi"].max()) <= cut["ids"].shape[-1] and int(cut["ends"].max()) < longest
    assert_cut_batch_matches(run.method, run.model, run.params,
                             run.method.loss_hparams(run.config.loss), full, cut)
