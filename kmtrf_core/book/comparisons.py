"""The comparisons several chapters share, each decided on intervals and returned as a verdict.

Each comparison is decided on a 95% bootstrap interval over held-out tasks and
seeds with a stated margin (:mod:`~kmtrf_core.book.uncertainty`),
``"inconclusive"`` when the interval straddles it, and returns one
:class:`~kmtrf_core.book.claims.Finding` for the ledger:

* :func:`better_finding`: variants against a baseline (chapter 18);
* :func:`below_finding`: values below a threshold such as one Lloyd step
  (chapters 9, 10, 21);
* :func:`versus_finding`: two models, test by test (chapter 19);
* :func:`interval_finding`: any set of interval comparisons as one verdict
  (the three above, chapter 17).

:data:`MARGIN` is how much better "A beats B" needs A to be.
"""

from __future__ import annotations

from ..validation import check_choice
from .claims import Finding
from .uncertainty import STATISTICS, combine, compare, geometric_text, point_value, tally

__all__ = ["MARGIN", "below_finding", "better_finding", "interval_finding", "versus_finding"]

MARGIN = 0.01
"""How much lower a ratio to Lloyd must be, beyond the noise, for "A beats B" (1% of one Lloyd step's loss)."""


def better_finding(samples: dict, baseline: str, what: str, margin: float = MARGIN, **options) -> Finding:
    """A verdict on each variant beating a baseline by ``margin``, decided on intervals (chapter 18).

    Parameters
    ----------
    samples : dict
        Label -> per-task values ``(S, B)`` or ``(B,)``, lower is better (ratios to Lloyd from
        :func:`~kmtrf_core.book.heldout.task_ratios`, at one step); includes ``baseline``. Paired:
        every label on the same tasks.
    baseline : str
        The label to beat.
    what : str
        What the number is, for the value text.
    margin : float
        :func:`~kmtrf_core.book.uncertainty.compare`'s margin.
    **options
        Passed to :func:`~kmtrf_core.book.uncertainty.compare` (``level``, ``resamples``, ``seed``).

    Returns
    -------
    Finding
        Its verdict :func:`~kmtrf_core.book.uncertainty.combine` of the variants' comparisons;
        the value and ``uncertainty`` give each difference with its interval.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> tasks = 1 + 0.1 * rng.standard_normal(256)
    >>> f = better_finding({"fixed": tasks, "anneal": tasks - 0.05, "other": tasks + 0.001}, "fixed", "ratio")
    >>> f.verdict, f.report
    ('partly', '1 of 2 beat fixed by 0.01 (95% intervals), 1 not -> partly')
    """
    base = samples[baseline]
    others = {label: value for label, value in samples.items() if label != baseline}
    outcomes = {label: compare(value, base, margin, **options) for label, value in others.items()}
    return interval_finding(
        f"{what}: {baseline} {point_value(base):.3f}; " + ", ".join(
            f"{label} {point_value(others[label]):.3f} ({c.text()})" for label, c in outcomes.items()),
        outcomes, check=f"each variant below {baseline} by at least {margin:g}, the 95% interval of the "
                        "difference on one side", what=f"beat {baseline} by {margin:g}")


def below_finding(samples: dict, what: str, threshold: float = 1.0, margin: float = 0.0, *,
                  statistic: str = "arithmetic", **options) -> Finding:
    """A verdict on each value being below ``threshold`` (e.g. one Lloyd step), decided on intervals.

    ``samples``: label -> per-task values (see :func:`better_finding`). ``statistic="geometric"``
    decides on the geometric mean over tasks of ratios instead of their mean (the paper's statistic
    for its multi-step figures; :func:`~kmtrf_core.book.uncertainty.compare`, whose relative margin
    it takes), and the value gives each geometric mean with its interval.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> f = below_finding({"OH": 0.9 + 0.1 * rng.standard_normal(256), "BN": 1.2 + 0.1 * rng.standard_normal(256)},
    ...                   "held-out ratio")
    >>> f.verdict, f.report
    ('partly', '1 of 2 below 1 (95% intervals), 1 not -> partly')
    >>> bad = np.r_[np.full(180, 0.6), np.full(20, 10.0)]  # 1 task in 10 at ten times Lloyd's loss
    >>> below_finding({"OH": bad}, "ratio").verdict, below_finding({"OH": bad}, "ratio", statistic="geometric").value
    ('not reproduced', 'ratio, geometric mean over tasks: OH 0.795 [0.710, 0.902] (95% CI; margin 0)')
    """
    geometric = check_choice(statistic, "statistic", STATISTICS) == "geometric"
    outcomes = {label: compare(value, threshold, margin, statistic=statistic, **options)
                for label, value in samples.items()}
    if geometric:
        texts = {label: geometric_text(c, threshold, "") for label, c in outcomes.items()}
        return interval_finding(
            f"{what}, geometric mean over tasks: " + ", ".join(f"{label} {text}" for label, text in texts.items()),
            outcomes, check=f"every geometric mean over tasks below {threshold:g}"
                            + (f" times {1 - margin:g}" if margin else "") + ", its 95% interval entirely below",
            what=f"below {threshold:g}", texts=texts)
    return interval_finding(
        f"{what}: " + ", ".join(f"{label} {point_value(samples[label]):.3f} ({c.text()} from {threshold:g})"
                                for label, c in outcomes.items()),
        outcomes, check=f"every value below {threshold:g}" + (f" by {margin:g}" if margin else "")
                        + ", its 95% interval entirely below", what=f"below {threshold:g}")


