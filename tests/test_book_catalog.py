"""The book's catalog of training runs (kmtrf_core.book.catalog, kmtrf_core.book.groups), and that chapters
train nothing outside it."""

import ast
import dataclasses
import json

import math
from pathlib import Path

import pandas as pd
import pytest

from kmtrf_core.book.catalog import book_catalog, main
from kmtrf_core.book.groups import PAPER_SCHEMES, SIX_CURVES, Run, RunGroup, Runs, run_summary
from kmtrf_core.book.profiles import PROFILES, get_profile
from kmtrf_core.embeddings import SCHEMES
from kmtrf_core.training import TrainConfig, TrainingDiverged, checkpoints, sweep
from kmtrf_core.training.runs import cache_key, cached_path

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
        if group.probe:  # at least twice the cap of every verdict group, one seed, on purpose
            assert group.base.until_flat is None and len(group.base.seeds) == 1, group.name
            assert group.base.steps >= 2 * max(g.base.steps for g in catalog.groups.values()
                                               if not g.probe and not g.early and g.name != "openq_ffn"), group.name
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


TINY = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)


def test_group_run_picks_exactly_one(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    group = RunGroup("g", TINY, {"scheme": ["oh", "bn"], "tau": [1.0, 0.1]}, "9", "test")
    assert group.field == "tau"
    run = group.run(scheme="bn", tau=0.1)
    assert run.config.scheme == "bn" and run.model.scheme == "bn"
    with pytest.raises(ValueError, match="picks 2 runs"):
        group.run(scheme="bn")
    with pytest.raises(ValueError, match="not \\['lr'\\]"):
        group.run(lr=0.1)
    runs = group.runs()
    assert len(runs) == 4 and len(list(tmp_path.glob("run-*.pt"))) == 4


def test_runs_are_keyed_by_grid_values_and_equal_the_sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    grid = {"scheme": ["oh", "bn"], "tau": [1.0, 0.1]}
    runs = RunGroup("g", TINY, grid, "9", "test").runs()
    assert isinstance(runs, Runs) and list(runs) == [("oh", 1.0), ("oh", 0.1), ("bn", 1.0), ("bn", 0.1)]
    assert all(isinstance(run, Run) and run.config.scheme == key[0] and run.config.tau == key[1]
               for key, run in runs.items())
    models, history = sweep(TINY, grid, cache=True)  # the same runs, loaded by the sweep
    assert list(runs.models) == list(models)
    pd.testing.assert_frame_equal(runs.history, history)


def test_each_run_is_read_from_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1, snapshots=True)
    group = RunGroup("g", base, {"scheme": ["oh", "bn"]}, "9", "test")
    group.runs()  # trains both and keeps them
    reads = []
    real = checkpoints.load_file
    monkeypatch.setattr("kmtrf_core.training.runs.load_file", lambda *a, **k: reads.append(a) or real(*a, **k))
    again = group.runs()
    one = group.run(scheme="bn")
    shared = RunGroup("other", base, {"scheme": ["bn"]}, "16", "a group sharing a run").run(scheme="bn")
    assert reads == []  # nothing read from disk again
    assert one is again[("bn",)] is shared
    assert len(one.history.attrs["snapshots"]) == 3  # the snapshots travel with the run


def test_a_diverged_run_raises_or_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    bad = TrainConfig(d=4, k=6, n=32, scheme="oh", lr=1e6, steps=20, batch=4, val_tasks=4, val_every=5)
    group = RunGroup("g", bad, {"lr": [1e6]}, "9", "test")
    with pytest.raises(TrainingDiverged):
        group.runs()
    runs = group.runs(on_diverge="record")
    assert runs.models == {(1e6,): None} and runs.history.diverged.all()
    assert group.runs(on_diverge="RECORD").models == {(1e6,): None}  # any case, as every choice
    with pytest.raises(TrainingDiverged):
        group.run(lr=1e6)
    with pytest.raises(ValueError, match="on_diverge"):
        group.runs(on_diverge="ignore")


