"""Part III's held-out tasks and ratio tables (kmtrf_core.book.heldout)."""

import numpy as np
import pandas as pd
import pytest

from kmtrf_core.book.heldout import geometric_matrix, ratio_at


def test_ratio_at_takes_the_median_over_members():
    table = pd.DataFrame({"model": "m", "member": [0, 1, 2], "step": 1, "ratio": [0.5, 0.9, 1.0]})
    assert ratio_at(table, [1]).loc["m", "step1"] == 0.9


def test_task_ratios_mark_an_overflowed_task_inf_and_keep_the_others():
    import math

    import torch

    from kmtrf_core.book.heldout import task_ratios
    from kmtrf_core.lloyd import lloyd_trajectory
    from kmtrf_core.tasks import sample_tasks

    X, C = sample_tasks(4, 20, 2, 3, generator=0, dtype=torch.float64)
    centers = lloyd_trajectory(X, C, 2).centers.clone()
    centers[2, 1] = math.inf  # task 1 overflowed at step 2 (as center_trajectory marks it)
    ratios = task_ratios({"lloyd": centers}, X, C)["lloyd"]  # (T + 1, 1, B)
    assert ratios.shape == (3, 1, 4)
    assert math.isinf(ratios[2, 0, 1])
    keep = [0, 2, 3]
    assert abs(ratios[:, 0, keep] - 1).max() < 1e-12 and abs(ratios[:2, 0, 1] - 1).max() < 1e-12


# one task in ten at twenty times Lloyd's loss: its mean ratio is above 1, its geometric mean below
FEW_BAD = np.tile(np.r_[np.full(9, 0.6), 20.0], (2, 4))


def test_geometric_matrix_is_the_papers_statistic_laid_out_as_family_matrix():
    families = ["normal", "cauchy", "gumbel"]
    samples = {(train, test, "oh"): np.array([[0.25, 4.0 * (1 + (train == "cauchy"))]]) for train in families
               for test in families}
    samples[("normal", "gumbel", "oh")] = FEW_BAD  # the mean ratio above 1, its geometric mean below
    matrix = geometric_matrix(samples, "oh", families)
    assert list(matrix.index) == families and list(matrix.columns) == families  # rows test, columns training
    assert matrix.index.name == "test" and matrix.columns.name == "train_family"
    assert matrix.loc["normal", "normal"] == pytest.approx(1.0)
    assert matrix.loc["normal", "cauchy"] == pytest.approx(2 ** 0.5)  # sqrt(0.25 * 8)
    assert matrix.loc["gumbel", "normal"] == pytest.approx(np.exp(np.log(FEW_BAD).mean()))
    assert matrix.loc["gumbel", "normal"] < 1 < FEW_BAD.mean()
    with pytest.raises(ValueError, match=r"samples lacks 9 \(train family, test family, scheme\) cells, e\.g\. "
                                          r"\('normal', 'normal', 'bn'\)"):
        geometric_matrix(samples, "bn", families)
