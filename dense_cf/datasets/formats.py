"""Readers and writers for DPR's public data formats (docs/method.md §8), with validation.

Every reader streams (NQ-train is several GB) and takes ``skip_bad`` and ``report``:

* ``skip_bad=False``: the first bad record raises :class:`DataFormatError` naming the file, the
  record and the field.
* ``skip_bad=True``: bad records are skipped and counted in ``report`` (a :class:`SkipReport`);
  without a report, the reader keeps its own and logs its summary when iteration ends, so no
  record is ever dropped silently.

Errors that make the rest of a file unreadable (JSON syntax errors, JSON that is not UTF-8,
truncation, bad gzip) always raise, whatever ``skip_bad`` says: there is no reliable record
boundary to resume from. So do files that cannot be what they claim: an unexpected header, a
second gold ``data`` key, and a file without a single valid record (unless ``allow_empty``). A
TSV/CSV record is one physical line, so a line that is not UTF-8 or whose quoting is broken is
one bad record, and the next line is read as usual. Readers never write to their input.

Record numbering: JSON records (biencoder list elements, gold-info ``data`` elements) are
0-based list indices; TSV/CSV records are 1-based physical line numbers (the header is line 1).
Paths ending in ``.gz`` are read and written gzip-compressed; a UTF-8 byte-order mark at the
start of any file is dropped. Writers write to a temporary file and rename it into place, so a
crashed writer never leaves a truncated file behind. docs/reliability.md lists what every
reader does with about a hundred kinds of bad input.
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import csv
import gzip
import json
import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, Union

from absl import logging

from dense_cf import files

__all__ = [
    "Passage", "BiencoderExample", "DataFormatError", "SkipReport",
    "RetrievalRecord", "RetrievedPassage",
    "iter_biencoder", "iter_biencoder_records", "iter_retrieval_results", "read_biencoder",
    "read_corpus_tsv", "read_qa_csv", "read_gold_info",
    "write_biencoder", "write_corpus_tsv", "write_qa_csv", "write_gold_info",
    "DEFAULT_CHUNK_SIZE", "iter_lines", "iter_json_list",
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
# (EOFError), corrupt deflate data (zlib.error).
_READ_ERRORS = (OSError, EOFError, zlib.error)
# A path that cannot be opened is the caller's to report (dense_cf.app names the path).
_OPEN_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def _is_gz(path: PathLike) -> bool:
    return os.fspath(path).endswith(".gz")


def _open_bytes(path: PathLike) -> BinaryIO:
    """``path`` opened for reading bytes, gzip-decoded when it ends in ``.gz``.

    The one opener of every reader (here, and through :func:`iter_lines` in
    ``evidence_file``); text is decoded after it (:func:`_decoder`, :func:`iter_lines`), where a
    leading byte-order mark is dropped. A missing path, a directory or an unreadable file raise
    the usual ``OSError`` subclass, which names the path (``dense_cf.app`` prints it in one line).
    """
    return gzip.open(path, "rb") if _is_gz(path) else open(path, "rb")


def _decoder() -> codecs.IncrementalDecoder:
    """A strict UTF-8 decoder that drops a byte-order mark at the start (Excel, Notepad write
    one) and only there; elsewhere U+FEFF is text."""
    return codecs.getincrementaldecoder("utf-8-sig")()


def _utf8_problem(e: UnicodeDecodeError, offset: int) -> str:
    return f"not UTF-8: byte {e.object[e.start:e.start + 1]!r} at byte offset {offset} ({e.reason})"


class _Line:
    """One physical line: its 1-based number, its text (None when undecodable, with the
    ``problem`` and its ``reason``) and whether a line end closed it."""

    __slots__ = ("number", "text", "problem", "reason", "ended")

    def __init__(self, number: int, text: str | None, problem: str | None, reason: str | None,
                 ended: bool) -> None:
        self.number, self.text, self.problem, self.reason = number, text, problem, reason
        self.ended = ended


def iter_lines(path: PathLike) -> Iterator[_Line]:
    """Every physical line of ``path`` (split at ``\\n`` only, line end kept), decoded alone.

    A line that is not UTF-8, or that holds a NUL byte (a UTF-16 file read as UTF-8 is NULs
    between ASCII letters), comes with ``text`` None and a ``problem``: lines are the record
    boundary of TSV, CSV and JSONL, so one bad line does not make the next unreadable. A damaged
    gzip stream raises :class:`DataFormatError` naming the line it broke in. ``ended`` is False
    for a last line without a line end.
    """
    file = os.fspath(path)
    number, offset = 0, 0
    with _open_bytes(path) as fp:
        while True:
            try:
                raw = fp.readline()
            except _READ_ERRORS as e:
                raise DataFormatError(file, number + 1, "<file>", f"cannot read file: {_io_problem(e)}",
                                      record_kind="line", reason=_io_reason(e)) from e
            if not raw:
                return
            number += 1
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw, offset = raw[len(codecs.BOM_UTF8):], len(codecs.BOM_UTF8)
            ended = raw.endswith(b"\n")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield _Line(number, None, _utf8_problem(e, offset + e.start), "not UTF-8", ended)
            else:
                if "\x00" in text:
                    yield _Line(number, None, f"a NUL byte at byte offset {offset + raw.index(0)} "
                                "(a UTF-16 file, or binary data?)", "NUL byte", ended)
                else:
                    yield _Line(number, text, None, None, ended)
            offset += len(raw)


def _io_problem(e: BaseException) -> str:
    if isinstance(e, EOFError):
        return f"the gzip stream is truncated ({e})"
    return f"{type(e).__name__}: {e}"


def _io_reason(e: BaseException) -> str:
    return "truncated file" if isinstance(e, EOFError) else "unreadable file"


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


def _no_records_error(file: str, seen: int, report: SkipReport, what: str) -> DataFormatError:
    """The error for a data file that yields nothing: empty, or every record skipped."""
    if not seen:
        return DataFormatError(file, None, "<file>", f"no records: the file holds no {what}",
                               reason="no records")
    reasons = ", ".join(f"{n} {r}" for (f, r), n in sorted(report.counts.items()) if f == file)
    return DataFormatError(file, None, "<file>", f"no valid records: all {seen} {what} were "
                           f"skipped ({reasons or 'see the log'})", reason="no records")


# ---------------------------------------------------------------------------------------------
# Streaming JSON

_WS_RE = re.compile(r"[ \t\n\r]*")
# A JSONDecodeError this close to the end of the buffer may just mean the value continues in
# the next chunk (e.g. a cut "\u12" escape is reported at the backslash).
_TAIL_SLACK = 16


class _JsonStream:
    """Incremental JSON reader over a byte stream, decoding one value at a time.

    Bytes are decoded by :func:`_decoder` chunk by chunk. Values are decoded with
    ``json.JSONDecoder.raw_decode`` on a buffer; when a value is cut by the end of the buffer,
    more text is read (at least doubling the pending part, so a value far larger than
    ``chunk_size`` costs amortised linear time) and decoding is retried. ``duplicate`` is the
    first key that appeared twice in one object of the last value (``json`` keeps the last
    silently), else None.
    """

    def __init__(self, fp: BinaryIO, file: str, chunk_size: int) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.fp, self.file, self.chunk_size = fp, file, chunk_size
        self.buf = ""
        self.pos = 0
        self.consumed = 0  # chars dropped from the front of buf, for absolute offsets
        self.bytes_read = 0
        self.eof = False
        self.record: int | None = None
        self.duplicate: str | None = None
        self._text = _decoder()
        self._decoder = json.JSONDecoder(object_pairs_hook=self._object)

    def _object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs) and self.duplicate is None:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    self.duplicate = key
                    break
                seen.add(key)
        return obj

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
            raw = self.fp.read(max(self.chunk_size, at_least))
        except _READ_ERRORS as e:  # bad or truncated gzip
            raise self.error(f"cannot read file: {_io_problem(e)}", reason=_io_reason(e)) from e
        pending = len(self._text.getstate()[0])
        try:
            data = self._text.decode(raw, final=not raw)
        except UnicodeDecodeError as e:
            raise self.error("cannot read file: " + _utf8_problem(e, self.bytes_read - pending + e.start),
                             reason="not UTF-8") from e
        self.bytes_read += len(raw)
        if not raw:
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
        if not c and not self.bytes_read:
            raise self.error(f"the file is empty (0 bytes), expected {what}", reason="no records")
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
            self.duplicate = None
            try:
                obj, end = self._decoder.raw_decode(self.buf, self.pos)
            except RecursionError as e:  # the C scanner recurses once per nesting level
                raise self.error("a value nests too deeply to read (thousands of levels of "
                                 "lists or objects)", reason="nesting too deep") from e
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

    def iter_array(self) -> Iterator[tuple[int, Any, str | None]]:
        """Yield (index, value, duplicated key or None) of a JSON array starting at the next
        non-whitespace char."""
        self.expect("[", "'[' (a JSON list)")
        if self.peek() == "]":
            self.pos += 1
            return
        index = 0
        while True:
            self.record = index
            value = self.value()
            yield index, value, self.duplicate
            if self.expect(",]", "',' or ']' after a list element") == "]":
                self.record = None
                return
            index += 1

    def expect_end(self) -> None:
        if self.peek():
            raise self.error("unexpected data after the end of the JSON document")


def iter_json_list(path: PathLike, *, chunk_size: int = DEFAULT_CHUNK_SIZE
                   ) -> Iterator[tuple[int, Any, str | None]]:
    """Stream the elements of a file holding one JSON list, as (0-based index, value, the first
    key repeated in one of its objects or None); for readers of other JSON-list formats
    (``datasets.hotpotqa``). Syntax errors, truncation and trailing data raise
    :class:`DataFormatError` naming the file and the record being read."""
    file = os.fspath(path)
    with _open_bytes(path) as fp:
        stream = _JsonStream(fp, file, chunk_size)
        yield from stream.iter_array()
        stream.expect_end()


# ---------------------------------------------------------------------------------------------
# Validation helpers


def _duplicate_error(file: str, index: int, key: str) -> DataFormatError:
    return DataFormatError(file, index, key, f"key {key!r:.40} appears twice in one JSON object "
                           "(which value is meant is ambiguous)", reason="duplicate key")


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
                   chunk_size: int = DEFAULT_CHUNK_SIZE,
                   allow_empty: bool = False) -> Iterator[BiencoderExample]:
    """Stream a DPR ``biencoder-*.json[.gz]`` list without loading it whole (docs/method.md §8).

    Validates question (non-empty str), answers (list of str), positive_ctxs (list of
    ``{title, text}``, optional ``passage_id``/``score``/``title_score``), and the optional
    negative lists; an object with a repeated key is a bad record (reason "duplicate key"). An
    example whose ``positive_ctxs`` is an empty list is always skipped with reason "no
    positive_ctxs", even when ``skip_bad=False``: DPR's own loader filters those out and its
    released files contain them, so they are not format errors. A file without a single valid
    example (``[]``, or every record skipped) is an error unless ``allow_empty``.
    """
    for _, _, example in iter_biencoder_records(path, skip_bad=skip_bad, report=report,
                                                chunk_size=chunk_size, allow_empty=allow_empty):
        if example is not None:
            yield example


def iter_biencoder_records(path: PathLike, *, skip_bad: bool = True,
                           report: SkipReport | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                           allow_empty: bool = False
                           ) -> Iterator[tuple[int, dict | None, BiencoderExample | None]]:
    """Every list element of a biencoder file as (0-based index, raw dict, parsed example).

    The validation and skip counting of :func:`iter_biencoder`; a skipped record is yielded as
    ``(index, None, None)`` so callers that rewrite a file (mining) see every index and keep
    the raw record's extra keys.
    """
    file = os.fspath(path)
    seen = valid = 0
    with _local_report(report) as rep, _open_bytes(path) as fp:
        stream = _JsonStream(fp, file, chunk_size)
        for index, obj, duplicate in stream.iter_array():
            seen += 1
            try:
                if duplicate is not None:
                    raise _duplicate_error(file, index, duplicate)
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
            valid += 1
            yield index, obj, example
        stream.expect_end()
        if not valid and not allow_empty:
            raise _no_records_error(file, seen, rep, "examples")


def read_biencoder(path: PathLike, *, skip_bad: bool = True, report: SkipReport | None = None,
                   chunk_size: int = DEFAULT_CHUNK_SIZE,
                   allow_empty: bool = False) -> list[BiencoderExample]:
    """All examples of :func:`iter_biencoder` as a list."""
    return list(iter_biencoder(path, skip_bad=skip_bad, report=report, chunk_size=chunk_size,
                               allow_empty=allow_empty))


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
# Retrieval results JSON (DPR's dense_retriever.py output; the reader's training and test input)


@dataclass
class RetrievedPassage:
    """One ``ctxs`` entry of a DPR retrieval results file: ``{id, title, text, score,
    has_answer}`` (``score`` and ``has_answer`` may be absent: None)."""

    id: str
    title: str
    text: str
    score: float | None = None
    has_answer: bool | None = None


@dataclass
class RetrievalRecord:
    """One question of a DPR retrieval results file with its ranked passages."""

    question: str
    answers: list[str]
    ctxs: list[RetrievedPassage]


def _parse_retrieved(ctx: Any, name: str, err) -> RetrievedPassage:
    if not isinstance(ctx, dict):
        raise err(name, f"expected a JSON object {{id, title, text, ...}}, got {_type_name(ctx)}")
    if "id" not in ctx:
        raise err(f"{name}.id", "missing", reason="missing ctxs[].id")
    pid = ctx["id"]
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise err(f"{name}.id", f"expected a string or int, got {_type_name(pid)}")
    title = ctx.get("title") or ""  # DPR writes null titles for title-less corpora
    if not isinstance(title, str):
        raise err(f"{name}.title", f"expected a string, got {_type_name(title)}")
    text = _get_str(ctx, "text", err, prefix=f"{name}.")
    has = ctx.get("has_answer")
    if has is not None and not isinstance(has, bool):
        raise err(f"{name}.has_answer", f"expected true or false, got {_type_name(has)}")
    return RetrievedPassage(id=str(pid), title=title, text=text,
                            score=_get_number(ctx, "score", name, err), has_answer=has)


def _parse_retrieval(obj: Any, file: str, index: int, max_ctxs: int) -> RetrievalRecord:
    def err(fld: str, msg: str, reason: str | None = None) -> DataFormatError:
        return DataFormatError(file, index, fld, msg, reason=reason)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {_type_name(obj)}")
    question = _get_str(obj, "question", err, nonempty=True)
    answers = _get_str_list(obj, "answers", err)
    if "ctxs" not in obj:
        raise err("ctxs", "missing", reason="missing ctxs")
    ctxs = obj["ctxs"]
    if not isinstance(ctxs, list):
        raise err("ctxs", f"expected a list of ctx objects, got {_type_name(ctxs)}")
    if max_ctxs:
        ctxs = ctxs[:max_ctxs]
    return RetrievalRecord(question, answers,
                           [_parse_retrieved(c, f"ctxs[{i}]", err) for i, c in enumerate(ctxs)])


def iter_retrieval_results(path: PathLike, *, skip_bad: bool = True,
                           report: SkipReport | None = None, max_ctxs: int = 0,
                           chunk_size: int = DEFAULT_CHUNK_SIZE
                           ) -> Iterator[tuple[int, RetrievalRecord | None]]:
    """Stream a DPR retrieval results JSON (``retrieval.json``; docs/readers.md, "Formats") as
    ``(0-based index, record)``; a skipped record is ``(index, None)``, so callers keep
    positions. ``max_ctxs`` > 0 keeps (and validates) the first passages only.

    Validates question (non-empty str), answers (list of str), ctxs (list of ``{id, title,
    text}`` with optional ``score`` (number or numeric string, as DPR writes it) and
    ``has_answer`` (bool); a null title reads as ""). A file without a valid record is an error.
    """
    file = os.fspath(path)
    seen = valid = 0
    with _local_report(report) as rep, _open_bytes(path) as fp:
        stream = _JsonStream(fp, file, chunk_size)
        for index, obj, duplicate in stream.iter_array():
            seen += 1
            try:
                if duplicate is not None:
                    raise _duplicate_error(file, index, duplicate)
                record = _parse_retrieval(obj, file, index, max_ctxs)
            except DataFormatError as e:
                _handle_bad(e, skip_bad, rep)
                yield index, None
                continue
            valid += 1
            yield index, record
        stream.expect_end()
        if not valid:
            raise _no_records_error(file, seen, rep, "questions")


# ---------------------------------------------------------------------------------------------
# TSV / CSV (csv.reader with a tab delimiter, exactly as DPR reads them, so quoting matches)
#
# A record is one physical line. csv.reader is fed one line at a time, and a request for a
# second line while a record is open means a double quote opened a field that did not close on
# its line: that line alone is the bad record and the next line is read as the next record, so
# a stray quote cannot swallow the lines after it (csv would make them one field). Records plus
# skipped lines plus the header are the file's physical lines. Quoting is read strictly: a field
# that opens with a quote must close with one right before a tab or the line end.

# csv.reader refuses fields longer than 131072 chars by default; a record is one line, so a long
# field is a long passage (cut to max_p_len later), not a runaway quote. Raised once for the
# process, never lowered.
_FIELD_LIMIT = 2**31 - 1
# Line 1 holding two of these (any case) is a header, whatever DPR's own check would say.
_HEADER_WORDS = frozenset({"id", "pid", "_id", "passage_id", "doc_id", "docid", "text", "title",
                           "passage", "contents", "body", "question", "answers"})
_CORPUS_HEADER = ["id", "text", "title"]
_CORPUS_COLUMNS = ("id", "text", "title")
_QA_COLUMNS = ("question", "answers")


class _RecordSpansLines(Exception):
    """csv.reader asked for a second line for one record."""


class _Undecodable(Exception):
    """The line handed to csv.reader could not be decoded."""


class _CsvFeed:
    """The physical lines of a file for csv.reader, at most one per record."""

    def __init__(self, lines: Iterator[_Line]) -> None:
        self.lines = lines
        self.current: _Line | None = None
        self.open = False  # a line was handed out for the record being parsed

    def __iter__(self) -> "_CsvFeed":
        return self

    def __next__(self) -> str:
        if self.open:
            raise _RecordSpansLines
        self.current = next(self.lines)
        self.open = True
        if self.current.text is None:
            raise _Undecodable
        return self.current.text


def _open_quote_column(text: str) -> int | None:
    """The 0-based column whose double quote is still open at the end of ``text``, if any."""
    col, at_start, quoted, i = 0, True, False, 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == '"':
                if text.startswith('"', i + 1):
                    i += 1
                else:
                    quoted = False
        elif c == "\t":
            col, at_start = col + 1, True
            i += 1
            continue
        elif c == '"' and at_start:
            quoted = True
        at_start = False
        i += 1
    return col if quoted else None


def _iter_csv_rows(path: PathLike, file: str, columns: tuple[str, ...]
                   ) -> Iterator[tuple[_Line, list[str] | DataFormatError]]:
    """(line, row) for every physical line; a line that is no csv record comes with the
    :class:`DataFormatError` to count or raise instead of a row. A damaged gzip stream raises."""
    if csv.field_size_limit() < _FIELD_LIMIT:
        csv.field_size_limit(_FIELD_LIMIT)
    feed = _CsvFeed(iter_lines(path))
    # strict: text after a closing quote ('"a"b') is an error, not silently glued ('ab')
    reader = csv.reader(feed, delimiter="\t", strict=True)
    while True:
        feed.open = False
        try:
            row = next(reader)
        except StopIteration:
            return
        except _RecordSpansLines:
            line = feed.current
            col = _open_quote_column(line.text.rstrip("\r\n"))
            name = "<row>" if col is None else (columns[col] if col < len(columns)
                                                else f"column {col + 1}")
            yield line, DataFormatError(
                file, line.number, name, "a double quote opens a field that does not close on "
                "this line (an unbalanced quote?); a record is one line, so the next line is read "
                "as the next record", record_kind="line", reason="unbalanced quote")
            continue
        except _Undecodable:
            line = feed.current
            yield line, DataFormatError(file, line.number, "<row>", f"cannot decode the line: "
                                        f"{line.problem}", record_kind="line", reason=line.reason)
            continue
        except csv.Error as e:
            line = feed.current
            yield line, DataFormatError(file, line.number, "<row>", f"cannot parse the line: {e}",
                                        record_kind="line", reason="unparsable line")
            continue
        yield feed.current, row


def _warn_unended(file: str, line: _Line | None) -> None:
    # A plain file cut inside the last field of its last line parses as a good record; the
    # missing line end is the only trace (DPR's and our writers end every line).
    if line is not None and not line.ended:
        logging.warning("%s: the last line (%d) has no line end: if the file was cut short, "
                        "its last record is incomplete", file, line.number)


class _SeenIds:
    """Passage ids seen so far: decimal ids below 2**27 (psgs_w100's 21M) as bits of a growing
    bytearray (at most 16 MB), any other id in a set."""

    BITS_LIMIT = 1 << 27

    def __init__(self) -> None:
        self.bits = bytearray()
        self.other: set[str] = set()

    def add(self, pid: str) -> bool:
        """Marks ``pid``; False when it was already there."""
        if pid.isascii() and pid.isdigit() and (pid == "0" or pid[0] != "0") and len(pid) < 10 \
                and int(pid) < self.BITS_LIMIT:
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


def _is_header(row: list[str]) -> bool:
    return bool(row) and (row[0] == "id" or
                          sum(c.strip().lower() in _HEADER_WORDS for c in row) >= 2)


def read_corpus_tsv(path: PathLike, *, skip_bad: bool = True, report: SkipReport | None = None,
                    allow_empty: bool = False) -> Iterator[tuple[str, str, str]]:
    """Stream ``psgs_w100.tsv[.gz]`` rows as (id, text, title) (docs/method.md §8).

    Line 1 is DPR's header ``id, text, title`` when its first field is "id"; a line 1 that names
    other columns (``pid, text, title``; ``id, title, text``) is an error whatever ``skip_bad``
    says, since the column order cannot be trusted. A row must have exactly 3 columns and a
    non-empty id; ``record`` in errors is the 1-based line number. Ids are unique: a row
    repeating an earlier id is a bad record (reason "duplicate id"): the first row is kept and
    the repeats are counted (or, with ``skip_bad=False``, the first repeat is an error), since
    one id naming two passages makes retrieval results ambiguous. A file without a single
    passage is an error unless ``allow_empty``.
    """
    file = os.fspath(path)
    seen = _SeenIds()
    records = passages = 0
    line = None
    with _local_report(report) as rep:
        for line, row in _iter_csv_rows(path, file, _CORPUS_COLUMNS):
            if line.number == 1 and isinstance(row, list) and _is_header(row):
                if row == _CORPUS_HEADER:
                    continue
                raise DataFormatError(file, 1, "<header>", f"line 1 names the columns "
                                      f"{', '.join(row)!r:.120}; a corpus has DPR's header "
                                      "id, text, title (in this order) or none",
                                      record_kind="line", reason="unexpected header")
            records += 1
            if isinstance(row, DataFormatError):
                err = row
            elif not row:
                err = DataFormatError(file, line.number, "<row>", "blank line",
                                      record_kind="line", reason="blank line")
            elif len(row) != 3:
                err = DataFormatError(file, line.number, "<row>",
                                      f"expected 3 tab-separated columns (id, text, title), "
                                      f"got {len(row)}", record_kind="line",
                                      reason="wrong column count")
            elif not row[0]:
                err = DataFormatError(file, line.number, "id", "empty passage id",
                                      record_kind="line")
            elif row == _CORPUS_HEADER:
                err = DataFormatError(file, line.number, "<row>", "a header row after line 1 "
                                      "(concatenated files?)", record_kind="line",
                                      reason="repeated header")
            elif not seen.add(row[0]):
                err = DataFormatError(file, line.number, "id", f"duplicate passage id "
                                      f"{row[0]!r:.40} (an earlier row has it; the first is kept)",
                                      record_kind="line", reason="duplicate id")
            else:
                passages += 1
                yield row[0], row[1], row[2]
                continue
            _handle_bad(err, skip_bad, rep)
        _warn_unended(file, line)
        if not passages and not allow_empty:
            raise _no_records_error(file, records, rep, "passages")


def _one_line_fields(path: PathLike, i: int, names: tuple[str, ...], values: Iterable[str]) -> None:
    """Writers keep every record on one line: the readers take a line break as a broken quote."""
    for name, value in zip(names, values):
        if "\n" in value or "\r" in value:
            raise DataFormatError(path, i, name, "contains a line break; a TSV/CSV record is one "
                                  "line (replace it, e.g. by a space)", reason="line break")


def write_corpus_tsv(path: PathLike, rows: Iterable[tuple[str, str, str]]) -> int:
    """Write (id, text, title) rows with DPR's ``id\\ttext\\ttitle`` header; returns the count.

    A field with a line break raises :class:`DataFormatError` (record = index in ``rows``)
    before anything is renamed into place."""
    n = 0
    with files.atomic_open_gz(path, newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(_CORPUS_HEADER)
        for i, (pid, text, title) in enumerate(rows):
            row = [str(pid), text, title]
            _one_line_fields(path, i, _CORPUS_COLUMNS, row)
            writer.writerow(row)
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


def read_qa_csv(path: PathLike, *, skip_bad: bool = True, report: SkipReport | None = None,
                allow_empty: bool = False) -> Iterator[tuple[str, list[str]]]:
    """Stream ``*.qa.csv`` rows as (question, answers) (docs/method.md §8).

    Tab-separated, column 0 the question, column 1 a Python list literal of str parsed with
    ``ast.literal_eval``. Extra columns are ignored (DPR reads only these two); ``record`` in
    errors is the 1-based line number. A row whose answer list is empty is kept (the question
    counts, as a miss: no passage can hold an answer) and counted in a warning; retrieval
    reports say how many (``empty_answers``). A file without a single question is an error
    unless ``allow_empty``.
    """
    file = os.fspath(path)
    empty = records = questions = 0
    line = None
    with _local_report(report) as rep:
        for line, row in _iter_csv_rows(path, file, _QA_COLUMNS):
            records += 1
            if isinstance(row, DataFormatError):
                err = row
            elif not row:
                err = DataFormatError(file, line.number, "<row>", "blank line",
                                      record_kind="line", reason="blank line")
            elif len(row) < 2:
                err = DataFormatError(file, line.number, "<row>",
                                      f"expected at least 2 tab-separated columns, got {len(row)}",
                                      record_kind="line", reason="wrong column count")
            elif not row[0].strip():
                err = DataFormatError(file, line.number, "question", "empty question",
                                      record_kind="line")
            else:
                try:
                    answers = _parse_answers_literal(row[1])
                except ValueError as e:
                    err = DataFormatError(file, line.number, "answers", str(e), record_kind="line")
                else:
                    empty += not answers
                    questions += 1
                    yield row[0], answers
                    continue
            _handle_bad(err, skip_bad, rep)
        _warn_unended(file, line)
        if not questions and not allow_empty:
            raise _no_records_error(file, records, rep, "questions")
    if empty:
        logging.warning("%s: %d question(s) with an empty answer list: kept, they can never be "
                        "hits", file, empty)


def write_qa_csv(path: PathLike, rows: Iterable[tuple[str, Iterable[str]]]) -> int:
    """Write (question, answers) rows; answers as ``repr(list_of_str)`` like DPR's files.

    A question with a line break raises :class:`DataFormatError` (answers are written as a
    literal, where a line break is an escape)."""
    n = 0
    with files.atomic_open_gz(path, newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        for i, (question, answers) in enumerate(rows):
            if isinstance(answers, str):
                raise TypeError(f"row {i}: answers must be a list of str, not a str")
            answers = list(answers)
            if not all(isinstance(a, str) for a in answers):
                raise TypeError(f"row {i}: answers must all be str: {answers!r:.80}")
            _one_line_fields(path, i, _QA_COLUMNS[:1], [question])
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
                   chunk_size: int = DEFAULT_CHUNK_SIZE, allow_empty: bool = False) -> Iterator[dict]:
    """Stream the records of ``nq-*_gold_info.json[.gz]`` = ``{"data": [...]}`` (docs/method.md §8).

    Each record is yielded as its dict; question (non-empty), title and context must be
    strings; ``question_tokens`` and ``example_id`` are passed through unchecked. A record with
    a repeated key is bad (reason "duplicate key"); a second top-level ``data`` key is an error
    whatever ``skip_bad`` says (JSON readers keep one silently). A file without a single valid
    record is an error unless ``allow_empty``.
    """
    file = os.fspath(path)
    seen = valid = 0
    with _local_report(report) as rep, _open_bytes(path) as fp:
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
                if key == "data" and seen_data:
                    raise DataFormatError(file, None, "data", "a second top-level \"data\" key "
                                          "(which list is meant is ambiguous)",
                                          reason="duplicate key")
                if key == "data":
                    seen_data = True
                    for index, obj, duplicate in stream.iter_array():
                        seen += 1
                        try:
                            if duplicate is not None:
                                raise _duplicate_error(file, index, duplicate)
                            _check_gold(obj, file, index)
                        except DataFormatError as e:
                            _handle_bad(e, skip_bad, rep)
                            continue
                        valid += 1
                        yield obj
                else:
                    stream.value()  # other top-level keys are skipped
                if stream.expect(",}", "',' or '}'") == "}":
                    break
        stream.expect_end()
        if not seen_data:
            raise DataFormatError(file, None, "data", "missing top-level \"data\" list",
                                  reason="missing data")
        if not valid and not allow_empty:
            raise _no_records_error(file, seen, rep, "records")


def write_gold_info(path: PathLike, records: Iterable[Mapping[str, Any]]) -> int:
    """Write ``{"data": [...]}`` streaming, one record per line; returns the count."""
    file = os.fspath(path)

    def checked(i: int, rec: Mapping[str, Any]) -> dict[str, Any]:
        rec = dict(rec)
        _check_gold(rec, file, i)
        return rec

    return _write_json_list(path, '{"data": [', "]}", records, checked)
