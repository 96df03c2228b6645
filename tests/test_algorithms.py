"""Reference k-means steps and the distance between one step of two algorithms (kmtrf_core.algorithms)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from kmtrf_core.algorithms import (
    REFERENCES,
    algorithm_distance,
    compare_algorithms,
    fit_reference,
    minibatch_kmeans_step,
    relaxed_lloyd_step,
    soft_kmeans_step,
)
from kmtrf_core.lloyd import lloyd, lloyd_step
from kmtrf_core.tasks import sample_tasks


def tasks(B=6, n=40, d=2, k=3, seed=0):
    return sample_tasks(B, n, d, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def separated(B=4, per=10, k=3, seed=0):
    """k tight blobs far apart; the initial centers are one point of each blob."""
    g = torch.Generator().manual_seed(seed)
    locs = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]], dtype=torch.float64)[:k]
    X = (locs.repeat_interleave(per, dim=0) + 0.1 * torch.rand(B, k * per, 2, generator=g, dtype=torch.float64))
    C = X[:, ::per].clone()
    return X, C


# --- soft k-means ---------------------------------------------------------------------------------


def test_soft_at_infinite_beta_is_lloyd_exactly():
    X, C = tasks()
    assert torch.equal(soft_kmeans_step(X, C, math.inf), lloyd_step(X, C, empty="keep"))


def test_soft_at_large_beta_is_close_to_lloyd_on_separated_data():
    X, C = separated()
    torch.testing.assert_close(soft_kmeans_step(X, C, 1e6), lloyd_step(X, C), rtol=0, atol=1e-12)


def test_soft_beyond_the_dtype_range_is_lloyd_not_nan():
    X, C = tasks()
    X, C = X.float(), C.float()
    out = soft_kmeans_step(X, C, 1e300)  # inf in float32
    assert bool(torch.isfinite(out).all())
    assert torch.equal(out, lloyd_step(X, C))


def test_soft_at_small_beta_puts_every_center_at_the_mean():
    X, C = tasks()
    out = soft_kmeans_step(X, C, 1e-12)
    torch.testing.assert_close(out, X.mean(dim=1, keepdim=True).expand_as(C), rtol=0, atol=1e-9)


def _soft_loop(points, centers, beta):
    """Soft k-means for one task, written out with Python floats."""
    new = []
    dist = [[sum((a - b) ** 2 for a, b in zip(x, c)) for c in centers] for x in points]
    weights = []
    for row in dist:
        e = [math.exp(-beta * (v - min(row))) for v in row]
        weights.append([v / sum(e) for v in e])
    for j, c in enumerate(centers):
        mass = sum(w[j] for w in weights)
        new.append([sum(w[j] * x[l] for w, x in zip(weights, points)) / mass for l in range(len(c))])
    return new


@pytest.mark.parametrize("beta", [0.5, 5.0, 50.0])
def test_soft_matches_a_plain_loop(beta):
    X, C = tasks(B=2, n=15, d=3, k=4)
    expected = torch.tensor(_soft_loop(X[1].tolist(), C[1].tolist(), beta), dtype=torch.float64)
    torch.testing.assert_close(soft_kmeans_step(X, C, beta)[1], expected, rtol=1e-10, atol=1e-12)


def test_soft_center_with_underflowed_weight_stays():
    X = torch.tensor([[[0.0], [1.0], [2.0]]], dtype=torch.float64)
    C = torch.tensor([[[1.0], [1e3]]], dtype=torch.float64)
    out = soft_kmeans_step(X, C, 10.0)  # exp(-10 * ~1e6) underflows to 0
    assert out[0, 1, 0].item() == 1e3
    assert out[0, 0, 0].item() == pytest.approx(1.0)


# --- relaxed Lloyd --------------------------------------------------------------------------------


def test_relaxed_at_zero_and_one():
    X, C = tasks()
    assert torch.equal(relaxed_lloyd_step(X, C, 0.0), C)
    assert torch.equal(relaxed_lloyd_step(X, C, 1.0), lloyd_step(X, C))
    L = lloyd_step(X, C)
    torch.testing.assert_close(relaxed_lloyd_step(X, C, 1.5), C + 1.5 * (L - C))
    torch.testing.assert_close(relaxed_lloyd_step(X, C, -0.5), C - 0.5 * (L - C))


# --- mini-batch k-means ---------------------------------------------------------------------------


def test_minibatch_with_every_point_is_lloyd_exactly():
    X, C = tasks()
    out = minibatch_kmeans_step(X, C, X.shape[1], generator=torch.Generator().manual_seed(3))
    assert torch.equal(out, lloyd_step(X, C))


def test_minibatch_is_reproducible():
    X, C = tasks()
    a = minibatch_kmeans_step(X, C, 10, generator=torch.Generator().manual_seed(1))
    b = minibatch_kmeans_step(X, C, 10, generator=torch.Generator().manual_seed(1))
    c = minibatch_kmeans_step(X, C, 10, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(minibatch_kmeans_step(X, C, 10, generator=1), a)  # an int is a seed


def _drawn(B, n, batch, seed):
    """The points minibatch_kmeans_step samples: the first ``batch`` of a random permutation."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, n, generator=g, dtype=torch.float32).argsort(dim=1)[:, :batch]


