"""Re-derives the replication verdicts from the stored reports under the current rules
(docs/replication.md, "Method"; issue 32 item 3): no training, no new numbers.

``python tools/rederive_claims.py [--results docs/results] [--write docs/replication.md]``
prints (or writes into the doc, in place of its table and tallies) one markdown row per claim
(seed 0, and the pooled test where several seeds are stored). Each claim's checks come from
the registry (``studies.registry.CLAIMS``, with its margins, keyed by metric id); the stored
rows from the machine-readable siblings of the reports (``x.rows.json`` beside ``x.md``: their
paired tables keyed by metric id, ``eval.report.write_rows``): the per-claim tables of
``replicate_*``, the paired tables of the data-stats, multihop and demo reports. The markdown is
never parsed here (tools/migrate_results_json.py wrote the siblings of the reports stored
before issue 48).
"""

from __future__ import annotations

import argparse
import json
import os

from dense_cf.eval import claims as C
from dense_cf.eval import outcomes, stats
from dense_cf.eval.report import read_rows
from dense_cf.files import atomic_write
from dense_cf.studies import data_stats as data_stats_lib
from dense_cf.studies.registry import CLAIMS, CLAIMS_BY_ID, FACTORIAL, FACTORIAL_METRIC

REPORTS = ("replicate_seed0.md", "replicate_h0_seeds012.md", "replicate_dcsr_300steps_seed0.md",
           "replicate_attribution_seed0.md", "replicate_mixed20k_seeds012.md",
           "replicate_oe_seeds012.md", "replicate_h0_tau02_seeds012.md", "replicate_bm25_seeds012.md",
           "replicate_ablation_seeds012.md", "replicate_dcsr_manyq_seeds012.md")
# The world-draw re-runs (issue 50 item 2: ``studies.replicate --vary_world``, the world seed
# follows the training seed; docs/replication.md "Registered by issue 50" has the commands),
# stored as these names (report, its rows sibling and its JSON). Read when present: their runs
# are still training. A claim such a report holds takes every seed from it; its rows from the
# one-world reports above are left out, so no pooled test mixes the two designs. The report's
# JSON must say it ran with --vary_world.
WORLD_REPORTS = ("replicate_worlds_seeds012.md", "replicate_worlds_rest_seeds012.md")
# Claims measured outside studies.replicate: (id, report of seed 0, its table (the sibling's
# table name), A, B, checks, the paper's words, where, registered seeds). Seeds 1-2 of both were
# registered 2026-11-28 after seed 0's result (trained before 9bb5ca3), before their runs
# (issue 32 item 8).
# Exploratory (issue 50 item 4): their checks were written (37b6ab1) after seed 0 had been seen.
# Seed N > 0 of both is read from OTHER_SEED_REPORT (studies.multihop's bench_multihop_seedN.md:
# the recall and the reader tables of one seed).
OTHER = (
    ("hotpotqa-mdr", "multihop_60steps_seed0.md", "retrieval",
     "MDR+DPR", "MDR+EADPR", (C.Check("multihop.chain.r@2"), C.Check("multihop.chain.r@10"),
                               C.Check("multihop.chain.r@20")),
     "incorporating EADPR into MDR leads to considerable performance gain over the standard "
     "MDR implemented using DPR", "EADPR §4.3, Table 4", (0, 1, 2)),
    ("hotpotqa-reader", "multihop_reader_60steps_seed0.md", "reader",
     "MDR+DPR", "MDR+EADPR", (C.Check("e2e.em@1"), C.Check("e2e.f1@5")),
     "such gain in retrieval performance leads to improvement in QA performance",
     "EADPR §4.3, Table 5", (0, 1, 2)),
    # The demo's end-to-end EM (in-batch DPR and PiCL, the demo's 3-layer reader), rerun
    # 2026-11-28; written by hand into the table before issue 50, derived since.
    ("end-to-end EM (demo)", "demo_2026-11-28.md", "em: picl vs dpr",
     "dpr", "picl", (C.Check("e2e.em@1"),),
     "Overall, applying PiCL on DPR consistently improves the QA performance of the "
     "retriever-reader pipeline under various settings.", "PiCL §5.2, Table 3", (0,)),
)
OTHER_SEED_REPORT = "multihop_reader_60steps_seed{seed}.md"
# The data-stats study's per-seed reports (``studies.data_stats``' report.md and its siblings,
# stored as <prefix>N.md, N the seed): prefix -> (the claim its swap table answers, the claim its
# trend table answers). Their paired tables name A and B by the swap (data_stats.SWAP_NAMES).
DATA_STATS = {"data_stats_seed": ("attribution-data-40", "attribution-data-trend"),
              "data_stats_eqsteps_seed": ("attribution-data-40-eqsteps",
                                          "attribution-data-trend-eqsteps")}
