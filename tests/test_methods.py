"""The method seam: a method defined in this file alone trains and evaluates end to end.

``MARGIN`` is a toy method (a hinge loss over the same DPR batches) that dense_cf knows nothing
about. The real binary finds it by name (``--config.method=test_methods:MARGIN``), trains it,
and evaluates it (retrieval and AAR) with the shared evaluators; nothing in dense_cf changes.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import child_pythonpath, xla_flags

from dense_cf import methods
from dense_cf.methods import Embeddings, Method
from dense_cf.synthetic import generate as synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def margin_loss(emb: Embeddings, margin: float = 1.0) -> tuple[jax.Array, dict]:
    """Hinge on the hardest in-batch or hard negative: mean_i max(0, m - s(q_i,p_i+) + max_n s)."""
    q, pos = emb.q.astype(jnp.float32), emb.pos.astype(jnp.float32)
    b, d = q.shape
    cands = jnp.concatenate([pos, emb.neg.reshape(-1, d).astype(jnp.float32)])
    s = q @ cands.T                                                    # [B, B + B*M]
    own = jnp.arange(b)
    valid = jnp.concatenate([~jnp.eye(b, dtype=bool),
                             jnp.broadcast_to(emb.neg_valid.reshape(1, -1), (b, emb.neg.shape[0]
                                                                             * emb.neg.shape[1]))],
                            axis=1)
    hardest = jnp.max(jnp.where(valid, s, -jnp.inf), axis=1)
    loss = jnp.mean(jax.nn.relu(margin - s[own, own] + hardest))
    return loss, {"loss": loss, "rank_acc": jnp.mean(s[own, own] > hardest)}


MARGIN = Method(name="margin", loss=margin_loss,
                loss_hparams=lambda loss_config: {"margin": 1.0})


def test_toy_loss_by_hand():
    e = Embeddings(q=jnp.eye(2), pos=jnp.eye(2), neg=jnp.zeros((2, 1, 2)),
                   neg_valid=jnp.array([[True], [False]]))
    loss, m = margin_loss(e)
    # s(q_i, p_i+) = 1, hardest negative: the other positive (0) or the zero hard negative (0).
    assert float(loss) == pytest.approx(0.0) and float(m["rank_acc"]) == 1.0
    loss, _ = margin_loss(e, margin=3.0)
    assert float(loss) == pytest.approx(2.0)


def test_registry_names_and_errors():
    assert {"dpr", "picl", "eadpr", "dcsr"} <= set(methods.names())
    assert methods.get("test_methods:MARGIN") is MARGIN
    assert methods.get("dcsr").unit == "sentence" and methods.get("picl").unit == "passage"
    with pytest.raises(ValueError, match="unknown config.method 'nope'"):
        methods.get("nope")
    with pytest.raises(ValueError, match="cannot load"):
        methods.get("test_methods:NOPE")
    with pytest.raises(ValueError, match="not a Method"):
        methods.get("test_methods:margin_loss")
    with pytest.raises(ValueError, match="already registered"):
        methods.register(methods.get("dpr"))


def test_no_method_name_branches_outside_the_registry():
    hits = subprocess.run(["grep", "-rnE", r"config\.method ==|cfg\.method ==|method == \"",
                           os.path.join(ROOT, "dense_cf")], capture_output=True, text=True).stdout
    outside = [h for h in hits.splitlines() if f"{os.sep}methods{os.sep}" not in h]
    assert not outside, outside


def test_toy_method_trains_and_evaluates_with_the_real_binary(tmp_path):
    data = tmp_path / "synth"
    synthetic.generate(str(data), num_passages=200, seed=2)
    workdir = tmp_path / "run"
    env = dict(os.environ, XLA_FLAGS=xla_flags(2),
               PYTHONPATH=child_pythonpath(os.path.join(ROOT, "tests"), ROOT))
    cmd = [sys.executable, "-m", "dense_cf.main", "--config=configs/demo.py:dpr",
           f"--workdir={workdir}", "--config.method=test_methods:MARGIN",
           "--config.model.name_or_path=tiny", "--config.model.tiny_layers=1",
           f"--config.data.data_dir={data}", "--config.data.max_q_len=24",
           "--config.data.max_p_len=64", "--config.train.global_batch=8",
           "--config.train.num_steps=4", "--config.train.eval_every=0",
           "--config.train.log_every=2", "--config.eval.robustness_counts=()",
           "--config.eval.k=20", "--config.eval.ks=(1,5,20)",
           # Grain: the binary without TensorFlow's import (about half a tiny run's CPU); the
           # subject here is the plug-in, not the input pipeline.
           "--config.data.pipeline=grain", "--config.data.grain_threads=2"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert out["step"] == 4 and np.isfinite(out["train"]["train/loss"])
    summary = json.load(open(workdir / "summary.json"))
    ret, aar = summary["eval"]["retrieval"], summary["eval"]["aar"]
    assert ret["method"] == "test_methods:MARGIN" and set(ret["top_k"]) == {"1", "5", "20"}
    assert 0.0 <= ret["mrr"] <= 1.0
    assert aar["strategies"]["sentence"]["triplets"] > 0
    assert os.path.exists(workdir / "eval" / "step_4" / "retrieval.json")
