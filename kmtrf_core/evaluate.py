"""Using a trained layer as a clustering algorithm (Section 4, Appendix C).

A layer trained for one step can be run for ``T`` steps in two ways:

* **re-embedding** (Appendix C): ``C^(t+1) = F(X, C^(t))``, the whole model
  on the task with the current centers, fresh token embeddings as in training;
* **naive iteration** (Fig. 6, left): embed once, apply the layer of Eq. (4)
  ``T`` times to its own token embeddings and read the centers off the first
  ``d`` coordinates after each layer, as the construction of Theorem 2.1 does
  at ``gamma = inf``.

Both are compared with Lloyd's algorithm (Algorithm 2) from the same initial
centers, step by step, by the k-means loss of Eq. (1), in tidy DataFrames with
one row per (model, ensemble member, test, mode, step). The probes of Section 4
(shifts of Fig. 7, families of Fig. 8/18, sizes of Fig. 12) differ only in
their tasks (:func:`~kmtrf_core.tasks.shifted_tasks`,
:func:`~kmtrf_core.tasks.family_tasks`); the trained layers come from
:mod:`kmtrf_core.training`. Used in most chapters of Parts II and III.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from .lloyd import kmeans_objective, lloyd, lloyd_trajectory
from .model import ClusterTransformer, check_gamma, check_model
from .tasks import FAMILIES, family_tasks, sample_tasks  # noqa: F401  (family_tasks, sample_tasks: the doctests)
from .validation import check_choice, check_int, check_points_centers, check_same_dtype, check_table, check_tensor

__all__ = [
    "MODES",
    "relative_loss",
    "center_trajectory",
    "loss_trajectory",
    "lloyd_loss_trajectory",
    "evaluate_models",
    "final_ratios",
    "family_matrix",
    "trajectory_losses",
    "trajectory_table",
]

MODES = ("reembed", "naive")
"""Ways to run a one-step layer for several steps (Appendix C)."""



def relative_loss(
    model: ClusterTransformer, X: torch.Tensor, C: torch.Tensor, chunk: int = 64, reference: torch.Tensor | None = None,
    steps: int = 1,
) -> torch.Tensor:
    """Relative loss of Eq. 20 per task: ``L(X, F(X, C)) / L(X, Lloyd_1(X, C))``.

    Below 1: the layer beats one Lloyd step on that task. Evaluated without
    gradients. With ``steps = T > 1``: ``T`` re-embedded layer steps against
    ``T`` Lloyd steps (how a layer trained for ``T`` steps is validated).

    Parameters
    ----------
    model : ClusterTransformer
        A single layer or an ensemble of ``S``.
    X, C : torch.Tensor
        Points ``(B, n, d)`` and initial centers ``(B, k, d)``.
    chunk : int
        Tasks per forward pass, ``>= 1``.
    reference : torch.Tensor, optional
        The denominators ``L(X, Lloyd_T(X, C))`` ``(B,)``, when already known
        (fixed validation tasks): finite and positive.
    steps : int
        Steps ``T`` of both algorithms.

    Returns
    -------
    torch.Tensor
        ``(B,)``, or ``(S, B)`` for an ensemble. A task that Lloyd solves
        with zero loss raises ``ValueError`` (the ratio is undefined).

    Raises
    ------
    ValueError
        For a ``model`` that is no :class:`ClusterTransformer`, tasks that are
        not a valid batch (:func:`~kmtrf_core.validation.check_points_centers`),
        a ``chunk`` or ``steps`` below 1, or a ``reference`` that is not ``B``
        finite values; and where the reference is 0.

    Examples
    --------
    The constructed layer of Theorem 2.1 is one Lloyd step:

    >>> X, C = sample_tasks(3, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> relative_loss(ClusterTransformer.from_lloyd(2, 3, "bn"), X, C).round(decimals=6).tolist()
    [1.0, 1.0, 1.0]
    >>> relative_loss(ClusterTransformer.from_lloyd(2, 3, "bn"), X, C, reference=torch.ones(2))
    Traceback (most recent call last):
    ...
    ValueError: reference must hold one loss per task, shape (3,), got (2,)
    """
    model = check_model(model)
    check_points_centers(X, C)
    check_int(chunk, "chunk")
    check_int(steps, "steps")
    if reference is not None:
        check_tensor(reference, "reference", None)
        if reference.shape != X.shape[:1]:
            raise ValueError(f"reference must hold one loss per task, shape ({X.shape[0]},), got "
                             f"{tuple(reference.shape)}")
    with torch.no_grad():
        if reference is None:
            reference = kmeans_objective(X, lloyd(X, C, steps=steps))  # (B,)
        if not bool((reference > 0).all()):
            tasks = torch.nonzero(reference <= 0).flatten().tolist()[:10]
            raise ValueError(f"one Lloyd step reaches zero k-means loss on tasks {tasks} (every point on a "
                             "center): the relative loss of Eq. 20 is undefined there")
        out = []
        for start in range(0, X.shape[0], chunk):
            Xc, Cc = X[start : start + chunk], C[start : start + chunk]
            centers = model(Xc, Cc)  # ((S,) b, k, d)
            Xe = Xc.expand(centers.shape[:-2] + Xc.shape[-2:])
            for _ in range(steps - 1):  # re-embedded (Appendix C)
                centers = model(Xe, centers)
            out.append(kmeans_objective(Xe.flatten(0, -3), centers.flatten(0, -3)).view(centers.shape[:-2]))
    return torch.cat(out, dim=-1) / reference


def center_trajectory(
    model: ClusterTransformer,
    X: torch.Tensor,
    C: torch.Tensor,
    steps: int,
    mode: str = "reembed",
    chunk: int = 64,
    gammas=None,
) -> torch.Tensor:
    """The centers after each of ``steps`` applications of the layer (Appendix C).

    Parameters
    ----------
    model : ClusterTransformer
        A single layer or an ensemble of ``S`` layers.
    X, C : torch.Tensor
        Points ``(B, n, d)`` and initial centers ``(B, k, d)``.
    steps : int
        Number of clustering steps ``T``.
    mode : {"reembed", "naive"}
        ``"reembed"``: ``C^(t+1) = F(X, C^(t))``, fresh token embeddings at
        every step. ``"naive"``: the layer applied ``T`` times to its own
        token embeddings (the ``T``-layer forward with shared weights).
    chunk : int
        Tasks per batch (bounds memory for large ``n``).
    gammas : sequence of float, optional
        The attention temperature of each of the ``T`` steps (annealing at
        inference, chapter 18); default: the layer's own ``gamma`` throughout.

    Returns
    -------
    torch.Tensor
        ``(T + 1, B, k, d)``, or ``(T + 1, S, B, k, d)`` for an ensemble;
        index 0 holds the initial centers. Computed without gradients. A
        task whose iteration overflows (naive iteration of a learned layer
        can) gets ``inf`` centers, never NaN, and an ``inf`` loss in
        :func:`loss_trajectory`.

    Examples
    --------
    With the constructed weights of Theorem 2.1 at ``gamma = inf`` both modes are Lloyd's algorithm:

    >>> X, C = sample_tasks(2, 30, 2, 3, generator=0, dtype=torch.float64)
    >>> model = ClusterTransformer.from_lloyd(2, 3, "bn")
    >>> traj = center_trajectory(model, X, C, steps=4, mode="naive")
    >>> traj.shape, torch.allclose(traj, lloyd_trajectory(X, C, 4).centers)
    (torch.Size([5, 2, 3, 2]), True)
    """
    model = check_model(model)
    model.prepare_tasks(X, C)
    check_int(steps, "steps")
    mode = check_choice(mode, "mode", MODES)
    check_int(chunk, "chunk")
    schedule = _gamma_schedule(gammas, steps, model.gamma)
    d = model.d
    parts = []
    with torch.no_grad():
        for start in range(0, X.shape[0], chunk):
            Xc, Cc = X[start : start + chunk], C[start : start + chunk]
            Xc, Cc = model.prepare_tasks(Xc, Cc)  # ((S,) b, n, d), ((S,) b, k, d)
            out = [Cc]
            if mode == "naive":
                X_bar, C_bar = model.embed(Xc, Cc)
                for gamma in schedule:
                    X_bar, C_bar = model.layer(X_bar, C_bar, gamma=gamma)
                    out.append(C_bar[..., :d])
            else:
                current = Cc
                for gamma in schedule:
                    X_bar, C_bar = model.embed(Xc, current)
                    current = model.layer(X_bar, C_bar, gamma=gamma)[1][..., :d]
                    out.append(current)
            parts.append(torch.stack(out))  # (T + 1, (S,) b, k, d)
    return _marked_diverged(torch.cat(parts, dim=-3))


def _marked_diverged(centers: torch.Tensor) -> torch.Tensor:
    """``inf`` where a diverged task's centers went NaN (an overflow inside the layer can surface as NaN)."""
    return torch.where(torch.isnan(centers), torch.full((), math.inf, dtype=centers.dtype), centers)


def _gamma_schedule(gammas, steps: int, default: float) -> list:
    if gammas is None:
        return [default] * steps
    if isinstance(gammas, (str, bytes)):  # float() reads each character of "12" as a number
        raise ValueError(f"gammas must be a sequence of {steps} numbers, got {gammas!r}")
    try:
        values = [float(g) for g in gammas]
    except (TypeError, ValueError):
        raise ValueError(f"gammas must be a sequence of {steps} numbers, got {gammas!r}") from None
    if len(values) != steps:
        raise ValueError(f"gammas must hold one temperature per step ({steps}), got {len(values)}")
    return [check_gamma(value, "gammas entries") for value in values]


def trajectory_losses(X: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """The k-means loss (Eq. 1) of every step's centers ``(T + 1, (S,) B, k, d)`` on the tasks ``X (B, n, d)``.

    A task whose centers overflowed (``inf`` or NaN, as :func:`center_trajectory` marks them)
    scores ``inf``; the result is ``(T + 1, (S,) B)``.

    >>> X = torch.tensor([[[0.], [2.], [9.]]], dtype=torch.float64)
    >>> centers = torch.tensor([[[[1.], [9.]]], [[[1.], [math.inf]]]], dtype=torch.float64)  # (2, 1, 2, 1)
    >>> trajectory_losses(X, centers).tolist()
    [[2.0], [inf]]
    >>> trajectory_losses(X, centers[:, :, :, :0])
    Traceback (most recent call last):
    ...
    ValueError: centers must be (T + 1, B, k, d) or (T + 1, S, B, k, d) with X's B = 1 and d = 1, got shape (2, 1, 2, 0)
    """
    check_tensor(X, "X", 3)
    B, d = X.shape[0], X.shape[2]
    if not isinstance(centers, torch.Tensor) or centers.dim() not in (4, 5) or centers.shape[-3] != B \
            or centers.shape[-1] != d or 0 in centers.shape:
        shape = tuple(centers.shape) if isinstance(centers, torch.Tensor) else type(centers).__name__
        raise ValueError(f"centers must be (T + 1, B, k, d) or (T + 1, S, B, k, d) with X's B = {B} and d = {d}, "
                         f"got shape {shape}")
    check_same_dtype(X, centers, "X and centers")
    lead = centers.shape[:-2]
    Xe = X.expand(*lead[:-1], *X.shape)  # (T + 1, (S,) B, n, d)
    finite = torch.isfinite(centers).flatten(-2).all(dim=-1)  # (T + 1, (S,) B)
    safe = torch.where(finite[..., None, None], centers, torch.zeros((), dtype=centers.dtype))
    loss = kmeans_objective(Xe.reshape(-1, *X.shape[1:]), safe.reshape(-1, *centers.shape[-2:])).view(lead)
    return torch.where(finite & torch.isfinite(loss), loss, torch.full((), math.inf, dtype=loss.dtype))


def loss_trajectory(
    model: ClusterTransformer,
    X: torch.Tensor,
    C: torch.Tensor,
    steps: int,
    mode: str = "reembed",
    chunk: int = 64,
    gammas=None,
) -> torch.Tensor:
    """The k-means loss (Eq. 1) of each task after each step of :func:`center_trajectory`.

    Parameters
    ----------
    model, X, C, steps, mode, chunk, gammas
        As in :func:`center_trajectory`.

    Returns
    -------
    torch.Tensor
        ``(T + 1, B)`` or ``(T + 1, S, B)``; ``inf`` where the centers
        overflowed (the iteration diverged).

    Examples
    --------
    >>> X, C = sample_tasks(2, 30, 2, 3, generator=0, dtype=torch.float64)
    >>> model = ClusterTransformer.from_lloyd(2, 3, "bn")
    >>> L = loss_trajectory(model, X, C, steps=3)
    >>> torch.allclose(L, lloyd_loss_trajectory(X, C, steps=3))
    True
    """
    return trajectory_losses(X, center_trajectory(model, X, C, steps, mode, chunk, gammas))


def lloyd_loss_trajectory(X: torch.Tensor, C: torch.Tensor, steps: int) -> torch.Tensor:
    """The k-means loss (Eq. 1) of each task after each of ``steps`` Lloyd iterations (``empty="keep"``).

    Parameters
    ----------
    X, C, steps
        As in :func:`~kmtrf_core.lloyd.lloyd_trajectory`.

    Returns
    -------
    torch.Tensor
        ``(T + 1, B)``, index 0 the loss of the initial centers.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [1.], [9.], [10.]]], dtype=torch.float64)
    >>> lloyd_loss_trajectory(X, X[:, :2].clone(), steps=2).squeeze(1).round(decimals=2).tolist()
    [145.0, 17.56, 1.0]
    """
    traj = lloyd_trajectory(X, C, steps).centers  # (T + 1, B, k, d)
    with torch.no_grad():
        return trajectory_losses(X, traj)


def evaluate_models(
    models: dict,
    tests: dict,
    steps: int,
    modes=("reembed",),
    chunk: int = 64,
    return_trajectories: bool = False,
):
    """Multi-step evaluation of several models on several test sets, against Lloyd.

    Parameters
    ----------
    models : dict
        Label -> :class:`~kmtrf_core.model.ClusterTransformer` (single or
        ensemble). A label may be any hashable, e.g. ``("bn", "l2")``.
    tests : dict
        Name -> ``(X, C)`` task batch; every model must accept every test
        (same ``d`` and ``k``).
    steps, chunk : int
        As in :func:`center_trajectory`.
    modes : str or sequence of {"reembed", "naive"}
        How each model is iterated (the ``mode`` of :func:`center_trajectory`).
    return_trajectories : bool
        Also return the trajectories the table was made from, for per-task
        readings of the same runs.

    Returns
    -------
    pandas.DataFrame
        Columns ``model, member, test, mode, step`` (one row each; ``member``
        indexes the ensemble, 0 for a single model), ``loss`` and ``lloyd_loss``
        (mean k-means losses over the tasks after ``step`` steps of the model
        and of Lloyd), ``ratio`` (the mean per-task quotient: below 1 the model
        beats Lloyd; NaN or inf where Lloyd reaches zero loss, e.g. ``k = n``)
        and ``diverged`` (the fraction of tasks whose centers overflowed).
        Step 0 is the shared start (ratio 1).
    dict
        With ``return_trajectories``: ``(test, mode, label)`` -> centers
        ``(T + 1, (S,) B, k, d)`` (:func:`center_trajectory`).

    Examples
    --------
    >>> X, C = sample_tasks(4, 30, 2, 3, generator=0, dtype=torch.float64)
    >>> table = evaluate_models({"lloyd-weights": ClusterTransformer.from_lloyd(2, 3)}, {"uniform": (X, C)}, steps=2)
    >>> table.ratio.round(12).tolist()
    [1.0, 1.0, 1.0]
    """
    if not isinstance(models, dict) or not models:
        raise ValueError("models must be a non-empty dict label -> ClusterTransformer")
    if not isinstance(tests, dict) or not tests:
        raise ValueError("tests must be a non-empty dict name -> (X, C)")
    check_int(steps, "steps")
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if not modes:
        raise ValueError("modes must name at least one mode")
    modes = tuple(check_choice(mode, "mode", MODES) for mode in modes)
    tables, kept = [], {}
    for test, pair in tests.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"tests[{test!r}] must be a pair (X, C)")
        X, C = pair
        for mode in modes:
            trajectories = {label: center_trajectory(check_model(model), X, C, steps, mode, chunk)
                            for label, model in models.items()}
            tables.append(trajectory_table(trajectories, X, C, test=test, mode=mode))
            if return_trajectories:
                kept.update({(test, mode, label): centers for label, centers in trajectories.items()})
    table = pd.concat(tables, ignore_index=True)
    return (table, kept) if return_trajectories else table


def trajectory_table(trajectories: dict, X: torch.Tensor, C: torch.Tensor, test="tasks", mode="reembed"):
    """Center trajectories of any algorithms, as :func:`evaluate_models`' table against Lloyd's.

    Parameters
    ----------
    trajectories : dict
        Label -> centers ``(T + 1, B, k, d)`` or ``(T + 1, S, B, k, d)`` from
        the same initial centers ``C`` (e.g. :func:`center_trajectory`,
        :func:`~kmtrf_core.padding.padded_trajectory`); ``inf`` marks a diverged task.
    X, C : torch.Tensor
        The tasks ``(B, n, d)`` and their initial centers ``(B, k, d)``.
    test, mode : str
        What the ``test`` and ``mode`` columns say.

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`evaluate_models`.

    Examples
    --------
    >>> X, C = sample_tasks(4, 30, 2, 3, generator=0, dtype=torch.float64)
    >>> table = trajectory_table({"lloyd": lloyd_trajectory(X, C, 2).centers}, X, C)
    >>> table.ratio.round(12).tolist(), table.diverged.tolist()
    ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    """
    if not isinstance(trajectories, dict) or not trajectories:
        raise ValueError("trajectories must be a non-empty dict label -> centers (T + 1, (S,) B, k, d)")
    check_points_centers(X, C)
    rows = []
    steps = None
    for label, centers in trajectories.items():
        if not isinstance(centers, torch.Tensor) or centers.dim() not in (4, 5) or centers.shape[-3:] != C.shape:
            raise ValueError(f"trajectories[{label!r}] must be centers (T + 1, (S,) B, k, d) for tasks of "
                             f"shape {tuple(C.shape)}")
        if steps is None:
            steps = centers.shape[0] - 1
            reference = lloyd_loss_trajectory(X, C, steps)  # (T + 1, B)
            ref_mean = reference.mean(dim=-1)
        elif centers.shape[0] - 1 != steps:
            raise ValueError("trajectories must all have the same number of steps")
        with torch.no_grad():
            losses = trajectory_losses(X, centers.to(X.dtype))  # (T + 1, (S,) B)
        if centers.dim() == 4:
            losses = losses.unsqueeze(1)
        ratio = (losses / reference.unsqueeze(1)).mean(dim=-1)  # (T + 1, S)
        mean = losses.mean(dim=-1)
        diverged = torch.isinf(losses).to(torch.float64).mean(dim=-1)
        for member in range(losses.shape[1]):
            for t in range(steps + 1):
                rows.append((label, member, test, mode, t, float(mean[t, member]), float(ref_mean[t]),
                             float(ratio[t, member]), float(diverged[t, member])))
    columns = ["model", "member", "test", "mode", "step", "loss", "lloyd_loss", "ratio", "diverged"]
    return pd.DataFrame(rows, columns=columns)


def final_ratios(table, by=("model", "test", "mode"), step: int | None = None):
    """Per group, the median and quartiles over ensemble members of the ratio to Lloyd at ``step``.

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`evaluate_models`.
    by : tuple of str
        Columns that define a group.
    step : int, optional
        The step to read; default the last step in the table.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``by``, with columns ``median, q25, q75`` (of the ratio),
        ``members`` and ``diverged`` (mean fraction of diverged tasks).

    Examples
    --------
    >>> X, C = sample_tasks(4, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> table = evaluate_models({"lloyd-weights": ClusterTransformer.from_lloyd(2, 3)}, {"normal": (X, C)}, steps=1)
    >>> final_ratios(table).round(6).reset_index().values.tolist()
    [['lloyd-weights', 'normal', 'reembed', 1.0, 1.0, 1.0, 1, 0.0]]
    """
    by = [by] if isinstance(by, str) else list(by)
    check_table(table, "table", [*by, "step", "ratio", "diverged"])
    if step is None:
        step = int(table.step.max())
    else:
        check_int(step, "step", minimum=0)
    part = table[table.step == step]
    if part.empty:
        raise ValueError(f"the table has no rows at step {step}")
    grouped = part.groupby(by)
    out = grouped.ratio.quantile(0.5).to_frame("median")
    out["q25"] = grouped.ratio.quantile(0.25)
    out["q75"] = grouped.ratio.quantile(0.75)
    out["members"] = grouped.ratio.size()
    out["diverged"] = grouped.diverged.mean()
    return out


def family_matrix(table, scheme, step: int | None = None, mode: str = "reembed"):
    """The train-family x test-family matrix of median ratios to Lloyd (Fig. 8/18).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`evaluate_models` with model labels ``(train_family, scheme)``
        and tests named by family (as ``family_generalization`` makes it).
    scheme : str
        Whose models to show.
    step, mode
        The step (default the last) and the ``mode`` (``"reembed"`` or ``"naive"``) to read.

    Returns
    -------
    pandas.DataFrame
        Rows test families, columns training families, both in
        :data:`~kmtrf_core.tasks.FAMILIES` order; entries the median over
        members of the ratio to Lloyd.

    Examples
    --------
    >>> tests = family_tasks(2, 20, 2, 3, families=("normal", "cauchy"), generator=0, dtype=torch.float64)
    >>> models = {(fam, "bn"): ClusterTransformer.from_lloyd(2, 3, "bn") for fam in ("normal", "cauchy")}
    >>> matrix = family_matrix(evaluate_models(models, tests, steps=1), "bn")
    >>> list(matrix.index), list(matrix.columns), matrix.round(6).values.tolist()
    (['normal', 'cauchy'], ['normal', 'cauchy'], [[1.0, 1.0], [1.0, 1.0]])
    """
    check_table(table, "table", ["model", "test", "mode", "step", "ratio", "diverged"])
    mode = check_choice(mode, "mode", MODES)
    ratios = final_ratios(table[table["mode"] == mode], step=step)["median"].reset_index()
    ratios = ratios[[isinstance(m, tuple) and m[1] == scheme for m in ratios.model]]
    if ratios.empty:
        raise ValueError(f"no models labelled (train_family, {scheme!r}) in the table")
    ratios["train_family"] = [m[0] for m in ratios.model]
    matrix = ratios.pivot(index="test", columns="train_family", values="median")
    order_rows = [f for f in FAMILIES if f in matrix.index]
    order_cols = [f for f in FAMILIES if f in matrix.columns]
    return matrix.loc[order_rows, order_cols]
