"""Export levers of dense_cf.retrieval.export (issue 47): token-budget batches per length
bucket, more batches in flight, the background shard writer. Off by default; on, the vectors
equal the default export's (bit for bit where the batches are the same, else float tolerance)."""

import os

import numpy as np
import pytest
from helpers import tiny_run

from dense_cf.retrieval import export


def test_plan_token_batches_covers_every_row_within_the_budget():
    lengths = np.array([5, 60, 17, 33, 2, 64, 9, 40, 12, 30] * 7)
    buckets = (16, 32, 48, 64)
    plan = export.plan_token_batches(lengths, buckets, batch_size=4, token_budget=256, multiple=2)
    rows = np.concatenate([r for r, _, _ in plan])
    assert sorted(rows.tolist()) == list(range(len(lengths)))
    for r, length, size in plan:
        assert len(r) <= size and size % 2 == 0 and lengths[r].max() <= length
        assert size == max(4, 256 // length // 2 * 2)
    sizes = {length: size for _, length, size in plan}
    assert sizes[16] == 16 and sizes[64] == 4  # short buckets run larger batches


@pytest.fixture(scope="module")
def run():
    return tiny_run("dpr")


def _rows(n=50):
    return [(f"p{i}", " ".join(f"w{j} fact{i}" for j in range(2 + (i * 5) % 19)), f"T {i}")
            for i in range(n)]


def test_token_budget_and_in_flight_give_the_same_vectors(run):
    rows = _rows()
    ids, mask = export.tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                         48)
    base = export.Encoder(run, 8, length_buckets=(16, 32, 48)).passages(ids, mask)
    lever = export.Encoder(run, 8, length_buckets=(16, 32, 48), token_budget=512, in_flight=4)
    out = lever.passages(ids, mask)
    np.testing.assert_allclose(out, base, rtol=1e-5, atol=1e-6)
    assert lever.tokens <= lever.tokens_at_max


def test_background_writer_export_equals_the_plain_export(tmp_path, run):
    rows = _rows()
    kw = dict(shard_size=16, batch_size=8, dtype="float32", max_p_len=48)
    a = export.export_passages(run, rows, str(tmp_path / "a"), **kw)
    b = export.export_passages(run, rows, str(tmp_path / "b"), background_write=True, **kw)
    assert a["count"] == b["count"] == 50 and len(b["shards"]) == 4
    for name in sorted(os.listdir(tmp_path / "a")):
        if name.startswith(("embeddings-", "ids-", "pids-", "shard-")):
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # a finished background export is reused like any other
    again = export.export_passages(run, rows, str(tmp_path / "b"), background_write=True, **kw)
    assert again["skipped_done"] == 50 and again["encoded_this_run"] == 0


def test_background_writer_raises_the_write_error():
    writer = export.ShardWriter(background=True)

    def boom():
        raise OSError("disk full")

    writer.submit(boom)
    with pytest.raises(OSError, match="disk full"):
        writer.wait()
