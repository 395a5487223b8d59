"""The one atomic writer and the one cache-identity scheme of dense_cf (docs/ARCHITECTURE.md).

Every file dense_cf writes for later reuse (reports, exports, caches, indexes, manifests) goes
through :func:`atomic_open`: a temporary file next to the target, flushed and fsynced, then
renamed over it. A crash leaves the previous file or none, never a truncated one, and a reader
never takes a half-written file as valid. Temporary names share one scheme
(:data:`TMP_MARKER`) so a resumed job can recognise and remove leftovers.

Cache identity has two forms:
- :func:`file_key`: a file as it is on disk (absolute path, size, mtime), cheap, for caches
  derived from one input file (the tokenised training cache, evidence annotations);
- :func:`content_sha256` / :func:`sha256_hex`: content itself, for artifacts shared across files
  or hosts (embedding exports keyed by the corpus rows, BM25 indexes keyed by their corpus).

Integrity (docs/reliability.md, "What we promise"): a producer records the sha256 of the files
it wrote in a checksum file in ``sha256sum`` format (:func:`write_sums`: ``SHA256SUMS`` for a
directory, ``<file>.sha256`` beside one file), and a consumer checks it before trusting them
(:func:`verify_sums`): a mismatch is :class:`IntegrityError`, one line naming the file and how
to rebuild it. ``sha256sum -c SHA256SUMS`` in the directory checks the same by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gzip
import hashlib
import io
import json
import math
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

import numpy as np

__all__ = ["TMP_MARKER", "atomic_open", "atomic_open_gz", "atomic_save_npy", "atomic_write",
           "content_sha256", "file_key", "is_tmp_name", "read_json", "remove_if_exists",
           "sha256_hex", "tmp_path", "to_jsonable", "write_json", "LOCK_NAME", "UserError", "WorkdirLockedError",
           "DiskFullError", "is_disk_full", "human_bytes", "tree_bytes",
           "workdir_lock", "unwritable_error", "STAGING_MARKER", "make_dir", "staging_dir",
           "remove_stale_staging", "build_dir_atomically", "SUMS_NAME", "SIDECAR_SUFFIX",
           "IntegrityError", "file_sha256", "write_sums", "read_sums", "check_sums",
           "verify_sums", "sidecar", "write_sidecar", "verify_sidecar", "seal_dir", "verify_dir"]

# Every temporary file is ".<name>.<random>.tmp" in the target's directory.
TMP_MARKER = ".tmp"


class UserError(RuntimeError):
    """An error about the user's situation (a full disk, a held lock, no intact checkpoint), not
    a bug: binaries print its message as one line, without a traceback (``dense_cf.app``)."""


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# A short write to a local file: numpy's ``ndarray.tofile`` (used by ``np.save``) reports a full
# disk as "OSError: 131072 requested and 123872 written", without an errno.
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def is_disk_full(e: BaseException) -> bool:
    """Whether ``e`` (or its cause) is "no space left", "quota exceeded" or "file too large"."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS:
            return True
        text = str(e)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        if isinstance(e, OSError) and _SHORT_WRITE.search(text):  # numpy's tofile, no errno
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def tree_bytes(path: str | os.PathLike) -> int:
    """Bytes of the regular files under ``path`` (a file: its size; absent: 0). Symbolic links
    are not followed or counted; entries that vanish or cannot be read count as 0."""
    if os.path.isfile(path) and not os.path.islink(path):
        return os.path.getsize(path)
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            p = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if not os.path.islink(p):
                    total += os.path.getsize(p)
    return total


