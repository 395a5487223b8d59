"""Resumable, sharded output of long per-record jobs over DPR biencoder files (docs/method.md §8).

A job (e.g. hard-negative mining over NQ-train) processes the input list in shards of
``shard_size`` consecutive records (by 0-based list index, bad records included, so a shard's
extent never depends on what was skipped). Each finished shard is written to the work directory
as ``part-KKKKK.jsonl`` (one output record per line) and then marked done with
``part-KKKKK.done.json`` (its statistics); both are written to a temporary file and renamed, so a
crash leaves either a finished shard or nothing. Between the two, ``part-KKKKK.jsonl.sha256``
records the records' sha256 (:func:`files.write_sidecar`); a done shard is checked against it
when it is reused and when it is assembled, so a part changed on disk is refused in one line
naming it. A restarted job skips done shards. The final
output is assembled by streaming the parts' lines in order into one JSON list laid out like
:func:`formats.write_biencoder`'s (atomic, gzip for ``.gz``).

``settings.json`` in the work directory records what the parts were computed with; a restart
with different settings refuses to mix them.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Iterable, Iterator, Mapping

from dense_cf import files

__all__ = ["ShardedParts", "SettingsMismatchError"]


class SettingsMismatchError(ValueError):
    """The work directory holds parts computed with other settings."""


def _atomic_write_text(path: str, text: str) -> None:
    with files.atomic_open(path) as f:
        f.write(text)


class ShardedParts:
    """Shard files of one job in ``work_dir`` (see the module docstring)."""

    def __init__(self, work_dir: str, settings: Mapping[str, Any], *,
                 read_only: bool = False) -> None:
        """``read_only``: see done shards but write nothing (non-zero hosts of a multi-host
        job, which must skip exactly the shards host 0 skips)."""
        self.work_dir = work_dir
        self.read_only = read_only
        self.settings = json.loads(json.dumps(dict(settings)))  # normalise (tuples → lists)
        path = os.path.join(work_dir, "settings.json")
        if read_only:
            return
        os.makedirs(work_dir, exist_ok=True)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            diff = sorted(k for k in set(old) | set(self.settings)
                          if old.get(k) != self.settings.get(k))
            if diff:
                details = "; ".join(f"{k}: {old.get(k)!r} -> {self.settings.get(k)!r}"
                                    for k in diff)
                raise SettingsMismatchError(
                    f"{work_dir} holds parts of a run with other settings ({details}); "
                    f"delete it (or pass another work dir) to start over")
        else:
            _atomic_write_text(path, json.dumps(self.settings, indent=2, sort_keys=True))

    def _path(self, shard: int, suffix: str) -> str:
        return os.path.join(self.work_dir, f"part-{shard:05d}.{suffix}")

    def is_done(self, shard: int) -> bool:
        """Whether ``shard`` is finished; a finished shard whose records changed on disk is
        :class:`files.IntegrityError` (checked on the writer only: the others read no part)."""
        done = (os.path.exists(self._path(shard, "done.json"))
                and os.path.exists(self._path(shard, "jsonl")))
        if done and not self.read_only:
            self._verify(shard)
        return done

    def _verify(self, shard: int) -> None:
        path = self._path(shard, "jsonl")
        files.verify_sidecar(path, f"delete {path} and {self._path(shard, 'done.json')} and run "
                                   f"the same command again (shard {shard} is computed again; "
                                   f"the other shards are kept)", editable=False)

    def stats(self, shard: int) -> dict[str, Any]:
        with open(self._path(shard, "done.json"), encoding="utf-8") as f:
            return json.load(f)

    def write(self, shard: int, records: Iterable[Mapping[str, Any]],
              stats: Mapping[str, Any]) -> None:
        """Writes a shard's records, then its done marker (the commit point)."""
        if self.read_only:
            return
        _atomic_write_text(self._path(shard, "jsonl"),
                           "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        files.write_sidecar(self._path(shard, "jsonl"))
        _atomic_write_text(self._path(shard, "done.json"), json.dumps(dict(stats), indent=1))

    def iter_records(self, num_shards: int) -> Iterator[dict[str, Any]]:
        for shard in range(num_shards):
            if not self.is_done(shard):
                raise FileNotFoundError(f"{self._path(shard, 'jsonl')}: shard {shard} not done")
            self._verify(shard)
            with open(self._path(shard, "jsonl"), encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)

    def assemble(self, output: str, num_shards: int, compresslevel: int = 6) -> int:
        """Writes the DPR biencoder JSON list of all shards to ``output``; returns the count.

        The part lines are copied verbatim (they are complete JSON records), giving the same
        bytes as :func:`formats.write_biencoder` before compression; ``.gz`` outputs use gzip
        level ``compresslevel`` (6, gzip's default: level 9 is ~3x slower for ~2% smaller
        files) with mtime 0, so reruns are byte-identical. Temp file + rename, like formats.
        """
        for shard in range(num_shards):
            if not self.is_done(shard):
                raise FileNotFoundError(f"{self._path(shard, 'jsonl')}: shard {shard} not done")
            self._verify(shard)  # again on a read-only view; free while unchanged (memoised)
        n = 0
        with files.atomic_open_gz(output, "wb", compresslevel=compresslevel) as out:
            out.write(b"[")
            for shard in range(num_shards):
                with open(self._path(shard, "jsonl"), "rb") as f:
                    for line in f:
                        out.write(b",\n" if n else b"\n")
                        out.write(line.rstrip(b"\n"))
                        n += 1
            out.write(b"\n]\n")
        return n

    def remove(self) -> None:
        if self.read_only:
            return
        shutil.rmtree(self.work_dir, ignore_errors=True)
