"""bench.cpu_flags: the variant list, and the probe that keeps an unknown XLA flag (which aborts
XLA's whole process) from killing the sweep."""

import pytest

from dense_cf.bench import cpu_flags
from dense_cf.files import UserError


def test_parse_variants():
    assert cpu_flags.parse_variants("") == list(cpu_flags.DEFAULT_VARIANTS)
    assert cpu_flags.DEFAULT_VARIANTS[0] == ("baseline", "", "")
    assert cpu_flags.parse_variants("base=;x=--xla_cpu_use_xnnpack=true;e=@einsum") == [
        ("base", "", ""), ("x", "--xla_cpu_use_xnnpack=true", ""), ("e", "", "einsum")]
    for bad in ("noequals", "a=;a=--x=1", "=--x=1"):
        with pytest.raises(UserError, match="--variants"):
            cpu_flags.parse_variants(bad)


def test_probe_rejects_an_unknown_flag_in_a_child_process():
    assert cpu_flags.probe("") == (True, "")
    ok, why = cpu_flags.probe("--xla_cpu_no_such_flag_in_any_version=1")
    assert not ok and "no_such_flag" in why


def test_split_env_separates_xla_flags_from_worker_environment():
    assert cpu_flags.split_env("--a=1 DENSE_CF_THREEFRY=rolled --b") == (
        "--a=1 --b", {"DENSE_CF_THREEFRY": "rolled"})
    assert cpu_flags.split_env("") == ("", {})
    with pytest.raises(UserError, match="NAME=VALUE"):
        cpu_flags.split_env("oops")
