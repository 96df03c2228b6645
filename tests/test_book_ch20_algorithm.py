"""Chapter 20's algorithm table (kmtrf_core.book.ch20_algorithm)."""

import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.book.ch20_algorithm import algorithm_table


def test_the_algorithm_table_finds_lloyd_in_the_construction():
    X, C = sample_tasks(6, 40, 2, 3, generator=2, dtype=torch.float64)
    table = algorithm_table({"lloyd": ClusterTransformer.from_lloyd(2, 3)}, {"normal": (X, C)}, 1,
                            betas=[1.0, 1e4], alphas=[0.5, 1.0, 1.5], batch=20)
    first = table.set_index("algorithm")
    assert first.loc["lloyd", "distance"] < 1e-9 and first.loc["relaxed", "parameter"] == 1.0
    assert first.loc["stay", "distance"] == pytest.approx(1.0)
