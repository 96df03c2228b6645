"""The optional feedforward block of the layer (ClusterTransformer(ffn=h); Appendix A, chapter 19)."""

import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.training import TrainConfig, train, train_cached
from kmtrf_core.training.checkpoints import load_weights, weights_of


def _pair(ffn, **kwargs):
    return ClusterTransformer(2, 3, "bn", ffn=ffn, generator=torch.Generator().manual_seed(0), **kwargs)


def test_no_block_is_the_papers_layer_bit_for_bit():
    X, C = sample_tasks(4, 20, 2, 3, generator=0)
    plain = ClusterTransformer(2, 3, "bn", generator=torch.Generator().manual_seed(0))
    assert torch.equal(_pair(0)(X, C), plain(X, C))
    assert _pair(0).parameter_names() == ["Q", "K", "V"]


def test_the_block_draws_after_the_attention_weights():
    with_block, without = _pair(8), _pair(0)
    for name in "QKV":
        assert torch.equal(getattr(with_block, name), getattr(without, name))
    assert torch.all(with_block.b1 == 0) and torch.all(with_block.b2 == 0)


def test_a_silent_block_changes_nothing_and_a_live_one_matches_a_hand_computation():
    X, C = sample_tasks(3, 10, 2, 3, generator=1, dtype=torch.float64)
    model = _pair(5, dtype=torch.float64)
    with torch.no_grad():
        model.F2.zero_()
    assert torch.allclose(model(X, C), _pair(0, dtype=torch.float64)(X, C))
    model = _pair(5, dtype=torch.float64)
    with torch.no_grad():
        model.b1.normal_(generator=torch.Generator().manual_seed(2))
        model.b2.normal_(generator=torch.Generator().manual_seed(3))
    X_bar, C_bar = model.embed(X, C)
    plain = _pair(0, dtype=torch.float64)

    def mlp(Z):
        return torch.relu(Z @ model.F1 + model.b1) @ model.F2 + model.b2

    def attend(mu, Zq, Zk):
        from kmtrf_core.attention import attend as attention  # the attention itself is tested elsewhere

        return attention(Zq, Zk, plain.Q[mu], plain.K[mu], plain.V[mu], 1.0, "direct")

    X_new = X_bar + attend(0, X_bar, C_bar) + attend(1, X_bar, X_bar)
    X_new = X_new + mlp(X_new)
    C_new = C_bar + attend(2, C_bar, X_new) + attend(3, C_bar, C_bar)
    C_new = C_new + mlp(C_new)
    assert torch.allclose(model.layer(X_bar, C_bar)[1], C_new, atol=1e-12)


def test_ensembles_stack_and_split_with_the_block():
    g = torch.Generator().manual_seed(0)
    singles = [ClusterTransformer(2, 3, "bn", ffn=4, generator=g) for _ in range(3)]
    ensemble = ClusterTransformer.stack(singles)
    X, C = sample_tasks(4, 12, 2, 3, generator=0)
    out = ensemble(X, C)
    for i, single in enumerate(singles):
        assert torch.allclose(out[i], single(X, C), atol=1e-6)
        assert torch.equal(ensemble.members()[i].F1, single.F1)
    with pytest.raises(ValueError, match="ffn"):
        ClusterTransformer.stack([singles[0], ClusterTransformer(2, 3, "bn")])


def test_weights_round_trip_and_mismatches_are_named():
    model = _pair(6)
    copy = load_weights(ClusterTransformer(2, 3, "bn", ffn=6), weights_of(model))
    assert all(torch.equal(getattr(copy, n), getattr(model, n)) for n in model.parameter_names())
    with pytest.raises(ValueError, match="lack"):
        load_weights(ClusterTransformer(2, 3, "bn", ffn=6), weights_of(_pair(0)))
    with pytest.raises(ValueError, match="hold"):
        load_weights(_pair(0), weights_of(model))


def test_parameter_count_and_gradients():
    model = _pair(8)
    m = model.d_emb
    assert model.num_parameters() == 12 * m * m + m * 8 + 8 + 8 * m + m
    X, C = sample_tasks(4, 12, 2, 3, generator=0)
    model(X, C).pow(2).sum().backward()
    assert all(float(getattr(model, n).grad.abs().sum()) > 0 for n in ("F1", "b1", "F2", "b2"))


