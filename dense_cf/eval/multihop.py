"""Multi-hop retrieval evaluation of an MDR run (EADPR §4.3, Tables 4/5; docs/multihop.md).

``python -m dense_cf.eval.multihop --workdir RUN [--qa F] [--corpus F] [--beam_size 20]
[--hop2_k 20] [--top_chains 20]`` (binary in ``dense_cf/cli/eval_multihop.py``).

The run's corpus is exported and indexed as for single-hop retrieval (reused when unchanged);
the questions of a HotpotQA-format file (``config.data.test_file``; labels required, context
paragraphs optional) go through the two-hop beam search of :mod:`dense_cf.retrieval.multihop`.
Passages are matched to the gold by title (HotpotQA's identity; a corpus title appears once).
Metrics, per question, then rates with 95 % Wilson intervals:

* chain R@k (EADPR Table 4 layout, k in ``config.multihop.ks``): one of the top-k chains holds
  both supporting passages (in either order);
* MDR R@k: both supporting passages are among the passages of the top-k chains (the figure
  MDR's evaluation script reports as passage EM);
* hop-1 R@k: the first-hop passage (:func:`~dense_cf.datasets.hotpotqa.bridge_order`; either
  passage for a comparison question) among the top-k passages for the question alone;
* hop-2 R@k: the second-hop passage among the top-k passages (other than p1) for the hop-2
  query built from the gold first-hop passage (the second hop in isolation);
* answer R@k: one of the top-k chains holds the answer (DPR ``has_answer`` on "title text" of
  either passage, as MDR's script includes titles); yes/no answers are left out and counted;
* AAR per hop on counterfactual triplets (q, p1, p1*) and (q ⊕ p1, p2, p2*), p* the gold
  passage without its supporting sentences, built by the training code
  (:mod:`dense_cf.inputs.multihop`): sim(q, p) > sim(q, p*) (``aar_math``; a tie is unaware).

Writes ``RUN/eval/step_N/``: ``report.json`` (``top_k`` and ``first_hit_rank`` are the chain
R@k and each question's first chain hit, so ``python -m dense_cf.eval.compare A B`` pairs two
runs with exact McNemar; ``multihop`` holds every figure; ``per_question`` every outcome),
``report.md``, ``chains.json`` (the top chains per question: the reader's input) and
``aar_scores_hop1.npz`` / ``aar_scores_hop2.npz`` (per-triplet scores, paired by compare).

Reader (EADPR Table 5 answer EM/F1; docs/multihop.md, "Reader"): with ``reader_run`` (a
reader-kind run, ``--reader READER_RUN``) the top chains go through the reader's ``predict``,
each chain read as one passage (:func:`chain_passage`: both passages, titles kept, in hop order).
EM/F1 at each k of ``reader_ks`` use SQuAD's normalisation (HotpotQA's; ``text.qa_eval``), per
question type too; yes/no answers are left out and counted (the extractive reader has no yes/no
head) and so are supporting-fact EM/F1 (it predicts no sentence labels). ``e2e.json`` (the
per-question ``em_outcomes``/``f1_outcomes`` that ``eval.compare`` pairs with McNemar) and
``predictions.json`` go beside report.json. :func:`add_reader` does the same for an evaluation
already on disk. ``reader=fn`` stays as a hook: ``fn(chain_records, corpus)`` returns the dict
kept under ``report.json["reader"]``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Sequence

import numpy as np
from absl import app, logging

from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.datasets.formats import RetrievedPassage
from dense_cf.datasets.hotpotqa import HotpotExample, bridge_order, read_hotpot
from dense_cf.eval import aar_math, outcomes, stats
from dense_cf.eval import e2e as e2e_lib
from dense_cf.eval import report as report_lib
from dense_cf.eval.base import Evaluator
from dense_cf.inputs.multihop import drop_sentences, passage_table_rows
from dense_cf.inputs.tokens import encode_texts, hop2_query_row, pad_rows, question_row, special_ids
from dense_cf.progress import Progress
from dense_cf.retrieval.corpus import Corpus, load_corpus
from dense_cf.retrieval.multihop import Hop2Queries, drop_first_hop, two_hop_search
from dense_cf.retrieval.retriever import retriever_for_run
from dense_cf.text.answers import has_answer
from dense_cf.train.run import Run, RunDir, load_run

__all__ = ["HOPS", "READER_KS", "YES_NO", "aar_triplets", "add_reader", "answer_ranks",
           "chain_passage", "chain_ranks", "chain_results", "evaluate_multihop", "list_ranks",
           "read_chains", "recall_table", "span_answer", "union_ranks"]

HOPS = ("hop1", "hop2")
YES_NO = ("yes", "no")
READER_KS = (1, 5, 10)
ReaderFn = Callable[[list[dict[str, Any]], Corpus], dict[str, Any]]


# ------------------------------------------------------------------------- per-question outcomes


def chain_ranks(chains: Sequence[Sequence[tuple[str, str]]], gold: Sequence[tuple[str, str]]
                ) -> list[int | None]:
    """1-based rank of the first chain (a pair of titles) holding both gold titles, per question
    (None: no such chain)."""
    out = []
    for cs, g in zip(chains, gold):
        want = set(g)
        out.append(next((j + 1 for j, c in enumerate(cs) if set(c) == want), None))
    return out


def union_ranks(chains: Sequence[Sequence[tuple[str, str]]], gold: Sequence[tuple[str, str]]
                ) -> list[int | None]:
    """Smallest k such that the passages of the top-k chains include both gold titles (MDR's
    passage EM), per question (None: never)."""
    out = []
    for cs, g in zip(chains, gold):
        missing, rank = set(g), None
        for j, c in enumerate(cs):
            missing -= set(c)
            if not missing:
                rank = j + 1
                break
        out.append(rank)
    return out


def list_ranks(lists: Sequence[Sequence[str]], targets: Sequence[Sequence[str]]
               ) -> list[int | None]:
    """1-based rank of the first title of each list that is one of its question's targets."""
    out = []
    for titles, want in zip(lists, targets):
        w = set(want)
        out.append(next((j + 1 for j, t in enumerate(titles) if t in w), None))
    return out


