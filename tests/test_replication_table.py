"""docs/replication.md's verdict table is what ``tools/rederive_claims.py`` derives from the
stored reports under the current rules: no row stale, none missing, none hand-edited."""

import os

import pytest
from helpers import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
    return load_tool("rederive_claims")


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
    # No row written by hand.
    assert not by_key, sorted(by_key)


def test_the_table_has_the_mixed_model_beside_the_seed_level_column():
    """Issue 50 item 2: each pooled row carries the mixed-effects logistic model (eval.glmm)
    next to the seed-level t; one-seed rows have neither."""
    tool = _tool()
    assert tool.COLUMNS.index(tool.MIXED) == tool.COLUMNS.index(tool.SEED_LEVEL) + 1
    doc = _doc_rows(tool.COLUMNS)
    pooled = [r for r in doc if r["seed"].startswith("pooled")]
    assert pooled and all(r[tool.MIXED] not in ("", "—") for r in pooled)
    assert all(r[tool.MIXED] in ("—", "") for r in doc if not r["seed"].startswith("pooled"))
    fitted = [r for r in pooled if "β=" in r[tool.MIXED]]
    assert len(fitted) >= 10, len(fitted)
    # A not-worse check is left to the seed-level t (its margin is in points, not log-odds).
    assert any("not fitted (not-worse check" in r[tool.MIXED] for r in pooled)


def _migration():
    return load_tool("migrate_results_json")


def _write_data_stats(tmp_path, name, text):
    """A data-stats report and its rows sibling (as the migration derives it from the
    markdown: the per-fraction table, 1 decimal, when no summary JSON is beside it)."""
    from dense_cf.eval import report as report_lib
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    content = _migration().data_stats_rows(str(path))
    report_lib.write_rows(str(path), content.pop("tables"), **content)


def test_data_stats_seeds_pool_their_rank_correlations(tmp_path):
    """Seeds of the data-stats study pool ρ by its stratified permutation test, the series read
    from each seed's per-fraction table where no summary JSON is stored; a table whose
    rounding changes ρ is refused (seeds 1-2's stored JSON: the documented table's test)."""
    import shutil
    tool = _tool()
    results = os.path.join(ROOT, "docs", "results")
    # The stored reports and their rows siblings (and a world-draw report's JSON, which says
    # --vary_world) without the data-stats seeds after 0: seed 0 alone is copied as seed 1.
    world_json = {tool.world_report_json(w) for w in tool.WORLD_REPORTS}
    for name in (n for n in os.listdir(results)
                 if (n.endswith((".md", ".rows.json")) or n in world_json)
                 and not n.startswith(("data_stats_seed1", "data_stats_seed2"))):
        shutil.copy(os.path.join(results, name), tmp_path / name)
    seed0 = open(os.path.join(results, "data_stats_seed0.md"), encoding="utf-8").read()
    _write_data_stats(tmp_path, "data_stats_seed1.md", seed0)
    rows = {(r["claim"], r.get("seed")): r for r in tool.rederive(str(tmp_path))}
    assert ("attribution-data-trend", "1") not in rows  # seed 0's row, then the pooled one
    pooled = rows["attribution-data-trend", "pooled 0,1"]
    assert "pending" not in pooled["verdict"], pooled["verdict"]
    # top-5 ρ(Q marginal, #examples) = +1 in both copies: p = 2/120² before Holm.
    assert "top-5: ρ(Q marginal, #examples) +1.00" in pooled[tool.RESULT]
    assert pooled["report"] == "data_stats_seed0.md, data_stats_seed1.md"
    assert rows["attribution-data-40", "pooled 0,1"]["verdict"].split(":")[0].split(" (")[0] in (
        "reproduced", "no difference detected", "not reproduced", "reversed")
    # Two P marginals rounded to the same figure change the ranks: refused, naming the file.
    tied = seed0.replace("| 29.1 | 29.6 |", "| 30.3 | 29.6 |", 1)
    assert tied != seed0
    _write_data_stats(tmp_path, "data_stats_seed1.md", tied)
    with pytest.raises(ValueError, match="data_stats_seed1.md: top-1: ρ"):
        tool.rederive(str(tmp_path))