# The data-stats trend rows (outcomes: attribution.rho.topK.<tail>): the per-fraction columns
# correlated, (statistic, marginal side).
_TREND = {"p_coverage": ("unique coverage", "P"), "q_examples": ("examples", "Q")}


def _rows(keyed: dict[str, dict[str, str]]) -> list[dict[str, str]]:
    """A sibling's table as rows with their metric ``id`` (eval.claims.rejudge's input)."""
    return [{"id": mid, **cells} for mid, cells in keyed.items()]


def _data_stats_seed(name: str) -> tuple[tuple[str, str], int] | None:
    """``((swap claim, trend claim), seed)`` of a :data:`DATA_STATS` report's name, else None."""
    for head, claims in DATA_STATS.items():
        middle = name[len(head):-len(".md")]
        if name.startswith(head) and name.endswith(".md") and middle.isdigit():
            return claims, int(middle)
    return None


def _stored_data_stats(results: str) -> tuple[dict, dict, dict]:
    """The data-stats reports (:data:`DATA_STATS`, their siblings): ``({(claim, seed):
    rows}, {(claim, seed): file}, {(claim, seed, metric id): (x, y)})``, the last the series
    behind each ρ row: the per-fraction figures the sibling holds (from the study's summary at
    full precision, or the report's table at 1 decimal: refused where rounding changes the
    stored ρ)."""
    stored, source, series = {}, {}, {}
    for name in sorted(os.listdir(results)):
        found = _data_stats_seed(name)
        if found is None:
            continue
        (swap_claim, trend_claim), seed = found
        sib = read_rows(os.path.join(results, name))
        trend = _rows(sib["tables"]["trend"])
        stored[swap_claim, seed] = _rows(sib["tables"]["swap"])
        stored[trend_claim, seed] = trend
        source[swap_claim, seed] = source[trend_claim, seed] = name
        fractions = sib["fractions"]
        for row in trend:
            _, _, top, tail = row["id"].split(".")
            stat, side = _TREND[tail]
            x = [float(r[stat]) for r in fractions]
            y = [float(r[f"{side} marginal {top[:3]}-{top[3:]}"]) for r in fractions]
            rho = stats.spearman_test(x, y)["rho"]
            if abs(rho - float(row["B − A"])) > 5e-4:  # rounding to 1 decimal made a tie
                raise ValueError(f"{name}: {outcomes.metric(row['id']).label}: the "
                                 f"per-fraction table gives ρ = {rho:+.3f}, the stored row "
                                 f"{row['B − A']}")
            series[trend_claim, seed, row["id"]] = (x, y)
    return stored, source, series


def world_report_json(name: str) -> str:
    """The JSON ``studies.replicate`` wrote beside world report ``name`` (``x.md`` → ``x.json``),
    whose setup says ``--vary_world``."""
    return name.removesuffix(".md") + ".json"


