"""Bad input (issue 20): every reader, and the commands users run, on mutated files.

Each case mutates one file of a tiny synthetic benchmark (encoding, byte-order mark, truncation,
quoting, columns, headers, types, empty and huge fields, duplicate keys and ids, nesting,
directories, missing paths, permissions) and asserts one outcome:

- ``clear``: an error naming the file, the record (line or list index) and the field, raised even
  when bad records are being skipped; a command prints one ``error:`` line, no traceback, exit 1;
- ``counted``: the bad records are skipped and counted by reason and every other record is read
  exactly (with ``skip_bad=False`` the first bad one is an error naming file, line and field);
- ``read``: a valid variant (a byte-order mark, gzip, CRLF, a huge field): every record read.

Every case also checks that no input file changed. docs/reliability.md holds the table of cases
and outcomes; ``test_docs_table_is_current`` keeps it in step (``python tests/test_bad_input.py``
rewrites it).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest
from helpers import child_pythonpath, tiny_synthetic_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dense_cf import app as _app
from dense_cf.cli import eval_aar, eval_retrieval, prepare
from dense_cf.cli import stats as stats_cli
from dense_cf.datasets import evidence_file, formats
from dense_cf.datasets.formats import DataFormatError, SkipReport
from dense_cf.mining.evidence.annotate import repair_torn_tail
from dense_cf.synthetic import generate as synthetic

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- bad-input cases: begin -->", "<!-- bad-input cases: end -->"
FILES = {"corpus": "psgs_synth.tsv", "qa": "synth-test.qa.csv",
         "biencoder": "biencoder-synth-train.json", "gold": "synth-test_gold_info.json",
         "evidence": "synth-train.evidence.jsonl"}
# Physical line of record j (0-based): the corpus, biencoder and gold files open with a line
# of their own (the header, "[", '{"data": [').
FIRST_LINE = {"corpus": 2, "qa": 1, "biencoder": 2, "gold": 2, "evidence": 1}
ANY = "any"   # a record number the case does not pin (where a gzip stream breaks)
BOM = "\ufeff"
MB = 1 << 20


# ------------------------------------------------------------------------------------ cases
@dataclasses.dataclass(frozen=True)
class Case:
    """One mutated file read by its reader. ``edit`` maps the file's text to the mutated
    content; ``lost`` are the 0-based records that must not come back (``counted``), ``expect``
    maps the original records to the expected ones when content changes."""

    id: str
    kind: str
    mutation: str
    outcome: str                                   # clear | counted | read
    edit: Callable[[str], str | bytes] | None = None
    gz: bool = False                               # written gzip-compressed (name + .gz)
    gz_edit: Callable[[bytes], bytes] | None = None
    path: str = "file"                             # file | missing | directory | unreadable
    record: int | str | None = None                # clear / counted: where the (first) error is
    field: str | None = None
    reason: str | None = None
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    lost: tuple[int, ...] = ()
    expect: Callable[[Any], Any] | None = None


def line(n: int, fn: Callable[[str], str]) -> Callable[[str], str]:
    """An edit of physical line ``n`` (1-based; its line end kept)."""
    def edit(text: str) -> str:
        lines = text.splitlines(keepends=True)
        body = lines[n - 1].rstrip("\r\n")
        lines[n - 1] = fn(body) + lines[n - 1][len(body):]
        return "".join(lines)
    return edit


def insert(n: int, new: str) -> Callable[[str], str]:
    """Inserts ``new`` (a whole line with its line end) before physical line ``n``."""
    def edit(text: str) -> str:
        lines = text.splitlines(keepends=True)
        return "".join(lines[:n - 1] + [new] + lines[n - 1:])
    return edit


def cols(n: int, fn: Callable[[list[str]], list[str]]) -> Callable[[str], str]:
    return line(n, lambda s: "\t".join(fn(s.split("\t"))))


def json_line(n: int, fn: Callable[[dict], str]) -> Callable[[str], str]:
    """Rewrites the JSON object on line ``n`` (one record per line, maybe with a trailing ",")."""
    def change(s: str) -> str:
        comma = "," if s.endswith(",") else ""
        return fn(json.loads(s.rstrip(","))) + comma
    return line(n, change)


def with_key(key: str, value: Any) -> Callable[[dict], str]:
    return lambda obj: json.dumps(dict(obj, **{key: value}))


def repeat_key(key: str, value: Any) -> Callable[[dict], str]:
    return lambda obj: json.dumps(obj)[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"


def latin1(n: int) -> Callable[[str], bytes]:
    """Line ``n`` gets an "é" in Latin-1 (byte 0xe9: not UTF-8)."""
    def edit(text: str) -> bytes:
        lines = text.encode().split(b"\n")
        lines[n - 1] = lines[n - 1][:-1] + b"\xe9" + lines[n - 1][-1:]
        return b"\n".join(lines)
    return edit


def truncate(fraction: float) -> Callable[[bytes], bytes]:
    return lambda data: data[:int(len(data) * fraction)]


def corrupt(data: bytes) -> bytes:
    out = bytearray(data)
    for i in range(20, len(out) - 20, 5):   # scramble the deflate stream, keep header/trailer
        out[i] ^= 0x5A
    return bytes(out)


def cut_inside_last_text(text: str) -> str:
    body = text.rstrip("\n")
    last = body.rsplit("\n", 1)[1]
    return body[:len(body) - len(last) + last.index("\t") + 6]


def deep(text: str) -> str:
    return line(FIRST_LINE["biencoder"] + 2, lambda s: "[" * 100_000 + "]" * 100_000 + ",")(text)


def huge_text(rec: int, kind: str):
    big = "word " * (MB // 5)

    def edit(text: str) -> str:
        if kind == "corpus":
            return cols(FIRST_LINE[kind] + rec, lambda c: [c[0], big, c[2]])(text)
        return json_line(FIRST_LINE[kind] + rec, lambda o: json.dumps(
            dict(o, positive_ctxs=[dict(o["positive_ctxs"][0], text=big)])))(text)

    def expect(records):
        out = list(records)
        if kind == "corpus":
            out[rec] = (out[rec][0], big, out[rec][2])
        else:
            out[rec] = dataclasses.replace(out[rec], positive_ctxs=[dataclasses.replace(
                out[rec].positive_ctxs[0], text=big)])
        return out
    return edit, expect


def evidence_replaced(index: int, sentence: int) -> Callable[[dict], dict]:
    """The records with ``index`` replaced by a later bare ``{index, sentence}`` line."""
    def expect(records: dict) -> dict:
        return {**records, index: evidence_file.EvidenceRecord(index, sentence)}
    return expect


_corpus_huge, _corpus_huge_expect = huge_text(3, "corpus")
_bi_huge, _bi_huge_expect = huge_text(1, "biencoder")
C, Q, B, G, E = (FIRST_LINE[k] for k in ("corpus", "qa", "biencoder", "gold", "evidence"))

READER_CASES = [
    # corpus TSV: (id, text, title), DPR's header
    Case("corpus-bom", "corpus", "UTF-8 byte-order mark", "read", lambda t: BOM + t),
    Case("corpus-gz-bom", "corpus", "gzip, with a byte-order mark", "read", lambda t: BOM + t, gz=True),
    Case("corpus-crlf", "corpus", "CRLF line ends", "read", lambda t: t.replace("\n", "\r\n")),
    Case("corpus-no-header", "corpus", "no header row", "read",
         lambda t: t.split("\n", 1)[1]),
    Case("corpus-dpr-quoting", "corpus", 'a text quoted DPR-style ("" inside)', "read",
         cols(C + 2, lambda c: [c[0], '"a ""quoted"" word"', c[2]]),
         expect=lambda r: r[:2] + [(r[2][0], 'a "quoted" word', r[2][2])] + r[3:]),
    Case("corpus-huge-field", "corpus", "a 1 MB passage", "read", _corpus_huge,
         expect=_corpus_huge_expect),
    Case("corpus-unbalanced-quote", "corpus", "a text opening with an unbalanced double quote",
         "counted", cols(C + 3, lambda c: [c[0], '"' + c[1], c[2]]), record=C + 3, field="text",
         counts={"unbalanced quote": 1}, lost=(3,)),
    Case("corpus-quote-last-line", "corpus", "an unbalanced quote in the title of the last line",
         "counted", lambda t: t.rstrip("\n").rsplit("\t", 1)[0] + '\t"Title\n', record=C + 39,
         field="title", counts={"unbalanced quote": 1}, lost=(39,)),
    Case("corpus-text-after-quote", "corpus", 'text after a closing quote ("a" b)', "counted",
         cols(C + 2, lambda c: [c[0], '"' + c[1][:8] + '" ' + c[1][8:], c[2]]), record=C + 2,
         field="<row>", counts={"unparsable line": 1}, lost=(2,)),
    Case("corpus-extra-column", "corpus", "a fourth column", "counted",
         cols(C + 1, lambda c: c + ["extra"]), record=C + 1, field="<row>",
         counts={"wrong column count": 1}, lost=(1,)),
    Case("corpus-missing-column", "corpus", "the title column missing", "counted",
         cols(C + 1, lambda c: c[:2]), record=C + 1, field="<row>",
         counts={"wrong column count": 1}, lost=(1,)),
    Case("corpus-blank-line", "corpus", "a blank line", "counted", insert(C + 2, "\n"),
         record=C + 2, field="<row>", counts={"blank line": 1}),
    Case("corpus-empty-id", "corpus", "an empty id", "counted",
         cols(C + 4, lambda c: [""] + c[1:]), record=C + 4, field="id", counts={"bad id": 1},
         lost=(4,)),
    Case("corpus-duplicate-id", "corpus", "a second row with an earlier id", "counted",
         lambda t: t + "3\tanother passage\tOther\n", record=C + 40, field="id",
         counts={"duplicate id": 1}),
    Case("corpus-repeated-header", "corpus", "the header again mid-file (concatenated files)",
         "counted", insert(C + 5, "id\ttext\ttitle\n"), record=C + 5, field="<row>",
         counts={"repeated header": 1}),
    Case("corpus-latin1", "corpus", "one line in Latin-1 (not UTF-8)", "counted", latin1(C + 6),
         record=C + 6, field="<row>", counts={"not UTF-8": 1}, lost=(6,)),
    Case("corpus-stray-cr", "corpus", "a lone carriage return inside a text", "counted",
         cols(C + 7, lambda c: [c[0], c[1][:10] + "\r" + c[1][10:], c[2]]), record=C + 7,
         field="<row>", counts={"unparsable line": 1}, lost=(7,)),
    Case("corpus-cut-mid-line", "corpus", "cut short inside a text (plain file)", "counted",
         cut_inside_last_text, record=C + 39, field="<row>",
         counts={"wrong column count": 1}, lost=(39,)),
    Case("corpus-header-other-names", "corpus", "a header naming other columns (pid, text, title)",
         "clear", line(1, lambda s: "pid\ttext\ttitle"), record=1, field="<header>",
         reason="unexpected header"),
    Case("corpus-header-swapped", "corpus", "a header with the columns swapped (id, title, text)",
         "clear", line(1, lambda s: "id\ttitle\ttext"), record=1, field="<header>",
         reason="unexpected header"),
    Case("corpus-empty", "corpus", "an empty file", "clear", lambda t: "", field="<file>",
         reason="no records"),
    Case("corpus-header-only", "corpus", "the header row only", "clear",
         lambda t: t.split("\n", 1)[0] + "\n", field="<file>", reason="no records"),
    Case("corpus-utf16", "corpus", "UTF-16 (every line undecodable)", "clear",
         lambda t: t.encode("utf-16"), field="<file>", reason="no records"),
    Case("corpus-gz-truncated", "corpus", "gzip cut in half", "clear", gz=True,
         gz_edit=truncate(0.5), record=ANY, field="<file>", reason="truncated file"),
    Case("corpus-gz-corrupt", "corpus", "gzip with scrambled bytes", "clear", gz=True,
         gz_edit=corrupt, record=ANY, field="<file>", reason="unreadable file"),
    Case("corpus-missing", "corpus", "a path that does not exist", "clear", path="missing"),
    Case("corpus-directory", "corpus", "a directory where the file belongs", "clear",
         path="directory"),
    Case("corpus-unreadable", "corpus", "a file without read permission", "clear",
         path="unreadable"),
    # qa CSV: question \t answers (a Python list literal)
    Case("qa-bom", "qa", "UTF-8 byte-order mark", "read", lambda t: BOM + t),
    Case("qa-gz-bom", "qa", "gzip, with a byte-order mark", "read", lambda t: BOM + t, gz=True),
    Case("qa-extra-columns", "qa", "extra columns (DPR reads two)", "read",
         cols(Q + 1, lambda c: c + ["x", "y"])),
    Case("qa-empty-answers", "qa", "an empty answer list (kept: a miss, warned)", "read",
         cols(Q + 2, lambda c: [c[0], "[]"]), expect=lambda r: r[:2] + [(r[2][0], [])] + r[3:]),
    Case("qa-unbalanced-quote", "qa", "a question opening with an unbalanced double quote",
         "counted", cols(Q + 1, lambda c: ['"' + c[0], c[1]]), record=Q + 1, field="question",
         counts={"unbalanced quote": 1}, lost=(1,)),
    Case("qa-bad-literal", "qa", "an answer list cut short (['a'", "counted",
         cols(Q + 3, lambda c: [c[0], c[1][:-1]]), record=Q + 3, field="answers",
         counts={"bad answers": 1}, lost=(3,)),
    Case("qa-answers-not-list", "qa", "answers a string, not a list", "counted",
         cols(Q + 3, lambda c: [c[0], "'x'"]), record=Q + 3, field="answers",
         counts={"bad answers": 1}, lost=(3,)),
    Case("qa-answers-numbers", "qa", "answers a list of numbers", "counted",
         cols(Q + 4, lambda c: [c[0], "[1, 2]"]), record=Q + 4, field="answers",
         counts={"bad answers": 1}, lost=(4,)),
    Case("qa-answers-code", "qa", "answers a function call (never evaluated)", "counted",
         cols(Q + 4, lambda c: [c[0], "__import__('os').getcwd()"]), record=Q + 4,
         field="answers", counts={"bad answers": 1}, lost=(4,)),
    Case("qa-answers-deep", "qa", "answers nested 100,000 lists deep", "counted",
         cols(Q + 5, lambda c: [c[0], "[" * 100_000 + "]" * 100_000]), record=Q + 5,
         field="answers", counts={"bad answers": 1}, lost=(5,)),
    Case("qa-one-column", "qa", "the answers column missing", "counted",
         cols(Q + 6, lambda c: c[:1]), record=Q + 6, field="<row>",
         counts={"wrong column count": 1}, lost=(6,)),
    Case("qa-empty-question", "qa", "an empty question", "counted",
         cols(Q, lambda c: [" "] + c[1:]), record=Q, field="question",
         counts={"bad question": 1}, lost=(0,)),
    Case("qa-header-row", "qa", "a header row (question, answers)", "counted",
         insert(1, "question\tanswers\n"), record=1, field="answers", counts={"bad answers": 1}),
    Case("qa-latin1", "qa", "one line in Latin-1 (not UTF-8)", "counted", latin1(Q + 2),
         record=Q + 2, field="<row>", counts={"not UTF-8": 1}, lost=(2,)),
    Case("qa-empty", "qa", "an empty file", "clear", lambda t: "", field="<file>",
         reason="no records"),
    Case("qa-all-bad", "qa", "every answer list broken", "clear",
         lambda t: t.replace("']\n", "'\n"), field="<file>", reason="no records"),
    Case("qa-missing", "qa", "a path that does not exist", "clear", path="missing"),
    Case("qa-directory", "qa", "a directory where the file belongs", "clear", path="directory"),
    # biencoder JSON: a list of {question, answers, positive_ctxs, ...}
    Case("biencoder-bom", "biencoder", "UTF-8 byte-order mark", "read", lambda t: BOM + t),
    Case("biencoder-gz-bom", "biencoder", "gzip, with a byte-order mark", "read",
         lambda t: BOM + t, gz=True),
    Case("biencoder-huge-field", "biencoder", "a 1 MB positive passage", "read", _bi_huge,
         expect=_bi_huge_expect),
    Case("biencoder-question-number", "biencoder", "a question that is a number", "counted",
         json_line(B + 3, with_key("question", 42)), record=3, field="question",
         counts={"bad question": 1}, lost=(3,)),
    Case("biencoder-answers-string", "biencoder", "answers a string, not a list", "counted",
         json_line(B + 4, with_key("answers", "x")), record=4, field="answers",
         counts={"bad answers": 1}, lost=(4,)),
    Case("biencoder-no-positives", "biencoder", "positive_ctxs missing", "counted",
         json_line(B + 5, lambda o: json.dumps({k: v for k, v in o.items() if k != "positive_ctxs"})),
         record=5, field="positive_ctxs", counts={"missing positive_ctxs": 1}, lost=(5,)),
    Case("biencoder-ctx-text-null", "biencoder", "a hard negative whose text is null", "counted",
         json_line(B + 6, lambda o: json.dumps(dict(o, hard_negative_ctxs=[
             dict(o["hard_negative_ctxs"][0], text=None)]))), record=6,
         field="hard_negative_ctxs[0].text", counts={"bad hard_negative_ctxs[].text": 1}, lost=(6,)),
    Case("biencoder-duplicate-key", "biencoder", "a record with two question keys", "counted",
         json_line(B + 2, repeat_key("question", "another question?")), record=2,
         field="question", counts={"duplicate key": 1}, lost=(2,)),
    Case("biencoder-empty-list", "biencoder", "an empty list", "clear", lambda t: "[]\n",
         field="<file>", reason="no records"),
    Case("biencoder-empty", "biencoder", "an empty file", "clear", lambda t: "",
         field="<json>", reason="no records"),
    Case("biencoder-object", "biencoder", "an object, not a list", "clear",
         lambda t: '{"data": ' + t + "}", field="<json>", reason="invalid JSON"),
    Case("biencoder-truncated", "biencoder", "cut in the middle", "clear",
         lambda t: t[:len(t) // 2], record=ANY, field="<json>", reason="truncated file"),
    Case("biencoder-gz-truncated", "biencoder", "gzip cut in half", "clear", gz=True,
         gz_edit=truncate(0.5), record=ANY, field="<json>", reason="truncated file"),
    Case("biencoder-syntax", "biencoder", "a comma missing between records", "clear",
         line(B + 1, lambda s: s.rstrip(",")), record=1, field="<json>", reason="invalid JSON"),
    Case("biencoder-deep", "biencoder", "a record nested 100,000 lists deep", "clear", deep,
         record=2, field="<json>", reason="nesting too deep"),
    Case("biencoder-latin1", "biencoder", "a Latin-1 byte (not UTF-8)", "clear",
         latin1(B + 7), record=ANY, field="<json>", reason="not UTF-8"),
    Case("biencoder-trailing-data", "biencoder", "data after the closing bracket", "clear",
         lambda t: t + "[]\n", field="<json>", reason="invalid JSON"),
    Case("biencoder-missing", "biencoder", "a path that does not exist", "clear", path="missing"),
    Case("biencoder-directory", "biencoder", "a directory where the file belongs", "clear",
         path="directory"),
    # gold info JSON: {"data": [{question, title, context, ...}]}
    Case("gold-bom", "gold", "UTF-8 byte-order mark", "read", lambda t: BOM + t),
    Case("gold-title-number", "gold", "a title that is a number", "counted",
         json_line(G + 1, with_key("title", 7)), record=1, field="title",
         counts={"bad title": 1}, lost=(1,)),
    Case("gold-duplicate-key", "gold", "a record with two context keys", "counted",
         json_line(G + 2, repeat_key("context", "another context")), record=2, field="context",
         counts={"duplicate key": 1}, lost=(2,)),
    Case("gold-two-data-keys", "gold", 'two top-level "data" keys', "clear",
         lambda t: t.rstrip().rstrip("}") + ', "data": []}\n', field="data",
         reason="duplicate key"),
    Case("gold-no-data", "gold", 'no "data" key', "clear", lambda t: '{"other": []}\n',
         field="data", reason="missing data"),
    Case("gold-empty-data", "gold", 'an empty "data" list', "clear",
         lambda t: '{"data": []}\n', field="<file>", reason="no records"),
    Case("gold-truncated", "gold", "cut in the middle", "clear", lambda t: t[:len(t) // 2],
         record=ANY, field="<json>", reason="truncated file"),
    Case("gold-missing", "gold", "a path that does not exist", "clear", path="missing"),
    # evidence JSONL: {"index", "sentence", "question", "source"} per line
    Case("evidence-bom", "evidence", "UTF-8 byte-order mark", "read", lambda t: BOM + t),
    Case("evidence-gz", "evidence", "gzip", "read", lambda t: t, gz=True),
    Case("evidence-duplicate-index", "evidence", "an index annotated twice (the last is kept)",
         "counted", lambda t: t + '{"index": 2, "sentence": 0}\n',
         counts={"duplicate index": 1}, expect=evidence_replaced(2, 0)),
    Case("evidence-float-index", "evidence", "an index of 4.5", "clear",
         json_line(E + 4, with_key("index", 4.5)), record=E + 4, field="index"),
    Case("evidence-string-index", "evidence", 'an index of "4"', "clear",
         json_line(E + 4, with_key("index", "4")), record=E + 4, field="index"),
    Case("evidence-bool-sentence", "evidence", "a sentence of true", "clear",
         json_line(E + 1, with_key("sentence", True)), record=E + 1, field="sentence"),
    Case("evidence-negative-index", "evidence", "a negative index", "clear",
         json_line(E + 1, with_key("index", -3)), record=E + 1, field="index",
         reason="index out of range"),
    Case("evidence-duplicate-key", "evidence", "a line with two index keys", "clear",
         json_line(E + 2, repeat_key("index", 9)), record=E + 2, field="index",
         reason="duplicate key"),
    Case("evidence-not-json", "evidence", "a line that is not JSON", "clear",
         line(E + 3, lambda s: s[:-1]), record=E + 3, field="<json>", reason="invalid JSON"),
    Case("evidence-deep", "evidence", "a line nested 100,000 lists deep", "clear",
         line(E + 3, lambda s: "[" * 100_000 + "]" * 100_000), record=E + 3, field="<json>",
         reason="nesting too deep"),
    Case("evidence-torn-tail", "evidence", "the last line cut mid-write (no line end)",
         "clear", lambda t: t[:-9], record=E + 4, field="<row>", reason="incomplete last line"),
    Case("evidence-invalid-tail", "evidence", "a complete but invalid last line, no line end",
         "clear", lambda t: t + '{"index": 4.5, "sentence": 1}', record=E + 5, field="<row>",
         reason="incomplete last line"),
    Case("evidence-latin1", "evidence", "a Latin-1 byte (not UTF-8)", "clear", latin1(E + 2),
         record=E + 2, field="<row>", reason="not UTF-8"),
    Case("evidence-missing", "evidence", "a path that does not exist", "clear", path="missing"),
]


# --------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> str:
    """The synthetic benchmark (40 passages, 20 train and 8 test questions) and an evidence
    file for its train split; read-only for every case."""
    d = tmp_path_factory.mktemp("bench")
    synthetic.generate(str(d), num_passages=40, seed=1, test_questions=8)
    examples = formats.read_biencoder(d / FILES["biencoder"], skip_bad=False)
    with open(d / FILES["evidence"], "w", encoding="utf-8") as f:
        for i, ex in enumerate(examples[:5]):
            f.write(json.dumps({"index": i, "sentence": i % 3, "question": ex.question,
                                "source": FILES["biencoder"]}) + "\n")
    return str(d)


def snapshot(*paths: str) -> dict[str, tuple]:
    """(sha256, size, mtime, mode) of every file under ``paths``: inputs must not change."""
    out = {}
    for p in paths:
        walk = [(p, [], [""])] if not os.path.isdir(p) else os.walk(p)
        for root, _, names in walk:
            for name in names:
                f = os.path.join(root, name) if name else root
                if os.path.lexists(f) and not os.path.isdir(f):
                    st_ = os.lstat(f)
                    digest = hashlib.sha256(open(f, "rb").read()).hexdigest() \
                        if st_.st_mode & 0o444 else "unreadable"
                    out[f] = (digest, st_.st_size, st_.st_mtime_ns, st_.st_mode)
    return out


def read(kind: str, path: str, *, strict: bool, report: SkipReport) -> Any:
    if kind == "corpus":
        return list(formats.read_corpus_tsv(path, skip_bad=not strict, report=report))
    if kind == "qa":
        return list(formats.read_qa_csv(path, skip_bad=not strict, report=report))
    if kind == "biencoder":
        return formats.read_biencoder(path, skip_bad=not strict, report=report, chunk_size=4096)
    if kind == "gold":
        return list(formats.read_gold_info(path, skip_bad=not strict, report=report,
                                           chunk_size=4096))
    return evidence_file.read_evidence(path, report=report)   # no lenient mode: a line is data


def make(case: Case, bench: str, tmp: pathlib.Path) -> str:
    """The mutated file of ``case`` in ``tmp``; its path."""
    name = FILES[case.kind] + (".gz" if case.gz else "")
    path = tmp / name
    if case.path == "missing":
        return str(path)
    if case.path == "directory":
        path.mkdir()
        return str(path)
    text = pathlib.Path(bench, FILES[case.kind]).read_text(encoding="utf-8")
    data = case.edit(text) if case.edit else text
    data = data.encode("utf-8") if isinstance(data, str) else data
    if case.gz:
        data = gzip.compress(data, mtime=0)
    if case.gz_edit:
        data = case.gz_edit(data)
    path.write_bytes(data)
    if case.path == "unreadable":
        path.chmod(0)
    return str(path)


def check_error(err: BaseException, case: Case, path: str) -> None:
    """``err`` names the file, the record or line, and the field of ``case``."""
    if case.path != "file":
        assert isinstance(err, OSError) and err.filename == path, repr(err)
        assert path in _app.user_message(err)
        return
    assert isinstance(err, DataFormatError), repr(err)
    assert err.file == path and str(err).startswith(path), str(err)
    assert err.field == case.field, str(err)
    if case.record != ANY:
        assert err.record == case.record, str(err)
    else:
        assert err.record is not None, str(err)
    if case.reason:
        assert err.reason == case.reason, str(err)
    assert "\n" not in str(err)


def original(kind: str, bench: str) -> Any:
    return read(kind, os.path.join(bench, FILES[kind]), strict=True, report=SkipReport())


@pytest.mark.parametrize("case", READER_CASES, ids=[c.id for c in READER_CASES])
def test_reader(case: Case, bench: str, tmp_path: pathlib.Path) -> None:
    if case.path == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads any file: test_unreadable_file_without_root_powers covers it")
    path = make(case, bench, tmp_path)
    before = snapshot(bench, str(tmp_path))
    report = SkipReport()
    if case.outcome == "clear":
        with pytest.raises(Exception) as info:
            read(case.kind, path, strict=False, report=report)
        check_error(info.value, case, path)
    else:
        got = read(case.kind, path, strict=False, report=report)
        base = original(case.kind, bench)
        if case.expect is not None:
            want = case.expect(base)
        elif isinstance(base, dict):
            want = base
        else:
            want = [r for i, r in enumerate(base) if i not in case.lost]
        assert got == want
        assert {r: n for (_, r), n in report.counts.items()} == case.counts
        assert {f for f, _ in report.counts} <= {path}
        if case.outcome == "counted" and case.kind != "evidence":
            with pytest.raises(DataFormatError) as info:   # strict: the first bad record
                read(case.kind, path, strict=True, report=SkipReport())
            check_error(info.value, case, path)
    if case.path == "unreadable":
        os.chmod(path, 0o644)
        before = snapshot(bench, str(tmp_path))
    assert snapshot(bench, str(tmp_path)) == before, "an input file changed"


def test_unreadable_file_without_root_powers(bench: str, tmp_path: pathlib.Path) -> None:
    """Root reads any file, so when the suite runs as root the permission case runs in a
    process without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (util-linux ``setpriv``)."""
    if os.geteuid() != 0:
        pytest.skip("not root: test_reader[corpus-unreadable] runs the case itself")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: no way to drop the power to read any file")
    path = tmp_path / FILES["corpus"]
    path.write_bytes(pathlib.Path(bench, FILES["corpus"]).read_bytes())
    path.chmod(0)
    code = textwrap.dedent(f"""
        from dense_cf import app as _app
        from dense_cf.datasets import formats
        try:
            list(formats.read_corpus_tsv({str(path)!r}))
        except PermissionError as e:
            print("ERR", _app.user_message(e))
    """)
    caps = "-dac_override,-dac_read_search"
    r = subprocess.run([setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}",
                        sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=child_pythonpath(ROOT)))
    assert r.stdout.strip() == f"ERR {path}: permission denied", r.stdout + r.stderr[-2000:]
    assert path.stat().st_mode & 0o777 == 0


def test_a_missing_line_end_at_the_end_is_warned(bench, tmp_path, caplog):
    """A plain file cut inside the last field of its last line still parses: the missing line
    end is the only trace, and the reader says so (DPR's files and ours end every line)."""
    text = pathlib.Path(bench, FILES["corpus"]).read_text()
    path = tmp_path / "c.tsv"
    path.write_text(text[:-3])
    rows = list(formats.read_corpus_tsv(path, skip_bad=False))
    assert len(rows) == 40 and rows[-1][2] == original("corpus", bench)[-1][2][:-2]
    assert "the last line (41) has no line end" in caplog.text


def test_the_annotation_writer_repairs_only_its_own_torn_line(bench, tmp_path):
    """The resuming writer cuts a torn last line (not JSON) and restores a lost line end; a
    complete but invalid record is left to the reader to report."""
    text = pathlib.Path(bench, FILES["evidence"]).read_text()
    torn = tmp_path / "torn.jsonl"
    torn.write_text(text + '{"index": 5, "sente')
    assert repair_torn_tail(str(torn)) == len('{"index": 5, "sente')
    assert torn.read_text() == text
    whole = tmp_path / "whole.jsonl"
    whole.write_text(text + '{"index": 5, "sentence": 1}')
    assert repair_torn_tail(str(whole)) == 0 and whole.read_text().endswith('1}\n')
    assert sorted(evidence_file.read_evidence(str(whole))) == [0, 1, 2, 3, 4, 5]
    invalid = tmp_path / "invalid.jsonl"
    invalid.write_text(text + '{"index": 4.5, "sentence": 1}')
    repair_torn_tail(str(invalid))
    with pytest.raises(DataFormatError, match=r"line 6: field 'index'"):
        evidence_file.read_evidence(str(invalid))
    assert invalid.read_text() == text + '{"index": 4.5, "sentence": 1}\n'   # nothing cut


# ------------------------------------------------------------------ generated inputs (hypothesis)
_WORDS = st.text(alphabet=st.sampled_from('abcxyz "\''), min_size=1, max_size=12)
_LINE_KINDS = st.sampled_from(["ok", "ok", "ok", "quote", "junk", "columns", "blank", "dup"])


def _plain(text: str) -> str:
    """A field that needs no quoting: no leading quote (quotes inside are text)."""
    return text.lstrip('"') or "t"


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_LINE_KINDS, _WORDS, _WORDS), min_size=1, max_size=25))
def test_corpus_records_plus_skipped_lines_are_the_lines(rows, tmp_path):
    """Whatever bad lines sit among good ones (an unclosed quote, text after a closing quote,
    a missing column, a blank line, a repeated id), every good row is read exactly and every
    other physical line is counted: records + skipped + header = lines."""
    path = tmp_path / "c.tsv"
    lines, want = ["id\ttext\ttitle"], []
    for i, (kind, text, title) in enumerate(rows):
        text, title = _plain(text), _plain(title)
        if kind == "ok":
            lines.append(f"{i}\t{text}\t{title}")
            want.append((str(i), text, title))
        elif kind == "quote":
            lines.append(f'{i}\t"{text.replace(chr(34), "")}\t{title.replace(chr(34), "")}')
        elif kind == "junk":
            lines.append(f'{i}\t"{text.replace(chr(34), "")}"x\t{title}')
        elif kind == "columns":
            lines.append(f"{i}\t{text}")
        elif kind == "blank":
            lines.append("")
        else:
            lines.append(f"{want[0][0]}\tdup\tdup" if want else f"\t{text}\t{title}")
    path.write_text("\n".join(lines) + "\n")
    before = snapshot(str(path))
    report = SkipReport()
    try:
        got = list(formats.read_corpus_tsv(path, report=report))
    except DataFormatError as e:   # nothing valid at all
        assert not want and e.reason == "no records"
        return
    assert got == want
    assert len(got) + report.total + 1 == len(lines)
    assert snapshot(str(path)) == before


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(questions=st.lists(st.tuples(st.booleans(), _WORDS), min_size=1, max_size=20))
def test_qa_records_plus_skipped_lines_are_the_lines(questions, tmp_path):
    path = tmp_path / "q.csv"
    lines, want = [], []
    for good, q in questions:
        if good:
            q = _plain(q).strip() or "q"
            lines.append(f"{q}\t['a']")
            want.append((q, ["a"]))
        else:   # a question opening a quote that never closes
            lines.append(f'"{q.replace(chr(34), "")}\t[\'a\']')
    path.write_text("\n".join(lines) + "\n")
    report = SkipReport()
    try:
        got = list(formats.read_qa_csv(path, report=report))
    except DataFormatError as e:
        assert not want and e.reason == "no records"
        return
    assert got == want and len(got) + report.total == len(lines)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 1.0))
