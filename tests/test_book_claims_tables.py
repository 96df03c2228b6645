"""Claim tables of chapters 8 and 9 (kmtrf_core.book.claims)."""

import numpy as np
import pytest

from kmtrf_core.book.claims import CLAIM_COLUMNS, claims_table, progression


def test_progression():
    assert progression([1.0, 6.7, 36.9], "{:.1f}%") == "1.0% -> 6.7% -> 36.9%"
    assert progression([3]) == "3" and progression([]) == ""


def test_claims_table_reads_yes_no_inconclusive_when_a_check_is_undecided():
    table = claims_table([("a", "yes", "9/9", np.True_), ("b", "1.0x", "0.9x to 1.3x", "inconclusive"),
                          ("c", "2x", "0.5x", 0)])
    assert table.agree.tolist() == ["yes", "inconclusive", "no"]
    assert claims_table([("a", "yes", "9/9", np.True_), ("c", "2x", "0.5x", 0)], words=True).agree.tolist() == ["yes", "no"]
    with pytest.raises(ValueError, match="'maybe'"):
        claims_table([("a", "yes", "9/9", "maybe")])


def test_claims_table_indexes_by_claim_with_plain_bools():
    table = claims_table([("a", "yes", "9/9", np.True_), ("b", "0.88x", "1.04x", 0)])
    assert table.index.name == "claim" and table.columns.tolist() == list(CLAIM_COLUMNS[1:])
    assert table.agree.dtype == bool and table.agree.tolist() == [True, False]
    flat = claims_table([("c", "x", True)], columns=("claim", "ours", "holds"), index=False)
    assert flat.index.tolist() == [0] and flat.columns.tolist() == ["claim", "ours", "holds"]
    with pytest.raises(ValueError):
        claims_table([("a", "b")])
