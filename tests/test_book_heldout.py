"""Part III's held-out tasks and ratio tables (kmtrf_core.book.heldout)."""

import pandas as pd

from kmtrf_core.book.heldout import ratio_at


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
