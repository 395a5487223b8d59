"""Tiny DCSR run end to end (docs/method.md §4): synthetic data → train (sentence NLL) → sentence export →
Flat index → HasAns passage ranking → the same retrieval report as DPR.

Also: sentence vectors in the export are the encoder outputs at the markers, the
sentence→passage mapping survives export + FAISS (brute force re-ranking gives the same
passages), the extended vocabulary is rebuilt by ``load_run``, AAR fails with a clear message.
"""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest
from helpers import tiny_synthetic_config

from dense_cf.inputs import dpr as dpr_inputs
from dense_cf.inputs import tokens
from dense_cf.models.tokenizer import SENT_TOKEN
from dense_cf.synthetic import generate as synthetic


def _config(data_dir):
    return tiny_synthetic_config(data_dir, **{
        "method": "dcsr", "loss.lam": 0.0, "loss.tau1": 0.0, "loss.tau2": 0.0,
        "train.num_steps": 3, "eval.after_training": True})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate as train
    data_dir = tmp_path_factory.mktemp("synth")
    synthetic.generate(str(data_dir), num_passages=200, seed=1)
    workdir = str(tmp_path_factory.mktemp("run"))
    summary = train(_config(data_dir), workdir)
    summary.pop("run")
    return workdir, summary


@pytest.fixture(scope="module")
def run(trained):
    from dense_cf.train.run import load_run
    return load_run(trained[0])


def test_train_and_report(trained):
    workdir, summary = trained
    assert np.isfinite(summary["train"]["train/loss"])
    assert summary["data"]["mean_sentences_per_passage"] > 1
    ret = summary["eval"]["retrieval"]
    assert ret["method"] == "dcsr" and ret["unit"] == "sentence"
    assert ret["corpus_size"] == 200 and ret["n_questions"] > 0 and set(ret["top_k"]) == {1, 5, 20}
    assert ret["sentences"] > ret["corpus_size"]
    assert ret["sentences_retrieved"] == int(np.ceil(20 * ret["mean_sentences_per_passage"]))
    # AAR is defined over passage vectors: a sentence-unit method's evaluations leave it out.
    assert set(summary["eval"]) == {"retrieval", "wall_s"}
    out = os.path.join(workdir, "eval", "step_3")
    results = json.load(open(os.path.join(out, "retrieval.json")))
    assert len(results) == ret["n_questions"]
    for r in results:
        ids = [c["id"] for c in r["ctxs"]]
        assert len(ids) == 20 and len(set(ids)) == 20            # passages, not sentences
        scores = [float(c["score"]) for c in r["ctxs"]]
        assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    top20 = 100 * np.mean([any(c["has_answer"] for c in r["ctxs"]) for r in results])
    assert top20 == pytest.approx(ret["top_k"][20])
    for name in ("run.trec", "qrels.trec", "report.json", "report.md"):
        assert os.path.exists(os.path.join(out, name))


def test_load_run_rebuilds_the_extended_vocabulary(trained, run):
    from dense_cf.models.tokenizer import SENT_TOKEN
    workdir, _ = trained
    assert os.path.exists(os.path.join(workdir, "tokenizer", "tokenizer.json"))
    sent_id = run.tokenizer.token_to_id(SENT_TOKEN)
    assert sent_id == 30522 and run.model.config.vocab_size == 30523
    emb = run.params["passage"]["embeddings"]["word_embeddings"]["embedding"]
    assert emb.shape[0] == 30523


def test_export_vectors_are_marker_outputs_and_map_to_passages(trained, run):
    from dense_cf.retrieval import export
    from dense_cf.retrieval.corpus import load_corpus, load_qa
    from dense_cf.retrieval.sentence_ranking import rank_passages
    workdir, summary = trained
    exp = os.path.join(workdir, "export", "step_3")
    emb = export.load_embeddings(exp)
    spid = export.load_sentence_passages(exp)
    corpus = load_corpus(os.path.join(run.config.data.data_dir, "psgs_synth.tsv"))
    assert export.load_passage_ids(exp) == corpus.ids
    assert len(spid) == len(emb) and np.all(np.diff(spid) >= 0)
    assert set(spid.tolist()) == set(range(len(corpus)))      # every passage is indexed
    # The exported rows of passages 0..2 are the passage tower's outputs at their markers.
    tok = tokens.tokenize_marked_passages(run.tokenizer, corpus.titles[:3], corpus.texts[:3], sent_token=SENT_TOKEN,
                                 max_len=run.config.data.max_p_len, max_sents=32)
    want = run.model.apply({"params": run.params}, tok["ids"], tok["mask"], tok["positions"],
                           method=run.model.encode_passage_at)
    for p in range(3):
        got = emb[spid == p]
        np.testing.assert_allclose(got, np.asarray(want[p])[tok["valid"][p]], rtol=1e-4, atol=1e-4)
    # Brute-force sentence scores → HasAns re-ranking gives the passages in retrieval.json.
    questions, _ = load_qa(os.path.join(run.config.data.data_dir, run.config.data.test_file))
    q = export.encode_questions(run, questions)
    n = summary["eval"]["retrieval"]["sentences_retrieved"]
    scores = q @ emb.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :n]
    p_rows, vals = rank_passages(np.take_along_axis(scores, order, 1), order, spid, 20)
    results = json.load(open(os.path.join(workdir, "eval", "step_3", "retrieval.json")))
    for i, r in enumerate(results):
        np.testing.assert_allclose([float(c["score"]) for c in r["ctxs"]], vals[i], rtol=1e-4, atol=1e-6)
        assert r["ctxs"][0]["id"] == corpus.ids[p_rows[i][0]] or np.isclose(vals[i][0], vals[i][1])


