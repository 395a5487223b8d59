"""Paths resolve predictably from any working directory (README, "Paths"): a relative --config
against the current directory, then the repository; relative data paths against the launch
directory, saved absolute in the run's config.json."""

import os
import subprocess
import sys

import pytest
from helpers import child_pythonpath

from dense_cf.app import REPO_ROOT, resolve_config_arg
from dense_cf.configs.base import base_config, resolve_paths
from dense_cf.files import UserError


def test_relative_config_found_in_the_repository_from_another_directory(tmp_path):
    argv = ["--config=configs/demo.py:picl", "--workdir=w"]
    out = resolve_config_arg(argv, cwd=str(tmp_path))
    assert out == [f"--config={os.path.join(REPO_ROOT, 'configs', 'demo.py')}:picl", "--workdir=w"]
    # The two-argument form too.
    out = resolve_config_arg(["--config", "configs/picl_nq.py"], cwd=str(tmp_path))
    assert out == ["--config", os.path.join(REPO_ROOT, "configs", "picl_nq.py")]


def test_a_config_in_the_current_directory_wins(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "demo.py").write_text("# mine\n")
    argv = ["--config=configs/demo.py", "--workdir=w"]
    assert resolve_config_arg(argv, cwd=str(tmp_path)) == argv
    absolute = [f"--config={tmp_path}/x.py"]
    assert resolve_config_arg(absolute, cwd=str(tmp_path)) == absolute


def test_missing_config_is_one_user_error_naming_both_places(tmp_path):
    with pytest.raises(UserError, match=r"configs/nope\.py not found in .* nor in the repository"):
        resolve_config_arg(["--config=configs/nope.py"], cwd=str(tmp_path))


def test_missing_config_from_the_command_line_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dense_cf.main", "--config=configs/nope.py",
                        f"--workdir={tmp_path / 'w'}"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, PYTHONPATH=child_pythonpath(REPO_ROOT)))
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "configs/nope.py not found" in errors[0]
    assert "Traceback" not in r.stderr


def test_relative_data_paths_are_made_absolute_against_the_launch_directory(tmp_path):
    c = base_config()
    c.data.data_dir, c.data.cache_dir = "data/dpr", ""
    (tmp_path / "mymodel").mkdir()
    c.model.name_or_path = "mymodel"
    out = resolve_paths(c, cwd=str(tmp_path))
    assert out.data.data_dir == str(tmp_path / "data" / "dpr")
    assert out.data.cache_dir == ""            # empty means "<data_dir>/.cache": left alone
    assert out.model.name_or_path == str(tmp_path / "mymodel")
    assert c.data.data_dir == "data/dpr"       # the caller's config is not changed
    c.model.name_or_path = "minilm"            # a name, not a local directory: left alone
    assert resolve_paths(c, cwd=str(tmp_path)).model.name_or_path == "minilm"