def answer_ranks(chain_hits: Sequence[Sequence[bool]]) -> list[int | None]:
    """1-based rank of the first answer-bearing chain per question."""
    return [next((j + 1 for j, h in enumerate(hits) if h), None) for hits in chain_hits]


def recall_table(ranks: Sequence[int | None], ks: Sequence[int]) -> dict[str, Any]:
    """R@k (percent) and Wilson 95 % intervals of first-hit ranks: ``{"n", "recall": {k: %},
    "ci": {k: [lo, hi]}}`` (``n`` = 0: no figures)."""
    n = len(ranks)
    if not n:
        return {"n": 0, "recall": {}, "ci": {}}
    iv = stats.rank_intervals(list(ranks), [int(k) for k in ks])
    rec = {int(k): 100.0 * sum(1 for r in ranks if r is not None and r <= k) / n for k in ks}
    return {"n": n, "recall": rec, "ci": iv["top_k_ci"]}


# ------------------------------------------------------------------------- counterfactual triplets


def aar_triplets(examples: Sequence[HotpotExample], order: Sequence[tuple[str, str]], tokenizer,
                 *, max_q_len: int, max_p_len: int, max_hop2_len: int, pad_id: int = 0
                 ) -> dict[str, dict[str, Any]]:
    """Token inputs of the per-hop AAR triplets, built as training builds its batches.

    Per hop: ``q_ids``/``q_mask`` (the question, or the hop-2 query from the gold p1), ``p_*``
    and ``cf_*`` (the gold passage and it without its supporting sentences), ``index`` (example
    positions) and ``fates`` (counts: ``scored``, ``no context paragraph``, ``no
    counterfactual``, adding up to the examples).
    """
    cls_id, sep_id = special_ids(tokenizer)
    q_rows = [question_row(e.ids, max_q_len, cls_id, sep_id)
              for e in encode_texts(tokenizer, [ex.question for ex in examples])]
    out = {}
    for h, hop in enumerate(HOPS):
        queries, pos, cfs, index = [], [], [], []
        fates = {"scored": 0, "no context paragraph": 0, "no counterfactual": 0}
        progress = Progress(f"AAR triplets {hop}", len(examples), unit="questions")
        for i, (ex, titles) in enumerate(zip(examples, order)):
            progress.update()
            try:
                sents = [ex.sentences(t) for t in titles]
            except KeyError:
                fates["no context paragraph"] += 1
                continue
            bodies, sids = passage_table_rows(tokenizer, list(titles), sents, keep=2 * max_p_len)
            cf, _, valid = drop_sentences(bodies[h], sids[h], ex.supporting_sentences(titles[h]))
            if not valid:
                fates["no counterfactual"] += 1
                continue
            fates["scored"] += 1
            queries.append(q_rows[i] if h == 0 else
                           hop2_query_row(q_rows[i], bodies[0], max_hop2_len, sep_id))
            pos.append(bodies[h])
            cfs.append(cf)
            index.append(i)
        progress.done()
        q_len = max_q_len if h == 0 else max_hop2_len
        q_ids, q_mask = pad_rows(queries, q_len, pad_id, None)
        p_ids, p_mask = pad_rows(pos, max_p_len, pad_id, sep_id)
        c_ids, c_mask = pad_rows(cfs, max_p_len, pad_id, sep_id)
        out[hop] = {"q_ids": q_ids, "q_mask": q_mask, "p_ids": p_ids, "p_mask": p_mask,
                    "cf_ids": c_ids, "cf_mask": c_mask, "index": np.asarray(index, np.int64),
                    "fates": fates}
    return out


