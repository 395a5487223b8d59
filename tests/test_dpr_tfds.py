"""The dpr_retriever TFDS builder, built from a localhost fixture server and read back."""

from __future__ import annotations

import gzip
import math
import os

import pytest
import tensorflow_datasets as tfds
from test_download import FixtureServer, write_dpr_mirror

from dense_cf.datasets import download, dpr_tfds
from dense_cf.datasets import dpr as prepare

FAST = download.DownloadOptions(chunk_size=256, backoff=0.0, max_retries=2, log_every=0.0,
                                timeout=10)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    return write_dpr_mirror(str(tmp_path_factory.mktemp("mirror")), num_passages=40)


@pytest.fixture
def server(mirror, monkeypatch):
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    srv = FixtureServer(mirror)
    yield srv
    srv.close()


def _read(builder, split):
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def test_build_nq_from_server_and_load(server, tmp_path):
    data_dir = str(tmp_path / "tfds")
    builder = dpr_tfds.DprRetriever(config="nq", data_dir=data_dir, base_url=server.url(),
                                    download_options=FAST)
    builder.download_and_prepare()
    fetched = sorted(r["path"] for r in server.requests)
    assert fetched == ["/dpr/data/retriever/biencoder-nq-dev.json.gz",
                       "/dpr/data/retriever/biencoder-nq-train.json.gz",
                       "/dpr/data/retriever/nq-test.qa.csv"]
    info = builder.info.splits
    assert (info["train"].num_examples, info["validation"].num_examples,
            info["test"].num_examples) == (6, 3, 6)

    train = sorted(_read(builder, "train"), key=lambda e: e["question"])
    ex = train[0]
    assert ex["question"] == b"nq train question 0?"
    assert list(ex["answers"]) == [b"topic 0"]
    assert list(ex["positive_ctxs"]["title"]) == [b"Title 0"]
    assert list(ex["positive_ctxs"]["passage_id"]) == [b"1"]
    assert math.isnan(ex["positive_ctxs"]["score"][0])  # absent in the file
    assert list(ex["hard_negative_ctxs"]["title"]) == [b"Title 100", b"Title 101"]
    test = _read(builder, "test")
    assert {e["question"] for e in test} == {f"test question {i}?".encode() for i in range(6)}
    assert all(len(e["positive_ctxs"]["text"]) == 0 for e in test)

    # Reading back through the public API, without touching the network again.
    server.reset_log()
    ds = tfds.load("dpr_retriever/nq", split="validation", data_dir=data_dir, download=False)
    assert len(list(ds)) == 3 and server.requests == []


def test_corpus_from_manual_dir_in_dpr_layout(server, mirror, tmp_path):
    manual = tmp_path / "manual" / "downloads" / "data" / "wikipedia_split"
    manual.mkdir(parents=True)
    (manual / "psgs_w100.tsv").write_bytes(
        gzip.decompress(mirror["/dpr/wikipedia_split/psgs_w100.tsv.gz"]))
    builder = dpr_tfds.DprRetriever(config="psgs_w100", data_dir=str(tmp_path / "tfds"),
                                    base_url=server.url(), download_options=FAST)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(tmp_path / "manual")))
    assert server.requests == []
    rows = sorted(_read(builder, "train"), key=lambda e: int(e["id"]))
    assert len(rows) == 40
    assert (rows[0]["id"], rows[0]["title"]) == (b"1", b"Title 0")
    assert rows[0]["text"].startswith(b"passage 0 about topic 0.")


def test_gold_reuses_prepared_raw_files(server, tmp_path):
    raw = str(tmp_path / "raw")
    prepare.prepare(raw, "nq", "gold", base_url=server.url(), opts=FAST)
    server.reset_log()
    builder = dpr_tfds.DprRetriever(config="nq_gold", data_dir=str(tmp_path / "tfds"),
                                    raw_dir=raw, base_url=server.url(), download_options=FAST)
    builder.download_and_prepare()
    assert server.requests == []
    recs = sorted(_read(builder, "test"), key=lambda e: e["example_id"])
    assert len(recs) == 6
    assert (recs[0]["question"], recs[0]["title"], recs[0]["example_id"]) == (
        b"test question 0?", b"Title 0", b"1000")
    assert os.path.exists(os.path.join(raw, download.CHECKSUMS_FILE))


def test_explicit_missing_manual_dir_is_an_error(server, tmp_path):
    builder = dpr_tfds.DprRetriever(config="nq", data_dir=str(tmp_path / "tfds"),
                                    base_url=server.url(), download_options=FAST)
    with pytest.raises(download.ManualFilesMissingError, match="does not exist or is empty"):
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=str(tmp_path / "none")))
    assert server.requests == []
