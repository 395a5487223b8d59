"""Every ``python -m dense_cf.cli.<name>`` binary: ``--help`` exits 0 and lists its flags; every
``python -m dense_cf.…`` that README.md or docs/ARCHITECTURE.md names runs its ``--help``, and
their command tables name the same owner for every command.

One subprocess runs every binary (and every library alias that forwards to one) as
``__main__`` with ``--help``, the way ``python -m`` does, so the heavy imports happen once.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import pkgutil
import re
import subprocess
import sys

import pytest
from absl import flags

from dense_cf import app as _app
from dense_cf.files import UserError
from dense_cf.index import kinds as index_kinds

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLI = sorted(m.name for m in pkgutil.iter_modules([str(ROOT / "dense_cf" / "cli")])
             if not m.name.startswith("_"))
# Design-card commands whose `main` lives in the library module; the cli name imports it.
ALIASES = {"dense_cf.datasets.dpr": "prepare", "dense_cf.datasets.dpr_tfds": "prepare_tfds",
           "dense_cf.mining.stats": "stats", "dense_cf.mining.evidence.annotate": "evidence",
           "dense_cf.mining.model_negatives": "mine_model",
           "dense_cf.eval.retrieval": "eval_retrieval", "dense_cf.eval.aar": "eval_aar",
           "dense_cf.eval.robustness": "eval_robustness",
           "dense_cf.eval.marginalize": "marginalize",
           "dense_cf.eval.multihop": "eval_multihop", "dense_cf.eval.compare": "compare",
           "dense_cf.eval.e2e": "eval_e2e"}

DOCS = ("README.md", "docs/ARCHITECTURE.md")
_COMMAND = re.compile(r"python -m (dense_cf(?:\.\w+)+)(?!\w|\.[*<])")  # not `bench.*`, `studies.<name>`
_TABLE_HEAD = "| command | owner: "
_MODULE = re.compile(r"`((?:dense_cf\.)?[a-z_]+(?:\.[a-z_0-9]+)+)`")
# absl.app.run exits 1 after printing --help (dense_cf.app.run exits 0); no binary uses it now.
HELP_EXITS_1: set[str] = set()


def _command_table(doc: str) -> list[list[str]]:
    """The rows of ``doc``'s command table (``| command | owner: …``), cells stripped."""
    lines = (ROOT / doc).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(_TABLE_HEAD))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _modules_in(cell: str) -> list[str]:
    """Module names written in a table cell (``cli.eval_aar`` is ``dense_cf.cli.eval_aar``)."""
    return [m if m.startswith("dense_cf.") else f"dense_cf.{m}" for m in _MODULE.findall(cell)]


def _documented() -> list[str]:
    """Every ``python -m dense_cf.…`` in the docs, and every module of their command tables."""
    names = set()
    for doc in DOCS:
        names.update(_COMMAND.findall((ROOT / doc).read_text()))
        for row in _command_table(doc):
            names.update(m for cell in row[1:] for m in _modules_in(cell))
    return sorted(names)


DOCUMENTED = _documented()