# ------------------------------------------------------------------------- the reader over chains


def span_answer(answer: str) -> bool:
    """Whether the extractive reader can predict ``answer``: not empty and not yes / no."""
    a = answer.strip().lower()
    return bool(a) and a not in YES_NO


def chain_passage(ids: Sequence[str], titles: Sequence[str], texts: Sequence[str], *,
                  score: float | None = None, has_answer_flag: bool | None = None
                  ) -> RetrievedPassage:
    """A chain as the one passage the reader reads (docs/multihop.md, "Reader"): id
    ``"id1+id2"``, no title, text ``"title1. text1 title2. text2"`` in hop order, so both titles
    stay readable (comparison answers are often an entity's name) and answer spans can fall in
    either passage."""
    text = " ".join(f"{t.rstrip('.')}. {x}" if t else x for t, x in zip(titles, texts))
    return RetrievedPassage(id="+".join(str(i) for i in ids), title="", text=text, score=score,
                            has_answer=has_answer_flag)


def chain_results(chain_records: Sequence[dict[str, Any]], corpus: Corpus, *, answer_mode: str,
                  k: int = 0) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``chains.json`` records → DPR retrieval results records (``retrieval.json``, what the
    reader trains on and :func:`read_chains` reads): per question with a span answer its first
    ``k`` chains (0: all) as :func:`chain_passage` contexts, ``has_answer`` by DPR's matcher
    (``answer_mode``) on the chain text. Returns ``(records, counts)``; questions whose answer
    is yes / no or empty are left out and counted."""
    row_of = {pid: r for r, pid in enumerate(corpus.ids)}
    out, counts = [], {"questions": len(chain_records), "kept": 0, "yes_no_or_empty": 0}
    for rec in chain_records:
        if not span_answer(rec["answer"]):
            counts["yes_no_or_empty"] += 1
            continue
        ctxs = []
        for c in rec["chains"][:k] if k else rec["chains"]:
            try:
                rows = [row_of[str(i)] for i in c["ids"]]
            except KeyError as e:
                raise KeyError(f"chains of question {rec['id']!r}: passage id {e} is not in the "
                               f"corpus {corpus.path}") from None
            p = chain_passage(c["ids"], [corpus.titles[r] for r in rows],
                              [corpus.texts[r] for r in rows], score=c.get("score"))
            ctxs.append({"id": p.id, "title": p.title, "text": p.text, "score": p.score,
                         "has_answer": has_answer([rec["answer"]], p.text, mode=answer_mode)})
        out.append({"id": rec["id"], "type": rec["type"], "question": rec["question"],
                    "answers": [rec["answer"]], "ctxs": ctxs})
        counts["kept"] += 1
    return out, counts


def _type_rows(summary: dict[str, Any], types: Sequence[str], ks: Sequence[int]
               ) -> dict[int, dict[str, dict[str, Any]]]:
    """EM / F1 (percent, Wilson interval on EM) per HotpotQA question type at each k."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for k in ks:
        em = np.asarray(summary["em_outcomes"][k], bool)
        f1 = np.asarray(summary["f1_outcomes"][k], np.float64)
        out[k] = {}
        for t in sorted(set(types)):
            m = np.asarray([x == t for x in types])
            hits, n = int(em[m].sum()), int(m.sum())
            out[k][t] = {"count": n, "em": 100.0 * hits / n, "f1": 100.0 * float(f1[m].mean()),
                         "em_ci": [100.0 * x for x in stats.wilson_interval(hits, n)]}
    return out