def test_the_equal_steps_reports_answer_the_equal_steps_claims(tmp_path):
    """``data_stats_eqsteps_seedN.md`` (the data-stats study with equal steps) is read for the
    ``-eqsteps`` claims, its A and B named by the swap as in ``data_stats_seedN.md``: the same
    stored tables give the same results under the other claim."""
    import shutil
    tool = _tool()
    results = os.path.join(ROOT, "docs", "results")
    world_json = {tool.world_report_json(w) for w in tool.WORLD_REPORTS}
    for name in os.listdir(results):
        if name.endswith((".md", ".rows.json")) or name in world_json:
            shutil.copy(os.path.join(results, name), tmp_path / name)
    for ext in (".md", ".rows.json"):
        shutil.copy(os.path.join(results, "data_stats_seed0" + ext),
                    tmp_path / ("data_stats_eqsteps_seed0" + ext))
    rows = {(r["claim"], r.get("seed")): r for r in tool.rederive(str(tmp_path))}
    for claim in ("attribution-data-40", "attribution-data-trend"):
        plain, eq = rows[claim, "0"], rows[claim + "-eqsteps", "0"]
        assert eq["report"] == "data_stats_eqsteps_seed0.md"
        assert eq[tool.RESULT] == plain[tool.RESULT] and "pending" not in eq[tool.RESULT]


# The verdict words, longest first ("not reproduced" before "reproduced").
_WORDS = ("no difference detected", "not reproduced", "uninformative", "reproduced", "reversed")


def _words(text):
    found = []
    for w in _WORDS:
        found += [w] * text.count(w)
        text = text.replace(w, " ")
    return found


def _claim_words(rows):
    """{claim: the words of its derived rows (seed 0, pooled) and its seed-level word}."""
    import re
    out = {}
    for r in rows:
        found = set(_words(r["verdict"]))
        held = re.search(r": (\d+) of \d+ checks hold", r["verdict"])
        if held and int(held.group(1)) > 0:  # the checks that hold are not named
            found.add("reproduced")
        out.setdefault(r["claim"], set()).update(found)
    return out


def test_the_tallies_are_the_derived_ones():
    tool = _tool()
    text = open(os.path.join(ROOT, "docs", "replication.md"), encoding="utf-8").read()
    block = text[text.index(tool.TALLY_BEGIN) + len(tool.TALLY_BEGIN):text.index(tool.TALLY_END)]
    rows = tool.rederive(os.path.join(ROOT, "docs", "results"))
    assert block.strip() == tool.tallies(rows)
    # And the factorial's table and sign line (issue 50 item 3).
    a = text.index(tool.FACTORIAL_BEGIN) + len(tool.FACTORIAL_BEGIN)
    assert text[a:text.index(tool.FACTORIAL_END)].strip() == tool.factorial(rows)


def _cell_rows(signs):
    """Rows of record for the factorial's four claims with the AA check's word set so that the
    cell's sign is ``signs[claim]`` ("+", "−", "0") whatever the claim expects."""
    from dense_cf.studies.registry import CLAIMS_BY_ID, FACTORIAL, FACTORIAL_METRIC
    rows = []
    for _, _, cid in FACTORIAL:
        expect = next(k.expect for k in CLAIMS_BY_ID[cid].checks if k.metric == FACTORIAL_METRIC)
        up = {"+": "reproduced", "−": "reversed", "0": "no difference detected"}[signs[cid]]
        word = {"reproduced": "reversed", "reversed": "reproduced"}.get(up, up) \
            if expect == "down" else up
        diff = {"+": 5.0, "−": -5.0, "0": 0.5}[signs[cid]]
        entry = {"id": FACTORIAL_METRIC, "metric": "AA score", "expect": expect,
                 "verdict": word, "diff_shown": diff, "95% CI": "[a, b]", "p_null": 0.01}
        seed = {"id": FACTORIAL_METRIC, "signs": "+++", "df": 2, "t": 4.0, "p_null": 0.05}
        rows.append({"claim": cid, "seed": "pooled 0,1,2", "report": "replicate_worlds_seeds012.md",
                     "verdict": word, "entries": [entry], "seed_entries": [seed]})
    return rows


