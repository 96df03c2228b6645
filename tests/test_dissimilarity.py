"""Earth mover's distances between tasks (Fig. 9, Fig. 19): kmtrf_core.dissimilarity."""

import math

import numpy as np
import ot
import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kmtrf_core import sample_tasks
from kmtrf_core.dissimilarity import block_labels, block_summary, distance_samples, emd_matrix
from kmtrf_core.tasks import family_tasks


def _lp_emd(u, v):
    """The exact transport LP with uniform weights and ground cost |u_i - v_j|."""
    u, v = np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)
    a, b = np.full(u.size, 1.0 / u.size), np.full(v.size, 1.0 / v.size)
    return float(ot.emd2(a, b, np.abs(u[:, None] - v[None, :])))


def _rows(lengths, seed):
    rng = np.random.default_rng(seed)
    return [rng.gamma(2.0, 1.5, size=n) for n in lengths]


def test_distance_samples_are_sorted_squared_distances():
    X, C = sample_tasks(3, 7, 2, 4, generator=0)
    S = distance_samples(X, C)
    assert S.shape == (3, 7 * 4) and S.dtype == np.float64
    assert (np.diff(S, axis=1) >= 0).all()
    Xd, Cd = X.double().numpy(), C.double().numpy()
    brute = ((Xd[:, :, None, :] - Cd[:, None, :, :]) ** 2).sum(-1).reshape(3, -1)
    np.testing.assert_allclose(S, np.sort(brute, axis=1), rtol=1e-12, atol=1e-14)
    # more centers than points is allowed, as for the loss
    X1, C1 = torch.tensor([[[0.0], [2.0]]]), torch.tensor([[[0.0], [1.0], [3.0]]])
    assert distance_samples(X1, C1).tolist() == [[0.0, 1.0, 1.0, 1.0, 4.0, 9.0]]


def test_emd_matches_the_transport_lp_and_scipy_with_unequal_lengths():
    rows = _rows([5, 7, 5, 3, 6], seed=1)
    D = emd_matrix(rows)
    assert D.shape == (5, 5)
    for i in range(5):
        for j in range(5):
            assert D[i, j] == pytest.approx(_lp_emd(rows[i], rows[j]), rel=1e-9, abs=1e-12)
            assert D[i, j] == pytest.approx(scipy.stats.wasserstein_distance(rows[i], rows[j]), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("chunk", [1, 3, 256])
def test_equal_lengths_pot_and_sorted_agree_with_the_lp(chunk):
    rows = np.stack(_rows([6] * 5, seed=2))
    pot = emd_matrix(rows, method="pot", chunk=chunk)
    srt = emd_matrix(rows, method="sorted")
    np.testing.assert_allclose(pot, srt, rtol=1e-12, atol=1e-14)
    lp = np.array([[_lp_emd(u, v) for v in rows] for u in rows])
    np.testing.assert_allclose(pot, lp, rtol=1e-9, atol=1e-12)
    scipy_d = np.array([[scipy.stats.wasserstein_distance(u, v) for v in rows] for u in rows])
    np.testing.assert_allclose(srt, scipy_d, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", ["pot", "sorted"])
def test_symmetric_with_zero_diagonal(method):
    D = emd_matrix(np.random.default_rng(3).normal(size=(6, 9)), method=method)
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), 0.0)
    assert (D[~np.eye(6, dtype=bool)] > 0).all()


def test_inputs_of_several_kinds():
    rows = np.random.default_rng(4).normal(size=(3, 5))
    expected = emd_matrix(rows)
    np.testing.assert_allclose(emd_matrix(torch.from_numpy(rows)), expected, rtol=1e-12)
    np.testing.assert_allclose(emd_matrix(list(rows)), expected, rtol=1e-12)
    np.testing.assert_allclose(emd_matrix([torch.from_numpy(r) for r in rows]), expected, rtol=1e-12)
    np.testing.assert_allclose(emd_matrix(rows.tolist()), expected, rtol=1e-12)
    assert emd_matrix(np.array([[0, 1], [2, 3]])).tolist() == [[0.0, 2.0], [2.0, 0.0]]  # integers
    assert emd_matrix([[1.0, 2.0]]).tolist() == [[0.0]]  # one task


