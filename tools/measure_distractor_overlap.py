"""Surface overlap of each held-out distractor kind with its gold passage and its question
(issue 50): how hard each kind is for a lexical matcher, next to the training p*.

For every training question of a synthetic world (``synthetic.generate``), one distractor of
each kind (``heldout_variants(kinds=(kind,), k=1)``; answers = every answer of the questions
sharing the passage) and the sentence p* (``counterfactual_text``), then the mean
``token_recall`` of the gold passage's and of the question's distinct tokens in it. The gold
passage itself is the question-overlap ceiling. Passages a kind cannot be built for are
counted, not averaged.

    PYTHONPATH=. python tools/measure_distractor_overlap.py /tmp/overlap 300 1 2 3
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

from dense_cf.datasets import formats
from dense_cf.synthetic import distractors as D
from dense_cf.synthetic import generate as synthetic
from dense_cf.text.counterfactuals import counterfactual_text


def main(root: str, n: int, seeds: list[int]) -> None:
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    missing: dict[str, int] = defaultdict(int)
    for seed in seeds:
        out = os.path.join(root, f"world_{n}_{seed}")
        if not os.path.exists(os.path.join(out, synthetic.FILES["meta"])):
            synthetic.generate(out, n, seed=seed, workers=1)
        titles = [t for _, _, t in formats.read_corpus_tsv(
            os.path.join(out, synthetic.FILES["corpus"]), skip_bad=False)]
        index = D.namesake_index(titles)
        examples = formats.read_biencoder(os.path.join(out, synthetic.FILES["train"]),
                                          skip_bad=False)
        shared: dict[tuple[str, str], list[str]] = defaultdict(list)
        for e in examples:
            p = e.positive_ctxs[0]
            shared[(p.title, p.text)].extend(a for a in e.answers
                                             if a not in shared[(p.title, p.text)])
        for i, e in enumerate(examples):
            p = e.positive_ctxs[0]
            answers = shared[(p.title, p.text)]
            texts = {"gold passage": p.text,
                     "p* (sentence, training)": counterfactual_text(p.text, answers)}
            for kind in D.KINDS:
                got = D.heldout_variants(p.title, p.text, answers, 1, seed=i, namesakes=index,
                                         kinds=(kind,))
                texts[kind] = got[0][2] if got else None
            for name, text in texts.items():
                if text is None:
                    missing[name] += 1
                    continue
                rows[name]["gold"].append(D.token_recall(p.text, text))
                rows[name]["question"].append(D.token_recall(e.question, text))
    print(f"worlds: {n} passages, seeds {seeds}")
    print("| text | n | gold-token recall | question-token recall | not built |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        k = len(r["gold"])
        print(f"| {name} | {k} | {sum(r['gold']) / k:.3f} | {sum(r['question']) / k:.3f} "
              f"| {missing[name]} |")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3:]] or [1])
