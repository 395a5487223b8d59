"""dense_cf.parallel.xla_flags / dense_cf.cli.xla_flags: the adopted flags a launcher sets."""

from __future__ import annotations

import pytest

from dense_cf.cli import xla_flags as cli
from dense_cf.parallel import xla_flags


def _fake_probe(rejected):
    return lambda flag: (False, "unknown flag") if flag in rejected else (True, "")


def test_adopted_splits_accepted_and_rejected(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    gpu = [f for f, _ in xla_flags.ADOPTED["gpu"]]
    ok, bad = xla_flags.adopted("gpu", probe_fn=_fake_probe({gpu[0]}))
    assert ok == gpu[1:] and bad == [(gpu[0], "unknown flag")]
    assert xla_flags.adopted("cpu", probe_fn=_fake_probe(set())) == ([], [])
    with pytest.raises(ValueError, match="unknown platform"):
        xla_flags.adopted("rocm")


def test_a_flag_the_user_set_keeps_the_users_value(monkeypatch):
    gpu = [f for f, _ in xla_flags.ADOPTED["gpu"]]
    name = gpu[1].split("=", 1)[0]
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to=/tmp/x {name}=true")
    seen = []
    ok, bad = xla_flags.adopted("gpu", probe_fn=lambda f: seen.append(f) or (True, ""))
    assert ok == [gpu[0]] and bad == [] and seen == [gpu[0]]  # the user's flag is not probed


def test_cli_prints_the_accepted_flags_and_names_the_rejected(monkeypatch, capsys):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    gpu = [f for f, _ in xla_flags.ADOPTED["gpu"]]
    monkeypatch.setattr(xla_flags, "probe", _fake_probe({gpu[1]}))
    line = cli.run_cli(["--platform=gpu", "--explain"])
    out, err = capsys.readouterr()
    assert line == gpu[0] and out.strip() == gpu[0]
    assert f"rejects {gpu[1]}: unknown flag" in err and "RAFT" in err


def test_missing_names_the_adopted_flags_xla_flags_lacks(monkeypatch):
    gpu = [f for f, _ in xla_flags.ADOPTED["gpu"]]
    monkeypatch.setenv("XLA_FLAGS", gpu[0].split("=")[0] + "=false")
    assert xla_flags.missing("gpu") == gpu[1:]
    monkeypatch.delenv("XLA_FLAGS")
    assert xla_flags.missing("gpu") == gpu and xla_flags.missing("cpu") == []
