"""A method owns its identity (issue 33 item 2; docs/method.md, "A method owns its weights").

Each registry entry carries its loss weights; unset weights take them, weights that contradict
the method are refused at start-up, and generic code asks the method for its settings rather
than reading another method's config block.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from configs import dpr_nq, picl_nq
from dense_cf import methods
from dense_cf.methods.contrastive import DPR_LOSS, EADPR_LOSS, PICL_LOSS
from dense_cf.train.validate import ConfigError, problems

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _weights(config):
    hp = methods.get(config.method).loss_hparams(config.loss)
    return {k: hp[k] for k in ("lam", "tau1", "tau2")}


@pytest.mark.parametrize("name,weights", [("dpr", DPR_LOSS), ("picl", PICL_LOSS), ("eadpr", EADPR_LOSS),
                                          ("mdr", DPR_LOSS), ("mdr-eadpr", EADPR_LOSS), ("dcsr", DPR_LOSS)])
def test_each_entry_carries_its_weights(name, weights):
    assert methods.get(name).loss_defaults == weights


def test_method_flag_on_a_dpr_config_trains_that_method():
    c = dpr_nq.get_config()
    assert _weights(c) == DPR_LOSS and not methods.get("dpr").needs_counterfactual(c.loss)
    for name, weights in (("picl", PICL_LOSS), ("eadpr", EADPR_LOSS)):
        c.method = name  # what --config.method=picl does
        assert _weights(c) == weights and methods.get(name).needs_counterfactual(c.loss)
        assert problems(c, check_files=False) == []
        filled = methods.with_loss_defaults(c)
        assert {k: filled.loss[k] for k in weights} == weights and c.loss.lam is None


def test_contradicting_weights_are_refused_in_one_line():
    c = picl_nq.get_config()
    c.method = "dpr"
    c.loss.lam = 0.2
    found = problems(c, check_files=False)
    assert len(found) == 1 and found[0].startswith("config.method='dpr' has no counterfactual term")
    c = dpr_nq.get_config()
    c.method = "picl"
    c.loss.lam = c.loss.tau1 = c.loss.tau2 = 0.0  # explicit zeros: plain DPR under PiCL's name
    found = problems(c, check_files=False)
    assert len(found) == 1 and "which trains plain DPR" in found[0]
    c.loss.tau2 = 0.5  # a variation of PiCL's weights stays PiCL
    assert problems(c, check_files=False) == []
    c = dpr_nq.get_config()
    c.loss.use_dpr = False
    assert problems(c, check_files=False) == ["config.loss has no term: use_dpr=False and lam = tau1 = tau2 = 0"]
    c = dpr_nq.get_config()
    c.method = "dcsr"
    c.loss.tau1 = 1.0
    assert any("config.method='dcsr' trains with the DPR NLL" in p for p in problems(c, check_files=False))


def test_a_method_checks_its_own_block():
    c = dpr_nq.get_config()
    c.dcsr.negatives = "nope"  # DCSR's block: not DPR's concern
    assert problems(c, check_files=False) == []
    c.method = "dcsr"
    assert problems(c, check_files=False) == [
        "config.dcsr.negatives='nope' is not one of in_passage, bm25, bm25x2, in_batch"]
    assert methods.get("dcsr").config_block == "dcsr" and methods.get("dpr").config_block == ""
    si = methods.get("dcsr").sentence_index(c)
    assert (si.token, si.max_sents, si.title) == ("<sent>", 32, True)
    assert methods.get("picl").sentence_index(c) is None


def test_generic_code_reads_no_method_block():
    """The library layers ask the method (``sentence_index``, ``config_problems``); only the
    methods, their inputs, the config builders and the entry points name a method's block.
    (``multihop`` is read by eval.multihop, the evaluator that hops=2 methods are sent to.)"""
    blocks = sorted({m.config_block for m in map(methods.get, methods.names()) if m.config_block})
    pattern = r"(config|cfg)\.(" + "|".join(b for b in blocks if b != "multihop") + r")\b"
    library = [os.path.join(ROOT, "dense_cf", p) for p in
               ("train", "retrieval", "eval", "index", "mining", "models", "datasets", "parallel")]
    hits = subprocess.run(["grep", "-rnE", pattern, *library], capture_output=True, text=True).stdout
    code = [h for h in hits.splitlines() if not h.split(":", 2)[2].lstrip().startswith("#")
            and "``" not in h]
    assert not code, code


def test_training_saves_the_weights_it_trains_with(tmp_path):
    """A run of --config.method=picl over a DPR-weighted config: PiCL's terms, numbers saved."""
    from helpers import tiny_tower_config, write_tower_data

    from dense_cf.train.loop import train
    write_tower_data(tmp_path)
    c = tiny_tower_config(tmp_path, **{"train.num_steps": 1, "train.eval_every": 0,
                                       "mesh.data": 1, "mesh.model": 1})
    c.method = "dpr"
    c.method = "picl"  # over a config left at DPR's (unset) weights
    summary, _ = train(c, str(tmp_path / "run"))
    saved = json.load(open(tmp_path / "run" / "config.json"))
    assert {k: saved["loss"][k] for k in PICL_LOSS} == PICL_LOSS
    assert "train/l_cpp" in summary["train"] and "train/l_chn" in summary["train"]
    c.method = "dpr"
    c.loss.lam = 0.2
    with pytest.raises(ConfigError, match="config.method='dpr' has no counterfactual term"):
        train(c, str(tmp_path / "refused"))
