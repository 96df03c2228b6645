import math

import pytest
import torch

from kmtrf_core import attention_weights, distance_attention, hardmax_weights, sqdist
from kmtrf_core import attention
from kmtrf_core.attention import attend


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


def _plain_tokens(lead, n, d, m, generator):
    X = torch.rand(*lead, n, d, dtype=torch.float64, generator=generator)
    return X, torch.cat([X, torch.zeros(*lead, n, m - d, dtype=torch.float64)], dim=-1)


def _reference(Zq, Zk, Q, K, V, gamma):
    """Eq. 3 from the full squared distances, through autograd (no shortcut of the library)."""
    q, k, v = Zq @ Q.transpose(-1, -2), Zk @ K.transpose(-1, -2), Zk @ V.transpose(-1, -2)
    D = ((q.unsqueeze(-2) - k.unsqueeze(-3)) ** 2).sum(-1)
    return torch.softmax(-gamma / math.sqrt(Q.shape[-2]) * D, dim=-1) @ v


ROUTES = ["explicit", "fused", "autograd"]


def _route(monkeypatch, route):
    """Send the CPU's finite-gamma attentions to one kernel: the explicit node, the fused kernel, or autograd."""
    def kernel(Zq, Zk, Q, impl):
        if route == "fused" and impl == "direct":
            return "weights"  # impl="direct" never takes the fused kernel
        return {"explicit": "node", "fused": "fused", "autograd": "weights"}[route]

    monkeypatch.setattr(attention, "_kernel", kernel)


