"""The catalog: every training run the book uses, per profile, by name.

A chapter never declares a training config or trains a layer; it asks the
catalog for a named group of runs::

    catalog = book_catalog()            # the profile in force, built once per process
    runs = catalog.runs("figure2a")     # Runs: grid values -> Run(config, model, history)
    runs.models, runs.history           # every model, and one tidy history
    catalog["figure2a"].run(tau=0.1, scheme="oh", omega="l2")   # one of them

A :class:`RunGroup` is a base :class:`~kmtrf_core.training.TrainConfig` and a
grid of fields over it; each config of the grid is one run in the run cache
(keyed by config and code), so groups that share a config share its run. A
run is read from the cache once per process: :meth:`RunGroup.runs` and
:meth:`RunGroup.run` share what they loaded, weights, history and snapshots
together. ``make models`` (``python -m kmtrf_core.book.catalog``) trains
every missing run in parallel on Dask
(:func:`~kmtrf_core.training.executor.train_many`); a chapter opened alone
trains what it is missing on demand, so each chapter still runs by itself.

Budgets come from convergence. Every group a claim or a verdict rests on
trains with ``until_flat`` (:mod:`kmtrf_core.training.convergence`): it stops
once its validation curve has flattened, from the profile's ``min_steps`` on,
and at most at ``steps``. At the ``book`` profile ``min_steps`` is 2500: at
lr 0.01 the relative validation loss sits on a plateau near 1.6-1.8 and
leaves it between step 1000 and 2400 in every configuration measured at
these sizes (chapter 9, "The plateau"), and a plateau looks flat. Groups
marked ``early`` have a short fixed budget on purpose (the Appendix F
ablations of chapter 9: what the first steps look like); no verdict rests on
them. The ``paper`` profile trains the paper's fixed 10000 steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd
from tqdm.auto import tqdm

from ..objectives import OMEGAS
from ..tasks import FAMILIES
from ..training import TrainConfig, TrainingDiverged, cache_dir, train_cached
from ..training.convergence import FLAT_RULE, FLAT_TOLERANCE, flattening
from ..training.executor import train_many
from ..training.runs import cached_path, grid_configs, tidy_history
from ..validation import check_choice, check_table
from .profiles import PROFILES, Profile, get_profile

__all__ = ["DATASET_SIZES", "MIXED_FAMILIES", "PAPER_SCHEMES", "SIX_CURVES", "Catalog", "Run", "RunGroup",
           "Runs", "book_catalog", "main", "run_summary"]

PAPER_SCHEMES = ("oh", "bn", "na")
"""The paper's three token embeddings, in its order (:data:`~kmtrf_core.embeddings.SCHEMES` adds the book's own)."""

SIX_CURVES = {"scheme": list(PAPER_SCHEMES), "omega": ["ne", "l2"]}
"""The paper's six curves per panel: token embedding times regularized min (Figure 2)."""

MIXED_FAMILIES = ("normal", "gumbel", "laplace", "lognormal")
"""The four task families that transfer to one another (chapter 11); cauchy is left out (chapter 13)."""

DATASET_SIZES = {"iris": (4, 3), "wine": (13, 3), "breast_cancer": (30, 2), "digits": (64, 10)}
"""``(d, k)`` of each real data set of chapter 15 (features, classes), so that building the catalog loads
no data (a test checks them against :func:`~kmtrf_core.book.ch15_real_data.load_dataset`)."""


class Run(NamedTuple):
    """One run of a group: its config, its trained layer and its history (:meth:`RunGroup.run`).

    The history keeps the weight snapshots of a config with ``snapshots``
    (``history.attrs["snapshots"]``). A run that diverged has ``model=None``
    and ``diverged`` set to the :class:`~kmtrf_core.training.TrainingDiverged` it raised.

    >>> run = Run(TrainConfig(d=2, k=3, n=16), None, pd.DataFrame())
    >>> run.config.d, run.model is None, run.diverged is None
    (2, True, True)
    """

    config: TrainConfig
    model: object
    history: pd.DataFrame
    diverged: object = None


_LOADED: dict = {}
"""Cache file -> :class:`Run`: each run is read from the run cache once per process."""