def test_emd_of_tasks_pot_equals_sorted():
    X, C = sample_tasks(6, 12, 2, 3, generator=5)
    S = distance_samples(X, C)
    np.testing.assert_allclose(emd_matrix(S, method="pot", chunk=4), emd_matrix(S, method="sorted"), rtol=1e-10,
                               atol=1e-14)


finite = st.floats(min_value=-100.0, max_value=100.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(finite, min_size=1, max_size=6), min_size=2, max_size=5))
def test_emd_is_a_metric_on_random_inputs(rows):
    D = emd_matrix(rows)
    N = len(rows)
    tol = 1e-9 * (1.0 + max(abs(x) for r in rows for x in r))
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), 0.0)
    assert (D >= 0).all()
    for i in range(N):
        for j in range(N):
            assert D[i, j] <= (D[i, :] + D[:, j]).min() + tol
    i, j = 0, 1
    assert D[i, j] == pytest.approx(scipy.stats.wasserstein_distance(rows[i], rows[j]), rel=1e-9, abs=tol)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(finite, min_size=4, max_size=4), min_size=2, max_size=4))
def test_methods_agree_on_random_inputs(rows):
    tol = 1e-9 * (1.0 + max(abs(x) for r in rows for x in r))
    np.testing.assert_allclose(emd_matrix(rows, "pot"), emd_matrix(rows, "sorted"), rtol=1e-9, atol=tol)


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=-50.0, max_value=50.0, allow_nan=False), st.integers(min_value=0, max_value=1000))
def test_emd_to_a_shifted_copy_is_the_shift(c, seed):
    u = np.random.default_rng(seed).normal(size=8)
    for method in ("pot", "sorted"):
        assert emd_matrix([u, u + c], method=method)[0, 1] == pytest.approx(abs(c), rel=1e-9, abs=1e-9)
    # also with a permuted copy: the distance compares distributions, not positions
    v = np.random.default_rng(seed + 1).permutation(u) + c
    assert emd_matrix([u, v], method="sorted")[0, 1] == pytest.approx(abs(c), rel=1e-9, abs=1e-9)


def test_block_summary_is_the_block_means():
    rng = np.random.default_rng(6)
    D = rng.uniform(1.0, 2.0, size=(6, 6))  # any matrix: a non-zero diagonal tells whether it counts
    labels = ["b", "a", "b", "c", "a", "b"]
    table = block_summary(D, labels)
    assert list(table.index) == list(table.columns) == ["b", "a", "c"]  # first appearance
    idx = {"b": [0, 2, 5], "a": [1, 4], "c": [3]}
    for x, ix in idx.items():
        for y, iy in idx.items():
            values = [D[i, j] for i in ix for j in iy if x != y or i != j]
            assert table.loc[x, y] == pytest.approx(np.mean(values) if values else math.nan, rel=1e-12, nan_ok=True)
    with_diag = block_summary(D, labels, include_diagonal=True)
    for x, ix in idx.items():
        for y, iy in idx.items():
            assert with_diag.loc[x, y] == pytest.approx(D[np.ix_(ix, iy)].mean(), rel=1e-12)
    # block c holds one task: no pair within it, so NaN (not a distance of 0); with the diagonal, its own
    assert math.isnan(table.loc["c", "c"]) and with_diag.loc["c", "c"] == D[3, 3]
    assert np.isfinite(table.drop(index="c", columns="c").to_numpy()).all()


def test_emd_matrix_method_in_any_case():
    rows = [[0.0, 1.0], [1.0, 2.5], [0.5, 3.0]]
    np.testing.assert_array_equal(emd_matrix(rows, method="POT"), emd_matrix(rows, method="pot"))
    np.testing.assert_array_equal(emd_matrix(rows, method="Sorted"), emd_matrix(rows, method="sorted"))


