"""Chapter 17's layers across sizes (kmtrf_core.book.ch17_d_and_k)."""

from kmtrf_core import ClusterTransformer
from kmtrf_core.book.ch17_d_and_k import size_transfer
from kmtrf_core.book.heldout import eval_tasks
from kmtrf_core.training import TrainConfig


def test_size_transfer_of_the_construction_is_lloyd_at_every_size():
    config = TrainConfig(d=3, k=5, n=30)
    wide = ClusterTransformer.from_lloyd(3, 5, "bn")
    tests = {f"k={k}": tuple(t.double() for t in eval_tasks(config, 4, d=2, k=k)) for k in (2, 3)}
    table = size_transfer({"wide": {"bn": wide}}, tests, steps=3)
    assert (table.ratio - 1).abs().max() < 1e-9 and set(table.test) == set(tests)
