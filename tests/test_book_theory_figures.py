"""The measurements behind the theory chapters' figures (kmtrf_core.book.theory_figures)."""

import math

import pytest
import torch

from kmtrf_core import ClusterTransformer, attention_weights, lloyd, lloyd_trajectory, sample_tasks, sqdist
from kmtrf_core.book.theory_figures import (
    assignment_settling,
    layerwise_lloyd_errors,
    nearest_key_leakage,
    relative_center_error,
    spread_statistics,
)


def test_settling_matches_a_loop_over_the_trajectory():
    X, C = sample_tasks(12, 80, 2, 5, generator=3, dtype=torch.float64)
    A = lloyd_trajectory(X, C, steps=8).assignments
    settled_at, still_changing = assignment_settling(A)
    for b in range(X.shape[0]):
        last_change = max([t + 1 for t in range(1, 8) if not torch.equal(A[t, b], A[t - 1, b])], default=1)
        assert settled_at[b].item() == last_change
        assert still_changing[b].item() == (not torch.equal(A[-1, b], A[-2, b]))
        # from the settling iteration on, the assignment is the final one
        assert all(torch.equal(A[t - 1, b], A[-1, b]) for t in range(last_change, 9))


def test_settling_of_a_single_iteration_and_bad_input():
    A = torch.zeros(1, 3, 5, dtype=torch.int64)
    settled_at, still_changing = assignment_settling(A)
    assert settled_at.tolist() == [1, 1, 1] and still_changing.tolist() == [False] * 3
    with pytest.raises(ValueError):
        assignment_settling(A.double())
    with pytest.raises(ValueError):
        assignment_settling(A[0])


def test_spread_statistics_against_per_task_formulas():
    X, C = sample_tasks(4, 200, 2, 4, family="cauchy", generator=0, dtype=torch.float64)
    final = lloyd(X, C, steps=5)
    stats = spread_statistics(X, C, final, box=0.1)
    for b in range(X.shape[0]):
        lo = torch.quantile(X[b], 0.05, dim=0)
        hi = torch.quantile(X[b], 0.95, dim=0)
        assert stats["width90"][b].item() == pytest.approx((hi - lo).mean().item(), rel=1e-12)
        med = X[b].median(dim=0).values
        inside = ((X[b] - med).abs() <= 0.05).all(dim=1).double().mean()
        assert stats["in_box"][b].item() == pytest.approx(inside.item())
        terms = ((X[b, :, None] - C[b, None]) ** 2).sum(-1).amin(-1)
        share = terms.sort(descending=True).values[:2].sum() / terms.sum()  # top = 200 // 100
        assert stats["top_share"][b].item() == pytest.approx(share.item(), rel=1e-12)
        out = sum(bool(((c < lo) | (c > hi)).any()) for c in final[b])
        assert stats["outside"][b].item() == out
    assert set(stats) == {"width90", "in_box", "top_share", "outside"}
    assert all(v.shape == (4,) for v in stats.values())


def test_spread_statistics_top_defaults_to_one_percent_and_at_least_one():
    X, C = sample_tasks(2, 50, 2, 3, generator=1, dtype=torch.float64)
    stats = spread_statistics(X, C, C)
    per_point = sqdist(X, C).amin(-1)
    torch.testing.assert_close(stats["top_share"], per_point.amax(1) / per_point.sum(1))


def test_leakage_matches_the_weights_and_stays_under_the_bound():
    X, C = sample_tasks(3, 60, 2, 4, generator=1, dtype=torch.float64)
    nearest = sqdist(X, C).argmin(-1)
    for gamma in (0.1, 1.0, 10.0, 100.0, 1000.0):
        leak = nearest_key_leakage(X, C, gamma)
        W = attention_weights(X, C, gamma)
        torch.testing.assert_close(leak["off"], 1 - W.gather(-1, nearest[..., None]).squeeze(-1))
        assert bool((leak["off"] <= leak["bound"] + 1e-15).all())
        assert bool((leak["gap"] >= 0).all())
        assert bool((leak["entropy"] <= math.log(4) + 1e-12).all())
    sharp = nearest_key_leakage(X, C, 1e6)
    blunt = nearest_key_leakage(X, C, 1e-3)
    assert sharp["entropy"].median() < 1e-6 < blunt["entropy"].median()


def test_leakage_needs_two_centers_and_a_finite_gamma():
    X = torch.rand(1, 5, 2, dtype=torch.float64)
    with pytest.raises(ValueError):
        nearest_key_leakage(X, X[:, :1].clone(), 1.0)
    with pytest.raises(ValueError):
        nearest_key_leakage(X, X[:, :2].clone(), math.inf)


def test_relative_center_error():
    ref = torch.rand(3, 4, 2, dtype=torch.float64) + 0.5
    assert relative_center_error(ref, ref).tolist() == [0.0, 0.0, 0.0]
    shifted = ref.clone()
    shifted[1, 2, 0] += 0.25
    err = relative_center_error(shifted, ref)
    assert err[1].item() == pytest.approx(0.25 / ref[1].abs().max().item())
    assert err[0].item() == 0.0 and err[2].item() == 0.0
    with pytest.raises(ValueError):
        relative_center_error(ref, ref[:, :3])


@pytest.mark.parametrize("scheme", ["oh", "bn", "sc"])
def test_layerwise_errors_are_exact_and_end_at_the_model_output(scheme):
    X, C = sample_tasks(6, 64, 3, 5, generator=7, dtype=torch.float64)
    errors = layerwise_lloyd_errors(X, C, scheme, steps=4)
    assert errors.shape == (4, 6)
    assert bool((errors <= 1e-12).all())
    model = ClusterTransformer.from_lloyd(3, 5, scheme)
    with torch.no_grad():
        last = relative_center_error(model(X, C, steps=4), lloyd(X, C, steps=4))
    torch.testing.assert_close(errors[-1], last, rtol=0, atol=1e-15)


def test_layerwise_errors_grow_at_finite_precision_only_outside_the_theorem():
    # a tie: the point at 0.5 is equidistant from both centers, so the layer is not Lloyd
    X = torch.tensor([[[0.0], [0.25], [0.5], [0.75], [1.0]]], dtype=torch.float64)
    C = torch.tensor([[[0.25], [0.75]]], dtype=torch.float64)
    assert layerwise_lloyd_errors(X, C, "bn", steps=1).item() > 0.1


def test_leakage_of_a_single_query():
    X, C = sample_tasks(1, 30, 2, 4, generator=2, dtype=torch.float64)
    whole = nearest_key_leakage(X, C, 10.0)
    one = nearest_key_leakage(X[:, 5:6], C, 10.0)
    for name in ("off", "bound", "gap", "entropy"):
        torch.testing.assert_close(one[name][0, 0], whole[name][0, 5])
