"""Pseudo-evidence annotations (EADPR §3.1) for the ``evidence`` counterfactual strategy.

    python -m dense_cf.cli.evidence --input data/dpr/biencoder-nq-train.json.gz \
        --output data/dpr/biencoder-nq-train.evidence.jsonl --scorer t5:allenai/unifiedqa-t5-base

Scores every leave-one-sentence-out candidate of each positive passage with a QA model and
appends the sentence whose removal lowers the confidence most to the JSONL output (resumable;
format and decisions in :mod:`dense_cf.mining.evidence.annotate`). Prints the summary as JSON.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.datasets.evidence_file import read_evidence
from dense_cf.mining.evidence.annotate import annotate
from dense_cf.mining.evidence.scorer import SCORER_HELP, make_scorer

__all__ = ["FLAGS", "USAGE", "main", "run_cli"]

USAGE = __doc__

FLAGS = flags.FlagValues()

_INPUT = flags.DEFINE_string("input", None, "DPR biencoder JSON(.gz).", required=True,
                             flag_values=FLAGS)
_OUTPUT = flags.DEFINE_string("output", None, "Evidence JSONL (appended to when it exists).",
                              required=True, flag_values=FLAGS)
_SCORER = flags.DEFINE_string("scorer", "minilm", SCORER_HELP + ".", flag_values=FLAGS)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "Scorer batch (padded, fixed shape).",
                                   flag_values=FLAGS)
_CHUNK_EXAMPLES = flags.DEFINE_integer("chunk_examples", 64, "Examples scored per flush.",
                                       flag_values=FLAGS)
_MAX_ANSWERS = flags.DEFINE_integer(
    "max_answers", 1, "Answer aliases scored per candidate (passage matches first); "
    "confidence = max.", flag_values=FLAGS)
_ANSWER_MODE = flags.DEFINE_enum("answer_mode", "string", ["string", "regex"],
                                 "DPR has_answer mode (regex for CuratedTREC).", flag_values=FLAGS)
_TOTAL_LOGLIK = flags.DEFINE_bool(
    "total_loglik", False, "T5: total answer log-likelihood instead of the per-token mean.",
    flag_values=FLAGS)
_KEEP_CASE = flags.DEFINE_bool(
    "keep_case", False, "T5: do not lower-case the input (UnifiedQA expects lower case; "
    "Flan-T5 does not).", flag_values=FLAGS)
_DTYPE = flags.DEFINE_enum(
    "dtype", "float32", ["float32", "bfloat16"],
    "T5 compute dtype (bfloat16 on TPU/GPU; norms and softmax stay float32).", flag_values=FLAGS)
_MAX_EXAMPLES = flags.DEFINE_integer("max_examples", 0, "Stop after this many input examples "
                                     "(0 = all).", flag_values=FLAGS)
_NUM_SHARDS = flags.DEFINE_integer(
    "num_shards", 1, "Annotate only index % num_shards == shard_id (one output per shard; "
    "cat them).", flag_values=FLAGS)
_SHARD_ID = flags.DEFINE_integer("shard_id", 0, "This process' shard.", flag_values=FLAGS)
_LOG_EVERY_S = flags.DEFINE_float("log_every_s", 30.0, "Seconds between progress lines.",
                                  flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Annotates ``--input`` into ``--output``; prints and returns the summary."""
    _app.no_positional(argv)
    scorer = make_scorer(_SCORER.value, batch_size=_BATCH_SIZE.value,
                         length_norm=not _TOTAL_LOGLIK.value, lowercase=not _KEEP_CASE.value,
                         dtype=_DTYPE.value)
    stats = annotate(_INPUT.value, _OUTPUT.value, scorer, max_answers=_MAX_ANSWERS.value,
                              answer_mode=_ANSWER_MODE.value,
                              chunk_examples=_CHUNK_EXAMPLES.value,
                              max_examples=_MAX_EXAMPLES.value, log_every_s=_LOG_EVERY_S.value,
                              num_shards=_NUM_SHARDS.value, shard_id=_SHARD_ID.value)
    new = stats.annotated + sum(v for k, v in stats.skipped.items()
                                if k != "bad_records_in_input")
    summary = {"output": _OUTPUT.value, "scorer": scorer.name, **dataclasses.asdict(stats),
               "new_examples_per_s": round(new / max(stats.seconds, 1e-9), 2),
               "records_in_output": len(read_evidence(_OUTPUT.value))}
    print(json.dumps(summary, indent=2))
    return summary


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the summary."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, USAGE)