def _world_reports(results: str) -> list[tuple[str, list[dict]]]:
    """``(name, tables)`` of each :data:`WORLD_REPORTS` entry stored in ``results``; one whose
    JSON (``studies.replicate``'s ``replicate.json``, copied beside it) is missing or does not
    say ``vary_world`` is refused, naming the file."""
    out = []
    for name in WORLD_REPORTS:
        path = os.path.join(results, name)
        if not os.path.exists(path):
            continue
        setup_path = os.path.join(results, world_report_json(name))
        if not os.path.exists(setup_path):
            raise ValueError(f"{setup_path}: missing; a world-draw report needs the JSON "
                             "studies.replicate wrote beside it (its setup says --vary_world)")
        with open(setup_path, encoding="utf-8") as f:
            setup = json.load(f).get("setup", {})
        if setup.get("vary_world") is not True:
            raise ValueError(f"{setup_path}: setup.vary_world is {setup.get('vary_world')!r}; "
                             f"{name} is for runs with --vary_world (world seed = seed)")
        out.append((name, read_rows(path)["tables"]))
    return out


COLUMNS = ["claim", "status", "paper", "the paper's words", "A vs B", "seed", "report",
           "B − A [95% CI] (p at δ0; Holm p)", "seed-level: signs, t (p; Holm p)",
           "mixed logit: β [95% CI] (p; Holm p)", "verdict"]
RESULT = COLUMNS[7]
SEED_LEVEL = COLUMNS[8]
MIXED = COLUMNS[9]


AS_ABOVE = "(as above)"  # a claim's pooled row, after its seed-0 row
# docs/replication.md holds tallies() verbatim between these lines (tests/test_replication_table.py).
TALLY_BEGIN, TALLY_END = "<!-- tallies: tools/rederive_claims.py -->", "<!-- end of tallies -->"


def rederive(results: str = "docs/results") -> list[dict]:
    """One row per claim and seed (and ``pooled``) with the re-derived verdict."""
    stored: dict[tuple[str, int], list[dict[str, str]]] = {}
    source: dict[tuple[str, int], str] = {}  # the results file a (claim, seed) comes from
    for name in REPORTS:  # a later report replaces an earlier one's (claim, seed)
        for t in read_rows(os.path.join(results, name))["tables"]:
            stored[t["claim"], t["seed"]] = _rows(t["rows"])
            source[t["claim"], t["seed"]] = name
    for name, tables in _world_reports(results):  # a claim's every seed, replaced
        held = {t["claim"] for t in tables}
        for key in [k for k in stored if k[0] in held]:
            del stored[key], source[key]
        for t in tables:
            stored[t["claim"], t["seed"]] = _rows(t["rows"])
            source[t["claim"], t["seed"]] = name
    data_stats, ds_source, series = _stored_data_stats(results)
    stored.update(data_stats)
    source.update(ds_source)
    rows = []
    for c in CLAIMS:
        paper, words = f"{c.paper} {c.where}", f"“{c.quote}”"
        per_seed = {}
        unregistered = sorted(s for (i, s) in stored if i == c.id and s not in c.seeds)
        if unregistered:
            raise ValueError(f"{c.id}: stored seeds {unregistered} are not registered "
                             f"(studies.registry.CLAIMS seeds {c.seeds}); register them first")
        for s in sorted(s for (i, s) in stored if i == c.id):
            table = stored[c.id, s]
            checks = C.expand(c.checks, [r["id"] for r in table], keep_empty=False)
            # 300 test questions in every replicate run (docs/replication.md, Budget).
            a, b = (data_stats_lib.SWAP_NAMES if _data_stats_seed(source[c.id, s])
                    else ("A", "B"))
            entries = C.rejudge(table, checks, a, b, documented_n=300)
            for e in entries:
                if (c.id, s, e["id"]) in series:
                    e["series"] = series[c.id, s, e["id"]]
            per_seed[s] = (entries, source[c.id, s])
        rows += _claim_rows(c.id, c.scope_status, paper, words, f"{c.a} vs {c.b}", per_seed)
    for cid, name, table, a, b, checks, quote, where, seeds in OTHER:
        per_seed = {}
        for s in seeds:
            report = name if s == 0 else OTHER_SEED_REPORT.format(seed=s)
            path = os.path.join(results, report)
            if os.path.exists(path):
                keyed = read_rows(path)["tables"].get(table, {})
                per_seed[s] = (C.rejudge(_rows(keyed), checks, a, b), report)
        rows += _claim_rows(cid, "exploratory", where, f"“{quote}”", f"{a} vs {b}", per_seed)
    return rows


