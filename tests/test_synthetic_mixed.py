"""The opt-in SQuAD-like world of the synthetic benchmark (``generate(world="mixed")``, issue 16).

Off (default world) the files are byte-identical to the generator before the option existed;
on, the sentences of a passage are about different, named entities and questions stay
answerable from exactly one sentence of exactly their positive passage.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from dense_cf.cli import synthetic as synthetic_cli
from dense_cf.datasets import formats
from dense_cf.synthetic import generate as synthetic
from dense_cf.synthetic import world
from dense_cf.text.answers import find_answer_spans, has_answer
from dense_cf.text.counterfactuals import counterfactual_text
from dense_cf.text.sentences import split_sentences

N = 60

# sha256 of generate(out, 60, seed=0, workers=1[, questions_per_passage=3]) written by the
# generator before the world option existed (commit af9a1d7); meta.json is checked separately.
GOLDEN = {
    1: {"biencoder-synth-dev.json": "709ef80f1d20970b3b20e9ee005e43b08256b065bb61368424909a9385054268",
        "biencoder-synth-train.json": "f4dbef4e4791af4511c3e127e67d297c1df89c25e7935f2a7e26c28261b1f5e9",
        "psgs_synth.tsv": "26ca3535f5e15b490e3d4839c5a8119ab4bd2de7f39861d4ecfbfe95b9b90989",
        "synth-dev_gold_info.json": "47ab13dcccbb474c9eea464523742bc72446ac4a0ac260d754be7b010ee24cf2",
        "synth-test.qa.csv": "07be3990044119f2ec4a2b9f1a84ff24b80339816e280f6cc3fde41aec683acf",
        "synth-test_gold_info.json": "3226466eacb5b7a3e6cdbe202d81c4c26b930899feb836e53f309be46e221ba6",
        "synth-train_gold_info.json": "f851f99e5884d0deeba94c0af6f7243e78eac1714109f10b58e8234e133800b8"},
    3: {"biencoder-synth-dev.json": "74221a1cd8bc7c6fadb1ecdd53167f2d85a86e7ea50802c8077a898216ac847d",
        "biencoder-synth-train.json": "e76a2867bb13bfc56c0b96ccd930553788b709abfde770be8ba20885e71b7eab",
        "psgs_synth.tsv": "26ca3535f5e15b490e3d4839c5a8119ab4bd2de7f39861d4ecfbfe95b9b90989",
        "synth-dev_gold_info.json": "2d484c67257a8cc1e508948d5bd048de09f911f567a42067705615ff682088a0",
        "synth-test.qa.csv": "67b28bc1e833acdcc65ddf98930bc232de638f2ee9d7e80588850e507980c217",
        "synth-test_gold_info.json": "bca3fe06f78033842bf0eb3a6afcaaacd80c2acca98ee7322def88de0f9acf64",
        "synth-train_gold_info.json": "fd30e0c905c592e210ed61c06eb8ed2fcbd628f834cab9afdb40a035f0804a1d"},
}


def _hashes(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def _bytes(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    out = tmp_path_factory.mktemp("mixed")
    res = synthetic.generate(out, N, seed=0, workers=1, world="mixed", questions_per_passage=3)
    corpus = list(formats.read_corpus_tsv(out / synthetic.FILES["corpus"], skip_bad=False))
    train = json.loads((out / synthetic.FILES["train"]).read_text())
    dev = json.loads((out / synthetic.FILES["dev"]).read_text())
    answers = {ex["question"]: ex["answers"] for ex in train + dev}
    answers.update(formats.read_qa_csv(out / synthetic.FILES["test_qa"], skip_bad=False))
    gold = [g for s in synthetic.SPLITS
            for g in formats.read_gold_info(out / synthetic.FILES[f"{s}_gold"], skip_bad=False)]
    return {"out": out, "res": res, "corpus": corpus, "train": train, "answers": answers, "gold": gold,
            "meta": json.loads((out / "meta.json").read_text())}


@pytest.mark.parametrize("qpp", [1, 3])
def test_default_world_byte_identical_to_before(tmp_path, qpp):
    a, b = tmp_path / "a", tmp_path / "b"
    synthetic.generate(a, N, seed=0, workers=1, questions_per_passage=qpp)
    synthetic.generate(b, N, seed=0, workers=1, questions_per_passage=qpp, world="entity")
    assert _bytes(a) == _bytes(b)
    hashes = _hashes(a)
    meta = json.loads((a / "meta.json").read_text())
    assert {k: v for k, v in hashes.items() if k != "meta.json"} == GOLDEN[qpp]
    assert "world" not in meta["params"] and "unplaced_facts" not in meta["counts"]
    assert meta["version"] == synthetic.GENERATOR_VERSION == "synth-1.0"


def _plan_chunk(n: int, seed: int):
    plan = synthetic._plan(n, seed)
    rng = random.Random(synthetic._chunk_seed(seed, 0))
    return world._mixed_passages(rng, plan["types"], plan["keys"], plan["counts"])


@pytest.mark.parametrize("n", [N, 300])
def test_mixed_sentences_name_different_subjects(n):
    mp = _plan_chunk(n, 0)
    assert mp.unplaced == 0
    n_facts = 0
    for p, items in enumerate(mp.placed):
        ents = [it.entity for it in items]
        assert len(set(ents)) == len(ents), "two facts of one entity in a passage"
        assert mp.host[p] not in ents, "a fact about the title's entity"
        assert 1 <= len(items) <= 3  # 2-3 per passage (1 when an entity runs out of facts)
        subjects = [world._subject(it.ctx).lower() for it in items]
        assert len(set(subjects)) == len(subjects)
        for it, subj in zip(items, subjects):
            assert subj in it.sentence.lower(), (subj, it.sentence)  # the sentence names it
            others = [s for s in subjects if s != subj]
            assert not any(o in it.sentence.lower() for o in others)
        n_facts += len(items)
    assert n_facts >= 2 * len(mp.placed)


def test_mixed_passages_split_into_intro_plus_one_sentence_per_fact(mixed):
    mp = _plan_chunk(N, 0)
    texts = [t for _, t, _ in mixed["corpus"]]
    titles = [ti for _, _, ti in mixed["corpus"]]
    assert titles == mp.titles
    for p, text in enumerate(texts):
        sents = [text[a:b] for a, b in split_sentences(text)]
        assert len(sents) == 1 + len(mp.placed[p])  # DCSR's sentence units = the facts
        assert sents[0].strip() == mp.intros[p]
        assert sorted(s.strip() for s in sents[1:]) == sorted(it.sentence for it in mp.placed[p])


def test_mixed_gold_answer_in_exactly_one_fact_sentence_of_the_positive(mixed):
    texts = {pid: t for pid, t, _ in mixed["corpus"]}
    by_text = {}
    for pid, t in texts.items():
        by_text.setdefault(t, []).append(pid)
    assert len(mixed["gold"]) == sum(mixed["meta"]["counts"]["questions"].values())
    for g in mixed["gold"]:
        ctx = g["context"]
        assert len(by_text[ctx]) == 1  # the gold context is one corpus passage
        answers = mixed["answers"][g["question"]]
        assert has_answer(answers, ctx)
        sents = split_sentences(ctx)
        hit = {k for s, t in find_answer_spans(ctx, answers)
               for k, (a, b) in enumerate(sents) if a <= s and t <= b}
        assert len(hit) == 1 and 0 not in hit  # one fact sentence, never the title's intro
        # The counterfactual (PiCL p*) drops exactly that sentence and loses the answer.
        cf = counterfactual_text(ctx, answers, "sentence")
        assert cf is not None and not has_answer(answers, cf)
        assert len(split_sentences(cf)) == len(sents) - 1


def test_mixed_questions_unique_to_their_positive_among_mentions(mixed):
    """No other passage mentioning the question's entity (the mixed world's siblings) and no
    BM25 hard negative holds the answer."""
    texts = {pid: t for pid, t, _ in mixed["corpus"]}
    for ex in mixed["train"]:
        pos = ex["positive_ctxs"][0]
        assert texts[pos["passage_id"]] == pos["text"]
        for neg in ex["hard_negative_ctxs"] + ex["negative_ctxs"]:
            assert not has_answer(ex["answers"], neg["text"])
    assert mixed["meta"]["counts"]["dropped_total"] < 0.1 * mixed["meta"]["counts"]["candidates_validated"]


def test_mixed_many_questions_hit_different_sentences(mixed):
    by_pos: dict[str, list[dict]] = {}
    for ex in mixed["train"]:
        by_pos.setdefault(ex["positive_ctxs"][0]["passage_id"], []).append(ex)
    multi = [exs for exs in by_pos.values() if len(exs) > 1]
    assert multi
    for exs in multi:
        ctx = exs[0]["positive_ctxs"][0]["text"]
        sents = split_sentences(ctx)
        hit = [{k for s, t in find_answer_spans(ctx, ex["answers"])
                for k, (a, b) in enumerate(sents) if a <= s and t <= b} for ex in exs]
        flat = [next(iter(h)) for h in hit]
        assert len(set(flat)) == len(flat)


def test_mixed_meta_and_determinism(mixed, tmp_path):
    meta = mixed["meta"]
    assert meta["params"]["world"] == "mixed" and meta["params"]["questions_per_passage"] == 3
    assert meta["counts"]["unplaced_facts"] == 0
    again = tmp_path / "again"
    synthetic.generate(again, N, seed=0, workers=1, world="mixed", questions_per_passage=3)
    assert _bytes(again) == _bytes(mixed["out"])
    other = tmp_path / "other"
    synthetic.generate(other, N, seed=1, workers=1, world="mixed", questions_per_passage=3)
    assert (other / "psgs_synth.tsv").read_bytes() != (mixed["out"] / "psgs_synth.tsv").read_bytes()
    # Not the default world's corpus either.
    default = tmp_path / "default"
    synthetic.generate(default, N, seed=0, workers=1, num_hard_negatives=0)
    assert (default / "psgs_synth.tsv").read_bytes() != (mixed["out"] / "psgs_synth.tsv").read_bytes()


def test_mixed_cli_flag_and_bad_world(tmp_path):
    synthetic_cli.run_cli(["--out", str(tmp_path / "c"), "--num_passages", "30", "--world", "mixed",
                           "--workers", "1", "--num_hard_negatives", "0"])
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["params"]["world"] == "mixed"
    with pytest.raises(ValueError, match="world must be one of"):
        synthetic.generate(tmp_path / "bad", 30, world="squad")


def test_benchmarks_refuse_data_of_other_settings(tmp_path):
    # check_params: what studies.dcsr / studies.ablation / studies.replicate / studies.marginalize run
    # on a reused data dir
    d = tmp_path / "data"
    types = synthetic.domain_types(2)[1]
    synthetic.generate(d, 30, seed=0, workers=1, test_questions=5, num_hard_negatives=0,
                       world="mixed", entity_types=types)
    kw = {"num_hard_negatives": 0, "entity_types": types}
    synthetic.check_params(d, num_passages=30, test_questions=5, world="mixed", **kw)
    synthetic.generate_or_check(d, 30, 0, test_questions=5, world="mixed", **kw)  # reused
    with pytest.raises(ValueError, match="world"):
        synthetic.check_params(d, num_passages=30, test_questions=5, world="entity", **kw)
    with pytest.raises(ValueError, match="questions_per_passage"):
        synthetic.check_params(d, num_passages=30, test_questions=5, questions_per_passage=3,
                               world="mixed", **kw)
    with pytest.raises(ValueError, match="num_passages"):
        synthetic.generate_or_check(d, 40, 0, test_questions=5, world="mixed", **kw)
    with pytest.raises(ValueError, match="entity_types"):
        synthetic.check_params(d, num_passages=30, test_questions=5, world="mixed",
                               num_hard_negatives=0)
    with pytest.raises(ValueError, match="num_hard_negatives"):
        synthetic.check_params(d, num_passages=30, test_questions=5, world="mixed",
                               entity_types=types)


def test_bench_marginalize_domain_settings():
    from dense_cf.studies import marginalize as bench_mg

    assert bench_mg.per_domain([], 3, "entity", "--worlds") == ["entity"] * 3
    assert bench_mg.per_domain(["entity", "mixed"], 2, "entity", "--worlds") == ["entity", "mixed"]
    with pytest.raises(ValueError, match="--qpp gives 1 values for 3 domains"):
        bench_mg.per_domain(["3"], 3, "1", "--qpp")
    types = synthetic.domain_types(3)[0]
    name = synthetic.domain_name(types)
    assert bench_mg.domain_label(types, "entity", 1) == name
    assert bench_mg.domain_label(types, "mixed", 3) == f"{name}_mixed_q3"


def test_config_key_validated():
    from dense_cf.configs.base import base_config
    from dense_cf.train.validate import validate

    c = base_config()
    assert c.data.synthetic.world == "entity"
    c.data.synthetic.generate = True
    c.data.synthetic.world = "squad"
    with pytest.raises(Exception, match="data.synthetic.world"):
        validate(c, check_files=False)
