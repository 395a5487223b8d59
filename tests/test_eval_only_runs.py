"""Evaluation-only runs end to end (issue 50 item 1): a registered claim whose runs are trained
models evaluated again with other eval.* settings (``RunSpec.eval_of``,
``harness.StudyRun.trained_by``), through studies.replicate on tiny random-BERT runs. Its own
file, so that pytest-xdist can run it beside tests/test_replicate.py rather than after it."""

import json
import os

from dense_cf.eval import claims
from dense_cf.studies import replicate as rep
from dense_cf.train.run import RunDir


def test_rule_paraphrase_claim_evaluates_the_trained_models_again(tmp_path):
    """Issue 50 item 1: picl-robust-did-rp-oe trains dpr_oe and picl_oe once; its runs are those
    models evaluated again with four held-out kinds, and its checks read the K 3→4 drop, the
    step that adds one rule paraphrase per question."""
    out = str(tmp_path / "rep")
    res = rep.run_replication(out, ["picl-robust-did-rp-oe"], steps=2, model="tiny",
                              num_passages=150, test_questions=40, n_resamples=200,
                              vary_world=True)
    (claim,) = res["claims"]
    checks = claim["per_seed"][0]["checks"]
    assert [k["metric"] for k in checks] == [
        "drop DiD rule paraphrase K=3→4: top-1", "drop DiD rule paraphrase K=3→4: top-5"]
    assert all(k["verdict"] in claims.VERDICTS + (claims.UNINFORMATIVE,) for k in checks)
    for model in ("dpr_oe", "picl_oe"):
        trained = json.load(open(RunDir(os.path.join(out, model)).summary))
        again = json.load(open(RunDir(os.path.join(out, model + "_rp")).summary))
        assert again["train"] == {}                  # nothing trained: the model's checkpoint
        assert again["eval"]["retrieval"]["top_k"] == trained["eval"]["retrieval"]["top_k"]
        heldout = again["eval"]["robustness"]["heldout"]
        assert tuple(heldout["kinds"]) == rep.RP_KINDS and "4" in heldout["table"]
        assert "4" not in trained["eval"]["robustness"]["heldout"]["table"]
