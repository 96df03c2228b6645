"""The runs a chapter gets from the catalog: :class:`RunGroup`, :class:`Runs`, :class:`Run`, and their reports.

A :class:`RunGroup` is a base :class:`~kmtrf_core.training.TrainConfig` and a
grid of fields over it; each config of the grid is one run in the run cache
(keyed by config and code), so groups that share a config share its run. A
run is read from the cache once per process: :meth:`RunGroup.runs` and
:meth:`RunGroup.run` share what they loaded, weights, history and snapshots
together. Each run's report says how it ended under the stop rule of
:mod:`kmtrf_core.training.convergence` (:meth:`RunGroup.report`, column
``stopped``), and :meth:`Runs.rests_on` counts that for the claims ledger. The
groups of each profile are declared in :mod:`kmtrf_core.book.catalog`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd
from tqdm.auto import tqdm

from ..training import TrainConfig, TrainingDiverged, train_cached
from ..training.convergence import FLAT_TOLERANCE, STOP_REASONS, STOP_RULE, flattening
from ..training.runs import cached_path, grid_configs, tidy_history
from ..validation import check_choice, check_table

__all__ = ["PAPER_SCHEMES", "SIX_CURVES", "Run", "RunGroup", "Runs", "run_summary"]

PAPER_SCHEMES = ("oh", "bn", "na")
"""The paper's three token embeddings, in its order (:data:`~kmtrf_core.embeddings.SCHEMES` adds the book's own)."""

SIX_CURVES = {"scheme": list(PAPER_SCHEMES), "omega": ["ne", "l2"]}
"""The paper's six curves per panel: token embedding times regularized min (Figure 2)."""

