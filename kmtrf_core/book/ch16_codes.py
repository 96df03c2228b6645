"""Chapter 16 (``book/16_codes.ipynb``): which token embeddings learn, and does the code order matter?

The layers are the catalog's (group ``openq_codes``, and the scalar-code probe
``openq_probe``); the held-out evaluation is :mod:`kmtrf_core.book.heldout`'s.
This module holds:

* :func:`spectral_gammas`, :func:`code_table`: each embedding's size, its
  layer's ratio to Lloyd and its Lipschitz bound at the trained weights;
* :func:`order_gaps`, :func:`order_sensitivity`: how much a layer's step depends on which code each
  center carries, trained or at its initialization;
* :func:`codes_findings`: the verdicts of ``codes_needed``, ``one_dimension_learns``,
  ``code_order`` and ``gray_order``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ..embeddings import embedding_dim
from ..evaluate import center_trajectory, trajectory_table
from ..lipschitz import lipschitz_bound
from ..lloyd import kmeans_objective, lloyd_step
from ..model import check_model
from ..tasks import sample_tasks  # noqa: F401  (the doctests use it)
from ..training import TrainConfig
from ..validation import check_int
from .claims import Finding
from .heldout import eval_tasks, ratio_at  # noqa: F401  (eval_tasks: the doctests)
from .uncertainty import combine, compare, equivalent, point_value

__all__ = ["GRAY_MARGIN", "ORDER_MARGIN", "code_table", "codes_findings", "order_gaps", "order_sensitivity",
           "spectral_gammas"]


def _fmt(values: dict, fmt: str = "{:.3f}") -> str:
    return ", ".join(f"{str(key).upper()} {fmt.format(value)}" for key, value in values.items())


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


def order_gaps(model, X: torch.Tensor, C: torch.Tensor, permutations: int, seed: int = 0) -> tuple:
    """Per member and task, how far relabelling the initial centers moves a layer's step.

    Relabel the initial centers by a random permutation ``pi``, apply the
    layer, undo the relabelling, and compare with the step from the original
    order: ``|F(X, C[pi])[pi^-1] - F(X, C)|_F / |Lloyd(X, C) - C|_F``, in
    units of Lloyd's step. Lloyd's algorithm and a layer without codes (NA)
    do not depend on the order (0 up to rounding); a layer with codes can.
    The permutations depend on ``seed`` only, so two layers given the same
    ``seed`` see the same relabellings (a paired comparison).

    Parameters
    ----------
    model : ClusterTransformer
        Single layer or ensemble.
    X, C : torch.Tensor
        Held-out tasks ``(B, n, d)`` and ``(B, k, d)``.
    permutations : int
        Relabellings per task.
    seed : int
        Seed of the permutations.

    Returns
    -------
    gaps : numpy.ndarray
        ``(S, B)``: per member, per task, the mean gap over the relabellings.
    spread : numpy.ndarray
        ``(S, B)``: per member, per task, the standard deviation over the
        relabellings of the k-means loss after the step, over its mean.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> X, C = sample_tasks(4, 20, 2, 3, generator=0)
    >>> gaps, spread = order_gaps(ClusterTransformer(2, 3, "bn", ensemble=2), X, C, permutations=3, seed=1)
    >>> gaps.shape, bool((gaps > 0).all())
    ((2, 4), True)
    """
    model = check_model(model)
    check_int(permutations, "permutations")
    generator = torch.Generator().manual_seed(seed)
    B, k = C.shape[0], C.shape[1]
    perms = [torch.argsort(torch.rand(B, k, generator=generator), dim=1) for _ in range(permutations)]
    all_gaps, all_spreads = [], []
    with torch.no_grad():
        step = lloyd_step(X, C)
        scale = (step - C).flatten(1).norm(dim=1).clamp_min(torch.finfo(C.dtype).eps)  # (B,)
        for layer in model.members():
            base = layer(X, C)
            gaps, losses = [], []
            for perm in perms:  # (B, k)
                inverse = torch.argsort(perm, dim=1)
                shuffled = torch.gather(C, 1, perm[..., None].expand_as(C))
                out = layer(X, shuffled)
                back = torch.gather(out, 1, inverse[..., None].expand_as(out))
                gaps.append((back - base).flatten(1).norm(dim=1) / scale)
                losses.append(kmeans_objective(X, back))
            losses = torch.stack(losses)  # (P, B)
            all_gaps.append(torch.stack(gaps).mean(dim=0))
            all_spreads.append(losses.std(dim=0, unbiased=False) / losses.mean(dim=0))
    return (torch.stack(all_gaps).double().cpu().numpy(), torch.stack(all_spreads).double().cpu().numpy())


def order_sensitivity(model, X: torch.Tensor, C: torch.Tensor, permutations: int, seed: int = 0) -> pd.DataFrame:
    """How much a layer's step depends on which code each initial center carries, per member.

    The means over tasks of :func:`order_gaps`: ``order_gap`` (in Lloyd steps)
    and ``loss_spread`` (the spread of the loss over the relabellings, over its mean).

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
        One row per member: ``member``, ``order_gap``, ``loss_spread``.

    Examples
    --------
    >>> from kmtrf_core.model import ClusterTransformer
    >>> X, C = sample_tasks(4, 20, 2, 3, generator=0)
    >>> table = order_sensitivity(ClusterTransformer(2, 3, "na"), X, C, permutations=3)
    >>> bool(table.order_gap.max() < 1e-4)
    True
    """
    gaps, spread = order_gaps(model, X, C, permutations, seed)
    return pd.DataFrame({"member": np.arange(len(gaps)), "order_gap": gaps.mean(axis=1),
                         "loss_spread": spread.mean(axis=1)})


ORDER_MARGIN = 0.01
"""How much more (in Lloyd steps) relabelling must move a trained layer's step than its initialization's
for ``code_order`` to count training as having made the step depend on the order."""


GRAY_MARGIN = 0.02
"""How close (in ratio to Lloyd after one step) Gray-coded BN must be to BN to count as the same quality."""


def codes_findings(summary, table, sensitivity, held_out: dict, probe=None, margin: float = GRAY_MARGIN,
                   order: dict | None = None, order_margin: float = ORDER_MARGIN) -> dict:
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
    held_out : dict
        Scheme -> per-task ratios to Lloyd after one step on the same held-out tasks ``(S, B)``
        (:func:`~kmtrf_core.book.heldout.task_ratios`), for every layer (at least ``"bn"`` and
        ``"gc"``). ``codes_needed`` and ``one_dimension_learns`` are decided on their 95% intervals
        (:func:`~kmtrf_core.book.uncertainty.compare` with 1); Gray order counts as harmless when the
        95% interval of GC - BN lies inside ``[-margin, margin]``
        (:func:`~kmtrf_core.book.uncertainty.equivalent`).
    probe : dict, optional
        ``{"final": ..., "samples": ...}`` of a longer-trained scalar-code layer (the probe): its last
        relative validation loss and its per-task ratios after one step on the same tasks. The
        one-dimension claim is then judged on it, the longest-trained layer, and both are reported.
    margin : float
        The equivalence margin of ``gray_order`` (:data:`GRAY_MARGIN`).
    order : dict, optional
        Scheme -> ``{"trained": gaps, "initial": gaps}``: :func:`order_gaps` ``(S, B)`` of each coded
        layer and of its own initialization (:func:`~kmtrf_core.training.config.initial_layer`), on the
        same tasks and relabellings. ``code_order`` holds when every coded layer's gap is above its
        initialization's by ``order_margin`` on the 95% interval, and NA's is zero; without ``order``
        it is inconclusive (an untrained layer with codes depends on the order too).
    order_margin : float
        :data:`ORDER_MARGIN`.

    Returns
    -------
    dict
        Claim id -> :class:`~kmtrf_core.book.claims.Finding` for ``codes_needed``,
        ``one_dimension_learns``, ``code_order`` and ``gray_order``.

    Examples
    --------
    >>> summary = pd.DataFrame({"final": [0.9, 0.95, 0.94, 0.97, 1.1]}, index=["oh", "bn", "gc", "sc", "na"])
    >>> table = pd.DataFrame({"step1": [0.9, 0.95, 0.94, 0.97, 1.1]}, index=summary.index)
    >>> sens = pd.DataFrame({"scheme": ["oh", "bn", "gc", "sc", "na"], "order_gap": [.2, .3, .3, .4, 1e-7]})
    >>> noise = 0.05 * np.random.default_rng(0).standard_normal((3, 256))
    >>> held_out = {scheme: value + noise for scheme, value in table.step1.items()}
    >>> held_out["gc"] = held_out["bn"] + 0.002
    >>> order = {s: {"trained": 0.3 + noise, "initial": 0.1 + noise} for s in ["oh", "bn", "gc", "sc"]}
    >>> {key: f.verdict for key, f in codes_findings(summary, table, sens, held_out, order=order).items()}
    {'codes_needed': 'reproduced', 'one_dimension_learns': 'reproduced', 'code_order': 'reproduced', 'gray_order': 'reproduced'}
    >>> codes_findings(summary, table, sens, held_out)["code_order"].verdict   # no initializations: no verdict
    'inconclusive'
    """
    final = summary["final"]
    coded = [s for s in final.index if s != "na"]
    below = {s: compare(held_out[s], 1.0) for s in coded if s in held_out}
    checks = {s: c.verdict for s, c in below.items()}
    if "na" in held_out:  # NA holds the claim when its interval is above 1
        na = compare(held_out["na"], 1.0)
        checks["na"] = {"reproduced": "not reproduced", "not reproduced": "reproduced"}.get(na.verdict, na.verdict)
    outcome = combine(checks.values())
    points = {s: point_value(held_out[s]) for s in [*below, *(["na"] if "na" in held_out else [])]}
    needed = Finding(
        f"held-out ratio to one Lloyd step: {_fmt(points)} (95% intervals: "
        + ", ".join(f"{s} {c.text()} from 1" for s, c in below.items())
        + (f", na {na.text()} from 1" if "na" in held_out else "") + "); final relative validation loss "
        f"{_fmt(final.to_dict())}",
        outcome, check="every embedding with codes below one Lloyd step on held-out tasks, NA above, each 95% "
                       "interval over tasks and seeds on its side of 1",
        report=f"per embedding (the claim holds?): {checks} -> {outcome}",
        uncertainty="; ".join(f"{s}: {c.text()}" for s, c in below.items()))
    sc = {"final": final.get("sc", math.nan), "step1": table["step1"].get("sc", math.nan)}
    judged = held_out.get("sc") if probe is None else probe["samples"]
    if judged is None:
        one = Finding(f"no scalar-code layer: final {sc['final']:.3f}", "inconclusive",
                      check="the scalar-code layer below one Lloyd step on held-out tasks (95% interval)")
    else:
        on = compare(judged, 1.0)
        text = f"scalar codes (d + 1), stop rule: final {sc['final']:.3f}, held-out step 1 {sc['step1']:.3f}"
        if probe is not None:
            text += (f"; longer probe: final {probe['final']:.3f}, held-out step 1 {point_value(judged):.3f} "
                     f"({on.text()} from 1)")
        else:
            text += f" ({on.text()} from 1)"
        one = Finding(text, on.verdict,
                      check="the scalar-code layer's ratio to one Lloyd step on held-out tasks below 1, its 95% "
                            "interval entirely below (judged on the probe when there is one)",
                      report=f"scalar codes{'' if probe is None else ' (probe)'}: held-out {on.text()} from 1 -> "
                             f"{on.verdict}", uncertainty=on.text())
    gaps = sensitivity.groupby("scheme").order_gap.median()
    na_gap = gaps.get("na", 0.0)
    if order is None:  # no initializations to compare with: the verdict cannot say what training did
        order_finding = Finding(
            "relabelling the centers moves the trained step by "
            f"{_fmt({s: gaps[s] for s in coded if s in gaps}, '{:.2f}')} Lloyd steps; NA {na_gap:.1e}; "
            "no untrained layers to compare with", "inconclusive",
            check="every coded layer's step depends on the order more after training than at its initialization")
    else:
        moved = {s: compare(order[s]["initial"], order[s]["trained"], order_margin) for s in coded if s in order}
        checks = {s: c.verdict for s, c in moved.items()}
        checks["na"] = "reproduced" if na_gap < 1e-3 else "not reproduced"
        outcome = combine(checks.values())
        order_finding = Finding(
            "relabelling the centers moves the step by "
            + ", ".join(f"{s.upper()} {point_value(order[s]['trained']):.2f} trained, "
                        f"{point_value(order[s]['initial']):.2f} at initialization" for s in moved)
            + f" Lloyd steps; NA {na_gap:.1e}; initialization - trained: "
            + ", ".join(f"{s} {c.text()}" for s, c in moved.items()),
            outcome,
            check=f"every coded layer's relabelling gap above its own initialization's by at least {order_margin:g} "
                  "Lloyd steps (95% interval over tasks and seeds, the same relabellings), and NA's gap zero up "
                  "to rounding (below 1e-3)",
            report=f"per embedding (the claim holds?): {checks} -> {outcome}",
            uncertainty="; ".join(f"{s}: {c.text()}" for s, c in moved.items()))
    same = equivalent(held_out["gc"], held_out["bn"], margin)
    gray = Finding(
        f"after one step on held-out tasks: Gray {point_value(held_out['gc']):.3f}, BN "
        f"{point_value(held_out['bn']):.3f}; GC - BN {same.text()}", same.verdict,
        check=f"the 95% interval of GC - BN (ratio to Lloyd after one step, the same tasks) inside +-{margin:g}",
        report=f"Gray-coded BN and BN the same within {margin:g}: {same.text()} -> {same.verdict}",
        uncertainty=same.text())
    return {"codes_needed": needed, "one_dimension_learns": one, "code_order": order_finding, "gray_order": gray}
