"""Encoder marginalisation: attribute retrieval accuracy to question vs passage encoders (docs/method.md §7).

``python -m dense_cf.cli.marginalize --workdirs A B C ... --test FILE [--corpus FILE]
[--k 1,5,20,100] [--in_domain NAME] [--out DIR]``

Every question encoder ηQ^(i) of K trained runs is paired with every passage encoder ηD^(j):
``M_k[i, j]`` = DPR top-k accuracy (%) of the pair on the test questions (docs/method.md §6, has_answer).
Rows are question encoders, columns passage encoders; the diagonal holds the tandem models.
The contribution of an encoder is eq. 7 of the attribution paper, the mean over the K encoders
of the other side (the tandem included): ``Q_i = (1/K) Σ_j M[i, j]`` and ``P_j = (1/K) Σ_i
M[i, j]``. Each is reported in % of the encoder's own tandem model ``M[i, i]`` (= 100 %) and,
with ``--in_domain``, in % of the named in-domain run's tandem (the paper's Fig. 2
normalisation); the mean over the *other* K-1 encoders is reported too.

Work is shared and resumable: passages are exported once per passage encoder and corpus
(``dense_cf.retrieval.export.export_passages`` via ``dense_cf.retrieval.retriever.ensure_index``, resumable
shards) and the index is saved and reused; a run's own corpus shares
``WORKDIR/export/step_N`` with ``dense_cf.eval.retrieval``, other corpora go to
``WORKDIR/marginalize/<corpus tag>/``. Question embeddings are computed once per question
encoder and cached beside them. Cross-pairing needs equal embedding dimensions in all runs.
A DCSR run's passage side retrieves as ``dense_cf.eval.retrieval`` does for it (sentence index,
passages ranked by HasAns, docs/method.md §4), so its tandem cell equals its own retrieval report.

Writes ``report.json``, ``report.md`` and ``heatmap.png`` into ``--out``. ``report.json`` holds
each cell's 95 % Wilson interval (``matrix_ci``) and the per-question first-hit ranks of every
pair (``first_hit_rank["i,j"]``); ``report.md`` tests every cross pair against its question
encoder's tandem on the same questions (exact McNemar, significance at 0.05 in words).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from absl import logging

from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.eval import metrics as metrics_lib
from dense_cf.eval import outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.files import atomic_save_npy
from dense_cf.index.base import is_saved_index
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import load_corpus, load_qa
from dense_cf.retrieval.retriever import (
    ensure_index,
    ensure_sentence_index,
    index_spec,
    open_saved_index,
    retrieve_by_sentences,
)
from dense_cf.retrieval.sentence_ranking import num_sentences_to_retrieve
from dense_cf.train.run import RunDir, build_model, file_tag, load_config, load_run

DEFAULT_KS = (1, 5, 20, 100)
REPORT_NAME = outcomes.REPORT  # beside report.md and heatmap.png in the output directory


def report_path(out_dir: str) -> str:
    """Where :func:`marginalize_many` writes a test set's JSON report in ``out_dir``."""
    return os.path.join(out_dir, REPORT_NAME)


# ---------------------------------------------------------------------------------------------
# Pure arithmetic (matrix -> marginals -> normalisation).
# ---------------------------------------------------------------------------------------------
def marginals(matrix: np.ndarray, *, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(question-encoder, passage-encoder) contributions of a K×K pairing matrix (eq. 7).

    ``matrix[i, j]`` = score of question encoder i with passage encoder j. Row means give the
    question encoders, column means the passage encoders. ``exclude_self`` averages over the
    other K-1 encoders only (undefined, NaN, for K = 1).
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"pairing matrix must be square K×K with K >= 1, got shape {m.shape}")
    if not exclude_self:
        return m.mean(axis=1), m.mean(axis=0)
    k = m.shape[0]
    if k == 1:
        return np.full(1, np.nan), np.full(1, np.nan)
    off = m.copy()
    np.fill_diagonal(off, 0.0)
    return off.sum(axis=1) / (k - 1), off.sum(axis=0) / (k - 1)


