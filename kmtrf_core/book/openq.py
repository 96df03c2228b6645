"""Part III: the paper's open questions (Appendix A), run as experiments (chapters 16-21).

Each chapter takes its layers from the catalog (groups ``openq_*``,
:mod:`kmtrf_core.book.catalog`), evaluates them here on held-out tasks from
the same starts as Lloyd's algorithm, and turns the tables into the verdicts
of its claims (the book's own, marked "ours" in the ledger). The functions are
small on purpose: the experiment's logic lives in the core
(:func:`~kmtrf_core.evaluate.padded_trajectory`,
:func:`~kmtrf_core.evaluate.center_trajectory` with a temperature schedule,
:func:`~kmtrf_core.algorithms.compare_algorithms`, the training options of
:class:`~kmtrf_core.training.TrainConfig`); this module only arranges it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ..algorithms import compare_algorithms
from ..embeddings import embedding_dim
from ..evaluate import center_trajectory, padded_trajectory, trajectory_table
from ..lipschitz import lipschitz_bound
from ..lloyd import kmeans_objective, lloyd_step
from ..model import check_model
from ..tasks import sample_tasks
from ..training import TrainConfig
from ..validation import check_int, check_table
from .claims import verdict
from .section4 import Finding

__all__ = [
    "algorithm_finding",
    "algorithm_table",
    "below_finding",
    "better_finding",
    "codes_findings",
    "code_table",
    "eval_tasks",
    "group_caption",
    "geometric_schedule",
    "order_sensitivity",
    "ratio_at",
    "run_summary",
    "schedule_trajectories",
    "size_transfer",
    "spectral_gammas",
    "transfer_finding",
    "transfer_trajectories",
    "versus_finding",
]


def eval_tasks(config: TrainConfig, count: int, seed: int = 12345, *, family=None, d: int | None = None,
               k: int | None = None):
    """Held-out tasks ``(X, C)`` from a run's task distribution, optionally at another family, ``d`` or ``k``.

    Parameters
    ----------
    config : TrainConfig
        Gives ``n``, the spread, anisotropy, weights and (by default) family, ``d`` and ``k``.
    count : int
        Number of tasks.
    seed : int
        Seed of the draw (the same seed gives the same tasks for every layer).
    family, d, k : optional
        Overrides.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        Points ``(count, n, d)`` and initial centers ``(count, k, d)``, float32.

    Examples
    --------
    >>> X, C = eval_tasks(TrainConfig(d=2, k=3, n=16), 4, d=1, k=2)
    >>> tuple(X.shape), tuple(C.shape)
    ((4, 16, 1), (4, 2, 1))
    """
    check_int(count, "count")
    return sample_tasks(count, config.n, config.d if d is None else d, config.k if k is None else k,
                        family=config.family if family is None else family, scale=config.scale,
                        anisotropic=config.anisotropic, unequal_weights=config.unequal_weights,
                        generator=seed)


def run_summary(group, history) -> pd.DataFrame:
    """Per run of a catalog group: :meth:`RunGroup.report` plus training time and time per step.

    Parameters
    ----------
    group : RunGroup
        The catalog group.
    history : pandas.DataFrame
        Its sweep history (``group.runs()[1]``).

    Returns
    -------
    pandas.DataFrame
        The report's columns and ``seconds`` (wall time of the run, all seeds
        together) and ``ms_per_step``.

    Examples
    --------
    >>> from kmtrf_core.book.catalog import RunGroup
    >>> group = RunGroup("demo", TrainConfig(d=2, k=3, n=16), {"scheme": ["bn"]}, "16", "a test")
    >>> history = pd.DataFrame({"scheme": "bn", "seed": 0, "step": [0, 100, 200], "train_loss": [np.nan, 2, 1],
    ...                         "val_relative_loss": [1.5, 1.2, 1.1], "wall_time": [0.0, 1.0, 2.0]})
    >>> run_summary(group, history)[["steps", "seconds", "ms_per_step"]].to_dict("records")
    [{'steps': 200, 'seconds': 2.0, 'ms_per_step': 10.0}]
    """
    history = check_table(history, "history", ["step", "wall_time", *group.grid])
    report = group.report(history)
    timing = history.groupby(list(group.grid)).agg(seconds=("wall_time", "max"), last=("step", "max"))
    report["seconds"] = timing.seconds.reindex(report.index).to_numpy()
    report["ms_per_step"] = 1000 * report.seconds / timing["last"].reindex(report.index).clip(lower=1).to_numpy()
    return report


def ratio_at(table, steps, by=("model",)) -> pd.DataFrame:
    """Median over ensemble members of the ratio to Lloyd after each of ``steps`` (columns ``step1``, ...).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`~kmtrf_core.evaluate.evaluate_models` or :func:`~kmtrf_core.evaluate.trajectory_table`.
    steps : sequence of int
        The steps to read.
    by : tuple of str
        The row grouping.

    Returns
    -------
    pandas.DataFrame
        One row per group, one column ``step<t>`` per step.

    Examples
    --------
    >>> table = pd.DataFrame({"model": "bn", "member": [0, 1, 0, 1], "step": [1, 1, 2, 2],
    ...                       "ratio": [0.9, 0.7, 0.8, 0.6]})
    >>> ratio_at(table, [1, 2]).round(2).to_dict("records")
    [{'step1': 0.8, 'step2': 0.7}]
    """
    table = check_table(table, "table", ["member", "step", "ratio", *by])
    picked = table[table.step.isin(list(steps))]
    wide = picked.groupby([*by, "step"], sort=False).ratio.median().unstack("step")
    wide.columns = [f"step{int(step)}" for step in wide.columns]
    return wide


def spectral_gammas(model) -> pd.DataFrame:
    """Per ensemble member: the largest spectral norm of the query/key projections and of the values.

    These are the ``Gamma1`` and ``Gamma2`` of Assumption I.2, measured on a
    trained layer, for :func:`~kmtrf_core.lipschitz.lipschitz_bound`.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> table = spectral_gammas(ClusterTransformer.from_lloyd(2, 3, "bn"))
    >>> list(table.columns), len(table)
    (['member', 'Gamma1', 'Gamma2'], 1)
    """
    model = check_model(model)
    rows = []
    for member, layer in enumerate(model.members()):
        with torch.no_grad():
            qk = torch.linalg.matrix_norm(torch.cat([layer.Q, layer.K]).double(), ord=2).max().item()
            v = torch.linalg.matrix_norm(layer.V.double(), ord=2).max().item()
        rows.append((member, qk, v))
    return pd.DataFrame(rows, columns=["member", "Gamma1", "Gamma2"])


def code_table(layers: dict, config: TrainConfig, X: torch.Tensor, C: torch.Tensor, steps: int) -> pd.DataFrame:
    """One row per token embedding: its size, its layer's ratio to Lloyd, and its Lipschitz bound.

    Parameters
    ----------
    layers : dict
        Scheme -> trained layer (single or ensemble), all trained with ``config`` but the scheme.
    config : TrainConfig
        The shared training config (``n``, ``d``, ``k``, ``gamma``, ``tau``, ``omega``).
    X, C : torch.Tensor
        Held-out tasks.
    steps : int
        Clustering steps ``T``.

    Returns
    -------
    pandas.DataFrame
        Indexed by scheme: ``d_emb``, ``parameters``, ``step1`` and
        ``step<T>`` (median over members of the ratio to Lloyd, re-embedded),
        ``Gamma1`` / ``Gamma2`` (median over members, :func:`spectral_gammas`)
        and ``log10_bound`` (Theorem I.2 at those norms).

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> cfg = TrainConfig(d=2, k=3, n=16)
    >>> X, C = eval_tasks(cfg, 4)
    >>> layers = {"bn": ClusterTransformer(2, 3, "bn"), "oh": ClusterTransformer(2, 3, "oh")}
    >>> code_table(layers, cfg, X, C, steps=2).d_emb.to_dict()
    {'bn': 4, 'oh': 5}
    """
    check_int(steps, "steps")
    trajectories = {scheme: center_trajectory(model, X, C, steps) for scheme, model in layers.items()}
    ratios = ratio_at(trajectory_table(trajectories, X, C), sorted({1, steps}))
    rows = []
    for scheme, model in layers.items():
        gammas = spectral_gammas(model).median()
        bound = lipschitz_bound(config.n, config.k, config.d, scheme, config.final_gamma, config.tau, config.omega,
                                Gamma1=float(gammas.Gamma1), Gamma2=float(gammas.Gamma2))
        rows.append(dict(scheme=scheme, d_emb=embedding_dim(config.d, config.k, scheme),
                         parameters=model.members()[0].num_parameters(), **ratios.loc[scheme].to_dict(),
                         Gamma1=float(gammas.Gamma1), Gamma2=float(gammas.Gamma2),
                         log10_bound=bound.log10_alpha))
    return pd.DataFrame(rows).set_index("scheme")


def order_sensitivity(model, X: torch.Tensor, C: torch.Tensor, permutations: int, seed: int = 0) -> pd.DataFrame:
    """How much a layer's step depends on which code each initial center carries.

    Relabel the initial centers by a random permutation ``pi``, apply the
    layer, undo the relabelling, and compare with the step from the original
    order: ``|F(X, C[pi])[pi^-1] - F(X, C)|_F / |Lloyd(X, C) - C|_F``, in
    units of Lloyd's step. Lloyd's algorithm and a layer without codes (NA)
    do not depend on the order (0 up to rounding); a layer with codes can.
    Also the spread over the relabellings of each task's k-means loss after
    the step, relative to its mean.

    Parameters
    ----------
    model : ClusterTransformer
        Single layer or ensemble.
    X, C : torch.Tensor
        Held-out tasks.
    permutations : int
        Relabellings per task.
    seed : int
        Seed of the permutations.

    Returns
    -------
    pandas.DataFrame
        One row per member: ``member``, ``order_gap`` (mean over tasks and
        relabellings), ``loss_spread`` (mean over tasks of the standard
        deviation over relabellings of the loss, over its mean).

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> X, C = sample_tasks(4, 20, 2, 3, generator=0)
    >>> table = order_sensitivity(ClusterTransformer(2, 3, "na"), X, C, permutations=3)
    >>> bool(table.order_gap.max() < 1e-4)
    True
    """
    model = check_model(model)
    check_int(permutations, "permutations")
    generator = torch.Generator().manual_seed(seed)
    B, k = C.shape[0], C.shape[1]
    rows = []
    with torch.no_grad():
        step = lloyd_step(X, C)
        scale = (step - C).flatten(1).norm(dim=1).clamp_min(torch.finfo(C.dtype).eps)  # (B,)
        for member, layer in enumerate(model.members()):
            base = layer(X, C)
            gaps, losses = [], []
            for _ in range(permutations):
                perm = torch.argsort(torch.rand(B, k, generator=generator), dim=1)  # (B, k)
                inverse = torch.argsort(perm, dim=1)
                shuffled = torch.gather(C, 1, perm[..., None].expand_as(C))
                out = layer(X, shuffled)
                back = torch.gather(out, 1, inverse[..., None].expand_as(out))
                gaps.append((back - base).flatten(1).norm(dim=1) / scale)
                losses.append(kmeans_objective(X, back))
            losses = torch.stack(losses)  # (P, B)
            spread = (losses.std(dim=0, unbiased=False) / losses.mean(dim=0)).mean().item()
            rows.append((member, torch.stack(gaps).mean().item(), spread))
    return pd.DataFrame(rows, columns=["member", "order_gap", "loss_spread"])


def transfer_trajectories(layers: dict, X: torch.Tensor, C: torch.Tensor, steps: int) -> dict:
    """Re-embedded trajectories of layers used on tasks of their own or of a smaller ``(d, k)``.

    Parameters
    ----------
    layers : dict
        Label -> a layer, or ``(layer, fill)`` to pad with that fill
        (:func:`~kmtrf_core.evaluate.pad_tasks`); a layer whose ``(d, k)``
        exceeds the tasks' is padded with the default fill.
    X, C : torch.Tensor
        The tasks.
    steps : int
        Clustering steps ``T``.

    Returns
    -------
    dict
        Label -> centers ``(T + 1, (S,) B, k, d)``, for :func:`~kmtrf_core.evaluate.trajectory_table`.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> X, C = sample_tasks(3, 20, 2, 3, generator=0, dtype=torch.float64)
    >>> out = transfer_trajectories({"wide": ClusterTransformer.from_lloyd(4, 6, "bn")}, X, C, steps=2)
    >>> tuple(out["wide"].shape)
    (3, 3, 3, 2)
    """
    out = {}
    for label, entry in layers.items():
        model, fill = entry if isinstance(entry, tuple) else (entry, "far")
        model = check_model(model)
        if (model.d, model.k) == (X.shape[-1], C.shape[-2]):
            out[label] = center_trajectory(model, X, C, steps)
        else:
            out[label] = padded_trajectory(model, X, C, steps, fill=fill)
    return out


def geometric_schedule(start: float, end: float, steps: int) -> list:
    """``steps`` temperatures from ``start`` to ``end``, evenly spaced in log scale.

    >>> [round(g, 6) for g in geometric_schedule(1.0, 8.0, 4)]
    [1.0, 2.0, 4.0, 8.0]
    >>> geometric_schedule(2.0, 2.0, 1)
    [2.0]
    """
    check_int(steps, "steps")
    for value, name in ((start, "start"), (end, "end")):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if steps == 1:
        return [float(end)]
    return [float(start * (end / start) ** (i / (steps - 1))) for i in range(steps)]


def schedule_trajectories(model, X: torch.Tensor, C: torch.Tensor, steps: int, schedules) -> dict:
    """A layer's trajectories with its attention temperature scheduled over the inference steps.

    Parameters
    ----------
    model : ClusterTransformer
        Single layer or ensemble.
    X, C : torch.Tensor
        The tasks.
    steps : int
        Clustering steps ``T``.
    schedules : sequence of (start, end)
        Geometric schedules (:func:`geometric_schedule`); ``(g, g)`` is a fixed ``gamma = g``.

    Returns
    -------
    dict
        ``"gamma a->b"`` -> centers ``(T + 1, (S,) B, k, d)``.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> X, C = sample_tasks(3, 20, 2, 3, generator=0)
    >>> sorted(schedule_trajectories(ClusterTransformer(2, 3), X, C, 2, [(1, 1), (1, 4)]))
    ['gamma 1->1', 'gamma 1->4']
    """
    out = {}
    for start, end in schedules:
        gammas = geometric_schedule(float(start), float(end), steps)
        out[f"gamma {start:g}->{end:g}"] = center_trajectory(model, X, C, steps, gammas=gammas)
    return out


def algorithm_table(layers: dict, tests: dict, steps: int, *, betas, alphas, batch: int, seed: int = 0):
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
                                           alphas=alphas, batch=batch,
                                           generator=torch.Generator().manual_seed(seed))
                table.insert(0, "test", test)
                table.insert(0, "member", member)
                table.insert(0, "model", label)
                frames.append(table)
    return pd.concat(frames, ignore_index=True)


def group_caption(profile, group, extra: str = "") -> str:
    """The caption line of a figure made from a catalog group: profile, sizes, budget rule.

    >>> from kmtrf_core.book.catalog import book_catalog
    >>> catalog = book_catalog("quick")
    >>> group_caption(catalog.profile, catalog["openq_codes"]).startswith("profile `quick`")
    True
    """
    cfg = group.base
    text = (f"{profile.describe()}: d={cfg.d}, k={cfg.k}, n={cfg.n}, B={cfg.batch}, {cfg.omega.upper()}, "
            f"tau={cfg.tau:g}, gamma={cfg.gamma:g}, lr={cfg.lr:g}, {len(cfg.seeds)} seeds, {group.rule}")
    return f"{text}; {extra}" if extra else text


# --- verdicts -------------------------------------------------------------------------------------
# Each returns Findings (kmtrf_core.book.section4.Finding): the value and verdict a chapter records in the
# claims ledger, and the lines it prints. The thresholds are stated in each claim's text.

def _fmt(values: dict, fmt: str = "{:.3f}") -> str:
    return ", ".join(f"{str(key).upper()} {fmt.format(value)}" for key, value in values.items())


def codes_findings(summary, table, sensitivity, per_seed, probe=None) -> dict:
    """Chapter 16's verdicts: which embeddings learn, whether one dimension is enough, order and Gray codes.

    Parameters
    ----------
    summary : pandas.DataFrame
        :func:`run_summary` of the codes group (indexed by scheme; ``final``: median over seeds of
        the last relative validation loss).
    table : pandas.DataFrame
        :func:`code_table` (``step1``: held-out ratio to Lloyd after one step).
    sensitivity : pandas.DataFrame
        :func:`order_sensitivity` rows with a ``scheme`` column.
    per_seed : pandas.DataFrame
        The last relative validation loss per ``scheme`` and ``seed`` (columns ``scheme, seed, final``).
    probe : dict, optional
        ``{"final": ..., "step1": ...}`` of a longer-trained scalar-code layer (the probe). The
        one-dimension claim is then judged on it, the longest-trained layer, and both are reported.

    Returns
    -------
    dict
        Claim id -> :class:`~kmtrf_core.book.section4.Finding` for ``codes_needed``,
        ``one_dimension_learns``, ``code_order`` and ``gray_order``.

    Examples
    --------
    >>> summary = pd.DataFrame({"final": [0.9, 0.95, 0.94, 0.97, 1.1]}, index=["oh", "bn", "gc", "sc", "na"])
    >>> table = pd.DataFrame({"step1": [0.9, 0.95, 0.94, 0.97, 1.1]}, index=summary.index)
    >>> sens = pd.DataFrame({"scheme": ["oh", "bn", "gc", "sc", "na"], "order_gap": [.2, .3, .3, .4, 1e-7]})
    >>> seeds = pd.DataFrame({"scheme": ["bn", "bn", "gc", "gc"], "seed": [0, 1, 0, 1],
    ...                       "final": [0.94, 0.96, 0.95, 0.97]})
    >>> {key: f.verdict for key, f in codes_findings(summary, table, sens, seeds).items()}
    {'codes_needed': 'reproduced', 'one_dimension_learns': 'reproduced', 'code_order': 'reproduced', 'gray_order': 'reproduced'}
    """
    final = summary["final"]
    coded = [s for s in final.index if s != "na"]
    learned = {s: final[s] for s in coded}
    ok = int(sum(bool(final[s] < 1) for s in coded)) + int("na" not in final.index or final["na"] >= 1)
    total = len(coded) + 1
    needed = Finding(
        f"below one Lloyd step: {_fmt({s: v for s, v in learned.items() if v < 1}) or 'none'}; "
        f"not: {_fmt({s: v for s, v in learned.items() if v >= 1}) or 'none'}; "
        f"NA {final.get('na', float('nan')):.3f}",
        verdict(ok, total), f"final relative validation loss: {_fmt(final.to_dict())} -> {verdict(ok, total)}")
    sc = {"final": final.get("sc", math.nan), "step1": table["step1"].get("sc", math.nan)}
    judged = sc if probe is None else probe
    sc_checks = [bool(judged["final"] < 1), bool(judged["step1"] < 1)]
    text = f"scalar codes (d + 1), until flat: final {sc['final']:.3f}, held-out step 1 {sc['step1']:.3f}"
    if probe is not None:
        text += f"; longer probe: final {probe['final']:.3f}, held-out step 1 {probe['step1']:.3f}"
    one = Finding(text, verdict(sum(sc_checks), 2),
                  f"scalar codes{'' if probe is None else ' (probe)'}: validation and held-out below 1: {sc_checks}")
    gaps = sensitivity.groupby("scheme").order_gap.median()
    na_gap = gaps.get("na", 0.0)
    floor = max(10 * na_gap, 0.01)
    order_ok = int(sum(bool(gaps[s] > floor) for s in coded if s in gaps)) + int(bool(na_gap < 1e-3))
    order = Finding(
        f"relabelling the centers moves the step by {_fmt({s: gaps[s] for s in coded if s in gaps}, '{:.2f}')} "
        f"Lloyd steps; NA {na_gap:.1e}",
        verdict(order_ok, len([s for s in coded if s in gaps]) + 1),
        f"order gap (median over members, in Lloyd steps): {_fmt(gaps.to_dict(), '{:.3g}')}")
    spans = per_seed[per_seed.scheme.isin(["bn", "gc"])].groupby("scheme").final.agg(["min", "max"])
    overlap = bool(len(spans) == 2 and spans["min"].max() <= spans["max"].min())
    gray = Finding(
        f"final over seeds: BN {spans.loc['bn', 'min']:.3f}-{spans.loc['bn', 'max']:.3f}, "
        f"Gray {spans.loc['gc', 'min']:.3f}-{spans.loc['gc', 'max']:.3f}" if len(spans) == 2 else "missing runs",
        verdict(overlap), f"BN and Gray-coded BN seed ranges overlap: {overlap}")
    return {"codes_needed": needed, "one_dimension_learns": one, "code_order": order, "gray_order": gray}


def transfer_finding(table, own: str, wide: str, test: str, steps: int, tolerance: float = 0.05) -> Finding:
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
    >>> transfer_finding(table, "own", "wide", "d=4", 2).verdict
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
                   f"{ok} of {total} checks within {tolerance:.0%} -> {verdict(ok, total)}")


def better_finding(values: dict, baseline: str, what: str, lower: bool = True) -> Finding:
    """A verdict that counts how many variants beat a baseline on one number (chapters 18, 19, 21).

    Parameters
    ----------
    values : dict
        Label -> the number (e.g. a median ratio to Lloyd); includes ``baseline``.
    baseline : str
        The label to beat.
    what : str
        What the number is, for the value text.
    lower : bool
        Lower is better (default), else higher.

    Returns
    -------
    Finding

    Examples
    --------
    >>> better_finding({"fixed": 0.9, "anneal gamma": 0.85, "anneal tau": 0.95}, "fixed", "ratio").verdict
    'partly'
    """
    base = values[baseline]
    others = {label: value for label, value in values.items() if label != baseline}
    wins = {label: bool(value < base if lower else value > base) for label, value in others.items()}
    ok = sum(wins.values())
    text = f"{what}: {baseline} {base:.3f}; " + ", ".join(f"{label} {value:.3f}" for label, value in others.items())
    return Finding(text, verdict(ok, len(others)), f"{ok} of {len(others)} beat {baseline} -> "
                   f"{verdict(ok, len(others))}")


def below_finding(values: dict, what: str, threshold: float = 1.0) -> Finding:
    """A verdict that counts the numbers below ``threshold`` (e.g. ratios to Lloyd below 1).

    >>> below_finding({"OH": 0.9, "BN": 1.2}, "held-out ratio").verdict
    'partly'
    """
    ok = int(sum(bool(value < threshold) for value in values.values()))
    text = f"{what}: " + ", ".join(f"{label} {value:.3f}" for label, value in values.items())
    return Finding(text, verdict(ok, len(values)), f"{ok} of {len(values)} below {threshold:g} -> "
                   f"{verdict(ok, len(values))}")


def algorithm_finding(table, step: int = 1, factor: float = 0.5) -> Finding:
    """Chapter 20's verdict: does a fitted Lloyd variant explain the learned step better than Lloyd's step?

    Per model and test at ``step`` (median over members), the best of soft k-means and relaxed Lloyd
    must be closer than ``factor`` times the distance to Lloyd's step.

    >>> table = pd.DataFrame({"model": "bn", "member": 0, "test": "normal", "step": 1,
    ...     "algorithm": ["lloyd", "soft", "relaxed"], "parameter": [1.0, 30.0, 1.2],
    ...     "distance": [0.6, 0.2, 0.5]})
    >>> algorithm_finding(table).verdict
    'reproduced'
    """
    at = table[table.step == step].groupby(["model", "test", "algorithm"]).distance.median().unstack("algorithm")
    best = at[["soft", "relaxed"]].min(axis=1)
    wins = best < factor * at["lloyd"]
    ok = int(wins.sum())
    text = "; ".join(f"{str(model).upper()} on {test}: best variant {b:.2f}, Lloyd {l:.2f}"
                     for (model, test), b, l in zip(at.index, best, at["lloyd"]))
    return Finding(text, verdict(ok, len(wins)), f"{ok} of {len(wins)} (model, family) pairs -> "
                   f"{verdict(ok, len(wins))}")


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


def versus_finding(ratios, label: str, baseline: str, column: str) -> Finding:
    """Per test, does ``label`` have a lower ratio to Lloyd than ``baseline`` (chapters 19, 21)?

    Parameters
    ----------
    ratios : pandas.DataFrame
        :func:`ratio_at` indexed by ``(model, test)``.
    label, baseline : str
        The two models.
    column : str
        The step column, e.g. ``"step1"``.

    Returns
    -------
    Finding

    Examples
    --------
    >>> ratios = pd.DataFrame({"step1": [0.9, 0.8, 1.0, 1.1]}, index=pd.MultiIndex.from_tuples(
    ...     [("plain", "normal"), ("ffn", "normal"), ("plain", "gumbel"), ("ffn", "gumbel")],
    ...     names=["model", "test"]))
    >>> versus_finding(ratios, "ffn", "plain", "step1").verdict
    'partly'
    """
    tests = ratios.loc[baseline].index
    wins, parts = 0, []
    for test in tests:
        mine, theirs = ratios.loc[(label, test), column], ratios.loc[(baseline, test), column]
        wins += bool(mine < theirs)
        parts.append(f"{test} {mine:.3f} vs {theirs:.3f}")
    return Finding(f"{label} vs {baseline} ({column}): " + "; ".join(parts), verdict(wins, len(tests)),
                   f"{wins} of {len(tests)} tests better -> {verdict(wins, len(tests))}")
