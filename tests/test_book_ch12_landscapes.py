"""Chapter 12's readings of a loss surface (Fig. 3): local_minima, surface_shape, origin_scaled_correlation."""

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.book.ch12_landscapes import layer_table, local_minima, origin_scaled_correlation, surface_shape
from kmtrf_core.book.groups import RunGroup
from kmtrf_core.landscape import Landscape, loss_surface
from kmtrf_core.training import TrainConfig


def _local_minima_loop(Z):
    """The chapter's original cell-by-cell count, as the reference."""
    padded = np.pad(Z, 1, constant_values=np.inf)
    count = 0
    for i in range(Z.shape[0]):
        for j in range(Z.shape[1]):
            window = padded[i : i + 3, j : j + 3].copy()
            centre = window[1, 1]
            window[1, 1] = np.inf
            count += int(centre < window.min())
    return count


def _surface(Z, alphas=None, betas=None):
    Z = np.asarray(Z, dtype=np.float64)
    alphas = np.linspace(-1, 1, Z.shape[0]) if alphas is None else np.asarray(alphas, float)
    betas = np.linspace(-1, 1, Z.shape[1]) if betas is None else np.asarray(betas, float)
    return Landscape(alphas, betas, Z, Z.copy(), ({}, {}), "l2", 0.1)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 7), st.integers(1, 7)),
              elements=st.sampled_from([0.0, 1.0, 2.0, 3.0, np.nan])
              | st.floats(-10, 10, allow_nan=False)))
def test_local_minima_matches_the_cell_by_cell_count(Z):
    assert local_minima(Z) == _local_minima_loop(Z)


def test_local_minima_on_known_grids():
    grid = np.linspace(-1, 1, 9)
    bowl = np.add.outer(grid ** 2, grid ** 2)
    assert local_minima(bowl) == 1
    assert local_minima(-bowl) == 4  # the four corners
    assert local_minima(np.ones((4, 4))) == 0  # ties are not strict minima
    two = bowl.copy()
    two[1, 1] = -1.0
    assert local_minima(two) == 2
    assert local_minima([[3.0]]) == 1  # a single cell has no neighbours
    checker = np.indices((6, 6)).sum(axis=0) % 2  # every 0 cell has 0 diagonal neighbours
    assert local_minima(checker) == 0


@pytest.mark.parametrize("bad", [np.zeros(3), np.zeros((0, 3)), np.zeros((2, 2, 2))])
def test_local_minima_wants_a_2d_grid(bad):
    with pytest.raises(ValueError, match="2-D"):
        local_minima(bad)


def test_surface_shape_reads_the_origin_the_rim_and_the_minimum():
    grid = np.linspace(-1.0, 1.0, 5)
    Z = 2.0 + np.add.outer((grid - 0.5) ** 2, grid ** 2)  # minimum at alpha = 0.5, beta = 0
    shape = surface_shape(_surface(Z, grid, grid))
    assert shape["loss_at_origin"] == Z[2, 2] == 2.25
    assert shape["local_minima"] == 1
    assert shape["argmin_distance"] == pytest.approx(0.5)
    rim = np.concatenate([Z[0], Z[-1], Z[1:-1, 0], Z[1:-1, -1]])
    assert rim.size == 16
    assert shape["sharpness"] == pytest.approx(np.mean((rim - 2.25) / 2.25))
    # scale-free: multiplying the loss changes only the value at the origin
    scaled = surface_shape(_surface(10 * Z, grid, grid))
    assert scaled["sharpness"] == pytest.approx(shape["sharpness"])
    assert scaled["loss_at_origin"] == pytest.approx(22.5)


def test_surface_shape_uses_the_grid_point_nearest_the_origin():
    Z = np.arange(12.0).reshape(3, 4) + 1.0
    shape = surface_shape(_surface(Z, [-2.0, 0.1, 2.0], [-3.0, -1.0, 0.2, 3.0]))
    assert shape["loss_at_origin"] == Z[1, 2]
    assert shape["argmin_distance"] == pytest.approx(np.hypot(-2.0, -3.0))


