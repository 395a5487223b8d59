"""Distractor robustness (docs/method.md §5, EADPR Fig. 5) on a tiny trained run of the synthetic benchmark."""

import json
import os

import numpy as np
import pytest
from helpers import tiny_synthetic_config

from dense_cf.synthetic import generate as synthetic
from dense_cf.text.answers import has_answer

COUNTS = (0, 1, 3)
KS = (1, 5, 20, 100)
K_DEPTH = 400


def _config(data_dir):
    # Plain DPR loss: the run the ranking assertions below were written against.
    return tiny_synthetic_config(data_dir, **{"method": "dpr", "train.num_steps": 2,
                                              "eval.after_training": False, "loss.lam": 0.0,
                                              "loss.tau1": 0.0, "loss.tau2": 0.0})


def test_build_distractors_shared_context_and_missing_answers():
    from dense_cf.eval.aar import Triplets
    from dense_cf.eval.robustness import build_distractors
    ctx = "Alpha was born in Kaldera. Alpha studied in Pelgate. Alpha wrote 717 works. Alpha died."
    trip = Triplets(questions=["Where was Alpha born?", "Where did Alpha study?", "Who is Beta?"],
                    answers=[["Kaldera"], ["Pelgate"], ["Stockholm"]],
                    titles=["Alpha", "Alpha", "Beta"],
                    contexts=[ctx, ctx, "Beta is a person. Beta lives far away."], stats={})
    d = build_distractors(trip, 5, seed=0)
    assert d.questions == trip.questions[:2] and d.index == [0, 1]
    assert d.stats["questions_without_distractors"] == 1
    assert d.stats["questions_sharing_gold_context"] == 2
    for v in d.variants:  # one corpus for both: no distractor bears either question's answer
        assert v and not any(has_answer(["Kaldera", "Pelgate"], x) for x in v)
        assert v[0] == "Alpha wrote 717 works. Alpha died."
    assert d.variants[0] != d.variants[1]  # per-question seeds order the variants differently
    titles, texts = d.flat()
    assert texts == d.variants[0] + d.variants[1] and titles == ["Alpha"] * len(texts)
    assert d.offsets.tolist() == [0, len(d.variants[0]), len(texts)]
    assert build_distractors(trip, 5, seed=0).variants == d.variants
    assert d.fates.counts == {"evaluated": 2, "no_qa_record": 0, "malformed_gold_record": 0,
                              "answer_not_in_context": 1, "no_distractor": 0}
    assert d.fates.first["answer_not_in_context"] == "gold record 2: 'Who is Beta?'"


def test_build_distractors_counts_join_losses():
    """A gold record lost at the join stays counted in the robustness fates (same join as AAR)."""
    from dense_cf.eval.aar import Triplets
    from dense_cf.eval.aar_math import JOIN_REASONS, ReasonCounts
    from dense_cf.eval.robustness import build_distractors
    join = ReasonCounts(JOIN_REASONS)
    join.add("joined_by_occurrence", "gold record 0: 'Where was Alpha born?'", 2)
    join.add("no_qa_record", "gold record 1: 'Where is Gamma?'")
    trip = Triplets(questions=["Where was Alpha born?", "Who lives in Delta?"],
                    answers=[["Kaldera"], ["Delta"]], titles=["Alpha", "Delta"],
                    contexts=["Alpha was born in Kaldera. Alpha wrote 717 works. Alpha died.",
                              "Delta."], stats={}, gold_index=[0, 2], join=join)
    d = build_distractors(trip, 3, seed=0)
    # "Delta." is all answer: no answer-free variant is left of it.
    assert d.fates.counts == {"evaluated": 1, "no_qa_record": 1, "malformed_gold_record": 0,
                              "answer_not_in_context": 0, "no_distractor": 1}
    assert d.fates.first["no_distractor"] == "gold record 2: 'Who lives in Delta?'"
    assert d.fates.first["no_qa_record"] == "gold record 1: 'Where is Gamma?'"


