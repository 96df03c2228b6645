"""The flattening rule and training until flat (kmtrf_core.training.convergence, TrainConfig.until_flat)."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from kmtrf_core.training import TrainConfig, train
from kmtrf_core.training.convergence import (
    FLAT_RULE,
    first_below,
    flattening,
    is_flat,
    validation_curve,
)

STEPS = np.arange(0, 3001, 100)
# a plateau at 1.7 until step 1500, a drop, then a slow settle at 0.9
CURVE = np.where(STEPS < 1500, 1.7, 0.9 + 0.8 * np.exp(-(STEPS - 1500) / 150.0))


def test_a_plateau_is_flat_so_the_rule_waits_for_min_steps():
    upto = STEPS <= 1400
    assert is_flat(STEPS[upto], CURVE[upto])
    assert not is_flat(STEPS[upto], CURVE[upto], min_steps=2500)


def test_the_drop_is_not_flat_and_the_settled_end_is():
    upto = STEPS <= 1900
    assert not is_flat(STEPS[upto], CURVE[upto], min_steps=0)
    assert is_flat(STEPS, CURVE, min_steps=2500)


def test_tolerance_is_relative():
    steps = np.arange(0, 1001, 100)
    drifting = 1.0 - 0.0004 * steps  # 0.6 at the end: moved by about 14% over the last fifth
    assert not is_flat(steps, drifting, tol=0.02)
    assert is_flat(steps, drifting, tol=0.5)


def test_not_flat_without_enough_validations_or_with_nan_end():
    assert not is_flat([0], [1.0])
    assert not is_flat([0, 100], [1.0, math.nan])
    assert not is_flat([900, 1000], [1.0, 1.0])  # nothing before the last fifth


def test_first_below():
    assert first_below(STEPS, CURVE) == STEPS[np.nonzero(CURVE < 1)[0][0]]
    assert math.isnan(first_below([0, 1], [2.0, 1.5]))
    assert first_below([0, 1], [2.0, 1.5], level=1.6) == 1.0


def test_validation_curve_is_the_median_over_seeds():
    history = pd.DataFrame({"step": [0, 0, 0, 10, 10, 10], "seed": [0, 1, 2] * 2,
                            "val_relative_loss": [1.0, 2.0, 9.0, 0.5, 0.7, 0.6]})
    assert validation_curve(history).to_dict() == {0: 2.0, 10: 0.6}


def test_flattening_reports_each_run():
    rows = []
    for scheme, curve in (("oh", CURVE), ("bn", np.full_like(CURVE, 1.7))):
        rows += [dict(scheme=scheme, seed=0, step=s, val_relative_loss=v) for s, v in zip(STEPS, curve)]
    table = flattening(pd.DataFrame(rows), by=["scheme"], min_steps=2500)
    assert table.loc["oh", "flattened"] and table.loc["bn", "flattened"]
    assert table.loc["oh", "below_lloyd_at"] < 2000 and math.isnan(table.loc["bn", "below_lloyd_at"])
    assert table.loc["oh", "steps"] == 3000
    assert "less than 2% over the last fifth" in FLAT_RULE.format(tol=0.02)


TINY = TrainConfig(d=2, k=3, n=16, steps=300, batch=4, val_tasks=8, val_every=10, seeds=(0, 1),
                   impl="direct", until_flat=0.05, min_steps=50)


def test_training_stops_at_the_first_flat_validation_step():
    _, history = train(TINY)
    last = int(history.step.max())
    curve = validation_curve(history)
    assert last % TINY.val_every == 0 and TINY.min_steps <= last < TINY.steps
    assert is_flat(curve.index, curve.to_numpy(), TINY.until_flat, TINY.min_steps)
    earlier = curve[curve.index < last]
    assert not any(is_flat(earlier.index[: i + 1], earlier.to_numpy()[: i + 1], TINY.until_flat, TINY.min_steps)
                   for i in range(len(earlier)))


def test_without_until_flat_the_budget_is_fixed():
    _, history = train(dataclasses.replace(TINY, until_flat=None, steps=60))
    assert history.step.max() == 60


def test_resume_of_a_run_that_stopped_does_not_train_on(tmp_path):
    ckpt = tmp_path / "c.pt"
    model, history = train(TINY, checkpoint=ckpt)
    again, again_history = train(TINY, checkpoint=ckpt, resume=ckpt)
    assert torch.equal(model.Q, again.Q)
    assert again_history.step.max() == history.step.max()


def test_interrupted_run_with_the_rule_resumes_exactly(tmp_path):
    model, history = train(TINY)
    ckpt = tmp_path / "c.pt"
    train(dataclasses.replace(TINY, steps=35), checkpoint=ckpt, checkpoint_every=7)
    resumed, resumed_history = train(TINY, checkpoint=ckpt, checkpoint_every=7, resume=ckpt)
    assert torch.equal(model.Q, resumed.Q) and torch.equal(model.V, resumed.V)
    pd.testing.assert_frame_equal(history.drop(columns="wall_time"), resumed_history.drop(columns="wall_time"))


def test_snapshots_are_kept_at_every_validation_step():
    config = dataclasses.replace(TINY, until_flat=None, steps=30, snapshots=True)
    model, history = train(config)
    snapshots = history.attrs["snapshots"]
    assert [step for step, _ in snapshots] == [0, 10, 20, 30]
    assert torch.equal(snapshots[-1][1]["Q"], model.Q.detach().cpu())
    assert not torch.equal(snapshots[0][1]["Q"], snapshots[-1][1]["Q"])


@pytest.mark.parametrize("kwargs, field", [(dict(until_flat=0.0), "until_flat"), (dict(until_flat=-1.0), "until_flat"),
                                           (dict(min_steps=-1), "min_steps")])
def test_rule_fields_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
        TrainConfig(**kwargs)
