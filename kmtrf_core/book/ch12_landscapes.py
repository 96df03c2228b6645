"""Chapter 12 (``book/12_landscapes.ipynb``): the readings of the loss surfaces of Figure 3.

The surfaces are the paper room's (:func:`~kmtrf_core.landscape.loss_surface`,
filter-normalized directions after Li et al. 2018); the layers are the
catalog's (group ``landscape``). This module reads the surfaces:

* :func:`local_minima`, :func:`surface_shape`: how many minima a surface has
  on its grid, and how sharply it rises from the trained weights;
* :func:`origin_scaled_correlation`: how alike two surfaces' shapes are;
* :func:`sharpness_factor_draws`: the OH/BN sharpness factor, bootstrapped over the tasks;
* :func:`landscape_finding`: the verdict of the claim ``landscape_unimodal``;
* :func:`layer_table`: the trained layers, with how each run ended and the value the stop rule read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..landscape import Landscape
from ..training.convergence import smoothed, validation_curve
from ..validation import check_int, check_table
from .claims import Finding, verdict
from .uncertainty import INTERVAL_LEVEL, RESAMPLES, combine, draws_interval

__all__ = ["landscape_finding", "layer_table", "local_minima", "origin_scaled_correlation", "sharpness_factor_draws",
           "surface_shape"]


def local_minima(Z) -> int:
    """The number of strict local minima of a 2-D grid of values.

    A cell is a strict local minimum when its value is below that of every
    neighbour (up to eight: the grid's rim has fewer). Ties are not minima, and
    a NaN neither is nor makes its neighbours one. The unimodality reading of
    Figure 3 counts these on a loss surface.

    Parameters
    ----------
    Z : array_like
        ``(A, B)`` values, e.g. :attr:`Landscape.smoothed`.

    Returns
    -------
    int

    Examples
    --------
    >>> bowl = np.add.outer(np.linspace(-1, 1, 5) ** 2, np.linspace(-1, 1, 5) ** 2)
    >>> local_minima(bowl), local_minima(-bowl), local_minima(np.ones((3, 3)))
    (1, 4, 0)
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2 or Z.size == 0:
        raise ValueError(f"Z must be a non-empty 2-D grid, got shape {Z.shape}")
    padded = np.pad(Z, 1, constant_values=np.inf)
    rows, cols = Z.shape
    neighbours = np.stack([padded[1 + di : 1 + di + rows, 1 + dj : 1 + dj + cols]
                           for di in (-1, 0, 1) for dj in (-1, 0, 1) if (di, dj) != (0, 0)])
    return int((Z < neighbours.min(axis=0)).sum())


def _origin(surface: Landscape) -> tuple[int, int]:
    """Indices of the grid point nearest to the trained weights ``(0, 0)``."""
    return int(np.abs(surface.alphas).argmin()), int(np.abs(surface.betas).argmin())


def surface_shape(surface: Landscape) -> dict:
    """Scale-free readings of a smoothed-loss surface around the trained weights (Fig. 3).

    The unimodality and sharpness readings of Figure 3.

    Parameters
    ----------
    surface : Landscape
        From :func:`~kmtrf_core.landscape.loss_surface`, on a grid that contains (or comes near)
        the origin.

    Returns
    -------
    dict
        * ``loss_at_origin``: the smoothed loss at the grid point nearest to
          the trained weights;
        * ``local_minima``: :func:`local_minima` of the smoothed loss;
        * ``argmin_distance``: distance in the plane from the origin to the
          grid minimum;
        * ``sharpness``: the mean over the rim cells of the relative rise
          ``(L - L_0) / L_0`` from the origin.

    Examples
    --------
    >>> grid = np.linspace(-1.0, 1.0, 3)
    >>> Z = 1.0 + np.add.outer(grid ** 2, grid ** 2)
    >>> surface = Landscape(grid, grid, Z, Z, ({}, {}), "l2", 0.1)
    >>> shape = surface_shape(surface)
    >>> shape["local_minima"], shape["argmin_distance"], round(shape["sharpness"], 3)
    (1, 0.0, 1.5)
    """
    Z = np.asarray(surface.smoothed, dtype=np.float64)
    i0, j0 = _origin(surface)
    origin = Z[i0, j0]
    i, j = np.unravel_index(Z.argmin(), Z.shape)
    rim = _rim(Z)
    return dict(loss_at_origin=float(origin), local_minima=local_minima(Z),
                argmin_distance=float(np.hypot(surface.alphas[i], surface.betas[j])),
                sharpness=float(((rim - origin) / origin).mean()))


def origin_scaled_correlation(first: Landscape, second: Landscape) -> float:
    """Pearson correlation of two smoothed-loss surfaces, each divided by its value at the origin.

    Compares the shapes of two models' surfaces on grids of the same size
    (Fig. 3: OH against BN at one ``d``)
    without their scales.

    Parameters
    ----------
    first, second : Landscape
        Surfaces on grids of the same shape.

    Returns
    -------
    float

    Examples
    --------
    >>> grid = np.linspace(-1.0, 1.0, 3)
    >>> bowl = 1.0 + np.add.outer(grid ** 2, grid ** 2)
    >>> a = Landscape(grid, grid, bowl, bowl, ({}, {}), "l2", 0.1)
    >>> b = Landscape(grid, grid, 5.0 * bowl, bowl, ({}, {}), "l2", 0.1)
    >>> round(origin_scaled_correlation(a, b), 12)
    1.0
    """
    if np.shape(first.smoothed) != np.shape(second.smoothed):
        raise ValueError(f"the surfaces have different grids: {np.shape(first.smoothed)} "
                         f"and {np.shape(second.smoothed)}")
    scaled = [np.asarray(s.smoothed, dtype=np.float64) / s.smoothed[_origin(s)]
              for s in (first, second)]
    return float(np.corrcoef(scaled[0].ravel(), scaled[1].ravel())[0, 1])


def _rim(Z: np.ndarray) -> np.ndarray:
    """The border cells of a grid ``(A, Bt, ...)``, ``(R, ...)``, in the order :func:`surface_shape` reads them."""
    return np.concatenate([Z[0], Z[-1], Z[1:-1, 0], Z[1:-1, -1]])


def sharpness_factor_draws(first: Landscape, second: Landscape, *, resamples: int = RESAMPLES,
                           seed: int = 0) -> np.ndarray:
    """Bootstrap draws of the sharpness factor of two surfaces on the same tasks (larger over smaller).

    Each draw resamples the tasks with replacement, the same tasks for both surfaces, and
    recomputes both surfaces' sharpness (:func:`surface_shape`: the mean relative rise from the
    origin to the rim) from the per-task losses (:attr:`Landscape.smoothed_tasks`).

    Parameters
    ----------
    first, second : Landscape
        From :func:`~kmtrf_core.landscape.loss_surface` on the same tasks and grid.
    resamples : int
        Bootstrap draws.
    seed : int
        Seed of the resampling.

    Returns
    -------
    numpy.ndarray
        ``(resamples,)``.

    Examples
    --------
    >>> grid = np.linspace(-1.0, 1.0, 3)
    >>> bowl = 1.0 + np.add.outer(grid ** 2, grid ** 2)
    >>> tasks = bowl[..., None] * np.array([0.9, 1.0, 1.1, 1.2])  # four tasks, one shape
    >>> a = Landscape(grid, grid, tasks.mean(-1), tasks.mean(-1), ({}, {}), "l2", 0.1, tasks, tasks)
    >>> b = Landscape(grid, grid, tasks.mean(-1), tasks.mean(-1), ({}, {}), "l2", 0.1, 1 + 2 * tasks, tasks)
    >>> draws = sharpness_factor_draws(a, b, resamples=50)
    >>> draws.shape, bool(draws.min() >= 1.0)
    ((50,), True)
    """
    check_int(resamples, "resamples")
    per_task = []
    for surface in (first, second):
        if surface.smoothed_tasks is None:
            raise ValueError("the surfaces must keep their per-task losses (loss_surface does)")
        Z = np.asarray(surface.smoothed_tasks, dtype=np.float64)
        i0, j0 = _origin(surface)
        per_task.append((Z[i0, j0], _rim(Z)))  # (B,), (R, B)
    if per_task[0][0].shape != per_task[1][0].shape or per_task[0][1].shape != per_task[1][1].shape:
        raise ValueError("the surfaces must share their grid and their tasks")
    tasks = per_task[0][0].shape[0]
    picks = np.random.default_rng(seed).integers(0, tasks, size=(resamples, tasks))
    sharp = []
    for origin, rim in per_task:
        at_origin = origin[picks].mean(axis=1)  # (resamples,)
        at_rim = rim[:, picks].mean(axis=2)  # (R, resamples)
        sharp.append(((at_rim - at_origin) / at_origin).mean(axis=0))
    sharp = np.stack(sharp)
    return sharp.max(axis=0) / sharp.min(axis=0)


def landscape_finding(shape: pd.DataFrame, compare: pd.DataFrame, draws: dict | None = None) -> Finding:
    """Figure 3: is every surface unimodal on its grid, and are OH and BN more alike at the larger ``d``?

    Parameters
    ----------
    shape : pandas.DataFrame
        One row per surface with ``local_minima`` and ``argmin_distance``
        (:func:`surface_shape`).
    compare : pandas.DataFrame
        One row per ``d``, smallest first, with ``d``, ``sharpness_factor``
        (the larger OH/BN sharpness over the smaller) and ``correlation``
        (:func:`origin_scaled_correlation` of OH's and BN's surfaces).

    draws : dict, optional
        ``d`` -> :func:`sharpness_factor_draws` of OH's and BN's surfaces at that ``d``. With them,
        "more alike at the larger d" is decided on the 95% interval of the factor at the largest
        ``d`` minus the factor at the smallest (the two drawn independently: their tasks differ):
        below 0 holds, above 0 fails, else inconclusive. Without them, on the two point values.

    Returns
    -------
    Finding
        For the claim ``landscape_unimodal``: both checks combined
        (:func:`~kmtrf_core.book.uncertainty.combine`).

    Examples
    --------
    >>> shape = pd.DataFrame({"local_minima": [1, 1, 1, 2], "argmin_distance": [0.0, 0.1, 0.0, 0.3]})
    >>> compare = pd.DataFrame({"d": [4, 32], "sharpness_factor": [3.3, 1.5], "correlation": [0.9, 0.99]})
    >>> finding = landscape_finding(shape, compare)
    >>> finding.verdict, finding.value
    ('partly', '3 of 4 surfaces with one grid minimum; OH/BN sharpness factor 3.30 at d=4 vs 1.50 at d=32')
    """
    check_table(shape, "shape", ["local_minima", "argmin_distance"])
    check_table(compare, "compare", ["d", "sharpness_factor", "correlation"])
    unimodal = int((shape.local_minima == 1).sum())
    v_unimodal = verdict(unimodal, len(shape))
    small_d, large_d = compare.iloc[0], compare.iloc[-1]
    at_small = f"{small_d.sharpness_factor:.2f} at d={int(small_d.d)}"
    at_large = f"{large_d.sharpness_factor:.2f} at d={int(large_d.d)}"
    correlations = f"{small_d.correlation:.3f} vs {large_d.correlation:.3f}"
    interval = ""
    if draws is None:
        v_closer = verdict(bool(large_d.sharpness_factor < small_d.sharpness_factor))
    else:
        difference = np.asarray(draws[large_d.d]) - np.asarray(draws[small_d.d])
        low, high = draws_interval(difference)
        v_closer = "reproduced" if high < 0 else "not reproduced" if low > 0 else "inconclusive"
        point = large_d.sharpness_factor - small_d.sharpness_factor
        interval = f" (difference {point:+.2f}, {INTERVAL_LEVEL:.0%} interval [{low:+.2f}, {high:+.2f}] over tasks)"
    report = (f"(i) {unimodal} of {len(shape)} surfaces have a single local minimum on the grid (largest "
              f"distance of the grid minimum from the trained weights: {shape.argmin_distance.max():.2f}) -> "
              f"{v_unimodal}\n"
              f"(ii)/(iii) OH vs BN sharpness factor: {at_small}, {at_large}{interval}; surface correlation "
              f"{correlations} -> OH and BN more alike at the larger d: {v_closer}")
    return Finding(f"{unimodal} of {len(shape)} surfaces with one grid minimum; "
                   f"OH/BN sharpness factor {at_small} vs {at_large}{interval}",
                   combine([v_unimodal, v_closer]),
                   check="one local minimum on every grid; a smaller OH/BN sharpness factor at the larger d"
                         + (", the 95% interval of the difference over tasks below 0" if draws is not None else ""),
                   report=report, uncertainty=interval.strip(" ()") or None)


def layer_table(group, runs: dict) -> pd.DataFrame:
    """The chapter's trained layers, one row each: size, how the run ended, and its validation values.

    The stop rule (:data:`~kmtrf_core.training.convergence.STOP_RULE`) reads the validation curve
    averaged over the last :data:`~kmtrf_core.training.convergence.SMOOTHING` validations, not its
    last value. So the table gives both: ``final_val_relative``, the curve's last value (the median
    over seeds of the relative validation loss, Eq. 20), and ``stop_val_relative``, the average the
    rule compared with 1 at that step. A run stopped by the rule ("beat Lloyd, flat") has
    ``stop_val_relative`` below 1 even where its last validation is not.

    Parameters
    ----------
    group : RunGroup
        The catalog group the runs belong to (:class:`~kmtrf_core.book.groups.RunGroup`); its
        :meth:`~kmtrf_core.book.groups.RunGroup.report` says why each run stopped.
    runs : dict
        ``(d, scheme)`` -> the run as a mapping with ``"model"`` and ``"history"``
        (``group.run(d=d, scheme=scheme)._asdict()``).

    Returns
    -------
    pandas.DataFrame
        Columns ``d``, ``scheme`` (upper case), ``d_emb``, ``parameters``, ``steps``,
        ``stopped``, ``final_val_relative``, ``stop_val_relative``.

    Examples
    --------
    >>> from kmtrf_core import ClusterTransformer
    >>> from kmtrf_core.book.groups import RunGroup
    >>> from kmtrf_core.training import TrainConfig
    >>> config = TrainConfig(d=2, k=3, n=16, steps=5000, until_flat=0.02, patience=200, val_every=100)
    >>> group = RunGroup("demo", config, {"d": [2], "scheme": ["bn"]}, "12", "a test")
    >>> history = pd.DataFrame({"step": np.arange(0, 701, 100), "seed": 0,
    ...                         "val_relative_loss": [1.7, 0.95, 0.97, 0.96, 0.97, 0.98, 0.98, 1.001]})
    >>> table = layer_table(group, {(2, "bn"): {"model": ClusterTransformer(2, 3), "history": history}})
    >>> table.iloc[0].to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'d': 2, 'scheme': 'BN', 'd_emb': 4, 'parameters': 192, 'steps': 700, 'stopped': 'beat Lloyd, flat',
     'final_val_relative': 1.001, 'stop_val_relative': 0.987}
    """
    if not isinstance(runs, dict) or not runs:
        raise ValueError(f"runs must be a non-empty dict (d, scheme) -> run, got {type(runs).__name__}")
    rows = []
    for key, run in runs.items():
        if not (isinstance(key, tuple) and len(key) == 2) or not {"model", "history"} <= set(run):
            raise ValueError(f"runs must map (d, scheme) to a run with 'model' and 'history', got {key!r}")
        d, scheme = key
        history = run["history"].assign(d=d, scheme=scheme)
        ended = group.report(history).iloc[0]
        curve = validation_curve(history).to_numpy()
        rows.append(dict(d=d, scheme=scheme.upper(), d_emb=run["model"].d_emb,
                         parameters=run["model"].num_parameters(), steps=int(ended.steps),
                         stopped=ended.stopped, final_val_relative=round(float(ended.final), 3),
                         stop_val_relative=round(float(smoothed(curve)[-1]), 3)))
    return pd.DataFrame(rows)
