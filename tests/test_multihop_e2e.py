"""MDR end to end on a hand-built two-hop world: a tiny random BERT trains a few steps with
EADPR on both hops, after-training evaluation runs the two-hop search, and the
``dense_cf.eval.multihop`` binary rewrites the same reports, which ``eval.compare`` pairs."""

import json
import os

import numpy as np
from helpers import tiny_mdr_config, write_hotpot_world

from dense_cf.analysis import compare
from dense_cf.cli import eval_multihop
from dense_cf.experiment import train_and_evaluate


def test_mdr_trains_and_evaluates(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    examples = write_hotpot_world(str(data))
    cfg = tiny_mdr_config(data, **{"eval.after_training": True})
    work = str(tmp_path / "run")
    summary = train_and_evaluate(cfg, work)
    assert summary["step"] == 3
    train = summary["train"]
    assert train["train/cf_valid_frac"] == 1.0 and train["train/l_cpp"] > 0
    assert {"train/hop1_rank_acc", "train/hop2_rank_acc", "train/hop2_loss"} <= set(train)
    assert summary["data"]["examples"] == len(examples) and summary["data"]["skipped"] == 0

    ev = summary["eval"]["multihop"]
    assert ev["n_questions"] == 8 and ev["corpus_size"] == 24 and ev["ks"] == [2, 10]
    d = ev["out_dir"]
    rep = json.load(open(os.path.join(d, "report.json")))
    pq = rep["per_question"]
    # chain hits imply MDR (union) hits no later; R@10 >= R@2
    for c, u in zip(pq["chain_rank"], pq["union_rank"]):
        assert c is None or (u is not None and u <= c)
    assert rep["top_k"]["10"] >= rep["top_k"]["2"]
    assert rep["first_hit_rank"] == pq["chain_rank"] and len(rep["questions"]) == 8
    aar = rep["multihop"]["aar"]
    assert aar["hop1"]["triplets"] == 8 and aar["hop2"]["triplets"] == 8
    assert rep["multihop"]["counts"]["by_type"] == {"bridge": 6, "comparison": 2}
    chains = json.load(open(os.path.join(d, "chains.json")))
    assert len(chains) == 8 and all(len(c["chains"]) == 10 for c in chains)
    assert all(a != b for c in chains for a, b in (x["titles"] for x in c["chains"]))
    md = open(os.path.join(d, "report.md")).read()
    assert "EADPR Table 4 layout" in md and "need a reader run" in md and "R@10" in md
    with np.load(os.path.join(d, "aar_scores_hop2.npz")) as z:
        assert len(z["pos"]) == 8 and np.isfinite(z["cf"]).all()

    # The binary reuses the export and index, and writes the same figures.
    again = eval_multihop.run_cli(["--workdir", work, "--top_chains", "10"])
    assert again["timing"]["index_reused"] and again["top_k"] == ev["top_k"]
    result = compare.compare(work, work, verbose=False, n_resamples=200)
    labels = [r["metric"] for r in result["rows"]]
    assert "top-2" in labels and "AAR (hop1)" in labels and "AAR (hop2)" in labels
    # The benchmark's paired rows read the same per-question outcomes.
    from dense_cf.studies import multihop as bench
    rows = bench.paired_rows(rep, rep, bench._aar(d), bench._aar(d), ("A", "B"))
    assert {"chain R@2", "MDR R@10", "hop-1 R@2", "answer R@10", "AAR hop2"} <= {
        r["metric"] for r in rows}
    assert all(r["stats"]["p_value"] == 1.0 for r in rows)
