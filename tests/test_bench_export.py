"""bench.export's --sweep at tiny size: every arm encodes the same rows to the same vectors, in
rounds of rotated order, and a bad arm is refused by name."""

import json

import pytest

from dense_cf.bench import export as bench_export
from dense_cf.files import UserError


def test_parse_arm():
    assert bench_export.parse_arm("c1024") == (1024, 0)
    assert bench_export.parse_arm(" c0+p256 ") == (0, 256)
    with pytest.raises(UserError, match="'fast'"):
        bench_export.parse_arm("fast")


def test_sweep_times_every_arm_on_the_same_rows(tmp_path):
    out = tmp_path / "sweep.json"
    bench_export.FLAGS(["bench", "--model=tiny", "--tiny=32,1,2", "--passages=48",
                        "--batch_size=16", "--max_p_len=48", "--repeats=2",
                        "--sweep=c0,c256,c256+p96", f"--out={out}"])
    try:
        bench_export.main([])
    finally:
        bench_export.FLAGS.unparse_flags()
    res = json.loads(out.read_text())
    assert list(res["arms"]) == ["c0", "c256", "c256+p96"] and res["passages"] == 48
    assert res["arms"]["c0"]["call_tokens"] == 0 and res["arms"]["c256"]["call_tokens"] == 256
    assert res["arms"]["c256+p96"]["pack_row_len"] == 96
    for arm in res["arms"].values():
        assert arm["passages_per_s"] > 0 and len(arm["per_round_vs_first"]) == 2
        assert arm["max_abs_diff_vs_first"] < 1e-4
