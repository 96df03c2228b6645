import dataclasses

import numpy as np
import pandas as pd
import pytest

from kmtrf_core.book import get_profile
from kmtrf_core.book.catalog import DATASET_SIZES, MIXED_FAMILIES, book_catalog
from kmtrf_core.book.ch15_real_data import (
    BROAD,
    DATASETS,
    RECIPES,
    Comparison,
    load_dataset,
    realdata_findings,
    recipe_of,
    start_ratios,
    summary_table,
)
from kmtrf_core.estimator import learned_config
from kmtrf_core.training import TrainConfig


@pytest.mark.parametrize("name", list(DATASETS))
def test_the_catalog_knows_each_data_set_s_shape(name):
    data = load_dataset(name)
    assert (data.d, data.k) == DATASET_SIZES[name]  # the catalog declares them without loading scikit-learn
    assert data.X.min() == 0.0 and data.X.max() == 1.0 and len(data.y) == len(data.X)


def test_load_dataset_refuses_an_unknown_name():
    with pytest.raises(ValueError, match="dataset"):
        load_dataset("mnist")


def test_every_recipe_is_recognised_and_others_refused():
    for name, fields in RECIPES.items():
        assert recipe_of(TrainConfig(**fields)) == name
    with pytest.raises(ValueError, match="no recipe"):
        recipe_of(TrainConfig(family="cauchy"))
    assert RECIPES[BROAD] == dict(family=MIXED_FAMILIES, anisotropic=True) and list(RECIPES) == ["plain", BROAD]


@pytest.mark.parametrize("profile", ["quick", "book", "paper"])
def test_the_chapter_trains_every_recipe_per_data_set(profile):
    catalog = book_catalog(profile)
    names = [key[len("realdata_"):] for key in catalog.groups
             if key.startswith("realdata_") and not key.startswith("realdata_probe")]
    for name in names:
        recipes = sorted(recipe_of(config) for config in catalog[f"realdata_{name}"].configs())
        assert recipes == sorted(RECIPES), name


@pytest.mark.parametrize("name", get_profile("book").chapter("realdata").datasets)
def test_the_estimator_s_learned_layer_is_the_book_s_plain_layer(name):
    """``TransformerKMeans(layer="learned")`` trains the first seed of the run chapter 15 shows (plain
    recipe, book profile): the same config with one seed, not a look-alike."""
    d, k = DATASET_SIZES[name]
    group = book_catalog("book")[f"realdata_{name}"]
    plain = [config for config in group.configs() if recipe_of(config) == "plain"]
    assert len(plain) == 1 and len(plain[0].seeds) >= 3 and plain[0].seeds[0] == 0
    assert dataclasses.replace(plain[0], seeds=(0,)) == learned_config(d, k)


def _comparison(name, plain_first, plain_last, broad_last, starts=16, seed=0):
    """A Comparison whose per-start ratios sit around the given means (small noise), steps 1 and 5."""
    noise = 0.01 * np.random.default_rng(seed).standard_normal(starts)
    rows = []
    for method, first, last in (("plain", plain_first, plain_last), (BROAD, 1.5, broad_last), ("Lloyd", 1.0, 1.0)):
        for start in range(starts):
            extra = 0.0 if method == "Lloyd" else noise[start]
            rows += [dict(dataset=name, method=method, member=0, start=start, step=1, ratio=first + extra,
                          inertia=1.0),
                     dict(dataset=name, method=method, member=0, start=start, step=5, ratio=last + extra,
                          inertia=1.0)]
    return Comparison(pd.DataFrame(rows), pd.DataFrame())


def test_start_ratios_read_each_start_in_order():
    out = start_ratios([_comparison("a", 0.9, 0.8, 0.7, starts=3)], "plain", 5)
    assert list(out) == ["a"] and out["a"].shape == (1, 3) and np.allclose(out["a"].mean(), 0.8, atol=0.02)
    with pytest.raises(ValueError, match="no method"):
        start_ratios([_comparison("a", 0.9, 0.8, 0.7)], "none", 5)