def test_embed_fn_gathers_marker_vectors(trained, run):
    from dense_cf.inputs import dcsr
    from dense_cf.losses import contrastive_loss
    from dense_cf.methods.dcsr import embed_sentences
    split = dpr_inputs.load_config_split(run.config, run.tokenizer, "train_file")
    data = dcsr.prepare(run.config, run.tokenizer, split)
    spec = dcsr.spec_from_config(run.config, run.tokenizer)
    batch = {k: jax.numpy.asarray(v) for k, v in next(dcsr.BatchIterator(data, spec)).items()}
    emb = jax.jit(lambda p, b: embed_sentences(run.model, p, b, deterministic=True))(
        run.params, batch)
    q, pos, hard = emb.q, emb.pos, emb.neg
    assert emb.cf is None and hard.shape == (8, 2, 32) and pos.shape == (8, 32)
    at_fn = jax.jit(lambda p, ids, mask, where: run.model.apply(
        {"params": p}, ids, mask, where, method=run.model.encode_passage_at))
    at = at_fn(run.params, batch["pos_ids"], batch["pos_mask"], batch["pos_pos"][:, None])[:, 0]
    np.testing.assert_allclose(pos, at, rtol=1e-4, atol=1e-5)
    i = int(np.flatnonzero(np.asarray(batch["neg_src"][:, 1]) == 1)[0])  # a BM25 sentence
    h = at_fn(run.params, batch["hard_ids"][i], batch["hard_mask"][i],
              batch["neg_pos"][i, 1][None, None])
    np.testing.assert_allclose(hard[i, 1], h[0, 0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(emb.neg_valid, batch["neg_valid"])
    loss, metrics = contrastive_loss(q, pos, hard, batch["neg_valid"], None, None)
    assert np.isfinite(float(loss)) and float(loss) > 0
    # model.normalize: training's sentence vectors are the export's, unit norm like q.
    unit = run.model.clone(normalize=True)
    emb_u = jax.jit(lambda p, b: embed_sentences(unit, p, b, deterministic=True))(run.params, batch)
    at_u = jax.jit(lambda p, ids, mask, where: unit.apply(
        {"params": p}, ids, mask, where, method=unit.encode_passage_at))(
        run.params, batch["pos_ids"], batch["pos_mask"], batch["pos_pos"][:, None])[:, 0]
    np.testing.assert_allclose(emb_u.pos, at_u, rtol=1e-4, atol=1e-5)
    for v in (emb_u.q, emb_u.pos, emb_u.neg.reshape(-1, 32)):
        np.testing.assert_allclose(np.linalg.norm(v, axis=-1), 1.0, rtol=1e-5)


def test_retrieval_binary_reuses_export_and_aar_fails_clearly(trained, run):
    from dense_cf.eval.aar import evaluate_aar
    from dense_cf.eval.retrieval import evaluate_run
    workdir, summary = trained
    again = evaluate_run(workdir, run=run)   # what `python -m dense_cf.cli.eval_retrieval` runs
    assert again["timing"]["encoded_this_run"] == 0 and again["timing"]["index_reused"]
    assert again["top_k"] == summary["eval"]["retrieval"]["top_k"]
    with pytest.raises(NotImplementedError, match="sentence-level run"):
        evaluate_aar(workdir, run=run)


def test_localisation_binary(trained, run):
    # Every gold record is scored or counted; the rate lies in its Wilson interval; chance is
    # answer sentences / sentences; a passage-unit run is refused.
    from dense_cf.cli import eval_localisation
    from dense_cf.eval.localisation import localisation
    workdir, _ = trained
    res = eval_localisation.run_cli(["--workdir", workdir])
    assert res["records"] > 0 and res["scored"] + res["no_answer_sentence"] == res["records"]
    lo, hi = res["top_sentence_is_answer_ci"]
    assert lo <= res["top_sentence_is_answer"] <= hi and 0 < res["chance"] <= 100
    assert -1 <= res["mean_sentence_cosine"] <= 1 + 1e-6
    saved = json.load(open(os.path.join(workdir, "eval", f"step_{run.step}", "localisation.json")))
    assert saved["scored"] == res["scored"]
    with pytest.raises(ValueError, match="sentence-unit"):
        cfg = run.config.copy_and_resolve_references()
        cfg.method = "dpr"
        # method=None: the Run resolves the method from its config again (it carries it).
        localisation(dataclasses.replace(run, config=cfg, method=None), [], [])
