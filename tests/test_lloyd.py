import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from kmtrf_core import (
    assign,
    has_empty_cluster,
    kmeans_objective,
    lloyd,
    lloyd_step,
    lloyd_trajectory,
    sample_tasks,
)


def _brute_objective(X, C):
    return torch.stack([min(((x - c) ** 2).sum() for c in Cb) for Xb, Cb in zip(X, C) for x in Xb]).view(
        X.shape[0], -1
    ).sum(1)


def test_objective_matches_brute_force():
    X, C = sample_tasks(3, 40, 3, 5, generator=1, dtype=torch.float64)
    torch.testing.assert_close(kmeans_objective(X, C), _brute_objective(X, C), rtol=1e-12, atol=1e-12)


def test_step_moves_centers_to_means_of_assigned_points():
    X, C = sample_tasks(2, 50, 2, 4, generator=2, dtype=torch.float64)
    a = assign(X, C)
    new = lloyd_step(X, C)
    for b in range(2):
        for j in range(4):
            pts = X[b][a[b] == j]
            if len(pts):
                torch.testing.assert_close(new[b, j], pts.mean(0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n,d,k", [(50, 2, 3), (200, 5, 8), (120, 1, 6), (300, 16, 10)])
@pytest.mark.parametrize("steps", [1, 2, 5, 10])
def test_matches_scikit_learn_lloyd(n, d, k, steps):
    X, C = sample_tasks(12, n, d, k, generator=n + d + k, dtype=torch.float64)
    ours = lloyd(X, C, steps=steps)
    empty = has_empty_cluster(X, C, steps)
    checked = 0
    for b in torch.nonzero(~empty).flatten().tolist():
        km = KMeans(n_clusters=k, init=C[b].numpy(), n_init=1, max_iter=steps, tol=0, algorithm="lloyd")
        km.fit(X[b].numpy())
        np.testing.assert_allclose(ours[b].numpy(), km.cluster_centers_, rtol=1e-10, atol=1e-12)
        checked += 1
    assert checked >= 6


def test_objective_never_increases():
    X, C = sample_tasks(16, 200, 4, 7, generator=5, dtype=torch.float64)
    traj = lloyd_trajectory(X, C, steps=15)
    obj = torch.stack([kmeans_objective(X, c) for c in traj.centers])  # (T+1, B)
    assert (obj[1:] <= obj[:-1] * (1 + 1e-12)).all()


def test_trajectory_shapes_and_counts():
    X, C = sample_tasks(3, 30, 2, 4, generator=3)
    traj = lloyd_trajectory(X, C, steps=4)
    assert traj.centers.shape == (5, 3, 4, 2)
    assert traj.assignments.shape == (4, 3, 30)
    assert traj.counts.shape == (4, 3, 4)
    assert torch.equal(traj.counts.sum(-1), torch.full((4, 3), 30.0))
    assert torch.equal(traj.centers[0], C)
    assert torch.equal(traj.centers[-1], lloyd(X, C, steps=4))


def _task_with_empty_cluster():
    # center 2 sits far away and attracts no point
    X = torch.tensor([[[0.0], [0.1], [0.9], [1.0]]], dtype=torch.float64)
    C = torch.tensor([[[0.0], [1.0], [5.0]]], dtype=torch.float64)
    return X, C


def test_empty_cluster_policy_keep_and_error():
    X, C = _task_with_empty_cluster()
    assert has_empty_cluster(X, C, 1).tolist() == [True]
    new = lloyd_step(X, C, empty="keep")
    assert new.flatten().tolist() == pytest.approx([0.05, 0.95, 5.0])
    with pytest.raises(ValueError, match="empty cluster"):
        lloyd_step(X, C, empty="error")
    with pytest.raises(ValueError, match="empty"):
        lloyd(X, C, empty="relocate")


def test_ties_go_to_the_lowest_index():
    X = torch.tensor([[[0.5], [0.0], [1.0]]], dtype=torch.float64)
    C = torch.tensor([[[0.0], [1.0]]], dtype=torch.float64)
    assert assign(X, C).tolist() == [[0, 0, 1]]


def test_the_empty_policy_is_read_in_any_case():
    X = torch.tensor([[[0.0], [1.0], [9.0], [10.0]]])
    C = torch.tensor([[[0.0], [1.0], [20.0]]])  # the center at 20 attracts no point
    for empty in ("error", "ERROR", "Error"):
        with pytest.raises(ValueError, match="empty cluster in tasks"):
            lloyd_trajectory(X, C, 1, empty=empty)
        with pytest.raises(ValueError, match="empty cluster in tasks"):
            lloyd(X, C, 1, empty=empty)
    assert torch.equal(lloyd_trajectory(X, C, 2, empty="KEEP").centers, lloyd_trajectory(X, C, 2).centers)