def test_a_cut_json_file_is_an_error_or_complete(cut, bench, tmp_path):
    """A biencoder file cut anywhere is a clear error, unless only trailing whitespace went."""
    data = pathlib.Path(bench, FILES["biencoder"]).read_bytes()
    path = tmp_path / "b.json"
    path.write_bytes(data[:int(len(data) * cut)])
    try:
        got = formats.read_biencoder(path, chunk_size=1024)
    except DataFormatError as e:
        assert e.file == str(path) and e.reason in ("truncated file", "no records", "invalid JSON")
        return
    assert not data[int(len(data) * cut):].strip() and got == original("biencoder", bench)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 0.999))
def test_a_cut_gzip_corpus_is_always_an_error(cut, bench, tmp_path):
    data = gzip.compress(pathlib.Path(bench, FILES["corpus"]).read_bytes(), mtime=0)
    path = tmp_path / "c.tsv.gz"
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(DataFormatError) as e:
        list(formats.read_corpus_tsv(path))
    assert e.value.file == str(path)


# ---------------------------------------------------------------------------------- commands
@dataclasses.dataclass(frozen=True)
class CommandCase:
    id: str
    command: str
    mutation: str
    outcome: str       # clear | counted | read
    detail: str        # what the user gets (the docs table's last column)