def relative(values: np.ndarray, reference: np.ndarray | float) -> np.ndarray:
    """``100 * values / reference`` (percent of the reference; NaN where the reference is 0)."""
    v = np.asarray(values, dtype=np.float64)
    ref = np.broadcast_to(np.asarray(reference, dtype=np.float64), v.shape)
    out = np.full(v.shape, np.nan)
    ok = ref != 0
    out[ok] = 100.0 * v[ok] / ref[ok]
    return out


def attribution(matrix: np.ndarray, in_domain: int | None = None) -> dict[str, np.ndarray]:
    """Marginal contributions of every encoder and their normalisations (docs/method.md §7).

    ``*_rel_tandem``: in % of the encoder's own tandem model ``M[i, i]``; ``*_rel_in_domain``
    (only with ``in_domain`` = d): in % of the in-domain tandem ``M[d, d]``.
    """
    m = np.asarray(matrix, dtype=np.float64)
    q, p = marginals(m)
    q_other, p_other = marginals(m, exclude_self=True)
    diag = np.diag(m)
    out = {"tandem": diag, "q_marginal": q, "p_marginal": p,
           "q_marginal_others": q_other, "p_marginal_others": p_other,
           "q_rel_tandem": relative(q, diag), "p_rel_tandem": relative(p, diag)}
    if in_domain is not None:
        if not 0 <= in_domain < m.shape[0]:
            raise ValueError(f"in_domain index {in_domain} out of range for K={m.shape[0]}")
        out["q_rel_in_domain"] = relative(q, m[in_domain, in_domain])
        out["p_rel_in_domain"] = relative(p, m[in_domain, in_domain])
    return out


def check_dims(dims: dict[str, int]) -> int:
    """The common embedding dimension of all runs, or a ValueError naming the odd ones."""
    values = sorted(set(dims.values()))
    if len(values) != 1:
        listing = ", ".join(f"{name}: {d}" for name, d in dims.items())
        raise ValueError("encoder marginalisation pairs every question encoder with every passage "
                         "encoder, so all runs need the same embedding dimension; got " + listing)
    return values[0]


# ---------------------------------------------------------------------------------------------
# Side effects: loading runs, exporting, searching, writing.
# ---------------------------------------------------------------------------------------------
@dataclass
class RunSpec:
    name: str
    workdir: str
    step: int | None


def parse_runs(specs: Sequence[str]) -> list[RunSpec]:
    """``DIR`` or ``DIR@STEP``; names are directory basenames (made unique with a suffix)."""
    out: list[RunSpec] = []
    seen: dict[str, int] = {}
    for s in specs:
        workdir, step = s, None
        if "@" in s and s.rsplit("@", 1)[1].isdigit():
            workdir, st = s.rsplit("@", 1)
            step = int(st)
        base = os.path.basename(os.path.normpath(workdir)) or workdir
        n = seen.get(base, 0)
        seen[base] = n + 1
        name = base if n == 0 else f"{base}#{n + 1}"
        if step is not None:
            name += f"@{step}"
        out.append(RunSpec(name, workdir, step))
    return out


def _cache_root(workdir: str, config, corpus_path: str) -> str:
    """The run's own corpus shares WORKDIR/export with dense_cf.eval.retrieval."""
    return RunDir(workdir).for_corpus(config, corpus_path, subdir="marginalize").root


def _question_embeddings(run, encoder, questions: Sequence[str], cache_path: str) -> np.ndarray:
    if os.path.exists(cache_path):
        emb = np.load(cache_path)
        if emb.shape[0] == len(questions):
            return emb
    emb = export.encode_questions(run, questions, encoder=encoder).astype(np.float32)
    atomic_save_npy(cache_path, emb)
    return emb


def _pair_hits(rows: np.ndarray, answers: Sequence[Sequence[str]], texts: Sequence[str],
               mode: str, cache: dict[tuple[int, int], bool]) -> list[list[bool]]:
    """has_answer per retrieved row; cached per (question, passage) across pairs."""
    out = []
    for qi, row in enumerate(rows):
        row = [int(r) for r in row if r >= 0]
        todo = [r for r in row if (qi, r) not in cache]
        if todo:
            for r, h in zip(todo, metrics_lib.hits_for_question(answers[qi],
                                                                 [texts[r] for r in todo], mode)):
                cache[(qi, r)] = h
        out.append([cache[(qi, r)] for r in row])
    return out


