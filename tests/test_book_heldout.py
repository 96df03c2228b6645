"""Part III's held-out tasks and ratio tables (kmtrf_core.book.heldout)."""

import pandas as pd

from kmtrf_core.book.heldout import ratio_at


def test_ratio_at_takes_the_median_over_members():
    table = pd.DataFrame({"model": "m", "member": [0, 1, 2], "step": 1, "ratio": [0.5, 0.9, 1.0]})
    assert ratio_at(table, [1]).loc["m", "step1"] == 0.9