COMMAND_CASES = [
    CommandCase("retrieval-corpus-quote", "eval_retrieval", "corpus: a text opening with an "
                "unbalanced quote", "counted", "exit 0; 39 of 40 passages, "
                "`corpus_rows_skipped: {unbalanced quote: 1}` in the report"),
    CommandCase("retrieval-corpus-huge", "eval_retrieval", "corpus: a 1 MB passage", "read",
                "exit 0; 40 passages (the long one cut to `max_p_len`)"),
    CommandCase("retrieval-corpus-empty", "eval_retrieval", "corpus: an empty file", "clear",
                "`error: …psgs_synth.tsv: file level: field '<file>': no records…`"),
    CommandCase("retrieval-corpus-header", "eval_retrieval", "corpus: header `pid text title`",
                "clear", "`error: …: line 1: field '<header>': …`"),
    CommandCase("retrieval-qa-directory", "eval_retrieval", "qa: a directory", "clear",
                "`error: data file for config.data.test_file is a directory, expected a file: …`"),
    CommandCase("aar-gold-two-data", "eval_aar", 'gold: two "data" keys', "clear",
                "`error: …: file level: field 'data': a second top-level \"data\" key…`"),
    CommandCase("aar-qa-empty", "eval_aar", "qa: an empty file", "clear",
                "`error: …synth-test.qa.csv: file level: field '<file>': no records…`"),
    CommandCase("stats-missing", "stats", "input: a missing path", "clear",
                "`error: …: no such file or directory`"),
    CommandCase("stats-directory", "stats", "input: a directory", "clear",
                "`error: …: is a directory, expected a file`"),
    CommandCase("stats-empty-list", "stats", "input: `[]`", "clear",
                "`error: …: file level: field '<file>': no records…`"),
    CommandCase("stats-gz-truncated", "stats", "input: gzip cut in half", "clear",
                "`error: …: field '<json>': cannot read file: the gzip stream is truncated…`"),
    CommandCase("prepare-manual-empty-qa", "prepare --manual_dir", "an empty nq-test.qa.csv",
                "clear", "`error: nq-test.qa.csv is corrupted: empty file (0 bytes)…`; "
                "nothing linked, nothing recorded in `checksums.tsv`"),
    CommandCase("main-empty-list", "dense_cf.main", "train file: `[]`", "clear",
                "`error: …: file level: field '<file>': no records…`"),
    CommandCase("main-directory", "dense_cf.main", "train file: a directory", "clear",
                "`error: bad config: data file for config.data.train_file is a directory…`"),
    CommandCase("main-gz-truncated", "dense_cf.main", "train file: gzip cut in half "
                "(as a subprocess)", "clear", "`error: …: cannot read file: the gzip stream is "
                "truncated…`, exit 1, no traceback"),
    CommandCase("main-missing", "dense_cf.main", "train file: a missing path", "clear",
                "`error: bad config: data file for config.data.train_file is missing: …`"),
]
COMMANDS = {c.id: c for c in COMMAND_CASES}


