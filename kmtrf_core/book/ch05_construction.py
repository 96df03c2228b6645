"""Chapter 5 (``book/05_construction.ipynb``): how far the constructed layer is from Lloyd's iterations.

The construction is the paper room's (:meth:`~kmtrf_core.model.ClusterTransformer.from_lloyd`,
:mod:`kmtrf_core.construction`); this module measures it:

* :func:`relative_center_error` and :func:`layerwise_lloyd_errors`: the
  error against Lloyd, layer by layer;
* :func:`exactness_finding`: the verdict of the claim ``construction_exact``;
* :func:`smallest_error`: at each finite ``gamma``, which scheme's constructed layer is closest
  to Lloyd, on paired 95% intervals over tasks;
* :func:`mean_log_error`: the statistic :func:`smallest_error` ranks and tests, to show beside it;
  :func:`closest_gap`: the intervals of the closest scheme against each other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..evaluate import center_trajectory
from ..lloyd import lloyd_trajectory
from ..model import ClusterTransformer
from ..validation import check_int, check_number, check_points_centers, check_table, check_tensor
from .claims import Finding, verdict
from .uncertainty import compare

__all__ = ["closest_gap", "exactness_finding", "layerwise_lloyd_errors", "mean_log_error", "relative_center_error",
           "smallest_error"]


def relative_center_error(centers: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``max |centers - reference| / max |reference|`` per task (max over all entries).

    The exactness measure of chapter 5: a task counts as exact when this is at
    most ``1e-12`` in float64.

    Parameters
    ----------
    centers, reference : torch.Tensor
        ``(B, k, d)`` each.

    Returns
    -------
    torch.Tensor
        ``(B,)``.

    Examples
    --------
    >>> ref = torch.tensor([[[1.0, -4.0]], [[2.0, 0.0]]])
    >>> relative_center_error(ref + torch.tensor([0.0, 0.5]), ref).tolist()
    [0.125, 0.25]
    """
    check_tensor(centers, "centers", rank=3)
    check_tensor(reference, "reference", rank=3)
    if centers.shape != reference.shape:
        raise ValueError(f"centers {tuple(centers.shape)} and reference {tuple(reference.shape)} differ")
    return (centers - reference).abs().flatten(1).amax(1) / reference.abs().flatten(1).amax(1)


def layerwise_lloyd_errors(X: torch.Tensor, C: torch.Tensor, scheme: str, steps: int) -> torch.Tensor:
    """Relative error of layer ``t`` of the constructed model against Lloyd iteration ``t``.

    Runs the layer of Theorem 2.1 (``gamma = inf``, weights from
    :meth:`~kmtrf_core.model.ClusterTransformer.from_lloyd`) on its own tokens
    for ``steps`` layers and compares the centers after each layer with
    Lloyd's (:func:`relative_center_error`). Used in chapter 5.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    scheme : {"oh", "bn", "sc"}
        Token embedding of the constructed layer.
    steps : int
        Number of layers / Lloyd iterations ``T >= 1``.

    Returns
    -------
    torch.Tensor
        ``(T, B)``; row ``t - 1`` compares layer ``t`` with iteration ``t``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.rand(3, 40, 2, generator=g, dtype=torch.float64)
    >>> errors = layerwise_lloyd_errors(X, X[:, :4].clone(), "bn", steps=3)
    >>> errors.shape, bool(errors.max() < 1e-12)
    (torch.Size([3, 3]), True)
    """
    check_points_centers(X, C)
    steps = check_int(steps, "steps")
    d, k = X.shape[2], C.shape[1]
    reference = lloyd_trajectory(X, C, steps).centers  # (T + 1, B, k, d)
    model = ClusterTransformer.from_lloyd(d, k, scheme, dtype=X.dtype, device=X.device)
    layers = center_trajectory(model, X, C, steps, mode="naive")  # the layer on its own tokens
    return torch.stack([relative_center_error(layers[t], reference[t]) for t in range(1, steps + 1)])


