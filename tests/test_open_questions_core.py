"""The core features behind Part III (Appendix A's open questions): Gray codes, padding to a wider
layer, unrolled and annealed training, inference-time temperature schedules, the trimmed loss."""

import dataclasses
import math

import pytest
import torch

from kmtrf_core import ClusterTransformer, binary_codes, cluster_codes, kmeans_objective, lloyd, sample_tasks
from kmtrf_core.evaluate import center_trajectory, loss_trajectory, relative_loss
from kmtrf_core.lipschitz import center_norm_sq
from kmtrf_core.lloyd import lloyd_trajectory
from kmtrf_core.objectives import smoothed_kmeans_loss, smoothed_point_losses
from kmtrf_core.padding import pad_tasks, padded_trajectory
from kmtrf_core.training import TrainConfig, train, train_cached
from kmtrf_core.training.config import layer_for
from kmtrf_core.training.runs import cache_key

TINY = dict(d=2, k=3, n=24, steps=6, batch=4, val_tasks=6, val_every=3)


# --- Gray codes --------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 3, 5, 6, 8, 13, 16, 33])
def test_gray_codes_are_distinct_binary_rows_one_bit_apart(k):
    codes = cluster_codes(k, "gc", dtype=torch.float64)
    assert codes.shape == binary_codes(k).shape
    assert torch.unique(codes, dim=0).shape[0] == k
    assert set(codes.unique().tolist()) <= {0.0, 1.0}
    neighbours = (codes[1:] - codes[:-1]).abs().sum(dim=1)
    assert torch.all(neighbours == 1)  # the defining property of a Gray code


def test_gray_codes_of_a_power_of_two_are_binary_codes_reordered():
    gray, plain = cluster_codes(8, "gc"), binary_codes(8)
    assert sorted(map(tuple, gray.tolist())) == sorted(map(tuple, plain.tolist()))
    assert not torch.equal(gray, plain)


@pytest.mark.parametrize("k", [2, 5, 6, 13])
def test_the_construction_with_gray_codes_is_lloyd(k):
    X = torch.rand(4, 60, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(k))
    C = X[:, :k].clone()
    model = ClusterTransformer.from_lloyd(3, k, "gc")
    assert torch.allclose(model(X, C, steps=3), lloyd(X, C, steps=3), rtol=0, atol=1e-12)


def test_center_norm_of_gray_codes():
    assert center_norm_sq(4, 6, "gc") == center_norm_sq(4, 6, "bn") == 7
    assert center_norm_sq(4, 6, "gc", exact=True) == 4 + 3  # gray(5) = 0b111


# --- padding a task to a wider layer -------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["oh", "bn", "gc", "sc"])
@pytest.mark.parametrize("d,k", [(2, 3), (4, 4), (1, 2)])
def test_far_filler_centers_keep_the_constructed_layer_exactly_lloyd(scheme, d, k):
    X, C = sample_tasks(8, 40, d, k, generator=1, dtype=torch.float64)
    traj = padded_trajectory(ClusterTransformer.from_lloyd(5, 8, scheme), X, C, steps=4)
    assert torch.allclose(traj, lloyd_trajectory(X, C, 4).centers, rtol=0, atol=1e-10)


def test_copied_centers_keep_one_hot_exact_but_not_binary():
    X, C = sample_tasks(16, 40, 2, 3, generator=0, dtype=torch.float64)
    reference = lloyd_trajectory(X, C, 3).centers
    oh = padded_trajectory(ClusterTransformer.from_lloyd(4, 8, "oh"), X, C, steps=3, fill="copy")
    bn = padded_trajectory(ClusterTransformer.from_lloyd(4, 8, "bn"), X, C, steps=3, fill="copy")
    assert torch.allclose(oh, reference, atol=1e-10)
    assert not torch.allclose(bn, reference, atol=1e-6)


def test_padding_keeps_distances_and_puts_fillers_beyond_every_point():
    X, C = sample_tasks(5, 30, 2, 3, generator=2, dtype=torch.float64)
    Xp, Cp = pad_tasks(X, C, d=6, k=7)
    assert torch.equal(Xp[..., :2], X) and torch.all(Xp[..., 2:] == 0)
    assert torch.equal(Cp[:, :3, :2], C)
    d_real = torch.cdist(Xp, Cp[:, :3]).min(dim=-1).values
    d_fill = torch.cdist(Xp, Cp[:, 3:]).min(dim=-1).values
    assert torch.all(d_fill > d_real)


