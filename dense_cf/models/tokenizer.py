"""BERT WordPiece tokenizer loading (``tokenizers``, no transformers).

Padding and truncation are always OFF: the data pipeline tokenises once, keeps per-token
offsets/sentence ids (docs/method.md §2) and pads/truncates itself. (all-MiniLM-L6-v2's tokenizer.json
pads every input to 128 by default.)
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from dense_cf.files import atomic_open, write_json

SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "unk": "[UNK]", "mask": "[MASK]"}

# DCSR's sentence marker (docs/method.md §4): a new special token appended to the vocabulary.
SENT_TOKEN = "<sent>"
RUN_TOKENIZER_DIR = "tokenizer"   # <workdir>/tokenizer/tokenizer.json: the run's extended vocab


def _do_lower_case(model_dir: str) -> bool:
    path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return bool(json.load(f).get("do_lower_case", True))
    return True  # BERT uncased is the common case (bert-base-uncased, MiniLM)


def _from_vocab(vocab_path: str, lowercase: bool) -> Tokenizer:
    """The same pipeline as HF ``BertTokenizerFast`` built from vocab.txt."""
    vocab = WordPiece.read_file(vocab_path)
    tok = Tokenizer(WordPiece(vocab, unk_token=SPECIAL_TOKENS["unk"], max_input_chars_per_word=100))
    # strip_accents=None follows lowercase, as in BERT.
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = SPECIAL_TOKENS["cls"], SPECIAL_TOKENS["sep"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([t for t in SPECIAL_TOKENS.values() if t in vocab])
    return tok


def load_tokenizer(model_dir: str) -> Tokenizer:
    """``tokenizer.json`` if present, else a BERT WordPiece tokenizer from ``vocab.txt``
    (lower-casing per ``tokenizer_config.json``'s ``do_lower_case``); padding/truncation off."""
    tj = os.path.join(model_dir, "tokenizer.json")
    vt = os.path.join(model_dir, "vocab.txt")
    if os.path.isfile(tj):
        tok = Tokenizer.from_file(tj)
    elif os.path.isfile(vt):
        tok = _from_vocab(vt, _do_lower_case(model_dir))
    else:
        raise FileNotFoundError(f"no tokenizer.json or vocab.txt in {model_dir!r}")
    tok.no_padding()
    tok.no_truncation()
    return tok


def special_ids(tok: Tokenizer) -> dict[str, int | None]:
    """Ids of [CLS], [SEP], [PAD], [UNK] (required) and [MASK] (None if absent)."""
    out: dict[str, int | None] = {}
    for name, token in SPECIAL_TOKENS.items():
        out[name] = tok.token_to_id(token)
        if out[name] is None and name != "mask":
            raise KeyError(f"tokenizer has no {token} token")
    return out


def add_tokens(tok: Tokenizer, tokens: tuple[str, ...] | list[str]) -> list[int]:
    """Adds ``tokens`` as special tokens (never split, never normalised); returns their ids.

    New tokens get the next free ids after the base vocabulary (``get_vocab_size`` before the
    call), in order; a token already present keeps its id.
    """
    tok.add_special_tokens(list(tokens))
    ids = [tok.token_to_id(t) for t in tokens]
    if any(i is None for i in ids):
        raise RuntimeError(f"could not add tokens {tokens} to the tokenizer")
    return ids


def tokenizer_for_run(extra: Sequence[str], tok_dir: str, workdir: str | None = None, *,
                      save: bool = False) -> Tokenizer:
    """The tokenizer of a run: the base vocabulary plus the method's added tokens ``extra``.

    With ``workdir``, a tokenizer saved there (``<workdir>/tokenizer/tokenizer.json``) is the
    source of truth, so a run keeps its extended vocabulary even if the base files change;
    ``save=True`` writes it (only when tokens were added: DPR runs use the base files). The
    rebuilt added-token ids are checked against the saved ones.
    """
    extra = tuple(extra)
    tok = load_tokenizer(tok_dir)
    ids = add_tokens(tok, extra) if extra else []
    if not workdir or not extra:
        return tok
    path = os.path.join(workdir, RUN_TOKENIZER_DIR, "tokenizer.json")
    if os.path.isfile(path):
        saved = Tokenizer.from_file(path)
        saved.no_padding()
        saved.no_truncation()
        got = [saved.token_to_id(t) for t in extra]
        if got != ids or saved.get_vocab_size() != tok.get_vocab_size():
            raise ValueError(f"{path}: added tokens {dict(zip(extra, got))} (vocab "
                             f"{saved.get_vocab_size()}) differ from the rebuilt ones "
                             f"{dict(zip(extra, ids))} (vocab {tok.get_vocab_size()}) of {tok_dir}")
        return saved
    if save:
        write_json(os.path.join(os.path.dirname(path), "added_tokens.json"), dict(zip(extra, ids)))
        with atomic_open(path) as f:  # last: its presence marks a saved tokenizer
            f.write(tok.to_str(pretty=True))  # = tok.save(path)
    return tok
