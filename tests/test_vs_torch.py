"""bench.vs_torch without its optional extra: the A/B alternation, the paired arithmetic, the
padding helpers, the real-length training batches, the step config and the shared jitted step at
the benchmark's shapes, and a clear error when torch is missing. The torch loss is checked
against ours only where torch is installed (the [peer] extra; tests never need it)."""

import importlib
import sys

import jax
import numpy as np
import pytest
from flax import linen as nn
from helpers import tiny_run

from dense_cf import losses, methods
from dense_cf.bench import vs_torch
from dense_cf.bench.common import batch_shapes, jitted_train_step, random_batch
from dense_cf.files import UserError
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.train import run as loop


def test_alternate_rotates_the_order_each_round_and_times_every_call():
    calls = []

    def fn(name):
        return lambda r: calls.append((name, r))

    seen = []
    times, cpu, orders = vs_torch.alternate([("a", fn("a")), ("b", fn("b"))], 4,
                                            on_round=lambda r, wall: seen.append((r, sorted(wall))))
    assert seen == [(r, ["a", "b"]) for r in range(4)]
    assert orders == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4}
    assert all(t >= 0 for v in list(times.values()) + list(cpu.values()) for t in v)
    _, _, orders3 = vs_torch.alternate([(n, fn(n)) for n in "xyz"], 3)
    assert orders3 == [["x", "y", "z"], ["y", "z", "x"], ["z", "x", "y"]]


def test_alternate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rounds"):
        vs_torch.alternate([("a", lambda r: None)], 0)
    with pytest.raises(ValueError, match="distinct"):
        vs_torch.alternate([("a", lambda r: None), ("a", lambda r: None)], 1)