def _claim_rows(cid: str, status: str, paper: str, words: str, ab: str,
                per_seed: dict[int, tuple[list[dict], str]]) -> list[dict]:
    """A claim's seed-0 row and, with several seeds stored, its pooled row (``eval.claims``);
    ``per_seed``: ``{seed: (entries, results file)}``."""
    if not per_seed:
        return [{"claim": cid, "status": status, "paper": paper, "the paper's words": words,
                 "verdict": "not run (no stored result at the current setting)"}]
    seeds = sorted(per_seed)
    # One seed's own row: seed 0's, or the only seed's.
    single = seeds[0] == 0 or len(seeds) == 1
    rows = []
    if single:
        entries, report = per_seed[seeds[0]]
        rows.append(_row(cid, status, paper, words, ab, str(seeds[0]), report, entries))
    if len(seeds) > 1:
        pooled = C.pool_claim([per_seed[s][0] for s in seeds])
        files = ", ".join(dict.fromkeys(per_seed[s][1] for s in seeds))
        row = _row(cid, status, paper, AS_ABOVE if single else words, ab,
                   "pooled " + ",".join(map(str, seeds)), files, pooled["checks"])
        row[SEED_LEVEL] = pooled["seed_cell"]
        row[MIXED] = pooled["mixed_cell"]
        row["verdict"] = pooled["verdict_text"]
        row["fragile"] = pooled["fragile"]
        row["seed_entries"] = pooled["seed_checks"]
        rows.append(row)
    return rows


def _row(cid: str, status: str, paper: str, words: str, ab: str, seed: str, report: str,
         entries: list[dict]) -> dict:
    cells = []
    for e in entries:
        if "diff_shown" not in e:
            cells.append(f"{e['metric']}: {e['verdict']}")
            continue
        ci = e.get("95% CI", "—")
        cells.append(f"{e['metric']} {e['diff_shown']:+.2f} {ci} (p={e['p_null']:.2g}; "
                     f"Holm p={e['p_holm']:.2g})"
                     if "p_holm" in e else f"{e['metric']} {e['diff_shown']:+.2f}: "
                     f"{e['verdict']}")
    return {"claim": cid, "status": status, "paper": paper, "the paper's words": words,
            "A vs B": ab, "seed": seed, "report": report, RESULT: "; ".join(cells),
            SEED_LEVEL: "—", MIXED: "—", "verdict": C.verdict_text(entries),
            "entries": list(entries)}


