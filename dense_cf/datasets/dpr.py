"""Fetch DPR's retriever data (docs/method.md §8) into the raw layout the pipeline reads.

    python -m dense_cf.cli.prepare --datasets nq --splits train,dev,test,gold,corpus \\
        --data_dir data/dpr [--manual_dir DIR] [--base_url URL]

Files keep their published names (``biencoder-nq-train.json.gz``, ``nq-test.qa.csv``,
``nq-test_gold_info.json.gz``, ``psgs_w100.tsv.gz``...), which are ``config.data.*``'s defaults,
so ``--config.data.data_dir=DIR`` is all a training or evaluation run needs. The readers in
:mod:`dense_cf.datasets.formats` read ``.gz`` directly; ``--gunzip`` is only for other tools.

The registry mirrors the retriever-data part of DPR's ``dpr/data/download_data.py``
``RESOURCES_MAP`` (same keys and URLs). DPR publishes no checksums, so nothing is pinned
(:data:`PINNED` is where known ones go): each file is verified on download (length, the S3
ETag md5 when present, a full gzip CRC decode) and its size/sha256/md5 recorded in
``DATA_DIR/checksums.tsv``; later runs verify against that record (see
:mod:`dense_cf.datasets.download`).

The base URL (default ``https://dl.fbaipublicfiles.com/dpr/``) is overridable with
``--base_url`` or the ``DENSE_CF_DPR_BASE_URL`` environment variable (a mirror, or a localhost
server in tests).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable

from absl import app, logging

from dense_cf.datasets import download

__all__ = ["DEFAULT_BASE_URL", "BASE_URL_ENV", "Resource", "RESOURCES", "DATASETS", "SPLITS",
           "PINNED", "resolve_base_url", "dataset_names", "select", "file_specs", "prepare",
           "config_overrides", "resolve_data_file"]

DEFAULT_BASE_URL = "https://dl.fbaipublicfiles.com/dpr/"
BASE_URL_ENV = "DENSE_CF_DPR_BASE_URL"


@dataclasses.dataclass(frozen=True)
class Resource:
    """One DPR file: ``key`` as in DPR's RESOURCES_MAP, ``path`` relative to the base URL.

    ``original_ext`` is the extension DPR's own downloader gives the (uncompressed) file under
    ``downloads/<key with dots as slashes>``, so a tree made by DPR's tool works as manual_dir.
    """

    key: str
    path: str
    original_ext: str
    desc: str

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def dpr_layout_name(self) -> str:
        return os.path.join("downloads", *self.key.split(".")) + self.original_ext

    def spec(self, base_url: str) -> download.FileSpec:
        pinned = PINNED.get(self.name, {})
        dpr = self.dpr_layout_name()
        return download.FileSpec(
            name=self.name, url=base_url.rstrip("/") + "/" + self.path,
            size=pinned.get("size"), sha256=pinned.get("sha256"), md5=pinned.get("md5"),
            # DPR's tool stores files uncompressed; accept its tree with or without downloads/.
            manual_names=((dpr, False), (dpr[len("downloads/"):], False)),
            description=self.desc)


def _r(key: str, path: str, ext: str, desc: str) -> Resource:
    return Resource(key, path, ext, desc)


_RET = "data/retriever/"
# Retriever data of DPR's RESOURCES_MAP (keys and paths as published there).
RESOURCES: dict[str, Resource] = {r.key: r for r in [
    _r("data.wikipedia_split.psgs_w100", "wikipedia_split/psgs_w100.tsv.gz", ".tsv",
       "Wikipedia (Dec. 2018) split into 21,015,324 passages of 100 words"),
    _r("data.retriever.nq-train", _RET + "biencoder-nq-train.json.gz", ".json",
       "NQ train with positive/negative/BM25 hard-negative passages"),
    _r("data.retriever.nq-dev", _RET + "biencoder-nq-dev.json.gz", ".json",
       "NQ dev with passage pools"),
    _r("data.retriever.nq-adv-hn-train", _RET + "biencoder-nq-adv-hn-train.json.gz", ".json",
       "NQ train with hard negatives mined by the DPR NQ model"),
    _r("data.retriever.trivia-train", _RET + "biencoder-trivia-train.json.gz", ".json",
       "TriviaQA train with passage pools"),
    _r("data.retriever.trivia-dev", _RET + "biencoder-trivia-dev.json.gz", ".json",
       "TriviaQA dev with passage pools"),
    _r("data.retriever.squad1-train", _RET + "biencoder-squad1-train.json.gz", ".json",
       "SQuAD 1.1 train with passage pools"),
    _r("data.retriever.squad1-dev", _RET + "biencoder-squad1-dev.json.gz", ".json",
       "SQuAD 1.1 dev with passage pools"),
    _r("data.retriever.webq-train", _RET + "biencoder-webquestions-train.json.gz", ".json",
       "WebQuestions train with passage pools"),
    _r("data.retriever.webq-dev", _RET + "biencoder-webquestions-dev.json.gz", ".json",
       "WebQuestions dev with passage pools"),
    _r("data.retriever.curatedtrec-train", _RET + "biencoder-curatedtrec-train.json.gz", ".json",
       "CuratedTREC train with passage pools"),
    _r("data.retriever.curatedtrec-dev", _RET + "biencoder-curatedtrec-dev.json.gz", ".json",
       "CuratedTREC dev with passage pools"),
    _r("data.retriever.qas.nq-test", _RET + "nq-test.qa.csv", ".csv", "NQ test questions"),
    _r("data.retriever.qas.nq-dev", _RET + "nq-dev.qa.csv", ".csv", "NQ dev questions"),
    _r("data.retriever.qas.nq-train", _RET + "nq-train.qa.csv", ".csv", "NQ train questions"),
    _r("data.retriever.qas.trivia-test", _RET + "trivia-test.qa.csv.gz", ".csv",
       "TriviaQA test questions"),
    _r("data.retriever.qas.trivia-dev", _RET + "trivia-dev.qa.csv.gz", ".csv",
       "TriviaQA dev questions"),
    _r("data.retriever.qas.trivia-train", _RET + "trivia-train.qa.csv.gz", ".csv",
       "TriviaQA train questions"),
    _r("data.retriever.qas.squad1-test", _RET + "squad1-test.qa.csv", ".csv",
       "SQuAD 1.1 test questions"),
    _r("data.retriever.qas.webq-test", _RET + "webquestions-test.qa.csv", ".csv",
       "WebQuestions test questions"),
    _r("data.retriever.qas.curatedtrec-test", _RET + "curatedtrec-test.qa.csv", ".csv",
       "CuratedTREC test questions (answers are regexes: answer_mode='regex')"),
    _r("data.gold_passages_info.nq_train", "data/nq_gold_info/nq-train_gold_info.json.gz",
       ".json", "NQ train gold passages (AAR triplets)"),
    _r("data.gold_passages_info.nq_dev", "data/nq_gold_info/nq-dev_gold_info.json.gz", ".json",
       "NQ dev gold passages"),
    _r("data.gold_passages_info.nq_test", "data/nq_gold_info/nq-test_gold_info.json.gz",
       ".json", "NQ test gold passages (the AAR evaluation triplets)"),
]}

# Known-good checksums by file name ({"size": int, "sha256": str, "md5": str}); DPR publishes
# none, so this starts empty and checksums.tsv (trust on first use) does the verifying.
PINNED: dict[str, dict] = {}

# dataset -> split -> resource keys. "train"/"dev": biencoder files; "test": the test qa csv;
# "gold": NQ gold passage info (train/dev/test); "qa": the train/dev qa csvs where published;
# "adv_hn": NQ's adversarial hard-negative train file; "corpus" is dataset-independent.
DATASETS: dict[str, dict[str, tuple[str, ...]]] = {
    "nq": {"train": ("data.retriever.nq-train",), "dev": ("data.retriever.nq-dev",),
           "test": ("data.retriever.qas.nq-test",),
           "gold": ("data.gold_passages_info.nq_train", "data.gold_passages_info.nq_dev",
                    "data.gold_passages_info.nq_test"),
           "qa": ("data.retriever.qas.nq-train", "data.retriever.qas.nq-dev"),
           "adv_hn": ("data.retriever.nq-adv-hn-train",)},
    "trivia": {"train": ("data.retriever.trivia-train",), "dev": ("data.retriever.trivia-dev",),
               "test": ("data.retriever.qas.trivia-test",),
               "qa": ("data.retriever.qas.trivia-train", "data.retriever.qas.trivia-dev")},
    "squad1": {"train": ("data.retriever.squad1-train",), "dev": ("data.retriever.squad1-dev",),
               "test": ("data.retriever.qas.squad1-test",)},
    "webq": {"train": ("data.retriever.webq-train",), "dev": ("data.retriever.webq-dev",),
             "test": ("data.retriever.qas.webq-test",)},
    "curatedtrec": {"train": ("data.retriever.curatedtrec-train",),
                    "dev": ("data.retriever.curatedtrec-dev",),
                    "test": ("data.retriever.qas.curatedtrec-test",)},
}
CORPUS_KEY = "data.wikipedia_split.psgs_w100"
SPLITS = ("train", "dev", "test", "gold", "qa", "adv_hn", "corpus")
DEFAULT_SPLITS = ("train", "dev", "test", "gold", "corpus")
ALIASES = {"squad": "squad1", "triviaqa": "trivia", "webquestions": "webq", "trec": "curatedtrec",
           "curated_trec": "curatedtrec"}


def resolve_base_url(flag: str | None = None) -> str:
    """``flag``, else ``$DENSE_CF_DPR_BASE_URL``, else DPR's public bucket."""
    url = flag or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def _split_list(value: str | Iterable[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return [i.strip().lower() for i in items if i.strip()]


def dataset_names(datasets: str | Iterable[str]) -> list[str]:
    """``datasets`` (a comma list or names) with aliases resolved, "all" expanded, no repeats."""
    ds = [ALIASES.get(d, d) for d in _split_list(datasets)]
    return list(DATASETS) if "all" in ds else list(dict.fromkeys(ds))


def select(datasets: str | Iterable[str], splits: str | Iterable[str]) -> list[Resource]:
    """Resources for ``datasets`` x ``splits`` (deduplicated, registry order kept).

    A split a dataset does not publish (e.g. ``gold`` for TriviaQA) is skipped with a log line;
    an unknown dataset or split name raises ValueError listing the valid ones.
    """
    ds = dataset_names(datasets)
    sp = _split_list(splits)
    quiet = "all" in sp  # "all" means "whatever each dataset publishes": no skip messages
    if quiet:
        sp = list(SPLITS)
    bad_ds = [d for d in ds if d not in DATASETS]
    bad_sp = [s for s in sp if s not in SPLITS]
    if bad_ds or bad_sp:
        raise ValueError(
            (f"unknown dataset(s) {bad_ds}; " if bad_ds else "")
            + (f"unknown split(s) {bad_sp}; " if bad_sp else "")
            + f"datasets: {', '.join(DATASETS)} (or all); splits: {', '.join(SPLITS)} (or all)")
    keys: list[str] = []
    for d in ds:
        for s in sp:
            if s == "corpus":
                continue
            if s not in DATASETS[d]:
                if not quiet:
                    logging.info("%s publishes no %r file; skipped", d, s)
                continue
            keys.extend(DATASETS[d][s])
    if "corpus" in sp:
        keys.append(CORPUS_KEY)
    seen: set[str] = set()
    return [RESOURCES[k] for k in keys if not (k in seen or seen.add(k))]


def file_specs(resources: Iterable[Resource], base_url: str | None = None
               ) -> list[download.FileSpec]:
    base = resolve_base_url(base_url)
    return [r.spec(base) for r in resources]


def prepare(data_dir: str, datasets: str | Iterable[str] = "nq",
            splits: str | Iterable[str] = DEFAULT_SPLITS, *, manual_dir: str | None = None,
            base_url: str | None = None, force: bool = False, verify: str = "size",
            gunzip: bool = False, opts: download.DownloadOptions = download.DownloadOptions()
            ) -> dict[str, str]:
    """Fetch the selected files into ``data_dir``; returns ``{published name: local path}``."""
    specs = file_specs(select(datasets, splits), base_url)
    if not specs:
        raise ValueError(f"nothing selected for datasets={datasets!r} splits={splits!r}")
    return download.fetch_all(specs, data_dir, manual_dir=manual_dir, force=force,
                              verify=verify, gunzip=gunzip, opts=opts)


def config_overrides(dataset: str, data_dir: str,
                     local_names: dict[str, str] | None = None) -> list[str]:
    """``--config.data.*`` flags that point a run at ``dataset``'s files in ``data_dir``.

    ``local_names`` maps published names to the names actually stored (e.g. uncompressed
    copies taken from a manual dir); absent files keep their published names.
    """
    dataset = ALIASES.get(dataset, dataset)
    local = local_names or {}
    splits = DATASETS[dataset]

    def name(split: str, index: int = 0) -> str:
        published = RESOURCES[splits[split][index]].name
        return local.get(published, published)

    flags = [f"--config.data.data_dir={data_dir}",
             f"--config.data.train_file={name('train')}",
             f"--config.data.dev_file={name('dev')}",
             f"--config.data.test_file={name('test')}",
             f"--config.data.corpus_file={local.get('psgs_w100.tsv.gz', 'psgs_w100.tsv.gz')}"]
    # Gold passage info (AAR triplets) exists for NQ only; its test file is the AAR one.
    flags.append(f"--config.data.gold_file={name('gold', 2) if 'gold' in splits else ''}")
    if dataset == "curatedtrec":
        flags.append("--config.data.answer_mode=regex")  # its answers are regular expressions
    return flags


def resolve_data_file(data_config, key: str, override: str | None = None, *,
                      required: bool = True) -> str | None:
    """The path of a data file: ``override`` (a command-line value) or ``data_config.<key>``.

    An absolute path is taken as is. A command-line value is relative to the current directory
    when such a file exists there; every other relative name is under ``data_config.data_dir``.
    An empty name returns None unless ``required``; a missing file raises FileNotFoundError
    naming the field and how to get DPR's files, a directory IsADirectoryError.
    """
    name = override or data_config.get(key)
    if not name:
        if required:
            raise ValueError(f"no file given for config.data.{key}: pass it on the command line "
                             f"or set --config.data.{key}")
        return None
    if os.path.isabs(name) or (override and os.path.exists(name)):
        path = name
    else:
        path = os.path.join(data_config.data_dir, name)
    if os.path.isdir(path):
        raise IsADirectoryError(f"data file for config.data.{key} is a directory, expected a "
                                f"file: {path}")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"data file for config.data.{key} is missing: {path}\n"
            f"  get DPR's files from https://dl.fbaipublicfiles.com/dpr/ (docs/datasets.md; "
            f"resumable, checksummed, --manual_dir for offline hosts):\n"
            f"    python -m dense_cf.cli.prepare --datasets nq --splits train,dev,test,gold,corpus "
            f"--data_dir {data_config.data_dir}\n"
            f"  or run on the synthetic benchmark: --config=configs/demo.py "
            f"--config.data.data_dir=DIR (generated when absent)")
    return path


if __name__ == "__main__":  # the design card's command; its binary is cli/prepare.py
    from dense_cf import app
    from dense_cf.cli import prepare
    app.run(prepare.main, prepare.FLAGS, prepare.USAGE)
