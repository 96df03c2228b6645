import math

import pytest
import torch

from kmtrf_core import FAMILIES, kmeans_objective, lloyd, min_max_scale, sample_tasks, to_unit_cube


@pytest.mark.parametrize("family", FAMILIES)
def test_shapes_range_and_centers_are_points(family):
    X, C, labels = sample_tasks(5, 64, 3, 4, family=family, generator=0, return_labels=True)
    assert X.shape == (5, 64, 3) and C.shape == (5, 4, 3) and labels.shape == (5, 64)
    assert X.dtype == torch.float32
    assert float(X.min()) == 0.0 and float(X.max()) == 1.0
    # every dimension of every task spans [0, 1] exactly
    assert torch.equal(X.amin(1), torch.zeros(5, 3)) and torch.equal(X.amax(1), torch.ones(5, 3))
    # centers are k distinct points of X
    match = (C[:, :, None, :] == X[:, None, :, :]).all(-1)  # (B, k, n)
    assert (match.any(-1)).all()
    assert all(torch.unique(c, dim=0).shape[0] == 4 for c in C)


def test_centers_are_distinct_indices():
    X, C = sample_tasks(50, 20, 1, 20, generator=4, dtype=torch.float64)
    # k = n: the initial centers are a permutation of the points
    assert torch.equal(C.sort(dim=1).values, X.sort(dim=1).values)


def test_seed_reproducibility():
    a = sample_tasks(4, 32, 2, 3, family="gumbel", anisotropic=True, unequal_weights=True, generator=7)
    b = sample_tasks(4, 32, 2, 3, family="gumbel", anisotropic=True, unequal_weights=True, generator=7)
    c = sample_tasks(4, 32, 2, 3, family="gumbel", anisotropic=True, unequal_weights=True, generator=8)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(sample_tasks(2, 10, 2, 2, generator=g1)[0], sample_tasks(2, 10, 2, 2, generator=g2)[0])


def _raw_noise(family, size=200_000):
    from kmtrf_core.tasks import _noise

    return _noise(family, (size,), torch.Generator().manual_seed(0), torch.float64, "cpu")


