"""softmax_last: torch.softmax's values and gradients, in closed form for short rows on the CPU."""

import pytest
import torch

from kmtrf_core.softmax import SHORT_ROW, softmax_last


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-15), (torch.float32, 3e-7)])
@pytest.mark.parametrize("shape", [(5,), (3, 1), (7, 2), (4, 9, 6), (2, 3, 5, SHORT_ROW - 1), (6, SHORT_ROW), (3, 40)])
def test_equals_torch_softmax(shape, dtype, tol):
    z = torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(len(shape))) * 30
    torch.testing.assert_close(softmax_last(z), torch.softmax(z, dim=-1), rtol=0, atol=tol)


def test_short_rows_take_the_closed_form_and_long_rows_torchs_kernel():
    z = torch.randn(4, 3, requires_grad=True)
    assert type(softmax_last(z).grad_fn).__name__ == "_ShortRowSoftmaxBackward"
    long = torch.randn(4, SHORT_ROW, requires_grad=True)
    assert type(softmax_last(long).grad_fn).__name__ == "SoftmaxBackward0"


def test_infinities_and_nan_behave_as_torch_softmax():
    inf = float("inf")
    z = torch.tensor([[0.0, -inf, 2.0], [-inf, -inf, 1.0], [-inf, -inf, -inf], [inf, 0.0, 1.0], [float("nan"), 0.0, 1.0]],
                     dtype=torch.float64)
    ours, theirs = softmax_last(z), torch.softmax(z, dim=-1)
    torch.testing.assert_close(ours, theirs, equal_nan=True)
    assert ours[0, 1] == 0 and ours[1].tolist() == [0.0, 0.0, 1.0]


def test_scores_beyond_exp_range_do_not_overflow():
    z = torch.tensor([[1000.0, 999.0, -1000.0]])
    torch.testing.assert_close(softmax_last(z), torch.softmax(z, dim=-1))


def test_gradients_are_exact_in_float64():
    z = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(softmax_last, (z,))
    assert torch.autograd.gradgradcheck(softmax_last, (z,))


def test_gradient_equals_torchs():
    z = torch.randn(8, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(8, 6, dtype=torch.float64)
    (ours,) = torch.autograd.grad(softmax_last(z), z, g)
    (theirs,) = torch.autograd.grad(torch.softmax(z, dim=-1), z, g)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-15)


def test_the_input_is_left_alone():
    z = torch.randn(5, 4)
    before = z.clone()
    softmax_last(z)
    assert torch.equal(z, before)
