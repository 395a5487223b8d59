"""Hard-negative mining: BM25 (bm25s) and model-mined (trained run + FAISS), DPR output format.

BM25 tests use a hand-made corpus whose best negative is obvious; the model test trains a tiny
random BERT for a few steps on the synthetic benchmark and checks the mined negatives against a
brute-force ranking by the model's own scores.
"""

import gzip
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from helpers import tiny_synthetic_config

from dense_cf.datasets import formats
from dense_cf.index import bm25 as bm25_lib
from dense_cf.index.bm25 import ANSERINI, BM25Index
from dense_cf.mining import negatives as mine_bm25
from dense_cf.mining import writers
from dense_cf.mining.negatives import mine_bm25 as run_bm25
from dense_cf.synthetic import generate as synthetic
from dense_cf.text import answers as answers_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MOBY = "Moby-Dick is an 1851 novel by Herman Melville about the whale hunt of Captain Ahab."
CORPUS = [
    ("1", MOBY, "Moby-Dick"),
    # The obvious hard negative: on topic (novel, whale, Moby Dick) but without the answer.
    ("2", "The novel Moby Dick follows the sailor Ishmael and the white whale.", "Moby Dick plot"),
    # Answer-bearing: must never be a negative.
    ("3", "Herman Melville wrote the novel Moby Dick after whaling voyages.", "Herman Melville"),
    # The positive again under another id (wiki dumps contain duplicates): excluded by text.
    ("4", "  moby-dick is an 1851 novel by Herman Melville about the whale hunt of  Captain Ahab.",
     "MOBY-DICK"),
    ("5", "Bananas are yellow fruit grown in the tropics.", "Banana"),
    ("6", "The Great Gatsby is a novel by F. Scott Fitzgerald set in Long Island.",
     "The Great Gatsby"),
    ("7", "Paris is the capital and largest city of France.", "Paris"),
    ("8", "Lyon is a large city in France, known for its cuisine.", "Lyon"),
    ("9", "France is a country whose capital city is home to the Louvre.", "France"),
]


def _ctx(row, **extra):
    pid, text, title = row
    return {"title": title, "text": text, "passage_id": pid, **extra}


def _examples():
    return [
        {"question": "who wrote the novel moby dick about the whale", "answers": ["Herman Melville"],
         "positive_ctxs": [_ctx(CORPUS[0], score=1000, title_score=1)],
         "negative_ctxs": [_ctx(CORPUS[4])], "dataset": "hand"},
        # Positive without passage_id, different case/whitespace: matched by title + text.
        {"question": "what is the capital city of france", "answers": ["Paris"],
         "positive_ctxs": [{"title": "PARIS", "text": "Paris is the capital and  largest city of "
                                                       "france."}],
         "hard_negative_ctxs": [_ctx(CORPUS[7], score=3.0)]},
    ]


@pytest.fixture()
def files(tmp_path):
    corpus = tmp_path / "psgs.tsv"
    formats.write_corpus_tsv(corpus, CORPUS)
    inp = tmp_path / "biencoder-in.json"
    inp.write_text(json.dumps(_examples()))
    return tmp_path, str(corpus), str(inp)


def _read(path):
    return [json.loads(json.dumps(r)) for r in json.load(
        gzip.open(path, "rt") if str(path).endswith(".gz") else open(path))]


