"""The study harness (``dense_cf.studies.harness``): run naming per seed owned by it alone, the
common flags, reuse of finished runs (a fake trainer, no training), paired comparison and the
summary over seeds."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pathlib
import re

import ml_collections
import pytest
from absl import flags

from dense_cf.configs.base import base_config, resolve_paths
from dense_cf.eval import stats
from dense_cf.files import write_json
from dense_cf.studies import harness
from dense_cf.train.run import RunDir

ROOT = pathlib.Path(__file__).resolve().parents[1] / "dense_cf"
HARNESS = ROOT / "studies" / "harness.py"
# A run or study directory name built from a seed: f"_seed{seed}", "_seed" + str(seed),
# "_seed%d" % seed, "_seed{}".format(seed), "seed" + str(seed).
SEED_NAMING = re.compile(r"""_seed\{|['"]_seed|_seed%|['"]seed['"]\s*\+\s*str\(""")


def test_only_the_harness_names_runs_by_seed():
    offenders = sorted(f"{p.relative_to(ROOT.parent)}:{i}: {line.strip()}"
                       for p in ROOT.rglob("*.py") if p != HARNESS
                       for i, line in enumerate(p.read_text().splitlines(), 1)
                       if SEED_NAMING.search(line))
    assert not offenders, ("seed-suffixed run names are built only by dense_cf.studies.harness "
                           "(seed_name / run_dir / seed_out):\n" + "\n".join(offenders))
    assert SEED_NAMING.search(HARNESS.read_text())  # the pattern still finds the one copy


def test_run_naming():
    assert harness.seed_name("dpr", 0) == "dpr" and harness.seed_name("dpr", 2) == "dpr_seed2"
    assert harness.run_dir("out", "picl", 0) == os.path.join("out", "picl")
    assert harness.run_dir("out", "picl", 3) == os.path.join("out", "picl_seed3")
    assert harness.seed_out("runs/study/", 0) == os.path.normpath("runs/study")
    assert harness.seed_out("runs/study/", 1) == os.path.normpath("runs/study") + "_seed1"


def test_parse_seeds():
    assert harness.parse_seeds(["0", "2", "1"]) == [0, 2, 1]
    with pytest.raises(ValueError, match="at least one"):
        harness.parse_seeds([])
    with pytest.raises(ValueError, match="repeats"):
        harness.parse_seeds(["1", "1"])


def test_study_flags_are_defined_once_with_the_studys_defaults():
    fv = flags.FlagValues()
    f = harness.define_study_flags(fv, out=None, steps=40, help={"lr": "Learning rate (both)."})
    fv(["prog", "--seeds=0,3", "--model=tiny"])
    assert (f.out.value, f.steps.value, f.lr.value, f.model.value, f.batch.value) == (
        None, 40, 5e-5, "tiny", 16)
    assert f.seed_list() == [0, 3] and fv["lr"].help == "Learning rate (both)."


def _fake_trainer(calls: list, *, evaluate: bool = True):
    """Writes what a finished, evaluated run leaves behind (config, summary, reports)."""
    def train(config, workdir):
        calls.append(workdir)
        rd = RunDir(workdir)
        os.makedirs(workdir, exist_ok=True)
        write_json(rd.config, json.loads(resolve_paths(config).to_json_best_effort()))
        step = int(config.train.num_steps)
        write_json(rd.summary, {"step": step, **({"eval": {}} if evaluate else {})})
        if evaluate:
            os.makedirs(rd.eval(step), exist_ok=True)
            for name in ("report.json", "aar.json"):
                write_json(os.path.join(rd.eval(step), name), {})
        return {"step": step, "run": object()}
    return train


def test_train_or_reuse_trains_once_then_reuses(tmp_path):
    c = base_config()
    c.train.num_steps = 3
    wd = harness.run_dir(str(tmp_path), "dpr", 1)
    calls: list = []
    eval_dir, trained = harness.train_or_reuse(wd, c, train=_fake_trainer(calls))
    assert trained and calls == [wd] and eval_dir == RunDir(wd).eval(3)
    again, trained = harness.train_or_reuse(wd, c, train=_fake_trainer(calls))
    assert not trained and again == eval_dir and calls == [wd]   # not retrained
    # The training invocation's start and end, kept for every later report (issue 50).
    times = harness.run_times(wd)
    assert times["started"] <= times["finished"] and "commit" in times
    stamp = harness.report_stamp(times["started"], {"dpr": wd, "old": str(tmp_path / "none")})
    assert stamp["runs"]["dpr"] == times and stamp["runs"]["old"]["started"].startswith("unknown")
    md = harness.stamp_markdown(stamp)
    assert f"- dpr: {times['started']} → {times['finished']}" in md
    c.train.num_steps = 4                                        # another run: refused
    with pytest.raises(ValueError, match="train.num_steps"):
        harness.train_or_reuse(wd, c, train=_fake_trainer(calls))


def test_an_evaluation_only_run_evaluates_the_trained_model_again(tmp_path):
    """StudyRun.trained_by: the run gets a copy of the earlier run's final checkpoint, so its
    trainer has no step left and only evaluates under its own eval.* settings."""
    c = base_config()
    c.train.num_steps = 3
    seen: dict[str, list[str]] = {}

    def train(config, workdir):
        ck = RunDir(workdir).checkpoints
        seen[workdir] = sorted(os.listdir(ck)) if os.path.isdir(ck) else []
        if not seen[workdir]:  # nothing to resume: it trains, leaving its final checkpoint
            os.makedirs(os.path.join(ck, "3"))
            with open(os.path.join(ck, "3", "weights"), "w") as f:
                f.write(workdir)
        return _fake_trainer([])(config, workdir)

    again = ml_collections.ConfigDict(c.to_dict())
    again.eval.robustness_counts = (0, 4)
    study = harness.Study("s", (harness.StudyRun("a", lambda seed: c),
                                harness.StudyRun("b", lambda seed: again, trained_by="a")))
    done = harness.train_study(study, str(tmp_path / "s"), [0], train=train)
    wa, wb = done["a", 0].workdir, done["b", 0].workdir
    assert seen == {wa: [], wb: ["3"]}              # b resumed a's model at its last step
    copied = os.path.join(RunDir(wb).checkpoints, "3", "weights")
    with open(copied) as f:
        assert f.read() == wa
    assert not os.path.samefile(copied, os.path.join(RunDir(wa).checkpoints, "3", "weights"))
    assert done["b", 0].trained and done["b", 0].same_as is None
    # Anything but eval.* would be another model: refused, naming the field.
    other = ml_collections.ConfigDict(c.to_dict())
    other.optim.learning_rate = 1e-3
    bad = harness.Study("t", (harness.StudyRun("a", lambda seed: c),
                              harness.StudyRun("b", lambda seed: other, trained_by="a")))
    with pytest.raises(ValueError, match=r"eval\.\* only; its config differs in "
                                         r"optim\.learning_rate"):
        harness.train_study(bad, str(tmp_path / "t"), [0], train=train)
    with pytest.raises(ValueError, match="not an earlier run"):
        harness.Study("u", (harness.StudyRun("b", lambda seed: again, trained_by="a"),
                            harness.StudyRun("a", lambda seed: c)))


def test_a_resumed_run_keeps_its_first_start(tmp_path, monkeypatch):
    """A run killed mid-training and resumed by a later invocation is stamped with the first
    invocation's start, the resumption listed (issue 50: a report gives each run's start)."""
    c = base_config()
    c.train.num_steps = 3
    wd = harness.run_dir(str(tmp_path), "dpr", 0)
    clock = iter(["2026-11-29T01:00:00Z", "2026-11-29T03:00:00Z", "2026-11-29T03:30:00Z"])
    monkeypatch.setattr(harness, "utc_now", lambda: next(clock))

    def killed(config, workdir):
        raise KeyboardInterrupt  # the process dies before the run finishes

    with pytest.raises(KeyboardInterrupt):
        harness.train_or_reuse(wd, c, train=killed)
    assert harness.run_times(wd)["finished"] is None            # started, not finished
    assert "2026-11-29T01:00:00Z → …" in harness.format_run_times(harness.run_times(wd))
    harness.train_or_reuse(wd, c, train=_fake_trainer([]))      # resumed and finished
    times = harness.run_times(wd)
    assert (times["started"], times["finished"]) == ("2026-11-29T01:00:00Z", "2026-11-29T03:30:00Z")
    assert [r["started"] for r in times["resumed"]] == ["2026-11-29T03:00:00Z"]
    md = harness.stamp_markdown({"runs": {"dpr": times}})
    assert "- dpr: 2026-11-29T01:00:00Z → 2026-11-29T03:30:00Z" in md
    assert "(resumed 2026-11-29T03:00:00Z" in md


def test_reuse_false_keeps_a_finished_runs_training_times(tmp_path, monkeypatch):
    """train_study(reuse=False) resumes a finished run at its last step to evaluate it again:
    that is not training, so the run's start and end stay those of its training (a report
    stamped after a restart gave the 4 s re-evaluation as the run's training) and it is not
    counted as trained (the ETA and replicate's minutes per run)."""
    clock = iter(f"2026-11-29T0{h}:00:00Z" for h in range(10))
    monkeypatch.setattr(harness, "utc_now", lambda: next(clock))
    out, calls = str(tmp_path), []
    study = harness.Study("toy", (harness.StudyRun("a", lambda seed: base_config()),))
    where = lambda name, seed: os.path.join(out, "runs", name)  # noqa: E731
    first = harness.train_study(study, out, [0], reuse=False, train=_fake_trainer(calls),
                                workdir=where)
    wd = first["a", 0].workdir
    times = harness.run_times(wd)
    assert first["a", 0].trained and (times["started"], times["finished"]) == (
        "2026-11-29T00:00:00Z", "2026-11-29T01:00:00Z")
    again = harness.train_study(study, out, [0], reuse=False, train=_fake_trainer(calls),
                                workdir=where)
    assert calls == [wd, wd] and again["a", 0].run is not None   # trained again: the Run is kept
    assert not again["a", 0].trained and harness.run_times(wd) == times
    # A run with no evaluation of its own (the data-stats runs: marginalisation evaluates
    # them) is finished by its summary's step alone.
    bare = harness.train_study(study, out, [0], reuse=False,
                               train=_fake_trainer(calls, evaluate=False),
                               workdir=lambda name, seed: os.path.join(out, "bare", name))
    bare_times = harness.run_times(bare["a", 0].workdir)
    harness.train_study(study, out, [0], reuse=False, train=_fake_trainer(calls, evaluate=False),
                        workdir=lambda name, seed: os.path.join(out, "bare", name))
    assert harness.run_times(bare["a", 0].workdir) == bare_times
    # Killed after its last step, before its end was written: the next invocation completes
    # the record (its start kept, the resumption listed).
    write_json(os.path.join(wd, harness.RUN_TIMES), {**times, "finished": None})
    harness.train_study(study, out, [0], reuse=False, train=_fake_trainer(calls), workdir=where)
    done = harness.run_times(wd)
    assert done["started"] == times["started"] and done["finished"] not in (None, times["finished"])
    assert len(done["resumed"]) == 1


def test_train_or_read_gives_the_saved_summary_trained_or_reused(tmp_path):
    """studies.dcsr's rows come from the run's summary.json whether it trained now or not."""
    c = base_config()
    c.train.num_steps = 2
    wd = harness.run_dir(str(tmp_path), "dcsr", 0)
    calls: list = []
    first, trained = harness.train_or_read(wd, c, train=_fake_trainer(calls))
    assert trained and first == {"step": 2, "eval": {}} and "run" not in first
    again, trained = harness.train_or_read(wd, c, train=_fake_trainer(calls))
    assert not trained and again == first and calls == [wd]


def test_train_or_reuse_says_when_training_left_no_evaluation(tmp_path):
    with pytest.raises(RuntimeError, match="no evaluation after training"):
        harness.train_or_reuse(str(tmp_path / "r"), base_config(),
                               train=_fake_trainer([], evaluate=False))


def test_compare_runs_pairs_through_eval_compare(monkeypatch):
    seen = {}
    monkeypatch.setattr(harness.compare_lib, "compare",
                        lambda a, b, **kw: seen.update(a=a, b=b, **kw) or {"rows": []})
    harness.compare_runs(("A", 5), ("B", None), ("dpr", "picl"), n_resamples=10, seed=2)
    assert seen == {"a": "A", "b": "B", "step_a": 5, "step_b": None, "seed": 2,
                    "names": ("dpr", "picl"), "n_resamples": 10, "verbose": False}


def _fake_study(out, *, seed, scale):
    """A study that writes its summary.json: one figure per seed."""
    res = {"seed": seed, "rows": [{"run": "a", "seed": seed, "x": scale * (seed + 1)}]}
    write_json(os.path.join(out, "summary.json"), res)
    return res


def _summarise(results):
    spread = stats.seed_table([r for res in results for r in res["rows"]], ("run",), ("x",))
    seeds = [r["seed"] for r in results]
    return {"seeds": seeds, "seed_spread": spread,
            "markdown": harness.spread_section(seeds, spread, ["run", "seeds", "x"]) + "\n"}


def test_over_seeds_summary_files_and_math(tmp_path):
    out = str(tmp_path / "study")
    res = harness.study_over_seeds(_fake_study, _summarise, out, [0, 1], scale=2.0)
    # x = 2, 4: mean 3, sample std sqrt(2) = 1.41.
    assert res["seed_spread"] == [{"run": "a", "seeds": 2, "x": "3.00 ± 1.41 [2.00, 4.00]"}]
    assert res["summaries"] == {0: os.path.join(os.path.abspath(out), "summary.json"),
                                1: os.path.abspath(out) + "_seed1/summary.json"}
    assert [r["seed"] for r in res["per_seed"]] == [0, 1]
    saved = json.load(open(os.path.join(out, "over_seeds.json")))
    assert "markdown" not in saved and saved["seeds"] == [0, 1]
    md = open(os.path.join(out, "over_seeds.md")).read()
    assert md == res["markdown"] and md.startswith("## Mean ± std [min, max] over seeds [0, 1]")
    assert "| a | 2 | 3.00 ± 1.41 [2.00, 4.00] |" in md
    # One seed: that seed's result as it is, nothing written over seeds.
    os.remove(os.path.join(out, "over_seeds.json"))
    one = harness.study_over_seeds(_fake_study, _summarise, out, [0], scale=2.0)
    assert one == {"seed": 0, "rows": [{"run": "a", "seed": 0, "x": 2.0}]}
    assert not os.path.exists(os.path.join(out, "over_seeds.json"))


def test_finished_eval_dir_takes_relative_paths(tmp_path, monkeypatch):
    # A run saves its config with absolute paths; a relative --out must still match it.
    monkeypatch.chdir(tmp_path)
    c = base_config()
    c.data.data_dir = "out/data"
    os.makedirs("out/run")
    write_json("out/run/config.json", json.loads(resolve_paths(c).to_json_best_effort()))
    assert harness.finished_eval_dir("out/run", c) is None  # same config, not trained yet
    c.data.data_dir = "out/other"
    with pytest.raises(ValueError, match="data.data_dir"):
        harness.finished_eval_dir("out/run", c)


def test_finished_eval_dir_reads_fields_added_since_at_their_defaults(tmp_path):
    # A run saved before a config field existed was trained as if it had the default.
    c = resolve_paths(base_config())
    saved = json.loads(c.to_json_best_effort())
    del saved["data"]["synthetic"]["world"], saved["reader"]
    write_json(os.path.join(tmp_path, "config.json"), saved)
    assert harness.finished_eval_dir(str(tmp_path), c) is None   # reusable, not trained yet
    c.data.synthetic.world = "mixed"                             # not the default: refused
    with pytest.raises(ValueError, match="data.synthetic.world"):
        harness.finished_eval_dir(str(tmp_path), c)


def test_finished_eval_dir_reuses_a_run_that_differs_only_in_implementation(tmp_path):
    # The attention kernel is an implementation choice (same math): a finished run is reused.
    c = resolve_paths(base_config())
    saved = json.loads(c.to_json_best_effort())
    saved["model"]["attention_impl"] = "einsum"
    write_json(os.path.join(tmp_path, "config.json"), saved)
    assert c.model.attention_impl != "einsum"
    assert harness.finished_eval_dir(str(tmp_path), c) is None   # reusable, not trained yet
    c.model.dropout = 0.0                                        # a real difference: refused
    with pytest.raises(ValueError, match="model.dropout"):
        harness.finished_eval_dir(str(tmp_path), c)


def test_finished_eval_dir_ignores_added_token_init_for_methods_without_added_tokens(tmp_path):
    # dcsr.sent_init initialises DCSR's <sent> row only: a DPR run saved under another value is
    # reused; a DCSR run is refused, since for it the field changes the model.
    c = resolve_paths(base_config())
    saved = json.loads(c.to_json_best_effort())
    saved["dcsr"]["sent_init"] = "cls"
    write_json(os.path.join(tmp_path, "config.json"), saved)
    assert c.method == "dpr" and c.dcsr.sent_init != "cls"
    assert harness.finished_eval_dir(str(tmp_path), c) is None
    c.method = "dcsr"
    saved["method"] = "dcsr"
    write_json(os.path.join(tmp_path, "config.json"), saved)
    with pytest.raises(ValueError, match="dcsr.sent_init"):
        harness.finished_eval_dir(str(tmp_path), c)


@pytest.mark.parametrize("name", ["replicate", "ablation", "multihop", "marginalize",
                                  "data_stats", "dcsr"])
def test_each_study_is_its_own_binary_and_the_bench_aliases_are_gone(name):
    # Issue 48 item 5: one owner per command. python -m dense_cf.studies.<name> is the study's
    # binary (its main and FLAGS); the former dense_cf.bench.<name> aliases no longer exist.
    study = importlib.import_module(f"dense_cf.studies.{name}")
    assert callable(study.main)
    assert isinstance(study.FLAGS, flags.FlagValues) and "seeds" in study.FLAGS
    assert importlib.util.find_spec(f"dense_cf.bench.{name}") is None
    assert not (ROOT / "bench" / name).exists() and not (ROOT / "bench" / f"{name}.py").exists()


def _two_run_study(steps_b: int = 2) -> harness.Study:
    def cfg(steps):
        def make(seed):
            c = base_config()
            c.seed, c.train.num_steps = seed, steps
            return c
        return make
    return harness.Study("toy", (harness.StudyRun("a", cfg(2)), harness.StudyRun("b", cfg(steps_b)),
                                 harness.StudyRun("c", cfg(3))), (("a", "b"), ("a", "c")))


def test_study_definition_refuses_repeated_or_unknown_runs():
    run = harness.StudyRun("a", lambda seed: base_config())
    with pytest.raises(ValueError, match="repeat"):
        harness.Study("s", (run, run))
    with pytest.raises(ValueError, match="does not have"):
        harness.Study("s", (run,), (("a", "z"),))


def test_train_study_trains_each_run_and_seed_once_then_reuses(tmp_path):
    out, calls = str(tmp_path), []
    study = _two_run_study()          # b has a's config: it is a's run
    done = harness.train_study(study, out, [0, 1], train=_fake_trainer(calls))
    assert list(done) == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1)]
    assert calls == [harness.run_dir(out, n, s) for s in (0, 1) for n in ("a", "c")]
    b = done["b", 1]
    assert b.same_as == "a" and b.workdir == harness.run_dir(out, "a", 1) and not b.trained
    assert done["c", 0].eval_dir == RunDir(harness.run_dir(out, "c", 0)).eval(3)
    assert done["c", 0].summary == {"step": 3, "eval": {}} and done["c", 0].run is None
    again = harness.train_study(study, out, [0, 1], train=_fake_trainer(calls))
    assert len(calls) == 4 and not any(t.trained for t in again.values())  # all read back
    kept = harness.train_study(study, out, [0], reuse=False, train=_fake_trainer(calls),
                               workdir=lambda name, seed: os.path.join(out, "runs", name))
    assert calls[4:] == [os.path.join(out, "runs", n) for n in ("a", "c")]
    assert kept["a", 0].run is not None and kept["a", 0].trained


