"""Chapter 17 (``book/17_d_and_k.ipynb``): one layer for smaller ``d`` and ``k``, by padding (Appendix A).

The padding is the paper room's (:func:`~kmtrf_core.evaluate.pad_tasks`,
:func:`~kmtrf_core.evaluate.padded_trajectory`); the layers are the catalog's
(groups ``openq_codes``, ``openq_wide_d``, ``openq_wide_k``). This module holds:

* :func:`size_transfer`: layers of several sizes on tasks of several sizes, as one table;
* :func:`padding_finding`: the verdicts of ``pad_d`` and ``pad_k``.
"""

from __future__ import annotations

import pandas as pd

from ..evaluate import trajectory_table
from ..training import TrainConfig  # noqa: F401  (the doctests use it)
from .claims import Finding, verdict
from .heldout import eval_tasks, ratio_at, transfer_trajectories  # noqa: F401  (eval_tasks: the doctests)

__all__ = ["padding_finding", "size_transfer"]


def size_transfer(layers: dict, tests: dict, steps: int, exact=("own",)) -> pd.DataFrame:
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

    Returns
    -------
    pandas.DataFrame
        :func:`~kmtrf_core.evaluate.trajectory_table` rows with a ``scheme`` column.

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
    frames = []
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
                table = trajectory_table(transfer_trajectories(entries, X, C, steps), X, C, test=test)
                table.insert(0, "scheme", scheme)
                frames.append(table)
    return pd.concat(frames, ignore_index=True)


def padding_finding(table, own: str, wide: str, test: str, steps: int, tolerance: float = 0.05) -> Finding:
    """Chapter 17's verdict: is the wide layer on padded tasks within ``tolerance`` of the layer trained there?

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`~kmtrf_core.evaluate.trajectory_table` rows with a ``scheme`` column; models
        labelled ``own`` and ``wide``.
    own, wide : str
        The two model labels.
    test : str
        The test (task size) where both layers apply.
    steps : int
        ``T``: the checks are after step 1 and after step ``T``, per scheme.
    tolerance : float
        Allowed relative excess of the wide layer's ratio to Lloyd over the own layer's.

    Returns
    -------
    Finding

    Examples
    --------
    >>> table = pd.DataFrame({"scheme": "bn", "model": ["own", "wide"] * 2, "member": 0,
    ...                       "test": "d=4", "step": [1, 1, 2, 2], "ratio": [0.9, 0.92, 0.8, 0.9]})
    >>> padding_finding(table, "own", "wide", "d=4", 2).verdict
    'partly'
    """
    picked = table[(table.test == test) & table.model.isin([own, wide])]
    ratios = ratio_at(picked, sorted({1, steps}), by=("scheme", "model"))
    ok, parts = 0, []
    for scheme in ratios.index.get_level_values("scheme").unique():
        for column in ratios.columns:
            mine, theirs = ratios.loc[(scheme, own), column], ratios.loc[(scheme, wide), column]
            ok += bool(theirs <= mine * (1 + tolerance))
            parts.append(f"{scheme.upper()} {column}: {theirs:.3f} vs {mine:.3f}")
    total = len(parts)
    return Finding(f"{test}, wide vs own: " + "; ".join(parts), verdict(ok, total),
                   check=f"the wide layer within {tolerance:.0%} of the own layer, per scheme, after 1 and T steps",
                   report=f"{ok} of {total} checks within {tolerance:.0%} -> {verdict(ok, total)}")
