"""Resumable, checksummed downloads of data files, with an offline ``manual_dir`` path.

Used by :mod:`dense_cf.datasets.dpr` (DPR's public files, docs/method.md §8) and the TFDS builder in
:mod:`dense_cf.datasets.dpr_tfds`. Nothing here knows about DPR: a file is a :class:`FileSpec`.

How a file gets into ``data_dir``:

* **Download** (no ``manual_dir``): HTTP GET into ``<name>.part``. An interrupted transfer
  (dropped connection, timeout, 5xx, killed process) resumes from the ``.part`` size with a
  ``Range`` request guarded by ``If-Range`` (the ETag / Last-Modified seen first, kept in
  ``<name>.part.json``), so a file that changed on the server restarts instead of being spliced.
  A server that ignores ``Range`` (answers 200) makes the download restart from byte 0.
  Failures are retried with exponential backoff; progress is logged with bytes/s and an ETA.
* **manual_dir** (clusters without internet): the file is looked up there under its own name or
  an alternative name (e.g. its uncompressed form, or DPR's ``downloads/...`` layout), verified
  and symlinked (or hard-linked / copied) into ``data_dir``; nothing is downloaded. All missing
  files are reported in one error listing exactly what to put where.

Verification, before the file gets its final name (atomic rename from ``.part``):

* size against the server's Content-Length / Content-Range total;
* sha256 / md5 pinned in the :class:`FileSpec`, when known;
* otherwise the md5 in an S3-style ETag (a quoted 32-hex ETag is the content's md5 there);
* a full gzip decode (CRC-32 and length of every member) for ``.gz`` files;
* the size and sha256 recorded in ``<data_dir>/checksums.tsv`` when the file was first verified
  (TFDS-style trust on first use): later runs check the size, ``verify="full"`` the sha256.

A bad file raises :class:`ChecksumError` naming the file, the expected and actual size/hash and
the fix (delete it or re-run with ``--force``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import gzip
import hashlib
import http.client
import os
import random
import re
import shutil
import socket
import time
import urllib.error
import urllib.request
import zlib
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from absl import logging

from dense_cf import files
from dense_cf.progress import Progress

__all__ = [
    "FileSpec", "DownloadOptions", "DownloadError", "ChecksumError", "ManualFilesMissingError",
    "NetworkUnavailableError",
    "FileDigest", "ChecksumStore", "CHECKSUMS_FILE", "download_file", "scan_file", "fetch",
    "fetch_all", "gunzip_file", "human_bytes", "remote_size",
]

CHECKSUMS_FILE = "checksums.tsv"
_PART = ".part"
_PART_META = ".part.json"
_ETAG_MD5_RE = re.compile(r'^"?([0-9a-fA-F]{32})"?$')


class DownloadError(RuntimeError):
    """A file could not be obtained (HTTP error, retries exhausted, bad manual file)."""


class ChecksumError(DownloadError):
    """A file's size or hash differs from what it must be."""


class NetworkUnavailableError(DownloadError):
    """No network: the host name does not resolve, or the network or host is unreachable, or the
    connection is refused. Raised at once, without the retries meant for transient failures."""


# OSError numbers that mean "no route to the server at all", not a flaky transfer.
_NO_NETWORK_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED,
                      errno.ENETDOWN, errno.EHOSTDOWN}


def _no_network_reason(e: BaseException) -> str | None:
    """Why ``e`` (a urlopen failure) means there is no network, or None if it may be transient."""
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, socket.gaierror):
        return f"the host name does not resolve ({reason})"
    if isinstance(reason, OSError) and reason.errno in _NO_NETWORK_ERRNOS:
        return f"{os.strerror(reason.errno).lower()} ({type(reason).__name__})"
    return None


class ManualFilesMissingError(DownloadError, FileNotFoundError):
    """Files to be taken from ``manual_dir`` are not there; ``missing`` lists their specs."""

    def __init__(self, message: str, missing: Sequence["FileSpec"]) -> None:
        super().__init__(message)
        self.missing = list(missing)


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """One file: its name in ``data_dir``, where it comes from, and what it must hash to.

    ``manual_names``: other relative paths under ``manual_dir`` that hold the same file, as
    ``(relpath, compressed)``; an uncompressed one is linked as ``name`` minus ``.gz``.
    """

    name: str
    url: str
    size: int | None = None
    sha256: str | None = None
    md5: str | None = None
    manual_names: tuple[tuple[str, bool], ...] = ()
    description: str = ""

    @property
    def compressed(self) -> bool:
        return self.name.endswith(".gz")

    @property
    def uncompressed_name(self) -> str:
        return self.name[:-3] if self.compressed else self.name


