"""BM25 hard negatives of the synthetic benchmark from other entities (issue 32 item 3).

``generate(hard_negatives="other_entity")`` mines only other entities' passages, as NQ's BM25
negatives mostly are; the default ("sibling") keeps the gold entity's siblings and its files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dense_cf.datasets import formats
from dense_cf.synthetic import generate as synthetic
from dense_cf.text.answers import has_answer

N = 300
SEED = 1


def _gen(out: Path, **kw) -> Path:
    synthetic.generate(out, N, seed=SEED, workers=1, **kw)
    return out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return {"default": _gen(tmp_path_factory.mktemp("default")),
            "sibling": _gen(tmp_path_factory.mktemp("sibling"), hard_negatives="sibling"),
            "other": _gen(tmp_path_factory.mktemp("other"), hard_negatives="other_entity")}


def _train(d: Path, split: str = "train") -> list:
    return list(formats.iter_biencoder(d / synthetic.FILES[split], skip_bad=False))


def _meta(d: Path) -> dict:
    return json.loads((d / synthetic.FILES["meta"]).read_text())


def test_default_is_sibling_and_unchanged(dirs):
    """The explicit default writes the same bytes as no argument, records nothing new in
    meta.json, and its hard negatives are mostly the gold entity's siblings (same title)."""
    for name in synthetic.FILES.values():
        assert (dirs["default"] / name).read_bytes() == (dirs["sibling"] / name).read_bytes(), name
    meta = _meta(dirs["default"])
    assert "hard_negatives" not in meta["params"]
    assert "mined_short_of_hard_negatives" not in meta["counts"]
    pairs = [(ex.positive_ctxs[0].title, h.title) for ex in _train(dirs["default"])
             for h in ex.hard_negative_ctxs]
    assert sum(p == h for p, h in pairs) > 0.5 * len(pairs)


def test_other_entity_negatives_share_no_entity_and_lack_the_answer(dirs):
    corpus = {pid: (title, text) for pid, text, title in
              formats.read_corpus_tsv(dirs["other"] / synthetic.FILES["corpus"], skip_bad=False)}
    n_hard = n_short = 0
    for split in ("train", "dev"):
        for ex in _train(dirs["other"], split):
            gold = ex.positive_ctxs[0]
            assert len(ex.hard_negative_ctxs) <= 3
            n_short += len(ex.hard_negative_ctxs) < 3
            for h in ex.hard_negative_ctxs:
                n_hard += 1
                # Titles name entities uniquely (name + disambiguator) in the entity world.
                assert h.title != gold.title
                assert h.passage_id != gold.passage_id
                assert not has_answer(ex.answers, h.text)
                assert corpus[h.passage_id] == (h.title, h.text)
    counts = _meta(dirs["other"])["counts"]
    assert n_hard == counts["hard_negatives"] > 0
    assert counts["mined_short_of_hard_negatives"] == n_short  # counted, never dropped
    assert _meta(dirs["other"])["params"]["hard_negatives"] == "other_entity"


def test_other_entity_changes_only_the_hard_negatives(dirs):
    d, o = dirs["default"], dirs["other"]
    for key in ("corpus", "test_qa", "train_gold", "dev_gold", "test_gold"):
        assert (d / synthetic.FILES[key]).read_bytes() == (o / synthetic.FILES[key]).read_bytes()
    for split in ("train", "dev"):
        a, b = _train(d, split), _train(o, split)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert (x.question, x.answers, x.positive_ctxs, x.negative_ctxs) == \
                (y.question, y.answers, y.positive_ctxs, y.negative_ctxs)


def test_other_entity_in_the_mixed_world(tmp_path):
    """Mixed world (a passage's facts name other entities): no hard negative shares the
    positive's title or contains the answer."""
    out = _gen(tmp_path, world="mixed", hard_negatives="other_entity")
    for ex in _train(out):
        gold = ex.positive_ctxs[0]
        for h in ex.hard_negative_ctxs:
            assert h.title != gold.title and not has_answer(ex.answers, h.text)


def test_bad_hard_negatives_and_check_params(dirs):
    with pytest.raises(ValueError, match="hard_negatives"):
        synthetic.generate(dirs["other"] / "x", N, hard_negatives="bm25")
    with pytest.raises(ValueError, match="hard_negatives"):
        synthetic.check_params(dirs["other"], num_passages=N, seed=SEED,
                               test_questions=_meta(dirs["other"])["params"]["test_questions"])
    synthetic.check_params(dirs["other"], num_passages=N, seed=SEED,
                           test_questions=_meta(dirs["other"])["params"]["test_questions"],
                           hard_negatives="other_entity")


def test_config_field_is_validated():
    from dense_cf.configs.base import base_config
    from dense_cf.train.validate import problems
    cfg = base_config()
    assert cfg.data.synthetic.hard_negatives == "sibling"
    cfg.data.synthetic.generate = True
    cfg.data.synthetic.hard_negatives = "nope"
    assert any("data.synthetic.hard_negatives" in p for p in problems(cfg, check_files=False))


def test_config_field_reaches_the_generator(tmp_path, monkeypatch):
    from dense_cf import experiment
    from dense_cf.configs.base import base_config
    seen = {}
    monkeypatch.setattr(experiment.synthetic, "generate",
                        lambda *a, **kw: seen.update(kw))
    cfg = base_config()
    cfg.data.data_dir = str(tmp_path)
    cfg.data.synthetic.generate = True
    cfg.data.synthetic.hard_negatives = "other_entity"
    experiment.maybe_generate_synthetic(cfg)
    assert seen["hard_negatives"] == "other_entity"


def test_random_hard_negatives_are_the_random_ones(dirs, tmp_path):
    """hard_negatives="random" (issue 50: PiCL Table 4's in-batch + one random negative): no
    BM25 mining; every record's hard negatives are its random negatives, and everything else
    is the default world's."""
    out = _gen(tmp_path, hard_negatives="random")
    d = dirs["default"]
    for key in ("corpus", "test_qa", "train_gold", "dev_gold", "test_gold"):
        assert (d / synthetic.FILES[key]).read_bytes() == (out / synthetic.FILES[key]).read_bytes()
    for split in ("train", "dev"):
        a, b = _train(d, split), _train(out, split)
        assert len(a) == len(b) and all(y.hard_negative_ctxs for y in b)
        for x, y in zip(a, b):
            assert (x.question, x.answers, x.positive_ctxs, x.negative_ctxs) == \
                (y.question, y.answers, y.positive_ctxs, y.negative_ctxs)
            assert [h.text for h in y.hard_negative_ctxs] == [n.text for n in y.negative_ctxs]
    assert '"hard_negatives": "random"' in json.dumps(_meta(out))  # the world says so
