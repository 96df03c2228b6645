import dataclasses
import math
from pathlib import Path

import pytest
import torch

from kmtrf_core import ClusterTransformer
from kmtrf_core.evaluate import relative_loss
from kmtrf_core.training import TrainConfig, TrainingDiverged, load_checkpoint, train
from kmtrf_core.training import loop as train_module
from kmtrf_core.training import runs as runs_module
from kmtrf_core.training.cli import main

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
    real = train_module.training_loss
    calls = {"n": 0}

    def flaky(X, C, omega, tau, trim=0.0):
        calls["n"] += 1
        out = real(X, C, omega, tau, trim=trim)
        return out * math.nan if calls["n"] == 3 else out

    monkeypatch.setattr(train_module, "training_loss", flaky)
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


def test_cli_rejects_invalid_values(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--tau", "-1", "--steps", "1"])
    assert exit_info.value.code == 2  # argparse's status for a usage error
    assert "TrainConfig.tau must be a positive finite number" in capsys.readouterr().err


def test_sweep_records_divergence_and_labels_runs(monkeypatch):
    real = train_module.training_loss

    def poisoned(X, C, omega, tau, trim=0.0):
        out = real(X, C, omega, tau, trim=trim)
        return out * math.nan if omega == "ne" else out

    monkeypatch.setattr(train_module, "training_loss", poisoned)
    base = TrainConfig(**TINY)
    models, hist = runs_module.sweep(base, {"omega": ["ne", "l2"], "tau": [0.5]}, on_diverge="record")
    assert models[("ne", 0.5)] is None and models[("l2", 0.5)] is not None
    flags = hist.groupby("omega").diverged.all()
    assert flags["ne"] and not flags["l2"]
    for column in ("d", "k", "n", "scheme", "omega", "tau", "gamma", "lr", "clip"):
        assert column in hist.columns
    with pytest.raises(TrainingDiverged):
        runs_module.sweep(base, {"omega": ["ne"]})
    with pytest.raises(ValueError, match="grid"):
        runs_module.sweep(base, {"colour": ["red"]})


def test_convergence_summary_and_curves():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kmtrf_core.book.plotting import training_curves

    _, hist = runs_module.sweep(TrainConfig(**{**TINY, "steps": 9}, seeds=(0, 1)), {"scheme": ["oh", "bn"]})
    summary = runs_module.convergence_summary(hist, by=("scheme", "omega"))
    assert list(summary.columns) == ["final_val_relative", "final_train_loss", "steps_to_converge", "seeds"]
    assert (summary.seeds == 2).all()
    last = hist[hist.step == 9].groupby("scheme").val_relative_loss.median()
    assert summary.loc[("oh", "l2"), "final_val_relative"] == pytest.approx(last["oh"])
    fig, (a, b) = plt.subplots(2)
    training_curves(a, b, hist)
    assert len(b.lines) == 3  # two groups and the Lloyd line
    plt.close(fig)


# --- train_cached / cache_dir / TrainConfig.from_sizes ------------------------------------------------------------

# a run that trains in a fraction of a second
CACHED = dict(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=2, impl="direct")


@pytest.fixture
def count_train(monkeypatch):
    """Replace train() by a wrapper that records the configs it trains."""
    calls = []
    real = runs_module.train

    def counting(config, **kwargs):
        calls.append(config)
        return real(config, **kwargs)

    monkeypatch.setattr(runs_module, "train", counting)
    return calls


def _assert_same_run(a, b):
    (model_a, hist_a), (model_b, hist_b) = a, b
    assert model_a.ensemble == model_b.ensemble
    assert (model_a.d, model_a.k, model_a.scheme, model_a.gamma, model_a.impl) == (
        model_b.d, model_b.k, model_b.scheme, model_b.gamma, model_b.impl)
    assert all(torch.equal(x, y) for x, y in zip(_weights(model_a), _weights(model_b)))
    assert list(hist_a.columns) == list(hist_b.columns) and (hist_a.dtypes == hist_b.dtypes).all()
    assert hist_a.equals(hist_b)  # wall times included: the cached history is the original one


def test_train_cached_loads_the_second_time(tmp_path, count_train):
    cfg = TrainConfig(**CACHED)
    first = runs_module.train_cached(cfg, directory=tmp_path)
    assert len(count_train) == 1
    files = list(tmp_path.glob("run-*.pt"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))
    second = runs_module.train_cached(cfg, directory=tmp_path)
    assert len(count_train) == 1  # loaded, not retrained
    _assert_same_run(first, second)
    loaded = second[0]
    assert isinstance(loaded, ClusterTransformer) and loaded.ensemble is None and not loaded.training
    X, C = torch.rand(3, 16, 2), torch.rand(3, 3, 2)
    with torch.no_grad():
        assert torch.equal(first[0](X, C), loaded(X, C))
    # the device is not part of the key
    runs_module.train_cached(dataclasses.replace(cfg, device="cpu"), directory=tmp_path)
    assert len(count_train) == 1 and len(list(tmp_path.glob("run-*.pt"))) == 1



def test_train_cached_refuses_a_cache_it_cannot_write_before_training(tmp_path, count_train, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KMTRF_CACHE", str(blocker / "runs"))  # below a file: no one can create it, root neither
    with pytest.raises(ValueError, match="cannot be written.*KMTRF_CACHE"):
        runs_module.train_cached(TrainConfig(**CACHED))
    assert count_train == []  # refused before any training
    runs_module.train_cached(TrainConfig(**CACHED), directory=tmp_path / "fine")
    assert not any(path.name.startswith(".kmtrf-write-check") for path in (tmp_path / "fine").iterdir())

def test_train_cached_refresh_retrains(tmp_path, count_train):
    cfg = TrainConfig(**CACHED)
    first = runs_module.train_cached(cfg, directory=tmp_path)
    again = runs_module.train_cached(cfg, directory=tmp_path, refresh=True)
    assert len(count_train) == 2
    assert all(torch.equal(x, y) for x, y in zip(_weights(first[0]), _weights(again[0])))  # deterministic
    assert len(list(tmp_path.glob("run-*.pt"))) == 1  # overwritten in place
    _assert_same_run(again, runs_module.train_cached(cfg, directory=tmp_path))
    assert len(count_train) == 2


def test_train_cached_different_config_different_file(tmp_path, count_train):
    base = TrainConfig(**CACHED)
    configs = [base, dataclasses.replace(base, scheme="oh"), dataclasses.replace(base, steps=3),
               dataclasses.replace(base, tau=0.5)]
    runs = [runs_module.train_cached(cfg, directory=tmp_path) for cfg in configs]
    assert len(count_train) == len(configs)
    assert len(list(tmp_path.glob("run-*.pt"))) == len(configs)
    keys = {runs_module.cache_key(cfg) for cfg in configs}
    assert len(keys) == len(configs)
    for cfg, run in zip(configs, runs):
        _assert_same_run(run, runs_module.train_cached(cfg, directory=tmp_path))
    assert len(count_train) == len(configs)
    assert runs[1][0].scheme == "oh" and runs[2][1].step.max() == 3


def test_cache_dir_honours_the_environment(tmp_path, monkeypatch, count_train):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path / "env-cache"))
    assert runs_module.cache_dir() == tmp_path / "env-cache"
    assert runs_module.cache_dir(tmp_path / "explicit") == tmp_path / "explicit"
    runs_module.train_cached(TrainConfig(**CACHED))
    assert len(list((tmp_path / "env-cache").glob("run-*.pt"))) == 1
    monkeypatch.delenv("KMTRF_CACHE")
    assert runs_module.cache_dir() == Path.home() / ".cache" / "kmtrf"
    monkeypatch.setenv("KMTRF_CACHE", "")  # empty counts as unset
    assert runs_module.cache_dir() == Path.home() / ".cache" / "kmtrf"


