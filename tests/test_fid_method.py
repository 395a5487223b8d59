"""The Fusion-in-Decoder reader as a method (docs/readers.md, "Fusion-in-Decoder"): its inputs
from retrieval results, T5 dropout, training through the shared loop, exact resume, prediction
and ``eval.e2e`` with a FiD reader, bad input."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FID_WORDS, TOY_CODES, tiny_fid_config, write_tiny_t5_tokenizer

from dense_cf import methods
from dense_cf.datasets.formats import RetrievalRecord, RetrievedPassage
from dense_cf.eval.e2e import evaluate_e2e
from dense_cf.inputs import fid as fid_inputs
from dense_cf.models import fid, t5
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.text.qa_eval import qa_scores
from dense_cf.train.loop import train
from dense_cf.train.run import load_run


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("t5tok")
    write_tiny_t5_tokenizer(d / "tokenizer.json", FID_WORDS, extra_chars=":")
    return d


@pytest.fixture(scope="module")
def tok(tok_dir):
    return load_tokenizer(str(tok_dir))


def write_toy_fid_results(path, n, seed, *, passages=4):
    """Retrieval results of a toy task: "what is the code of item i?"; one passage says "its
    code is CODE.", the others "it is old."; the answer passage sits at a random rank."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        code = TOY_CODES[rng.integers(len(TOY_CODES))]
        ctxs = [{"id": f"n{i}_{j}", "title": f"item {i}", "text": "it is old.", "has_answer": False}
                for j in range(passages - 1)]
        ctxs.insert(int(rng.integers(passages)),
                    {"id": f"p{i}", "title": f"item {i}", "text": f"its code is {code}.", "has_answer": True})
        records.append({"question": f"what is the code of item {i}?", "answers": [code], "ctxs": ctxs})
    with open(path, "w") as f:
        json.dump(records, f)
    return records


def _ctx(i, text, title="item"):
    return RetrievedPassage(id=str(i), title=title, text=text)


def test_rows_are_the_fid_format_tokenised_at_once(tok):
    rec = RetrievalRecord("what is the code of item 7?", ["alpha", "kilo"],
                          [_ctx(0, "its code is alpha."), _ctx(1, "it is old. " * 9, "item 7")])
    data = fid_inputs.preprocess([rec], tok, max_len=30, n_passages=3, max_answer_len=4)
    spec = fid_inputs.FiDSpec(global_batch=1, n_passages=3, max_len=30, max_answer_len=4, shuffle=False)
    got = fid_inputs.make_batch(data, spec, 0, np.arange(1))
    want = fid.fid_batch(tok, [rec.question], [[(c.title, c.text) for c in rec.ctxs]], ["alpha"],
                         n_passages=3, max_length=30, max_answer_length=4)
    for key in ("input_ids", "attention_mask", "labels"):
        np.testing.assert_array_equal(got[key], want[key])
    assert got["attention_mask"][0, 1].all() and got["input_ids"][0, 1, -1] == 1  # cut, </s> kept
    assert not got["attention_mask"][0, 2].any()                                   # a missing passage


def test_skips_are_counted_and_targets_are_drawn_per_epoch(tok):
    recs = [RetrievalRecord("q one?", ["alpha", "bravo", "kilo"], [_ctx(0, "its code is alpha.")]),
            RetrievalRecord("q two?", [], [_ctx(1, "it is old.")]),
            RetrievalRecord("q three?", ["echo"], [])]
    data = fid_inputs.preprocess(recs, tok, max_len=32, n_passages=2, max_answer_len=4)
    st = data.stats
    assert (st["questions"], st["kept"], st["no_answers"], st["no_passages"]) == (3, 1, 1, 1)
    assert st["skipped_questions"] == 2 and st["answers"] == 3
    spec = fid_inputs.FiDSpec(global_batch=1, n_passages=2, max_len=32, max_answer_len=4, seed=3)
    golds = {tuple(tok.encode(a).ids) for a in ("alpha", "bravo", "kilo")}
    drawn = []
    for epoch in range(12):
        labels = fid_inputs.make_batch(data, spec, epoch, np.arange(1))["labels"][0]
        drawn.append(tuple(int(x) for x in labels if x >= 0))
        again = fid_inputs.make_batch(data, spec, epoch, np.arange(1))["labels"][0]
        np.testing.assert_array_equal(labels, again)  # a pure function of (seed, epoch, example)
    assert set(drawn) <= golds and len(set(drawn)) > 1