def test_block_summary_of_emd_between_families():
    tasks = family_tasks(3, 20, 2, 3, families=("normal", "cauchy"), generator=0)
    labels = block_labels(tasks)
    S = np.concatenate([distance_samples(X, C) for X, C in tasks.values()])
    D = emd_matrix(S)
    table = block_summary(D, labels)
    assert table.shape == (2, 2)
    np.testing.assert_allclose(table.values, table.values.T, rtol=1e-12)
    assert table.loc["normal", "cauchy"] == pytest.approx(D[:3, 3:].mean(), rel=1e-12)
    assert table.loc["normal", "normal"] == pytest.approx(D[:3, :3].sum() / 6, rel=1e-12)


def test_block_labels_follow_the_dict():
    tasks = {"normal": sample_tasks(3, 10, 2, 3, generator=0), "cauchy": sample_tasks(2, 10, 2, 3, generator=1),
             "gumbel": sample_tasks(1, 10, 2, 3, generator=2)}
    assert block_labels(tasks) == ["normal"] * 3 + ["cauchy"] * 2 + ["gumbel"]
    assert block_labels({("normal", 0.1): sample_tasks(2, 10, 2, 3)}) == [("normal", 0.1)] * 2
    assert block_labels({}) == []


@pytest.mark.parametrize("pair,match", [
    ((torch.zeros(2, 5, 1), torch.zeros(2, 1, 1)), r"^tasks\['cauchy'\]: C must hold k >= 2"),
    ((torch.zeros(2, 5), torch.zeros(2, 2, 1)), r"^tasks\['cauchy'\]: X must have rank 3"),
    ((torch.zeros(2, 5, 1), torch.zeros(3, 2, 1)), r"^tasks\['cauchy'\]: X and C must have the same batch"),
    (([1.0], torch.zeros(2, 2, 1)), r"^tasks\['cauchy'\]: X must be a torch.Tensor"),
    ((torch.zeros(2, 5, 1),), r"^tasks\['cauchy'\] must be a pair \(X, C\)"),
])
def test_block_labels_name_the_bad_entry_of_tasks(pair, match):
    tasks = {"normal": sample_tasks(2, 10, 2, 3, generator=0), "cauchy": pair}
    with pytest.raises(ValueError, match=match):
        block_labels(tasks)


@pytest.mark.parametrize("call,match", [
    (lambda: emd_matrix(np.zeros((2, 3, 4))), "2-D"),
    (lambda: emd_matrix(np.zeros(5)), "2-D"),
    (lambda: emd_matrix(np.zeros((2, 0))), "non-empty"),
    (lambda: emd_matrix([[1.0, 2.0], []]), "non-empty"),
    (lambda: emd_matrix([[1.0, 2.0], [[1.0], [2.0]]]), r"samples\[1\]"),
    (lambda: emd_matrix([]), "at least one"),
    (lambda: emd_matrix("abc"), "samples"),
    (lambda: emd_matrix([[1.0, math.nan], [0.0, 1.0]]), "non-finite"),
    (lambda: emd_matrix(np.array([[1.0, 2.0], [0.0, np.inf]])), "non-finite"),
    (lambda: emd_matrix(torch.tensor([[1.0, math.nan]])), "non-finite"),
    (lambda: emd_matrix([[1.0], [2.0]], method="sinkhorn"), "method"),
    (lambda: emd_matrix([[1.0, 2.0], [2.0]], method="sorted"), "same number"),
    (lambda: emd_matrix([[1.0], [2.0]], chunk=0), "chunk"),
    (lambda: block_summary(np.zeros((2, 3)), ["a", "b"]), "square"),
    (lambda: block_summary(np.zeros(4), ["a"] * 4), "square"),
    (lambda: block_summary(np.zeros((3, 3)), ["a", "b"]), "labels"),
    (lambda: distance_samples(torch.zeros(2, 5, 2), torch.zeros(2, 3, 3)), "d"),
    (lambda: distance_samples(torch.zeros(5, 2), torch.zeros(3, 2)), "rank 3"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
