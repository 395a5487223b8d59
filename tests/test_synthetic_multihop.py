"""The synthetic two-hop world (dense_cf/synthetic/multihop.py): format, guarantees, determinism.

The guarantees are checked on the written files (HotpotQA JSON and the corpus TSV) with the
project's readers and DPR matching, not with the generator's own bookkeeping.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

from dense_cf.cli import synthetic_multihop as cli
from dense_cf.datasets import hotpotqa
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.synthetic import multihop
from dense_cf.text.answers import has_answer
from dense_cf.text.sentences import split_sentences

N = 240
_PAREN = re.compile(r"^(.*) \(([^()]*)\)$")
_DATE = re.compile(r"\d{1,2} [A-Z][a-z]+ \d{4}")
_YEAR = re.compile(r"\b(1\d{3}|20[0-2]\d)\b")
_TOWN = re.compile(r"(?:the town of|lived in) ([^ ,]+)")


def _name(title: str) -> str:
    return _PAREN.match(title).group(1)


def _disambiguator(title: str) -> str:
    return _PAREN.match(title).group(2)


def _digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.iterdir()):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    out = tmp_path_factory.mktemp("mh")
    res = multihop.generate_multihop(out, N, seed=0)
    splits = {}
    for s in multihop.SPLITS:
        examples, skipped = hotpotqa.read_hotpot(out / multihop.FILES[s], strict=True)
        assert skipped == {}
        splits[s] = examples
    corpus = load_corpus(str(out / multihop.FILES["corpus"]))
    texts = dict(zip(corpus.titles, corpus.texts))
    by_name = defaultdict(list)
    for t in corpus.titles:
        by_name[_name(t)].append(t)
    meta = json.loads((out / multihop.FILES["meta"]).read_text())
    return {"dir": out, "res": res, "splits": splits, "corpus": corpus, "texts": texts,
            "by_name": by_name, "meta": meta,
            "all": [ex for s in multihop.SPLITS for ex in splits[s]]}


def test_files_read_with_zero_skips_and_match_the_corpus(gen):
    assert sorted(os.listdir(gen["dir"])) == sorted(multihop.FILES.values())
    corpus, texts = gen["corpus"], gen["texts"]
    assert corpus.skipped == {} and corpus.ids == [str(i) for i in range(1, len(corpus) + 1)]
    assert len(texts) == len(corpus)                      # titles are unique
    assert hotpotqa.corpus_titles(gen["dir"] / multihop.FILES["corpus"]) == dict(
        zip(corpus.titles, corpus.ids))
    for ex in gen["all"]:
        assert len(ex.context) == 10                      # 2 gold + 8 distractors
        for title, sents in ex.context:
            assert "".join(sents) == texts[title]         # context = corpus passages
            assert len(sents) >= 4
            assert sents[0][0] != " " and all(s.startswith(" ") for s in sents[1:])
        assert len(ex.id) == 24 and ex.level in ("hard", "medium")
    assert len({ex.id for ex in gen["all"]}) == len({ex.question for ex in gen["all"]}) == N


def test_sizes_and_type_split(gen, tmp_path):
    m, counts = gen["meta"], gen["meta"]["counts"]
    sizes = {s: len(gen["splits"][s]) for s in multihop.SPLITS}
    assert sizes == {"train": N - 48, "dev": 24, "test": 24} == counts["questions"]
    assert counts["passages"] == len(gen["corpus"]) == 2 * N
    assert sum(ex.type == "bridge" for ex in gen["all"]) == N // 2
    assert counts["shortfall"] == 0 and counts["min_passage_sentences"] >= 4
    assert counts["candidates_validated"] == counts["dropped_total"] + N
    assert m["seed"] == 0 and m["version"] == multihop.GENERATOR_VERSION
    assert counts["bridge_order_rules"] == {"answer_and_mention": N // 2}
    yes_no = counts["same_birthplace_answers"]
    assert abs(yes_no["yes"] - yes_no["no"]) <= 1 and yes_no["yes"] > 0
    res = multihop.generate_multihop(tmp_path, 40, seed=1, bridge_frac=0.25, dev_frac=0.0,
                                     test_frac=0.2, num_distractors=3)
    assert res["counts"]["types"]["train"]["bridge"] + res["counts"]["types"]["test"][
        "bridge"] == 10
    assert res["counts"]["questions"] == {"train": 32, "dev": 0, "test": 8}
    (ex, *_), _ = hotpotqa.read_hotpot(tmp_path / multihop.FILES["test"])
    assert len(ex.context) == 5


def _bridge_parts(ex):
    (first, s1), (second, s2) = ex.supporting_facts
    return first, s1, second, s2


def test_supporting_facts_hold_the_bridge_and_the_answer(gen):
    for ex in gen["all"]:
        if ex.type != "bridge":
            continue
        first, s1, second, s2 = _bridge_parts(ex)
        bridge = _name(second)
        assert has_answer([bridge], ex.sentences(first)[s1])
        assert [k for k, s in enumerate(ex.sentences(first)) if has_answer([bridge], s)] == [s1]
        assert [k for k, s in enumerate(ex.sentences(second)) if has_answer([ex.answer], s)] == [s2]
        assert not has_answer([ex.answer], ex.passage(first))   # the second hop is needed
        assert hotpotqa.bridge_order(ex) == (first, second)
        # the hop-order heuristic finds it without the dataset order
        swapped = ex.__class__(**{**ex.__dict__, "supporting_facts": ex.supporting_facts[::-1]})
        assert hotpotqa.bridge_order(swapped) == (first, second)
        assert hotpotqa.bridge_order_rule(swapped) == "answer_and_mention"


def test_comparison_answers_follow_the_supporting_sentences(gen):
    kinds = set()
    for ex in gen["all"]:
        if ex.type != "comparison":
            continue
        (a, sa), (b, sb) = ex.supporting_facts
        sent_a, sent_b = ex.sentences(a)[sa], ex.sentences(b)[sb]
        if ex.answer in ("yes", "no"):
            kinds.add("same_birthplace")
            town_a, town_b = _TOWN.search(sent_a).group(1), _TOWN.search(sent_b).group(1)
            assert ex.answer == ("yes" if town_a == town_b else "no")
        else:
            kinds.add("earlier")
            ya, yb = int(_YEAR.findall(sent_a)[-1]), int(_YEAR.findall(sent_b)[-1])
            assert ya != yb
            assert ex.answer == _name(a if ya < yb else b)
        assert _name(a) != _name(b)
        # the question names both, disambiguated, in supporting-fact order
        qa, qb = ex.question.find(_name(a)), ex.question.find(_name(b))
        assert 0 <= qa < qb
    assert kinds == {"same_birthplace", "earlier"}


def _value(ex, title: str, k: int) -> str:
    sent = ex.sentences(title)[k]
    for pattern in (_DATE, _TOWN, _YEAR):
        m = pattern.search(sent)
        if m:
            return m.group(1) if pattern is _TOWN else m.group(0)
    raise AssertionError(sent)


def test_only_the_supporting_passages_answer(gen):
    """Names collide, but each question's references are unambiguous and no namesake of a
    supporting entity holds the same fact."""
    by_name, texts = gen["by_name"], gen["texts"]
    shared = 0
    for ex in gen["all"]:
        named = [ex.supporting_titles[0]] if ex.type == "bridge" else list(ex.supporting_titles)
        for title in named:   # what the question names carries the title's disambiguator
            assert _disambiguator(title) in ex.question, (title, ex.question)
            shared += len(by_name[_name(title)]) > 1
        if ex.type == "bridge":
            first, _, second, _ = _bridge_parts(ex)
            namesakes = [t for t in by_name[_name(first)] if t != first]
            assert not any(has_answer([_name(second)], texts[t]) for t in namesakes)
            namesakes = [t for t in by_name[_name(second)] if t != second]
            assert not any(has_answer([ex.answer], texts[t]) for t in namesakes)
        else:
            for title, k in ex.supporting_facts:
                value = _value(ex, title, k)
                namesakes = [t for t in by_name[_name(title)] if t != title]
                assert not any(has_answer([value], texts[t]) for t in namesakes), (title, value)
    assert shared > N // 2  # the collisions are really there


def test_no_empty_counterfactual(gen):
    for ex in gen["all"]:
        for title, k in ex.supporting_facts:
            cf = ex.counterfactual(title)
            assert cf and len(cf.split(". ")) >= 3
            removed = ex.sentences(title)[k]
            assert removed.strip() not in cf
        if ex.type == "bridge":
            first, _, second, _ = _bridge_parts(ex)
            assert not has_answer([ex.answer], ex.counterfactual(second))
            assert not has_answer([_name(second)], ex.counterfactual(first))


def test_sentences_agree_with_the_sentence_splitter(gen):
    # EADPR's counterfactuals on the corpus TSV split passages with dense_cf.text.sentences
    for ex in gen["all"][:8]:
        for title, sents in ex.context[:4]:
            spans = split_sentences("".join(sents))
            assert len(spans) == len(sents), title


def test_deterministic_and_seeded(gen, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    multihop.generate_multihop(a, 60, seed=5)
    multihop.generate_multihop(b, 60, seed=5)
    multihop.generate_multihop(c, 60, seed=6)
    assert _digest(a) == _digest(b) != _digest(c)
    # golden: a change to the world (templates, vocab, draws) must bump GENERATOR_VERSION
    assert hashlib.sha256((a / multihop.FILES["corpus"]).read_bytes()).hexdigest() == GOLDEN_CORPUS
    assert hashlib.sha256((a / multihop.FILES["train"]).read_bytes()).hexdigest() == GOLDEN_TRAIN


GOLDEN_CORPUS = "deba91114f8f539ecaaedc0f8c328c2db72671daf67ed2a30dd5981ab5bd9600"
GOLDEN_TRAIN = "cc8f41954068b8a533de3ce0959c0c274b876223d551bc911a069a3232607be6"


def test_generate_or_check_and_cli(tmp_path):
    out = tmp_path / "d"
    counts = cli.run_cli([f"--out={out}", "--num_questions=30", "--seed=3",
                          "--num_distractors=4"])
    assert counts == json.loads((out / multihop.FILES["meta"]).read_text())["counts"]
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    multihop.generate_or_check(out, 30, 3, num_distractors=4)        # reused, not rewritten
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    with pytest.raises(ValueError, match=r"other settings .*'num_questions': \(30, 31\)"):
        multihop.generate_or_check(out, 31, 3, num_distractors=4)
    with pytest.raises(ValueError, match=r"'num_distractors': \(4, 8\)"):
        multihop.check_params(out, num_questions=30, seed=3)
    with pytest.raises(TypeError, match="unknown generate_multihop settings"):
        multihop.check_params(out, num_questions=30, seed=3, num_distractor=4)
    fresh = tmp_path / "fresh"
    multihop.generate_or_check(fresh, 30, 3)
    assert (fresh / multihop.FILES["meta"]).exists()
    with pytest.raises(ValueError, match="num_questions must be at least 3"):
        multihop.build_world(2)
