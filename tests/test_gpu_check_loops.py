"""tools/gpu/check.sh stage e (the loop padded, with length buckets, packed) on the CPU at tiny
size, and the arithmetic of its figures (dense_cf.bench.gpu_check --mode=loops)."""

import json
import os
import subprocess
import sys

import pytest
from helpers import xla_flags

from dense_cf.bench import gpu_check
from dense_cf.models.hf import resolve_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_steady_step_leaves_compiles_and_saves_out():
    timing = {"compile_s": [10.0, 4.0], "checkpoint_save_s": [1.0], "checkpoint_close_s": 0.5,
              "train_s": 20.5}
    assert gpu_check.steady_step_s(timing, 12) == pytest.approx(5.0 / 10)
    assert gpu_check.steady_step_s({"compile_s": [1.0]}, 5) is None  # no train_s
    assert gpu_check.steady_step_s({"compile_s": [1.0, 1.0], "train_s": 3.0}, 2) is None


def test_compare_loops_takes_the_first_as_reference():
    def fig(step, removed, compiles):
        return {"steady_step_s": step, "loop_step_s_median": step * 1.1,
                "padding_removed": removed, "timing": {"compile_s": [1.0] * compiles}}

    out = gpu_check.compare_loops({"padded": fig(0.2, 0.0, 1), "packed": fig(0.1, 0.6, 3)})
    assert out["reference"] == "padded"
    assert out["rows"]["packed"]["speedup_vs_padded"] == pytest.approx(2.0)
    assert out["rows"]["packed"]["compiles"] == 3 and out["rows"]["padded"]["compiles"] == 1
    assert gpu_check.parse_variants(["a=/x", "b=/y"]) == [("a", "/x"), ("b", "/y")]
    for bad in (["a"], ["a=/x", "a=/y"], [], ["=/x"]):
        with pytest.raises(ValueError, match="--variants"):
            gpu_check.parse_variants(bad)


def test_stage_e_runs_the_three_layouts_on_the_same_batches(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), CHECK_SIZE="tiny", CHECK_STAGES="e",
               CHECK_WORK=str(tmp_path / "work"), CHECK_CARRY=str(tmp_path / "no_carry"),
               JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1), PYTHON=sys.executable,
               CHECK_TOKENIZER=resolve_model_dir("minilm"))
    r = subprocess.run(["bash", "tools/gpu/check.sh"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for v in ("padded", "buckets", "packed"):
        assert f"rc=0 (e_{v}.log)" in r.stdout, r.stdout[-3000:]
    loops = json.loads((out / "e_loops.json").read_text())
    assert loops["reference"] == "padded" and set(loops["rows"]) == {"padded", "buckets", "packed"}
    runs = loops["runs"]
    assert {f["steps"] for f in runs.values()} == {4}
    assert runs["padded"]["padding_removed"] == 0.0
    # Lp 128 against passages of ~70 tokens: both layouts skip padding the padded run computes.
    assert runs["buckets"]["padding_removed"] > 0 and runs["packed"]["padding_removed"] > 0
    assert all(r["compiles"] >= 1 for r in loops["rows"].values())