def test_paired_summary_medians_ratio_and_sign_test():
    s = vs_torch.paired_summary([1.0, 2.0, 3.0, 10.0], [2.0, 4.0, 6.0, 5.0], work=16)
    assert s["ours_median_s"] == 2.5 and s["peer_median_s"] == 4.5
    assert s["speedup"] == pytest.approx(4.5 / 2.5)
    assert s["round_ratio_median"] == pytest.approx(2.0)  # ratios 2, 2, 2, 0.5
    assert s["ours_per_s"] == pytest.approx(16 / 2.5) and s["peer_per_s"] == pytest.approx(16 / 4.5)
    # 3 of 4 rounds ours faster: two-sided exact binomial p = 2 * P[Bin(4, 1/2) <= 1] = 0.625.
    assert s["sign_test"] == {"ours_faster": 3, "peer_faster": 1, "p_value": pytest.approx(0.625)}
    eight = vs_torch.paired_summary([1.0] * 8, [2.0] * 8)
    assert eight["sign_test"]["p_value"] == pytest.approx(2 / 2 ** 8)
    with pytest.raises(ValueError, match="equal-length"):
        vs_torch.paired_summary([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        vs_torch.paired_summary([0.0], [1.0])


def test_trim_to_longest_cuts_at_the_longest_row():
    ids = np.arange(12).reshape(2, 6)
    mask = np.array([[1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
    i, m = vs_torch.trim_to_longest(ids, mask)
    assert i.tolist() == [[0, 1, 2], [6, 7, 8]] and m.tolist() == [[1, 1, 0], [1, 1, 1]]
    i, m = vs_torch.trim_to_longest(ids, np.zeros_like(mask))
    assert i.shape == (2, 1)


def test_step_config_sets_the_shapes_and_loss_weights():
    cfg = vs_torch.step_config("tiny", global_batch=4, max_q_len=8, max_p_len=16, num_hard=2,
                               counterfactual=True, attention_impl="xla")
    assert (cfg.train.global_batch, cfg.data.max_q_len, cfg.data.max_p_len, cfg.data.num_hard) \
        == (4, 8, 16, 2)
    assert cfg.model.attention_impl == "xla" and cfg.optim.warmup_steps == 0
    hp = methods.get(cfg.method).loss_hparams(cfg.loss)
    assert (hp["lam"], hp["tau1"], hp["tau2"]) == (0.2, 1.0, 1.0)
    dpr = vs_torch.step_config("tiny", global_batch=4, max_q_len=8, max_p_len=16, num_hard=1,
                               counterfactual=False)
    hp = methods.get(dpr.method).loss_hparams(dpr.loss)
    assert (hp["lam"], hp["tau1"], hp["tau2"]) == (0.0, 0.0, 0.0)


def _tiny_step():
    """(config, model, params, one-device mesh) of a 1-layer PiCL step at B 4, Lq 8, Lp 16."""
    cfg = vs_torch.step_config("tiny", global_batch=4, max_q_len=8, max_p_len=16, num_hard=1,
                               counterfactual=True)
    cfg.model.tiny_layers, cfg.model.tiny_vocab = 1, 2048
    model, hf_params, _ = loop.build_model(cfg)
    return cfg, model, hf_params, mesh_lib.make_mesh(1, 1, devices=jax.devices()[:1])


def test_shared_jitted_step_runs_at_the_benchmark_shapes():
    cfg, model, hf_params, mesh = _tiny_step()
    batch = random_batch(batch_shapes(4, 1, 8, 16, True), model.config.vocab_size)
    step, state, rules = jitted_train_step(cfg, model, hf_params, mesh, dropout=False)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        gbatch = mesh_lib.global_batch(batch, mesh)
        state, m0 = step(state, gbatch, jax.random.key(1))
        state, m1 = step(state, gbatch, jax.random.key(1))
    assert int(state.step) == 2
    # Without dropout the same batch twice: the first AdamW update (lr from step 0) moved it.
    assert np.isfinite(float(m0["loss"])) and float(m1["loss"]) != float(m0["loss"])
    assert float(m0["learning_rate"]) == pytest.approx(cfg.optim.learning_rate)


def test_packed_contender_matches_the_padded_step_on_real_lengths():
    # The "ours packed" path: real-length batches packed as the loop packs them, the same jitted
    # step; its loss and gradient norm are the padded batch's (what the numerics check compares
    # with the peer).
    cfg, model, hf_params, mesh = _tiny_step()
    batches = [vs_torch.real_length_batch(batch_shapes(4, 1, 8, 16, True), np.array([3, 4, 6]),
                                          np.array([5, 7, 9, 16]), 2048, seed=(0, k))
               for k in range(2)]
    packed, secs = vs_torch.pack_batches(cfg, batches, 24, mesh)
    assert len(packed) == len(secs) == 2 and all(t >= 0 for t in secs)
    assert "q_ids" not in packed[0] and packed[0]["packed_pos_ids"].shape[-1] == 24
    fill = vs_torch.group_fill(packed, vs_torch.PACKED_GROUPS)["passages"]["fill"]
    assert fill > vs_torch.group_fill(batches, vs_torch.TRAIN_GROUPS)["passages"]["fill"]
    metrics = []
    for b in (batches[0], packed[0]):
        step, state, rules = jitted_train_step(cfg, model, hf_params, mesh, dropout=False)
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            _, m = step(state, mesh_lib.global_batch(b, mesh), jax.random.key(1))
        metrics.append((float(m["loss"]), float(m["grad_norm"])))
    assert metrics[1] == pytest.approx(metrics[0], rel=1e-4)


def test_imports_without_torch_and_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.setitem(sys.modules, "transformers", None)
    mod = importlib.reload(vs_torch)
    with pytest.raises(UserError, match=r"\[peer\]") as e:
        mod.import_peer()
    assert "pip install" in str(e.value)
    with pytest.raises(UserError, match=r"\[peer\]"):
        mod.main([])


def test_torch_loss_matches_ours():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(0)
    b, h, d = 4, 2, 8
    q, pos, cf = (r.normal(size=(b, d)).astype(np.float32) for _ in range(3))
    hard = r.normal(size=(b, h, d)).astype(np.float32)
    hard_valid = np.array([[1, 1], [1, 0], [0, 0], [1, 1]], bool)
    cf_valid = np.array([1, 0, 1, 1], bool)
    for kw in ({"lam": 0.2, "tau1": 1.0, "tau2": 1.0}, {"lam": 0.0, "tau1": 0.0, "tau2": 0.0}):
        ours, _ = losses.contrastive_loss(q, pos, hard, hard_valid, cf, cf_valid, **kw)
        t = [torch.from_numpy(x) for x in (q, pos, hard, hard_valid, cf, cf_valid)]
        theirs = vs_torch._torch_loss(torch, *t, **kw)
        assert float(theirs) == pytest.approx(float(ours), rel=1e-5)


def test_our_encoder_takes_the_length_buckets_it_is_given():
    run = tiny_run("dpr")  # its config's eval.length_buckets are the defaults
    assert vs_torch.our_encoder(run, 128, []).length_buckets == ()      # "fixed": no buckets
    assert vs_torch.our_encoder(run, 128, [16, 48]).length_buckets == (16, 48)
    # The CPU call cap: the config's by default, or as --call_tokens says (0 = none).
    assert vs_torch.our_encoder(run, 128, []).call_tokens == run.config.eval.cpu_call_tokens > 0
    assert vs_torch.our_encoder(run, 128, [], call_tokens=0).call_tokens == 0
    assert vs_torch.call_tokens_flag("default") is None and vs_torch.call_tokens_flag("512") == 512
    with pytest.raises(UserError, match="--call_tokens"):
        vs_torch.call_tokens_flag("-1")


def test_sorted_batches_cut_rows_longest_first():
    got = vs_torch.sorted_batches(np.array([3, 9, 9, 1, 5]), 2)
    assert [b.tolist() for b in got] == [[1, 2], [4, 0], [3]]


def test_shapes_buckets_and_goals_of_the_one_run_comparison():
    assert vs_torch.parse_shapes(["32:96", "64:256"], (8, 8)) == [(32, 96), (64, 256)]
    assert vs_torch.parse_shapes([], (16, 48)) == [(16, 48)]
    for bad in (["96"], ["a:b"], ["1:96"], ["32:96", "32:96"]):
        with pytest.raises(UserError, match="--shapes"):
            vs_torch.parse_shapes(bad, (8, 8))
    assert vs_torch.export_buckets(["default"], (32, 64, 96)) == [32, 64, 96]
    assert vs_torch.export_buckets(["off"], (32, 64)) == [] == vs_torch.export_buckets([], (32,))
    assert vs_torch.export_buckets(["16", "48"], (32,)) == [16, 48]
    with pytest.raises(UserError, match="--length_buckets"):
        vs_torch.export_buckets(["fast"], (32,))

    def summary(x):
        return {"speedup": x}
    rows = vs_torch.goals({"32:96": {"train": summary(1.31), "export": {
        "vs_longest": summary(1.49), "vs_fixed": summary(2.0)}}, "64:256": {"train": summary(0.9)}})
    assert [(r["shape"], r["part"], r["met"]) for r in rows] == [
        ("32:96", "train step", True), ("32:96", "export vs peer longest", False),
        ("32:96", "export vs peer fixed", True), ("64:256", "train step", False)]
    # Other matmul operand dtypes timed in the same rounds are parts "train@DTYPE" / "export@DTYPE".
    rows = vs_torch.goals({"32:96": {"train": summary(1.0), "train@bfloat16": summary(1.4),
                                     "export@bfloat16": {"vs_longest": summary(1.6),
                                                         "vs_fixed": summary(1.2)}}})
    assert [(r["part"], r["met"]) for r in rows] == [
        ("train step", False), ("train step (bfloat16 operands)", True),
        ("export (bfloat16 operands) vs peer longest", True),
        ("export (bfloat16 operands) vs peer fixed", False)]


def test_real_length_batch_draws_right_padded_rows_from_the_pools():
    shapes = batch_shapes(4, 2, 8, 16, True)
    q_pool, p_pool = np.array([3, 5, 40]), np.array([7, 12, 16, 30])  # 40, 30: truncated
    b = vs_torch.real_length_batch(shapes, q_pool, p_pool, 2048, seed=(0, 1))
    assert {k: v.shape for k, v in b.items()} == {k: v.shape for k, v in shapes.items()}
    assert b["hard_valid"].all() and b["cf_valid"].all()
    for prefix, pool, width in (("q", q_pool, 8), ("pos", p_pool, 16), ("hard", p_pool, 16),
                                ("cf", p_pool, 16)):
        ids, mask = b[prefix + "_ids"], b[prefix + "_mask"]
        n = mask.sum(-1)
        assert set(n.ravel().tolist()) <= set(np.minimum(pool, width).tolist())
        # right-padded: the first n positions real, pad id 0 after
        assert (mask == (np.arange(width) < n[..., None])).all()
        assert (ids[mask == 0] == 0).all() and (ids[mask == 1] >= 1000).all()
    again = vs_torch.real_length_batch(shapes, q_pool, p_pool, 2048, seed=(0, 1))
    assert all((again[k] == b[k]).all() for k in b)
    other = vs_torch.real_length_batch(shapes, q_pool, p_pool, 2048, seed=(0, 2))
    assert any((other[k] != b[k]).any() for k in b if k.endswith("_mask"))
    fill = vs_torch.group_fill([b, other], vs_torch.TRAIN_GROUPS)
    assert 0 < fill["questions"]["fill"] < 1 and 0 < fill["passages"]["fill"] < 1
    assert fill["questions"]["slots"] == 8 and fill["passages"]["slots"] == 16
    lens = np.concatenate([x[p + "_mask"].sum(-1).ravel() for x in (b, other)
                           for p in ("pos", "hard", "cf")])
    assert lens.size == 2 * 4 * 4  # 2 batches x 4 questions x (pos, 2 hard, cf)
    assert fill["passages"]["mean_tokens"] == pytest.approx(lens.mean())
    assert fill["passages"]["fill"] == pytest.approx(lens.mean() / 16)
    with pytest.raises(ValueError, match="non-empty"):
        vs_torch.real_length_batch(shapes, np.array([], int), p_pool, 2048)


def test_group_fill_counts_real_tokens_over_slots():
    m = {"q_mask": np.array([[1, 1, 0, 0], [1, 0, 0, 0]]), "pos_mask": np.array([[1, 1, 1, 0]])}
    f = vs_torch.group_fill([m], {"questions": ("q",), "passages": ("pos", "hard")})
    assert f == {"questions": {"mean_tokens": 1.5, "slots": 4.0, "fill": 3 / 8},
                 "passages": {"mean_tokens": 3.0, "slots": 4.0, "fill": 3 / 4}}


def test_peer_trim_cuts_each_group_to_its_longest_row():
    b = vs_torch.real_length_batch(batch_shapes(4, 1, 8, 32, True), np.array([2, 3, 5]),
                                   np.array([6, 9, 11]), 2048, seed=0)
    t = vs_torch.peer_trim(b)
    qn = int(b["q_mask"].sum(1).max())
    pn = max(int(b[p + "_mask"].sum(-1).max()) for p in ("pos", "hard", "cf"))
    assert t["q_ids"].shape == (4, qn) and t["q_mask"].shape == (4, qn)
    assert t["pos_ids"].shape == (4, pn) and t["hard_mask"].shape == (4, 1, pn)
    assert t["cf_ids"].shape == (4, pn)  # the passage tower's inputs share one length
    assert (t["pos_ids"] == b["pos_ids"][:, :pn]).all() and t["hard_valid"] is b["hard_valid"]
    assert all(t[k].sum() == b[k].sum() for k in b if k.endswith("_mask"))  # no real token lost


def test_length_pools_tokenise_in_the_training_format_and_truncate(tmp_path):
    tok = load_tokenizer(resolve_model_dir("minilm"))
    questions, titles, texts = vs_torch.demo_world_texts(str(tmp_path), num_passages=30)
    assert len(questions) > 0 and len(texts) == 30
    q, p = vs_torch.length_pools(tok, questions, titles, texts, 8, 48)
    assert q.shape == (len(questions),) and p.shape == (30,)
    assert q.max() == 8 and 3 <= q.min()  # [CLS] question [SEP], cut at 8
    assert (p == 48).all()  # the demo's passages (~78 word pieces) cut at 48
    q, p = vs_torch.length_pools(tok, questions, titles, texts, 64, 256)
    assert 8 < q.mean() < 64 and 40 < p.mean() < 256 and p.max() < 256  # nothing cut
    wq, wtitles, wtexts = vs_torch.wiki_texts(num_passages=12, num_questions=5)
    assert len(wq) == 5 and len(wtexts) == len(wtitles) == 12
    assert all(len(t.split()) <= 100 for t in wtexts)
    with pytest.raises(UserError, match="questions and passages"):
        vs_torch.length_pools(tok, [], titles, texts, 8, 48)


def test_length_source_and_packed_row_lengths():
    assert vs_torch.length_source("auto", 32, 96) == "demo"
    assert vs_torch.length_source("auto", 64, 256) == "wiki"
    assert vs_torch.length_source("wiki", 32, 96) == "wiki"
    assert vs_torch.parse_row_lens(["3x", "288", "2x", "off", "160"], 96) == [288, 192, 160]
    assert vs_torch.parse_row_lens(["off"], 96) == [] == vs_torch.parse_row_lens([], 96)
    for bad in (["x"], ["0x"], ["0"], ["fast"]):
        with pytest.raises(UserError, match="--pack_row_len"):
            vs_torch.parse_row_lens(bad, 96)


def test_goals_name_the_packed_contenders():
    def summary(x):
        return {"speedup": x}
    rows = vs_torch.goals({"32:96": {"train": summary(1.0),
                                     "train@float32+packed288": summary(1.5),
                                     "train@bfloat16+packed288": summary(1.2)}})
    assert [(r["part"], r["met"]) for r in rows] == [
        ("train step", False), ("train step packed 288 (float32 operands)", True),
        ("train step packed 288 (bfloat16 operands)", False)]
