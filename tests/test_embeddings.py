import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kmtrf_core import (
    binary_codes,
    cluster_codes,
    code_dim,
    embedding_dim,
    embed,
    parameter_count,
    parameter_reduction,
)


def test_binary_codes_match_paper_B6():
    # Definition 2.1's example B_6, columns = clusters
    B6 = torch.tensor([[0, 1, 0, 1, 0, 1], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1]])
    assert torch.equal(binary_codes(6).T.long(), B6)


@given(st.integers(2, 2000))
@settings(max_examples=60, deadline=None)
def test_binary_codes_decode_to_their_index(k):
    codes = binary_codes(k, dtype=torch.float64)
    m = math.ceil(math.log2(k))
    assert codes.shape == (k, m)
    assert set(codes.unique().tolist()) <= {0.0, 1.0}
    weights = 2.0 ** torch.arange(m, dtype=torch.float64)
    assert torch.equal(codes @ weights, torch.arange(k, dtype=torch.float64))


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8, 9, 1000, 1024, 1025])
def test_code_dims(k):
    assert code_dim(k, "oh") == k
    assert code_dim(k, "bn") == math.ceil(math.log2(k))
    assert code_dim(k, "sc") == 1
    assert code_dim(k, "na") == 0
    for scheme in ("oh", "bn", "sc", "na"):
        assert cluster_codes(k, scheme).shape == (k, code_dim(k, scheme))
        assert embedding_dim(7, k, scheme) == 7 + code_dim(k, scheme)


def test_codes_are_distinct_rows():
    for scheme in ("oh", "bn", "sc"):
        codes = cluster_codes(37, scheme)
        assert torch.unique(codes, dim=0).shape[0] == 37


def test_embed_layout():
    X = torch.rand(3, 11, 4, dtype=torch.float64)
    C = torch.rand(3, 5, 4, dtype=torch.float64)
    for scheme in ("oh", "bn", "sc", "na"):
        Xb, Cb = embed(X, C, scheme)
        m = code_dim(5, scheme)
        assert Xb.shape == (3, 11, 4 + m) and Cb.shape == (3, 5, 4 + m)
        assert torch.equal(Xb[..., :4], X) and torch.equal(Cb[..., :4], C)
        assert torch.count_nonzero(Xb[..., 4:]) == 0
        assert torch.equal(Cb[..., 4:], cluster_codes(5, scheme, dtype=torch.float64).expand(3, 5, m))


def test_parameter_counts_and_the_75_percent_claim():
    assert parameter_count(32, 10, "oh") == 12 * 42**2
    assert parameter_count(32, 10, "bn") == 12 * 36**2
    # Section 1: "up to 75% fewer parameters when k ~ d": approached from below as d = k grows
    reductions = [parameter_reduction(d, d) for d in (4, 16, 64, 256, 1024, 2**16)]
    assert all(a < b for a, b in zip(reductions, reductions[1:]))
    assert all(r < 0.75 for r in reductions)
    assert reductions[-1] > 0.749
    # and much more when k >> d
    assert parameter_reduction(4, 1000) > 0.99


def test_embed_rejects_bad_codes():
    X, C = torch.rand(1, 5, 2), torch.rand(1, 3, 2)
    with pytest.raises(ValueError, match="codes"):
        embed(X, C, codes=torch.zeros(4, 2))


def test_ensemble_tasks_must_share_their_leading_shape():
    with pytest.raises(ValueError, match=r"must share S and B, got shapes \(2, 3, 5, 2\) and \(3, 2, 3, 2\)"):
        embed(torch.rand(2, 3, 5, 2), torch.rand(3, 2, 3, 2))
    Xb, Cb = embed(torch.rand(2, 3, 5, 2), torch.rand(2, 3, 4, 2), "bn")
    assert Xb.shape == (2, 3, 5, 4) and Cb.shape == (2, 3, 4, 4)