def read_chains(reader: str, chain_records: Sequence[dict[str, Any]], corpus: Corpus, *,
                out_dir: str, ks: Sequence[int] = READER_KS, reader_run=None,
                answer_mode: str | None = None, batch_size: int = 64, label: str | None = None
                ) -> dict[str, Any]:
    """The reader run ``reader`` (loaded unless ``reader_run`` is given) over each question's
    top chains (module docstring): writes ``e2e.json``
    (:func:`dense_cf.eval.e2e.score_predictions`'s summary plus ``hotpot_by_type``) and
    ``predictions.json`` into ``out_dir``; returns the Table 5 summary (with ``markdown``)."""
    reader_run = reader_run or load_run(reader)
    method = reader_run.method
    if method.kind != "reader" or method.predict is None:
        raise ValueError(f"{reader} is a {method.name} run ({method.kind}), not a reader with a "
                         "predict function")
    mode = answer_mode or reader_run.config.data.answer_mode
    ks = sorted({int(k) for k in ks})
    results, counts = chain_results(chain_records, corpus, answer_mode=mode, k=ks[-1])
    if not results:
        return {"status": "no question with a span answer", "left_out": counts}
    questions = [r["question"] for r in results]
    contexts = [[RetrievedPassage(**c) for c in r["ctxs"]] for r in results]
    logging.info("multi-hop reader: %d questions x top-%d chains (%d yes/no left out)",
                 len(results), ks[-1], counts["yes_no_or_empty"])
    preds = method.predict(reader_run, questions, contexts, ks, batch_size=batch_size)
    res = e2e_lib.RetrieverResults(os.path.join(out_dir, "chains.json"), label or "chains",
                                   questions, [r["answers"] for r in results], contexts, 0)
    summary, records = e2e_lib.score_predictions(res, preds, mode)
    types = [r["type"] for r in results]
    by_type = _type_rows(summary, types, ks)
    summary.update(reader=os.path.abspath(reader), reader_method=method.name,
                   reader_step=reader_run.step, hotpot_by_type=by_type, left_out=counts,
                   ids=[r["id"] for r in results], hotpot_types=types)
    for rec, r in zip(records, results):
        rec.update(id=r["id"], type=r["type"])
    os.makedirs(out_dir, exist_ok=True)
    report_lib.write_json(os.path.join(out_dir, outcomes.E2E), summary)
    report_lib.write_json(os.path.join(out_dir, "predictions.json"), records)
    out = {"status": "done", "reader": summary["reader"], "reader_method": method.name,
           "reader_step": reader_run.step, "mode": mode, "ks": ks, "n": len(results),
           "left_out": counts, "em": summary["em"], "em_ci": summary["em_ci"],
           "f1": summary["f1"], "f1_ci": summary["f1_ci"], "by_type": by_type,
           "answer_in_top_k": summary["answer_in_top_k"],
           "no_prediction": summary["no_prediction"]}
    out["markdown"] = _reader_markdown(out)
    logging.info("multi-hop reader: EM %s", {k: round(v, 2) for k, v in out["em"].items()})
    return out


def _reader_markdown(r: dict[str, Any]) -> str:
    ks = r["ks"]

    def cell(v: float, ci: Sequence[float] | None = None) -> str:
        return f"{v:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    rows = [{"questions": f"all (n={r['n']})",
             **{f"EM@{k}": cell(r["em"][k], r["em_ci"][k]) for k in ks},
             **{f"F1@{k}": cell(r["f1"][k], r["f1_ci"][k]) for k in ks}}]
    for t, e in r["by_type"][ks[0]].items():
        rows.append({"questions": f"{t} (n={e['count']})",
                     **{f"EM@{k}": cell(r["by_type"][k][t]["em"], r["by_type"][k][t]["em_ci"])
                        for k in ks},
                     **{f"F1@{k}": cell(r["by_type"][k][t]["f1"]) for k in ks}})
    cols = ["questions", *(f"EM@{k}" for k in ks), *(f"F1@{k}" for k in ks)]
    hit = ", ".join(f"top-{k} {v:.1f}" for k, v in r["answer_in_top_k"].items())
    return (f"Answer EM / F1 (%) of reader `{r['reader_method']}` ({r['reader']}, step "
            f"{r['reader_step']}) over each question's top-k chains, each chain read as one "
            "passage (both passages, titles kept); SQuAD / HotpotQA normalisation "
            f"({r['mode']} mode). 95 % intervals: Wilson for EM, percentile bootstrap for F1 "
            "(all questions).\n\n" + report_lib.markdown_table(rows, cols)
            + f"\n\nLeft out: {r['left_out']['yes_no_or_empty']} yes/no or empty answers (the "
            "extractive reader has no yes/no head). Chains holding the answer: "
            f"{hit or 'n/a'} (%). Supporting-fact and joint EM/F1 are not reported: the reader "
            "predicts no sentence labels. Per-question outcomes: e2e.json (paired by "
            "`python -m dense_cf.eval.compare`), predictions.json.")


def _int_keys(tables: dict[str, Any]) -> None:
    """JSON turned the ks of recall tables into strings; the markdown writer wants ints."""
    for t in tables.values():
        for key in ("recall", "ci"):
            t[key] = {int(k): v for k, v in t[key].items()}


