"""dense_cf.files: the one atomic writer (temp file, fsync, rename; umask modes) and JSON."""

import gzip
import json
import os
import re

import numpy as np
import pytest

from dense_cf import files


def _leftovers(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if files.is_tmp_name(n))


def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "out.txt"
    files.atomic_write(path, lambda f: f.write("old\n"), binary=False)
    with pytest.raises(RuntimeError, match="mid-write"):
        with files.atomic_open(path) as f:
            f.write("new, half written")
            raise RuntimeError("mid-write")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]
    files.atomic_write(path, lambda f: f.write(b"new\n"))
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["out.txt"]


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_modes_honour_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        files.write_json(tmp_path / "a.json", {"x": 1})
        files.atomic_save_npy(tmp_path / "a.npy", np.arange(3))
        with files.atomic_open_gz(tmp_path / "a.txt.gz") as f:
            f.write("x")
    finally:
        os.umask(old)
    for name in ("a.json", "a.npy", "a.txt.gz"):
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o666 & ~umask, name


def test_atomic_save_npy_round_trip_at_the_exact_path(tmp_path):
    x = np.arange(12, dtype=np.float16).reshape(3, 4)
    path = tmp_path / "shard.bin"  # no ".npy" appended
    files.atomic_save_npy(path, x)
    assert os.listdir(tmp_path) == ["shard.bin"]
    y = np.load(path)
    assert y.dtype == np.float16 and (y == x).all()


def test_write_json_numpy_values_and_nan(tmp_path):
    path = tmp_path / "r.json"
    files.write_json(path, {"n": np.int64(3), "f": np.float32(0.5), "v": np.arange(2),
                            "nan": float("nan"), "inf": np.float64("inf"), np.int32(7): (1, 2)})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"n": 3, "f": 0.5, "v": [0, 1], "nan": None, "inf": None,
                                "7": [1, 2]}
    assert files.read_json(path) == json.loads(text)


def test_read_json_of_a_torn_or_missing_file_is_none(tmp_path):
    torn = tmp_path / "torn.json"
    torn.write_text('{"a": [1, 2')
    assert files.read_json(torn) is None
    assert files.read_json(tmp_path / "missing.json") is None


def test_tmp_names(tmp_path):
    target = tmp_path / "embeddings-00000.npy"
    with files.atomic_open(target, "wb"):
        names = os.listdir(tmp_path)
        assert len(names) == 1 and files.is_tmp_name(names[0])
    assert _leftovers(tmp_path) == []
    assert files.is_tmp_name(os.path.basename(files.tmp_path(target)))
    assert files.tmp_path(target) != files.tmp_path(target)
    for name in ("embeddings-00000.npy", "x.tmp", ".hidden", "embeddings-00000.npy.tmp.npy"):
        assert not files.is_tmp_name(name)


@pytest.mark.parametrize("name", ["out.txt", "out.txt.gz"])
def test_atomic_open_gz_is_deterministic_and_atomic(tmp_path, name):
    path = tmp_path / name
    written = []
    for _ in range(2):
        with files.atomic_open_gz(path, newline="") as f:
            f.write("a\r\nb\n")
        written.append(path.read_bytes())
    first = written[0]
    assert written[1] == first  # gzip: mtime 0, no name
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rb") as f:
        assert f.read() == b"a\r\nb\n"
    with pytest.raises(ValueError):
        with files.atomic_open_gz(path, "wb") as f:
            f.write(b"partial")
            raise ValueError
    assert path.read_bytes() == first and _leftovers(tmp_path) == []


def test_file_key_and_hashes(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"abc")
    st = os.stat(path)
    assert files.file_key(path) == [str(path.absolute()), 3, st.st_mtime_ns]
    assert files.content_sha256([b"a", b"bc"]) == \
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # sha256("abc")
    assert files.sha256_hex({"b": 1, "a": 2}) == files.sha256_hex({"a": 2, "b": 1})


def test_tree_bytes_counts_regular_files_only(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "a.bin").write_bytes(b"x" * 10)
    (d / "sub" / "b.bin").write_bytes(b"y" * 5)
    os.symlink(d / "a.bin", d / "link.bin")       # a link is not counted twice
    assert files.tree_bytes(d) == 15
    assert files.tree_bytes(d / "a.bin") == 10      # a file: its size
    assert files.tree_bytes(tmp_path / "absent") == 0


def test_code_version_and_stamp_line(tmp_path):
    import subprocess
    here = files.code_version()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(files.__file__),
                          capture_output=True, text=True).stdout.strip()
    assert here["commit"] == (head or None) and here["dirty"] in (True, False, None)
    # Outside a git checkout: said, not guessed.
    outside = tmp_path / "x.txt"
    outside.write_text("")
    env_free = files.code_version(outside)
    if env_free["commit"] is None:
        assert env_free == {"commit": None, "dirty": None}
    line = files.stamp_line({"commit": "abc", "dirty": True, "started": "2026-11-28T10:00:00Z",
                             "finished": "2026-11-28T11:00:00Z"})
    assert line == ("Commit `abc`, dirty (uncommitted changes); started 2026-11-28T10:00:00Z, "
                    "finished 2026-11-28T11:00:00Z (UTC).")
    assert "unknown (no git checkout)" in files.stamp_line({"commit": None, "dirty": None})
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", files.utc_now())
