"""End-to-end QA: a trained reader over retrievers' saved top-k passages (docs/readers.md).

    python -m dense_cf.cli.eval_e2e --retriever RUN [--retriever RUN2 ...] --reader READER_RUN \
        [--k 1,5,20,100] [--names DPR,PiCL] [--out DIR]

Also ``python -m dense_cf.eval.e2e``. ``--retriever`` is a retriever run directory (its latest
``eval/step_N/retrieval.json``; ``--retriever_step`` for another), an eval directory, or a
``retrieval.json`` (DPR's results format). Writes ``READER_RUN/e2e/step_N/`` (``--out``):
``e2e.md`` / ``e2e.json`` (EM and F1 at each k with 95 % intervals, PiCL's Table 3 layout,
EM against AAR, EM by question type, McNemar between retrievers) and per retriever
``<label>/e2e.json`` (per-question outcomes: ``python -m dense_cf.eval.compare`` pairs two of
them) and ``<label>/predictions.json``. Prints the markdown.
"""

from dense_cf import app
from dense_cf.eval.e2e import FLAGS, USAGE, main, run_cli

__all__ = ["FLAGS", "main", "run_cli"]

if __name__ == "__main__":
    app.run(main, FLAGS, USAGE)
