"""Readers and writers for DPR's public data formats (docs/method.md §8), with validation.

Every reader streams (NQ-train is several GB) and takes ``skip_bad`` and ``report``:

* ``skip_bad=False``: the first bad record raises :class:`DataFormatError` naming the file, the
  record and the field.
* ``skip_bad=True``: bad records are skipped and counted in ``report`` (a :class:`SkipReport`);
  without a report, the reader keeps its own and logs its summary when iteration ends, so no
  record is ever dropped silently.

Errors that make the rest of a file unreadable (JSON syntax errors, truncation, bad gzip/UTF-8,
csv-level errors) always raise, whatever ``skip_bad`` says: there is no reliable record boundary
to resume from.

Record numbering: JSON records (biencoder list elements, gold-info ``data`` elements) are
0-based list indices; TSV/CSV records are 1-based physical line numbers (the header is line 1).
Paths ending in ``.gz`` are read and written gzip-compressed. Writers write to a temporary file
and rename it into place, so a crashed writer never leaves a truncated file behind.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import gzip
import json
import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, TextIO, Union

from absl import logging

from dense_cf import files

__all__ = [
    "Passage", "BiencoderExample", "DataFormatError", "SkipReport",
    "iter_biencoder", "iter_biencoder_records", "read_biencoder", "read_corpus_tsv", "read_qa_csv", "read_gold_info",
    "write_biencoder", "write_corpus_tsv", "write_qa_csv", "write_gold_info",
    "DEFAULT_CHUNK_SIZE",
]

PathLike = Union[str, "os.PathLike[str]"]

# Characters read per chunk by the streaming JSON decoder; a record larger than this is handled
# by growing the read geometrically, so it only affects memory and speed, not correctness.
DEFAULT_CHUNK_SIZE = 1 << 20


@dataclass
class Passage:
    """A DPR ctx ``{title, text[, passage_id, score]}`` (docs/method.md §8)."""

    title: str
    text: str
    passage_id: str | None = None
    score: float | None = None


@dataclass
class BiencoderExample:
    """One element of a DPR ``biencoder-*.json`` list (docs/method.md §8)."""

    question: str
    answers: list[str]
    positive_ctxs: list[Passage]
    negative_ctxs: list[Passage] = field(default_factory=list)
    hard_negative_ctxs: list[Passage] = field(default_factory=list)


_INDEX_RE = re.compile(r"\[\d+\]")


class DataFormatError(files.UserError, ValueError):
    """A bad record (or unreadable file) in a DPR data file.

    ``record`` is a 0-based list index when ``record_kind == "index"`` (JSON files) or a 1-based
    line number when ``record_kind == "line"`` (TSV/CSV files); None for file-level problems.
    ``reason`` is a short category (indices stripped) used by :class:`SkipReport`.
    """

    def __init__(self, file: PathLike, record: int | None, field: str, message: str, *,
                 record_kind: str = "index", reason: str | None = None) -> None:
        self.file = os.fspath(file)
        self.record = record
        self.field = field
        self.message = message
        self.record_kind = record_kind
        self.reason = reason or f"bad {_INDEX_RE.sub('[]', field)}"
        if record is None:
            where = "file level"
        elif record_kind == "line":
            where = f"line {record}"
        else:
            where = f"record {record} (0-based index)"
        super().__init__(f"{self.file}: {where}: field {field!r}: {message}")

    def __reduce__(self):  # keep the keyword-only args when pickled (multiprocessing)
        return (_rebuild_error, (self.file, self.record, self.field, self.message,
                                 self.record_kind, self.reason))


def _rebuild_error(file, record, field, message, record_kind, reason) -> DataFormatError:
    return DataFormatError(file, record, field, message, record_kind=record_kind, reason=reason)


class SkipReport:
    """Counts skipped records by (file, reason), keeping a few example messages per key."""

    def __init__(self, max_examples: int = 3) -> None:
        self.max_examples = max_examples
        self.counts: Counter[tuple[str, str]] = Counter()
        self.examples: dict[tuple[str, str], list[str]] = {}

    def add(self, file: PathLike, reason: str, message: str = "") -> None:
        key = (os.fspath(file), reason)
        self.counts[key] += 1
        examples = self.examples.setdefault(key, [])
        if message and len(examples) < self.max_examples:
            examples.append(message)

    def add_error(self, error: DataFormatError) -> None:
        self.add(error.file, error.reason, str(error))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, file: PathLike | None = None, reason: str | None = None) -> int:
        """Skipped records, optionally restricted to one file and/or one reason."""
        f = None if file is None else os.fspath(file)
        return sum(n for (kf, kr), n in self.counts.items()
                   if (f is None or kf == f) and (reason is None or kr == reason))

    def summary(self) -> str:
        if not self.counts:
            return "skipped records: none"
        lines = [f"skipped records: {self.total}"]
        for (file, reason), n in sorted(self.counts.items()):
            lines.append(f"  {file}: {reason}: {n}")
            lines.extend(f"    e.g. {m}" for m in self.examples.get((file, reason), ()))
        return "\n".join(lines)

    def log(self) -> None:
        """Log the summary via absl logging (warning if anything was skipped, else info)."""
        if self.total:
            logging.warning("%s", self.summary())
        else:
            logging.info("%s", self.summary())

    def __repr__(self) -> str:
        return f"SkipReport(total={self.total}, keys={len(self.counts)})"


# ---------------------------------------------------------------------------------------------
# File helpers


# What reading a damaged file can raise: bad gzip header/CRC (OSError), truncated gzip
# (EOFError), corrupt deflate data (zlib.error), invalid UTF-8.
_READ_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError)


def _is_gz(path: PathLike) -> bool:
    return os.fspath(path).endswith(".gz")


def _open_text(path: PathLike, newline: str | None = None) -> TextIO:
    # utf-8-sig: a byte-order mark (Excel, Notepad) is dropped at the start and only there.
    if _is_gz(path):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline=newline)
    return open(path, "r", encoding="utf-8-sig", newline=newline)


def _handle_bad(error: DataFormatError, skip_bad: bool, report: SkipReport) -> None:
    if not skip_bad:
        raise error
    report.add_error(error)


@contextlib.contextmanager
def _local_report(report: SkipReport | None) -> Iterator[SkipReport]:
    """The caller's report, or a private one whose summary is logged at the end."""
    if report is not None:
        yield report
        return
    own = SkipReport()
    try:
        yield own
    finally:
        if own.total:
            own.log()