def test_minibatch_uses_only_the_sampled_points():
    X, C = tasks(B=3, n=20, k=3)
    batch, seed = 7, 4
    out = minibatch_kmeans_step(X, C, batch, generator=torch.Generator().manual_seed(seed))
    drawn = _drawn(3, 20, batch, seed)
    for b in range(3):  # by hand: the sampled points' nearest centers, then their means
        pts = X[b, drawn[b]]
        nearest = torch.cdist(pts, C[b]).argmin(dim=1)
        for j in range(3):
            mine = pts[nearest == j]
            expected = mine.mean(dim=0) if len(mine) else C[b, j]
            torch.testing.assert_close(out[b, j], expected, rtol=0, atol=1e-12)
    # moving the points that were not drawn changes nothing
    far = torch.ones(3, 20, dtype=torch.bool)
    far[torch.arange(3).unsqueeze(1), drawn] = False
    X2 = X.clone()
    X2[far] += 100.0
    out2 = minibatch_kmeans_step(X2, C, batch, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(out2, out, rtol=0, atol=1e-12)


def test_minibatch_smaller_than_k():
    X, C = tasks(B=4, n=20, k=3)
    out = minibatch_kmeans_step(X, C, 1, generator=0)  # one point per task, fewer than k = 3
    drawn = X[torch.arange(4), _drawn(4, 20, 1, 0)[:, 0]]  # (B, d)
    nearest = torch.cdist(drawn.unsqueeze(1), C).squeeze(1).argmin(dim=1)  # (B,)
    for b in range(4):  # the drawn point's nearest center moves onto it; the others stay
        j = int(nearest[b])
        torch.testing.assert_close(out[b, j], drawn[b], rtol=0, atol=1e-14)
        others = [i for i in range(3) if i != j]
        assert torch.equal(out[b, others], C[b, others])


# --- the distance ---------------------------------------------------------------------------------


def test_algorithm_distance_units():
    X, C = tasks()
    L = lloyd_step(X, C)
    d_same = algorithm_distance(X, C, L, L)
    assert d_same.shape == (X.shape[0],) and d_same.dtype == X.dtype
    assert torch.equal(d_same, torch.zeros_like(d_same))
    torch.testing.assert_close(algorithm_distance(X, C, C, L), torch.ones(X.shape[0], dtype=X.dtype))
    torch.testing.assert_close(algorithm_distance(X, C, relaxed_lloyd_step(X, C, 0.25), L),
                               torch.full((X.shape[0],), 0.75, dtype=X.dtype))


def test_algorithm_distance_is_finite_where_lloyd_does_not_move():
    X = torch.tensor([[[0.0], [1.0], [9.0], [10.0]]], dtype=torch.float64)
    C = torch.tensor([[[0.5], [9.5]]], dtype=torch.float64)
    L = lloyd_step(X, C)
    assert torch.equal(L, C)
    assert algorithm_distance(X, C, C, L).item() == 0.0
    far = algorithm_distance(X, C, C + 1e-3, L)
    assert bool(torch.isfinite(far).all()) and far.item() > 1e6
    # a random task run to its fixed point, next to one that still moves
    Xr, Cr = tasks(B=2)
    Cf = lloyd(Xr, Cr, steps=100)
    assert torch.equal(lloyd_step(Xr, Cf), Cf)
    Cmix = torch.stack([Cf[0], Cr[1]])
    d = algorithm_distance(Xr, Cmix, soft_kmeans_step(Xr, Cmix, 30.0), lloyd_step(Xr, Cmix))
    assert bool(torch.isfinite(d).all())


# --- fitting a reference --------------------------------------------------------------------------


def test_fit_reference_recovers_beta_and_alpha():
    X, C = tasks()
    betas = np.geomspace(0.1, 1000.0, 13)
    fit = fit_reference(X, C, soft_kmeans_step(X, C, float(betas[6])), "soft", betas)
    assert fit.parameter == float(betas[6]) and fit.distance == 0.0
    assert isinstance(fit.curve, pd.DataFrame) and fit.curve.columns.tolist() == ["parameter", "distance"]
    assert len(fit.curve) == 13 and fit.curve.distance.min() == fit.distance
    alphas = [-0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
    best, distance, curve = fit_reference(X, C, relaxed_lloyd_step(X, C, 1.25), "relaxed", alphas)
    assert best == 1.25 and distance == 0.0
    assert curve.parameter.tolist() == alphas


def test_fit_reference_between_grid_values_picks_a_neighbour():
    X, C = tasks()
    grid = torch.tensor([1.0, 3.0, 10.0, 30.0, 100.0], dtype=torch.float64)
    fit = fit_reference(X, C, soft_kmeans_step(X, C, 17.0), "SOFT", grid)
    assert fit.parameter in (10.0, 30.0) and fit.distance > 0
    fit = fit_reference(X, C, relaxed_lloyd_step(X, C, 0.6), "relaxed", (0.0, 0.5, 1.0))
    assert fit.parameter == 0.5
    assert fit.distance == pytest.approx(0.1)


# --- following a step -----------------------------------------------------------------------------


def test_compare_algorithms_on_lloyd_itself():
    X, C = tasks()
    table = compare_algorithms(lloyd_step, X, C, 3, betas=[1.0, 10.0], alphas=[0.5, 1.0], batch=10, generator=0)
    assert table.columns.tolist() == ["step", "algorithm", "parameter", "distance", "distance_median"]
    assert len(table) == 3 * 5
    assert table.step.tolist() == [t for t in (1, 2, 3) for _ in REFERENCES]
    assert table.algorithm.tolist() == list(REFERENCES) * 3
    lloyd_rows = table[table.algorithm == "lloyd"]
    assert (lloyd_rows.distance == 0).all() and (lloyd_rows.distance_median == 0).all()
    assert (lloyd_rows.parameter == 1.0).all()
    relaxed = table[table.algorithm == "relaxed"]
    assert (relaxed.parameter == 1.0).all() and (relaxed.distance == 0).all()
    assert (table[table.algorithm == "minibatch"].parameter == 10.0).all()
    assert bool(np.isfinite(table[["distance", "distance_median"]].to_numpy()).all())
    # reproducible: the mini-batches come from the generator
    again = compare_algorithms(lloyd_step, X, C, 3, betas=[1.0, 10.0], alphas=[0.5, 1.0], batch=10, generator=0)
    pd.testing.assert_frame_equal(table, again)


def test_compare_algorithms_follows_the_steps_own_trajectory():
    X, C = tasks()
    calls = []

    def soft(X, C):
        calls.append(C.clone())
        return soft_kmeans_step(X, C, 10.0)

    table = compare_algorithms(soft, X, C, 2, betas=[1.0, 10.0, 100.0], alphas=[1.0], batch=5)
    assert torch.equal(calls[0], C) and torch.equal(calls[1], soft_kmeans_step(X, C, 10.0))
    rows = table[table.algorithm == "soft"]
    assert (rows.parameter == 10.0).all() and (rows.distance == 0).all()
    stay = table[(table.algorithm == "stay") & (table.step == 1)].distance.item()
    step_length = (soft_kmeans_step(X, C, 10.0) - C).flatten(1).norm(dim=1)
    lloyd_length = (lloyd_step(X, C) - C).flatten(1).norm(dim=1)
    assert stay == pytest.approx(float(step_length.sum() / lloyd_length.sum()))


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.0, -1.0, float("nan"), -math.inf, "1"])
def test_bad_beta(beta):
    X, C = tasks()
    with pytest.raises(ValueError, match="beta"):
        soft_kmeans_step(X, C, beta)


