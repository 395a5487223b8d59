"""``python -m dense_cf.bench.jax_search`` end to end at a tiny size (docs/scale.md)."""

import json
import os
import subprocess
import sys

from helpers import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_benchmark_command_runs_without_faiss_and_tensorflow(tmp_path):
    """The GPU command at a tiny size, as the GPU host runs it: faiss and TensorFlow
    unimportable, corpus made on the devices; every check row is exact against select=sort."""
    out = tmp_path / "bench.json"
    script = ("import runpy, sys; sys.modules['tensorflow'] = None; sys.modules['faiss'] = None; "
              "sys.argv = ['bench'] + sys.argv[1:]; "
              "runpy.run_module('dense_cf.bench.jax_search', run_name='__main__')")
    args = ["--n=3000,5000", "--dim=16", "--dtypes=bfloat16", "--batches=16,32",
            "--queries=64", "--check_queries=32", "--chunk_rows=64,128", "--block_rows=1024",
            "--data=device", "--max_search_s=0.2", "--select=auto,bmc,chunked,sort",
            "--bin_rows=4,8",
            "--bandwidth_gbs=10", "--peak_tflops=1", f"--json_out={out}"]
    env = dict(os.environ, XLA_FLAGS=xla_flags(1))
    r = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "q/s" in r.stdout and "chunk_rows=" in r.stdout and "bin_rows=" in r.stdout
    assert "was fastest at n=3000" in r.stdout and "summary n=5000 bfloat16 batch=32" in r.stdout
    rows = json.load(open(out))["rows"]
    assert {row["n"] for row in rows} == {3000, 5000}
    # Per batch: sort once, bmc per bin size and chunked per chunk size (n=5000: the fastest
    # of each only). auto would be bmc with bins of 128 rows, but blocks of 1,024 rows hold 8
    # such bins < k = 100, so auto runs sort: the same row as sort's.
    assert len(rows) == 2 * (1 + 2 + 2) + 2 * (1 + 1 + 1)
    assert sum(row["select"] == "sort" for row in rows) == 4
    assert {row["auto_runs"] for row in rows} == {"sort"}
    for row in rows:
        if row["select"] == "bmc":
            assert row["counters"]["bmc_blocks"] > 0 and row["bin_rows"] in (4, 8)
    for row in rows:
        assert row["qps"] > 0
        assert row["recall@100_vs_float32"] > 0.9
        if row["batch"] == 16:
            assert row["exact_vs_sort"] == {"ids": 1.0, "scores": 1.0, "max_abs_score_diff": 0.0}
