"""The extractive reader over MDR's chains (docs/multihop.md, "Reader"): a tiny MDR run's top
chains on the train questions become reader data (one passage per chain), a tiny reader trains
on them, ``python -m dense_cf.eval.multihop --reader`` writes answer EM/F1 (Table 5) into
report.json/md and e2e.json, and ``eval.compare`` pairs two such evaluations."""

import json
import os

import pytest
from helpers import tiny_mdr_config, tiny_reader_config, write_hotpot_world

from dense_cf.eval.multihop import chain_passage, chain_results, span_answer
from dense_cf.retrieval.corpus import Corpus


def _corpus():
    return Corpus(ids=["1", "2", "3"], titles=["Ada Moss", "Ruritania", "Bo Lind"],
                  texts=["Ada Moss was born in Ruritania.", "The capital of Ruritania is Vela.",
                         "Bo Lind was born in 1901."], path="corpus.tsv")


def _record(qid, answer, chains, qtype="bridge"):
    return {"id": qid, "question": f"question {qid}?", "answer": answer, "type": qtype,
            "supporting_titles": ["Ada Moss", "Ruritania"],
            "chains": [{"ids": list(c), "titles": [], "score": 1.0 - j}
                       for j, c in enumerate(chains)]}


def test_chain_passage_keeps_both_titles_in_hop_order():
    p = chain_passage(["1", "2"], ["Ada Moss", "Ruritania"], ["t1 text.", "t2 text."], score=3.0)
    assert p.id == "1+2" and p.title == "" and p.score == 3.0
    assert p.text == "Ada Moss. t1 text. Ruritania. t2 text."


def test_chain_results_flags_answers_and_counts_yes_no():
    records = [_record("a", "Vela", [("1", "2"), ("1", "3"), ("3", "2")]),
               _record("b", "yes", [("1", "2")], "comparison"),
               _record("c", " ", [("1", "2")])]
    out, counts = chain_results(records, _corpus(), answer_mode="string", k=2)
    assert counts == {"questions": 3, "kept": 1, "yes_no_or_empty": 2}
    (rec,) = out
    assert rec["answers"] == ["Vela"] and rec["type"] == "bridge" and rec["id"] == "a"
    assert [c["id"] for c in rec["ctxs"]] == ["1+2", "1+3"]
    assert [c["has_answer"] for c in rec["ctxs"]] == [True, False]
    assert not span_answer("No") and span_answer("Vela")


def test_chain_results_names_question_and_id_not_in_corpus():
    with pytest.raises(KeyError, match="question 'a'.*'9'.*corpus.tsv"):
        chain_results([_record("a", "Vela", [("1", "9")])], _corpus(), answer_mode="string")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate
    from dense_cf.mining.reader_data import reader_data
    from dense_cf.train.loop import train

    root = tmp_path_factory.mktemp("mhreader")
    data = root / "data"
    data.mkdir()
    write_hotpot_world(str(data))
    mdr = str(root / "mdr")
    summary = train_and_evaluate(tiny_mdr_config(data, "mdr"), mdr)
    files = {}
    for split in ("train", "dev"):
        s = reader_data(mdr, split, run=summary["run"])
        files[split] = s
    reader = str(root / "reader")
    cfg = tiny_reader_config(files["train"]["retrieval_json"], files["dev"]["retrieval_json"],
                             **{"reader.max_len": 96, "reader.max_q_len": 24,
                                "train.num_steps": 4, "train.checkpoint_every": 4,
                                "train.global_batch": 4})
    train(cfg, reader)
    return mdr, reader, files, str(data), summary["run"]