def test_the_catalog_is_built_once_per_profile(monkeypatch):
    assert book_catalog("quick") is book_catalog(get_profile("quick"))
    monkeypatch.setenv("KMTRF_PROFILE", "quick")
    assert book_catalog() is book_catalog("quick") and book_catalog("book") is not book_catalog("quick")


def test_building_the_catalog_loads_no_data_set():
    import subprocess
    import sys

    code = ("import sys; from kmtrf_core.book.catalog import book_catalog; book_catalog('book'); "
            "print(sorted(m for m in sys.modules if m.startswith('sklearn')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_paper_schemes_are_the_curves_of_figure_2():
    assert SIX_CURVES["scheme"] == list(PAPER_SCHEMES)
    assert set(PAPER_SCHEMES) < set(SCHEMES)  # the book's own codes (gc, sc) come on top
    assert [s for s in SCHEMES if s in PAPER_SCHEMES] == list(PAPER_SCHEMES)  # in the paper's order


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_section4_base_is_what_the_chapters_trained_so_runs_are_shared(name):
    sizes = get_profile(name).chapter("section4")
    config = book_catalog(name)["section4_schemes"].base
    for before in (TrainConfig.from_sizes(sizes), TrainConfig.from_sizes(sizes, omega="l2")):
        assert config == before and cache_key(config) == cache_key(before)
    assert config.omega == "l2" and config.family == "normal" and config.seeds == tuple(sizes.seeds)


def test_run_summary_adds_time_per_step():
    group = RunGroup("g", TINY, {"scheme": ["oh", "bn"]}, "16", "test")
    history = pd.DataFrame({"scheme": ["oh"] * 3 + ["bn"] * 3, "seed": 0, "step": [0, 10, 20] * 2,
                            "train_loss": [math.nan, 2.0, 1.0] * 2, "val_relative_loss": [1.5, 1.2, 1.1] * 2,
                            "wall_time": [0.0, 1.0, 2.0, 0.0, 2.0, 4.0]})
    summary = run_summary(group, history)
    assert summary.ms_per_step.to_dict() == {"bn": 200.0, "oh": 100.0}
    with pytest.raises(ValueError, match="wall_time"):
        run_summary(group, history.drop(columns="wall_time"))


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
    # gc, sc, 2 unrolled, 2 annealed, 1 block, 2 trimmed, and the probes of SC, the trimmed, the unrolled, the
    # block and the two wide BN layers: Part III's own runs
    assert len(new) == 15
    for name, field in (("openq_wide_d_probe", "d"), ("openq_wide_k_probe", "k")):  # the wide layers, longer
        wide = catalog[name.removesuffix("_probe")].configs()
        probed = dataclasses.replace(catalog[name].base, steps=wide[0].steps, seeds=wide[0].seeds,
                                     until_flat=wide[0].until_flat, min_steps=wide[0].min_steps,
                                     snapshots=wide[0].snapshots)
        assert probed in wide and getattr(probed, field) == getattr(wide[0], field)
    unrolled = {c.unroll for c in catalog["openq_unroll"].configs()}
    assert catalog["openq_unroll_probe"].base.unroll in unrolled and catalog["openq_unroll_probe"].probe
    assert catalog["openq_ffn_probe"].base.steps == 2 * catalog["openq_ffn"].base.steps  # twice the block's own cap
    assert catalog["openq_ffn_probe"].base.ffn == catalog["openq_ffn"].configs()[0].ffn > 0


TRAINING = {"train", "train_cached", "sweep", "parallel_sweep", "train_many", "TrainConfig", "layer_for"}
"""Names that train a layer or declare a run; a chapter gets its layers from the catalog instead."""


def _trains_outside_the_catalog(code: str) -> list:
    """The imports and calls of ``code`` that train or declare runs (read from its syntax tree)."""
    tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kmtrf_core"):
            found += [f"import {node.module}.{alias.name}" for alias in node.names if alias.name in TRAINING]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in TRAINING:
                found.append(f"call {ast.unparse(func)}(...)")
    return found


def _code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_chapters_get_their_layers_from_the_catalog(path):
    assert _trains_outside_the_catalog(_code(path)) == [], f"{path.name} trains or declares runs itself"


@pytest.mark.parametrize("code", [
    "from kmtrf_core import train\nmodel, history = train(config)",
    "from kmtrf_core.training import TrainConfig",
    "import kmtrf_core\nkmtrf_core.train_cached(config)",
    "import kmtrf_core.training as t\nt.sweep(base, grid)",
    "from kmtrf_core.training.executor import train_many",
])
def test_the_catalog_check_sees_training_however_it_is_spelled(code):
    assert _trains_outside_the_catalog(code)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_chapter_with_trained_claims_has_a_probe(profile):
    # a verdict short of "reproduced" on trained layers needs a probe (claims.record refuses it otherwise)
    from kmtrf_core.book.claims import CLAIMS

    catalog = book_catalog(profile)
    probed = {group.chapter for group in catalog.groups.values() if group.probe}
    assert {"9", "10", "13", "15", "16", "21"} <= probed
    trained = {claim.chapter for claim in CLAIMS.values() if claim.trained}
    for chapter in trained:  # the notebook of each passes a probe group to record()
        text = (BOOK / f"{chapter}.ipynb").read_text()
        assert "probe" in text and "record(" in text, chapter


def test_a_probe_report_reads_its_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    from kmtrf_core.book.catalog import probe_group

    group = probe_group("tiny_probe", dataclasses.replace(TINY, until_flat=0.02, seeds=(1, 2)), "9", "a test")
    assert group.base.steps == 4 and group.base.seeds == (1,)
    line = group.runs().probe_report()
    assert line.startswith(f"tiny_probe (a test; one seed, 4 steps; validation curve over {TINY.val_tasks} tasks, "
                           "no interval): relative validation loss ") and "at step 2" in line  # names its layer
    assert line.endswith(("never below 1", "first below 1 at step 2", "first below 1 at step 4"))
    with pytest.raises(ValueError, match="not a probe"):
        RunGroup("g", TINY, {"scheme": ["oh"]}, "9", "test").runs().probe_report()


def test_cli_answers_an_unknown_profile_in_one_line_and_help_names_the_cache(monkeypatch, capsys):
    monkeypatch.setenv("KMTRF_PROFILE", "bogus")
    monkeypatch.setenv("KMTRF_CACHE", "/some/cache")
    with pytest.raises(SystemExit) as info:
        main(["--list"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("python -m kmtrf_core.book.catalog: error: profile must be")
    assert "'bogus'" in err
    assert main(["--list", "--profile", "quick"]) == 0  # an explicit profile wins over the environment
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("cached: the group's runs found in /some/cache")
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: $KMTRF_PROFILE, else book)" in text
    assert "$KMTRF_CACHE, else ~/.cache/kmtrf" in text and "here: /some/cache" in text


def test_chapters_get_their_layers_on_the_cpu(tmp_path, monkeypatch):
    """A layer trained on a GPU reaches the chapters on the CPU, where heldout makes their tasks."""
    import kmtrf_core.book.groups as groups  # its loader, with the run cache replaced

    moved = []

    class OnTheGpu:
        def cpu(self):
            moved.append(True)
            return "the layer on the cpu"

    monkeypatch.setattr(groups, "train_cached", lambda config: (OnTheGpu(), pd.DataFrame()))
    monkeypatch.setattr(groups, "_LOADED", {})
    monkeypatch.setenv("KMTRF_CACHE", str(tmp_path))
    run = groups._load(TrainConfig(d=2, k=3, n=16, steps=3))
    assert run.model == "the layer on the cpu" and moved == [True]
