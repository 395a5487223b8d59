"""tf.data pipeline: tokenise-once preprocessing, on-the-fly counterfactuals, order, resume, hosts."""

import dataclasses

import numpy as np
import pytest

from dense_cf.datasets.formats import BiencoderExample, Passage, write_biencoder
from dense_cf.inputs import dpr as pipeline
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(resolve_model_dir("minilm"))


def _examples(n=10):
    out = []
    for i in range(n):
        year = 1800 + i
        pos = Passage(title=f"Tower {i}",
                      text=f"The tower {i} stands in a city. It was built in {year} by workers. "
                           f"It is very tall.")
        hard = [Passage(title=f"Bridge {i}", text=f"The bridge {i} crosses a river. It is long.")]
        if i % 3 == 2:
            hard = []  # some examples have no hard negative
        answers = [str(year)] if i != 4 else ["nowhere to be found"]
        out.append(BiencoderExample(question=f"when was tower {i} built?", answers=answers,
                                    positive_ctxs=[pos], negative_ctxs=[], hard_negative_ctxs=hard))
    return out


@pytest.fixture(scope="module")
def data(tok):
    return pipeline.preprocess(_examples(), tok, max_q_len=16, max_p_len=32, max_hard=2)


def _spec(**kw):
    base = dict(global_batch=4, max_q_len=16, max_p_len=32, num_hard=1, strategy="sentence",
                pad_id=0, sep_id=102, seed=3, shuffle=True)
    base.update(kw)
    return pipeline.PipelineSpec(**base)


def _decode(tok, ids):
    return tok.decode([int(i) for i in ids if i not in (0,)], skip_special_tokens=True)


def test_preprocess_features(tok, data):
    assert data.num_examples == 10
    assert data.stats["no_answer_match"] == 1       # example 4: answer absent, counted
    assert data.stats["no_hard_negatives"] == 3     # examples 2, 5, 8
    body = data.body.row(int(data.pos_pid[0]))
    sent = data.sent.row(int(data.pos_pid[0]))
    assert body[0] == tok.token_to_id("[CLS]")
    head = list(body).index(tok.token_to_id("[SEP]")) + 1
    assert (sent[:head] == -1).all() and (sent[head:] >= 0).all()
    assert sorted(set(sent[head:].tolist())) == [0, 1, 2]
    flags = data.pos_ans.row(0)
    assert _decode(tok, body[flags.astype(bool)]) == "1800"


def test_batch_shapes_and_counterfactual(tok, data):
    ds = pipeline.make_dataset(data, _spec(shuffle=False), repeat=False)
    batches = list(ds.as_numpy_iterator())
    assert len(batches) == 2  # 10 // 4, tail dropped (fixed shapes)
    b = batches[0]
    assert b["q_ids"].shape == (4, 16) and b["pos_ids"].shape == (4, 32)
    assert b["hard_ids"].shape == (4, 1, 32) and b["cf_ids"].shape == (4, 32)
    assert b["hard_valid"][:, 0].tolist() == [True, True, False, True]
    assert b["cf_valid"].tolist() == [True, True, True, True]
    pos, cf = _decode(tok, b["pos_ids"][1]), _decode(tok, b["cf_ids"][1])
    assert "1801" in pos and "1801" not in cf
    assert "stands in a city" in cf and "very tall" in cf and "built" not in cf
    # Masks mark real tokens; every passage ends in [SEP].
    n = int(b["cf_mask"][1].sum())
    assert b["cf_ids"][1][n - 1] == 102 and (b["cf_ids"][1][n:] == 0).all()
    b2 = batches[1]
    assert b2["cf_valid"].tolist() == [False, True, True, True]  # example 4 has no answer match


def test_answer_strategy_keeps_sentence(tok, data):
    b = next(pipeline.make_dataset(data, _spec(shuffle=False, strategy="answer")).as_numpy_iterator())
    cf = _decode(tok, b["cf_ids"][0])
    assert "built in by workers" in cf and "1800" not in cf


def test_no_counterfactual_strategy_omits_fields(data):
    b = next(pipeline.make_dataset(data, _spec(strategy="none", num_hard=0)).as_numpy_iterator())
    assert "cf_ids" not in b and b["hard_ids"].shape == (4, 0, 32)


def _take(ds, k):
    it = ds.as_numpy_iterator()
    return [next(it) for _ in range(k)]


def test_deterministic_order_and_exact_resume(data):
    spec = _spec()
    full = _take(pipeline.make_dataset(data, spec), 7)   # crosses epoch boundaries (2 steps/epoch)
    again = _take(pipeline.make_dataset(data, spec), 7)
    for a, b in zip(full, again):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    for start in (1, 2, 5):
        resumed = _take(pipeline.make_dataset(data, spec, start_step=start), 7 - start)
        for a, b in zip(full[start:], resumed):
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
    # Epochs are reshuffled: the two epochs do not present the same question order.
    firsts = [b["q_ids"].tobytes() for b in full[:4]]
    assert firsts[0:2] != firsts[2:4]
    other = _take(pipeline.make_dataset(data, dataclasses.replace(spec, seed=4)), 2)
    assert any((a["q_ids"] != b["q_ids"]).any() for a, b in zip(full, other))


