"""The argument checks of kmtrf_core.validation: what they accept, what they refuse, and by which name."""

import math

import numpy as np
import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.validation import check_float_dtype, check_int, check_number


@pytest.mark.parametrize("value", [np.int64(3), np.int32(3), np.uint8(3), 3])
def test_any_integer_is_an_int_and_comes_back_as_a_python_int(value):
    out = check_int(value, "steps")
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value", [True, np.bool_(True), 3.0, np.float64(3.0), "3", None])
def test_bools_floats_and_strings_are_no_int(value):
    with pytest.raises(ValueError, match=r"^steps must be an int >= 1, got"):
        check_int(value, "steps")


@pytest.mark.parametrize("value", [np.float32(0.5), np.float64(0.5), np.int64(2), 0.5, torch.tensor(0.5)])
def test_any_real_number_is_a_number_and_comes_back_as_a_float(value):
    out = check_number(value, "gamma")
    assert out == float(value) and type(out) is float


@pytest.mark.parametrize("value", [True, np.bool_(True), np.float32(math.nan), np.float64(-1.0), 1j, "1"])
def test_bools_complex_strings_and_bad_values_are_no_number(value):
    with pytest.raises(ValueError, match=r"^gamma must be a positive finite number, got"):
        check_number(value, "gamma")


def test_numpy_scalars_pass_where_python_numbers_do():
    X, C = sample_tasks(np.int64(2), np.int64(10), np.int64(2), np.int64(3), generator=0)
    assert torch.equal(X, sample_tasks(2, 10, 2, 3, generator=0)[0])
    assert ClusterTransformer(2, 3, gamma=np.float32(2.0)).gamma == 2.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float32_and_float64_are_the_float_dtypes(dtype):
    assert check_float_dtype(dtype) is dtype


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.complex64, "float32", None,
                                   torch.zeros(1)])
def test_other_dtypes_are_refused_by_the_argument_name(dtype):
    with pytest.raises(ValueError, match=r"^precision must be torch.float32 or torch.float64, got"):
        check_float_dtype(dtype, "precision")