@pytest.fixture(scope="module")
def robust(tmp_path_factory):
    from dense_cf.eval.robustness import evaluate_robustness
    from dense_cf.experiment import train_and_evaluate as train
    from dense_cf.train.run import load_run
    data_dir = tmp_path_factory.mktemp("synth")
    synthetic.generate(str(data_dir), num_passages=300, seed=1)
    workdir = str(tmp_path_factory.mktemp("run"))
    train(_config(data_dir), workdir)
    run = load_run(workdir)
    # k above the corpus size: every question has a first hit (its gold passage is in the
    # corpus), so the rank assertions cover all questions even for a 2-step model.
    result = evaluate_robustness(workdir, counts=COUNTS, max_distractors=3, run=run, k=K_DEPTH,
                                 ks=KS)
    return workdir, run, result


def test_k0_equals_plain_retrieval_and_export_is_reused(robust):
    from dense_cf.eval import metrics
    from dense_cf.retrieval import export
    from dense_cf.retrieval.corpus import load_corpus, load_qa
    from dense_cf.retrieval.retriever import ensure_index, retrieve
    workdir, run, result = robust
    cfg = run.config
    corpus = load_corpus(os.path.join(cfg.data.data_dir, cfg.data.corpus_file))
    index, timing = ensure_index(run, corpus, workdir, kind="flat", batch_size=64,
                                 dtype="float32", shard_size=128)
    assert timing["encoded_this_run"] == 0  # the robustness export is the retrieval export
    assert result["export"]["encoded_this_run"] == 300
    questions = result["questions"]
    qs, ans = load_qa(os.path.join(cfg.data.data_dir, cfg.data.test_file))
    answers = [ans[qs.index(q)] for q in questions]
    q_emb = export.encode_questions(run, questions)
    plain = metrics.evaluate_retrieval(questions, answers,
                                       retrieve(index, q_emb, corpus, K_DEPTH), ks=KS)
    k0 = result["table"][0]
    assert k0["top_k"] == plain["top_k"] and k0["mrr"] == pytest.approx(plain["mrr"])
    assert result["first_hit_rank"][0] == plain["first_hit_rank"]
    assert k0["corpus_size"] == 300 and k0["retrieved_distractors"] == 0


def test_corpus_grows_by_k_per_question(robust):
    _, _, result = robust
    n = result["n_questions"]
    stats = result["distractor_stats"]
    assert n > 0 and stats["questions_evaluated"] == n
    assert stats["questions_evaluated"] + stats["questions_without_distractors"] == stats["triplets"]
    # Every gold record is counted once by reason, with the same join as AAR.
    fates = result["triplet_fates"]["counts"]
    assert fates["evaluated"] == n
    assert sum(fates.values()) == result["triplet_stats"]["gold_records"]
    assert result["triplet_stats"]["join_mode"] == "position"
    for K in COUNTS:
        e = result["table"][K]
        # Every synthetic gold passage has >= 3 non-evidence variants, so nothing is short.
        assert e["questions_short"] == 0
        assert e["distractors_added"] == K * n
        assert e["corpus_size"] == 300 + K * n
        assert e["distractors_per_question_actual"] == K


def _ranks(ranks):
    return [r if r is not None else np.inf for r in ranks]