@pytest.mark.parametrize("pattern,words", [
    ("−−++", "follows the hard negatives"),
    ("−+−+", "follows the pooling"),
    ("−−−−", "same in every cell"),
    ("−++−", "an interaction"),
    ("−0++", "no significant difference in sibling × mean"),
])
def test_the_factorial_says_which_factor_the_sign_follows(pattern, words):
    """Cells in registry order: sibling × [CLS], sibling × mean, other entity × [CLS], other
    entity × mean."""
    from dense_cf.studies.registry import FACTORIAL
    tool = _tool()
    signs = {cid: s for (_, _, cid), s in zip(FACTORIAL, pattern)}
    text = tool.factorial(_cell_rows(signs))
    assert words in text.splitlines()[-1]
    for (neg, pool, cid), s in zip(FACTORIAL, pattern):
        (line,) = [ln for ln in text.splitlines() if f"`{cid}`" in ln]
        assert line.split(" | ")[-2] == s and f"{neg} × {pool}: {s}" in text
    partial = tool.factorial(_cell_rows(signs)[:3])
    assert f"the cells of `{FACTORIAL[3][2]}` have not run" in partial


def test_the_factorial_cells_are_registered_picl_against_dpr_on_the_aa_score():
    from dense_cf.studies.registry import CLAIMS_BY_ID, FACTORIAL, FACTORIAL_METRIC
    assert len({(n, p) for n, p, _ in FACTORIAL}) == 4 == len({n for n, _, _ in FACTORIAL}) * 2
    for _, _, cid in FACTORIAL:
        c = CLAIMS_BY_ID[cid]
        assert FACTORIAL_METRIC in [k.metric for k in c.checks], cid
        assert c.a.startswith(("dpr", "fx_dpr")) and "picl" in c.b, (cid, c.a, c.b)


def _blocks(text):
    """(first line number, text) of each table row, bullet and paragraph of ``text``."""
    import re
    blocks, cur, start = [], [], 0
    for n, line in enumerate(text.splitlines(), 1):
        new = (not line.strip() or line.startswith("|")
               or re.match(r"\s*(?:[-*]|\d+\.)\s", line) is not None)
        if cur and (new or (cur[0].startswith("|"))):
            blocks.append((start, "\n".join(cur)))
            cur = []
        if line.strip():
            if not cur:
                start = n
            cur.append(line)
    if cur:
        blocks.append((start, "\n".join(cur)))
    return blocks


