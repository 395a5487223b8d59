"""Flags shared by the dataset downloaders (``cli.prepare``, ``cli.prepare_hotpot``)."""

from __future__ import annotations

from absl import flags

from dense_cf.datasets import download


def define_download_flags(flag_values: flags.FlagValues, *, base_url_help: str) -> None:
    """``data_dir``, ``manual_dir``, ``base_url``, ``force``, ``verify``, ``retries``, ``timeout``
    and ``list``, in ``flag_values``."""
    fv = {"flag_values": flag_values}
    flags.DEFINE_string("data_dir", None, "Where the files go (config.data.data_dir); required "
                        "unless --list.", **fv)
    flags.DEFINE_string("manual_dir", None,
                        "Take files from this directory instead of downloading (offline).", **fv)
    flags.DEFINE_string("base_url", None, base_url_help, **fv)
    flags.DEFINE_bool("force", False,
                      "Fetch again even if present (records in checksums.tsv are kept).", **fv)
    flags.DEFINE_enum("verify", "size", ["size", "full"],
                      "Check present files by recorded size (fast) or sha256.", **fv)
    flags.DEFINE_integer("retries", download.DownloadOptions.max_retries,
                         "Consecutive failures without progress before giving up.", **fv)
    flags.DEFINE_float("timeout", download.DownloadOptions.timeout,
                       "Seconds without a byte before a read counts as failed.", **fv)
    flags.DEFINE_bool("list", False, "Print the selected files and exit.", **fv)


def download_options(flag_values: flags.FlagValues, **kwargs) -> download.DownloadOptions:
    """The :class:`~dense_cf.datasets.download.DownloadOptions` the flags ask for."""
    return download.DownloadOptions(max_retries=flag_values.retries,
                                    timeout=flag_values.timeout, **kwargs)