def test_adding_distractors_only_pushes_answer_passages_down(robust):
    _, _, result = robust
    first, corpus_first, n = result["first_hit_rank"], result["first_corpus_hit_rank"], result["n_questions"]
    assert all(r is not None for r in corpus_first[0])  # k = 400 > corpus: every question has a hit
    for K_prev, K in zip(COUNTS, COUNTS[1:]):
        prev, e = result["table"][K_prev], result["table"][K]
        # Exact for every question: the Flat index only gains passages, so the first
        # answer-bearing corpus passage never moves up; corpus-only top-k and MRR never rise.
        assert all(r >= p for r, p in zip(_ranks(corpus_first[K]), _ranks(corpus_first[K_prev])))
        assert all(e["top_k_corpus"][k] <= prev["top_k_corpus"][k] for k in KS)
        assert e["mrr_corpus"] <= prev["mrr_corpus"]
        # DPR's first hit equals the corpus one unless a distractor bearing the answer is first.
        for q in range(n):
            if first[K][q] != corpus_first[K][q]:
                assert first[K][q] < corpus_first[K][q]
        for k in KS:
            distractor_first = sum(1 for f, c in zip(_ranks(first[K]), _ranks(corpus_first[K]))
                                   if f <= k < c)
            assert e["top_k"][k] == pytest.approx(e["top_k_corpus"][k] + 100 * distractor_first / n)
            if distractor_first == 0:  # no distractor hit counted: DPR top-k cannot rise either
                assert e["top_k"][k] <= prev["top_k"][k]
    # The distractors do push answer passages down (the assertions above are not vacuous).
    assert sum(corpus_first[3]) > sum(corpus_first[0])
    assert result["table"][3]["mean_distractors_above_first_corpus_hit"] > 0
    assert result["table"][3]["top_k_corpus"][100] < result["table"][0]["top_k_corpus"][100]


def test_own_distractors_never_bear_the_answer(robust):
    _, _, result = robust
    for K in COUNTS:
        e = result["table"][K]
        assert e["retrieved_own_distractors_with_answer"] == 0
        # k = 400 covers the whole index: every distractor is retrieved by every question.
        assert e["retrieved_distractors"] == e["distractors_added"] * result["n_questions"]
        # Other questions' distractors may contain an answer by coincidence: top-20 has none
        # on this data, so DPR top-k up to 20 is exactly non-increasing here.
        assert all(e["top_k"][k] <= result["table"][0]["top_k"][k] for k in (1, 5, 20))


def test_report_files_and_distractor_texts(robust):
    workdir, run, result = robust
    out = os.path.join(workdir, "eval", f"step_{run.step}")
    saved = json.load(open(os.path.join(out, "robustness.json")))
    assert sorted(saved["table"]) == ["0", "1", "3"]
    assert saved["table"]["3"]["top_k"] == {str(k): v for k, v in result["table"][3]["top_k"].items()}
    md = open(os.path.join(out, "robustness.md")).read()
    assert "| K |" in md and "top-100" in md and "questions short" in md
    assert "## Triplets" in md and "| fate | evaluated |" in md
    # Every column is defined in the report, the plot is linked, JSON states its scales.
    assert "## Columns" in md and "](robustness.png)" in md and "- **questions short**:" in md
    assert saved["units"]["top_k"] == "percent (0-100)" and saved["out_dir"] == os.path.abspath(out)
    assert os.path.getsize(os.path.join(out, "robustness.png")) > 1000
    rows = [json.loads(line) for line in open(os.path.join(out, "robustness_distractors.jsonl"))]
    assert [r["question"] for r in rows] == result["questions"]
    for r in rows:
        assert len(r["distractors"]) == 3 == len(set(r["distractors"]))
        assert not any(has_answer(r["answers"], d) for d in r["distractors"])


