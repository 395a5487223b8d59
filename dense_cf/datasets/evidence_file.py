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
from typing import Any, Iterable, Iterator

from absl import logging

from dense_cf import files
from dense_cf.datasets.formats import BiencoderExample, DataFormatError, SkipReport, iter_lines


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


def _int_field(rec: dict, key: str, err) -> int:
    value = rec.get(key)
    if key not in rec:
        raise err(key, "missing", f"missing {key}")
    if type(value) is not int:  # not bool, not 4.5, not "4": a JSON integer
        raise err(key, f"expected an integer, got {type(value).__name__} {value!r:.40}", None)
    return value


def _parse_record(text: str, file: str, number: int) -> EvidenceRecord:
    def err(fld: str, msg: str, reason: str | None) -> DataFormatError:
        return DataFormatError(file, number, fld, f"bad evidence record: {msg}",
                               record_kind="line", reason=reason)

    pairs_seen: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            pairs_seen.extend(k for k, _ in items)
        return obj

    try:
        rec = json.loads(text, object_pairs_hook=pairs)
    except RecursionError:
        raise err("<json>", "nested too deeply", "nesting too deep") from None
    except ValueError as e:
        raise err("<json>", f"not JSON ({e})", "invalid JSON") from None
    if not isinstance(rec, dict):
        raise err("<record>", f"expected a JSON object, got {type(rec).__name__}", None)
    if pairs_seen:
        dup = next(k for i, k in enumerate(pairs_seen) if k in pairs_seen[:i])
        raise err(dup, "the key appears twice in one object (which value is meant is ambiguous)",
                  "duplicate key")
    index, sentence = _int_field(rec, "index", err), _int_field(rec, "sentence", err)
    if index < 0:
        raise err("index", f"{index} is negative", "index out of range")
    if sentence < -1:
        raise err("sentence", f"{sentence} is below -1 (-1 marks no span)", "sentence out of range")
    for key in ("question", "source"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            raise err(key, f"expected a string, got {type(rec[key]).__name__}", None)
    return EvidenceRecord(index, sentence, rec.get("question"), rec.get("source"))


def read_evidence(path: str, *, report: SkipReport | None = None) -> dict[int, EvidenceRecord]:
    """Records of an evidence JSONL keyed by index; reading never changes the file.

    Lines need ``index`` and ``sentence`` (JSON integers); ``question``/``source`` are optional
    strings (older hand-made files lack them); blank lines are allowed. A bad line raises
    :class:`DataFormatError` naming file, line and field. So does a last line without its line
    end: an annotation run was interrupted, and the annotation command, which owns the file,
    repairs it when it resumes. An index given again on a later line replaces the earlier record
    (a re-annotated example); each replaced record is counted in ``report`` (reason "duplicate
    index", logged when no report is given). ``.gz`` files and a leading byte-order mark are
    read like every data file (:func:`dense_cf.datasets.formats.iter_lines`).
    """
    file = os.fspath(path)
    out: dict[int, EvidenceRecord] = {}
    own = report is None
    report = SkipReport() if own else report
    for line in iter_lines(path):
        if line.text is None:
            raise DataFormatError(file, line.number, "<row>", f"cannot decode the line: "
                                  f"{line.problem}", record_kind="line", reason=line.reason)
        if not line.text.strip():
            continue
        if not line.ended:
            raise DataFormatError(file, line.number, "<row>", "the last line has no line end: an "
                                  "annotation run was interrupted; run python -m "
                                  "dense_cf.cli.evidence again with the same --output to finish "
                                  "it", record_kind="line", reason="incomplete last line")
        r = _parse_record(line.text, file, line.number)
        if r.index in out:
            report.add(file, "duplicate index", f"{file}: line {line.number}: index {r.index} "
                       "again: this record replaces the earlier one")
        out[r.index] = r
    if own and report.total:
        report.log()
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
        if not records:  # an annotation that never wrote a record: nothing to train on
            raise DataFormatError(evidence_path, None, "<file>", "no records: the evidence file "
                                  "is empty; run python -m dense_cf.cli.evidence to fill it",
                                  reason="no records")
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
                raise DataFormatError(
                    self.path, i, "question",
                    f"the record for example {i} has question {rec.question!r:.80} but "
                    f"example {i} of {self.biencoder_path} is {ex.question!r:.80}: the evidence file "
                    "was made for a different (or changed) biencoder file; re-run "
                    "python -m dense_cf.cli.evidence", reason="question mismatch")
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
