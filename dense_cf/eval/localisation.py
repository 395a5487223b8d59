"""Within-passage sentence localisation of a sentence-unit run (DCSR; docs/dcsr.md).

For every gold record (question, title, context) whose context has a sentence holding an
answer, the context's sentence vectors (``encode_passage_at`` at its ``<sent>`` markers, as the
export encodes them) are scored against the question vector. Reported: how often the top
sentence holds an answer (rate with a Wilson 95 % interval) against chance (answer sentences /
sentences, averaged), the mean margin of the best answer sentence over the best other
sentence, the mean within-passage standard deviation of the scores, and the mean pairwise
cosine of one passage's sentence vectors (1.0: every "sentence" vector is one passage vector,
as with ``dcsr.sent_init = cls`` on MiniLM). Records without an answer sentence inside
``max_p_len`` are counted, not scored.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from dense_cf.eval import stats
from dense_cf.inputs import tokens
from dense_cf.retrieval import export
from dense_cf.text.answers import has_answer

__all__ = ["localisation"]


def _sentence_texts(tokenizer, ids: np.ndarray, positions: np.ndarray, stop: set[int]) -> list[str]:
    out = []
    for p in positions:
        toks = []
        for t in ids[int(p) + 1:]:
            if int(t) in stop:
                break
            toks.append(int(t))
        out.append(tokenizer.decode(toks))
    return out


def localisation(run, records: Sequence[dict[str, Any]], answers: Sequence[Sequence[str]], *,
                 batch_size: int = 64, mode: str = "string") -> dict[str, Any]:
    """The figures of the module docstring for ``records`` (gold-info dicts with ``question``,
    ``title``, ``context``) and their ``answers``; ``run`` must index sentences."""
    if run.method.unit != "sentence":
        raise ValueError(f"method {run.config.method!r} indexes {run.method.unit}s, not sentences: "
                         "localisation needs a sentence-unit run (e.g. dcsr)")
    cfg = run.config
    si = run.method.sentence_index(cfg)
    t = tokens.tokenize_marked_passages(run.tokenizer, [r["title"] for r in records],
                                        [r["context"] for r in records],
                                        max_len=int(cfg.data.max_p_len),
                                        max_sents=si.max_sents, sent_token=si.token,
                                        title=si.title)
    at = jax.jit(lambda p, i, m, w: run.model.apply({"params": p}, i, m, w,
                                                    method=run.model.encode_passage_at))
    vec = np.concatenate([np.asarray(at(run.params, t["ids"][s:s + batch_size],
                                        t["mask"][s:s + batch_size],
                                        t["positions"][s:s + batch_size]))
                          for s in range(0, len(records), batch_size)]) if records else None
    q = export.encode_questions(run, [r["question"] for r in records])
    stop = {run.tokenizer.token_to_id("[SEP]"), run.tokenizer.token_to_id(si.token)}
    top = chance = 0.0
    n = no_answer_sentence = single_sentence = 0
    margins, spreads, cosines = [], [], []
    for i, rec in enumerate(records):
        valid = t["valid"][i]
        texts = _sentence_texts(run.tokenizer, t["ids"][i], t["positions"][i][valid], stop)
        is_ans = np.array([has_answer(answers[i], s, mode=mode) for s in texts], bool)
        if not is_ans.any():
            no_answer_sentence += 1
            continue
        v = vec[i][valid]
        sc = v @ q[i]
        n += 1
        top += bool(is_ans[int(np.argmax(sc))])
        chance += float(is_ans.mean())
        spreads.append(float(sc.std()))
        if len(v) < 2:
            single_sentence += 1
            continue
        u = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        cosines.append(float((u @ u.T)[np.triu_indices(len(u), 1)].mean()))
        if (~is_ans).any():
            margins.append(float(sc[is_ans].max() - sc[~is_ans].max()))
    lo, hi = stats.wilson_interval(int(top), n) if n else (float("nan"), float("nan"))
    return {"records": len(records), "scored": n, "no_answer_sentence": no_answer_sentence,
            "single_sentence": single_sentence,
            "top_sentence_is_answer": 100.0 * top / n if n else float("nan"),
            "top_sentence_is_answer_ci": [100.0 * lo, 100.0 * hi],
            "chance": 100.0 * chance / n if n else float("nan"),
            "mean_margin": float(np.mean(margins)) if margins else float("nan"),
            "mean_score_std": float(np.mean(spreads)) if spreads else float("nan"),
            "mean_sentence_cosine": float(np.mean(cosines)) if cosines else float("nan")}
