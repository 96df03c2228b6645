"""Chapter 21 (``book/21_cauchy_robust.ipynb``): Cauchy tasks with a trimmed loss (Appendix A).

The trimmed loss is the paper room's (:func:`~kmtrf_core.objectives.smoothed_kmeans_loss`
with ``trim=``); the layers are the catalog's (group ``openq_cauchy``: the
paper's loss and the trimmed one, each with OH and BN). :func:`trim_findings`
turns their held-out ratios into the verdicts of ``trim_cauchy`` and ``trim_transfer``.
"""

from __future__ import annotations

import numpy as np

from .claims import below_finding

__all__ = ["trim_findings"]


def trim_findings(samples: dict, labels) -> tuple[dict, dict]:
    """Do the layers trained with a trimmed loss beat one Lloyd step on Cauchy and on normal tasks?

    Parameters
    ----------
    samples : dict
        ``(label, test)`` -> per-task ratios ``(T + 1, S, B)``
        (:func:`~kmtrf_core.book.heldout.task_ratios`); tests ``"cauchy"`` and ``"normal"``.
    labels : sequence of str
        The layers, labelled ``"<trim>:<scheme>"``; ``"0:..."`` are trained with the paper's loss.

    Returns
    -------
    findings : dict
        Claim id -> :class:`~kmtrf_core.book.claims.Finding` for ``trim_cauchy``
        and ``trim_transfer`` (:func:`~kmtrf_core.book.claims.below_finding`
        after one step, over the trimmed layers: each one's 95% interval below 1).
    paper_loss : dict
        Claim id -> the layers with the paper's loss and their ratios after one step (rounded).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> noise = 0.05 * rng.standard_normal((2, 1, 64))
    >>> samples = {("0:bn", "cauchy"): 1.3 + noise, ("0:bn", "normal"): 1.8 + noise,
    ...            ("0.1:bn", "cauchy"): 1.2 + noise, ("0.1:bn", "normal"): 0.9 + noise}
    >>> findings, paper_loss = trim_findings(samples, ["0:bn", "0.1:bn"])
    >>> {claim: f.verdict for claim, f in findings.items()}, round(paper_loss["trim_cauchy"]["0:bn"], 1)
    ({'trim_cauchy': 'not reproduced', 'trim_transfer': 'reproduced'}, 1.3)
    """
    trimmed = [label for label in labels if not label.startswith("0:")]
    findings, paper_loss = {}, {}
    for claim_id, family in (("trim_cauchy", "cauchy"), ("trim_transfer", "normal")):
        values = {label: samples[(label, family)][1] for label in trimmed}
        findings[claim_id] = below_finding(values, f"{family}, ratio after one step")
        paper_loss[claim_id] = {label: round(float(np.median(samples[(label, family)][1].mean(axis=-1))), 3)
                                for label in labels if label.startswith("0:")}
    return findings, paper_loss
