"""EADPR pseudo-evidence (docs/method.md §2 `evidence`, EADPR §3.1): candidates, selection, scorers, the
annotation command (resume, skips, index agreement with the pipeline) and training on its output."""

import json
import os

import jax
import numpy as np
import pytest
from helpers import write_tiny_t5_tokenizer

from dense_cf import methods
from dense_cf.cli import evidence as evidence_cli
from dense_cf.datasets import evidence_file
from dense_cf.datasets.formats import BiencoderExample, Passage, write_biencoder
from dense_cf.mining.evidence import annotate as ev
from dense_cf.mining.evidence import candidates as cand
from dense_cf.mining.evidence.scorer import DenseSimilarityScorer, QAItem, QAScorer, T5Scorer
from dense_cf.text.sentences import split_sentences

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "t5_tiny")
TEXT = ("Pelgate is a town on the Arno river. It was founded by Marcus Vell in 1820. "
        "The town is known for its stone bridge.")


class KeywordScorer(QAScorer):
    """Fake QA model: confident (1) when the answer string is in the context, else 0; a tiny
    bonus per context word keeps ties rare. Counts calls and items; can fail on call k."""

    name = "keyword"

    def __init__(self, fail_on_call: int | None = None):
        self.calls, self.items, self.fail_on_call = 0, [], fail_on_call

    def score(self, items):
        self.calls += 1
        if self.fail_on_call is not None and self.calls == self.fail_on_call:
            raise KeyboardInterrupt("simulated interruption")
        self.items.extend(items)
        return np.asarray([float(it.answer.lower() in it.context.lower()) + 1e-3 * len(it.context.split())
                           for it in items])


# ------------------------------------------------------------------ candidates and selection

def test_leave_one_out_matches_pipeline_sentence_ids():
    spans = split_sentences(TEXT)
    assert len(spans) == 3
    cands = cand.leave_one_out(TEXT)
    assert cands == [" ".join(TEXT[s:e] for j, (s, e) in enumerate(spans) if j != i) for i in range(3)]
    assert "Marcus Vell" not in cands[1] and "Marcus Vell" in cands[0] and "Marcus Vell" in cands[2]


def test_plan_skips_and_answer_order():
    assert cand.plan_example("q", [], TEXT) == cand.SKIP_NO_ANSWERS
    assert cand.plan_example("q", ["  "], TEXT) == cand.SKIP_NO_ANSWERS
    assert cand.plan_example("q", ["x"], "   ") == cand.SKIP_EMPTY_TEXT
    assert cand.plan_example("q", ["x"], "Only one sentence here.") == cand.SKIP_SINGLE_SENTENCE
    plan = cand.plan_example("who founded pelgate?", ["Mark Vell", "Marcus Vell", "marcus vell", "M. Vell"], TEXT,
                             max_answers=2)
    # passage matches first (DPR normalisation makes "marcus vell" a match too), duplicates kept
    # apart only by exact text, then dataset order; at most max_answers
    assert plan.answers == ("Marcus Vell", "marcus vell") and plan.answer_in_passage
    assert plan.num_sentences == 3 and plan.answer_sentences == (1,)
    plan = cand.plan_example("q", ["Rome"], TEXT, max_answers=3)
    assert plan.answers == ("Rome",) and not plan.answer_in_passage


def test_select_lowest_confidence():
    grid = np.asarray([[0.2, 0.9], [0.1, 0.3], [0.5, 0.4]])  # [candidates, answers]
    conf = cand.candidate_confidence(grid)
    np.testing.assert_allclose(conf, [0.9, 0.3, 0.5])          # best answer per candidate
    assert cand.select_lowest(conf) == 1
    assert cand.select_lowest([0.4, 0.1, 0.1]) == 1             # ties: earliest sentence
    with pytest.raises(ValueError, match="NaN"):
        cand.select_lowest([0.1, float("nan")])


# ------------------------------------------------------------------ scorers

def _tiny_t5_tokenizer(path):
    """A T5-style tokenizer whose ids fit the tiny model (vocabulary <= 96)."""
    n = write_tiny_t5_tokenizer(path, "who what the of is in by a was town river founded bridge".split())
    assert n <= 96


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    import shutil
    d = tmp_path_factory.mktemp("t5") / "model"
    shutil.copytree(os.path.join(FIXTURES, "v1_0"), d)
    _tiny_t5_tokenizer(d / "tokenizer.json")
    return str(d)


