"""Chapter 17 (``book/17_d_and_k.ipynb``): one layer for smaller ``d`` and ``k``, by padding (Appendix A).

The padding is the paper room's (:func:`~kmtrf_core.padding.pad_tasks`,
:func:`~kmtrf_core.padding.padded_trajectory`); the layers are the catalog's
(groups ``openq_codes``, ``openq_wide_d``, ``openq_wide_k``). This module holds:

* :func:`size_transfer`: layers of several sizes on tasks of several sizes, as one table;
* :func:`padding_finding`: the verdicts of ``pad_d`` and ``pad_k``.
"""

from __future__ import annotations

import pandas as pd

from ..evaluate import trajectory_table
from ..training import TrainConfig  # noqa: F401  (the doctests use it)
from .claims import Finding
from .comparisons import interval_finding
from .heldout import eval_tasks, task_ratios, transfer_trajectories  # noqa: F401  (eval_tasks: the doctests)
from .uncertainty import compare, point_value

__all__ = ["padding_finding", "size_transfer"]


def size_transfer(layers: dict, tests: dict, steps: int, exact=("own",), per_task: bool = False):
    """Layers of several sizes on tasks of several sizes (chapter 17), as one trajectory table.

    Parameters
    ----------
    layers : dict
        Label -> {scheme: layer, or ``(layer, fill)``}. A layer runs on a test
        when its ``d`` and ``k`` are at least the tasks' (padded when larger,
        :func:`transfer_trajectories`); a label in ``exact`` runs only on tasks
        of exactly its size.
    tests : dict
        Test name -> ``(X, C)``.
    steps : int
        Clustering steps ``T``.
    exact : sequence of str
        Labels of layers used only at their own size.
    per_task : bool
        Also return the per-task ratios behind the table, for :func:`padding_finding`.

    Returns
    -------
    pandas.DataFrame
        :func:`~kmtrf_core.evaluate.trajectory_table` rows with a ``scheme`` column; with
        ``per_task``, a pair ``(table, samples)``, ``samples[(test, scheme, label)]`` the ratios
        ``(T + 1, S, B)`` of :func:`~kmtrf_core.book.heldout.task_ratios`.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> cfg = TrainConfig(d=2, k=3, n=16)
    >>> tests = {"d=1": eval_tasks(cfg, 2, d=1), "d=2": eval_tasks(cfg, 2)}
    >>> layers = {"own": {"bn": ClusterTransformer(2, 3)}, "wide": {"bn": ClusterTransformer(4, 3)}}
    >>> table = size_transfer(layers, tests, 1)
    >>> sorted(set(zip(table.test, table.model)))
    [('d=1', 'wide'), ('d=2', 'own'), ('d=2', 'wide')]
    """
    frames, samples = [], {}
    for test, (X, C) in tests.items():
        d, k = X.shape[-1], C.shape[-2]
        schemes = {scheme for by_scheme in layers.values() for scheme in by_scheme}
        for scheme in sorted(schemes):
            entries = {}
            for label, by_scheme in layers.items():
                if scheme not in by_scheme:
                    continue
                entry = by_scheme[scheme]
                model = entry[0] if isinstance(entry, tuple) else entry
                fits = model.d == d and model.k == k if label in exact else model.d >= d and model.k >= k
                if fits:
                    entries[label] = entry
            if entries:
                trajectories = transfer_trajectories(entries, X, C, steps)
                table = trajectory_table(trajectories, X, C, test=test)
                table.insert(0, "scheme", scheme)
                frames.append(table)
                if per_task:
                    for label, values in task_ratios(trajectories, X, C).items():
                        samples[(test, scheme, label)] = values
    table = pd.concat(frames, ignore_index=True)
    return (table, samples) if per_task else table


def padding_finding(samples: dict, own: str, wide: str, test: str, steps: int, tolerance: float = 0.05) -> Finding:
    """Chapter 17's verdict: is the wide layer on padded tasks within ``tolerance`` of the layer trained there?

    Per scheme, after step 1 and after step ``T``: the wide layer's per-task ratios to Lloyd against
    ``1 + tolerance`` times the own layer's, on the same tasks. The check holds when the 95% interval
    of the difference is entirely below 0, fails when it is entirely above, and is inconclusive
    otherwise (:func:`~kmtrf_core.book.uncertainty.compare`).

    Parameters
    ----------
    samples : dict
        ``(test, scheme, label)`` -> per-task ratios ``(T + 1, S, B)`` (:func:`size_transfer` with
        ``per_task=True``).
    own, wide : str
        The two model labels.
    test : str
        The test (task size) where both layers apply.
    steps : int
        ``T``.
    tolerance : float
        Allowed relative excess of the wide layer's ratio over the own layer's.

    Returns
    -------
    Finding

    Examples
    --------
    >>> import numpy as np
    >>> tasks = 1 + 0.02 * np.random.default_rng(0).standard_normal((3, 2, 128))
    >>> worse_at_step1 = np.array([1.0, 1.2, 1.0])[:, None, None]
    >>> samples = {("d=4", "bn", "own"): tasks, ("d=4", "bn", "wide"): tasks * worse_at_step1}
    >>> finding = padding_finding(samples, "own", "wide", "d=4", 2)
    >>> finding.verdict, finding.report
    ('partly', '1 of 2 checks within 5% (95% intervals), 1 not -> partly')
    """
    schemes = sorted({scheme for (name, scheme, label) in samples if name == test and label == own})
    outcomes, parts = {}, []
    for scheme in schemes:
        for step in sorted({1, steps}):
            mine, theirs = samples[(test, scheme, own)][step], samples[(test, scheme, wide)][step]
            outcome = compare(theirs, mine * (1 + tolerance))
            key = f"{scheme.upper()} step{step}"
            outcomes[key] = outcome
            parts.append(f"{key}: {point_value(theirs):.3f} vs {point_value(mine):.3f} "
                         f"(wide - {1 + tolerance:g} x own: {outcome.text()})")
    return interval_finding(f"{test}, wide vs own: " + "; ".join(parts), outcomes,
                            check=f"the wide layer within {tolerance:.0%} of the own layer, per scheme, after 1 and T "
                                  "steps (95% interval of wide - (1 + tolerance) own below 0)",
                            what=f"checks within {tolerance:.0%}")
