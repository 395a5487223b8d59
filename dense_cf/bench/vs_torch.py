"""Our train step and passage export against the PyTorch ones a DPR/Tevatron user runs, measured
in one command: ``python -m dense_cf.bench.vs_torch`` (prints numbers; no asserts; docs/scale.md
"The PyTorch peer").

The peer is what such a user writes: Hugging Face ``BertModel`` × 2 (question and passage
towers) loaded from the same checkpoint as ours (``--model``, MiniLM by default), pooler-free
[CLS] vectors, the contrastive loss of docs/method.md §3 (in-batch + hard negatives and, with
``--counterfactual``, PiCL's counterfactual terms with ``config.loss``'s weights), AdamW and
global-norm clipping (``config.optim``), ``torch.set_num_threads`` = the core count. Ours is the
jitted train step the loop runs (``train.step.make_train_step``), at identical shapes.

1. Numerics first: both steps run twice without dropout from the same weights on the same
   batch (the first training batch, each side in its own layout: padded, packed, trimmed); the
   losses of step 0 and step 1 (after one AdamW update) and step 0's gradient norm must agree
   within ``--tol`` (relative), else the command stops: timing two different
   functions means nothing.
2. Train step: ``--rounds`` rounds, each one step of every contender in an order that rotates
   per round (A/B, B/A, ...), dropout on as in training; medians, the ratio of medians and an
   exact sign test over the paired rounds. Round r steps every contender on training batch
   r mod N. ``--lengths=real`` (default): rows of real token lengths, drawn (seeded,
   :func:`real_length_batch`) from real text tokenised with our tokenizer in the training
   format before any timing (:func:`length_pools`) and truncated at Lq / Lp like the input
   pipeline; ``--length_source`` auto takes the demo world at the demo's shape 32:96 (its
   training questions and corpus, generated in-process as ``make demo`` does) and the installed
   Wikipedia summaries at any other (100-word passages; each summary's first sentence as a
   question). Word pieces are random (the compute depends on the masks only). Ours pads every
   row to Lq / Lp (the loop's default); the peer takes each batch cut to its longest question
   and its longest passage (HF's ``padding="longest"``, :func:`peer_trim`); the header prints
   each layout's mean length and fill (real tokens / token slots). ``--lengths=full``: every
   row full length, one batch (the peer's padding then equals ours). ``--pack_row_len``
   (default 160 tokens a row) adds "ours packed": the same batches packed before the rounds
   exactly as the loop packs at ``data.pack_row_len`` (``train.loop.sequence_packer``:
   ``inputs.packing.pack_batch`` per data shard, each batch's row counts rounded up to
   ``data.pack_rows_multiple``; every distinct shape compiled before the rounds); the timed step
   is the jitted step on the packed batch, because the loop packs on the host while the device
   runs the previous step, like the rest of the input pipeline; the host packing time per batch
   is timed apart and printed.
3. Export: batches of ``--export_batch`` passages of the real-length corpus (``--corpus``, default
   the first passages of the installed Wikipedia summaries, ``cli.wiki_corpus``), tokenised once
   with our input format (tokenisation is outside every timing); ours through
   ``retrieval.export.Encoder`` with the config's length buckets (the export path;
   ``--length_buckets`` overrides, ``off`` = fixed padding; on a CPU its calls are capped at
   ``eval.cpu_call_tokens`` token slots, ``--call_tokens`` overrides, 0 = batches of
   ``--export_batch`` rows), the peer with fixed padding and with longest-in-batch padding (the
   goals' peer: what DPR's and Tevatron's encode scripts do), and "peer sorted": the peer tuned
   as a user could, each slice's rows sorted by length and cut into batches of
   ``--peer_sorted_batch`` rows, each padded to its longest (reported, not a goal); round r
   encodes corpus slice r with every contender. Embeddings of the first slice are compared
   (max abs difference).

Every part runs at each ``--shapes`` (default the demo's Lq 32 / Lp 96 and DPR's 64 / 256) in
one command, which prints the CPU (model name, family, model, AVX-512, bfloat16 dot support),
the load average at start and end, a table of both shapes and whether issue 46's goals are met
(train step ≥ 1.3×, export ≥ 1.5× the peer; :func:`goals`). ``--matmul_dtypes=float32,bfloat16``
adds our step and export with bfloat16 matmul operands (``model.matmul_dtype``) as a further
contender in the same rounds, against the same peer timings.

The peer needs the optional extra: ``pip install -e ".[peer]"`` (the CPU torch wheel first:
``pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu``). torch and
transformers are imported inside functions only; tests never need them.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf import methods
from dense_cf.bench.common import batch_shapes, cpu_description, jitted_train_step, random_batch
from dense_cf.configs.base import base_config
from dense_cf.configs.presets import demo_config
from dense_cf.datasets import wiki_offline
from dense_cf.datasets.formats import iter_biencoder
from dense_cf.eval.stats import mcnemar_exact
from dense_cf.experiment import maybe_generate_synthetic
from dense_cf.files import UserError
from dense_cf.inputs import buckets as bucket_lib
from dense_cf.inputs import packing
from dense_cf.inputs.tokens import tokenize_passages, tokenize_questions
from dense_cf.methods.base import DPR_LENGTH_GROUPS
from dense_cf.methods.contrastive import DPR_LOSS, PICL_LOSS
from dense_cf.models.bert import DTYPES
from dense_cf.models.hf import resolve_model_dir
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.text.sentences import split_sentences
from dense_cf.train import run as loop
from dense_cf.train.loop import batch_shape_key, sequence_packer
from dense_cf.train.step import make_eval_step

__all__ = ["PACKED_GROUPS", "PEER_INSTALL", "TRAIN_GROUPS", "alternate", "call_tokens_flag",
           "demo_world_texts", "export_buckets", "goals", "group_fill", "import_peer",
           "length_pools", "length_source", "our_encoder", "pack_batches", "paired_summary",
           "parse_row_lens", "parse_shapes", "peer_trim", "real_length_batch", "sorted_batches",
           "step_config", "trim_to_longest", "wiki_texts"]

PEER_INSTALL = ('pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && '
                'pip install -e ".[peer]"')

FLAGS = flags.FlagValues()  # its own: tests import several benchmarks in one process
_MODEL = flags.DEFINE_string("model", "minilm", "Checkpoint both sides load (HF BERT dir or 'minilm').",
                             flag_values=FLAGS)
_PARTS = flags.DEFINE_list("parts", ["train", "export"], "What to measure: train, export.",
                           flag_values=FLAGS)
_FORWARD = flags.DEFINE_bool("forward", False, "Also time each side's forward pass of the training "
                             "batch alone (no dropout, no gradient) in the same rounds: where the "
                             "step's time goes.", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 16, "Questions per step.", flag_values=FLAGS)
_SHAPES = flags.DEFINE_list(
    "shapes", ["32:96", "64:256"], "Question:passage lengths measured in one run, each with its "
    "own train and export rounds (default: the demo's 32:96 and DPR's 64:256); empty: "
    "--max_q_len:--max_p_len.", flag_values=FLAGS)
_LQ = flags.DEFINE_integer("max_q_len", 32, "Question length (with --shapes=).", flag_values=FLAGS)
_LP = flags.DEFINE_integer("max_p_len", 96, "Passage length (with --shapes=).", flag_values=FLAGS)
_HARD = flags.DEFINE_integer("num_hard", 1, "Hard negatives per question.", flag_values=FLAGS)
_CF = flags.DEFINE_bool("counterfactual", True, "PiCL step: one counterfactual per question.",
                        flag_values=FLAGS)
_ROUNDS = flags.DEFINE_integer("rounds", 12, "Timed train-step rounds (one step per side each).",
                               flag_values=FLAGS)
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed steps per side after compilation.",
                               flag_values=FLAGS)
_ATTN = flags.DEFINE_enum("attention_impl", base_config().model.attention_impl,
                          ["einsum", "dot_product", "xla"],
                          "Our attention kernel (model.attention_impl; default the config's).",
                          flag_values=FLAGS)
_MATMUL = flags.DEFINE_list(
    "matmul_dtypes", ["float32"],
    "Our matmul operand dtypes (model.matmul_dtype), each a contender in the same rounds against "
    "the same peer: 'float32,bfloat16' also times bfloat16 operands with float32 sums "
    "(docs/scale.md \"bfloat16 operands on the CPU\"; its numerics check uses --tol_mixed). "
    "The first is 'ours'; the others are reported as parts 'train@DTYPE' / 'export@DTYPE'.",
    flag_values=FLAGS)
_TOL_MIXED = flags.DEFINE_float(
    "tol_mixed", 2e-2, "Relative tolerance of the numerics check with bfloat16 operands (8 "
    "significant bits: the loss and gradient norm move by ~1e-3).", flag_values=FLAGS)
_TORCH_ATTN = flags.DEFINE_string("torch_attention", "sdpa",
                                  "transformers attn_implementation of the peer (sdpa | eager).",
                                  flag_values=FLAGS)
_THREADS = flags.DEFINE_integer("threads", 0, "torch threads (0 = os.cpu_count()).", flag_values=FLAGS)
_TOL = flags.DEFINE_float("tol", 1e-3, "Relative tolerance of the numerics check.", flag_values=FLAGS)
_CORPUS = flags.DEFINE_string("corpus", "", "Corpus TSV for export ('' = the wiki summaries).",
                              flag_values=FLAGS)
_EXPORT_BATCH = flags.DEFINE_integer("export_batch", 128, "Export batch size.", flag_values=FLAGS)
_EXPORT_ROUNDS = flags.DEFINE_integer("export_rounds", 6, "Export rounds (one corpus slice each).",
                                      flag_values=FLAGS)
_EXPORT_BATCHES = flags.DEFINE_integer("export_batches", 2, "Batches per export round.",
                                       flag_values=FLAGS)
_BUCKETS = flags.DEFINE_list(
    "length_buckets", ["default"],
    "Our export's length buckets: 'default' = the config's eval.length_buckets (what an export "
    "runs), 'off' (or empty) = fixed padding to max_p_len, or a list such as 32,64,96.",
    flag_values=FLAGS)
_CALL_TOKENS = flags.DEFINE_string(
    "call_tokens", "default",
    "Our export's token slots per device per encoder call on a CPU: 'default' = the config's "
    "eval.cpu_call_tokens, 0 = --export_batch rows a call (no cap), or an integer.",
    flag_values=FLAGS)
_PEER_SORTED_BATCH = flags.DEFINE_integer(
    "peer_sorted_batch", 16, "Rows per batch of the 'peer sorted' export contender (rows sorted "
    "by length, each batch padded to its longest); 0 = leave it out.", flag_values=FLAGS)
_LENGTHS = flags.DEFINE_enum(
    "lengths", "real", ["real", "full"],
    "Token lengths of the training batches' rows. real: drawn from real tokenised text "
    "(--length_source), right-padded to max_q_len/max_p_len, the peer cut to each batch's "
    "longest question and passage (HF padding='longest'); full: every row full length (the "
    "peer's padding then equals ours).", flag_values=FLAGS)
_LENGTH_SOURCE = flags.DEFINE_enum(
    "length_source", "auto", ["auto", "demo", "wiki"],
    "Where --lengths=real draws lengths: demo = the demo world's training questions and "
    "passages (generated in-process, ~2 s), wiki = the installed Wikipedia summaries (100-word "
    "passages; their first sentences as questions); auto = demo at the demo's shape 32:96, "
    "wiki at any other.", flag_values=FLAGS)
_LENGTH_SEED = flags.DEFINE_integer("length_seed", 0, "Seed of the drawn lengths (--lengths=real).",
                                    flag_values=FLAGS)
_TRAIN_BATCHES = flags.DEFINE_integer(
    "train_batches", 0, "Distinct training batches with --lengths=real: round r steps every "
    "contender on batch r mod N (0 = --rounds: one per round).", flag_values=FLAGS)
_PACK_ROW_LEN = flags.DEFINE_list(
    "pack_row_len", ["160"],
    "Row lengths of the 'ours packed' contenders (data.pack_row_len, packed as the training "
    "loop packs, train.loop.sequence_packer): tokens, or Nx = N * max_p_len; several = one "
    "contender each; off = none. A group's rows are never shorter than its padded length. "
    "Default 160: two of the demo's ~78-token passages or ten of its ~16-token questions a "
    "row; at 64:256 questions in rows of 160, passages in rows of 256.", flag_values=FLAGS)
_JSON = flags.DEFINE_string("json_out", "", "Also write the figures to this JSON file.",
                            flag_values=FLAGS)


# ------------------------------------------------------------------ pure pieces (tested)

def alternate(contenders: Sequence[tuple[str, Callable[[int], Any]]], rounds: int, *,
              on_round: Callable[[int, dict[str, float]], Any] | None = None
              ) -> tuple[dict[str, list[float]], dict[str, list[float]], list[list[str]]]:
    """Runs every contender once per round, in an order rotated by the round (AB, BA, ... for
    two; ABC, BCA, CAB for three) so drift in the machine's load hits each side alike.

    ``fn(r)`` does round r's work and returns when it is finished (results blocked on). Returns
    ``({name: [wall seconds per round]}, {name: [process CPU seconds per round]}, [the order of
    each round])``; CPU seconds (all threads) show how much of the wall time a shared machine
    took away. ``on_round(r, {name: wall seconds})`` is called after each round (progress).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    names = [n for n, _ in contenders]
    if len(set(names)) != len(names):
        raise ValueError(f"contender names must be distinct, got {names}")
    times: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    orders = []
    k = len(contenders)
    for r in range(rounds):
        order = [contenders[(r + j) % k] for j in range(k)]
        orders.append([n for n, _ in order])
        for name, fn in order:
            t0, c0 = time.perf_counter(), time.process_time()
            fn(r)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
        if on_round is not None:
            on_round(r, {n: times[n][-1] for n in names})
    return times, cpu, orders