def _load(config: TrainConfig) -> Run:
    """The run of ``config``: from this process's memory, else the run cache (trained there if missing)."""
    path = str(cached_path(config))
    if path not in _LOADED:
        try:
            model, history = train_cached(config)
            _LOADED[path] = Run(config, model, history)
        except TrainingDiverged as err:
            _LOADED[path] = Run(config, None, err.history, err)
    return _LOADED[path]


class Runs(Mapping):
    """The runs of a :class:`RunGroup`: grid values (a tuple in the grid's order) -> :class:`Run`.

    Attributes
    ----------
    group : RunGroup
    models : dict
        Grid values -> model (``None`` for a run that diverged).
    history : pandas.DataFrame
        Every run's history in one table, with a column per grid field, the
        main config fields and ``diverged``
        (:func:`~kmtrf_core.training.runs.tidy_history`).

    Examples
    --------
    >>> config = TrainConfig(d=2, k=3, n=16, scheme="oh")
    >>> runs = Runs(RunGroup("demo", config, {"scheme": ["oh"]}, "9", "a test"),
    ...             {("oh",): Run(config, None, pd.DataFrame({"step": [0]}))})
    >>> list(runs), runs.models, runs.history.scheme.tolist()
    ([('oh',)], {('oh',): None}, ['oh'])
    """

    def __init__(self, group: "RunGroup", runs: dict):
        self.group = group
        self._runs = dict(runs)
        self.models = {key: run.model for key, run in self._runs.items()}
        self.history = pd.concat(
            [tidy_history(run.config, run.history, group.grid, diverged=run.diverged is not None)
             for run in self._runs.values()], ignore_index=True)

    def __getitem__(self, key) -> Run:
        return self._runs[key]

    def __iter__(self):
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def __repr__(self) -> str:
        return f"Runs({self.group.name!r}, {len(self)} runs)"


@dataclass(frozen=True)
class RunGroup:
    """A named set of runs: ``base`` with every combination of ``grid`` (one sweep).

    Attributes
    ----------
    name : str
        How chapters ask for it.
    base : TrainConfig
        The fields the runs share.
    grid : dict
        Field -> list of values; the runs are their product, in this order.
    chapter : str
        The chapter that uses it (others may share its runs).
    about : str
        One line: what the runs are for.
    early : bool
        A short fixed budget on purpose (no verdict rests on it).
    probe : bool
        A fixed budget longer than the verdict groups' (the check that a
        negative verdict is not an artifact of the budget).

    Examples
    --------
    >>> group = RunGroup("demo", TrainConfig(d=2, k=3, n=16), {"scheme": ["oh", "bn"]}, "9", "a test")
    >>> [config.scheme for config in group.configs()], group.field
    (['oh', 'bn'], 'scheme')
    """

    name: str
    base: TrainConfig
    grid: dict = field(repr=False)
    chapter: str
    about: str
    early: bool = False
    probe: bool = False

    def configs(self) -> list:
        """The runs' configs, in the grid's order."""
        return list(grid_configs(self.base, self.grid).values())

    @property
    def field(self) -> str:
        """The first grid field that is not a curve of :data:`SIX_CURVES` (the swept one)."""
        return next((name for name in self.grid if name not in SIX_CURVES), next(iter(self.grid)))

    def runs(self, *, on_diverge: str = "raise", progress: bool = False) -> Runs:
        """Every run of the group, keyed by its grid values, each read from the run cache once per process.

        Missing runs are trained here, one after the other (``make models``
        trains them in parallel beforehand).

        Parameters
        ----------
        on_diverge : {"raise", "record"}
            A run that diverged raises its
            :class:`~kmtrf_core.training.TrainingDiverged`, or is kept with
            ``model=None`` and its history up to the divergence.
        progress : bool
            A progress bar over the runs.
        """
        check_choice(on_diverge, "on_diverge", ("raise", "record"))
        configs = grid_configs(self.base, self.grid)
        runs = {}
        for values, config in tqdm(list(configs.items()), disable=not progress, desc=self.name):
            run = _load(config)
            if run.diverged is not None and on_diverge == "raise":
                raise run.diverged
            runs[values] = run
        return Runs(self, runs)

    def run(self, **values) -> Run:
        """The one run of the group with these grid values, read once per process (with its snapshots, if kept).

        >>> import os, tempfile
        >>> from unittest import mock
        >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1, snapshots=True)
        >>> group = RunGroup("demo", base, {"scheme": ["oh", "bn"]}, "9", "a test")
        >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
        ...     run = group.run(scheme="bn")
        ...     same = group.runs()[("bn",)]
        >>> run.config.scheme, len(run.history.attrs["snapshots"]), run is same
        ('bn', 3, True)
        """
        unknown = sorted(set(values) - set(self.grid))
        if unknown:
            raise ValueError(f"group {self.name!r} varies {sorted(self.grid)}, not {unknown}")
        matches = [config for config in self.configs()
                   if all(getattr(config, name) == value for name, value in values.items())]
        if len(matches) != 1:
            raise ValueError(f"{values} picks {len(matches)} runs of group {self.name!r}, not one")
        run = _load(matches[0])
        if run.diverged is not None:
            raise run.diverged
        return run

    def report(self, history) -> pd.DataFrame:
        """Per run: steps trained, final relative validation loss, whether it flattened, where it beat Lloyd.

        Judged by the rule of :mod:`~kmtrf_core.training.convergence` with
        the group's tolerance and ``min_steps`` (an ``early`` group reports
        ``flattened`` as well, and it will mostly say False).
        """
        tol = self.base.until_flat or FLAT_TOLERANCE
        return flattening(history, by=list(self.grid), tol=tol, min_steps=self.base.min_steps)

    @property
    def rule(self) -> str:
        """The stopping rule of the group, in words."""
        if self.early or self.base.until_flat is None:
            return f"a fixed budget of {self.base.steps} steps" + (" (early training)" if self.early else "")
        return (FLAT_RULE.format(tol=self.base.until_flat).replace("min_steps", f"step {self.base.min_steps}")
                + f"; at most {self.base.steps} steps")


