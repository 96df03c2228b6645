import math

import pytest
import torch

from kmtrf_core import attention_weights, distance_attention, hardmax_weights, sqdist


def test_sqdist_matches_direct_difference():
    A = torch.randn(3, 7, 5, dtype=torch.float64)
    B = torch.randn(3, 4, 5, dtype=torch.float64)
    direct = ((A[:, :, None, :] - B[:, None, :, :]) ** 2).sum(-1)
    torch.testing.assert_close(sqdist(A, B), direct, rtol=1e-12, atol=1e-12)
    assert (sqdist(A, A) >= 0).all()


def test_finite_gamma_matches_softmax_of_negative_distances():
    Zq = torch.randn(2, 6, 5, dtype=torch.float64)
    Zk = torch.randn(2, 9, 5, dtype=torch.float64)
    Q, K, V = (torch.randn(5, 5, dtype=torch.float64) for _ in range(3))
    gamma = 0.7
    q, k, v = Zq @ Q.T, Zk @ K.T, Zk @ V.T
    D = ((q[:, :, None] - k[:, None]) ** 2).sum(-1)
    expected = torch.softmax(-gamma / math.sqrt(5) * D, dim=-1) @ v
    for impl in ("direct", "sdpa"):
        out = distance_attention(Zq, Zk, Q, K, V, gamma, impl=impl)
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)


def test_sdpa_path_equals_direct_in_float32():
    Zq = torch.rand(4, 64, 12)
    Zk = torch.rand(4, 50, 12)
    Q, K, V = (torch.rand(12, 12) / 3 for _ in range(3))
    a = distance_attention(Zq, Zk, Q, K, V, 1.0, impl="direct")
    b = distance_attention(Zq, Zk, Q, K, V, 1.0, impl="sdpa")
    assert ((a - b).norm() / a.norm()).item() < 1e-5


def test_hardmax_is_the_limit_of_softmax():
    q = torch.randn(1, 5, 3, dtype=torch.float64)
    k = torch.randn(1, 8, 3, dtype=torch.float64)
    hard = attention_weights(q, k, math.inf)
    assert torch.equal(hard.sum(-1), torch.ones(1, 5, dtype=torch.float64))
    errors = [(attention_weights(q, k, g) - hard).abs().max().item() for g in (1.0, 10.0, 100.0, 1e4)]
    assert all(a >= b for a, b in zip(errors, errors[1:]))
    assert errors[-1] < 1e-6


def test_averaging_hardmax_splits_exact_ties():
    q = torch.tensor([[[0.5, 0.0]]], dtype=torch.float64)
    k = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]]], dtype=torch.float64)
    W = attention_weights(q, k, math.inf)
    assert W.tolist() == [[[0.5, 0.5, 0.0]]]
    # ...and softmax agrees in the limit
    torch.testing.assert_close(attention_weights(q, k, 1e6), W)
    assert torch.equal(hardmax_weights(torch.tensor([[3.0, 3.0, 3.0]])), torch.full((1, 3), 1 / 3))


def test_attention_rejects_bad_input():
    Z = torch.rand(1, 3, 2)
    I = torch.eye(2)
    with pytest.raises(ValueError, match="gamma"):
        distance_attention(Z, Z, I, I, I, 0.0)
    with pytest.raises(ValueError, match="gamma"):
        distance_attention(Z, Z, I, I, I, -1.0)
    with pytest.raises(ValueError, match="Zk"):
        distance_attention(Z, torch.rand(1, 3, 3), I, I, I, 1.0)
    with pytest.raises(ValueError, match="Zq"):
        distance_attention(torch.rand(3, 2), Z, I, I, I, 1.0)
    with pytest.raises(ValueError, match="impl"):
        distance_attention(Z, Z, I, I, I, 1.0, impl="flash")
    with pytest.raises(ValueError, match="non-finite"):
        distance_attention(torch.full((1, 3, 2), float("nan")), Z, I, I, I, 1.0)
