"""TFDS builder for HotpotQA (docs/multihop.md, docs/datasets.md): ``hotpot_retriever/<config>``.

Configs:

* ``distractor``: ``train`` and ``validation`` (the distractor dev file: both gold paragraphs in
  the context).
* ``fullwiki``: ``train``, ``validation`` (the full-wiki dev file, whose context is a retrieval
  result, so supporting facts are not checked against it) and ``test`` (no labels).

Each example is one HotpotQA record with its nested structure kept: ``id``, ``question``,
``answer``, ``type``, ``level``, ``supporting_facts`` (title, sentence index) and ``context``
(title, sentences). The raw files come through :mod:`dense_cf.datasets.hotpotqa`'s registry and
:mod:`dense_cf.datasets.download` (resumable; base URL from the ``base_url`` builder kwarg or
``$DENSE_CF_HOTPOT_BASE_URL``), or, offline, from TFDS' ``manual_dir``. Records are read by
``hotpotqa.iter_hotpot``: bad ones are skipped, counted and logged, never dropped silently.

    builder = HotpotRetriever(config="distractor", data_dir="~/tensorflow_datasets")
    builder.download_and_prepare()
    ds = builder.as_dataset(split="validation")
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator

import numpy as np
import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from dense_cf.datasets import download, hotpotqa
from dense_cf.datasets.dpr_tfds import manual_dir_or_none
from dense_cf.datasets.formats import SkipReport

__all__ = ["HotpotConfig", "HotpotRetriever", "example_features"]

_CITATION = """@inproceedings{yang-etal-2018-hotpotqa,
  title = {{H}otpot{QA}: A Dataset for Diverse, Explainable Multi-hop Question Answering},
  author = {Yang, Zhilin and Qi, Peng and Zhang, Saizheng and Bengio, Yoshua and Cohen, William
            and Salakhutdinov, Ruslan and Manning, Christopher D.},
  booktitle = {EMNLP},
  year = {2018}}"""


@dataclasses.dataclass
class HotpotConfig(tfds.core.BuilderConfig):
    """``splits``: (TFDS split, hotpotqa.RESOURCES key) pairs."""

    splits: tuple[tuple[str, str], ...] = ()


def _configs() -> list[HotpotConfig]:
    return [
        HotpotConfig(name="distractor", description="train + distractor dev",
                     splits=(("train", "train"), ("validation", "dev_distractor"))),
        HotpotConfig(name="fullwiki", description="train + full-wiki dev + full-wiki test",
                     splits=(("train", "train"), ("validation", "dev_fullwiki"),
                             ("test", "test_fullwiki"))),
    ]


def example_features(ex: hotpotqa.HotpotExample) -> dict[str, Any]:
    """One record as this builder's features (nested lists kept)."""
    return {"id": ex.id, "question": ex.question, "answer": ex.answer, "type": ex.type,
            "level": ex.level,
            "supporting_facts": {"title": [t for t, _ in ex.supporting_facts],
                                 "sent_id": [int(i) for _, i in ex.supporting_facts]},
            "context": {"title": [t for t, _ in ex.context],
                        "sentences": [list(s) for _, s in ex.context]}}


# Same reason as dpr_tfds: a copy run as ``__main__`` must not claim the registry name.
class HotpotRetriever(tfds.core.GeneratorBasedBuilder, skip_registration=__name__ == "__main__"):
    """HotpotQA questions as TFDS; see the module docstring."""

    code_path = epath.Path(__file__)  # as in dpr_tfds: no TFDS checksums file is used
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "HotpotQA v1.1 train and v1 dev/test as published (dense_cf)."}
    BUILDER_CONFIGS = _configs()
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Optional (for machines without internet): put HotpotQA's JSON files in manual_dir "
        "under their published names (hotpot_train_v1.1.json, hotpot_dev_distractor_v1.json, "
        "hotpot_dev_fullwiki_v1.json, hotpot_test_fullwiki_v1.json). "
        "`python -m dense_cf.cli.prepare_hotpot --list` lists the URLs.")

    def __init__(self, *, base_url: str | None = None, raw_dir: str | None = None,
                 download_options: download.DownloadOptions | None = None, **kwargs: Any) -> None:
        """``base_url``: a mirror holding the files by name; ``raw_dir``: where raw files are
        kept (default ``<download_dir>/hotpotqa``; pass a ``prepare_hotpot --data_dir`` to
        reuse files already there)."""
        self._base_url = base_url
        self._raw_dir = raw_dir
        self._download_options = download_options or download.DownloadOptions()
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        text = tfds.features.Text
        features = tfds.features.FeaturesDict({
            "id": text(), "question": text(), "answer": text(), "type": text(), "level": text(),
            "supporting_facts": tfds.features.Sequence({"title": text(), "sent_id": np.int32}),
            "context": tfds.features.Sequence({"title": text(),
                                               "sentences": tfds.features.Sequence(text())}),
        })
        return self.dataset_info_from_configs(
            description="HotpotQA multi-hop questions (Yang et al., 2018) with their paragraphs.",
            features=features, homepage="https://hotpotqa.github.io", citation=_CITATION)

    def _split_generators(self, dl_manager):
        splits = dict(self.builder_config.splits)
        raw_dir = self._raw_dir or os.path.join(os.fspath(dl_manager.download_dir), "hotpotqa")
        specs = {split: hotpotqa.file_specs([key], self._base_url)[0]
                 for split, key in splits.items()}
        paths = download.fetch_all(list(specs.values()), raw_dir,
                                   manual_dir=manual_dir_or_none(
                                       dl_manager, self.MANUAL_DOWNLOAD_INSTRUCTIONS),
                                   opts=self._download_options)
        return {split: self._generate_examples(paths[spec.name], splits[split])
                for split, spec in specs.items()}

    def _generate_examples(self, path: str, key: str) -> Iterator[tuple[str, dict]]:
        report = SkipReport()
        # The full-wiki dev context is a retrieval result (gold may be missing); test has no labels.
        for ex in hotpotqa.iter_hotpot(path, report=report,
                                       require_labels=key != "test_fullwiki",
                                       support_in_context=key != "dev_fullwiki"):
            yield ex.id, example_features(ex)
        logging.info("%s %s: read %s; %s", self.builder_config.name, key, path,
                     report.summary().replace("\n", "; "))
        if report.total:
            report.log()