@dataclass
class Catalog:
    """Every :class:`RunGroup` of one profile, by name.

    Examples
    --------
    >>> catalog = book_catalog("quick")
    >>> "figure2a" in catalog.groups, catalog["figure2a"].base.n
    (True, 48)
    >>> len(catalog.configs()) == len({cached_path(c).name for c in catalog.configs()})
    True
    """

    profile: Profile
    groups: dict

    def __getitem__(self, name: str) -> RunGroup:
        if name not in self.groups:
            raise ValueError(f"no run group {name!r} in the {self.profile.name} catalog; known: {sorted(self.groups)}")
        return self.groups[name]

    def runs(self, name: str, **options) -> Runs:
        """:meth:`RunGroup.runs` of the group ``name``."""
        return self[name].runs(**options)

    def configs(self) -> list:
        """Every distinct run config of every group (a run shared by groups appears once)."""
        unique = {}
        for group in self.groups.values():
            for config in group.configs():
                unique.setdefault(cached_path(config).name, config)
        return list(unique.values())

    def table(self) -> pd.DataFrame:
        """One row per group: its chapter, size, budget rule, how many of its runs are cached, what it is for."""
        rows = []
        for group in self.groups.values():
            configs = group.configs()
            rows.append(dict(group=group.name, chapter=group.chapter, runs=len(configs),
                             seeds=len(group.base.seeds), cached=sum(cached_path(c).exists() for c in configs),
                             budget=group.rule, about=group.about))
        return pd.DataFrame(rows).set_index("group")

    def train_missing(self, **options) -> pd.DataFrame:
        """Train every run the cache lacks, in parallel (:func:`~kmtrf_core.training.executor.train_many`)."""
        return train_many(self.configs(), **options)


def _figure2a_base(sizes) -> TrainConfig:
    """Chapter 9's Figure 2(a) setting, weights kept at every validation; Part III shares its runs."""
    return TrainConfig.from_sizes(sizes, d=sizes.fig2a_d, lr=0.01, gamma=1.0, snapshots=True)


