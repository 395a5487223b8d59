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


# ---------------------------------------------------------------------------------------------
# Issue 50: rule_paraphrase, a held-out kind that is not a template swap (opt-in).
# ---------------------------------------------------------------------------------------------
RULE = "rule_paraphrase"


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """Training positives of three small worlds, each with every answer of the questions that
    share it (the distractor must lack them all), and one of its questions."""
    out = []
    for seed in (2, 3, 4):
        d = tmp_path_factory.mktemp(f"world{seed}")
        synthetic.generate(d, 150, seed=seed, workers=1)
        examples = formats.read_biencoder(d / synthetic.FILES["train"], skip_bad=False)
        shared: dict[tuple[str, str], list[str]] = {}
        for e in examples:
            group = shared.setdefault((e.positive_ctxs[0].title, e.positive_ctxs[0].text), [])
            group.extend(a for a in e.answers if a not in group)
        out += [(e.positive_ctxs[0].title, e.positive_ctxs[0].text,
                 shared[(e.positive_ctxs[0].title, e.positive_ctxs[0].text)], e.question)
                for e in examples]
    return out


def test_rule_paraphrase_never_contains_an_answer_and_is_deterministic(worlds):
    built = skipped = 0
    for i, (title, text, answers, _) in enumerate(worlds):
        stats: dict[str, int] = {}
        v = D.heldout_variants(title, text, answers, 3, seed=i, kinds=(RULE,), stats=stats)
        assert v == D.heldout_variants(title, text, answers, 3, seed=i, kinds=(RULE,))
        assert all(k == RULE and t == title for k, t, _ in v)
        assert not any(has_answer(answers, x) for _, _, x in v)
        assert len({x for _, _, x in v}) == len(v)
        if v:
            built += 1
            # The evidence is kept, its value withheld by a phrase of its type.
            assert any(w.replace(" {unit}", "") in v[0][2].lower() for w in D._WITHHELD.values())
        else:  # a passage it cannot apply to is counted with its reason, never dropped silently
            reason = D.rule_paraphrase_skip(text, answers)
            assert reason is not None and stats == {f"skipped_{RULE}": 1,
                                                    f"skipped_{RULE}_{reason}": 1}
            skipped += 1
    assert built > 0.9 * len(worlds), (built, skipped)


def test_rule_paraphrase_is_unlike_the_other_kinds_and_the_training_pstar(worlds):
    for i, (title, text, answers, _) in enumerate(worlds):
        got = D.rule_paraphrase(text, answers, random.Random(i))
        if got is None:
            continue
        others = {D.value_swap(text, answers, random.Random(i)),
                  D.paraphrase(text, answers, random.Random(i)),
                  *distractor_variants(text, answers, 20, seed=i)}
        assert got not in others and got != text
        # No sentence is a world template's rewording of a gold sentence (not a template swap).
        gold = _sentences(text)
        swaps = {p for s in gold for p in D.paraphrase_sentence(s)}
        assert not swaps & set(_sentences(got))


def test_rule_paraphrase_keeps_the_surface_the_question_sees(worlds):
    """The evidence wording stays: the question's tokens are found in it about as often as in
    the gold passage, and more often than in the template paraphrase or the training p*
    (both drop the answer sentence). Peers measured here, on the same passages."""
    from dense_cf.text.counterfactuals import counterfactual_text
    rows = []
    for i, (title, text, answers, question) in enumerate(worlds):
        rule = D.rule_paraphrase(text, answers, random.Random(i))
        para = D.paraphrase(text, answers, random.Random(i))
        pstar = counterfactual_text(text, answers)
        if rule and para and pstar:
            rows.append([D.token_recall(question, x) for x in (text, rule, para, pstar)]
                        + [D.token_recall(text, x) for x in (rule, para)])
    assert len(rows) > 0.9 * len(worlds)
    gold_q, rule_q, para_q, pstar_q, rule_g, para_g = (sum(c) / len(rows) for c in zip(*rows))
    assert rule_q > para_q and rule_q > pstar_q and rule_q >= 0.95 * gold_q
    assert rule_g > para_g


def test_rule_paraphrase_rules_on_one_passage():
    text = ("In 1923, the society moved its headquarters to Quenton. The society faced several "
            "difficult years. Former staff often spoke warmly of the society.")
    out = D.rule_paraphrase(text, ["1923"], random.Random(0))
    sents = _sentences(out)
    # The evidence sentence: its adverbial moved to the end, the year withheld; then moved.
    assert "The society relocated its headquarters to Quenton in an unrecorded year." in sents
    assert sents[0] != "The society relocated its headquarters to Quenton in an unrecorded year."
    assert "The society faced various hard years." in sents or \
        "The society faced a number of hard years." in sents
    assert "Former staff frequently spoke fondly of the society." in sents
    # "the" before a withheld name goes, and the unit of an amount stays.
    assert D.rule_paraphrase("Alpha joined the Kaldera Railway Company in 1901. Alpha died.",
                             ["Kaldera Railway Company"], random.Random(0)) in (
        "Alpha passed away. Alpha joined an unnamed organisation in 1901.",)
    assert D.rule_paraphrase("Alpha was born in the town of Ashport. Alpha died.", ["Ashport"],
                             random.Random(0)) == "Alpha passed away. Alpha was born in an unnamed town."
    assert D.rule_paraphrase("Alpha spent 12 years at the Mint. Alpha died.", ["12 years"],
                             random.Random(0)) == ("Alpha passed away. Alpha spent an unrecorded "
                                                   "number of years at the Mint.")


