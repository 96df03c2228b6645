"""Chapter 17's layers across sizes (kmtrf_core.book.ch17_d_and_k)."""

import numpy as np

from kmtrf_core import ClusterTransformer
from kmtrf_core.book.ch17_d_and_k import padding_finding, size_transfer
from kmtrf_core.book.heldout import eval_tasks
from kmtrf_core.training import TrainConfig


def test_size_transfer_of_the_construction_is_lloyd_at_every_size():
    config = TrainConfig(d=3, k=5, n=30)
    wide = ClusterTransformer.from_lloyd(3, 5, "bn")
    tests = {f"k={k}": tuple(t.double() for t in eval_tasks(config, 4, d=2, k=k)) for k in (2, 3)}
    table = size_transfer({"wide": {"bn": wide}}, tests, steps=3)
    assert (table.ratio - 1).abs().max() < 1e-9 and set(table.test) == set(tests)


def test_per_task_samples_match_the_table_and_decide_the_padding_verdict():
    config = TrainConfig(d=2, k=3, n=30)
    own = {"bn": ClusterTransformer.from_lloyd(2, 3, "bn"), "oh": ClusterTransformer.from_lloyd(2, 3, "oh")}
    wide = {"bn": ClusterTransformer.from_lloyd(4, 6, "bn"), "oh": ClusterTransformer.from_lloyd(4, 6, "oh")}
    tests = {"d=2": tuple(t.double() for t in eval_tasks(config, 16))}
    table, samples = size_transfer({"own": own, "wide": wide}, tests, steps=2, per_task=True)
    assert set(samples) == {("d=2", s, label) for s in ("bn", "oh") for label in ("own", "wide")}
    for (test, scheme, label), values in samples.items():
        rows = table[(table.scheme == scheme) & (table.model == label)].sort_values("step")
        assert values.shape == (3, 1, 16)
        assert np.allclose(values.mean(axis=-1)[:, 0], rows.ratio.to_numpy())
    finding = padding_finding(samples, "own", "wide", "d=2", 2)
    # both exact Lloyd: wide - 1.05 own = -0.05 on every task, entirely below 0
    assert finding.verdict == "reproduced" and "4 of 4 checks" in finding.report
    # the interval printed is of the quantity tested, and the line says which
    assert "(wide - 1.05 x own: -0.050 [-0.050, -0.050]" in finding.value


def test_a_wide_layer_far_behind_fails_and_a_close_one_is_inconclusive():
    rng = np.random.default_rng(0)
    own = 1 + 0.05 * rng.standard_normal((3, 1, 32))
    far = {("t", "bn", "own"): own, ("t", "bn", "wide"): own * 1.3}
    assert padding_finding(far, "own", "wide", "t", 2).verdict == "not reproduced"
    close = {("t", "bn", "own"): own, ("t", "bn", "wide"): own * 1.05 + 0.05 * rng.standard_normal((3, 1, 32))}
    assert padding_finding(close, "own", "wide", "t", 2).verdict == "inconclusive"
