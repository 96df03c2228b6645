"""The stop rule and training under it (kmtrf_core.training.convergence, TrainConfig.until_flat)."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from kmtrf_core.training import TrainConfig, train
from kmtrf_core.training import loop as training_loop
from kmtrf_core.training.convergence import (
    PATIENCE,
    STOP_REASONS,
    STOP_RULE,
    first_below,
    flattening,
    is_flat,
    should_stop,
    smoothed,
    stop_reason,
    validation_curve,
)

STEPS = np.arange(0, 5001, 100)


def plateau_then_drop(end: int, plateau: float = 1.7, level: float = 0.9, settle: float = 150.0) -> np.ndarray:
    """A curve on a plateau until step ``end``, then a drop that settles at ``level``."""
    return np.where(STEPS < end, plateau, level + (plateau - level) * np.exp(-(STEPS - end) / settle))


def first_stop(curve, **rule) -> float:
    """The first validation step at which the rule holds on the curve so far (NaN: never, the cap)."""
    for i, step in enumerate(STEPS):
        if should_stop(STEPS[: i + 1], curve[: i + 1], **rule):
            return float(step)
    return math.nan


def test_the_plateau_of_the_issue_is_not_a_stop():
    # a plateau that ends at step 2700: the old rule (flat over the last fifth, from step 2500) stopped at 2500 at 1.7
    curve = plateau_then_drop(2700)
    assert is_flat(STEPS[:26], curve[:26], patience=500)  # flat it is ...
    assert not should_stop(STEPS[:26], curve[:26], min_steps=2500)  # ... but above Lloyd: no stop
    # it beats Lloyd at about 2800 and settles by 3300, so it is not flat for a whole patience before the cap
    assert math.isnan(first_stop(curve, min_steps=2500))
    assert first_stop(curve, min_steps=2500, patience=1000) >= 2700 + 1000  # a shorter patience: after the drop


@pytest.mark.parametrize("drop", [1000, 1800, 2400, 2700, 3500, 4200])
def test_late_drops_train_on_until_they_settle_or_the_cap(drop):
    # the plateau ends measured in chapter 9 (1000-2400 for most runs; BN at k = 10 at 4200)
    curve = plateau_then_drop(drop)
    stop = first_stop(curve, min_steps=2500)
    if not math.isnan(stop):
        assert stop >= drop + PATIENCE and curve[STEPS == stop][0] < 1  # never on the plateau
    if drop <= 1800:
        assert drop + PATIENCE <= stop < drop + PATIENCE + 1000  # settled early: stops well before the cap
    if drop >= 3500:
        assert math.isnan(stop)  # not flat below Lloyd for a whole patience within the cap: trains to it
        assert stop_reason(STEPS, curve, cap=5000, until_flat=0.02, min_steps=2500) == "cap"


def test_a_run_that_never_beats_lloyd_trains_to_the_cap():
    assert math.isnan(first_stop(np.full(len(STEPS), 1.02)))
    assert math.isnan(first_stop(np.linspace(1.7, 1.01, len(STEPS))))


def test_a_slow_improvement_below_lloyd_is_not_flat():
    drifting = np.linspace(0.99, 0.60, len(STEPS))  # better by about 15% over each 2000 steps
    assert math.isnan(first_stop(drifting))
    assert not math.isnan(first_stop(drifting, tol=0.5))


def test_the_rule_uses_the_best_value_so_a_noisy_curve_can_stop():
    rng = np.random.default_rng(0)
    noisy = plateau_then_drop(800) + rng.normal(0, 0.01, len(STEPS))
    assert 800 + PATIENCE <= first_stop(noisy) < 800 + PATIENCE + 1000


def test_min_steps_and_patience_are_respected():
    curve = plateau_then_drop(200)
    assert first_stop(curve, min_steps=4000) == 4000
    assert first_stop(curve, patience=500) < first_stop(curve, patience=2000)


def test_not_flat_without_enough_history_or_with_nan_end():
    assert not is_flat([0], [1.0])
    assert not is_flat([0, 100], [0.5, math.nan], patience=100)
    assert not is_flat([900, 1000], [0.5, 0.5], patience=2000)
    assert not should_stop([0, 100], [0.5, math.nan], patience=100)


def test_smoothed_is_a_trailing_mean():
    np.testing.assert_allclose(smoothed([3.0, 1.0, 2.0, 6.0, 0.0]), [3.0, 2.0, 2.0, 3.0, 8 / 3])


def test_first_below():
    curve = plateau_then_drop(1500)
    assert first_below(STEPS, curve) == STEPS[np.nonzero(curve < 1)[0][0]]
    assert math.isnan(first_below([0, 1], [2.0, 1.5]))
    assert first_below([0, 1], [2.0, 1.5], level=1.6) == 1.0


def test_validation_curve_is_the_median_over_seeds():
    history = pd.DataFrame({"step": [0, 0, 0, 10, 10, 10], "seed": [0, 1, 2] * 2,
                            "val_relative_loss": [1.0, 2.0, 9.0, 0.5, 0.7, 0.6]})
    assert validation_curve(history).to_dict() == {0: 2.0, 10: 0.6}


def test_flattening_reports_each_run_and_why_it_stopped():
    rows = []
    for scheme, curve, end in (("oh", plateau_then_drop(1000), 3700), ("bn", np.full(len(STEPS), 1.7), 5000)):
        rows += [dict(scheme=scheme, seed=0, step=s, val_relative_loss=v) for s, v in zip(STEPS, curve) if s <= end]
    table = flattening(pd.DataFrame(rows), by=["scheme"], min_steps=2500, cap=5000)
    assert table.loc["oh", "flattened"] and not table.loc["bn", "flattened"]  # the plateau is not a stop
    assert table.loc["oh", "stopped"] == "beat Lloyd, flat" and table.loc["bn", "stopped"] == "cap"
    assert table.loc["oh", "below_lloyd_at"] < 2000 and math.isnan(table.loc["bn", "below_lloyd_at"])
    assert table.loc["oh", "steps"] == 3700
    assert flattening(pd.DataFrame(rows), by=["scheme"], cap=5000, rule=False).stopped.eq("fixed budget").all()
    assert "stopped" not in flattening(pd.DataFrame(rows), by=["scheme"]).columns
    assert set(STOP_REASONS) == {"beat Lloyd, flat", "cap", "fixed budget"}
    assert "below 1 (beats Lloyd)" in STOP_RULE.format(tol=0.02, patience=2000)


def test_annealed_runs_stop_no_earlier_than_their_schedule_plus_the_patience():
    plain = TrainConfig(steps=5000, until_flat=0.02, min_steps=2500, patience=2000)
    annealed = dataclasses.replace(plain, tau_end=0.01)
    assert plain.earliest_stop == 2500
    assert annealed.earliest_stop == annealed.anneal_steps + annealed.patience == 4500
    assert annealed.schedule(annealed.anneal_steps)[1] == pytest.approx(0.01)


TINY = TrainConfig(d=2, k=3, n=16, steps=300, batch=4, val_tasks=8, val_every=10, seeds=(0, 1),
                   impl="direct", until_flat=0.05, min_steps=50, patience=50)


@pytest.fixture
def lenient_rule(monkeypatch):
    """The loop's rule applied to the curve lowered by 1, so that a tiny run, which stays above one Lloyd step
    for hundreds of steps, can stop: it tests the wiring (when the loop asks, what it does with the answer)."""
    def lowered(steps, values, *args):
        return should_stop(steps, [v - 1 for v in values], *args)

    monkeypatch.setattr(training_loop, "should_stop", lowered)
    return lowered


def test_training_stops_at_the_first_validation_step_where_the_rule_holds(lenient_rule):
    _, history = train(TINY)
    last = int(history.step.max())
    curve = validation_curve(history)
    rule = (TINY.until_flat, TINY.patience, TINY.earliest_stop)
    assert last % TINY.val_every == 0 and TINY.min_steps <= last < TINY.steps
    assert lenient_rule(curve.index, curve.to_numpy(), *rule)
    earlier = curve[curve.index < last]
    assert not any(lenient_rule(earlier.index[: i + 1], earlier.to_numpy()[: i + 1], *rule)
                   for i in range(len(earlier)))


def test_a_run_above_lloyd_trains_to_its_cap():
    config = dataclasses.replace(TINY, steps=60, min_steps=0, patience=20)
    _, history = train(config)
    curve = validation_curve(history)
    assert history.step.max() == 60 and curve.iloc[-1] > 1
    assert stop_reason(curve.index, curve.to_numpy(), config.steps, config.until_flat, config.patience) == "cap"


def test_without_until_flat_the_budget_is_fixed():
    _, history = train(dataclasses.replace(TINY, until_flat=None, steps=60))
    assert history.step.max() == 60


def test_resume_of_a_run_that_stopped_does_not_train_on(tmp_path, lenient_rule):
    ckpt = tmp_path / "c.pt"
    model, history = train(TINY, checkpoint=ckpt)
    again, again_history = train(TINY, checkpoint=ckpt, resume=ckpt)
    assert torch.equal(model.Q, again.Q)
    assert again_history.step.max() == history.step.max()


def test_interrupted_run_with_the_rule_resumes_exactly(tmp_path, lenient_rule):
    model, history = train(TINY)
    assert history.step.max() < TINY.steps  # it stopped by the rule
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
                                           (dict(min_steps=-1), "min_steps"), (dict(patience=0), "patience")])
def test_rule_fields_are_checked(kwargs, field):
    with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
        TrainConfig(**kwargs)