def test_prose_verdict_words_agree_with_the_table():
    """A paragraph, bullet or table row of docs/replication.md outside the derived table that
    names one claim (its id, in backticks or not) and uses verdict words uses only words the
    table gives that claim (review 3 §2.4: stale prose contradicted the table). Blocks naming
    several claims are not checked (their words cannot be assigned to one); rows of the "What
    changed" table (before/after) are history and left out."""
    import re
    tool = _tool()
    words = _claim_words(tool.rederive(os.path.join(ROOT, "docs", "results")))
    text = open(os.path.join(ROOT, "docs", "replication.md"), encoding="utf-8").read()
    derived_header = "| " + " | ".join(tool.COLUMNS) + " |"
    bad, in_table, history = [], False, False
    for n, block in _blocks(text):
        if block.startswith("|"):
            if block == derived_header:
                in_table = True
            if "| before | after |" in block:
                history = True
        else:
            in_table = history = False
        if in_table or history:
            continue
        ids = {c for c in words if re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", block)}
        used = _words(re.sub(r"\s+", " ", block))
        if len(ids) != 1 or not used:
            continue
        (cid,) = ids
        wrong = sorted({w for w in used if w not in words[cid]})
        if wrong:
            bad.append(f"line {n}: `{cid}` is {sorted(words[cid])} in the table, the prose says "
                       f"{wrong}: {block[:160]}")
    assert not bad, "\n".join(bad)


PAPERS = os.environ.get("DENSE_CF_PAPERS", "/work/shared/papers")


@pytest.mark.skipif(not os.path.isdir(PAPERS),
                    reason=f"the papers' text ({PAPERS}) is outside the repository")
def test_the_quotes_of_claims_outside_the_registry_are_verbatim():
    """The multi-hop claims live in the tool's OTHER list, not studies.replicate.CLAIMS (whose
    quotes tests/test_claims.py checks): their quotes are checked the same way."""
    import re

    def norm(t):
        return re.sub(r"\s+", " ", t).strip()

    tool = _tool()
    for cid, *_, quote, where, _seeds in tool.OTHER:
        paper = where.split(" ")[0].lower()
        with open(os.path.join(PAPERS, f"{paper}.txt"), encoding="utf-8") as f:
            assert norm(quote) in norm(f.read()), cid


def test_rederive_reads_the_json_siblings_only():
    """tools/rederive_claims.py parses no markdown (no regex: review 3 §5 check 7); it reads the
    reports' rows siblings, and each stored sibling is what the markdown beside it holds
    (tools/migrate_results_json.py derives them; a hand-edited one would differ)."""
    import json
    import re
    src = open(os.path.join(ROOT, "tools", "rederive_claims.py"), encoding="utf-8").read()
    assert re.search(r"re\.", src) is None and "import re\n" not in src
    from dense_cf.eval import report as report_lib
    results = os.path.join(ROOT, "docs", "results")
    derived = _migration().siblings(results)
    assert {n for n in derived} >= set(_tool().REPORTS)
    for name, content in derived.items():
        stored = report_lib.read_rows(os.path.join(results, name))
        assert stored == json.loads(json.dumps({"report": name, **content})), name


def test_a_sibling_without_its_markdown_table_is_what_rederive_reads(tmp_path):
    """The verdicts come from the sibling, not the markdown: a report whose markdown is gone
    still gives its rows, and a changed sibling changes the derived row."""
    import shutil
    tool = _tool()
    results = os.path.join(ROOT, "docs", "results")
    world_json = {tool.world_report_json(w) for w in tool.WORLD_REPORTS}
    for name in os.listdir(results):
        if name.endswith((".md", ".rows.json")) or name.startswith("data_stats_") \
                or name in world_json:
            shutil.copy(os.path.join(results, name), tmp_path / name)
    before = {(r["claim"], r.get("seed")): r for r in tool.rederive(str(tmp_path))}
    (tmp_path / "replicate_seed0.md").write_text("(emptied)\n", encoding="utf-8")
    assert {(r["claim"], r.get("seed")): r for r in tool.rederive(str(tmp_path))} == before
    from dense_cf.eval import report as report_lib
    sib = report_lib.read_rows(str(tmp_path / "replicate_seed0.md"))
    table = next(t for t in sib["tables"] if t["claim"] == "picl-ablation-cpp")
    table["rows"]["retrieval.top1"]["test"] = "McNemar exact (17 vs 29 discordant)"
    report_lib.write_rows(str(tmp_path / "replicate_seed0.md"), sib.pop("tables"),
                          **{k: v for k, v in sib.items() if k != "report"})
    after = {(r["claim"], r.get("seed")): r for r in tool.rederive(str(tmp_path))}
    assert after["picl-ablation-cpp", "0"][tool.RESULT] != before["picl-ablation-cpp", "0"][tool.RESULT]


def test_write_splices_only_the_table_and_the_tallies(monkeypatch):
    """``rederive_claims.py --write``: the derived table and the tallies replace the doc's, the
    prose around them stays; a doc without the table header or the markers is refused."""
    tool = _tool()
    header, rule = tool.table([]).split("\n")
    doc = "\n".join(["# title", "", header, rule, "| stale | row |", "", "prose kept",
                     tool.TALLY_BEGIN, "stale tallies", tool.TALLY_END, "between",
                     tool.FACTORIAL_BEGIN, "stale factorial", tool.FACTORIAL_END, "after"])
    rows = [{c: f"{c}-value" for c in tool.COLUMNS}]
    monkeypatch.setattr(tool, "tallies", lambda r: f"\n{len(r)} derived tallies\n")
    monkeypatch.setattr(tool, "factorial", lambda r: f"{len(r)} derived factorial")
    out = tool.splice(doc, rows)
    assert "stale" not in out and out.startswith("# title\n\n" + tool.table(rows) + "\n\nprose kept")
    assert tool.TALLY_BEGIN + "\n1 derived tallies\n" + tool.TALLY_END + "\nbetween" in out
    assert tool.FACTORIAL_BEGIN + "\n1 derived factorial\n" + tool.FACTORIAL_END in out
    assert out.endswith(tool.FACTORIAL_END + "\nafter")
    with pytest.raises(ValueError, match="no derived table header"):
        tool.splice("no table here", rows)