def test_family_noise_statistics():
    # sanity per family against known moments / quantiles of the standard distribution
    normal = _raw_noise("normal")
    assert abs(normal.mean()) < 0.01 and abs(normal.std() - 1) < 0.01
    laplace = _raw_noise("laplace")
    assert abs(laplace.mean()) < 0.02 and abs(laplace.var() - 2) < 0.05
    gumbel = _raw_noise("gumbel")
    assert abs(gumbel.mean() - 0.5772156649) < 0.01 and abs(gumbel.var() - math.pi**2 / 6) < 0.05
    assert torch.equal(_raw_noise("lognormal"), normal)  # the normal draw, exponentiated with the location
    cauchy = _raw_noise("cauchy")
    q1, q2, q3 = torch.quantile(cauchy[:100_000], torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert abs(q1 + 1) < 0.03 and abs(q2) < 0.02 and abs(q3 - 1) < 0.03  # quartiles of Cauchy(0, 1)
    assert cauchy.abs().max() > 1e3  # heavy tails


def _appendix_d_reference(family, batch, n, d, k, seed):
    # Appendix D written out with the sampler's draws in the sampler's order (locations, spreads, labels,
    # noise), the lognormal as torch.distributions.LogNormal(l_j, 0.1) reads it (the authors' ctasks.py)
    gen = torch.Generator().manual_seed(seed)
    loc = torch.rand(batch, k, d, generator=gen, dtype=torch.float64)
    labels = torch.multinomial(torch.full((batch, k), 1.0 / k, dtype=torch.float64), n, replacement=True,
                               generator=gen)
    z = torch.randn(batch, n, d, generator=gen, dtype=torch.float64)
    means = torch.stack([loc[b, labels[b]] for b in range(batch)])
    if family == "lognormal":  # the library's LogNormal(l_j, 0.1) at the quantile of each normal draw
        from torch.distributions import LogNormal, Normal  # the reference distribution, only here

        raw = LogNormal(means, 0.1).icdf(Normal(0.0, 1.0).cdf(z))
    else:
        raw = means + 0.1 * z
    lo, hi = raw.amin(dim=1, keepdim=True), raw.amax(dim=1, keepdim=True)
    return (raw - lo) / (hi - lo)


@pytest.mark.parametrize("family", ["normal", "lognormal"])
def test_normal_and_lognormal_tasks_follow_appendix_d(family):
    X, _ = sample_tasks(3, 50, 2, 4, family=family, generator=11, dtype=torch.float64)
    assert torch.allclose(X, _appendix_d_reference(family, 3, 50, 2, 4, 11), rtol=0, atol=1e-10)


def test_lognormal_points_are_exponentiated_normal_points():
    # the lognormal task is the normal task of the same draws, exponentiated before the scaling: the points'
    # order within each dimension is the same, and their spread is skewed to the right
    normal = sample_tasks(2, 400, 3, 3, family="normal", generator=5, dtype=torch.float64)[0]
    lognormal = sample_tasks(2, 400, 3, 3, family="lognormal", generator=5, dtype=torch.float64)[0]
    assert torch.equal(normal.argsort(dim=1), lognormal.argsort(dim=1))
    assert not torch.allclose(normal, lognormal)


def test_lognormal_at_a_large_scale_stays_finite():
    # exp(l + scale e) overflows float32 beyond 88: each task and dimension is divided by its largest point first
    X, C = sample_tasks(4, 64, 2, 3, family="lognormal", scale=200.0, generator=0)
    assert torch.isfinite(X).all() and float(X.min()) == 0.0 and float(X.max()) == 1.0


def test_mixed_families_exponentiate_only_the_lognormal_tasks():
    # Appendix D per task, with the sampler's draws: each family's noise is drawn for its tasks in turn
    X = sample_tasks(64, 30, 2, 3, family=("normal", "lognormal"), generator=2, dtype=torch.float64)[0]
    gen = torch.Generator().manual_seed(2)
    loc = torch.rand(64, 3, 2, generator=gen, dtype=torch.float64)
    labels = torch.multinomial(torch.full((64, 3), 1 / 3, dtype=torch.float64), 30, replacement=True, generator=gen)
    which = torch.randint(2, (64,), generator=gen)
    assert 0 < int(which.sum()) < 64  # both families present
    raw = torch.stack([loc[b, labels[b]] for b in range(64)])
    for f_idx in (0, 1):
        rows = torch.nonzero(which == f_idx).flatten()
        raw[rows] = raw[rows] + 0.1 * torch.randn(len(rows), 30, 2, generator=gen, dtype=torch.float64)
    raw = torch.where(which[:, None, None] == 1, raw.exp(), raw)
    lo, hi = raw.amin(dim=1, keepdim=True), raw.amax(dim=1, keepdim=True)
    assert torch.allclose(X, (raw - lo) / (hi - lo), rtol=0, atol=1e-12)


def test_isotropic_normal_clusters_are_tight():
    # scale 0.01, well separated means: each point lies close to its component's points
    X, C, labels = sample_tasks(1, 400, 2, 3, scale=0.01, generator=1, return_labels=True, dtype=torch.float64)
    for j in range(3):
        pts = X[0][labels[0] == j]
        assert pts.std(0).max() < 0.1


def test_unequal_weights_vary_and_equal_weights_balance():
    _, _, lab_eq = sample_tasks(1, 20000, 1, 4, generator=0, return_labels=True)
    freq = torch.bincount(lab_eq[0], minlength=4) / 20000
    assert (freq - 0.25).abs().max() < 0.02
    _, _, lab_un = sample_tasks(64, 2000, 1, 4, unequal_weights=True, generator=0, return_labels=True)
    freqs = torch.stack([torch.bincount(l, minlength=4) for l in lab_un]) / 2000
    assert freqs.std(0).mean() > 0.1


def test_anisotropic_spreads_differ_across_dimensions():
    X, _, labels = sample_tasks(1, 20000, 8, 2, anisotropic=True, scale=0.05, generator=2, return_labels=True)
    sd = X[0][labels[0] == 0].std(0)
    assert sd.max() / sd.min() > 2


def _middle_half(X):
    """Per task, the interquartile range of the (1-D) points: ``(B,)``."""
    q = torch.quantile(X[..., 0].double(), torch.tensor([0.25, 0.75], dtype=torch.float64), dim=1)
    return q[1] - q[0]


def test_mixed_families_in_one_batch():
    # at scale 1 the noise dominates the task; scaled to [0, 1], the middle half of a normal task spans about a
    # fifth of the range, that of a Cauchy task a small fraction (its outliers set the range): the interquartile
    # range tells the two families apart task by task, far from the threshold both ways (over 5000 tasks of each,
    # at least 0.15 for normal, at most 0.05 for Cauchy)
    sizes = dict(batch=40, n=400, d=1, k=2, scale=1.0)
    normal = _middle_half(sample_tasks(**sizes, family="normal", generator=1)[0])
    cauchy = _middle_half(sample_tasks(**sizes, family="cauchy", generator=1)[0])
    assert normal.min() > 0.1 > cauchy.max()
    X, C = sample_tasks(**sizes, family=("normal", "cauchy"), generator=0)
    assert X.shape == (40, 400, 1) and C.shape == (40, 2, 1)
    # each task draws its family: both occur (all 40 tasks of one family has probability 2 ** -39)
    drawn_normal = int((_middle_half(X) > 0.1).sum())
    assert 0 < drawn_normal < 40, drawn_normal


def test_min_max_scale():
    X = torch.tensor([[[1.0, -3.0], [3.0, 1.0]]])
    assert min_max_scale(X).tolist() == [[[0.0, 0.0], [1.0, 1.0]]]


def test_unit_cube_map_preserves_the_kmeans_problem():
    X = torch.randn(3, 50, 4, dtype=torch.float64) * 10 + 3
    C = X[:, :5].clone() + 0.5
    Xu, Cu = to_unit_cube(X, C)
    both = torch.cat([Xu, Cu], 1)
    assert both.min() >= 0 and both.max() <= 1
    assert torch.allclose(both.flatten(1).amax(1), torch.ones(3, dtype=torch.float64))
    # same Lloyd trajectory up to the affine map, objective scaled by 1 / v_ub^2
    lo = torch.cat([X, C], 1).amin(1, keepdim=True)
    ub = (torch.cat([X, C], 1) - lo).flatten(1).amax(1).view(-1, 1, 1)
    torch.testing.assert_close((lloyd(X, C, steps=5) - lo) / ub, lloyd(Xu, Cu, steps=5))
    torch.testing.assert_close(kmeans_objective(X, C) / ub.flatten() ** 2, kmeans_objective(Xu, Cu))


def test_unit_cube_rejects_degenerate_task():
    with pytest.raises(ValueError, match="coincide"):
        to_unit_cube(torch.zeros(1, 3, 2), torch.zeros(1, 2, 2))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(family="uniform"), "family"),
        (dict(family=()), "family"),
        (dict(k=1), "k"),
        (dict(k=11), "k must be <= n"),
        (dict(n=0), "n"),
        (dict(scale=-1.0), "scale"),
        (dict(scale=float("nan")), "scale"),
        (dict(generator="seed"), "generator must be an int"),
    ],
)
def test_bad_input(kwargs, match):
    args = dict(batch=2, n=10, d=2, k=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        sample_tasks(**args)


def test_noise_is_finite_at_the_ends_of_the_unit_interval(monkeypatch):
    # regression: the Laplace inverse CDF once returned -inf for u < 3e-8 in float32
    import kmtrf_core.tasks as tasks_module

    for dtype in (torch.float32, torch.float64):
        tiny, eps = torch.finfo(dtype).tiny, torch.finfo(dtype).eps
        ends = torch.tensor([tiny, 1e-30, 1e-9, 0.5, 1.0 - eps], dtype=dtype)
        monkeypatch.setattr(tasks_module, "_open_uniform", lambda shape, gen, dt, dev, ends=ends: ends.clone())
        for family in ("cauchy", "gumbel", "laplace"):
            e = tasks_module._noise(family, ends.shape, None, dtype, "cpu")
            assert torch.isfinite(e).all(), (family, dtype, e)
        lap = tasks_module._noise("laplace", ends.shape, None, dtype, "cpu")
        assert lap[0] < lap[1] < lap[2] < 0 <= lap[3] < lap[4]


def test_family_names_are_read_in_any_case():
    from kmtrf_core.tasks import check_families  # not re-exported at the package top

    assert check_families("Normal") == ("normal",)
    assert check_families(["CAUCHY", "laplace"]) == ("cauchy", "laplace")
    assert torch.equal(sample_tasks(2, 10, 2, 3, family="Gumbel", generator=1)[0],
                       sample_tasks(2, 10, 2, 3, family="gumbel", generator=1)[0])
    for family in (["normal", "Normal"], ["normal", 3], "uniform", [["normal"]]):
        with pytest.raises(ValueError, match="family must be distinct names from"):
            check_families(family)


def test_min_max_scale_names_an_overflowing_span():
    with pytest.raises(ValueError, match="the spans of X overflow torch.float32"):
        min_max_scale(torch.tensor([[[-3e38], [3e38], [0.0]]]))
    assert min_max_scale(torch.tensor([[[-3e38], [3e38], [0.0]]], dtype=torch.float64)).flatten().tolist() == [0.0, 1.0, 0.5]


def test_unit_cube_names_an_overflow_and_mixed_dtypes():
    with pytest.raises(ValueError, match="the spans of X and C overflow torch.float32"):
        to_unit_cube(torch.tensor([[[-3e38], [3e38]]]), torch.tensor([[[0.0], [1.0]]]))
    with pytest.raises(ValueError, match="X and C must share a dtype"):
        to_unit_cube(torch.rand(1, 4, 2), torch.rand(1, 2, 2, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, "float32"])
def test_tasks_are_float32_or_float64(dtype):
    with pytest.raises(ValueError, match=r"^dtype must be torch.float32 or torch.float64"):
        sample_tasks(2, 10, 2, 3, dtype=dtype)


def test_centers_sit_at_distinct_indices_even_where_values_repeat():
    # 1-D Cauchy tasks scaled to [0, 1] in float32 can hold two equal points; the centers are still
    # k different points of the task (indices), as the docstring says, not k different values
    X, C = sample_tasks(4000, 64, 1, 10, family="cauchy", generator=0)
    counts = (C[:, :, None, :] == X[:, None, :, :]).all(-1).sum(-1)  # (B, k): points equal to each center
    repeated = (counts > 1).any(-1)
    assert bool(repeated.any())  # such tasks exist...
    for task in torch.nonzero(repeated).flatten()[:5].tolist():
        # ...and there the centers are equal in number to the points they match, so no index is used twice
        values, multiplicity = C[task, :, 0].unique(return_counts=True)
        assert multiplicity.sum().item() == 10
        in_x = torch.stack([(X[task, :, 0] == v).sum() for v in values])
        assert bool((multiplicity <= in_x).all())


def test_the_sampler_reads_nothing_back_from_the_device(monkeypatch):
    """sample_tasks runs inside the training step: no check of its own points, which would read a value back
    from the device every step (and cannot be recorded in a CUDA graph); min_max_scale itself still checks."""
    import kmtrf_core.tasks as tasks  # the module whose checks are replaced

    def refuse(*args, **kwargs):
        raise AssertionError("a value check inside the sampler")

    expected = tasks.sample_tasks(4, 32, 3, 5, family="cauchy", generator=1)
    monkeypatch.setattr(tasks, "check_tensor", refuse)
    monkeypatch.setattr(tasks, "check_finite_result", refuse)
    X, C = tasks.sample_tasks(4, 32, 3, 5, family="cauchy", generator=1)
    assert torch.equal(X, expected[0]) and torch.equal(C, expected[1])
    with pytest.raises(AssertionError, match="value check"):
        tasks.min_max_scale(X)