def test_origin_scaled_correlation():
    grid = np.linspace(-1.0, 1.0, 7)
    bowl = 1.0 + np.add.outer(grid ** 2, grid ** 2)
    tilted = bowl + 0.3 * grid[:, None]
    assert origin_scaled_correlation(_surface(bowl), _surface(4 * bowl)) == pytest.approx(1.0)
    assert origin_scaled_correlation(_surface(bowl), _surface(-bowl + 10)) == pytest.approx(-1.0)
    value = origin_scaled_correlation(_surface(bowl), _surface(tilted))
    assert value == pytest.approx(np.corrcoef((bowl / bowl[3, 3]).ravel(),
                                              (tilted / tilted[3, 3]).ravel())[0, 1])
    assert value == pytest.approx(origin_scaled_correlation(_surface(tilted), _surface(bowl)))
    with pytest.raises(ValueError, match="different grids"):
        origin_scaled_correlation(_surface(bowl), _surface(bowl[:5, :5]))


def test_readings_of_a_real_surface():
    model = ClusterTransformer(2, 3, "bn", generator=torch.Generator().manual_seed(0))
    X, C = sample_tasks(4, 16, 2, 3, generator=1)
    grid = np.linspace(-1.0, 1.0, 5)
    surface = loss_surface(model, X, C, grid, grid, generator=2)
    shape = surface_shape(surface)
    assert shape["loss_at_origin"] == pytest.approx(surface.at(0.0, 0.0)["smoothed"])
    assert shape["local_minima"] == _local_minima_loop(surface.smoothed) >= 1
    assert origin_scaled_correlation(surface, surface) == pytest.approx(1.0)


def _tasks_surface(per_task):
    """A Landscape on a 5x5 grid from per-task losses ``(5, 5, B)``."""
    grid = np.linspace(-1, 1, 5)
    mean = per_task.mean(axis=-1)
    return Landscape(grid, grid, mean, mean.copy(), ({}, {}), "l2", 0.1, per_task, per_task.copy())


def test_sharpness_factor_draws_agree_with_the_point_readings():
    from kmtrf_core.book.ch12_landscapes import sharpness_factor_draws

    rng = np.random.default_rng(0)
    grid = np.linspace(-1, 1, 5)
    bowl = 1.0 + np.add.outer(grid ** 2, grid ** 2)
    tasks = 1.0 + 0.05 * rng.standard_normal(64)
    flat, steep = _tasks_surface(bowl[..., None] * tasks), _tasks_surface((1 + 3 * (bowl - 1))[..., None] * tasks)
    draws = sharpness_factor_draws(flat, steep, resamples=400)
    point = surface_shape(steep)["sharpness"] / surface_shape(flat)["sharpness"]
    assert draws.shape == (400,) and point == pytest.approx(3.0)
    assert np.percentile(draws, 2.5) <= point <= np.percentile(draws, 97.5)
    with pytest.raises(ValueError, match="per-task"):
        sharpness_factor_draws(_surface(bowl), steep)
    with pytest.raises(ValueError, match="share"):
        sharpness_factor_draws(flat, _tasks_surface(bowl[..., None] * tasks[:10]))


def test_real_surfaces_keep_their_per_task_losses():
    from kmtrf_core.book.ch12_landscapes import sharpness_factor_draws

    X, C = sample_tasks(6, 16, 2, 3, generator=1)
    grid = np.linspace(-1.0, 1.0, 5)
    surfaces = [loss_surface(ClusterTransformer(2, 3, scheme, generator=torch.Generator().manual_seed(0)),
                             X, C, grid, grid, generator=2) for scheme in ("oh", "bn")]
    for surface in surfaces:
        assert surface.smoothed_tasks.shape == (5, 5, 6)
        assert np.allclose(surface.smoothed_tasks.mean(axis=-1), surface.smoothed, rtol=1e-6)
    assert np.isfinite(sharpness_factor_draws(*surfaces, resamples=20)).all()


