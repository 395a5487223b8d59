"""Small writers for evaluation reports: atomic, numpy-safe JSON and markdown tables."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

import numpy as np

__all__ = ["atomic_open", "markdown_table", "to_jsonable", "write_json", "write_markdown"]


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w",
                encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success rename it over ``path``.

    A crash mid-write leaves the previous file (or none), never a truncated one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX within one file system
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _key(k: Any) -> Any:
    # json accepts str/int/float/bool/None keys; numpy scalars must become Python ones first.
    if isinstance(k, np.generic):
        k = k.item()
    if isinstance(k, (str, int, float, bool)) or k is None:
        return k
    return str(k)


def to_jsonable(obj: Any) -> Any:
    """Recursively turn numpy scalars/arrays, dataclasses, tuples, sets and paths into JSON types.

    Non-finite floats (NaN, ±inf) become ``None``: strict JSON has no NaN, and an undefined
    metric (e.g. AAR of an empty subset) reads naturally as null.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return {_key(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "__array__"):  # e.g. jax arrays, without importing jax here
        return to_jsonable(np.asarray(obj))
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as strict JSON, atomically, after :func:`to_jsonable`."""
    text = json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False, allow_nan=False)
    with atomic_open(path) as f:
        f.write(text + "\n")


def _cell(value: Any, floatfmt: str) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, floatfmt)
    # Pipes and newlines would break the table row.
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str],
                   floatfmt: str = ".2f") -> str:
    """GitHub markdown table of ``rows`` restricted to ``columns`` (missing cells empty).

    Floats use ``floatfmt``; ints, bools and strings print as is. Numeric columns are
    right-aligned.
    """
    if not columns:
        raise ValueError("markdown_table needs at least one column")

    def numeric(col: str) -> bool:
        vals = [r.get(col) for r in rows if r.get(col) is not None]
        return bool(vals) and all(isinstance(v, (int, float, np.number))
                                  and not isinstance(v, bool) for v in vals)

    header = "| " + " | ".join(_cell(c, floatfmt) for c in columns) + " |"
    rule = "|" + "|".join("---:" if numeric(c) else "---" for c in columns) + "|"
    body = ["| " + " | ".join(_cell(r.get(c), floatfmt) for c in columns) + " |" for r in rows]
    return "\n".join([header, rule, *body])


def write_markdown(path: str | os.PathLike, title: str,
                   sections: Sequence[tuple[str, str]]) -> None:
    """Write a markdown file: ``# title`` then ``## heading`` + text per section, atomically."""
    parts = [f"# {title}", ""]
    for heading, text in sections:
        parts += [f"## {heading}", "", text.rstrip("\n"), ""]
    with atomic_open(path) as f:
        f.write("\n".join(parts))
