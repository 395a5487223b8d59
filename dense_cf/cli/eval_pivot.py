"""Pivot check of L_cpp's premise on a bi-encoder file (docs/method.md §3, :mod:`dense_cf.eval.pivot`).

    python -m dense_cf.cli.eval_pivot --workdir RUN --file biencoder-dev.json [--strategy sentence]
    python -m dense_cf.cli.eval_pivot --model minilm --data_dir D --file biencoder-dev.json

Prints P[sim(q,p*) > sim(q,hard negative)], P[sim(q,p*) > sim(q,random negative)] and the
reference orderings with 95 % intervals, and writes ``pivot_<strategy>.json`` / ``.md`` into the
run's ``eval/step_<N>/`` (``--out`` overrides). ``--file`` relative paths are read against the
config's ``data.data_dir``.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from absl import flags, logging

from dense_cf import app as _app
from dense_cf.cli import _model_flags
from dense_cf.datasets.formats import SkipReport, read_biencoder
from dense_cf.eval import pivot
from dense_cf.files import UserError, atomic_open, write_json
from dense_cf.train.run import RunDir, load_run

FLAGS = flags.FlagValues()

_model_flags.define_model_flags(FLAGS)  # --workdir RUN | --model CHECKPOINT
_FILE = flags.DEFINE_string("file", None, "Bi-encoder JSON with hard and random negatives "
                            "(default: the config's data.dev_file).", flag_values=FLAGS)
_STRATEGY = flags.DEFINE_string("strategy", "sentence", "Counterfactual strategy of p*.",
                                flag_values=FLAGS)
_MAX = flags.DEFINE_integer("max_records", 500, "Read at most this many records (0 = all).",
                            flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", None, "Output directory (default: the run's eval dir).",
                           flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Runs the check; prints the table and returns the result."""
    _app.no_positional(argv)
    workdir, run = _model_flags.workdir_and_run(FLAGS)
    run = run or load_run(workdir)
    data = run.config.data
    path = _FILE.value or data.dev_file
    if not path:
        raise UserError("no --file and the config has no data.dev_file")
    if not os.path.isabs(path):
        path = os.path.join(data.data_dir, path)
    report = SkipReport()
    examples = read_biencoder(path, skip_bad=True, report=report)
    if report.total:
        report.log()
    if _MAX.value:
        examples = examples[:_MAX.value]
    res = pivot.pivot_check(run, examples, strategy=_STRATEGY.value,
                            batch_size=run.config.eval.batch_size)
    res.update(file=os.path.abspath(path), workdir=os.path.abspath(workdir), step=run.step,
               skipped_records=report.total)
    out = _OUT.value or RunDir(workdir).eval(run.step)
    os.makedirs(out, exist_ok=True)
    text = pivot.markdown(res, title=f"pivot check: {workdir} step {run.step}, {path}")
    write_json(os.path.join(out, f"pivot_{_STRATEGY.value}.json"), res)
    with atomic_open(os.path.join(out, f"pivot_{_STRATEGY.value}.md")) as f:
        f.write(text + "\n")
    print(text)
    logging.info("pivot check written to %s", out)
    return res


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the result."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
