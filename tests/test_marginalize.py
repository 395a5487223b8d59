"""Encoder marginalisation (dense_cf/eval/marginalize.py, docs/method.md §7): arithmetic and a tiny e2e run."""

import json
import os

import numpy as np
import pytest
from helpers import tiny_synthetic_config

from dense_cf.cli import marginalize as marginalize_cli
from dense_cf.eval import marginalize as mg


# ------------------------------------------------------------------ arithmetic on hand-made matrices
def test_marginals_are_row_and_column_means_eq7():
    m = np.array([[60.0, 40.0, 20.0],
                  [30.0, 50.0, 10.0],
                  [0.0, 30.0, 90.0]])
    q, p = mg.marginals(m)
    np.testing.assert_allclose(q, [40.0, 30.0, 40.0])   # question encoder i: mean over passage encoders
    np.testing.assert_allclose(p, [30.0, 40.0, 40.0])   # passage encoder j: mean over question encoders
    q_o, p_o = mg.marginals(m, exclude_self=True)
    np.testing.assert_allclose(q_o, [30.0, 20.0, 15.0])
    np.testing.assert_allclose(p_o, [15.0, 35.0, 15.0])


def test_per_question_marginals_average_to_eq7_and_contrast_is_paired():
    # 2 encoders, 4 questions; first-hit ranks of every (question encoder, passage encoder) pair.
    firsts = {"0,0": [1, 3, None, 1], "0,1": [1, 1, 2, None],
              "1,0": [None, 2, None, 1], "1,1": [1, 1, 1, 4]}
    q, p = mg.per_question_marginals(firsts, 2, k=1)
    np.testing.assert_allclose(q, [[1, .5, 0, .5], [.5, .5, .5, .5]])
    np.testing.assert_allclose(p, [[.5, 0, 0, 1], [1, 1, .5, 0]])
    m = np.array([[50.0, 50.0], [25.0, 75.0]])  # the top-1 matrix of the same ranks
    mq, mp = mg.marginals(m)
    np.testing.assert_allclose(100 * q.mean(axis=1), mq)
    np.testing.assert_allclose(100 * p.mean(axis=1), mp)
    rows = mg.encoder_contrast_rows(["a", "b"], firsts, [1])
    assert [r["metric"] for r in rows] == ["top-1: a", "top-1: b"]
    assert rows[0]["stats"]["diff"] == pytest.approx(p[0].mean() - q[0].mean())
    assert rows[1]["stats"]["diff"] == pytest.approx(0.125)
    assert [r["metric"] for r in mg.encoder_contrast_rows(["a", "b"], firsts, [1], only=1)] == [
        "top-1: b"]


def test_passage_swap_rows_pair_two_passage_encoders_with_one_question_encoder():
    # Question encoder 1 with passage encoders 1 (reference) and 0: at k=1 hits [F,T,F,T] vs
    # [T,T,T,T]: 2 discordant pairs, both for passage encoder 0.
    firsts = {"0,0": [1, 3, None, 1], "0,1": [1, 1, 2, None],
              "1,0": [1, 1, 1, 1], "1,1": [2, 1, None, 1]}
    np.testing.assert_array_equal(mg.pair_hits_at(firsts, 1, 1, 1), [False, True, False, True])
    rows = mg.passage_swap_rows(firsts, 1, 1, 0, [1, 2], ("P ref", "P alt"))
    assert [r["metric"] for r in rows] == ["top-1", "top-2"]
    s1, s2 = rows[0]["stats"], rows[1]["stats"]
    assert (s1["diff"], s1["b01"], s1["b10"], s1["p_value"]) == (0.5, 2, 0, 0.5)
    assert (s2["diff"], s2["b01"], s2["b10"], s2["p_value"]) == (0.25, 1, 0, 1.0)
    assert rows[0]["P ref"].startswith("50.00 [") and rows[0]["P alt"].startswith("100.00 [")


def test_trend_row_is_a_claim_row_with_rho_as_diff():
    row = mg.trend_row("attribution.rho.top5.p_coverage", [10.0, 20, 30, 25, 5],
                       [40.0, 50, 60, 55, 30], ("statistic", "marginal"),
                       ("unique coverage", "P marginal top-5"))
    assert row["stats"]["diff"] == pytest.approx(1.0) and row["p"] == "0.0167"
    assert row["B − A"] == "ρ = +1.000" and row["significant at 0.05"] == "yes"
    assert (row["statistic"], row["marginal"]) == ("unique coverage", "P marginal top-5")
    assert row["test"] == "Spearman, exact permutation (120 orderings)"
    assert (row["id"], row["metric"]) == ("attribution.rho.top5.p_coverage",
                                          "top-5: ρ(P marginal, unique coverage)")
    assert "ρ = +1.000 over 5 settings; significant" in row["sentence"]