# ---------------------------------------------------------------------------------------------
# Streaming JSON

_WS_RE = re.compile(r"[ \t\n\r]*")
# A JSONDecodeError this close to the end of the buffer may just mean the value continues in
# the next chunk (e.g. a cut "\u12" escape is reported at the backslash).
_TAIL_SLACK = 16


class _JsonStream:
    """Incremental JSON reader over a text stream, decoding one value at a time.

    Values are decoded with ``json.JSONDecoder.raw_decode`` on a buffer; when a value is cut by
    the end of the buffer, more text is read (at least doubling the pending part, so a value
    far larger than ``chunk_size`` costs amortised linear time) and decoding is retried.
    """

    def __init__(self, fp: TextIO, file: str, chunk_size: int) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.fp, self.file, self.chunk_size = fp, file, chunk_size
        self.buf = ""
        self.pos = 0
        self.consumed = 0  # chars dropped from the front of buf, for absolute offsets
        self.eof = False
        self.record: int | None = None
        self._decoder = json.JSONDecoder()

    def error(self, message: str, reason: str = "invalid JSON",
              pos: int | None = None) -> DataFormatError:
        offset = self.consumed + (self.pos if pos is None else pos)
        return DataFormatError(self.file, self.record, "<json>",
                               f"{message} (at char {offset})", reason=reason)

    def _fill(self, at_least: int = 0) -> bool:
        if self.eof:
            return False
        if self.pos:
            self.buf = self.buf[self.pos:]
            self.consumed += self.pos
            self.pos = 0
        try:
            data = self.fp.read(max(self.chunk_size, at_least))
        except _READ_ERRORS as e:  # bad/truncated gzip, bad UTF-8
            raise self.error(f"cannot read file: {e}", reason="unreadable file") from e
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def peek(self) -> str:
        """Next non-whitespace char without consuming it; "" at end of file."""
        while True:
            self.pos = _WS_RE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.peek()
        if not c:
            raise self.error(f"file is truncated: unexpected end of file, expected {what}",
                             reason="truncated file")
        if c not in chars:
            raise self.error(f"expected {what}, found {c!r}")
        self.pos += 1
        return c

    def value(self) -> Any:
        if not self.peek():
            raise self.error("file is truncated: unexpected end of file, expected a value",
                             reason="truncated file")
        while True:
            try:
                obj, end = self._decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                unterminated = e.msg.startswith("Unterminated")
                if (unterminated or e.pos >= len(self.buf) - _TAIL_SLACK) \
                        and self._fill(len(self.buf) - self.pos):
                    continue
                if self.eof and (unterminated or not self.buf[e.pos:].strip()):
                    raise self.error(
                        f"file is truncated: it ends inside the value starting at char "
                        f"{self.consumed + self.pos} ({e.msg})",
                        reason="truncated file", pos=len(self.buf)) from e
                raise self.error(f"JSON syntax error: {e.msg}", pos=e.pos) from e
            # A value ending exactly at the buffer end may continue (e.g. the number 12|34).
            if end == len(self.buf) and self._fill(len(self.buf) - self.pos):
                continue
            self.pos = end
            return obj

    def iter_array(self) -> Iterator[tuple[int, Any]]:
        """Yield (index, value) of a JSON array starting at the next non-whitespace char."""
        self.expect("[", "'[' (a JSON list)")
        if self.peek() == "]":
            self.pos += 1
            return
        index = 0
        while True:
            self.record = index
            yield index, self.value()
            if self.expect(",]", "',' or ']' after a list element") == "]":
                self.record = None
                return
            index += 1

    def expect_end(self) -> None:
        if self.peek():
            raise self.error("unexpected data after the end of the JSON document")


