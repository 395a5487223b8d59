"""Within-passage sentence localisation of a sentence-unit run (DCSR; docs/dcsr.md).

    python -m dense_cf.cli.eval_localisation --workdir RUN [--gold F] [--qa F] [--max_records 0]

Scores each gold passage's sentence vectors against its question and prints, as JSON, how
often the top sentence holds the answer (Wilson 95 % interval) against chance, the mean margin,
the within-passage score spread and the mean cosine between one passage's sentence vectors
(:mod:`dense_cf.eval.localisation`); writes ``RUN/eval/step_<N>/localisation.json``. Gold
records whose question is not in the qa file are counted and left out.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.datasets.dpr import resolve_data_file
from dense_cf.datasets.formats import SkipReport, read_gold_info
from dense_cf.eval.localisation import localisation
from dense_cf.files import write_json
from dense_cf.retrieval.corpus import load_qa
from dense_cf.train.run import RunDir, load_run

FLAGS = flags.FlagValues()
_WORKDIR = flags.DEFINE_string("workdir", None, "Trained sentence-unit run.", flag_values=FLAGS)
_DATA = _model_flags.define_data_flags(
    FLAGS, "gold", "qa", gold="Gold passages info JSON (default: config; the DCSR benchmark's "
    "configs leave it empty: pass synth-test_gold_info.json).")
_MAX = flags.DEFINE_integer("max_records", 0, "Score at most this many records (0 = all).",
                            flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Runs the check on the run's gold records; prints and returns the figures."""
    _app.no_positional(argv)
    if not _WORKDIR.value:
        raise ValueError("--workdir is required")
    run = load_run(_WORKDIR.value)
    data = run.config.data
    gold_path = resolve_data_file(data, "gold_file", _DATA["gold"].value)
    qa_path = resolve_data_file(data, "test_file", _DATA["qa"].value)
    questions, answers = load_qa(qa_path)
    by_q = dict(zip(questions, answers))
    report = SkipReport()
    records, not_in_qa = [], 0
    for rec in read_gold_info(gold_path, skip_bad=True, report=report):
        if rec["question"] not in by_q:
            not_in_qa += 1
            continue
        records.append(rec)
    if report.total:
        report.log()
    if _MAX.value:
        records = records[:_MAX.value]
    res = localisation(run, records, [by_q[r["question"]] for r in records],
                       mode=data.answer_mode)
    res.update(workdir=os.path.abspath(_WORKDIR.value), step=run.step, gold=gold_path,
               qa=qa_path, gold_not_in_qa=not_in_qa, skipped_gold_records=report.total)
    out = RunDir(_WORKDIR.value).eval(run.step)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "localisation.json"), res)
    print(json.dumps(res, indent=1, default=float))
    _app.say_written(out)
    return res


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