def exactness_finding(table: pd.DataFrame) -> Finding:
    """Theorem 2.1: is every task inside the theorem's assumptions exact, for every scheme and ``T``?

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (scheme, ``T``) with ``scheme``, ``T``, ``tasks_in_theorem`` (tasks
        without an empty cluster up to ``T``), ``exact`` (of those, how many
        are within ``1e-12`` of Lloyd in float64) and ``worst_rel_error``.

    Returns
    -------
    Finding
        For the claim ``construction_exact``; the report gives both checks
        as the chapter prints them.

    Examples
    --------
    >>> table = pd.DataFrame({"scheme": ["bn", "bn", "oh"], "T": [1, 2, 2],
    ...                       "tasks_in_theorem": [8, 6, 0], "exact": [8, 6, 0],
    ...                       "worst_rel_error": [1e-16, 3e-16, float("nan")]})
    >>> finding = exactness_finding(table)
    >>> finding.verdict, finding.value
    ('reproduced', '14 of 14 (task, T <= 2) cases exact to 1e-12 in float64 (BN); worst relative error 3.0e-16')
    """
    check_table(table, "table", ["scheme", "T", "tasks_in_theorem", "exact", "worst_rel_error"])
    inside = table[table.tasks_in_theorem > 0]
    all_exact = bool((inside.exact == inside.tasks_in_theorem).all())
    worst = inside.worst_rel_error.max()
    exact, cases = int(inside.exact.sum()), int(inside.tasks_in_theorem.sum())
    report = ("every task inside the theorem's assumptions is exact for every scheme and T: "
              f"{all_exact}\nlargest relative error seen inside: {worst:.2e}")
    schemes = ", ".join(str(scheme).upper() for scheme in inside.scheme.unique())
    return Finding(f"{exact} of {cases} (task, T <= {int(table['T'].max())}) cases exact to 1e-12 in float64 "
                   f"({schemes}); worst relative error {worst:.1e}", verdict(all_exact),
                   check="every task without an empty cluster within 1e-12 of Lloyd, every scheme and T",
                   report=report)


def smallest_error(errors: dict, gammas, floor: float = 1e-17) -> pd.Series:
    """Per ``gamma``: the scheme closest to Lloyd, if it is closer than the runner-up on a 95% interval.

    Errors are read as log10 (floored at ``floor``, so that exact zeros compare). The scheme with
    the smallest mean over tasks is compared with every other scheme on the same tasks (paired):
    it is closer to Lloyd than another only when the 95% bootstrap interval of the mean difference
    lies below 0 (:func:`~kmtrf_core.book.uncertainty.compare`). Every scheme it is not closer than
    is named beside it, as a tie inside the noise.

    Parameters
    ----------
    errors : dict
        Scheme -> relative errors against Lloyd, ``(tasks, len(gammas))``, the same tasks for
        every scheme (:func:`~kmtrf_core.construction.finite_gamma_error` per ``gamma``).
    gammas : sequence of float
        The columns' ``gamma`` values.
    floor : float
        The smallest error taken (an exact 0 becomes ``floor``).

    Returns
    -------
    pandas.Series
        Indexed by ``gamma``: ``"BN"`` when BN is closer than every other scheme on the
        interval, ``"BN ~ OH"`` (or ``"BN ~ OH ~ SC"``) when the others named are inside its noise.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> base = rng.random((64, 2)) * 1e-3
    >>> errors = {"oh": base * np.array([10.0, 1.0]), "bn": base * np.array([1.0, 1.0])}
    >>> errors["bn"][:, 1] *= np.exp(0.01 * rng.standard_normal(64))
    >>> smallest_error(errors, [1.0, 100.0]).tolist()
    ['BN', 'BN ~ OH']
    """
    gammas = list(gammas)
    logs = _log_errors(errors, gammas, floor, least=2)
    out = {}
    for i, gamma in enumerate(gammas):
        ranked = _ranked(logs, i)  # then keep every scheme the first does not separate from itself
        first = ranked[0]
        ties = [scheme for scheme in ranked[1:] if compare(logs[first][:, i], logs[scheme][:, i]).verdict != "reproduced"]
        out[gamma] = " ~ ".join(scheme.upper() for scheme in [first, *ties])
    return pd.Series(out, name="closest to Lloyd")


