"""Run profiles: the sizes every chapter reads, typed, and the device choice.

One profile is in force per run: ``KMTRF_PROFILE`` when set, else ``"book"``.

* ``quick``: continuous integration; each chapter takes a few minutes at most
  on 2 CPU cores and still shows the qualitative effect where it can.
* ``book``: what the published HTML shows; the whole book builds on 2 CPU
  cores in at most 90 minutes (seeds and sizes are cut to fit it).
* ``paper``: the paper's sizes, opt-in, meant for a GPU.

The device is CUDA when available, else the CPU, whatever the profile.
Each chapter's sizes are one frozen dataclass (:class:`Sizes` and its
subclasses below): every profile must give every field with the right type,
or importing this module fails, and a chapter that reads a size its class does
not have fails in the unit tests (they read every notebook's ``sizes.<name>``).
A chapter reads its sizes as ``get_profile().chapter("construction").n`` and
prints them in its figure captions with :meth:`Profile.describe`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import torch

from ..device import default_device

__all__ = ["PROFILES", "Profile", "Sizes", "get_profile"]

ENV_VAR = "KMTRF_PROFILE"
DEFAULT = "book"

_TYPES = {"int": (int,), "float": (int, float), "list": (list,), "dict": (dict,), "str": (str,),
          "float | None": (int, float, type(None))}


@dataclass(frozen=True)
class Sizes:
    """One chapter's sizes: a frozen dataclass whose fields are checked against their types.

    >>> LloydSizes(n=10, d=2, k=3, steps=5, tasks=4).k
    3
    >>> LloydSizes(n=10, d=2, k=3, steps=5, tasks="4")
    Traceback (most recent call last):
    ...
    TypeError: LloydSizes.tasks must be int, got '4'
    """

    def __post_init__(self):
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            allowed = _TYPES[item.type]
            if isinstance(value, bool) or not isinstance(value, allowed):
                raise TypeError(f"{type(self).__name__}.{item.name} must be {item.type}, got {value!r}")

    def items(self) -> list:
        """``(name, value)`` of every size, in the order of the fields."""
        return [(item.name, getattr(self, item.name)) for item in dataclasses.fields(self)]


@dataclass(frozen=True)
class LloydSizes(Sizes):
    """The sizes of chapter 2 (k-means and Lloyd's algorithm): ``profile.chapter("lloyd")``."""

    n: int
    d: int
    k: int
    steps: int
    tasks: int


@dataclass(frozen=True)
class CostSizes(Sizes):
    """The sizes of chapter 8 (what the layer costs): ``profile.chapter("profiling")``."""

    n: int
    batch: int
    repeats: int
    warmup: int
    d_grid: list
    k_grid: list
    impl: str
    table_d: int
    table_n: int
    table_batch: int
    table_k: list
    table_impls: list
    memory_repeats: int


@dataclass(frozen=True)
class EmbeddingsSizes(Sizes):
    """The sizes of chapter 3 (token embeddings): ``profile.chapter("embeddings")``."""

    n: int
    d: int
    k: int
    d_grid: list
    k_grid: list
    geometry_k: list


@dataclass(frozen=True)
class AttentionSizes(Sizes):
    """The sizes of chapter 4 (distance attention): ``profile.chapter("attention")``."""

    n: int
    d: int
    k: int
    gammas: list
    frames: int


@dataclass(frozen=True)
class SmoothingSizes(Sizes):
    """The sizes of chapter 6 (smoothing the k-means loss): ``profile.chapter("smoothing")``."""

    n: int
    d: int
    k: int
    tasks: int
    taus: list
    k_grid: list
    restarts: int
    search_steps: int
    random_r: int
    frames: int


@dataclass(frozen=True)
class LipschitzSizes(Sizes):
    """The sizes of chapter 7 (the Lipschitz bound): ``profile.chapter("lipschitz")``."""

    n: int
    k: int
    d: int
    d_grid: list
    k_grid: list
    gammas: list
    taus: list
    emp_n: int
    emp_k: int
    emp_d_grid: list
    emp_tasks: int
    pairs: int
    searches: int


@dataclass(frozen=True)
class TrainingSizes(Sizes):
    """The sizes of chapter 9 (training), whose Figure 2 runs are Part III's base too.

    ``profile.chapter("training")``
    """

    n: int
    k: int
    batch: int
    steps: int
    min_steps: int
    until_flat: float | None
    patience: int
    seeds: list
    val_tasks: int
    val_every: int
    window: int
    fig2a_d: int
    fig2a_taus: list
    fig2b_tau: float
    fig2b_ds: list
    plateau: dict
    ablation_steps: int
    fig10_taus: list
    fig11_lrs: list
    fig13_ns: list
    fig14_ds: list
    fig15_ks: list
    fig15_cases: list
    fig17_ns: list
    fig17_dk: list
    bench_steps: int


@dataclass(frozen=True)
class Section4Sizes(Sizes):
    """The sizes of the Section 4 layers (chapters 10, 11, 13, 14 and Part III's Cauchy layers).

    ``profile.chapter("section4")``
    """

    d: int
    k: int
    n: int
    batch: int
    steps: int
    min_steps: int
    until_flat: float | None
    patience: int
    seeds: list
    lr: float
    tau: float
    val_tasks: int
    val_every: int
    impl: str


@dataclass(frozen=True)
class MultistepSizes(Sizes):
    """The sizes of chapter 10 (multi-step clustering): ``profile.chapter("multistep")``."""

    tasks: int
    T: int


@dataclass(frozen=True)
class GeneralizationSizes(Sizes):
    """The sizes of chapter 11 (generalization): ``profile.chapter("generalization")``."""

    tasks: int
    T: int
    length_factors: list
    length_tasks: int


@dataclass(frozen=True)
class RealDataSizes(Sizes):
    """The sizes of chapter 15 (real data): ``profile.chapter("realdata")``."""

    datasets: list
    n: int
    batch: int
    steps: int
    min_steps: int
    until_flat: float | None
    patience: int
    seeds: list
    lr: float
    tau: float
    val_tasks: int
    val_every: int
    impl: str
    starts: int
    T: int
    shift_tasks: int
    probe_steps: int


@dataclass(frozen=True)
class LandscapeSizes(Sizes):
    """The sizes of chapter 12 (loss landscapes): ``profile.chapter("landscape")``."""

    k: int
    ds: list
    n: int
    batch: int
    steps: int
    min_steps: int
    until_flat: float | None
    patience: int
    seeds: list
    lr: float
    tau: float
    val_tasks: int
    val_every: int
    impl: str
    tasks: int
    grid: int
    span: float


@dataclass(frozen=True)
class CauchySizes(Sizes):
    """The sizes of chapter 13 (the Cauchy problem): ``profile.chapter("cauchy")``."""

    omegas: list
    schemes: list
    tasks: int
    grid: int
    span: float
    gap_scheme: str


@dataclass(frozen=True)
class DissimilaritySizes(Sizes):
    """The sizes of chapter 14 (task dissimilarities): ``profile.chapter("dissimilarity")``."""

    m: int
    m_large: int
    lp_per_family: int
    lp_n: int
    tasks: int
    T: int


@dataclass(frozen=True)
class OpenQuestionsSizes(Sizes):
    """The sizes of Part III, chapters 16-21 (the open questions of Appendix A): ``profile.chapter("openq")``."""

    wide_d: int
    wide_k: int
    ffn: int
    unroll: int
    gamma_end: float
    tau_end: float
    trim: float
    tasks: int
    T: int
    algo_tasks: int
    algo_steps: int
    probe_steps: int
    d_grid: list
    k_grid: list
    betas: list
    alphas: list
    minibatch: float
    inference_gammas: list
    permutations: int


@dataclass(frozen=True)
class ConstructionSizes(Sizes):
    """The sizes of chapter 5 (the construction): ``profile.chapter("construction")``."""

    n_grid: list
    d_grid: list
    k_grid: list
    tasks: int
    steps: int
    table_steps: list
    table_tasks: int
    table_n: int
    table_d: int
    table_k: int
    gammas: list
    gamma_tasks: int
    gamma_n: int


PROFILES: dict[str, dict[str, Sizes]] = {
    "quick": {
        "lloyd": LloydSizes(n=300, d=2, k=4, steps=15, tasks=32),
        "profiling": CostSizes(
            n=256, batch=8, repeats=3, warmup=1, d_grid=[4, 16, 64], k_grid=[10, 25, 100], impl="direct",
            table_d=32, table_n=512, table_batch=4, table_k=[6, 25, 100, 400], table_impls=["direct", "sdpa"],
            memory_repeats=2,
        ),
        "embeddings": EmbeddingsSizes(
            n=8, d=2, k=6, d_grid=[2, 4, 8, 16, 32, 64, 128, 256], k_grid=[2, 4, 10, 16, 25, 64, 100, 256],
            geometry_k=[2, 3, 4, 6, 8, 10, 16],
        ),
        "attention": AttentionSizes(n=60, d=2, k=4, gammas=[0.1, 1.0, 10.0, 100.0, 1000.0], frames=12),
        "smoothing": SmoothingSizes(
            n=128, d=2, k=6, tasks=16, taus=[0.01, 0.03, 0.1, 0.3, 1.0, 3.0], k_grid=[2, 4, 10], restarts=64,
            search_steps=100, random_r=20000, frames=10,
        ),
        "lipschitz": LipschitzSizes(
            n=512, k=6, d=4, d_grid=[2, 4, 8, 16, 32, 64, 128], k_grid=[2, 4, 6, 10, 16, 32, 64],
            gammas=[0.25, 0.5, 1.0, 2.0, 4.0], taus=[0.01, 0.1, 1.0], emp_n=32, emp_k=4, emp_d_grid=[2, 4, 8],
            emp_tasks=4, pairs=12, searches=2,
        ),
        "training": TrainingSizes(
            n=48, k=6, batch=8, steps=60, min_steps=40, until_flat=0.02, patience=20, seeds=[0, 1],
            val_tasks=32, val_every=10, window=5, fig2a_d=4, fig2a_taus=[1.0, 0.1], fig2b_tau=0.25, fig2b_ds=[4, 16],
            plateau={"d": [8], "lr": [0.03]}, ablation_steps=20, fig10_taus=[1.0, 0.1], fig11_lrs=[0.01, 0.1],
            fig13_ns=[32, 64], fig14_ds=[4, 8], fig15_ks=[6, 10], fig15_cases=[[4, 0.1]], fig17_ns=[32, 64],
            fig17_dk=[8, 8], bench_steps=10,
        ),
        "section4": Section4Sizes(
            d=4, k=4, n=32, batch=8, steps=40, min_steps=30, until_flat=0.02, patience=20, seeds=[0, 1], lr=0.01,
            tau=0.1, val_tasks=16, val_every=10, impl="direct",
        ),
        "multistep": MultistepSizes(tasks=16, T=6),
        "generalization": GeneralizationSizes(tasks=16, T=6, length_factors=[0.5, 1, 2, 4], length_tasks=8),
        "realdata": RealDataSizes(
            datasets=["iris", "wine"], n=16, batch=8, steps=40, min_steps=30, until_flat=0.02, patience=20,
            seeds=[0, 1], lr=0.01, tau=0.1, val_tasks=16, val_every=10, impl="direct", starts=3, T=4, shift_tasks=8,
            probe_steps=80,
        ),
        "landscape": LandscapeSizes(
            k=4, ds=[2, 8], n=32, batch=8, steps=40, min_steps=30, until_flat=0.02, patience=20, seeds=[0], lr=0.01,
            tau=0.1, val_tasks=16, val_every=10, impl="direct", tasks=16, grid=9, span=1.0,
        ),
        "cauchy": CauchySizes(
            omegas=["l2", "ne"], schemes=["oh", "bn", "na"], tasks=16, grid=9, span=1.0, gap_scheme="bn",
        ),
        "dissimilarity": DissimilaritySizes(m=4, m_large=6, lp_per_family=2, lp_n=24, tasks=16, T=6),
        "openq": OpenQuestionsSizes(
            wide_d=8, wide_k=10, ffn=32, unroll=3, gamma_end=8.0, tau_end=0.01, trim=0.1, tasks=16, T=6,
            algo_tasks=16, algo_steps=3, probe_steps=120, d_grid=[1, 2, 4], k_grid=[2, 4, 6],
            betas=[1, 10, 100, 1000], alphas=[0.5, 1.0, 1.5], minibatch=0.5,
            inference_gammas=[[1.0, 1.0], [1.0, 8.0]], permutations=4,
        ),
        "construction": ConstructionSizes(
            n_grid=[16, 64], d_grid=[1, 3], k_grid=[2, 3, 5, 8], tasks=8, steps=10, table_steps=[1, 2, 5, 10, 20],
            table_tasks=32, table_n=128, table_d=4, table_k=6, gammas=[1.0, 10.0, 100.0, 1000.0, 10000.0],
            gamma_tasks=8, gamma_n=64,
        ),
    },
    "book": {
        "lloyd": LloydSizes(n=400, d=2, k=5, steps=20, tasks=64),
        "profiling": CostSizes(
            n=512, batch=8, repeats=5, warmup=2, d_grid=[4, 8, 16, 32, 64, 128], k_grid=[10, 16, 25, 40, 64, 100],
            impl="direct", table_d=32, table_n=1024, table_batch=4, table_k=[6, 25, 100, 400, 1000],
            table_impls=["direct", "sdpa"], memory_repeats=3,
        ),
        "embeddings": EmbeddingsSizes(
            n=8, d=2, k=6, d_grid=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
            k_grid=[2, 4, 10, 16, 25, 64, 100, 256, 1000], geometry_k=[2, 3, 4, 6, 8, 10, 16, 25, 64],
        ),
        "attention": AttentionSizes(n=80, d=2, k=5, gammas=[0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0], frames=30),
        "smoothing": SmoothingSizes(
            n=256, d=2, k=6, tasks=64, taus=[0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0], k_grid=[2, 4, 10, 32],
            restarts=256, search_steps=200, random_r=200000, frames=24,
        ),
        "lipschitz": LipschitzSizes(
            n=512, k=6, d=4, d_grid=[2, 4, 8, 16, 32, 64, 128, 256], k_grid=[2, 4, 6, 10, 16, 32, 64, 128],
            gammas=[0.25, 0.5, 1.0, 2.0, 4.0, 8.0], taus=[0.01, 0.1, 1.0], emp_n=64, emp_k=6,
            emp_d_grid=[2, 4, 8, 16, 32], emp_tasks=8, pairs=48, searches=5,
        ),
        "training": TrainingSizes(
            n=64, k=6, batch=32, steps=5000, min_steps=2500, until_flat=0.02, patience=2000, seeds=[0, 1],
            val_tasks=128, val_every=100, window=25, fig2a_d=4, fig2a_taus=[1.0, 0.1], fig2b_tau=0.25,
            fig2b_ds=[4, 16], plateau={"d": [8], "k": [10], "n": [32], "tau": [0.3], "lr": [0.03], "gamma": [4.0]},
            ablation_steps=150, fig10_taus=[1.0, 0.1], fig11_lrs=[0.001, 0.01, 0.1], fig13_ns=[64, 96],
            fig14_ds=[4, 16], fig15_ks=[6, 16], fig15_cases=[[4, 0.1]], fig17_ns=[96, 192], fig17_dk=[16, 16],
            bench_steps=20,
        ),
        "section4": Section4Sizes(
            d=8, k=10, n=64, batch=32, steps=5000, min_steps=2500, until_flat=0.02, patience=2000, seeds=[0, 1],
            lr=0.01, tau=0.1, val_tasks=128, val_every=100, impl="direct",
        ),
        "multistep": MultistepSizes(tasks=64, T=20),
        "generalization": GeneralizationSizes(tasks=64, T=20, length_factors=[0.25, 0.5, 1, 2, 4], length_tasks=16),
        "realdata": RealDataSizes(
            datasets=["iris", "wine", "breast_cancer", "digits"], n=64, batch=32, steps=5000, min_steps=2500,
            until_flat=0.02, patience=2000, seeds=[0, 1, 2], lr=0.01, tau=0.1, val_tasks=128, val_every=100,
            impl="direct", starts=10, T=10, shift_tasks=64, probe_steps=10000,
        ),
        "landscape": LandscapeSizes(
            k=6, ds=[4, 32], n=64, batch=32, steps=5000, min_steps=2500, until_flat=0.02, patience=2000, seeds=[0],
            lr=0.01, tau=0.1, val_tasks=128, val_every=100, impl="direct", tasks=32, grid=21, span=1.0,
        ),
        "cauchy": CauchySizes(
            omegas=["l2"], schemes=["oh", "bn", "na"], tasks=64, grid=21, span=1.0, gap_scheme="bn",
        ),
        "dissimilarity": DissimilaritySizes(m=4, m_large=16, lp_per_family=2, lp_n=24, tasks=64, T=20),
        "openq": OpenQuestionsSizes(
            wide_d=8, wide_k=10, ffn=32, unroll=3, gamma_end=8.0, tau_end=0.01, trim=0.1, tasks=256, T=10,
            algo_tasks=128, algo_steps=5, probe_steps=10000, d_grid=[1, 2, 3, 4], k_grid=[2, 3, 4, 5, 6],
            betas=[1, 3, 10, 30, 100, 300, 1000, 3000], alphas=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75],
            minibatch=0.5, inference_gammas=[[1.0, 1.0], [1.0, 4.0], [1.0, 16.0], [0.5, 8.0]], permutations=8,
        ),
        "construction": ConstructionSizes(
            n_grid=[16, 64, 256], d_grid=[1, 2, 5, 16], k_grid=[2, 3, 5, 6, 8, 13, 16], tasks=16, steps=10,
            table_steps=[1, 2, 5, 10, 20], table_tasks=256, table_n=256, table_d=8, table_k=10,
            gammas=[1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0], gamma_tasks=32, gamma_n=128,
        ),
    },
    "paper": {
        "lloyd": LloydSizes(n=512, d=2, k=10, steps=20, tasks=256),
        "profiling": CostSizes(
            n=1024, batch=32, repeats=30, warmup=10, d_grid=[4, 8, 16, 32, 64, 128],
            k_grid=[10, 16, 25, 40, 64, 100], impl="direct", table_d=32, table_n=1024, table_batch=32,
            table_k=[6, 25, 100, 400, 1000], table_impls=["direct", "sdpa"], memory_repeats=5,
        ),
        "embeddings": EmbeddingsSizes(
            n=8, d=2, k=6, d_grid=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
            k_grid=[2, 4, 10, 16, 25, 64, 100, 256, 1000], geometry_k=[2, 3, 4, 6, 8, 10, 16, 25, 64],
        ),
        "attention": AttentionSizes(n=100, d=2, k=5, gammas=[0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0], frames=60),
        "smoothing": SmoothingSizes(
            n=512, d=32, k=10, tasks=256, taus=[0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0], k_grid=[2, 4, 10, 32, 100],
            restarts=1024, search_steps=500, random_r=1000000, frames=40,
        ),
        "lipschitz": LipschitzSizes(
            n=512, k=6, d=4, d_grid=[2, 4, 8, 16, 32, 64, 128, 256], k_grid=[2, 4, 6, 10, 16, 32, 64, 128],
            gammas=[0.25, 0.5, 1.0, 2.0, 4.0, 8.0], taus=[0.01, 0.1, 1.0], emp_n=512, emp_k=6,
            emp_d_grid=[2, 4, 8, 16, 32, 64], emp_tasks=32, pairs=256, searches=3,
        ),
        "training": TrainingSizes(
            n=512, k=6, batch=32, steps=10000, min_steps=10000, until_flat=None, patience=2000,
            seeds=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], val_tasks=320,
            val_every=100, window=100, fig2a_d=4,
            fig2a_taus=[1.0, 0.1], fig2b_tau=0.25, fig2b_ds=[4, 16],
            plateau={"d": [8, 16, 32], "k": [10, 16], "n": [128, 256], "tau": [0.3, 1.0], "lr": [0.003, 0.03], "gamma": [4.0]},
            ablation_steps=10000, fig10_taus=[1.0, 0.25, 0.14, 0.1], fig11_lrs=[0.001, 0.01, 0.1, 1.0],
            fig13_ns=[128, 256, 512, 1024], fig14_ds=[4, 8, 16, 32], fig15_ks=[6, 10, 16, 25],
            fig15_cases=[[4, 1.0], [4, 0.1], [32, 1.0], [32, 0.1]], fig17_ns=[256, 512, 1024], fig17_dk=[16, 16],
            bench_steps=100,
        ),
        "section4": Section4Sizes(
            d=32, k=10, n=512, batch=32, steps=10000, min_steps=10000, until_flat=None, patience=2000,
            seeds=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], lr=0.01, tau=0.1, val_tasks=320, val_every=100, impl="sdpa",
        ),
        "multistep": MultistepSizes(tasks=256, T=20),
        "generalization": GeneralizationSizes(
            tasks=256, T=20, length_factors=[0.25, 0.5, 1, 2, 4], length_tasks=64,
        ),
        "realdata": RealDataSizes(
            datasets=["iris", "wine", "breast_cancer", "digits"], n=512, batch=32, steps=10000, min_steps=10000,
            until_flat=None, patience=2000, seeds=[0], lr=0.01, tau=0.1, val_tasks=320, val_every=100, impl="sdpa",
            starts=20, T=20, shift_tasks=256, probe_steps=20000,
        ),
        "landscape": LandscapeSizes(
            k=6, ds=[4, 32], n=512, batch=32, steps=10000, min_steps=10000, until_flat=None, patience=2000,
            seeds=[0], lr=0.01, tau=0.1, val_tasks=320, val_every=100, impl="sdpa", tasks=64, grid=41, span=1.0,
        ),
        "cauchy": CauchySizes(
            omegas=["l2", "ne"], schemes=["oh", "bn", "na"], tasks=256, grid=41, span=1.0, gap_scheme="bn",
        ),
        "dissimilarity": DissimilaritySizes(m=4, m_large=16, lp_per_family=2, lp_n=24, tasks=256, T=20),
        "openq": OpenQuestionsSizes(
            wide_d=8, wide_k=10, ffn=32, unroll=3, gamma_end=8.0, tau_end=0.01, trim=0.1, tasks=512, T=20,
            algo_tasks=256, algo_steps=10, probe_steps=20000, d_grid=[1, 2, 3, 4], k_grid=[2, 3, 4, 5, 6],
            betas=[1, 3, 10, 30, 100, 300, 1000, 3000], alphas=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75],
            minibatch=0.5, inference_gammas=[[1.0, 1.0], [1.0, 4.0], [1.0, 16.0], [0.5, 8.0]], permutations=8,
        ),
        "construction": ConstructionSizes(
            n_grid=[16, 128, 512], d_grid=[1, 2, 8, 32], k_grid=[2, 3, 5, 6, 8, 10, 16, 25], tasks=32, steps=20,
            table_steps=[1, 2, 5, 10, 20], table_tasks=1024, table_n=512, table_d=32, table_k=10,
            gammas=[1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0], gamma_tasks=128, gamma_n=512,
        ),
    },
}
"""Profile name -> chapter name -> its sizes. Every profile defines every chapter (checked in tests)."""


