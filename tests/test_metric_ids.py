"""Claims and study tables name metrics by their stable id; display labels are spelled once,
in ``dense_cf.eval.outcomes`` (issue 48, review 3 §5 "Done when" 2)."""

import ast
import glob
import os

import pytest

from dense_cf.eval import claims, outcomes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where a label may not be spelled: the studies, the demo and the analysis layer.
SOURCES = sorted(glob.glob(os.path.join(ROOT, "dense_cf", "studies", "*.py"))
                 + glob.glob(os.path.join(ROOT, "dense_cf", "analysis", "*.py"))
                 + [os.path.join(ROOT, "dense_cf", "demo.py")])
# A label this long or longer is looked for inside any string (prose, headers, f-string
# parts); a shorter one ("AAR", "top-1") only as a whole string, since words like "AAR" are
# also prose ("PiCL raises answer-awareness (AAR)").
LONG = 12


def _strings(path):
    """(line, text) of every string constant of ``path``, f-string parts included."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _labels():
    return sorted({m.label for m in outcomes.METRICS.values()}, key=len, reverse=True)


def test_the_sources_are_found():
    assert len(SOURCES) >= 8, SOURCES
    assert _labels(), "the metric table is empty"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: os.path.relpath(p, ROOT))
def test_no_display_label_is_spelled_outside_the_metric_table(path):
    bad = []
    for line, text in _strings(path):
        for label in _labels():
            if text == label or (len(label) >= LONG and label in text):
                bad.append(f"{os.path.relpath(path, ROOT)}:{line}: {label!r} in {text[:80]!r}")
    assert not bad, "\n".join(bad)


def test_the_check_fails_on_a_label_that_is_not_in_the_table():
    """Re-wording a row cannot silently turn a claim into 'not measured': a check names an id,
    and an unknown one (such as a display label) fails when the claim is built."""
    with pytest.raises(KeyError, match="unknown metric id"):
        claims.Check("AA score")
    assert claims.Check("aar.answer").label == outcomes.metric("aar.answer").label


def test_every_registered_check_names_a_known_metric_id():
    from dense_cf.demo import PICL_CLAIMS
    from dense_cf.studies.replicate import CLAIMS
    checks = [k for c in CLAIMS for k in c.checks] + [k for _, k in PICL_CLAIMS]
    for k in checks:
        prefix = outcomes.family_prefix(k.metric)
        if prefix is None:
            assert outcomes.metric(k.metric).id == k.metric
        else:
            assert outcomes.family_label(k.metric).endswith((" by type", " by domain"))


def test_labels_follow_from_ids_for_every_pattern():
    """The parametrised ids (other k, K, strategy, type, domain) give the labels the stored
    reports use, and each maps back to itself."""
    want = {"retrieval.top7": "top-7", "robustness.k3.top1": "K=3 distractors: top-1",
            "aar.sentence.type.who": "AAR (who)",
            "retrieval.top5.domain.work": "top-5: work",
            "attribution.rho.top20.q_examples": "top-20: ρ(Q marginal, #examples)",
            "multihop.hop2.r@10": "hop-2 R@10", "e2e.em@10": "EM@10",
            "robustness.did.heldout.k1_2.top5": "drop DiD paraphrase K=1→2: top-5",
            "robustness.did.heldout.k0_1.top1": "drop DiD value swap (control) K=0→1: top-1"}
    for mid, label in want.items():
        m = outcomes.metric(mid)
        assert (m.id, m.label) == (mid, label)
    labels = [m.label for m in outcomes.METRICS.values()]
    assert len(labels) == len(set(labels)), "two ids share a label"
