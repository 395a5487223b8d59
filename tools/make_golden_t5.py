"""Generate tests/fixtures/t5_tiny/: tiny random HF T5 checkpoints + PyTorch reference outputs.

The reference for tests/test_t5.py (Flax T5 parity with HF ``T5ForConditionalGeneration``). Two
variants, each in its own directory with ``config.json``, ``model.safetensors`` and
``golden.npz``:

* ``v1_0``: T5 v1.0 layout (ReLU ``wi``/``wo``, LM head tied to ``shared``, decoder output
  scaled by d_model**-0.5), as UnifiedQA;
* ``v1_1``: T5 v1.1 layout (gated-GELU ``wi_0``/``wi_1``, untied ``lm_head``, no scaling).

Needs torch and transformers, which the project venv does not have; run it in a throwaway venv:

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /tmp/refvenv/bin/pip install transformers safetensors numpy
    /tmp/refvenv/bin/python tools/make_golden_t5.py

Inputs use integer ids directly (no tokenizer): a padded batch of 3 encoder inputs of lengths
up to 40 (longer than max_exact so the log-spaced buckets are exercised, with max_distance 20
so the clipped bucket is too), and labels padded with -100. Stored: input_ids, attention_mask,
labels, decoder_input_ids (HF's shift), logits [B, T, V] (float32 and logits_f64 from the same
model in float64), loss (HF mean cross-entropy), and encoder_last_hidden_state.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import T5Config, T5ForConditionalGeneration

VARIANTS = {
    "v1_0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "v1_1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}
COMMON = dict(vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2,
              num_heads=4, relative_attention_num_buckets=16, relative_attention_max_distance=20,
              dropout_rate=0.0, layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1,
              decoder_start_token_id=0)


def _inputs(rng: np.random.Generator, vocab: int):
    enc_lens, lab_lens = [40, 23, 7], [5, 1, 3]
    b, le, ll = len(enc_lens), max(enc_lens), max(lab_lens)
    ids = np.zeros((b, le), np.int64)
    mask = np.zeros((b, le), np.int64)
    labels = np.full((b, ll), -100, np.int64)
    for i, (n, m) in enumerate(zip(enc_lens, lab_lens)):
        ids[i, :n - 1] = rng.integers(2, vocab, n - 1)
        ids[i, n - 1] = 1  # </s>
        mask[i, :n] = 1
        labels[i, :m - 1] = rng.integers(2, vocab, m - 1)
        labels[i, m - 1] = 1
    return ids, mask, labels


def make(variant: str, out_dir: str, seed: int) -> None:
    torch.manual_seed(seed)
    config = T5Config(**COMMON, **VARIANTS[variant])
    model = T5ForConditionalGeneration(config).eval()
    # HF initialises T5 with tiny std for some weights; widen everything so that every path
    # (position buckets, gating, head) moves the logits measurably.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
        if not VARIANTS[variant]["tie_word_embeddings"]:
            model.lm_head.weight = torch.nn.Parameter(0.2 * torch.randn_like(model.shared.weight))
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    # Real hub checkpoints store `shared` (and the embed_tokens copies); a tied head is omitted.
    if VARIANTS[variant]["tie_word_embeddings"]:
        sd.pop("lm_head.weight", None)
    os.makedirs(out_dir, exist_ok=True)
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out_dir)

    rng = np.random.default_rng(seed)
    ids, mask, labels = _inputs(rng, COMMON["vocab_size"])
    # Reload from disk: the reference must be what HF computes from the files we ship.
    ref = T5ForConditionalGeneration.from_pretrained(out_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                  labels=torch.from_numpy(labels))
        dec_in = ref._shift_right(torch.from_numpy(labels))
        # float64 logits: the float32 rounding floor of this fixture (both implementations are
        # compared to it in the tests, so a failure separates bugs from rounding).
        logits64 = ref.double()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                                labels=torch.from_numpy(labels)).logits
    np.savez_compressed(
        os.path.join(out_dir, "golden.npz"),
        input_ids=ids.astype(np.int32), attention_mask=mask.astype(np.int32),
        labels=labels.astype(np.int32), decoder_input_ids=dec_in.numpy().astype(np.int32),
        logits=out.logits.numpy().astype(np.float32), loss=np.float32(out.loss.item()),
        logits_f64=logits64.numpy(),
        encoder_last_hidden_state=out.encoder_last_hidden_state.numpy().astype(np.float32))
    print(f"wrote {out_dir}: loss {out.loss.item():.6f}, torch {torch.__version__}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "t5_tiny"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for i, variant in enumerate(VARIANTS):
        make(variant, os.path.join(args.out, variant), args.seed + i)


if __name__ == "__main__":
    main()
