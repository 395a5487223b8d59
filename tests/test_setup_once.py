"""A training run resolves its method, checks its config and takes its lock once (issue 48
item 7): ``Run`` carries the ``Method``; ``experiment.train_and_evaluate`` prepares and locks,
and the loop does not do it again."""

from __future__ import annotations

import pathlib

from helpers import tiny_synthetic_config

from dense_cf import experiment, methods
from dense_cf.train import loop
from dense_cf.train import run as run_lib

TRAIN = pathlib.Path(__file__).resolve().parents[1] / "dense_cf" / "train"


def test_the_training_layer_looks_the_method_up_in_one_place():
    hits = [(p.name, n) for p in sorted(TRAIN.glob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if "methods.get(" in line]
    assert hits == [("run.py", hits[0][1])], hits


def test_train_and_evaluate_prepares_and_locks_once(tmp_path, monkeypatch):
    calls = {"validate": 0, "lock": 0}

    def count(name, fn):
        def wrapped(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapped

    # The check itself is tests/test_validate.py's: here only how often it runs, wherever a
    # module imported it from (before issue 48 experiment.py held its own copy of both).
    for module in (loop, experiment):
        monkeypatch.setattr(module, "workdir_lock", count("lock", loop.workdir_lock), raising=False)
        monkeypatch.setattr(module, "validate", count("validate", lambda c, check_files=True: None),
                            raising=False)
    seen = {}

    def fake_train(config, workdir, stop):  # the loop's body: what it is handed
        seen["config"] = config
        return {"step": 1, "total_steps": 1}, None

    monkeypatch.setattr(loop, "_train", fake_train)
    cfg = tiny_synthetic_config(tmp_path / "data")
    monkeypatch.setattr(experiment, "maybe_generate_synthetic", lambda config: None)
    experiment.train_and_evaluate(cfg, str(tmp_path / "run"))
    assert calls["validate"] == 1 and calls["lock"] == 1
    # Paths resolved and the method's loss weights filled in before the loop sees the config.
    assert seen["config"].loss.lam is not None and pathlib.Path(seen["config"].data.data_dir).is_absolute()


def test_run_carries_its_method(tmp_path):
    cfg = tiny_synthetic_config(tmp_path)
    picl = methods.get("picl")
    r = run_lib.Run(config=cfg, model=None, params=None, tokenizer=None, step=0, mesh=None,
                    rules=None)
    assert r.method is picl
    cfg.method = "dpr"  # the object travels with the run, not the name
    assert r.method is picl
    assert run_lib.method_of(cfg) is methods.get("dpr")