def test_bm25_mines_the_obvious_negative_and_excludes_positives_and_answers(files):
    tmp, corpus, inp = files
    out = str(tmp / "out.json")
    summary = run_bm25(inp, corpus, out, num_negatives=3, top_k=9)
    recs = _read(out)
    assert len(recs) == 2 and summary["written"] == 2 and summary["skipped_records"] == 0
    moby = recs[0]["hard_negative_ctxs"]
    # Passage 2 is the best BM25 match that is neither the positive (1), its duplicate (4),
    # nor answer-bearing (3).
    assert moby[0]["passage_id"] == "2"
    pids = [c["passage_id"] for c in moby]
    assert not {"1", "3", "4"} & set(pids) and len(pids) == len(set(pids))
    for c in moby:
        assert set(c) == {"title", "text", "score", "title_score", "passage_id"}
        assert c["title_score"] == 0 and c["score"] > 0
        assert (c["passage_id"], c["text"], c["title"]) in CORPUS
        assert not answers_lib.has_answer(["Herman Melville"], c["text"])
    assert [c["score"] for c in moby] == sorted((c["score"] for c in moby), reverse=True)
    # Scores are bm25s scores of the passage over title + text.
    index = BM25Index.build(CORPUS, **ANSERINI)
    rows, scores = index.search([recs[0]["question"]], 9)
    want = dict(zip(rows[0].tolist(), scores[0].tolist()))
    assert moby[0]["score"] == pytest.approx(want[1], abs=1e-4)  # row 1 = id "2"
    # Positive matched by text (no passage_id): Paris (id 7) is never its negative; nor is any
    # passage containing "Paris" (answer-bearing).
    paris = recs[1]["hard_negative_ctxs"]
    assert paris and all(c["passage_id"] != "7" for c in paris)
    assert all(not answers_lib.has_answer(["Paris"], c["text"]) for c in paris)
    # Replace mode dropped the input's hard negative; other keys and ctx fields survive.
    assert _examples()[1]["hard_negative_ctxs"][0] not in paris
    assert recs[0]["dataset"] == "hand" and recs[0]["negative_ctxs"] == [_ctx(CORPUS[4])]
    assert recs[0]["positive_ctxs"][0]["title_score"] == 1
    st = summary["stats"]
    assert st["questions"] == 2 and st["excluded_answer"] >= 1 and st["excluded_text"] >= 2
    assert st["excluded_id"] >= 1 and st["negatives"] == len(moby) + len(paris)
    assert not os.path.exists(out + ".parts") and os.path.exists(out + ".meta.json")
    # Assembled from the shard lines: the same bytes as formats.write_biencoder would write.
    formats.write_biencoder(tmp / "ref.json", _read(out))
    assert open(out, "rb").read() == open(tmp / "ref.json", "rb").read()


def test_positive_matched_by_passage_id_with_wiki_prefix(files):
    tmp, corpus, inp = files
    # The positive's text differs from the corpus row, so only the id identifies it.
    ex = {"question": "novel about the whale moby dick", "answers": ["Ahab's captain"],
          "positive_ctxs": [{"title": "x", "text": "other text", "passage_id": "wiki:2"}]}
    (tmp / "one.json").write_text(json.dumps([ex]))
    run_bm25(str(tmp / "one.json"), corpus, str(tmp / "o.json"), num_negatives=9, top_k=9)
    pids = [c["passage_id"] for c in _read(tmp / "o.json")[0]["hard_negative_ctxs"]]
    assert "2" not in pids and "1" in pids  # passage 1 is the top BM25 match otherwise


def test_append_keeps_existing_first_and_never_duplicates(files):
    tmp, corpus, inp = files
    run_bm25(inp, corpus, str(tmp / "rep.json"), num_negatives=2, top_k=9, existing="replace")
    run_bm25(inp, corpus, str(tmp / "app.json"), num_negatives=2, top_k=9, existing="append")
    rep, app = _read(tmp / "rep.json")[1], _read(tmp / "app.json")[1]
    old = _examples()[1]["hard_negative_ctxs"]  # Lyon (id 8), which BM25 ranks second
    assert [c["passage_id"] for c in rep["hard_negative_ctxs"]] == ["9", "8"]
    assert old[0] not in rep["hard_negative_ctxs"]
    assert app["hard_negative_ctxs"][0] == old[0]  # kept first, unchanged
    # Lyon is not mined again; no other passage shares a term with the question.
    assert [c["passage_id"] for c in app["hard_negative_ctxs"][1:]] == ["9"]


