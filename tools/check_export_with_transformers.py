"""Checks ``dense_cf.cli.export_hf`` output against transformers itself, across two Python envs.

    # 1. with dense_cf (JAX): export MiniLM (or --workdir RUN) in both formats + our embeddings
    python tools/check_export_with_transformers.py write OUT [--workdir RUN]
    # 2. with torch + transformers (no JAX needed): load the exports, compare
    python tools/check_export_with_transformers.py check OUT

``tests/test_interop.py::test_transformers_loads_the_exports`` does the same in one process
when torch and transformers are importable beside dense_cf.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

QUESTIONS = ["who wrote the play hamlet?", "when was the eiffel tower built?"]
PASSAGES = [("Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
            ("", "The Eiffel Tower was built from 1887 to 1889 in Paris.")]


def write(out: str, workdir: str | None) -> None:
    from dense_cf.configs.base import base_config
    from dense_cf.retrieval import export
    from dense_cf.retrieval.model_export import write_export
    from dense_cf.train.run import load_run, pretrained_run

    if workdir:
        run = load_run(workdir)
    else:  # DPR's format needs [CLS] pooling: MiniLM with cls, unnormalised
        c = base_config()
        c.model.name_or_path, c.model.pooling = "minilm", "cls"
        c.data.max_q_len, c.data.max_p_len = 32, 64
        run = pretrained_run(c)
    for fmt in ("hf", "dpr"):
        write_export(run, os.path.join(out, fmt), fmt=fmt, workdir=workdir, overwrite=True)
    q = export.encode_questions(run, QUESTIONS)
    tmp = os.path.join(out, "passages")
    export.export_passages(run, [(str(i), t, ti) for i, (ti, t) in enumerate(PASSAGES)], tmp,
                           dtype="float32")
    p = export.load_embeddings(tmp).astype(np.float32)
    np.savez(os.path.join(out, "dense_cf.npz"), q=q, p=p)
    json.dump({"pooling": run.model.pooling, "normalize": bool(run.model.normalize)},
              open(os.path.join(out, "pooling.json"), "w"))
    print(f"wrote {out}")


def check(out: str) -> int:
    import torch
    import transformers

    ours = np.load(os.path.join(out, "dense_cf.npz"))
    pool = json.load(open(os.path.join(out, "pooling.json")))
    worst = 0.0
    for fmt in ("hf", "dpr"):
        root = os.path.join(out, fmt)
        towers = json.load(open(os.path.join(root, "export.json")))["towers"]
        tok = transformers.AutoTokenizer.from_pretrained(os.path.join(root, towers["passage"]))
        xq = tok(QUESTIONS, return_tensors="pt", padding=True)
        # An empty title: dense_cf encodes "[CLS] text [SEP]", as tokenizer(text) does.
        xp_rows = [tok(x, return_tensors="pt") if not t else tok(t, x, return_tensors="pt")
                   for t, x in PASSAGES]
        for x in xp_rows:  # DPR's convention, which dense_cf keeps: every segment id is 0
            x["token_type_ids"] = torch.zeros_like(x["input_ids"])
        with torch.no_grad():
            if fmt == "dpr":
                qe = transformers.DPRQuestionEncoder.from_pretrained(os.path.join(root, towers["question"]))
                pe = transformers.DPRContextEncoder.from_pretrained(os.path.join(root, towers["passage"]))
                q = qe(**xq).pooler_output.numpy()
                p = np.concatenate([pe(**x).pooler_output.numpy() for x in xp_rows])
            else:
                qe = transformers.BertModel.from_pretrained(os.path.join(root, towers["question"]))
                pe = transformers.BertModel.from_pretrained(os.path.join(root, towers["passage"]))

                def emb(enc, x):
                    h = enc(**x).last_hidden_state
                    if pool["pooling"] == "cls":
                        v = h[:, 0]
                    else:
                        m = x["attention_mask"][..., None].float()
                        v = (h * m).sum(1) / m.sum(1)
                    return torch.nn.functional.normalize(v, dim=-1) if pool["normalize"] else v

                q = emb(qe, xq).numpy()
                p = np.concatenate([emb(pe, x).numpy() for x in xp_rows])
        dq = float(np.abs(q - ours["q"]).max())
        dp = float(np.abs(p - ours["p"]).max())
        worst = max(worst, dq, dp)
        print(f"{fmt}: max |transformers - dense_cf|: questions {dq:.2e}, passages {dp:.2e} "
              f"(transformers {transformers.__version__}, torch {torch.__version__})")
    ok = worst < 1e-4
    print("OK" if ok else f"MISMATCH (worst {worst:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("write", "check"))
    ap.add_argument("out")
    ap.add_argument("--workdir")
    a = ap.parse_args()
    sys.exit(write(a.out, a.workdir) if a.mode == "write" else check(a.out))