def test_train_cached_ensemble_round_trip(tmp_path, count_train):
    cfg = TrainConfig(**CACHED, seeds=(0, 1))
    first = runs_module.train_cached(cfg, directory=tmp_path)
    second = runs_module.train_cached(cfg, directory=tmp_path)
    assert len(count_train) == 1
    assert second[0].ensemble == 2
    _assert_same_run(first, second)
    assert set(second[1].seed) == {0, 1}
    for a, b in zip(first[0].members(), second[0].members()):
        assert all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b)))


def test_train_cached_rejects_a_non_config(tmp_path):
    with pytest.raises(ValueError, match="TrainConfig"):
        runs_module.train_cached(dict(CACHED), directory=tmp_path)


def test_from_sizes_picks_known_fields():
    from kmtrf_core.book.profiles import get_profile

    sizes = get_profile("quick").chapter("section4")
    cfg = TrainConfig.from_sizes(sizes)
    for name in ("d", "k", "n", "batch", "steps", "lr", "tau", "val_tasks", "val_every", "impl"):
        assert getattr(cfg, name) == getattr(sizes, name), name
    assert cfg.seeds == tuple(sizes.seeds) and isinstance(cfg.seeds, tuple)
    assert cfg.scheme == TrainConfig.scheme  # not in the sizes: the default
    over = TrainConfig.from_sizes(sizes, scheme="oh", steps=5, seeds=[3, 4])
    assert (over.scheme, over.steps, over.seeds, over.d) == ("oh", 5, (3, 4), sizes.d)
    plain = TrainConfig.from_sizes({"d": 3, "k": 2, "n": 10, "tasks": 7, "T": 6, "grid": 9, "seeds": [2, 5]})
    assert (plain.d, plain.k, plain.n, plain.seeds) == (3, 2, 10, (2, 5))
    assert TrainConfig.from_sizes({}) == TrainConfig()
    with pytest.raises(ValueError, match=r"TrainConfig\.tau"):
        TrainConfig.from_sizes(sizes, tau=-1.0)