ITEMS = [QAItem("who founded pelgate?", "Marcus Vell", c) for c in cand.leave_one_out(TEXT)] + [
    QAItem("what is in the town?", "a stone bridge", TEXT), QAItem("q", "x", "short.")]


def test_t5_scorer_batching_and_format(t5_dir):
    s = T5Scorer.from_pretrained(t5_dir, batch_size=4, len_multiple=64)  # one compiled shape
    x, y = s.encode(ITEMS[:1])
    # UnifiedQA input "question \n context" (literal backslash-n), lower-cased, ending in </s>
    text = s.tokenizer.decode(x[0])
    assert text.startswith("who founded pelgate? \\n it was founded by marcus") and x[0][-1] == 1 and y[0][-1] == 1
    batched = s.score(ITEMS)
    one_by_one = np.concatenate([s.score([it]) for it in ITEMS])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    # = the model's mean answer log-likelihood on the unpadded pair
    xs, ys = s.encode(ITEMS)
    total, mean = s._fn(s.params, np.asarray([xs[0]]), np.ones((1, len(xs[0])), np.int32), np.asarray([ys[0]]))
    np.testing.assert_allclose(batched[0], mean[0], atol=1e-5)
    s_total = T5Scorer(s.model, s.params, s.tokenizer, batch_size=4, len_multiple=64, length_norm=False)
    np.testing.assert_allclose(s_total.score(ITEMS[:1]), total, atol=1e-5)
    # truncation keeps the closing </s>
    s_short = T5Scorer(s.model, s.params, s.tokenizer, max_input_len=10, max_answer_len=3)
    x, y = s_short.encode(ITEMS[:1])
    assert len(x[0]) == 10 and x[0][-1] == 1 and len(y[0]) == 3 and y[0][-1] == 1


@pytest.fixture(scope="module")
def tiny_dense():
    from dense_cf.models.bert import BertConfig, BertEncoder
    from dense_cf.models.hf import resolve_model_dir
    from dense_cf.models.tokenizer import load_tokenizer
    tok = load_tokenizer(resolve_model_dir("minilm"))
    cfg = BertConfig.tiny(vocab_size=tok.get_vocab_size(), hidden=32, layers=1, heads=2,
                          max_position_embeddings=128)
    enc = BertEncoder(cfg)
    ids = np.ones((1, 4), np.int32)
    params = jax.jit(lambda r: enc.init(r, ids, ids))(jax.random.key(0))["params"]
    return enc, params, tok


def test_dense_scorer_batching_is_invisible(tiny_dense):
    enc, params, tok = tiny_dense
    s = DenseSimilarityScorer(enc, params, tok, batch_size=4, len_multiple=16, max_len=128)
    batched = s.score(ITEMS)
    one_by_one = np.concatenate([s.score([it]) for it in ITEMS])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    wide = DenseSimilarityScorer(enc, params, tok, batch_size=2, len_multiple=64, max_len=128)
    np.testing.assert_allclose(wide.score(ITEMS), batched, atol=1e-5)  # padding invariance
    assert s.score([]).shape == (0,)
    # answer gain = cos(q + a, c) - cos(q, c); "qa" mode is the first term, a cosine
    qa = DenseSimilarityScorer(enc, params, tok, batch_size=4, len_multiple=16, max_len=128, mode="qa")
    with_answer = qa.score(ITEMS)
    question_only = qa.score([QAItem(it.question, "", it.context) for it in ITEMS])
    assert np.all(np.abs(with_answer) <= 1 + 1e-6)
    np.testing.assert_allclose(batched, with_answer - question_only, atol=1e-5)


# ------------------------------------------------------------------ the annotation command

