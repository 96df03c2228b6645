"""Loss surfaces through the trained weights (Fig. 3) and their gaps (Fig. 5): kmtrf_core.landscape."""

import copy
import math

import numpy as np
import pytest
import torch

from kmtrf_core import ClusterTransformer, kmeans_objective, sample_tasks, smoothed_kmeans_loss
from kmtrf_core.landscape import Landscape, filter_normalized_direction, loss_surface
from kmtrf_core.training import TrainConfig, train

NAMES = ("Q", "K", "V")


def _model(d=2, k=3, scheme="bn", seed=0, dtype=torch.float64):
    return ClusterTransformer(d, k, scheme, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def trained():
    model, _ = train(TrainConfig(d=2, k=3, n=16, steps=3, batch=2, val_tasks=2, val_every=3, impl="direct"))
    return model


@pytest.fixture(scope="module")
def tasks():
    return sample_tasks(4, 16, 2, 3, generator=0, dtype=torch.float64)


def _assert_filter_normalized(direction, model, rtol):
    assert set(direction) == set(NAMES)
    for name in NAMES:
        weight = getattr(model, name).detach()
        assert direction[name].shape == weight.shape == (4, model.d_emb, model.d_emb)
        assert direction[name].dtype == weight.dtype and direction[name].device == weight.device
        assert bool(torch.isfinite(direction[name]).all())
        torch.testing.assert_close(direction[name].norm(dim=-1), weight.norm(dim=-1), rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("scheme", ["oh", "bn", "na"])
def test_filters_have_the_norms_of_the_weights(scheme):
    model = _model(3, 4, scheme, seed=1)
    direction = filter_normalized_direction(model, generator=2)
    _assert_filter_normalized(direction, model, rtol=1e-12)
    # a random direction, not a rescaled copy of the weights
    assert not torch.allclose(direction["Q"], model.Q.detach())


def test_filters_of_a_trained_model(trained):
    direction = filter_normalized_direction(trained, generator=0)
    _assert_filter_normalized(direction, trained, rtol=1e-5)


def test_zero_filter_gives_a_zero_direction_row():
    model = _model(2, 3, "bn", seed=2)
    with torch.no_grad():
        model.Q[1, 2].zero_()  # one filter
        model.V[3].zero_()  # a whole projection
    direction = filter_normalized_direction(model, generator=0)
    assert not bool(torch.isnan(direction["Q"]).any()) and not bool(torch.isnan(direction["V"]).any())
    assert torch.equal(direction["Q"][1, 2], torch.zeros(model.d_emb, dtype=torch.float64))
    assert torch.equal(direction["V"][3], torch.zeros(model.d_emb, model.d_emb, dtype=torch.float64))
    _assert_filter_normalized(direction, model, rtol=1e-12)
    assert bool((direction["Q"][1, :2].norm(dim=-1) > 0).all())  # the other filters are untouched


def test_directions_are_reproducible():
    model = _model(seed=3)
    a = filter_normalized_direction(model, generator=5)
    b = filter_normalized_direction(model, generator=5)
    c = filter_normalized_direction(model, generator=6)
    assert all(torch.equal(a[name], b[name]) for name in NAMES)
    assert not torch.equal(a["K"], c["K"])


@pytest.mark.parametrize("omega", ["l2", "ne"])
def test_origin_is_the_models_own_loss(tasks, omega):
    X, C = tasks
    model = _model(seed=4)
    surface = loss_surface(model, X, C, [-0.5, 0.0, 0.5], [0.0, 1.0], omega=omega, tau=0.2, generator=0)
    with torch.no_grad():
        out = model(X, C)
        smooth = smoothed_kmeans_loss(X, out, omega, 0.2).mean().item()
        hard = kmeans_objective(X, out).mean().item()
    assert surface.smoothed.shape == surface.kmeans.shape == (3, 2)
    assert surface.smoothed[1, 0] == pytest.approx(smooth, rel=1e-10)
    assert surface.kmeans[1, 0] == pytest.approx(hard, rel=1e-10)
    assert surface.at(0.0, 0.0) == pytest.approx({"smoothed": smooth, "kmeans": hard, "gap": smooth - hard},
                                                 rel=1e-9, abs=1e-12)
    assert surface.omega == omega and surface.tau == 0.2
    np.testing.assert_array_equal(surface.alphas, [-0.5, 0.0, 0.5])
    np.testing.assert_array_equal(surface.betas, [0.0, 1.0])


def _manual_surface(model, X, C, alphas, betas, directions, omega, tau):
    smooth = np.zeros((len(alphas), len(betas)))
    hard = np.zeros_like(smooth)
    single = copy.deepcopy(model)
    for i, a in enumerate(alphas):
        for j, b in enumerate(betas):
            with torch.no_grad():
                for name in NAMES:
                    theta = getattr(model, name).detach()
                    getattr(single, name).copy_(theta + a * directions[0][name] + b * directions[1][name])
                out = single(X, C)
                smooth[i, j] = smoothed_kmeans_loss(X, out, omega, tau).mean().item()
                hard[i, j] = kmeans_objective(X, out).mean().item()
    return smooth, hard


@pytest.mark.parametrize("omega", ["l2", "ne"])
def test_batched_equals_point_by_point_and_a_manual_loop(tasks, omega):
    X, C = tasks
    model = _model(seed=5)
    alphas, betas = [-1.0, 0.25, 0.5], [-0.5, 0.75]  # not square: catches a transposed grid
    batched = loss_surface(model, X, C, alphas, betas, omega=omega, generator=1)
    one_by_one = loss_surface(model, X, C, alphas, betas, omega=omega, generator=1, batch_points=1)
    uneven = loss_surface(model, X, C, alphas, betas, omega=omega, generator=1, batch_points=4)
    for other in (one_by_one, uneven):
        np.testing.assert_allclose(other.smoothed, batched.smoothed, rtol=1e-10)
        np.testing.assert_allclose(other.kmeans, batched.kmeans, rtol=1e-10)
    smooth, hard = _manual_surface(model, X, C, alphas, betas, batched.directions, omega, 0.1)
    np.testing.assert_allclose(batched.smoothed, smooth, rtol=1e-10)
    np.testing.assert_allclose(batched.kmeans, hard, rtol=1e-10)
    assert not np.allclose(smooth, smooth[0, 0])  # the surface is not flat


def test_a_layer_with_a_feedforward_block_keeps_its_block_across_the_plane(tasks):
    # the plane moves Q, K, V; the block's F1, b1, F2, b2 are the model's at every grid point
    # (loading them into the ensemble was a size-mismatch RuntimeError)
    X, C = tasks
    model = ClusterTransformer(2, 3, "bn", ffn=4, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    alphas, betas = [-0.5, 0.0, 0.5], [0.0, 1.0]
    surface = loss_surface(model, X, C, alphas, betas, generator=2)
    with torch.no_grad():
        out = model(X, C)
    assert surface.smoothed[1, 0] == pytest.approx(smoothed_kmeans_loss(X, out, "l2", 0.1).mean().item(), rel=1e-10)
    smooth, hard = _manual_surface(model, X, C, alphas, betas, surface.directions, "l2", 0.1)
    np.testing.assert_allclose(surface.smoothed, smooth, rtol=1e-10)
    np.testing.assert_allclose(surface.kmeans, hard, rtol=1e-10)
    one_by_one = loss_surface(model, X, C, alphas, betas, generator=2, batch_points=1)
    np.testing.assert_allclose(one_by_one.smoothed, surface.smoothed, rtol=1e-10)


def test_float32_trained_model_surface(trained):
    X, C = sample_tasks(4, 16, 2, 3, generator=1)
    surface = loss_surface(trained, X, C, [-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0], generator=2)
    smooth, hard = _manual_surface(trained, X, C, surface.alphas, surface.betas, surface.directions, "l2", 0.1)
    np.testing.assert_allclose(surface.smoothed, smooth, rtol=1e-4)
    np.testing.assert_allclose(surface.kmeans, hard, rtol=1e-4)
    assert surface.directions[0]["Q"].dtype == torch.float32


@pytest.mark.parametrize("omega,tau", [("l2", 0.1), ("ne", 0.1), ("ne", 1.0)])
def test_gap_is_non_negative(tasks, omega, tau):
    X, C = tasks
    grid = np.linspace(-2.0, 2.0, 5)
    surface = loss_surface(_model(seed=6), X, C, grid, grid, omega=omega, tau=tau, generator=3)
    np.testing.assert_array_equal(surface.gap, surface.smoothed - surface.kmeans)
    assert bool((surface.gap >= -1e-10 * np.abs(surface.kmeans).max()).all())
    assert bool(np.isfinite(surface.smoothed).all() and np.isfinite(surface.kmeans).all())


def test_at_picks_the_nearest_grid_point():
    smoothed = np.arange(12.0).reshape(3, 4) + 10.0
    kmeans = np.arange(12.0).reshape(3, 4)
    surface = Landscape(alphas=np.array([-1.0, 0.0, 1.0]), betas=np.array([-3.0, -1.0, 1.0, 3.0]),
                        smoothed=smoothed, kmeans=kmeans, directions=(), omega="l2", tau=0.1)
    assert surface.at(0.4, -1.9) == {"smoothed": 15.0, "kmeans": 5.0, "gap": 10.0}  # (0, -1)
    assert surface.at(-7.0, 100.0) == {"smoothed": 13.0, "kmeans": 3.0, "gap": 10.0}  # clamps to the corner
    assert surface.at(0.9, 0.8)["kmeans"] == kmeans[2, 2]


def test_same_seed_same_directions_and_explicit_directions(tasks):
    X, C = tasks
    model = _model(seed=7)
    grid = [-1.0, 0.0, 1.0]
    a = loss_surface(model, X, C, grid, grid, generator=7)
    b = loss_surface(model, X, C, grid, grid, generator=7)
    c = loss_surface(model, X, C, grid, grid, generator=8)
    assert all(torch.equal(a.directions[i][n], b.directions[i][n]) for i in (0, 1) for n in NAMES)
    np.testing.assert_array_equal(a.smoothed, b.smoothed)
    assert not torch.equal(a.directions[0]["Q"], c.directions[0]["Q"])
    # the default is two successive draws from one generator
    gen = torch.Generator().manual_seed(7)
    first, second = filter_normalized_direction(model, gen), filter_normalized_direction(model, gen)
    assert all(torch.equal(a.directions[0][n], first[n]) and torch.equal(a.directions[1][n], second[n]) for n in NAMES)
    # explicit directions are used as given (and ignore the generator)
    again = loss_surface(model, X, C, grid, grid, directions=(first, second), generator=123)
    np.testing.assert_allclose(again.smoothed, a.smoothed, rtol=1e-12)
    assert all(torch.equal(again.directions[0][n], first[n]) for n in NAMES)
    zero = {n: torch.zeros_like(first[n]) for n in NAMES}
    flat = loss_surface(model, X, C, grid, grid, directions=(zero, zero))
    np.testing.assert_allclose(flat.smoothed, flat.smoothed[1, 1], rtol=1e-12)
    half = loss_surface(model, X, C, grid, grid, directions=(first, zero))
    np.testing.assert_allclose(half.smoothed, half.smoothed[:, :1].repeat(3, axis=1), rtol=1e-12)  # constant in beta
    np.testing.assert_allclose(half.smoothed[:, 1], a.smoothed[:, 1], rtol=1e-10)  # same line beta = 0
    swapped = loss_surface(model, X, C, grid, grid, directions=(second, first))
    np.testing.assert_allclose(swapped.smoothed, a.smoothed.T, rtol=1e-10)


def _bad_calls():
    X, C = sample_tasks(2, 12, 2, 3, generator=0, dtype=torch.float64)
    X3, C3 = sample_tasks(2, 12, 3, 3, generator=0, dtype=torch.float64)
    X4, C4 = sample_tasks(2, 12, 2, 4, generator=0, dtype=torch.float64)
    model = _model(seed=0)
    ens = ClusterTransformer.stack([model, _model(seed=1)])
    good = filter_normalized_direction(model, generator=0)
    grid = [0.0, 1.0]

    def surface(*, m=model, x=X, c=C, alphas=grid, betas=grid, **kw):
        return lambda: loss_surface(m, x, c, alphas, betas, **kw)

    wrong_shape = {**good, "K": torch.zeros(4, 2, 2, dtype=torch.float64)}
    missing = {n: good[n] for n in ("Q", "K")}
    return [
        ("ensemble", surface(m=ens), "single"),
        ("not a model", surface(m="model"), "ClusterTransformer"),
        ("direction of an ensemble", lambda: filter_normalized_direction(ens), "single"),
        ("direction of a non-model", lambda: filter_normalized_direction(object()), "ClusterTransformer"),
        ("wrong d", surface(x=X3, c=C3), "d=2"),
        ("wrong k", surface(x=X4, c=C4), "k=3"),
        ("nan task", surface(x=X * math.nan), "non-finite"),
        ("empty alphas", surface(alphas=[]), "alphas"),
        ("2-D alphas", surface(alphas=[[0.0, 1.0]]), "alphas"),
        ("nan betas", surface(betas=[0.0, math.nan]), "betas"),
        ("inf alphas", surface(alphas=[0.0, math.inf]), "alphas"),
        ("omega", surface(omega="l1"), "omega"),
        ("tau zero", surface(tau=0.0), "tau"),
        ("tau negative", surface(tau=-1.0), "tau"),
        ("batch points", surface(batch_points=0), "batch_points"),
        ("one direction", surface(directions=good), "pair"),
        ("three directions", surface(directions=(good, good, good)), "pair"),
        ("direction not a dict", surface(directions=(good, [1.0])), "direction"),
        ("missing V", surface(directions=(good, missing)), "direction"),
        ("wrong shape", surface(directions=(wrong_shape, good)), "direction"),
        ("not a tensor", surface(directions=(good, {n: good[n].tolist() for n in NAMES})), "direction"),
        ("nan direction", surface(directions=(good, {**good, "V": good["V"] * math.nan})), "direction"),
    ]


@pytest.mark.parametrize("case", _bad_calls(), ids=lambda case: case[0])
def test_bad_input_raises_value_error(case):
    _, call, match = case
    with pytest.raises(ValueError, match=match):
        call()