class DiskFullError(UserError):
    """A write ran out of space; nothing half-written was left in place."""

    @classmethod
    def for_path(cls, path: str | os.PathLike, nbytes: int, *, what: str = "",
                 estimate: bool = False) -> DiskFullError:
        """The one-line message: the path, roughly the space needed, the space free.

        ``nbytes``: the size it needs (``estimate``) or what was written when space ran out.
        """
        where = os.path.dirname(os.path.abspath(path))
        while where and not os.path.exists(where):
            where = os.path.dirname(where)
        free = shutil.disk_usage(where).free if where else 0
        need = f"about {human_bytes(nbytes)}" if estimate else f"more than {human_bytes(nbytes)}"
        return cls(f"no space left writing {what or os.fspath(path)}: it needs {need}, "
                   f"{human_bytes(free)} free in {where}; free space and run the same command "
                   f"again (nothing half-written was kept)")


def _umask() -> int:
    # os.umask can only be read by setting it; restore at once (single-threaded at this point
    # matters little: the value written back is the one read).
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_tmp_name(name: str) -> bool:
    """True for a leftover of :func:`atomic_open` (safe to delete when no writer runs)."""
    return name.startswith(".") and name.endswith(TMP_MARKER)


def tmp_path(path: str | os.PathLike) -> str:
    """A fresh temporary name next to ``path`` in the :data:`TMP_MARKER` scheme, for what
    :func:`atomic_open` cannot create (a symlink or hard link renamed into place)."""
    path = Path(path)
    return os.fspath(path.parent / f".{path.name}.{secrets.token_hex(6)}{TMP_MARKER}")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w",
                encoding: str | None = "utf-8") -> Iterator[IO]:
    """Opens a temporary file next to ``path``; on success fsyncs it and renames it over ``path``.

    The file gets the permissions an ordinary ``open`` would give (0o666 less the umask), not
    ``mkstemp``'s 0o600, so collaborators on shared storage can read what a run wrote.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_MARKER, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX within one file system
    except BaseException as e:
        written = os.stat(tmp).st_size if os.path.exists(tmp) else 0
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(e):
            raise DiskFullError.for_path(path, written) from e
        raise


@contextlib.contextmanager
def atomic_open_gz(path: str | os.PathLike, mode: str = "w", *, compresslevel: int = 9,
                   newline: str | None = None) -> Iterator[IO]:
    """:func:`atomic_open`, gzip-compressed when ``path`` ends in ``.gz``.

    The gzip header has mtime 0 and no file name, so reruns write identical bytes. Text modes
    are UTF-8 with ``newline`` as for :func:`open`; ``mode`` is ``"w"`` or ``"wb"``.
    """
    with atomic_open(path, "wb") as raw:
        gz = (gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                            compresslevel=compresslevel)
              if os.fspath(path).endswith(".gz") else None)
        stream: IO = gz if gz is not None else raw
        text = None if "b" in mode else io.TextIOWrapper(stream, encoding="utf-8",
                                                          newline=newline)
        try:
            yield stream if text is None else text
            if text is not None:
                text.detach()  # flushes, and leaves ``raw`` open for atomic_open's fsync
            if gz is not None:
                gz.close()  # writes the trailer; a GzipFile never closes a passed fileobj
        except BaseException:
            # Else their finalisers would later write to the closed file; the temp file goes.
            with contextlib.suppress(Exception):
                if text is not None:
                    text.detach()
            with contextlib.suppress(Exception):
                if gz is not None:
                    gz.close()
            raise


def atomic_write(path: str | os.PathLike, write: Callable[[IO], Any], binary: bool = True) -> None:
    """``write(f)`` into a temporary file, then the rename of :func:`atomic_open`."""
    with atomic_open(path, "wb" if binary else "w") as f:
        write(f)


def atomic_save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    """``np.save`` to exactly ``path`` (no ``.npy`` appended), atomically."""
    array = np.asarray(array)
    try:
        with atomic_open(path, "wb") as f:
            np.save(f, array, allow_pickle=False)
    except DiskFullError as e:  # the size is known: say what it needs, not what got written
        raise DiskFullError.for_path(path, array.nbytes + 128, estimate=True) from e.__cause__


# --------------------------------------------------------------------- directories built whole
# A directory is built in a staging sibling "<name>.tmp-<host>.<pid>-<random>" and renamed into
# place. A run killed mid-way leaves its staging directory; the next build of the same directory
# removes it (its process is gone), and so do builds of other directories next to it never.
STAGING_MARKER = ".tmp-"


def make_dir(prefix: str, parent: str | os.PathLike | None = None) -> str:
    """``tempfile.mkdtemp`` with the mode ``os.mkdir`` gives (0o777 less the umask, 0755 under
    umask 022), not mkdtemp's 0700: what a run writes stays readable by collaborators."""
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(d, 0o777 & ~_umask())
    return d