def test_resume_after_interruption_gives_identical_output(files, monkeypatch):
    tmp, corpus, _ = files
    exs = _examples() * 3  # 6 records, shard_size 2 -> 3 shards
    inp = tmp / "six.json"
    inp.write_text(json.dumps(exs))
    full = str(tmp / "full.json.gz")
    kw = dict(num_negatives=3, top_k=9, shard_size=2, index_dir=str(tmp / "idx"))
    first = run_bm25(str(inp), corpus, full, **kw)
    assert first["reused_shards"] == 0 and first["shards"] == 3

    real_write = writers.ShardedParts.write
    calls = []

    def crash_on_second(self, shard, records, stats):
        calls.append(shard)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated crash")
        return real_write(self, shard, records, stats)

    part = str(tmp / "part.json.gz")
    monkeypatch.setattr(writers.ShardedParts, "write", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_bm25(str(inp), corpus, part, **kw)
    monkeypatch.setattr(writers.ShardedParts, "write", real_write)
    assert not os.path.exists(part)
    assert sorted(os.listdir(part + ".parts")) == ["part-00000.done.json", "part-00000.jsonl",
                                                   "part-00000.jsonl.sha256", "settings.json"]
    second = run_bm25(str(inp), corpus, part, **kw)
    assert second["reused_shards"] == 1 and second["mined_this_run"] == 4
    assert second["stats"] == first["stats"]
    with open(full, "rb") as a, open(part, "rb") as b:
        assert a.read() == b.read()
    # Other settings never mix with existing parts.
    os.makedirs(tmp / "w", exist_ok=True)
    writers.ShardedParts(str(tmp / "w"), {"num_negatives": 3})
    with pytest.raises(writers.SettingsMismatchError, match="num_negatives"):
        writers.ShardedParts(str(tmp / "w"), {"num_negatives": 4})


def test_index_dir_is_built_once_and_checked_against_the_corpus(files, tmp_path):
    tmp, corpus, inp = files
    idx = str(tmp / "idx")
    run_bm25(inp, corpus, str(tmp / "a.json"), num_negatives=2, top_k=5, index_dir=idx)
    meta = json.load(open(os.path.join(idx, "meta.json")))
    assert meta["passages"] == len(CORPUS) and meta["corpus"]["name"] == "psgs.tsv"
    mtime = os.path.getmtime(os.path.join(idx, "meta.json"))
    # Reused without the corpus (no rebuild), same result.
    run_bm25(inp, None, str(tmp / "b.json"), num_negatives=2, top_k=5, index_dir=idx)
    assert os.path.getmtime(os.path.join(idx, "meta.json")) == mtime
    assert open(tmp / "a.json").read() == open(tmp / "b.json").read()
    other = tmp / "other.tsv"
    formats.write_corpus_tsv(other, CORPUS[:3])
    with pytest.raises(ValueError, match="was built from psgs.tsv"):
        run_bm25(inp, str(other), str(tmp / "c.json"), num_negatives=2, top_k=5, index_dir=idx)


def test_bad_records_are_counted_not_dropped_silently(files):
    tmp, corpus, _ = files
    good = _examples()
    recs = [good[0], {"question": "no answers field", "positive_ctxs": [_ctx(CORPUS[0])]},
            {"question": "q", "answers": ["a"], "positive_ctxs": []}, good[1]]
    inp = tmp / "bad.json"
    inp.write_text(json.dumps(recs))
    summary = run_bm25(str(inp), corpus, str(tmp / "o.json"), num_negatives=2, top_k=9,
                       shard_size=3)
    assert summary["records"] == 4 and summary["skipped_records"] == 2 and summary["written"] == 2
    assert summary["skipped_by_reason"] == {"missing answers": 1, "no positive_ctxs": 1}
    assert [r["question"] for r in _read(tmp / "o.json")] == [good[0]["question"],
                                                              good[1]["question"]]
    with pytest.raises(formats.DataFormatError, match=r"record 1 .*answers"):
        run_bm25(str(inp), corpus, str(tmp / "s.json"), num_negatives=2, top_k=9,
                 skip_bad=False, work_dir=str(tmp / "strict"))


def test_select_negatives_skip_top_and_low_scores():
    rows = {i: (str(i), f"t{i}", f"text {i}") for i in range(6)}
    rows[3] = ("3", "t3", "contains the ANSWER here")
    stats = Counter()
    got = mine_bm25.select_negatives(
        [(0, 9.0), (1, 8.0), (2, 7.0), (3, 6.0), (-1, 0.0), (4, 5.0), (5, 0.0)], rows.get,
        answers=["answer"], exclude_pids=["wiki:2"], num=5, skip_top=1, min_score=0.0,
        stats=stats)
    assert [c["passage_id"] for c in got] == ["1", "4"]
    assert stats == {"skipped_top": 1, "excluded_id": 1, "excluded_answer": 1,
                     "excluded_low_score": 1}


def test_cli_gzip(files):
    tmp, corpus, inp = files
    gz_in = tmp / "in.json.gz"
    with gzip.open(gz_in, "wt") as f:
        json.dump(_examples(), f)
    out = tmp / "out.json.gz"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-m", "dense_cf.cli.mine_bm25", "--input", str(gz_in),
                          "--corpus", corpus, "--output", str(out), "--num_negatives", "2",
                          "--top_k", "9", "--index_dir", str(tmp / "cli_idx")],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["written"] == 2 and summary["stats"]["questions"] == 2
    recs = _read(out)
    assert recs[0]["hard_negative_ctxs"][0]["passage_id"] == "2"