def test_compare_study_pairs_per_seed_and_skips_one_run_pairs(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(harness, "compare_runs", lambda a, b, names, **kw: (
        seen.append((a, b, names)) or {"rows": [names]}))
    study = _two_run_study()
    done = harness.train_study(study, str(tmp_path), [0, 4], train=_fake_trainer([]))
    res = harness.compare_study(study, done, [0, 4], label=lambda n, s: f"{n}{s}")
    # (a, b) is one run (same config): left out; (a, c) at each seed, named by the label
    assert [(c.a, c.b, c.seed) for c in res] == [("a", "c", 0), ("a", "c", 4)]
    assert seen[1] == ((done["a", 4].workdir, 2), (done["c", 4].workdir, 3), ("a4", "c4"))

    def fail(*a, **k):
        raise FileNotFoundError("no outcomes")
    monkeypatch.setattr(harness, "compare_runs", fail)
    with pytest.raises(FileNotFoundError):
        harness.compare_study(study, done, [0])
    caught = harness.compare_study(study, done, [0], catch=True)
    assert isinstance(caught[0].result, FileNotFoundError)


def test_studies_are_definitions_built_without_training(tmp_path):
    """Each study's runs and pairs are data (no training): names, configs at a seed, pairs."""
    from dense_cf import demo
    from dense_cf.studies import ablation, dcsr, multihop

    abl = ablation.definition(["dpr", "picl", "dpr_chn"], str(tmp_path), steps=3, batch=4,
                              model="tiny", lr=1e-4, num_passages=100, test_questions=20)
    assert [r.name for r in abl.runs] == ["dpr", "picl", "dpr_chn"]
    assert abl.pairs == (("dpr", "picl"), ("dpr", "dpr_chn"), ("picl", "dpr"), ("picl", "dpr_chn"))
    c = abl.runs[2].config(5)
    assert (c.seed, c.train.num_steps, c.data.data_dir) == (5, 3, str(tmp_path))

    d = dcsr.definition({"default": "d0", "many_q": "d1"}, "mixed", steps=2, batch=4,
                        model="tiny", lr=1e-4)
    assert [r.name for r in d.runs] == ["mixed_default_dpr", "mixed_default_dcsr",
                                        "mixed_many_q_dpr", "mixed_many_q_dcsr"]
    assert d.pairs[1] == ("mixed_many_q_dpr", "mixed_many_q_dcsr")
    c = d.runs[3].config(2)
    assert (c.method, c.seed, c.data.data_dir, d.runs[3].required) == ("dcsr", 2, "d1", ())

    dm = demo.definition(["dpr", "picl", "eadpr"], "syn", num_steps=7)
    assert dm.pairs == (("dpr", "picl"), ("dpr", "eadpr"))
    c = dm.runs[1].config(1)
    assert (c.method, c.seed, c.train.num_steps, c.data.data_dir) == ("picl", 1, 7, "syn")

    mh = multihop.definition("mh", steps=2, batch=4, num_hard=0, beam_size=2, hop2_k=2,
                             lr=1e-4, seed=9, model="tiny")
    assert mh.pairs == (("mdr", "mdr-eadpr"),) and mh.runs[1].config(3).seed == 3