@pytest.mark.parametrize("impl", ["direct", "sdpa", "auto"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("n", [20, 150])
@pytest.mark.parametrize("lead, plead", [((3,), ()), ((2, 3), (2, 1)), ((3,), (2, 1))])
def test_narrow_tokens_with_sliced_projections_equal_their_zero_padded_embedding(monkeypatch, impl, route, n,
                                                                                   lead, plead):
    """Points ``X`` with the projections' first d columns give the attention of ``[X, 0]`` (the layer's shortcut)."""
    g = torch.Generator().manual_seed(n)
    d, m = 4, 10
    X, X_bar = _plain_tokens(lead, n, d, m, g)
    C_bar = torch.rand(*lead, 6, m, dtype=torch.float64, generator=g)
    Q, K, V = (torch.rand(*plead, m, m, dtype=torch.float64, generator=g) - 0.5 for _ in range(3))
    narrow = (Q[..., :d], K[..., :d], V[..., :d])
    wide_self, wide_cross = _reference(X_bar, X_bar, Q, K, V, 1.3), _reference(X_bar, C_bar, Q, K, V, 1.3)
    exact = attend(X_bar, X_bar, Q, K, V, math.inf)
    _route(monkeypatch, route)
    # self-attention of narrow tokens (the fused form works on d + 1 columns) and narrow queries on wide keys
    torch.testing.assert_close(attend(X, X, *narrow, 1.3, impl), wide_self, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(attend(X, C_bar, Q[..., :d], K, V, 1.3, impl), wide_cross, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(attend(X_bar, X_bar, Q, K, V, 1.3, impl), wide_self, rtol=1e-12, atol=1e-13)
    # the same hard weights; the values differ by the order of MKL's sums at widths d and m (1 ulp on some CPUs)
    torch.testing.assert_close(attend(X, X, *narrow, math.inf), exact, rtol=0, atol=4e-16)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("impl", ["direct", "sdpa"])
def test_narrow_self_attention_has_the_gradients_of_the_wide_one(monkeypatch, route, impl):
    g = torch.Generator().manual_seed(3)
    X, X_bar = _plain_tokens((2,), 30, 3, 8, g)
    weights = [torch.rand(8, 8, dtype=torch.float64, generator=g).requires_grad_() for _ in range(3)]
    target = torch.rand(2, 30, 8, dtype=torch.float64, generator=g)
    wide = torch.autograd.grad((_reference(X_bar, X_bar, *weights, 0.8) * target).sum(), weights)
    _route(monkeypatch, route)
    for Z, W in ((X, [w[:, :3] for w in weights]), (X_bar, weights)):
        grads = torch.autograd.grad((attend(Z, Z, *W, 0.8, impl) * target).sum(), weights)
        for a, b in zip(grads, wide):
            torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13)


def _kernels(fn):
    with torch.profiler.profile() as prof:
        fn()
    names = {e.name for e in prof.events()}
    return {"explicit": "_ExplicitAttention" in names, "fused": any("scaled_dot_product" in n for n in names)}


NODE, FUSED, WEIGHTS = ({"explicit": e, "fused": f} for e, f in ((True, False), (False, True), (False, False)))


@pytest.mark.parametrize("impl, mid, large", [("direct", NODE, NODE), ("sdpa", FUSED, FUSED), ("auto", NODE, FUSED)])
def test_the_cpu_picks_the_kernel_by_the_size_of_the_weights(monkeypatch, impl, mid, large):
    Zq = torch.rand(2, 40, 7, dtype=torch.float64)
    Zk = torch.rand(2, 60, 7, dtype=torch.float64)  # 2400 weights per task, 4800 in all
    Q, K, V = (torch.rand(7, 7, dtype=torch.float64) for _ in range(3))
    expected = _reference(Zq, Zk, Q, K, V, 1.0)
    assert _kernels(lambda: attend(Zq, Zk, Q, K, V, 1.0, impl)) == mid
    assert _kernels(lambda: attend(Zq, Zk[:, :51], Q, K, V, 1.0, impl)) == WEIGHTS  # 2040 per task: small
    few_keys = torch.rand(2, 300, 7, dtype=torch.float64)  # 300 queries on 15 keys: 4500 per task
    assert _kernels(lambda: attend(few_keys, Zk[:, :15], Q, K, V, 1.0, impl)) == (NODE if impl == "direct" else WEIGHTS)
    assert _kernels(lambda: attend(Zq, Zk, Q, K, V, 1.0, impl, trace={})) == WEIGHTS
    assert _kernels(lambda: attend(Zq, Zk, Q, K, V, math.inf, impl)) == WEIGHTS
    monkeypatch.setattr(attention, "EXPLICIT_MAX_WEIGHTS", 4800)  # the bound is inclusive
    assert _kernels(lambda: attend(Zq, Zk, Q, K, V, 1.0, impl)) == mid
    monkeypatch.setattr(attention, "EXPLICIT_MAX_WEIGHTS", 4799)
    assert _kernels(lambda: attend(Zq, Zk, Q, K, V, 1.0, impl)) == large
    # ensemble projections count into the weights: 3 members over 1 task
    Qe = Q.expand(3, 1, 7, 7)
    assert _kernels(lambda: attend(Zq[:1], Zk[:1], Qe, Qe, Qe, 1.0, impl)) == large
    torch.testing.assert_close(attend(Zq, Zk, Q, K, V, 1.0, impl), expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("gamma", [1.0, 10.0, math.inf])
def test_float32_weights_do_not_depend_on_where_the_data_sit(gamma):
    g = torch.Generator().manual_seed(0)
    q, k = torch.rand(200, 3, generator=g) + 1000, torch.rand(7, 3, generator=g) + 1000
    W, W64 = attention_weights(q, k, gamma), attention_weights(q.double(), k.double(), gamma)
    assert torch.equal(W.argmax(-1), W64.argmax(-1))  # before the shift, about 120 of 200 rows picked another key
    assert (W.double() - W64).abs().max().item() < 1e-3
    near = attention_weights(q - 1000, k - 1000, gamma)  # the same task at the origin
    assert (W - near).abs().max().item() < 1e-3


def test_attention_weights_keep_the_model_path_where_it_is_exact():
    # near the origin the shift changes the weights only by rounding; a batch of keys broadcasts
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(4, 5, 3, generator=g, dtype=torch.float64), torch.randn(1, 6, 3, generator=g, dtype=torch.float64)
    plain = attention._weights(q, k, 2.0)
    torch.testing.assert_close(attention_weights(q, k, 2.0), plain, rtol=1e-12, atol=1e-14)
    assert attention_weights(q, k, 2.0, d_emb=12).shape == (4, 5, 6)


@pytest.mark.parametrize("gamma", [1.0, math.inf])
def test_attention_weights_refuse_leading_dimensions_that_do_not_broadcast(gamma):
    with pytest.raises(ValueError, match="q and k must have broadcastable leading dimensions"):
        attention_weights(torch.rand(2, 4, 3), torch.rand(3, 5, 3), gamma)


def test_distance_attention_reads_impl_in_any_case():
    g = torch.Generator().manual_seed(0)
    Z = torch.rand(2, 5, 3, generator=g, dtype=torch.float64)
    Q, K, V = torch.rand(3, 3, 3, generator=g, dtype=torch.float64)
    for impl in ("direct", "sdpa", "auto"):
        assert torch.equal(distance_attention(Z, Z, Q, K, V, 1.0, impl=impl.upper()),
                           distance_attention(Z, Z, Q, K, V, 1.0, impl=impl))
    with pytest.raises(ValueError, match="impl must be one of"):
        distance_attention(Z, Z, Q, K, V, 1.0, impl="flash")
