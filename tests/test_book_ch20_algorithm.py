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


def test_the_verdict_is_drawn_on_an_interval_over_tasks_when_the_table_keeps_them():
    from kmtrf_core.algorithms import relaxed_lloyd_step, soft_kmeans_step
    from kmtrf_core.book.ch20_algorithm import algorithm_finding

    X, C = sample_tasks(24, 40, 2, 3, generator=3, dtype=torch.float64)
    grids = dict(betas=[1.0, 30.0, 1e4], alphas=[0.5, 0.8, 1.0], batch=20)

    class Relaxed(torch.nn.Module):  # a step that is exactly relaxed Lloyd at alpha 0.8: the variant explains it
        def members(self):
            return [lambda X, C: relaxed_lloyd_step(X, C, 0.8)]

    class Far(torch.nn.Module):  # a long, noisy soft step: no variant of the grids within half of Lloyd's distance
        def members(self):
            noise = torch.Generator().manual_seed(0)
            return [lambda X, C: C + 2 * (soft_kmeans_step(X, C, 3.0) - C)
                    + 0.3 * torch.randn(C.shape, generator=noise, dtype=C.dtype)]

    from unittest import mock

    with mock.patch("kmtrf_core.book.ch20_algorithm.check_model", lambda model: model):
        table = algorithm_table({"relaxed": Relaxed(), "far": Far()}, {"normal": (X, C)}, 1, per_task=True, **grids)
    finding = algorithm_finding(table, step=1, factor=0.5)
    assert "task_norms" in table and finding.uncertainty.startswith("FAR on normal: ")
    assert finding.verdict == "partly" and "1 of 2 (model, family) pairs below 0.5 on 95% intervals" in finding.report
    plain = algorithm_finding(table.drop(columns="task_norms"), step=1, factor=0.5)
    assert plain.uncertainty is None and plain.verdict == "partly"