def test_rule_paraphrase_skips_are_counted_with_their_reason():
    cases = {"no_answer_match": ("Alpha died in 1901. Alpha wrote many works.", ["1850"]),
             "unknown_value_type": ("Alpha was born in Kaldera. Alpha wrote many works.",
                                    ["Kaldera"]),
             "no_rule": ("Alpha was born in 1901. Alpha wrote works.", ["1901"])}
    for reason, (text, answers) in cases.items():
        assert D.rule_paraphrase_skip(text, answers) == reason
        assert D.rule_paraphrase(text, answers, random.Random(0)) is None
        stats: dict[str, int] = {}
        got = D.heldout_variants("Alpha", text, answers, 2, seed=0, stats=stats,
                                 kinds=("value_swap", RULE))
        assert stats[f"skipped_{RULE}"] == 1 and stats[f"skipped_{RULE}_{reason}"] == 1
        assert all(k == "value_swap" for k, _, _ in got)  # the other kind goes on
    with pytest.raises(ValueError, match="unknown: \\['nope'\\]"):
        D.heldout_variants("Alpha", "x", ["a"], 1, seed=0, kinds=("value_swap", "nope"))
    with pytest.raises(ValueError, match="distinct"):
        D.check_kinds(("namesake", "namesake"))


def test_default_heldout_output_is_byte_identical_to_before_issue_50(bench, tmp_path):
    """The default kinds (HELDOUT_KINDS, the stored results' mix) give exactly what they gave
    at 37b808c, before rule_paraphrase was registered: sha256 of the held-out distractors and
    stats of this world (synthetic.generate(300, seed=1)). A deliberate change of the world's
    generator changes these digests too; recompute them then at the old commit."""
    import hashlib
    import json

    from dense_cf.eval.aar import load_triplets
    from dense_cf.eval.robustness import build_distractors
    assert D.HELDOUT_KINDS == ("value_swap", "paraphrase", "namesake")
    out = tmp_path / "synth"
    synthetic.generate(out, 300, seed=1, workers=1)
    trip = load_triplets(str(out / synthetic.FILES["test_gold"]),
                         str(out / synthetic.FILES["test_qa"]))
    want = {1: "c63a2524c5f58a5f71e760b13627939009aefadf949bd224b11e6b748711dae0",
            5: "c27fc46af0430c56fefe3b43b4f3fb5beba3ed80f287affcf5556efde653ae3d"}
    for k, digest in want.items():
        for kinds in ({}, {"kinds": D.HELDOUT_KINDS}):
            d = build_distractors(trip, k, seed=0, family="heldout", namesakes=bench["index"],
                                  **kinds)
            blob = json.dumps([d.index, d.variants, d.variant_titles, d.kinds, d.stats],
                              sort_keys=True)
            assert hashlib.sha256(blob.encode()).hexdigest() == digest, (k, kinds)
    examples = formats.read_biencoder(out / synthetic.FILES["train"], skip_bad=False)
    stats: dict[str, int] = {}
    rows = [D.heldout_variants(e.positive_ctxs[0].title, e.positive_ctxs[0].text,
                               list(e.answers), 5, seed=i, namesakes=bench["index"], stats=stats)
            for i, e in enumerate(examples[:200])]
    assert hashlib.sha256(json.dumps([rows, stats], sort_keys=True).encode()).hexdigest() == (
        "a9a9e8ab094ef67a528fd759eff0e88cd55e240602ddf037d31417cecbe441b8")


def test_rule_paraphrase_through_build_distractors(bench):
    """Per-kind stats of an opt-in selection: built, failed draws, skipped, questions without."""
    from dense_cf.eval.aar import Triplets
    from dense_cf.eval.robustness import build_distractors
    items = bench["items"]
    trip = Triplets(questions=[f"q{i}" for i in range(len(items))],
                    answers=[a for _, _, a in items], titles=[t for t, _, _ in items],
                    contexts=[c for _, c, _ in items], stats={})
    kinds = (*D.HELDOUT_KINDS, RULE)
    d = build_distractors(trip, 4, seed=0, family="heldout", namesakes=bench["index"],
                          kinds=kinds)
    s = d.stats
    assert s[f"built_{RULE}"] > 0 and f"skipped_{RULE}" in s and f"questions_without_{RULE}" in s
    assert s[f"built_{RULE}"] + s[f"questions_without_{RULE}"] == s["questions_evaluated"]
    for ks, vs in zip(d.kinds, d.variants):
        for k, v in zip(ks, vs):
            assert k in kinds
    assert "skipped_value_swap" not in s  # kinds without a skip rule keep their stats
