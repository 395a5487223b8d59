"""HotpotQA (Yang et al., 2018) in its published JSON form, for multi-hop retrieval (docs/multihop.md).

* :class:`HotpotExample` and :func:`read_hotpot` / :func:`iter_hotpot`: the train / dev / test JSON
  (one list of records ``{_id, question, answer, type, level, supporting_facts, context}``),
  streamed, validated, bad records skipped and counted by reason (``strict=True``: the first one
  raises :class:`~dense_cf.datasets.formats.DataFormatError` naming file, record, ``_id`` and field).
  :func:`write_hotpot` writes the same format.
* :func:`bridge_order`: which supporting passage is the first hop of a bridge question.
* Full-wiki corpus in DPR's TSV (id, text, title), so export / index / eval read it unchanged:
  :func:`write_corpus` (from examples' contexts or (title, sentences) paragraphs),
  :func:`iter_wiki_abstracts` / :func:`wiki_corpus` (HotpotQA's processed Wikipedia abstracts),
  :func:`corpus_titles` (title -> passage id).
* Registry and download (:func:`prepare`), through :mod:`dense_cf.datasets.download`
  (resumable, checksummed, ``manual_dir``); binary ``python -m dense_cf.cli.prepare_hotpot``.

A passage is its sentences concatenated as given: HotpotQA sentences after the first carry
their own leading space (``["Anna Smith is a poet.", " She lives in Leeds."]``).
"""

from __future__ import annotations

import bz2
import dataclasses
import json
import os
import re
import tarfile
from collections import Counter
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union

from absl import logging

from dense_cf import files
from dense_cf.datasets import download, formats
from dense_cf.datasets.formats import DataFormatError, SkipReport
from dense_cf.progress import Progress

__all__ = [
    "TYPES", "HotpotExample", "iter_hotpot", "read_hotpot", "write_hotpot", "bridge_order",
    "bridge_order_rule", "BRIDGE_ORDER_RULES", "iter_paragraphs", "write_corpus", "corpus_titles",
    "iter_wiki_abstracts", "wiki_corpus", "Resource", "RESOURCES", "SPLITS", "DEFAULT_SPLITS",
    "BASE_URL_ENV", "CORPUS_FILE", "select", "file_specs", "prepare",
]

PathLike = Union[str, "os.PathLike[str]"]
TYPES = ("bridge", "comparison")


@dataclasses.dataclass(frozen=True)
class HotpotExample:
    """One HotpotQA record. ``supporting_facts`` are (title, 0-based sentence index); ``context``
    is (title, sentences). A test-set record (no labels) has ``answer``, ``type`` = "" and no
    supporting facts."""

    id: str
    question: str
    answer: str
    type: str
    supporting_facts: tuple[tuple[str, int], ...]
    context: tuple[tuple[str, tuple[str, ...]], ...]
    level: str = ""

    @property
    def supporting_titles(self) -> tuple[str, ...]:
        """Titles of the supporting facts, unique, in order of first appearance."""
        return tuple(dict.fromkeys(t for t, _ in self.supporting_facts))

    def sentences(self, title: str) -> tuple[str, ...]:
        """The sentences of the context paragraph ``title``; KeyError if there is none."""
        for t, sents in self.context:
            if t == title:
                return sents
        raise KeyError(f"HotpotQA example {self.id}: no context paragraph titled {title!r}")

    def passage(self, title: str) -> str:
        """The paragraph ``title`` as one text: its sentences concatenated as given."""
        return "".join(self.sentences(title))

    def supporting_sentences(self, title: str) -> tuple[int, ...]:
        """Sorted unique indices of the supporting sentences in paragraph ``title``."""
        return tuple(sorted({i for t, i in self.supporting_facts if t == title}))

    def counterfactual(self, title: str) -> str:
        """Paragraph ``title`` without its supporting sentences (EADPR's p*), stripped."""
        drop = set(self.supporting_sentences(title))
        return "".join(s for i, s in enumerate(self.sentences(title)) if i not in drop).strip()

    def to_record(self) -> dict[str, Any]:
        """The JSON record as HotpotQA publishes it (labels left out when ``type`` is "")."""
        rec: dict[str, Any] = {"_id": self.id, "question": self.question}
        if self.type:
            rec.update(answer=self.answer, type=self.type,
                       supporting_facts=[[t, i] for t, i in self.supporting_facts])
        if self.level:
            rec["level"] = self.level
        rec["context"] = [[t, list(s)] for t, s in self.context]
        return rec


