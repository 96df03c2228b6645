"""The book's catalog of training runs (kmtrf_core.book.catalog)."""

import json
import re
from pathlib import Path

import pytest

from kmtrf_core.book.catalog import SIX_CURVES, Catalog, RunGroup, book_catalog, main
from kmtrf_core.book.profiles import PROFILES
from kmtrf_core.training import TrainConfig
from kmtrf_core.training.runs import cached_path

BOOK = Path(__file__).resolve().parent.parent / "book"


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_declares_the_same_groups(name):
    catalog = book_catalog(name)
    assert set(catalog.groups) >= {"figure2a", "figure2b", "section4_schemes", "section4_families", "landscape",
                                   "ablation_tau", "figure17"}
    assert all(isinstance(group, RunGroup) for group in catalog.groups.values())
    assert len(catalog.configs()) == len({cached_path(config).name for config in catalog.configs()})


def test_at_the_book_profile_every_verdict_group_trains_until_flat_past_the_plateau():
    catalog = book_catalog("book")
    for group in catalog.groups.values():
        if group.early:
            assert group.chapter == "9" and group.name.startswith(("ablation", "figure17"))
            continue
        if group.probe:  # a longer fixed budget than any verdict group's, on purpose
            assert group.base.until_flat is None
            assert group.base.steps > max(g.base.steps for g in catalog.groups.values() if not g.probe)
            continue
        assert group.base.until_flat is not None, group.name
        # at lr 0.01 the plateau ends between step 1000 and 2400 at these sizes (chapter 9)
        assert group.base.min_steps >= 2500 and group.base.steps >= 2 * group.base.min_steps, group.name
        assert group.base.val_every * 10 <= group.base.min_steps, group.name


def test_the_paper_profile_trains_the_papers_fixed_budget():
    for group in book_catalog("paper").groups.values():
        if not group.early and not group.probe:
            assert group.base.until_flat is None and group.base.steps == 10000, group.name


def test_section4_groups_share_their_runs():
    catalog = book_catalog("book")
    schemes = {cached_path(c).name for c in catalog["section4_schemes"].configs() if c.omega == "l2"}
    families = {cached_path(c).name for c in catalog["section4_families"].configs()
                if c.family == "normal" and c.omega == "l2"}
    assert schemes == families and len(schemes) == 3


def test_group_run_picks_exactly_one(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
    group = RunGroup("g", base, {"scheme": ["oh", "bn"], "tau": [1.0, 0.1]}, "9", "test")
    assert group.field == "tau"
    run = group.run(scheme="bn", tau=0.1)
    assert run.config.scheme == "bn" and run.model.scheme == "bn"
    with pytest.raises(ValueError, match="picks 2 runs"):
        group.run(scheme="bn")
    with pytest.raises(ValueError, match="not \\['lr'\\]"):
        group.run(lr=0.1)
    models, history = group.runs()
    assert len(models) == 4 and len(list(tmp_path.glob("run-*.pt"))) == 4


def test_rule_and_table(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    catalog = book_catalog("book")
    assert "2%" in catalog["figure2a"].rule and "step 2500" in catalog["figure2a"].rule
    assert catalog["ablation_tau"].rule.endswith("(early training)")
    table = catalog.table()
    assert (table.cached == 0).all() and table.loc["figure2a", "runs"] == 12
    with pytest.raises(ValueError, match="no run group"):
        catalog["nope"]


def test_unknown_group_and_cli_list(capsys):
    assert main(["--profile", "quick", "--list"]) == 0
    assert "figure2a" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["--profile", "quick", "--workers", "0"])
    assert info.value.code == 2


def _code(path):
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_chapters_get_their_layers_from_the_catalog(path):
    code = _code(path)
    for call in ("train_cached(", "sweep(", "TrainConfig(", "TrainConfig.from_sizes(", "trained_layers("):
        assert call not in code, f"{path.name} declares or trains runs itself ({call})"


def test_part_three_reuses_the_runs_of_parts_one_and_two():
    """Part III's baselines are the very runs of chapters 9 and 13 (the cache trains them once)."""
    catalog = book_catalog("book")

    def keys(name, **match):
        return {cached_path(c).name for c in catalog[name].configs()
                if all(getattr(c, field) == value for field, value in match.items())}

    figure2a = keys("figure2a", tau=0.1, omega="l2")
    assert keys("openq_codes", scheme="oh") | keys("openq_codes", scheme="bn") | keys("openq_codes", scheme="na") \
        == figure2a
    assert keys("openq_wide_d") == keys("plateau_d", d=8)
    assert keys("openq_wide_k") == keys("plateau_k", k=10)
    assert catalog["openq_ffn"].base.steps > catalog["openq_codes"].base.steps  # the rule stops it, not the cap
    assert keys("openq_cauchy", trim=0.0) == keys("section4_families", family="cauchy", scheme="oh") | keys(
        "section4_families", family="cauchy", scheme="bn")
    new = {cached_path(c).name for name, g in catalog.groups.items() if name.startswith("openq")
           for c in g.configs()} - {cached_path(c).name for name, g in catalog.groups.items()
                                    if not name.startswith("openq") for c in g.configs()}
    assert len(new) == 10  # gc, sc, 2 unrolled, 2 annealed, 1 block, 2 trimmed, the SC probe: Part III's own runs
