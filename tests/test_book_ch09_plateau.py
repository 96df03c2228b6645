"""The plateau study of chapter 9 (kmtrf_core.book.ch09_plateau) and the guard that training leaves the plateau."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.book.ch09_plateau import (READINGS, drop_story, drop_table, layer_readings, plateau_story,
                                          plateau_summary, plateau_trace)
from kmtrf_core.book.uncertainty import seed_range
from kmtrf_core.training import TrainConfig, train
from kmtrf_core.training.convergence import validation_curve


def test_the_exact_layer_reads_as_sharp_and_correct():
    X, C = sample_tasks(8, 40, 3, 4, generator=0)
    readings = layer_readings(ClusterTransformer.from_lloyd(3, 4, "bn", gamma=1e5, dtype=X.dtype), X, C)
    assert set(READINGS) <= set(readings.columns) and len(readings) == 1
    assert readings.nearest_share[0] == pytest.approx(1.0)
    assert readings.point_entropy[0] < 1e-3
    soft = layer_readings(ClusterTransformer.from_lloyd(3, 4, "bn", gamma=1e-3, dtype=X.dtype), X, C)
    assert soft.point_entropy[0] > 0.99 and soft.center_entropy[0] > 0.99


def test_readings_of_an_ensemble_are_per_member():
    X, C = sample_tasks(3, 20, 2, 3, generator=1)
    members = [ClusterTransformer(2, 3, generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    ensemble = layer_readings(ClusterTransformer.stack(members), X, C)
    for i, member in enumerate(members):
        alone = layer_readings(member, X, C)
        np.testing.assert_allclose(ensemble.drop(columns="member").iloc[i].to_numpy(),
                                   alone.drop(columns="member").iloc[0].to_numpy(), rtol=1e-5)


def test_trace_follows_the_snapshots_and_needs_them():
    config = TrainConfig(d=2, k=3, n=16, steps=6, batch=2, val_tasks=2, val_every=3, seeds=(0, 1),
                         snapshots=True, impl="direct")
    _, history = train(config)
    X, C = sample_tasks(4, 16, 2, 3, generator=2)
    trace = plateau_trace(config, history, X, C)
    assert trace.step.unique().tolist() == [0, 3, 6] and len(trace) == 6
    curve = validation_curve(history)
    assert trace.groupby("step").val_relative_loss.median().to_dict() == pytest.approx(curve.to_dict())
    history.attrs = {}
    with pytest.raises(ValueError, match="snapshots"):
        plateau_trace(config, history, X, C)


def test_summary_and_drop_table():
    trace = pd.DataFrame({"step": [0, 100, 200, 300, 400], "seed": 0,
                          "val_relative_loss": [1.8, 1.7, 1.6, 0.95, 0.9], "nearest_share": [0.2, 0.3, 0.4, 0.9, 0.95]})
    flat = trace.assign(val_relative_loss=1.7)
    summary = plateau_summary({"OH": trace, "BN": flat}, readings=("nearest_share",))
    assert summary.loc[("OH", "drop"), "step"] == 300 and summary.loc[("OH", "plateau"), "step"] == 100
    assert math.isnan(summary.loc[("BN", "drop"), "step"])
    history = trace.assign(scheme="oh")
    table = drop_table(history, {"lr=0.03": flat.assign(scheme="oh")})
    assert table.loc["base", ("below_lloyd_at", "OH")] == 300
    assert math.isnan(table.loc["lr=0.03", ("below_lloyd_at", "OH")])
    # one seed: its range is its own drop
    assert table.loc["base", ("earliest_seed", "OH")] == table.loc["base", ("latest_seed", "OH")] == 300
    # two seeds, one drops at 200, one at 300: the median curve drops at 300
    early = trace.assign(seed=1, val_relative_loss=[1.8, 1.7, 0.97, 0.9, 0.9])
    two = drop_table(pd.concat([trace, early]).assign(scheme="oh"), {
        "one never": pd.concat([trace, flat.assign(seed=1)]).assign(scheme="oh")})
    assert two.loc["base", ("earliest_seed", "OH")] == 200 and two.loc["base", ("latest_seed", "OH")] == 300
    assert two.loc["one never", ("earliest_seed", "OH")] == 300
    assert math.isnan(two.loc["one never", ("latest_seed", "OH")])  # a seed never dropped
    with pytest.raises(ValueError, match="seed"):
        drop_table(history.drop(columns="seed"), {})
    with pytest.raises(ValueError, match="seed"):
        seed_range(pd.Series([1.0, 2.0], index=pd.Index([0, 1], name="seed")))  # nothing to group by


def _drops(rows: dict) -> pd.DataFrame:
    """A plateau table from ``label -> ((OH earliest, latest), (BN earliest, latest), OH final, BN final)``."""
    columns = pd.MultiIndex.from_tuples([("earliest_seed", "OH"), ("latest_seed", "OH"), ("earliest_seed", "BN"),
                                         ("latest_seed", "BN"), ("final", "OH"), ("final", "BN")])
    return pd.DataFrame.from_dict({label: [*oh, *bn, oh_final, bn_final]
                                   for label, (oh, bn, oh_final, bn_final) in rows.items()},
                                  orient="index", columns=columns)


NAN = float("nan")
BASE = ((1400.0, 1600.0), (2300.0, 2500.0), 0.92, 0.93)


@pytest.mark.parametrize("row,words", [
    (((800.0, 1000.0), (1000.0, 1200.0), 0.9, 0.91),
     ["OH 800-1000 vs base 1400-1600: earlier, by 400-800 steps",
      "BN 1000-1200 vs base 2300-2500: earlier, by 1100-1500 steps", "Earlier for both, BN by more."]),
    # medians 1500 vs 1600 and 2400 vs 2450: apart by less than the margin, and the ranges overlap
    (((1500.0, 1700.0), (2400.0, 2500.0), 0.9, 0.91),
     ["OH 1500-1700 vs base 1400-1600: inconclusive", "Inconclusive for both (no move beyond the margin)."]),
    (((2500.0, 2600.0), (2900.0, 3000.0), 0.9, 0.91),
     ["OH 2500-2600 vs base 1400-1600: later, by 900-1200 steps", "later, by 400-700 steps",
      "Later for both, OH by more."]),
    (((2000.0, 2200.0), (5000.0, NAN), 0.9, 0.91), ["BN 5000-never vs base 2300-2500: later, by at least 2500 steps",
                                                    "Later for both, BN by more."]),
    # both later, by ranges of shifts that overlap: which moved more cannot be told
    (((1900.0, 2300.0), (2800.0, 3200.0), 0.9, 0.91), ["Later for both; which by more is inconclusive."]),
    (((800.0, 900.0), (3500.0, 3600.0), 0.9, 0.91), ["OH earlier, BN later."]),
    (((900.0, 1900.0), (3500.0, 3600.0), 0.9, 0.91), ["OH 900-1900 vs base 1400-1600: inconclusive",
                                                      "BN later, OH inconclusive."]),
    (((NAN, NAN), (1000.0, 1200.0), 1.3, 0.91), ["OH never vs base 1400-1600: later;", "OH later, BN earlier."]),
])
def test_drop_story_reads_each_row_against_the_base_on_the_range_over_seeds(row, words):
    drops = _drops({"base": BASE, "lr=0.03": row})
    lines = drop_story(drops, {"lr": 0.01}, margin=200).splitlines()
    assert lines[0].startswith("First validation step below one Lloyd step, range over seeds")
    assert "margin 200 steps" in lines[0] and len(lines) == 2
    assert lines[1].startswith("lr=0.03 (larger than the base's 0.01): ")
    for word in words:
        assert word in lines[1]
    assert "Final: OH" in lines[1]


def test_drop_story_needs_the_whole_margin():
    # every seed 200 steps ahead: earlier at margin 200, inconclusive at 201
    drops = _drops({"base": BASE, "lr=0.03": ((1000.0, 1200.0), (2000.0, 2100.0), 0.9, 0.91)})
    assert "Earlier for both" in drop_story(drops, {"lr": 0.01}, margin=200)
    assert "Inconclusive for both" in drop_story(drops, {"lr": 0.01}, margin=201)


def test_drop_story_when_the_base_never_dropped_and_for_bad_input():
    drops = _drops({"base": ((NAN, NAN), (NAN, NAN), 1.2, 1.3), "k=3": ((800.0, 900.0), (NAN, NAN), 0.9, 1.2)})
    line = drop_story(drops, {"k": 6}, margin=200).splitlines()[1]
    assert "(smaller than the base's 6)" in line and "OH 800-900 vs base never: earlier;" in line
    assert "BN never below one Lloyd step, nor in the base" in line and "No direction to read" in line
    # a base where one seed never dropped: a row cannot be later than it
    some = _drops({"base": ((1400.0, NAN), BASE[1], 1.0, 0.93), "k=3": ((3000.0, 3100.0), BASE[1], 0.9, 0.93)})
    assert "OH 3000-3100 vs base 1400-never: inconclusive" in drop_story(some, {"k": 6}, margin=200)
    with pytest.raises(ValueError, match="base_values has no value for 'k'"):
        drop_story(drops, {"n": 64}, margin=200)
    with pytest.raises(ValueError, match="drops"):
        drop_story(drops.drop(columns=[("latest_seed", "BN")]), {"k": 6}, margin=200)
    with pytest.raises(ValueError, match="margin"):
        drop_story(drops, {"k": 6}, margin=0)
    with pytest.raises(ValueError, match="row 'k=ten' and base value 6 must be numbers"):
        drop_story(drops.rename(index={"k=3": "k=ten"}), {"k": 6}, margin=200)


def test_plateau_story_measures_the_moves_it_describes():
    trace = pd.DataFrame({"step": [0, 100, 200, 300], "seed": 0, "val_relative_loss": [1.8, 1.7, 0.95, 0.9],
                          "nearest_share": [0.3, 0.4, 0.6, 0.7], "qk_points": [1.0, 2.0, 20.0, 30.0],
                          "center_entropy": [0.99, 0.98, 0.5, 0.49]})
    story = plateau_story(plateau_summary({"OH": trace}, readings=("nearest_share", "qk_points",
                                                                   "center_entropy")))
    second = story.splitlines()[1]
    assert "grew 15.0x" in second and "fell to 0.50 of its plateau value" in second
    assert "at the end 30% of the points attend most to a center other than their nearest" in second


def test_training_leaves_the_plateau():
    """The guard against stalled training: the paper's setting at a small size beats one Lloyd step.

    d 4, k 6, n 64, B 32, OH, L2, tau 0.1, lr 0.01, seed 0: the plateau near 1.6-1.7 ends near
    step 1400 (chapter 9); 1750 steps take about 25 s on one CPU thread.
    """
    config = TrainConfig(d=4, k=6, n=64, batch=32, scheme="oh", omega="l2", tau=0.1, lr=0.01, steps=1750,
                         seeds=(0,), val_tasks=64, val_every=250, impl="direct")
    _, history = train(config)
    curve = validation_curve(history)
    assert curve.iloc[1] > 1.3, "the run should start on the plateau"
    assert curve.iloc[-1] < 1.1, f"training stalled on the plateau: {curve.round(3).to_dict()}"
