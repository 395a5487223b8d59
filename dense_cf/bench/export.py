"""Export throughput: ``python -m dense_cf.bench.export [--model minilm] [--passages 4096]``.

Encodes synthetic-benchmark passages with an untrained run built from ``--model`` through the
same ``export.export_passages`` path the evaluation uses, and prints passages/s (encoding
only, after a warm-up batch has compiled), tokenisation share and peak RSS.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time

import jax
from absl import flags
from flax import linen as nn

from dense_cf.cli import _app
from dense_cf.configs.base import base_config
from dense_cf.models.bert import axis_rules_for
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.synthetic import generate as synthetic
from dense_cf.train import run as loop
from dense_cf.train.state import make_optimizer

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_MODEL = flags.DEFINE_string("model", "minilm", "Model name/dir, or 'tiny'.", flag_values=FLAGS)
_N = flags.DEFINE_integer("passages", 4096, "Passages to encode.", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("batch_size", 128, "Encoding batch size.", flag_values=FLAGS)
_LP = flags.DEFINE_integer("max_p_len", 96, "Passage length (the demo's).", flag_values=FLAGS)
_DTYPE = flags.DEFINE_string("dtype", "float32", "Compute dtype.", flag_values=FLAGS)


def main(argv) -> None:
    del argv


    cfg = base_config()
    cfg.model.name_or_path = _MODEL.value
    cfg.model.dtype = _DTYPE.value
    cfg.data.max_p_len = _LP.value
    mesh = mesh_lib.make_mesh(-1, 1)
    model, hf_params, tok_dir = loop.build_model(cfg)
    rules = axis_rules_for(model.config, 1)
    tx, _ = make_optimizer(cfg.optim, 10)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = loop.init_state(cfg, model, hf_params, tx, mesh, rules, jax.random.key(0))
    run = loop.Run(config=cfg, model=model, params=state.params, tokenizer=load_tokenizer(tok_dir),
                   step=0, mesh=mesh, rules=rules)
    with tempfile.TemporaryDirectory() as tmp:
        synthetic.generate(os.path.join(tmp, "syn"), num_passages=max(_N.value, 300), seed=0)
        corpus = load_corpus(os.path.join(tmp, "syn", "psgs_synth.tsv"))
        rows = list(corpus.rows())[:_N.value]
        encoder = export.Encoder(run, _BATCH.value)
        # Warm-up: compile on one batch outside the timed region.
        export.export_passages(run, rows[:_BATCH.value], os.path.join(tmp, "warm"),
                               shard_size=_BATCH.value, encoder=encoder)
        t0 = time.perf_counter()
        ids, mask = export.tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                             _LP.value)
        tok_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        m = export.export_passages(run, rows, os.path.join(tmp, "out"), shard_size=1024,
                                   encoder=encoder)
        total_s = time.perf_counter() - t0
    out = {"model": _MODEL.value, "devices": jax.device_count(), "passages": m["count"],
           "max_p_len": _LP.value, "batch_size": encoder.batch_size, "dtype": _DTYPE.value,
           "export_s": round(total_s, 2), "passages_per_s": round(m["count"] / total_s, 1),
           "tokenize_share": round(tok_s / total_s, 3),
           "mean_tokens": round(float(mask.sum(1).mean()), 1),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    for k, v in out.items():
        print(f"{k:>16}: {v}")


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