def test_sweep_uses_the_cache(tmp_path, monkeypatch, count_train):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    base = TrainConfig(**CACHED)
    grid = {"scheme": ["oh", "bn"]}
    models, hist = runs_module.sweep(base, grid, cache=True)
    assert len(count_train) == 2 and len(list(tmp_path.glob("run-*.pt"))) == 2
    models_again, hist_again = runs_module.sweep(base, grid, cache=True)
    assert len(count_train) == 2  # both runs loaded
    assert hist_again.equals(hist)
    for key in models:
        assert all(torch.equal(x, y) for x, y in zip(_weights(models[key]), _weights(models_again[key])))
    runs_module.sweep(base, grid)  # cache=False trains again and leaves the cache alone
    assert len(count_train) == 4 and len(list(tmp_path.glob("run-*.pt"))) == 2


def test_cache_key_ignores_docstrings_and_comments_but_not_code():
    from kmtrf_core.training.runs import _code_fingerprint

    base = 'def f(x):\n    """Doc."""\n    return x + 1\n'
    assert _code_fingerprint(base) == _code_fingerprint('def f(x):\n    """Other words."""\n    # a comment\n    return x + 1\n')
    assert _code_fingerprint(base) == _code_fingerprint('def f(x):\n    return x + 1\n')
    assert _code_fingerprint(base) != _code_fingerprint('def f(x):\n    """Doc."""\n    return x + 2\n')
    # an attribute's documentation string is prose too, in a module and in a class; a string that is
    # used (assigned, returned, passed) is code
    attribute = 'P = 2000\n"""Steps before a stop."""\nclass C:\n    x: int = 1\n    """The x."""\n'
    assert _code_fingerprint(attribute) == _code_fingerprint('P = 2000\n"""Other words."""\nclass C:\n    x: int = 1\n')
    assert _code_fingerprint(attribute) != _code_fingerprint(attribute.replace("2000", "3000"))
    assert _code_fingerprint('S = "a rule"\n') != _code_fingerprint('S = "another rule"\n')
    assert _code_fingerprint('def f():\n    return "a"\n') != _code_fingerprint('def f():\n    return "b"\n')
    only = 'if True:\n    """Only prose."""\nelse:\n    x = 1\n'  # a body of prose alone keeps a statement
    assert _code_fingerprint(only) == _code_fingerprint('if True:\n    pass\nelse:\n    x = 1\n')
