"""One name per command, run once (issue 33 item 4): no module under dense_cf/ re-runs another
with ``runpy``; a ``cli/`` alias imports the ``main`` of the module that owns the binary."""

from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "dense_cf"
MODULES = sorted(ROOT.rglob("*.py"))


def _uses_runpy(path: pathlib.Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "runpy" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "runpy":
            lines.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "runpy":
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(ROOT)) for p in MODULES])
def test_no_runpy(path):
    assert not _uses_runpy(path), f"{path}: runpy at lines {_uses_runpy(path)}"


# Every design-card binary is owned by cli/ (issue 48): dense_cf.eval.<name>, datasets.{dpr,
# dpr_tfds} and the mining modules only forward to their owner when run (tests/test_cli.py
# checks that their --help is the owner's).
CLI_OWNED = ("eval_aar", "eval_retrieval", "eval_robustness", "eval_multihop", "eval_e2e",
             "marginalize", "compare", "prepare", "prepare_tfds", "evidence", "mine_model",
             "stats")


def test_library_modules_define_no_binary():
    """A library module keeps at most an ``if __name__ == "__main__":`` block forwarding to cli/."""
    for path in MODULES:
        if path.relative_to(ROOT).parts[0] in ("cli", "bench", "studies") or path.name in (
                "main.py", "demo.py"):
            continue
        tree = ast.parse(path.read_text())
        names = {t.id for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        fns = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert not ({"FLAGS", "USAGE"} & names or {"run_cli"} & fns), path


@functools.lru_cache(maxsize=None)
def _module_file(name: str) -> pathlib.Path | None:
    rel = pathlib.Path(*name.split("."))
    for cand in (ROOT.parent / rel.with_suffix(".py"), ROOT.parent / rel / "__init__.py"):
        if cand.exists():
            return cand
    return None


@functools.lru_cache(maxsize=None)
def _deps(name: str) -> frozenset[str]:
    """dense_cf modules that importing ``name`` imports directly (packages included)."""
    path = _module_file(name)
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    # A module's ``if __name__ == "__main__":`` block runs only as ``python -m``, never on import.
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            tree.body.remove(node)
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for t in targets:
            if t.startswith("dense_cf") and _module_file(t) is not None:
                parts = t.split(".")
                out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(out)


@pytest.mark.parametrize("owner", [f"dense_cf.cli.{b}" for b in CLI_OWNED])
def test_a_binary_runs_once(owner):
    """``python -m owner`` executes owner's file once: nothing it imports imports it again."""
    seen, todo = set(), list(_deps(owner) | {".".join(owner.split(".")[:i]) for i in range(1, owner.count(".") + 1)})
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(_deps(m) - seen)
    assert owner not in seen
