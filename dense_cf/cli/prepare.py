"""Download (or take from --manual_dir) DPR's retriever data into --data_dir (docs/method.md §8).

    python -m dense_cf.cli.prepare --datasets nq --splits train,dev,test,gold,corpus \
        --data_dir data/dpr [--manual_dir DIR] [--base_url URL] [--list [--sizes]]

Prints the files made ready and, per dataset, the ``--config.data.*`` flags that point a run at
them. Exit status 1 on a download error. The registry and the checks are in
:mod:`dense_cf.datasets.dpr` and :mod:`dense_cf.datasets.download`; see docs/datasets.md.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import app, flags

from dense_cf import app as _app
from dense_cf.cli import _download_flags
from dense_cf.datasets import download
from dense_cf.datasets.dpr import (
    BASE_URL_ENV,
    DATASETS,
    DEFAULT_BASE_URL,
    DEFAULT_SPLITS,
    SPLITS,
    Resource,
    config_overrides,
    dataset_names,
    file_specs,
    resolve_base_url,
    select,
)

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_DATASETS = flags.DEFINE_string(
    "datasets", "nq", f"Comma list of {', '.join(DATASETS)} or all.", flag_values=FLAGS)
_SPLITS = flags.DEFINE_string(
    "splits", ",".join(DEFAULT_SPLITS), f"Comma list of {', '.join(SPLITS)} or all.",
    flag_values=FLAGS)
_download_flags.define_download_flags(
    FLAGS, base_url_help=f"Mirror of {DEFAULT_BASE_URL} (default: ${BASE_URL_ENV} or DPR's).")
_GUNZIP = flags.DEFINE_bool(
    "gunzip", False, "Store .gz files decompressed (our readers do not need this).",
    flag_values=FLAGS)
_LINK = flags.DEFINE_enum(
    "link", "symlink", ["symlink", "hardlink", "copy"],
    "How --manual_dir files are placed into --data_dir.", flag_values=FLAGS)
_NO_ETAG_CHECK = flags.DEFINE_bool(
    "no_etag_check", False, "Do not treat a 32-hex ETag as the file's md5.", flag_values=FLAGS)
_NO_GZIP_CHECK = flags.DEFINE_bool(
    "no_gzip_check", False, "Skip the full gzip decode of new .gz files without a known checksum.",
    flag_values=FLAGS)
_SIZES = flags.DEFINE_bool(
    "sizes", False, "With --list: ask the server for each file's size (HEAD) and the total.",
    flag_values=FLAGS)


def _list(resources: list[Resource], base: str) -> int:
    """--list [--sizes]: one line per selected file, then the total size."""
    total = 0
    for r in resources:
        size = ""
        if _SIZES.value:
            try:
                n = download.remote_size(base + r.path)
            except download.DownloadError as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
            total += n or 0
            size = download.human_bytes(n) if n is not None else "?"
        print("\t".join(x for x in (r.name, size, base + r.path, r.desc) if x))
    if _SIZES.value:
        print(f"total to download: {download.human_bytes(total)}")
    return 0


def main(argv: Sequence[str]) -> int:
    """Fetches the selection; prints the files and each dataset's config overrides."""
    _app.no_positional(argv)
    try:
        resources = select(_DATASETS.value, _SPLITS.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    base = resolve_base_url(FLAGS.base_url)
    if FLAGS.list or _SIZES.value:
        return _list(resources, base)
    data_dir = FLAGS.data_dir
    if not data_dir:
        raise app.UsageError("--data_dir is required (unless --list)")
    opts = _download_flags.download_options(FLAGS, link=_LINK.value,
                                            check_etag_md5=not _NO_ETAG_CHECK.value,
                                            verify_gzip=not _NO_GZIP_CHECK.value)
    try:
        paths = download.fetch_all(file_specs(resources, base), data_dir,
                                   manual_dir=FLAGS.manual_dir, force=FLAGS.force,
                                   verify=FLAGS.verify, gunzip=_GUNZIP.value, opts=opts)
    except download.DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    total = sum(os.path.getsize(p) for p in paths.values())
    print(f"{len(paths)} file(s) ready in {data_dir} ({download.human_bytes(total)}):")
    for local in paths.values():
        print(f"  {local}")
    local_names = {pub: os.path.basename(loc) for pub, loc in paths.items()}
    for d in dataset_names(_DATASETS.value):
        print(f"{d}: " + " ".join(config_overrides(d, data_dir, local_names)))
    return 0


def run_cli(argv: Sequence[str]) -> int:
    """``main`` in-process on ``argv`` (flags, no program name); returns the exit status."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