def add_reader(eval_dir: str, reader: str, corpus: Corpus, *, ks: Sequence[int] = READER_KS,
               reader_run=None, answer_mode: str | None = None, batch_size: int = 64
               ) -> dict[str, Any]:
    """Runs :func:`read_chains` on an evaluation already on disk (its ``chains.json``) and
    rewrites its ``report.json`` / ``report.md`` with the reader's Table 5; no search again."""
    with open(os.path.join(eval_dir, outcomes.REPORT)) as f:
        rep = json.load(f)
    with open(os.path.join(eval_dir, "chains.json")) as f:
        chain_records = json.load(f)
    ks = [int(k) for k in ks if int(k) <= int(rep["top_chains"])]
    if not ks:
        raise ValueError(f"{eval_dir}: reader ks {list(ks)} all exceed its {rep['top_chains']} "
                         "chains")
    out = read_chains(reader, chain_records, corpus, out_dir=eval_dir, ks=ks,
                      reader_run=reader_run, answer_mode=answer_mode, batch_size=batch_size,
                      label=rep.get("method"))
    rep["reader"] = out
    report_lib.write_json(os.path.join(eval_dir, outcomes.REPORT), rep)
    _int_keys(rep["multihop"]["tables"])
    _int_keys(rep["multihop"]["by_type"])
    _write_markdown(os.path.join(eval_dir, "report.md"), rep["workdir"], rep,
                    [int(k) for k in rep["ks"]])
    return out


# ------------------------------------------------------------------------- the evaluation


def _gold(examples: Sequence[HotpotExample], corpus: Corpus):
    """Per example: (first, second) titles, the first-hop targets and the corpus row of each
    gold title (-1: not in the corpus)."""
    row_of: dict[str, int] = {}
    for r, t in enumerate(corpus.titles):
        row_of.setdefault(t, r)
    order, hop1_targets = [], []
    for ex in examples:
        titles = ex.supporting_titles
        texts = {t: corpus.texts[row_of[t]] for t in titles if t in row_of}
        first, second = bridge_order(ex, texts)
        order.append((first, second))
        hop1_targets.append((first, second) if ex.type == "comparison" else (first,))
    rows = np.array([[row_of.get(t, -1) for t in o] for o in order], np.int64).reshape(-1, 2)
    return order, hop1_targets, rows


