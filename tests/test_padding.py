"""kmtrf_core.padding beyond the Part III tests (tests/test_open_questions_core.py): the fill option."""

import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.padding import pad_tasks, padded_trajectory


@pytest.mark.parametrize("spelled, fill", [("COPY", "copy"), ("Copy", "copy"), ("FAR", "far")])
def test_a_fill_in_another_case_is_that_fill(spelled, fill):
    # check_choice accepts any case; "COPY" used to pass the check and then make far fillers
    X, C = sample_tasks(2, 20, 2, 3, generator=0, dtype=torch.float64)
    for got, expected in zip(pad_tasks(X, C, d=3, k=5, fill=spelled), pad_tasks(X, C, d=3, k=5, fill=fill)):
        assert torch.equal(got, expected)
    model = ClusterTransformer.from_lloyd(3, 5, "bn")
    assert torch.equal(padded_trajectory(model, X, C, 2, fill=spelled), padded_trajectory(model, X, C, 2, fill=fill))


def test_copy_and_far_fill_differ():
    X, C = sample_tasks(2, 20, 2, 3, generator=0, dtype=torch.float64)
    copied = pad_tasks(X, C, k=5, fill="COPY")[1][:, 3:]
    assert torch.equal(copied, C[:, :2])  # copies of the task's own centers, inside the data's range
    assert bool((pad_tasks(X, C, k=5, fill="far")[1][:, 3:] > 2).all())
