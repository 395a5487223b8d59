"""Downloads of DPR data (dense_cf.datasets.download / prepare) against a localhost server.

The fixture server (also used by test_dpr_tfds.py) serves tiny DPR-format files generated here
on 127.0.0.1 with Range support and failure modes: ``ignore_range`` (always 200 + full body),
``drop_once`` (the first GET of each path sends ``drop_at`` body bytes then closes the
connection), ``corrupt`` (one byte flipped mid-body), ``status`` (always that HTTP status).
Every request is recorded. Nothing here touches the internet.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import os
import re
import threading

import pytest

from dense_cf.cli import prepare as prepare_cli
from dense_cf.datasets import download, formats
from dense_cf.datasets import dpr as prepare
from dense_cf.datasets.download import ChecksumError, DownloadError, DownloadOptions, FileSpec


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args):  # quiet
        pass

    def do_HEAD(self):  # noqa: N802 (http.server API)
        data = self.server.files.get(self.path)
        self.send_response(404 if data is None else 200)
        self.send_header("Content-Length", str(0 if data is None else len(data)))
        self.end_headers()

    def do_GET(self):  # noqa: N802 (http.server API)
        srv = self.server
        rng, if_range = self.headers.get("Range"), self.headers.get("If-Range")
        with srv.lock:
            srv.requests.append({"path": self.path, "range": rng, "if_range": if_range})
            first = self.path not in srv.seen
            srv.seen.add(self.path)
        if srv.status:
            self.send_response(srv.status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = srv.files.get(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        etag = f'"{hashlib.md5(srv.etag_source.get(self.path, data)).hexdigest()}"'
        start = 0
        m = re.match(r"bytes=(\d+)-$", rng or "")
        honour = m and srv.mode != "ignore_range" and (if_range is None or if_range == etag)
        if honour:
            start = int(m.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        if srv.mode == "corrupt" and body:
            i = len(body) // 2
            body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1:]
        self.send_header("Content-Length", str(len(body)))
        if srv.send_etag:
            self.send_header("ETag", etag)
        self.end_headers()
        if srv.mode == "drop_once" and first:
            self.wfile.write(body[:srv.drop_at])
            self.wfile.flush()
            self.close_connection = True
            return
        srv.bytes_served += len(body)
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class FixtureServer:
    def __init__(self, files: dict[str, bytes]) -> None:
        self._srv = _Server(("127.0.0.1", 0), _Handler)
        s = self._srv
        s.files = dict(files)
        s.etag_source = {}
        s.mode = "normal"
        s.drop_at = 0
        s.status = 0
        s.send_etag = False
        s.requests = []
        s.seen = set()
        s.bytes_served = 0
        s.lock = threading.Lock()
        self._thread = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._srv.server_address[1]

    def url(self, prefix: str = "/dpr/") -> str:
        return f"http://127.0.0.1:{self.port}{prefix}"

    def __getattr__(self, name):  # mode, drop_at, requests, ... live on the server object
        return getattr(self._srv, name)

    def set(self, **kwargs) -> None:
        for k, v in kwargs.items():
            setattr(self._srv, k, v)

    def reset_log(self) -> None:
        self._srv.requests.clear()
        self._srv.seen.clear()
        self._srv.bytes_served = 0

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
        self._thread.join(timeout=5)


def _passage(i: int) -> formats.Passage:
    words = " ".join(f"w{(i * 7 + j) % 97}" for j in range(40))
    return formats.Passage(title=f"Title {i}", text=f"passage {i} about topic {i % 5}. {words}",
                           passage_id=str(i + 1))


def _examples(tag: str, n: int) -> list[formats.BiencoderExample]:
    return [formats.BiencoderExample(
        question=f"{tag} question {i}?", answers=[f"topic {i % 5}"],
        positive_ctxs=[_passage(i)], negative_ctxs=[_passage(i + 50)],
        hard_negative_ctxs=[_passage(i + 100), _passage(i + 101)]) for i in range(n)]


def write_dpr_mirror(root: str, n: int = 6, num_passages: int = 300) -> dict[str, bytes]:
    """Write tiny DPR files under ``root`` in the bucket layout; returns {URL path: bytes}.

    Covers NQ (train/dev biencoder, test/dev/train qa, gold info) and TriviaQA (train/dev,
    gzipped test qa), plus psgs_w100.tsv.gz.
    """
    ret = os.path.join(root, "data", "retriever")
    gold = os.path.join(root, "data", "nq_gold_info")
    wiki = os.path.join(root, "wikipedia_split")
    for d in (ret, gold, wiki):
        os.makedirs(d, exist_ok=True)
    for ds in ("nq", "trivia"):
        formats.write_biencoder(os.path.join(ret, f"biencoder-{ds}-train.json.gz"),
                                _examples(f"{ds} train", n))
        formats.write_biencoder(os.path.join(ret, f"biencoder-{ds}-dev.json.gz"),
                                _examples(f"{ds} dev", max(n // 2, 1)))
    qa = [(f"test question {i}?", [f"topic {i % 5}", f"alt {i}"]) for i in range(n)]
    for name in ("nq-test.qa.csv", "nq-dev.qa.csv", "nq-train.qa.csv", "trivia-test.qa.csv.gz"):
        formats.write_qa_csv(os.path.join(ret, name), qa)
    for split in ("train", "dev", "test"):
        formats.write_gold_info(os.path.join(gold, f"nq-{split}_gold_info.json.gz"), [
            {"question": f"{split} question {i}?", "question_tokens": f"{split} question {i} ?",
             "title": f"Title {i}", "context": _passage(i).text, "example_id": str(1000 + i)}
            for i in range(n)])
    formats.write_corpus_tsv(os.path.join(wiki, "psgs_w100.tsv.gz"),
                             ((p.passage_id, p.text, p.title)
                              for p in map(_passage, range(num_passages))))
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            with open(path, "rb") as f:
                out["/dpr/" + rel] = f.read()
    return out


# ---------------------------------------------------------------------------------------------
# Fixtures

FAST = DownloadOptions(chunk_size=64, backoff=0.0, max_retries=3, log_every=0.0, timeout=10)
NO_SLEEP = {"sleep": lambda s: None}


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    return write_dpr_mirror(str(tmp_path_factory.mktemp("mirror")))


@pytest.fixture
def server(mirror, monkeypatch):
    for var in ("no_proxy", "NO_PROXY"):  # a proxy in the environment must not see localhost
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    srv = FixtureServer(mirror)
    yield srv
    srv.close()


def _spec(server, path="data/retriever/biencoder-nq-train.json.gz", **kw) -> FileSpec:
    return FileSpec(name=os.path.basename(path), url=server.url() + path, **kw)


def _records(data_dir) -> dict[str, list[str]]:
    with open(os.path.join(data_dir, download.CHECKSUMS_FILE)) as f:
        return {ln.split("\t")[0]: ln.rstrip("\n").split("\t") for ln in f
                if not ln.startswith("#")}


# ---------------------------------------------------------------------------------------------
# Downloading


def test_fresh_download_is_verified_recorded_and_readable(server, mirror, tmp_path):
    spec = _spec(server)
    path = download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    want = mirror["/dpr/data/retriever/biencoder-nq-train.json.gz"]
    assert path == str(tmp_path / spec.name)
    assert open(path, "rb").read() == want
    # No .part, .part.json or lock file is left behind.
    assert sorted(os.listdir(tmp_path)) == sorted([download.CHECKSUMS_FILE, spec.name])
    rec = _records(tmp_path)[spec.name]
    assert rec[1:4] == [str(len(want)), hashlib.sha256(want).hexdigest(),
                        hashlib.md5(want).hexdigest()]
    assert len(formats.read_biencoder(path, skip_bad=False)) == 6
    # A second fetch is a no-op: no request, the size is checked against the record.
    server.reset_log()
    assert download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP) == path
    assert server.requests == []


def test_resume_after_dropped_connection(server, mirror, tmp_path):
    want = mirror["/dpr/wikipedia_split/psgs_w100.tsv.gz"]
    half = len(want) // 2
    server.set(mode="drop_once", drop_at=half)
    path = download.fetch(_spec(server, "wikipedia_split/psgs_w100.tsv.gz"), str(tmp_path),
                          opts=FAST, **NO_SLEEP)
    assert open(path, "rb").read() == want
    assert [r["range"] for r in server.requests] == [None, f"bytes={half}-"]
    assert server.bytes_served == len(want) - half  # only the missing tail was sent again
    rows = list(formats.read_corpus_tsv(path, skip_bad=False))
    assert len(rows) == 300 and rows[0][0] == "1"


def test_resume_partial_file_left_by_killed_process(server, mirror, tmp_path):
    spec = _spec(server)
    want = mirror["/dpr/data/retriever/biencoder-nq-train.json.gz"]
    server.set(send_etag=True)
    etag = f'"{hashlib.md5(want).hexdigest()}"'
    (tmp_path / (spec.name + ".part")).write_bytes(want[:100])
    (tmp_path / (spec.name + ".part.json")).write_text(
        json.dumps({"url": spec.url, "etag": etag, "total": len(want)}))
    path = download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    assert open(path, "rb").read() == want
    assert server.requests == [{"path": "/dpr/data/retriever/" + spec.name,
                                "range": "bytes=100-", "if_range": etag}]
    assert not os.path.exists(tmp_path / (spec.name + ".part.json"))


def test_server_ignoring_range_restarts_from_zero(server, mirror, tmp_path):
    spec = _spec(server)
    want = mirror["/dpr/data/retriever/biencoder-nq-train.json.gz"]
    (tmp_path / (spec.name + ".part")).write_bytes(want[:100])
    server.set(mode="ignore_range")
    path = download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    assert open(path, "rb").read() == want  # not the 100 old bytes + the full body
    assert server.requests[0]["range"] == "bytes=100-"
    assert server.bytes_served == len(want)


def test_changed_remote_file_is_not_spliced(server, mirror, tmp_path):
    """If-Range: a .part of an older version (other ETag) makes the server send the new file."""
    spec = _spec(server)
    want = mirror["/dpr/data/retriever/biencoder-nq-train.json.gz"]
    (tmp_path / (spec.name + ".part")).write_bytes(b"\x1f\x8b old version bytes " * 4)
    (tmp_path / (spec.name + ".part.json")).write_text(
        json.dumps({"url": spec.url, "etag": '"0123456789abcdef0123456789abcdef"'}))
    server.set(send_etag=True)
    path = download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    assert open(path, "rb").read() == want
    assert server.requests[0]["if_range"] == '"0123456789abcdef0123456789abcdef"'


def test_corrupted_gzip_download_is_rejected_and_deleted(server, tmp_path):
    spec = _spec(server)
    server.set(mode="corrupt")
    with pytest.raises(ChecksumError) as e:
        download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    msg = str(e.value)
    assert spec.name in msg and "gzip" in msg and "deleted" in msg
    assert os.listdir(tmp_path) == []  # no final file, no .part, nothing recorded


def test_mismatch_against_recorded_checksum(server, mirror, tmp_path):
    """A forced re-download is verified against the sha256 recorded at the first download."""
    spec = _spec(server, "data/retriever/nq-test.qa.csv")  # not gzip: only the record catches it
    want = mirror["/dpr/data/retriever/nq-test.qa.csv"]
    download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    server.set(mode="corrupt")
    with pytest.raises(ChecksumError) as e:
        download.fetch(spec, str(tmp_path), force=True, opts=FAST, **NO_SLEEP)
    msg = str(e.value)
    assert f"sha256: expected {hashlib.sha256(want).hexdigest()}" in msg
    assert "checksums.tsv" in msg and spec.name in msg
    assert _records(tmp_path)[spec.name][2] == hashlib.sha256(want).hexdigest()
    server.set(mode="normal")
    download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    assert (tmp_path / spec.name).read_bytes() == want


def test_pinned_and_etag_checksums(server, mirror, tmp_path):
    want = mirror["/dpr/data/retriever/nq-test.qa.csv"]
    bad = FileSpec(name="nq-test.qa.csv", url=server.url() + "data/retriever/nq-test.qa.csv",
                   sha256="0" * 64)
    with pytest.raises(ChecksumError, match=f"expected {'0' * 64}, got "
                                            f"{hashlib.sha256(want).hexdigest()}"):
        download.fetch(bad, str(tmp_path / "a"), opts=FAST, **NO_SLEEP)
    good = FileSpec(name=bad.name, url=bad.url, size=len(want),
                    sha256=hashlib.sha256(want).hexdigest())
    assert open(download.fetch(good, str(tmp_path / "b"), opts=FAST, **NO_SLEEP),
                "rb").read() == want
    # The S3-style ETag (md5 of the real content) exposes bytes corrupted in transit.
    server.set(send_etag=True, mode="corrupt")
    with pytest.raises(ChecksumError, match="ETag"):
        download.fetch(_spec(server, "data/retriever/nq-test.qa.csv"), str(tmp_path / "c"),
                       opts=FAST, **NO_SLEEP)


def test_partial_existing_file_gives_clear_error_and_force_fixes_it(server, mirror, tmp_path):
    spec = _spec(server)
    want = mirror["/dpr/data/retriever/biencoder-nq-train.json.gz"]
    path = download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    with open(path, "r+b") as f:
        f.truncate(len(want) - 10)
    with pytest.raises(ChecksumError) as e:
        download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)
    msg = str(e.value)
    assert (f"size {len(want) - 10} bytes, expected {len(want)}" in msg and f"rm {path}" in msg
            and "--force" in msg)
    assert open(download.fetch(spec, str(tmp_path), force=True, opts=FAST, **NO_SLEEP),
                "rb").read() == want
    # verify="full" catches same-size corruption that the size check cannot.
    with open(path, "r+b") as f:
        f.seek(20)
        f.write(b"X")
    download.fetch(spec, str(tmp_path), opts=FAST, **NO_SLEEP)  # size matches: accepted
    with pytest.raises(ChecksumError, match="sha256: expected"):
        download.fetch(spec, str(tmp_path), verify="full", opts=FAST, **NO_SLEEP)


def test_retries_then_clear_failure(server, tmp_path):
    server.set(status=503)
    delays = []
    with pytest.raises(DownloadError, match="giving up after 3 retries"):
        download.fetch(_spec(server), str(tmp_path), opts=FAST, sleep=delays.append)
    assert len(server.requests) == 4 and len(delays) == 3
    server.set(status=404)
    server.reset_log()
    with pytest.raises(DownloadError, match="HTTP 404"):
        download.fetch(_spec(server), str(tmp_path), opts=FAST, sleep=delays.append)
    assert len(server.requests) == 1  # a 404 is not retried


def test_backoff_grows_exponentially(server, tmp_path):
    server.set(status=500)
    delays = []
    opts = DownloadOptions(backoff=1.0, backoff_max=5.0, max_retries=5, log_every=0.0)
    with pytest.raises(DownloadError):
        download.fetch(_spec(server), str(tmp_path), opts=opts, sleep=delays.append)
    caps = [1, 2, 4, 5, 5]
    assert len(delays) == 5
    assert all(c / 2 <= d <= c for d, c in zip(delays, caps))  # jittered in [cap/2, cap]


def test_gunzip_option(server, mirror, tmp_path):
    spec = _spec(server, "data/nq_gold_info/nq-test_gold_info.json.gz")
    path = download.fetch(spec, str(tmp_path), gunzip=True, opts=FAST, **NO_SLEEP)
    assert path == str(tmp_path / "nq-test_gold_info.json")
    want = gzip.decompress(mirror["/dpr/data/nq_gold_info/nq-test_gold_info.json.gz"])
    assert open(path, "rb").read() == want
    assert not os.path.exists(str(tmp_path / spec.name))
    assert set(_records(tmp_path)) == {spec.name, "nq-test_gold_info.json"}
    assert len(list(formats.read_gold_info(path, skip_bad=False))) == 6
    # A .gz fetched by an earlier run without --gunzip is decompressed, not downloaded again.
    spec2 = _spec(server, "data/retriever/biencoder-nq-dev.json.gz")
    download.fetch(spec2, str(tmp_path), opts=FAST, **NO_SLEEP)
    server.reset_log()
    path2 = download.fetch(spec2, str(tmp_path), gunzip=True, opts=FAST, **NO_SLEEP)
    assert server.requests == [] and path2 == str(tmp_path / "biencoder-nq-dev.json")
    assert len(formats.read_biencoder(path2, skip_bad=False)) == 3


# ---------------------------------------------------------------------------------------------
# manual_dir


def _dpr_specs(server, datasets="nq", splits="train,dev,test,gold,corpus"):
    return prepare.file_specs(prepare.select(datasets, splits), server.url())


def test_manual_dir_takes_files_without_network(server, mirror, tmp_path):
    manual = tmp_path / "manual"
    # Our names (compressed) for some files, DPR's own downloads/ layout (uncompressed) for one.
    (manual / "downloads" / "data" / "retriever").mkdir(parents=True)
    for key, data in mirror.items():
        name = os.path.basename(key)
        if name == "biencoder-nq-train.json.gz":
            (manual / "downloads/data/retriever/nq-train.json").write_bytes(gzip.decompress(data))
        else:
            (manual / name).write_bytes(data)
    data_dir = tmp_path / "data"
    paths = download.fetch_all(_dpr_specs(server), str(data_dir), manual_dir=str(manual),
                               opts=FAST)
    assert server.requests == []
    assert paths["biencoder-nq-train.json.gz"] == str(data_dir / "biencoder-nq-train.json")
    assert len(formats.read_biencoder(paths["biencoder-nq-train.json.gz"], skip_bad=False)) == 6
    assert os.path.islink(paths["psgs_w100.tsv.gz"])
    assert (open(paths["nq-test.qa.csv"], "rb").read()
            == mirror["/dpr/data/retriever/nq-test.qa.csv"])
    assert set(_records(data_dir)) == {os.path.basename(p) for p in paths.values()}


def test_missing_manual_files_listed_in_one_error(server, mirror, tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "nq-test.qa.csv").write_bytes(mirror["/dpr/data/retriever/nq-test.qa.csv"])
    with pytest.raises(download.ManualFilesMissingError) as e:
        download.fetch_all(_dpr_specs(server), str(tmp_path / "data"), manual_dir=str(manual),
                           opts=FAST)
    msg = str(e.value)
    assert len(e.value.missing) == 6 and "6 file(s) missing" in msg
    for name in ("biencoder-nq-train.json.gz", "biencoder-nq-dev.json.gz", "psgs_w100.tsv.gz",
                 "nq-train_gold_info.json.gz", "nq-test_gold_info.json.gz"):
        assert os.path.join(str(manual), name) in msg
    assert server.url() + "wikipedia_split/psgs_w100.tsv.gz" in msg
    assert "downloads/data/wikipedia_split/psgs_w100.tsv" in msg  # DPR-layout alternative
    assert "nq-test.qa.csv\n" not in msg.replace(str(manual) + "/nq-test.qa.csv", "")
    assert not (tmp_path / "data").exists() or not os.listdir(tmp_path / "data")


def test_corrupted_manual_file_is_reported_not_deleted(server, mirror, tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    data = bytearray(mirror["/dpr/wikipedia_split/psgs_w100.tsv.gz"])
    bad = manual / "psgs_w100.tsv.gz"
    bad.write_bytes(bytes(data[: len(data) // 2]))  # truncated copy
    spec = _dpr_specs(server, "nq", "corpus")[0]
    with pytest.raises(ChecksumError) as e:
        download.fetch(spec, str(tmp_path / "data"), manual_dir=str(manual), opts=FAST)
    assert str(bad) in str(e.value) and "truncated" in str(e.value)
    assert bad.exists()


# ---------------------------------------------------------------------------------------------
# Registry and CLI


def test_registry_mirrors_dpr_urls():
    specs = prepare.file_specs(prepare.select("all", "all"))
    urls = {s.name: s.url for s in specs}
    base = "https://dl.fbaipublicfiles.com/dpr/"
    assert urls["psgs_w100.tsv.gz"] == base + "wikipedia_split/psgs_w100.tsv.gz"
    assert urls["biencoder-nq-train.json.gz"] == base + "data/retriever/biencoder-nq-train.json.gz"
    assert urls["biencoder-webquestions-dev.json.gz"] == (
        base + "data/retriever/biencoder-webquestions-dev.json.gz")
    assert urls["trivia-test.qa.csv.gz"] == base + "data/retriever/trivia-test.qa.csv.gz"
    assert urls["nq-test_gold_info.json.gz"] == base + "data/nq_gold_info/nq-test_gold_info.json.gz"
    assert len(specs) == 24
    # Defaults of config.data name files of this layout.
    from dense_cf.configs.base import base_config
    d = base_config().data
    assert {d.train_file, d.dev_file, d.corpus_file, d.test_file, d.gold_file} <= set(urls)
    # Splits a dataset does not publish are skipped; aliases and bad names.
    assert [r.name for r in prepare.select("squad,trivia", "gold,test")] == [
        "squad1-test.qa.csv", "trivia-test.qa.csv.gz"]
    with pytest.raises(ValueError, match="unknown dataset.*'msmarco'.*unknown split.*'tset'"):
        prepare.select("nq,msmarco", "tset")


def test_base_url_env_var(monkeypatch):
    monkeypatch.setenv(prepare.BASE_URL_ENV, "http://127.0.0.1:9/mirror")
    assert prepare.resolve_base_url() == "http://127.0.0.1:9/mirror/"
    assert prepare.resolve_base_url("http://127.0.0.1:8/x/") == "http://127.0.0.1:8/x/"


def test_prepare_cli_end_to_end(server, mirror, tmp_path, monkeypatch, capsys):
    data_dir = tmp_path / "dpr"
    monkeypatch.setenv(prepare.BASE_URL_ENV, server.url())
    argv = ["--datasets", "nq,trivia", "--splits", "train,dev,test,gold,corpus",
            "--data_dir", str(data_dir)]
    assert prepare_cli.run_cli(argv) == 0
    names = {"biencoder-nq-train.json.gz", "biencoder-nq-dev.json.gz", "nq-test.qa.csv",
             "nq-train_gold_info.json.gz", "nq-dev_gold_info.json.gz",
             "nq-test_gold_info.json.gz", "biencoder-trivia-train.json.gz",
             "biencoder-trivia-dev.json.gz", "trivia-test.qa.csv.gz", "psgs_w100.tsv.gz"}
    assert set(os.listdir(data_dir)) == names | {download.CHECKSUMS_FILE}
    for name in names:
        url_path = next(k for k in mirror if k.endswith("/" + name))
        assert (data_dir / name).read_bytes() == mirror[url_path]
    out = capsys.readouterr().out
    assert "10 file(s) ready" in out
    # The files are what the training/eval config reads by default (NQ), and the printed
    # overrides point a config at each prepared dataset.
    from dense_cf.configs.base import base_config
    from dense_cf.datasets.dpr import resolve_data_file
    keys = ("train_file", "dev_file", "corpus_file", "test_file", "gold_file")
    cfg = base_config()
    cfg.data.data_dir = str(data_dir)
    assert all(os.path.exists(resolve_data_file(cfg.data, k)) for k in keys)
    lines = {ln.split(":")[0]: ln.split(": ", 1)[1].split() for ln in out.splitlines()
             if ln.startswith(("nq:", "trivia:"))}
    for ds, flags in lines.items():
        cfg = base_config()
        for flag in flags:
            key, value = flag[len("--config.data."):].split("=", 1)
            cfg.data[key] = value
        present = [resolve_data_file(cfg.data, k, required=False) for k in keys]
        assert all(p is None or os.path.exists(p) for p in present)
        assert (present[4] is None) == (ds == "trivia")  # gold info is NQ-only
    assert lines["trivia"][3] == "--config.data.test_file=trivia-test.qa.csv.gz"
    assert len(list(formats.read_qa_csv(data_dir / "trivia-test.qa.csv.gz",
                                        skip_bad=False))) == 6
    # Idempotent: a second run sends no request.
    server.reset_log()
    assert prepare_cli.run_cli(argv) == 0 and server.requests == []
    # A missing manual file is a clean CLI error (exit 1), not a traceback.
    assert prepare_cli.run_cli(["--datasets", "nq", "--splits", "test", "--data_dir",
                         str(tmp_path / "other"), "--manual_dir", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    # --list --sizes asks the server (HEAD) for the sizes of exactly the selected files.
    assert prepare_cli.run_cli(["--datasets", "nq", "--splits", "test,corpus", "--data_dir",
                         str(data_dir), "--list", "--sizes"]) == 0
    out = capsys.readouterr().out.splitlines()
    sizes = [len(mirror["/dpr/data/retriever/nq-test.qa.csv"]),
             len(mirror["/dpr/wikipedia_split/psgs_w100.tsv.gz"])]
    assert out[0].startswith(f"nq-test.qa.csv\t{download.human_bytes(sizes[0])}\t")
    assert out[1].startswith("psgs_w100.tsv.gz\t")
    assert out[2] == f"total to download: {download.human_bytes(sum(sizes))}"


def test_concurrent_fetches_download_once(server, mirror, tmp_path):
    """Two workers preparing one data_dir: one downloads, the other waits and reuses it."""
    import concurrent.futures
    spec = _spec(server, "wikipedia_split/psgs_w100.tsv.gz")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: download.fetch(spec, str(tmp_path), opts=FAST,
                                                       **NO_SLEEP), range(2)))
    assert paths[0] == paths[1]
    assert open(paths[0], "rb").read() == mirror["/dpr/wikipedia_split/psgs_w100.tsv.gz"]
    assert len(server.requests) == 1
    assert sorted(os.listdir(tmp_path)) == sorted([download.CHECKSUMS_FILE, spec.name])


def _refused_url() -> str:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connection refused
    return f"http://127.0.0.1:{port}/nq-train.json.gz"


@pytest.mark.parametrize("url", ["http://dense-cf-test.invalid/nq-train.json.gz", "refused"])
def test_no_network_fails_at_once_and_names_manual_dir(tmp_path, url):
    """A DNS failure or a refused connection is not retried 8 times over minutes: one error,
    at once, saying to use --manual_dir."""
    url = _refused_url() if url == "refused" else url
    sleeps = []
    spec = FileSpec(name="nq-train.json.gz", url=url)
    with pytest.raises(download.NetworkUnavailableError, match="--manual_dir") as e:
        download.fetch(spec, str(tmp_path), opts=DownloadOptions(timeout=5),
                       sleep=sleeps.append)
    assert sleeps == [] and url in str(e.value)
    assert "resolve" in str(e.value) or "refused" in str(e.value)


def test_prepare_offline_prints_one_line_with_the_fix(tmp_path, capsys):
    code = prepare_cli.run_cli(["--datasets", "nq", "--splits", "dev", "--data_dir",
                                str(tmp_path), "--base_url", "http://dense-cf-test.invalid/"])
    err = capsys.readouterr().err
    assert code == 1 and "no network" in err and "--manual_dir" in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1
