"""Chapter 3 (``book/03_embeddings.ipynb``): the verdict on BN's smaller embedding.

The embeddings are the paper room's (:mod:`kmtrf_core.embeddings`); the
chapter compares their sizes with the paper's Table 1, and
:func:`table1_finding` turns that comparison into the verdict of the claim
``parameter_reduction``.
"""

from __future__ import annotations

import pandas as pd

from ..validation import check_table
from .claims import Finding, verdict

__all__ = ["table1_finding"]


def table1_finding(table: pd.DataFrame, d: int = 32) -> Finding:
    """Do the extra embedding dimensions of OH and BN match Table 1, row by row?

    Parameters
    ----------
    table : pandas.DataFrame
        One row per ``k`` of Table 1 with ``match`` (ours equal the paper's
        OH / BN extra dimensions) and ``BN saves (%)`` (the parameter reduction).
    d : int
        The dimension of the rows, for the text.

    Returns
    -------
    Finding
        For the claim ``parameter_reduction``.

    Examples
    --------
    >>> table = pd.DataFrame({"match": [True, True], "BN saves (%)": [7.21, 96.1]}, index=[6, 1000])
    >>> finding = table1_finding(table)
    >>> finding.verdict, finding.value
    ('reproduced', 'extra dimensions OH / BN match Table 1 in 2 of 2 rows; BN saves 7.2% to 96.1% of the parameters at d = 32')
    """
    check_table(table, "table", ["match", "BN saves (%)"])
    matches, saves = int(table["match"].sum()), table["BN saves (%)"]
    return Finding(f"extra dimensions OH / BN match Table 1 in {matches} of {len(table)} rows; "
                   f"BN saves {saves.min():.1f}% to {saves.max():.1f}% of the parameters at d = {d}",
                   verdict(matches, len(table)), check="every row of Table 1 matches")
