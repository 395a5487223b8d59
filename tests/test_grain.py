"""The Grain input pipeline (``data.pipeline=grain``, dense_cf/inputs/source.py): the same batches
as tf.data for every training method, host columns, exact resume through Grain's own iterator
state. A killed Grain run with TensorFlow unimportable resuming to an uninterrupted tf.data
run's parameters: tests/test_train_loop.py's SIGKILL test (its tf.data run is the reference of
both). The demo config end to end without TensorFlow: tests/test_gpu_check.py."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import (
    FID_WORDS,
    hotpot_world,
    tiny_fid_config,
    tiny_reader_config,
    write_tiny_t5_tokenizer,
    write_toy_reader_results,
    xla_flags,
)
from test_fid_method import write_toy_fid_results
from test_pipeline import _examples

from dense_cf.inputs import dcsr, dpr, fid, multihop, reader
from dense_cf.inputs import source as source_lib
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import SENT_TOKEN, add_tokens, load_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 7  # crosses epoch boundaries in every case below


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(resolve_model_dir("minilm"))


@pytest.fixture(scope="module")
def cases(tok, tmp_path_factory):
    """name -> (module, data, spec): one per method family and counterfactual strategy."""
    out = {}
    pre = dpr.preprocess(_examples(12), tok, max_q_len=16, max_p_len=32, max_hard=3,
                         evidence={i: i % 3 for i in range(0, 12, 2)})
    for strategy in ("sentence", "window", "answer", "evidence", "none"):
        spec = dpr.PipelineSpec(global_batch=4, max_q_len=16, max_p_len=32, num_hard=2,
                                strategy=strategy, window=2, seed=3)
        out[f"dpr-{strategy}"] = (dpr, pre, spec)
    stok = load_tokenizer(resolve_model_dir("minilm"))
    add_tokens(stok, (SENT_TOKEN,))
    spre = dpr.preprocess(_examples(12), stok, max_q_len=16, max_p_len=32, max_hard=3)
    sdata = dcsr.from_preprocessed(spre, stok.token_to_id(SENT_TOKEN), max_p_len=32)
    for negatives in ("in_passage", "bm25x2"):
        spec = dcsr.DcsrSpec(global_batch=4, max_q_len=16, max_p_len=32,
                             sent_id=stok.token_to_id(SENT_TOKEN), negatives=negatives, seed=5)
        out[f"dcsr-{negatives}"] = (dcsr, sdata, spec)
    examples, _ = hotpot_world(n_people=6, n_comparison=4)
    mdata = multihop.preprocess(examples, tok, max_q_len=16, max_p_len=32, max_hard=2)
    out["mdr-eadpr"] = (multihop, mdata, multihop.MultihopSpec(
        global_batch=4, max_q_len=16, max_p_len=32, max_hop2_len=40, num_hard=1,
        counterfactual=True, seed=2))
    d = tmp_path_factory.mktemp("readers")
    write_toy_reader_results(d / "r.json", 10, seed=0, passages=3)
    rcfg = tiny_reader_config(d / "r.json", **{"reader.passages": 3, "train.global_batch": 4})
    rdata = reader.load_config_split(rcfg, tok, "train_file")
    out["reader"] = (reader, rdata, reader.spec_from_config(rcfg, tok))
    (d / "t5").mkdir()
    write_tiny_t5_tokenizer(d / "t5" / "tokenizer.json", FID_WORDS, extra_chars=":")
    t5_tok = load_tokenizer(str(d / "t5"))
    write_toy_fid_results(d / "f.json", 10, seed=0)
    fcfg = tiny_fid_config(d / "f.json", str(d / "t5"), **{"train.global_batch": 4})
    fdata = fid.load_config_split(fcfg, t5_tok, "train_file")
    out["fid"] = (fid, fdata, fid.spec_from_config(fcfg, t5_tok))
    return out


CASES = ["dpr-sentence", "dpr-window", "dpr-answer", "dpr-evidence", "dpr-none",
         "dcsr-in_passage", "dcsr-bm25x2", "mdr-eadpr", "reader", "fid"]


def _take(ds, k):
    it = ds.as_numpy_iterator()
    return [next(it) for _ in range(k)]


def _assert_same(a_batches, b_batches):
    assert len(a_batches) == len(b_batches)
    for a, b in zip(a_batches, b_batches):
        assert sorted(a) == sorted(b)
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("name", CASES)
def test_grain_batches_equal_tfdata_and_hosts_split_them(cases, name):
    module, data, spec = cases[name]
    tfdata = _take(module.make_dataset(data, spec, pipeline="tfdata"), STEPS)
    grain = _take(module.make_dataset(data, spec, pipeline="grain"), STEPS)
    _assert_same(tfdata, grain)
    # Counterfactual masks really differ from the positive where the strategy drops something.
    if "cf_mask" in grain[0]:
        valid = np.concatenate([b["cf_valid"] for b in grain])
        fewer = np.concatenate([b["cf_mask"].sum(1) < b["pos_mask"].sum(1) for b in grain])
        assert valid.any() and (fewer | ~valid).all()
    # 2 hosts: each reads its column of every global batch.
    hosts = [_take(module.make_dataset(data, spec, pipeline="grain", process_index=h,
                                       process_count=2), STEPS) for h in (0, 1)]
    joined = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*hosts)]
    _assert_same(grain, joined)
    # Unshuffled, one epoch: the dev pass of the loop.
    dev = spec.__class__(**{**spec.__dict__, "shuffle": False})
    _assert_same(list(module.make_dataset(data, dev, repeat=False, pipeline="tfdata").as_numpy_iterator()),
                 list(module.make_dataset(data, dev, repeat=False, pipeline="grain").as_numpy_iterator()))


def test_grain_state_resumes_exactly_and_across_pipelines(cases):
    _, data, spec = cases["dpr-sentence"]
    it = dpr.BatchIterator(data, spec, pipeline="grain")
    head = [next(it) for _ in range(3)]
    state = it.get_state()
    assert state["step"] == 3 and state["grain"]["next_index"] == 3
    tail = [next(it) for _ in range(4)]
    again = dpr.BatchIterator(data, spec, pipeline="grain")
    again.set_state(state)          # Grain's own state moves the iterator
    _assert_same(tail, [next(again) for _ in range(4)])
    from_tf = dpr.BatchIterator(data, spec, pipeline="tfdata")
    from_tf.set_state(state)        # a Grain state resumes a tf.data run, and back
    _assert_same(tail, [next(from_tf) for _ in range(4)])
    to_grain = dpr.BatchIterator(data, spec, pipeline="grain")
    to_grain.set_state(from_tf.get_state())
    assert "grain" not in from_tf.get_state()
    _assert_same(_take(dpr.make_dataset(data, spec, start_step=7, pipeline="tfdata"), 2),
                 [next(to_grain) for _ in range(2)])
    with pytest.raises(ValueError, match="next_index"):
        dpr.BatchIterator(data, spec, pipeline="grain").set_state(
            dict(state, grain=dict(state["grain"], next_index=5)))
    assert len(head) == 3


def test_unknown_pipeline_is_refused(cases):
    _, data, spec = cases["dpr-none"]
    with pytest.raises(ValueError, match="data.pipeline"):
        dpr.make_dataset(data, spec, pipeline="torch")
    assert source_lib.epoch_order(5, 0, 0, shuffle=False).tolist() == [0, 1, 2, 3, 4]


def _env(devices=2):
    return dict(os.environ, XLA_FLAGS=xla_flags(devices))


def test_a_tfdata_iterator_alive_at_exit_does_not_hang_the_process():
    """tf.data calls the numpy batch function from its own threads; an iterator still alive at
    interpreter shutdown deadlocked the exit at this batch size, every time (inputs.source now
    closes them at exit)."""
    code = ("import sys; sys.path.insert(0, 'tests')\n"
            "from test_pipeline import _examples\n"
            "from dense_cf.inputs import dpr\n"
            "from dense_cf.models.hf import resolve_model_dir\n"
            "from dense_cf.models.tokenizer import load_tokenizer\n"
            "tok = load_tokenizer(resolve_model_dir('minilm'))\n"
            "data = dpr.preprocess(_examples(400), tok, max_q_len=64, max_p_len=256, max_hard=2)\n"
            "spec = dpr.PipelineSpec(global_batch=128, max_q_len=64, max_p_len=256, seed=1)\n"
            "it = dpr.make_dataset(data, spec).as_numpy_iterator()\n"
            "batches = [next(it) for _ in range(3)]\n"
            "print('batches', len(batches))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(1), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "batches 3" in r.stdout, r.stderr[-2000:]