def test_t5_dropout_only_when_not_deterministic():
    cfg = t5.T5Config(vocab_size=40, d_model=16, d_kv=4, d_ff=24, num_layers=1, num_heads=2)
    model, noisy = t5.T5ForConditionalGeneration(cfg), t5.T5ForConditionalGeneration(cfg.replace(dropout_rate=0.5))
    params = t5.init_params(cfg, jax.random.key(0))
    ids = jnp.arange(2, 14, dtype=jnp.int32).reshape(2, 6)
    mask = jnp.ones_like(ids)
    base = model.apply({"params": params}, ids, mask, ids)
    np.testing.assert_allclose(noisy.apply({"params": params}, ids, mask, ids), base, atol=1e-6)
    drop = lambda k: noisy.apply({"params": params}, ids, mask, ids, deterministic=False,  # noqa: E731
                                 rngs={"dropout": jax.random.key(k)})
    assert not np.allclose(drop(1), base, atol=1e-3)
    np.testing.assert_allclose(drop(1), drop(1))
    assert not np.allclose(drop(1), drop(2), atol=1e-3)


def test_bad_records_are_named_and_counted(tmp_path, tok, tok_dir):
    good = {"question": "q?", "answers": ["alpha"], "ctxs": [{"id": 1, "title": "t", "text": "a b"}]}
    bad = {"question": "q2?", "ctxs": [{"id": "2", "title": "t", "text": "c"}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps([good, bad]))
    cfg = tiny_fid_config(path, tok_dir)
    data = fid_inputs.load_config_split(cfg, tok, "train_file")
    assert data.stats["skipped_records"] == 1 and data.stats["kept"] == 1
    assert "record 1" in json.dumps(data.stats["skip_summary"])
    assert "answers" in json.dumps(data.stats["skip_summary"])
    (tmp_path / "all_bad.json").write_text(json.dumps([bad]))
    with pytest.raises(ValueError, match=r"all_bad.json.*no valid records.*missing answers"):
        fid_inputs.load_config_split(tiny_fid_config(tmp_path / "all_bad.json", tok_dir), tok, "train_file")
    assert "reader_data --retriever RUN --split train" in methods.get("fid").inputs.file_problems(
        tiny_fid_config(tmp_path / "missing.json", tok_dir))[0]


def test_killed_then_resumed_fid_equals_an_uninterrupted_one(tmp_path, tok_dir):
    write_toy_fid_results(tmp_path / "train.json", 40, seed=0)
    write_toy_fid_results(tmp_path / "dev.json", 8, seed=2)
    over = {"train.num_steps": 8, "train.checkpoint_every": 4, "train.global_batch": 4,
            "train.eval_every": 4, "train.eval_max_batches": 2,
            "model.dropout": 0.1}  # dropout on: its keys must resume too
    cfg = lambda **o: tiny_fid_config(tmp_path / "train.json", tok_dir, tmp_path / "dev.json",  # noqa: E731
                                      **over, **o)
    summary, whole = train(cfg(), str(tmp_path / "whole"))
    assert {"loss", "token_accuracy", "examples"} <= set(summary["dev"])  # dev batches: first answers
    train(cfg(**{"train.stop_at_step": 4}), str(tmp_path / "cut"))  # killed at a checkpoint
    _, resumed = train(cfg(), str(tmp_path / "cut"))
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7),
                 jax.device_get(whole.params), jax.device_get(resumed.params))
    loaded = load_run(str(tmp_path / "whole"))
    assert loaded.method.kind == "reader" and loaded.step == 8 and loaded.model.config.dropout_rate == 0.1
    with open(tmp_path / "whole" / "metrics.jsonl") as f:
        logged = set().union(*(json.loads(line) for line in f))
    assert {"train/loss", "train/token_accuracy", "train/sequence_accuracy", "dev/loss"} <= logged


