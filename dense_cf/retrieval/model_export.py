"""A trained run's encoders as Hugging Face directories (docs/interop.md).

    python -m dense_cf.cli.export_hf --workdir RUN [--step N] --out DIR [--format hf|dpr]

Layout of ``DIR``:
- ``question_encoder/`` and ``passage_encoder/`` (one ``encoder/`` when the towers are shared):
  each a complete directory: ``config.json``, ``model.safetensors``, the run's ``tokenizer.json``
  (added tokens such as DCSR's ``<sent>`` included), the base tokenizer's other files and
  ``added_tokens.json``. Format ``hf``: transformers' ``BertModel``, plus sentence-transformers'
  ``modules.json`` / ``1_Pooling`` (/ ``2_Normalize``) so that library pools as the run does.
  Format ``dpr``: ``DPRQuestionEncoder`` / ``DPRContextEncoder`` (keys under
  ``question_encoder.bert_model.`` / ``ctx_encoder.bert_model.``; their ``pooler_output`` is the
  [CLS] vector, so only [CLS]-pooled, unnormalised passage-level runs fit it).
- ``export.json``: which directory holds which tower, pooling, method, step, source run;
- ``README.md``: the model card (pooling, input format, training config, evaluation report).

The directory is built beside ``DIR`` and renamed into place, so a crash leaves no half export.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np

from dense_cf.files import (
    SUMS_NAME,
    UserError,
    atomic_open,
    build_dir_atomically,
    write_json,
    write_sums,
)
from dense_cf.models import checkpoints
from dense_cf.train.run import Run, RunDir, load_run

__all__ = ["FORMATS", "export_run", "write_export"]

FORMATS = ("hf", "dpr")
TOWER_DIRS = {"question": "question_encoder", "passage": "passage_encoder", "shared": "encoder"}


def _check_format(run: Run, fmt: str) -> None:
    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "dpr" and (run.model.pooling != "cls" or run.model.normalize or run.method.unit != "passage"):
        raise UserError(
            f"--format dpr holds [CLS]-pooled, unnormalised passage vectors; this run ({run.config.method}) "
            f"pools by {run.model.pooling}{' + normalize' if run.model.normalize else ''} over "
            f"{run.method.unit}s: export it with --format hf")


def _tokenizer_json(run: Run) -> str:
    tok = run.tokenizer.__class__.from_str(run.tokenizer.to_str())
    tok.no_padding()      # the run pads and truncates per call; a saved tokenizer must not
    tok.no_truncation()
    return tok.to_str(pretty=True)


def _added_tokens(run: Run) -> dict[str, int]:
    return {t: int(run.tokenizer.token_to_id(t)) for t in run.method.added_tokens}


def _card(run: Run, workdir: str | None, fmt: str, towers: dict[str, str]) -> str:
    cfg, m = run.config, run.model
    pooling = {"cls": "the [CLS] token's last hidden state (no pooler)",
               "mean": "the mean of the last hidden states over non-padding tokens"}[m.pooling]
    if m.normalize:
        pooling += ", scaled to unit length"
    if run.method.unit == "sentence":
        pooling = ("one vector per sentence: the passage tower's last hidden state at each `<sent>` "
                   "marker (DCSR, docs/method.md §4); questions: " + pooling)
    added = _added_tokens(run)
    lines = [
        f"# dense_cf {cfg.method} retriever (step {run.step})", "",
        f"Dual encoder exported by `dense_cf.cli.export_hf --format {fmt}` from "
        f"`{os.path.abspath(workdir) if workdir else 'an untrained checkpoint'}`.", "",
        "| | |", "|---|---|",
        f"| method | {cfg.method} |",
        f"| towers | {', '.join(f'{r}: `{d}/`' for r, d in towers.items())} |",
        f"| architecture | BERT, {m.config.num_layers} layers, hidden {m.config.hidden_size}, "
        f"{m.config.num_heads} heads, vocabulary {m.config.vocab_size} |",
        f"| pooling | {pooling} |",
        "| similarity | dot product of question and passage vectors |",
        f"| max lengths | question {cfg.data.max_q_len}, passage {cfg.data.max_p_len} tokens |",
        f"| added tokens | {', '.join(f'`{t}` (id {i})' for t, i in added.items()) or 'none'} |",
        "",
        "## Inputs", "",
        "- question: `[CLS] question [SEP]`;",
        "- passage: `[CLS] title [SEP] text [SEP]` (`[CLS] text [SEP]` when the title is empty), "
        "i.e. `tokenizer(title, text)`; truncation keeps the final `[SEP]`;",
        "- every `token_type_ids` entry is 0, as in DPR's own code (`tokenizer(title, text)` gives "
        "the text segment 1: set them to 0).", "",
        "## Use", "",
        "```python",
        "import torch",
        "from transformers import AutoTokenizer, " + ("DPRQuestionEncoder, DPRContextEncoder"
                                                      if fmt == "dpr" else "AutoModel"),
    ]
    qd, pd = towers.get("question", towers.get("shared")), towers.get("passage", towers.get("shared"))
    if fmt == "dpr":
        lines += [f"q_enc = DPRQuestionEncoder.from_pretrained('{qd}')",
                  f"p_enc = DPRContextEncoder.from_pretrained('{pd}')",
                  f"tok = AutoTokenizer.from_pretrained('{pd}')",
                  "q = q_enc(**tok(['who wrote hamlet?'], return_tensors='pt')).pooler_output",
                  "x = tok(['Hamlet'], ['Hamlet is a tragedy by Shakespeare.'], return_tensors='pt')",
                  "x['token_type_ids'].zero_()",
                  "p = p_enc(**x).pooler_output",
                  "score = q @ p.T"]
    else:
        pool_expr = ("h[:, 0]" if m.pooling == "cls" else
                     "(h * x['attention_mask'][..., None]).sum(1) / x['attention_mask'].sum(1, keepdim=True)")
        lines += [f"q_enc, p_enc = AutoModel.from_pretrained('{qd}'), AutoModel.from_pretrained('{pd}')",
                  f"tok = AutoTokenizer.from_pretrained('{pd}')",
                  "def embed(enc, x):",
                  "    h = enc(**x).last_hidden_state",
                  f"    v = {pool_expr}",
                  "    return " + ("torch.nn.functional.normalize(v, dim=-1)" if m.normalize else "v"),
                  "q = embed(q_enc, tok(['who wrote hamlet?'], return_tensors='pt'))",
                  "x = tok(['Hamlet'], ['Hamlet is a tragedy by Shakespeare.'], return_tensors='pt')",
                  "x['token_type_ids'].zero_()",
                  "p = embed(p_enc, x)",
                  "score = q @ p.T"]
    lines += ["```", "",
              "Back in dense_cf: `--model DIR` on `dense_cf.eval.aar`, `dense_cf.eval.retrieval` or "
              "`dense_cf.eval.robustness`, or `model.name_or_path=DIR` to train from it.", ""]
    if workdir:
        ev = RunDir(workdir).eval(run.step)
        for name, title in (("report.md", "Retrieval"), ("aar.md", "Answer-awareness")):
            path = os.path.join(ev, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    body = f.read().split("\n", 1)[-1].replace("](", f"]({os.path.abspath(ev)}/")
                lines += [f"## Evaluation: {title} (`{path}`)", "", body.strip(), ""]
    lines += ["## Training config", "", "```json",
              json.dumps(cfg.to_dict(), indent=2, sort_keys=True, default=str), "```", ""]
    return "\n".join(lines)


def write_export(run: Run, out_dir: str, *, fmt: str = "hf", workdir: str | None = None,
                 overwrite: bool = False) -> dict[str, Any]:
    """Writes ``run``'s towers to ``out_dir`` in ``fmt`` (module docstring); returns the manifest."""
    _check_format(run, fmt)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"--out {out_dir} exists and is not a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not overwrite:
        raise UserError(f"--out {out_dir} exists and is not empty: pass --overwrite or another directory")
    params = jax.tree.map(np.asarray, jax.device_get(run.params))
    names = ("shared",) if run.model.shared else ("question", "passage")
    if fmt == "dpr":  # DPR's classes have one role each: a shared tower is written twice
        names = ("question", "passage")
    towers = {n: TOWER_DIRS[n] for n in names}
    manifest = {"format": fmt, "method": run.config.method, "step": int(run.step),
                "source_workdir": os.path.abspath(workdir) if workdir else None,
                "pooling": run.model.pooling, "normalize": bool(run.model.normalize),
                "unit": run.method.unit, "added_tokens": _added_tokens(run),
                "towers": {r: towers["shared"] if "shared" in towers else towers[r]
                           for r in checkpoints.ROLES}}
    tok_json = _tokenizer_json(run)

    def build(tmp: str) -> None:
        for name, sub in towers.items():
            tree = params["shared"] if run.model.shared else params[name]
            role = "passage" if name == "shared" else name
            d = checkpoints.save_tower(tree, run.model.config, os.path.join(tmp, sub), layout=fmt,
                                       role=role, tokenizer_json=tok_json, tokenizer_dir=run.tok_dir,
                                       added_tokens=manifest["added_tokens"])
            if fmt == "hf" and run.method.unit == "passage":
                checkpoints.sentence_transformers_files(
                    d, run.model.pooling, run.model.normalize, run.model.config.hidden_size,
                    run.config.data.max_p_len)
            # Each tower directory stands alone (it may be uploaded by itself): its checksums
            # beside its files, checked by hf.read_safetensors before the weights are used.
            write_sums(os.path.join(d, SUMS_NAME), [os.path.join(r, n) for r, _, ns in os.walk(d)
                                                    for n in ns if n != SUMS_NAME])
        with atomic_open(os.path.join(tmp, "README.md")) as f:
            f.write(_card(run, workdir, fmt, towers))
        write_json(os.path.join(tmp, checkpoints.EXPORT_MANIFEST), manifest)

    # --overwrite swaps the old directory out only once the new one is complete.
    build_dir_atomically(out_dir, build, replace=True)
    return dict(manifest, out_dir=os.path.abspath(out_dir))


def export_run(workdir: str, out_dir: str, *, step: int | None = None, fmt: str = "hf",
               overwrite: bool = False) -> dict[str, Any]:
    """Loads ``workdir``'s checkpoint (latest or ``step``) and writes it with :func:`write_export`."""
    run = load_run(workdir, step)
    return write_export(run, out_dir, fmt=fmt, workdir=workdir, overwrite=overwrite)
