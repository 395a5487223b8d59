"""Evaluation corpora and question files, read whole (texts are needed for ``has_answer``)."""

from __future__ import annotations

import dataclasses
import os

from absl import logging

from dense_cf.datasets.formats import SkipReport, read_corpus_tsv, read_qa_csv

__all__ = ["Corpus", "load_corpus", "load_qa"]


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
