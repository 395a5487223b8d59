"""Training-data statistics (dense_cf/mining/stats.py, docs/method.md §7) and data.train_fraction subsets."""

import json

import numpy as np
import pytest

from dense_cf.cli import stats as stats_cli
from dense_cf.datasets import formats, subsets
from dense_cf.mining import stats


def _ctx(title, text, pid=None):
    d = {"title": title, "text": text}
    if pid is not None:
        d["passage_id"] = pid
    return d


def _ex(q, pos, extra_pos=()):
    return {"question": q, "answers": ["x"], "positive_ctxs": [pos, *extra_pos],
            "negative_ctxs": [], "hard_negative_ctxs": []}


A = _ctx("A", "alpha text")
B = _ctx("B", "beta text")
C = _ctx("C", "gamma text", pid="7")
# Passage B has 3 questions, A has 2, C has 1 (C once with a different text but the same id).
EXAMPLES = [
    _ex("q1", A), _ex("q2", B), _ex("q3", B), _ex("q4", A), _ex("q5", B),
    _ex("q6", _ctx("C", "gamma text, edited copy", pid="7")),
]


def _examples(rows):
    return [formats.BiencoderExample(r["question"], r["answers"],
                                     [formats.Passage(c["title"], c["text"], c.get("passage_id"))
                                      for c in r["positive_ctxs"]]) for r in rows]


def test_passage_identity_id_else_title_and_text():
    assert stats.passage_key(formats.Passage("t", "x", "7")) == stats.passage_key(
        formats.Passage("other", "y", "7"))
    assert stats.passage_key(formats.Passage("t", "x")) == stats.passage_key(formats.Passage("t", "x"))
    assert stats.passage_key(formats.Passage("t", "x")) != stats.passage_key(formats.Passage("u", "x"))
    # No ambiguity from concatenation: ("ab", "c") is not ("a", "bc").
    assert stats.passage_key(formats.Passage("ab", "c")) != stats.passage_key(formats.Passage("a", "bc"))


@pytest.mark.parametrize("threshold,overlapping", [(1, 3), (2, 2), (3, 1), (4, 0)])
def test_coverage_overlap_threshold_and_unique(threshold, overlapping):
    pos, n, _ = stats.collect(_examples(EXAMPLES))
    assert n == 3
    st = stats.coverage_stats(pos, n, threshold=threshold, alpha=1.3)
    assert st["questions"] == 6 and st["coverage"] == 3
    assert st["overlapping_passages"] == overlapping
    assert st["overlap"] == pytest.approx(overlapping / 3)
    assert st["unique_coverage"] == pytest.approx(3 * (1 - overlapping / 3) ** 1.3)
    assert st["questions_per_positive"] == {1: 1, 2: 1, 3: 1}


def test_unique_coverage_hand_computed():
    assert stats.unique_coverage(10, 0.5, alpha=1.0) == pytest.approx(5.0)
    assert stats.unique_coverage(10, 0.5) == pytest.approx(10 * 0.5 ** 1.3)  # 4.061
    # The paper's Table 3: NQ 30,466 × 0.79^1.3 = 22,424; SQuAD 3,247 × 0.32^1.3 = 738.
    assert stats.unique_coverage(30466, 0.21) == pytest.approx(22424, abs=1)
    assert stats.unique_coverage(3247, 0.68) == pytest.approx(738, abs=1)
    assert stats.unique_coverage(7, 1.0) == 0.0
    with pytest.raises(ValueError, match="overlap"):
        stats.unique_coverage(7, 1.5)


def test_first_vs_all_positives():
    rows = [_ex("q1", A, extra_pos=[B]), _ex("q2", C, extra_pos=[B])]
    pos_first, n_first, _ = stats.collect(_examples(rows), "first")
    first = stats.coverage_stats(pos_first, n_first)
    assert (first["coverage"], first["overlapping_passages"]) == (2, 0)
    pos_all, n_all, _ = stats.collect(_examples(rows), "all")
    allp = stats.coverage_stats(pos_all, n_all)
    assert (allp["coverage"], allp["overlapping_passages"]) == (3, 1)  # B answers both questions
    # A passage listed twice for one question counts once.
    assert stats.coverage_stats([[0, 0]], 1)["overlapping_passages"] == 0


