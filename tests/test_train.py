import math

import pytest
import torch

import kmtrf_core.train as train_module
from kmtrf_core import ClusterTransformer
from kmtrf_core.train import TrainConfig, TrainingDiverged, load_checkpoint, main, relative_loss, train

TINY = dict(d=2, k=3, n=24, steps=6, batch=4, val_tasks=6, val_every=3)


def _weights(model):
    return [getattr(model, name).detach().clone() for name in "QKV"]


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(d=0), "d"),
        (dict(k=1), "k"),
        (dict(k=30, n=24), "k"),
        (dict(n=-1), "n"),
        (dict(scheme="hex"), "scheme"),
        (dict(omega="l1"), "omega"),
        (dict(tau=0.0), "tau"),
        (dict(gamma=-1.0), "gamma"),
        (dict(gamma=math.inf), "gamma"),
        (dict(lr=float("nan")), "lr"),
        (dict(steps=0), "steps"),
        (dict(batch=1.5), "batch"),
        (dict(family="uniform"), "family"),
        (dict(clip=0.0), "clip"),
        (dict(seeds=()), "seeds"),
        (dict(seeds=(1, 1)), "seeds"),
        (dict(seeds=(-1,)), "seeds"),
        (dict(impl="flash"), "impl"),
        (dict(device="warp-drive"), "device"),
        (dict(val_every=0), "val_every"),
    ],
)
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"TrainConfig\.{field}\b"):
        TrainConfig(**kwargs)


def test_short_run_lowers_the_loss():
    cfg = TrainConfig(d=2, k=3, n=64, steps=80, batch=8, val_tasks=32, val_every=40, tau=0.1, seeds=(0,))
    model, hist = train(cfg)
    losses = hist[hist.step > 0].train_loss.to_numpy()
    assert losses[-20:].mean() < 0.8 * losses[:10].mean()
    val = hist.dropna(subset=["val_relative_loss"]).val_relative_loss.to_numpy()
    assert val[-1] < val[0]
    assert isinstance(model, ClusterTransformer) and model.ensemble is None


def test_history_is_tidy():
    cfg = TrainConfig(**TINY, seeds=(3, 5))
    _, hist = train(cfg)
    assert list(hist.columns) == ["step", "seed", "train_loss", "val_relative_loss", "wall_time"]
    assert len(hist) == 2 * (cfg.steps + 1)
    assert set(hist.seed) == {3, 5}
    validated = hist.dropna(subset=["val_relative_loss"]).step.unique().tolist()
    assert validated == [0, 3, 6]
    for _, part in hist.groupby("seed"):
        assert part.wall_time.is_monotonic_increasing


def test_ensemble_equals_separate_runs():
    seeds = (0, 7, 11)
    ens, hist = train(TrainConfig(**TINY, seeds=seeds))
    assert ens.ensemble == 3
    for i, seed in enumerate(seeds):
        single, h1 = train(TrainConfig(**TINY, seeds=(seed,)))
        for a, b in zip(_weights(ens.members()[i]), _weights(single)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        mine = hist[hist.seed == seed].reset_index(drop=True)
        torch.testing.assert_close(
            torch.tensor(mine.train_loss.to_numpy()), torch.tensor(h1.train_loss.to_numpy()), rtol=1e-5, atol=1e-6,
            equal_nan=True,
        )


def test_deterministic_with_a_seed():
    a, ha = train(TrainConfig(**TINY))
    b, hb = train(TrainConfig(**TINY))
    assert all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b)))
    assert ha.drop(columns="wall_time").equals(hb.drop(columns="wall_time"))


def test_checkpoint_round_trip_and_exact_resume(tmp_path):
    full_cfg = TrainConfig(**{**TINY, "steps": 8}, seeds=(1, 2))
    full, full_hist = train(full_cfg)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    train(TrainConfig(**{**TINY, "steps": 5}, seeds=(1, 2)), checkpoint=ckpt, checkpoint_every=2)
    state = load_checkpoint(ckpt)
    assert state["step"] == 5 and state["config"]["seeds"] == [1, 2]
    assert not list(ckpt.parent.glob("*.tmp"))  # atomic write leaves no temp files
    resumed, hist = train(full_cfg, resume=ckpt)
    assert all(torch.equal(x, y) for x, y in zip(_weights(full), _weights(resumed)))
    assert hist.drop(columns="wall_time").equals(full_hist.drop(columns="wall_time"))


def test_mismatched_checkpoint_fails_clearly(tmp_path):
    ckpt = tmp_path / "c.pt"
    train(TrainConfig(**TINY), checkpoint=ckpt)
    with pytest.raises(ValueError, match="scheme"):
        train(TrainConfig(**{**TINY, "steps": 8}, scheme="oh"), resume=ckpt)
    with pytest.raises(ValueError, match="beyond"):
        train(TrainConfig(**{**TINY, "steps": 2}), resume=ckpt)


