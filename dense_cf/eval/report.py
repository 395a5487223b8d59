"""Markdown report writers; JSON and every other file go through the atomic writer in
``dense_cf.files`` (re-exported here for report code)."""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from dense_cf.files import atomic_open, to_jsonable, write_json

__all__ = ["atomic_open", "markdown_table", "to_jsonable", "write_json", "write_markdown"]


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
