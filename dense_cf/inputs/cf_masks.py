"""Counterfactual passages p* = p+ with its evidence removed (docs/method.md §2; PiCL §3.1, EADPR §3.1).

The work is split so that tokenisation happens once:

* host side, at preprocessing time, every passage token gets a sentence id
  (:func:`token_sentence_ids`) and, for a (question, positive) pair, an answer flag
  (:func:`token_answer_flags`, DPR ``has_answer`` normalisation via ``answers.py``);
* in the input pipeline (``inputs.source``), :func:`drop_mask` turns those per-token features into the mask of tokens
  to drop for the configured strategy, on the fly, so one cache serves every strategy.

Strategies (PiCL Table 4):
  ``sentence``  drop every sentence that contains an answer match (default, best in PiCL);
  ``window``    drop answer-match tokens plus ``window`` word pieces on each side. docs/method.md §2 says
                "tokens/words": we count word pieces, the unit the encoder sees;
  ``answer``    drop only the answer-match tokens (EADPR's answer-masked p' for the AA score);
  ``evidence``  drop the sentence chosen by a QA model (EADPR §3.1), precomputed per example
                as ``evidence_sent`` (-1: none).
Tokens that belong to no sentence (title, special tokens; sentence id -1) are never dropped.
An example whose positive has no answer match (or no evidence annotation) has no
counterfactual (``cf_valid`` False) and trains with the plain DPR terms.
"""

from __future__ import annotations

import numpy as np

from dense_cf.inputs.tokens import token_answer_flags, token_sentence_ids  # noqa: F401 (re-export)

STRATEGIES = ("sentence", "window", "answer", "evidence")


def drop_mask(sent_ids: np.ndarray, ans_flags: np.ndarray, strategy: str, *, window: int = 0,
              evidence_sent: int = -1) -> tuple[np.ndarray, bool]:
    """Tokens to drop from p+ to make p*, and whether a counterfactual exists.

    Args:
      sent_ids: int [L] sentence id per token, -1 for title/special tokens.
      ans_flags: int/bool [L] answer-match flag per token.
      strategy: one of :data:`STRATEGIES`.
      window: word pieces kept around the answer for ``window``.
      evidence_sent: sentence id chosen by the QA model for ``evidence`` (-1: none).
    Returns:
      (drop [L] bool, valid bool).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown counterfactual strategy {strategy!r}; expected one of {STRATEGIES}")
    sent_ids = np.asarray(sent_ids, np.int32)
    in_text = sent_ids >= 0
    ans = np.asarray(ans_flags).astype(bool) & in_text
    if strategy == "answer":
        drop = ans
    elif strategy == "sentence":
        drop = np.isin(sent_ids, sent_ids[ans]) & in_text
    elif strategy == "window":
        pos = np.arange(len(sent_ids))
        near = np.abs(pos[:, None] - pos[ans][None, :]) <= window  # [L, answer tokens]
        drop = near.any(axis=1) & in_text
    else:  # evidence
        ev = int(evidence_sent)
        drop = (sent_ids == ev) & (ev >= 0) & in_text
    # A counterfactual exists only if something is dropped and some text remains: an empty p*
    # would just be "[CLS] title [SEP]", a degenerate pivot.
    valid = bool(drop.any() and (in_text & ~drop).any())
    return drop, valid
