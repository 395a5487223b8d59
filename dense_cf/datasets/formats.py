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
reader does with about a hundred kinds of bad input. The streaming layer underneath (errors,
skip reports, lines, incremental JSON, one-line CSV records) is :mod:`dense_cf.datasets.stream`.
"""

from __future__ import annotations

import ast
import csv
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from absl import logging

from dense_cf import files
from dense_cf.datasets.stream import (
    DEFAULT_CHUNK_SIZE,
    DataFormatError,
    JsonStream,
    PathLike,
    SkipReport,
    duplicate_error,
    get_number,
    get_str,
    get_str_list,
    handle_bad,
    iter_csv_rows,
    iter_json_list,
    iter_lines,
    local_report,
    no_records_error,
    open_bytes,
    type_name,
    warn_unended,
)

__all__ = [
    "Passage", "BiencoderExample", "DataFormatError", "SkipReport",
    "RetrievalRecord", "RetrievedPassage",
    "iter_biencoder", "iter_biencoder_records", "iter_retrieval_results", "read_biencoder",
    "read_corpus_tsv", "read_qa_csv", "read_gold_info",
    "write_biencoder", "write_corpus_tsv", "write_qa_csv", "write_gold_info",
    "DEFAULT_CHUNK_SIZE", "iter_lines", "iter_json_list", "fold",
]


def fold(s: str) -> str:
    """``s`` up to case and runs of whitespace: how a ctx's title or text is compared across
    files (mining's positive exclusion, the stats' same-article count)."""
    return " ".join(s.split()).casefold()



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


def _parse_passage(ctx: Any, name: str, err) -> Passage:
    if not isinstance(ctx, dict):
        raise err(name, f"expected a JSON object {{title, text}}, got {type_name(ctx)}")
    title = get_str(ctx, "title", err, prefix=f"{name}.")
    text = get_str(ctx, "text", err, prefix=f"{name}.")
    passage_id = ctx.get("passage_id")
    if passage_id is not None:
        if isinstance(passage_id, bool) or not isinstance(passage_id, (str, int)):
            raise err(f"{name}.passage_id",
                      f"expected a string or int, got {type_name(passage_id)}")
        passage_id = str(passage_id)
    score = get_number(ctx, "score", name, err)
    get_number(ctx, "title_score", name, err)  # validated; not kept (nothing uses it)
    return Passage(title=title, text=text, passage_id=passage_id, score=score)


def _parse_ctx_list(obj: Mapping[str, Any], key: str, err, *, required: bool) -> list[Passage]:
    if key not in obj:
        if required:
            raise err(key, "missing", reason=f"missing {key}")
        return []  # DPR's JsonQADataset treats absent negative lists as empty
    value = obj[key]
    if not isinstance(value, list):
        raise err(key, f"expected a list of ctx objects, got {type_name(value)}")
    return [_parse_passage(ctx, f"{key}[{i}]", err) for i, ctx in enumerate(value)]


def _parse_example(obj: Any, file: str, index: int | None) -> BiencoderExample:
    def err(fld: str, msg: str, reason: str | None = None) -> DataFormatError:
        return DataFormatError(file, index, fld, msg, reason=reason)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {type_name(obj)}")
    return BiencoderExample(
        question=get_str(obj, "question", err, nonempty=True),
        answers=get_str_list(obj, "answers", err),
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
    # Mined negatives carry <file>.sha256 (mining/negatives.py): a file changed since is refused.
    files.verify_sidecar(file, f"rebuild it with the command that wrote it (see {file}.meta.json)")
    with local_report(report) as rep, open_bytes(path) as fp:
        stream = JsonStream(fp, file, chunk_size)
        for index, obj, duplicate in stream.iter_array():
            seen += 1
            try:
                if duplicate is not None:
                    raise duplicate_error(file, index, duplicate)
                example = _parse_example(obj, file, index)
            except DataFormatError as e:
                handle_bad(e, skip_bad, rep)
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
            raise no_records_error(file, seen, rep, "examples")


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
        raise err(name, f"expected a JSON object {{id, title, text, ...}}, got {type_name(ctx)}")
    if "id" not in ctx:
        raise err(f"{name}.id", "missing", reason="missing ctxs[].id")
    pid = ctx["id"]
    if isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise err(f"{name}.id", f"expected a string or int, got {type_name(pid)}")
    title = ctx.get("title") or ""  # DPR writes null titles for title-less corpora
    if not isinstance(title, str):
        raise err(f"{name}.title", f"expected a string, got {type_name(title)}")
    text = get_str(ctx, "text", err, prefix=f"{name}.")
    has = ctx.get("has_answer")
    if has is not None and not isinstance(has, bool):
        raise err(f"{name}.has_answer", f"expected true or false, got {type_name(has)}")
    return RetrievedPassage(id=str(pid), title=title, text=text,
                            score=get_number(ctx, "score", name, err), has_answer=has)


def _parse_retrieval(obj: Any, file: str, index: int, max_ctxs: int) -> RetrievalRecord:
    def err(fld: str, msg: str, reason: str | None = None) -> DataFormatError:
        return DataFormatError(file, index, fld, msg, reason=reason)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {type_name(obj)}")
    question = get_str(obj, "question", err, nonempty=True)
    answers = get_str_list(obj, "answers", err)
    if "ctxs" not in obj:
        raise err("ctxs", "missing", reason="missing ctxs")
    ctxs = obj["ctxs"]
    if not isinstance(ctxs, list):
        raise err("ctxs", f"expected a list of ctx objects, got {type_name(ctxs)}")
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
    # Mined negatives carry <file>.sha256 (mining/negatives.py): a file changed since is refused.
    files.verify_sidecar(file, f"rebuild it with the command that wrote it (see {file}.meta.json)")
    with local_report(report) as rep, open_bytes(path) as fp:
        stream = JsonStream(fp, file, chunk_size)
        for index, obj, duplicate in stream.iter_array():
            seen += 1
            try:
                if duplicate is not None:
                    raise duplicate_error(file, index, duplicate)
                record = _parse_retrieval(obj, file, index, max_ctxs)
            except DataFormatError as e:
                handle_bad(e, skip_bad, rep)
                yield index, None
                continue
            valid += 1
            yield index, record
        stream.expect_end()
        if not valid:
            raise no_records_error(file, seen, rep, "questions")
# ---------------------------------------------------------------------------------------------
# Corpus TSV and QA CSV (records read by stream.iter_csv_rows, one physical line each)

# Line 1 holding two of these (any case) is a header, whatever DPR's own check would say.
_HEADER_WORDS = frozenset({"id", "pid", "_id", "passage_id", "doc_id", "docid", "text", "title",
                           "passage", "contents", "body", "question", "answers"})
_CORPUS_HEADER = ["id", "text", "title"]
_CORPUS_COLUMNS = ("id", "text", "title")
_QA_COLUMNS = ("question", "answers")


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
    with local_report(report) as rep:
        for line, row in iter_csv_rows(path, file, _CORPUS_COLUMNS):
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
            handle_bad(err, skip_bad, rep)
        warn_unended(file, line)
        if not passages and not allow_empty:
            raise no_records_error(file, records, rep, "passages")


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
        raise ValueError(f"expected a list of strings, got {type_name(value)}: {cell!r:.80}")
    for item in value:
        if not isinstance(item, str):
            raise ValueError(f"expected a list of strings, found {type_name(item)} {item!r:.40}")
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
    with local_report(report) as rep:
        for line, row in iter_csv_rows(path, file, _QA_COLUMNS):
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
            handle_bad(err, skip_bad, rep)
        warn_unended(file, line)
        if not questions and not allow_empty:
            raise no_records_error(file, records, rep, "questions")
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
        raise err("<record>", f"expected a JSON object, got {type_name(obj)}")
    get_str(obj, "question", err, nonempty=True)
    get_str(obj, "title", err)
    get_str(obj, "context", err)
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
    # Mined negatives carry <file>.sha256 (mining/negatives.py): a file changed since is refused.
    files.verify_sidecar(file, f"rebuild it with the command that wrote it (see {file}.meta.json)")
    with local_report(report) as rep, open_bytes(path) as fp:
        stream = JsonStream(fp, file, chunk_size)
        stream.expect("{", "'{' (a JSON object with a \"data\" list)")
        seen_data = False
        if stream.peek() == "}":
            stream.pos += 1
        else:
            while True:
                key = stream.value()
                if not isinstance(key, str):
                    raise stream.error(f"expected an object key, got {type_name(key)}")
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
                                raise duplicate_error(file, index, duplicate)
                            _check_gold(obj, file, index)
                        except DataFormatError as e:
                            handle_bad(e, skip_bad, rep)
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
            raise no_records_error(file, seen, rep, "records")


def write_gold_info(path: PathLike, records: Iterable[Mapping[str, Any]]) -> int:
    """Write ``{"data": [...]}`` streaming, one record per line; returns the count."""
    file = os.fspath(path)

    def checked(i: int, rec: Mapping[str, Any]) -> dict[str, Any]:
        rec = dict(rec)
        _check_gold(rec, file, i)
        return rec

    return _write_json_list(path, '{"data": [', "]}", records, checked)