def run_marginalization(workdirs: Sequence[str], test_path: str, *, corpus_path: str | None = None,
                        ks: Sequence[int] = DEFAULT_KS, out_dir: str | None = None,
                        in_domain: str | int | None = None, index_kind: str = "flat",
                        answer_mode: str | None = None, batch_size: int | None = None,
                        title: str | None = None) -> dict[str, Any]:
    """K×K cross-pairing top-k matrices and eq. 7 attributions; writes and returns the report."""
    return marginalize_many(workdirs, [TestSet(test_path, corpus_path, in_domain, out_dir, title)],
                            ks=ks, index_kind=index_kind, answer_mode=answer_mode,
                            batch_size=batch_size)[0]


@dataclass
class TestSet:
    """One evaluation: test questions, their corpus (None: the first run's), in-domain run."""
    test: str
    corpus: str | None = None
    in_domain: str | int | None = None
    out_dir: str | None = None
    title: str | None = None


def marginalize_many(workdirs: Sequence[str], test_sets: Sequence[TestSet], *,
                     ks: Sequence[int] = DEFAULT_KS, index_kind: str = "flat",
                     answer_mode: str | None = None, batch_size: int | None = None
                     ) -> list[dict[str, Any]]:
    """:func:`run_marginalization` for several test sets, loading each run only once."""
    t_start = time.perf_counter()
    runs = parse_runs(workdirs)
    if not runs:
        raise ValueError("no runs given: pass --workdirs DIR [DIR ...]")
    ks = tuple(sorted({int(k) for k in ks}))
    configs = [load_config(r.workdir) for r in runs]
    # Dimension check before any export: models are built without weights (cheap).
    check_dims({r.name: int(build_model(c, load_pretrained=False)[0].config.hidden_size)
                for r, c in zip(runs, configs)})
    names = [r.name for r in runs]
    sets = []
    for ts in test_sets:
        if not os.path.exists(ts.test):
            raise FileNotFoundError(f"test file not found: {ts.test}")
        corpus_path = ts.corpus or resolve_data_file(configs[0].data, "corpus_file")
        d_idx = None
        if ts.in_domain is not None:
            if isinstance(ts.in_domain, int) or str(ts.in_domain).isdigit():
                d_idx = int(ts.in_domain)
            elif ts.in_domain in names:
                d_idx = names.index(ts.in_domain)
            else:
                raise ValueError(f"in_domain {ts.in_domain!r} is none of the runs {names}")
            if not 0 <= d_idx < len(runs):
                raise ValueError(f"in_domain index {d_idx} out of range for {len(runs)} runs")
        questions, answers = load_qa(ts.test)
        if not questions:
            raise ValueError(f"{ts.test}: no valid questions")
        sets.append({"ts": ts, "corpus_path": corpus_path, "corpus": load_corpus(corpus_path),
                     "questions": questions, "answers": answers, "d_idx": d_idx,
                     "tag": file_tag(ts.test), "q_emb": [], "index": []})
    answer_mode = answer_mode or configs[0].data.answer_mode
    k_max = max(ks)

    # Phase 1: per run, question embeddings + passage index of every test set (each exported
    # once and reused by later calls).
    run_info = []
    timing: dict[str, Any] = {"per_run": {}}
    for spec, cfg in zip(runs, configs):
        t0 = time.perf_counter()
        run = load_run(spec.workdir, spec.step)
        bs = batch_size or cfg.eval.batch_size
        encoder = export.Encoder(run, bs)
        per = {}
        for st in sets:
            q_cache = os.path.join(spec.workdir, "marginalize", "questions", st["tag"],
                                   f"step_{run.step}.npy")
            st["q_emb"].append(_question_embeddings(run, encoder, st["questions"], q_cache))
            root = _cache_root(spec.workdir, cfg, st["corpus_path"])
            sentences = None
            if run.method.unit == "sentence":  # sentence index + HasAns (docs/method.md §4)
                index, t_idx, sent_pid, kbar = ensure_sentence_index(
                    run, st["corpus"], root, kind=index_kind, batch_size=bs,
                    dtype=cfg.eval.embedding_dtype, shard_size=cfg.eval.shard_size,
                    encoder=encoder)
                n_sent = min(num_sentences_to_retrieve(
                    k_max, kbar, run.method.sentence_index(cfg).retrieve_sentences),
                             len(sent_pid))
                sentences = (sent_pid, n_sent)
            else:
                index, t_idx = ensure_index(run, st["corpus"], root, kind=index_kind,
                                            batch_size=bs, dtype=cfg.eval.embedding_dtype,
                                            shard_size=cfg.eval.shard_size, encoder=encoder)
            index_dir = RunDir(root).index(run.step, index_kind)
            # Reload from disk in phase 2 (one index in memory at a time) when it was saved
            # where ensure_index saves it, with the run's search-time settings (nprobe,
            # rerank); otherwise keep the object.
            reload = functools.partial(open_saved_index, index_dir, RunDir(root).export(run.step),
                                       index_spec(cfg.eval, index_kind), int(cfg.eval.rerank))
            st["index"].append((reload if is_saved_index(index_dir) else index, sentences))
            per[st["tag"]] = {"export_root": root, **t_idx}
            del index
        run_info.append({"name": spec.name, "workdir": os.path.abspath(spec.workdir),
                         "step": int(run.step), "method": cfg.method,
                         "model": cfg.model.name_or_path,
                         "dim": int(sets[0]["q_emb"][-1].shape[1]) if sets else None})
        timing["per_run"][spec.name] = {"load_encode_index_s": time.perf_counter() - t0, **per}
        logging.info("marginalize: %s step %d ready (%.1fs)", spec.name, run.step,
                     time.perf_counter() - t0)
        del run, encoder

    reports = []
    K = len(runs)
    for st in sets:
        ts, corpus, d_idx = st["ts"], st["corpus"], st["d_idx"]
        # Phase 2: one passage index at a time against every question encoder.
        mats = {k: np.zeros((K, K)) for k in ks}
        mrr = np.zeros((K, K))
        firsts: dict[str, list[int | None]] = {}  # "i,j" -> per-question first-hit rank
        cache: dict[tuple[int, int], bool] = {}
        t0 = time.perf_counter()
        row_of = None
        for j in range(K):
            src, sentences = st["index"][j]
            index = src() if callable(src) else src
            for i in range(K):
                if sentences is None:
                    _, rows = index.search(st["q_emb"][i], min(k_max, len(corpus)))
                else:
                    row_of = row_of or {pid: r for r, pid in enumerate(corpus.ids)}
                    ranked = retrieve_by_sentences(index, st["q_emb"][i], corpus, k_max,
                                                   sentences[0], sentences[1])
                    rows = [[row_of[x[0]] for x in r] for r in ranked]
                hits = _pair_hits(rows, st["answers"], corpus.texts, answer_mode, cache)
                acc = metrics_lib.top_k_accuracy(hits, ks)
                for k in ks:
                    mats[k][i, j] = 100.0 * acc[k]
                mrr[i, j] = metrics_lib.mrr(hits)
                firsts[f"{i},{j}"] = metrics_lib.per_question(hits)
            del index
        attr = {k: attribution(mats[k], d_idx) for k in ks}
        report = {
            "test": os.path.abspath(ts.test), "corpus": os.path.abspath(st["corpus_path"]),
            "n_questions": len(st["questions"]), "corpus_size": len(corpus), "index": index_kind,
            "answer_mode": answer_mode, "ks": list(ks),
            "runs": [{**r, "export_root": timing["per_run"][r["name"]][st["tag"]]["export_root"]}
                     for r in run_info],
            "in_domain": names[d_idx] if d_idx is not None else None,
            "rows": "question encoder", "cols": "passage encoder",
            "matrix": {k: mats[k] for k in ks}, "mrr_matrix": mrr,
            # 95 % Wilson intervals of every cell, and the per-question outcomes behind them.
            "matrix_ci": {k: [[[100 * x for x in stats.wilson_interval(
                sum(1 for r in firsts[f"{i},{j}"] if r is not None and r <= k),
                len(st["questions"]))] for j in range(K)] for i in range(K)] for k in ks},
            "first_hit_rank": firsts,
            "attribution": attr,
            # P_i − Q_i per run, paired over questions (the attribution paper's claim: P > Q).
            "encoder_contrast": [{"metric": r["metric"], "sentence": r["sentence"], **r["stats"]}
                                 for r in encoder_contrast_rows(names, firsts, ks)],
            "timing": {"per_run": {n: {"load_encode_index_s": t["load_encode_index_s"],
                                       **t[st["tag"]]} for n, t in timing["per_run"].items()},
                       "search_and_score_s": time.perf_counter() - t0,
                       "total_s": time.perf_counter() - t_start},
        }
        out_dir = ts.out_dir or os.path.join(os.path.dirname(os.path.abspath(runs[0].workdir)),
                                             "marginalize", st["tag"])
        os.makedirs(out_dir, exist_ok=True)
        report["out_dir"], report["units"] = os.path.abspath(out_dir), report_lib.JSON_UNITS
        title = ts.title or f"Encoder marginalisation on {os.path.basename(ts.test)}"
        report_lib.write_json(report_path(out_dir), report)
        report_lib.write_markdown(os.path.join(out_dir, "report.md"), title,
                                  markdown_sections(names, mats, attr, d_idx, report)
                                  + [("Heat-map", "![top-k of every encoder pair](heatmap.png)")])
        try:
            plot_heatmaps(os.path.join(out_dir, "heatmap.png"), names, mats,
                          title=ts.title or os.path.basename(ts.test))
            report["heatmap"] = os.path.join(out_dir, "heatmap.png")
        except ImportError as e:  # matplotlib is optional for the numbers
            logging.warning("no heat-map: %s", e)
        report["out_dir"] = out_dir
        reports.append(report)
    return reports