def test_multi_run_table_and_plot(robust, tmp_path):
    from dense_cf.eval.robustness import plot_runs, robustness_table
    workdir, run, result = robust
    loaded = json.load(open(os.path.join(workdir, "eval", f"step_{run.step}", "robustness.json")))
    table = robustness_table({"a": result, "b": loaded})  # JSON string keys are accepted
    lines = table.splitlines()
    assert lines[0].startswith("| K | distractors/q | a top-1 |") and "b MRR" in lines[0]
    assert len(lines) == 2 + len(COUNTS)
    # Runs side by side: the same numbers for the same result.
    cells = [c.strip() for c in lines[2 + 2].strip("|").split("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells[header.index("a top-5")] == cells[header.index("b top-5")]
    plot_runs({"a": result, "b": loaded}, str(tmp_path / "p.png"))
    assert os.path.getsize(tmp_path / "p.png") > 1000


def test_counts_beyond_max_are_rejected(robust):
    from dense_cf.eval.robustness import evaluate_robustness
    workdir, run, _ = robust
    with pytest.raises(ValueError, match="counts"):
        evaluate_robustness(workdir, counts=(0, 5), max_distractors=3, run=run)


def test_jax_index_gives_the_flat_ranks(robust, tmp_path):
    # eval.index=jax (hosts without faiss) searches exactly too: every question's first hit, at
    # every K, is where faiss Flat put it, and the report says which index ran.
    from dense_cf.eval.robustness import evaluate_robustness
    workdir, run, result = robust
    assert result["index"] == "flat"
    got = evaluate_robustness(workdir, counts=COUNTS, max_distractors=3, run=run, k=K_DEPTH,
                              ks=KS, out_dir=str(tmp_path), index_kind="jax")
    assert got["index"] == "jax" and got["export"]["encoded_this_run"] == 0
    assert got["questions"] == result["questions"]
    for K in COUNTS:
        assert got["first_hit_rank"][K] == result["first_hit_rank"][K]
        assert got["first_corpus_hit_rank"][K] == result["first_corpus_hit_rank"][K]
        assert got["table"][K]["corpus_size"] == result["table"][K]["corpus_size"]
    assert "exact jax index" in open(tmp_path / "robustness.md").read()


def test_heldout_family_next_to_unchanged_pstar(robust, tmp_path):
    """``heldout=True`` adds the held-out family (value swaps, paraphrases, namesakes) under
    its own key and compare-row names; the p* numbers and names stay as they were."""
    from dense_cf.analysis.compare import compare_outcome_sets, load_outcomes
    from dense_cf.eval.robustness import evaluate_robustness
    from dense_cf.synthetic.distractors import HELDOUT_KINDS
    workdir, run, result = robust
    assert "heldout" not in result  # the default evaluation reports p* only
    out = tmp_path / "eval" / f"step_{run.step}"  # a run layout: compare finds it
    got = evaluate_robustness(workdir, counts=COUNTS, max_distractors=3, run=run, k=K_DEPTH,
                              ks=KS, out_dir=str(out), heldout=True)
    assert got["questions"] == result["questions"]
    for K in COUNTS:
        assert got["table"][K]["top_k"] == result["table"][K]["top_k"]
        assert got["first_hit_rank"][K] == result["first_hit_rank"][K]
    h = got["heldout"]
    s = h["distractor_stats"]
    assert h["kinds"] == list(HELDOUT_KINDS) and h["n_questions"] > 0
    assert s["questions_evaluated"] + s["questions_without_distractors"] == s["triplets"]
    for kind in HELDOUT_KINDS:  # every kind built; the ones that could not be are counted
        assert s[f"built_{kind}"] > 0 and f"questions_without_{kind}" in s
    for K in COUNTS:
        e = h["table"][K]
        assert e["retrieved_own_distractors_with_answer"] == 0
        assert e["distractors_added"] <= K * h["n_questions"]
    rows = [json.loads(line) for line in open(out / "robustness_heldout_distractors.jsonl")]
    assert [r["question"] for r in rows] == h["questions"]
    for r in rows:
        assert set(r["kinds"]) <= set(HELDOUT_KINDS) and len(r["titles"]) == len(r["kinds"])
        assert not any(has_answer(r["answers"], d) for d in r["distractors"])
    md = open(out / "robustness.md").read()
    assert "## Held-out distractors" in md and "held-out top-1" in md
    saved = json.load(open(out / "robustness.json"))
    assert saved["heldout"]["table"]["3"]["top_k"] == {str(k): v for k, v in
                                                        h["table"][3]["top_k"].items()}
    res = compare_outcome_sets(load_outcomes(str(tmp_path)), load_outcomes(str(tmp_path)),
                               n_resamples=100)
    metrics = [r["metric"] for r in res["rows"]]
    assert "K=3 distractors: top-1" in metrics and "K=3 held-out distractors: top-1" in metrics


def test_default_heldout_section_reads_as_before_issue_50():
    """The report's held-out section is built from the kinds' registry descriptions; for the
    default kinds it is the text of 37b808c (before rule_paraphrase), word for word."""
    from dense_cf.eval.robustness import _heldout_text
    held = {"kinds": ["value_swap", "paraphrase", "namesake"], "n_questions": 3,
            "distractor_stats": {"questions_without_distractors": 1, "built_value_swap": 3,
                                 "questions_without_value_swap": 0, "built_paraphrase": 2,
                                 "built_namesake": 1, "namesake_world": 1},
            "table": {0: {"top_k": {1: 50.0}, "mrr": 0.5, "distractors_per_question_actual": 0.0}}}
    text = _heldout_text(held, "dpr", 5)
    assert text.split("\n\n", 1)[1] == (
        "Distractors unlike the training p*: the answer value swapped for another of its type, "
        "the other sentences paraphrased with the world's alternative templates and reordered "
        "(answer sentence dropped), a same-named entity's passage "
        "(dense_cf.synthetic.distractors); kinds alternate in that order, up to 5 per question. "
        "3 questions (1 left out). Per kind: value_swap: 3 built, 0 questions without one, "
        "paraphrase: 2 built, n/a questions without one, namesake: 1 built, n/a questions "
        "without one. Namesakes: 1 from the world's own namesakes, 0 built. Compare rows are "
        "labelled \"K=<K> held-out distractors: ...\"; the p* rows above keep \"K=<K> "
        "distractors: ...\".")


def test_heldout_kinds_select_the_opt_in_rule_paraphrase(robust, tmp_path):
    """``--heldout_kinds`` (``eval.robustness_heldout_kinds``, issue 50) selects the held-out
    kinds; with rule_paraphrase alone K=1 adds one, the skipped passages are reported; ``--out``
    leaves the run's own reports alone."""
    from dense_cf.cli import eval_robustness
    workdir, run, result = robust
    stored = os.path.join(workdir, "eval", f"step_{run.step}", "robustness.json")
    before = open(stored).read()  # the fixture evaluated into the run layout
    got = eval_robustness.run_cli(["--workdir", workdir, "--counts", "0,1",
                                   "--max_distractors", "1", "--heldout", "--heldout_kinds",
                                   "rule_paraphrase", "--out", str(tmp_path)])
    assert open(stored).read() == before
    h = got["heldout"]
    s = h["distractor_stats"]
    assert h["kinds"] == ["rule_paraphrase"] and s["built_rule_paraphrase"] == h["n_questions"]
    assert s["questions_evaluated"] + s["questions_without_distractors"] == s["triplets"]
    assert "skipped_rule_paraphrase" in s and "built_value_swap" not in s
    assert h["table"][1]["retrieved_own_distractors_with_answer"] == 0
    md = open(tmp_path / "robustness.md").read()
    assert "## Held-out distractors (rule paraphrase)" in md
    assert "passages it cannot apply to" in md and "fixed rule set" in md
    rows = [json.loads(line) for line in open(tmp_path / "robustness_heldout_distractors.jsonl")]
    assert all(r["kinds"] == ["rule_paraphrase"] for r in rows)
    assert not any(has_answer(r["answers"], d) for r in rows for d in r["distractors"])


def test_table_is_unchanged_when_the_export_is_reused(robust, tmp_path):
    """Issue 46: robustness encodes only the distractors and questions when the run's export
    exists (the retrieval evaluation's); the table equals the one whose export it made itself."""
    from dense_cf.eval.robustness import evaluate_robustness
    workdir, run, result = robust
    assert result["export"]["encoded_this_run"] == 300     # the fixture's call made the export
    again = evaluate_robustness(workdir, counts=COUNTS, max_distractors=3, run=run, k=K_DEPTH,
                                ks=KS, out_dir=str(tmp_path))
    assert again["export"]["encoded_this_run"] == 0        # ...this one reads it back
    assert again["timing"]["export_s"] < result["timing"]["export_s"]
    for K in COUNTS:
        a, b = result["table"][K], again["table"][K]
        assert b["top_k"] == a["top_k"] and b["mrr"] == pytest.approx(a["mrr"], abs=1e-12)
        assert again["first_hit_rank"][K] == result["first_hit_rank"][K]
