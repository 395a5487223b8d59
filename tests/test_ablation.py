"""PiCL's ablation (issue 19): the rows of ``configs/picl_ablation.py`` and
``dense_cf.studies.ablation`` on a tiny random BERT (3 steps), including a resumed re-run."""

from __future__ import annotations

import json
import os

import pytest

from configs import picl_ablation
from dense_cf.configs.ablation import ROWS
from dense_cf.configs.presets import demo_config
from dense_cf.methods.contrastive import PICL_LOSS
from dense_cf.studies import ablation as bench

# Studies, not sharding, are the subject here: one device (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_device")

# row -> (method, use_dpr, lam, tau1, tau2, counterfactual)
EXPECTED = {
    "dpr": ("dpr", True, 0.0, 0.0, 0.0, "sentence"),
    "picl": ("picl", True, 0.2, 1.0, 1.0, "sentence"),
    "dpr_cpp": ("picl", True, 0.2, 0.0, 1.0, "sentence"),
    "dpr_chn": ("picl", True, 0.2, 1.0, 0.0, "sentence"),
    "cpp_chn": ("picl", False, 0.2, 1.0, 1.0, "sentence"),
    "dpr_lam": ("picl", True, 0.2, 0.0, 0.0, "sentence"),
    "answer": ("picl", True, 0.2, 1.0, 1.0, "answer"),
    "window": ("picl", True, 0.2, 1.0, 1.0, "window"),
    "sentence": ("picl", True, 0.2, 1.0, 1.0, "sentence"),
}


def _weights(c):
    return (c.method, c.loss.use_dpr, c.loss.lam, c.loss.tau1, c.loss.tau2, c.data.counterfactual)


@pytest.mark.parametrize("row", sorted(EXPECTED))
def test_row_weights(row):
    assert set(ROWS) == set(EXPECTED)
    nq = picl_ablation.get_config(row)
    demo = picl_ablation.get_config(f"{row},demo")
    assert _weights(nq) == _weights(demo) == EXPECTED[row]
    assert nq.model.name_or_path == "bert-base-uncased"
    assert nq.data.train_file == "biencoder-nq-train.json.gz"
    # The demo base is presets.demo_config of the row's method, only the loss/p* changed.
    ref = demo_config(EXPECTED[row][0]).to_dict()
    got = demo.to_dict()
    for d in (ref, got):
        d.pop("loss")
        d["data"].pop("counterfactual")
    assert got["data"].pop("num_hard") == 1  # the paper's DPR setting; the demo has none
    assert ref["data"].pop("num_hard") == 0
    assert got == ref
    assert picl_ablation.get_config(f"{row},nq").to_dict() == nq.to_dict()


def test_picl_row_is_the_preset_and_tau_option():
    c = picl_ablation.get_config("picl,demo")
    assert {k: c.loss[k] for k in PICL_LOSS} == PICL_LOSS
    assert picl_ablation.get_config().to_dict() == picl_ablation.get_config("picl").to_dict()
    limited = picl_ablation.get_config("dpr_chn,demo,tau=0.2")
    assert (limited.loss.lam, limited.loss.tau1, limited.loss.tau2) == (0.2, 0.2, 0.0)
    assert picl_ablation.get_config("dpr,tau=0.2").loss.tau1 == 0.0
    for bad in ("nope", "picl,wiki", "picl,demo,x=1"):
        with pytest.raises(ValueError):
            picl_ablation.get_config(bad)


def _checkpoint_mtimes(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        if f"{os.sep}checkpoints" in dirpath:
            for f in files:
                p = os.path.join(dirpath, f)
                out[p] = os.stat(p).st_mtime_ns
    return out


def test_bench_tiny_and_rerun(tmp_path, caplog):
    out = str(tmp_path / "abl")
    kw = {"steps": 3, "model": "tiny", "num_passages": 150, "test_questions": 40,
          "n_resamples": 500}
    res = bench.run_ablation(out, ["dpr_chn", "sentence"], **kw)
    assert [r["row"] for r in res["runs"]] == ["dpr", "picl", "dpr_chn", "sentence"]
    for r in res["runs"]:
        for m in bench.METRICS:
            lo, hi = r[f"{m} ci"]
            assert lo <= r[m] <= hi, (r["row"], m)
    by_row = {r["row"]: r for r in res["runs"]}
    assert by_row["sentence"]["workdir"] == by_row["picl"]["workdir"]  # same config: one run
    md = open(os.path.join(out, "ablation.md")).read()
    saved = json.load(open(os.path.join(out, "ablation.json")))
    header = "| row | " + " | ".join(bench.METRICS) + " |"
    assert md.count(header) == 3  # results + one B − A summary per reference
    assert "## Paired against dpr" in md and "## Paired against picl" in md
    assert "significant at 0.05" in md and "McNemar exact" in md and "paired bootstrap" in md
    assert [p["row"] for p in saved["paired"]["dpr"]] == ["picl", "dpr_chn", "sentence"]
    assert [p["row"] for p in saved["paired"]["picl"]] == ["dpr", "dpr_chn"]
    metrics = {r["metric"] for r in saved["paired"]["picl"][1]["rows"]}
    assert {"top-1", "top-20", "MRR (×100)", "AAR", "AA score"} <= metrics
    assert set(saved["paired"]["dpr"][1]["summary"]) == {"row", *bench.METRICS}

    before = _checkpoint_mtimes(out)
    assert before
    caplog.set_level("INFO")
    again = bench.run_ablation(out, ["dpr_chn"], **kw)
    assert _checkpoint_mtimes(out) == before  # nothing retrained
    assert caplog.text.count("finished earlier, read back") == 3
    assert "run 3 of 3" in caplog.text
    assert [r["top-1"] for r in again["runs"]] == [r["top-1"] for r in res["runs"][:3]]
    with pytest.raises(ValueError, match="another config"):
        bench.run_ablation(out, ["dpr_chn"], **dict(kw, steps=4))
