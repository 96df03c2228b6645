"""Part III's experiments (kmtrf_core.book.openq): the measurements behind chapters 16-21."""

import math

import pandas as pd
import pytest
import torch

from kmtrf_core import ClusterTransformer, lloyd_trajectory, sample_tasks
from kmtrf_core.book.openq import (
    algorithm_table,
    code_table,
    eval_tasks,
    geometric_schedule,
    order_sensitivity,
    ratio_at,
    schedule_trajectories,
    size_transfer,
    spectral_gammas,
)
from kmtrf_core.evaluate import trajectory_table
from kmtrf_core.training import TrainConfig


def test_the_construction_does_not_depend_on_the_order_of_the_centers():
    X, C = sample_tasks(8, 30, 2, 4, generator=0, dtype=torch.float64)
    for scheme in ("oh", "bn", "gc"):
        table = order_sensitivity(ClusterTransformer.from_lloyd(2, 4, scheme), X, C, permutations=4)
        assert table.order_gap.max() < 1e-10 and table.loss_spread.max() < 1e-10


def test_a_random_coded_layer_depends_on_the_order_and_a_code_free_one_does_not():
    X, C = sample_tasks(8, 30, 2, 4, generator=0)
    coded = ClusterTransformer(2, 4, "bn", generator=torch.Generator().manual_seed(0))
    free = ClusterTransformer(2, 4, "na", generator=torch.Generator().manual_seed(0))
    assert order_sensitivity(coded, X, C, 4).order_gap.item() > 1e-2
    assert order_sensitivity(free, X, C, 4).order_gap.item() < 1e-4


def test_the_code_table_of_the_construction_is_lloyd():
    config = TrainConfig(d=2, k=4, n=30, tau=0.1)
    X, C = eval_tasks(config, 6)
    X, C = X.double(), C.double()
    layers = {scheme: ClusterTransformer.from_lloyd(2, 4, scheme) for scheme in ("oh", "bn", "sc")}
    table = code_table(layers, config, X, C, steps=3)
    assert table[["step1", "step3"]].sub(1).abs().to_numpy().max() < 1e-9
    assert table.d_emb.to_dict() == {"oh": 6, "bn": 4, "sc": 3}
    assert table.log10_bound.map(math.isfinite).all()


def test_spectral_gammas_match_a_direct_computation():
    model = ClusterTransformer(2, 3, "bn", ensemble=2, generator=torch.Generator().manual_seed(1))
    table = spectral_gammas(model)
    member = model.members()[1]
    expected = max(torch.linalg.matrix_norm(w, ord=2).max().item() for w in (member.Q, member.K))
    assert table.Gamma1[1] == pytest.approx(expected, rel=1e-6)


def test_size_transfer_of_the_construction_is_lloyd_at_every_size():
    config = TrainConfig(d=3, k=5, n=30)
    wide = ClusterTransformer.from_lloyd(3, 5, "bn")
    tests = {f"k={k}": tuple(t.double() for t in eval_tasks(config, 4, d=2, k=k)) for k in (2, 3)}
    table = size_transfer({"wide": {"bn": wide}}, tests, steps=3)
    assert (table.ratio - 1).abs().max() < 1e-9 and set(table.test) == set(tests)


def test_a_constant_schedule_is_the_plain_trajectory():
    X, C = sample_tasks(4, 20, 2, 3, generator=0)
    model = ClusterTransformer(2, 3, "bn", generator=torch.Generator().manual_seed(0))
    out = schedule_trajectories(model, X, C, 3, [(1.0, 1.0), (1.0, 8.0)])
    plain = trajectory_table({"x": out["gamma 1->1"]}, X, C).ratio
    assert not torch.equal(out["gamma 1->1"], out["gamma 1->8"])
    assert plain.iloc[0] == 1.0
    with pytest.raises(ValueError, match="start"):
        geometric_schedule(0.0, 1.0, 3)


def test_ratio_at_takes_the_median_over_members():
    table = pd.DataFrame({"model": "m", "member": [0, 1, 2], "step": 1, "ratio": [0.5, 0.9, 1.0]})
    assert ratio_at(table, [1]).loc["m", "step1"] == 0.9


def test_the_algorithm_table_finds_lloyd_in_the_construction():
    X, C = sample_tasks(6, 40, 2, 3, generator=2, dtype=torch.float64)
    table = algorithm_table({"lloyd": ClusterTransformer.from_lloyd(2, 3)}, {"normal": (X, C)}, 1,
                            betas=[1.0, 1e4], alphas=[0.5, 1.0, 1.5], batch=20)
    first = table.set_index("algorithm")
    assert first.loc["lloyd", "distance"] < 1e-9 and first.loc["relaxed", "parameter"] == 1.0
    assert first.loc["stay", "distance"] == pytest.approx(1.0)


def test_the_one_dimension_claim_is_judged_on_the_probe_when_there_is_one():
    import pandas as pd
    from kmtrf_core.book.openq import codes_findings

    summary = pd.DataFrame({"final": [0.9, 0.95, 1.3, 1.2]}, index=["oh", "bn", "sc", "na"])
    table = pd.DataFrame({"step1": [0.9, 0.95, 1.35, 1.2]}, index=summary.index)
    sens = pd.DataFrame({"scheme": ["oh", "bn", "sc", "na"], "order_gap": [1.5, 1.6, 0.9, 0.0]})
    seeds = pd.DataFrame({"scheme": ["bn", "gc"], "seed": [0, 0], "final": [0.95, 0.96]})
    assert codes_findings(summary, table, sens, seeds)["one_dimension_learns"].verdict == "not reproduced"
    found = codes_findings(summary, table, sens, seeds, probe={"final": 0.98, "step1": 0.99})
    assert found["one_dimension_learns"].verdict == "reproduced"
    assert "probe" in found["one_dimension_learns"].value and "1.300" in found["one_dimension_learns"].value