def versus_finding(samples: dict, label: str, baseline: str, margin: float = MARGIN, **options) -> Finding:
    """Per test, is ``label`` below ``baseline`` by ``margin``, decided on intervals (chapter 19)?

    Parameters
    ----------
    samples : dict
        ``(model, test)`` -> per-task values (see :func:`better_finding`), paired within a test.
    label, baseline : str
        The two models.
    margin : float
        As in :func:`better_finding`.

    Returns
    -------
    Finding

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> normal, gumbel = 1 + 0.1 * rng.standard_normal((2, 256))
    >>> samples = {("plain", "normal"): normal, ("ffn", "normal"): normal - 0.1,
    ...            ("plain", "gumbel"): gumbel, ("ffn", "gumbel"): gumbel + 0.1}
    >>> versus_finding(samples, "ffn", "plain").verdict
    'partly'
    """
    tests = [test for model, test in samples if model == baseline]
    outcomes = {test: compare(samples[(label, test)], samples[(baseline, test)], margin, **options)
                for test in tests}
    return interval_finding(
        f"{label} vs {baseline}: " + "; ".join(
            f"{test} {point_value(samples[(label, test)]):.3f} vs {point_value(samples[(baseline, test)]):.3f} ({c.text()})"
            for test, c in outcomes.items()),
        outcomes, check=f"{label} below {baseline} by at least {margin:g} on every test, the 95% interval of the "
                        "difference on one side", what="tests better")


def interval_finding(value: str, outcomes: dict, check: str, what: str, texts: dict | None = None) -> Finding:
    """One :class:`~kmtrf_core.book.claims.Finding` from several interval comparisons.

    Parameters
    ----------
    value : str
        The measured value, for the ledger.
    outcomes : dict
        Key -> :class:`~kmtrf_core.book.uncertainty.Comparison`.
    check : str
        What had to hold.
    what : str
        What a ``"reproduced"`` comparison counts as, for the report ("below 1", "beat fixed by 0.01").
    texts : dict, optional
        Key -> each interval in words for ``uncertainty`` (default the comparisons' ``text()``; for
        comparisons of log ratios, :func:`~kmtrf_core.book.uncertainty.geometric_text`).

    Returns
    -------
    Finding
        Its verdict :func:`~kmtrf_core.book.uncertainty.combine` of the comparisons'; its report
        counts them (leaving out counts of 0), and its ``uncertainty`` lists each interval.

    Examples
    --------
    >>> from kmtrf_core.book.uncertainty import Comparison
    >>> outcomes = {"OH": Comparison(-0.08, -0.12, -0.03, 0.0, "reproduced"),
    ...             "BN": Comparison(0.01, -0.02, 0.04, 0.0, "inconclusive")}
    >>> finding = interval_finding("OH 0.92, BN 1.01", outcomes, "both below 1", "below 1")
    >>> finding.verdict, finding.report
    ('partly', '1 of 2 below 1 (95% intervals), 1 inconclusive -> partly')
    """
    verdicts = [c.verdict for c in outcomes.values()]
    outcome = combine(verdicts)
    tail = tally(verdicts, None, "not", zeros=False)
    return Finding(value, outcome, check=check,
                   report=f"{verdicts.count('reproduced')} of {len(verdicts)} {what} (95% intervals)"
                          f"{', ' + tail if tail else ''} -> {outcome}",
                   uncertainty="; ".join(f"{key}: {texts[key] if texts else c.text()}"
                                         for key, c in outcomes.items()))