def _section4_base(section4, family: str = "normal") -> TrainConfig:
    """The Section 4 layers' setting (L2); Part III's Cauchy layers share chapter 13's runs."""
    return TrainConfig.from_sizes(section4, omega="l2", family=family)


def _training_groups(sizes) -> list:
    """Chapter 9: Figure 2, the plateau study and the Appendix F ablations."""
    base = _figure2a_base(sizes)
    plain = dataclasses.replace(base, snapshots=False)
    early = dataclasses.replace(plain, steps=sizes.ablation_steps, until_flat=None, min_steps=0)
    groups = [
        RunGroup("figure2a", base, {"tau": sizes.fig2a_taus, **SIX_CURVES}, "9",
                 "Figure 2(a): tau, six curves; weights kept at every validation (the plateau study)"),
        RunGroup("figure2b", dataclasses.replace(plain, tau=sizes.fig2b_tau), {"d": sizes.fig2b_ds, **SIX_CURVES},
                 "9", "Figure 2(b): the dimension, six curves"),
    ]
    for name, values in sizes.plateau.items():
        groups.append(RunGroup(f"plateau_{name}", dataclasses.replace(plain, tau=0.1, omega="l2"),
                               {name: values, "scheme": ["oh", "bn"]}, "9",
                               f"where the plateau ends as {name} changes (OH and BN, L2, tau 0.1)"))
    small_tau = dataclasses.replace(early, tau=0.1)
    groups += [
        RunGroup("ablation_tau", early, {"tau": sizes.fig10_taus, **SIX_CURVES}, "9", "Figure 10", early=True),
        RunGroup("ablation_lr", small_tau, {"lr": sizes.fig11_lrs, **SIX_CURVES}, "9", "Figure 11", early=True),
        RunGroup("ablation_n", small_tau, {"n": sizes.fig13_ns, **SIX_CURVES}, "9", "Figure 13", early=True),
        RunGroup("ablation_d", dataclasses.replace(early, tau=0.25), {"d": sizes.fig14_ds, **SIX_CURVES}, "9",
                 "Figure 14", early=True),
    ]
    for d, tau in sizes.fig15_cases:
        groups.append(RunGroup(f"ablation_k_d{d}_tau{tau:g}", dataclasses.replace(early, d=d, tau=tau),
                               {"k": sizes.fig15_ks, **SIX_CURVES}, "9", f"Figure 15 (d={d}, tau={tau})",
                               early=True))
    d17, k17 = sizes.fig17_dk
    groups.append(RunGroup("figure17", dataclasses.replace(early, d=d17, k=k17, tau=1.0, clip=1.0, omega="l2"),
                           {"n": sizes.fig17_ns, "scheme": ["oh", "bn"]}, "9",
                           "Figure 17: wall-clock time, OH against BN", early=True))
    return groups


def _section4_groups(section4, cauchy, landscape) -> list:
    """Chapters 10-14: the Section 4 layers, and the layers of the loss landscapes."""
    base = _section4_base(section4)
    return [
        RunGroup("section4_schemes", base, {"scheme": list(PAPER_SCHEMES), "omega": list(OMEGAS)}, "10",
                 "Section 4 layers on the normal family, every embedding and regularized min (chapters 10, 11)"),
        RunGroup("section4_families", base,
                 {"family": list(FAMILIES), "scheme": list(cauchy.schemes), "omega": list(cauchy.omegas)}, "13",
                 "layers trained on each task family (chapters 11, 13, 14: the L2 ones)"),
        RunGroup("landscape", TrainConfig.from_sizes(landscape, omega="l2"),
                 {"d": landscape.ds, "scheme": ["oh", "bn"]}, "12", "the layers whose loss surfaces chapter 12 draws"),
    ]


