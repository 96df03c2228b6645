"""Theorem 2.1 / Appendix B: the constructed layer at gamma = inf is Lloyd's algorithm."""

import itertools
import math

import numpy as np
import pytest
import torch

from kmtrf_core import (
    ClusterTransformer,
    cluster_codes,
    code_geometry,
    code_lloyd_step,
    embed,
    finite_gamma_error,
    has_empty_cluster,
    layer_trace,
    lloyd,
    lloyd_trajectory,
    sample_tasks,
)

SCHEMES = ("oh", "bn", "sc")
GRID = [(n, d, k) for n, d, k in itertools.product([16, 64, 200], [1, 3, 8], [2, 3, 5, 6, 8, 13]) if k <= n]


def _rel_err(a, b):
    return ((a - b).abs().flatten(1).amax(1) / b.abs().flatten(1).amax(1)).max().item()


@pytest.mark.parametrize("n,d,k", GRID)
def test_exact_lloyd_for_every_step(n, d, k):
    X, C = sample_tasks(6, n, d, k, generator=1000 * n + 10 * d + k, dtype=torch.float64)
    traj = lloyd_trajectory(X, C, steps=10)
    ok = ~(traj.counts == 0).any(dim=2)  # (T, B): no empty cluster at that iteration
    ok = ok.cumprod(dim=0).bool()  # ...nor at any earlier one
    assert ok[-1].any(), "grid point with no usable task"
    for scheme in SCHEMES:
        model = ClusterTransformer.from_lloyd(d, k, scheme)
        with torch.no_grad():
            X_bar, C_bar = model.embed(X, C)
            for t in range(1, 11):
                X_bar, C_bar = model.layer(X_bar, C_bar)
                good = ok[t - 1]
                assert _rel_err(C_bar[good][..., :d], traj.centers[t][good]) <= 1e-12, (scheme, t)
                # the code part of the center tokens never changes
                assert torch.equal(C_bar[..., d:], cluster_codes(k, scheme, dtype=X.dtype).expand(6, k, -1))
                # and the point tokens carry the code of the Lloyd assignment
                codes = cluster_codes(k, scheme, dtype=X.dtype)
                assert torch.equal(X_bar[good][..., d:], codes[traj.assignments[t - 1][good]])


def test_forward_steps_equals_lloyd_steps():
    X, C = sample_tasks(32, 128, 4, 10, generator=9, dtype=torch.float64)
    keep = ~has_empty_cluster(X, C, 20)
    for scheme in SCHEMES:
        model = ClusterTransformer.from_lloyd(4, 10, scheme)
        for T in (1, 7, 20):
            assert _rel_err(model(X, C, steps=T)[keep], lloyd(X, C, steps=T)[keep]) <= 1e-12


def test_proof_steps_eq_14_15_18_19():
    X, C = sample_tasks(4, 50, 3, 6, generator=11, dtype=torch.float64)
    model = ClusterTransformer.from_lloyd(3, 6, "bn")
    X_bar, C_bar = embed(X, C, "bn")
    tr = layer_trace(model, X_bar, C_bar)
    a = lloyd_trajectory(X, C, 1).assignments[0]
    onehot = torch.nn.functional.one_hot(a, 6).to(X.dtype)
    assert torch.equal(tr["weights_1"], onehot)  # Eq. 14: hardmax over centers
    assert torch.equal(tr["weights_2"], torch.eye(50, dtype=X.dtype).expand(4, 50, 50))  # distinct points
    codes = cluster_codes(6, "bn", dtype=X.dtype)
    assert torch.equal(tr["update_x"][..., :3], torch.zeros_like(X))  # Eq. 15
    assert torch.equal(tr["update_x"][..., 3:], codes[a])  # Y(1) - Y(0), Y(0) = 0
    counts = onehot.sum(1)
    assert torch.allclose(tr["weights_3"], onehot.transpose(1, 2) / counts.unsqueeze(-1))  # Eq. 18: 1/m_j
    assert torch.equal(tr["weights_4"], torch.eye(6, dtype=X.dtype).expand(4, 6, 6))
    torch.testing.assert_close(tr["update_c"][..., :3], lloyd(X, C) - C, rtol=1e-12, atol=1e-14)  # Eq. 19
    assert torch.equal(tr["update_c"][..., 3:], torch.zeros(4, 6, 3, dtype=X.dtype))


def test_duplicate_points_do_not_break_exactness():
    X, C = sample_tasks(4, 40, 2, 4, generator=12, dtype=torch.float64)
    X = torch.cat([X, X[:, :10]], dim=1)  # ten points appear twice
    keep = ~has_empty_cluster(X, C, 5)
    for scheme in SCHEMES:
        model = ClusterTransformer.from_lloyd(2, 4, scheme)
        assert _rel_err(model(X, C, steps=5)[keep], lloyd(X, C, steps=5)[keep]) <= 1e-12


def _task_with_empty_cluster(k=4):
    # clusters 0 and 1 take all points; the remaining centers are far away and stay empty
    X = torch.tensor([[[0.0, 0.0], [0.1, 0.0], [0.9, 1.0], [1.0, 1.0], [0.05, 0.1]]], dtype=torch.float64)
    far = torch.tensor([[5.0, 5.0], [6.0, -4.0], [-7.0, 3.0]], dtype=torch.float64)[: k - 2]
    C = torch.cat([torch.tensor([[[0.0, 0.0], [1.0, 1.0]]], dtype=torch.float64), far[None]], dim=1)
    return X, C


