import numpy as np
import pytest

from kmtrf_core.book.ch21_cauchy_robust import trim_against_paper, trim_findings

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


def test_trim_against_paper_pairs_each_trimmed_layer_with_its_embedding():
    samples, labels = _samples({"0:oh": (0.77, 1.29), "0:bn": (1.05, 1.59),
                                "0.1:oh": (1.25, 1.29), "0.1:bn": (0.95, 1.80)})
    outcomes, text = trim_against_paper(samples, labels)
    # the same noise on every layer: the paired difference is the difference of the levels, exactly
    assert outcomes == {("cauchy", "0.1:oh"): "higher", ("cauchy", "0.1:bn"): "lower",
                        ("normal", "0.1:oh"): "within margin", ("normal", "0.1:bn"): "higher"}
    assert text.startswith("cauchy, 0.1:oh 1.249 vs 0:oh 0.769 (medians over")  # OH against OH, not BN
    assert "the difference paired by seed) +0.480 [" in text
    assert "(95% CI; margin 0.01), higher;" in text
    assert text.endswith("the trimmed layer lower in 1 of 4, higher in 2, within the margin in 1, inconclusive in 0")


def test_trim_against_paper_decides_on_the_interval_not_the_point():
    rng = np.random.default_rng(1)
    noisy = {("0:bn", test): 1.0 + 0.3 * rng.standard_normal((2, 1, 32)) for test in ("cauchy", "normal")}
    noisy.update({("0.1:bn", test): 1.02 + 0.3 * rng.standard_normal((2, 1, 32)) for test in ("cauchy", "normal")})
    outcomes, _ = trim_against_paper(noisy, ["0:bn", "0.1:bn"])
    assert set(outcomes.values()) == {"inconclusive"}  # 0.02 apart, noise 0.3 over 32 tasks
    # a wider margin turns a clear but small difference into "within margin"
    samples, labels = _samples({"0:bn": (1.0, 1.0), "0.1:bn": (1.05, 0.95)})
    assert trim_against_paper(samples, labels)[0] == {("cauchy", "0.1:bn"): "higher", ("normal", "0.1:bn"): "lower"}
    assert set(trim_against_paper(samples, labels, margin=0.1)[0].values()) == {"within margin"}
    # a trimmed layer that diverged on a task its partner handled is higher, as compare reads it
    samples[("0.1:bn", "cauchy")] = samples[("0.1:bn", "cauchy")].copy()
    samples[("0.1:bn", "cauchy")][1][..., 0] = np.inf
    assert trim_against_paper(samples, labels, margin=0.1)[0][("cauchy", "0.1:bn")] == "higher"


def test_trim_against_paper_needs_a_partner_and_labelled_layers():
    samples, _ = _samples({"0:oh": (0.8, 1.2), "0.1:bn": (1.2, 1.3)})
    with pytest.raises(ValueError, match="labels"):
        trim_against_paper(samples, ["0:oh", "0.1:bn"])  # no 0:bn to set 0.1:bn against
    with pytest.raises(ValueError, match="labels"):
        trim_against_paper(samples, ["oh", "0.1:bn"])
    with pytest.raises(ValueError, match="partner"):  # one trimmed layer paired, the other not
        trim_against_paper(*_samples({"0:oh": (0.8, 1.2), "0.1:oh": (1.2, 1.3), "0.1:bn": (1.2, 1.3)}))
    with pytest.raises(ValueError, match="margin"):
        trim_against_paper(*_samples({"0:oh": (0.8, 1.2), "0.1:oh": (1.2, 1.3)}), margin=-0.1)