def _realdata_groups(sizes) -> list:
    """Chapter 15: per real data set, one layer per training recipe (:data:`~kmtrf_core.book.ch15_real_data.RECIPES`)."""
    groups = []
    for name in sizes.datasets:
        d, k = DATASET_SIZES[name]
        base = TrainConfig.from_sizes(sizes, d=d, k=k, scheme="bn", omega="l2", gamma=1.0)
        groups.append(RunGroup(
            f"realdata_{name}", base, {"family": ["normal", MIXED_FAMILIES], "anisotropic": [False, True]}, "15",
            f"layers for {name} (d={d}, k={k}), one per training recipe (BN, L2)"))
        if name == sizes.datasets[0]:  # the longer probe: is the verdict a budget artifact?
            probe = dataclasses.replace(base, steps=sizes.probe_steps, until_flat=None, min_steps=0)
            groups.append(RunGroup(
                "realdata_probe", probe, {"steps": [sizes.probe_steps]}, "15",
                f"the {name} plain layer trained {sizes.probe_steps} steps, not until flat (the probe)",
                probe=True))
    return groups


def _openq_groups(training, section4, openq) -> list:
    """Part III (chapters 16-21): Appendix A's open questions, run as experiments.

    The base is chapter 9's Figure 2(a) layer at tau 0.1 with L2 (weights kept
    at every validation), so the paper's schemes are shared runs; the wide
    layers of chapter 17 are the plateau study's ``d`` and ``k`` runs; the
    Cauchy layers of chapter 21 are chapter 13's, plus trimmed ones.
    """
    base = dataclasses.replace(_figure2a_base(training), tau=0.1, omega="l2")
    plain = dataclasses.replace(base, snapshots=False)
    bn = dataclasses.replace(base, scheme="bn")
    cauchy = _section4_base(section4, family="cauchy")
    return [
        RunGroup("openq_codes", base, {"scheme": ["oh", "bn", "gc", "sc", "na"]}, "16",
                 "every token embedding at one setting: the paper's three, Gray-coded BN and scalar codes"),
        RunGroup("openq_wide_d", plain, {"d": [openq.wide_d], "scheme": ["oh", "bn"]}, "17",
                 f"layers trained at d'={openq.wide_d}, used on smaller d by zero-padding"),
        RunGroup("openq_wide_k", plain, {"k": [openq.wide_k], "scheme": ["oh", "bn"]}, "17",
                 f"layers trained at k'={openq.wide_k}, used on smaller k with filler centers"),
        RunGroup("openq_unroll", bn, {"unroll": [openq.unroll], "unroll_loss": ["last", "sum"]}, "18",
                 f"BN layers trained for {openq.unroll}-step clustering (unrolled, re-embedded)"),
        RunGroup("openq_anneal_gamma", bn, {"gamma_end": [openq.gamma_end]}, "18",
                 f"the BN layer with gamma annealed from 1 to {openq.gamma_end:g} during training"),
        RunGroup("openq_anneal_tau", bn, {"tau_end": [openq.tau_end]}, "18",
                 f"the BN layer with tau annealed from 0.1 to {openq.tau_end:g} during training"),
        # a cap 1.5x the usual when runs stop on flatness: with the block the curve is still falling at the usual
        # cap; the rule, not the cap, stops the run, and the layer without the block (openq_codes) stopped before
        RunGroup("openq_ffn", dataclasses.replace(bn, steps=bn.steps if bn.until_flat is None else bn.steps * 3 // 2),
                 {"ffn": [openq.ffn]}, "19",
                 f"the BN layer with a feedforward block of width {openq.ffn} (without it: openq_codes)"),
        RunGroup("openq_probe", dataclasses.replace(base, scheme="sc", steps=openq.probe_steps, until_flat=None,
                                                    min_steps=0),
                 {"steps": [openq.probe_steps]}, "16",
                 f"the scalar-code layer trained {openq.probe_steps} steps, not until flat (the probe)", probe=True),
        RunGroup("openq_cauchy", cauchy, {"trim": [0.0, openq.trim], "scheme": ["oh", "bn"]}, "21",
                 f"layers trained on Cauchy tasks with the paper's loss and a {openq.trim:g}-trimmed one"),
    ]


def book_catalog(profile: Profile | str | None = None) -> Catalog:
    """The catalog of the given profile (default: the one in force), built once per profile and process.

    Parameters
    ----------
    profile : Profile or str, optional
        ``"quick"``, ``"book"`` or ``"paper"``.

    Returns
    -------
    Catalog

    Examples
    --------
    >>> catalog = book_catalog("book")
    >>> catalog["figure2a"].base.until_flat, catalog["figure2a"].base.min_steps, catalog["ablation_tau"].early
    (0.02, 2500, True)
    >>> book_catalog("book") is catalog
    True
    """
    name = profile.name if isinstance(profile, Profile) else get_profile(profile).name
    return _catalog(name)


@functools.lru_cache(maxsize=None)
def _catalog(name: str) -> Catalog:
    profile = get_profile(name)
    groups = _training_groups(profile.chapter("training"))
    groups += _section4_groups(profile.chapter("section4"), profile.chapter("cauchy"), profile.chapter("landscape"))
    groups += _realdata_groups(profile.chapter("realdata"))
    groups += _openq_groups(profile.chapter("training"), profile.chapter("section4"), profile.chapter("openq"))
    return Catalog(profile=profile, groups={group.name: group for group in groups})


def run_summary(group: RunGroup, history) -> pd.DataFrame:
    """Per run of a group: :meth:`RunGroup.report` plus training time and time per step.

    Parameters
    ----------
    group : RunGroup
        The catalog group.
    history : pandas.DataFrame
        Its runs' history (``group.runs().history``).

    Returns
    -------
    pandas.DataFrame
        The report's columns and ``seconds`` (wall time of the run, all seeds
        together) and ``ms_per_step``.

    Examples
    --------
    >>> group = RunGroup("demo", TrainConfig(d=2, k=3, n=16), {"scheme": ["bn"]}, "16", "a test")
    >>> history = pd.DataFrame({"scheme": "bn", "seed": 0, "step": [0, 100, 200], "train_loss": [float("nan"), 2, 1],
    ...                         "val_relative_loss": [1.5, 1.2, 1.1], "wall_time": [0.0, 1.0, 2.0]})
    >>> run_summary(group, history)[["steps", "seconds", "ms_per_step"]].to_dict("records")
    [{'steps': 200, 'seconds': 2.0, 'ms_per_step': 10.0}]
    """
    history = check_table(history, "history", ["step", "wall_time", *group.grid])
    report = group.report(history)
    timing = history.groupby(list(group.grid)).agg(seconds=("wall_time", "max"), last=("step", "max"))
    report["seconds"] = timing.seconds.reindex(report.index).to_numpy()
    report["ms_per_step"] = 1000 * report.seconds / timing["last"].reindex(report.index).clip(lower=1).to_numpy()
    return report


def main(argv=None) -> int:
    """``python -m kmtrf_core.book.catalog``: train every missing run of a profile's catalog (``make models``).

    Options: ``--profile`` (default ``$KMTRF_PROFILE``, else ``book``),
    ``--workers`` (local cluster size, default one per core), ``--scheduler``
    (an existing Dask cluster; else ``$KMTRF_SCHEDULER``), ``--list`` (show
    the groups and stop). Returns 0, or 1 when a run failed.

    >>> import contextlib, io
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     status = main(["--profile", "quick", "--list"])
    >>> status, "figure2a" in out.getvalue()
    (0, True)
    """
    parser = argparse.ArgumentParser(prog="python -m kmtrf_core.book.catalog",
                                     description="Train every missing run of the book's catalog on Dask.")
    parser.add_argument("--profile", choices=sorted(PROFILES), default=None)
    parser.add_argument("--workers", type=int, default=None, help="local worker processes (default: one per core)")
    parser.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler")
    parser.add_argument("--list", action="store_true", help="list the run groups and stop")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    catalog = book_catalog(args.profile)
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(catalog.table().drop(columns=["budget"]).to_string())
    if args.list:
        return 0
    configs = catalog.configs()
    print(f"{len(configs)} runs in the {catalog.profile.name} catalog; cache: {cache_dir()}", flush=True)
    table = catalog.train_missing(scheduler=args.scheduler, workers=args.workers, progress=True)
    print(table.status.str.split(":").str[0].value_counts().to_string())
    print(f"training time: {table.seconds.sum() / 60:.1f} worker-minutes")
    failed = table[table.status.str.startswith("failed")]
    for row in failed.itertuples():
        print(f"run {row.key}: {row.status}", file=sys.stderr)
    return 1 if len(failed) else 0


if __name__ == "__main__":
    sys.exit(main())
