"""Multi-step use of a trained layer (Section 4, Appendix C): kmtrf_core.evaluate."""

import numpy as np
import pytest
import torch

from kmtrf_core import ClusterTransformer, FAMILIES, has_empty_cluster, kmeans_objective, lloyd_trajectory, sample_tasks
from kmtrf_core.evaluate import (
    MODES,
    center_trajectory,
    evaluate_models,
    family_matrix,
    final_ratios,
    lloyd_loss_trajectory,
    loss_trajectory,
    relative_loss,
    trajectory_losses,
)
from kmtrf_core.tasks import SHIFTS, family_tasks, shifted_tasks

T_MAX = 8
COLUMNS = ["model", "member", "test", "mode", "step", "loss", "lloyd_loss", "ratio", "diverged"]


def _clean_tasks(batch, n, d, k, steps, seed):
    """float64 tasks whose first ``steps`` Lloyd iterations leave no cluster empty (Theorem 2.1's assumption)."""
    X, C = sample_tasks(batch, n, d, k, generator=seed, dtype=torch.float64)
    keep = ~has_empty_cluster(X, C, steps)
    assert int(keep.sum()) >= 4, "too few usable tasks"
    return X[keep], C[keep]


def _label(table, label):
    """Rows of ``table`` whose model label is ``label`` (labels may be tuples, so no ``==`` on the column)."""
    return np.array([m == label for m in table.model], dtype=bool)


