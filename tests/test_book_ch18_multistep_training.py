"""Chapter 18's inference schedules (kmtrf_core.book.ch18_multistep_training)."""

import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.book.ch18_multistep_training import geometric_schedule, schedule_trajectories
from kmtrf_core.evaluate import trajectory_table


def test_a_constant_schedule_is_the_plain_trajectory():
    X, C = sample_tasks(4, 20, 2, 3, generator=0)
    model = ClusterTransformer(2, 3, "bn", generator=torch.Generator().manual_seed(0))
    out = schedule_trajectories(model, X, C, 3, [(1.0, 1.0), (1.0, 8.0)])
    plain = trajectory_table({"x": out["gamma 1->1"]}, X, C).ratio
    assert not torch.equal(out["gamma 1->1"], out["gamma 1->8"])
    assert plain.iloc[0] == 1.0
    with pytest.raises(ValueError, match="start"):
        geometric_schedule(0.0, 1.0, 3)