def test_reader_data_from_chains(runs):
    from dense_cf.mining.reader_data import split_files

    mdr, _, files, _, run = runs
    train = files["train"]
    before = os.stat(train["retrieval_json"]).st_mtime_ns   # written once, then reused
    assert split_files(mdr, run, {"train": 0, "dev": 0}) == {
        s: files[s]["retrieval_json"] for s in ("train", "dev")}
    assert os.stat(train["retrieval_json"]).st_mtime_ns == before
    assert train["chain_counts"] == {"questions": 16, "kept": 16, "yes_no_or_empty": 0}
    assert train["multihop"]["aar"]["hop1"]["triplets"] == 0   # reader data skips AAR
    recs = json.load(open(train["retrieval_json"]))
    assert len(recs) == 16 and all(len(r["ctxs"]) == 10 for r in recs)
    chains = json.load(open(os.path.join(os.path.dirname(train["retrieval_json"]), "chains.json")))
    for r, c in zip(recs, chains):
        assert r["question"] == c["question"] and r["answers"] == [c["answer"]]
        for ctx, ch in zip(r["ctxs"], c["chains"]):
            t1, t2 = ch["titles"]
            assert ctx["id"] == "+".join(ch["ids"])
            assert ctx["text"].startswith(t1 + ". ") and f" {t2}. " in ctx["text"]
            assert ctx["has_answer"] == (c["answer"] in ctx["text"])
    # a gold chain holds the answer: every question whose gold chain was found has a positive
    for r, c in zip(recs, chains):
        if any(set(ch["titles"]) == set(c["supporting_titles"]) for ch in c["chains"]):
            assert any(ctx["has_answer"] for ctx in r["ctxs"])


def test_eval_multihop_with_reader_and_compare(runs):
    from dense_cf.analysis import compare
    from dense_cf.cli import eval_multihop
    from dense_cf.eval.multihop import add_reader
    from dense_cf.retrieval.corpus import load_corpus

    mdr, reader, _, data, _ = runs
    s = eval_multihop.run_cli(["--workdir", mdr, "--reader", reader, "--reader_ks", "1,5,50"])
    r = s["reader"]
    assert r["status"] == "done" and r["ks"] == [1, 5] and r["n"] == 8   # 50 > top_chains
    assert set(r["by_type"][1]) == {"bridge", "comparison"}
    assert r["by_type"][1]["bridge"]["count"] == 6 and r["by_type"][1]["comparison"]["count"] == 2
    for k in (1, 5):
        assert 0 <= r["em"][k] <= r["f1"][k] <= 100
        assert r["em_ci"][k][0] <= r["em"][k] <= r["em_ci"][k][1]
    d = s["out_dir"]
    rep = json.load(open(os.path.join(d, "report.json")))
    assert rep["reader"]["em"] == {str(k): v for k, v in r["em"].items()}
    e2e = json.load(open(os.path.join(d, "e2e.json")))
    assert len(e2e["em_outcomes"]["1"]) == 8 and e2e["questions"] == rep["questions"]
    assert 100 * sum(e2e["em_outcomes"]["5"]) / 8 == pytest.approx(r["em"][5])
    preds = json.load(open(os.path.join(d, "predictions.json")))
    assert {p["type"] for p in preds} == {"bridge", "comparison"}
    for p in preds:   # a prediction is read from one of the top-k chains, "+"-joined ids
        for k, v in p["predictions"].items():
            assert v["text"] == "" or (v["passage_rank"] < int(k) and "+" in v["passage_id"])
    md = open(os.path.join(d, "report.md")).read()
    assert "Answer EM / F1" in md and "bridge (n=6)" in md and "EM@5" in md
    assert "pending" not in md and "predicts no sentence labels" in md

    # add_reader re-reads the saved chains (no search) with the same figures
    again = add_reader(d, reader, load_corpus(os.path.join(data, "corpus.tsv")), ks=(1, 5))
    assert again["em"] == r["em"] and again["f1"] == r["f1"]
    assert "Answer EM / F1" in open(os.path.join(d, "report.md")).read()

    result = compare.compare(mdr, mdr, verbose=False, n_resamples=200)
    rows = {row["metric"]: row for row in result["rows"]}
    assert {"top-2", "EM@1", "EM@5", "F1@5"} <= set(rows)
    assert rows["EM@5"]["stats"]["p_value"] == 1.0