def _examples():
    exs = []
    for i in range(10):
        text = (f"Tower {i} stands in the town of Brem. It was built by Anna Holt in {1800 + i}. "
                f"It is tall and grey.")
        exs.append(BiencoderExample(f"when was tower {i} built?", [str(1800 + i)],
                                    [Passage(f"Tower {i}", text)], [],
                                    [Passage(f"Tower {i + 1}", f"The tower {i + 1} is old. It is red.")]))
    exs[3] = BiencoderExample("a one sentence positive?", ["Brem"], [Passage("T", "Brem is a town.")], [], [])
    exs[6] = BiencoderExample("no answers?", [], exs[6].positive_ctxs, [], [])
    return exs


def _write_with_bad_records(path, exs):
    """Biencoder JSON with two records the reader skips: pipeline indices != file positions."""
    recs = [e.__dict__ | {"positive_ctxs": [p.__dict__ for p in e.positive_ctxs],
                          "hard_negative_ctxs": [p.__dict__ for p in e.hard_negative_ctxs]} for e in exs]
    recs.insert(2, {"question": "", "answers": ["x"], "positive_ctxs": [{"title": "t", "text": "x. y."}]})
    recs.insert(5, {"question": "empty positives", "answers": ["x"], "positive_ctxs": []})
    with open(path, "w") as f:
        json.dump(recs, f)


def _records(path):
    return {r["index"]: r for r in map(json.loads, open(path).read().splitlines())}


def test_annotate_picks_the_lowest_confidence_span(tmp_path):
    inp, out = str(tmp_path / "b.json"), str(tmp_path / "e.jsonl")
    write_biencoder(inp, _examples())
    stats = ev.annotate(inp, out, KeywordScorer(), chunk_examples=4)
    recs = _records(out)
    assert sorted(recs) == list(range(10))
    for i, r in recs.items():
        assert r["question"] == _examples()[i].question and r["source"] == "b.json"
    assert recs[3]["sentence"] == -1 and recs[3]["skip"] == "single_sentence"
    assert recs[6]["sentence"] == -1 and recs[6]["skip"] == "no_answers"
    for i in set(range(10)) - {3, 6}:  # the year sentence is the evidence
        assert recs[i]["sentence"] == 1 and recs[i]["n_sentences"] == 3
        assert recs[i]["scores"][1] == min(recs[i]["scores"])
    assert stats.annotated == 8 and stats.skipped == {"single_sentence": 1, "no_answers": 1,
                                                      "bad_records_in_input": 0}
    assert stats.candidates_scored == 8 * 3 and stats.chose_answer_sentence == 8


def test_resume_after_interruption_and_torn_line(tmp_path):
    inp = str(tmp_path / "b.json")
    write_biencoder(inp, _examples())
    ref = str(tmp_path / "ref.jsonl")
    ev.annotate(inp, ref, KeywordScorer(), chunk_examples=3)
    out = str(tmp_path / "e.jsonl")
    with pytest.raises(KeyboardInterrupt):
        ev.annotate(inp, out, KeywordScorer(fail_on_call=2), chunk_examples=3)
    assert sorted(_records(out)) == [0, 1, 2]          # the first chunk reached the disk
    with open(out, "a") as f:
        f.write('{"index": 3, "sente')                 # a crash in the middle of a line
    scorer = KeywordScorer()
    stats = ev.annotate(inp, out, scorer, chunk_examples=3)
    assert stats.already_done == 3 and stats.examples == 10
    assert {it.question for it in scorer.items} == {e.question for e in _examples()[3:]
                                                   if e.answers and e.question != "a one sentence positive?"}
    assert _records(out) == _records(ref)
    again = ev.annotate(inp, out, KeywordScorer(), chunk_examples=3)   # nothing left to do
    assert again.already_done == 10 and again.annotated == 0
    # a different input under the same name must not be silently mixed in
    exs = _examples()
    exs[1] = BiencoderExample("a changed question?", ["1801"], exs[1].positive_ctxs, [], [])
    write_biencoder(inp, exs)
    with pytest.raises(ValueError, match="example 1 was annotated for question"):
        ev.annotate(inp, out, KeywordScorer())