def test_subsets_are_nested_sized_and_seeded():
    n = 101
    masks = [stats.subset_mask(n, f, seed=3) for f in stats.DEFAULT_FRACTIONS]
    for f, m in zip(stats.DEFAULT_FRACTIONS, masks):
        assert m.sum() == subsets.subset_count(n, f) == max(1, int(np.floor(f * n + 0.5)))
    for small, big in zip(masks, masks[1:]):
        assert not (small & ~big).any()  # 10% ⊂ 25% ⊂ ...
    assert masks[-1].all()
    assert (stats.subset_mask(n, 0.4, seed=3) == masks[2]).all()  # deterministic
    assert (stats.subset_mask(n, 0.4, seed=4) != masks[2]).any()
    assert subsets.subset_count(0, 0.5) == 0 and subsets.subset_count(5, 0.01) == 1
    with pytest.raises(ValueError):
        stats.subset_mask(10, 0.0)
    with pytest.raises(ValueError):
        stats.subset_mask(10, 1.5)


def test_dataset_stats_subsets_match_direct_computation():
    rng = np.random.default_rng(0)
    pos = [[int(p)] for p in rng.integers(0, 40, size=200)]
    out = stats.dataset_stats(pos, 40, fractions=(0.25, 1.0), seed=5, threshold=2)
    assert out["full"]["coverage"] == len({p[0] for p in pos})
    sub = out["subsets"][0]
    mask = stats.subset_mask(200, 0.25, 5)
    chosen = [p[0] for p, m in zip(pos, mask) if m]
    counts = np.bincount(chosen, minlength=40)
    assert sub["questions"] == 50 and sub["coverage"] == int((counts > 0).sum())
    assert sub["overlap"] == pytest.approx((counts >= 2).sum() / (counts > 0).sum())
    assert sub["coverage_norm"] == pytest.approx(sub["coverage"] / out["full"]["coverage"])
    assert out["subsets"][1]["coverage_norm"] == 1.0


def test_file_stats_cli_with_bad_record(tmp_path, capsys):
    rows = list(EXAMPLES) + [{"question": "bad", "answers": "not a list", "positive_ctxs": [A]}]
    path = tmp_path / "biencoder-toy.json"
    path.write_text(json.dumps(rows))
    out = tmp_path / "report.json"
    st = stats_cli.run_cli(["--input", str(path), "--threshold", "3", "--fractions", "0.5,1.0",
                            "--out", str(out)])
    rep = json.loads(out.read_text())
    assert st["valid_records"] == rep["valid_records"] == 6
    assert rep["valid_records"] == 6 and rep["skipped_records"] == 1
    assert "answers" in rep["skip_summary"]
    assert rep["full"]["coverage"] == 3 and rep["full"]["overlapping_passages"] == 1
    assert [s["questions"] for s in rep["subsets"]] == [3, 6]
    printed = capsys.readouterr().out
    assert "| 0.50 | 3 |" in printed and "1 bad, skipped" in printed


def test_hard_negatives_from_the_positives_article_are_counted(tmp_path, capsys):
    planet = _ctx("Mercury (planet)", "the closest planet")
    rows = [
        # Same article in other spacing and case; a disambiguated title is another article.
        {**_ex("q1", planet), "hard_negative_ctxs": [_ctx("mercury  (Planet)", "its orbit"),
                                                    _ctx("Mercury (element)", "a metal")]},
        _ex("q2", A),  # no hard negatives: not in the denominator
        {**_ex("q3", B, extra_pos=[C]), "hard_negative_ctxs": [_ctx("C", "gamma, other part")]},
    ]
    path = tmp_path / "biencoder-titles.json"
    path.write_text(json.dumps(rows))
    st = stats_cli.run_cli(["--input", str(path), "--fractions", "1.0"])
    assert st["hard_negative_titles"] == {
        "hard_negatives": 3, "same_title": 1, "examples_with_hard_negatives": 2,
        "examples_with_same_title": 1, "share": pytest.approx(1 / 3)}
    assert ("hard negatives with a positive's title (the positive's article): 1 of 3 (33.3 %); "
            "examples with one: 1 of 2 with hard negatives") in capsys.readouterr().out
    # With every positive counted, q3's second positive (C) makes its negative same-article.
    every = stats.file_stats(str(path), fractions=(1.0,), positives="all")
    assert every["hard_negative_titles"]["same_title"] == 2