def one_error_line(capsys, path: str) -> str:
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1 and path in errors[0], err[-2000:]
    return errors[0]


@pytest.fixture(scope="module")
def trained(bench, tmp_path_factory) -> str:
    """One tiny trained run on the benchmark, shared by every command case."""
    from dense_cf.experiment import train_and_evaluate
    workdir = str(tmp_path_factory.mktemp("run"))
    train_and_evaluate(tiny_synthetic_config(bench, **{"train.num_steps": 1,
                                                       "eval.after_training": False}), workdir)
    return workdir


def mutated(case_id: str, bench: str, tmp: pathlib.Path) -> str:
    return make(next(c for c in READER_CASES if c.id == case_id), bench, tmp)


def run(module, argv: list[str]) -> int:
    return _app.call(module.main, module.FLAGS, argv, module.__name__)


@pytest.mark.parametrize("case_id,reader_case", [
    ("retrieval-corpus-quote", "corpus-unbalanced-quote"),
    ("retrieval-corpus-huge", "corpus-huge-field"),
    ("retrieval-corpus-empty", "corpus-empty"),
    ("retrieval-corpus-header", "corpus-header-other-names"),
    ("retrieval-qa-directory", "qa-directory"),
])
def test_eval_retrieval(case_id, reader_case, trained, bench, tmp_path, capsys):
    case = COMMANDS[case_id]
    path = mutated(reader_case, bench, tmp_path)
    flag = "--qa" if reader_case.startswith("qa") else "--corpus"
    before = snapshot(bench, str(tmp_path))
    status = run(eval_retrieval, [f"--workdir={trained}", f"{flag}={path}"])
    if case.outcome == "clear":
        assert status == 1
        one_error_line(capsys, path)
    else:
        assert status == 0
        summary = json.loads(capsys.readouterr().out)
        skipped = {"unbalanced quote": 1} if case.outcome == "counted" else {}
        assert summary["corpus_size"] == 40 - sum(skipped.values())
        assert summary["corpus_rows_skipped"] == skipped and summary["n_questions"] == 8
    assert snapshot(bench, str(tmp_path)) == before


