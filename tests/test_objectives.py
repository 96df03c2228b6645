import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kmtrf_core import kmeans_objective, sample_tasks
from kmtrf_core.attention import sqdist
from kmtrf_core.objectives import (
    regularized_weights,
    smoothed_kmeans_loss,
    smoothed_point_losses,
    smoothing_constant,
    smoothing_gap,
    sparsemax,
    sparsemax_is_tight,
    sparsemax_threshold,
    training_loss,
    weight_gap,
    weight_gap_bound,
    worst_weight_gap,
)

entmax = pytest.importorskip("entmax")


def test_sparsemax_matches_entmax_reference():
    z = torch.randn(500, 7, dtype=torch.float64) * 3
    torch.testing.assert_close(sparsemax(z), entmax.sparsemax(z, dim=-1), rtol=1e-12, atol=1e-12)
    # a wide range of scales, including near-ties
    z2 = torch.cat([torch.randn(200, 12, dtype=torch.float64) * 1e-3, torch.randn(200, 12, dtype=torch.float64) * 1e3])
    torch.testing.assert_close(sparsemax(z2), entmax.sparsemax(z2, dim=-1), rtol=1e-10, atol=1e-12)


def test_sparsemax_gradient_matches_entmax():
    z = torch.randn(64, 9, dtype=torch.float64, requires_grad=True)
    g = torch.randn(64, 9, dtype=torch.float64)
    (ours,) = torch.autograd.grad((sparsemax(z) * g).sum(), z)
    z2 = z.detach().clone().requires_grad_(True)
    (ref,) = torch.autograd.grad((entmax.sparsemax(z2, dim=-1) * g).sum(), z2)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)


def test_sparsemax_gradcheck():
    # away from support changes the Jacobian is exact; gradcheck in float64
    z = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(sparsemax, (z,), eps=1e-7, atol=1e-6)


def test_smoothed_loss_gradcheck_both_omegas():
    X, C = sample_tasks(2, 12, 2, 3, generator=0, dtype=torch.float64)
    C = C.clone().requires_grad_(True)
    for omega in ("ne", "l2"):
        assert torch.autograd.gradcheck(lambda c: smoothed_kmeans_loss(X, c, omega, 0.05), (C,), eps=1e-7, atol=1e-6)


@given(st.integers(2, 12), st.floats(0.01, 10.0))
@settings(max_examples=50, deadline=None)
def test_sparsemax_is_a_simplex_projection(k, scale):
    z = torch.randn(20, k, dtype=torch.float64) * scale
    p = sparsemax(z)
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(20, dtype=torch.float64))
    kappa, N = sparsemax_threshold(z)
    assert torch.equal((p > 0).sum(-1), N)
    # projection optimality: p minimises |p - z| over the simplex, checked against random simplex points
    q = torch.distributions.Dirichlet(torch.ones(k, dtype=torch.float64)).sample((20, 50))
    assert ((p - z).norm(dim=-1)[:, None] <= (q - z[:, None]).norm(dim=-1) + 1e-12).all()


@given(st.integers(2, 10), st.sampled_from(["ne", "l2"]), st.floats(1e-3, 10.0))
@settings(max_examples=60, deadline=None)
def test_smoothed_loss_upper_bounds_kmeans_objective(k, omega, tau):
    X, C = sample_tasks(4, 30, 3, k, generator=k, dtype=torch.float64)
    C = C + 0.05 * torch.randn_like(C)
    assert (smoothed_kmeans_loss(X, C, omega, tau) >= kmeans_objective(X, C) * (1 - 1e-12)).all()
    assert (smoothing_gap(X, C, omega, tau) >= 0).all()


def _reference_r(X, C):
    """Squared distances ``r_ij = |x_i - c_j|^2`` written out, ``(B, n, k)``."""
    return ((X[:, :, None, :] - C[:, None, :, :]) ** 2).sum(-1)


