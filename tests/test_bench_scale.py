"""bench.scale: the end-to-end-at-scale stages (docs/scale.md "End to end at scale")."""

import json
import os
import subprocess
import sys

import pytest

from dense_cf.bench import scale


def _rec(stage, n, wall, disk, rss):
    return {"stage": stage, "passages": n, "wall_s": wall, "disk_bytes": disk,
            "peak_rss_bytes": rss, "cpu_s": wall}


def test_project_two_point_line_and_hosts():
    small = [_rec("store", 100, 10.0, 1_000, 500), _rec("export", 100, 30.0, 200, 900),
             _rec("train", 100, 50.0, 7, 1_000)]
    big = [_rec("store", 1_000, 55.0, 10_000, 500), _rec("export", 1_000, 210.0, 2_000, 1_800),
           _rec("train", 1_000, 52.0, 7, 1_100)]
    p = {r["stage"]: r for r in scale.project(big, 10_000, 4, baseline=small)}
    # store: 5 + 0.05 n s, 10 B/passage, RSS flat; one sequential pass: 4 hosts do not help.
    assert p["store"]["one_host_s"] == pytest.approx(505.0)
    assert p["store"]["hosts_s"] == pytest.approx(505.0)
    assert p["store"]["disk_bytes"] == pytest.approx(100_000)
    assert p["store"]["peak_rss_measured"] == [[100, 500], [1_000, 500]]
    # export: 10 + 0.2 n s, data-parallel: each of 4 hosts gets 2,500 passages.
    assert p["export"]["one_host_s"] == pytest.approx(2_010.0)
    assert p["export"]["hosts_s"] == pytest.approx(510.0)
    assert p["export"]["disk_bytes_per_host"] == pytest.approx(5_000)
    assert p["export"]["peak_rss_measured"] == [[100, 900], [1_000, 1_800]]  # not extrapolated
    # training runs a fixed number of steps: carried over as measured.
    assert p["train"]["one_host_s"] == 52.0 and p["train"]["disk_bytes"] == 7
    assert {r["fit"] for r in p.values()} == {"two-point"}


def test_project_without_baseline_is_proportional():
    (p,) = scale.project([_rec("index", 1_000, 20.0, 4_000, 300)], 5_000, 2)
    assert p["fit"] == "proportional"
    assert p["one_host_s"] == pytest.approx(100.0) and p["hosts_s"] == pytest.approx(50.0)
    assert p["disk_bytes"] == pytest.approx(20_000)
    assert p["peak_rss_measured"] == [[1_000, 300]]


def test_bench_scale_runs_every_stage_and_resumes(tmp_path):
    out = tmp_path / "scale"
    cmd = [sys.executable, "-m", "dense_cf.bench.scale", f"--out={out}", "--num_passages=400",
           "--train_questions=64", "--test_questions=24", "--max_mined=40", "--project_n=4000",
           "--project_hosts=2", "--override=train.num_steps=2", "--override=model.tiny_hidden=32",
           "--override=eval.batch_size=64", "--override=train.global_batch=8",
           # Grain: the train stage without TensorFlow's import (about half a tiny run's CPU);
           # the subject here is the stages and their resume, not the input pipeline.
           "--override=data.pipeline=grain", "--override=data.grain_threads=2"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
    res = json.loads((out / "scale.json").read_text())
    recs = {r["stage"]: r for r in res["records"]}
    assert list(recs) == list(scale.STAGES)
    for r in recs.values():
        assert r["wall_s"] > 0 and r["peak_rss_bytes"] > 0 and r["disk_bytes"] > 0, r
    assert recs["store"]["passages"] == 400 and recs["export"]["encoded_this_run"] == 400
    # The index and eval stages reuse the export (content-keyed): nothing is encoded again.
    assert recs["index"]["encoded_this_run"] == 0 and recs["index"]["index_reused"] is False
    assert recs["eval"]["timing"]["encoded_this_run"] == 0
    assert recs["eval"]["timing"]["index_reused"] is True
    assert recs["eval"]["questions"] == 24 and set(recs["eval"]["top_k"]) == {"1", "5", "20", "100"}
    assert len(res["projection"]) == len(scale.STAGES)
    assert "Linear projection to 4,000 passages" in (out / "scale.md").read_text()
    # Run again: every stage is finished, none runs (records unchanged).
    before = {s: (out / "stages" / f"{s}.json").stat().st_mtime for s in scale.STAGES}
    subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
    assert {s: (out / "stages" / f"{s}.json").stat().st_mtime for s in scale.STAGES} == before
