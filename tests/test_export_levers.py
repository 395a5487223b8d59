"""Export levers of dense_cf.retrieval.export (issue 47): token-budget batches per length
bucket, more batches in flight, the background shard writer. Off by default; on, the vectors
equal the default export's (bit for bit where the batches are the same, else float tolerance)."""

import os

import numpy as np
import pytest
from helpers import tiny_run

from dense_cf.parallel import mesh as mesh_lib
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


def test_packed_calls_cover_the_rows_in_few_shapes():
    # 103 rows over 2 shards: three full calls (96 rows), then 2 x 2 rows, 2 x 1, and the last
    # row alone in a call of 2 x 1 (one empty row).
    calls = export.packed_calls(103, 16, 2)
    assert calls == [(0, 16), (32, 16), (64, 16), (96, 2), (100, 1), (102, 1)]
    assert export.packed_calls(0, 16, 2) == []
    assert {size for _, size in export.packed_calls(1000, 12, 4)} <= {12, 8, 4, 2, 1}
    assert export.packed_row_len(256, 96) == 192 and export.packed_row_len(256, 512) == 256
    assert export.packed_row_len(0, 96) == 0


def test_capped_plan_sizes_batches_by_call_rows():
    lengths = np.array([5, 60, 17, 33, 2, 64, 9, 40, 12, 30] * 7)
    plan = export.plan_length_batches(lengths, (16, 32, 48, 64),
                                      lambda length: mesh_lib.call_rows(6, length, 2, 128))
    assert sorted(np.concatenate([r for r, _, _ in plan]).tolist()) == list(range(70))
    for r, length, size in plan:
        assert size == min(6, max(2, 256 // length // 2 * 2)) and len(r) <= size


def _mixed(run, n=60, max_len=48):
    """Passages of 3 to ~max_len tokens in no length order, so some exceed a packed row of 32."""
    rows = [(f"p{i}", " ".join(f"w{j} fact{i}" for j in range((i * 7) % 23)), f"T {i}")
            for i in range(n)]
    return export.tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                    max_len)


@pytest.mark.parametrize("batch,pack,call", [(8, 32, 0), (8, 64, 0), (16, 0, 96), (16, 32, 64)])
def test_packed_and_capped_encoding_equal_the_padded_vectors(run, batch, pack, call):
    """Packed rows (some passages longer than the packed row stay padded) and CPU call caps
    give the full-padding vectors in input order, on the 2-shard data mesh; questions too."""
    ids, mask = _mixed(run)
    base = export.Encoder(run, 8, length_buckets=(), pack_row_len=0, call_tokens=0)
    enc = export.Encoder(run, batch, length_buckets=(16, 32, 48), pack_row_len=pack,
                         call_tokens=call)
    want = base.passages(ids, mask)
    np.testing.assert_allclose(enc.passages(ids, mask), want, rtol=1e-5, atol=2e-6)
    lengths = mask.sum(1)
    if pack:
        row = export.packed_row_len(pack, 48)
        assert 0 < enc.packed_passages == int((lengths <= row).sum())
        assert enc.packed_passages < len(lengths) if row < 48 else enc.tokens < base.tokens
    qs = [f"who {'really ' * (i % 9)}built tower {i}?" for i in range(13)]
    np.testing.assert_allclose(export.encode_questions(run, qs, encoder=enc),
                               export.encode_questions(run, qs, encoder=base), rtol=1e-5,
                               atol=2e-6)


def test_call_cap_sets_rows_per_call_on_the_cpu(run):
    enc = export.Encoder(run, 16, length_buckets=(16, 32, 48), call_tokens=64)
    assert enc.call_tokens == 64  # the suite runs on the CPU backend
    ids, mask = _mixed(run, n=40)
    calls = []
    real = enc._p

    def spy(params, ids_, mask_):
        calls.append(ids_.shape)
        return real(params, ids_, mask_)

    enc._p = spy
    enc.passages(ids, mask)
    # 64 tokens per device x 2 data shards: 2 rows at 48 and at 32 (floored to a multiple of
    # 2), 8 at 16 (128 // 16), never more than batch_size
    assert calls and all(b == max(2, 128 // length // 2 * 2) for b, length in calls)
    assert export.Encoder(run, 16, token_budget=256).call_tokens == 0  # the lever wins


def test_call_rows_and_the_cpu_cap():
    assert mesh_lib.call_rows(64, 128, 2, 0) == 64            # no cap: the batch as given
    assert mesh_lib.call_rows(64, 128, 2, 1024) == 16         # 1024 tokens x 2 shards // 128
    assert mesh_lib.call_rows(64, 96, 2, 1024) == 20          # 21 rounded down to a multiple of 2
    assert mesh_lib.call_rows(8, 32, 2, 1024) == 8            # never above batch_size
    assert mesh_lib.call_rows(64, 4096, 2, 1024) == 2         # never below the shards
    assert mesh_lib.cpu_call_tokens(512) == 512 and mesh_lib.cpu_call_tokens(None) == 0


def test_accelerators_ignore_the_cpu_call_cap(monkeypatch, run):
    monkeypatch.setattr(mesh_lib.jax, "default_backend", lambda: "gpu")
    assert mesh_lib.cpu_call_tokens(1024) == 0
    assert export.Encoder(run, 16, call_tokens=1024).call_tokens == 0


@pytest.mark.parametrize("pack", [0, 32])
def test_each_host_feeds_its_own_shards(monkeypatch, run, pack):
    """On 2 hosts of the 2-shard mesh, each host passes its half of every call's rows (padded
    batches) or its own shard's packed rows: stacked in host order they are the one-host call's
    arrays. Checked by recording what each simulated host hands to mesh.global_batch."""
    ids, mask = _mixed(run, n=30)

    def calls(hosts, host):
        seen = []
        monkeypatch.setattr(export.jax, "process_count", lambda: hosts)
        monkeypatch.setattr(export.jax, "process_index", lambda: host)
        monkeypatch.setattr(export.multihost_utils, "process_allgather", lambda x, tiled: x)

        def record(local, mesh):
            seen.append({k: np.array(v) for k, v in local.items()})
            return local

        monkeypatch.setattr(export.mesh_lib, "global_batch", record)
        enc = export.Encoder(run, 8, length_buckets=(16, 32, 48), pack_row_len=pack,
                             call_tokens=64)
        hidden = run.model.config.hidden_size
        enc._p = lambda params, i, m: np.zeros((len(i) * hosts, hidden), np.float32)
        enc._p_packed = lambda params, i, m, g, p, st: np.zeros((st.size * hosts, hidden),
                                                                np.float32)
        enc.passages(ids, mask)
        return seen

    one = calls(1, 0)
    halves = [calls(2, h) for h in (0, 1)]
    assert len(one) == len(halves[0]) == len(halves[1]) > 1
    assert any("seg" in c for c in one) == bool(pack)  # packed calls were made (or not)
    for whole, a, b in zip(one, *halves):
        assert whole.keys() == a.keys() == b.keys()
        for k in whole:
            np.testing.assert_array_equal(np.concatenate([a[k], b[k]]), whole[k])