class Run(NamedTuple):
    """One run of a group: its config, its trained layer (on the CPU) and its history (:meth:`RunGroup.run`).

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
    """The run of ``config``: from this process's memory, else the run cache (trained there if missing).

    The layer is handed over on the CPU, where the chapters make their held-out tasks: a run
    trains on a GPU when there is one, and the chapters evaluate on the CPU, the path every test
    and CI run takes (at the book's sizes the evaluation is a small share of the time)."""
    path = str(cached_path(config))
    if path not in _LOADED:
        try:
            model, history = train_cached(config)
            _LOADED[path] = Run(config, model.cpu(), history)
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
        tables = [tidy_history(run.config, run.history, group.grid, diverged=run.diverged is not None)
                  for run in self._runs.values()]
        self.history = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()

    def __getitem__(self, key) -> Run:
        return self._runs[key]

    def __iter__(self):
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def __repr__(self) -> str:
        return f"Runs({self.group.name!r}, {len(self)} runs)"

    def where(self, **values) -> "Runs":
        """The runs whose grid values match ``values`` (e.g. ``runs.where(scheme="bn")``).

        >>> config = TrainConfig(d=2, k=3, n=16, scheme="oh")
        >>> runs = Runs(RunGroup("demo", config, {"scheme": ["oh"]}, "9", "a test"),
        ...             {("oh",): Run(config, None, pd.DataFrame({"step": [0]}))})
        >>> len(runs.where(scheme="oh")), len(runs.where(scheme="bn"))
        (1, 0)
        """
        grid = list(self.group.grid)
        unknown = sorted(set(values) - set(grid))
        if unknown:
            raise ValueError(f"group {self.group.name!r} varies {sorted(grid)}, not {unknown}")
        chosen = {key: run for key, run in self._runs.items()
                  if all(key[grid.index(name)] == value for name, value in values.items())}
        return Runs(self.group, chosen)

    def rests_on(self) -> dict:
        """What a verdict drawn from these runs rests on: label -> number of runs.

        ``"flat below Lloyd"`` (stopped by the rule), ``"cap <steps>, below|above Lloyd"``
        (trained to the cap, and where it ended), ``"probe <steps>"`` (a longer fixed-budget
        check), ``"fixed <steps>"`` (any other fixed budget). :func:`~kmtrf_core.book.claims.record`
        puts them in the claims ledger.

        >>> config = TrainConfig(d=2, k=3, n=16, scheme="oh", steps=200, until_flat=0.02, patience=100, val_every=100)
        >>> history = pd.DataFrame({"step": [0, 100, 200], "seed": 0, "val_relative_loss": [1.7, 1.6, 1.5]})
        >>> Runs(RunGroup("demo", config, {"scheme": ["oh"]}, "9", "a test"), {("oh",): Run(config, None, history)}).rests_on()
        {'cap 200, above Lloyd': 1}
        """
        counts: dict = {}
        if not len(self):
            return counts
        for row in self.group.report(self.history).itertuples():
            if row.stopped == STOP_REASONS[0]:
                label = "flat below Lloyd"
            elif row.stopped == STOP_REASONS[1]:
                label = f"cap {row.steps}, {'below' if row.final < 1 else 'above'} Lloyd"
            else:
                label = f"{'probe' if self.group.probe else 'fixed'} {row.steps}"
            counts[label] = counts.get(label, 0) + 1
        return counts

    def probe_report(self) -> str:
        """What a probe group's run shows, in one line per run: its relative validation loss half-way
        (where the verdict groups' cap is, for a probe of twice the cap) and at the end, and where
        its validation curve first went below 1. These are the training curve's values (the mean over
        the run's validation tasks, the median over its seeds), without an interval, and the line
        says so: the verdicts next to it are decided on held-out tasks.

        >>> config = TrainConfig(d=2, k=3, n=16, steps=400, val_every=100)
        >>> history = pd.DataFrame({"step": [0, 100, 200, 300, 400], "seed": 0,
        ...                         "val_relative_loss": [1.7, 1.6, 1.5, 0.97, 0.95]})
        >>> Runs(RunGroup("demo_probe", config, {"steps": [400]}, "9", "a test", probe=True, layer="the OH layer"),
        ...      {(400,): Run(config, None, history)}).probe_report()
        'demo_probe (the OH layer; one seed, 400 steps; validation curve over 256 tasks, no interval): relative validation loss 1.500 at step 200, 0.950 at step 400; first below 1 at step 300'
        """
        if not self.group.probe:
            raise ValueError(f"group {self.group.name!r} is not a probe")
        lines = []
        for run in self._runs.values():
            curve = run.history.dropna(subset=["val_relative_loss"]).groupby("step").val_relative_loss.median()
            if curve.empty:
                raise ValueError(f"probe {self.group.name!r} has no validation")
            last = int(curve.index[-1])
            half = curve[curve.index <= last // 2]
            below = curve[curve < 1]
            lines.append(
                f"{self.group.name} ({self.group.layer + '; ' if self.group.layer else ''}"
                f"{'one seed' if len(run.config.seeds) == 1 else f'{len(run.config.seeds)} seeds'}, "
                f"{last} steps; validation curve over {run.config.val_tasks} tasks, no interval): relative validation "
                f"loss {half.iloc[-1]:.3f} at step {int(half.index[-1])}, {curve.iloc[-1]:.3f} at step {last}; "
                + (f"first below 1 at step {int(below.index[0])}" if len(below) else "never below 1"))
        return "\n".join(lines)

    def stops(self) -> str:
        """Why the runs ended, in one line: how many beat Lloyd and were flat, how many reached the cap.

        >>> config = TrainConfig(d=2, k=3, n=16, scheme="oh", steps=200, until_flat=0.02, patience=100, val_every=100)
        >>> history = pd.DataFrame({"step": [0, 100, 200], "seed": 0, "val_relative_loss": [1.7, 1.6, 1.5]})
        >>> Runs(RunGroup("demo", config, {"scheme": ["oh"]}, "9", "a test"), {("oh",): Run(config, None, history)}).stops()
        'demo: 1 run; stopped: cap 1 (200 steps; none below Lloyd at the end)'
        """
        report = self.group.report(self.history)
        counts = report.stopped.value_counts()
        reasons = ", ".join(f"{reason} {int(counts[reason])}" for reason in STOP_REASONS if reason in counts)
        capped = report[report.stopped == "cap"]
        note = ""
        if len(capped):
            below = int((capped.final < 1).sum())
            note = (f" ({self.group.base.steps} steps; "
                    f"{'none' if not below else f'{below} of {len(capped)}'} below Lloyd at the end)")
        return f"{self.group.name}: {len(report)} run{'s' * (len(report) != 1)}; stopped: {reasons}{note}"


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
    only : tuple
        The combinations of the grid kept (value tuples in the grid's order), when not all of the
        product is wanted; empty: the whole product.
    layer : str
        For a probe, the layer it trains longer, in words (:meth:`Runs.probe_report` names it:
        a probe need not be of the layer a verdict is about).

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
    only: tuple = ()
    layer: str = ""

    def __post_init__(self):
        combos = grid_configs(self.base, self.grid)
        missing = [values for values in self.only if tuple(values) not in combos]
        if missing:
            raise ValueError(f"group {self.name!r}: only= names combinations outside its grid: {missing}")

    def _configs(self) -> dict:
        """Grid values -> config, for the kept combinations (:attr:`only`), in the grid's order.

        >>> group = RunGroup("demo", TrainConfig(d=2, k=3, n=16), {"scheme": ["oh", "bn"], "tau": [1.0, 0.1]},
        ...                  "9", "a test", only=(("oh", 1.0), ("bn", 0.1)))
        >>> list(group._configs())
        [('oh', 1.0), ('bn', 0.1)]
        """
        combos = grid_configs(self.base, self.grid)
        if not self.only:
            return combos
        kept = {tuple(values) for values in self.only}
        return {values: config for values, config in combos.items() if values in kept}

    def configs(self) -> list:
        """The runs' configs, in the grid's order (the last field varies fastest).

        >>> group = RunGroup("demo", TrainConfig(d=2, k=3, n=16), {"omega": ["ne", "l2"], "tau": [1.0, 0.1]},
        ...                  "9", "a test")
        >>> [(config.omega, config.tau) for config in group.configs()]
        [('ne', 1.0), ('ne', 0.1), ('l2', 1.0), ('l2', 0.1)]
        """
        return list(self._configs().values())

    @property
    def field(self) -> str:
        """The first grid field that is not a curve of :data:`SIX_CURVES` (the swept one).

        >>> RunGroup("demo", TrainConfig(d=2, k=3, n=16), {"omega": ["ne", "l2"], "tau": [1.0, 0.1]},
        ...          "9", "a test").field
        'tau'
        >>> RunGroup("demo", TrainConfig(d=2, k=3, n=16), {"omega": ["ne", "l2"]}, "9", "a test").field
        'omega'
        """
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

        Examples
        --------
        >>> import os, tempfile
        >>> from unittest import mock
        >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
        >>> group = RunGroup("demo", base, {"scheme": ["oh", "bn"]}, "9", "a test")
        >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
        ...     runs = group.runs()
        >>> len(runs), list(runs), runs[("bn",)].config.scheme
        (2, [('oh',), ('bn',)], 'bn')
        """
        on_diverge = check_choice(on_diverge, "on_diverge", ("raise", "record"))
        configs = self._configs()
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
        """Per run: steps trained, final relative validation loss, whether the stop rule held at its end,
        where it beat Lloyd, and why it stopped (``stopped``: beat Lloyd and flat, the cap, or a fixed budget).

        Each run is judged by its own config's rule (:func:`~kmtrf_core.training.convergence.flattening`:
        tolerance, patience, :attr:`~kmtrf_core.training.TrainConfig.earliest_stop`, cap).

        >>> import os, tempfile
        >>> from unittest import mock
        >>> base = TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1)
        >>> group = RunGroup("demo", base, {"scheme": ["oh", "bn"]}, "9", "a test")
        >>> with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ, {"KMTRF_CACHE": folder}):
        ...     report = group.report(group.runs().history)
        >>> report.index.tolist(), report.steps.tolist(), report.stopped.tolist()
        (['oh', 'bn'], [2, 2], ['fixed budget', 'fixed budget'])
        """
        history = check_table(history, "history", ["step", "val_relative_loss", *self.grid])
        grid = list(self.grid)
        tables = []
        for values, config in self._configs().items():
            mask = pd.Series(True, index=history.index)
            for name, value in zip(grid, values):  # tuple values are written "a+b" (tidy_history)
                mask &= history[name] == ("+".join(map(str, value)) if isinstance(value, tuple) else value)
            if not mask.any():
                continue
            tables.append(flattening(history[mask], by=grid, tol=config.until_flat or FLAT_TOLERANCE,
                                     min_steps=config.earliest_stop, patience=config.patience, cap=config.steps,
                                     rule=config.until_flat is not None and not self.early))
        if not tables:
            raise ValueError(f"history holds none of the runs of group {self.name!r} (its grid: {sorted(self.grid)})")
        return pd.concat(tables)

    @property
    def rule(self) -> str:
        """The stopping rule of the group, in words.

        >>> RunGroup("demo", TrainConfig(d=2, k=3, n=16, steps=300), {"scheme": ["oh"]}, "9", "a test").rule
        'a fixed budget of 300 steps'
        >>> flat = TrainConfig(d=2, k=3, n=16, steps=500, until_flat=0.02)
        >>> RunGroup("demo", flat, {"scheme": ["oh"]}, "9", "a test").rule.endswith("to the cap (500 steps)")
        True
        """
        if self.early or self.base.until_flat is None:
            return f"a fixed budget of {self.base.steps} steps" + (" (early training)" if self.early else "")
        return (STOP_RULE.format(tol=self.base.until_flat, patience=self.base.patience)
                .replace("min_steps", f"step {self.base.min_steps}") + f" ({self.base.steps} steps)")


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