@pytest.mark.parametrize("case_id,reader_case,flag", [
    ("aar-gold-two-data", "gold-two-data-keys", "--gold"),
    ("aar-qa-empty", "qa-empty", "--qa"),
])
def test_eval_aar(case_id, reader_case, flag, trained, bench, tmp_path, capsys):
    assert COMMANDS[case_id].outcome == "clear"
    path = mutated(reader_case, bench, tmp_path)
    before = snapshot(bench, str(tmp_path))
    assert run(eval_aar, [f"--workdir={trained}", f"{flag}={path}"]) == 1
    one_error_line(capsys, path)
    assert snapshot(bench, str(tmp_path)) == before


@pytest.mark.parametrize("case_id,reader_case", [
    ("stats-missing", "biencoder-missing"),
    ("stats-directory", "biencoder-directory"),
    ("stats-empty-list", "biencoder-empty-list"),
    ("stats-gz-truncated", "biencoder-gz-truncated"),
])
def test_stats(case_id, reader_case, bench, tmp_path, capsys):
    assert COMMANDS[case_id].outcome == "clear"
    path = mutated(reader_case, bench, tmp_path)
    before = snapshot(bench, str(tmp_path))
    assert run(stats_cli, [f"--input={path}", "--fractions=1.0"]) == 1
    one_error_line(capsys, path)
    assert snapshot(bench, str(tmp_path)) == before