def test_empty_cluster_is_detected_and_follows_the_code_rule():
    X, C = _task_with_empty_cluster(4)
    assert has_empty_cluster(X, C, 1).tolist() == [True]
    a = lloyd_trajectory(X, C, 1).assignments[0, 0]
    for scheme in SCHEMES:
        model = ClusterTransformer.from_lloyd(2, 4, scheme)
        out = model(X, C)
        codes = cluster_codes(4, scheme, dtype=X.dtype)
        torch.testing.assert_close(out, code_lloyd_step(X, C, codes), rtol=1e-12, atol=1e-14)
        # independent oracle, by explicit loops: the empty center moves to the mean of the points
        # whose assigned code is nearest to its own code
        for j in (2, 3):
            dist = [((codes[a[i]] - codes[j]) ** 2).sum().item() for i in range(5)]
            nearest = [i for i in range(5) if dist[i] == min(dist)]
            torch.testing.assert_close(out[0, j], X[0, nearest].mean(0), rtol=1e-12, atol=1e-14)
        # non-empty clusters still follow Lloyd exactly
        torch.testing.assert_close(out[0, :2], lloyd(X, C)[0, :2], rtol=1e-12, atol=1e-14)
    # under OH every other code is equally far: the empty center lands on the mean of all points
    out = ClusterTransformer.from_lloyd(2, 4, "oh")(X, C)
    torch.testing.assert_close(out[0, 2], X[0].mean(0))
    # and Lloyd's documented policy keeps it in place instead
    assert torch.equal(lloyd(X, C)[0, 2:], C[0, 2:])


def test_assignment_tie_breaks_exactness():
    # point 2 is exactly halfway between the two centers: Lloyd picks center 0,
    # the averaging hardmax splits it and writes a fractional code
    X = torch.tensor([[[0.0], [0.25], [0.5], [0.75], [1.0]]], dtype=torch.float64)
    C = torch.tensor([[[0.25], [0.75]]], dtype=torch.float64)
    model = ClusterTransformer.from_lloyd(1, 2, "bn")
    _, X_bar, _ = model(X, C, return_embeddings=True)
    assert X_bar[0, 2, 1].item() == 0.5
    assert not torch.allclose(model(X, C), lloyd(X, C))


def test_large_finite_gamma_approaches_lloyd():
    X, C = sample_tasks(8, 64, 2, 4, generator=13, dtype=torch.float64)
    keep = ~has_empty_cluster(X, C, 1)
    for scheme in SCHEMES:
        errs = [finite_gamma_error(X, C, scheme, g)[keep].median().item() for g in (1.0, 100.0, 1e6)]
        assert errs[0] > errs[1] > errs[2]
        assert errs[2] < 1e-3
        assert finite_gamma_error(X, C, scheme, math.inf)[keep].max().item() <= 1e-12


def test_code_geometry():
    oh, bn, sc = (code_geometry(10, s) for s in SCHEMES)
    assert (oh["m"], bn["m"], sc["m"]) == (10, 4, 1)
    assert (oh["margin"], bn["margin"], sc["margin"]) == (2.0, 1.0, 1.0)
    assert (oh["max_sqnorm"], bn["max_sqnorm"], sc["max_sqnorm"]) == (1.0, 3.0, 81.0)
    assert (oh["neighbors"], bn["neighbors"], sc["neighbors"]) == (9, 4, 2)
    assert all(g["distinct"] for g in (oh, bn, sc))
    assert not code_geometry(3, codes=torch.zeros(3, 1))["distinct"]


def test_no_construction_without_codes():
    with pytest.raises(ValueError, match="na"):
        ClusterTransformer.from_lloyd(2, 3, "na")


@pytest.mark.parametrize("codes", [
    np.eye(3),  # not a tensor: was an AttributeError
    torch.ones(3),  # one row of codes: was "A must have rank >= 2"
    torch.ones(1, 2),
    torch.tensor([[0.0], [math.nan], [1.0]]),
    torch.eye(3, dtype=torch.complex64),
])
def test_code_geometry_names_codes_when_it_refuses_them(codes):
    with pytest.raises(ValueError, match=r"^codes "):
        code_geometry(3, codes=codes)


def test_code_geometry_of_given_codes_of_any_real_dtype():
    assert code_geometry(3, codes=torch.eye(3, dtype=torch.int64)) == code_geometry(3, "oh")
    assert code_geometry(3, codes=torch.zeros(3, 0))["distinct"] is False  # no code at all (the "na" scheme)


def test_code_lloyd_step_answers_on_the_tasks_device():
    X, C = sample_tasks(2, 20, 2, 3, generator=0, dtype=torch.float64)
    out = code_lloyd_step(X, C, cluster_codes(3, "bn", dtype=torch.float32))  # codes of another dtype
    assert out.device == X.device and out.dtype == X.dtype
    torch.testing.assert_close(out, code_lloyd_step(X, C, cluster_codes(3, "bn", dtype=torch.float64)))


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device on this machine: the device checks run where one is lent")
def test_code_geometry_and_code_lloyd_step_keep_to_the_inputs_device():
    codes = cluster_codes(5, "bn", dtype=torch.float64)
    assert code_geometry(5, codes=codes.cuda()) == code_geometry(5, codes=codes)  # codes on CUDA
    X, C = sample_tasks(2, 20, 2, 5, generator=0, dtype=torch.float64)
    out = code_lloyd_step(X.cuda(), C.cuda(), codes)  # tasks on CUDA, codes on the CPU
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), code_lloyd_step(X, C, codes))