@pytest.mark.parametrize("alpha", [float("nan"), math.inf, None])
def test_bad_alpha(alpha):
    X, C = tasks()
    with pytest.raises(ValueError, match="alpha"):
        relaxed_lloyd_step(X, C, alpha)


@pytest.mark.parametrize("batch", [0, 41, 2.0, True])
def test_bad_batch(batch):
    X, C = tasks()
    with pytest.raises(ValueError, match="batch"):
        minibatch_kmeans_step(X, C, batch)
    with pytest.raises(ValueError, match="batch"):
        compare_algorithms(lloyd_step, X, C, 1, betas=[1.0], alphas=[1.0], batch=batch)


def test_bad_distance_inputs():
    X, C = tasks()
    L = lloyd_step(X, C)
    with pytest.raises(ValueError, match="new"):
        algorithm_distance(X, C, L[:, :2], L)
    with pytest.raises(ValueError, match="reference"):
        algorithm_distance(X, C, L, L.float())
    with pytest.raises(ValueError, match="new"):
        algorithm_distance(X, C, torch.full_like(L, float("nan")), L)


@pytest.mark.parametrize("algorithm, grid, match", [
    ("kmeans++", [1.0], "algorithm"),
    ("soft", [], "grid"),
    ("relaxed", np.array([]), "grid"),
    ("soft", [1.0, 0.0], "grid"),
    ("soft", [1.0, math.inf], "grid"),
    ("relaxed", [float("nan")], "grid"),
    ("soft", 1.0, "grid"),
    ("soft", torch.ones(2, 2), "grid"),
])
def test_bad_fit_reference(algorithm, grid, match):
    X, C = tasks()
    with pytest.raises(ValueError, match=match):
        fit_reference(X, C, lloyd_step(X, C), algorithm, grid)


