"""Tests for the synthetic answer-aware QA benchmark (dense_cf/synthetic/generate.py)."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from dense_cf.cli import synthetic as synthetic_cli
from dense_cf.datasets import formats
from dense_cf.synthetic import generate as synthetic
from dense_cf.synthetic import vocab, world
from dense_cf.text.answers import find_answer_spans, has_answer, question_type
from dense_cf.text.sentences import split_sentences

N = 300


def _cli(argv: list[str]) -> None:
    """Runs ``python -m dense_cf.cli.synthetic ARGV`` in-process."""
    synthetic_cli.run_cli(argv)


def _files_bytes(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth0")
    res = synthetic.generate(out, N, seed=0, workers=1)
    corpus = list(formats.read_corpus_tsv(out / synthetic.FILES["corpus"], skip_bad=False))
    train = list(formats.iter_biencoder(out / synthetic.FILES["train"], skip_bad=False))
    dev = list(formats.iter_biencoder(out / synthetic.FILES["dev"], skip_bad=False))
    test_qa = list(formats.read_qa_csv(out / synthetic.FILES["test_qa"], skip_bad=False))
    gold = {s: list(formats.read_gold_info(out / synthetic.FILES[f"{s}_gold"], skip_bad=False))
            for s in synthetic.SPLITS}
    meta = json.loads((out / synthetic.FILES["meta"]).read_text())
    return {"dir": out, "res": res, "corpus": corpus, "train": train, "dev": dev,
            "test_qa": test_qa, "gold": gold, "meta": meta}


def _answer_sentences(text: str, answers: list[str]) -> set[int]:
    sents = split_sentences(text)
    hit = set()
    for s, e in find_answer_spans(text, answers):
        inside = [k for k, (a, b) in enumerate(sents) if a <= s and e <= b]
        assert len(inside) == 1, (text, answers)  # no span crosses a sentence boundary
        hit.add(inside[0])
    return hit


def test_files_exist_and_parse(gen):
    d = gen["dir"]
    for name in synthetic.FILES.values():
        assert (d / name).is_file(), name
    header = (d / synthetic.FILES["corpus"]).read_text(encoding="utf-8").split("\n", 1)[0]
    assert header == "id\ttext\ttitle"
    assert [pid for pid, _, _ in gen["corpus"]] == [str(i) for i in range(1, N + 1)]
    assert all(text and title for _, text, title in gen["corpus"])
    ex = gen["train"][0]
    pos = ex.positive_ctxs[0]
    assert pos.passage_id is not None and pos.title and pos.text
    assert len(gen["train"]) > 0 and len(gen["dev"]) > 0 and len(gen["test_qa"]) > 0
    rec = gen["gold"]["test"][0]
    assert set(rec) == {"question", "question_tokens", "title", "context", "example_id"}
    assert rec["question_tokens"] == rec["question_tokens"].lower()


def test_meta_counts_match_files(gen):
    m = gen["meta"]
    c = m["counts"]
    assert m["seed"] == 0 and m["version"] == synthetic.GENERATOR_VERSION
    assert c["passages"] == len(gen["corpus"]) == N
    sizes = {"train": len(gen["train"]), "dev": len(gen["dev"]), "test": len(gen["test_qa"])}
    assert c["questions"] == sizes
    assert {s: len(g) for s, g in gen["gold"].items()} == c["questions"]
    # Default sizes: one train question per two passages, dev and test 10% of train each.
    assert c["questions"] == {"train": N // 2, "dev": N // 20, "test": N // 20}
    assert sum(c["entity_types"].values()) == c["entities"] == len({t for _, _, t in gen["corpus"]})
    assert c["dropped_total"] == sum(c["dropped"].values())
    assert c["candidates_validated"] == c["dropped_total"] + sum(c["questions"].values())
    n_hard = sum(len(e.hard_negative_ctxs) for e in gen["train"] + gen["dev"])
    assert c["hard_negatives"] == n_hard
    assert c["mined_questions"] == len(gen["train"]) + len(gen["dev"])
    for s, rows in (("train", gen["train"]), ("dev", gen["dev"])):
        types = Counter(question_type(e.question) for e in rows)
        assert c["question_types"][s] == dict(sorted(types.items()))
    assert gen["res"]["counts"] == c


def test_deterministic_same_seed_and_different_seed(gen, tmp_path):
    again = tmp_path / "again"
    synthetic.generate(again, N, seed=0, workers=1)
    assert _files_bytes(again) == _files_bytes(gen["dir"])
    other = tmp_path / "other"
    _cli(["--out", str(other), "--num_passages", str(N), "--seed", "1", "--workers", "1"])
    b0, b1 = _files_bytes(gen["dir"]), _files_bytes(other)
    assert b0.keys() == b1.keys()
    for name in b0:
        assert b0[name] != b1[name], name


def test_output_independent_of_worker_count(tmp_path, monkeypatch):
    # Small chunks so that 300 passages make several chunks and two spawned workers share them.
    monkeypatch.setattr(synthetic, "CHUNK_ENTITIES", 20)
    kw = dict(seed=3, num_hard_negatives=1, max_mined=10)
    res = synthetic.generate(tmp_path / "w1", N, workers=1, **kw)
    synthetic.generate(tmp_path / "w2", N, workers=2, **kw)
    assert _files_bytes(tmp_path / "w1") == _files_bytes(tmp_path / "w2")
    # max_mined: only the first 10 questions of each split get BM25 hard negatives.
    train = list(formats.iter_biencoder(tmp_path / "w1" / synthetic.FILES["train"]))
    assert [len(e.hard_negative_ctxs) for e in train[:10]] == [1] * 10
    assert all(not e.hard_negative_ctxs for e in train[10:])
    assert res["counts"]["mined_questions"] == 20 and res["counts"]["hard_negatives"] == 20


def test_positive_has_answer_in_exactly_one_sentence(gen):
    rows = [(e.question, e.answers, e.positive_ctxs[0].text) for e in gen["train"] + gen["dev"]]
    rows += [(r["question"], a, r["context"])
             for r, (_, a) in zip(gen["gold"]["test"], gen["test_qa"])]
    for q, answers, text in rows:
        assert has_answer(answers, text), q
        assert len(_answer_sentences(text, answers)) == 1, q
        assert q not in text  # questions paraphrase, they are not copied from the passage


def test_question_shares_words_with_answer_sentence(gen):
    stop = {"the", "a", "an", "of", "in", "on", "to", "for", "by", "at", "did", "was", "is", "and"}
    for e in gen["train"][:100]:
        text = e.positive_ctxs[0].text
        (k,) = _answer_sentences(text, e.answers)
        a, b = split_sentences(text)[k]
        sent = set(re.findall(r"\w+", text[a:b].lower())) - stop
        answer = set(re.findall(r"\w+", e.answers[0].lower()))
        q = set(re.findall(r"\w+", e.question.lower())) - stop - answer
        assert sent & q, (e.question, text[a:b])


def test_hard_and_random_negatives_lack_answer(gen):
    n_with_hard = 0
    for e in gen["train"] + gen["dev"]:
        pid = e.positive_ctxs[0].passage_id
        scores = [h.score for h in e.hard_negative_ctxs]
        assert scores == sorted(scores, reverse=True)
        n_with_hard += bool(e.hard_negative_ctxs)
        for ctx in e.hard_negative_ctxs + e.negative_ctxs:
            assert ctx.passage_id != pid
            assert not has_answer(e.answers, ctx.text), (e.question, ctx.text)
        assert len(e.negative_ctxs) == 2
    assert n_with_hard == len(gen["train"]) + len(gen["dev"])


def test_sibling_passages_exist_and_lack_answer(gen):
    by_title = defaultdict(list)
    for pid, text, title in gen["corpus"]:
        by_title[title].append((pid, text))
    assert min(len(v) for v in by_title.values()) >= 3  # every entity has several passages
    hard_sibling = 0
    for e in gen["train"] + gen["dev"]:
        pos = e.positive_ctxs[0]
        sibs = [t for pid, t in by_title[pos.title] if pid != pos.passage_id]
        assert len(sibs) >= 2
        assert not any(has_answer(e.answers, t) for t in sibs), e.question
        hard_sibling += any(h.title == pos.title for h in e.hard_negative_ctxs)
    # BM25 finds the distractor siblings (same entity, no evidence) for most questions.
    assert hard_sibling > 0.8 * (len(gen["train"]) + len(gen["dev"]))


def test_all_question_types_roughly_balanced(gen):
    types = Counter(question_type(e.question) for e in gen["train"])
    assert set(types) == set(synthetic.QTYPES)
    assert min(types.values()) >= 0.1 * len(gen["train"])
    every = [e.question for e in gen["train"] + gen["dev"]] + [q for q, _ in gen["test_qa"]]
    assert "other" not in {question_type(q) for q in every}


def test_splits_disjoint_and_test_gold_in_corpus(gen):
    tr = {e.question for e in gen["train"]}
    dv = {e.question for e in gen["dev"]}
    te = {q for q, _ in gen["test_qa"]}
    assert (len(tr), len(dv), len(te)) == (len(gen["train"]), len(gen["dev"]), len(gen["test_qa"]))
    assert not (tr & dv) and not (tr & te) and not (dv & te)
    corpus = {(title, text) for _, text, title in gen["corpus"]}
    for r in gen["gold"]["test"]:
        assert (r["title"], r["context"]) in corpus
    assert [r["question"] for r in gen["gold"]["test"]] == [q for q, _ in gen["test_qa"]]
    by_id = {pid: (title, text) for pid, text, title in gen["corpus"]}
    for e in gen["train"][:50]:
        p = e.positive_ctxs[0]
        assert by_id[p.passage_id] == (p.title, p.text)


def test_names_places_and_years_shared_across_entities(gen):
    ents_with = defaultdict(set)
    for _, text, title in gen["corpus"]:
        for w in set(re.findall(r"\w+", text)):
            ents_with[w].add(title)
    n_last = len(vocab.LAST_ROOTS) * len(vocab.LAST_SUFFIXES)
    n_place = len(vocab.PLACE_ROOTS) * len(vocab.PLACE_SUFFIXES)
    last_names = {world._last_name(i) for i in range(n_last)}
    places = {world._place_name(i) for i in range(n_place)}

    def shared(words):
        return sum(len(ents_with[w]) >= 2 for w in words)

    assert shared(vocab.FIRST_NAMES) >= 10
    assert shared(last_names) >= 5
    assert shared(places) >= 5
    assert shared(str(y) for y in range(1800, 2021)) >= 20
    # Titles are unique, yet entities deliberately share their name with another entity of the
    # same type, told apart only by a disambiguator ("X (chemist)" / "X (painter)", years...).
    titles = {t for _, _, t in gen["corpus"]}
    base = Counter(re.sub(r"^\d{4} | \(.*\)$", "", t) for t in titles)
    assert len(titles) == gen["meta"]["counts"]["entities"]
    assert sum(n >= 2 for n in base.values()) >= 0.15 * len(base)


def test_passage_lengths(gen):
    words = np.array([len(text.split()) for _, text, _ in gen["corpus"]])
    assert 40 <= words.mean() <= 70
    assert words.min() >= 25 and words.max() <= 90


def test_feistel_is_a_bijection_and_plan_is_exact():
    for domain in (1, 7, 64, 1000, 12345):
        perm = world._feistel_permute(np.arange(domain), domain, key=5)
        assert sorted(perm.tolist()) == list(range(domain))
    plan = synthetic._plan(1001, seed=4)
    assert int(plan["counts"].sum()) == 1001 and plan["counts"].min() >= 3
    for t in range(len(synthetic.TYPE_NAMES)):
        keys = plan["keys"][plan["types"] == t]
        assert len(np.unique(keys)) == len(keys)


# ------------------------------------------------------------------ many questions per passage (DCSR)
@pytest.fixture(scope="module")
def gen_multi(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth_qpp")
    res = synthetic.generate(out, N, seed=0, workers=1, questions_per_passage=3,
                             num_hard_negatives=1)
    train = list(formats.iter_biencoder(out / synthetic.FILES["train"], skip_bad=False))
    dev = list(formats.iter_biencoder(out / synthetic.FILES["dev"], skip_bad=False))
    test = list(formats.read_gold_info(out / synthetic.FILES["test_gold"], skip_bad=False))
    meta = json.loads((out / synthetic.FILES["meta"]).read_text())
    return {"dir": out, "res": res, "train": train, "dev": dev, "test": test, "meta": meta}


def test_questions_per_passage_validated_on_different_sentences(gen_multi):
    by_pos = defaultdict(list)
    for e in gen_multi["train"] + gen_multi["dev"]:
        p = e.positive_ctxs[0]
        assert has_answer(e.answers, p.text)
        (k,) = _answer_sentences(p.text, e.answers)  # exactly one sentence holds the answer
        by_pos[p.passage_id].append((k, e.answers[0]))
    assert max(len(v) for v in by_pos.values()) == 3
    for qs in by_pos.values():
        sents = [k for k, _ in qs]
        assert len(set(sents)) == len(sents)  # one question per fact sentence
    # Siblings still lack the answer (the default validation applies to every question).
    corpus = list(formats.read_corpus_tsv(gen_multi["dir"] / synthetic.FILES["corpus"]))
    by_title = defaultdict(list)
    for pid, text, title in corpus:
        by_title[title].append((pid, text))
    for e in gen_multi["train"][:60]:
        pos = e.positive_ctxs[0]
        assert not any(has_answer(e.answers, t) for pid, t in by_title[pos.title]
                       if pid != pos.passage_id)


def test_questions_per_passage_shares_positives_and_keeps_sizes(gen_multi, gen):
    def shared_share(rows):
        c = Counter(e.positive_ctxs[0].passage_id for e in rows)
        return sum(n for n in c.values() if n >= 2) / len(rows)

    m = gen_multi["meta"]
    assert m["params"]["questions_per_passage"] == 3
    assert "questions_per_passage" not in gen["meta"]["params"]  # default meta unchanged
    assert m["counts"]["questions"] == {"train": N // 2, "dev": N // 20, "test": N // 20}
    assert m["counts"]["dropped_total"] + sum(m["counts"]["questions"].values()) == \
        m["counts"]["candidates_validated"]
    qpp = m["counts"]["questions_per_positive"]["train"]
    assert sum(int(k) * v for k, v in qpp.items()) == len(gen_multi["train"])
    assert shared_share(gen_multi["train"]) > 0.8 > shared_share(gen["train"])
    # A passage's questions stay in one split, apart from the groups cut at split boundaries.
    split_of = defaultdict(set)
    for s, rows in (("train", gen_multi["train"]), ("dev", gen_multi["dev"])):
        for e in rows:
            split_of[e.positive_ctxs[0].passage_id].add(s)
    assert sum(len(v) > 1 for v in split_of.values()) <= 2
    types = Counter(question_type(e.question) for e in gen_multi["train"])
    assert set(types) == set(synthetic.QTYPES) and min(types.values()) >= 0.08 * len(gen_multi["train"])


def test_questions_per_passage_deterministic(gen_multi, tmp_path):
    synthetic.generate(tmp_path / "again", N, seed=0, workers=1, questions_per_passage=3,
                       num_hard_negatives=1)
    assert _files_bytes(tmp_path / "again") == _files_bytes(gen_multi["dir"])
    with pytest.raises(ValueError, match="questions_per_passage"):
        synthetic.generate(tmp_path / "bad", N, questions_per_passage=0)


# ------------------------------------------------------------------ domains
def _template_regexes(types):
    out = []
    for t in types:
        for fact in synthetic.FACTS_BY_TYPE[synthetic.TYPE_NAMES.index(t)]:
            for _, tmpl, _ in fact.questions:
                out.append(re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(tmpl))))
    return out


def test_domain_groups_share_no_templates():
    groups = synthetic.template_groups()
    assert sorted(t for g in groups for t in g) == sorted(synthetic.TYPE_NAMES)
    owners = defaultdict(set)
    for gi, g in enumerate(groups):
        for t in g:
            for fact in synthetic.FACTS_BY_TYPE[synthetic.TYPE_NAMES.index(t)]:
                for s in list(fact.statements) + [q[1] for q in fact.questions]:
                    owners[s].add(gi)
    assert all(len(v) == 1 for v in owners.values())
    assert synthetic.domain_types(3) == groups
    two = synthetic.domain_types(2)
    assert len(two) == 2 and sorted(t for g in two for t in g) == sorted(synthetic.TYPE_NAMES)
    assert synthetic.domain_types(1) == [synthetic.TYPE_NAMES]
    with pytest.raises(ValueError, match="num_domains"):
        synthetic.domain_types(len(groups) + 1)
    with pytest.raises(ValueError, match="entity_types"):
        synthetic.generate("/nonexistent-unused", 30, entity_types=("dragons",))


def test_generate_domains_distinct_and_valid(tmp_path, capsys):
    n = 150
    _cli(["--out", str(tmp_path), "--num_passages", str(n), "--domains", "3",
          "--workers", "1", "--num_hard_negatives", "1"])
    printed = json.loads(capsys.readouterr().out)
    groups = synthetic.domain_types(3)
    assert sorted(printed) == sorted(synthetic.domain_name(g) for g in groups)
    titles = {}
    for g in groups:
        d = tmp_path / synthetic.domain_name(g)
        meta = json.loads((d / synthetic.FILES["meta"]).read_text())
        assert meta["params"]["entity_types"] == list(g)
        assert {t for t, c in meta["counts"]["entity_types"].items() if c} == set(g)
        assert meta["counts"]["passages"] == n
        train = list(formats.iter_biencoder(d / synthetic.FILES["train"], skip_bad=False))
        test = list(formats.read_qa_csv(d / synthetic.FILES["test_qa"], skip_bad=False))
        # Every question instantiates one of the domain's own templates (the templates of
        # different domains are disjoint: test_domain_groups_share_no_templates).
        mine = _template_regexes(g)
        for q in [e.question for e in train] + [q for q, _ in test]:
            assert any(r.fullmatch(q) for r in mine), q
        for e in train[:40]:
            pos = e.positive_ctxs[0]
            assert len(_answer_sentences(pos.text, e.answers)) == 1
        titles[g] = {t for _, _, t in formats.read_corpus_tsv(d / synthetic.FILES["corpus"])}
    sets = list(titles.values())
    assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:])
    # One domain alone equals generate(entity_types=...) with the same seed.
    synthetic.generate(tmp_path / "single", n, 0, workers=1, num_hard_negatives=1,
                       entity_types=groups[1])
    assert _files_bytes(tmp_path / "single") == _files_bytes(tmp_path / synthetic.domain_name(groups[1]))