@dataclass(frozen=True)
class Profile:
    """A named set of sizes per chapter, plus the device.

    Attributes
    ----------
    name : str
        ``"quick"``, ``"book"`` or ``"paper"``.
    sizes : dict
        Chapter name -> :class:`Sizes` (one entry of :data:`PROFILES`).
    device : torch.device
        Where the chapters compute (:func:`default_device`).

    Examples
    --------
    >>> p = get_profile("quick")
    >>> p.chapter("lloyd").k
    4
    """

    name: str
    sizes: dict = field(repr=False)
    device: torch.device = field(default_factory=default_device)

    def chapter(self, name: str) -> Sizes:
        """The sizes of one chapter (a :class:`Sizes`, read as attributes)."""
        if name not in self.sizes:
            raise ValueError(f"profile {self.name!r} has no sizes for chapter {name!r}; known: {sorted(self.sizes)}")
        return self.sizes[name]

    def describe(self, name: str | None = None) -> str:
        """One line for a caption: the profile, the device and (optionally) a chapter's sizes."""
        text = f"profile `{self.name}` on {self.device.type}"
        if name is not None:
            sizes = ", ".join(f"{key}={value}" for key, value in self.chapter(name).items())
            text += f" ({sizes})"
        return text


def get_profile(name: str | None = None) -> Profile:
    """The profile in force: ``name``, else ``$KMTRF_PROFILE``, else ``"book"``.

    Parameters
    ----------
    name : {"quick", "book", "paper"}, optional
        The profile to use instead of the environment's.

    Returns
    -------
    Profile

    Raises
    ------
    ValueError
        For an unknown profile name.

    Examples
    --------
    >>> p = get_profile("quick")
    >>> p.name, p.chapter("section4").n
    ('quick', 32)
    >>> p.describe("multistep").split(" (")[1]
    'tasks=16, T=6)'
    """
    name = name or os.environ.get(ENV_VAR) or DEFAULT
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {name!r} (from {ENV_VAR}?)")
    return Profile(name=name, sizes=PROFILES[name])
