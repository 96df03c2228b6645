import math

import numpy as np
import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
import kmtrf_core.lipschitz as lipschitz_module
from kmtrf_core.lipschitz import center_norm_sq, empirical_lipschitz, lipschitz_bound, random_parameters
from kmtrf_core.objectives import regularized_weights, smoothed_kmeans_loss


def test_center_norm_sq_matches_embeddings():
    for scheme in ("oh", "bn", "sc", "na"):
        for k in (2, 6, 8, 13):
            model = ClusterTransformer(3, k, scheme)
            X, C = sample_tasks(1, 20, 3, k, generator=0, dtype=torch.float64)
            C = torch.ones_like(C)  # the largest possible data part in [0, 1]^d
            _, Cb = model.embed(X, C)
            exact = (Cb * Cb).sum(-1).max().item()
            assert exact == pytest.approx(center_norm_sq(3, k, scheme, exact=True))
            assert exact <= center_norm_sq(3, k, scheme)
    assert center_norm_sq(4, 6, "oh") == 5 and center_norm_sq(4, 6, "bn") == 7


def test_lemma_I1_norms_hold_on_random_layers():
    X, C = sample_tasks(8, 40, 4, 6, generator=1, dtype=torch.float64)
    for scheme in ("oh", "bn"):
        b = lipschitz_bound(40, 6, 4, scheme, Gamma1=1.5, Gamma2=0.8)
        params = random_parameters(10, b.d_emb, 1.5, 0.8, generator=torch.Generator().manual_seed(2))
        model = ClusterTransformer(4, 6, scheme, dtype=torch.float64)
        for p in range(10):
            with torch.no_grad():
                for name in "QKV":
                    getattr(model, name).copy_(params[name][p])
                out, Xb, _ = model(X, C, return_embeddings=True)
            assert Xb.norm(dim=-1).max() <= b.norms["x1"] + 1e-12
            assert out.norm(dim=-1).max() <= b.norms["c_out"] + 1e-12
            # r* bounds every squared point-center distance of the output (Eq. 49-51)
            assert ((X[:, :, None] - out[:, None]) ** 2).sum(-1).max() <= b.r_star


def test_random_parameters_respect_the_ball():
    p = random_parameters(20, 7, 2.0, 0.5, generator=torch.Generator().manual_seed(0))
    assert torch.linalg.matrix_norm(p["Q"], ord=2).max() <= 2.0 + 1e-12
    assert torch.linalg.matrix_norm(p["V"], ord=2).max() <= 0.5 + 1e-12


def test_sparsemax_and_softmax_l1_stability_constants():
    # the constants the refined bound uses: softmax 1/2, sparsemax 2 (1 - 1/k), in l1 -> l1
    g = torch.Generator().manual_seed(0)
    k, tau = 5, 0.3
    r = torch.rand(20000, k, generator=g, dtype=torch.float64) * 3
    dr = torch.randn(20000, k, generator=g, dtype=torch.float64) * 1e-3
    for omega, omega_tau in (("ne", 0.5), ("l2", 2 * (1 - 1 / k))):
        num = (regularized_weights(r, omega, tau) - regularized_weights(r + dr, omega, tau)).abs().sum(-1)
        ratio = num / (dr.abs().sum(-1) / tau)
        assert ratio.max().item() <= omega_tau + 1e-9
        assert ratio.max().item() > 0.5 * omega_tau  # and not wildly loose


def test_bound_trends_of_section_3():
    kw = dict(n=512, k=6, tau=0.1, omega="l2")
    # OH has the smaller constant than BN at small d ...
    gap_small = lipschitz_bound(d=4, scheme="bn", **kw).log_alpha - lipschitz_bound(d=4, scheme="oh", **kw).log_alpha
    gap_large = lipschitz_bound(d=64, scheme="bn", **kw).log_alpha - lipschitz_bound(d=64, scheme="oh", **kw).log_alpha
    assert gap_small > 0
    # ... and the relative difference shrinks as d grows
    assert gap_large / lipschitz_bound(d=64, scheme="oh", **kw).log_alpha < gap_small / lipschitz_bound(d=4, scheme="oh", **kw).log_alpha
    # smaller tau, larger gamma: larger bound
    assert lipschitz_bound(512, 6, 4, tau=0.01).log_alpha > lipschitz_bound(512, 6, 4, tau=1.0).log_alpha
    assert lipschitz_bound(512, 6, 4, gamma=4.0).log_alpha > lipschitz_bound(512, 6, 4, gamma=1.0).log_alpha
    # refined <= paper, max <= sum <= 12 max
    for scheme in ("oh", "bn", "sc"):
        for omega in ("ne", "l2"):
            paper = lipschitz_bound(100, 6, 4, scheme, omega=omega)
            refined = lipschitz_bound(100, 6, 4, scheme, omega=omega, refined=True)
            summed = lipschitz_bound(100, 6, 4, scheme, omega=omega, combine="sum")
            assert refined.log_alpha <= paper.log_alpha
            assert paper.log_alpha <= summed.log_alpha <= paper.log_alpha + math.log(12) + 1e-12


