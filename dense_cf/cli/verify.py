"""Checks every checksummed artefact of a run directory (docs/reliability.md, "What we promise").

    python -m dense_cf.cli.verify RUN [RUN ...]

Walks RUN (any directory) for the checksum files their producers wrote: ``SHA256SUMS`` of
checkpoint steps, embedding exports, faiss indexes, HF export towers, passage stores and BM25
index directories, ``<file>.sha256`` of mined negatives, mining parts and tokenised caches. It
re-reads every file they list and prints one line per artefact: ``OK``, ``FAILED`` (the file
and what is wrong) or ``UNVERIFIED`` (a checkpoint step or export written without checksums:
older versions, or a kill between a save and its seal; a passage store or BM25 index built
before checksums). The newest checkpoint step's recorded
training inputs (``inputs.json``) are compared with the files as they are now: ``CHANGED``
names one that differs. Half-written steps (``*.orbax-checkpoint-tmp``), staging directories
and steps set aside as unreadable (``checkpoints.corrupt/``) are skipped. The last line counts
each outcome; the exit status is 0 when nothing FAILED or CHANGED, else 1.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Sequence

from absl import app, flags

from dense_cf import app as _app
from dense_cf import files
from dense_cf.index.shards import EMBEDDINGS_RE, MANIFEST
from dense_cf.train.checkpoint import INPUTS_NAME, TMP_CHECKPOINT_MARK

FLAGS = flags.FlagValues()
_INPUTS = flags.DEFINE_bool("inputs", True, "Also compare the training inputs recorded by each "
                            "newest checkpoint step with the files now (--noinputs: artefacts "
                            "only).", flag_values=FLAGS)

__all__ = ["FLAGS", "Finding", "main", "run_cli", "verify_tree"]

OK, FAILED, UNVERIFIED, CHANGED = "OK", "FAILED", "UNVERIFIED", "CHANGED"


@dataclasses.dataclass(frozen=True)
class Finding:
    status: str     # OK | FAILED | UNVERIFIED | CHANGED
    artefact: str   # path relative to the run directory
    detail: str

    def line(self) -> str:
        return f"{self.status:<10} {self.artefact}" + (f": {self.detail}" if self.detail else "")


def _skipped(name: str) -> bool:
    return (TMP_CHECKPOINT_MARK in name or files.STAGING_MARKER in name
            or name.endswith(".corrupt") or files.is_tmp_name(name))


def _checked(sums: str, artefact: str) -> Finding:
    results = files.check_sums(sums)
    bad = [(p, why) for p, why in results if why is not None]
    if bad:
        p, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return Finding(FAILED, artefact, f"{os.path.relpath(p, os.path.dirname(sums))}: "
                                         f"{why}{more}")
    size = sum(os.path.getsize(p) for p, _ in results)
    return Finding(OK, artefact, f"{len(results)} files, {files.human_bytes(size)}")


def _inputs(root: str, step_dir: str) -> list[Finding]:
    record = files.read_json(os.path.join(step_dir, INPUTS_NAME))
    step, out = os.path.basename(step_dir), []
    for key, rec in sorted((record or {}).items()):
        path, what = rec.get("path", "?"), f"input {key} of {os.path.relpath(step_dir, root)}"
        if not os.path.isfile(path):
            out.append(Finding(CHANGED, what, f"{path} is missing"))
            continue
        st = os.stat(path)
        same = st.st_size == rec.get("bytes") and st.st_mtime_ns == rec.get("mtime_ns")
        now = rec.get("sha256") if same else files.file_sha256(path)
        out.append(Finding(OK, what, path) if now == rec.get("sha256") else Finding(
            CHANGED, what, f"{path} differs from the file step {step} was trained on (sha256 "
                           f"{str(rec.get('sha256'))[:12]}… then, {now[:12]}… now)"))
    return out


def verify_tree(root: str, inputs: bool = True) -> list[Finding]:
    """One :class:`Finding` per artefact under ``root`` (module docstring); ``inputs``: also
    the recorded training inputs."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root}: no such directory")
    root = os.path.abspath(root)
    out: list[Finding] = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _skipped(d))
        rel = os.path.relpath(dirpath, root)
        if files.SUMS_NAME in names:
            out.append(_checked(os.path.join(dirpath, files.SUMS_NAME), rel))
        for n in sorted(names):
            if n.endswith(files.SIDECAR_SUFFIX) and n[:-len(files.SIDECAR_SUFFIX)] in names:
                out.append(_checked(os.path.join(dirpath, n),
                                    os.path.join(rel, n[:-len(files.SIDECAR_SUFFIX)])))
        if files.SUMS_NAME in names:
            pass  # checked above
        elif os.path.basename(os.path.dirname(dirpath)) == "checkpoints" and \
                os.path.basename(dirpath).isdigit():
            out.append(Finding(UNVERIFIED, rel, "a checkpoint step without SHA256SUMS"))
        elif MANIFEST in names and any(EMBEDDINGS_RE.match(n) for n in names):
            out.append(Finding(UNVERIFIED, rel, "an export without SHA256SUMS"))
        elif "passages.jsonl" in names and ("store.json" in names or "meta.json" in names):
            kind = "a BM25 index" if "meta.json" in names else "a passage store"
            out.append(Finding(UNVERIFIED, rel, f"{kind} without SHA256SUMS"))
        if inputs and os.path.basename(dirpath) == "checkpoints":
            steps = sorted((int(d) for d in dirnames if d.isdigit()), reverse=True)
            if steps:
                out.extend(_inputs(root, os.path.join(dirpath, str(steps[0]))))
    return out


def main(argv: Sequence[str]) -> int:
    """Verifies each run directory given; prints a line per artefact; returns the exit status."""
    roots = list(argv[1:])
    if not roots:
        raise app.UsageError("give a run directory: python -m dense_cf.cli.verify RUN")
    status = 0
    for root in roots:
        found = verify_tree(root, _INPUTS.value)
        for f in found:
            print(f.line())
        counts = {s: sum(f.status == s for f in found) for s in (OK, FAILED, UNVERIFIED, CHANGED)}
        print(f"{root}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        if counts[FAILED] or counts[CHANGED]:
            status = 1
    sys.stdout.flush()
    return status


def run_cli(argv: Sequence[str]) -> int:
    """``main`` in-process on ``argv`` (run directories; no program name); returns the status."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
