import math

import pytest
import torch

from kmtrf_core.explicit_attention import explicit_attention


def _autograd(a, b, c, v, scale):
    """The same attention through autograd (torch.softmax, plain products)."""
    return torch.softmax(scale * (2 * a @ b.transpose(-1, -2) - c.unsqueeze(-2)), dim=-1) @ v


def _inputs(lead, q, r, t, h, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*lead, q, t, dtype=dtype, generator=g)
    b = torch.randn(*lead, r, t, dtype=dtype, generator=g)
    c = (b * b).sum(-1) + torch.rand(*lead, r, dtype=dtype, generator=g)
    v = torch.randn(*lead, r, h, dtype=dtype, generator=g)
    return [x.requires_grad_() for x in (a, b, c, v)]


# short rows (r < 16: the closed-form softmax and its backward) and long ones (PyTorch's kernels)
SHAPES = [((2,), 7, 5, 3, 4), ((3,), 40, 6, 4, 10), ((2,), 6, 40, 10, 11), ((2, 3), 33, 33, 4, 4), ((), 17, 16, 2, 1)]


@pytest.mark.parametrize("lead, q, r, t, h", SHAPES)
def test_values_and_gradients_equal_autograd_in_float64(lead, q, r, t, h):
    inputs = _inputs(lead, q, r, t, h)
    out = explicit_attention(*inputs, 0.7)
    expected = _autograd(*inputs, 0.7)
    torch.testing.assert_close(out, expected, rtol=1e-13, atol=1e-14)
    target = torch.randn_like(out)
    grads = torch.autograd.grad((out * target).sum(), inputs)
    expected_grads = torch.autograd.grad((expected * target).sum(), inputs)
    for got, want in zip(grads, expected_grads):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("lead, q, r, t, h", SHAPES[:3])
def test_gradcheck(lead, q, r, t, h):
    inputs = _inputs(lead, min(q, 8), r, t, h, seed=1)
    assert torch.autograd.gradcheck(lambda *x: explicit_attention(*x, 0.4), inputs)


def test_float32_agrees_with_autograd_to_its_precision():
    inputs64 = _inputs((4,), 128, 128, 4, 4)
    inputs32 = [x.detach().float().requires_grad_() for x in inputs64]
    out = explicit_attention(*inputs32, 1 / math.sqrt(10))
    expected = _autograd(*inputs64, 1 / math.sqrt(10))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    expected.sum().backward()
    for got, want in zip(inputs32, inputs64):
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=1e-4, atol=1e-4)


def test_broadcast_inputs_get_gradients_of_their_own_shape():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(3, 2, 9, 4, dtype=torch.float64, generator=g).requires_grad_()  # an ensemble of 3 over 2 tasks
    b = torch.randn(2, 7, 4, dtype=torch.float64, generator=g).requires_grad_()  # shared by the members
    c = torch.rand(1, 2, 7, dtype=torch.float64, generator=g).requires_grad_()
    v = torch.randn(7, 5, dtype=torch.float64, generator=g).requires_grad_()
    out = explicit_attention(a, b, c, v, 0.9)
    assert out.shape == (3, 2, 9, 5)
    grads = torch.autograd.grad(out.square().sum(), (a, b, c, v))
    expected = torch.autograd.grad(_autograd(a, b, c, v, 0.9).square().sum(), (a, b, c, v))
    for x, got, want in zip((a, b, c, v), grads, expected):
        assert got.shape == x.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-13)


def test_only_the_inputs_that_need_it_get_a_gradient():
    a, b, c, v = _inputs((2,), 5, 6, 3, 2)
    out = explicit_attention(a.detach(), b, c.detach(), v, 1.0)
    out.sum().backward()
    assert a.grad is None and c.grad is None
    assert b.grad is not None and v.grad is not None


def test_minus_infinity_offsets_get_zero_weight_and_a_nan_row_stays_nan():
    a, b, c, v = (x.detach() for x in _inputs((1,), 3, 4, 2, 2))
    c = c.clone()
    c[..., 0] = math.inf  # key 0 infinitely far: no weight
    out = explicit_attention(a, b, c, v, 1.0)
    torch.testing.assert_close(out, explicit_attention(a, b[..., 1:, :], c[..., 1:], v[..., 1:, :], 1.0))
    a[0, 1, 0] = math.nan
    out = explicit_attention(a, b, c, v, 1.0)
    assert out[0, 1].isnan().all() and out[0, [0, 2]].isfinite().all()


def test_a_second_derivative_raises_instead_of_being_wrong():
    a, b, c, v = _inputs((1,), 4, 5, 2, 2)
    (ga,) = torch.autograd.grad(explicit_attention(a, b, c, v, 1.0).square().sum(), (a,), create_graph=True)
    with pytest.raises(RuntimeError, match="twice|once_differentiable|double"):
        ga.sum().backward()
