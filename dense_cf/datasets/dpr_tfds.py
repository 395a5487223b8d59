"""TFDS builder for DPR's retriever data (docs/method.md §8): ``dpr_retriever/<config>``.

Configs (one per DPR dataset, plus NQ gold info and the Wikipedia corpus):

* ``nq``, ``trivia``, ``squad1``, ``webq``, ``curatedtrec``: ``train`` / ``validation`` from the
  biencoder files (question, answers, positive/negative/hard-negative ctxs) and ``test`` from the
  test qa csv (question, answers; the ctx lists are empty).
* ``nq_gold``: ``train`` / ``validation`` / ``test`` gold passage info (question,
  question_tokens, title, context, example_id).
* ``psgs_w100``: the 21M-passage corpus as ``train`` (id, text, title).

The raw files come through :mod:`dense_cf.datasets.dpr` / :mod:`dense_cf.datasets.download`
(resumable, checksummed; base URL from the ``base_url`` builder kwarg or
``$DENSE_CF_DPR_BASE_URL``), or, offline, from TFDS' ``manual_dir``
(``tfds.download.DownloadConfig(manual_dir=...)``), which may hold our file names or DPR's own
``downloads/`` tree. Examples are produced by the streaming readers of
:mod:`dense_cf.datasets.formats`; bad records are skipped, counted and logged, never dropped silently.

    builder = DprRetriever(config="nq", data_dir="~/tensorflow_datasets")
    builder.download_and_prepare()
    ds = builder.as_dataset(split="train")

or ``python -m dense_cf.cli.prepare_tfds --config nq --data_dir DIR [--manual_dir M]``.
Missing optional fields are encoded as ``passage_id=""`` and ``score=NaN``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Iterator, Sequence

import numpy as np
import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from dense_cf.datasets import download, formats
from dense_cf.datasets import dpr as prepare

__all__ = ["DprConfig", "DprRetriever", "manual_dir_or_none"]

_CITATION = """@inproceedings{karpukhin-etal-2020-dense,
  title = {Dense Passage Retrieval for Open-Domain Question Answering},
  author = {Karpukhin, Vladimir and O{\\u{g}}uz, Barlas and Min, Sewon and Lewis, Patrick and
            Wu, Ledell and Edunov, Sergey and Chen, Danqi and Yih, Wen-tau},
  booktitle = {EMNLP},
  year = {2020}}"""


def manual_dir_or_none(dl_manager: Any, instructions: str) -> str | None:
    """The user's TFDS manual_dir, or None to download (TFDS' default one is absent/empty); an
    explicitly given manual_dir that is missing or empty is an error quoting ``instructions``."""
    try:
        return os.fspath(dl_manager.manual_dir)
    except AssertionError:
        # TFDS raises this for a missing/empty manual dir; an explicitly given one (not the
        # default <download_dir>/manual) must not silently turn into a download.
        given = getattr(dl_manager, "_manual_dir", None)
        default = os.path.join(os.fspath(dl_manager.download_dir), "manual")
        if given is not None and os.fspath(given) != default:
            raise download.ManualFilesMissingError(
                f"manual_dir {given} does not exist or is empty. " + instructions, []) from None
        return None


@dataclasses.dataclass
class DprConfig(tfds.core.BuilderConfig):
    """``kind`` is "biencoder", "gold" or "corpus"; ``dataset`` a key of prepare.DATASETS."""

    kind: str = "biencoder"
    dataset: str = "nq"


_DATASET_DESC = {
    "nq": "Natural Questions", "trivia": "TriviaQA", "squad1": "SQuAD 1.1",
    "webq": "WebQuestions", "curatedtrec": "CuratedTREC (answers are regular expressions)",
}


def _configs() -> list[DprConfig]:
    out = [DprConfig(name=d, description=f"{desc}: DPR biencoder train/dev and test questions",
                     kind="biencoder", dataset=d) for d, desc in _DATASET_DESC.items()]
    out.append(DprConfig(name="nq_gold", description="NQ gold passage info (AAR triplets)",
                         kind="gold", dataset="nq"))
    out.append(DprConfig(name="psgs_w100", description="DPR's Wikipedia split into 100-word "
                         "passages (21,015,324)", kind="corpus", dataset=""))
    return out


def _ctx_feature() -> tfds.features.Sequence:
    return tfds.features.Sequence({
        "title": tfds.features.Text(), "text": tfds.features.Text(),
        "passage_id": tfds.features.Text(), "score": tfds.features.Scalar(dtype=np.float32),
    })


def _ctxs(passages: Sequence[formats.Passage]) -> dict[str, list]:
    return {
        "title": [p.title for p in passages], "text": [p.text for p in passages],
        "passage_id": [p.passage_id or "" for p in passages],
        "score": [math.nan if p.score is None else float(p.score) for p in passages],
    }


# Run as ``python -m dense_cf.datasets.dpr_tfds`` (an alias of ``dense_cf.cli.prepare_tfds``), this
# file is ``__main__``: its copy of the class must not claim the registry name, which the
# importable module's class registers.
class DprRetriever(tfds.core.GeneratorBasedBuilder, skip_registration=__name__ == "__main__"):
    """DPR retriever data (docs/method.md §8) as TFDS; see the module docstring."""

    # TFDS derives this via importlib_resources (not a dependency here); it only locates an
    # optional TFDS checksums.tsv beside the module, which we do not use (download.py verifies).
    code_path = epath.Path(__file__)
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "DPR's retriever data as published (dense_cf)."}
    BUILDER_CONFIGS = _configs()
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Optional (for machines without internet): put DPR's files in manual_dir under their "
        "published names (e.g. biencoder-nq-train.json.gz, nq-test.qa.csv, "
        "nq-test_gold_info.json.gz, psgs_w100.tsv.gz; uncompressed or gzipped), or point "
        "manual_dir at a tree made by DPR's download_data.py (downloads/data/...). "
        "`python -m dense_cf.cli.prepare --list --datasets all --splits all` lists the URLs.")

    def __init__(self, *, base_url: str | None = None, raw_dir: str | None = None,
                 download_options: download.DownloadOptions | None = None, **kwargs: Any) -> None:
        """``base_url``: DPR mirror (default ``$DENSE_CF_DPR_BASE_URL`` or DPR's bucket);
        ``raw_dir``: where raw files are kept (default ``<download_dir>/dpr``; pass a
        ``prepare --data_dir`` to reuse files already there)."""
        self._base_url = base_url
        self._raw_dir = raw_dir
        self._download_options = download_options or download.DownloadOptions()
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        kind = self.builder_config.kind
        if kind == "biencoder":
            features = tfds.features.FeaturesDict({
                "question": tfds.features.Text(),
                "answers": tfds.features.Sequence(tfds.features.Text()),
                "positive_ctxs": _ctx_feature(), "negative_ctxs": _ctx_feature(),
                "hard_negative_ctxs": _ctx_feature(),
            })
        elif kind == "gold":
            features = tfds.features.FeaturesDict({
                k: tfds.features.Text()
                for k in ("question", "question_tokens", "title", "context", "example_id")})
        else:
            features = tfds.features.FeaturesDict({
                "id": tfds.features.Text(), "text": tfds.features.Text(),
                "title": tfds.features.Text()})
        return self.dataset_info_from_configs(
            description="DPR's retriever training/evaluation data (Karpukhin et al., 2020).",
            features=features, homepage="https://github.com/facebookresearch/DPR",
            citation=_CITATION)

    # -- raw files -------------------------------------------------------------------------

    def _split_resources(self) -> dict[str, list[prepare.Resource]]:
        cfg = self.builder_config
        if cfg.kind == "corpus":
            return {"train": prepare.select("nq", "corpus")}
        if cfg.kind == "gold":
            gold = {os.path.basename(r.path): r for r in prepare.select(cfg.dataset, "gold")}
            return {split: [gold[f"{cfg.dataset}-{src}_gold_info.json.gz"]]
                    for split, src in (("train", "train"), ("validation", "dev"),
                                       ("test", "test"))}
        return {"train": prepare.select(cfg.dataset, "train"),
                "validation": prepare.select(cfg.dataset, "dev"),
                "test": prepare.select(cfg.dataset, "test")}

    def _split_generators(self, dl_manager):
        resources = self._split_resources()
        raw_dir = self._raw_dir or os.path.join(os.fspath(dl_manager.download_dir), "dpr")
        base = prepare.resolve_base_url(self._base_url)
        specs = {s: prepare.file_specs(rs, base) for s, rs in resources.items()}
        paths = download.fetch_all([sp for ss in specs.values() for sp in ss], raw_dir,
                                   manual_dir=manual_dir_or_none(
                                       dl_manager, self.MANUAL_DOWNLOAD_INSTRUCTIONS),
                                   opts=self._download_options)
        return {split: self._generate_examples(paths[ss[0].name], split)
                for split, ss in specs.items()}

    # -- examples --------------------------------------------------------------------------

    def _generate_examples(self, path: str, split: str) -> Iterator[tuple[int, dict]]:
        report = formats.SkipReport()
        kind = self.builder_config.kind
        n = 0
        if kind == "corpus":
            for n, (pid, text, title) in enumerate(
                    formats.read_corpus_tsv(path, skip_bad=True, report=report)):
                yield n, {"id": pid, "text": text, "title": title}
        elif kind == "gold":
            for n, rec in enumerate(formats.read_gold_info(path, skip_bad=True, report=report)):
                yield n, {"question": rec["question"], "title": rec["title"],
                          "context": rec["context"],
                          "question_tokens": _as_text(rec.get("question_tokens")),
                          "example_id": _as_text(rec.get("example_id"))}
        elif split == "test":
            empty = _ctxs([])
            for n, (question, answers) in enumerate(
                    formats.read_qa_csv(path, skip_bad=True, report=report)):
                yield n, {"question": question, "answers": answers, "positive_ctxs": empty,
                          "negative_ctxs": empty, "hard_negative_ctxs": empty}
        else:
            for n, ex in enumerate(formats.iter_biencoder(path, skip_bad=True, report=report)):
                yield n, {"question": ex.question, "answers": ex.answers,
                          "positive_ctxs": _ctxs(ex.positive_ctxs),
                          "negative_ctxs": _ctxs(ex.negative_ctxs),
                          "hard_negative_ctxs": _ctxs(ex.hard_negative_ctxs)}
        logging.info("%s %s: read %s; %s", self.builder_config.name, split, path,
                     report.summary().replace("\n", "; "))
        if report.total:
            report.log()


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # question_tokens is sometimes a token list
        return " ".join(map(str, value))
    return str(value)


if __name__ == "__main__":  # the design card's command; its binary is cli/prepare_tfds.py
    from dense_cf import app
    from dense_cf.cli import prepare_tfds
    app.run(prepare_tfds.main, prepare_tfds.FLAGS, prepare_tfds.USAGE)