def closest_gap(errors: dict, gammas, floor: float = 1e-17) -> pd.Series:
    """Per ``gamma``: the intervals behind :func:`smallest_error`'s names, the closest against each other.

    The paired difference of the mean log10 error over tasks, the closest scheme minus every other
    scheme, nearest first (:func:`~kmtrf_core.book.uncertainty.compare`): a scheme whose interval
    reaches 0 is named beside the first as a tie; one whose interval lies below 0 is not.

    Parameters
    ----------
    errors, gammas, floor
        As for :func:`smallest_error`.

    Returns
    -------
    pandas.Series
        Indexed by ``gamma``: ``"BN - OH: -1.000 [-1.000, -1.000] (95% CI; margin 0); BN - SC: ..."``.

    Examples
    --------
    >>> bn = np.random.default_rng(0).random((32, 1)) * 1e-3
    >>> closest_gap({"oh": 10 * bn, "bn": bn, "sc": 100 * bn}, [1.0])[1.0]    # BN 10 and 100 times closer
    'BN - OH: -1.000 [-1.000, -1.000] (95% CI; margin 0); BN - SC: -2.000 [-2.000, -2.000] (95% CI; margin 0)'
    """
    gammas = list(gammas)
    logs = _log_errors(errors, gammas, floor, least=2)
    out = {}
    for i, gamma in enumerate(gammas):
        first, *others = _ranked(logs, i)
        out[gamma] = "; ".join(f"{first.upper()} - {other.upper()}: "
                               f"{compare(logs[first][:, i], logs[other][:, i]).text()}" for other in others)
    return pd.Series(out, name="closest - each other, log10")


def mean_log_error(errors: dict, gammas, floor: float = 1e-17) -> pd.DataFrame:
    """Per ``gamma`` and scheme: the mean over tasks of the log10 relative error against Lloyd.

    This is the statistic :func:`smallest_error` ranks the schemes by and whose paired
    differences it tests, so a table of it can stand beside that verdict (a table of medians
    can order the schemes otherwise).

    Parameters
    ----------
    errors : dict
        Scheme -> relative errors against Lloyd, ``(tasks, len(gammas))``, the same tasks for
        every scheme.
    gammas : sequence of float
        The columns' ``gamma`` values.
    floor : float
        The smallest error taken (an exact 0 becomes ``floor``), as in :func:`smallest_error`.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``gamma``, one column per scheme (upper case).

    Examples
    --------
    >>> errors = {"oh": np.array([[1e-2, 0.0], [1e-4, 0.0]]), "bn": np.array([[1e-3, 1e-16], [1e-3, 1e-16]])}
    >>> table = mean_log_error(errors, [10.0, 1e5])
    >>> table.columns.tolist(), table.index.tolist()
    (['OH', 'BN'], [10.0, 100000.0])
    >>> table.round(6).to_numpy().tolist()    # exact zeros count as 1e-17
    [[-3.0, -3.0], [-17.0, -16.0]]
    """
    logs = _log_errors(errors, list(gammas), floor)
    return pd.DataFrame({scheme.upper(): values.mean(axis=0) for scheme, values in logs.items()},
                        index=pd.Index(list(gammas), name="gamma"))


def _ranked(logs: dict, column: int) -> list:
    """The schemes by the statistic the intervals test at one ``gamma``: the mean log10 error over tasks."""
    return sorted(logs, key=lambda scheme: float(logs[scheme][:, column].mean()))


def _log_errors(errors: dict, gammas: list, floor: float, least: int = 1) -> dict:
    """Check ``errors`` (scheme -> ``(tasks, len(gammas))``, the same tasks, at least ``least``
    schemes: 1 or 2) and take log10, floored."""
    if len(errors) < least:
        wanted = "one scheme" if least == 1 else "two schemes"
        raise ValueError(f"errors must hold at least {wanted}, got {list(errors) or 'none'}")
    check_number(floor, "floor")  # a positive finite number
    logs = {}
    for scheme, values in errors.items():
        values = np.asarray(values.cpu() if isinstance(values, torch.Tensor) else values, dtype=float)
        if values.ndim != 2 or values.shape[1] != len(gammas) or values.shape[0] < 2:
            raise ValueError(f"errors[{scheme!r}] must be (tasks >= 2, {len(gammas)} gammas), got {values.shape}")
        if not (np.isfinite(values).all() and (values >= 0).all()):
            raise ValueError(f"errors[{scheme!r}] must be finite and non-negative")
        logs[scheme] = np.log10(np.maximum(values, floor))
    shapes = {values.shape for values in logs.values()}
    if len(shapes) != 1:
        raise ValueError(f"errors must hold the same tasks for every scheme, got shapes {sorted(shapes)}")
    return logs