_SCRIPT = r"""
import contextlib, io, json, runpy, sys
from absl import app, flags, logging  # absl's own flags exist before any binary runs
out = {}
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    buf = io.StringIO()
    before = set(flags.FLAGS)
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = "returned"
    except SystemExit as e:
        code = e.code
    except Exception as e:  # e.g. a documented module that does not exist: named in the test
        code = f"{type(e).__name__}: {e}"
    for flag in set(flags.FLAGS) - before:  # binaries on absl's global FLAGS (main, demo)
        delattr(flags.FLAGS, flag)
    flags.FLAGS.unparse_flags()
    out[name] = [code, buf.getvalue()]
print("@@" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, list]:
    names = [f"dense_cf.cli.{n}" for n in CLI] + [a for a in ALIASES if _exists(a)]
    names += [d for d in DOCUMENTED if d not in names]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", _SCRIPT, *names], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout[r.stdout.index("@@") + 2:])


def _exists(module: str) -> bool:
    return (ROOT / (module.replace(".", "/") + ".py")).exists()


def _flag_names(name: str) -> list[str]:
    import importlib
    module = importlib.import_module(f"dense_cf.cli.{name}")
    assert isinstance(module.FLAGS, flags.FlagValues), "flags belong on a module FlagValues"
    return list(module.FLAGS)


def test_the_expected_binaries_exist():
    assert {"prepare", "prepare_tfds", "stats", "evidence", "mine_model", "eval_retrieval",
            "eval_aar", "eval_robustness", "marginalize", "export_hf"} <= set(CLI)


@pytest.mark.parametrize("name", CLI)
def test_help_exits_0_and_lists_the_flags(helps, name):
    code, text = helps[f"dense_cf.cli.{name}"]
    assert code == 0, text
    names = _flag_names(name)
    assert names and all(f"--{n}" in text or f"--[no]{n}" in text for n in names), text
    assert text.startswith(sys.modules[f"dense_cf.cli.{name}"].__doc__.strip()[:40])


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_library_alias_forwards_to_the_binary(helps, alias):
    if not _exists(alias):
        pytest.skip(f"{alias} is gone")
    code, text = helps[alias]
    assert code == 0 and text == helps[f"dense_cf.cli.{ALIASES[alias]}"][1]


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_documented_command_runs_its_help(helps, name):
    code, text = helps[name]
    assert code == (1 if name in HELP_EXITS_1 else 0), (name, code, text[-2000:])
    assert text.strip(), name


def test_readme_and_architecture_name_the_same_owners():
    readme, arch = (_command_table(doc) for doc in DOCS)
    assert readme == arch, "README.md and docs/ARCHITECTURE.md command tables differ"
    owners = {m for row in readme for m in _modules_in(row[1])}
    forwarders = {m for row in readme for m in _modules_in(row[2])}
    # A study is a binary when it has a main (harness and registry are its library and data).
    studies = sorted(p.stem for p in (ROOT / "dense_cf" / "studies").glob("*.py")
                     if "\ndef main(" in p.read_text())
    want = ({f"dense_cf.cli.{n}" for n in CLI} | {f"dense_cf.studies.{n}" for n in studies}
            | {"dense_cf.main", "dense_cf.demo"})
    assert owners == want
    assert forwarders == {a for a in ALIASES if _exists(a)}
    assert not owners & forwarders


def test_library_modules_define_no_flags():
    """Flags, argparse and ``app.run`` live in dense_cf/cli, the top-level entry points, the
    benchmarks and studies (each a binary with its own FlagValues); a design-card module
    (``python -m dense_cf.eval.aar``) only has an ``app.run`` in the ``__main__`` block that
    runs its cli owner (docs/ARCHITECTURE.md)."""
    owners = tuple(m.removeprefix("dense_cf.").replace(".", "/") + ".py" for m in ALIASES)
    top = ("main.py", "demo.py", "experiment.py", "app.py") + owners
    # Moved to dense_cf/cli/{synthetic,mine_bm25}.py by the synthetic/negatives split.
    pending = ("synthetic/generate.py", "mining/negatives.py")
    offenders = []
    for path in sorted((ROOT / "dense_cf").rglob("*.py")):
        rel = path.relative_to(ROOT / "dense_cf")
        if rel.parts[0] in ("cli", "bench", "studies") or str(rel) in top + pending:
            continue
        text = path.read_text()
        if any(s in text for s in ("flags.DEFINE", "argparse", "app.run(", "flags.FLAGS")):
            offenders.append(str(rel))
    assert offenders == []


def test_run_cli_parses_afresh_and_keeps_binaries_apart():
    from dense_cf.cli import eval_aar, eval_retrieval
    assert _app.parse(eval_aar.FLAGS, ["--workdir", "a", "--strategies", "x,y"])[1:] == []
    assert eval_aar.FLAGS.strategies == ["x", "y"]
    _app.parse(eval_aar.FLAGS, ["--workdir=b"])          # defaults come back
    assert eval_aar.FLAGS.workdir == "b" and eval_aar.FLAGS.strategies is None
    _app.parse(eval_retrieval.FLAGS, ["--workdir=c", "--k=5"])
    assert eval_aar.FLAGS.workdir == "b" and eval_retrieval.FLAGS.k == 5
    with pytest.raises(UserError, match="exactly one of --workdir"):
        eval_retrieval.run_cli(["--k=5"])                 # --workdir (or --model) is required
    with pytest.raises(flags.Error):
        _app.parse(eval_retrieval.FLAGS, ["--workdir=c", "--no_such_flag=1"])


def test_binary_errors_and_absl_flags(tmp_path):
    """A real ``python -m``: absl's own flags parse; a missing required flag exits 1."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    path = tmp_path / "b.json"
    path.write_text(json.dumps([{"question": "q", "answers": ["a"],
                                 "positive_ctxs": [{"title": "t", "text": "a b"}]}]))
    cmd = [sys.executable, "-m", "dense_cf.cli.stats"]
    r = subprocess.run(cmd + ["--fractions=1.0", "--verbosity=1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "--input" in r.stderr and "--help" in r.stderr
    r = subprocess.run(cmd + [f"--input={path}", "--fractions=1.0", "--verbosity=1", "extra"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "unexpected arguments: extra" in r.stderr
    r = subprocess.run(cmd + [f"--input={path}", "--fractions", "1.0", "--verbosity=1"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| 1.00 | 1 |" in r.stdout


def test_every_index_flag_lists_the_registered_kinds():
    """``--index`` has one definition (cli/_model_flags.py), so every binary that takes it lists
    the kinds index/kinds.py registers, a new kind included (three binaries once hard-coded an
    older list)."""
    # eval_robustness rewords it on purpose: it searches with jax or faiss Flat whatever the kind.
    binaries = ("eval_retrieval", "eval_multihop", "marginalize", "reader_data", "mine_model")
    for name in binaries:
        fv = importlib.import_module(f"dense_cf.cli.{name}").FLAGS
        assert " | ".join(index_kinds.names()) in fv["index"].help, (name, fv["index"].help)
        assert fv["index"].default is None, name
