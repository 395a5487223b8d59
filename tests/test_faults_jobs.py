"""Issue 17 §2 and §5, what test_download.py, test_paths.py, test_kill9.py and test_faults.py
leave open: an offline ``prepare`` names the files ``--manual_dir`` must hold and returns in
seconds, while transient errors keep their retries; a full disk during an export shard (numpy's
errno-less short write), a FAISS save, a BM25 build and a JSON report, each with the space it
needs, then a resume. (Training started outside the checkout with relative paths:
test_train_loop.py's SIGKILL test, whose three ``dense_cf.main`` runs start there.)"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from helpers import child_pythonpath

from dense_cf.cli import prepare as prepare_cli
from dense_cf.datasets import download

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=child_pythonpath(REPO, os.path.join(REPO, "tests")),
               JAX_PLATFORMS="cpu")
    env.pop("DENSE_CF_TRACEBACK", None)
    return dict(env, **extra)


# ------------------------------------------------------------------------ offline prepare
def _refused_port() -> int:
    """A localhost port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("base_url, reason", [
    ("http://nonexistent.invalid/dpr/", "host name does not resolve"),
    (None, "connection refused"),
])
def test_prepare_without_network_fails_in_seconds_naming_manual_dir(tmp_path, capsys, base_url,
                                                                    reason):
    base_url = base_url or f"http://127.0.0.1:{_refused_port()}/dpr/"
    t0 = time.monotonic()
    rc = prepare_cli.run_cli(["--datasets=nq", "--splits=dev,test", f"--data_dir={tmp_path}",
                              f"--base_url={base_url}"])
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert elapsed < 5, f"took {elapsed:.1f}s: no-network errors must not be retried"
    assert len(err) == 1, err
    assert reason in err[0] and "--manual_dir" in err[0]
    assert "biencoder-nq-dev.json.gz" in err[0] and "nq-test.qa.csv" in err[0]
    assert not any(n.endswith(".gz") for n in os.listdir(tmp_path))  # nothing taken as done


def test_transient_errors_keep_their_retries(tmp_path):
    """A 503 is retried (max_retries times), unlike a refused connection."""
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    sleeps = []
    try:
        with pytest.raises(download.DownloadError, match="giving up after 3 retries") as e:
            download.download_file(f"http://127.0.0.1:{srv.server_address[1]}/f",
                                   str(tmp_path / "f.part"),
                                   download.DownloadOptions(max_retries=3, backoff=0.01),
                                   sleep=sleeps.append)
    finally:
        srv.shutdown()
    assert len(sleeps) == 3 and not isinstance(e.value, download.NetworkUnavailableError)


# ------------------------------------------------------------------------ full disk
# One script, two phases in one user namespace: "full" on a 1 MB tmpfs (every job must stop
# with one DiskFullError naming its path and leave nothing half-written), then "resume" after
# the tmpfs grows (every job completes; the export reuses the shards that made it to disk).
_FULL_DISK_JOBS = r'''
import json, os, sys, types
import numpy as np
from dense_cf import files
from dense_cf.index.bm25 import BM25Index
from dense_cf.index.faiss_index import IndexSpec, build_index
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.retrieval import export

root, phase = sys.argv[1], sys.argv[2]
DIM, N = 4096, 96  # the export: 1.5 MB in 3 shards
rows = [(str(i + 1), f"Tower {i} was built in {1800 + i}.", f"Tower {i}") for i in range(N)]

class Encoder:  # deterministic vectors per row: what matters here is the bytes on disk
    batch_size = 16
    def passages(self, ids, mask):
        return np.stack([np.random.default_rng(int(r.sum())).standard_normal(DIM)
                         for r in ids]).astype(np.float32)

run = types.SimpleNamespace(step=0, tokenizer=load_tokenizer(resolve_model_dir("minilm")),
                            config=types.SimpleNamespace(data=types.SimpleNamespace(max_p_len=16)),
                            model=types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=DIM)))
vecs = np.random.default_rng(0).standard_normal((384, 1024)).astype(np.float32)  # 1.5 MB
bm25_rows = [(str(i), f"word{i} " * 400, f"t{i}") for i in range(800)]  # ~4 MB of store

jobs = {
    "export": lambda d: export.export_passages(run, rows, d, shard_size=32, dtype="float32",
                                               encoder=Encoder())["encoded_this_run"],
    "faiss": lambda d: build_index(vecs, spec=IndexSpec(kind="flat")).save(d)["ntotal"],
    "bm25": lambda d: BM25Index.build(bm25_rows, d, k1=0.9, b=0.4).meta["passages"],
    "report": lambda d: files.write_json(os.path.join(d, "report.json"), {"x": "y" * (2 << 20)}),
}
for name, job in jobs.items():
    d = os.path.join(root, name)
    try:
        print(name, "OK", job(d))
    except files.DiskFullError as e:
        left = sorted(os.listdir(d)) if os.path.isdir(d) else []
        print(name, "DISKFULL", e, "LEFT", left)
    finally:
        if phase == "full" and name != "export":  # free the space for the next job
            files.shutil.rmtree(d, ignore_errors=True)
    sys.stdout.flush()
if phase == "resume":
    emb = export.load_embeddings(os.path.join(root, "export"))
    want = Encoder().passages(*export.tokenize_passages(run.tokenizer, [r[2] for r in rows],
                                                        [r[1] for r in rows], 16))
    print("EXPORT EQUAL", bool((emb == want).all()), len(emb))
'''


def test_full_disk_in_export_index_bm25_and_report_then_resume(tmp_path):
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {tmp_path}"],
            capture_output=True).returncode:
        pytest.skip("no user namespaces here to mount a small tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "jobs.py"
    script.write_text(_FULL_DISK_JOBS)
    py = sys.executable
    shell = (f"mount -t tmpfs -o size=1m tmpfs {mnt} && {py} {script} {mnt} full && "
             f"mount -o remount,size=64m {mnt} && {py} {script} {mnt} resume")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True,
                       timeout=300, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.splitlines()
    print(r.stdout)
    full, resume = out[:4], out[4:]
    for line in full:
        assert " DISKFULL no space left writing " in line and "Traceback" not in line, line
        assert "it needs " in line and "free in " + str(mnt) in line
    # No temporary file or half-written shard is left where a later run could find it.
    assert all(".tmp" not in line.split("LEFT")[1] for line in full)
    assert "export/embeddings-00001.npy: it needs about 512.1 KB" in full[0]
    left = full[0].split("LEFT")[1]
    assert "manifest.json" not in left and "embeddings-00001" not in left  # shard 1: not done
    assert "faiss/shard-00000.faiss: it needs about 1.6 MB" in full[1]
    assert f"writing {mnt}/bm25: it needs" in full[2]
    assert "report/report.json: it needs about 2.0 MB" in full[3]
    assert resume[0] == "export OK 64"  # shard 0 made it to disk and is reused
    assert resume[1:4] == ["faiss OK 384", "bm25 OK 800", "report OK None"]
    assert resume[4] == "EXPORT EQUAL True 96"
