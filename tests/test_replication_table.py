"""docs/replication.md's verdict table is what ``tools/rederive_claims.py`` derives from the
stored reports under the current rules: no row stale, none missing, none hand-edited."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
    spec = importlib.util.spec_from_file_location(
        "rederive_claims", os.path.join(ROOT, "tools", "rederive_claims.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _doc_rows(columns):
    """The table under docs/replication.md's "Results" whose header is ``columns``."""
    text = open(os.path.join(ROOT, "docs", "replication.md"), encoding="utf-8").read()
    header = "| " + " | ".join(columns) + " |"
    lines = text[text.index(header):].splitlines()[2:]
    rows = []
    for ln in lines:
        if not ln.startswith("| "):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
        rows.append(dict(zip(columns, cells)))
    return rows


def test_the_documented_table_is_the_rederived_one():
    tool = _tool()
    derived = tool.rederive(os.path.join(ROOT, "docs", "results"))
    doc = _doc_rows(tool.COLUMNS)
    by_key = {(r["claim"], r["seed"]): r for r in doc}
    assert len(by_key) == len(doc), "a (claim, seed) row appears twice"
    for r in derived:
        key = (r["claim"], r.get("seed", ""))
        assert key in by_key, f"docs/replication.md lacks the row {key}"
        d = by_key.pop(key)
        for col in tool.COLUMNS[:-1]:
            assert d[col] == str(r.get(col, "")), (key, col, d[col], r.get(col))
        # The verdict cell may add a note after the derived words (e.g. *new*).
        assert d["verdict"].startswith(r["verdict"]), (key, d["verdict"], r["verdict"])
    # Rows measured outside the stored replicate reports (the demo's end-to-end EM) only.
    assert set(by_key) == {("end-to-end EM (demo)", "0")}, sorted(by_key)
