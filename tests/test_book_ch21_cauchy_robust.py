import numpy as np

from kmtrf_core.book.ch21_cauchy_robust import trim_findings

NOISE = 0.02 * np.random.default_rng(0).standard_normal((2, 1, 128))  # (T + 1, S, B)


def _samples(values):
    labels = list(values)
    return {(label, test): level + NOISE for label in labels
            for test, level in zip(("cauchy", "normal"), values[label])}, labels


def test_only_the_trimmed_layers_decide_the_verdicts():
    samples, labels = _samples({"0:oh": (0.5, 0.5), "0.1:oh": (1.2, 0.9), "0.1:bn": (0.9, 0.95)})
    findings, paper_loss = trim_findings(samples, labels)
    assert findings["trim_cauchy"].verdict == "partly"  # one of two trimmed layers below 1 on Cauchy
    assert findings["trim_transfer"].verdict == "reproduced"
    assert set(paper_loss) == {"trim_cauchy", "trim_transfer"} and list(paper_loss["trim_cauchy"]) == ["0:oh"]
    assert abs(paper_loss["trim_cauchy"]["0:oh"] - 0.5) < 0.01
    assert "[" in findings["trim_cauchy"].value and findings["trim_cauchy"].uncertainty  # the interval is stated


def test_no_trimmed_layer_below_lloyd_is_not_reproduced_and_a_tie_is_inconclusive():
    samples, labels = _samples({"0:bn": (0.5, 0.5), "0.2:bn": (1.3, 1.0)})
    findings, _ = trim_findings(samples, labels)
    assert {claim: f.verdict for claim, f in findings.items()} == {
        "trim_cauchy": "not reproduced", "trim_transfer": "inconclusive"}