def test_a_learned_ensemble_runs_on_padded_tasks():
    X, C = sample_tasks(6, 20, 2, 3, generator=3)
    model = ClusterTransformer(4, 5, "bn", ensemble=2, generator=torch.Generator().manual_seed(0))
    traj = padded_trajectory(model, X, C, steps=2)
    assert traj.shape == (3, 2, 6, 3, 2) and torch.isfinite(traj).all()
    members = model.members()
    assert torch.allclose(traj[:, 1], padded_trajectory(members[1], X, C, steps=2), atol=1e-6)


@pytest.mark.parametrize("kwargs,word", [(dict(d=1), "d=1"), (dict(k=2), "k=2"), (dict(k=50), "k=50"),
                                         (dict(fill="zeros"), "fill")])
def test_padding_refuses_shrinking_or_impossible_sizes(kwargs, word):
    X, C = sample_tasks(2, 30, 2, 3, generator=0)
    with pytest.raises(ValueError, match=word):
        pad_tasks(X, C, **kwargs)


# --- temperatures at inference -------------------------------------------------------------------

def test_a_constant_gamma_schedule_is_the_layer_itself_and_the_layer_keeps_its_gamma():
    X, C = sample_tasks(4, 30, 2, 3, generator=0)
    model = ClusterTransformer(2, 3, "bn", gamma=2.0, generator=torch.Generator().manual_seed(0))
    plain = center_trajectory(model, X, C, steps=3)
    assert torch.equal(center_trajectory(model, X, C, steps=3, gammas=[2.0, 2.0, 2.0]), plain)
    other = center_trajectory(model, X, C, steps=3, gammas=[1.0, 4.0, 16.0])
    assert not torch.allclose(other, plain) and model.gamma == 2.0
    assert torch.equal(other[1], center_trajectory(model, X, C, steps=1, gammas=[1.0])[1])


def test_an_infinite_final_temperature_makes_the_construction_lloyd_at_that_step():
    X, C = sample_tasks(4, 30, 2, 3, generator=0, dtype=torch.float64)
    model = ClusterTransformer.from_lloyd(2, 3, "bn", gamma=1.0)
    losses = loss_trajectory(model, X, C, steps=1, gammas=[math.inf])
    assert torch.allclose(losses[1], kmeans_objective(X, lloyd(X, C)))


@pytest.mark.parametrize("gammas,word", [([1.0], "one temperature per step"), (["a", 1.0], "sequence"),
                                         ([1.0, -1.0], "gammas"), ([1.0, 1e30], "at most")])
def test_bad_gamma_schedules_are_named(gammas, word):
    X, C = sample_tasks(2, 20, 2, 3, generator=0)
    with pytest.raises(ValueError, match=word):
        center_trajectory(ClusterTransformer(2, 3), X, C, steps=2, gammas=gammas)