def _scores(encoder, trip: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    if not len(trip["index"]):
        return np.zeros(0), np.zeros(0)
    q = encoder.questions(trip["q_ids"], trip["q_mask"]).astype(np.float64)
    p = encoder.passages(trip["p_ids"], trip["p_mask"]).astype(np.float64)
    c = encoder.passages(trip["cf_ids"], trip["cf_mask"]).astype(np.float64)
    return np.einsum("nd,nd->n", q, p), np.einsum("nd,nd->n", q, c)


def _fmt(table: dict[str, Any], ks: Sequence[int], prefix: str, label: str) -> tuple[dict, dict]:
    row = {"": label, **{f"{prefix}@{k}": table["recall"].get(int(k)) for k in ks}}
    ci = {"": label, **{f"{prefix}@{k}": "[{:.2f}, {:.2f}]".format(*table["ci"][int(k)])
                        for k in ks if int(k) in table["ci"]}}
    return row, ci


def _section(tables: Sequence[tuple[str, dict[str, Any]]], ks: Sequence[int], prefix: str,
             note: str) -> str:
    rows, cis = [], []
    for label, t in tables:
        if not t["n"]:
            continue
        r, c = _fmt(t, ks, prefix, f"{label} (n={t['n']})")
        rows.append(r)
        cis.append(c)
    cols = [""] + [f"{prefix}@{k}" for k in ks]
    if not rows:
        return note + "\n\nNo questions."
    return (note + "\n\n" + report_lib.markdown_table(rows, cols) + "\n\n95 % Wilson intervals:\n\n"
            + report_lib.markdown_table(cis, cols))


def evaluate_multihop(workdir: str, *, qa_path: str | None = None,
                      corpus_path: str | None = None, run=None, index_kind: str | None = None,
                      beam_size: int | None = None, hop2_k: int | None = None,
                      top_chains: int | None = None, out_dir: str | None = None,
                      reader: ReaderFn | str | None = None, reader_run=None,
                      reader_ks: Sequence[int] = READER_KS, max_questions: int = 0,
                      aar: bool = True) -> dict[str, Any]:
    """The two-hop evaluation of a run (module docstring); returns the summary (also written).
    ``reader``: a reader run directory (its chains' EM/F1, :func:`read_chains`) or a hook
    ``fn(chain_records, corpus)``; ``aar=False`` skips the per-hop AAR (reader data)."""
    run = run or load_run(workdir)
    if run.method.unit != "passage":
        raise ValueError(f"{run.method.name} retrieves {run.method.unit}s: the two-hop search "
                         "needs passage vectors")
    cfg = run.config
    mh = cfg.multihop
    kind = index_kind or cfg.eval.index
    beam_size, hop2_k = int(beam_size or mh.beam_size), int(hop2_k or mh.hop2_k)
    top_chains = int(top_chains or mh.top_chains)
    ks = sorted(int(k) for k in mh.ks if int(k) <= top_chains)
    corpus_file = resolve_data_file(cfg.data, "corpus_file", corpus_path)
    qa_file = resolve_data_file(cfg.data, "test_file", qa_path)
    corpus = load_corpus(corpus_file)
    examples, skipped = read_hotpot(qa_file, support_in_context=False)
    if max_questions:
        examples = examples[:max_questions]
    questions = [ex.question for ex in examples]
    order, hop1_targets, gold_rows = _gold(examples, corpus)

    rd = RunDir(workdir).for_corpus(cfg, corpus_file)
    retriever = retriever_for_run(run, corpus, rd.root, kind=kind, k=beam_size)
    encoder = retriever.encoder
    pad_id = run.tokenizer.token_to_id("[PAD]") or 0
    hop2 = Hop2Queries(run.tokenizer, questions, corpus.titles, corpus.texts, encoder.questions,
                       max_q_len=cfg.data.max_q_len, max_len=mh.max_hop2_len, pad_id=pad_id)
    t0 = time.perf_counter()
    q_emb = retriever.encode_questions(questions)
    chains = two_hop_search(retriever.index.search, q_emb, hop2, beam_size=beam_size,
                            hop2_k=hop2_k, top_chains=top_chains)
    search_s = time.perf_counter() - t0

    def title(r: int) -> str:
        return corpus.titles[r] if r >= 0 else ""

    chain_titles = [[(title(a), title(b)) for a, b, s in zip(r1, r2, sc) if np.isfinite(s)]
                    for r1, r2, sc in zip(chains.rows1, chains.rows2, chains.scores)]
    hop1_titles = [[title(r) for r in rows if r >= 0] for rows in chains.hop1_rows]
    chain_rank = chain_ranks(chain_titles, order)
    union_rank = union_ranks(chain_titles, order)
    hop1_rank = list_ranks(hop1_titles, hop1_targets)

    # Hop 2 alone: the query from the gold first-hop passage (when the corpus has it).
    has_p1 = gold_rows[:, 0] >= 0
    hop2_rank: list[int | None] = [None] * len(examples)
    if has_p1.any():
        qi = np.flatnonzero(has_p1)
        s2, r2 = retriever.index.search(np.asarray(hop2(qi, gold_rows[qi, 0]), np.float32),
                                        hop2_k + 1)
        _, r2 = drop_first_hop(gold_rows[qi, :1], np.asarray(s2)[:, None],
                               np.asarray(r2, np.int64)[:, None], hop2_k)
        for j, q in enumerate(qi):
            hop2_rank[q] = list_ranks([[title(r) for r in r2[j, 0] if r >= 0]],
                                      [(order[q][1],)])[0]

    # Answer recall over the top chains; yes/no answers are left out.
    answer_scored = [ex.answer.strip().lower() not in YES_NO and bool(ex.answer.strip())
                     for ex in examples]
    hit_cache: dict[tuple[int, int], bool] = {}

    def passage_hit(q: int, r: int) -> bool:
        key = (q, r)
        if key not in hit_cache:
            hit_cache[key] = r >= 0 and has_answer([examples[q].answer],
                                                   f"{corpus.titles[r]} {corpus.texts[r]}",
                                                   mode=cfg.data.answer_mode)
        return hit_cache[key]

    answer_rank: list[int | None] = []
    progress = Progress("answer recall", len(examples), unit="questions")
    for q, (r1, r2, sc) in enumerate(zip(chains.rows1, chains.rows2, chains.scores)):
        progress.update()
        if not answer_scored[q]:
            answer_rank.append(None)
            continue
        hits = [passage_hit(q, int(a)) or passage_hit(q, int(b))
                for a, b, s in zip(r1, r2, sc) if np.isfinite(s)]
        answer_rank.append(answer_ranks([hits])[0])
    progress.done()

    # AAR per hop on the counterfactual triplets.
    out_dir = out_dir or rd.eval(run.step)
    os.makedirs(out_dir, exist_ok=True)
    aar_out: dict[str, Any] = {}
    for hop in HOPS:
        aar_out[hop] = {"fates": {"not computed": len(examples)}, "triplets": 0}
    trip = aar_triplets(examples, order, run.tokenizer, max_q_len=cfg.data.max_q_len,
                        max_p_len=cfg.data.max_p_len, max_hop2_len=mh.max_hop2_len,
                        pad_id=pad_id) if aar else {}
    for hop in trip:
        pos, cf = _scores(encoder, trip[hop])
        idx = trip[hop]["index"]
        entry: dict[str, Any] = {"fates": trip[hop]["fates"], "triplets": int(len(idx))}
        if len(idx):
            entry.update(aar=aar_math.aar(pos, cf),
                         score_diff=float(np.mean(aar_math.score_diffs(pos, cf))))
            aware = ~aar_math.mismatches(pos, cf)
            entry["aar_ci"] = list(stats.wilson_interval(int(aware.sum()), int(aware.size)))
            with report_lib.atomic_open(os.path.join(out_dir, outcomes.aar_scores_name(hop)), "wb") as f:
                np.savez(f, pos=pos, cf=cf, gold_index=idx,
                         questions=np.asarray([questions[i] for i in idx], dtype=str))
        aar_out[hop] = entry

    types = [ex.type for ex in examples]
    tables = {
        "chain": recall_table(chain_rank, ks),
        "mdr": recall_table(union_rank, ks),
        "hop1": recall_table(hop1_rank, [k for k in ks if k <= beam_size]),
        "hop2": recall_table([hop2_rank[i] for i in np.flatnonzero(has_p1)],
                             [k for k in ks if k <= hop2_k]),
        "answer": recall_table([r for r, s in zip(answer_rank, answer_scored) if s], ks),
    }
    by_type = {t: recall_table([r for r, tt in zip(chain_rank, types) if tt == t], ks)
               for t in ("bridge", "comparison") if t in types}
    counts = {"questions": len(examples), "records_skipped": sum(skipped.values()),
              "record_skip_reasons": dict(skipped),
              "gold_not_in_corpus": int((gold_rows < 0).any(axis=1).sum()),
              "answer_yes_no_or_empty": int(len(examples) - sum(answer_scored)),
              "by_type": {t: types.count(t) for t in sorted(set(types))}}

    chain_records = []
    for q, ex in enumerate(examples):
        chain_records.append({
            "id": ex.id, "question": ex.question, "answer": ex.answer, "type": ex.type,
            "supporting_titles": list(order[q]),
            "chains": [{"ids": [corpus.ids[int(a)], corpus.ids[int(b)]],
                        "titles": [title(int(a)), title(int(b))], "score": float(s)}
                       for a, b, s in zip(chains.rows1[q], chains.rows2[q], chains.scores[q])
                       if np.isfinite(s)]})
    report_lib.write_json(os.path.join(out_dir, "chains.json"), chain_records)
    if isinstance(reader, str):
        reader_ks = [int(k) for k in reader_ks if int(k) <= top_chains]
        reader_out = read_chains(reader, chain_records, corpus, out_dir=out_dir,
                                 ks=reader_ks or [top_chains], reader_run=reader_run,
                                 label=cfg.method)
    elif reader is not None:
        reader_out = reader(chain_records, corpus)
    else:
        reader_out = {"status": "not run: answer EM/F1 (EADPR Table 5) need a reader run "
                                "(--reader READER_RUN; docs/multihop.md, \"Reader\")"}

    chain_iv = stats.rank_intervals(chain_rank, ks) if examples else {"top_k_ci": {},
                                                                       "mrr_ci": [0.0, 0.0]}
    summary = {
        "workdir": os.path.abspath(workdir), "method": cfg.method, "step": run.step,
        "index": kind, "beam_size": beam_size, "hop2_k": hop2_k, "top_chains": top_chains,
        "k": top_chains, "ks": ks, "corpus_size": len(corpus), "n_questions": len(examples),
        "top_k": tables["chain"]["recall"], "top_k_ci": chain_iv["top_k_ci"],
        "mrr": float(np.mean([0.0 if r is None else 1.0 / r for r in chain_rank]))
        if examples else 0.0, "mrr_ci": chain_iv["mrr_ci"],
        "multihop": {"tables": tables, "by_type": by_type, "aar": aar_out, "counts": counts},
        "reader": reader_out, "timing": dict(retriever.timing, search_s=search_s),
        "out_dir": os.path.abspath(out_dir), "units": dict(report_lib.JSON_UNITS,
                                                           recall="percent (0-100)"),
    }
    report_lib.write_json(os.path.join(out_dir, outcomes.REPORT), dict(
        summary, questions=questions, first_hit_rank=chain_rank,
        per_question={"id": [ex.id for ex in examples], "type": types,
                      "chain_rank": chain_rank, "union_rank": union_rank,
                      "hop1_rank": hop1_rank, "hop2_rank": hop2_rank,
                      "hop2_scored": has_p1.tolist(), "answer_rank": answer_rank,
                      "answer_scored": answer_scored}))
    _write_markdown(os.path.join(out_dir, "report.md"), workdir, summary, ks)
    logging.info("multi-hop %s step %d: chain R@k %s, MDR R@k %s", cfg.method, run.step,
                 {k: round(v, 2) for k, v in tables["chain"]["recall"].items()},
                 {k: round(v, 2) for k, v in tables["mdr"]["recall"].items()})
    return summary


def _write_markdown(path: str, workdir: str, s: dict[str, Any], ks: Sequence[int]) -> None:
    mh = s["multihop"]
    t = mh["tables"]
    label = f"{s['method']} (step {s['step']})"
    sections = [
        ("Passage-chain recall (%), EADPR Table 4 layout",
         _section([(label, t["chain"])], ks, "R",
                  "A question counts at k when one of its top-k chains holds both supporting "
                  "passages.")),
        ("MDR recall (%)", _section([(label, t["mdr"])], ks, "R",
                                    "Both supporting passages among the passages of the top-k "
                                    "chains (MDR's passage EM).")),
        ("Per hop (%)", _section([("hop 1: question alone", t["hop1"]),
                                  ("hop 2: query from the gold p1", t["hop2"])], ks, "R",
                                 "Hop 1: the first-hop passage (either, for comparison "
                                 "questions) in the top k for the question. Hop 2: the "
                                 "second-hop passage in the top k (other than p1) for the hop-2 "
                                 "query built from the gold first-hop passage.")),
        ("Answer recall (%)", _section([(label, t["answer"])], ks, "R",
                                       "One of the top-k chains holds the answer (DPR has_answer "
                                       "on 'title text' of either passage); yes/no answers left "
                                       f"out ({mh['counts']['answer_yes_no_or_empty']}).")),
        ("By question type: chain recall (%)",
         _section(list(mh["by_type"].items()), ks, "R", "Chain R@k per HotpotQA type.")),
    ]
    rows = []
    for hop in HOPS:
        a = mh["aar"][hop]
        rows.append({"hop": hop, "triplets": a["triplets"],
                     "AAR": 100 * a["aar"] if "aar" in a else None,
                     "95% CI": "[{:.2f}, {:.2f}]".format(*(100 * x for x in a["aar_ci"]))
                     if "aar_ci" in a else "",
                     "mean diff": a.get("score_diff"),
                     "not scored": ", ".join(f"{n} {k}" for k, n in a["fates"].items()
                                             if k != "scored" and n) or "none"})
    sections.append(("Answer-awareness per hop", "Triplets (q, p, p*) with p* = p without its "
                     "supporting sentence(s); hop 2 queries with q ⊕ gold p1.\n\n"
                     + report_lib.markdown_table(rows, ["hop", "triplets", "AAR", "95% CI",
                                                        "mean diff", "not scored"])))
    reader = s["reader"]
    sections.append(("Reader (EADPR Table 5 layout)", reader.get("markdown")
                     or f"Answer / Support / Joint EM and F1: {reader.get('status', reader)}"))
    c = mh["counts"]
    sections.append(("Setup", f"index={s['index']}, beam size {s['beam_size']} (hop 1), "
                     f"{s['hop2_k']} hop-2 passages per beam, top {s['top_chains']} chains; "
                     f"corpus {s['corpus_size']} passages; {c['questions']} questions "
                     f"({', '.join(f'{n} {k}' for k, n in c['by_type'].items())}); "
                     f"{c['records_skipped']} records skipped; {c['gold_not_in_corpus']} with "
                     f"a supporting title not in the corpus (misses)."))
    sections.append(report_lib.columns_section(["chain R@k", "MDR R@k", "hop-1 R@k",
                                                "hop-2 R@k", "answer R@k", "AAR (hop)",
                                                "95% CI"]))
    report_lib.write_markdown(path, f"Multi-hop retrieval: {workdir}", sections)


def _after_training(run: Run, workdir: str) -> dict[str, Any]:
    return evaluate_multihop(workdir, run=run)


# Chain / per-hop / answer recall of a two-hop retriever, with AAR per hop.
EVALUATOR = Evaluator("multihop", _after_training,
                      metrics=(outcomes.metric("retrieval.top1"), outcomes.metric("retrieval.mrr")),
                      report=outcomes.REPORT)


if __name__ == "__main__":  # the design card's command; its binary is cli/eval_multihop.py
    from dense_cf import app
    from dense_cf.cli import eval_multihop
    app.run(eval_multihop.main, eval_multihop.FLAGS, eval_multihop.USAGE)