# ---------------------------------------------------------------------------------------------
# Validation helpers


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _get_str(obj: Mapping[str, Any], key: str, err, *, prefix: str = "",
             nonempty: bool = False) -> str:
    name = prefix + key
    if key not in obj:
        raise err(name, "missing", reason=f"missing {_INDEX_RE.sub('[]', name)}")
    value = obj[key]
    if not isinstance(value, str):
        raise err(name, f"expected a string, got {_type_name(value)}")
    if nonempty and not value.strip():
        raise err(name, "must be a non-empty string")
    return value


def _get_str_list(obj: Mapping[str, Any], key: str, err) -> list[str]:
    if key not in obj:
        raise err(key, "missing", reason=f"missing {key}")
    value = obj[key]
    if not isinstance(value, list):
        raise err(key, f"expected a list of strings, got {_type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise err(f"{key}[{i}]", f"expected a string, got {_type_name(item)}")
    return value


def _parse_passage(ctx: Any, name: str, err) -> Passage:
    if not isinstance(ctx, dict):
        raise err(name, f"expected a JSON object {{title, text}}, got {_type_name(ctx)}")
    title = _get_str(ctx, "title", err, prefix=f"{name}.")
    text = _get_str(ctx, "text", err, prefix=f"{name}.")
    passage_id = ctx.get("passage_id")
    if passage_id is not None:
        if isinstance(passage_id, bool) or not isinstance(passage_id, (str, int)):
            raise err(f"{name}.passage_id",
                      f"expected a string or int, got {_type_name(passage_id)}")
        passage_id = str(passage_id)
    score = _get_number(ctx, "score", name, err)
    _get_number(ctx, "title_score", name, err)  # validated; not kept (nothing uses it)
    return Passage(title=title, text=text, passage_id=passage_id, score=score)


def _get_number(ctx: Mapping[str, Any], key: str, name: str, err) -> float | None:
    value = ctx.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise err(f"{name}.{key}", "expected a number, got bool")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # some DPR-style files store scores as strings
        try:
            return float(value)
        except ValueError:
            pass
    raise err(f"{name}.{key}", f"expected a number, got {_type_name(value)} {value!r:.40}")


def _parse_ctx_list(obj: Mapping[str, Any], key: str, err, *, required: bool) -> list[Passage]:
    if key not in obj:
        if required:
            raise err(key, "missing", reason=f"missing {key}")
        return []  # DPR's JsonQADataset treats absent negative lists as empty
    value = obj[key]
    if not isinstance(value, list):
        raise err(key, f"expected a list of ctx objects, got {_type_name(value)}")
    return [_parse_passage(ctx, f"{key}[{i}]", err) for i, ctx in enumerate(value)]


def _parse_example(obj: Any, file: str, index: int | None) -> BiencoderExample:
    def err(fld: str, msg: str, reason: str | None = None) -> DataFormatError:
        return DataFormatError(file, index, fld, msg, reason=reason)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {_type_name(obj)}")
    return BiencoderExample(
        question=_get_str(obj, "question", err, nonempty=True),
        answers=_get_str_list(obj, "answers", err),
        positive_ctxs=_parse_ctx_list(obj, "positive_ctxs", err, required=True),
        negative_ctxs=_parse_ctx_list(obj, "negative_ctxs", err, required=False),
        hard_negative_ctxs=_parse_ctx_list(obj, "hard_negative_ctxs", err, required=False),
    )


# ---------------------------------------------------------------------------------------------
# Biencoder JSON


def iter_biencoder(path: PathLike, *, skip_bad: bool = True, report: SkipReport | None = None,
                   chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[BiencoderExample]:
    """Stream a DPR ``biencoder-*.json[.gz]`` list without loading it whole (docs/method.md §8).

    Validates question (non-empty str), answers (list of str), positive_ctxs (list of
    ``{title, text}``, optional ``passage_id``/``score``/``title_score``), and the optional
    negative lists. An example whose ``positive_ctxs`` is an empty list is always skipped with
    reason "no positive_ctxs", even when ``skip_bad=False``: DPR's own loader filters those out
    and its released files contain them, so they are not format errors.
    """
    for _, _, example in iter_biencoder_records(path, skip_bad=skip_bad, report=report,
                                                chunk_size=chunk_size):
        if example is not None:
            yield example


def iter_biencoder_records(path: PathLike, *, skip_bad: bool = True,
                           report: SkipReport | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE
                           ) -> Iterator[tuple[int, dict | None, BiencoderExample | None]]:
    """Every list element of a biencoder file as (0-based index, raw dict, parsed example).

    The validation and skip counting of :func:`iter_biencoder`; a skipped record is yielded as
    ``(index, None, None)`` so callers that rewrite a file (mining) see every index and keep
    the raw record's extra keys.
    """
    file = os.fspath(path)
    with _local_report(report) as rep, _open_text(path) as fp:
        stream = _JsonStream(fp, file, chunk_size)
        for index, obj in stream.iter_array():
            try:
                example = _parse_example(obj, file, index)
            except DataFormatError as e:
                _handle_bad(e, skip_bad, rep)
                yield index, None, None
                continue
            if not example.positive_ctxs:
                rep.add(file, "no positive_ctxs",
                        f"{file}: record {index} (0-based index): empty positive_ctxs")
                yield index, None, None
                continue
            yield index, obj, example
        stream.expect_end()


def read_biencoder(path: PathLike, *, skip_bad: bool = True, report: SkipReport | None = None,
                   chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[BiencoderExample]:
    """All examples of :func:`iter_biencoder` as a list."""
    return list(iter_biencoder(path, skip_bad=skip_bad, report=report, chunk_size=chunk_size))


def _passage_to_dict(p: Passage) -> dict[str, Any]:
    d: dict[str, Any] = {"title": p.title, "text": p.text}
    if p.score is not None:
        d["score"] = p.score
    if p.passage_id is not None:
        d["passage_id"] = p.passage_id
    return d


def _example_to_dict(ex: BiencoderExample | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(ex, BiencoderExample):
        return {
            "question": ex.question,
            "answers": list(ex.answers),
            "positive_ctxs": [_passage_to_dict(p) for p in ex.positive_ctxs],
            "negative_ctxs": [_passage_to_dict(p) for p in ex.negative_ctxs],
            "hard_negative_ctxs": [_passage_to_dict(p) for p in ex.hard_negative_ctxs],
        }
    if isinstance(ex, Mapping):
        return dict(ex)
    raise TypeError(f"expected BiencoderExample or dict, got {type(ex).__name__}")


def _write_json_list(path: PathLike, head: str, tail: str, items: Iterable[Any],
                     checked: Callable[[int, Any], dict[str, Any]]) -> int:
    """Streams ``head``, one ``checked(i, item)`` JSON object per line, ``tail``, atomically.

    Returns the count. ``checked`` raises on a bad item before anything is renamed into place.
    """
    n = 0
    with files.atomic_open_gz(path) as f:
        f.write(head)
        for i, item in enumerate(items):
            f.write(",\n" if i else "\n")
            f.write(json.dumps(checked(i, item), ensure_ascii=False))
            n = i + 1
        f.write("\n" + tail + "\n")
    return n


def write_biencoder(path: PathLike,
                    examples: Iterable[BiencoderExample | Mapping[str, Any]]) -> int:
    """Write a DPR biencoder JSON list, one example per line, streaming; returns the count.

    Dicts are validated like the reader does (raising :class:`DataFormatError`, record = index
    in ``examples``) and written as given, so extra keys survive.
    """
    file = os.fspath(path)

    def checked(i: int, ex: BiencoderExample | Mapping[str, Any]) -> dict[str, Any]:
        d = _example_to_dict(ex)
        _parse_example(d, file, i)
        return d

    return _write_json_list(path, "[", "]", examples, checked)


# ---------------------------------------------------------------------------------------------
# TSV / CSV (csv.reader with a tab delimiter, exactly as DPR reads them, so quoting matches)


def _iter_csv_rows(path: PathLike, file: str) -> Iterator[tuple[int, list[str]]]:
    """(1-based start line, row) for each csv record; csv/IO errors raise DataFormatError."""
    with _open_text(path, newline="") as fp:
        reader = csv.reader(fp, delimiter="\t")
        next_line = 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except (csv.Error, *_READ_ERRORS) as e:
                raise DataFormatError(file, next_line, "<row>", f"cannot parse: {e}",
                                      record_kind="line", reason="unreadable file") from e
            start = next_line
            next_line = reader.line_num + 1
            yield start, row


class _SeenIds:
    """Passage ids seen so far: decimal ids (psgs_w100's 21M) as bits of a growing bytearray
    (21M ids: 2.6 MB), any other id in a set."""

    def __init__(self) -> None:
        self.bits = bytearray()
        self.other: set[str] = set()

    def add(self, pid: str) -> bool:
        """Marks ``pid``; False when it was already there."""
        if pid.isascii() and pid.isdigit() and (pid == "0" or pid[0] != "0") and len(pid) < 12:
            n = int(pid)
            byte, bit = n >> 3, 1 << (n & 7)
            if byte >= len(self.bits):
                self.bits.extend(bytes(max(byte + 1 - len(self.bits), len(self.bits))))
            if self.bits[byte] & bit:
                return False
            self.bits[byte] |= bit
            return True
        if pid in self.other:
            return False
        self.other.add(pid)
        return True


def read_corpus_tsv(path: PathLike, *, skip_bad: bool = True,
                    report: SkipReport | None = None) -> Iterator[tuple[str, str, str]]:
    """Stream ``psgs_w100.tsv[.gz]`` rows as (id, text, title) (docs/method.md §8).

    Like DPR, the first row is a header when its first field is "id". A row must have exactly 3
    columns and a non-empty id; ``record`` in errors is the 1-based line number. Ids are unique:
    a row repeating an earlier id is a bad record (reason "duplicate id"): the first row is kept
    and the repeats are counted (or, with ``skip_bad=False``, the first repeat is an error), since
    one id naming two passages makes retrieval results ambiguous.
    """
    file = os.fspath(path)
    seen = _SeenIds()
    with _local_report(report) as rep:
        for line, row in _iter_csv_rows(path, file):
            if line == 1 and row and row[0] == "id":
                continue
            if len(row) != 3:
                err = DataFormatError(file, line, "<row>",
                                      f"expected 3 tab-separated columns (id, text, title), "
                                      f"got {len(row)}", record_kind="line",
                                      reason="wrong column count")
            elif not row[0]:
                err = DataFormatError(file, line, "id", "empty passage id", record_kind="line")
            elif not seen.add(row[0]):
                err = DataFormatError(file, line, "id", f"duplicate passage id {row[0]!r:.40} "
                                      "(an earlier row has it; the first is kept)",
                                      record_kind="line", reason="duplicate id")
            else:
                yield row[0], row[1], row[2]
                continue
            _handle_bad(err, skip_bad, rep)


def write_corpus_tsv(path: PathLike, rows: Iterable[tuple[str, str, str]]) -> int:
    """Write (id, text, title) rows with DPR's ``id\\ttext\\ttitle`` header; returns the count."""
    n = 0
    with files.atomic_open_gz(path, newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for pid, text, title in rows:
            writer.writerow([str(pid), text, title])
            n += 1
    return n


def _parse_answers_literal(cell: str) -> list[str]:
    """Answers cell -> list of str via ``ast.literal_eval`` (never eval). Raises ValueError."""
    try:
        value = ast.literal_eval(cell)
    except Exception as e:  # SyntaxError, ValueError (non-literal), RecursionError, MemoryError...
        raise ValueError(f"not a Python list literal ({type(e).__name__}): {cell!r:.80}") from None
    if not isinstance(value, list):
        raise ValueError(f"expected a list of strings, got {_type_name(value)}: {cell!r:.80}")
    for item in value:
        if not isinstance(item, str):
            raise ValueError(f"expected a list of strings, found {_type_name(item)} {item!r:.40}")
    return value


def read_qa_csv(path: PathLike, *, skip_bad: bool = True,
                report: SkipReport | None = None) -> Iterator[tuple[str, list[str]]]:
    """Stream ``*.qa.csv`` rows as (question, answers) (docs/method.md §8).

    Tab-separated, column 0 the question, column 1 a Python list literal of str parsed with
    ``ast.literal_eval``. Extra columns are ignored (DPR reads only these two); ``record`` in
    errors is the 1-based line number. A row whose answer list is empty is kept (the question
    counts, as a miss: no passage can hold an answer) and counted in a warning; retrieval
    reports say how many (``empty_answers``).
    """
    file = os.fspath(path)
    empty = 0
    with _local_report(report) as rep:
        for line, row in _iter_csv_rows(path, file):
            if len(row) < 2:
                err = DataFormatError(file, line, "<row>",
                                      f"expected at least 2 tab-separated columns, got {len(row)}",
                                      record_kind="line", reason="wrong column count")
            elif not row[0].strip():
                err = DataFormatError(file, line, "question", "empty question",
                                      record_kind="line")
            else:
                try:
                    answers = _parse_answers_literal(row[1])
                except ValueError as e:
                    err = DataFormatError(file, line, "answers", str(e), record_kind="line")
                else:
                    empty += not answers
                    yield row[0], answers
                    continue
            _handle_bad(err, skip_bad, rep)
    if empty:
        logging.warning("%s: %d question(s) with an empty answer list: kept, they can never be "
                        "hits", file, empty)


def write_qa_csv(path: PathLike, rows: Iterable[tuple[str, Iterable[str]]]) -> int:
    """Write (question, answers) rows; answers as ``repr(list_of_str)`` like DPR's files."""
    n = 0
    with files.atomic_open_gz(path, newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        for i, (question, answers) in enumerate(rows):
            if isinstance(answers, str):
                raise TypeError(f"row {i}: answers must be a list of str, not a str")
            answers = list(answers)
            if not all(isinstance(a, str) for a in answers):
                raise TypeError(f"row {i}: answers must all be str: {answers!r:.80}")
            writer.writerow([question, repr(answers)])
            n += 1
    return n


# ---------------------------------------------------------------------------------------------
# Gold passages info JSON


def _check_gold(obj: Any, file: str, index: int) -> dict:
    def err(fld: str, msg: str, reason: str | None = None) -> DataFormatError:
        return DataFormatError(file, index, fld, msg, reason=reason)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {_type_name(obj)}")
    _get_str(obj, "question", err, nonempty=True)
    _get_str(obj, "title", err)
    _get_str(obj, "context", err)
    return obj


def read_gold_info(path: PathLike, *, skip_bad: bool = True, report: SkipReport | None = None,
                   chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[dict]:
    """Stream the records of ``nq-*_gold_info.json[.gz]`` = ``{"data": [...]}`` (docs/method.md §8).

    Each record is yielded as its dict; question (non-empty), title and context must be
    strings; ``question_tokens`` and ``example_id`` are passed through unchecked.
    """
    file = os.fspath(path)
    with _local_report(report) as rep, _open_text(path) as fp:
        stream = _JsonStream(fp, file, chunk_size)
        stream.expect("{", "'{' (a JSON object with a \"data\" list)")
        seen_data = False
        if stream.peek() == "}":
            stream.pos += 1
        else:
            while True:
                key = stream.value()
                if not isinstance(key, str):
                    raise stream.error(f"expected an object key, got {_type_name(key)}")
                stream.expect(":", "':'")
                if key == "data" and not seen_data:
                    seen_data = True
                    for index, obj in stream.iter_array():
                        try:
                            _check_gold(obj, file, index)
                        except DataFormatError as e:
                            _handle_bad(e, skip_bad, rep)
                            continue
                        yield obj
                else:
                    stream.value()  # other top-level keys are skipped
                if stream.expect(",}", "',' or '}'") == "}":
                    break
        stream.expect_end()
        if not seen_data:
            raise DataFormatError(file, None, "data", "missing top-level \"data\" list",
                                  reason="missing data")


def write_gold_info(path: PathLike, records: Iterable[Mapping[str, Any]]) -> int:
    """Write ``{"data": [...]}`` streaming, one record per line; returns the count."""
    file = os.fspath(path)

    def checked(i: int, rec: Mapping[str, Any]) -> dict[str, Any]:
        rec = dict(rec)
        _check_gold(rec, file, i)
        return rec

    return _write_json_list(path, '{"data": [', "]}", records, checked)
