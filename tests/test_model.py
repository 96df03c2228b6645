import math

import pytest
import torch

from kmtrf_core import ClusterTransformer, distance_attention, embed, parameter_count, sample_tasks


def test_shapes_and_parameter_count():
    for scheme in ("oh", "bn", "sc", "na"):
        model = ClusterTransformer(3, 6, scheme, generator=torch.Generator().manual_seed(0))
        X, C = sample_tasks(2, 20, 3, 6, generator=0)
        out, Xb, Cb = model(X, C, steps=2, return_embeddings=True)
        assert out.shape == (2, 6, 3)
        assert Xb.shape == (2, 20, model.d_emb) and Cb.shape == (2, 6, model.d_emb)
        assert model.num_parameters() == parameter_count(3, 6, scheme)
        assert torch.equal(out, Cb[..., :3])


def test_layer_is_equation_4():
    model = ClusterTransformer(2, 4, "bn", gamma=0.8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    X, C = sample_tasks(3, 15, 2, 4, generator=1, dtype=torch.float64)
    Xb, Cb = embed(X, C, "bn")

    def A(mu, Zq, Zk):
        return distance_attention(Zq, Zk, model.Q[mu], model.K[mu], model.V[mu], 0.8)

    X1 = Xb + A(0, Xb, Cb) + A(1, Xb, Xb)
    C1 = Cb + A(2, Cb, X1) + A(3, Cb, Cb)  # centers attend to the *updated* points
    with torch.no_grad():
        torch.testing.assert_close(model(X, C), C1[..., :2])
        Xn, Cn = model.layer(Xb, Cb)
    torch.testing.assert_close(Xn, X1)


def test_weights_shared_across_layers():
    model = ClusterTransformer(2, 3, "oh", dtype=torch.float64)
    X, C = sample_tasks(2, 12, 2, 3, generator=2, dtype=torch.float64)
    with torch.no_grad():
        Xb, Cb = model.embed(X, C)
        for _ in range(3):
            Xb, Cb = model.layer(Xb, Cb)
        torch.testing.assert_close(model(X, C, steps=3), Cb[..., :2])


def test_seeded_init_is_reproducible_and_gradients_flow():
    a = ClusterTransformer(4, 5, "bn", generator=torch.Generator().manual_seed(3))
    b = ClusterTransformer(4, 5, "bn", generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    X, C = sample_tasks(2, 30, 4, 5, generator=3)
    a(X, C).square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for p in a.parameters())


def test_sdpa_model_equals_direct_model():
    gen = torch.Generator().manual_seed(4)
    direct = ClusterTransformer(8, 10, "oh", generator=gen)
    X, C = sample_tasks(4, 128, 8, 10, generator=4)
    a = direct(X, C)
    for impl in ("sdpa", "auto"):
        other = ClusterTransformer(8, 10, "oh", impl=impl)
        other.load_state_dict(direct.state_dict())
        b = other(X, C)
        assert ((a - b).norm() / a.norm()).item() < 1e-5


def test_custom_codes():
    codes = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    model = ClusterTransformer(2, 3, codes=codes)
    assert model.scheme == "custom" and model.d_emb == 4
    with pytest.raises(ValueError, match="distinct"):
        ClusterTransformer(2, 3, codes=torch.zeros(3, 1))
    with pytest.raises(ValueError, match="codes"):
        ClusterTransformer(2, 3, codes=torch.zeros(4, 1))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(scheme="hex"), "scheme"),
        (dict(k=1), "k"),
        (dict(d=0), "d"),
        (dict(gamma=0.0), "gamma"),
        (dict(gamma=-2.0), "gamma"),
        (dict(gamma=float("nan")), "gamma"),
        (dict(impl="flash"), "impl"),
    ],
)
def test_constructor_rejects_bad_input(kwargs, match):
    args = dict(d=2, k=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ClusterTransformer(**args)


def test_forward_rejects_bad_input():
    model = ClusterTransformer(2, 3)
    X, C = sample_tasks(2, 10, 2, 3, generator=0)
    with pytest.raises(ValueError, match="rank"):
        model(X[0], C[0])
    with pytest.raises(ValueError, match="d"):
        model(torch.rand(2, 10, 3), torch.rand(2, 3, 3))
    with pytest.raises(ValueError, match="same d"):
        model(X, torch.rand(2, 3, 5))
    with pytest.raises(ValueError, match="k=3"):
        model(X, torch.rand(2, 4, 2))
    with pytest.raises(ValueError, match=r"C must hold at most as many centers as X has points \(k <= n\)"):
        model(X[:, :2], C)
    with pytest.raises(ValueError, match="non-finite"):
        model(X.masked_fill(X > 0.5, math.inf), C)
    with pytest.raises(ValueError, match="steps"):
        model(X, C, steps=0)
    with pytest.raises(ValueError, match="batch"):
        model(X, C[:1])


@pytest.mark.parametrize("gamma", [1.0, math.inf])
def test_chunked_attention_gives_the_same_centers(gamma):
    g = torch.Generator().manual_seed(3)
    model = ClusterTransformer(3, 4, "bn", gamma=gamma, dtype=torch.float64, generator=g)
    X, C = torch.rand(2, 37, 3, generator=g, dtype=torch.float64), torch.rand(2, 4, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(model(X, C, steps=2, chunk=5), model(X, C, steps=2), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="chunk"):
        model(X, C, chunk=0)


def test_an_overflowing_layer_is_named_and_apply_layers_shows_it():
    g = torch.Generator().manual_seed(0)
    model = ClusterTransformer(2, 3, "bn", generator=g)
    with torch.no_grad():
        model.V.mul_(1e30)
    X, C = torch.rand(1, 10, 2, generator=g) * 1e10, torch.rand(1, 3, 2, generator=g) * 1e10
    with pytest.raises(ValueError, match="overflow"):
        model(X, C)
    assert not torch.isfinite(model.apply_layers(X, C)).all()


# n 40: every attention forms its weights through autograd on the CPU; n 130: the points' self-attention is
# fused (sdpa) or one explicit node (direct, auto)
@pytest.mark.parametrize("scheme, impl, n", [("oh", "sdpa", 40), ("oh", "sdpa", 130), ("bn", "direct", 40),
                                             ("bn", "direct", 130), ("oh", "auto", 130), ("na", "sdpa", 40)])
@pytest.mark.parametrize("extra", [{}, {"ensemble": 2}, {"ffn": 5}, {"center": True}])
def test_the_plain_points_shortcut_gives_the_layer_on_the_full_embedding(scheme, impl, n, extra):
    """run_unchecked hands the first layer the points themselves; the layer on [X, 0] gives the same centers."""
    g = torch.Generator().manual_seed(n)
    model = ClusterTransformer(3, 5, scheme, impl=impl, dtype=torch.float64, generator=g, **extra)
    X = torch.rand(4, n, 3, generator=g, dtype=torch.float64)
    C = X[:, :5].clone()
    if "ensemble" in extra:
        X, C = X.expand(2, *X.shape), C.expand(2, *C.shape)
    full = model.layer(*model.embed(X - C.mean(-2, keepdim=True), C - C.mean(-2, keepdim=True)) if extra.get("center")
                       else model.embed(X, C))
    shortcut = model.run_unchecked(X, C, return_embeddings=True)
    origin = C.mean(-2, keepdim=True) if extra.get("center") else 0.0
    torch.testing.assert_close(shortcut[0], full[1][..., :3] + origin, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(shortcut[1], full[0], rtol=1e-12, atol=1e-13)
    two = model.run_unchecked(X, C, steps=2)  # only the first application sees plain points
    expected = model.layer(*full)[1][..., :3] + origin
    torch.testing.assert_close(two, expected, rtol=1e-11, atol=1e-12)


def test_stack_refuses_members_of_different_dtypes():
    single, double = ClusterTransformer(2, 3), ClusterTransformer(2, 3, dtype=torch.float64)
    for members in ([single, double], [double, single]):
        with pytest.raises(ValueError, match="models must share their weights' dtype and device"):
            ClusterTransformer.stack(members)
    stacked = ClusterTransformer.stack([double, ClusterTransformer(2, 3, dtype=torch.float64)])
    assert stacked.Q.dtype == torch.float64 and torch.equal(stacked.Q[0], double.Q)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64])
def test_a_layer_is_float32_or_float64(dtype):
    with pytest.raises(ValueError, match=r"^dtype must be torch.float32 or torch.float64"):
        ClusterTransformer(2, 3, dtype=dtype)
    with pytest.raises(ValueError, match=r"^dtype must be torch.float32 or torch.float64"):
        ClusterTransformer.from_lloyd(2, 3, dtype=dtype)


def test_custom_codes_are_checked_as_the_layer_holds_them():
    near = torch.tensor([[0.0], [1.0], [1.0 + 1e-9]], dtype=torch.float64)  # distinct in float64 only
    assert ClusterTransformer(2, 3, codes=near, dtype=torch.float64).codes[:, 0].unique().numel() == 3
    with pytest.raises(ValueError, match="codes must have distinct rows in torch.float32"):
        ClusterTransformer(2, 3, codes=near)
    with pytest.raises(ValueError, match="codes has non-finite values in torch.float32"):
        ClusterTransformer(2, 3, codes=torch.tensor([[0.0], [1.0], [1e300]], dtype=torch.float64))
    with pytest.raises(ValueError, match="codes must be a real tensor"):
        ClusterTransformer(2, 3, codes=torch.tensor([[0j], [1j], [2j]]))
    integer = ClusterTransformer(2, 3, codes=torch.tensor([[0], [1], [2]]))
    assert integer.codes.dtype == torch.float32 and integer.codes.flatten().tolist() == [0.0, 1.0, 2.0]