@pytest.mark.parametrize("ffn", [-1, 2.5, "4"])
def test_bad_widths_are_named(ffn):
    with pytest.raises(ValueError, match="ffn"):
        ClusterTransformer(2, 3, ffn=ffn)


def test_a_run_with_a_block_trains_and_comes_back_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    config = TrainConfig(d=2, k=3, n=24, steps=6, batch=4, val_tasks=6, val_every=3, ffn=8, seeds=(0, 1))
    model, _ = train(config)
    assert model.ffn == 8 and model.ensemble == 2
    cached, _ = train_cached(config)
    again, _ = train_cached(config)
    assert all(torch.equal(getattr(cached, n), getattr(again, n)) for n in cached.parameter_names())
    assert torch.allclose(cached.F2, model.F2)


def test_the_hand_computation_covers_the_points_and_the_trace():
    X, C = sample_tasks(2, 9, 2, 3, generator=4, dtype=torch.float64)
    model = _pair(3, dtype=torch.float64)
    X_bar, C_bar = model.embed(X, C)
    trace = {}
    X_new, C_new = model.layer(X_bar, C_bar, trace=trace)

    def mlp(Z):
        return torch.relu(Z @ model.F1 + model.b1) @ model.F2 + model.b2

    points = X_bar + trace["update_x"]
    assert torch.allclose(trace["update_ffn_x"], mlp(points), atol=1e-12)
    assert torch.allclose(X_new, points + mlp(points), atol=1e-12)
    centers = C_bar + trace["update_c"]
    assert torch.allclose(trace["update_ffn_c"], mlp(centers), atol=1e-12)
    assert torch.allclose(C_new, centers + mlp(centers), atol=1e-12)
    plain_trace = {}
    _pair(0, dtype=torch.float64).layer(X_bar, C_bar, trace=plain_trace)
    assert "update_ffn_x" not in plain_trace and "update_ffn_c" not in plain_trace


def test_an_ensemble_round_trips_through_its_members():
    ensemble = ClusterTransformer(2, 3, "bn", ffn=4, ensemble=3, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # nonzero biases, so a member that took another member's bias would show
        ensemble.b1.normal_(generator=torch.Generator().manual_seed(2))
        ensemble.b2.normal_(generator=torch.Generator().manual_seed(3))
    assert tuple(ensemble.F1.shape) == (3, 4, 4) and tuple(ensemble.b1.shape) == (3, 4)
    assert tuple(ensemble.F2.shape) == (3, 4, 4) and tuple(ensemble.b2.shape) == (3, 4)
    members = ensemble.members()
    assert all(m.ffn == 4 and m.ensemble is None for m in members)
    again = ClusterTransformer.stack(members)
    for name in ensemble.parameter_names():
        assert torch.equal(getattr(again, name), getattr(ensemble, name))
    X, C = sample_tasks(5, 12, 2, 3, generator=0)
    shared = ensemble(X, C)
    X_each, C_each = sample_tasks(15, 12, 2, 3, generator=1)
    each = ensemble(X_each.view(3, 5, 12, 2), C_each.view(3, 5, 3, 2))
    for i, member in enumerate(members):
        assert torch.allclose(shared[i], member(X, C), atol=1e-6)
        assert torch.allclose(each[i], member(X_each[5 * i : 5 * i + 5], C_each[5 * i : 5 * i + 5]), atol=1e-6)


def test_the_width_travels_with_the_configuration():
    model = _pair(6)
    assert model.hyperparameters()["ffn"] == 6 and model.like().ffn == 6 and model.like(ensemble=2).ffn == 6
    assert "ffn=6" in repr(model) and "ffn" not in repr(_pair(0))
    assert not hasattr(_pair(0), "F1")
    assert ClusterTransformer.from_lloyd(2, 3, "bn").ffn == 0
    seeded = ClusterTransformer(2, 3, "bn", ffn=6, ensemble=2, generator=torch.Generator().manual_seed(0))
    plain = ClusterTransformer(2, 3, "bn", ensemble=2, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(getattr(seeded, n), getattr(plain, n)) for n in "QKV")


def test_weights_of_another_block_are_refused_by_name():
    weights = weights_of(_pair(6))
    assert sorted(weights) == ["F1", "F2", "K", "Q", "V", "b1", "b2"]
    with pytest.raises(ValueError, match=r"hold \['F1', 'F2', 'b1', 'b2'\]"):
        load_weights(_pair(0), weights)
