"""MDR + DPR vs MDR + EADPR on the synthetic two-hop world (EADPR §4.3 Table 4; docs/multihop.md).

``python -m dense_cf.studies.multihop [--steps 60] [--batch 16] [--num_questions 1500]
[--test_frac 0.2] [--num_hard 0] [--beam_size 10] [--hop2_k 10] [--seeds 0] [--out DIR]
[--zero_shot] [--model minilm] [--noreader] [--reader_steps 300] [--reader_questions 400]``

Generates the two-hop world once (``dense_cf.synthetic.multihop``, reused when its meta.json
records the same settings, refused otherwise), trains MDR with the DPR loss and with EADPR's
loss on each hop from all-MiniLM-L6-v2 with the same budget (steps, batch, lengths, learning
rate, seed: ``configs.studies.mdr_config``, ``presets.mdr_demo_config`` with the flags'
changes), evaluates both with
``dense_cf.eval.multihop`` and prints one table: chain R@2/10/20 (EADPR Table 4 layout), MDR's
recall, per-hop recall, answer recall and AAR per hop, each with its 95 % Wilson interval; then
the paired comparison on the same test questions (exact McNemar per metric, significance at
0.05 in words). Then (``--reader``, default on; docs/multihop.md, "Reader") one extractive
reader (``presets.mdr_reader_config``: MiniLM-initialised) trains on the MDR+DPR run's top
chains for ``--reader_questions`` train questions (64 dev questions for its dev loss) and reads
every run's saved test chains (:func:`dense_cf.eval.multihop.add_reader`): answer EM/F1 at top-1/5/10
chains, with exact McNemar on EM and a paired bootstrap on F1 between the two losses.
``--zero_shot`` adds the untrained MiniLM (step 0) as a third row. Runs are kept
in ``--out`` (resumable; a finished run is evaluated again from its checkpoint, its export and
index reused). Writes ``bench_multihop.json`` and ``bench_multihop.md`` in ``--out``.

``--seeds`` runs all of it once per training seed (``config.seed``; the world stays the one of
seed 0): seed N > 0 in ``mdr_seedN``, ``mdr-eadpr_seedN``, ``zero-shot_seedN`` and
``reader_seedN``, its report in ``bench_multihop_seedN.{json,md}``. With several seeds,
``bench_multihop_over_seeds.{json,md}`` add every run's figures and the paired B − A as
mean ± std [min, max] over the seeds.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Sequence

import numpy as np
from absl import flags, logging

from dense_cf import app as _app
from dense_cf.configs.presets import MDR_READER, mdr_reader_config
from dense_cf.configs.studies import mdr_config
from dense_cf.eval import e2e as e2e_lib
from dense_cf.eval import outcomes, stats
from dense_cf.eval import report as report_lib
from dense_cf.eval.multihop import add_reader, evaluate_multihop
from dense_cf.experiment import train_and_evaluate
from dense_cf.files import make_dir, utc_now
from dense_cf.mining.reader_data import split_files
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.studies import harness
from dense_cf.synthetic import multihop as synthetic_multihop
from dense_cf.train.run import model_workdir, pretrained_run

FLAGS = flags.FlagValues()  # its own: tests import several studies in one process
_F = harness.define_study_flags(
    FLAGS, out=None, steps=60,
    help={"steps": "Training steps per run (same for both losses).",
          "batch": "Global batch (questions; 2x queries).", "lr": "Learning rate (both runs).",
          "model": "The retrievers' model.name_or_path (minilm, tiny, a HF dir)."})
_NUM_Q = flags.DEFINE_integer("num_questions", 1500, "Questions in the world (all splits); "
                              "the corpus has twice as many passages.", flag_values=FLAGS)
_TEST_FRAC = flags.DEFINE_float("test_frac", 0.2, "Test share of the questions.",
                                flag_values=FLAGS)
_NUM_HARD = flags.DEFINE_integer("num_hard", 0, "Distractor paragraphs per question as hard "
                                 "negatives (0: in-batch negatives only).", flag_values=FLAGS)
_BEAM = flags.DEFINE_integer("beam_size", 10, "Hop-1 passages expanded.", flag_values=FLAGS)
_HOP2_K = flags.DEFINE_integer("hop2_k", 10, "Hop-2 passages per beam.", flag_values=FLAGS)
_ZERO = flags.DEFINE_bool("zero_shot", False, "Also evaluate the untrained MiniLM.",
                          flag_values=FLAGS)
_READER = flags.DEFINE_bool("reader", True, "Train one reader on MDR+DPR's train chains and read "
                            "every run's test chains (answer EM/F1).", flag_values=FLAGS)
_READER_STEPS = flags.DEFINE_integer("reader_steps", 300, "Reader training steps.",
                                     flag_values=FLAGS)
_READER_Q = flags.DEFINE_integer("reader_questions", MDR_READER["train_questions"], "Train "
                                 "questions whose chains the reader learns from.",
                                 flag_values=FLAGS)

NAMES = {"mdr": "MDR+DPR", "mdr-eadpr": "MDR+EADPR",
         "zero-shot": "MiniLM untrained (its mean pooling)"}
MODEL_NAMES = {"minilm": "all-MiniLM-L6-v2"}  # the setup line's name of --model
DEV_FRAC = 0.1


def _label(metric_id: str) -> str:
    return outcomes.metric(metric_id).label


def _outcomes(report: dict[str, Any]) -> dict[str, Any]:
    """Per-question binary outcomes of a multi-hop report, by metric id
    (``multihop.<rank>.r@k``)."""
    pq = report["per_question"]
    ks = [int(k) for k in report["ks"]]

    def hits(ranks, k, mask=None):
        out = np.array([r is not None and r <= k for r in ranks])
        return out if mask is None else out[np.asarray(mask, bool)]

    o: dict[str, Any] = {}
    for k in ks:
        o[f"multihop.chain.r@{k}"] = hits(pq["chain_rank"], k)
    for k in ks:
        o[f"multihop.mdr.r@{k}"] = hits(pq["union_rank"], k)
    for k in ks:
        if k <= report["beam_size"]:
            o[f"multihop.hop1.r@{k}"] = hits(pq["hop1_rank"], k)
    for k in ks:
        if k <= report["hop2_k"]:
            o[f"multihop.hop2.r@{k}"] = hits(pq["hop2_rank"], k, pq["hop2_scored"])
    for k in ks:
        o[f"multihop.answer.r@{k}"] = hits(pq["answer_rank"], k, pq["answer_scored"])
    return o


def _aar(eval_dir: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for hop in ("hop1", "hop2"):
        z = outcomes.read_aar_scores(eval_dir, hop)
        if z is not None:
            out[hop] = (z["gold_index"], z["pos"] > z["cf"])
    return out


def _row(name: str, report: dict[str, Any], minutes: float | None) -> dict[str, Any]:
    o = _outcomes(report)
    row: dict[str, Any] = {"run": name}
    for mid, v in o.items():
        lo, hi = stats.wilson_interval(int(v.sum()), int(v.size)) if v.size else (0.0, 0.0)
        row[_label(mid)] = f"{100 * v.mean():.1f} [{100 * lo:.1f}, {100 * hi:.1f}]" if v.size else ""
    for hop in ("hop1", "hop2"):
        a = report["multihop"]["aar"][hop]
        row[_label(f"multihop.aar.{hop}")] = (f"{100 * a['aar']:.1f} [{100 * a['aar_ci'][0]:.1f}, "
                             f"{100 * a['aar_ci'][1]:.1f}]" if "aar" in a else "")
    row["minutes"] = minutes
    return row


def paired_rows(a: dict[str, Any], b: dict[str, Any], aar_a: dict, aar_b: dict,
                names: tuple[str, str]) -> list[dict[str, Any]]:
    """Exact McNemar per metric on the questions (and AAR triplets) both runs scored."""
    if a["questions"] != b["questions"]:
        raise ValueError("the two runs were evaluated on different questions")
    oa, ob = _outcomes(a), _outcomes(b)
    rows = [{**stats.compare_outcomes(_label(mid), oa[mid], ob[mid], names=names), "id": mid}
            for mid in oa if mid in ob and oa[mid].size]
    for hop in ("hop1", "hop2"):
        if hop in aar_a and hop in aar_b:
            common, ia, ib = np.intersect1d(aar_a[hop][0], aar_b[hop][0], return_indices=True)
            if len(common):
                mid = f"multihop.aar.{hop}"
                rows.append({**stats.compare_outcomes(_label(mid), aar_a[hop][1][ia],
                                                      aar_b[hop][1][ib], names=names),
                             "id": mid})
    return rows


def reader_stage(out: str, mdr_dir: str, mdr_run, reports: dict[str, dict[str, Any]],
                 corpus_path: str, *, steps: int, questions: int, seed: int) -> dict[str, Any]:
    """Trains the reader on ``mdr_dir``'s train chains (reused when there) and reads every
    report's saved test chains with it (module docstring); returns its set-up, each run's
    Table 5 figures and end-to-end summaries (the per-question outcomes)."""
    t0 = time.perf_counter()
    files = split_files(mdr_dir, mdr_run, {"train": questions,
                                           "dev": MDR_READER["dev_questions"]},
                        k=MDR_READER["k"])
    cfg = mdr_reader_config()
    cfg.reader.train_file, cfg.reader.dev_file = files["train"], files["dev"]
    cfg.seed = seed
    cfg.train.num_steps = steps
    cfg.train.checkpoint_every = cfg.train.eval_every = steps
    reader_dir = harness.run_dir(out, "reader", seed)
    summary = train_and_evaluate(cfg, reader_dir)
    run = summary.pop("run")
    corpus = load_corpus(corpus_path)
    figures, e2e = {}, {}
    for m, rep in reports.items():
        figures[m] = add_reader(rep["out_dir"], reader_dir, corpus, ks=MDR_READER["eval_ks"],
                                reader_run=run)
        e2e[m] = outcomes.read_json(rep["out_dir"], outcomes.E2E, required=True)
    return {"dir": reader_dir, "step": summary.get("step"), "data": summary.get("data", {}),
            "dev": summary.get("dev", {}), "figures": figures, "e2e": e2e,
            "minutes": round((time.perf_counter() - t0) / 60, 1)}


def _reader_cells(fig: dict[str, Any]) -> dict[str, str]:
    return ({_label(f"e2e.em@{k}"): f"{fig['em'][k]:.1f} [{fig['em_ci'][k][0]:.1f}, "
                                    f"{fig['em_ci'][k][1]:.1f}]" for k in fig["ks"]}
            | {_label(f"e2e.f1@{k}"): f"{fig['f1'][k]:.1f}" for k in fig["ks"]})


def figures(report: dict[str, Any], reader: dict[str, Any] | None = None) -> dict[str, float]:
    """A report's headline figures as numbers (percent): recall per metric label of the table,
    AAR per hop and EM@k / F1@k of ``reader`` (``add_reader``'s figures on it), the over-seeds
    table's input."""
    out = {_label(mid): 100 * float(v.mean()) for mid, v in _outcomes(report).items() if v.size}
    for hop in ("hop1", "hop2"):
        a = report["multihop"]["aar"][hop]
        if "aar" in a:
            out[_label(f"multihop.aar.{hop}")] = 100 * float(a["aar"])
    for k in reader["ks"] if reader else ():
        out[_label(f"e2e.em@{k}")] = float(reader["em"][k])
        out[_label(f"e2e.f1@{k}")] = float(reader["f1"][k])
    return out


METHODS = ("mdr", "mdr-eadpr")  # trained at every seed; paired as (A, B) = MDR+DPR, MDR+EADPR


def definition(data_dir: str, **budget: Any) -> harness.Study:
    """The two multi-hop retrievers (``configs.studies.mdr_config``) with one budget; budget's
    ``seed`` is replaced by the run's."""
    budget = {k: v for k, v in budget.items() if k != "seed"}
    return harness.Study("multihop", tuple(
        harness.StudyRun(m, lambda seed, m=m: mdr_config(m, data_dir, seed=seed, **budget))
        for m in METHODS), (METHODS,))


def run_seed(out: str, seed: int = 0, *, steps: int = 60, batch: int = 16,
             num_questions: int = 1500, test_frac: float = 0.2, num_hard: int = 0,
             beam_size: int = 10, hop2_k: int = 10, lr: float = 5e-5, zero_shot: bool = False,
             reader: bool = True, reader_steps: int = 300,
             reader_questions: int = MDR_READER["train_questions"], model: str = "minilm"
             ) -> dict[str, Any]:
    """The benchmark at one training seed (module docstring) in ``out``: runs ``<method>``,
    ``zero-shot`` and ``reader`` (``_seedN`` for seed N > 0), writes
    ``bench_multihop[_seedN].{json,md}``, prints the markdown and returns what the JSON holds
    plus ``markdown``. ``model``: the retrievers' ``model.name_or_path`` (tests: ``tiny``)."""
    data_dir = os.path.join(out, "data")
    synthetic_multihop.generate_or_check(data_dir, num_questions, seed=0, dev_frac=DEV_FRAC,
                                         test_frac=test_frac)
    kw = dict(steps=steps, batch=batch, num_hard=num_hard, beam_size=beam_size, hop2_k=hop2_k,
              lr=lr, seed=seed, model=model)
    reports, minutes, summaries, workdirs = {}, {}, {}, {}
    t_all, started = time.perf_counter(), utc_now()
    study = definition(data_dir, **kw)
    trained = harness.train_study(study, out, [seed], reuse=False, train=train_and_evaluate)
    for method in METHODS:
        t = trained[method, seed]
        workdirs[method] = t.workdir
        summaries[method] = {**t.summary, "run": t.run}
        minutes[method] = round(t.seconds / 60, 1)
        ev = summaries[method]["eval"]["multihop"]
        reports[method] = outcomes.read_report(ev["out_dir"], required=True)
        logging.info("%s: chain R@k %s in %.1f min", method, ev["top_k"], minutes[method])
    if zero_shot:  # MiniLM as published: its own (mean, normalised) pooling
        cfg = mdr_config("mdr", data_dir, **kw)
        cfg.model.pooling = "auto"
        t0 = time.perf_counter()
        # Per seed although untrained: each seed's reader writes its answers beside the report.
        workdir = model_workdir(cfg, harness.run_dir(out, "zero-shot", seed))
        ev = evaluate_multihop(workdir, run=pretrained_run(cfg))
        minutes["zero-shot"] = round((time.perf_counter() - t0) / 60, 1)
        reports["zero-shot"] = outcomes.read_report(ev["out_dir"], required=True)

    names = (NAMES["mdr"], NAMES["mdr-eadpr"])
    reader_res: dict[str, Any] = {}
    reader_md = ""
    if reader:
        reader_res = reader_stage(out, workdirs["mdr"], summaries["mdr"]["run"], reports,
                                  os.path.join(data_dir, synthetic_multihop.FILES["corpus"]),
                                  steps=reader_steps, questions=reader_questions, seed=seed)
        e2e = {m: dict(s, retriever=NAMES[m], **{o: {int(k): v for k, v in s[o].items()}
                                                 for o in ("em_outcomes", "f1_outcomes")})
               for m, s in reader_res["e2e"].items()}   # ks back to ints (JSON made them strings)
        reader_res["paired"] = e2e_lib.paired_rows(e2e["mdr"], e2e["mdr-eadpr"])
        rtable = [{"run": NAMES[m], "questions": f["n"], **_reader_cells(f)}
                  for m, f in reader_res["figures"].items()]
        type_rows = [{"run": NAMES[m], "type": t, "count": e["count"],
                      **{_label(f"e2e.em@{k}"): f"{f['by_type'][k][t]['em']:.1f}"
                         for k in f["ks"]}}
                     for m, f in reader_res["figures"].items()
                     for t, e in f["by_type"][f["ks"][0]].items()]
        first = next(iter(reader_res["figures"].values()))
        pcols_r = ["metric", "n", *names, "B − A", "test", "p", f"significant at {stats.ALPHA:g}"]
        reader_md = (
            "\n\n## Reader: answer EM / F1 (%) over the top-k chains (EADPR Table 5 answer columns)"
            f"\n\nOne reader (MiniLM's first 3 layers, {reader_res['step']} steps of 4 questions, "
            f"trained on MDR+DPR's top-{MDR_READER['k']} chains for "
            f"{reader_res['data'].get('kept')} of {reader_res['data'].get('questions')} train "
            f"questions; {reader_res['minutes']} min with its data) reads each run's test chains; "
            f"{first['left_out']['yes_no_or_empty']} yes/no questions left out (no yes/no "
            "head); supporting-fact EM/F1 not reported (no sentence labels). EM with Wilson "
            "95 % intervals.\n\n" + report_lib.markdown_table(rtable, list(rtable[0]))
            + "\n\nEM by question type:\n\n"
            + report_lib.markdown_table(type_rows, list(type_rows[0]))
            + "\n\nPaired on the same questions (A = MDR+DPR, B = MDR+EADPR): exact McNemar on "
            "EM, paired bootstrap on F1.\n\n"
            + report_lib.markdown_table(reader_res["paired"], pcols_r)
            + "\n\n" + "\n".join(f"- {r['sentence']}" for r in reader_res["paired"]))
        for m, rep in reports.items():
            rep["reader"] = reader_res["figures"][m]
    table = [_row(NAMES[m], r, minutes.get(m)) for m, r in reports.items()]
    cols = list(table[0])
    paired = paired_rows(reports["mdr"], reports["mdr-eadpr"],
                         _aar(reports["mdr"]["out_dir"]), _aar(reports["mdr-eadpr"]["out_dir"]),
                         names)
    pcols = ["metric", "n", *names, "B − A", "test", "p", f"significant at {stats.ALPHA:g}"]
    train_cols = {m: {k.split("/", 1)[1]: round(v, 4) for k, v in s["train"].items()
                      if k.split("/", 1)[1] in ("loss", "hop1_rank_acc", "hop2_rank_acc",
                                                "l_chn", "l_cpp", "step_time_s")}
                  for m, s in summaries.items()}
    base = mdr_config("mdr", data_dir, **kw)
    setup = (f"{MODEL_NAMES.get(model, model)}, shared encoder, {steps} steps x {batch} "
             f"questions (lr {lr}, seed {seed}, {num_hard} hard negatives), lengths "
             f"q {base.data.max_q_len} / p {base.data.max_p_len} / hop-2 "
             f"{base.multihop.max_hop2_len}; world: "
             f"{num_questions} questions (test {reports['mdr']['n_questions']}), "
             f"{reports['mdr']['corpus_size']} passages; beam {beam_size} x {hop2_k}, "
             f"top 20 chains; total {round((time.perf_counter() - t_all) / 60, 1)} min")
    stamp = harness.report_stamp(started, {n: t.workdir for (n, _), t in trained.items()})
    md = (f"# MDR+DPR vs MDR+EADPR on the synthetic two-hop world\n\n{setup}\n\n"
          + harness.stamp_markdown(stamp) + "\n\n"
          "## Recall (%) and AAR (%) with 95 % Wilson intervals\n\n"
          + report_lib.markdown_table(table, cols)
          + "\n\n## Paired on the same test questions (A = MDR+DPR, B = MDR+EADPR)\n\n"
          + report_lib.markdown_table(paired, pcols) + "\n\n"
          + "\n".join(f"- {r['sentence']}" for r in paired) + reader_md
          + "\n\n## Last training metrics\n\n```\n" + json.dumps(train_cols, indent=1) + "\n```\n")
    result = {"setup": setup, "table": table, "paired": paired, "train": train_cols,
              "runs": {m: r["out_dir"] for m, r in reports.items()},
              "reader": {k: v for k, v in reader_res.items() if k != "e2e"},
              "seed": seed, "stamp": stamp, "figures": {NAMES[m]: figures(r, reader_res.get("figures", {}).get(m))
                          for m, r in reports.items()}}
    report = harness.run_dir(out, "bench_multihop", seed)
    report_lib.write_json(report + ".json", result)
    with report_lib.atomic_open(report + ".md") as f:
        f.write(md)
    # The paired tables keyed by metric id (tools/rederive_claims.py reads these).
    report_lib.write_rows(report + ".md", {
        "retrieval": report_lib.keyed_rows(paired, pcols),
        **({"reader": report_lib.keyed_rows(reader_res["paired"], pcols)}
           if reader_res.get("paired") else {})})
    print(md)
    return {**result, "markdown": md}


def over_seeds(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std [min, max] over the seeds' results (:func:`run_seed`) of every run's headline
    figures (``seed_spread``) and of the paired B − A rows, retrieval and reader
    (``seed_diff``); ``markdown`` holds both tables."""
    seeds = [r["seed"] for r in results]
    rows = [{"run": run, "seed": r["seed"], **f} for r in results
            for run, f in r["figures"].items()]
    metrics = [m for m in dict.fromkeys(m for r in rows for m in r) if m not in ("run", "seed")]
    spread = stats.seed_table(rows, ("run",), metrics)
    diff = stats.seed_diff_table([p for r in results
                                  for p in r["paired"] + r["reader"].get("paired", [])])
    sig = f"significant at {stats.ALPHA:g}"
    md = (f"# MDR+DPR vs MDR+EADPR over seeds {seeds}\n\n"
          f"## Mean ± std [min, max] over seeds {seeds}\n\n"
          "Recall, AAR and reader EM / F1 in %, sample std over the training seeds.\n\n"
          + report_lib.markdown_table(spread, ["run", "seeds", *metrics])
          + f"\n\n## B − A over seeds {seeds} (A = MDR+DPR, B = MDR+EADPR)\n\n"
          "Points; each seed tested on its own (paired tables of the seeds above).\n\n"
          + report_lib.markdown_table(diff, ["metric", "seeds", "B − A", sig]) + "\n")
    return {"seeds": seeds, "seed_spread": spread, "seed_diff": diff, "markdown": md}


def run_seeds(out: str, seeds: Sequence[int] = (0,), **kw: Any) -> dict[str, Any]:
    """:func:`run_seed` (``kw``: its keyword arguments) for every seed; with one seed its
    result, with several :func:`over_seeds` of them, written to
    ``out/bench_multihop_over_seeds.{json,md}``, printed, and the seeds' results under
    ``per_seed``."""
    results = [run_seed(out, int(seed), **kw) for seed in seeds]
    res = harness.summarise_seeds(
        results, over_seeds, out, stem="bench_multihop_over_seeds", files_key="reports",
        files={r["seed"]: harness.run_dir(out, "bench_multihop", r["seed"]) + ".json"
               for r in results})
    if len(results) > 1:
        print(res["markdown"])
    return res


def main(argv) -> dict[str, Any]:
    _app.no_positional(argv)
    return run_seeds(_F.out.value or make_dir("mdr_bench_"), _F.seed_list(),
                     steps=_F.steps.value, batch=_F.batch.value, num_questions=_NUM_Q.value,
                     test_frac=_TEST_FRAC.value, num_hard=_NUM_HARD.value, beam_size=_BEAM.value,
                     hop2_k=_HOP2_K.value, lr=_F.lr.value, zero_shot=_ZERO.value,
                     reader=_READER.value, reader_steps=_READER_STEPS.value,
                     reader_questions=_READER_Q.value, model=_F.model.value)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
