"""Evaluation-only runs end to end (issue 50 item 1): a run that evaluates a trained model again
with other eval.* settings (``RunSpec.eval_of``, ``harness.StudyRun.trained_by``), with the
registry's own configs and the real trainer on a tiny random BERT. Its own file, so that
pytest-xdist can run it beside tests/test_replicate.py rather than after it."""

import json

from dense_cf.studies import harness
from dense_cf.studies import replicate as rep
from dense_cf.train.run import RunDir


def test_the_rule_paraphrase_runs_plan_their_models_first():
    """The claim's evaluation-only runs come after, and are trained by, the models they read."""
    study = rep.definition(["picl-robust-did-rp-oe"], "/nonexistent", steps=2, model="tiny")
    assert [(r.name, r.trained_by) for r in study.runs] == [
        ("dpr_oe", ""), ("picl_oe", ""), ("dpr_oe_rp", "dpr_oe"), ("picl_oe_rp", "picl_oe")]
    assert study.pairs == (("dpr_oe_rp", "picl_oe_rp"),)


def test_an_evaluation_only_run_evaluates_the_trained_model_again(tmp_path):
    """dpr_oe_rp: dpr_oe's model, trained once, evaluated again with the four held-out kinds at
    K = 0-4. Nothing is trained; the retrieval figures are the model's."""
    out = str(tmp_path / "rep")
    budget = {"steps": 2, "model": "tiny", "num_passages": 150, "test_questions": 40,
              "vary_world": True}
    study = harness.Study("rp", tuple(harness.StudyRun(
        name, lambda seed, name=name: rep.prepared_config(name, out, seed, budget),
        required=("retrieval", "aar"), trained_by=rep.RUNS[name].eval_of)
        for name in ("dpr_oe", "dpr_oe_rp")))
    done = harness.train_study(study, out, [0])
    trained = json.load(open(RunDir(done["dpr_oe", 0].workdir).summary))
    again = json.load(open(RunDir(done["dpr_oe_rp", 0].workdir).summary))
    assert again["train"] == {}                  # nothing trained: the model's checkpoint
    assert again["eval"]["retrieval"]["top_k"] == trained["eval"]["retrieval"]["top_k"]
    heldout = again["eval"]["robustness"]["heldout"]
    assert tuple(heldout["kinds"]) == rep.RP_KINDS and "4" in heldout["table"]
    assert "4" not in trained["eval"]["robustness"]["heldout"]["table"]
    first = trained["eval"]["robustness"]["heldout"]["table"]   # the same first three kinds
    assert all(heldout["table"][k]["top_k"] == first[k]["top_k"] for k in ("0", "1", "2", "3"))