@dataclasses.dataclass(frozen=True)
class DownloadOptions:
    """Knobs of :func:`download_file` / :func:`fetch` (defaults suit multi-GB files)."""

    chunk_size: int = 1 << 20
    timeout: float = 60.0           # seconds without a byte before a read counts as failed
    max_retries: int = 8            # consecutive failures without progress before giving up
    backoff: float = 2.0            # first retry delay (s); doubles, with jitter
    backoff_max: float = 120.0
    log_every: float = 15.0         # seconds between progress lines
    check_etag_md5: bool = True     # trust a quoted 32-hex ETag as the content md5 (S3)
    verify_gzip: bool = True        # decode .gz files fully once (CRC) before accepting them
    link: str = "symlink"           # manual_dir files: symlink | hardlink | copy
    user_agent: str = "dense_cf-downloader/1"


@dataclasses.dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str
    md5: str


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError


# ---------------------------------------------------------------------------------------------
# Hashing and gzip checks


def scan_file(path: str, *, check_gzip: bool = False, chunk_size: int = 1 << 20,
              log_name: str | None = None) -> tuple[FileDigest, str | None]:
    """(size, sha256, md5) of ``path`` in one read; with ``check_gzip``, also decode it.

    Returns ``(digest, gzip_problem)``: ``gzip_problem`` is None when the gzip stream (all
    members) decodes with correct CRC-32 and length, else a description of what is wrong.
    """
    sha, md5 = hashlib.sha256(), hashlib.md5()
    size = unpacked = 0
    problem = None
    dec = zlib.decompressobj(zlib.MAX_WBITS | 16) if check_gzip else None
    in_member = False
    progress = Progress(f"verifying {log_name}", os.path.getsize(path), every_s=30.0,
                        fmt=human_bytes, enabled=bool(log_name))
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            sha.update(chunk)
            md5.update(chunk)
            size += len(chunk)
            if dec is not None and problem is None:
                data = chunk
                try:
                    while data:
                        in_member = True
                        unpacked += len(dec.decompress(data))  # output discarded: CRC and size matter
                        if dec.eof:           # member done: a concatenated one may follow
                            data = dec.unused_data
                            dec = zlib.decompressobj(zlib.MAX_WBITS | 16)
                            in_member = False
                        else:
                            data = b""
                except zlib.error as e:
                    problem = f"corrupt gzip data at or before byte {size}: {e}"
            progress.update(len(chunk))
    if dec is not None and problem is None:
        if size == 0:
            problem = "empty file (not gzip)"
        elif in_member:
            problem = f"gzip stream is truncated (ends inside a member after {size} bytes)"
        elif not unpacked:
            problem = "the gzip stream holds no data (0 bytes uncompressed)"
    return FileDigest(size, sha.hexdigest(), md5.hexdigest()), problem


def gunzip_file(src: str, dst: str, chunk_size: int = 1 << 20) -> int:
    """Decompress ``src`` into ``dst`` atomically (:mod:`dense_cf.files`); returns the bytes
    written."""
    n = 0
    with gzip.open(src, "rb") as fin, files.atomic_open(dst, "wb") as fout:
        while chunk := fin.read(chunk_size):
            fout.write(chunk)
            n += len(chunk)
    return n


# ---------------------------------------------------------------------------------------------
# checksums.tsv (trust on first use)