def test_prepare_manual_dir_refuses_an_empty_file(bench, tmp_path, capsys):
    assert COMMANDS["prepare-manual-empty-qa"].outcome == "clear"
    manual, data = tmp_path / "manual", tmp_path / "data"
    manual.mkdir()
    (manual / "nq-test.qa.csv").write_bytes(b"")
    before = snapshot(str(manual))
    argv = ["--datasets=nq", "--splits=test", f"--data_dir={data}", f"--manual_dir={manual}"]
    assert run(prepare, argv) == 1
    line_ = one_error_line(capsys, "nq-test.qa.csv")
    assert "empty file (0 bytes)" in line_
    assert not (data / "nq-test.qa.csv").exists()
    checks = data / "checksums.tsv"
    assert not checks.exists() or "nq-test.qa.csv" not in checks.read_text()
    assert snapshot(str(manual)) == before


@pytest.mark.parametrize("case_id,reader_case", [
    ("main-empty-list", "biencoder-empty-list"),
    ("main-directory", "biencoder-directory"),
    ("main-missing", "biencoder-missing"),
])
def test_training_refuses_a_bad_train_file(case_id, reader_case, bench, tmp_path):
    """What ``dense_cf.main`` runs, in-process: the error is a user error (one line there, as
    ``test_main_as_a_command`` checks) naming the file."""
    from dense_cf.experiment import train_and_evaluate
    assert COMMANDS[case_id].outcome == "clear"
    path = mutated(reader_case, bench, tmp_path)
    cfg = tiny_synthetic_config(bench, **{"train.num_steps": 1, "eval.after_training": False,
                                          "data.train_file": path})
    before = snapshot(bench, str(tmp_path / FILES["biencoder"]))
    with pytest.raises(_app.USER_ERRORS) as info:
        train_and_evaluate(cfg, str(tmp_path / "run"))
    message = _app.user_message(info.value)
    assert path in message and "\n" not in message.split(" (get DPR's files")[0], message
    assert snapshot(bench, str(tmp_path / FILES["biencoder"])) == before