def test_indices_agree_with_the_pipeline(tmp_path):
    """Bad records are skipped by both sides; the pipeline applies the sentence to the right
    example, checks questions, and ignores annotations of another file."""
    from dense_cf.inputs import dpr as pipeline
    from dense_cf.models.hf import resolve_model_dir
    from dense_cf.models.tokenizer import load_tokenizer
    tok = load_tokenizer(resolve_model_dir("minilm"))
    inp, out = str(tmp_path / "biencoder-train.json"), str(tmp_path / "e.jsonl")
    exs = _examples()
    _write_with_bad_records(inp, exs)
    ev.annotate(inp, out, KeywordScorer())
    recs = _records(out)
    assert sorted(recs) == list(range(10))             # pipeline numbering: bad records excluded
    kw = dict(cache_dir=None, max_q_len=16, max_p_len=32, max_hard=1)
    data = pipeline.load_biencoder_split(inp, tok, evidence_file=out, **kw)
    assert data.num_examples == 10
    np.testing.assert_array_equal(data.evidence_sent, [recs[i]["sentence"] for i in range(10)])
    assert data.stats["evidence_sentence"] == 8 and data.stats["evidence_no_span"] == 2
    # the dropped tokens are exactly the chosen sentence of that example
    spec = pipeline.PipelineSpec(global_batch=10, max_q_len=16, max_p_len=32, strategy="evidence",
                                 shuffle=False, sep_id=tok.token_to_id("[SEP]"))
    batch = next(pipeline.make_dataset(data, spec, repeat=False).as_numpy_iterator())
    np.testing.assert_array_equal(batch["cf_valid"], [recs[i]["sentence"] >= 0 for i in range(10)])
    cf_text = tok.decode(batch["cf_ids"][0].tolist())
    assert "1800" not in cf_text and "brem" in cf_text and "tall" in cf_text
    # annotations of another file (e.g. train's, when the dev split loads) are not applied
    dev = str(tmp_path / "biencoder-dev.json")
    write_biencoder(dev, exs[:4])
    dev_data = pipeline.load_biencoder_split(dev, tok, evidence_file=out, **kw)
    assert (dev_data.evidence_sent == -1).all() and dev_data.stats["evidence_other_source"] == 10
    # same file name, different content: refuse
    other = tmp_path / "x"
    other.mkdir()
    exs2 = list(reversed(exs))
    write_biencoder(str(other / "biencoder-train.json"), exs2)
    with pytest.raises(ValueError, match="different \\(or changed\\) biencoder file"):
        pipeline.load_biencoder_split(str(other / "biencoder-train.json"), tok, evidence_file=out, **kw)


def test_cli_with_minilm_then_training_on_the_evidence_strategy(tmp_path, capsys):
    """Offline end to end: MiniLM scorer CLI → JSONL → EADPR training with `evidence` p*."""
    from helpers import apply_overrides

    from dense_cf.configs.base import base_config
    from dense_cf.experiment import train_and_evaluate as train
    d = tmp_path / "data"
    d.mkdir()
    exs = []
    for i in range(16):
        text = (f"Tower {i} stands in the town of Brem. It was built by Anna Holt in {1800 + i}. "
                f"It is tall and grey.")
        exs.append(BiencoderExample(f"when was tower {i} built?", [str(1800 + i)], [Passage(f"Tower {i}", text)],
                                    [], [Passage(f"Tower {i + 1}", f"The tower {i + 1} is old. It is red.")]))
    write_biencoder(str(d / "train.json"), exs)
    write_biencoder(str(d / "dev.json"), exs[:8])
    out = str(d / "train.evidence.jsonl")
    summary = evidence_cli.run_cli(["--input", str(d / "train.json"), "--output", out,
                                    "--scorer", "minilm", "--batch_size", "16",
                                    "--max_examples", "12"])
    assert json.loads(capsys.readouterr().out)["records_in_output"] == 12
    assert summary["annotated"] == 12 and summary["new_examples_per_s"] > 0
    recs = _records(out)
    # Which sentence MiniLM removes is the scorer's call (a similarity proxy, not a QA model);
    # the record must follow its scores.
    for r in recs.values():
        assert r["n_sentences"] == 3 and r["sentence"] == int(np.argmin(r["scores"]))
    c = base_config()
    c.method = "eadpr"
    over = {"model.name_or_path": "tiny", "model.tiny_hidden": 32, "model.tiny_layers": 1, "model.tiny_heads": 2,
            "data.data_dir": str(d), "data.train_file": "train.json", "data.dev_file": "dev.json",
            "data.max_q_len": 12, "data.max_p_len": 24, "data.counterfactual": "evidence",
            "data.evidence_file": out, "loss.lam": 1.0, "loss.tau1": 1.0, "loss.tau2": 1.0,
            "train.global_batch": 8, "train.num_steps": 1, "train.log_every": 1, "train.checkpoint_every": 1,
            "train.eval_every": 0, "optim.warmup_steps": 1, "mesh.data": 4, "mesh.model": 2}
    result = train(apply_overrides(c, over), str(tmp_path / "run"))
    metrics = {k.split("/")[-1]: v for k, v in result["train"].items()}
    assert result["step"] == 1 and np.isfinite(metrics["loss"])
    assert metrics["l_chn"] > 0  # counterfactuals from the evidence file are in the batch
    assert result["data"]["evidence_sentence"] == 12 and result["data"]["evidence_missing"] == 4


