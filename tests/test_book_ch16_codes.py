"""Chapter 16's code table, order sensitivity and verdicts (kmtrf_core.book.ch16_codes)."""

import math

import numpy as np
import pytest
import torch

from kmtrf_core import ClusterTransformer, sample_tasks
from kmtrf_core.book.ch16_codes import code_table, order_sensitivity, spectral_gammas
from kmtrf_core.book.heldout import eval_tasks
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


def test_the_one_dimension_claim_is_judged_on_the_probe_when_there_is_one():
    import pandas as pd

    from kmtrf_core.book.ch16_codes import codes_findings

    summary = pd.DataFrame({"final": [0.9, 0.95, 1.3, 1.2]}, index=["oh", "bn", "sc", "na"])
    table = pd.DataFrame({"step1": [0.9, 0.95, 1.35, 1.2]}, index=summary.index)
    sens = pd.DataFrame({"scheme": ["oh", "bn", "sc", "na"], "order_gap": [1.5, 1.6, 0.9, 0.0]})
    noise = 0.02 * np.random.default_rng(0).standard_normal((2, 128))
    held_out = {scheme: value + noise for scheme, value in table.step1.items()}
    held_out["gc"] = held_out["bn"] + 0.001
    found = codes_findings(summary, table, sens, held_out)
    assert found["one_dimension_learns"].verdict == "not reproduced"
    assert found["codes_needed"].verdict == "partly"  # SC above 1; OH, BN, GC below; NA above
    found = codes_findings(summary, table, sens, held_out, probe={"final": 0.98, "samples": 0.9 + noise[:1]})
    assert found["one_dimension_learns"].verdict == "reproduced"
    assert "probe" in found["one_dimension_learns"].value and "1.300" in found["one_dimension_learns"].value
    level = codes_findings(summary, table, sens, held_out, probe={"final": 0.98, "samples": 1.0 + noise[:1]})
    assert level["one_dimension_learns"].verdict == "inconclusive"



def test_gray_order_is_an_equivalence_shown_on_the_same_tasks():
    import pandas as pd

    from kmtrf_core.book.ch16_codes import GRAY_MARGIN, codes_findings

    summary = pd.DataFrame({"final": [0.9, 0.95, 0.95, 1.2]}, index=["oh", "bn", "gc", "na"])
    table = pd.DataFrame({"step1": [0.9, 0.95, 0.95, 1.2]}, index=summary.index)
    sens = pd.DataFrame({"scheme": ["oh", "bn", "gc", "na"], "order_gap": [1.5, 1.6, 1.6, 0.0]})
    rng = np.random.default_rng(1)
    tasks = 0.95 + 0.05 * rng.standard_normal((3, 256))

    def gray(gc):
        return codes_findings(summary, table, sens, {"oh": tasks, "na": tasks + 0.3, "bn": tasks, "gc": gc})[
            "gray_order"]

    assert gray(tasks + 0.005).verdict == "reproduced"
    assert gray(tasks + 0.1).verdict == "not reproduced"
    noisy = gray(0.95 + 0.3 * rng.standard_normal((3, 256)))  # another layer's tasks errors: too wide to tell
    assert noisy.verdict == "inconclusive" and f"margin {GRAY_MARGIN:g}" in noisy.value


def test_order_gaps_are_paired_per_task_and_average_to_the_sensitivity_table():
    from kmtrf_core.book.ch16_codes import order_gaps

    X, C = sample_tasks(6, 30, 2, 4, generator=2)
    model = ClusterTransformer(2, 4, "bn", ensemble=2, generator=torch.Generator().manual_seed(3))
    gaps, spread = order_gaps(model, X, C, permutations=3, seed=5)
    assert gaps.shape == spread.shape == (2, 6)
    table = order_sensitivity(model, X, C, permutations=3, seed=5)
    assert np.allclose(table.order_gap, gaps.mean(axis=1)) and np.allclose(table.loss_spread, spread.mean(axis=1))
    again, _ = order_gaps(model, X, C, permutations=3, seed=5)
    assert np.array_equal(gaps, again)  # the same seed, the same relabellings


def test_code_order_is_judged_against_each_layers_own_initialization():
    import pandas as pd

    from kmtrf_core.book.ch16_codes import ORDER_MARGIN, codes_findings

    summary = pd.DataFrame({"final": [0.9, 0.95, 1.2]}, index=["oh", "bn", "na"])
    table = pd.DataFrame({"step1": [0.9, 0.95, 1.2]}, index=summary.index)
    sens = pd.DataFrame({"scheme": ["oh", "bn", "na"], "order_gap": [0.3, 0.3, 0.0]})
    rng = np.random.default_rng(4)
    noise = 0.02 * rng.standard_normal((3, 128))
    held_out = {"oh": 0.9 + noise, "bn": 0.95 + noise, "gc": 0.95 + noise, "na": 1.2 + noise}

    def order_verdict(trained, initial, na_gap=0.0):
        sens_na = sens.assign(order_gap=[0.3, 0.3, na_gap])
        order = {s: {"trained": trained + noise, "initial": initial + noise} for s in ("oh", "bn")}
        return codes_findings(summary, table, sens_na, held_out, order=order)["code_order"]

    assert order_verdict(0.3, 0.1).verdict == "reproduced"
    # the coded layers' part fails, NA's holds: partly
    assert order_verdict(0.3, 0.3).verdict == "partly"  # training changed nothing
    assert order_verdict(0.3, 0.5).verdict == "partly"  # training made the layers less order-bound
    assert order_verdict(0.3, 0.3 - ORDER_MARGIN / 2).verdict == "partly"  # within the margin
    assert order_verdict(0.3, 0.1, na_gap=0.05).verdict == "partly"  # NA moved: its check fails
    assert order_verdict(0.3, 0.5, na_gap=0.05).verdict == "not reproduced"
    assert "initialization" in order_verdict(0.3, 0.1).value
