"""A tiny end-to-end evaluation: synthetic benchmark → train → export → Flat index → top-k/MRR + AAR.

Also: export resume after an interruption, Flat search equal to brute-force numpy, and the two
binaries run from the command line on the trained run.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import tiny_synthetic_config, xla_flags

from dense_cf.synthetic import generate as synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(data_dir):
    return tiny_synthetic_config(data_dir, **{"train.num_steps": 3, "eval.after_training": True})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate as train
    data_dir = tmp_path_factory.mktemp("synth")
    synthetic.generate(str(data_dir), num_passages=300, seed=1)
    workdir = str(tmp_path_factory.mktemp("run"))
    summary = train(_config(data_dir), workdir)
    return workdir, summary


def test_end_to_end_reports(trained):
    workdir, summary = trained
    ret = summary["eval"]["retrieval"]
    assert ret["corpus_size"] == 300 and ret["n_questions"] > 0
    assert not ret["timing"]["index_reused"]
    assert set(ret["top_k"]) == {1, 5, 20}
    assert 0.0 <= ret["top_k"][1] <= ret["top_k"][5] <= ret["top_k"][20] <= 100.0
    out = os.path.join(workdir, "eval", "step_3")
    results = json.load(open(os.path.join(out, "retrieval.json")))
    assert len(results) == ret["n_questions"]
    first = results[0]
    assert set(first) == {"question", "answers", "ctxs"} and len(first["ctxs"]) == 20
    assert set(first["ctxs"][0]) == {"id", "title", "text", "score", "has_answer"}
    # Top-20 accuracy recomputed from the result file's has_answer flags.
    top20 = 100 * np.mean([any(c["has_answer"] for c in r["ctxs"][:20]) for r in results])
    assert top20 == pytest.approx(ret["top_k"][20])
    trec = open(os.path.join(out, "run.trec")).read().splitlines()
    assert len(trec) == 20 * len(results) and trec[0].split()[1] == "Q0"
    aar = summary["eval"]["aar"]["strategies"]
    assert set(aar) == {"sentence", "answer"}
    gold_records = summary["eval"]["aar"]["triplet_stats"]["gold_records"]
    assert summary["eval"]["aar"]["triplet_stats"]["join_mode"] == "position"
    for e in aar.values():
        assert e["triplets"] > 0 and 0.0 <= e["aar"] <= 1.0
        assert e["triplet_fates"]["scored"] == e["triplets"]
        assert sum(e["triplet_fates"].values()) == gold_records  # none leaves uncounted
        assert e["score_diff"]["all"]["count"] == e["triplets"]
    assert os.path.getsize(os.path.join(out, "aar_hist.png")) > 1000
    assert os.path.exists(os.path.join(out, "report.md")) and os.path.exists(os.path.join(out, "aar.md"))
    # The demo's stage table reads a real run's summary: every stage it names has its time.
    from dense_cf.demo import stage_rows
    rows = {r["stage"]: r["seconds"] for r in stage_rows({"picl": summary}, [], wall=1e6)}
    assert list(rows)[:4] == ["picl: training (3 steps)", "picl: retrieval export",
                              "picl: retrieval index + search + report", "picl: AAR"]
    # Times are rounded to 0.1 s, and on a fast machine the 300-passage search rounds to 0.0:
    # every stage has a time; training (a compile and 3 steps) is never below 0.1 s.
    assert all(isinstance(rows[k], float) and rows[k] >= 0 for k in list(rows)[:4])
    assert rows["picl: training (3 steps)"] > 0


def test_flat_search_equals_brute_force(trained):
    from dense_cf.retrieval import export
    from dense_cf.retrieval.corpus import load_qa
    from dense_cf.train.run import load_run
    workdir, _ = trained
    run = load_run(workdir)
    emb = export.load_embeddings(os.path.join(workdir, "export", "step_3"))
    pids = export.load_passage_ids(os.path.join(workdir, "export", "step_3"))
    questions, _ = load_qa(os.path.join(run.config.data.data_dir, run.config.data.test_file))
    q = export.encode_questions(run, questions)
    scores = q @ emb.T
    results = json.load(open(os.path.join(workdir, "eval", "step_3", "retrieval.json")))
    for i, r in enumerate(results):
        got = np.array([float(c["score"]) for c in r["ctxs"]])
        want = np.sort(scores[i])[::-1][:20]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        # The top passage is the brute-force argmax (ids map back through the export).
        assert r["ctxs"][0]["id"] == pids[int(np.argmax(scores[i]))] or \
            np.isclose(np.sort(scores[i])[-1], np.sort(scores[i])[-2], atol=1e-5)


def test_export_resumes_after_interruption(trained, tmp_path):
    from dense_cf.retrieval import export
    from dense_cf.retrieval.corpus import load_corpus
    from dense_cf.train.run import load_run
    workdir, _ = trained
    run = load_run(workdir)
    corpus = load_corpus(os.path.join(run.config.data.data_dir, "psgs_synth.tsv"))
    out = str(tmp_path / "exp")
    full = export.export_passages(run, corpus.rows(), out, shard_size=100, dtype="float32")
    assert full["count"] == 300 and len(full["shards"]) == 3
    before = export.load_embeddings(out)
    # Simulate a crash: the last shard was never finalised, another left a temp file behind.
    os.remove(os.path.join(out, "embeddings-00002.npy"))
    os.remove(os.path.join(out, "manifest.json"))
    again = export.export_passages(run, corpus.rows(), out, shard_size=100, dtype="float32")
    assert again["encoded_this_run"] == 100 and again["skipped_done"] == 200
    np.testing.assert_array_equal(export.load_embeddings(out), before)
    assert export.load_passage_ids(out) == corpus.ids


def test_binaries_from_the_command_line(trained):
    workdir, summary = trained
    env = dict(os.environ, XLA_FLAGS=xla_flags(2))
    r = subprocess.run([sys.executable, "-m", "dense_cf.cli.eval_retrieval",
                        f"--workdir={workdir}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout[r.stdout.index("{"):])
    # The export and index were reused, and the numbers are the same as after training.
    assert out["timing"]["encoded_this_run"] == 0 and out["timing"]["index_reused"]
    assert out["top_k"] == {str(k): v for k, v in summary["eval"]["retrieval"]["top_k"].items()}
    # The binary says where it wrote (stderr; stdout stays JSON).
    eval_dir = os.path.join(os.path.abspath(workdir), "eval", "step_3")
    assert out["out_dir"] == eval_dir and f"reports written to {eval_dir}" in r.stderr
    # The documented library command (an alias of dense_cf.cli.eval_aar) keeps working.
    r = subprocess.run([sys.executable, "-m", "dense_cf.eval.aar", f"--workdir={workdir}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert out["sentence"]["aar"] == pytest.approx(summary["eval"]["aar"]["strategies"]["sentence"]["aar"])
    assert f"reports written to {eval_dir}" in r.stderr


def test_other_corpus_gets_its_own_export_and_report(trained, tmp_path):
    """Evaluating on another corpus (here: the run's corpus plus extra passages) exports it into
    its own directory and leaves the run's own export, index and report untouched."""
    from dense_cf.eval.retrieval import evaluate_run
    from dense_cf.retrieval.corpus import load_corpus
    from dense_cf.train.run import load_run
    workdir, summary = trained
    run = load_run(workdir)
    own = os.path.join(run.config.data.data_dir, run.config.data.corpus_file)
    manifest = os.path.join(workdir, "export", "step_3", "manifest.json")
    report = os.path.join(workdir, "eval", "step_3", "report.json")
    before = (open(manifest).read(), open(report).read())
    other = tmp_path / "bigger.tsv"
    lines = open(own).read().splitlines()
    extra = [f"x{i}\tAn unrelated passage number {i} about nothing.\tFiller {i}" for i in range(40)]
    other.write_text("\n".join(lines + extra) + "\n")
    rep = evaluate_run(workdir, corpus_path=str(other), run=run)
    assert rep["corpus_size"] == len(load_corpus(own)) + 40
    assert rep["timing"]["encoded_this_run"] == rep["corpus_size"]
    roots = os.listdir(os.path.join(workdir, "corpora"))
    assert len(roots) == 1 and roots[0].startswith("bigger-")
    root = os.path.join(workdir, "corpora", roots[0])
    assert os.path.exists(os.path.join(root, "export", "step_3", "manifest.json"))
    assert os.path.exists(os.path.join(root, "eval", "step_3", "report.json"))
    assert rep["out_dir"] == os.path.join(os.path.abspath(root), "eval", "step_3")
    assert (open(manifest).read(), open(report).read()) == before
    # Again: the other corpus' export and index are reused.
    again = evaluate_run(workdir, corpus_path=str(other), run=run)
    assert again["timing"]["encoded_this_run"] == 0 and again["timing"]["index_reused"]
    assert again["top_k"] == rep["top_k"]


class _LengthEncoder:
    """Stand-in encoder: q = (1, 0), p = (number of word pieces, 1); sim(q, p) = length."""

    def questions(self, ids, mask):
        return np.tile(np.array([1.0, 0.0], np.float32), (len(ids), 1))

    def passages(self, ids, mask):
        return np.stack([mask.sum(1).astype(np.float32), np.ones(len(ids), np.float32)], 1)


def test_aar_counts_every_gold_record_by_reason(tmp_path, caplog):
    """Issue 19: three questions share one text ("Where was John Smith born?"), the qa file is in
    another order, one gold record has no qa partner, one is malformed, and the others are lost
    for an answer not in the context, one beyond max_p_len, and (sentence only) no p*."""
    import types

    from dense_cf.configs.base import base_config
    from dense_cf.datasets.formats import write_qa_csv
    from dense_cf.eval.aar import evaluate_aar, load_triplets
    from dense_cf.models.hf import resolve_model_dir
    from dense_cf.models.tokenizer import load_tokenizer

    smith = "Where was John Smith born?"
    # The answer lies in word pieces 32-64: kept by preprocessing, cut from p+ by max_p_len=32.
    filler = " ".join(f"Max Weber read book number {i}." for i in range(4))
    gold = [  # (question, title, context)
        (smith, "John Smith (painter)", "John Smith is a painter. He was born in Oslo. He paints."),
        (smith, "John Smith (farmer)", "John Smith is a farmer. He was born in Lima. He has dogs."),
        ("Who wrote Blue Hills?", "Blue Hills",
         "Blue Hills is a novel. Ann Berg wrote it. It is long."),
        (smith, "John Smith (sailor)", "John Smith is a sailor. He was born in Cairo. He sails."),
        ("When was the tower built?", "Tower", "The tower is tall. It is grey. It is in a park."),
        ("What is the capital of Narnia?", "Narnia", "Cair Paravel is the capital of Narnia."),
        ("Where was Jane Doe born?", "Jane Doe", "Jane Doe was born in Paris."),
        ("Where did Max Weber die?", "Max Weber", f"Max Weber was a scholar. {filler} "
                                                  "He died in Munich."),
    ]
    records = [{"question": q, "title": t, "context": c} for q, t, c in gold]
    records.append({"question": "", "title": "Empty", "context": "No question."})  # malformed
    gold_path = tmp_path / "gold_info.json"
    gold_path.write_text(json.dumps({"data": records}))
    qa_path = tmp_path / "test.qa.csv"
    write_qa_csv(qa_path, [("Who wrote Blue Hills?", ["Ann Berg"]), (smith, ["Oslo"]),
                           ("When was the tower built?", ["1850"]), (smith, ["Lima"]),
                           ("Where was Jane Doe born?", ["Paris"]), (smith, ["Cairo"]),
                           ("Where did Max Weber die?", ["Munich"]), ("Who is nobody?", ["x"])])

    trip = load_triplets(str(gold_path), str(qa_path))
    assert trip.answers[:4] == [["Oslo"], ["Lima"], ["Ann Berg"], ["Cairo"]]
    assert trip.gold_index == [0, 1, 2, 3, 4, 6, 7]
    assert trip.stats["join_mode"] == "occurrence" and trip.stats["qa_records_unused"] == 1
    assert trip.join.counts == {"joined_by_position": 0, "joined_by_occurrence": 7,
                                "answers_from_gold": 0, "no_qa_record": 1,
                                "malformed_gold_record": 1}

    cfg = base_config()
    cfg.data.max_q_len, cfg.data.max_p_len = 16, 32
    run = types.SimpleNamespace(config=cfg, step=0,
                                tokenizer=load_tokenizer(resolve_model_dir("minilm")))
    with caplog.at_level("INFO"):
        res = evaluate_aar(str(tmp_path), gold_path=str(gold_path), qa_path=str(qa_path),
                           run=run, encoder=_LengthEncoder(), out_dir=str(tmp_path / "out"))
    lost = {"no_qa_record": 1, "malformed_gold_record": 1, "answer_not_in_context": 1,
            "truncated_by_max_p_len": 1}
    want = {"sentence": dict(lost, scored=4, no_counterfactual=1),
            "answer": dict(lost, scored=5, no_counterfactual=0)}
    for strategy, fates in want.items():
        e = res["strategies"][strategy]
        assert e["triplet_fates"] == {k: fates[k] for k in e["triplet_fates"]} and \
            set(e["triplet_fates"]) == set(fates)
        assert sum(e["triplet_fates"].values()) == len(records)
        assert e["triplets"] == fates["scored"] and e["aar"] == 1.0  # p* is always shorter
        assert e["first_lost"]["truncated_by_max_p_len"] == \
            "gold record 7: 'Where did Max Weber die?'"
        scores = np.load(tmp_path / "out" / f"aar_scores_{strategy}.npz")
        # All three John Smiths are scored, each with its own answer.
        assert set(scores["gold_index"][:4]) == {0, 1, 2, 3}
    assert "scored" not in res["strategies"]["sentence"]["first_lost"]
    assert res["strategies"]["sentence"]["first_lost"]["no_counterfactual"] == \
        "gold record 6: 'Where was Jane Doe born?'"
    saved = json.load(open(tmp_path / "out" / "aar.json"))
    assert saved["triplet_join"]["counts"]["joined_by_occurrence"] == 7
    assert saved["strategies"]["sentence"]["triplet_fates"] == want["sentence"]
    md = (tmp_path / "out" / "aar.md").read_text()
    assert "## Triplets" in md and "| fate | lost: no qa record | 1 | 1 |" in md
    assert "| fate | lost: no counterfactual under this strategy | 1 | 0 |" in md
    assert "|  | gold records | 9 | 9 |" in md
    log = caplog.text
    assert "gold record 5: 'What is the capital of Narnia?'" in log  # first no_qa_record
    assert "gold record 4: 'When was the tower built?'" in log       # first answer not found


def test_tensorboard_holds_scalars_eval_metrics_and_config(trained):
    """Classic scalar summaries (EventAccumulator.Scalars reads them), the evaluation's numbers at
    the final step, and the config as text."""
    from tensorboard.backend.event_processing import event_accumulator
    workdir, summary = trained
    acc = event_accumulator.EventAccumulator(os.path.join(workdir, "tb"), size_guidance={
        event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == list(range(1, len(loss) + 1)) and len(loss) >= 1
    jsonl = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl"))]
    train_losses = [r["train/loss"] for r in jsonl if "train/loss" in r]
    np.testing.assert_allclose([e.value for e in loss], train_losses, rtol=1e-6)
    mrr = summary["eval"]["retrieval"]["mrr"]
    (ev,) = acc.Scalars("eval/retrieval/mrr")
    assert ev.step == summary["step"] and ev.value == pytest.approx(mrr, rel=1e-6)
    assert any(t.startswith("eval/aar/") for t in tags)
    (cfg,) = acc.Tensors("config")
    text = cfg.tensor_proto.string_val[0].decode()
    assert json.loads(text.strip("`\n"))["method"] == summary["run"].config.method


def test_reports_define_their_columns_link_plots_and_state_units(trained):
    from dense_cf.eval import report as report_lib
    workdir, _ = trained
    d = os.path.join(workdir, "eval", "step_3")
    ret_md = open(os.path.join(d, "report.md")).read()
    aar_md = open(os.path.join(d, "aar.md")).read()
    assert "## Columns" in ret_md and report_lib.COLUMNS["MRR"] in ret_md
    assert "## Top-k accuracy and MRR (%)" in ret_md
    assert "## Columns" in aar_md and report_lib.COLUMNS["AA score"] in aar_md
    assert report_lib.COLUMNS["mean diff"] in aar_md
    assert "](aar_hist.png)" in aar_md and os.path.exists(os.path.join(d, "aar_hist.png"))
    for name in ("report.json", "aar.json"):
        units = json.load(open(os.path.join(d, name)))["units"]
        assert units["top_k"] == "percent (0-100)" and units["mrr"] == "fraction (0-1)"
        assert units["aar"] == "fraction (0-1)"
    rep = json.load(open(os.path.join(d, "report.json")))
    # The scales the units promise: top-k in percent, MRR a fraction.
    assert all(0 <= v <= 100 for v in rep["top_k"].values()) and 0 <= rep["mrr"] <= 1
    with pytest.raises(KeyError, match="no definition"):
        report_lib.columns_section(["an undefined column"])


def test_docs_define_every_report_column():
    from dense_cf.eval import report as report_lib
    doc = open(os.path.join(ROOT, "docs", "reports.md")).read()
    assert all(f"| {k} | {v} |" in doc for k, v in report_lib.COLUMNS.items())
    assert all(f"| `{k}` | {v} |" in doc for k, v in report_lib.JSON_UNITS.items())


def test_aar_strategies_share_q_and_p_plus_encodings(tmp_path):
    """Issue 46: the AAR strategies read the same q and p+ rows; each distinct row is encoded
    once per evaluation (questions sharing a gold context: one p+), and the scores equal those
    of each strategy encoded on its own (a real tiny model, bucketed encoder: float tolerance)."""
    from helpers import tiny_run

    from dense_cf.datasets.formats import write_qa_csv
    from dense_cf.eval.aar import evaluate_aar, load_triplets, triplet_scores
    from dense_cf.retrieval import export

    ctx = "Ann Berg wrote Blue Hills. She lived in Oslo. The book is long and green."
    gold = [("Who wrote Blue Hills?", "Blue Hills", ctx), ("Where did Ann Berg live?",
                                                          "Blue Hills", ctx),
            ("Who built the grey tower of the park?", "Tower",
             "The tower is tall. Bo Lind built it in 1850. It is grey.")]
    answers = [["Ann Berg"], ["Oslo"], ["Bo Lind"]]
    gold_path, qa_path = tmp_path / "gold.json", tmp_path / "qa.csv"
    gold_path.write_text(json.dumps({"data": [{"question": q, "title": t, "context": c}
                                              for q, t, c in gold]}))
    write_qa_csv(qa_path, [(q, a) for (q, _, _), a in zip(gold, answers)])

    class Counting:
        def __init__(self, inner):
            self.inner, self.rows = inner, {"q": 0, "p": 0}

        def questions(self, ids, mask):
            self.rows["q"] += len(ids)
            return self.inner.questions(ids, mask)

        def passages(self, ids, mask):
            self.rows["p"] += len(ids)
            return self.inner.passages(ids, mask)

    run = tiny_run("picl")
    enc = Counting(export.Encoder(run, 4))
    res = evaluate_aar(str(tmp_path), gold_path=str(gold_path), qa_path=str(qa_path), run=run,
                       encoder=enc, strategies=("sentence", "answer"), out_dir=str(tmp_path / "o"))
    assert [res["strategies"][s]["triplets"] for s in ("sentence", "answer")] == [3, 3]
    # 3 questions once; p+: 2 distinct contexts once; p*: 3 per strategy (all distinct texts).
    assert enc.rows == {"q": 3, "p": 2 + 3 + 3}
    trip = load_triplets(str(gold_path), str(qa_path))
    for strategy in ("sentence", "answer"):
        alone = triplet_scores(run, trip, strategy, encoder=export.Encoder(run, 4))
        saved = np.load(tmp_path / "o" / f"aar_scores_{strategy}.npz")
        np.testing.assert_allclose(saved["pos"], alone["pos"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(saved["cf"], alone["cf"], rtol=1e-4, atol=1e-5)
