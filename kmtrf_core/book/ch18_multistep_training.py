"""Chapter 18 (``book/18_multistep_training.ipynb``): training for many steps, and annealing (Appendix A).

The layers are the catalog's (groups ``openq_codes``, ``openq_unroll``,
``openq_anneal_gamma``, ``openq_anneal_tau``); the trajectories with a
temperature per step are the paper room's
(:func:`~kmtrf_core.evaluate.center_trajectory` with ``gammas=``). This module holds:

* :func:`geometric_schedule`, :func:`schedule_trajectories`: a layer with its
  attention temperature scheduled over the inference steps;
* :func:`multistep_training_findings`: the verdicts of ``unroll_training``,
  ``anneal_training`` and ``anneal_inference``.
"""

from __future__ import annotations

import math

import torch

from ..evaluate import center_trajectory
from ..tasks import sample_tasks  # noqa: F401  (the doctests use it)
from ..validation import check_int
from .comparisons import better_finding

__all__ = ["geometric_schedule", "multistep_training_findings", "schedule_trajectories"]


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


def multistep_training_findings(samples: dict, inference: dict, labels, unroll: int, steps: int) -> dict:
    """The three verdicts of chapter 18, from the layers' per-task ratios to Lloyd on held-out tasks.

    Each is :func:`~kmtrf_core.book.comparisons.better_finding`: a variant beats the
    baseline only when the 95% interval of the difference is below minus the margin.

    Parameters
    ----------
    samples : dict
        Label -> per-task ratios ``(T + 1, S, B)`` of each layer
        (:func:`~kmtrf_core.book.heldout.task_ratios`).
    inference : dict
        The same for the one-step layer under each inference schedule
        (:func:`schedule_trajectories`), the fixed temperature first.
    labels : sequence of str
        The layers' labels in order: the one-step layer, the two unrolled
        ones, then the annealed ones.
    unroll : int
        The unrolled training horizon.
    steps : int
        ``T``, the inference horizon.

    Returns
    -------
    dict
        Claim id -> :class:`~kmtrf_core.book.claims.Finding`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> tasks = 1 + 0.1 * rng.standard_normal((11, 2, 64))
    >>> labels = ["one-step", "unrolled, last", "unrolled, sum", "gamma 1->8", "tau 0.1->0.01"]
    >>> samples = dict(zip(labels, [tasks, tasks - 0.1, tasks + 0.1, tasks - 0.1, tasks - 0.1]))
    >>> inference = {"gamma 1->1": tasks, "gamma 1->8": tasks + 0.2}
    >>> out = multistep_training_findings(samples, inference, labels, 3, 10)
    >>> {claim: finding.verdict for claim, finding in out.items()}
    {'unroll_training': 'partly', 'anneal_training': 'reproduced', 'anneal_inference': 'not reproduced'}
    """
    labels = list(labels)
    unrolled = {label: samples[label][unroll] for label in labels[:3]}
    annealed = {label: samples[label][1] for label in [labels[0], *labels[3:]]}
    scheduled = {label: values[steps] for label, values in inference.items()}
    return {
        "unroll_training": better_finding(unrolled, labels[0], f"ratio to Lloyd after {unroll} steps"),
        "anneal_training": better_finding(annealed, labels[0], "ratio after one step"),
        "anneal_inference": better_finding(scheduled, list(scheduled)[0], f"ratio after {steps} steps"),
    }
