"""bench.packed_step end to end at tiny size: every variant runs the loop's step on the same
batches, packing removes padding, and a new batch shape is compiled, not timed."""

from dense_cf.bench import packed_step


def test_packed_step_times_every_variant_on_the_same_batches(tmp_path):
    cfg = packed_step.config_for("picl", str(tmp_path), model="tiny", max_q_len=32, max_p_len=128,
                                 global_batch=8)
    cfg.data.synthetic.num_passages = 120
    cfg.model.tiny_hidden, cfg.model.tiny_layers, cfg.model.tiny_heads = 32, 1, 2
    s = packed_step.measure(cfg, [192], rows_multiple=1, rounds=3)
    assert set(s) == {"padded", "packed 192"}
    for k, v in s.items():
        assert v["shapes"] >= 1 and len(v["compile_s"]) == v["shapes"]
        assert v["timed"] + v["shapes"] == 3  # every round ran; only repeated shapes are timed
    assert s["padded"]["padding_removed"] == 0.0 and 0 < s["packed 192"]["padding_removed"] < 1