def test_main_as_a_command(bench, tmp_path):
    """``python -m dense_cf.main`` on a truncated gzip train file: one line, exit 1."""
    assert COMMANDS["main-gz-truncated"].outcome == "clear"
    path = mutated("biencoder-gz-truncated", bench, tmp_path)
    config = tmp_path / "cfg.py"
    config.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from helpers import tiny_synthetic_config

        def get_config():
            c = tiny_synthetic_config({bench!r}, **{{"train.num_steps": 1,
                                                    "eval.after_training": False}})
            c.data.train_file = {path!r}
            c.mesh.data = 1
            return c
    """))
    before = snapshot(bench, path)
    env = dict(os.environ, JAX_PLATFORMS="cpu", DENSE_CF_TRACEBACK="0")
    r = subprocess.run([sys.executable, "-m", "dense_cf.main", f"--config={config}",
                        f"--workdir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(errors) == 1 and path in errors[0] and "gzip stream is truncated" in errors[0]
    assert snapshot(bench, path) == before


# ------------------------------------------------------------------------------------- docs
def _where(case: Case) -> str:
    if case.outcome == "read":
        return "every record read" + (" (kept, and warned)" if "warned" in case.mutation else "")
    if case.outcome == "counted":
        reasons = ", ".join(f"{r} ×{n}" for r, n in case.counts.items())
        return f"skipped and counted: {reasons}; the rest read exactly"
    if case.path != "file":
        return "error naming the path: " + {"missing": "no such file or directory",
                                            "directory": "is a directory, expected a file",
                                            "unreadable": "permission denied"}[case.path]
    if case.record is None:
        at = "file level"
    elif case.record == ANY:
        at = "the line" if case.kind in ("corpus", "qa") else "the record"
        at += " where it breaks"
    elif case.kind in ("corpus", "qa", "evidence"):
        at = f"line {case.record}"
    else:
        at = f"record {case.record}"
    return f"error: {at}, field `{case.field}`" + (f" ({case.reason})" if case.reason else "")


def docs_table() -> str:
    rows = ["| case | file | mutation | outcome | what the user gets |", "|---|---|---|---|---|"]
    for c in READER_CASES:
        rows.append(f"| `{c.id}` | {c.kind} | {c.mutation} | {c.outcome} | {_where(c)} |")
    rows += ["", "| case | command | mutation | outcome | what the user gets |",
             "|---|---|---|---|---|"]
    for c in COMMAND_CASES:
        rows.append(f"| `{c.id}` | {c.command} | {c.mutation} | {c.outcome} | {c.detail} |")
    return "\n".join(rows)


def _doc_block(text: str) -> str:
    m = re.search(re.escape(BEGIN) + r"\n(.*)\n" + re.escape(END), text, re.S)
    assert m, f"{DOC} has no {BEGIN} … {END} block"
    return m.group(1)


def test_docs_table_is_current():
    """docs/reliability.md lists every case with its outcome (python tests/test_bad_input.py
    rewrites the table)."""
    assert _doc_block(DOC.read_text()) == docs_table(), "run: python tests/test_bad_input.py"


def test_case_ids_are_unique_and_outcomes_known():
    ids = [c.id for c in READER_CASES] + [c.id for c in COMMAND_CASES]
    assert len(ids) == len(set(ids))
    assert {c.outcome for c in READER_CASES + COMMAND_CASES} <= {"clear", "counted", "read"}
    assert all(c.counts for c in READER_CASES if c.outcome == "counted")


if __name__ == "__main__":
    text = DOC.read_text()
    DOC.write_text(text.replace(_doc_block(text), docs_table()))
    print(f"updated {DOC}")
