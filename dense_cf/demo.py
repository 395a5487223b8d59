"""The README's main command: synthetic benchmark → train DPR and PiCL (MiniLM) → compare.

``python -m dense_cf.demo --workdir=runs/demo`` (``make demo``). Re-running resumes finished or
interrupted runs from their checkpoints. Retrieval evaluation (top-k, MRR, AAR) joins this
report once the evaluation binaries exist.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags, logging

_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Where data, runs and the report go.")
_METHODS = flags.DEFINE_list("methods", ["dpr", "picl"], "Demo configs to train (configs/demo.py).")
_STEPS = flags.DEFINE_integer("num_steps", 0, "Override the demo's number of steps (0 = config).")

CONFIG_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "configs", "demo.py")


def load_demo_config(method: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location("demo_config", CONFIG_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(method)


def report_table(results: dict[str, dict]) -> str:
    keys = ["loss", "l_dpr", "l_chn", "l_cpp", "rank_acc", "cf_margin", "examples_per_s"]
    lines = ["| method | steps | " + " | ".join(f"train {k}" for k in keys) +
             " | dev loss | dev rank_acc | dev mean_pos_rank |",
             "|" + "---|" * (len(keys) + 5)]
    for method, s in results.items():
        t, d = s["train"], s["dev"]
        row = [f"{t.get('train/' + k, float('nan')):.4g}" for k in keys]
        dev = [f"{d.get(k, float('nan')):.4g}" for k in ("loss", "rank_acc", "mean_pos_rank")]
        lines.append(f"| {method} | {s['step']} | " + " | ".join(row + dev) + " |")
    return "\n".join(lines)


def main(argv) -> None:
    del argv
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")
    from dense_cf.train.loop import train

    workdir = os.path.abspath(_WORKDIR.value)
    results = {}
    for method in _METHODS.value:
        cfg = load_demo_config(method)
        cfg.data.data_dir = os.path.join(workdir, "synthetic")
        if _STEPS.value:
            cfg.train.num_steps = _STEPS.value
        logging.info("=== demo: training %s ===", method)
        summary = train(cfg, os.path.join(workdir, method))
        summary.pop("state")
        results[method] = summary
    table = report_table(results)
    with open(os.path.join(workdir, "report.md"), "w") as f:
        f.write("# dense_cf demo: synthetic QA benchmark, all-MiniLM-L6-v2\n\n" + table + "\n")
    with open(os.path.join(workdir, "report.json"), "w") as f:
        json.dump(results, f, indent=2, default=float)
    print(table)
    print(f"\nreport: {os.path.join(workdir, 'report.md')}", file=sys.stderr)


if __name__ == "__main__":
    app.run(main)