def _final(rows: list[dict]) -> dict[str, dict]:
    """Each claim's row of record: its pooled row where there is one, else its only row."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["claim"] not in out or str(r.get("seed", "")).startswith("pooled"):
            out[r["claim"]] = r
    return out


def tallies(rows: list[dict]) -> str:
    """Markdown bullets: the pre-registered claims by verdict (their row of record), PiCL and
    EADPR twins (``Claim.twin``: the same loss family on the same measure and runs) counted
    once, fragile verdicts marked, and the multiplicity across the claims in one sentence."""
    twin = {c.id: c.twin for c in CLAIMS}
    registered = {k: r for k, r in _final(rows).items() if r["status"].startswith("pre-registered")}
    final = {k: r for k, r in registered.items() if not r["verdict"].startswith("not run")}
    waiting = [k for k in registered if k not in final]
    groups: dict[str, list[str]] = {}
    for cid in final:
        groups.setdefault(twin.get(cid) or cid, []).append(cid)
    by_word: dict[str, list[str]] = {}
    def word_of(cid: str) -> str:
        return final[cid]["verdict"].split(":")[0].split(" (")[0]

    for members in groups.values():
        words = {word_of(m) for m in members}
        if len(words) == 1:
            word, label = words.pop(), " = ".join(f"`{m}`" for m in members)
        else:
            word = "PiCL and EADPR differ"
            label = " vs ".join(f"`{m}` ({word_of(m)})" for m in members)
        if any(final[m].get("fragile") for m in members):
            label += " *fragile*"
        by_word.setdefault(word, []).append(label)
    order = [*C.VERDICTS, C.UNINFORMATIVE, "PiCL and EADPR differ"]
    n_twins = sum(len(m) > 1 for m in groups.values())
    lines = [f"{len(final)} pre-registered claims with results, {len(groups)} results once the "
             f"{n_twins} PiCL/EADPR twin groups count once (twins joined by =):"]
    for word in sorted(by_word, key=lambda w: order.index(w) if w in order else len(order)):
        lines.append(f"- {word} ({len(by_word[word])}): {', '.join(by_word[word])}")
    if waiting:
        lines.append(f"- registered, not run yet ({len(waiting)}): "
                     + ", ".join(f"`{k}`" for k in waiting))
    fragile = sum(bool(r.get("fragile")) for r in final.values())
    lines.append(
        f"\nMultiplicity: each claim is tested at α = {C.ALPHA:g} (reproduced: every check, "
        f"unadjusted; reversed: Holm over its checks); nothing controls the error over the "
        f"{len(groups)} results, so about {C.ALPHA * len(groups):.1f} of them could take a "
        f"significant word by chance under the null. A reversal with a Holm p above "
        f"{C.ALPHA / len(groups):.2g} (Bonferroni over the {len(groups)}) would not survive "
        f"a correction across claims. {fragile} pre-registered verdict(s) are *fragile*: the "
        "pooled CMH word, conditional on the trained models and the world draw, differs from "
        "the seed-level t-test's or the mixed-effects logistic model's word.")
    return "\n".join(lines)


FACTORIAL_BEGIN = "<!-- factorial: tools/rederive_claims.py -->"
FACTORIAL_END = "<!-- end of factorial -->"
# The sign of a check's B − A from its word and what it expected: significant, or 0.
_SIGN = {("reproduced", "up"): "+", ("reversed", "up"): "−", ("reproduced", "down"): "−",
         ("reversed", "down"): "+"}


def factorial(rows: list[dict]) -> str:
    """The 2 × 2 factorial (``studies.registry.FACTORIAL``) as markdown: per cell, the row of
    record's PiCL − DPR check on ``FACTORIAL_METRIC`` (pooled estimate, seed-level t, word, how
    many world draws), then the sign pattern and what it says: the sign follows the hard
    negatives, the pooling, both, or neither."""
    final = _final(rows)
    world_reports = set(WORLD_REPORTS)
    head = ["| hard negatives | pooling | claim | runs (DPR vs PiCL) | seeds | world draws | "
            f"PiCL − DPR, {outcomes.metric(FACTORIAL_METRIC).label} [95% CI] (p) | "
            "seed-level: signs, t (p) | sign | claim's word |", "|" + "---|" * 10]
    signs: dict[tuple[str, str], str] = {}
    for neg, pool, cid in FACTORIAL:
        c, r = CLAIMS_BY_ID[cid], final.get(cid)
        e = next((x for x in (r or {}).get("entries", []) if x["id"] == FACTORIAL_METRIC), None)
        if e is None or "diff_shown" not in e:
            head.append(f"| {neg} | {pool} | `{cid}` | `{c.a}` vs `{c.b}` | | | not run | | | "
                        f"{(r or {}).get('verdict', 'not run')} |")
            continue
        seed = next((x for x in r.get("seed_entries", []) if x["id"] == FACTORIAL_METRIC), None)
        seeds = r["seed"].removeprefix("pooled ")
        reports = [x.strip() for x in r["report"].split(",")]
        worlds = (str(len(seeds.split(","))) if all(x in world_reports for x in reports)
                  else "1 (world 0)")
        sign = _SIGN.get((e["verdict"], e["expect"]), "0")
        signs[neg, pool] = sign
        seed_cell = (f"{seed['signs']} t({seed['df']})={seed['t']:+.2f} (p={seed['p_null']:.2g})"
                     if seed and "t" in seed else "—")
        head.append(f"| {neg} | {pool} | `{cid}` | `{c.a}` vs `{c.b}` | {seeds} | {worlds} | "
                    f"{e['diff_shown']:+.2f} {e.get('95% CI', '')} (p={e['p_null']:.2g}) | "
                    f"{seed_cell} | {sign} | {r['verdict']} |")
    negs = list(dict.fromkeys(n for n, _, _ in FACTORIAL))
    pools = list(dict.fromkeys(p for _, p, _ in FACTORIAL))
    if len(signs) < len(FACTORIAL):
        waiting = ", ".join(f"`{cid}`" for n, p, cid in FACTORIAL if (n, p) not in signs)
        verdict = f"Not decided: the cells of {waiting} have not run."
    elif "0" in signs.values():
        flat = ", ".join(f"{n} × {p}" for n, p, _ in FACTORIAL if signs[n, p] == "0")
        verdict = (f"Not decided: no significant difference in {flat}, so the pattern does not "
                   "separate the two factors.")
    else:
        same_under_pool = all(len({signs[n, p] for p in pools}) == 1 for n in negs)
        same_under_neg = all(len({signs[n, p] for n in negs}) == 1 for p in pools)
        if same_under_pool and not same_under_neg:
            verdict = ("The sign follows the hard negatives: it is the same under both poolings "
                       "and differs between the two sources of negatives.")
        elif same_under_neg and not same_under_pool:
            verdict = ("The sign follows the pooling, not the hard negatives: it is the same "
                       "for both sources of negatives and differs between the poolings.")
        elif same_under_pool and same_under_neg:
            verdict = "The sign is the same in every cell: neither factor changes it."
        else:
            verdict = ("Neither factor alone decides the sign: it depends on their combination "
                       "(an interaction).")
    pattern = "; ".join(f"{n} × {p}: {signs.get((n, p), '?')}" for n, p, _ in FACTORIAL)
    return "\n".join(head + ["", f"Signs (+ / − significant at α = {C.ALPHA:g} by the test of "
                                  "the cell's row of record, pooled over its seeds; 0 not): "
                                  f"{pattern}. {verdict}"])


def table(rows: list[dict]) -> str:
    """The derived table as markdown (header, rule, one line per row)."""
    return "\n".join(["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
                     + ["| " + " | ".join(str(r.get(k, "")) for k in COLUMNS) + " |"
                        for r in rows])


def splice(doc: str, rows: list[dict]) -> str:
    """``doc`` (docs/replication.md's text) with its derived table, the tallies between
    :data:`TALLY_BEGIN` / :data:`TALLY_END` and, where the doc has its markers, the factorial
    between :data:`FACTORIAL_BEGIN` / :data:`FACTORIAL_END` replaced by those of ``rows``; the
    rest unchanged. A doc without the table's header or the tally markers is refused."""
    lines = doc.split("\n")
    header = table([]).split("\n")[0]
    if header not in lines or TALLY_BEGIN not in doc or TALLY_END not in doc:
        raise ValueError("the document has no derived table header or no tally markers")
    i = lines.index(header)
    j = i + 2
    while j < len(lines) and lines[j].startswith("| "):
        j += 1
    lines[i:j] = table(rows).split("\n")
    text = "\n".join(lines)
    for begin, end, block in ((TALLY_BEGIN, TALLY_END, tallies),
                              (FACTORIAL_BEGIN, FACTORIAL_END, factorial)):
        if begin in text and end in text:
            a, b = text.index(begin) + len(begin), text.index(end)
            text = text[:a] + "\n" + block(rows).strip("\n") + "\n" + text[b:]
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="docs/results")
    ap.add_argument("--write", metavar="DOC", help="write the table and tallies into DOC "
                    "(docs/replication.md) in place instead of printing them")
    args = ap.parse_args()
    rows = rederive(args.results)
    if args.write:
        with open(args.write, encoding="utf-8") as f:
            text = splice(f.read(), rows)
        atomic_write(args.write, lambda f: f.write(text), binary=False)
        print(f"wrote {args.write}")
        return
    print(table(rows) + "\n\n" + tallies(rows) + "\n\n" + factorial(rows))


if __name__ == "__main__":
    main()