def test_attribution_normalises_to_tandem_and_in_domain():
    m = np.array([[60.0, 40.0],
                  [30.0, 50.0]])
    a = mg.attribution(m, in_domain=1)
    np.testing.assert_allclose(a["tandem"], [60.0, 50.0])
    np.testing.assert_allclose(a["q_marginal"], [50.0, 40.0])
    np.testing.assert_allclose(a["p_marginal"], [45.0, 45.0])
    np.testing.assert_allclose(a["q_rel_tandem"], [100 * 50 / 60, 100 * 40 / 50])
    np.testing.assert_allclose(a["p_rel_tandem"], [100 * 45 / 60, 100 * 45 / 50])
    np.testing.assert_allclose(a["q_rel_in_domain"], [100.0, 80.0])
    np.testing.assert_allclose(a["p_rel_in_domain"], [90.0, 90.0])
    # A perfectly "tandem-only" world: off-diagonal pairs fail, every encoder gets 1/K of its tandem.
    a = mg.attribution(np.diag([80.0, 40.0, 20.0]))
    np.testing.assert_allclose(a["q_rel_tandem"], [100 / 3] * 3)
    np.testing.assert_allclose(a["p_marginal_others"], [0.0, 0.0, 0.0])


def test_relative_and_degenerate_inputs():
    out = mg.relative(np.array([10.0, 5.0]), np.array([20.0, 0.0]))
    assert out[0] == pytest.approx(50.0) and np.isnan(out[1])
    q, p = mg.marginals(np.array([[42.0]]))
    assert q[0] == p[0] == 42.0
    assert np.isnan(mg.marginals(np.array([[42.0]]), exclude_self=True)[0][0])
    with pytest.raises(ValueError, match="square"):
        mg.marginals(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="out of range"):
        mg.attribution(np.eye(2), in_domain=2)


def test_check_dims_names_the_runs():
    assert mg.check_dims({"a": 32, "b": 32}) == 32
    with pytest.raises(ValueError, match="same embedding dimension.*a: 32, b: 48"):
        mg.check_dims({"a": 32, "b": 48})


def test_parse_runs_names_and_steps():
    runs = mg.parse_runs(["x/run_a", "y/run_a", "z/run_b@30"])
    assert [r.name for r in runs] == ["run_a", "run_a#2", "run_b@30"]
    assert runs[2].workdir == "z/run_b" and runs[2].step == 30 and runs[0].step is None


def test_dimension_mismatch_is_reported_before_any_work(tmp_path):
    dirs = []
    for name, hidden in (("r32", 32), ("r48", 48)):
        d = tmp_path / name
        d.mkdir()
        c = tiny_synthetic_config(tmp_path, **{"model.tiny_hidden": hidden})
        (d / "config.json").write_text(c.to_json_best_effort())
        dirs.append(str(d))
    with pytest.raises(ValueError, match="r32: 32, r48: 48"):
        mg.run_marginalization(dirs, str(tmp_path / "missing.csv"))


# ------------------------------------------------------------------ tiny end-to-end
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate as train
    from dense_cf.synthetic import generate as synthetic
    data_dir = tmp_path_factory.mktemp("synth_mg")
    synthetic.generate(str(data_dir), num_passages=240, seed=2, workers=1, num_hard_negatives=1)
    runs = []
    for seed in (0, 1):
        wd = str(tmp_path_factory.mktemp(f"run{seed}"))
        train(tiny_synthetic_config(data_dir, **{"train.num_steps": 2, "seed": seed,
                                                 "train.checkpoint_every": 2}), wd)
        runs.append(wd)
    return data_dir, runs


def test_marginalize_end_to_end(two_runs, tmp_path):
    from dense_cf.eval.retrieval import evaluate_run
    data_dir, runs = two_runs
    out = str(tmp_path / "mg")
    test = str(data_dir / "synth-test.qa.csv")
    rep = mg.run_marginalization(runs, test, ks=(1, 5, 20), out_dir=out, in_domain=0)
    names = [r["name"] for r in rep["runs"]]
    assert len(names) == 2 and rep["corpus_size"] == 240 and rep["n_questions"] > 0
    for k in (1, 5, 20):
        m = np.asarray(rep["matrix"][k])
        assert m.shape == (2, 2) and ((0 <= m) & (m <= 100)).all()
        a = rep["attribution"][k]
        np.testing.assert_allclose(a["q_marginal"], m.mean(axis=1))
        np.testing.assert_allclose(a["p_marginal"], m.mean(axis=0))
    assert (np.asarray(rep["matrix"][1]) <= np.asarray(rep["matrix"][20])).all()
    # A tandem cell is exactly the run's own retrieval evaluation (shared export reused).
    own = evaluate_run(runs[1], out_dir=str(tmp_path / "own1"))
    assert own["timing"]["index_reused"]
    for k in (1, 5, 20):
        assert rep["matrix"][k][1, 1] == pytest.approx(own["top_k"][k])
    saved = json.load(open(os.path.join(out, "report.json")))
    assert saved["in_domain"] == names[0] and saved["rows"] == "question encoder"
    assert np.allclose(saved["matrix"]["5"], rep["matrix"][5])
    md = open(os.path.join(out, "report.md")).read()
    assert "marginalised contributions" in md and names[1] in md
    # Statistics (issue 16): every cell's Wilson interval, per-question outcomes of every pair,
    # and each cross pair tested against its question encoder's tandem.
    assert set(saved["first_hit_rank"]) == {"0,0", "0,1", "1,0", "1,1"}
    assert all(len(v) == rep["n_questions"] for v in saved["first_hit_rank"].values())
    for k in (1, 5, 20):
        for i in range(2):
            for j in range(2):
                lo, hi = rep["matrix_ci"][k][i][j]
                assert lo <= rep["matrix"][k][i, j] <= hi
    assert "Cross pairs vs. the question encoder's tandem" in md
    assert "Passage vs question encoder" in md and "| top-5: " + names[0] + " |" in md
    assert len(saved["encoder_contrast"]) == 2 * 3 and "p_value" in saved["encoder_contrast"][0]
    assert f"| top-5: Q {names[0]} × P {names[1]} |" in md and "McNemar exact" in md
    assert md.count("significant at 0.05") >= 6
    assert os.path.getsize(os.path.join(out, "heatmap.png")) > 1000
    text = mg.summary_text(rep)
    assert "top-20 (%)" in text and "P-marg" in text
    # Second call reuses the exports, indexes and question embeddings and gives the same matrix.
    again = mg.run_marginalization(runs, test, ks=(1, 5, 20), out_dir=out)
    assert all(t["index_reused"] for t in again["timing"]["per_run"].values())
    np.testing.assert_array_equal(again["matrix"][20], rep["matrix"][20])