# ---------------------------------------------------------------------------------------------
# Model-mined negatives


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from dense_cf.experiment import train_and_evaluate as train
    from dense_cf.train.run import load_run
    data_dir = tmp_path_factory.mktemp("synth")
    synthetic.generate(str(data_dir), num_passages=300, seed=1)
    workdir = str(tmp_path_factory.mktemp("run"))
    # test_eval_e2e's config and step count: the persistent compile cache serves both.
    train(tiny_synthetic_config(data_dir, **{"train.num_steps": 3}), workdir)
    return str(data_dir), workdir, load_run(workdir)


def _expected(scores_row, pids, corpus_rows, positives, answers, num, skip_top):
    """Brute-force reference: rank by the model's scores, apply the documented filters."""
    order = np.argsort(-scores_row, kind="stable")
    pos_pids = {p.passage_id for p in positives}
    pos_keys = {mine_bm25.passage_key(p.title, p.text) for p in positives}
    out = []
    for rank, r in enumerate(order[:20]):
        pid, text, title = corpus_rows[r]
        if rank < skip_top or pid in pos_pids or mine_bm25.passage_key(title, text) in pos_keys:
            continue
        if answers_lib.has_answer(answers, text):
            continue
        out.append((pid, float(scores_row[r])))
        if len(out) == num:
            break
    return out


@pytest.mark.parametrize("skip_top", [0, 3])
def test_model_mining_end_to_end(trained, tmp_path, skip_top):
    from dense_cf.mining.model_negatives import mine_model
    from dense_cf.retrieval import export
    data_dir, workdir, run = trained
    inp = os.path.join(data_dir, "biencoder-synth-dev.json")
    out = str(tmp_path / "mined.json")
    summary = mine_model(workdir, inp, out, k=20, num_negatives=4, skip_top=skip_top, run=run,
                         batch_size=7, shard_size=5)
    examples = formats.read_biencoder(inp)
    recs = formats.read_biencoder(out)  # the output is a valid DPR biencoder file
    raw = _read(out)
    assert len(recs) == len(examples) == summary["written"] > 0
    assert summary["index_timing"]["encoded_this_run"] in (0, 300)
    export_dir = os.path.join(workdir, "export", f"step_{run.step}")
    emb = export.load_embeddings(export_dir)
    pids = export.load_passage_ids(export_dir)
    corpus_rows = list(formats.read_corpus_tsv(os.path.join(data_dir, "psgs_synth.tsv")))
    assert pids == [r[0] for r in corpus_rows]
    by_pid = {r[0]: r for r in corpus_rows}
    q = export.encode_questions(run, [e.question for e in examples])
    scores = q @ emb.T
    for i, (ex, rec, r) in enumerate(zip(examples, recs, raw)):
        assert rec.question == ex.question and rec.positive_ctxs == ex.positive_ctxs
        hard = r["hard_negative_ctxs"]
        assert 0 < len(hard) <= 4
        for c in hard:
            assert set(c) == {"title", "text", "score", "title_score", "passage_id"}
            pid, text, title = by_pid[c["passage_id"]]  # from the corpus, verbatim
            assert (c["text"], c["title"]) == (text, title)
            assert c["passage_id"] not in {p.passage_id for p in ex.positive_ctxs}
            assert not answers_lib.has_answer(ex.answers, c["text"])
        # One extra reference passage, to see near-ties at the cut.
        ext = _expected(scores[i], pids, corpus_rows, ex.positive_ctxs, ex.answers, 5, skip_top)
        want = ext[:len(hard)]
        got = [(c["passage_id"], c["score"]) for c in hard]
        assert len(hard) == min(4, len(ext))
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=2e-4)
        ext_s = [s for _, s in ext]
        for j, (p, _) in enumerate(got):  # ids equal where no near-tie makes the order arbitrary
            near = [ext_s[t] for t in (j - 1, j + 1) if 0 <= t < len(ext_s)]
            if all(abs(ext_s[j] - x) > 1e-3 for x in near):
                assert p == want[j][0]
    st = summary["stats"]
    assert st["questions"] == len(examples) and st["negatives"] == sum(len(r.hard_negative_ctxs)
                                                                       for r in recs)
    assert st.get("skipped_top", 0) == skip_top * len(examples)