def test_realdata_findings_are_decided_on_intervals_over_starts():
    ahead = [_comparison("set0", 0.9, 0.9, 0.85), _comparison("set1", 0.8, 0.9, 0.95)]
    behind = [_comparison("set0", 1.1, 1.1, 1.2), _comparison("set1", 1.2, 1.3, 1.4)]
    finals = pd.DataFrame({"dataset": ["set0", "set0", "set1"], "lloyd_matches_kmeans": [True, False, True]})
    out = realdata_findings(ahead, behind, finals, steps=5, starts=16)
    assert out["estimator_equals_kmeans"].verdict == "partly"  # set0 differs from one start
    assert out["realdata_first_step"].verdict == "partly"  # ahead from k-means++, behind from random
    assert out["recipe_transfers"].verdict == "partly"  # the broad recipe wins on set0, loses on set1
    assert "random starts" in out["realdata_first_step"].report and out["realdata_many_steps"].report
    line = out["recipe_transfers"].report.splitlines()[0]  # says which statistic the interval is about
    assert "(medians over 1 training seed, the difference paired by seed) -0.050 [" in line
    out = realdata_findings(ahead, ahead, finals.iloc[[0, 2]], steps=5, starts=16)
    assert {claim: f.verdict for claim, f in out.items()} == {
        "estimator_equals_kmeans": "reproduced", "realdata_first_step": "reproduced",
        "realdata_many_steps": "reproduced", "recipe_transfers": "partly"}
    level = [_comparison("set0", 1.0, 1.0, 1.0)]  # on Lloyd and on plain: inside the noise
    out = realdata_findings(level, level, finals.iloc[[0]], steps=5, starts=16)
    assert out["realdata_first_step"].verdict == "inconclusive"
    assert out["recipe_transfers"].verdict == "not reproduced"  # not below plain by the margin


def test_summary_table_is_the_median_over_starts():
    paths = pd.DataFrame({"dataset": "a", "method": "plain", "start": [0, 1, 2], "step": 1,
                          "ratio": [0.5, 0.9, 2.0], "inertia": [1.0, 1.0, 1.0]})
    finals = pd.DataFrame({"dataset": "a", "method": "plain", "start": [0, 1, 2], "ari": [0.1, 0.2, 0.3],
                           "nmi": [0.1, 0.2, 0.3], "inertia": [1.0, 1.0, 1.0], "clusters": [3, 3, 3], "seconds": [1.0, 1.0, 1.0]})
    table = summary_table([Comparison(paths, finals)])
    assert np.isclose(table.loc[("a", "plain"), "ratio_step1"], 0.9)


def test_an_ensemble_runs_member_by_member_from_the_same_starts():
    import torch

    from kmtrf_core.book.ch15_real_data import compare_methods
    from kmtrf_core.model import ClusterTransformer

    data = load_dataset("iris")
    ensemble = ClusterTransformer(4, 3, "bn", ensemble=3, generator=torch.Generator().manual_seed(0))
    out = compare_methods(data, {"layers": ensemble, "padded": dict(layer=ensemble)}, starts=2, steps=2)
    layer_rows = out.paths[out.paths.method == "layers"]
    assert sorted(layer_rows.member.unique()) == [0, 1, 2] and sorted(layer_rows.start.unique()) == [0, 1]
    padded = out.paths[out.paths.method == "padded"]  # options given as a dict are expanded the same way
    assert np.allclose(padded.ratio.to_numpy(), layer_rows.ratio.to_numpy())
    ratios = start_ratios([out], "layers", 2)["iris"]
    assert ratios.shape == (3, 2)
    single = compare_methods(data, {"one": ensemble.members()[1]}, starts=2, steps=2)
    assert np.allclose(start_ratios([single], "one", 2)["iris"][0], ratios[1])
    assert set(summary_table([out]).index.get_level_values("method")) >= {"Lloyd", "layers", "padded"}


def test_a_group_can_keep_part_of_its_grid():
    from kmtrf_core.book.groups import RunGroup

    base = TrainConfig(d=2, k=3, n=16)
    grid = {"family": ["normal", MIXED_FAMILIES], "anisotropic": [False, True]}
    group = RunGroup("demo", base, grid, "15", "a test", only=(("normal", False), (MIXED_FAMILIES, True)))
    assert [(c.family, c.anisotropic) for c in group.configs()] == [("normal", False), (MIXED_FAMILIES, True)]
    with pytest.raises(ValueError, match="outside its grid"):
        RunGroup("demo", base, grid, "15", "a test", only=(("cauchy", False),))