def test_the_landscape_verdict_on_the_interval_of_the_factors():
    import pandas as pd

    from kmtrf_core.book.ch12_landscapes import landscape_finding

    shape = pd.DataFrame({"local_minima": [1, 1, 1, 1], "argmin_distance": [0.0] * 4})
    compare = pd.DataFrame({"d": [4, 32], "sharpness_factor": [3.0, 1.5], "correlation": [0.9, 0.99]})
    rng = np.random.default_rng(1)
    apart = {4: 3.0 + 0.1 * rng.standard_normal(500), 32: 1.5 + 0.1 * rng.standard_normal(500)}
    assert landscape_finding(shape, compare, apart).verdict == "reproduced"
    overlapping = {4: 3.0 + 2.0 * rng.standard_normal(500), 32: 1.5 + 2.0 * rng.standard_normal(500)}
    found = landscape_finding(shape, compare, overlapping)
    assert found.verdict == "partly" and "interval" in found.value  # unimodal holds, the factor cannot tell
    reversed_ = {4: apart[32], 32: apart[4]}
    assert landscape_finding(shape, compare, reversed_).verdict == "partly"


def _layer_runs(curves):
    config = TrainConfig(d=2, k=3, n=16, steps=5000, until_flat=0.02, patience=200, val_every=100)
    group = RunGroup("demo", config, {"d": [2], "scheme": ["oh", "bn"]}, "12", "a test")
    runs = {}
    for scheme, values in curves.items():
        history = pd.DataFrame({"step": np.repeat(np.arange(len(values[0])) * 100, len(values)),
                                "seed": np.tile(np.arange(len(values)), len(values[0])),
                                "val_relative_loss": np.ravel(np.transpose(values))})
        runs[(2, scheme)] = {"model": ClusterTransformer(2, 3, scheme), "history": history}
    return group, runs


def test_layer_table_shows_the_value_the_stop_rule_read():
    # OH: stopped by the rule with its last validation above 1; BN: on the plateau to the cap
    flat = [1.7, 0.95, 0.97, 0.96, 0.97, 0.98, 0.98, 1.001]
    group, runs = _layer_runs({"oh": [flat], "bn": [[1.7] * 51]})
    table = layer_table(group, runs)
    assert table.columns.tolist() == ["d", "scheme", "d_emb", "parameters", "steps", "stopped",
                                      "final_val_relative", "stop_val_relative"]
    oh, bn = table.iloc[0], table.iloc[1]
    assert (oh.scheme, oh.steps, oh.stopped) == ("OH", 700, "beat Lloyd, flat")
    assert oh.final_val_relative == pytest.approx(1.001) and oh.final_val_relative >= 1
    assert oh.stop_val_relative == pytest.approx(round((0.98 + 0.98 + 1.001) / 3, 3)) and oh.stop_val_relative < 1
    assert (bn.stopped, bn.steps, bn.final_val_relative, bn.stop_val_relative) == ("cap", 5000, 1.7, 1.7)
    assert (oh.d_emb, oh.parameters) == (runs[(2, "oh")]["model"].d_emb, runs[(2, "oh")]["model"].num_parameters())


def test_layer_table_reads_the_median_over_seeds():
    group, runs = _layer_runs({"bn": [[1.7, 1.2, 0.9], [1.9, 1.4, 1.1], [1.5, 1.0, 0.7]]})
    row = layer_table(group, {(2, "bn"): runs[(2, "bn")]}).iloc[0]
    assert row.final_val_relative == pytest.approx(0.9)  # median of 0.9, 1.1, 0.7
    assert row.stop_val_relative == pytest.approx(round((1.7 + 1.2 + 0.9) / 3, 3))


def test_layer_table_rejects_bad_runs():
    group, runs = _layer_runs({"oh": [[1.7, 1.2]]})
    with pytest.raises(ValueError, match="runs"):
        layer_table(group, {})
    with pytest.raises(ValueError, match="runs"):
        layer_table(group, {(2, "oh"): {"model": runs[(2, "oh")]["model"]}})
    with pytest.raises(ValueError, match="runs"):
        layer_table(group, {"oh": runs[(2, "oh")]})
