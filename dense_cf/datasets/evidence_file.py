"""EADPR pseudo-evidence files: the JSONL records and their matcher (docs/method.md §2).

The annotation job (``dense_cf.mining.evidence.annotate``) writes one record per example of a
biencoder file; the training input reads them here through :class:`EvidenceMatcher`, which
checks each record's question against the example at its index. See the annotate module for
the record format.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable, Iterator

from absl import logging

from dense_cf import files
from dense_cf.datasets.formats import BiencoderExample


def source_name(path: str) -> str:
    """How an annotation file names its biencoder file: the basename without ``.gz`` (so a
    decompressed copy still matches)."""
    name = os.path.basename(os.fspath(path))
    return name[:-3] if name.endswith(".gz") else name


@dataclasses.dataclass(frozen=True)
class EvidenceRecord:
    index: int
    sentence: int
    question: str | None = None
    source: str | None = None


def read_evidence(path: str, *, repair_tail: bool = False) -> dict[int, EvidenceRecord]:
    """Records of an evidence JSONL keyed by index (the last record of an index wins).

    Lines need ``index`` and ``sentence`` (ints); ``question``/``source`` are optional (older
    hand-made files lack them). A bad line raises naming file and line, except an unterminated
    last line when ``repair_tail`` is set (a crash mid-write): it is cut from the file and logged.
    """
    out: dict[int, EvidenceRecord] = {}
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines[-1] != b""  # a complete file ends with "\n", so the last piece is empty
    for line_no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            r = EvidenceRecord(int(rec["index"]), int(rec["sentence"]), rec.get("question"), rec.get("source"))
            if r.index < 0 or r.sentence < -1:
                raise ValueError(f"index {r.index} / sentence {r.sentence} out of range")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            if torn and line_no == len(lines) and repair_tail:
                good = len(data) - len(raw)
                with open(path, "r+b") as f:
                    f.truncate(good)
                logging.warning("%s: cut a torn last line (%d bytes) left by an interrupted run",
                                path, len(raw))
                break
            raise ValueError(f"{path}: line {line_no}: bad evidence record ({type(e).__name__}: {e})") from e
        out[r.index] = r
    else:
        if torn and repair_tail:  # a complete JSON object without its newline: add it
            with open(path, "ab") as f:
                f.write(b"\n")
    return out


class EvidenceMatcher:
    """Applies an evidence file to one biencoder split (used by ``pipeline.load_biencoder_split``).

    ``sentences`` ({file example index: sentence id}, only records with a sentence) is known up
    front; records whose ``source`` names another file are left out of it (counted, logged
    once) — that is what happens to the train annotations when the dev split is loaded.
    ``wrap(examples)`` must see the file's examples in reader order (before any truncation or
    subsetting): it yields them unchanged and raises :class:`ValueError` when an annotated
    example's question differs from the record's. ``stats()`` gives the counts afterwards.
    """

    def __init__(self, evidence_path: str, biencoder_path: str):
        if not os.path.exists(evidence_path):
            raise FileNotFoundError(f"evidence file not found: {evidence_path} (make it with "
                                    "python -m dense_cf.cli.evidence)")
        self.path, self.source = evidence_path, source_name(biencoder_path)
        self.biencoder_path = biencoder_path
        # Part of the tokenised cache's key: appended annotations (a resumed run) invalidate
        # the cache. "path:size:mtime" of files.file_key, as written before (caches stay valid).
        self.fingerprint = ":".join(map(str, files.file_key(evidence_path)))
        records = read_evidence(evidence_path)
        other = {r.source for r in records.values() if r.source is not None and r.source != self.source}
        self.other = sum(1 for r in records.values() if r.source in other)
        self.records = {i: r for i, r in records.items() if r.source not in other}
        if self.other:
            logging.warning("%s: %d records annotate %s, not %s: not applied to this split",
                            evidence_path, self.other, sorted(other)[:3], self.source)
        self.sentences = {i: r.sentence for i, r in self.records.items() if r.sentence >= 0}
        self._seen = 0

    def wrap(self, examples: Iterable[BiencoderExample]) -> Iterator[BiencoderExample]:
        for i, ex in enumerate(examples):
            rec = self.records.get(i)
            if rec is not None and rec.question is not None and rec.question != ex.question:
                raise ValueError(
                    f"{self.path}: record for example {i} has question {rec.question!r:.80} but "
                    f"example {i} of {self.biencoder_path} is {ex.question!r:.80}: the evidence file "
                    "was made for a different (or changed) biencoder file; re-run "
                    "python -m dense_cf.cli.evidence")
            self._seen = i + 1
            yield ex

    def stats(self) -> dict[str, int]:
        """Counts over the examples read: with a sentence, marked "no span" (-1), without a
        record; records past the examples read; records for another file."""
        seen = [r for i, r in self.records.items() if i < self._seen]
        return {"evidence_sentence": sum(r.sentence >= 0 for r in seen),
                "evidence_no_span": sum(r.sentence < 0 for r in seen),
                "evidence_missing": self._seen - len(seen),
                "evidence_beyond_examples": len(self.records) - len(seen),
                "evidence_other_source": self.other}


# --------------------------------------------------------------------------------------------
# The annotation command
