"""Generate tests/fixtures/t5_tiny/{v1_0,v1_1}/greedy.npz: HF greedy generation references.

The reference for ``fid.greedy_decode`` in tests/test_fid.py: HF
``T5ForConditionalGeneration.generate(do_sample=False, num_beams=1)`` on the tiny random
checkpoints that tools/make_golden_t5.py wrote (the files are read, not regenerated). Needs torch
and transformers, which the project venv does not have; run it in a throwaway venv as that
script says:

    /tmp/refvenv/bin/python tools/make_golden_t5_greedy.py

Inputs: 4 padded rows of lengths 30/17/9/4 ending in ``</s>``. A random model rarely emits
``</s>`` (id 1), so the end token is a token HF's default run emits at step 2 of row 2: that row
stops early, others stop later or never, which exercises the per-row stop and the padding after
it. Stored: input_ids, attention_mask, eos_token_id, max_new_tokens, sequences (HF's output,
leading start token included).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from transformers import T5ForConditionalGeneration

LENGTHS = (30, 17, 9, 4)
MAX_NEW_TOKENS = 12


def make(model_dir: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(LENGTHS), max(LENGTHS)), np.int64)
    mask = np.zeros_like(ids)
    for i, n in enumerate(LENGTHS):
        ids[i, :n - 1] = rng.integers(2, 96, n - 1)
        ids[i, n - 1] = 1
        mask[i, :n] = 1
    model = T5ForConditionalGeneration.from_pretrained(model_dir, attn_implementation="eager").eval()
    kw = dict(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), do_sample=False,
              num_beams=1, max_new_tokens=MAX_NEW_TOKENS, pad_token_id=0, decoder_start_token_id=0)
    with torch.no_grad():
        eos = int(model.generate(**kw, eos_token_id=1)[2, 2])
        seq = model.generate(**kw, eos_token_id=eos).numpy()
    np.savez_compressed(os.path.join(model_dir, "greedy.npz"), input_ids=ids.astype(np.int32),
                        attention_mask=mask.astype(np.int32), eos_token_id=np.int32(eos),
                        max_new_tokens=np.int32(MAX_NEW_TOKENS), sequences=seq.astype(np.int32))
    print(f"wrote {model_dir}/greedy.npz: eos {eos}\n{seq}\ntorch {torch.__version__}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                       "t5_tiny"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for i, variant in enumerate(("v1_0", "v1_1")):
        make(os.path.join(args.fixtures, variant), args.seed + i)


if __name__ == "__main__":
    main()