def test_hosts_split_the_global_batch(data):
    spec = _spec()
    glob = _take(pipeline.make_dataset(data, spec), 3)
    h0 = _take(pipeline.make_dataset(data, spec, process_index=0, process_count=2), 3)
    h1 = _take(pipeline.make_dataset(data, spec, process_index=1, process_count=2), 3)
    for g, a, b in zip(glob, h0, h1):
        for k in g:
            np.testing.assert_array_equal(g[k], np.concatenate([a[k], b[k]]))


def test_batch_iterator_state(data):
    spec = _spec()
    it = pipeline.BatchIterator(data, spec)
    seq = [next(it) for _ in range(3)]
    state = it.get_state()
    assert state["step"] == 3
    it2 = pipeline.BatchIterator(data, spec)
    it2.set_state(state)
    np.testing.assert_array_equal(next(it2)["q_ids"], next(it)["q_ids"])
    bad = dict(state, global_batch=8)
    with pytest.raises(ValueError, match="does not match"):
        it2.set_state(bad)
    assert len(seq) == 3


def test_resume_on_another_host_count(data):
    """A state saved by 2 hosts resumes on 1 host with the same global batches (elastic resume)."""
    spec = _spec()
    hosts = [pipeline.BatchIterator(data, spec, process_index=h, process_count=2) for h in (0, 1)]
    for it in hosts:
        for _ in range(3):
            next(it)
    state = hosts[0].get_state()
    assert state["process_count"] == 2
    single = pipeline.BatchIterator(data, spec)
    single.set_state(state)
    a, b, whole = next(hosts[0]), next(hosts[1]), next(single)
    for k in whole:
        np.testing.assert_array_equal(whole[k], np.concatenate([a[k], b[k]]))


def test_cache_round_trip(tmp_path, tok):
    path = str(tmp_path / "train.json")
    write_biencoder(path, _examples())
    kw = dict(cache_dir=str(tmp_path / "cache"), max_q_len=16, max_p_len=32, max_hard=2)
    a = pipeline.load_biencoder_split(path, tok, **kw)
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == [".npz", ".sha256"]
    b = pipeline.load_biencoder_split(path, tok, **kw)
    np.testing.assert_array_equal(a.body.values, b.body.values)
    np.testing.assert_array_equal(a.pos_ans.values, b.pos_ans.values)
    assert a.stats["no_answer_match"] == b.stats["no_answer_match"] == 1
    with pytest.raises(FileNotFoundError, match="missing.json"):
        pipeline.load_biencoder_split(str(tmp_path / "missing.json"), tok, **kw)


def test_cache_key_is_unchanged(tmp_path, tok):
    """The key (and the evidence fingerprint inside it) built on dense_cf.files equals the
    formula of the caches already on disk, so they stay valid."""
    import hashlib
    import json
    import os

    from dense_cf.datasets.evidence_file import EvidenceMatcher

    path = str(tmp_path / "train.json")
    write_biencoder(path, _examples())
    ev = tmp_path / "evidence.jsonl"
    ev.write_text('{"index": 0, "sentence": 1}\n')
    ev_st = os.stat(ev)
    old_ev = f"{os.path.abspath(ev)}:{ev_st.st_size}:{ev_st.st_mtime_ns}"
    assert EvidenceMatcher(str(ev), path).fingerprint == old_ev
    kw = dict(max_q_len=16, max_p_len=32, max_hard=2, answer_mode="string", max_examples=0,
              evidence=old_ev)
    st = os.stat(path)
    h = hashlib.sha256()  # the formula before dense_cf.files (inputs/dpr.py at ac85aa7)
    h.update(json.dumps({"path": os.path.abspath(path), "size": st.st_size,
                         "mtime": st.st_mtime_ns, "vocab": tok.get_vocab_size(),
                         "version": pipeline.CACHE_VERSION, **kw}, sort_keys=True).encode())
    h.update(tok.to_str().encode())
    assert pipeline._fingerprint(path, tok, **kw) == h.hexdigest()[:16]
    pipeline.load_biencoder_split(path, tok, cache_dir=str(tmp_path / "cache"),
                                  max_q_len=16, max_p_len=32, max_hard=2, evidence_file=str(ev))
    want = f"train.json.{h.hexdigest()[:16]}.npz"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [want, want + ".sha256"]


def test_tfdata_runs_without_the_autotuning_thread(data):
    """The tf.data pipeline turns autotuning off: an iterator's destructor waits for the
    autotuning thread, which could sleep out a period of up to 60 s (inputs/source.py)."""
    ds = pipeline.make_dataset(data, _spec(), pipeline="tfdata")
    assert ds.dataset.options().autotune.enabled is False
    assert len(_take(ds, 3)) == 3