class ChecksumStore:
    """``<data_dir>/checksums.tsv``: name, size, sha256, md5, source of each verified file.

    Rewritten atomically on every change (re-reading first, so entries written meanwhile by
    another process for other files survive).
    """

    HEADER = "# name\tsize\tsha256\tmd5\tsource  (written by dense_cf.datasets.download)\n"

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, CHECKSUMS_FILE)
        self.entries: dict[str, tuple[FileDigest, str]] = self._read()

    def _read(self) -> dict[str, tuple[FileDigest, str]]:
        out: dict[str, tuple[FileDigest, str]] = {}
        if not os.path.exists(self.path):
            return out
        with open(self.path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line or line.startswith("#"):
                    continue
                parts = line.split("\t")
                if len(parts) < 4 or not parts[1].isdigit():
                    raise DownloadError(
                        f"{self.path}: line {lineno}: expected name<TAB>size<TAB>sha256<TAB>md5"
                        f"[<TAB>source], got {line!r:.120}; fix or delete the line")
                source = parts[4] if len(parts) > 4 else ""
                out[parts[0]] = (FileDigest(int(parts[1]), parts[2], parts[3]), source)
        return out

    def get(self, name: str) -> FileDigest | None:
        entry = self.entries.get(name)
        return entry[0] if entry else None

    def put(self, name: str, digest: FileDigest, source: str) -> None:
        entries = self._read()
        entries[name] = (digest, source)
        self.entries = entries
        with files.atomic_open(self.path) as f:
            f.write(self.HEADER)
            for n, (d, src) in sorted(entries.items()):
                f.write(f"{n}\t{d.size}\t{d.sha256}\t{d.md5}\t{src}\n")


# ---------------------------------------------------------------------------------------------
# HTTP


class _Retryable(Exception):
    """A transient failure: retry (resuming) after a backoff."""


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """``bytes START-END/TOTAL`` -> (START, TOTAL or None)."""
    m = re.match(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)", value or "")
    if not m:
        return None
    return int(m.group(1)), None if m.group(3) == "*" else int(m.group(3))


def _load_meta(path: str) -> dict:
    meta = files.read_json(path)
    return meta if isinstance(meta, dict) else {}


def _save_meta(path: str, meta: Mapping) -> None:
    files.write_json(path, dict(meta), indent=None)


def _request_once(url: str, part: str, meta_path: str, opts: DownloadOptions,
                  progress_name: str) -> dict:
    """One GET attempt appending to ``part``; returns the validator metadata when complete.

    Raises :class:`_Retryable` on transient failures (bytes received so far stay in ``part``)
    and :class:`DownloadError` on permanent ones (4xx).
    """
    meta = _load_meta(meta_path)
    offset = os.path.getsize(part) if os.path.exists(part) else 0
    if offset and meta.get("url") not in (None, url):
        logging.warning("%s was started from another URL (%s); restarting", part, meta.get("url"))
        offset = 0
    headers = {"User-Agent": opts.user_agent, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        validator = meta.get("etag") or meta.get("last_modified")
        if validator and not str(validator).startswith("W/"):  # If-Range needs a strong one
            headers["If-Range"] = validator
    req = urllib.request.Request(url, headers=headers)
    try:
        resp = urllib.request.urlopen(req, timeout=opts.timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:
            total = meta.get("total")
            e.close()
            if total is not None and offset == total:
                return meta  # the .part is already complete (crash between last byte and rename)
            logging.warning("%s: server rejected resuming at byte %d (416); restarting", url,
                            offset)
            os.remove(part)
            raise _Retryable("416 Range Not Satisfiable") from None
        e.close()
        if e.code in (408, 425, 429) or e.code >= 500:
            raise _Retryable(f"HTTP {e.code} {e.reason}") from None
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        why = _no_network_reason(e)
        if why is not None:
            raise NetworkUnavailableError(
                f"{url}: no network: {why}. Offline, download the files on a connected machine "
                f"(`python -m dense_cf.cli.prepare --list` prints their URLs) and pass "
                f"--manual_dir DIR.") from None
        raise _Retryable(f"{type(e).__name__}: {e}") from None

    with resp:
        status = resp.status
        etag = resp.headers.get("ETag")
        last_modified = resp.headers.get("Last-Modified")
        length = resp.headers.get("Content-Length")
        length = int(length) if length and length.isdigit() else None
        if status == 206:
            cr = _content_range(resp.headers.get("Content-Range"))
            if cr is None or cr[0] != offset:
                logging.warning("%s: unexpected Content-Range %r for a resume at byte %d; "
                                "restarting", url, resp.headers.get("Content-Range"), offset)
                os.remove(part)
                raise _Retryable("bad Content-Range")
            total = cr[1]
            mode = "ab"
            logging.info("%s: resuming at %s", progress_name, human_bytes(offset))
        elif status == 200:
            if offset:
                logging.warning("%s: the server ignored the Range request (or the file changed "
                                "since the partial download); restarting from byte 0",
                                progress_name)
            offset, total, mode = 0, length, "wb"
        else:
            raise _Retryable(f"unexpected HTTP status {status}")
        if status == 206:  # a 206 need not repeat the validators; keep the first ones
            etag = etag or meta.get("etag")
            last_modified = last_modified or meta.get("last_modified")
        meta = {"url": url, "etag": etag, "last_modified": last_modified, "total": total}
        _save_meta(meta_path, meta)
        done = offset
        # Bytes already in the .part count towards the total but not the rate.
        progress = Progress(progress_name, total, every_s=opts.log_every, start=offset,
                            fmt=human_bytes)
        with open(part, mode) as f:
            while True:
                try:
                    chunk = resp.read(opts.chunk_size)
                except (OSError, http.client.HTTPException, ValueError) as e:
                    # IncompleteRead, reset connection, socket timeout: keep the bytes, resume.
                    raise _Retryable(f"transfer interrupted at {human_bytes(done)}: "
                                     f"{type(e).__name__}: {e}") from None
                if not chunk:
                    break
                f.write(chunk)  # a local write error (disk full) is not retried
                done += len(chunk)
                progress.set(done)
        progress.log()
    if total is not None and done != total:
        raise _Retryable(f"connection closed at byte {done} of {total}")
    return meta


def download_file(url: str, part: str, opts: DownloadOptions = DownloadOptions(), *,
                  name: str | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> dict:
    """Download ``url`` into ``part`` (resuming what is there); returns the server metadata.

    The result has ``url``, ``etag``, ``last_modified`` and ``total`` (bytes, or None when the
    server sent no length). The ``.part`` file stays on failure so a later call resumes.
    """
    meta_path = part[:-len(_PART)] + _PART_META if part.endswith(_PART) else part + ".json"
    failures = 0
    while True:
        before = os.path.getsize(part) if os.path.exists(part) else 0
        try:
            meta = _request_once(url, part, meta_path, opts, name or os.path.basename(url))
            size = os.path.getsize(part)
            if meta.get("total") is not None and size != meta["total"]:
                raise ChecksumError(f"{part}: {size} bytes after download, server said "
                                    f"{meta['total']}")
            return meta
        except _Retryable as e:
            after = os.path.getsize(part) if os.path.exists(part) else 0
            failures = 0 if after > before else failures + 1  # progress resets the budget
            if failures > opts.max_retries:
                raise DownloadError(
                    f"{url}: giving up after {opts.max_retries} retries without progress "
                    f"(last error: {e}). {human_bytes(after)} are kept in {part}; re-run the "
                    f"same command to resume.") from None
            delay = min(opts.backoff * 2 ** max(failures - 1, 0), opts.backoff_max)
            delay *= 0.5 + random.random() / 2  # jitter: hosts retrying together spread out
            logging.warning("%s: %s; retrying in %.1fs (failures without progress: %d of %d "
                            "allowed)", name or url, e, delay, failures, opts.max_retries)
            sleep(delay)


def remote_size(url: str, opts: DownloadOptions = DownloadOptions()) -> int | None:
    """Content-Length from a HEAD request (None when the server does not say)."""
    req = urllib.request.Request(url, method="HEAD", headers={"User-Agent": opts.user_agent,
                                                              "Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(req, timeout=opts.timeout) as resp:
            length = resp.headers.get("Content-Length")
    except urllib.error.HTTPError as e:
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise DownloadError(f"{url}: {type(e).__name__}: {e}") from None
    return int(length) if length and length.isdigit() else None


# ---------------------------------------------------------------------------------------------
# Verification


def _expected(spec: FileSpec, store: ChecksumStore, name: str) -> tuple[dict, str]:
    """The expected size/sha256/md5 of ``name`` and where they come from."""
    if name == spec.name and (spec.size or spec.sha256 or spec.md5):
        return ({"size": spec.size, "sha256": spec.sha256, "md5": spec.md5},
                "pinned in the resource registry")
    rec = store.get(name)
    if rec is not None:
        return ({"size": rec.size, "sha256": rec.sha256, "md5": rec.md5},
                f"recorded in {store.path} when it was first verified")
    return {}, ""


def _mismatches(expected: Mapping, digest: FileDigest) -> list[str]:
    out = []
    for key in ("size", "sha256", "md5"):
        want = expected.get(key)
        got = getattr(digest, key)
        if want is not None and (str(want).lower() != str(got).lower()):
            out.append(f"{key}: expected {want}, got {got}")
    return out


def _fix_hint(path: str, store: ChecksumStore) -> str:
    return (f"Fix: delete it (rm {path}) and re-run, or re-run with --force (force=True) to "
            f"fetch it again. If the file legitimately changed upstream, delete its line from "
            f"{store.path}.")


def _check_existing(path: str, spec: FileSpec, store: ChecksumStore, name: str, full: bool,
                    opts: DownloadOptions) -> None:
    """Verify a file already in ``data_dir``; adopt (record) it when nothing is known yet."""
    expected, source = _expected(spec, store, name)
    if not expected:
        logging.info("%s exists but has no recorded checksum; verifying it once", path)
        digest, gz_problem = scan_file(path, check_gzip=opts.verify_gzip and name.endswith(".gz"),
                                       log_name=name)
        if gz_problem:
            raise ChecksumError(f"{path} is corrupted or partial: {gz_problem}. "
                                + _fix_hint(path, store))
        store.put(name, digest, "existing file")
        return
    size = os.path.getsize(path)
    if expected.get("size") is not None and size != expected["size"]:
        raise ChecksumError(
            f"{path} is partial or corrupted: size {size} bytes, expected {expected['size']} "
            f"({source}). " + _fix_hint(path, store))
    if full and (expected.get("sha256") or expected.get("md5")):
        digest, _ = scan_file(path, log_name=name)
        bad = _mismatches(expected, digest)
        if bad:
            raise ChecksumError(f"{path} is corrupted: {'; '.join(bad)} ({source}). "
                                + _fix_hint(path, store))


def _verify_new(path: str, spec: FileSpec, store: ChecksumStore, name: str, *,
                origin: str, etag: str | None, opts: DownloadOptions,
                delete_on_error: bool) -> FileDigest:
    """Verify a freshly downloaded / newly found file; returns its digest."""
    expected, source = _expected(spec, store, name)
    is_gz = name.endswith(".gz")
    check_gz = opts.verify_gzip and is_gz and not (expected.get("sha256") or expected.get("md5"))
    digest, gz_problem = scan_file(path, check_gzip=check_gz, log_name=name)
    problems = [f"{p} ({source})" for p in _mismatches(expected, digest)]
    if not digest.size:  # no DPR file is empty; an empty one is a failed copy, never data
        problems.append("empty file (0 bytes)")
    if not expected.get("md5") and opts.check_etag_md5 and etag:
        m = _ETAG_MD5_RE.match(etag)
        if m and m.group(1).lower() != digest.md5:
            problems.append(f"md5: expected {m.group(1).lower()} (the server's ETag), got "
                            f"{digest.md5} (pass --no_etag_check if this server's ETags are "
                            f"not md5 sums)")
    if gz_problem:
        problems.append(gz_problem)
    if problems:
        if delete_on_error:
            os.remove(path)
            what = (f"The bad download ({origin}) was deleted; re-run to download it again. If "
                    f"this repeats, the server's copy differs from the expected checksum.")
        else:
            what = f"Replace {origin} with a good copy. " + _fix_hint(path, store)
        raise ChecksumError(f"{name} is corrupted: {'; '.join(problems)}. {what}")
    return digest


# ---------------------------------------------------------------------------------------------
# fetch


def _manual_candidates(spec: FileSpec) -> list[tuple[str, bool]]:
    cands = [(spec.name, spec.compressed)]
    if spec.compressed:
        cands.append((spec.uncompressed_name, False))
    cands.extend(spec.manual_names)
    seen, out = set(), []
    for c in cands:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def _find_manual(spec: FileSpec, manual_dir: str) -> tuple[str, bool] | None:
    for rel, compressed in _manual_candidates(spec):
        path = os.path.join(manual_dir, rel)
        if os.path.isfile(path):
            return path, compressed
    return None


def _place(src: str, dst: str, link: str) -> None:
    """``dst`` as a symlink, hard link or copy of ``src``, appearing at once (temp + rename)."""
    if link == "copy":
        with open(src, "rb") as fin, files.atomic_open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        return
    if link not in ("symlink", "hardlink"):
        raise ValueError(f"link must be symlink | hardlink | copy, got {link!r}")
    tmp = files.tmp_path(dst)
    if link == "symlink":
        os.symlink(os.path.abspath(src), tmp)
    else:
        os.link(src, tmp)
    try:
        os.replace(tmp, dst)
    except BaseException:
        files.remove_if_exists(tmp)
        raise


def _existing_target(spec: FileSpec, data_dir: str, gunzip: bool) -> str | None:
    names = [spec.uncompressed_name] if gunzip else [spec.name, spec.uncompressed_name]
    for n in names:
        p = os.path.join(data_dir, n)
        if os.path.lexists(p):
            return p
    return None


def fetch(spec: FileSpec, data_dir: str, *, manual_dir: str | None = None, force: bool = False,
          verify: str = "size", gunzip: bool = False,
          opts: DownloadOptions = DownloadOptions(),
          sleep: Callable[[float], None] = time.sleep) -> str:
    """Make ``spec`` present and verified in ``data_dir``; returns its local path.

    ``verify``: "size" checks an existing file's size against its record, "full" also its
    sha256. ``manual_dir`` given: take the file from there (no network); a missing file raises
    :class:`ManualFilesMissingError`. ``gunzip``: keep an uncompressed copy instead of the
    ``.gz`` (the ``.gz`` is removed once decompressed).
    """
    if verify not in ("size", "full"):
        raise ValueError(f"verify must be 'size' or 'full', got {verify!r}")
    os.makedirs(data_dir, exist_ok=True)
    # Several hosts/processes preparing the same shared data_dir: one fetches, the others wait
    # and then find the file present and verified.
    with _file_lock(os.path.join(data_dir, f".{spec.name}.lock")):
        return _fetch_locked(spec, data_dir, manual_dir=manual_dir, force=force, verify=verify,
                             gunzip=gunzip, opts=opts, sleep=sleep)


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    """An exclusive flock on ``path``, removed on release.

    After locking, the inode is compared with the path's, so a process that opened the file
    just before its previous holder unlinked it retries instead of locking a dead inode.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # less the umask, like open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        os.close(fd)


def _fetch_locked(spec: FileSpec, data_dir: str, *, manual_dir: str | None, force: bool,
                  verify: str, gunzip: bool, opts: DownloadOptions,
                  sleep: Callable[[float], None]) -> str:
    store = ChecksumStore(data_dir)
    final = os.path.join(data_dir, spec.name)
    if force:
        # Records are kept: a forced re-fetch is verified against the last known-good hash.
        for p in {final, os.path.join(data_dir, spec.uncompressed_name), final + _PART,
                  final + _PART_META}:
            files.remove_if_exists(p)
    existing = _existing_target(spec, data_dir, gunzip)
    if existing is not None:
        if os.path.islink(existing) and not os.path.exists(existing):
            raise DownloadError(f"{existing} is a dangling symlink (to "
                                f"{os.readlink(existing)}); delete it or re-run with --force")
        name = os.path.basename(existing)
        _check_existing(existing, spec, store, name, verify == "full", opts)
        logging.info("%s: present and verified (%s)", existing,
                     human_bytes(os.path.getsize(existing)))
        return existing
    if gunzip and spec.compressed and os.path.isfile(final):
        # Fetched compressed by an earlier run: check it, then decompress instead of refetching.
        _check_existing(final, spec, store, spec.name, verify == "full", opts)
        return _gunzip_in_place(final, spec, data_dir, store, source=f"gunzip of {final}")

    if manual_dir is not None:
        found = _find_manual(spec, manual_dir)
        if found is None:
            raise ManualFilesMissingError(_missing_message([spec], manual_dir), [spec])
        src, compressed = found
        name = spec.name if compressed else spec.uncompressed_name
        digest = _verify_new(src, spec, store, name, origin=src, etag=None, opts=opts,
                             delete_on_error=False)
        dst = os.path.join(data_dir, name)
        if compressed and gunzip:
            dst = os.path.join(data_dir, spec.uncompressed_name)
            gunzip_file(src, dst)
            store.put(spec.name, digest, src)
            store.put(spec.uncompressed_name, scan_file(dst)[0], f"gunzip of {src}")
            return dst
        _place(src, dst, opts.link)
        store.put(name, digest, src)
        logging.info("%s: taken from %s (%s, %s)", dst, src, opts.link, human_bytes(digest.size))
        return dst

    part = final + _PART
    logging.info("downloading %s -> %s", spec.url, final)
    meta = download_file(spec.url, part, opts, name=spec.name, sleep=sleep)
    try:
        digest = _verify_new(part, spec, store, spec.name, origin=spec.url,
                             etag=meta.get("etag"), opts=opts, delete_on_error=True)
    except ChecksumError:
        files.remove_if_exists(final + _PART_META)
        raise
    os.replace(part, final)
    files.remove_if_exists(final + _PART_META)
    store.put(spec.name, digest, spec.url)
    logging.info("%s: downloaded and verified (%s, sha256 %s)", final, human_bytes(digest.size),
                 digest.sha256)
    if gunzip and spec.compressed:
        return _gunzip_in_place(final, spec, data_dir, store, source=f"gunzip of {spec.url}")
    return final


def _gunzip_in_place(final: str, spec: FileSpec, data_dir: str, store: ChecksumStore, *,
                     source: str) -> str:
    """Decompress ``final`` next to itself, record the result, remove the ``.gz``."""
    dst = os.path.join(data_dir, spec.uncompressed_name)
    logging.info("decompressing %s -> %s", final, dst)
    gunzip_file(final, dst)
    store.put(spec.uncompressed_name, scan_file(dst)[0], source)
    os.remove(final)
    return dst


def _missing_message(specs: Sequence[FileSpec], manual_dir: str) -> str:
    lines = [f"{len(specs)} file(s) missing from manual_dir {manual_dir} (no downloads happen "
             f"when a manual dir is given). Put each one there under any of the listed names, "
             f"or drop --manual_dir to download them:"]
    for s in specs:
        alts = [rel for rel, _ in _manual_candidates(s)[1:]]
        lines.append(f"  {os.path.join(manual_dir, s.name)}")
        lines.append(f"      from {s.url}")
        if alts:
            lines.append(f"      (or {', '.join(os.path.join(manual_dir, a) for a in alts)})")
    return "\n".join(lines)


def fetch_all(specs: Iterable[FileSpec], data_dir: str, *, manual_dir: str | None = None,
              **kwargs) -> dict[str, str]:
    """:func:`fetch` each spec; returns ``{spec.name: local path}``.

    With ``manual_dir``, every missing file is collected first and reported in one
    :class:`ManualFilesMissingError` (before anything is linked).
    """
    specs = list(specs)
    if manual_dir is not None:
        if not os.path.isdir(manual_dir):
            raise ManualFilesMissingError(
                f"manual_dir {manual_dir} does not exist.\n"
                + _missing_message(specs, manual_dir), specs)
        force, gunzip = kwargs.get("force", False), kwargs.get("gunzip", False)
        missing = [s for s in specs if _find_manual(s, manual_dir) is None
                   and (force or _existing_target(s, data_dir, gunzip) is None)]
        if missing:
            raise ManualFilesMissingError(_missing_message(missing, manual_dir), missing)
    out = {}
    for i, s in enumerate(specs):
        try:
            out[s.name] = fetch(s, data_dir, manual_dir=manual_dir, **kwargs)
        except NetworkUnavailableError as e:  # say which files --manual_dir must then hold
            todo = [t.name for t in specs[i:]]
            names = ", ".join(todo[:6]) + (f" and {len(todo) - 6} more" if len(todo) > 6 else "")
            raise NetworkUnavailableError(f"{e} Files expected there: {names}.") from None
    return out