def test_marginalize_cli(two_runs, tmp_path, capsys):
    data_dir, runs = two_runs
    out = str(tmp_path / "cli")
    # argparse's ``--workdirs A B`` still works: the runs after the first are arguments.
    rep = marginalize_cli.run_cli(["--workdirs", *runs, "--test",
                                   str(data_dir / "synth-test.qa.csv"),
                                   "--corpus", str(data_dir / "psgs_synth.tsv"), "--k", "1,20",
                                   "--out", out])
    assert [r["name"] for r in rep["runs"]] == [os.path.basename(r) for r in runs]
    printed = capsys.readouterr().out
    assert "top-1 (%)" in printed and "top-20 (%)" in printed
    assert json.load(open(os.path.join(out, "report.json")))["ks"] == [1, 20]


def test_marginalize_many_other_corpus_exported_once(two_runs, tmp_path):
    from dense_cf.synthetic import generate as synthetic
    data_dir, runs = two_runs
    other = tmp_path / "work_domain"
    synthetic.generate(str(other), num_passages=90, seed=5, workers=1, num_hard_negatives=0,
                       entity_types=("work",))
    sets = [mg.TestSet(str(data_dir / "synth-test.qa.csv"), out_dir=str(tmp_path / "a")),
            mg.TestSet(str(other / "synth-test.qa.csv"), str(other / "psgs_synth.tsv"),
                       in_domain=1, out_dir=str(tmp_path / "b"))]
    own, cross = mg.marginalize_many(runs, sets, ks=(1, 20))
    assert own["corpus_size"] == 240 and cross["corpus_size"] == 90
    assert cross["in_domain"] == cross["runs"][1]["name"]
    for r, wd in zip(cross["runs"], runs):
        # A foreign corpus gets its own export directory under the run, never the run's own.
        assert r["export_root"].startswith(os.path.join(wd, "marginalize", "psgs_synth-"))
    for r, wd in zip(own["runs"], runs):
        assert r["export_root"] == wd
    np.testing.assert_allclose(cross["attribution"][20]["q_rel_in_domain"],
                               100 * np.asarray(cross["matrix"][20]).mean(axis=1)
                               / cross["matrix"][20][1, 1])
    again = mg.marginalize_many(runs, sets[1:], ks=(1, 20))[0]
    assert all(t["encoded_this_run"] == 0 for t in again["timing"]["per_run"].values())


def test_marginalize_with_a_dcsr_passage_encoder(two_runs, tmp_path):
    """A DCSR run's passage side retrieves through its sentence index + HasAns (docs/method.md §4)."""
    from dense_cf.eval.retrieval import evaluate_run
    from dense_cf.experiment import train_and_evaluate as train
    data_dir, runs = two_runs
    dcsr = str(tmp_path / "dcsr")
    train(tiny_synthetic_config(data_dir, **{
        "method": "dcsr", "loss.lam": 0.0, "loss.tau1": 0.0, "loss.tau2": 0.0,
        "train.num_steps": 2, "train.checkpoint_every": 2}), dcsr)
    rep = mg.run_marginalization([runs[0], dcsr], str(data_dir / "synth-test.qa.csv"),
                                 ks=(1, 20), out_dir=str(tmp_path / "out"))
    own = evaluate_run(dcsr, out_dir=str(tmp_path / "own"))
    assert own["unit"] == "sentence"
    for k in (1, 20):
        assert rep["matrix"][k][1, 1] == pytest.approx(own["top_k"][k])
        assert ((0 <= rep["matrix"][k]) & (rep["matrix"][k] <= 100)).all()
