"""Export throughput: ``python -m dense_cf.bench.export [--model minilm] [--passages 4096]``.

Encodes passages with an untrained run built from ``--model`` through the same
``export.export_passages`` path the evaluation uses, and prints passages/s (encoding only, after
every padded length has compiled), tokenisation share, padding removed and peak RSS. Passages
come from ``--corpus`` (a DPR corpus TSV, e.g. ``python -m dense_cf.cli.wiki_corpus``'s real
lengths) or, by default, a synthetic benchmark.

``--token_table`` exports from the pre-tokenised corpus (``retrieval.token_table``, built once
beside the TSV; its open/build and lookup times are printed apart), ``--shard_size`` sets the
shard rows, ``--token_budget`` / ``--in_flight`` / ``--background_write`` the encoder's batch
plan, batches in flight and shard writer (retrieval.export), ``--replicate`` repeats a small
corpus (ids rewritten) up to ``--passages``. Besides the end-to-end rate it prints
``encode_only_*``: the encoder over the same rows already tokenised in memory (no tokenisation,
no shard files), with its MFU.

``--compare`` times full padding (``eval.length_buckets=()``, every row at ``--max_p_len``)
against length buckets (``--length_buckets``) in one command, alternating A/B ``--repeats``
times, and prints both medians, their ratio, the largest difference between the two exports'
vectors, and the share of passage tokens training batches of this corpus would not compute
with ``data.length_buckets`` set to the same buckets (docs/scale.md, "Length-aware encoding").

``--sweep=ARM,ARM,...`` times encoder settings against each other in one command on the same
pre-tokenised rows (encoding only), alternating the arms' order every round (``--repeats``
rounds of all ``--passages``): an arm is ``cN`` (CPU calls of at most N token slots per device,
``eval.cpu_call_tokens``; ``c0`` = ``--batch_size`` rows a call), optionally ``+pR`` (packed rows
of R tokens, ``eval.pack_row_len``), e.g. ``--sweep=c0,c512,c1024,c2048,c1024+p256``. It prints
each arm's median passages/s, its ratio to the first arm with the per-round ratios, and the
largest difference of its vectors from the first arm's (docs/scale.md "Inference calls on the
CPU").
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time

import jax
import numpy as np
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf.bench import accelerator as accel
from dense_cf.bench.common import cpu_description
from dense_cf.bench.rss import peak_rss_mb
from dense_cf.configs.base import base_config
from dense_cf.datasets.formats import write_corpus_tsv
from dense_cf.files import UserError, write_json
from dense_cf.inputs import buckets as bucket_lib
from dense_cf.models.bert import axis_rules_for
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.retrieval import export, token_table
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.synthetic import generate as synthetic
from dense_cf.train import run as loop
from dense_cf.train.state import make_optimizer

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_MODEL = flags.DEFINE_string("model", "minilm", "Model name/dir, or 'tiny'.", flag_values=FLAGS)
_TOK = flags.DEFINE_string("tokenizer", "", "Vocabulary directory or name (model.tokenizer; '' = "
                           "the model's own, MiniLM's for 'tiny').", flag_values=FLAGS)
_N = flags.DEFINE_integer("passages", 4096, "Passages to encode.", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("batch_size", 128, "Encoding batch size.", flag_values=FLAGS)
_LP = flags.DEFINE_integer("max_p_len", 96, "Passage length (the demo's).", flag_values=FLAGS)
_DTYPE = flags.DEFINE_string("dtype", "float32", "Compute dtype.", flag_values=FLAGS)
_CORPUS = flags.DEFINE_string("corpus", "", "A DPR corpus TSV (id, text, title); its first "
                              "--passages rows. Default: a synthetic benchmark.", flag_values=FLAGS)
_BUCKETS = flags.DEFINE_string("length_buckets", "default", "Encoder length buckets: 'default' "
                               "(eval.length_buckets), 'off', or a comma list.", flag_values=FLAGS)
_COMPARE = flags.DEFINE_bool("compare", False, "Time full padding against --length_buckets, "
                             "alternating A/B.", flag_values=FLAGS)
_REPEATS = flags.DEFINE_integer("repeats", 3, "A/B rounds of --compare.", flag_values=FLAGS)
_TINY = flags.DEFINE_list("tiny", [], "With --model=tiny: hidden,layers,heads of the random BERT "
                          "(768,12,12 = BERT-base); default the base config's.", flag_values=FLAGS)
_ATTN = flags.DEFINE_string("attention_impl", "", "model.attention_impl ('' = the base "
                            "config's).", flag_values=FLAGS)
_JSON = flags.DEFINE_string("out", "", "Also write the result as JSON here.", flag_values=FLAGS)
_SHARD = flags.DEFINE_integer("shard_size", 1024, "Rows per export shard (production: 100k; "
                             "small shards add per-shard host work).", flag_values=FLAGS)
_TABLE = flags.DEFINE_bool("token_table", False, "Export from the pre-tokenised table beside the "
                           "corpus (retrieval.token_table; built first if missing, its build "
                           "time reported apart).", flag_values=FLAGS)
_REPLICATE = flags.DEFINE_bool("replicate", False, "When the corpus has fewer than --passages "
                               "rows, repeat it with ids rewritten (id~k) up to --passages.",
                               flag_values=FLAGS)
_BUDGET = flags.DEFINE_integer("token_budget", 0, "Tokens per batch at each length bucket "
                              "(export.plan_token_batches; 0: --batch_size rows at every length).",
                              flag_values=FLAGS)
_IN_FLIGHT = flags.DEFINE_integer("in_flight", 2, "Batches dispatched before the oldest is "
                                  "collected.", flag_values=FLAGS)
_BG = flags.DEFINE_bool("background_write", False, "Write shards on a background thread.",
                        flag_values=FLAGS)
_SWEEP = flags.DEFINE_list("sweep", [], "Encoder arms timed against each other: cN[+pR] "
                           "(module docstring).", flag_values=FLAGS)
_TRAIN_BATCH = flags.DEFINE_integer("train_rows", 48, "--compare: passage rows of a training "
                                    "batch (global_batch x (1 + hard + cf)) for the training "
                                    "padding share.", flag_values=FLAGS)


def _buckets(value: str, default) -> tuple[int, ...]:
    if value == "default":
        return tuple(default)
    if value == "off":
        return ()
    return tuple(int(x) for x in value.split(",") if x.strip())


def _warm_up(encoder: export.Encoder, max_len: int) -> None:
    """Compiles every padded length the encoder can use (one row at each bucket length)."""
    for length in bucket_lib.bucket_lengths(encoder.length_buckets, max_len):
        mask = np.zeros((1, max_len), np.int32)
        mask[0, :length] = 1
        encoder.passages(mask, mask)


def train_padding_share(lengths: np.ndarray, rows: int, boundaries, max_len: int, *,
                        batches: int = 1000, seed: int = 0) -> dict:
    """Share of passage tokens not computed when training batches of ``rows`` passages drawn
    uniformly from rows of these token ``lengths`` are cut to ``boundaries``
    (``inputs.buckets.trim_batch``), and how often each bucket is used."""
    r = np.random.default_rng(seed)
    tokens = at_max = 0.0
    used: dict[int, int] = {}
    buckets = bucket_lib.bucket_lengths(boundaries, max_len)
    for _ in range(batches):
        cut = bucket_lib.fit_bucket(int(np.max(r.choice(lengths, rows))), buckets)
        used[cut] = used.get(cut, 0) + 1
        tokens, at_max = tokens + rows * cut, at_max + rows * max_len
    return {"padding_removed": round(bucket_lib.padding_removed(tokens, at_max), 3),
            "bucket_use": {k: used[k] for k in sorted(used)}}


def replicate_rows(rows: list, n: int) -> list:
    """``rows`` repeated to ``n`` rows; copy k > 0 has ids ``id~k`` (ids stay unique)."""
    out = []
    k = 0
    while len(out) < n:
        out.extend((pid if k == 0 else f"{pid}~{k}", text, title) for pid, text, title in rows)
        k += 1
    return out[:n]


def _compare(run, rows, tmp: str, buckets: tuple[int, ...]) -> dict:
    """Alternating A (full padding) / B (buckets) exports of ``rows``; medians and their ratio."""
    arms = {"fixed": export.Encoder(run, _BATCH.value, length_buckets=()),
            "bucketed": export.Encoder(run, _BATCH.value, length_buckets=buckets)}
    for enc in arms.values():
        _warm_up(enc, _LP.value)
    rates: dict[str, list[float]] = {a: [] for a in arms}
    removed, vectors = {}, {}
    for i in range(_REPEATS.value):
        for arm, enc in arms.items():
            out = os.path.join(tmp, f"{arm}-{i}")
            t0 = time.perf_counter()
            m = export.export_passages(run, rows, out, shard_size=1024, encoder=enc,
                                       dtype="float32")
            rates[arm].append(m["count"] / (time.perf_counter() - t0))
            removed[arm] = m["padding_removed"]
            vectors[arm] = export.load_embeddings(out)
            print(f"round {i} {arm:>8}: {rates[arm][-1]:.1f} passages/s", flush=True)
    med = {a: statistics.median(v) for a, v in rates.items()}
    ids, mask = export.tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                         _LP.value)
    return {
        "fixed_passages_per_s": [round(x, 1) for x in rates["fixed"]],
        "bucketed_passages_per_s": [round(x, 1) for x in rates["bucketed"]],
        "fixed_median": round(med["fixed"], 1), "bucketed_median": round(med["bucketed"], 1),
        "speedup_median": round(med["bucketed"] / med["fixed"], 2),
        "speedup_per_round": [round(b / a, 2) for a, b in zip(rates["fixed"], rates["bucketed"])],
        "buckets": bucket_lib.bucket_lengths(buckets, _LP.value),
        "padding_removed": round(removed["bucketed"], 3),
        "fixed_padding_removed": round(removed["fixed"], 3),
        "mean_tokens": round(float(mask.sum(1).mean()), 1),
        "max_abs_diff": float(np.abs(vectors["fixed"] - vectors["bucketed"]).max()),
        "max_rel_diff": float((np.linalg.norm(vectors["fixed"] - vectors["bucketed"], axis=1)
                               / np.linalg.norm(vectors["fixed"], axis=1)).max()),
        "train_padding": train_padding_share(bucket_lib.row_lengths(mask), _TRAIN_BATCH.value,
                                             buckets, _LP.value)}


def parse_arm(arm: str) -> tuple[int, int]:
    """``cN[+pR]`` -> (call_tokens N, pack_row_len R or 0); a UserError names a bad arm."""
    m = re.fullmatch(r"c(\d+)(?:\+p(\d+))?", arm.strip())
    if not m:
        raise UserError(f"--sweep takes arms like c1024 or c1024+p256, got {arm!r}")
    return int(m.group(1)), int(m.group(2) or 0)


def _sweep(run, rows, buckets: tuple[int, ...], arms: list[str]) -> dict:
    """Every arm's encoder over the same tokenised rows, the arms' order rotated per round."""
    ids, mask = export.tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                         _LP.value)
    encoders = {}
    for arm in arms:
        call, pack = parse_arm(arm)
        encoders[arm] = export.Encoder(run, _BATCH.value, length_buckets=buckets,
                                       call_tokens=call, pack_row_len=pack)
    vectors = {arm: enc.passages(ids, mask) for arm, enc in encoders.items()}  # compiles
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for r in range(_REPEATS.value):
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        for arm in order:
            t0 = time.perf_counter()
            encoders[arm].passages(ids, mask)
            times[arm].append(time.perf_counter() - t0)
        print(f"round {r}: " + ", ".join(f"{a} {len(rows) / times[a][-1]:.1f}/s" for a in arms),
              flush=True)
    first = arms[0]
    out = {"cpu": cpu_description(), "arms": {}}
    for arm in arms:
        med = statistics.median(times[arm])
        out["arms"][arm] = {
            "call_tokens": encoders[arm].call_tokens, "pack_row_len": encoders[arm].pack_row_len,
            "passages_per_s": round(len(rows) / med, 1),
            "speedup_vs_first": round(statistics.median(times[first]) / med, 3),
            "per_round_vs_first": [round(a / b, 3) for a, b in zip(times[first], times[arm])],
            "max_abs_diff_vs_first": float(np.abs(vectors[arm] - vectors[first]).max())}
    return out


def main(argv) -> None:
    del argv


    cfg = base_config()
    cfg.model.name_or_path = _MODEL.value
    cfg.model.dtype = _DTYPE.value
    cfg.model.tokenizer = _TOK.value
    cfg.data.max_p_len = _LP.value
    if _TINY.value:
        cfg.model.tiny_hidden, cfg.model.tiny_layers, cfg.model.tiny_heads = map(int, _TINY.value)
    if _ATTN.value:
        cfg.model.attention_impl = _ATTN.value
    mesh = mesh_lib.make_mesh(-1, 1)
    model, hf_params, tok_dir = loop.build_model(cfg)
    rules = axis_rules_for(model.config, 1)
    tx, _ = make_optimizer(cfg.optim, 10)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = loop.init_state(cfg, model, hf_params, tx, mesh, rules, jax.random.key(0))
    run = loop.Run(config=cfg, model=model, params=state.params, tokenizer=load_tokenizer(tok_dir),
                   step=0, mesh=mesh, rules=rules)
    buckets = _buckets(_BUCKETS.value, cfg.eval.length_buckets)
    with tempfile.TemporaryDirectory() as tmp:
        if _CORPUS.value:
            corpus = load_corpus(_CORPUS.value)
        else:
            synthetic.generate(os.path.join(tmp, "syn"), num_passages=max(_N.value, 300), seed=0)
            corpus = load_corpus(os.path.join(tmp, "syn", "psgs_synth.tsv"))
        corpus_path = corpus.path
        rows = list(corpus.rows())[:_N.value]
        if _REPLICATE.value and len(rows) < _N.value:
            rows = replicate_rows(rows, _N.value)
            corpus_path = os.path.join(tmp, "replicated.tsv")
            write_corpus_tsv(corpus_path, rows)
        head = {"model": _MODEL.value, "devices": jax.device_count(), "passages": len(rows),
                "corpus": _CORPUS.value or "synthetic", "max_p_len": _LP.value,
                "batch_size": _BATCH.value, "dtype": _DTYPE.value, "shard_size": _SHARD.value,
                "token_table": _TABLE.value, "replicated": len(rows) > len(corpus),
                "token_budget": _BUDGET.value, "in_flight": _IN_FLIGHT.value,
                "background_write": _BG.value}
        if _SWEEP.value:
            res = {**head, **_sweep(run, rows, buckets, [a.strip() for a in _SWEEP.value])}
            for k, v in res.items():
                if k != "arms":
                    print(f"{k:>24}: {v}")
            for arm, v in res["arms"].items():
                print(f"{arm:>24}: " + ", ".join(f"{k} {x}" for k, x in v.items()))
            if _JSON.value:
                write_json(_JSON.value, res)
            return
        if _COMPARE.value:
            for k, v in {**head, **_compare(run, rows, tmp, buckets)}.items():
                print(f"{k:>24}: {v}")
            return
        encoder = export.Encoder(run, _BATCH.value, length_buckets=buckets,
                                 token_budget=_BUDGET.value, in_flight=_IN_FLIGHT.value)
        _warm_up(encoder, _LP.value)  # compiles outside the timed region
        t0 = time.perf_counter()
        ids, mask = export.tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                             _LP.value)
        tok_s = time.perf_counter() - t0
        tokenize, extra = None, {}
        if _TABLE.value:
            t0 = time.perf_counter()
            table = token_table.open_table(corpus_path, run.tokenizer, _LP.value)
            extra["token_table_open_s"] = round(time.perf_counter() - t0, 2)
            t0 = time.perf_counter()
            t_ids, t_mask = table.tokenize(rows)
            extra["token_table_lookup_s"] = round(time.perf_counter() - t0, 3)
            extra["token_table_equal"] = bool(np.array_equal(t_ids, ids)
                                              and np.array_equal(t_mask, mask))
            tokenize = table.tokenize
        t0 = time.perf_counter()
        m = export.export_passages(run, rows, os.path.join(tmp, "out"), shard_size=_SHARD.value,
                                   encoder=encoder, tokenize=tokenize,
                                   background_write=_BG.value)
        total_s = time.perf_counter() - t0
        # Encoding alone: the same rows already tokenised in memory, no shard files.
        t0 = time.perf_counter()
        encoder.passages(ids, mask)
        encode_s = time.perf_counter() - t0
    out = {**head, **extra, "batch_size": encoder.batch_size,
           "length_buckets": bucket_lib.bucket_lengths(buckets, _LP.value),
           "padding_removed": round(m["padding_removed"], 3), "export_s": round(total_s, 2),
           "passages_per_s": round(m["count"] / total_s, 1),
           # the share of the export's time its tokenisation takes alone (with the table: lookups)
           "tokenize_share": round(extra.get("token_table_lookup_s", tok_s) / total_s, 3),
           "tokenize_s": round(tok_s, 2),
           "encode_only_s": round(encode_s, 2),
           "encode_only_passages_per_s": round(len(rows) / encode_s, 1),
           "mean_tokens": round(float(mask.sum(1).mean()), 1),
           "peak_rss_mb": peak_rss_mb()}
    # Model FLOPs at each row's bucket length (what length-bucketed encoding must compute; rows
    # padded further by their batch-mates are not counted), against the chip's bf16 peak.
    lengths = bucket_lib.row_lengths(mask)
    cuts = bucket_lib.bucket_lengths(buckets, _LP.value)
    flops = sum(accel.encoder_flops(model.config, 1, bucket_lib.fit_bucket(int(n), cuts))
                for n in lengths)
    peak, peak_name = accel.peak_bf16_flops(jax.devices()[0].device_kind)
    out.update({"device": jax.devices()[0].device_kind, "model_tflops_per_s":
                round(flops / total_s / 1e12, 2),
                "mfu": round(flops / total_s / peak, 4) if peak else None, "peak": peak_name,
                "encode_only_model_tflops_per_s": round(flops / encode_s / 1e12, 2),
                "encode_only_mfu": round(flops / encode_s / peak, 4) if peak else None})
    for k, v in out.items():
        print(f"{k:>18}: {v}", flush=True)
    if _JSON.value:
        write_json(_JSON.value, out)


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
