"""End-to-end QA on a tiny run: retriever → reader data → reader → EM per retriever and k.

A tiny retriever trained for a few steps on the synthetic benchmark retrieves for train/dev
questions (``dense_cf.cli.reader_data``), the demo's reader stage trains a tiny reader on that and
reads the retriever's test lists, and ``python -m dense_cf.eval.e2e`` pairs two retrievers'
lists (the run's, and the same lists reversed) with McNemar; ``dense_cf.eval.compare`` pairs the
saved per-question outcomes.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import tiny_reader_config, tiny_synthetic_config, xla_flags

from dense_cf.synthetic import generate as synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate
    data_dir = tmp_path_factory.mktemp("synth")
    synthetic.generate(str(data_dir), num_passages=200, seed=1)
    workdir = str(tmp_path_factory.mktemp("retriever"))
    cfg = tiny_synthetic_config(data_dir, **{"train.num_steps": 2, "eval.after_training": True,
                                             "eval.k": 5, "eval.ks": (1, 5)})
    summary = train_and_evaluate(cfg, workdir)
    return workdir, summary.pop("run")


@pytest.fixture(scope="module")
def reader(retriever, tmp_path_factory):
    from dense_cf.demo import reader_stage
    workdir, run = retriever
    out = str(tmp_path_factory.mktemp("demo"))
    cfg = tiny_reader_config("", **{"train.num_steps": 4, "train.global_batch": 4,
                                    "reader.max_len": 96, "reader.max_q_len": 24})
    # k = 60 of 200 passages: a retriever trained for 2 steps finds the answer for some questions
    result = reader_stage(out, {"dpr": (workdir, run), "same": (workdir, run)}, config=cfg,
                          settings={"train_questions": 48, "dev_questions": 8, "k": 60,
                                    "eval_ks": (1, 5)})
    return os.path.join(out, "reader"), result


def test_reader_data_binary_writes_the_retrievers_results(retriever, tmp_path):
    from dense_cf.cli import reader_data
    workdir, _ = retriever
    summary = reader_data.run_cli([f"--retriever={workdir}", "--split=dev", "--k=3",
                                   "--max_questions=10", f"--out={tmp_path}"])
    with open(tmp_path / "retrieval.json") as f:
        results = json.load(f)
    assert len(results) == 10 and all(len(r["ctxs"]) == 3 for r in results)
    assert {"id", "title", "text", "score", "has_answer"} <= set(results[0]["ctxs"][0])
    assert summary["split"] == "dev" and summary["source"].endswith("biencoder-synth-dev.json")
    assert summary["timing"]["encoded_this_run"] == 0  # the run's export and index are reused
    with pytest.raises(ValueError, match="reader"):
        reader_data.reader_data(workdir, "test", run=_reader_run())


def _reader_run():
    class Fake:  # what reader_data reads of a run before refusing a reader
        step = 0
        method = type("M", (), {"kind": "reader", "name": "reader"})
    return Fake()


def test_demo_reader_stage_trains_and_reads_every_retriever(reader, retriever):
    reader_dir, result = reader
    workdir, run = retriever
    data = result["reader_summary"]["data"]
    assert data["questions"] == 48 and data["kept"] + data["skipped_questions"] == 48
    assert data["kept"] >= 4 and data["no_answer_passage"] > 0  # skipped questions are counted
    assert os.path.exists(os.path.join(workdir, "reader_data", f"step_{run.step}", "train",
                                       "retrieval.json"))
    a, b = result["retrievers"]
    assert (a["retriever"], b["retriever"]) == ("dpr", "same") and a["ks"] == [1, 5]
    assert a["em"] == b["em"] and a["aar"]["sentence"]["aar"] >= 0
    paired = result["paired"][0]["rows"]
    assert [r["metric"] for r in paired] == ["EM@1", "F1@1", "EM@5", "F1@5"]
    assert all(r["stats"]["p_value"] == 1.0 for r in paired if r["metric"].startswith("EM"))
    assert [s.split(" (")[0] for s, _ in result["stages"]] == [
        "reader: retrieval for its train / dev questions", "reader: training",
        "reader: evaluation"] and all(sec >= 0 for _, sec in result["stages"])
    from dense_cf.demo import reader_section
    md = reader_section(result)
    assert "PiCL Table 3" in md and "McNemar" in md and "| dpr |" in md


def test_e2e_binary_on_two_retrievers(reader, retriever, tmp_path):
    reader_dir, _ = reader
    workdir, run = retriever
    own = os.path.join(workdir, "eval", f"step_{run.step}", "retrieval.json")
    with open(own) as f:
        results = json.load(f)
    for r in results:  # a worse retriever: the same passages in reverse order
        r["ctxs"] = r["ctxs"][::-1]
    flipped = tmp_path / "flipped.json"
    flipped.write_text(json.dumps(results))
    out = tmp_path / "e2e"
    env = dict(os.environ, XLA_FLAGS=xla_flags(2))
    r = subprocess.run([sys.executable, "-m", "dense_cf.eval.e2e", f"--retriever={workdir}",
                        f"--retriever={flipped}", f"--reader={reader_dir}", "--k=1,5",
                        "--names=dpr,flipped", f"--out={out}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "## Exact match (PiCL Table 3 layout)" in r.stdout and f"reports written to {out}" in r.stderr
    top = json.loads((out / "e2e.json").read_text())
    assert [x["retriever"] for x in top["retrievers"]] == ["dpr", "flipped"]
    for name in ("dpr", "flipped"):
        summary = json.loads((out / name / "e2e.json").read_text())
        preds = json.loads((out / name / "predictions.json").read_text())
        assert len(preds) == summary["n_questions"] == len(results)
        for k in ("1", "5"):
            em = [p["predictions"][k]["em"] for p in preds]
            assert summary["em"][k] == pytest.approx(100 * np.mean(em))
            assert summary["em_outcomes"][k] == [int(x) for x in em]
            lo, hi = summary["em_ci"][k]
            assert lo <= summary["em"][k] <= hi
        p = preds[0]["predictions"]["1"]
        assert {"text", "passage_id", "passage_rank", "score", "passage_score", "em", "f1"} <= set(p)
        assert p["passage_rank"] in (0, -1)  # at k = 1 only the top passage is read
        assert set(summary["by_type"]["5"]) <= {"how", "what", "when", "where", "which", "who", "other"}
    # at k = 5 both read the same five passages: the same answers
    a5 = [p["predictions"]["5"]["text"] for p in json.loads((out / "dpr" / "predictions.json").read_text())]
    b5 = [p["predictions"]["5"]["text"] for p in json.loads((out / "flipped" / "predictions.json").read_text())]
    assert a5 == b5
    rows = top["paired"][0]["rows"]
    assert rows[0]["metric"] == "EM@1" and rows[0]["test"].startswith("McNemar exact")
    from dense_cf.analysis import compare as compare_lib
    res = compare_lib.compare(str(out / "dpr"), str(out / "flipped"), verbose=False)
    assert [row["metric"] for row in res["rows"]] == ["EM@1", "F1@1", "EM@5", "F1@5"]
    assert res["rows"][0]["stats"]["p_value"] == rows[0]["stats"]["p_value"]


def test_e2e_refuses_a_retriever_as_reader(retriever):
    from dense_cf.eval.e2e import evaluate_e2e
    workdir, run = retriever
    with pytest.raises(ValueError, match="not a reader"):
        evaluate_e2e([workdir], workdir, ks=(1,), run=run)