def paired_summary(ours: Sequence[float], peer: Sequence[float], work: float = 1.0
                   ) -> dict[str, Any]:
    """Paired timings of one comparison (seconds per round, the same work per round).

    ``speedup`` = median(peer) / median(ours) (> 1: ours is faster); ``round_ratio_median`` the
    median of the per-round ratios; ``sign_test``: rounds ours was faster, rounds the peer was,
    and the exact two-sided binomial p-value (``eval.stats.mcnemar_exact`` over the pairs; a tie
    counts for neither). ``*_per_s`` = ``work`` / median seconds.
    """
    a = np.asarray(ours, float)
    b = np.asarray(peer, float)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two equal-length non-empty timing lists, got {a.shape} and {b.shape}")
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("timings must be positive seconds")
    med_a, med_b = float(np.median(a)), float(np.median(b))
    test = mcnemar_exact(a < b, b < a)
    return {"rounds": int(a.size), "ours_median_s": med_a, "peer_median_s": med_b,
            "ours_per_s": work / med_a, "peer_per_s": work / med_b,
            "speedup": med_b / med_a, "round_ratio_median": float(np.median(b / a)),
            "sign_test": {"ours_faster": test["b10"], "peer_faster": test["b01"],
                          "p_value": test["p_value"]}}


def trim_to_longest(ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A right-padded batch cut to its longest row (longest-in-batch padding, HF's
    ``padding="longest"``); at least one column."""
    n = max(1, int(mask.sum(axis=1).max())) if len(mask) else 1
    return ids[:, :n], mask[:, :n]


def real_length_batch(shapes: Mapping[str, Any], q_lengths: np.ndarray, p_lengths: np.ndarray,
                      vocab_size: int, seed: int | Sequence[int] = 0, *,
                      question_prefixes: Sequence[str] = ("q",)) -> dict[str, np.ndarray]:
    """A training batch of ``shapes`` (:func:`bench.common.batch_shapes`) whose rows have real
    token lengths: each question row's length drawn (with replacement, ``np.random.default_rng
    (seed)``) from ``q_lengths``, each passage row's (pos, hard, cf) from ``p_lengths``, both
    clipped to the row's padded length (truncation, as the input pipeline does) and to >= 1.
    Right-padded like ``inputs.tokens``: random word pieces (ids >= 1000) on the first
    ``length`` positions, pad id 0 and mask 0 after; valid flags all true. The encoders'
    compute depends on the masks, not on which word pieces they hold."""
    q_lengths, p_lengths = np.asarray(q_lengths), np.asarray(p_lengths)
    if q_lengths.size == 0 or p_lengths.size == 0:
        raise ValueError("real_length_batch needs non-empty question and passage length pools")
    r = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for key, spec in shapes.items():
        if not key.endswith("_ids"):
            if not key.endswith("_mask"):
                out[key] = np.ones(spec.shape, spec.dtype)
            continue
        prefix = key[:-len("_ids")]
        *rows, width = spec.shape
        pool = q_lengths if prefix in question_prefixes else p_lengths
        n = np.clip(r.choice(pool, size=tuple(rows)), 1, width)
        mask = (np.arange(width) < n[..., None]).astype(np.int32)
        ids = r.integers(1000, vocab_size, size=spec.shape).astype(np.int32)
        out[key] = np.where(mask > 0, ids, 0).astype(np.int32)
        out[prefix + "_mask"] = mask
    return out


def demo_world_texts(data_dir: str, num_passages: int = 0
                     ) -> tuple[list[str], list[str], list[str]]:
    """(questions, passage titles, passage texts) of the demo's synthetic world
    (``configs.presets.demo_config``'s ``data.synthetic``, generated into ``data_dir`` by
    ``experiment.maybe_generate_synthetic`` as ``make demo`` does; ~2 s): the training file's
    questions and the whole corpus. ``num_passages`` > 0 generates a smaller world of the same
    kind (tests)."""
    cfg = demo_config("picl")
    cfg.data.data_dir = data_dir
    if num_passages:
        cfg.data.synthetic.num_passages = num_passages
        cfg.data.synthetic.test_questions = 0  # the default share of a small world
    maybe_generate_synthetic(cfg)
    questions = [e.question for e in iter_biencoder(os.path.join(data_dir, cfg.data.train_file),
                                                    skip_bad=False)]
    corpus = load_corpus(os.path.join(data_dir, cfg.data.corpus_file))
    return questions, list(corpus.titles), list(corpus.texts)


def wiki_texts(num_passages: int, num_questions: int, words: int = 100
               ) -> tuple[list[str], list[str], list[str]]:
    """(questions, passage titles, passage texts) from the installed Wikipedia summaries
    (``datasets.wiki_offline``): the first ``num_passages`` passages of ``words`` words as
    ``wiki_offline.write_corpus`` cuts them (DPR's psgs_w100), and as "questions" the first
    sentence (``text.sentences``, rules backend) of each of the first ``num_questions``
    summaries: ~25 words, longer than NQ's ~9-word questions, so the question padding they
    leave is if anything less than a real DPR batch's."""
    questions: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    for title, extract in wiki_offline.iter_summaries(wiki_offline.summaries_path()):
        if len(questions) < num_questions:
            spans = split_sentences(extract, backend="rules")
            if spans:
                questions.append(extract[spans[0][0]:spans[0][1]])
        for block in wiki_offline.word_blocks(extract, words):
            if len(texts) < num_passages:
                titles.append(" ".join(title.split()))
                texts.append(block)
        if len(texts) >= num_passages and len(questions) >= num_questions:
            break
    return questions, titles, texts


def length_pools(tokenizer, questions: Sequence[str], titles: Sequence[str],
                 texts: Sequence[str], max_q_len: int, max_p_len: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Token lengths (int64) of ``questions`` and of the passages, tokenised in the training
    format (``inputs.tokens``: ``[CLS] q [SEP]``; ``[CLS] title [SEP] text [SEP]``) and
    truncated at ``max_q_len`` / ``max_p_len``."""
    if not questions or not texts:
        raise UserError(f"real lengths need questions and passages, got {len(questions)} "
                        f"questions and {len(texts)} passages")
    _, q_mask = tokenize_questions(tokenizer, list(questions), max_q_len)
    _, p_mask = tokenize_passages(tokenizer, list(titles), list(texts), max_p_len)
    return q_mask.sum(1).astype(np.int64), p_mask.sum(1).astype(np.int64)


def group_fill(batches: Sequence[Mapping[str, np.ndarray]],
               groups: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
    """Per named group of prefixes (e.g. ``{"questions": ("q",), "passages": ("pos", "hard",
    "cf")}``) over ``batches``: ``mean_tokens`` (real tokens per row), ``slots`` (padded
    length per row) and ``fill`` (real tokens / token slots) of the ``<prefix>_mask`` arrays
    present. A row is a mask's last axis."""
    out = {}
    for name, prefixes in groups.items():
        real = slots = rows = 0
        for b in batches:
            for p in prefixes:
                m = b.get(p + "_mask")
                if m is None:
                    continue
                real += int(np.asarray(m).sum())
                slots += int(np.asarray(m).size)
                rows += int(np.asarray(m).size // max(np.asarray(m).shape[-1], 1))
        if slots:
            out[name] = {"mean_tokens": real / max(rows, 1), "slots": slots / max(rows, 1),
                         "fill": real / slots}
    return out


def peer_trim(batch: Mapping[str, np.ndarray],
              groups: Sequence[Sequence[str]] = DPR_LENGTH_GROUPS) -> dict[str, np.ndarray]:
    """The peer's batch: each length group cut to its longest row (HF's ``padding="longest"``;
    the passage tower takes pos, hard and cf in one call, so they share one length):
    ``inputs.buckets.trim_batch`` with a bucket at every length."""
    width = max(np.asarray(v).shape[-1] for k, v in batch.items() if k.endswith("_mask"))
    out, _ = bucket_lib.trim_batch(batch, groups, range(1, width))
    return out


def parse_shapes(specs: Sequence[str], default: tuple[int, int]) -> list[tuple[int, int]]:
    """``["32:96", "64:256"]`` -> ``[(32, 96), (64, 256)]``; empty: ``[default]``."""
    out = []
    for spec in specs:
        lq, sep, lp = str(spec).partition(":")
        if not sep or not lq.strip().isdigit() or not lp.strip().isdigit() or min(
                int(lq), int(lp)) < 2:
            raise UserError(f"--shapes takes question:passage lengths (each >= 2) such as "
                            f"32:96, got {spec!r}")
        out.append((int(lq), int(lp)))
    if len(set(out)) != len(out):
        raise UserError(f"--shapes repeats a shape: {list(specs)}")
    return out or [default]


def export_buckets(spec: Sequence[str], config_buckets: Sequence[int]) -> list[int]:
    """``--length_buckets``: ``["default"]`` -> the config's; ``["off"]`` or ``[]`` -> none
    (fixed padding); else the integers given."""
    spec = [str(x).strip() for x in spec if str(x).strip()]
    if spec == ["default"]:
        return [int(b) for b in config_buckets]
    if spec in ([], ["off"]):
        return []
    if not all(x.isdigit() for x in spec):
        raise UserError(f"--length_buckets takes 'default', 'off' or integers, got {spec}")
    return [int(x) for x in spec]


def _parts(out: dict[str, Any], part: str) -> list[tuple[str, Any]]:
    """``[(label suffix, result)]`` of ``part`` ("train" / "export"): ours first, then each other
    contender measured in the same rounds: ``part@DTYPE`` (matmul operands) and
    ``part@DTYPE+packedL`` (packed rows of L tokens)."""
    rows = []
    for key, v in out.items():
        if key == part:
            rows.append(("", v))
        elif key.startswith(part + "@"):
            dt, _, layout = key.partition("@")[2].partition("+")
            label = f" packed {layout[len('packed'):]}" if layout.startswith("packed") else ""
            rows.append((f"{label} ({dt} operands)", v))
    return rows


def goals(shapes: dict[str, dict[str, Any]], train_goal: float = 1.3,
          export_goal: float = 1.5) -> list[dict[str, Any]]:
    """Issue 46's goals per shape: our train step ``>= train_goal`` × the peer's throughput, our
    export ``>= export_goal`` × the peer's with its natural longest-in-batch padding (and its
    fixed padding, DPR's). One row per goal (and per matmul operand dtype measured) with the
    measured ratio and whether it is met."""
    rows = []
    for shape, out in shapes.items():
        for suffix, t in _parts(out, "train"):
            x = t["speedup"]
            rows.append({"shape": shape, "part": "train step" + suffix, "goal": train_goal,
                         "speedup": x, "met": x >= train_goal})
        for suffix, e in _parts(out, "export"):
            for peer in ("longest", "fixed"):
                x = e[f"vs_{peer}"]["speedup"]
                rows.append({"shape": shape, "part": f"export{suffix} vs peer {peer}",
                             "goal": export_goal, "speedup": x, "met": x >= export_goal})
    return rows


def step_config(model: str, *, global_batch: int, max_q_len: int, max_p_len: int, num_hard: int,
                counterfactual: bool, attention_impl: str | None = None,
                matmul_dtype: str = ""):
    """The base config at the benchmark's shapes: PiCL's loss weights with ``counterfactual``,
    DPR's without; learning rate from step 0 (no warm-up), so the first update is a real one on
    both sides."""
    cfg = base_config()
    cfg.method = "picl" if counterfactual else "dpr"
    cfg.model.name_or_path = model
    cfg.model.attention_impl = attention_impl or cfg.model.attention_impl
    cfg.model.matmul_dtype = matmul_dtype or cfg.model.matmul_dtype
    cfg.data.max_q_len, cfg.data.max_p_len = max_q_len, max_p_len
    cfg.data.num_hard = num_hard
    cfg.train.global_batch = global_batch
    cfg.loss.update(PICL_LOSS if counterfactual else DPR_LOSS)
    cfg.optim.warmup_steps = 0
    return cfg


def import_peer() -> tuple[Any, Any]:
    """(torch, transformers), or a UserError saying how to install the ``[peer]`` extra."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise UserError(f"the PyTorch peer needs the optional extra [peer] ({e}); install it with "
                        f"`{PEER_INSTALL}`") from None
    return torch, transformers


# ------------------------------------------------------------------ the peer (torch)

def _torch_loss(torch, q, pos, hard, hard_valid, cf, cf_valid, *, lam: float, tau1: float,
                tau2: float):
    """``losses.contrastive_terms``' total (use_dpr=True) in torch, mean over questions."""
    b, h, d = hard.shape
    hv = hard_valid.reshape(b * h)
    hard = torch.where(hv[:, None], hard.reshape(b * h, d), 0.0)
    cols = [pos, hard] + ([torch.where(cf_valid[:, None], cf, 0.0)] if cf is not None else [])
    s = q @ torch.cat(cols).T
    s_pp, s_hard = s[:, :b], s[:, b:b + b * h]
    eye = torch.eye(b, dtype=torch.bool)
    s_pos = s_pp.diagonal()
    neg = torch.cat([s_pp.masked_fill(eye, -math.inf), s_hard.masked_fill(~hv[None], -math.inf)], 1)
    logits = [s_pos[:, None], neg]
    if cf is not None:
        s_cc = s[:, b + b * h:]
        s_cf = s_cc.diagonal()
        if lam > 0:
            logits.append((s_cf + math.log(lam)).masked_fill(~cf_valid, -math.inf)[:, None])
    total = torch.logsumexp(torch.cat(logits, 1), 1) - s_pos
    if cf is not None:
        if tau1:
            total = total + tau1 * torch.where(cf_valid, torch.nn.functional.softplus(s_cf - s_pos), 0.0)
        if tau2:
            other = s_cc.masked_fill(eye | ~cf_valid[None], -math.inf)
            cpp = torch.logsumexp(torch.cat([s_cf[:, None], neg, other], 1), 1) - s_cf
            total = total + tau2 * torch.where(cf_valid, cpp, 0.0)
    return total.mean()


class TorchPeer:
    """HF ``BertModel`` question and passage towers with AdamW: the step a DPR/Tevatron user runs."""

    def __init__(self, cfg, model_dir: str, *, threads: int, attn: str):
        torch, transformers = import_peer()
        self.torch = torch
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        drop = cfg.model.dropout
        adrop = cfg.model.attention_dropout if cfg.model.attention_dropout is not None else drop

        def tower():
            return transformers.BertModel.from_pretrained(
                model_dir, add_pooling_layer=False, attn_implementation=attn,
                hidden_dropout_prob=drop, attention_probs_dropout_prob=adrop)

        self.q_enc, self.p_enc = tower(), tower()
        self.params = list(self.q_enc.parameters()) + list(self.p_enc.parameters())
        o = cfg.optim
        self._opt_kw = dict(lr=o.learning_rate, betas=(o.b1, o.b2), eps=o.eps,
                            weight_decay=o.weight_decay)
        self.opt = torch.optim.AdamW(self.params, **self._opt_kw)
        self._loaded = [x.detach().clone() for x in self.params]
        self.clip = o.grad_clip
        self.loss_kw = {k: float(cfg.loss[k]) for k in ("lam", "tau1", "tau2")}

    def reset(self) -> None:
        """Back to the loaded weights and a fresh optimizer (before another numerics check)."""
        with self.torch.no_grad():
            for x, x0 in zip(self.params, self._loaded):
                x.copy_(x0)
        self.opt = self.torch.optim.AdamW(self.params, **self._opt_kw)

    def tensors(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        return {k: self.torch.from_numpy(np.ascontiguousarray(v)) if v.dtype != bool
                else self.torch.from_numpy(v) for k, v in batch.items()}

    def train(self, mode: bool) -> None:
        self.q_enc.train(mode)
        self.p_enc.train(mode)

    def _loss(self, t: dict[str, Any]):
        torch = self.torch
        b, h, lp = t["hard_ids"].shape
        has_cf = "cf_ids" in t
        parts = [t["pos_ids"][:, None], t["hard_ids"]] + ([t["cf_ids"][:, None]] if has_cf else [])
        masks = [t["pos_mask"][:, None], t["hard_mask"]] + ([t["cf_mask"][:, None]] if has_cf else [])
        n = len(parts) - 1 + h  # passages per question
        q = self.q_enc(input_ids=t["q_ids"], attention_mask=t["q_mask"]).last_hidden_state[:, 0]
        p = self.p_enc(input_ids=torch.cat(parts, 1).reshape(b * n, lp),
                       attention_mask=torch.cat(masks, 1).reshape(b * n, lp)
                       ).last_hidden_state[:, 0].reshape(b, n, -1)
        return _torch_loss(torch, q, p[:, 0], p[:, 1:1 + h], t["hard_valid"],
                           p[:, 1 + h] if has_cf else None, t.get("cf_valid"), **self.loss_kw)

    def forward(self, t: dict[str, Any]) -> float:
        """The loss of a batch without dropout or gradient (our eval step's work)."""
        training = self.q_enc.training
        self.train(False)
        with self.torch.no_grad():
            loss = float(self._loss(t))
        self.train(training)
        return loss

    def step(self, t: dict[str, Any]) -> tuple[float, float]:
        """One optimizer step; (loss, gradient norm before clipping)."""
        torch = self.torch
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(t)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.opt.step()
        return float(loss.detach()), float(norm)

    def encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[CLS] vectors of passages (inference mode)."""
        with self.torch.inference_mode():
            out = self.p_enc(input_ids=self.torch.from_numpy(ids),
                             attention_mask=self.torch.from_numpy(mask)).last_hidden_state[:, 0]
        return out.numpy()


# ------------------------------------------------------------------ the command

def _print_round(r: int, wall: dict[str, float]) -> None:
    print(f"round {r}: " + ", ".join(f"{k} {v:.3f} s" for k, v in wall.items()), flush=True)


def _rounded(times: dict[str, list[float]]) -> dict[str, list[float]]:
    return {k: [round(x, 4) for x in v] for k, v in times.items()}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def _name(dt: str, first: bool) -> str:
    return "ours" if first else f"ours_{dt}"


def _numerics_train(cfg, peer: TorchPeer, model, hf_params, batch, tb, mesh) -> dict[str, Any]:
    """Two no-dropout steps of ours and the peer's from the same weights: losses and the first
    gradient norm must agree (``--tol``; ``--tol_mixed`` with bfloat16 operands)."""
    check, state, rules = jitted_train_step(cfg, model, hf_params, mesh, dropout=False)
    rng = jax.random.key(1)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        gbatch = mesh_lib.global_batch(batch, mesh)
        state, m0 = check(state, gbatch, rng)
        ours = [float(m0["loss"]), float(m0["grad_norm"])]
        state, m1 = check(state, gbatch, rng)
        ours.append(float(m1["loss"]))
    peer.train(False)
    l0, g0 = peer.step(tb)
    l1, _ = peer.step(tb)
    peer.reset()  # the next variant's check starts from the same weights
    theirs = [l0, g0, l1]
    numerics = {"ours": {"loss_step0": ours[0], "grad_norm_step0": ours[1], "loss_step1": ours[2]},
                "peer": {"loss_step0": l0, "grad_norm_step0": g0, "loss_step1": l1},
                "max_rel_diff": max(_rel(x, y) for x, y in zip(ours, theirs))}
    tol = _TOL_MIXED.value if model.config.mixed_matmuls else _TOL.value
    print(f"numerics (no dropout, matmul operands {model.config.matmul_dtype}): loss step 0 ours "
          f"{ours[0]:.6f} peer {l0:.6f}; grad norm ours {ours[1]:.6f} peer {g0:.6f}; loss step 1 "
          f"ours {ours[2]:.6f} peer {l1:.6f}; max rel diff {numerics['max_rel_diff']:.2e} "
          f"(tol {tol:g})")
    if not numerics["max_rel_diff"] <= tol:
        raise SystemExit("the two steps compute different functions; not timing them")
    return numerics


def length_source(spec: str, max_q_len: int, max_p_len: int) -> str:
    """``--length_source``: "demo" or "wiki" as given; "auto" is the demo world at the demo's
    shape (``demo_config``'s ``max_q_len``/``max_p_len``) and the Wikipedia summaries at any
    other (DPR's 64:256 pads NQ-like passages, which the demo's ~78-token ones are not)."""
    if spec != "auto":
        return spec
    d = demo_config("picl").data
    return "demo" if (max_q_len, max_p_len) == (int(d.max_q_len), int(d.max_p_len)) else "wiki"


def parse_row_lens(spec: Sequence[str], max_p_len: int) -> list[int]:
    """``--pack_row_len``: entries ``Nx`` (N x ``max_p_len``) or a token count; ``off`` or
    empty: no packed contender. Duplicates are dropped (order kept). A group's rows are never
    shorter than its padded length (``inputs.packing.pack_batch``), so 160 packs questions
    into rows of 160 and, at Lp 256, passages into rows of 256."""
    out: list[int] = []
    for x in (str(v).strip().lower() for v in spec):
        if x in ("", "off"):
            continue
        head = x[:-1] if x.endswith("x") else x
        if not head.isdigit() or int(head) < 1:
            raise UserError(f"--pack_row_len takes entries such as 3x (times max_p_len) or 288 "
                            f"(tokens), or off; got {x!r}")
        n = int(head) * (max_p_len if x.endswith("x") else 1)
        if n not in out:
            out.append(n)
    return out


TRAIN_GROUPS = {"questions": ("q",), "passages": ("pos", "hard", "cf")}
PACKED_GROUPS = {"questions": ("packed_q",), "passages": ("packed_pos",)}


def _train_batches(cfg, tokenizer, vocab_size: int) -> tuple[list[dict[str, np.ndarray]],
                                                              dict[str, Any]]:
    """The training batches of the rounds (``--lengths``) and what they are."""
    b, h, lq, lp = (cfg.train.global_batch, cfg.data.num_hard, cfg.data.max_q_len,
                    cfg.data.max_p_len)
    shapes = batch_shapes(b, h, lq, lp, _CF.value)
    if _LENGTHS.value == "full":
        return [random_batch(shapes, vocab_size)], {
            "lengths": "full", "source": "every row full length (random word pieces)"}
    src = length_source(_LENGTH_SOURCE.value, lq, lp)
    t0 = time.perf_counter()
    if src == "demo":
        with tempfile.TemporaryDirectory() as tmp:
            texts = demo_world_texts(tmp)
        what = (f"the demo world (configs/demo.py's synthetic benchmark, generated in-process): "
                f"{len(texts[0])} training questions, {len(texts[2])} passages")
    else:
        texts = wiki_texts(num_passages=4000, num_questions=2000)
        what = (f"the installed Wikipedia summaries: {len(texts[2])} 100-word passages; questions "
                f"= the first sentences of {len(texts[0])} summaries")
    q_len, p_len = length_pools(tokenizer, *texts, lq, lp)
    n = _TRAIN_BATCHES.value or _ROUNDS.value
    batches = [real_length_batch(shapes, q_len, p_len, vocab_size, (_LENGTH_SEED.value, k))
               for k in range(n)]
    return batches, {"lengths": "real", "source": src, "source_detail": what,
                     "batches": n, "seed": _LENGTH_SEED.value,
                     "tokenize_s": time.perf_counter() - t0,
                     "pool_mean_tokens": {"questions": float(q_len.mean()),
                                          "passages": float(p_len.mean())}}


def pack_batches(cfg, batches: Sequence[Mapping[str, np.ndarray]], row_len: int, mesh
                 ) -> tuple[list[dict[str, np.ndarray]], list[float]]:
    """``batches`` packed as the training loop packs them at ``data.pack_row_len = row_len``
    (``train.loop.sequence_packer``: ``inputs.packing.pack_batch`` per data shard of ``mesh``,
    each batch's row counts rounded up to ``data.pack_rows_multiple``, so a few shapes).
    Returns (packed batches, host seconds of each packing)."""
    c = cfg.copy_and_resolve_references()
    c.data.pack_row_len = int(row_len)
    packer = sequence_packer(methods.get(c.method), c, mesh)
    out, secs = [], []
    for b in batches:
        t0 = time.perf_counter()
        packed, _ = packer(dict(b))
        secs.append(time.perf_counter() - t0)
        out.append(packed)
    return out, secs


def _fill_line(name: str, fill: dict[str, dict[str, float]]) -> str:
    return f"{name}: " + "; ".join(
        f"{g} {v['mean_tokens']:.1f} real tokens of {v['slots']:.0f} slots a row (fill "
        f"{v['fill']:.2f})" for g, v in fill.items())


def _measure_train(cfgs: dict[str, Any], peer: TorchPeer) -> dict[str, dict[str, Any]]:
    """Our train step at each matmul operand dtype (``cfgs``, first = "ours"), packed at each
    ``--pack_row_len``, and the peer's, in the same rotated rounds; one summary per contender
    of ours against the same peer timings. Round r steps every contender on training batch
    r mod N (``--lengths``): ours at full padding (packed: that batch through
    ``inputs.packing.pack_batch``, packed before the rounds), the peer cut to the batch's
    longest question and passage (:func:`peer_trim`)."""
    cfg = next(iter(cfgs.values()))
    b, h = cfg.train.global_batch, cfg.data.num_hard
    lq, lp = cfg.data.max_q_len, cfg.data.max_p_len
    cf = _CF.value
    mesh = mesh_lib.make_mesh(-1, 1)
    rng = jax.random.key(1)
    row_lens = parse_row_lens(_PACK_ROW_LEN.value, lp)
    batches = tbs = None
    contenders, numerics, compile_s, steps, meta = [], {}, {}, {}, {}
    layouts: dict[str, Any] = {}
    for i, (dt, c) in enumerate(cfgs.items()):
        model, hf_params, tok_dir = loop.build_model(c)
        if batches is None:
            batches, info = _train_batches(c, loop.run_tokenizer(c, tok_dir),
                                           model.config.vocab_size)
            peer_batches = [peer_trim(x) for x in batches] if info["lengths"] == "real" \
                else batches
            tbs = [peer.tensors(x) for x in peer_batches]
            fills = {"ours": group_fill(batches, TRAIN_GROUPS),
                     "peer": group_fill(peer_batches, TRAIN_GROUPS)}
            layouts[""] = batches
            for row_len in row_lens:
                packed, secs = pack_batches(c, batches, row_len, mesh)
                layouts[f"packed{row_len}"] = packed
                fills[f"packed {row_len}"] = group_fill(packed, PACKED_GROUPS)
                rows = {g: sorted({int(x[f"packed_{g}_mask"].shape[1]) for x in packed})
                        for g in (packing.group_key(grp) for grp in DPR_LENGTH_GROUPS)}
                meta[f"packed{row_len}"] = {
                    "row_len": row_len, "rows": rows, "pack_ms_median": 1e3 * statistics.median(secs),
                    "pack_ms": [round(1e3 * x, 3) for x in secs]}
            info["fill"] = fills
            print(f"train batches: {len(batches)} ({info['source']}"
                  + (f": {info['source_detail']}; seed {info['seed']}" if "seed" in info else "")
                  + ")", flush=True)
            for name, f in fills.items():
                print("  " + _fill_line(name, f), flush=True)
            for key, m in meta.items():
                print(f"  {key}: rows per data shard {m['rows']} (the loop's per-batch counts); "
                      f"host packing {m['pack_ms_median']:.2f} ms a batch (median; not in the "
                      f"timed step: the loop packs on the host while the device runs the "
                      f"previous step)", flush=True)
        for layout, lbatches in layouts.items():
            key = f"{dt}{'+' + layout if layout else ''}"
            name = _name(dt, i == 0) + (f"_{layout}" if layout else "")
            numerics[key] = _numerics_train(c, peer, model, hf_params, lbatches[0], tbs[0], mesh)
            gc.collect()
            step, state, rules = jitted_train_step(c, model, hf_params, mesh, dropout=True)
            with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
                gbatches = [mesh_lib.global_batch(x, mesh) for x in lbatches]
                shape_of = [batch_shape_key(x) for x in lbatches]
                t0 = time.perf_counter()
                compiled = {}  # one executable per batch shape (packed: a few row counts)
                for sk, g in zip(shape_of, gbatches):
                    if sk not in compiled:
                        compiled[sk] = step.lower(state, g, rng).compile()
                compile_s[key] = time.perf_counter() - t0
            steps[key] = {"state": state, "compiled": compiled, "shape_of": shape_of,
                          "gbatches": gbatches, "rules": rules, "model": model, "name": name,
                          "dtype": dt, "layout": layout, "shapes_compiled": len(compiled)}

            def ours_step(r, box=steps[key]):
                k = r % len(box["gbatches"])
                box["state"], m = box["compiled"][box["shape_of"][k]](box["state"],
                                                                       box["gbatches"][k], rng)
                jax.block_until_ready(m)

            contenders.append((name, ours_step))
    peer.train(True)
    contenders.append(("peer", lambda r: peer.step(tbs[r % len(tbs)])))
    first = steps[next(iter(steps))]
    if _FORWARD.value:
        method = methods.get(cfg.method)
        fwd = jax.jit(make_eval_step(method, first["model"], loss_hparams=method.loss_hparams(cfg.loss),
                                     mesh=mesh))
        contenders += [("ours_forward", lambda r: jax.block_until_ready(
                            fwd(first["state"].params, first["gbatches"][r % len(batches)]))),
                       ("peer_forward", lambda r: peer.forward(tbs[r % len(tbs)]))]
    with jax.set_mesh(mesh), nn.logical_axis_rules(first["rules"]):
        for _ in range(_WARMUP.value):
            for _, fn in contenders:
                fn(0)
        times, cpu, _ = alternate(contenders, _ROUNDS.value, on_round=_print_round)
    passages = b * (1 + h + int(cf))
    outs = {}
    for key, box in steps.items():
        name = box["name"]
        out = paired_summary(times[name], times["peer"], work=passages)
        if _FORWARD.value and box is first:
            out["forward"] = paired_summary(times["ours_forward"], times["peer_forward"],
                                            work=passages)
        out.update(numerics=numerics[key], compile_s=compile_s[key], matmul_dtype=box["dtype"],
                   shapes_compiled=box["shapes_compiled"],
                   layout=box["layout"] or "padded", passages_per_step=passages,
                   shapes={"global_batch": b, "num_hard": h, "max_q_len": lq, "max_p_len": lp,
                           "counterfactual": cf},
                   batches=info, times=_rounded(times), cpu_times=_rounded(cpu),
                   cpu_median_s={k: statistics.median(v) for k, v in cpu.items()},
                   ours_name=name, **({"packing": meta[box["layout"]]} if box["layout"] else {}))
        outs[key] = out
    return outs


def _export_rows(n: int) -> list[tuple[str, str, str]]:
    if _CORPUS.value:
        c = load_corpus(_CORPUS.value)
        rows = list(itertools.islice(c.rows(), n))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "psgs.tsv.gz")
            wiki_offline.write_corpus(path, max_passages=n)
            rows = list(load_corpus(path).rows())
    if len(rows) < n:
        raise UserError(f"{_CORPUS.value or 'the wiki summaries'}: {len(rows)} passages, the "
                        f"export rounds need {n}")
    return rows


def our_encoder(run, batch: int, length_buckets: Sequence[int], call_tokens: int | None = None):
    """Our export encoder at ``length_buckets`` (docs/scale.md "Length-aware encoding"); empty
    asks for fixed padding explicitly, so a run default of buckets does not change what
    "fixed" measures. ``call_tokens`` None = the config's CPU call cap."""
    return export.Encoder(run, batch, length_buckets=tuple(length_buckets),
                          call_tokens=call_tokens)


def call_tokens_flag(spec: str) -> int | None:
    """``--call_tokens``: 'default' -> None (the config's), else a non-negative integer."""
    spec = str(spec).strip()
    if spec == "default":
        return None
    if not spec.isdigit():
        raise UserError(f"--call_tokens takes 'default' or an integer >= 0, got {spec!r}")
    return int(spec)


def sorted_batches(lengths: np.ndarray, batch: int) -> list[np.ndarray]:
    """Row indices of ``lengths`` longest first (stable), cut into batches of ``batch`` rows:
    the peer's tuned export ("peer sorted")."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i:i + batch] for i in range(0, len(order), batch)]


def _measure_export(cfgs: dict[str, Any], peer: TorchPeer) -> dict[str, dict[str, Any]]:
    """Our export at each matmul operand dtype (first = "ours") and the peer's with fixed and
    with longest-in-batch padding, in the same rotated rounds over the same corpus slices."""
    cfg = next(iter(cfgs.values()))
    bs, per = _EXPORT_BATCH.value, _EXPORT_BATCHES.value
    n = bs * per * _EXPORT_ROUNDS.value
    rows = _export_rows(n)
    buckets = export_buckets(_BUCKETS.value, cfg.eval.length_buckets)
    encoders, ids = {}, None
    for dt, c in cfgs.items():
        run = loop.pretrained_run(c)
        if ids is None:
            ids, mask = tokenize_passages(run.tokenizer, [r[2] for r in rows], [r[1] for r in rows],
                                          cfg.data.max_p_len)
        encoders[dt] = our_encoder(run, bs, buckets, call_tokens_flag(_CALL_TOKENS.value))
    lengths = mask.sum(1)
    peer.train(False)

    def sl(r: int) -> slice:
        return slice(r * bs * per, (r + 1) * bs * per)

    def peer_fn(longest: bool):
        def f(r):
            for k in range(per):
                lo = r * bs * per + k * bs
                i, m = ids[lo:lo + bs], mask[lo:lo + bs]
                peer.encode(*(trim_to_longest(i, m) if longest else (i, m)))
        return f

    fixed0 = np.concatenate([peer.encode(ids[lo:lo + bs], mask[lo:lo + bs])
                             for lo in range(0, bs * per, bs)])
    longest0 = np.concatenate([peer.encode(*trim_to_longest(ids[lo:lo + bs], mask[lo:lo + bs]))
                               for lo in range(0, bs * per, bs)])
    diffs, contenders = {}, []
    for i, (dt, enc) in enumerate(encoders.items()):
        ours0 = enc.passages(ids[sl(0)], mask[sl(0)])  # compiles; also the numerics check
        diffs[dt] = {"fixed": float(np.abs(ours0 - fixed0).max()),
                     "longest": float(np.abs(ours0 - longest0).max())}
        print(f"export numerics (matmul operands {dt}): max |ours - peer| over {bs * per} "
              f"passages: fixed {diffs[dt]['fixed']:.2e}, longest {diffs[dt]['longest']:.2e}")
        contenders.append((_name(dt, i == 0),
                           lambda r, enc=enc: enc.passages(ids[sl(r)], mask[sl(r)])))
    contenders += [("peer_fixed", peer_fn(False)), ("peer_longest", peer_fn(True))]
    sorted_bs = _PEER_SORTED_BATCH.value
    if sorted_bs > 0:
        def peer_sorted(r):
            lo = r * bs * per
            for b in sorted_batches(lengths[sl(r)], sorted_bs):
                peer.encode(*trim_to_longest(ids[lo + b], mask[lo + b]))
        contenders.append(("peer_sorted", peer_sorted))
    times, cpu, _ = alternate(contenders, _EXPORT_ROUNDS.value, on_round=_print_round)
    work = bs * per
    outs = {}
    for i, dt in enumerate(encoders):
        name = _name(dt, i == 0)
        outs[dt] = {"passages": n, "batch": bs, "length_buckets": buckets, "matmul_dtype": dt,
                    "mean_tokens": float(lengths.mean()), "median_tokens": float(np.median(lengths)),
                    "full_rows": float((lengths == cfg.data.max_p_len).mean()),
                    "max_abs_diff": diffs[dt],
                    "vs_fixed": paired_summary(times[name], times["peer_fixed"], work=work),
                    "vs_longest": paired_summary(times[name], times["peer_longest"], work=work),
                    **({"vs_sorted": paired_summary(times[name], times["peer_sorted"], work=work),
                        "peer_sorted_batch": sorted_bs} if sorted_bs > 0 else {}),
                    "call_tokens": encoders[dt].call_tokens,
                    "times": _rounded(times), "cpu_times": _rounded(cpu),
                    "cpu_median_s": {k: statistics.median(v) for k, v in cpu.items()},
                    "ours_name": name}
    return outs


def _print_table(shapes: dict[str, dict[str, Any]]) -> None:
    rows = []
    for shape, out in shapes.items():
        for suffix, t in _parts(out, "train"):
            ours = t.get("ours_name", "ours")
            rows.append((shape, "train step" + suffix, "peer", t, t["cpu_median_s"][ours],
                         t["cpu_median_s"]["peer"]))
            if "forward" in t:
                rows.append((shape, "forward", "peer", t["forward"],
                             t["cpu_median_s"]["ours_forward"], t["cpu_median_s"]["peer_forward"]))
        for suffix, e in _parts(out, "export"):
            ours = e.get("ours_name", "ours")
            for name in ("fixed", "longest", "sorted"):
                if f"vs_{name}" in e:
                    rows.append((shape, "export" + suffix, f"peer {name}", e[f"vs_{name}"],
                                 e["cpu_median_s"][ours], e["cpu_median_s"][f"peer_{name}"]))
    width = max([11] + [len(r[1]) for r in rows])
    print(f"{'Lq:Lp':<7} {'part':<{width}} {'peer':<13} {'ours s':>8} {'peer s':>8} "
          f"{'ours cpu':>8} {'peer cpu':>8} {'ours p/s':>9} {'peer p/s':>9} {'speedup':>8}  "
          f"sign test (rounds ours/peer faster)")
    for shape, part, peer, s, cpu_ours, cpu_peer in rows:
        t = s["sign_test"]
        print(f"{shape:<7} {part:<{width}} {peer:<13} {s['ours_median_s']:>8.3f} "
              f"{s['peer_median_s']:>8.3f} {cpu_ours:>8.3f} {cpu_peer:>8.3f} "
              f"{s['ours_per_s']:>9.1f} {s['peer_per_s']:>9.1f} {s['speedup']:>7.2f}x  "
              f"{t['ours_faster']}/{t['peer_faster']}, p={t['p_value']:.3g}")
    for g in goals(shapes):
        print(f"goal {g['shape']} {g['part']}: >= {g['goal']:.1f}x, measured "
              f"{g['speedup']:.2f}x: {'met' if g['met'] else 'NOT met'}")


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv) -> dict[str, Any]:
    del argv
    torch, transformers = import_peer()
    parts = set(_PARTS.value)
    if not parts or parts - {"train", "export"}:
        raise UserError(f"--parts takes train and/or export, got {_PARTS.value}")
    shapes = parse_shapes(_SHAPES.value, (_LQ.value, _LP.value))

    dtypes = [d.strip() for d in _MATMUL.value if d.strip()] or ["float32"]
    if len(set(dtypes)) != len(dtypes) or set(dtypes) - set(DTYPES):
        raise UserError(f"--matmul_dtypes takes distinct dtypes among {list(DTYPES)}, got "
                        f"{_MATMUL.value}")

    def config(lq: int, lp: int, dt: str):
        return step_config(_MODEL.value, global_batch=_BATCH.value, max_q_len=lq, max_p_len=lp,
                           num_hard=_HARD.value, counterfactual=_CF.value,
                           attention_impl=_ATTN.value, matmul_dtype=dt)

    threads = _THREADS.value or os.cpu_count() or 1

    def fresh_peer(cfg) -> TorchPeer:
        # A new peer per part and shape: the train rounds update its weights, and the next
        # part's numerics check compares it with our freshly loaded model.
        return TorchPeer(cfg, resolve_model_dir(_MODEL.value), threads=threads,
                         attn=_TORCH_ATTN.value)

    torch.set_num_threads(threads)
    out: dict[str, Any] = {
        "cpu": cpu_description(), "load_average_start": _load_average(),
        "model": _MODEL.value, "devices": jax.device_count(), "cpu_count": os.cpu_count(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(), "torch_attention": _TORCH_ATTN.value,
        "jax": jax.__version__, "attention_impl": _ATTN.value,
        "matmul_dtypes": dtypes, "lengths": _LENGTHS.value,
        "length_source": _LENGTH_SOURCE.value, "pack_row_len": list(_PACK_ROW_LEN.value),
        "xla_flags": os.environ.get("XLA_FLAGS", ""), "shapes": {}}
    print(f"cpu: {out['cpu']}; load average {out['load_average_start']}; our matmul operands "
          f"{', '.join(dtypes)}; train batch lengths {_LENGTHS.value}; packed rows "
          f"{','.join(_PACK_ROW_LEN.value) or 'off'}", flush=True)
    for lq, lp in shapes:
        cfgs = {dt: config(lq, lp, dt) for dt in dtypes}
        cfg = cfgs[dtypes[0]]
        key = f"{lq}:{lp}"
        print(f"=== shape {key} (questions {lq}, passages {lp}) ===", flush=True)
        res: dict[str, Any] = {}
        for part, measure in (("train", _measure_train), ("export", _measure_export)):
            if part in parts:
                for i, (name, r) in enumerate(measure(cfgs, fresh_peer(cfg)).items()):
                    res[part if i == 0 else f"{part}@{name}"] = r
        out["shapes"][key] = res
        gc.collect()
    out["load_average_end"] = _load_average()
    out["goals"] = goals(out["shapes"])
    print(json.dumps({k: v for k, v in out.items() if k not in ("shapes", "goals")}))
    _print_table(out["shapes"])
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
