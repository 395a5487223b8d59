"""A trained run's encoders as Hugging Face / DPR directories (docs/interop.md).

    python -m dense_cf.cli.export_hf --workdir RUN [--step N] --out DIR [--format hf|dpr] [--overwrite]

``hf`` (default): ``DIR/question_encoder/`` and ``DIR/passage_encoder/`` (``DIR/encoder/`` when
the towers are shared), each a transformers ``BertModel`` directory with the run's tokenizer and
sentence-transformers pooling files. ``dpr``: transformers' ``DPRQuestionEncoder`` /
``DPRContextEncoder`` layouts. ``DIR/README.md`` is the model card, ``DIR/export.json`` the
manifest; ``--model DIR`` on the evaluation binaries (or ``model.name_or_path=DIR``) reads it back.
Prints the manifest as JSON.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from absl import flags

from dense_cf import app as _app
from dense_cf.retrieval.model_export import FORMATS, export_run

FLAGS = flags.FlagValues()

_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (trained with dense_cf.main).",
                               required=True, flag_values=FLAGS)
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).", flag_values=FLAGS)
_OUT = flags.DEFINE_string("out", None, "Output directory.", required=True, flag_values=FLAGS)
_FORMAT = flags.DEFINE_enum("format", "hf", FORMATS, "hf: BertModel directories; dpr: "
                            "DPRQuestionEncoder / DPRContextEncoder.", flag_values=FLAGS)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a non-empty --out (swapped in only "
                               "once the new export is complete).", flag_values=FLAGS)


def main(argv: Sequence[str]) -> dict[str, Any]:
    """Exports the run; prints and returns the manifest."""
    _app.no_positional(argv)
    res = export_run(_WORKDIR.value, _OUT.value, step=_STEP.value, fmt=_FORMAT.value,
                     overwrite=_OVERWRITE.value)
    print(json.dumps(res, indent=2))
    _app.say_written(res["out_dir"], "model")
    return res


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """``main`` in-process on ``argv`` (flags, no program name); returns the manifest."""
    return main(_app.parse(FLAGS, argv, __name__))


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