def staging_dir(directory: str | os.PathLike) -> str:
    """A fresh staging directory next to ``directory``, named for this host and process."""
    directory = os.path.abspath(directory)
    parent, name = os.path.split(directory.rstrip(os.sep))
    os.makedirs(parent, exist_ok=True)
    return make_dir(f"{name}{STAGING_MARKER}{socket.gethostname()}.{os.getpid()}-", parent)


def remove_stale_staging(directory: str | os.PathLike,
                         warn: Callable[[str], Any] | None = None) -> list[str]:
    """Removes the staging siblings of ``directory`` left by builds that died (this host, a pid
    no longer running; or the unnamed ``<name>.tmp-XXXXXXXX`` of older versions). A live build
    or one on another host is left alone. Returns the removed paths."""
    directory = os.path.abspath(directory)
    parent, name = os.path.split(directory.rstrip(os.sep))
    prefix, host, removed = name + STAGING_MARKER, socket.gethostname(), []
    try:
        siblings = os.listdir(parent)
    except OSError:
        return removed
    for sib in siblings:
        path = os.path.join(parent, sib)
        if not sib.startswith(prefix) or not os.path.isdir(path):
            continue
        owner = sib[len(prefix):].rsplit("-", 1)[0]
        where, _, pid = owner.rpartition(".")
        if pid.isdigit() and where:
            if where != host or (int(pid) != os.getpid() and _pid_alive(int(pid))):
                continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
        if warn:
            warn(f"removed {path}, left by a build of {directory} that did not finish")
    return removed


def build_dir_atomically(directory: str | os.PathLike, build: Callable[[str], None], *,
                         replace: bool = False) -> None:
    """``build(staging)`` in a :func:`staging_dir`, then renamed to ``directory``, which must be
    absent or empty unless ``replace`` (then the old one is swapped out once the new one is
    complete). Stale staging directories of earlier killed builds are removed first; a failed
    build removes its own (a full disk: :class:`DiskFullError` with what it had written)."""
    directory = os.path.abspath(directory)
    remove_stale_staging(directory)
    tmp = staging_dir(directory)
    try:
        build(tmp)
        if os.path.isdir(directory) and not os.listdir(directory):
            os.rmdir(directory)
        if replace and os.path.isdir(directory):
            old = tmp + ".old"  # still a staging name: a kill right here leaves nothing unknown
            os.rename(directory, old)
            os.rename(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, directory)
    except BaseException as e:
        written = tree_bytes(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, Exception) and is_disk_full(e):
            raise DiskFullError.for_path(directory, written, what=directory) from e
        raise


def _key(k: Any) -> Any:
    # json accepts str/int/float/bool/None keys; numpy scalars must become Python ones first.
    if isinstance(k, np.generic):
        k = k.item()
    if isinstance(k, (str, int, float, bool)) or k is None:
        return k
    return str(k)


def to_jsonable(obj: Any) -> Any:
    """Recursively turn numpy scalars/arrays, dataclasses, tuples, sets and paths into JSON types.

    Non-finite floats (NaN, ±inf) become ``None``: strict JSON has no NaN, and an undefined
    metric (e.g. AAR of an empty subset) reads naturally as null.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return {_key(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "__array__"):  # e.g. jax arrays, without importing jax here
        return to_jsonable(np.asarray(obj))
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as strict JSON, atomically, after :func:`to_jsonable`."""
    text = json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False, allow_nan=False)
    try:
        with atomic_open(path) as f:
            f.write(text + "\n")
    except DiskFullError as e:  # the size is known: say what it needs, not what got written
        raise DiskFullError.for_path(path, len(text.encode()) + 1, estimate=True) from e.__cause__