def test_divergence_names_step_and_seed(monkeypatch):
    real = train_module.smoothed_kmeans_loss
    calls = {"n": 0}

    def flaky(X, C, omega, tau):
        calls["n"] += 1
        out = real(X, C, omega, tau)
        return out * math.nan if calls["n"] == 3 else out

    monkeypatch.setattr(train_module, "smoothed_kmeans_loss", flaky)
    with pytest.raises(TrainingDiverged, match=r"step 3 for seed 4"):
        train(TrainConfig(**TINY, seeds=(4,)))


def test_clipping_matches_torch_per_member():
    g = [torch.randn(2, 4, 3, 3) * 10 for _ in range(3)]
    params = [torch.zeros(2, 4, 3, 3, requires_grad=True) for _ in range(3)]
    for p, grad in zip(params, g):
        p.grad = grad.clone()
    train_module._clip_per_member(params, 1.0, ensemble=True)
    for s in range(2):
        singles = [torch.zeros(4, 3, 3, requires_grad=True) for _ in range(3)]
        for p, grad in zip(singles, g):
            p.grad = grad[s].clone()
        torch.nn.utils.clip_grad_norm_(singles, 1.0)
        for p, q in zip(params, singles):
            torch.testing.assert_close(p.grad[s], q.grad)


def test_clipped_training_runs():
    _, hist = train(TrainConfig(**TINY, clip=0.5))
    assert hist.train_loss.dropna().map(math.isfinite).all()


def test_relative_loss_is_one_for_the_lloyd_layer():
    from kmtrf_core import has_empty_cluster, sample_tasks

    X, C = sample_tasks(16, 40, 2, 3, generator=0)
    keep = ~has_empty_cluster(X, C, 1)
    model = ClusterTransformer.from_lloyd(2, 3, "bn", dtype=torch.float32)
    rel = relative_loss(model, X[keep], C[keep], chunk=5)
    torch.testing.assert_close(rel, torch.ones_like(rel), rtol=1e-5, atol=1e-5)


def test_cli_writes_checkpoint_and_history(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["--d", "2", "--k", "3", "--n", "20", "--steps", "4", "--batch", "3", "--val-tasks", "4",
                 "--val-every", "2", "--seeds", "0", "1", "--out", str(out), "--checkpoint-every", "2"]) == 0
    assert (out / "checkpoint.pt").exists() and (out / "history.csv").exists()
    import pandas as pd

    hist = pd.read_csv(out / "history.csv")
    assert len(hist) == 2 * 5
    # resuming a finished run with more steps continues it
    assert main(["--d", "2", "--k", "3", "--n", "20", "--steps", "6", "--batch", "3", "--val-tasks", "4",
                 "--val-every", "2", "--seeds", "0", "1", "--out", str(out), "--resume"]) == 0
    assert len(pd.read_csv(out / "history.csv")) == 2 * 7


def test_cli_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ["--d", "--k", "--n", "--scheme", "--omega", "--tau", "--gamma", "--lr", "--steps", "--batch",
                   "--family", "--scale", "--anisotropic", "--unequal-weights", "--clip", "--seeds", "--device",
                   "--val-tasks", "--val-every", "--val-seed", "--impl", "--out", "--checkpoint-every", "--resume"]:
        assert option in text, option


def test_cli_rejects_invalid_values():
    with pytest.raises(SystemExit, match="TrainConfig.tau"):
        main(["--tau", "-1", "--steps", "1"])


def test_sweep_records_divergence_and_labels_runs(monkeypatch):
    real = train_module.smoothed_kmeans_loss

    def poisoned(X, C, omega, tau):
        out = real(X, C, omega, tau)
        return out * math.nan if omega == "ne" else out

    monkeypatch.setattr(train_module, "smoothed_kmeans_loss", poisoned)
    base = TrainConfig(**TINY)
    models, hist = train_module.sweep(base, {"omega": ["ne", "l2"], "tau": [0.5]}, on_diverge="record")
    assert models[("ne", 0.5)] is None and models[("l2", 0.5)] is not None
    flags = hist.groupby("omega").diverged.all()
    assert flags["ne"] and not flags["l2"]
    for column in ("d", "k", "n", "scheme", "omega", "tau", "gamma", "lr", "clip"):
        assert column in hist.columns
    with pytest.raises(TrainingDiverged):
        train_module.sweep(base, {"omega": ["ne"]})
    with pytest.raises(ValueError, match="grid"):
        train_module.sweep(base, {"colour": ["red"]})


def test_convergence_summary_and_curves():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kmtrf_core.plotting import training_curves

    _, hist = train_module.sweep(TrainConfig(**{**TINY, "steps": 9}, seeds=(0, 1)), {"scheme": ["oh", "bn"]})
    summary = train_module.convergence_summary(hist, by=("scheme", "omega"))
    assert list(summary.columns) == ["final_val_relative", "final_train_loss", "steps_to_converge", "seeds"]
    assert (summary.seeds == 2).all()
    last = hist[hist.step == 9].groupby("scheme").val_relative_loss.median()
    assert summary.loc[("oh", "l2"), "final_val_relative"] == pytest.approx(last["oh"])
    fig, (a, b) = plt.subplots(2)
    training_curves(a, b, hist)
    assert len(b.lines) == 3  # two groups and the Lloyd line
    plt.close(fig)
