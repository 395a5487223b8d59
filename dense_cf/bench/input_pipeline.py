"""Input pipeline throughput: ``python -m dense_cf.bench.input_pipeline [--baseline_rev REV]``.

Host-local batches/s of the DPR/PiCL training pipeline at the paper's batch (128 questions,
1 hard negative, 1 sentence counterfactual, Lq 64, Lp 256) over a synthetic benchmark, for
``--pipelines`` (tfdata, grain) of this checkout and, with ``--baseline_rev``, tf.data of an
earlier git revision (e.g. the TF-op pipeline before ``inputs/source.py``) run from a
``git archive`` of it. Each variant runs in its own process, the variants alternate for
``--rounds`` rounds, and the medians and ratios to the first variant are printed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import flags

from dense_cf import app as _app
from dense_cf.synthetic import generate as synthetic

FLAGS = flags.FlagValues()
_PIPELINES = flags.DEFINE_list("pipelines", ["tfdata", "grain"], "Pipelines of this checkout.",
                               flag_values=FLAGS)
_BASELINE = flags.DEFINE_string("baseline_rev", "", "Also time tf.data of this git revision.",
                                flag_values=FLAGS)
_BATCHES = flags.DEFINE_integer("batches", 60, "Timed batches per round (after 5 untimed).",
                                flag_values=FLAGS)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds.", flag_values=FLAGS)
_BATCH = flags.DEFINE_integer("global_batch", 128, "Questions per batch.", flag_values=FLAGS)
_THREADS = flags.DEFINE_integer("grain_threads", 8, "Grain read threads.", flag_values=FLAGS)
_PASSAGES = flags.DEFINE_integer("passages", 2000, "Synthetic benchmark size.", flag_values=FLAGS)
_CHILD = flags.DEFINE_string("child", "", "Internal: time one pipeline in this process.",
                             flag_values=FLAGS)
_DATA = flags.DEFINE_string("data", "", "Internal: the benchmark directory.", flag_values=FLAGS)

# One round in a child process; works against this checkout and older ones (the DPR module's
# preprocess / PipelineSpec / make_dataset have kept their names; ``pipeline`` is newer).
_CHILD_CODE = """
import json, sys, time
from dense_cf.datasets.formats import iter_biencoder
from dense_cf.inputs import dpr
from dense_cf.models.hf import resolve_model_dir
from dense_cf.models.tokenizer import load_tokenizer
data_dir, pipeline, batches, b, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tok = load_tokenizer(resolve_model_dir("minilm"))
data = dpr.preprocess(iter_biencoder(data_dir + "/biencoder-synth-train.json"), tok, max_q_len=64,
                      max_p_len=256, max_hard=5)
spec = dpr.PipelineSpec(global_batch=b, max_q_len=64, max_p_len=256, num_hard=1,
                        strategy="sentence", sep_id=tok.token_to_id("[SEP]"), seed=0)
if pipeline == "baseline":
    ds = dpr.make_dataset(data, spec)
elif pipeline == "grain":
    from dense_cf.inputs import source
    ds = source.make_dataset(dpr.batch_source(data, spec), pipeline="grain",
                             grain_options=source.GrainOptions(threads, 16))
else:
    ds = dpr.make_dataset(data, spec, pipeline=pipeline)
it = ds.as_numpy_iterator()
for _ in range(5):
    next(it)
t0 = time.perf_counter()
for _ in range(batches):
    next(it)
print(json.dumps({"batches_per_s": batches / (time.perf_counter() - t0)}))
"""


def _round(tree: str, data_dir: str, pipeline: str) -> float:
    env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", _CHILD_CODE, data_dir, pipeline,
                        str(_BATCHES.value), str(_BATCH.value), str(_THREADS.value)],
                       cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode:
        raise RuntimeError(f"{pipeline} in {tree} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["batches_per_s"]


def main(argv) -> None:
    del argv
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "synth")
        synthetic.generate(data_dir, num_passages=_PASSAGES.value, seed=0)
        variants = [(p, root, p) for p in _PIPELINES.value]
        if _BASELINE.value:
            base = os.path.join(tmp, "baseline")
            os.makedirs(base)
            archive = subprocess.run(["git", "-C", root, "archive", _BASELINE.value],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
            variants.insert(0, (f"tfdata@{_BASELINE.value}", base, "baseline"))
        rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        for i in range(_ROUNDS.value):
            for name, tree, pipeline in variants:
                rates[name].append(_round(tree, data_dir, pipeline))
                print(f"round {i} {name:>24}: {rates[name][-1]:7.1f} batches/s "
                      f"({rates[name][-1] * _BATCH.value:7.0f} questions/s)", flush=True)
    first = statistics.median(rates[variants[0][0]])
    print(f"\n{'variant':>24} {'median batches/s':>17} {'questions/s':>12} {'ratio':>6}  per round")
    for name, vals in rates.items():
        med = statistics.median(vals)
        print(f"{name:>24} {med:17.1f} {med * _BATCH.value:12.0f} {med / first:6.2f}  "
              f"{[round(v, 1) for v in vals]}")


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