def test_bad_compare_inputs():
    X, C = tasks()
    opts = dict(betas=[1.0], alphas=[1.0], batch=5)
    with pytest.raises(ValueError, match="steps"):
        compare_algorithms(lloyd_step, X, C, 0, **opts)
    with pytest.raises(ValueError, match="step"):
        compare_algorithms("lloyd", X, C, 1, **opts)
    with pytest.raises(ValueError, match="step"):
        compare_algorithms(lambda X, C: C[:, :2], X, C, 1, **opts)
    with pytest.raises(ValueError, match="step"):
        compare_algorithms(lambda X, C: torch.full_like(C, float("nan")), X, C, 1, **opts)
    with pytest.raises(ValueError, match="grid"):
        compare_algorithms(lloyd_step, X, C, 1, betas=[], alphas=[1.0], batch=5)


def test_compare_algorithms_keeps_per_task_norms_that_add_up_to_the_pooled_distance():
    from kmtrf_core.algorithms import compare_algorithms, lloyd_step

    X, C = sample_tasks(5, 30, 2, 3, generator=4, dtype=torch.float64)
    table = compare_algorithms(lambda X, C: 0.5 * (C + lloyd_step(X, C)), X, C, 1, betas=[1.0, 10.0],
                               alphas=[0.5, 1.0], batch=10, per_task=True)
    stay = table.set_index("algorithm").loc["stay"]
    lloyd = table.set_index("algorithm").loc["lloyd"]
    assert stay.task_norms.shape == (5,)
    # half of Lloyd's move: as far from Lloyd as from staying put, task by task
    assert np.allclose(stay.task_norms, lloyd.task_norms) and stay.distance == pytest.approx(0.5)
    assert "task_norms" not in compare_algorithms(lloyd_step, X, C, 1, betas=[1.0], alphas=[1.0], batch=10)
