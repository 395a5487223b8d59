"""Pivot check: does the counterfactual p* sit between p+ and the negatives (docs/method.md §3)?

PiCL's L_cpp (eq. 9) treats p* as a *pivot*: it asks the question to score p* above the
in-batch and hard negatives, on the premise that p* (p+ with its evidence removed) is still
closer to q than an unrelated passage. This module measures that premise on a bi-encoder file
(``question``, ``answers``, ``positive_ctxs``, ``hard_negative_ctxs``, ``negative_ctxs``) with
any passage-level run or untrained encoder:

* ``p* > hard negative``: P[sim(q,p*) > sim(q,h)] for the first hard negative h;
* ``p* > random negative``: P[sim(q,p*) > sim(q,r)] for the first random negative r;
* ``p+ > hard negative`` and ``p+ > p*`` for reference;

each a rate with its Wilson 95 % interval, and the mean score differences with percentile
bootstrap intervals (:mod:`dense_cf.eval.stats`). p* is built by the training counterfactual
code (:func:`dense_cf.eval.aar.triplet_scores`), so records it cannot score are counted by the
same fates as AAR. A premise rate near 50 % on the hard negatives means L_cpp asks for an
ordering the encoder cannot justify from the text.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dense_cf.datasets.formats import BiencoderExample
from dense_cf.eval import aar as aar_lib
from dense_cf.eval import stats
from dense_cf.inputs.tokens import tokenize_passages
from dense_cf.retrieval import export

__all__ = ["COMPARISONS", "pivot_check"]

# label -> (higher, lower) score columns
COMPARISONS = {"p* > hard negative": ("cf", "hard"), "p* > random negative": ("cf", "random"),
               "p+ > hard negative": ("pos", "hard"), "p+ > p*": ("pos", "cf")}


def pivot_check(run, examples: Sequence[BiencoderExample], *, strategy: str = "sentence",
                batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
    """Premise rates of L_cpp over ``examples`` (module docstring). Examples without a hard
    and a random negative are counted as ``no_negatives`` and not scored."""
    usable = [e for e in examples if e.positive_ctxs and e.hard_negative_ctxs and e.negative_ctxs]
    triplets = aar_lib.Triplets(
        questions=[e.question for e in usable], answers=[list(e.answers) for e in usable],
        titles=[e.positive_ctxs[0].title for e in usable],
        contexts=[e.positive_ctxs[0].text for e in usable], stats={})
    encoder = export.Encoder(run, batch_size)
    s = aar_lib.triplet_scores(run, triplets, strategy, encoder=encoder, batch_size=batch_size)
    idx = np.asarray(s["index"], np.int64)
    out: dict[str, Any] = {"strategy": strategy, "records": len(examples),
                           "no_negatives": len(examples) - len(usable),
                           "fates": dict(s["fates"].counts), "scored": int(len(idx))}
    if not len(idx):
        return out
    chosen = [usable[i] for i in idx]
    q = export.encode_questions(run, [e.question for e in chosen], encoder=encoder)
    max_p = run.config.data.max_p_len
    cols = {"pos": np.asarray(s["pos"]), "cf": np.asarray(s["cf"])}
    for name, pick in (("hard", lambda e: e.hard_negative_ctxs[0]),
                       ("random", lambda e: e.negative_ctxs[0])):
        ps = [pick(e) for e in chosen]
        ids, mask = tokenize_passages(run.tokenizer, [p.title for p in ps], [p.text for p in ps],
                                      max_p)
        cols[name] = np.einsum("bd,bd->b", q, encoder.passages(ids, mask))
    out["mean_scores"] = {k: float(v.mean()) for k, v in cols.items()}
    out["comparisons"] = {}
    for label, (hi, lo) in COMPARISONS.items():
        diff = cols[hi] - cols[lo]
        wins = int((diff > 0).sum())
        boot = stats.bootstrap_mean_ci(diff, seed=seed)
        out["comparisons"][label] = {
            "rate": wins / len(diff), "rate_ci": list(stats.wilson_interval(wins, len(diff))),
            "mean_diff": float(diff.mean()), "mean_diff_ci": [boot["lo"], boot["hi"]],
            "n": int(len(diff))}
    return out


def markdown(result: dict[str, Any], title: str = "") -> str:
    """One table: comparison | rate % [95 % CI] | mean score difference [95 % CI] | n."""
    head = f"### {title}\n\n" if title else ""
    if "comparisons" not in result:
        return head + f"no scored record ({result['fates']})"
    lines = ["| comparison | rate % [95% CI] | mean difference [95% CI] | n |",
             "|---|---|---|---|"]
    for label, c in result["comparisons"].items():
        lo, hi = (100 * x for x in c["rate_ci"])
        dlo, dhi = c["mean_diff_ci"]
        lines.append(f"| {label} | {100 * c['rate']:.1f} [{lo:.1f}, {hi:.1f}] | "
                     f"{c['mean_diff']:+.3f} [{dlo:+.3f}, {dhi:+.3f}] | {c['n']} |")
    return head + "\n".join(lines) + (
        f"\n\n{result['scored']} of {result['records']} records scored "
        f"(p* strategy `{result['strategy']}`; {result['no_negatives']} without a hard and a "
        f"random negative; fates {result['fates']}).")
