"""Config checks at load time (dense_cf/train/validate.py, issue 17 §2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from configs import (
    data_efficiency,
    dcsr_nq,
    dcsr_squad,
    dcsr_trivia,
    demo,
    dpr_nq,
    eadpr_nq,
    fid_demo,
    fid_nq,
    picl_ablation,
    picl_nq,
    picl_nq_accel,
    picl_nq_dprneg,
)
from dense_cf.configs.ablation import ROWS
from dense_cf.train.validate import ConfigError, problems, validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = ([(m.__name__, m.get_config()) for m in (dcsr_nq, dcsr_squad, dcsr_trivia, dpr_nq, eadpr_nq, picl_nq,
                                                   picl_nq_accel, picl_nq_dprneg, fid_nq, fid_demo)]
           + [(f"demo:{a}", demo.get_config(a)) for a in ("picl", "dpr", "eadpr", "dcsr")]
           + [(f"picl_ablation:{r},demo", picl_ablation.get_config(f"{r},demo")) for r in ROWS]
           + [(f"data_efficiency:{a}", data_efficiency.get_config(a)) for a in ("0.1", "0.4,demo")])


@pytest.mark.parametrize("name,config", CONFIGS, ids=[n for n, _ in CONFIGS])
def test_every_shipped_config_is_valid(name, config):
    assert problems(config, check_files=False) == []


def test_every_problem_is_named_with_the_allowed_values():
    c = demo.get_config("picl")
    c.data.counterfactual = "windw"
    c.model.pooling = "max"
    c.model.name_or_path = "./no/such/model"
    c.train.grad_cache_chunks = 3
    c.optim.learning_rate = -1.0
    c.eval.index = "flatt"
    c.data.max_p_len = 1024
    found = problems(c, check_files=False)
    assert found == [
        "config.model.name_or_path='./no/such/model' is neither tiny, minilm, an existing directory nor a hub "
        "name like 'bert-base-uncased' or 'org/name'",
        "config.model.pooling='max' is not one of cls, mean",
        "config.data.counterfactual='windw' is not one of sentence, window, answer, evidence (did you mean 'window'?)",
        "config.data.max_p_len=1024 must be a number >= 1 and <= 512",
        "config.optim.learning_rate=-1.0 must be a number > 0",
        "config.train.grad_cache_chunks=3 must divide config.train.global_batch=16",
        "config.eval.index='flatt' is not one of flat, hnsw, ivfpq, sq8, ivfsq, jax (did you mean 'flat'?)",
    ]
    with pytest.raises(ConfigError, match=r"^bad config: config.model.name_or_path="):
        validate(c, check_files=False)


def test_missing_data_files_and_unknown_method(tmp_path):
    c = dpr_nq.get_config()
    c.data.data_dir = str(tmp_path)
    c.method = "dprr"
    found = problems(c)
    assert found[0].startswith("unknown config.method 'dprr'")
    assert f"data file for config.data.train_file is missing: {tmp_path}/biencoder-nq-train.json.gz" in found[1]
    assert len(found) == 3  # and the dev file


def test_the_binary_fails_at_once_with_one_line():
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dense_cf.main", "--config=configs/demo.py",
                        "--config.data.counterfactual=windw", "--workdir=/nonexistent/never/created"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "DENSE_CF_TRACEBACK"})
    elapsed = time.perf_counter() - t0
    assert r.returncode == 1, r.stderr[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert errors == ["error: bad config: config.data.counterfactual='windw' is not one of sentence, window, "
                      "answer, evidence (did you mean 'window'?)"]
    assert "Traceback" not in r.stderr and not os.path.exists("/nonexistent/never/created")
    print(f"failed after {elapsed:.1f} s (interpreter start and imports included)")


def test_heldout_kinds_are_registered_names():
    """eval.robustness_heldout_kinds (issue 50): names of synthetic.distractors.KINDS, distinct."""
    c = demo.get_config("picl")
    c.eval.robustness_heldout_kinds = ("value_swap", "rule_paraphrse")
    assert problems(c, check_files=False) == [
        "config.eval.robustness_heldout_kinds[]='rule_paraphrse' is not one of value_swap, "
        "paraphrase, namesake, rule_paraphrase (did you mean 'rule_paraphrase'?)"]
    c.eval.robustness_heldout_kinds = ("namesake", "namesake")
    assert problems(c, check_files=False) == [
        "config.eval.robustness_heldout_kinds=('namesake', 'namesake') must name distinct kinds "
        "(at least one)"]
    c.eval.robustness_heldout_kinds = ("paraphrase", "rule_paraphrase")
    assert problems(c, check_files=False) == []
