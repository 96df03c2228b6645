import pandas as pd
import pytest

from kmtrf_core import embedding_dim, parameter_reduction
from kmtrf_core.book.ch03_embeddings import table1_finding

TABLE1_EXTRA = {6: (6, 3), 25: (25, 5), 100: (100, 7), 1000: (1000, 10)}
"""The paper's Table 1: extra embedding dimensions OH / BN per k."""


def _table(d=32, paper=TABLE1_EXTRA):
    rows = {}
    for k, (oh, bn) in paper.items():
        ours = (embedding_dim(d, k, "oh") - d, embedding_dim(d, k, "bn") - d)
        rows[k] = {"match": ours == (oh, bn), "BN saves (%)": 100 * parameter_reduction(d, k)}
    return pd.DataFrame.from_dict(rows, orient="index")


def test_our_embeddings_match_table1_and_the_finding_says_so():
    finding = table1_finding(_table())
    assert finding.verdict == "reproduced"
    assert "4 of 4 rows" in finding.value and "d = 32" in finding.value
    assert finding.check


def test_a_row_that_does_not_match_makes_it_partly():
    wrong = {**TABLE1_EXTRA, 25: (25, 4)}
    finding = table1_finding(_table(paper=wrong))
    assert finding.verdict == "partly" and "3 of 4 rows" in finding.value


def test_missing_columns_are_refused():
    with pytest.raises(ValueError, match="table"):
        table1_finding(pd.DataFrame({"match": [True]}))
