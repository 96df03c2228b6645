import pandas as pd

from kmtrf_core.book.ch21_cauchy_robust import trim_findings


def _ratios(values):
    labels = list(values)
    index = pd.MultiIndex.from_product([labels, ["cauchy", "normal"]], names=["model", "test"])
    return pd.DataFrame({"step1": [v for label in labels for v in values[label]]}, index=index), labels


def test_only_the_trimmed_layers_decide_the_verdicts():
    ratios, labels = _ratios({"0:oh": (0.5, 0.5), "0.1:oh": (1.2, 0.9), "0.1:bn": (0.9, 0.95)})
    findings, paper_loss = trim_findings(ratios, labels)
    assert findings["trim_cauchy"].verdict == "partly"  # one of two trimmed layers below 1 on Cauchy
    assert findings["trim_transfer"].verdict == "reproduced"
    assert paper_loss == {"trim_cauchy": {"0:oh": 0.5}, "trim_transfer": {"0:oh": 0.5}}


def test_no_trimmed_layer_below_lloyd_is_not_reproduced():
    ratios, labels = _ratios({"0:bn": (0.5, 0.5), "0.2:bn": (1.3, 1.1)})
    findings, _ = trim_findings(ratios, labels)
    assert {claim: f.verdict for claim, f in findings.items()} == {
        "trim_cauchy": "not reproduced", "trim_transfer": "not reproduced"}