@pytest.mark.optimized  # learns over hundreds of steps: compute-bound
def test_tiny_fid_learns_the_toy_task_and_eval_e2e_reads_it(tmp_path, tok_dir):
    write_toy_fid_results(tmp_path / "train.json", 256, seed=0)
    test = write_toy_fid_results(tmp_path / "test.json", 32, seed=1)
    # 1,500 steps of 8 questions: ~10 s of steps on 2 CPU cores (plus compiling); at 600 steps
    # EM@4 was 0.69, at 1,500 1.0 (tiny_fid_config: 1 layer, d_model 32).
    # Grain: this child pytest (``optimized``) then never imports TensorFlow (~4 CPU-s); the
    # subject is FiD, not the input pipeline (Grain's batches equal tf.data's: test_grain).
    over = {"train.num_steps": 1500, "train.checkpoint_every": 1500, "train.log_every": 100,
            "data.pipeline": "grain", "data.grain_threads": 2}
    summary, run = train(tiny_fid_config(tmp_path / "train.json", tok_dir, **over), str(tmp_path / "run"))
    assert summary["data"]["kept"] == 256
    preds = run.method.predict(run, [r["question"] for r in test],
                               [[_ctx(c["id"], c["text"], c["title"]) for c in r["ctxs"]] for r in test], [1, 4])
    em4, _ = qa_scores([p.text for p in preds[4]], [r["answers"] for r in test])
    assert np.mean(em4) >= 0.9
    assert all(p.passage_rank == -1 and p.passage_id is None and p.score <= 0 for p in preds[4])
    # At k = 1 FiD reads the top passage only: right where it holds the code, a guess elsewhere.
    em1, _ = qa_scores([p.text for p in preds[1]], [r["answers"] for r in test])
    top1 = np.asarray([r["ctxs"][0]["has_answer"] for r in test])
    assert 0 < top1.sum() < len(test)
    assert np.mean(np.asarray(em1)[top1]) >= 0.9 and np.mean(np.asarray(em1)[~top1]) <= 0.3
    result = evaluate_e2e([str(tmp_path / "test.json")], str(tmp_path / "run"), ks=(1, 4),
                          out_dir=str(tmp_path / "e2e"), n_resamples=200)
    (per_retriever,) = (tmp_path / "e2e").glob("*/e2e.json")
    saved = json.loads(per_retriever.read_text())
    assert set(saved["em"]) == {"1", "4"} and set(saved["f1"]) == {"1", "4"}
    assert saved["em"]["4"] == pytest.approx(100 * np.mean(em4))  # the same predictions, read again
    assert result["reader_method"] == "fid" and (tmp_path / "e2e" / "e2e.md").exists()


def test_fid_configs_and_the_constant_schedule():
    from configs import fid_demo, fid_nq
    from dense_cf.train.state import make_schedule
    c = fid_nq.get_config()
    assert (c.method, c.fid.n_passages, c.fid.max_len, c.train.global_batch) == ("fid", 100, 250, 64)
    assert fid_demo.get_config().fid.n_passages == 4
    constant = make_schedule(1e-4, 0, 10_000, "constant")
    assert float(constant(0)) == pytest.approx(1e-4) and float(constant(9_999)) == pytest.approx(1e-4)
    warm = make_schedule(1e-4, 10, 100, "constant")
    assert float(warm(5)) == pytest.approx(5e-5) and float(warm(90)) == pytest.approx(1e-4)
    assert float(make_schedule(1e-4, 0, 100)(50)) == pytest.approx(5e-5)   # DPR's linear decay
    with pytest.raises(ValueError, match="optim.decay"):
        make_schedule(1e-4, 0, 100, "cosine")
