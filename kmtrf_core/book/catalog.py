"""The catalog: every training run the book uses, per profile, by name.

A chapter never declares a training config or trains a layer; it asks the
catalog for a named group of runs::

    catalog = book_catalog()            # the profile in force, built once per process
    runs = catalog.runs("figure2a")     # Runs: grid values -> Run(config, model, history)
    runs.models, runs.history           # every model, and one tidy history
    catalog["figure2a"].run(tau=0.1, scheme="oh", omega="l2")   # one of them

A :class:`~kmtrf_core.book.groups.RunGroup` (module :mod:`~kmtrf_core.book.groups`)
is a base config and a grid of fields over it; groups that share a config share
its run, and a run is read from the cache once per process. ``make models``
(``python -m kmtrf_core.book.catalog``) trains every missing run in parallel
on Dask (:func:`~kmtrf_core.training.executor.train_many`); a chapter opened
alone trains what it is missing on demand, so each chapter still runs by itself.

Budgets come from the stop rule (:mod:`kmtrf_core.training.convergence`).
Every group a claim or a verdict rests on trains with ``until_flat``: a run
stops only once its layer beats one Lloyd step on its validation tasks and its
best validation value has stopped improving for the profile's ``patience``
(2000 steps at the ``book`` profile), never before ``min_steps``. Since the
median over seeds must beat Lloyd, the rule never ends a run whose median is
on the plateau of chapter 9 (at lr 0.01 the loss sits above one Lloyd step
for a while first, measured there), however long it lasts; a run that never
gets there
trains to its cap, ``steps``. Every run's report says which
(:meth:`~kmtrf_core.book.groups.RunGroup.report`, column ``stopped``). Groups marked ``early`` have a
short fixed budget on purpose (the Appendix F ablations of chapter 9: what
the first steps look like); no verdict rests on them. The ``paper`` profile
trains the paper's fixed 10000 steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from dataclasses import dataclass

import pandas as pd

from ..objectives import OMEGAS
from ..tasks import FAMILIES
from ..training import TrainConfig, cache_dir
from ..training.executor import train_many
from ..training.runs import cached_path
from .groups import PAPER_SCHEMES, SIX_CURVES, RunGroup, Runs
from .profiles import PROFILES, Profile, get_profile

__all__ = ["DATASET_SIZES", "MIXED_FAMILIES", "Catalog", "book_catalog", "main"]

MIXED_FAMILIES = ("normal", "gumbel", "laplace", "lognormal")
"""The four task families mixed in chapter 15's broader training recipe: those the paper's Figure 8 shows
transferring to one another (chapter 11 measures whether they do here); cauchy is left out (the paper's
Figure 4, chapter 13)."""

DATASET_SIZES = {"iris": (4, 3), "wine": (13, 3), "breast_cancer": (30, 2), "digits": (64, 10)}
"""``(d, k)`` of each real data set of chapter 15 (features, classes), so that building the catalog loads
no data (a test checks them against :func:`~kmtrf_core.book.ch15_real_data.load_dataset`)."""


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
        """:meth:`RunGroup.runs` of the group ``name``.

        >>> import os, tempfile
        >>> from unittest import mock
        >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
        >>> group = RunGroup("demo", base, {"scheme": ["oh", "bn"]}, "9", "a test")
        >>> demo = Catalog(get_profile("quick"), {"demo": group})
        >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
        ...     runs = demo.runs("demo")
        >>> list(runs)
        [('oh',), ('bn',)]
        """
        return self[name].runs(**options)

    def configs(self) -> list:
        """Every distinct run config of every group (a run shared by groups appears once).

        >>> base = TrainConfig(d=2, k=3, n=16)
        >>> demo = Catalog(get_profile("quick"), {"a": RunGroup("a", base, {"scheme": ["oh", "bn"]}, "9", "a test"),
        ...                                       "b": RunGroup("b", base, {"scheme": ["bn"]}, "9", "the BN run")})
        >>> [config.scheme for config in demo.configs()]
        ['oh', 'bn']
        """
        unique = {}
        for group in self.groups.values():
            for config in group.configs():
                unique.setdefault(cached_path(config).name, config)
        return list(unique.values())

    def table(self) -> pd.DataFrame:
        """One row per group: its chapter, size, budget rule, how many of its runs are cached, what it is for.

        >>> import os, tempfile
        >>> from unittest import mock
        >>> base = TrainConfig(d=2, k=3, n=16, steps=300)
        >>> group = RunGroup("demo", base, {"scheme": ["oh", "bn"]}, "9", "a test")
        >>> demo = Catalog(get_profile("quick"), {"demo": group})
        >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
        ...     table = demo.table()
        >>> row = table.loc["demo"]
        >>> row.chapter, int(row.runs), int(row.cached), row.budget
        ('9', 2, 0, 'a fixed budget of 300 steps')
        """
        rows = []
        for group in self.groups.values():
            configs = group.configs()
            rows.append(dict(group=group.name, chapter=group.chapter, runs=len(configs),
                             seeds=len(group.base.seeds), cached=sum(cached_path(c).exists() for c in configs),
                             budget=group.rule, about=group.about))
        return pd.DataFrame(rows).set_index("group")

    def train_missing(self, **options) -> pd.DataFrame:
        """Train every run the cache lacks, in parallel (:func:`~kmtrf_core.training.executor.train_many`).

        ``options`` go to ``train_many`` (``workers``, ``scheduler``, ``progress``, ...). Runs the cache
        holds are not trained again, and without a missing run no cluster is started:

        >>> import os, tempfile
        >>> from unittest import mock
        >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
        >>> group = RunGroup("demo", base, {"scheme": ["oh", "bn"]}, "9", "a test")
        >>> demo = Catalog(get_profile("quick"), {"demo": group})
        >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
        ...     _ = demo.runs("demo")  # trains the two runs here, one after the other
        ...     report = demo.train_missing()
        >>> report.status.tolist()
        ['cached', 'cached']
        """
        return train_many(self.configs(), **options)


def probe_group(name: str, config: TrainConfig, chapter: str, about: str, steps: int | None = None) -> RunGroup:
    """A probe of ``config``: its first seed, trained a fixed ``steps`` (default twice its cap), no stop rule.

    The check that a verdict short of "reproduced" is not an artifact of the budget: the ledger
    (:func:`~kmtrf_core.book.claims.record`) refuses such a verdict on trained layers without a probe.

    >>> group = probe_group("demo_probe", TrainConfig(d=2, k=3, n=16, steps=500, seeds=(3, 4), until_flat=0.02),
    ...                     "9", "a test")
    >>> group.probe, group.base.steps, group.base.seeds, group.base.until_flat, group.layer
    (True, 1000, (3,), None, 'a test')
    """
    steps = 2 * config.steps if steps is None else steps
    base = dataclasses.replace(config, steps=steps, seeds=(config.seeds[0],), until_flat=None, min_steps=0,
                               snapshots=False)
    return RunGroup(name, base, {"steps": [steps]}, chapter, f"{about}, trained {steps} steps, one seed (the probe)",
                    probe=True, layer=about)


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
        # the seeds of Figure 2(b): the speed claim of figure2_claims compares their ranges
        RunGroup("figure2b", dataclasses.replace(plain, tau=sizes.fig2b_tau),
                 {"d": sizes.fig2b_ds, **SIX_CURVES}, "9", "Figure 2(b): the dimension, six curves"),
        probe_group("training_probe", dataclasses.replace(plain, tau=0.1, omega="l2", scheme="bn"), "9",
                    "the BN layer of Figure 2(a) at tau 0.1 (L2)"),
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
    groups = [
        RunGroup("section4_schemes", base, {"scheme": list(PAPER_SCHEMES), "omega": list(OMEGAS)}, "10",
                 "Section 4 layers on the normal family, every embedding and regularized min (chapters 10, 11)"),
        RunGroup("section4_families", base,
                 {"family": list(FAMILIES), "scheme": list(cauchy.schemes), "omega": list(cauchy.omegas)}, "13",
                 "layers trained on each task family (chapters 11, 13, 14: the L2 ones)"),
        RunGroup("landscape", TrainConfig.from_sizes(landscape, omega="l2"),
                 {"d": landscape.ds, "scheme": ["oh", "bn"]}, "12", "the layers whose loss surfaces chapter 12 draws"),
        probe_group("section4_probe", dataclasses.replace(base, scheme="bn"), "10",
                    "the Section 4 BN layer on the normal family"),
        probe_group("cauchy_probe", dataclasses.replace(_section4_base(section4, family="cauchy"), scheme="bn"),
                    "13", "the Section 4 BN layer on the cauchy family"),
        # the released code trains the softmin only: chapter 13 checks the failure with it too, normal tasks as
        # the control (at the quick and paper profiles these are runs of section4_families)
        RunGroup("cauchy_softmin", dataclasses.replace(base, omega="ne"),
                 {"family": ["normal", "cauchy"], "scheme": ["oh", "bn"]}, "13",
                 "softmin (NE) layers on cauchy and normal tasks, the released code's loss (chapter 13)"),
        # its last seed: in a 10,000-step run of both book seeds (bench/README, authors_schedule.py) the first
        # stayed on the plateau and the second was leaving it, so the probe trains the one that can move the verdict
        probe_group("cauchy_softmin_probe", dataclasses.replace(base, omega="ne", family="cauchy", scheme="oh",
                                                                seeds=(base.seeds[-1],)),
                    "13", "the Section 4 OH layer on the cauchy family with the softmin (NE), last seed"),
    ]
    return groups


def _realdata_groups(sizes) -> list:
    """Chapter 15: per real data set, a layer per training recipe (:data:`~kmtrf_core.book.ch15_real_data.RECIPES`:
    the paper's plain tasks, and the broad recipe that ``recipe_transfers`` tests), and a probe of the plain one."""
    groups = []
    for name in sizes.datasets:
        d, k = DATASET_SIZES[name]
        base = TrainConfig.from_sizes(sizes, d=d, k=k, scheme="bn", omega="l2", gamma=1.0)
        groups.append(RunGroup(
            f"realdata_{name}", base, {"family": ["normal", MIXED_FAMILIES], "anisotropic": [False, True]}, "15",
            f"layers for {name} (d={d}, k={k}), the plain recipe and the broad one (BN, L2)",
            only=(("normal", False), (MIXED_FAMILIES, True))))
        groups.append(probe_group(f"realdata_probe_{name}", base, "15", f"the plain {name} layer",
                                  steps=sizes.probe_steps))
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
    # a cap 1.5x the usual when runs stop on flatness: in one book build the curve with the block was still
    # falling at the usual cap, so the stop rule, not the cap, should end the run (the fixed budget otherwise)
    ffn_base = dataclasses.replace(bn, steps=bn.steps if bn.until_flat is None else bn.steps * 3 // 2)
    return [
        RunGroup("openq_codes", base, {"scheme": ["oh", "bn", "gc", "sc", "na"]}, "16",
                 "every token embedding at one setting: the paper's three, Gray-coded BN and scalar codes"),
        RunGroup("openq_wide_d", plain, {"d": [openq.wide_d], "scheme": ["oh", "bn"]}, "17",
                 f"layers trained at d'={openq.wide_d}, used on smaller d by zero-padding"),
        RunGroup("openq_wide_k", plain, {"k": [openq.wide_k], "scheme": ["oh", "bn"]}, "17",
                 f"layers trained at k'={openq.wide_k}, used on smaller k with filler centers"),
        # the longer checks behind pad_d and pad_k: the wide BN layers themselves
        probe_group("openq_wide_d_probe", dataclasses.replace(plain, d=openq.wide_d, scheme="bn"), "17",
                    f"the BN layer trained at d'={openq.wide_d}"),
        probe_group("openq_wide_k_probe", dataclasses.replace(plain, k=openq.wide_k, scheme="bn"), "17",
                    f"the BN layer trained at k'={openq.wide_k}"),
        RunGroup("openq_unroll", bn, {"unroll": [openq.unroll], "unroll_loss": ["last", "sum"]}, "18",
                 f"BN layers trained for {openq.unroll}-step clustering (unrolled, re-embedded)"),
        # the longer check behind unroll_training: the variant that was still falling at the cap in a book build
        probe_group("openq_unroll_probe", dataclasses.replace(bn, unroll=openq.unroll, unroll_loss="sum"), "18",
                    f"the BN layer trained for {openq.unroll}-step clustering (the loss summed over the steps)"),
        RunGroup("openq_anneal_gamma", bn, {"gamma_end": [openq.gamma_end]}, "18",
                 f"the BN layer with gamma annealed from 1 to {openq.gamma_end:g} during training"),
        RunGroup("openq_anneal_tau", bn, {"tau_end": [openq.tau_end]}, "18",
                 f"the BN layer with tau annealed from 0.1 to {openq.tau_end:g} during training"),
        RunGroup("openq_ffn", ffn_base, {"ffn": [openq.ffn]}, "19",
                 f"the BN layer with a feedforward block of width {openq.ffn} (without it: openq_codes)"),
        probe_group("openq_ffn_probe", dataclasses.replace(ffn_base, ffn=openq.ffn), "19",
                    f"the BN layer with a feedforward block of width {openq.ffn}"),
        probe_group("openq_probe", dataclasses.replace(base, scheme="sc"), "16", "the scalar-code layer",
                    steps=openq.probe_steps),
        RunGroup("openq_cauchy", cauchy, {"trim": [0.0, openq.trim], "scheme": ["oh", "bn"]}, "21",
                 f"layers trained on Cauchy tasks with the paper's loss and a {openq.trim:g}-trimmed one"),
        probe_group("openq_trim_probe", dataclasses.replace(cauchy, trim=openq.trim, scheme="bn"), "21",
                    f"the BN layer trained on Cauchy tasks with the {openq.trim:g}-trimmed loss"),
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


def main(argv=None) -> int:
    """``python -m kmtrf_core.book.catalog``: train every missing run of a profile's catalog (``make models``).

    Options: ``--profile`` (default ``$KMTRF_PROFILE``, else ``book``),
    ``--workers`` (local cluster size, default one per core), ``--scheduler``
    (an existing Dask cluster; else ``$KMTRF_SCHEDULER``), ``--list`` (show
    the groups and stop). Returns 0, or 1 when a run failed; an unknown
    profile, from ``--profile`` or ``$KMTRF_PROFILE``, ends it with status 2
    and one line. Runs are cached in :func:`~kmtrf_core.training.cache_dir`
    (``$KMTRF_CACHE``, else ``~/.cache/kmtrf``), which ``--help`` names.

    >>> import contextlib, io
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     status = main(["--profile", "quick", "--list"])
    >>> status, "figure2a" in out.getvalue()
    (0, True)
    """
    from .profiles import DEFAULT, ENV_VAR  # for --help only; not public names of profiles

    parser = argparse.ArgumentParser(
        prog="python -m kmtrf_core.book.catalog",
        description="Train every missing run of the book's catalog on Dask.",
        epilog=f"Trained runs are cached in $KMTRF_CACHE, else ~/.cache/kmtrf (make models and make book "
               f"set _build/runs); here: {cache_dir()}.")
    parser.add_argument("--profile", choices=sorted(PROFILES), default=None,
                        help=f"the profile whose catalog to train (default: ${ENV_VAR}, else {DEFAULT})")
    parser.add_argument("--workers", type=int, default=None, help="local worker processes (default: one per core)")
    parser.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler")
    parser.add_argument("--list", action="store_true",
                        help="list the run groups (how many of each group's runs the cache holds) and stop")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    try:
        catalog = book_catalog(args.profile)
    except ValueError as err:  # an unknown $KMTRF_PROFILE: one line, no traceback
        parser.error(f"{err}; set {ENV_VAR} to one of them or pass --profile")
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(catalog.table().drop(columns=["budget"]).to_string())
    if args.list:
        print(f"cached: the group's runs found in {cache_dir()} ($KMTRF_CACHE, else ~/.cache/kmtrf)")
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
