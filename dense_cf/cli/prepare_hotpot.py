"""Download (or take from --manual_dir) HotpotQA into --data_dir; optionally build its corpus TSV.

    python -m dense_cf.cli.prepare_hotpot --splits train,dev_distractor,dev_fullwiki,wiki \\
        --data_dir data/hotpot [--manual_dir DIR] [--base_url URL] [--corpus] [--list]

``--corpus`` converts the full-wiki abstracts (split ``wiki``) into DPR's TSV
(``hotpot_wiki_abstracts.tsv``: id, text, title), which export, index and evaluation read
like psgs_w100. Exit status 1 on a download error. Registry and readers:
:mod:`dense_cf.datasets.hotpotqa`; see docs/datasets.md.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import app, flags

from dense_cf import app as _app
from dense_cf.cli import _download_flags
from dense_cf.datasets import download, hotpotqa

FLAGS = flags.FlagValues()

_SPLITS = flags.DEFINE_string(
    "splits", ",".join(hotpotqa.DEFAULT_SPLITS),
    f"Comma list of {', '.join(hotpotqa.SPLITS)} or all.", flag_values=FLAGS)
_download_flags.define_download_flags(
    FLAGS, base_url_help=f"A mirror holding every file by its name (default: "
    f"${hotpotqa.BASE_URL_ENV} or the published URLs).")
_CORPUS = flags.DEFINE_bool(
    "corpus", False, f"Also write {hotpotqa.CORPUS_FILE} (DPR TSV) from the wiki abstracts.",
    flag_values=FLAGS)


def main(argv: Sequence[str]) -> int:
    """Fetches the selection (and writes the corpus TSV with --corpus); prints the files."""
    _app.no_positional(argv)
    try:
        resources = hotpotqa.select(_SPLITS.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if _CORPUS.value and "wiki" not in {r.key for r in resources}:
        raise app.UsageError("--corpus needs the wiki split in --splits")
    base = hotpotqa.resolve_base_url(FLAGS.base_url)
    if FLAGS.list:
        for r in resources:
            print("\t".join((r.name, r.spec(base).url, r.desc)))
        return 0
    data_dir = FLAGS.data_dir
    if not data_dir:
        raise app.UsageError("--data_dir is required (unless --list)")
    opts = _download_flags.download_options(FLAGS)
    try:
        paths = download.fetch_all([r.spec(base) for r in resources], data_dir,
                                   manual_dir=FLAGS.manual_dir, force=FLAGS.force,
                                   verify=FLAGS.verify, opts=opts)
    except download.DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if _CORPUS.value:
        out = os.path.join(data_dir, hotpotqa.CORPUS_FILE)
        n, counts = hotpotqa.wiki_corpus(paths[hotpotqa.RESOURCES["wiki"].name], out)
        paths[hotpotqa.CORPUS_FILE] = out
        print(f"{out}: {n} passages; " + (", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
                                          or "nothing skipped"))
    print(f"{len(paths)} file(s) ready in {data_dir}:")
    for local in paths.values():
        print(f"  {local}")
    return 0


def run_cli(argv: Sequence[str]) -> int:
    """``main`` in-process on ``argv`` (flags, no program name); returns the exit status."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