def test_relative_loss_over_several_steps_compares_with_as_many_lloyd_steps():
    X, C = sample_tasks(4, 30, 2, 3, generator=0, dtype=torch.float64)
    model = ClusterTransformer.from_lloyd(2, 3, "bn")
    assert torch.allclose(relative_loss(model, X, C, steps=4), torch.ones(4, dtype=torch.float64))
    learned = ClusterTransformer(2, 3, "bn", dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    by_hand = kmeans_objective(X, learned(X, learned(X, C))) / kmeans_objective(X, lloyd(X, C, steps=2))
    assert torch.allclose(relative_loss(learned, X, C, steps=2), by_hand)


# --- the trimmed loss ----------------------------------------------------------------------------

def test_the_trimmed_loss_leaves_out_the_largest_point_losses():
    X, C = sample_tasks(3, 20, 2, 3, generator=0, dtype=torch.float64)
    points = smoothed_point_losses(X, C, "l2", 0.1)
    trimmed = smoothed_kmeans_loss(X, C, "l2", 0.1, trim=0.1)
    assert torch.allclose(trimmed, points.sort(dim=-1).values[:, :18].sum(dim=-1))
    assert torch.equal(smoothed_kmeans_loss(X, C, "l2", 0.1, trim=0.04), smoothed_kmeans_loss(X, C, "l2", 0.1))


def test_a_far_outlier_moves_the_trimmed_loss_gradient_no_more_than_an_inlier_does():
    X, C = sample_tasks(1, 20, 2, 3, generator=0, dtype=torch.float64)
    X = X.clone()
    X[0, 0] = 1e3  # an outlier, as Cauchy tasks produce
    C = C.clone().requires_grad_(True)
    smoothed_kmeans_loss(X, C, "l2", 0.1, trim=0.1).sum().backward()
    assert C.grad.abs().max() < 10  # the plain loss's gradient is of the order of the outlier's distance
    C.grad = None
    smoothed_kmeans_loss(X, C, "l2", 0.1).sum().backward()
    assert C.grad.abs().max() > 100


@pytest.mark.parametrize("trim", [1.0, 1.5, -0.1, math.nan])
def test_bad_trim_is_named(trim):
    X, C = sample_tasks(1, 20, 2, 3, generator=0)
    with pytest.raises(ValueError, match="trim"):
        smoothed_kmeans_loss(X, C, trim=trim)
    with pytest.raises(ValueError, match="trim"):
        TrainConfig(**TINY, trim=trim)


# --- training: unrolled, annealed, trimmed -------------------------------------------------------

def test_unrolled_training_validates_against_as_many_lloyd_steps():
    config = TrainConfig(**TINY, unroll=3, seeds=(0, 1))
    model, history = train(config)
    X_val, C_val = __import__("kmtrf_core.training", fromlist=["validation_tasks"]).validation_tasks(config)
    last = history[history.step == history.step.max()].val_relative_loss.to_numpy()
    assert torch.allclose(relative_loss(model, X_val, C_val, steps=3).mean(dim=1).double(),
                          torch.tensor(last), rtol=1e-5)


def test_the_two_unrolled_losses_train_differently_and_one_step_is_the_paper():
    base = TrainConfig(**TINY)
    assert torch.equal(train(dataclasses.replace(base, unroll_loss="sum"))[0].Q, train(base)[0].Q)
    last = train(dataclasses.replace(base, unroll=2))[0]
    summed = train(dataclasses.replace(base, unroll=2, unroll_loss="sum"))[0]
    assert not torch.allclose(last.Q, summed.Q)


def test_annealing_follows_the_schedule_and_the_layer_keeps_the_final_temperature(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    config = TrainConfig(**TINY, gamma_end=4.0, tau_end=0.01)
    assert config.schedule(0) == (1.0, 0.1)
    assert config.schedule(config.steps)[0] == pytest.approx(4.0)
    assert config.schedule(config.steps)[1] == pytest.approx(0.01)
    model, _ = train(config)
    cached, _ = train_cached(config)
    assert model.gamma == cached.gamma == 4.0
    assert torch.equal(cached.Q, model.Q)
    fixed, _ = train(TrainConfig(**TINY))
    assert not torch.allclose(fixed.Q, model.Q)


def test_annealing_reaches_its_end_by_min_steps_when_the_run_may_stop_on_flatness():
    config = TrainConfig(**dict(TINY, steps=100), until_flat=0.02, min_steps=40, gamma_end=8.0)
    assert config.schedule(40)[0] == pytest.approx(8.0) and config.schedule(90)[0] == pytest.approx(8.0)


def test_trimmed_training_runs_and_differs_from_the_paper_loss():
    base = TrainConfig(**TINY, family="cauchy")
    assert not torch.allclose(train(dataclasses.replace(base, trim=0.2))[0].Q, train(base)[0].Q)


def test_the_new_fields_enter_the_cache_key_and_the_layer():
    base = TrainConfig(**TINY)
    keys = {cache_key(dataclasses.replace(base, **change)) for change in
            [{}, {"unroll": 2}, {"unroll": 2, "unroll_loss": "sum"}, {"gamma_end": 2.0}, {"tau_end": 0.05},
             {"trim": 0.1}, {"scheme": "gc"}]}
    assert len(keys) == 7
    assert layer_for(dataclasses.replace(base, scheme="gc")).scheme == "gc"


@pytest.mark.parametrize("change,field", [({"unroll": 0}, "unroll"), ({"unroll_loss": "mean"}, "unroll_loss"),
                                          ({"gamma_end": 0.0}, "gamma_end"), ({"tau_end": -1.0}, "tau_end"),
                                          ({"ffn": -1}, "ffn")])
def test_bad_new_fields_are_named(change, field):
    with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
        TrainConfig(**TINY, **change)
