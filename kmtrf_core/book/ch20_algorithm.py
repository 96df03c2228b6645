"""Chapter 20 (``book/20_algorithm.ipynb``): what algorithm does the learned step resemble? (Appendix A)

The reference steps and the distance between two steps are the paper room's
(:mod:`kmtrf_core.algorithms`, after Akyurek et al. 2023); the layers are the
catalog's (group ``openq_codes``). This module holds:

* :func:`algorithm_table`: each layer's step against every reference, per step and test family;
* :func:`algorithm_finding`: the verdict of ``learned_algorithm``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..algorithms import compare_algorithms
from ..model import check_model
from ..tasks import sample_tasks  # noqa: F401  (the doctests use it)
from .claims import Finding, verdict
from .uncertainty import RESAMPLES, combine, draws_interval, tally

__all__ = ["algorithm_finding", "algorithm_table"]


def algorithm_table(layers: dict, tests: dict, steps: int, *, betas, alphas, batch: int, seed: int = 0,
                    per_task: bool = False):
    """Which known algorithm each layer's step is closest to, per step and per test family.

    Runs :func:`~kmtrf_core.algorithms.compare_algorithms` for every member of
    every layer on every test, following the layer's own trajectory.

    Parameters
    ----------
    layers : dict
        Label -> layer (single or ensemble).
    tests : dict
        Name -> ``(X, C)``.
    steps : int
        Steps ``T`` along the layer's trajectory.
    betas, alphas : sequence of float
        Grids of soft k-means' inverse temperature and of the relaxation.
    batch : int
        Mini-batch size.
    seed : int
        Seed of the mini-batches.
    per_task : bool
        Keep each row's per-task distances (column ``task_norms``), for :func:`algorithm_finding`'s interval.

    Returns
    -------
    pandas.DataFrame
        :func:`~kmtrf_core.algorithms.compare_algorithms`' columns plus
        ``model``, ``member`` and ``test``.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> X, C = sample_tasks(4, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> table = algorithm_table({"lloyd": ClusterTransformer.from_lloyd(2, 3)}, {"normal": (X, C)}, 2,
    ...                         betas=[1, 10], alphas=[0.5, 1.0], batch=10)
    >>> float(table.query("algorithm == 'lloyd'").distance.max()) < 1e-9
    True
    """
    frames = []
    for label, model in layers.items():
        for member, layer in enumerate(check_model(model).members()):
            for test, (X, C) in tests.items():
                table = compare_algorithms(lambda Xs, Cs, layer=layer: layer(Xs, Cs), X, C, steps, betas=betas,
                                           alphas=alphas, batch=batch, per_task=per_task,
                                           generator=torch.Generator().manual_seed(seed))
                table.insert(0, "test", test)
                table.insert(0, "member", member)
                table.insert(0, "model", label)
                frames.append(table)
    return pd.concat(frames, ignore_index=True)


def algorithm_finding(table, step: int = 1, factor: float = 0.5, grids: dict | None = None) -> Finding:
    """Chapter 20's verdict: does a fitted Lloyd variant explain the learned step better than Lloyd's step?

    Per model and test at ``step`` (median over members), the best of soft k-means and relaxed Lloyd
    must be closer than ``factor`` times the distance to Lloyd's step. When the table keeps per-task
    distances (``algorithm_table(..., per_task=True)``), each pair is decided on the 95% bootstrap
    interval over tasks of that quotient (summed distances over tasks, median over members):
    below ``factor`` entirely, above it entirely, or inconclusive. With ``grids``
    (``{"soft": betas, "relaxed": alphas}``) the report names every fitted parameter (median over
    members) that sits at an end of its grid: there the best fit may lie beyond the values tried,
    and the distance is an upper bound.

    >>> table = pd.DataFrame({"model": "bn", "member": 0, "test": "normal", "step": 1,
    ...     "algorithm": ["lloyd", "soft", "relaxed"], "parameter": [1.0, 30.0, 0.25],
    ...     "distance": [0.6, 0.2, 0.5]})
    >>> finding = algorithm_finding(table, grids={"soft": [1, 30, 100], "relaxed": [0.25, 0.5]})
    >>> finding.verdict, finding.report.splitlines()[-1]
    ('reproduced', 'at a grid end (the best fit may lie beyond it): BN on normal: relaxed 0.25 (grid 0.25 to 0.5)')
    """
    at = table[table.step == step].groupby(["model", "test", "algorithm"]).distance.median().unstack("algorithm")
    best = at[["soft", "relaxed"]].min(axis=1)
    text = "; ".join(f"{str(model).upper()} on {test}: best variant {b:.2f}, Lloyd {l:.2f}"
                     for (model, test), b, l in zip(at.index, best, at["lloyd"]))
    uncertainty = None
    if "task_norms" in table:
        outcomes = {}
        for (model, test), variant in at[["soft", "relaxed"]].idxmin(axis=1).items():
            part = table[(table.step == step) & (table.model == model) & (table.test == test)]
            norms = {name: np.stack(part[part.algorithm == name].sort_values("member").task_norms.to_list())
                     for name in (variant, "lloyd")}  # (members, tasks)
            value, low, high = _quotient_interval(norms[variant], norms["lloyd"])
            outcomes[(model, test)] = (value, low, high,
                                       "reproduced" if high < factor else "not reproduced" if low > factor
                                       else "inconclusive")
        verdicts = [o[3] for o in outcomes.values()]
        outcome = combine(verdicts)
        ok = verdicts.count("reproduced")
        uncertainty = "; ".join(f"{str(model).upper()} on {test}: {v:.2f} [{lo:.2f}, {hi:.2f}]"
                                for (model, test), (v, lo, hi, _) in outcomes.items())
        text += f"; best variant / Lloyd, 95% CI over tasks: {uncertainty}"
        report = (f"{ok} of {len(verdicts)} (model, family) pairs below {factor:g} on 95% intervals "
                  f"({tally(verdicts, None)}) -> {outcome}")
    else:
        wins = best < factor * at["lloyd"]
        ok = int(wins.sum())
        outcome = verdict(ok, len(wins))
        report = f"{ok} of {len(wins)} (model, family) pairs -> {outcome}"
    if grids:
        fitted = (table[table.step == step].groupby(["model", "test", "algorithm"]).parameter.median()
                  .unstack("algorithm"))
        edges = [f"{str(model).upper()} on {test}: {name} {fitted.loc[(model, test), name]:g} "
                 f"(grid {min(grid):g} to {max(grid):g})"
                 for (model, test) in fitted.index for name, grid in grids.items()
                 if name in fitted and fitted.loc[(model, test), name] in (min(grid), max(grid))]
        report += "\n" + ("at a grid end (the best fit may lie beyond it): " + "; ".join(edges) if edges
                          else "no fitted parameter at an end of its grid")
    return Finding(text, outcome,
                   check=f"the best fitted variant closer than {factor:g} x Lloyd's step, every (model, family) pair"
                         + (" (95% interval over tasks)" if uncertainty else ""),
                   report=report, uncertainty=uncertainty)


def _quotient_interval(a: np.ndarray, b: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> tuple:
    """Median over members of ``sum(a) / sum(b)`` over tasks, and its 95% bootstrap interval (tasks resampled)."""
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, a.shape[-1], size=(resamples, a.shape[-1]))
    stats = np.median(a[:, tasks].sum(axis=-1) / b[:, tasks].sum(axis=-1), axis=0)
    low, high = draws_interval(stats)
    return float(np.median(a.sum(axis=-1) / b.sum(axis=-1))), low, high