def format_matrix(names: Sequence[str], matrix: np.ndarray) -> str:
    """Markdown K×K table: rows question encoders, columns passage encoders."""
    rows = [{"Q \\ P": n, **{p: float(matrix[i, j]) for j, p in enumerate(names)}}
            for i, n in enumerate(names)]
    return report_lib.markdown_table(rows, ["Q \\ P", *names])


def cross_pair_table(names: Sequence[str], firsts: dict[str, Sequence[int | None]],
                     ks: Sequence[int]) -> str:
    """Markdown: every cross pair (question encoder i, passage encoder j ≠ i) against the tandem
    (i, i) on the same questions, per k: top-k of each with its 95 % interval, the exact
    McNemar test and whether the difference is significant at 0.05 (``stats.compare_outcomes``)."""
    rows = []
    for k in ks:
        for i, q in enumerate(names):
            tandem = pair_hits_at(firsts, i, i, k)
            for j, p in enumerate(names):
                if j == i:
                    continue
                pair = pair_hits_at(firsts, i, j, k)
                rows.append(stats.compare_outcomes(f"top-{k}: Q {q} × P {p}", tandem, pair,
                                                   names=("tandem (Q×Q)", "cross pair")))
    cols = ["metric", "n", "tandem (Q×Q)", "cross pair", "B − A", "test", "p",
            f"significant at {stats.ALPHA:g}"]
    return (report_lib.markdown_table(rows, cols) + "\n\n"
            + "\n".join(f"- {r['sentence']}" for r in rows))


