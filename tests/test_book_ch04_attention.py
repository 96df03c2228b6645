"""Chapter 4's leakage of distance attention (kmtrf_core.book.ch04_attention)."""

import math

import pytest
import torch

from kmtrf_core import attention_weights, sample_tasks, sqdist
from kmtrf_core.book.ch04_attention import nearest_key_leakage


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


def test_leakage_of_a_single_query():
    X, C = sample_tasks(1, 30, 2, 4, generator=2, dtype=torch.float64)
    whole = nearest_key_leakage(X, C, 10.0)
    one = nearest_key_leakage(X[:, 5:6], C, 10.0)
    for name in ("off", "bound", "gap", "entropy"):
        torch.testing.assert_close(one[name][0, 0], whole[name][0, 5])
