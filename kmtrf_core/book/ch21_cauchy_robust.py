"""Chapter 21 (``book/21_cauchy_robust.ipynb``): Cauchy tasks with a trimmed loss (Appendix A).

The trimmed loss is the paper room's (:func:`~kmtrf_core.objectives.smoothed_kmeans_loss`
with ``trim=``); the layers are the catalog's (group ``openq_cauchy``: the
paper's loss and the trimmed one, each with OH and BN). :func:`trim_findings`
turns their held-out ratios into the verdicts of ``trim_cauchy`` and ``trim_transfer``;
:func:`trim_against_paper` sets each trimmed layer against the same embedding trained
with the paper's loss, on paired intervals.
"""

from __future__ import annotations

import math

from .comparisons import MARGIN, below_finding
from .uncertainty import compare, point_value, versus_text

__all__ = ["trim_against_paper", "trim_findings"]

_OUTCOMES = ("lower", "higher", "within margin", "inconclusive")


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
        and ``trim_transfer`` (:func:`~kmtrf_core.book.comparisons.below_finding`
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
        paper_loss[claim_id] = {label: round(point_value(samples[(label, family)][1]), 3)
                                for label in labels if label.startswith("0:")}
    return findings, paper_loss


def trim_against_paper(samples: dict, labels, margin: float = MARGIN) -> tuple[dict, str]:
    """Is each trimmed layer better or worse than the same embedding trained with the paper's loss?

    Per test (``"cauchy"``, ``"normal"``) and per trimmed layer ``"<trim>:<scheme>"`` (each must
    have its partner ``"0:<scheme>"``), the ratio after one step of the trimmed layer minus the partner's,
    paired (the same held-out tasks and starts, seeds in the same order), decided on its 95%
    interval (:func:`~kmtrf_core.book.uncertainty.compare`): ``"lower"`` when the interval lies
    below ``-margin``, ``"higher"`` when it lies above ``+margin`` (or the trimmed layer diverged
    on a task where its partner did not), ``"within margin"`` when it lies inside
    ``[-margin, margin]`` (a difference too small to count, resolved), else ``"inconclusive"`` (the
    interval reaches across ``-margin`` or ``+margin``: the noise). The two values printed are each
    layer's median over its seeds; the difference is paired by seed, so its median need not be
    theirs.

    Parameters
    ----------
    samples : dict
        As in :func:`trim_findings`.
    labels : sequence of str
        As in :func:`trim_findings`.
    margin : float
        How far apart, in units of one Lloyd step, the two must be to count.

    Returns
    -------
    outcomes : dict
        ``(test, trimmed label)`` -> ``"lower"``, ``"higher"``, ``"within margin"`` or
        ``"inconclusive"``.
    text : str
        One line: each pair's two values, the interval of the difference and its outcome, then the
        count of each outcome.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> levels = {("0:bn", "cauchy"): 0.8, ("0:bn", "normal"): 1.2, ("0.1:bn", "cauchy"): 1.2,
    ...           ("0.1:bn", "normal"): 1.21}
    >>> samples = {key: level + 0.05 * rng.standard_normal((2, 1, 64)) for key, level in levels.items()}
    >>> outcomes, text = trim_against_paper(samples, ["0:bn", "0.1:bn"])
    >>> outcomes
    {('cauchy', '0.1:bn'): 'higher', ('normal', '0.1:bn'): 'inconclusive'}
    >>> print(text)  # doctest: +NORMALIZE_WHITESPACE
    cauchy, 0.1:bn 1.200 vs 0:bn 0.803 (medians over 1 seed, the difference paired by seed)
    +0.397 [+0.382, +0.414] (95% CI; margin 0.01), higher;
    normal, 0.1:bn 1.205 vs 0:bn 1.198 (medians over 1 seed, the difference paired by seed)
    +0.006 [-0.010, +0.023] (95% CI; margin 0.01), inconclusive;
    the trimmed layer lower in 0 of 2, higher in 1, within the margin in 0, inconclusive in 1
    """
    labels = list(labels)
    if not all(isinstance(label, str) and ":" in label for label in labels):
        raise ValueError(f"labels must be '<trim>:<scheme>', got {labels}")
    pairs = [(label, "0:" + label.split(":", 1)[1]) for label in labels if not label.startswith("0:")]
    if not pairs or any(paper not in labels for _, paper in pairs):
        raise ValueError(f"labels must hold trimmed layers, each with its '0:<scheme>' partner, got {labels}")
    outcomes, parts = {}, []
    for test in ("cauchy", "normal"):
        for trimmed, paper in pairs:
            a, b = samples[(trimmed, test)][1], samples[(paper, test)][1]
            c = compare(a, b, margin)
            outcome = ("lower" if c.verdict == "reproduced"
                       else "higher" if c.low > margin or c.difference == math.inf
                       else "within margin" if -margin <= c.low and c.high <= margin else "inconclusive")
            outcomes[(test, trimmed)] = outcome
            parts.append(f"{test}, {versus_text(trimmed, a, paper, b, c)}, {outcome}")
    counts = [list(outcomes.values()).count(word) for word in _OUTCOMES]
    parts.append(f"the trimmed layer lower in {counts[0]} of {len(outcomes)}, higher in {counts[1]}, "
                 f"within the margin in {counts[2]}, inconclusive in {counts[3]}")
    return outcomes, "; ".join(parts)
