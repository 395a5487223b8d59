"""Evaluation corpora and question files.

:class:`Corpus` reads a corpus whole (the robustness, marginalisation and multi-hop evaluations
index its lists); :class:`StoredCorpus` streams one from its passage store
(:mod:`dense_cf.index.passage_store`) so that retrieval evaluation holds row offsets, never the
texts: ``psgs_w100`` is 13 GB as TSV (docs/scale.md "End to end at scale"). Both give ``rows()``
in corpus order for export and ``get(row)`` for the passages a search returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterator

from absl import logging

from dense_cf.datasets.formats import SkipReport, read_corpus_tsv, read_qa_csv
from dense_cf.index.passage_store import PassageStore, open_store

__all__ = ["Corpus", "StoredCorpus", "load_corpus", "open_corpus", "load_qa"]


@dataclasses.dataclass
class Corpus:
    ids: list[str]
    texts: list[str]
    titles: list[str]
    path: str | None = None  # where it was read from: named in manifests and errors
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)  # reason -> rows (duplicate id...)

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self):
        return zip(self.ids, self.texts, self.titles)

    def get(self, row: int) -> tuple[str, str, str]:
        """(id, title, text) of row ``row``."""
        return self.ids[row], self.titles[row], self.texts[row]


class StoredCorpus:
    """A corpus read through its passage store: ``rows()`` streams (id, text, title) in corpus
    order, ``get(row)`` reads one passage from the memory-mapped store; memory holds the store's
    offsets (8 bytes a row), not the texts."""

    def __init__(self, store: PassageStore, path: str | None = None,
                 skipped: dict[str, int] | None = None) -> None:
        self.store = store
        self.path = path  # the corpus file: named in manifests and errors
        self.skipped = dict(skipped or {})

    def __len__(self) -> int:
        return len(self.store)

    def rows(self) -> Iterator[tuple[str, str, str]]:
        return self.store.rows()

    def get(self, row: int) -> tuple[str, str, str]:
        """(id, title, text) of row ``row``."""
        return self.store.get(row)


def load_corpus(path: str) -> Corpus:
    """The whole corpus in memory; bad rows are skipped, counted and logged."""
    report = SkipReport()
    ids, texts, titles = [], [], []
    for pid, text, title in read_corpus_tsv(path, skip_bad=True, report=report):
        ids.append(pid)
        texts.append(text)
        titles.append(title)
    if report.total:
        report.log()
    logging.info("corpus %s: %d passages, %d rows skipped", path, len(ids), report.total)
    skipped = {reason: n for (_, reason), n in sorted(report.counts.items())}
    return Corpus(ids, texts, titles, path=os.path.abspath(path), skipped=skipped)


def open_corpus(path: str, store_dir: str, *, skip_bad: bool = True,
                rebuild_changed: bool = False) -> StoredCorpus:
    """The corpus TSV ``path`` through its passage store in ``store_dir``, written on first use in
    one streamed pass (bad rows skipped, counted and logged; ``skip_bad=False`` raises naming the
    file, line and field). A store of a file of other content is an error
    (``index.passage_store.CorpusChangedError``), or rebuilt with ``rebuild_changed``."""
    report = SkipReport()
    store = open_store(path, store_dir, skip_bad=skip_bad, report=report,
                       rebuild_changed=rebuild_changed)
    if report.total:
        report.log()
    # A reused store's skip counts are in its record, not in this call's (empty) report.
    with open(os.path.join(store_dir, "store.json")) as f:
        skipped = json.load(f).get("skipped_by_reason", {})
    logging.info("corpus %s: %d passages (store %s), %d rows skipped", path, len(store),
                 store_dir, sum(skipped.values()))
    return StoredCorpus(store, os.path.abspath(path), skipped)


def load_qa(path: str) -> tuple[list[str], list[list[str]]]:
    """Questions and their answer lists; bad rows are skipped, counted and logged."""
    report = SkipReport()
    qs, ans = [], []
    for q, a in read_qa_csv(path, skip_bad=True, report=report):
        qs.append(q)
        ans.append(a)
    if report.total:
        report.log()
    logging.info("questions %s: %d, %d rows skipped", path, len(qs), report.total)
    return qs, ans