# ---------------------------------------------------------------------------------------------
# Reading and writing the question files


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _parse(obj: Any, file: str, index: int, *, require_labels: bool,
           support_in_context: bool) -> HotpotExample:
    """One record -> :class:`HotpotExample`; raises DataFormatError (reason = skip category)."""
    rid = obj.get("_id") if isinstance(obj, dict) else None

    def err(field: str, msg: str, reason: str | None = None) -> DataFormatError:
        where = f"_id {rid!r}: " if isinstance(rid, str) else ""
        return DataFormatError(file, index, field, where + msg, reason=reason)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {_type_name(obj)}")

    def get(key: str, kind: type, *, required: bool = True, nonempty: bool = False) -> Any:
        if key not in obj:
            if required:
                raise err(key, "missing", reason=f"missing {key}")
            return None
        value = obj[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise err(key, f"expected {kind.__name__}, got {_type_name(value)}")
        if nonempty and not value.strip():
            raise err(key, "must be a non-empty string")
        return value

    ex_id = get("_id", str, nonempty=True)
    question = get("question", str, nonempty=True)
    answer = get("answer", str, required=require_labels)
    qtype = get("type", str, required=require_labels)
    if qtype is not None and qtype not in TYPES:
        raise err("type", f"expected one of {', '.join(TYPES)}, got {qtype!r:.40}")
    level = get("level", str, required=False) or ""

    raw_ctx = get("context", list)
    context: list[tuple[str, tuple[str, ...]]] = []
    lengths: dict[str, int] = {}
    for i, para in enumerate(raw_ctx):
        name = f"context[{i}]"
        if not (isinstance(para, list) and len(para) == 2 and isinstance(para[0], str)
                and isinstance(para[1], list)):
            raise err(name, f"expected [title, [sentences]], got {json.dumps(para)[:80]}")
        title, sents = para
        for j, s in enumerate(sents):
            if not isinstance(s, str):
                raise err(f"{name}.sentences[{j}]", f"expected a sentence string, got "
                          f"{_type_name(s)}")
        if title in lengths:
            # passage(title) would be ambiguous
            raise err(name, f"title {title!r:.60} appears twice in context",
                      reason="duplicate context title")
        lengths[title] = len(sents)
        context.append((title, tuple(sents)))

    raw_sp = get("supporting_facts", list, required=require_labels)
    facts: list[tuple[str, int]] = []
    for i, sp in enumerate(raw_sp or ()):
        name = f"supporting_facts[{i}]"
        if not (isinstance(sp, list) and len(sp) == 2 and isinstance(sp[0], str)
                and isinstance(sp[1], int) and not isinstance(sp[1], bool) and sp[1] >= 0):
            raise err(name, f"expected [title, sentence index >= 0], got {json.dumps(sp)[:80]}")
        title, k = sp
        if support_in_context:
            if title not in lengths:
                raise err(name, f"title {title!r:.60} is not a context title",
                          reason="support title not in context")
            if k >= lengths[title]:
                raise err(name, f"sentence index {k} out of range: paragraph {title!r:.60} has "
                          f"{lengths[title]} sentence(s)", reason="support index out of range")
        facts.append((title, k))
    if raw_sp is not None:
        titles = list(dict.fromkeys(t for t, _ in facts))
        if len(titles) != 2:
            # HotpotQA has two gold paragraphs per question; the two-hop code relies on it.
            raise err("supporting_facts", f"expected facts from exactly 2 titles, got "
                      f"{len(titles)}", reason="not two supporting titles")
    return HotpotExample(id=ex_id, question=question, answer=answer or "", type=qtype or "",
                         supporting_facts=tuple(facts), context=tuple(context), level=level)


def iter_hotpot(path: PathLike, *, strict: bool = False, require_labels: bool = True,
                support_in_context: bool = True, report: SkipReport | None = None,
                allow_empty: bool = False) -> Iterator[HotpotExample]:
    """Stream the valid records of a HotpotQA JSON file (``.gz`` read too).

    Checked: ``_id`` and ``question`` non-empty strings; ``answer`` (string), ``type`` (bridge |
    comparison) and ``supporting_facts`` present unless ``require_labels=False`` (the test
    set), and checked when present; ``level`` optional; ``context`` a list of [title,
    [sentences]] with unique titles; every supporting fact [title, index] with a context title
    and an index inside that paragraph (``support_in_context=False`` drops this check, for the
    full-wiki dev file whose context is a retrieval result), facts from exactly two titles; no
    repeated key in a record, no ``_id`` repeated from an earlier record (the first is kept).
    Bad records are skipped and counted in ``report`` by reason; ``strict`` raises the first.
    JSON syntax errors and truncation always raise. A file without a valid record is an error
    unless ``allow_empty``.
    """
    file = os.fspath(path)
    rep = report if report is not None else SkipReport()
    seen_ids: set[str] = set()
    seen = valid = 0
    for index, obj, duplicate in formats.iter_json_list(path):
        seen += 1
        try:
            if duplicate is not None:
                raise DataFormatError(file, index, duplicate, f"key {duplicate!r:.40} appears twice "
                                      "in one JSON object", reason="duplicate key")
            ex = _parse(obj, file, index, require_labels=require_labels,
                        support_in_context=support_in_context)
            if ex.id in seen_ids:
                raise DataFormatError(file, index, "_id", f"_id {ex.id!r} repeats an earlier "
                                      "record's (the first is kept)", reason="duplicate _id")
        except DataFormatError as e:
            if strict:
                raise
            rep.add_error(e)
            continue
        seen_ids.add(ex.id)
        valid += 1
        yield ex
    if report is None and rep.total:
        rep.log()
    if not valid and not allow_empty:
        reasons = ", ".join(f"{n} {r}" for (f, r), n in sorted(rep.counts.items()) if f == file)
        raise DataFormatError(file, None, "<file>", f"no valid records: {seen} record(s) read"
                              + (f", skipped: {reasons}" if reasons else ""), reason="no records")


def read_hotpot(path: PathLike, *, strict: bool = False, require_labels: bool = True,
                support_in_context: bool = True) -> tuple[list[HotpotExample], Counter]:
    """All valid records of :func:`iter_hotpot` and the skipped ones counted by reason.

    The skip summary is logged (a warning when anything was skipped)."""
    report = SkipReport()
    examples = list(iter_hotpot(path, strict=strict, require_labels=require_labels,
                                support_in_context=support_in_context, report=report))
    skipped: Counter = Counter()
    for (_, reason), n in report.counts.items():
        skipped[reason] += n
    report.log()
    logging.info("%s: %d HotpotQA examples, %d skipped", os.fspath(path), len(examples),
                 report.total)
    return examples, skipped


def write_hotpot(path: PathLike, examples: Iterable[HotpotExample]) -> int:
    """Write examples as a HotpotQA JSON list, one record per line, atomically; returns the count.

    Each record is checked as :func:`iter_hotpot` reads it (an unlabeled example: as a test
    record) and a bad one raises DataFormatError before anything is renamed into place."""
    file = os.fspath(path)
    n = 0
    with files.atomic_open_gz(path) as f:
        f.write("[")
        for i, ex in enumerate(examples):
            rec = ex.to_record()
            _parse(rec, file, i, require_labels=bool(ex.type), support_in_context=True)
            f.write(",\n" if i else "\n")
            f.write(json.dumps(rec, ensure_ascii=False))
            n = i + 1
        f.write("\n]\n")
    return n


# ---------------------------------------------------------------------------------------------
# Hop order of bridge questions

_PAREN_RE = re.compile(r"\s*\([^()]*\)\s*$")
BRIDGE_ORDER_RULES = ("answer_and_mention", "mention", "answer", "dataset_order", "comparison")


def _name(title: str) -> str:
    """A title without its trailing disambiguation: "Doctor Strange (2016 film)" -> "Doctor Strange"."""
    return _PAREN_RE.sub("", title).strip() or title


def _mentions(text: str, name: str) -> bool:
    """``name`` occurs in ``text`` as whole words, ignoring case."""
    return re.search(r"(?<!\w)" + re.escape(name.lower()) + r"(?!\w)", text.lower()) is not None


def _order(ex: HotpotExample, texts: Mapping[str, str] | None) -> tuple[str, str, str]:
    titles = ex.supporting_titles
    if len(titles) != 2:
        raise ValueError(f"HotpotQA example {ex.id}: expected 2 supporting titles, got {titles}")
    a, b = titles
    if ex.type != "bridge":
        return a, b, "comparison"

    def text(t: str) -> str:
        if texts is not None and t in texts:
            return texts[t]
        try:
            return ex.passage(t)
        except KeyError:  # full-wiki context without this gold paragraph, and no corpus given
            return ""

    in_answer = {t: _mentions(ex.answer, _name(t)) for t in titles}
    mention = {a: _mentions(text(a), _name(b)), b: _mentions(text(b), _name(a))}
    for rule, ok in (("answer_and_mention", lambda t: not in_answer[t] and mention[t]),
                     ("mention", lambda t: mention[t]),
                     ("answer", lambda t: not in_answer[t])):
        hits = [t for t in titles if ok(t)]
        if len(hits) == 1:
            first = hits[0]
            return first, (b if first == a else a), rule
    return a, b, "dataset_order"


def bridge_order(example: HotpotExample, texts: Mapping[str, str] | None = None
                 ) -> tuple[str, str]:
    """(first-hop title, second-hop title) of a question's two supporting passages.

    Bridge questions: the first hop names the bridge entity, which is the second hop's title,
    and the answer lies in the second hop. Rules, first that singles out one passage wins:

    1. ``answer_and_mention``: its title does not appear in the answer and its text mentions
       the other title;
    2. ``mention``: its text mentions the other title;
    3. ``answer``: its title does not appear in the answer;
    4. ``dataset_order``: order of first appearance in ``supporting_facts``.

    A title matches without its trailing parenthesis ("Doctor Strange (2016 film)" matches
    "Doctor Strange"), as whole words, ignoring case. Passage texts come from ``texts`` (title ->
    text, e.g. the corpus) or else the example's context. Comparison questions: dataset order.
    Raises ValueError unless there are exactly two supporting titles.
    """
    first, second, _ = _order(example, texts)
    return first, second


def bridge_order_rule(example: HotpotExample, texts: Mapping[str, str] | None = None) -> str:
    """Which rule of :func:`bridge_order` decided (one of :data:`BRIDGE_ORDER_RULES`)."""
    return _order(example, texts)[2]


# ---------------------------------------------------------------------------------------------
# Full-wiki corpus as DPR TSV

Paragraph = tuple[str, Union[str, Sequence[str]]]
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


def iter_paragraphs(items: Iterable[HotpotExample | Paragraph]) -> Iterator[tuple[str, str]]:
    """(title, text) of every context paragraph of the examples in ``items`` and of every
    (title, sentences) or (title, text) pair in it; sentences are concatenated as given."""
    for item in items:
        if isinstance(item, HotpotExample):
            for title, sents in item.context:
                yield title, "".join(sents)
        else:
            title, body = item
            yield title, body if isinstance(body, str) else "".join(body)


def write_corpus(examples_or_paragraphs: Iterable[HotpotExample | Paragraph], path: PathLike, *,
                 first_id: int = 1) -> tuple[int, Counter]:
    """Write a corpus in DPR's TSV (id, text, title), one passage per unique title.

    Ids are ``first_id``, ``first_id + 1``, ... in order of first appearance. A title seen
    before is not written again: counted as "duplicate title" when its text is the same and
    "conflicting title" (warning; the first text is kept) when it differs. Paragraphs with an
    empty title or text are skipped ("empty title", "empty text"); a line break inside a text is
    replaced by a space ("line break replaced"; a TSV record is one line). Returns (passages
    written, those counts). Memory: one hash per title (about 1 GB for the 5.2M abstracts).
    """
    counts: Counter = Counter()
    seen: dict[str, int] = {}
    progress = Progress(f"corpus {os.fspath(path)}", unit="passages")

    def rows() -> Iterator[tuple[str, str, str]]:
        pid = first_id
        for title, text in iter_paragraphs(examples_or_paragraphs):
            title = title.strip()
            if not title:
                counts["empty title"] += 1
                continue
            if not text.strip():
                counts["empty text"] += 1
                continue
            if "\n" in text or "\r" in text:
                text = _LINE_BREAK_RE.sub(" ", text)
                counts["line break replaced"] += 1
            if "\n" in title or "\r" in title:
                title = _LINE_BREAK_RE.sub(" ", title)
                counts["line break replaced"] += 1
            h = hash(text)
            if title in seen:
                counts["duplicate title" if seen[title] == h else "conflicting title"] += 1
                continue
            seen[title] = h
            yield str(pid), text, title
            pid += 1
            progress.update()

    n = formats.write_corpus_tsv(path, rows())
    progress.done()
    if counts["conflicting title"]:
        logging.warning("%s: %d paragraph(s) repeat a title with a different text; the first "
                        "text is kept", os.fspath(path), counts["conflicting title"])
    logging.info("%s: %d passages written; %s", os.fspath(path), n,
                 ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "nothing skipped")
    return n, counts


def corpus_titles(path: PathLike) -> dict[str, str]:
    """Title -> passage id of a DPR TSV corpus (the first id where a title repeats; repeats are
    counted in a warning), to find a supporting title's passage."""
    out: dict[str, str] = {}
    repeats = 0
    for pid, _, title in formats.read_corpus_tsv(path):
        if title in out:
            repeats += 1
        else:
            out[title] = pid
    if repeats:
        logging.warning("%s: %d passage(s) repeat an earlier title; the first id is kept",
                        os.fspath(path), repeats)
    return out


def _abstract_members(path: str) -> Iterator[tuple[str, Any]]:
    """(name, binary file) of every ``*.bz2`` member of the abstracts archive or directory."""
    if os.path.isdir(path):
        for root, dirs, names in os.walk(path):
            dirs.sort()
            for name in sorted(names):
                if name.endswith(".bz2"):
                    full = os.path.join(root, name)
                    with open(full, "rb") as f:
                        yield full, f
        return
    with tarfile.open(path, "r|*") as tar:  # streamed: the archive is 1.5 GB
        for member in tar:
            if member.isfile() and member.name.endswith(".bz2"):
                yield f"{path}:{member.name}", tar.extractfile(member)


def iter_wiki_abstracts(path: PathLike, *, strict: bool = False,
                        report: SkipReport | None = None) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(title, sentences) of every article in HotpotQA's processed Wikipedia abstracts.

    ``path`` is ``enwiki-20171001-pages-meta-current-withlinks-abstracts.tar.bz2`` itself or
    the directory it extracts to; each ``*/wiki_NN.bz2`` member holds one JSON object per line,
    ``{"id", "url", "title", "text": [sentences of the intro paragraph], "charoffset",
    "text_with_links", "charoffset_with_links"}``. Lines without a string ``title`` or whose
    ``text`` is not a list of strings are bad records (file = archive:member, record = line);
    an article with no intro text is skipped as "empty text". Counted in ``report`` (logged
    at the end without one); ``strict`` raises the first. A damaged bz2 stream always raises.
    """
    rep = report if report is not None else SkipReport()
    for name, fobj in _abstract_members(os.fspath(path)):
        try:
            with bz2.open(fobj, "rb") as lines:
                for number, raw in enumerate(lines, 1):
                    try:
                        yield _parse_abstract(raw, name, number)
                    except DataFormatError as e:
                        if strict:
                            raise
                        rep.add_error(e)
        except (OSError, EOFError) as e:
            raise DataFormatError(name, None, "<file>", f"cannot read the bz2 stream: "
                                  f"{type(e).__name__}: {e}", reason="unreadable file") from e
    if report is None and rep.total:
        rep.log()


def _parse_abstract(raw: bytes, name: str, number: int) -> tuple[str, tuple[str, ...]]:
    def err(field: str, msg: str, reason: str | None = None) -> DataFormatError:
        return DataFormatError(name, number, field, msg, record_kind="line", reason=reason)

    if not raw.strip():
        raise err("<line>", "blank line", reason="blank line")
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise err("<line>", f"not a JSON object: {e}", reason="invalid JSON") from None
    if not isinstance(obj, dict):
        raise err("<line>", f"expected a JSON object, got {_type_name(obj)}")
    title, text = obj.get("title"), obj.get("text")
    if not isinstance(title, str) or not title.strip():
        raise err("title", f"expected a non-empty string, got {_type_name(title)}")
    if not isinstance(text, list) or not all(isinstance(s, str) for s in text):
        raise err("text", "expected a list of sentence strings (the full-text dump has lists of "
                  "paragraphs: use the -abstracts archive)")
    if not "".join(text).strip():
        raise err("text", "no intro text", reason="empty text")
    return title, tuple(text)


def wiki_corpus(src: PathLike, out_path: PathLike) -> tuple[int, Counter]:
    """The abstracts (:func:`iter_wiki_abstracts`) as a DPR TSV corpus (:func:`write_corpus`);
    returns (passages, counts), the abstracts' skips included under their reasons."""
    report = SkipReport()
    n, counts = write_corpus(iter_wiki_abstracts(src, report=report), out_path)
    report.log()
    for (_, reason), k in report.counts.items():
        counts[reason] += k
    return n, counts


# ---------------------------------------------------------------------------------------------
# Registry and download

BASE_URL_ENV = "DENSE_CF_HOTPOT_BASE_URL"
CORPUS_FILE = "hotpot_wiki_abstracts.tsv"  # what prepare_hotpot --corpus writes from "wiki"
_CMU = "http://curtis.ml.cmu.edu/datasets/hotpot/"


@dataclasses.dataclass(frozen=True)
class Resource:
    """One published HotpotQA file; ``size`` / ``md5`` are pinned where HotpotQA publishes them."""

    key: str
    url: str
    desc: str
    size: int | None = None
    md5: str | None = None

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[1]

    def spec(self, base_url: str | None = None) -> download.FileSpec:
        """The download spec; ``base_url`` (a mirror holding every file by name) replaces the host."""
        url = base_url.rstrip("/") + "/" + self.name if base_url else self.url
        return download.FileSpec(name=self.name, url=url, size=self.size, md5=self.md5,
                                 description=self.desc)


RESOURCES: dict[str, Resource] = {r.key: r for r in [
    Resource("train", _CMU + "hotpot_train_v1.1.json",
             "train (90,447 questions; context = 2 gold + 8 distractor paragraphs)"),
    Resource("dev_distractor", _CMU + "hotpot_dev_distractor_v1.json",
             "dev, distractor setting (7,405 questions; context holds both gold paragraphs)"),
    Resource("dev_fullwiki", _CMU + "hotpot_dev_fullwiki_v1.json",
             "dev, full-wiki setting (same questions; context = a retrieval result, gold may be "
             "missing: read with support_in_context=False)"),
    Resource("test_fullwiki", _CMU + "hotpot_test_fullwiki_v1.json",
             "test, full-wiki setting (no labels: read with require_labels=False)"),
    # md5 as published by HotpotQA (hotpotqa.github.io/wiki-readme.html); size as served.
    Resource("wiki", "https://nlp.stanford.edu/projects/hotpotqa/"
             "enwiki-20171001-pages-meta-current-withlinks-abstracts.tar.bz2",
             "Wikipedia 2017-10-01 intro paragraphs, the full-wiki corpus (5.2M articles)",
             size=1_553_565_403, md5="01edf64cd120ecc03a2745352779514c"),
]}
SPLITS = tuple(RESOURCES)
DEFAULT_SPLITS = ("train", "dev_distractor", "dev_fullwiki", "wiki")


def resolve_base_url(flag: str | None = None) -> str | None:
    """``flag``, else ``$DENSE_CF_HOTPOT_BASE_URL``, else None (the published URLs)."""
    return flag or os.environ.get(BASE_URL_ENV) or None


def select(splits: str | Iterable[str]) -> list[Resource]:
    """Resources for ``splits`` (a comma list or names; "all"); ValueError lists valid names."""
    items = splits.split(",") if isinstance(splits, str) else list(splits)
    names = [s.strip().lower() for s in items if s.strip()]
    if "all" in names:
        names = list(SPLITS)
    bad = [s for s in names if s not in RESOURCES]
    if bad or not names:
        raise ValueError(f"unknown HotpotQA split(s) {bad}; splits: {', '.join(SPLITS)} (or all)")
    return [RESOURCES[s] for s in dict.fromkeys(names)]


def file_specs(splits: str | Iterable[str], base_url: str | None = None
               ) -> list[download.FileSpec]:
    base = resolve_base_url(base_url)
    return [r.spec(base) for r in select(splits)]


def prepare(data_dir: str, splits: str | Iterable[str] = DEFAULT_SPLITS, *,
            manual_dir: str | None = None, base_url: str | None = None, force: bool = False,
            verify: str = "size", opts: download.DownloadOptions = download.DownloadOptions()
            ) -> dict[str, str]:
    """Fetch the selected files into ``data_dir`` (resumable, verified, recorded in
    ``checksums.tsv``; ``manual_dir``: offline); returns ``{file name: local path}``."""
    return download.fetch_all(file_specs(splits, base_url), data_dir, manual_dir=manual_dir,
                              force=force, verify=verify, opts=opts)