def _brute_force(workdir, run, questions):
    from dense_cf.retrieval import export
    export_dir = os.path.join(workdir, "export", f"step_{run.step}")
    return export.encode_questions(run, questions) @ export.load_embeddings(export_dir).T


def test_model_mining_excludes_positives_and_answers_the_model_ranks_first(trained, tmp_path):
    from dense_cf.mining.model_negatives import mine_model
    data_dir, workdir, run = trained
    corpus_rows = list(formats.read_corpus_tsv(os.path.join(data_dir, "psgs_synth.tsv")))
    exs = formats.read_biencoder(os.path.join(data_dir, "biencoder-synth-dev.json"))[:2]
    mine_model(workdir, os.path.join(data_dir, "biencoder-synth-dev.json"),
               str(tmp_path / "warm.json"), k=20, num_negatives=2, run=run)  # export + index
    scores = _brute_force(workdir, run, [e.question for e in exs])
    order = np.argsort(-scores, axis=1)
    top = [[corpus_rows[r] for r in row[:3]] for row in order]
    top_s = [[float(scores[i, r]) for r in row[:3]] for i, row in enumerate(order)]
    # Question 0: the model's top passage is the positive, given by id (other text);
    # question 1: it is given by title + text only; its second passage holds the answer.
    recs = [
        {"question": exs[0].question, "answers": ["zzz no such answer"],
         "positive_ctxs": [{"title": "t", "text": "x", "passage_id": top[0][0][0]}]},
        {"question": exs[1].question, "answers": [top[1][1][1]],
         "positive_ctxs": [{"title": top[1][0][2], "text": top[1][0][1]}]},
    ]
    inp = tmp_path / "adv.json"
    inp.write_text(json.dumps(recs))
    summary = mine_model(workdir, str(inp), str(tmp_path / "adv-out.json"), k=20,
                         num_negatives=2, run=run)
    assert summary["index_timing"]["index_reused"] and summary["index_timing"]["encoded_this_run"] == 0
    out = _read(tmp_path / "adv-out.json")
    got0 = [c["passage_id"] for c in out[0]["hard_negative_ctxs"]]
    got1 = [c["passage_id"] for c in out[1]["hard_negative_ctxs"]]
    # Rank 1 excluded, then ranks 2 and 3 (compared by score: robust to near-ties).
    assert top[0][0][0] not in got0
    np.testing.assert_allclose([c["score"] for c in out[0]["hard_negative_ctxs"]], top_s[0][1:],
                               atol=2e-4)
    assert top[1][0][0] not in got1 and top[1][1][0] not in got1
    assert out[1]["hard_negative_ctxs"][0]["score"] == pytest.approx(top_s[1][2], abs=2e-4)
    st = summary["stats"]
    assert st["excluded_id"] >= 1 and st["excluded_text"] >= 1 and st["excluded_answer"] >= 1


def test_tokenizer_is_bm25s_default():
    import bm25s
    texts = ["Moby-Dick: an 1851 NOVEL by Herman Melville, the whale!", "a I of", "",
             "Ünïcode wörds and 42 numbers"]
    stop = bm25_lib._stopwords()
    assert [bm25_lib.bm25_tokenize(t, stop) for t in texts] == \
        bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


def test_search_texts_tokenizers_agree():
    """index.bm25 is the one BM25: the synthetic generator's bm25s tokenizer and mining's regex
    tokenizer give the same ranking and scores (the synthetic files keep bm25s' k1, b)."""
    docs = ["Moby Dick, a novel by Herman Melville about a whale", "the whale song of the sea",
            "Paris is the capital of France", "Berlin, capital of Germany",
            "whale watching in Norway's sea"]
    qs = ["which novel has a whale", "capital of France", "sea whale"]
    got = {tok: list(bm25_lib.search_texts(docs, qs, 3, tokenizer=tok, block=2,
                                           **bm25_lib.BM25S_DEFAULTS))
           for tok in bm25_lib.TOKENIZERS}
    a, b = got["bm25s"], got["regex"]
    assert len(a) == len(b) == 2  # two blocks
    for (ra, sa), (rb, sb) in zip(a, b):
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(sa, sb)
    with pytest.raises(ValueError, match="tokenizer"):
        next(bm25_lib.search_texts(docs, qs, 3, tokenizer="nltk", **bm25_lib.ANSERINI))