@pytest.mark.parametrize("tau", [0.02, 0.3])
def test_point_losses_match_an_independent_reference(tau):
    # Eq. 24: <P_Omega(r / tau), r>, with softmin weights softmax(-r / tau) for NE (Eq. 26) and the
    # sparsemax of -r / tau for L2 (Eq. 27-29, entmax's sparsemax); no regularizer term is added
    X, C = sample_tasks(4, 40, 2, 5, generator=5, dtype=torch.float64)
    r = _reference_r(X, C)
    reference = {"ne": (torch.softmax(-r / tau, dim=-1) * r).sum(-1),
                 "l2": (entmax.sparsemax(-r / tau, dim=-1) * r).sum(-1)}
    for omega, expected in reference.items():
        torch.testing.assert_close(smoothed_point_losses(X, C, omega, tau), expected, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(smoothed_kmeans_loss(X, C, omega, tau), expected.sum(-1), rtol=1e-10, atol=1e-12)
        assert (expected > r.amin(-1) + 1e-6).any()  # the weights are not one-hot at this tau: the check has teeth


def test_losses_converge_to_kmeans_as_tau_shrinks():
    X, C = sample_tasks(4, 50, 2, 5, generator=1, dtype=torch.float64)
    exact = kmeans_objective(X, C)
    torch.testing.assert_close(exact, _reference_r(X, C).amin(-1).sum(-1))  # Eq. 21-23: the nearest center
    for omega in ("ne", "l2"):
        gaps = [(smoothed_kmeans_loss(X, C, omega, t) - exact).max().item() for t in (1.0, 0.1, 0.01, 1e-4)]
        assert all(a >= b for a, b in zip(gaps, gaps[1:]))
        assert gaps[-1] < 1e-3


def test_sparsemax_tighter_than_softmin_at_same_tau():
    X, C = sample_tasks(16, 100, 2, 6, generator=2, dtype=torch.float64)
    for tau in (0.01, 0.1, 1.0):
        assert (smoothed_kmeans_loss(X, C, "l2", tau) <= smoothed_kmeans_loss(X, C, "ne", tau) + 1e-12).all()


def test_weight_gap_respects_proposition_H1():
    r = torch.rand(5000, 6, dtype=torch.float64) * torch.logspace(-3, 2, 5000, dtype=torch.float64)[:, None]
    for omega in ("ne", "l2"):
        assert weight_gap(r, omega, 0.1).max().item() <= weight_gap_bound(6, omega) + 1e-12
    # the worst case of L2: all distances equal (uniform weights) approaches sqrt(1 - 1/k)
    flat = torch.zeros(1, 6, dtype=torch.float64)
    assert weight_gap(flat, "l2", 0.1).item() == pytest.approx(math.sqrt(1 - 1 / 6))


@pytest.mark.parametrize("omega", ["l2", "ne"])
def test_worst_weight_gap_finds_the_worst_case(omega):
    # equal distances give uniform weights and the gap sqrt(1 - 1/k), the largest there is for both: with p the
    # weights, the argmin's p_1 >= 1/k is the largest, so |e_1 - p|^2 <= (1 - p_1)^2 + p_1 (1 - p_1) = 1 - p_1.
    # For L2 this is Proposition H.1's bound. The search must come close to it, and return an r with its gap.
    k = 4
    worst = weight_gap(torch.zeros(k, dtype=torch.float64), omega, 0.1).item()
    assert worst == pytest.approx(math.sqrt(1 - 1 / k)) and worst <= weight_gap_bound(k, omega) + 1e-12
    gap, r = worst_weight_gap(k, omega, 0.1, restarts=16, steps=50, generator=torch.Generator().manual_seed(0))
    assert r.shape == (k,) and r.dtype == torch.float64
    assert weight_gap(r, omega, 0.1).item() == pytest.approx(gap, rel=1e-12)
    assert 0.98 * worst <= gap <= worst + 1e-12


def _starts(k, restarts, tau, seed):
    # the starting points worst_weight_gap draws (its docstring: scales 1e-3 tau to 10 tau)
    scales = torch.logspace(-3, 1, restarts, dtype=torch.float64)[:, None] * tau
    return torch.rand(restarts, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scales


def test_worst_weight_gap_without_steps_is_the_best_start():
    starts = _starts(3, 8, 0.1, seed=5)
    gap, r = worst_weight_gap(3, "ne", 0.1, restarts=8, steps=0, generator=torch.Generator().manual_seed(5))
    assert gap == weight_gap(starts, "ne", 0.1).max().item()
    torch.testing.assert_close(r, starts[weight_gap(starts, "ne", 0.1).argmax()], rtol=0, atol=0)


def test_worst_weight_gap_keeps_the_best_iterate_not_the_last():
    # k = 2, L2: a start next to the worst case (equal distances), and Adam's first step (lr 0.05 tau) overshoots
    # it; the search returns the best seen, so more steps never give less
    k, restarts, tau = 2, 16, 0.1
    r = _starts(k, restarts, tau, seed=0).requires_grad_(True)
    opt = torch.optim.Adam([r], lr=0.05 * tau)
    (-weight_gap(r, "l2", tau).sum()).backward()
    opt.step()
    last = weight_gap(r.detach(), "l2", tau).max().item()
    found = [worst_weight_gap(k, "l2", tau, restarts=restarts, steps=steps,
                              generator=torch.Generator().manual_seed(0))[0] for steps in range(6)]
    assert found[1] > last + 0.01  # the last iterate of one step is well below the best start
    assert found == sorted(found)  # non-decreasing in the number of steps


@pytest.mark.parametrize("bad", [dict(restarts=0), dict(steps=-1), dict(steps=2.5), dict(restarts=True)])
def test_worst_weight_gap_refuses_bad_sizes_by_name(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        worst_weight_gap(3, "l2", **bad)


def test_margin_condition_gives_exact_tightness():
    X, C = sample_tasks(8, 64, 2, 4, generator=3, dtype=torch.float64)
    r = sqdist(X, C)
    tight = sparsemax_is_tight(r, 0.05)
    gap = smoothing_gap(X, C, "l2", 0.05)
    assert (gap[tight] <= 1e-15).all()  # zero up to rounding
    assert (gap[~tight] > 0).all()


def test_point_losses_and_constant():
    X, C = sample_tasks(3, 20, 2, 3, generator=4, dtype=torch.float64)
    assert smoothed_point_losses(X, C, "ne", 0.1).shape == (3, 20)
    c = smoothing_constant(X, C, "ne", 0.1)
    assert c.item() == pytest.approx(smoothing_gap(X, C, "ne", 0.1).sum(-1).max().item())


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda X, C: smoothed_kmeans_loss(X, C, "l1", 0.1), "omega"),
        (lambda X, C: smoothed_kmeans_loss(X, C, "l2", 0.0), "tau"),
        (lambda X, C: smoothed_kmeans_loss(X, C, "l2", -1.0), "tau"),
        (lambda X, C: smoothed_kmeans_loss(X, C, "ne", float("inf")), "tau"),
        (lambda X, C: smoothed_kmeans_loss(X.masked_fill(X > 0.5, float("nan")), C), "non-finite"),
        (lambda X, C: sparsemax(torch.tensor([1.0, float("nan")])), "non-finite"),
        (lambda X, C: weight_gap_bound(1, "l2"), "k"),
        (lambda X, C: smoothed_kmeans_loss(X, C[..., :1]), "same d"),
    ],
)
def test_bad_input(call, match):
    X, C = sample_tasks(2, 10, 2, 3, generator=0)
    with pytest.raises(ValueError, match=match):
        call(X, C)