@pytest.mark.parametrize("scheme", ["oh", "bn"])
@pytest.mark.parametrize("omega", ["ne", "l2"])
def test_empirical_estimate_never_exceeds_the_bound(scheme, omega):
    X, C = sample_tasks(4, 24, 3, 4, generator=3, dtype=torch.float64)
    est = empirical_lipschitz(X, C, scheme, tau=0.2, omega=omega, pairs=12, generator=torch.Generator().manual_seed(4))
    assert est["quotient"] > 0 and est["gradient"] > 0
    for refined in (False, True):
        bound = lipschitz_bound(24, 4, 3, scheme, tau=0.2, omega=omega, refined=refined, combine="sum")
        assert math.log(max(est["quotient"], est["gradient"])) <= bound.log_alpha


def test_empirical_estimate_matches_a_plain_layer_per_pair():
    # the reference: one ordinary (non-ensemble) layer per parameter set, as the estimate is defined
    X, C = sample_tasks(3, 16, 2, 3, generator=6, dtype=torch.float64)
    est = empirical_lipschitz(X, C, "oh", tau=0.3, omega="ne", pairs=3, generator=torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(2)
    model = ClusterTransformer(2, 3, "oh", dtype=torch.float64)
    params = random_parameters(3, model.d_emb, 1.0, 1.0, generator=g)
    direction = random_parameters(3, model.d_emb, 1.0, 1.0, generator=g)
    for p in range(3):
        with torch.no_grad():
            for name in "QKV":
                getattr(model, name).copy_(params[name][p])
        loss = smoothed_kmeans_loss(X, model(X, C), "ne", 0.3)
        grads = torch.autograd.grad(loss.max(), [model.Q, model.K, model.V])
        gradient = sum(torch.linalg.matrix_norm(grad, ord="nuc").sum() for grad in grads).item()
        size = max(torch.linalg.matrix_norm(direction[name][p], ord=2).max().item() for name in "QKV")
        with torch.no_grad():
            for name in "QKV":
                getattr(model, name).add_(1e-2 / size * direction[name][p])
            moved = smoothed_kmeans_loss(X, model(X, C), "ne", 0.3)
        quotient = ((moved - loss.detach()).abs().max() / 1e-2).item()
        assert est["gradients"][p] == pytest.approx(gradient, rel=1e-12)
        assert est["quotients"][p] == pytest.approx(quotient, rel=1e-8)


def test_empirical_estimate_is_the_same_one_pair_at_a_time_and_in_ensembles(monkeypatch):
    # the pairs run as ensembles; forcing one member per ensemble is the loop over pairs it replaced
    X, C = sample_tasks(3, 20, 2, 3, generator=5, dtype=torch.float64)
    batched = empirical_lipschitz(X, C, "bn", pairs=7, generator=torch.Generator().manual_seed(1))
    monkeypatch.setattr(lipschitz_module, "_ENSEMBLE_WEIGHTS", 1)
    single = empirical_lipschitz(X, C, "bn", pairs=7, generator=torch.Generator().manual_seed(1))
    assert len(batched["quotients"]) == len(single["quotients"]) == 7
    np.testing.assert_allclose(batched["gradients"], single["gradients"], rtol=1e-12)
    np.testing.assert_allclose(batched["quotients"], single["quotients"], rtol=1e-9)  # a difference quotient
    # a member's values do not depend on its ensemble: chunks of 3, 3 and 1
    monkeypatch.setattr(lipschitz_module, "_ENSEMBLE_WEIGHTS", 3 * 3 * 23 ** 2)
    chunked = empirical_lipschitz(X, C, "bn", pairs=7, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(chunked["gradients"], single["gradients"], rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(tau=0.0), "tau"),
        (dict(tau=-1.0), "tau"),
        (dict(omega="l1"), "omega"),
        (dict(gamma=math.inf), "finite"),
        (dict(gamma=0.0), "gamma"),
        (dict(Gamma1=0.0), "Gamma1"),
        (dict(scheme="hex"), "scheme"),
        (dict(combine="mean"), "combine"),
        (dict(k=1), "k"),
    ],
)
def test_bad_input(kwargs, match):
    args = dict(n=10, k=3, d=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        lipschitz_bound(**args)


@pytest.mark.parametrize("kwargs,match", [
    (dict(combine="MAX"), None),
    (dict(refined="yes"), "refined"),
    (dict(refined=1), "refined"),
    (dict(exact_dE="no"), "^exact_dE must be True or False"),  # a non-empty string is truthy
    (dict(exact_dE=0), "^exact_dE must be True or False"),
    (dict(Gamma1=True), "Gamma1"),
    (dict(Gamma2=-1.0), "Gamma2"),
])
def test_lipschitz_bound_options_are_what_they_say(kwargs, match):
    if match is None:  # a choice in another case is that choice
        assert lipschitz_bound(10, 3, 2, **kwargs).log_alpha == lipschitz_bound(10, 3, 2, combine="max").log_alpha
        return
    with pytest.raises(ValueError, match=match):
        lipschitz_bound(10, 3, 2, **kwargs)


@pytest.mark.parametrize("exact", ["no", 1, None])
def test_center_norm_sq_takes_exact_as_a_bool_only(exact):
    with pytest.raises(ValueError, match="^exact must be True or False"):
        center_norm_sq(4, 6, "bn", exact=exact)


def _task():
    return sample_tasks(2, 8, 2, 3, generator=0, dtype=torch.float64)


@pytest.mark.parametrize("kwargs,match", [
    (dict(gamma=math.inf), "gamma must be finite"),
    (dict(gamma=0.0), "gamma"),
    (dict(step=0.0), "step"),
    (dict(step=-1.0), "step"),
    (dict(step=math.nan), "step"),
    (dict(Gamma1=-1.0), "Gamma1"),
    (dict(Gamma2=math.nan), "Gamma2"),
    (dict(tau=0.0), "tau"),
    (dict(omega="l1"), "omega"),
    (dict(generator=2.5), "generator"),
])
def test_empirical_lipschitz_refuses_bad_input_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        empirical_lipschitz(*_task(), pairs=2, **kwargs)


@pytest.mark.parametrize("args,kwargs,match", [
    ((2, 4, math.nan, 1.0), {}, "Gamma1"),
    ((2, 4, 1.0, -1.0), {}, "Gamma2"),
    ((0, 4, 1.0, 1.0), {}, "count"),
    ((2, 0, 1.0, 1.0), {}, "d_emb"),
    ((2, 4, 1.0, 1.0), dict(dtype=torch.int64), "dtype"),
    ((2, 4, 1.0, 1.0), dict(dtype=torch.float16), "dtype"),
    ((2, 4, 1.0, 1.0), dict(generator="0"), "generator"),
])
def test_random_parameters_refuses_bad_input_by_name(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        random_parameters(*args, **kwargs)


def test_an_int_seed_is_a_generator_seeded_with_it():
    by_int = random_parameters(2, 4, 1.0, 1.0, generator=3)
    by_gen = random_parameters(2, 4, 1.0, 1.0, generator=torch.Generator().manual_seed(3))
    for name in "QKV":
        torch.testing.assert_close(by_int[name], by_gen[name], rtol=0, atol=0)
    X, C = _task()
    a = empirical_lipschitz(X, C, pairs=2, generator=5)
    b = empirical_lipschitz(X, C, pairs=2, generator=torch.Generator().manual_seed(5))
    assert a == b
    # None is seed 0 (make_generator), drawn as one stream: the directions are not the parameters again
    assert empirical_lipschitz(X, C, pairs=2) == empirical_lipschitz(X, C, pairs=2, generator=0)


def test_empirical_lipschitz_builds_its_layers_on_the_tasks_device(monkeypatch):
    # on the CPU the device cannot differ, so record what the layers are asked for: X's device
    seen = []

    class Recording(ClusterTransformer):
        def __init__(self, *args, **kwargs):
            seen.append(kwargs.get("device"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(lipschitz_module, "ClusterTransformer", Recording)
    X, C = _task()
    empirical_lipschitz(X, C, pairs=2, generator=0)
    assert seen and all(device == X.device for device in seen)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device on this machine: the device check runs where one is lent")
def test_empirical_lipschitz_on_cuda_equals_the_cpu():
    X, C = _task()
    cpu = empirical_lipschitz(X, C, pairs=3, generator=1)
    cuda = empirical_lipschitz(X.cuda(), C.cuda(), pairs=3, generator=1)  # the parameters drawn on the CPU
    np.testing.assert_allclose(cuda["gradients"], cpu["gradients"], rtol=1e-9)
    np.testing.assert_allclose(cuda["quotients"], cpu["quotients"], rtol=1e-6)