def per_question_marginals(firsts: dict[str, Sequence[int | None]], n_encoders: int, k: int
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Per-question eq. 7: ``Q[i, q]`` = mean over passage encoders j of hit@k(i, j, q) and
    ``P[j, q]`` = mean over question encoders i; their means over questions are ``Q_i``/``P_j``."""
    hits = np.array([[[r is not None and r <= k for r in firsts[f"{i},{j}"]]
                      for j in range(n_encoders)] for i in range(n_encoders)], np.float64)
    return hits.mean(axis=1), hits.mean(axis=0)


def encoder_contrast_rows(names: Sequence[str], firsts: dict[str, Sequence[int | None]],
                          ks: Sequence[int], only: int | None = None) -> list[dict[str, Any]]:
    """The attribution paper's claim as a paired test: for each run's encoders (``only``: the
    in-domain run's), its passage encoder's marginal P_i against its question encoder's Q_i on
    the same questions, paired bootstrap of P − Q over questions (``stats.compare_outcomes``)."""
    rows = []
    for k in ks:
        q_m, p_m = per_question_marginals(firsts, len(names), k)
        for i, n in enumerate(names):
            if only is not None and i != only:
                continue
            m = outcomes.metric(f"retrieval.top{k}.domain.{n}")
            rows.append({**stats.compare_outcomes(m.label, q_m[i], p_m[i], kind="mean",
                                                  scale=100.0,
                                                  names=("Q marginal", "P marginal")),
                         "id": m.id})
    return rows


def pair_hits_at(firsts: dict[str, Sequence[int | None]], question: int, passage: int, k: int
                 ) -> np.ndarray:
    """bool[n]: whether question encoder ``question`` × passage encoder ``passage`` has a hit in
    its top-``k`` for each test question (from a report's ``first_hit_rank``)."""
    return np.array([r is not None and r <= k for r in firsts[f"{question},{passage}"]], bool)


def passage_swap_rows(firsts: dict[str, Sequence[int | None]], question: int, ref: int,
                      alt: int, ks: Sequence[int], names: tuple[str, str]
                      ) -> list[dict[str, Any]]:
    """Passage encoder ``alt`` against ``ref``, both paired with question encoder ``question``,
    on the same test questions: one ``top-k`` row per k (exact McNemar on per-question hits;
    the attribution paper's Table 4 compares SQuAD-40 % with SQuAD-100 % this way)."""
    return [{**stats.compare_outcomes(outcomes.metric(f"retrieval.top{k}").label,
                                      pair_hits_at(firsts, question, ref, k),
                                      pair_hits_at(firsts, question, alt, k), names=names),
             "id": f"retrieval.top{k}"} for k in ks]


def trend_row(metric_id: str, statistic: Sequence[float], marginal: Sequence[float],
              names: tuple[str, str], labels: tuple[str, str], *, seed: int = 0
              ) -> dict[str, Any]:
    """A report row for the rank correlation of an encoder's marginal with a training-data
    statistic over the settings (data fractions): Spearman's ρ with its exact permutation
    p-value (``stats.spearman_test``). The row's ``names`` cells say what was correlated
    (``labels``), ``B − A`` holds ρ and ``stats["diff"]`` = ρ, so claim checks read it as a
    paired row (``expect="up"``: a positive, significant correlation)."""
    metric = outcomes.metric(metric_id).label
    t = stats.spearman_test(statistic, marginal, seed=seed)
    rho, p = t["rho"], t["p_value"]
    verdict = "significant" if p < stats.ALPHA else "not significant"
    return {"metric": metric, "id": metric_id, "n": t["n"], names[0]: labels[0],
            names[1]: labels[1],
            "B − A": f"ρ = {rho:+.3f}", "test": f"Spearman, {t['method']}", "p": f"{p:.3g}",
            f"significant at {stats.ALPHA:g}": "yes" if p < stats.ALPHA else "no",
            "sentence": (f"{metric}: Spearman ρ = {rho:+.3f} over {t['n']} settings; {verdict} "
                         f"at {stats.ALPHA:g} (p = {p:.3g}, {t['method']})."),
            # The series travel with the row so that seeds can be pooled
            # (stats.spearman_pooled via eval.claims.pool_seed_checks).
            "stats": {"kind": "spearman", "diff": rho, **t,
                      "x": [float(v) for v in statistic], "y": [float(v) for v in marginal]}}


def markdown_sections(names: Sequence[str], mats: dict[int, np.ndarray],
                      attr: dict[int, dict[str, np.ndarray]], d_idx: int | None,
                      rep: dict[str, Any]) -> list[tuple[str, str]]:
    sections = []
    for k, m in mats.items():
        a = attr[k]
        rows = []
        for i, n in enumerate(names):
            row = {"encoder": n, "tandem": a["tandem"][i],
                   "Q marginal": a["q_marginal"][i], "Q % tandem": a["q_rel_tandem"][i],
                   "P marginal": a["p_marginal"][i], "P % tandem": a["p_rel_tandem"][i]}
            if d_idx is not None:
                row["Q % in-domain"] = a["q_rel_in_domain"][i]
                row["P % in-domain"] = a["p_rel_in_domain"][i]
            rows.append(row)
        table = report_lib.markdown_table(rows, list(rows[0]))
        sections.append((f"Top-{k} accuracy (%): question encoder (rows) × passage encoder (cols)",
                         format_matrix(names, m)))
        sections.append((f"Top-{k}: marginalised contributions (eq. 7, mean over all K "
                         f"encoders of the other side)", table))
    firsts = rep.get("first_hit_rank")
    if firsts and len(names) > 1:
        rows = encoder_contrast_rows(names, firsts, list(mats))
        cols = ["metric", "n", "Q marginal", "P marginal", "B − A", "test", "p",
                f"significant at {stats.ALPHA:g}"]
        sections.append(("Passage vs question encoder: P_i − Q_i per question (eq. 7 per "
                         "question, paired bootstrap; the attribution paper's claim is P > Q)",
                         report_lib.markdown_table(rows, cols) + "\n\n"
                         + "\n".join(f"- {r['sentence']}" for r in rows)))
        sections.append(("Cross pairs vs. the question encoder's tandem, paired on the same "
                         "questions (95 % Wilson intervals, exact McNemar)",
                         cross_pair_table(names, firsts, list(mats))))
    sections.append(report_lib.columns_section(["top-k", "Q marginal"]))
    sections.append(("Setup", f"{rep['n_questions']} questions from {rep['test']}; corpus "
                              f"{rep['corpus']} ({rep['corpus_size']} passages); index "
                              f"{rep['index']}; answer matching {rep['answer_mode']}; "
                              f"in-domain run: {rep['in_domain']}."))
    return sections


def plot_heatmaps(path: str, names: Sequence[str], mats: dict[int, np.ndarray],
                  title: str = "") -> None:
    """One annotated heat-map per k (rows question encoders, columns passage encoders)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = list(mats)
    K = len(names)
    size = max(3.0, 0.9 * K + 1.5)
    fig, axes = plt.subplots(1, len(ks), figsize=(size * len(ks), size), squeeze=False)
    for ax, k in zip(axes[0], ks):
        m = mats[k]
        im = ax.imshow(m, cmap="viridis", vmin=0.0, vmax=100.0)
        ax.set_xticks(range(K), names, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(K), names, fontsize=8)
        ax.set_xlabel("passage encoder")
        ax.set_ylabel("question encoder")
        ax.set_title(f"top-{k} (%)")
        for i in range(K):
            for j in range(K):
                ax.text(j, i, f"{m[i, j]:.1f}", ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] < 60 else "black")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def summary_text(rep: dict[str, Any]) -> str:
    """Plain-text matrices and contributions (what the CLI and the benchmark print)."""
    names = [r["name"] for r in rep["runs"]]
    w = max(8, *(len(n) for n in names))
    lines = [f"test={rep['test']} ({rep['n_questions']} questions), corpus={rep['corpus_size']} "
             f"passages; rows = question encoder, cols = passage encoder"]
    for k in rep["ks"]:
        m = rep["matrix"][k]
        a = rep["attribution"][k]
        lines.append(f"top-{k} (%)")
        lines.append(" " * (w + 2) + "".join(f"{n:>{w + 2}}" for n in names) + f"{'Q-marg':>9}"
                     + f"{'Q%tdm':>8}")
        for i, n in enumerate(names):
            lines.append(f"{n:<{w + 2}}" + "".join(f"{m[i][j]:>{w + 2}.1f}" for j in range(len(names)))
                         + f"{a['q_marginal'][i]:>9.1f}{a['q_rel_tandem'][i]:>8.1f}")
        lines.append(f"{'P-marg':<{w + 2}}" + "".join(f"{a['p_marginal'][j]:>{w + 2}.1f}"
                                                      for j in range(len(names))))
        lines.append(f"{'P%tdm':<{w + 2}}" + "".join(f"{a['p_rel_tandem'][j]:>{w + 2}.1f}"
                                                     for j in range(len(names))))
    lines.append(f"output: {rep.get('out_dir')}")
    return "\n".join(lines)


if __name__ == "__main__":  # the design card's command; its binary is cli/marginalize.py
    from dense_cf import app
    from dense_cf.cli import marginalize
    app.run(marginalize.main, marginalize.FLAGS, marginalize.USAGE)