@pytest.mark.parametrize("trim,n,left_out", [(0.29, 100, 29), (0.1, 32, 3), (0.1, 30, 3), (0.5, 4, 2),
                                             (0.1, 9, 0), (0.07, 100, 7), (0.57, 100, 57)])
def test_trim_leaves_out_floor_of_trim_times_n_points(trim, n, left_out):
    # the point losses are 0, 1, 4, ...: the kept ones are the n - left_out smallest
    X = torch.arange(float(n), dtype=torch.float64).view(1, n, 1)
    C = torch.zeros(1, 2, 1, dtype=torch.float64)
    kept = (torch.arange(float(n - left_out), dtype=torch.float64) ** 2).sum()
    assert smoothed_kmeans_loss(X, C, "l2", 0.1, trim=trim).item() == kept.item()
    assert training_loss(X, C, "l2", 0.1, trim=trim).item() == kept.item()


def test_the_book_trim_counts_as_before_at_every_size():
    # training's trimmed loss must not change: for the profiles' trim the floor is int(trim * n)
    from kmtrf_core.book.profiles import PROFILES  # the profiles: only this test reads them
    trims = {sizes["openq"].trim for sizes in PROFILES.values()}
    assert trims == {0.1}
    for trim in trims:
        assert all(math.floor(trim * n + 1e-9) == int(trim * n) for n in range(1, 200_001))