def test_sibling_negatives_share_the_title_other_entity_ones_never(tmp_path):
    from dense_cf.synthetic import generate as synthetic
    shares = {}
    for kind in ("sibling", "other_entity"):
        d = tmp_path / kind
        synthetic.generate(str(d), num_passages=150, seed=4, workers=1, num_hard_negatives=1,
                           hard_negatives=kind)
        titles = stats.file_stats(str(d / "biencoder-synth-train.json"),
                                  fractions=(1.0,))["hard_negative_titles"]
        assert titles["hard_negatives"] > 0
        shares[kind] = titles["share"]
    assert shares["other_entity"] == 0.0 and shares["sibling"] > 0.5


# ------------------------------------------------------------------ data.train_fraction
@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from dense_cf.models.hf import resolve_model_dir
    from dense_cf.models.tokenizer import load_tokenizer
    from dense_cf.synthetic import generate as synthetic
    d = tmp_path_factory.mktemp("synth_stats")
    synthetic.generate(str(d), num_passages=150, seed=4, workers=1, num_hard_negatives=1)
    return d, load_tokenizer(resolve_model_dir("minilm"))


def test_train_fraction_selects_the_stats_subset(synth, tmp_path):
    from dense_cf.inputs import dpr as pipeline
    d, tok = synth
    path = str(d / "biencoder-synth-train.json")
    rows = list(formats.iter_biencoder(path))
    kw = dict(cache_dir=str(tmp_path / "cache"), max_q_len=32, max_p_len=64, max_hard=1)
    full = pipeline.load_biencoder_split(path, tok, **kw)
    part = pipeline.load_biencoder_split(path, tok, fraction=0.4, fraction_seed=2, **kw)
    mask = stats.subset_mask(len(rows), 0.4, seed=2)
    assert full.num_examples == len(rows) and part.num_examples == mask.sum()
    assert part.stats["train_fraction"] == {"fraction": 0.4, "seed": 2, "of_examples": len(rows)}
    want = [r.question for r, m in zip(rows, mask) if m]
    got = [tok.decode(part.q.row(i).tolist()) for i in range(part.num_examples)]
    assert got == [tok.decode(tok.encode(q).ids) for q in want]
    # Cached separately from the full split, and reloaded identically.
    again = pipeline.load_biencoder_split(path, tok, fraction=0.4, fraction_seed=2, **kw)
    np.testing.assert_array_equal(again.pos_pid, part.pos_pid)
    # The stats command reports on exactly this subset.
    st = stats.file_stats(path, fractions=(0.4,), seed=2)
    assert st["subsets"][0]["questions"] == part.num_examples
    with pytest.raises(ValueError, match="fraction"):
        pipeline.load_biencoder_split(path, tok, fraction=1.5, **kw)


def test_config_train_fraction_applies_to_train_only(synth):
    from configs import data_efficiency as mod
    from dense_cf.inputs import dpr as dpr_inputs
    d, tok = synth
    c = mod.get_config("0.25,demo")
    assert c.method == "dpr" and c.data.train_fraction == 0.25 and c.model.name_or_path == "minilm"
    assert mod.get_config("0.55").optim.learning_rate == 1e-5
    c.data.data_dir = str(d)
    c.data.cache_dir = ""
    n_train = len(list(formats.iter_biencoder(d / "biencoder-synth-train.json")))
    n_dev = len(list(formats.iter_biencoder(d / "biencoder-synth-dev.json")))
    train = dpr_inputs.load_config_split(c, tok, "train_file")
    dev = dpr_inputs.load_config_split(c, tok, "dev_file")
    assert train.num_examples == subsets.subset_count(n_train, 0.25)
    assert dev.num_examples == n_dev
    with pytest.raises(ValueError, match="fraction must be in"):
        mod.get_config("0")
