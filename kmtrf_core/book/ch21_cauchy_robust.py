"""Chapter 21 (``book/21_cauchy_robust.ipynb``): Cauchy tasks with a trimmed loss (Appendix A).

The trimmed loss is the paper room's (:func:`~kmtrf_core.objectives.smoothed_kmeans_loss`
with ``trim=``); the layers are the catalog's (group ``openq_cauchy``: the
paper's loss and the trimmed one, each with OH and BN). :func:`trim_findings`
turns their held-out ratios into the verdicts of ``trim_cauchy`` and ``trim_transfer``.
"""

from __future__ import annotations

import pandas as pd

from .claims import below_finding

__all__ = ["trim_findings"]


def trim_findings(ratios: pd.DataFrame, labels) -> tuple[dict, dict]:
    """Do the layers trained with a trimmed loss beat one Lloyd step on Cauchy and on normal tasks?

    Parameters
    ----------
    ratios : pandas.DataFrame
        :func:`~kmtrf_core.book.heldout.ratio_at` indexed by ``(model, test)``
        with column ``step1``; tests ``"cauchy"`` and ``"normal"``.
    labels : sequence of str
        The layers, labelled ``"<trim>:<scheme>"``; ``"0:..."`` are trained with the paper's loss.

    Returns
    -------
    findings : dict
        Claim id -> :class:`~kmtrf_core.book.claims.Finding` for ``trim_cauchy``
        and ``trim_transfer`` (:func:`~kmtrf_core.book.claims.below_finding`
        over the trimmed layers).
    paper_loss : dict
        Claim id -> the layers with the paper's loss and their ratios (rounded), for comparison.

    Examples
    --------
    >>> index = pd.MultiIndex.from_product([["0:bn", "0.1:bn"], ["cauchy", "normal"]], names=["model", "test"])
    >>> ratios = pd.DataFrame({"step1": [1.3, 1.8, 1.2, 0.9]}, index=index)
    >>> findings, paper_loss = trim_findings(ratios, ["0:bn", "0.1:bn"])
    >>> {claim: f.verdict for claim, f in findings.items()}, float(paper_loss["trim_cauchy"]["0:bn"])
    ({'trim_cauchy': 'not reproduced', 'trim_transfer': 'reproduced'}, 1.3)
    """
    trimmed = [label for label in labels if not label.startswith("0:")]
    findings, paper_loss = {}, {}
    for claim_id, family in (("trim_cauchy", "cauchy"), ("trim_transfer", "normal")):
        values = {label: ratios.loc[(label, family), "step1"] for label in trimmed}
        findings[claim_id] = below_finding(values, f"{family}, ratio after one step")
        paper_loss[claim_id] = {label: round(ratios.loc[(label, family), "step1"], 3)
                                for label in labels if label.startswith("0:")}
    return findings, paper_loss