def _random_model(d, k, scheme="bn", seed=0, dtype=torch.float64):
    return ClusterTransformer(d, k, scheme, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def clean():
    return _clean_tasks(16, 40, 2, 4, T_MAX, seed=5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scheme", ["bn", "oh"])
@pytest.mark.parametrize("T", range(1, T_MAX + 1))
def test_constructed_layer_is_lloyd_for_every_step(clean, T, scheme, mode):
    X, C = clean
    model = ClusterTransformer.from_lloyd(2, 4, scheme)
    reference = lloyd_trajectory(X, C, T).centers  # (T + 1, B, k, d)
    traj = center_trajectory(model, X, C, T, mode)
    assert traj.shape == (T + 1, *C.shape) and traj.dtype == torch.float64
    assert torch.equal(traj[0], C)
    torch.testing.assert_close(traj, reference, rtol=1e-10, atol=1e-12)
    losses = loss_trajectory(model, X, C, T, mode)
    assert losses.shape == (T + 1, X.shape[0])
    torch.testing.assert_close(losses, lloyd_loss_trajectory(X, C, T), rtol=1e-10, atol=1e-12)


def test_lloyd_loss_trajectory_is_the_objective_along_lloyd(clean):
    X, C = clean
    centers = lloyd_trajectory(X, C, 3).centers
    by_hand = torch.stack([((X[:, :, None] - c[:, None]) ** 2).sum(-1).amin(-1).sum(-1) for c in centers])
    torch.testing.assert_close(lloyd_loss_trajectory(X, C, 3), by_hand, rtol=1e-12, atol=1e-12)
    assert bool((lloyd_loss_trajectory(X, C, 3).diff(dim=0) <= 1e-12).all())  # Lloyd never increases the loss


@pytest.mark.parametrize("mode", MODES)
def test_ensemble_members_run_as_alone(mode):
    X, C = sample_tasks(5, 20, 3, 4, generator=1, dtype=torch.float64)
    members = [_random_model(3, 4, "oh", seed=s) for s in (0, 1, 2)]
    ens = ClusterTransformer.stack(members)
    traj = center_trajectory(ens, X, C, 4, mode)
    losses = loss_trajectory(ens, X, C, 4, mode)
    assert traj.shape == (5, 3, 5, 4, 3) and losses.shape == (5, 3, 5)
    for i, member in enumerate(members):
        torch.testing.assert_close(traj[:, i], center_trajectory(member, X, C, 4, mode), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(losses[:, i], loss_trajectory(member, X, C, 4, mode), rtol=1e-12, atol=1e-12)


def test_naive_and_reembed_agree_on_the_first_step_only():
    X, C = sample_tasks(6, 24, 2, 3, generator=2, dtype=torch.float64)
    model = _random_model(2, 3, "bn", seed=3)
    naive = center_trajectory(model, X, C, 3, "naive")
    reembed = center_trajectory(model, X, C, 3, "reembed")
    assert torch.equal(naive[:2], reembed[:2])
    torch.testing.assert_close(reembed[1], model(X, C))  # step 1 is the one-step model
    torch.testing.assert_close(naive[3], model(X, C, steps=3))  # naive is the T-layer forward
    for t in (2, 3):
        assert not torch.allclose(naive[t], reembed[t])
    # re-embedding is the one-step model applied to its own output
    torch.testing.assert_close(reembed[2], model(X, reembed[1]))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ensemble", [False, True])
def test_chunking_does_not_change_the_result(mode, ensemble):
    X, C = sample_tasks(5, 16, 2, 3, generator=4, dtype=torch.float64)
    model = _random_model(2, 3, "bn", seed=4)
    if ensemble:
        model = ClusterTransformer.stack([model, _random_model(2, 3, "bn", seed=5)])
    whole = center_trajectory(model, X, C, 3, mode, chunk=64)
    for chunk in (1, 2):
        torch.testing.assert_close(center_trajectory(model, X, C, 3, mode, chunk=chunk), whole, rtol=1e-12,
                                   atol=1e-12)
    torch.testing.assert_close(loss_trajectory(model, X, C, 3, mode, chunk=1), loss_trajectory(model, X, C, 3, mode))


def _exploding_model():
    model = _random_model(3, 4, "bn", seed=0, dtype=torch.float32)
    with torch.no_grad():
        for name in "QKV":
            getattr(model, name).mul_(1e3)
    return model


def test_diverging_naive_iteration_gives_inf_not_nan():
    X, C = sample_tasks(8, 32, 3, 4, generator=0)
    model = _exploding_model()
    traj = center_trajectory(model, X, C, 20, "naive")
    assert not bool(torch.isfinite(traj[-1]).all()), "precondition: the naive iteration should overflow"
    assert bool(torch.isfinite(traj[0]).all())
    losses = loss_trajectory(model, X, C, 20, "naive")
    assert not bool(torch.isnan(losses).any())
    assert bool(torch.isfinite(losses[0]).all())
    assert bool(torch.isinf(losses[-1]).all()) and bool((losses[-1] > 0).all())
    broken = ~torch.isfinite(traj).flatten(-2).all(-1)  # (T + 1, B): overflowed centers
    assert torch.equal(torch.isinf(losses), broken)
    table = evaluate_models({"exploding": model}, {"normal": (X, C)}, 20, modes="naive")
    assert table.set_index("step").diverged[0] == 0.0
    assert table.set_index("step").diverged[20] > 0
    assert not table.loss.isna().any() and not table.ratio.isna().any()
    assert np.isinf(table.set_index("step").ratio[20])


@pytest.fixture(scope="module")
def table_setup():
    tests = {"first": _clean_tasks(8, 30, 2, 3, 3, seed=11), "second": _clean_tasks(8, 30, 2, 3, 3, seed=12)}
    models = {
        "lloyd": ClusterTransformer.from_lloyd(2, 3, "bn"),
        ("random", "bn"): _random_model(2, 3, "bn", seed=7),
        "pair": ClusterTransformer.stack([_random_model(2, 3, "bn", seed=8), _random_model(2, 3, "bn", seed=9)]),
    }
    return models, tests, evaluate_models(models, tests, 3, modes=MODES)


def test_evaluate_models_table_layout(table_setup):
    models, tests, table = table_setup
    assert list(table.columns) == COLUMNS
    members = sum(m.ensemble or 1 for m in models.values())
    assert len(table) == members * len(tests) * len(MODES) * (3 + 1)
    assert set(table["mode"]) == set(MODES) and set(table.test) == set(tests)
    assert sorted(table.step.unique()) == [0, 1, 2, 3]
    assert sorted(table[_label(table, "pair")].member.unique()) == [0, 1]
    assert set(table[_label(table, "lloyd")].member) == {0}
    assert (table.diverged == 0).all()


def test_evaluate_models_can_return_the_trajectories_behind_its_table(table_setup):
    models, tests, table = table_setup
    again, trajectories = evaluate_models(models, tests, 3, modes=MODES, return_trajectories=True)
    assert again.equals(table)
    assert set(trajectories) == {(test, mode, label) for test in tests for mode in MODES for label in models}
    X, C = tests["second"]
    expected = center_trajectory(models["pair"], X, C, 3, "naive")
    assert torch.equal(trajectories[("second", "naive", "pair")], expected)


def test_evaluate_models_values(table_setup):
    models, tests, table = table_setup
    np.testing.assert_allclose(table[table.step == 0].ratio, 1.0, rtol=1e-12)
    for name, (X, C) in tests.items():
        reference = lloyd_loss_trajectory(X, C, 3)
        part = table[table.test == name]
        for t in range(4):
            np.testing.assert_allclose(part[part.step == t].lloyd_loss, reference.mean(-1)[t].item(), rtol=1e-12)
        lloyd_rows = part[_label(part, "lloyd")]
        np.testing.assert_allclose(lloyd_rows.ratio, 1.0, rtol=1e-10)
        np.testing.assert_allclose(lloyd_rows.loss, lloyd_rows.lloyd_loss, rtol=1e-10)
        for mode in MODES:
            losses = loss_trajectory(models[("random", "bn")], X, C, 3, mode)
            rows = part[_label(part, ("random", "bn")) & (part["mode"] == mode)].sort_values("step")
            np.testing.assert_allclose(rows.loss, losses.mean(-1).numpy(), rtol=1e-12)
            np.testing.assert_allclose(rows.ratio, (losses / reference).mean(-1).numpy(), rtol=1e-12)
            pair = loss_trajectory(models["pair"], X, C, 3, mode)  # (T + 1, S, B)
            for member in (0, 1):
                rows = part[_label(part, "pair") & (part["mode"] == mode) & (part.member == member)]
                np.testing.assert_allclose(rows.sort_values("step").loss, pair[:, member].mean(-1).numpy(),
                                           rtol=1e-12)


@pytest.fixture(scope="module")
def family_table():
    tests = family_tasks(4, 20, 2, 3, families=("laplace", "normal"), generator=3, dtype=torch.float64)
    models = {}
    seed = 20
    for train_family in ("cauchy", "normal"):  # not in FAMILIES order on purpose
        for scheme in ("bn", "oh"):
            members = [_random_model(2, 3, scheme, seed=seed + i) for i in range(3)]
            seed += 3
            models[(train_family, scheme)] = ClusterTransformer.stack(members)
    return evaluate_models(models, tests, 2, modes=MODES)


def _hand_ratios(table, model, test, mode, step):
    rows = table[_label(table, model) & (table.test == test) & (table["mode"] == mode)
                 & (table.step == step)]
    assert len(rows) == 3
    return rows.ratio.to_numpy()


def test_final_ratios_are_member_quantiles(family_table):
    summary = final_ratios(family_table)
    assert list(summary.columns) == ["median", "q25", "q75", "members", "diverged"]
    assert list(summary.index.names) == ["model", "test", "mode"]
    assert len(summary) == 4 * 2 * 2
    assert (summary.members == 3).all()
    for (model, test, mode), row in summary.iterrows():
        ratios = _hand_ratios(family_table, model, test, mode, 2)
        assert row["median"] == pytest.approx(np.median(ratios), rel=1e-12)
        assert row["q25"] == pytest.approx(np.quantile(ratios, 0.25), rel=1e-12)
        assert row["q75"] == pytest.approx(np.quantile(ratios, 0.75), rel=1e-12)
    early = final_ratios(family_table, by=("model", "mode"), step=1)
    assert (early.members == 3 * 2).all()
    with pytest.raises(ValueError, match="step 9"):
        final_ratios(family_table, step=9)


@pytest.mark.parametrize("scheme", ["bn", "oh"])
@pytest.mark.parametrize("mode,step", [("reembed", None), ("naive", 1)])
def test_family_matrix_is_the_median_table(family_table, scheme, mode, step):
    matrix = family_matrix(family_table, scheme, step=step, mode=mode)
    assert matrix.shape == (2, 2)
    assert list(matrix.index) == ["normal", "laplace"]  # test families, FAMILIES order
    assert list(matrix.columns) == ["normal", "cauchy"]  # train families, FAMILIES order
    for test in matrix.index:
        for train_family in matrix.columns:
            ratios = _hand_ratios(family_table, (train_family, scheme), test, mode, 2 if step is None else step)
            assert matrix.loc[test, train_family] == pytest.approx(np.median(ratios), rel=1e-12)
    with pytest.raises(ValueError, match="sc"):
        family_matrix(family_table, "sc")


def test_shifts_are_the_four_of_figure_7():
    assert list(SHIFTS) == ["unequal weights", "anisotropic", "half scale", "double scale"]


@pytest.mark.parametrize("scale", [0.1, 0.3])
@pytest.mark.parametrize("shift,expected", [
    (None, {}),
    ("half scale", dict(factor=0.5)),
    ("double scale", dict(factor=2.0)),
    ("unequal weights", dict(unequal_weights=True)),
    ("anisotropic", dict(anisotropic=True)),
])
def test_shifted_tasks_are_sample_tasks_with_the_shift(shift, expected, scale):
    options = dict(expected)
    factor = options.pop("factor", 1.0)
    X, C = shifted_tasks(shift, 3, 25, 2, 4, family="gumbel", scale=scale, generator=9)
    Xs, Cs = sample_tasks(3, 25, 2, 4, family="gumbel", scale=scale * factor, generator=9, **options)
    assert torch.equal(X, Xs) and torch.equal(C, Cs)
    if shift is not None:
        X0, _ = shifted_tasks(None, 3, 25, 2, 4, family="gumbel", scale=scale, generator=9)
        assert not torch.equal(X, X0)


def test_shifted_tasks_dtype_and_unknown_shift():
    X, C = shifted_tasks("half scale", 2, 10, 2, 3, generator=0, dtype=torch.float64)
    assert X.dtype == C.dtype == torch.float64
    with pytest.raises(ValueError, match="shift"):
        shifted_tasks("quarter scale", 2, 10, 2, 3)


def test_family_tasks_blocks():
    families = ("lognormal", "normal", "cauchy")
    tasks = family_tasks(3, 20, 2, 4, families=families, generator=1)
    assert list(tasks) == list(families)
    for X, C in tasks.values():
        assert X.shape == (3, 20, 2) and C.shape == (3, 4, 2) and X.dtype == torch.float32
    again = family_tasks(3, 20, 2, 4, families=families, generator=1)
    other = family_tasks(3, 20, 2, 4, families=families, generator=2)
    for fam in families:
        assert torch.equal(tasks[fam][0], again[fam][0]) and torch.equal(tasks[fam][1], again[fam][1])
        assert not torch.equal(tasks[fam][0], other[fam][0])
    assert list(family_tasks(1, 8, 1, 2, generator=0)) == list(FAMILIES)  # default: all, in order
    assert list(family_tasks(1, 8, 1, 2, families="laplace")) == ["laplace"]
    # extra options reach sample_tasks; one generator feeds the families in order
    gen = torch.Generator().manual_seed(4)
    first = sample_tasks(2, 12, 2, 3, family="gumbel", scale=0.5, generator=gen)
    second = sample_tasks(2, 12, 2, 3, family="normal", scale=0.5, generator=gen)
    both = family_tasks(2, 12, 2, 3, families=("gumbel", "normal"), scale=0.5, generator=4)
    assert torch.equal(both["gumbel"][0], first[0]) and torch.equal(both["normal"][0], second[0])


@pytest.mark.parametrize("families,match", [
    (("normal", "uniform"), "families"),
    ((), "families"),
    (("normal", "cauchy", "normal"), "distinct"),
])
def test_family_tasks_rejects_bad_families(families, match):
    with pytest.raises(ValueError, match=match):
        family_tasks(2, 10, 2, 3, families=families)


def _bad_calls():
    X, C = sample_tasks(2, 10, 2, 3, generator=0, dtype=torch.float64)
    model = ClusterTransformer.from_lloyd(2, 3, "bn")
    tests = {"t": (X, C)}
    X3, C3 = sample_tasks(2, 10, 3, 3, generator=0, dtype=torch.float64)
    X4, C4 = sample_tasks(2, 10, 2, 4, generator=0, dtype=torch.float64)
    return [
        ("not a model", lambda: center_trajectory("model", X, C, 2), "ClusterTransformer"),
        ("wrong d", lambda: center_trajectory(model, X3, C3, 2), "d=2"),
        ("wrong k", lambda: center_trajectory(model, X4, C4, 2), "k=3"),
        ("steps 0", lambda: center_trajectory(model, X, C, 0), "steps"),
        ("mode", lambda: center_trajectory(model, X, C, 2, mode="parallel"), "mode"),
        ("chunk", lambda: center_trajectory(model, X, C, 2, chunk=0), "chunk"),
        ("loss wrong d", lambda: loss_trajectory(model, X3, C3, 2), "d=2"),
        ("loss mode", lambda: loss_trajectory(model, X, C, 2, mode="fast"), "mode"),
        ("lloyd steps", lambda: lloyd_loss_trajectory(X, C, 0), "steps"),
        ("nan task", lambda: center_trajectory(model, X * float("nan"), C, 2), "non-finite"),
        ("empty models", lambda: evaluate_models({}, tests, 2), "models"),
        ("models not dict", lambda: evaluate_models([model], tests, 2), "models"),
        ("model value", lambda: evaluate_models({"m": "model"}, tests, 2), "ClusterTransformer"),
        ("empty tests", lambda: evaluate_models({"m": model}, {}, 2), "tests"),
        ("tests not pair", lambda: evaluate_models({"m": model}, {"t": X}, 2), "pair"),
        ("tests triple", lambda: evaluate_models({"m": model}, {"t": (X, C, C)}, 2), "pair"),
        ("evaluate steps", lambda: evaluate_models({"m": model}, tests, 0), "steps"),
        ("evaluate no modes", lambda: evaluate_models({"m": model}, tests, 2, modes=()), "modes"),
        ("evaluate mode", lambda: evaluate_models({"m": model}, tests, 2, modes=("naive", "x")), "mode"),
        ("evaluate wrong k", lambda: evaluate_models({"m": model}, {"t": (X4, C4)}, 2), "k=3"),
    ]


@pytest.mark.parametrize("case", _bad_calls(), ids=lambda case: case[0])
def test_bad_input_raises_value_error(case):
    _, call, match = case
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("ensemble", [False, True])
def test_trajectory_losses_is_the_objective_of_every_step(ensemble):
    X, C = sample_tasks(3, 20, 2, 4, generator=5, dtype=torch.float64)
    centers = lloyd_trajectory(X, C, steps=2).centers  # (3, B, k, d)
    if ensemble:
        centers = torch.stack([centers, centers + 0.01], dim=1)  # (3, S=2, B, k, d)
    centers = centers.clone()
    centers[1, ..., 0, :, :] = float("nan")  # task 0 overflowed at step 1
    losses = trajectory_losses(X, centers)
    assert losses.shape == centers.shape[:-2]
    for index in np.ndindex(*losses.shape):
        expected = (float("inf") if index[0] == 1 and index[-1] == 0
                    else kmeans_objective(X[index[-1]][None], centers[index][None]).item())
        assert losses[index].item() == pytest.approx(expected, rel=1e-12)


def test_trajectory_losses_refuses_mismatched_shapes():
    X, C = sample_tasks(3, 20, 2, 4, generator=5, dtype=torch.float64)
    centers = lloyd_trajectory(X, C, steps=2).centers
    for bad in (centers[:, :2], centers[..., :1], centers[0], centers[None, None], centers[:, :, :0], centers.tolist()):
        with pytest.raises(ValueError, match=r"centers must be \(T \+ 1, B, k, d\) or \(T \+ 1, S, B, k, d\) "
                                             r"with X's B = 3 and d = 2"):
            trajectory_losses(X, bad)
    with pytest.raises(ValueError, match="X and centers must share a dtype"):
        trajectory_losses(X, centers.float())
    with pytest.raises(ValueError, match="X must have rank 3"):
        trajectory_losses(X[0], centers)


def test_modes_are_read_in_any_case_and_labelled_in_lower_case():
    X, C = sample_tasks(4, 20, 2, 3, generator=0, dtype=torch.float64)
    model = ClusterTransformer(2, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    naive, reembed = (center_trajectory(model, X, C, 3, mode=m) for m in ("naive", "reembed"))
    assert not torch.equal(naive, reembed)  # so the case below has something to tell apart
    assert torch.equal(center_trajectory(model, X, C, 3, mode="NAIVE"), naive)
    assert torch.equal(loss_trajectory(model, X, C, 3, mode="Naive"), loss_trajectory(model, X, C, 3, mode="naive"))
    upper = evaluate_models({"m": model}, {"t": (X, C)}, 3, modes=("NAIVE",))
    lower = evaluate_models({"m": model}, {"t": (X, C)}, 3, modes=("naive",))
    assert upper.equals(lower) and set(upper["mode"]) == {"naive"}


def _relative_loss_bad_calls():
    X, C = sample_tasks(4, 20, 2, 3, generator=0, dtype=torch.float64)
    model = ClusterTransformer.from_lloyd(2, 3, "bn")
    ones = torch.ones(4, dtype=torch.float64)
    return [
        ("chunk 0", lambda: relative_loss(model, X, C, chunk=0), "chunk"),
        ("chunk -1", lambda: relative_loss(model, X, C, chunk=-1), "chunk"),
        ("model None", lambda: relative_loss(None, X, C), "model must be a ClusterTransformer"),
        ("reference shape", lambda: relative_loss(model, X, C, reference=ones[:3]), "reference must hold one loss"),
        ("reference 2-D", lambda: relative_loss(model, X, C, reference=ones.view(4, 1)), "reference must hold"),
        ("reference nan", lambda: relative_loss(model, X, C, reference=ones * float("nan")), "reference has non-finite"),
        ("reference not tensor", lambda: relative_loss(model, X, C, reference=[1.0] * 4), "reference must be a torch"),
        ("reference zero", lambda: relative_loss(model, X, C, reference=ones * 0), "zero k-means loss on tasks"),
        ("tasks", lambda: relative_loss(model, X, C[:2]), "batch size"),
        ("steps", lambda: relative_loss(model, X, C, steps=0), "steps"),
    ]


@pytest.mark.parametrize("case", _relative_loss_bad_calls(), ids=lambda case: case[0])
def test_relative_loss_refuses_bad_input_by_name(case):
    _, call, match = case
    with pytest.raises(ValueError, match=match):
        call()


def test_relative_loss_takes_a_good_reference_as_given():
    X, C = sample_tasks(4, 20, 2, 3, generator=0, dtype=torch.float64)
    model = ClusterTransformer(2, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    reference = kmeans_objective(X, lloyd_trajectory(X, C, 1).centers[-1])
    assert torch.equal(relative_loss(model, X, C, chunk=3, reference=reference), relative_loss(model, X, C))


@pytest.mark.parametrize("gammas", ["12", b"12"])
def test_a_string_is_no_gamma_schedule(gammas):
    X, C = sample_tasks(2, 10, 2, 3, generator=0, dtype=torch.float64)
    with pytest.raises(ValueError, match="gammas must be a sequence of 2 numbers"):
        center_trajectory(ClusterTransformer.from_lloyd(2, 3, "bn"), X, C, 2, gammas=gammas)