def read_json(path: str | os.PathLike) -> Any | None:
    """The JSON value in ``path``, or None when the file is missing or unreadable (a torn or
    foreign file is treated as absent, so the caller recomputes rather than trusts it)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def remove_if_exists(path: str | os.PathLike) -> None:
    """``os.remove`` that ignores a missing file."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def file_key(path: str | os.PathLike) -> list[Any]:
    """The identity of a file as it is on disk: [absolute path, size, mtime in ns]."""
    st = os.stat(path)
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


def sha256_hex(*parts: Any) -> str:
    """sha256 of the canonical JSON of ``parts`` (for keys built from settings and file keys)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def content_sha256(chunks: Iterable[bytes]) -> str:
    """sha256 over a stream of byte chunks (file contents, serialised rows)."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


# ------------------------------------------------------------------------------ integrity
SUMS_NAME = "SHA256SUMS"      # a directory's checksum file (``sha256sum -c`` reads it)
SIDECAR_SUFFIX = ".sha256"    # one file's checksum file: ``<file>.sha256``
_HASH_CHUNK = 1 << 22


class IntegrityError(UserError):
    """A file's content differs from the sha256 its producer recorded: it changed after it was
    written (a flipped bit, a partial overwrite, an edit)."""


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, read in 4 MB chunks (constant memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sidecar(path: str | os.PathLike) -> str:
    """The checksum file of one file: ``<path>.sha256``."""
    return os.fspath(path) + SIDECAR_SUFFIX


def write_sums(sums_path: str | os.PathLike, paths: Iterable[str | os.PathLike],
               known: dict[str, str] | None = None) -> dict[str, str]:
    """Hashes ``paths`` (files in or under the directory of ``sums_path``) and writes
    ``<sha256>  <relative path>`` lines, sorted, atomically; a relative path in ``known`` takes
    the hash given there (checked already) instead of a read. Returns {relative path: sha256}."""
    base = os.path.dirname(os.path.abspath(sums_path))
    sums = {}
    for p in paths:
        rel = os.path.relpath(os.path.abspath(p), base)
        if rel.startswith(os.pardir) or "\n" in rel:
            raise ValueError(f"{p}: not a file under {base}")
        sums[rel] = known[rel] if known and rel in known else file_sha256(p)
    with atomic_open(sums_path) as f:
        f.write("".join(f"{h}  {rel}\n" for rel, h in sorted(sums.items())))
    return sums


def read_sums(sums_path: str | os.PathLike) -> dict[str, str]:
    """{relative path: sha256} of a checksum file; a damaged line is :class:`IntegrityError`."""
    out = {}
    with open(sums_path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            h, sep, rel = line.rstrip("\n").partition("  ")
            if not sep or len(h) != 64 or any(c not in "0123456789abcdef" for c in h) or not rel:
                raise IntegrityError(f"{os.fspath(sums_path)}: line {lineno} is not "
                                     f"'<sha256>  <file>': the checksum file itself is damaged")
            out[rel] = h
    return out


# (path, size, mtime_ns) -> sha256 of files checked in this process: a file read by several
# consumers of one command (an export's index build, then its re-ranker) is hashed once.
_CHECKED: dict[tuple[str, int, int], str] = {}


def _current_sha256(path: str) -> str:
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _CHECKED:
        _CHECKED[key] = file_sha256(path)
    return _CHECKED[key]


def check_sums(sums_path: str | os.PathLike,
               only: Iterable[str] | None = None) -> list[tuple[str, str | None]]:
    """(path, None if intact else what is wrong) per file of a checksum file (``only``: these
    relative paths). A damaged checksum file is one entry naming it."""
    base = os.path.dirname(os.path.abspath(sums_path))
    try:
        sums = read_sums(sums_path)
    except (IntegrityError, OSError) as e:
        return [(os.fspath(sums_path), str(e).split(": ", 1)[-1])]
    wanted = set(only) if only is not None else None
    out: list[tuple[str, str | None]] = []
    for rel, want in sorted(sums.items()):
        if wanted is not None and rel not in wanted:
            continue
        path = os.path.join(base, rel)
        try:
            got = _current_sha256(path)
        except FileNotFoundError:
            out.append((path, f"missing (listed in {sums_path})"))
            continue
        except OSError as e:
            out.append((path, f"unreadable: {e.strerror or e}"))
            continue
        out.append((path, None if got == want else
                    f"content does not match the sha256 recorded in {sums_path} (recorded "
                    f"{want[:12]}…, now {got[:12]}…): it changed after it was written"))
    return out


def verify_sums(sums_path: str | os.PathLike, rebuild: str,
                only: Iterable[str] | None = None) -> None:
    """Raises :class:`IntegrityError` for the first file of ``sums_path`` (``only``: these
    relative paths) whose content is not what was recorded: one line naming the file, what is
    wrong and ``rebuild`` (how to make it again)."""
    for path, problem in check_sums(sums_path, only):
        if problem is not None:
            raise IntegrityError(f"{path}: {problem}; {rebuild}")


def write_sidecar(path: str | os.PathLike) -> str:
    """Writes ``<path>.sha256`` for one finished file; returns its sha256."""
    return write_sums(sidecar(path), [path])[os.path.basename(path)]


def verify_sidecar(path: str | os.PathLike, rebuild: str, *, editable: bool = True) -> bool:
    """Checks ``path`` against its ``<path>.sha256`` when it has one (False when not: a file
    from elsewhere, nothing to check); a mismatch is :class:`IntegrityError` ending in
    ``rebuild``, and for an ``editable`` file (one a user may change on purpose, unlike a
    cache) in deleting the checksum file when the change was meant."""
    if not os.path.exists(sidecar(path)):
        return False
    meant = f" (if you changed it on purpose, delete {sidecar(path)})" if editable else ""
    verify_sums(sidecar(path), rebuild + meant, [os.path.basename(path)])
    return True


def seal_dir(directory: str | os.PathLike) -> dict[str, str]:
    """Writes ``<directory>/SHA256SUMS`` over every file under ``directory`` (a directory built
    whole: call it last, before the staging directory is renamed into place)."""
    directory = os.fspath(directory)
    sums = os.path.join(directory, SUMS_NAME)
    paths = sorted(os.path.join(r, n) for r, _, names in os.walk(directory) for n in names
                   if os.path.join(r, n) != sums)
    return write_sums(sums, paths)


def verify_dir(directory: str | os.PathLike, rebuild: str) -> bool:
    """Checks every file of ``<directory>/SHA256SUMS`` (:func:`verify_sums`); False when the
    directory has none (built before checksums existed: nothing to check)."""
    sums = os.path.join(os.fspath(directory), SUMS_NAME)
    if not os.path.exists(sums):
        return False
    verify_sums(sums, rebuild)
    return True


# --------------------------------------------------------------------------------- workdir lock
LOCK_NAME = ".dense_cf.lock"


class WorkdirLockedError(UserError):
    """Another live process holds the workdir lock."""


def unwritable_error(path: str | os.PathLike, what: str, e: OSError) -> UserError:
    """One clear error for ``path`` that cannot be written (a read-only file system, no
    permission): the path, what was being written and the reason."""
    reason = (e.strerror or str(e)).lower() if isinstance(e, OSError) else str(e)
    return UserError(f"cannot write {os.fspath(path)} ({what}): {reason}; make it writable or "
                     f"pass another directory")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


_HELD: dict[str, int] = {}  # lock path -> nesting depth in this process


@contextlib.contextmanager
def workdir_lock(workdir: str | os.PathLike, purpose: str,
                 warn: Callable[[str], Any] | None = None) -> Iterator[dict[str, Any]]:
    """Holds ``<workdir>/.dense_cf.lock`` (pid, host, purpose, start time) while writing there.

    A second process that wants the lock gets :class:`WorkdirLockedError` at once, naming the
    holder's pid, host and purpose. A lock left by a dead process on this host is taken over
    (``warn`` is told); one from another host is never guessed dead: the error says to remove
    the file once that run is known to be gone. The same process may nest the lock (training,
    then evaluation in one call). Created with O_EXCL, so it also works on shared filesystems
    without flock; multi-host runs take it on process 0 only.
    """
    path = os.path.abspath(os.path.join(workdir, LOCK_NAME))
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise unwritable_error(workdir, f"the workdir for {purpose}", e) from e
    if _HELD.get(path):
        _HELD[path] += 1
        try:
            yield read_json(path) or {}
        finally:
            _HELD[path] -= 1
        return
    host = socket.gethostname()
    me = {"pid": os.getpid(), "host": host, "purpose": purpose, "started": time.time()}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            holder = read_json(path)
            if not isinstance(holder, dict):  # being written by its creator, or garbage
                time.sleep(0.2)
                holder = read_json(path)
            if not isinstance(holder, dict):
                raise WorkdirLockedError(f"{path} exists but is unreadable; remove it if no dense_cf "
                                         f"job is writing {workdir}") from None
            pid, where = int(holder.get("pid", -1)), holder.get("host", "?")
            if where == host and not _pid_alive(pid):
                if warn:
                    warn(f"{path}: taking over a stale lock of pid {pid} on {where} "
                         f"({holder.get('purpose', '?')}), which is no longer running")
                if read_json(path) == holder:  # not replaced meanwhile by another taker
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                continue
            hint = ("wait for it or stop it" if where == host else
                    f"if that run is gone, delete {path}")
            raise WorkdirLockedError(
                f"{workdir} is in use by pid {pid} on {where} ({holder.get('purpose', '?')}, "
                f"since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder.get('started', 0)))}): "
                f"{hint}, or use another workdir") from None
        except OSError as e:  # a read-only file system, no permission
            raise unwritable_error(path, f"the workdir lock for {purpose}", e) from None
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    else:
        raise WorkdirLockedError(f"{path}: could not take the lock (another process keeps taking it)")
    _HELD[path] = 1
    try:
        yield me
    finally:
        _HELD.pop(path, None)
        holder = read_json(path)
        if isinstance(holder, dict) and holder.get("pid") == me["pid"] and holder.get("host") == host:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


# ------------------------------------------------------------------ report stamps (issue 50)

def code_version(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The git commit of the checkout holding ``path`` (default: this package) and whether its
    tracked files differ from it: ``{"commit": sha or None, "dirty": bool or None}`` (None
    outside a git checkout or without git: said, not guessed)."""

    where = os.path.dirname(os.path.abspath(path or __file__))
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 cwd=where, capture_output=True, text=True, timeout=60,
                                 check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha or None, "dirty": bool(changed)}


def utc_now() -> str:
    """The wall-clock time now, UTC, ISO 8601 to the second (``2026-11-28T17:40:02Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def stamp_line(stamp: dict[str, Any]) -> str:
    """One markdown line for a report: the commit, the dirty flag, and the invocation's start
    and end (:func:`code_version` plus ``started`` / ``finished``)."""
    commit = stamp.get("commit") or "unknown (no git checkout)"
    dirty = {True: "dirty (uncommitted changes)", False: "clean", None: "dirty flag unknown"}[
        stamp.get("dirty")]
    return (f"Commit `{commit}`, {dirty}; started {stamp.get('started', '?')}, finished "
            f"{stamp.get('finished', '?')} (UTC).")
