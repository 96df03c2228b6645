"""Chapter 2's readings of Lloyd's iterations (kmtrf_core.book.ch02_kmeans_lloyd)."""

import numpy as np
import pytest
import torch

from kmtrf_core import lloyd, lloyd_loss_trajectory, lloyd_trajectory, sample_tasks, sqdist
from kmtrf_core.book.ch02_kmeans_lloyd import (
    assignment_settling,
    contrast_text,
    family_contrasts,
    spread_statistics,
)
from kmtrf_core.book.uncertainty import bootstrap_interval


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


def test_family_contrasts_reads_lloyd_trajectories():
    objectives = {family: lloyd_loss_trajectory(*sample_tasks(48, 64, 2, 4, family=family, generator=i,
                                                              dtype=torch.float64), steps=5)
                  for i, family in enumerate(("normal", "cauchy", "laplace"))}
    table = family_contrasts(objectives, [1, 5])
    assert table.index.tolist() == [(1, "normal"), (1, "laplace"), (5, "normal"), (5, "laplace")]
    for (step, family), row in table.iterrows():
        share = {f: (o[step] / o[0]).numpy() for f, o in objectives.items()}
        assert row.difference == pytest.approx(share["cauchy"].mean() - share[family].mean(), rel=1e-12)
        assert row.low <= row.difference <= row.high
        # unpaired: each side's own interval, the difference's ends from the opposite ends
        _, c_low, c_high = bootstrap_interval(share["cauchy"])
        _, o_low, o_high = bootstrap_interval(share[family])
        assert (row.low, row.high) == pytest.approx((c_low - o_high, c_high - o_low))
        assert row.verdict == ("higher" if row.low > 0 else "lower" if row.high < 0 else "inconclusive")
    lines = contrast_text(table).splitlines()
    assert len(lines) == 2 and lines[0].startswith("after 1 step: cauchy keeps more")
    assert lines[1].startswith("after 5 steps:")


def test_family_contrasts_refuses_bad_input():
    good = np.ones((3, 4)) * np.array([[1.0], [0.5], [0.4]])
    with pytest.raises(ValueError, match="no 'cauchy' family"):
        family_contrasts({"normal": good}, [1])
    with pytest.raises(ValueError, match="at least one family besides"):
        family_contrasts({"cauchy": good}, [1])
    with pytest.raises(ValueError, match="beyond the trajectories' 2 steps"):
        family_contrasts({"cauchy": good, "normal": good}, [3])
    with pytest.raises(ValueError, match=r"objectives\['normal'\] must be \(T \+ 1, B\)"):
        family_contrasts({"cauchy": good, "normal": good[:, :1]}, [1])
    bad = good.copy()
    bad[0, 1] = 0.0
    with pytest.raises(ValueError, match="positive starting objectives"):
        family_contrasts({"cauchy": good, "normal": bad}, [1])
    with pytest.raises(ValueError, match="steps"):
        family_contrasts({"cauchy": good, "normal": good}, [0])
