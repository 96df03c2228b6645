"""Intervals and margins for comparative verdicts: when "A beats B" is a finding and when it is noise.

A ratio to Lloyd read on held-out tasks is a mean over tasks (and a median
over seeds, where a run has several); with a few hundred tasks it moves by a
few hundredths from one draw of tasks to the next. A verdict that A beats B
(or beats one Lloyd step) is therefore drawn from an interval, not from two
numbers:

* :func:`bootstrap_interval`: a percentile bootstrap of that statistic over
  tasks and seeds, the same resampled tasks for every model compared (the
  comparison is paired: the models ran from the same starts);
* :func:`compare`: the verdict of "``a`` is below ``b`` by at least
  ``margin``": ``"reproduced"`` when the whole interval of ``a - b`` lies
  below ``-margin``, ``"not reproduced"`` when it lies above, and
  ``"inconclusive"`` when it contains ``-margin``; ``b`` may be a number (a
  threshold such as one Lloyd step, 1);
* :func:`equivalent`: the verdict of "``a`` and ``b`` are the same within
  ``margin``": ``"reproduced"`` only when the whole interval lies inside it;
* :func:`combine`: one verdict from several checks, and :func:`tally` the count
  of each way they went;
* :func:`versus_text`: two models' values beside their paired difference's
  interval, saying which statistic each is.
* :func:`draws_interval`: the percentile interval of a statistic a chapter
  resampled itself.
* :func:`seed_range`: for a step (where a run first beat Lloyd, or
  converged) read per seed, the earliest and latest seed: where a few seeds
  give no interval, a comparison of steps needs the two ranges apart;
* :func:`range_ahead`: that comparison, "every seed of ``a`` at least
  ``margin`` steps before every seed of ``b``"; :func:`range_text` writes
  such a range.
* :func:`log_ratios`, :func:`geometric_mean`, :func:`geometric_text`: the
  paper's statistic for its multi-step figures, the mean over tasks of the log
  ratio to Lloyd (a geometric mean of the ratios), which :func:`compare`
  decides with ``statistic="geometric"`` (:data:`STATISTICS`).

The samples are per-task ratios, ``(S, B)`` for ``S`` seeds and ``B`` tasks
(or ``(B,)``), from :func:`~kmtrf_core.evaluate.task_ratios`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..validation import check_choice, check_int, check_number

__all__ = ["Comparison", "INTERVAL_LEVEL", "RESAMPLES", "STATISTICS", "bootstrap_interval", "combine", "compare",
           "draws_interval", "equivalent", "geometric_mean", "geometric_text", "log_ratios", "point_value",
           "range_ahead", "range_text", "ratio_interval", "seed_range", "tally", "versus_text"]

INTERVAL_LEVEL = 0.95
"""The confidence level of every interval the book states."""

RESAMPLES = 2000
"""Bootstrap resamples per interval."""

STATISTICS = ("arithmetic", "geometric")
"""What a ratio to Lloyd is averaged as over tasks: the mean ratio, or the mean of its logs (:func:`log_ratios`)."""


def _samples(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 2:
        raise ValueError(f"{name} must be per-task values (B,) or (S, B) with B >= 2 tasks, got shape "
                         f"{np.shape(values)}")
    if np.isnan(array).any():
        raise ValueError(f"{name} must not hold NaN (a diverged task's ratio is inf)")
    return array


def point_value(values) -> float:
    """The statistic the intervals are about: the median over seeds of the mean over tasks.

    ``values`` are per-task values ``(B,)`` or ``(S, B)``.

    >>> point_value([[1.0, 2.0], [3.0, 5.0], [0.0, 1.0]])
    1.5
    """
    array = np.asarray(values, dtype=float)
    return float(np.median(array.reshape(-1, array.shape[-1]).mean(axis=1)))


def log_ratios(values, name: str = "values") -> np.ndarray:
    """Per-task logs of ratios to Lloyd: the samples of the paper's statistic for its multi-step figures.

    The paper's Figures 6 (right), 7, 8/18 and 12 plot the mean over tasks of the log k-means loss,
    then the median over seeds (its released ``plot_eval_ood_gen.py``), for the model and for Lloyd
    on the same tasks. A layer below Lloyd there has a mean over tasks of ``log(loss / Lloyd's)``
    below 0: a geometric mean of the per-task ratios below 1, which a few bad tasks move far less
    than the mean ratio. :func:`compare` decides on it with ``statistic="geometric"``.

    A diverged task's ``inf`` stays ``inf``; a ratio at or below 0, or NaN, has no log and is
    refused (``name`` names the argument in the message).

    >>> log_ratios([1.0, np.e, np.inf]).tolist()
    [0.0, 1.0, inf]
    >>> log_ratios([0.5, 0.0])
    Traceback (most recent call last):
    ...
    ValueError: values must be ratios above 0 (inf for a diverged task), got 1 at or below 0 and 0 NaN
    """
    array = np.asarray(values, dtype=float)
    nan, low = int(np.isnan(array).sum()), int((array <= 0).sum())
    if nan or low:
        raise ValueError(f"{name} must be ratios above 0 (inf for a diverged task), got {low} at or below 0 "
                         f"and {nan} NaN")
    return np.log(array)


def geometric_mean(values) -> float:
    """The paper's statistic as a ratio: the median over seeds of the geometric mean over tasks.

    ``exp`` of :func:`point_value` of :func:`log_ratios`; ``values`` are per-task ratios ``(B,)``
    or ``(S, B)``. One bad task in ten lifts the mean ratio above 1, not the geometric mean:

    >>> ratios = [0.8] * 9 + [5.0]
    >>> round(point_value(ratios), 3), round(geometric_mean(ratios), 3)
    (1.22, 0.961)
    """
    return float(np.exp(point_value(log_ratios(_samples(values, "values")))))


def _statistic(samples: np.ndarray, seeds: np.ndarray, tasks: np.ndarray) -> np.ndarray:
    # samples (S, B); seeds (R, S') and tasks (R, B') indices -> (R,): median over seeds of the mean over tasks
    picked = samples[seeds[:, :, None], tasks[:, None, :]]  # (R, S', B')
    return np.median(picked.mean(axis=2), axis=1)


def bootstrap_interval(samples, *, level: float = INTERVAL_LEVEL, resamples: int = RESAMPLES, seed: int = 0,
                       minus=None) -> tuple:
    """A percentile bootstrap interval of the median over seeds of the mean over tasks.

    Parameters
    ----------
    samples : array-like
        Per-task values ``(B,)`` or ``(S, B)`` (seeds x tasks).
    level : float
        Confidence level (0.95).
    resamples : int
        Bootstrap resamples.
    seed : int
        Seed of the resampling (the same seed resamples the same tasks).
    minus : array-like, optional
        Per-task values of the same shape to subtract (a paired difference:
        each resample draws the same seeds and tasks for both). A task that is
        the same infinity on both sides (both diverged) counts as a tie, 0.

    Returns
    -------
    (float, float, float)
        The statistic on the samples themselves, and the interval's ends.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = 0.9 + 0.05 * rng.standard_normal((3, 256))
    >>> value, lo, hi = bootstrap_interval(a)
    >>> lo < value < hi and hi - lo < 0.03
    True
    >>> value, lo, hi = bootstrap_interval(a, minus=a - 0.01)  # a paired difference: exact here
    >>> round(value, 6), round(lo, 6), round(hi, 6)
    (0.01, 0.01, 0.01)
    """
    a = _samples(samples, "samples")
    if minus is not None:
        b = _samples(minus, "minus")
        if b.shape != a.shape:
            raise ValueError(f"minus must have the shape of samples {a.shape}, got {b.shape}")
        both = np.isinf(a) & (a == b)  # diverged on both sides: neither beats the other there, a tie
        a = np.subtract(a, b, out=np.zeros_like(a), where=~both)  # inf - inf never formed
    check_number(level, "level")
    if not level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    check_int(resamples, "resamples")
    S, B = a.shape
    rng = np.random.default_rng(seed)
    value = float(np.median(a.mean(axis=1)))
    stats = []
    for start in range(0, resamples, 250):  # in chunks, so a large (S, B) stays small in memory
        size = min(250, resamples - start)
        seeds = rng.integers(0, S, size=(size, S))
        tasks = rng.integers(0, B, size=(size, B))
        stats.append(_statistic(a, seeds, tasks))
    stats = np.concatenate(stats)
    # no interpolation between order statistics: a resample holding a diverged (inf) task stays inf, never NaN
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return value, float(lo), float(hi)


class Comparison(NamedTuple):
    """The outcome of :func:`compare`: the difference ``a - b``, its interval, the margin and the verdict.

    >>> Comparison(-0.031, -0.045, -0.018, 0.01, "reproduced").text()
    '-0.031 [-0.045, -0.018] (95% CI; margin 0.01)'
    >>> Comparison(3.4e15, 7.6e13, 8.1e15, 0.01, "not reproduced").text()  # a diverging layer: scientific notation
    '+3.400e+15 [+7.600e+13, +8.100e+15] (95% CI; margin 0.01)'
    """

    difference: float
    low: float
    high: float
    margin: float
    verdict: str

    def text(self, unit: str = "") -> str:
        """``"-0.031 [-0.045, -0.018] (95% CI; margin 0.01)"``; ``unit`` follows the difference.

        >>> Comparison(12.5, 10.0, 15.0, 1.0, "reproduced").text(" ms")
        '+12.500 ms [+10.000, +15.000] (95% CI; margin 1)'
        """
        ends = (self.difference, self.low, self.high)
        form = "+.3f" if all(abs(x) < 1e4 or math.isinf(x) for x in ends) else "+.3e"
        difference, low, high = (format(x, form) for x in ends)
        return f"{difference}{unit} [{low}, {high}] ({INTERVAL_LEVEL:.0%} CI; margin {self.margin:g})"


def geometric_text(comparison: Comparison, reference: float = 1.0, label: str = "geometric mean") -> str:
    """A comparison of log ratios written back as ratios: ``"geometric mean 0.912 [0.870, 0.951] (95% CI; margin 0)"``.

    ``comparison`` is :func:`compare` with ``statistic="geometric"``: against a number
    ``reference`` (one Lloyd step: 1), its ends are ``reference * exp(.)``, the geometric mean and
    its interval; between two models (``reference`` 1), the quotient of their geometric means. The
    margin is written back as the relative margin it came from, ``1 - exp(-margin)``.

    >>> ratios = 0.9 * np.exp(0.1 * np.random.default_rng(0).standard_normal(256))
    >>> geometric_text(compare(ratios, 1.0, statistic="geometric"))
    'geometric mean 0.900 [0.889, 0.911] (95% CI; margin 0)'
    """
    if not isinstance(comparison, Comparison):
        raise ValueError(f"comparison must be a Comparison (from compare), got {type(comparison).__name__}")
    check_number(reference, "reference")
    with np.errstate(over="ignore"):  # a quotient beyond the float range is inf
        ends = [float(reference * np.exp(x)) for x in (comparison.difference, comparison.low, comparison.high)]
    form = ".3f" if all(abs(x) < 1e4 or not math.isfinite(x) for x in ends) else ".3e"
    value, low, high = (format(x, form) for x in ends)
    value = "undefined (both sides diverged on some tasks)" if math.isnan(ends[0]) else value
    return (f"{label + ' ' if label else ''}{value} [{low}, {high}] ({INTERVAL_LEVEL:.0%} CI; "
            f"margin {-math.expm1(-comparison.margin):g})")


def _unpaired(a: np.ndarray, b: np.ndarray, **options) -> tuple:
    """``a - b`` for values on different tasks: each side's interval, the difference's ends from opposite ends."""
    va, la, ha = bootstrap_interval(a, **options)
    vb, lb, hb = bootstrap_interval(b, **options)
    return va - vb, la - hb, ha - lb


def compare(a, b, margin: float = 0.0, *, paired: bool = True, statistic: str = "arithmetic",
            **options) -> Comparison:
    """Is ``a`` below ``b`` by at least ``margin``? Decided on the bootstrap interval of ``a - b``.

    Parameters
    ----------
    a : array-like
        Per-task values ``(B,)`` or ``(S, B)`` (lower is better, e.g. ratios to Lloyd).
    b : array-like or float
        The same for the other model (paired: the same tasks, and seeds in
        the same order), or a number (a threshold: 1 is one Lloyd step).
    margin : float
        How much lower ``a`` must be to count (>= 0).
    paired : bool
        ``False`` when ``a`` and ``b`` were measured on different tasks (for example each
        layer on its own family's tasks): the difference's interval then runs from the
        low end of ``a``'s interval minus the high end of ``b``'s to the other two ends
        (conservative: wider than a paired interval).
    statistic : {"arithmetic", "geometric"}
        What is averaged over tasks: the values (``"arithmetic"``), or, for ratios to
        Lloyd, their logs (``"geometric"``, :func:`log_ratios`; a number ``b`` is
        compared on its log), the paper's statistic for its multi-step figures. With
        ``"geometric"``, ``margin`` is relative (``a``'s geometric mean below ``b``'s, or
        ``b``, times ``1 - margin``, ``margin < 1``) and the :class:`Comparison` is in log
        units, its margin ``-log(1 - margin)``: :func:`geometric_text` writes it as ratios.
    **options
        Passed to :func:`bootstrap_interval` (``level``, ``resamples``, ``seed``).

    Returns
    -------
    Comparison
        ``verdict`` is ``"reproduced"`` when the interval is entirely below
        ``-margin``, ``"not reproduced"`` when entirely above it, else
        ``"inconclusive"``.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> tasks = 1 + 0.1 * rng.standard_normal(256)
    >>> compare(tasks - 0.05, tasks, margin=0.01).verdict       # paired: the same tasks, lower by 0.05
    'reproduced'
    >>> compare(tasks + 0.002, tasks, margin=0.01).verdict
    'not reproduced'
    >>> compare(0.99 + 0.1 * rng.standard_normal(256), 1.0).verdict   # 0.99 +- 0.012: inside the noise
    'inconclusive'
    >>> other = 1.2 + 0.1 * rng.standard_normal((2, 128))       # other tasks, other seeds: unpaired
    >>> compare(tasks, other, paired=False).verdict
    'reproduced'
    >>> bad = np.r_[np.full(180, 0.6), np.full(20, 10.0)]  # 1 task in 10 at ten times Lloyd's loss
    >>> compare(bad, 1.0).verdict, compare(bad, 1.0, statistic="geometric").verdict
    ('not reproduced', 'reproduced')
    """
    check_number(margin, "margin", allow_zero=True)
    if check_choice(statistic, "statistic", STATISTICS) == "geometric":
        if not margin < 1:
            raise ValueError(f"margin must be below 1 with statistic='geometric' (a relative margin), got {margin!r}")
        a, margin = log_ratios(a, "a"), -math.log1p(-margin)
        b = b if isinstance(b, bool) else log_ratios(b, "b")  # a bool is refused below
    a_samples = _samples(a, "a")
    if np.ndim(b) == 0:
        if isinstance(b, bool) or not np.isfinite(b_value := float(b)):
            raise ValueError(f"b must be per-task values or a finite number, got {b!r}")
        value, lo, hi = bootstrap_interval(a_samples, **options)
        difference, low, high = value - b_value, lo - b_value, hi - b_value
    elif not paired:
        difference, low, high = _unpaired(a_samples, _samples(b, "b"), **options)
    else:
        difference, low, high = bootstrap_interval(a_samples, minus=b, **options)
    if np.isinf(difference):  # a task diverged for one side only: that side does not beat the other
        outcome = "reproduced" if difference < 0 else "not reproduced"
    elif high < -margin:
        outcome = "reproduced"
    elif low > -margin:
        outcome = "not reproduced"
    else:
        outcome = "inconclusive"
    return Comparison(difference, low, high, float(margin), outcome)


def equivalent(a, b, margin: float, **options) -> Comparison:
    """Are ``a`` and ``b`` the same within ``margin``? Decided on the bootstrap interval of ``a - b``.

    ``"reproduced"`` when the whole 95% interval lies inside ``[-margin, margin]`` (an equivalence
    shown, not just no difference found), ``"not reproduced"`` when it lies entirely outside it,
    ``"inconclusive"`` otherwise. Arguments as in :func:`compare`.

    >>> rng = np.random.default_rng(3)
    >>> tasks = 1 + 0.1 * rng.standard_normal(512)
    >>> equivalent(tasks + 0.001 * rng.standard_normal(512), tasks, margin=0.02).verdict
    'reproduced'
    >>> equivalent(tasks + 0.1, tasks, margin=0.02).verdict
    'not reproduced'
    >>> equivalent(1 + 0.1 * rng.standard_normal(64), tasks, margin=0.02).verdict  # unpaired and few: too wide
    'inconclusive'
    """
    check_number(margin, "margin")
    a_samples = _samples(a, "a")
    if np.ndim(b) == 0:
        if isinstance(b, bool) or not np.isfinite(b_value := float(b)):
            raise ValueError(f"b must be per-task values or a finite number, got {b!r}")
        value, lo, hi = bootstrap_interval(a_samples, **options)
        difference, low, high = value - b_value, lo - b_value, hi - b_value
    else:
        b_samples = _samples(b, "b")
        if b_samples.shape == a_samples.shape:
            difference, low, high = bootstrap_interval(a_samples, minus=b_samples, **options)
        else:  # different tasks: compare the two intervals' ends (unpaired, conservative)
            difference, low, high = _unpaired(a_samples, b_samples, **options)
    if -margin <= low and high <= margin:
        outcome = "reproduced"
    elif high < -margin or low > margin:
        outcome = "not reproduced"
    else:
        outcome = "inconclusive"
    return Comparison(difference, low, high, float(margin), outcome)


def ratio_interval(a, b, *, level: float = INTERVAL_LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> tuple:
    """A percentile bootstrap interval of ``mean(a) / mean(b)`` for values on different tasks.

    Each side's tasks are resampled on their own (unpaired), for a claim such as "the gap on
    cauchy tasks is ten times the gap on normal ones".

    Parameters
    ----------
    a, b : array-like
        Per-task values ``(B,)`` (``b``'s mean must be positive).
    level, resamples, seed
        As in :func:`bootstrap_interval`.

    Returns
    -------
    (float, float, float)
        The ratio on the samples themselves, and the interval's ends.

    >>> rng = np.random.default_rng(0)
    >>> value, lo, hi = ratio_interval(10 + rng.standard_normal(200), 1 + 0.1 * rng.standard_normal(200))
    >>> round(value), lo < value < hi, 9 < lo and hi < 11
    (10, True, True)
    """
    a, b = (np.asarray(v, dtype=float).ravel() for v in (a, b))
    for name, values in (("a", a), ("b", b)):
        if values.size < 2 or not np.isfinite(values).all():
            raise ValueError(f"{name} must be at least 2 finite per-task values, got {values.size}")
    if not b.mean() > 0:
        raise ValueError(f"b's mean must be positive, got {b.mean()!r}")
    check_number(level, "level")
    check_int(resamples, "resamples")
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    rb = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
    ratios = ra / np.where(rb > 0, rb, np.nan)
    lo, hi = np.nanquantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return float(a.mean() / b.mean()), float(lo), float(hi)


def draws_interval(draws, *, level: float = INTERVAL_LEVEL) -> tuple:
    """The central ``level`` percentile interval of a statistic over its bootstrap draws.

    For a statistic the chapters resample themselves (a difference of sharpness factors over
    tasks, an EMD separation over block draws, a quotient of sums over tasks); the intervals of
    :func:`bootstrap_interval` and :func:`ratio_interval` are drawn inside those functions.

    Parameters
    ----------
    draws : array-like
        The statistic's values, one per draw ``(R,)``. A NaN draw gives a NaN interval, which no
        verdict reads as separated from anything.
    level : float
        The confidence level, in (0, 1).

    Returns
    -------
    tuple
        ``(low, high)``, linearly interpolated between order statistics.

    >>> [round(end, 9) for end in draws_interval(np.arange(1001.0))]  # draws 0, 1, ..., 1000
    [25.0, 975.0]
    >>> draws_interval([])
    Traceback (most recent call last):
    ...
    ValueError: draws must be a non-empty 1-D array of draws, got shape (0,)
    """
    values = np.asarray(draws, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"draws must be a non-empty 1-D array of draws, got shape {values.shape}")
    check_number(level, "level")
    if not level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def combine(verdicts) -> str:
    """One verdict from several checks' verdicts (a claim that needs every check to hold).

    All reproduced: ``"reproduced"``; some reproduced and the others not (or
    undecided): ``"partly"``; none reproduced and at least one that fails:
    ``"not reproduced"``; all undecided: ``"inconclusive"``.

    >>> combine(["reproduced", "reproduced"]), combine(["reproduced", "inconclusive"])
    ('reproduced', 'partly')
    >>> combine(["not reproduced", "inconclusive"]), combine(["inconclusive", "inconclusive"])
    ('not reproduced', 'inconclusive')
    """
    verdicts = list(verdicts)
    allowed = ("reproduced", "partly", "not reproduced", "inconclusive")
    if not verdicts or any(v not in allowed for v in verdicts):
        raise ValueError(f"verdicts must be a non-empty sequence of {allowed}, got {verdicts!r}")
    if all(v == "reproduced" for v in verdicts):
        return "reproduced"
    if any(v in ("reproduced", "partly") for v in verdicts):
        return "partly"
    if any(v == "not reproduced" for v in verdicts):
        return "not reproduced"
    return "inconclusive"



def tally(verdicts, below: str | None = "below", above: str | None = "above",
          inconclusive: str | None = "inconclusive", *, zeros: bool = True) -> str:
    """How many of ``verdicts`` went each way, in words: ``"3 below, 1 above, 0 inconclusive"``.

    ``below``, ``above`` and ``inconclusive`` name the counts of ``"reproduced"``, ``"not
    reproduced"`` and ``"inconclusive"``; a name given as ``None`` leaves its count out, and
    ``zeros=False`` leaves out the counts that are 0.

    >>> verdicts = ["reproduced", "reproduced", "inconclusive"]
    >>> tally(verdicts), tally(verdicts, "better", "worse"), tally(verdicts, None, "not", zeros=False)
    ('2 below, 0 above, 1 inconclusive', '2 better, 0 worse, 1 inconclusive', '1 inconclusive')
    """
    verdicts = list(verdicts)
    allowed = ("reproduced", "not reproduced", "inconclusive")
    if any(v not in allowed for v in verdicts):
        raise ValueError(f"verdicts must be a sequence of {allowed}, got {verdicts!r}")
    counts = [(verdicts.count(v), word) for v, word in zip(allowed, (below, above, inconclusive))]
    return ", ".join(f"{count} {word}" for count, word in counts if word is not None and (zeros or count))


def versus_text(a_label: str, a, b_label: str, b, comparison: Comparison, unit: str = "seed") -> str:
    """Two models' values and the interval of their paired difference, saying which statistic each is.

    The two values are :func:`point_value` (each model's median over its seeds of the mean over
    tasks); the difference is the median over seed pairs, so with three seeds or more it need not
    be the difference of the two medians, and the text says so. ``unit`` names the seeds.

    >>> noise = 0.05 * np.random.default_rng(0).standard_normal((3, 64))
    >>> a, b = np.array([[1.0], [1.5], [2.0]]) + noise, np.array([[1.1], [1.2], [2.5]]) + noise
    >>> text = versus_text("trimmed", a, "paper", b, compare(a, b, 0.01), "training seed")
    >>> print(text)  # doctest: +NORMALIZE_WHITESPACE
    trimmed 1.503 vs paper 1.203 (medians over 3 training seeds, the difference paired by seed)
    -0.100 [-0.500, +0.300] (95% CI; margin 0.01)
    """
    seeds = len(np.atleast_2d(np.asarray(a, dtype=float)).reshape(-1, np.shape(a)[-1]))
    return (f"{a_label} {point_value(a):.3f} vs {b_label} {point_value(b):.3f} (medians over {seeds} "
            f"{unit}{'s' * (seeds != 1)}, the difference paired by seed) {comparison.text()}")

def seed_range(steps: pd.Series, never: float = math.nan) -> tuple[pd.Series, pd.Series]:
    """The earliest and the latest of a step over seeds, per group (every index level but ``seed``).

    Where a few seeds give no interval, their range stands in for one (chapter 9's speed verdicts).

    A seed's NaN means it never got there: the earliest is ``never`` only where no
    seed got there, the latest wherever some seed did not. ``never`` is NaN for a
    table (chapter 9's plateau table), ``math.inf`` for :func:`range_ahead`.

    >>> index = pd.MultiIndex.from_product([["bn", "oh"], [0, 1]], names=["scheme", "seed"])
    >>> earliest, latest = seed_range(pd.Series([300.0, float("nan"), 100.0, 200.0], index=index))
    >>> earliest.tolist(), latest.tolist()
    ([300.0, 100.0], [nan, 200.0])
    >>> seed_range(pd.Series([300.0, float("nan"), 100.0, 200.0], index=index), never=math.inf)[1].tolist()
    [inf, 200.0]
    """
    levels = [name for name in steps.index.names if name != "seed"]
    if len(levels) == len(steps.index.names) or not levels:
        raise ValueError(f"steps must be indexed by 'seed' and at least one other level, got {steps.index.names}")
    grouped = steps.groupby(level=levels)
    earliest, latest = grouped.min(), grouped.max().where(~steps.isna().groupby(level=levels).any())
    return earliest.fillna(never), latest.fillna(never)


def range_ahead(a: tuple, b: tuple, margin: float) -> str:
    """Whether the range over seeds ``a = (earliest, latest)`` is ahead of ``b`` by ``margin`` steps.

    Any quantity where lower comes first works the same (chapter 7 compares measured constants
    over independent searches, ``margin`` 0).

    ``"reproduced"`` when ``a``'s latest seed is at least ``margin`` steps before ``b``'s earliest
    (and strictly before it: with ``margin`` 0 a tie is no order),
    ``"not reproduced"`` for the mirror image, ``"inconclusive"`` when the ranges overlap or come
    closer than ``margin``. A seed that never got there is ``inf`` (infinitely late); NaN is
    refused, since :func:`seed_range` marks never with NaN and the caller decides what it means.

    >>> range_ahead((800.0, 1100.0), (1400.0, 1600.0), 200), range_ahead((800.0, 1100.0), (1200.0, 1600.0), 200)
    ('reproduced', 'inconclusive')
    >>> range_ahead((900.0, float("inf")), (300.0, 600.0), 200)
    'not reproduced'
    """
    values = [float(value) for value in (*a, *b)]
    if len(values) != 4 or any(math.isnan(value) for value in values):
        raise ValueError(f"a and b must be (earliest, latest) pairs of steps without NaN (inf for never), "
                         f"got {a!r} and {b!r}")
    if values[0] > values[1] or values[2] > values[3]:
        raise ValueError(f"a range's earliest must not be after its latest, got {a!r} and {b!r}")
    margin = check_number(margin, "margin", allow_zero=True)
    (a_first, a_last), (b_first, b_last) = values[:2], values[2:]
    if math.isfinite(a_last) and a_last + margin <= b_first and a_last < b_first:
        return "reproduced"
    if math.isfinite(b_last) and b_last + margin <= a_first and b_last < a_first:
        return "not reproduced"
    return "inconclusive"


def range_text(first: float, last: float) -> str:
    """A range of steps over seeds as the verdicts print it: ``"1300-1600"``, ``"1300"`` where the
    seeds agree, ``"never"`` for ``inf`` or NaN.

    >>> range_text(1300.0, 1600.0), range_text(1300.0, 1300.0), range_text(900.0, float("inf"))
    ('1300-1600', '1300', '900-never')
    """
    def step(value) -> str:
        return f"{value:.0f}" if math.isfinite(value) else "never"

    if first == last or not (math.isfinite(first) or math.isfinite(last)):
        return step(first)
    return f"{step(first)}-{step(last)}"
