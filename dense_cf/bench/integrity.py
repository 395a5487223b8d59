"""Cost of the export's checksums: ``python -m dense_cf.bench.integrity [--passages 20000]``.

Exports ``--passages`` synthetic passages with an untrained tiny BERT (``--tiny``) through
``export.export_passages`` (which writes ``SHA256SUMS`` when it finishes), then times, on the
same files: the producer's part (``files.write_sums`` over every shard file and the manifest,
reading them back) and a consumer's full check (``index.shards.verify_export``, nothing cached),
and sha256 itself over ``--hash_mb`` MB (in memory and from a page-cached file, best of 5: the
rate with the least interference from other load). Prints each,
their share of the export time, and the projection to the 1M-passage exports of docs/scale.md
(arithmetic: their bytes at the hash rate measured here against their measured export times).
"""

from __future__ import annotations

import hashlib
import os
import platform
import tempfile
import time

import jax
import numpy as np
from absl import flags
from flax import linen as nn

from dense_cf import app as _app
from dense_cf import files
from dense_cf.configs.base import base_config
from dense_cf.index.shards import MANIFEST, SHARD_FILE_RE
from dense_cf.models.bert import axis_rules_for
from dense_cf.models.tokenizer import load_tokenizer
from dense_cf.parallel import mesh as mesh_lib
from dense_cf.retrieval import export
from dense_cf.retrieval.corpus import load_corpus
from dense_cf.synthetic import generate as synthetic
from dense_cf.train import run as run_lib
from dense_cf.train.state import make_optimizer

FLAGS = flags.FlagValues()
_N = flags.DEFINE_integer("passages", 20_000, "Passages to export.", flag_values=FLAGS)
_SHARD = flags.DEFINE_integer("shard_size", 5_000, "Passages per export shard.", flag_values=FLAGS)
_TINY = flags.DEFINE_list("tiny", ["64", "2", "2"], "hidden,layers,heads of the random BERT "
                          "(docs/scale.md's benchmark model: 64,2,2).", flag_values=FLAGS)
_DTYPE = flags.DEFINE_string("dtype", "float16", "Export dtype on disk.", flag_values=FLAGS)
_HASH_MB = flags.DEFINE_integer("hash_mb", 256, "MB hashed for the sha256 rate.", flag_values=FLAGS)

# docs/scale.md: (name, export seconds, export bytes) of 1M-passage exports.
SCALE_1M = (("tiny 64-d, 2-core CPU (measured, docs/scale.md)", 318.6, 0.143e9),
            ("BERT-base 768-d float16, one H100 at 7,003 passages/s (docs/feasibility.md)",
             1e6 / 7003, 1e6 * 768 * 2 + 16e6))


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        sha = "sha_ni" in open("/proc/cpuinfo").read()
        return f"{names[0] if names else platform.processor()} x{len(names)}, sha_ni={sha}"
    except OSError:
        return platform.processor()


def _run(tmp: str):
    cfg = base_config()
    cfg.model.name_or_path = "tiny"
    cfg.model.tiny_hidden, cfg.model.tiny_layers, cfg.model.tiny_heads = map(int, _TINY.value)
    cfg.data.max_p_len = 96
    mesh = mesh_lib.make_mesh(-1, 1)
    model, hf_params, tok_dir = run_lib.build_model(cfg)
    rules = axis_rules_for(model.config, 1)
    tx, _ = make_optimizer(cfg.optim, 10)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        state = run_lib.init_state(cfg, model, hf_params, tx, mesh, rules, jax.random.key(0))
    return run_lib.Run(config=cfg, model=model, params=state.params,
                       tokenizer=load_tokenizer(tok_dir), step=0, mesh=mesh, rules=rules)


def _hash_rates(tmp: str, mb: int, repeats: int = 5) -> tuple[float, float]:
    """Best of ``repeats`` (the machine's rate with the least interference from other load)."""
    blob = np.random.default_rng(0).integers(0, 256, mb << 20, dtype=np.uint8).tobytes()
    path = os.path.join(tmp, "blob")
    with open(path, "wb") as f:
        f.write(blob)
    memory = cached = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        hashlib.sha256(blob).hexdigest()
        memory = max(memory, mb / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        files.file_sha256(path)
        cached = max(cached, mb / (time.perf_counter() - t0))
    os.remove(path)
    return memory, cached


def main(argv) -> None:
    _app.no_positional(argv)
    with tempfile.TemporaryDirectory() as tmp:
        synthetic.generate(os.path.join(tmp, "syn"), num_passages=_N.value, seed=0)
        rows = list(load_corpus(os.path.join(tmp, "syn", "psgs_synth.tsv")).rows())
        run = _run(tmp)
        encoder = export.Encoder(run, 128)
        export.export_passages(run, rows[:256], os.path.join(tmp, "warm"), shard_size=256,
                               encoder=encoder, dtype=_DTYPE.value)  # compiles, untimed
        out = os.path.join(tmp, "out")
        t0 = time.perf_counter()
        m = export.export_passages(run, rows, out, shard_size=_SHARD.value, encoder=encoder,
                                   dtype=_DTYPE.value)
        export_s = time.perf_counter() - t0
        names = sorted(n for n in os.listdir(out) if SHARD_FILE_RE.fullmatch(n)) + [MANIFEST]
        nbytes = sum(os.path.getsize(os.path.join(out, n)) for n in names)
        t0 = time.perf_counter()
        files.write_sums(os.path.join(out, files.SUMS_NAME), [os.path.join(out, n) for n in names])
        write_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        problems = [p for p, why in files.check_sums(os.path.join(out, files.SUMS_NAME)) if why]
        # check_sums caches by (path, size, mtime) within a process: time a fresh read too.
        t1 = time.perf_counter()
        for n in names:
            files.file_sha256(os.path.join(out, n))
        verify_s = max(t1 - t0, time.perf_counter() - t1)
        memory, cached = _hash_rates(tmp, _HASH_MB.value)
    rows_out = [
        ("cpu", _cpu()),
        ("passages", m["count"]), ("export_s", round(export_s, 2)),
        ("export_passages_per_s", round(m["count"] / export_s, 1)),
        ("export_bytes", files.human_bytes(nbytes)),
        ("write_sums_s", round(write_s, 3)), ("verify_s", round(verify_s, 3)),
        ("write_sums_share_of_export", f"{100 * write_s / export_s:.2f} %"),
        ("verify_share_of_export", f"{100 * verify_s / export_s:.2f} %"),
        ("damaged_files_found", len(problems)),
        ("sha256_MB_per_s_memory", round(memory)), ("sha256_MB_per_s_cached_file", round(cached)),
    ]
    for name, secs, size in SCALE_1M:
        cost = size / (cached * 2**20)
        rows_out.append((f"1M projection: {name}",
                         f"export {secs:.0f} s, {files.human_bytes(size)}; write + verify "
                         f"{2 * cost:.2f} s = {100 * 2 * cost / secs:.2f} % of the export"))
    for k, v in rows_out:
        print(f"{k:>28}: {v}")


if __name__ == "__main__":
    _app.run(main, FLAGS, __doc__)