def test_shards_concatenate_to_the_full_annotation(tmp_path):
    inp = str(tmp_path / "b.json")
    write_biencoder(inp, _examples())
    ev.annotate(inp, str(tmp_path / "full.jsonl"), KeywordScorer())
    parts = [str(tmp_path / f"part-{k}.jsonl") for k in range(3)]
    for k, part in enumerate(parts):
        stats = ev.annotate(inp, part, KeywordScorer(), num_shards=3, shard_id=k)
        assert stats.examples == len(range(k, 10, 3))
    merged = {}
    for part in parts:
        merged.update(_records(part))
    assert merged == _records(str(tmp_path / "full.jsonl"))


def test_eadpr_config_gold_and_pseudo():
    from configs import eadpr_nq as mod
    gold = mod.get_config()
    assert gold.data.counterfactual == "sentence" and gold.data.evidence_file == ""
    pseudo = mod.get_config("pseudo")
    hp = methods.get(pseudo.method).loss_hparams(pseudo.loss)
    assert pseudo.data.counterfactual == "evidence" and (hp["lam"], hp["tau1"]) == (1.0, 1.0)
    pseudo.data.data_dir = "/somewhere"   # the default evidence file follows data_dir
    assert pseudo.data.evidence_file == "/somewhere/biencoder-nq-train.evidence.jsonl"
    with pytest.raises(ValueError, match="gold' or 'pseudo"):
        mod.get_config("silver")


def test_reader_legacy_records_and_errors(tmp_path):
    inp = str(tmp_path / "b.json")
    write_biencoder(inp, _examples()[:3])
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_text('{"index": 0, "sentence": 2}\n\n{"index": 2, "sentence": -1}\n')
    m = evidence_file.EvidenceMatcher(str(legacy), inp)       # no question/source: trusted by index
    assert m.sentences == {0: 2}
    assert [e.question for e in m.wrap(_examples()[:3])] == [e.question for e in _examples()[:3]]
    assert m.stats() == {"evidence_sentence": 1, "evidence_no_span": 1, "evidence_missing": 1,
                         "evidence_beyond_examples": 0, "evidence_other_source": 0}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"index": 0, "sentence": 2}\n{"index": "x"}\n{"index": 1, "sentence": 0}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 2: field 'index': bad evidence record"):
        evidence_file.read_evidence(str(bad))
    with pytest.raises(FileNotFoundError, match="python -m dense_cf.cli.evidence"):
        evidence_file.EvidenceMatcher(str(tmp_path / "missing.jsonl"), inp)


def test_cli_with_a_t5_checkpoint_directory(tmp_path, t5_dir, capsys):
    inp, out = str(tmp_path / "b.json"), str(tmp_path / "e.jsonl")
    write_biencoder(inp, _examples()[:5])
    summary = evidence_cli.run_cli(["--input", inp, "--output", out, "--scorer", f"t5:{t5_dir}",
                                    "--batch_size", "8", "--max_answers", "2"])
    assert summary["scorer"] == f"t5:{t5_dir}" and summary["annotated"] == 4
    assert summary["skipped"]["single_sentence"] == 1
    for r in _records(out).values():  # log-likelihoods of a random model: finite, <= 0
        assert r["sentence"] == -1 or (r["sentence"] == int(np.argmin(r["scores"])) and max(r["scores"]) <= 0)
