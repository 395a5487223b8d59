"""The evaluation seam: an evaluator defined in this file alone runs after training and is
compared, with no edit under dense_cf/ (issue 48).

``TOY`` is a toy evaluator dense_cf knows nothing about: per test question, the norm of the
run's question vector (a mean) and whether its first component is positive (a rate). The real
binary runs it after training when named on the command line
(``--config.eval.evaluators=test_evaluators:TOY``); it saves its outcomes through
``eval.outcomes``' writer, and ``python -m dense_cf.cli.compare A B`` pairs them by question.
"""

import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import child_pythonpath, tiny_synthetic_config, xla_flags

from dense_cf import methods
from dense_cf.cli import compare as compare_cli
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.eval import evaluators, outcomes
from dense_cf.eval.base import Evaluator, Result
from dense_cf.experiment import train_and_evaluate
from dense_cf.retrieval.corpus import load_qa
from dense_cf.retrieval.export import encode_questions
from dense_cf.synthetic import generate as synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = (outcomes.Metric("toy.norm", "question-vector norm", "mean", digits=3),
           outcomes.Metric("toy.positive", "first component > 0", "rate"))


def _toy(run, workdir):
    questions, _ = load_qa(resolve_data_file(run.config.data, "test_file"))
    q = encode_questions(run, questions)
    values = {"toy.norm": [float(x) for x in np.linalg.norm(q, axis=1)],
              "toy.positive": [bool(x) for x in q[:, 0] > 0]}
    return Result({"questions": len(questions)},
                  outcomes.Outcomes(keys=questions, values=values, metrics=METRICS,
                                    method=run.config.method))


TOY = Evaluator("toy", _toy, metrics=METRICS)


def test_methods_declare_their_evaluations():
    assert methods.get("picl").evaluators == ("retrieval", "aar", "robustness")
    assert methods.get("dcsr").evaluators == ("retrieval",)
    assert methods.get("mdr").evaluators == ("multihop",)
    assert methods.get("reader").evaluators == ()
    assert set(evaluators.names()) >= {"retrieval", "aar", "robustness", "multihop"}
    for name in evaluators.names():
        ev = evaluators.get(name)
        assert ev.name == name and ev.metrics and ev.report


def test_config_chooses_evaluators_and_unknown_names_fail_before_training(tmp_path):
    c = tiny_synthetic_config(tmp_path / "nothing", **{"eval.after_training": True})
    assert [e.name for e in evaluators.chosen(c)] == ["retrieval", "aar", "robustness"]
    c.eval.evaluators = "aar, test_evaluators:TOY"
    assert [e.name for e in evaluators.chosen(c)] == ["aar", "toy"]
    c.eval.evaluators = "retrieval,nope"
    c.data.synthetic.generate = True  # nothing is generated: the name fails first
    with pytest.raises(ValueError, match="unknown evaluator 'nope'"):
        train_and_evaluate(c, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "nothing") and not os.path.exists(tmp_path / "run")
    c.eval.evaluators = "test_evaluators:METRICS"
    with pytest.raises(ValueError, match="is a tuple, not an Evaluator"):
        evaluators.chosen(c)


def test_toy_evaluator_runs_after_training_and_is_compared(tmp_path):
    data = tmp_path / "synth"
    synthetic.generate(str(data), num_passages=120, seed=2)
    common = {"train.num_steps": 2, "eval.after_training": True,
              "eval.evaluators": "test_evaluators:TOY"}
    # Run A with the real binary, the evaluator named on its command line.
    env = dict(os.environ, XLA_FLAGS=xla_flags(2),
               PYTHONPATH=child_pythonpath(os.path.join(ROOT, "tests"), ROOT))
    cmd = [sys.executable, "-m", "dense_cf.main", "--config=configs/demo.py:dpr",
           f"--workdir={tmp_path / 'a'}", "--config.eval.evaluators=test_evaluators:TOY",
           "--config.model.name_or_path=tiny", "--config.model.tiny_layers=1",
           f"--config.data.data_dir={data}", "--config.data.max_q_len=24",
           "--config.data.max_p_len=64", "--config.train.global_batch=8",
           "--config.train.num_steps=2", "--config.train.eval_every=0",
           # Grain: the binary without TensorFlow's import (about half a tiny run's CPU); the
           # subject here is the plug-in, not the input pipeline.
           "--config.data.pipeline=grain", "--config.data.grain_threads=2"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    summary = json.load(open(tmp_path / "a" / "summary.json"))
    assert set(summary["eval"]) == {"toy", "wall_s"}
    n = summary["eval"]["toy"]["questions"]
    assert n > 0 and os.path.exists(tmp_path / "a" / "eval" / "step_2" / outcomes.outcomes_name("toy"))
    # Run B in process, another seed.
    train_and_evaluate(tiny_synthetic_config(data, seed=1, **common), str(tmp_path / "b"))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        compare_cli.run_cli([str(tmp_path / "a"), str(tmp_path / "b"), "--n_resamples=200",
                             f"--json_out={tmp_path / 'c.json'}"])
    rows = json.load(open(tmp_path / "c.json"))["rows"]
    assert [(r["id"], r["metric"], r["n"]) for r in rows] == [
        ("toy.norm", "question-vector norm", n), ("toy.positive", "first component > 0", n)]
    assert "| question-vector norm |" in buf.getvalue()
    assert f"toy: {n} items paired" in buf.getvalue()
