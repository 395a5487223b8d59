"""The streaming layer under :mod:`dense_cf.datasets.formats`: bad-input errors that name the
file, the record and the field (:class:`DataFormatError`), skipped-record counts
(:class:`SkipReport`), line and gzip reading with UTF-8 checks (:func:`iter_lines`), an
incremental JSON-list decoder (:func:`iter_json_list`), one-line-per-record CSV/TSV rows, and
the field getters the format readers validate with. What a reader does with each kind of bad
input: the module docstring of ``formats`` and docs/reliability.md.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import gzip
import json
import os
import re
import zlib
from collections import Counter
from typing import Any, BinaryIO, Iterator, Mapping, Union

from absl import logging

from dense_cf import files

__all__ = [
    "DEFAULT_CHUNK_SIZE", "DataFormatError", "PathLike", "SkipReport", "iter_json_list",
    "iter_lines", "JsonStream", "duplicate_error", "get_number", "get_str", "get_str_list",
    "handle_bad", "iter_csv_rows", "local_report", "no_records_error", "open_bytes", "type_name",
    "warn_unended",
]

PathLike = Union[str, "os.PathLike[str]"]

# Characters read per chunk by the streaming JSON decoder; a record larger than this is handled
# by growing the read geometrically, so it only affects memory and speed, not correctness.
DEFAULT_CHUNK_SIZE = 1 << 20


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


def open_bytes(path: PathLike) -> BinaryIO:
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
    with open_bytes(path) as fp:
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


def handle_bad(error: DataFormatError, skip_bad: bool, report: SkipReport) -> None:
    if not skip_bad:
        raise error
    report.add_error(error)


@contextlib.contextmanager
def local_report(report: SkipReport | None) -> Iterator[SkipReport]:
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


def no_records_error(file: str, seen: int, report: SkipReport, what: str) -> DataFormatError:
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


class JsonStream:
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
    with open_bytes(path) as fp:
        stream = JsonStream(fp, file, chunk_size)
        yield from stream.iter_array()
        stream.expect_end()


# ---------------------------------------------------------------------------------------------
# Validation helpers


def duplicate_error(file: str, index: int, key: str) -> DataFormatError:
    return DataFormatError(file, index, key, f"key {key!r:.40} appears twice in one JSON object "
                           "(which value is meant is ambiguous)", reason="duplicate key")


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def get_str(obj: Mapping[str, Any], key: str, err, *, prefix: str = "",
             nonempty: bool = False) -> str:
    name = prefix + key
    if key not in obj:
        raise err(name, "missing", reason=f"missing {_INDEX_RE.sub('[]', name)}")
    value = obj[key]
    if not isinstance(value, str):
        raise err(name, f"expected a string, got {type_name(value)}")
    if nonempty and not value.strip():
        raise err(name, "must be a non-empty string")
    return value


def get_str_list(obj: Mapping[str, Any], key: str, err) -> list[str]:
    if key not in obj:
        raise err(key, "missing", reason=f"missing {key}")
    value = obj[key]
    if not isinstance(value, list):
        raise err(key, f"expected a list of strings, got {type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise err(f"{key}[{i}]", f"expected a string, got {type_name(item)}")
    return value


def get_number(ctx: Mapping[str, Any], key: str, name: str, err) -> float | None:
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
    raise err(f"{name}.{key}", f"expected a number, got {type_name(value)} {value!r:.40}")


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


def iter_csv_rows(path: PathLike, file: str, columns: tuple[str, ...]
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


def warn_unended(file: str, line: _Line | None) -> None:
    # A plain file cut inside the last field of its last line parses as a good record; the
    # missing line end is the only trace (DPR's and our writers end every line).
    if line is not None and not line.ended:
        logging.warning("%s: the last line (%d) has no line end: if the file was cut short, "
                        "its last record is incomplete", file, line.number)
