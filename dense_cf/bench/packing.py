"""Sequence packing throughput: real passage tokens per second of the passage tower's forward +
backward, packed rows vs padded rows, on a corpus of real passage lengths.

    python -m dense_cf.cli.wiki_corpus --out=/tmp/wiki      # the installed Wikipedia summaries
    python -m dense_cf.bench.packing --corpus=/tmp/wiki/psgs.tsv.gz --size=tiny

Passages are tokenised as training tokenises them (``inputs.tokens.tokenize_passages`` at
``max_p_len`` 256) and cut into batches of ``passages`` in corpus order. Three layouts of the
same batches, timed in one process: per round, each layout's median step over the batches
(after one warm-up call), ``--rounds`` rounds alternating the layouts' order; the median round
is reported, with every round's figure:

- ``padded``: every passage in its own row of 256 (the paper's loop without length buckets);
- ``padded_longest``: each batch cut to its longest passage rounded up to 32 (what
  ``data.length_buckets`` does to a training batch);
- ``packed``: ``inputs.packing`` rows of ``row_len`` (512), the row count fixed per run (the
  most any batch needs, so one compiled shape) and block-diagonal attention.

The step is ``value_and_grad`` of the mean squared pooled ([CLS]) embedding over the tower's
params, in ``dtype``. Reported per layout: real tokens/s, token slots/s, fill (real / slots),
and packed's speed-up over each padded layout.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf.bench.accelerator import BERT_BASE
from dense_cf.inputs import packing
from dense_cf.inputs.tokens import tokenize_passages
from dense_cf.models.bert import BertConfig
from dense_cf.models.dual_encoder import DualEncoder
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.retrieval.corpus import load_corpus

FLAGS = flags.FlagValues()
_CORPUS = flags.DEFINE_string("corpus", "", "A DPR corpus TSV (real passage lengths).",
                              flag_values=FLAGS)
_TOK = flags.DEFINE_string("tokenizer", "minilm", "Vocabulary directory or name.",
                           flag_values=FLAGS)
_SIZE = flags.DEFINE_enum("size", "tiny", ["tiny", "full"], "full: BERT-base bf16, 384 passages "
                          "a batch (a GPU); tiny: a small BERT on the CPU.", flag_values=FLAGS)
_BATCHES = flags.DEFINE_integer("batches", 4, "Batches timed per layout.", flag_values=FLAGS)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds over the layouts, alternating their order.",
                               flag_values=FLAGS)

SIZES = {
    # BERT-base layers, 4 of them: the packed/padded ratio is per layer, and a 12-layer tower
    # compiles three times too slowly for the device run's time limit
    "full": dict(bert=dict(BERT_BASE, num_layers=4), dtype="bfloat16", passages=384),
    "tiny": dict(bert=dict(vocab_size=30522, hidden_size=64, num_layers=2, num_heads=2,
                           intermediate_size=256, max_position_embeddings=512),
                 dtype="float32", passages=32),
}
MAX_P_LEN, ROW_LEN, BUCKET = 256, 512, 32


def init_params(init, rng: jax.Array) -> Any:
    """``init(rng)`` (unboxed params) on the first device, computed on the host CPU when that
    device is an accelerator (``parallel.mesh.init_sharded``: XLA:GPU compiles a BERT-base init
    for about a minute, the host in seconds)."""
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return mesh_lib.init_sharded(init, rng, jax.tree.map(lambda _: one, jax.eval_shape(init, rng)))


def _median_s(fn, args_list: Sequence[tuple]) -> float:
    jax.block_until_ready(fn(*args_list[0]))
    times = []
    for args in args_list:
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure(corpus: str, tokenizer: str, size: str = "tiny", batches: int = 4,
            rounds: int = 3, steps: int = 0) -> Iterator[dict[str, Any]]:
    """Yields one figure per layout, then the comparison (module docstring). ``steps`` is
    accepted for the levers driver's interface and ignored (the batches are the repeats)."""
    del steps
    spec = SIZES[size]
    c = load_corpus(corpus)
    p = spec["passages"]
    n = min(len(c), p * batches)
    if n < p:
        raise ValueError(f"{corpus}: {len(c)} passages, a batch needs {p}")
    tok = load_tokenizer(resolve_model_dir(tokenizer))
    ids, mask = tokenize_passages(tok, c.titles[:n], c.texts[:n], MAX_P_LEN)
    cfg = BertConfig(**{**spec["bert"], "vocab_size": max(spec["bert"]["vocab_size"],
                                                          int(ids.max()) + 1)},
                     dtype=spec["dtype"], attention_impl="dot_product", dropout_rate=0.0,
                     attention_dropout_rate=0.0)
    model = DualEncoder(cfg)
    q = jnp.ones((1, 8), jnp.int32)
    params = init_params(lambda r: nn.meta.unbox(model.init(r, q, q, q, q))["params"],
                         jax.random.key(0))
    groups = [slice(i, i + p) for i in range(0, n - p + 1, p)]
    real = [int(mask[g].sum()) for g in groups]

    def padded_step(prm, i, m):
        def loss(pp):
            e = model.apply({"params": pp}, i, m, method=model.encode_passage)
            return jnp.mean(jnp.square(e))
        return jax.value_and_grad(loss)(prm)

    def packed_step(prm, i, m, s, pos, st):
        def loss(pp):
            e = model.apply({"params": pp}, i, m, s, pos, st, method=model.encode_passage_packed)
            return jnp.mean(jnp.square(e))
        return jax.value_and_grad(loss)(prm)

    mean_real = float(np.mean(real))
    # The three layouts' step functions and batches; each compiled (first call) before timing.
    rows = max(len(packing.assign_rows(mask[g].sum(1), ROW_LEN)) for g in groups)
    packs = [packing.pack(ids[g], mask[g], ROW_LEN, num_rows=rows) for g in groups]
    longest = max(int(math.ceil(mask[g].sum(1).max() / BUCKET) * BUCKET) for g in groups)
    layouts = {
        "packed": (jax.jit(packed_step), [(params, b.ids, b.mask, b.segment_ids, b.position_ids,
                                           b.starts) for b in packs],
                   dict(slots=rows * ROW_LEN, rows=rows, row_len=ROW_LEN)),
        "padded_longest": (jax.jit(padded_step), [(params, ids[g][:, :longest],
                                                   mask[g][:, :longest]) for g in groups],
                           dict(slots=p * longest, length=longest)),
        "padded": (jax.jit(padded_step), [(params, ids[g], mask[g]) for g in groups],
                   dict(slots=p * MAX_P_LEN)),
    }
    times: dict[str, list[float]] = {name: [] for name in layouts}
    # Rounds alternate the layouts' order (shared, loaded CPUs drift); the median round counts.
    def figure(name: str, info: dict[str, Any], sec: float, done: int) -> dict[str, Any]:
        return {"layout": name, "passages": p, "batches": len(groups), "rounds": done,
               "real_tokens_per_batch": mean_real, "slots_per_batch": info["slots"],
               "fill": mean_real / info["slots"], "step_ms": sec * 1e3,
               "step_ms_rounds": [round(t * 1e3, 1) for t in times[name]],
               "real_tokens_per_s": mean_real / sec, "slots_per_s": info["slots"] / sec,
               **{k: v for k, v in info.items() if k != "slots"},
               "model": f"{cfg.num_layers}x{cfg.hidden_size} {cfg.dtype}"}

    for k in range(rounds):
        names = list(layouts) if k % 2 == 0 else list(layouts)[::-1]
        for name in names:
            fn, args, info = layouts[name]
            times[name].append(_median_s(fn, args))
            if rounds == 1:  # each layout as soon as it is timed (a time limit keeps it)
                yield figure(name, info, times[name][0], 1)
    med = {name: float(np.median(t)) for name, t in times.items()}
    if rounds > 1:
        for name, (_, _, info) in layouts.items():
            yield figure(name, info, med[name], rounds)
    yield {"layout": "compare",
           "packed_vs_padded": med["padded"] / med["packed"],
           "packed_vs_padded_longest": med["padded_longest"] / med["packed"],
           "packed_vs_padded_longest_rounds": [round(a / b, 3) for a, b in
                                               zip(times["padded_longest"], times["packed"])]}


def main(argv: Sequence[str]) -> None:
    del argv
    print(f"backend {jax.default_backend()}, device {jax.devices()[0].device_kind}")
    for fig in measure(_CORPUS.value, _TOK.value, _SIZE.value, _BATCHES.value, _ROUNDS.value):
        if fig["layout"] == "compare":
            print(f"packed real tokens/s: {fig['packed_vs_padded']:.2f}x padded (256), "
                  f"{fig['packed_vs_padded_longest']:.2f}x padded to the batch's longest "
                  f"(per round {fig['packed_vs_padded_longest_rounds']})")
        else:
            print(f"{fig['layout']:<15} fill {fig['fill']:.3f}  step {fig['step_ms']:8.1f} ms  "
                  f"real tokens/s {fig['real_tokens_per_s']:10.0f}  ({fig['model']}, "
                  f"{fig['passages']} passages x {fig['batches']} batches)")


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
