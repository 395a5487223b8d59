"""Held-out distractors (dense_cf/synthetic/distractors.py; issue 32 item 4): value swaps,
paraphrases and namesakes of the synthetic benchmark's gold passages, unlike the training p*."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from dense_cf.datasets import formats
from dense_cf.synthetic import distractors as D
from dense_cf.synthetic import generate as synthetic
from dense_cf.text.answers import find_answer_spans, has_answer
from dense_cf.text.counterfactuals import distractor_variants
from dense_cf.text.sentences import split_sentences


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    synthetic.generate(out, 300, seed=1, workers=1)
    gold = list(formats.read_gold_info(out / synthetic.FILES["test_gold"], skip_bad=False))
    qa = dict(formats.read_qa_csv(out / synthetic.FILES["test_qa"], skip_bad=False))
    titles = [t for _, _, t in formats.read_corpus_tsv(out / synthetic.FILES["corpus"],
                                                       skip_bad=False)]
    items = [(g["title"], g["context"], list(qa[g["question"]])) for g in gold]
    return {"items": items, "titles": titles, "index": D.namesake_index(titles)}


def _sentences(text: str) -> list[str]:
    return [text[s:e].strip() for s, e in split_sentences(text)]


def test_every_synthetic_answer_has_a_known_type(bench):
    kinds = Counter(D.value_kind(a[0]) for _, _, a in bench["items"])
    assert None not in kinds and len(kinds) >= 8, kinds


def test_value_swap_differs_only_in_the_value(bench):
    for i, (_, text, answers) in enumerate(bench["items"]):
        out = D.value_swap(text, answers, random.Random(i))
        assert out is not None and not has_answer(answers, out)
        (s, e), = find_answer_spans(text, answers)  # one match per synthetic positive
        tail = len(text) - e
        new = out[s:len(out) - tail]
        assert out[:s] == text[:s] and out[len(out) - tail:] == text[e:]
        assert new != text[s:e] and D.value_kind(new) == D.value_kind(text[s:e])


def test_paraphrase_drops_the_answer_and_keeps_the_other_sentences(bench):
    rewritten = 0
    for i, (_, text, answers) in enumerate(bench["items"]):
        out = D.paraphrase(text, answers, random.Random(i))
        assert out is not None and not has_answer(answers, out)
        spans = find_answer_spans(text, answers)
        kept = [text[s:e] for s, e in split_sentences(text)
                if not any(s < b and a < e for a, b in spans)]
        got = _sentences(out)
        assert len(got) == len(kept)
        # Every kept sentence appears once, verbatim or as one of its template paraphrases.
        left = list(got)
        for k in kept:
            match = next(g for g in left if g == k or g in D.paraphrase_sentence(k))
            rewritten += match != k
            left.remove(match)
        assert got != kept  # reordered or reworded: never the p* sentence order and wording
    assert rewritten >= len(bench["items"])  # at least one rewording per passage


def test_paraphrase_sentence_uses_the_alternative_statement():
    s = "In 1848, Ambmann married Orla Finkton, a teacher met during a summer school."
    assert D.paraphrase_sentence(s) == ["Ambmann and Orla Finkton were married in 1848 in a "
                                        "small chapel."]
    assert D.paraphrase_sentence("Few photographs of Ambmann have survived.") == []  # filler


def test_namesake_shares_the_name_but_is_another_entity(bench):
    sources = Counter()
    for i, (title, text, answers) in enumerate(bench["items"]):
        got = D.namesake(title, text, answers, random.Random(i), bench["index"])
        assert got is not None
        n_title, n_text, source = got
        sources[source] += 1
        key, dis, _ = D._parse_title(title)
        n_key, n_dis, _ = D._parse_title(n_title)
        assert n_key == key and n_dis != dis and n_title != title
        assert not has_answer(answers, n_text)
        if source == "world":  # a real namesake of the corpus
            assert n_title in bench["titles"]
    assert sources["world"] > 0 and sources["built"] > 0, sources


def test_heldout_variants_kinds_order_determinism_and_no_overlap_with_pstar(bench):
    stats: dict[str, int] = {}
    for i, (title, text, answers) in enumerate(bench["items"]):
        v = D.heldout_variants(title, text, answers, 5, seed=i, namesakes=bench["index"],
                               stats=stats)
        assert [k for k, _, _ in v[:3]] == list(D.HELDOUT_KINDS)
        assert len({(t, x) for _, t, x in v}) == len(v) == 5
        assert not any(has_answer(answers, x) for _, _, x in v)
        assert v == D.heldout_variants(title, text, answers, 5, seed=i, namesakes=bench["index"])
        pstar = set(distractor_variants(text, answers, 20, seed=i))
        assert not pstar & {x for _, _, x in v}  # a different family of texts
    assert stats["built_value_swap"] and stats["built_paraphrase"] and stats["built_namesake"]
    with pytest.raises(ValueError, match="k must be"):
        D.heldout_variants("t", "x", ["a"], -1, seed=0)


def test_kinds_that_cannot_be_built_are_skipped():
    # An answer of no known type and a title without a disambiguator: only the paraphrase
    # kind needs neither, and these sentences match no template, so nothing is built.
    text = "Alpha was born in Kaldera. Alpha wrote many works."
    stats: dict[str, int] = {}
    assert D.heldout_variants("Alpha", text, ["Kaldera"], 3, seed=0, stats=stats) == []
    assert stats["failed_draws_value_swap"] > 0 and "built_namesake" not in stats
