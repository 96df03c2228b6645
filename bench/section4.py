"""Benchmarks of the Section 4 tools: batched loss surfaces, pairwise EMD, multi-step evaluation.

1. ``loss_surface`` on a grid: all grid points as one batched ensemble (the default)
   against one grid point per forward pass (``batch_points=1``), same numbers;
2. ``emd_matrix`` over m tasks per family: POT's 1-D solver over all pairs
   (``method="pot"``), the sorted-sample identity (``method="sorted"``), and POT's
   general LP solver ``ot.emd2`` on the full cost matrix for a few pairs (the
   "textbook" way, extrapolated per pair);
3. multi-step evaluation (``evaluate_models``, T re-embedded steps) of an
   ensemble against a loop over its members.

Run: ``.venv/bin/python bench/section4.py`` (``--quick`` for a smoke run).
Numbers come from one run on one machine: compare ratios, not absolute values.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_usage import at_least  # noqa: E402  (a sibling: bench/ is the script's folder)
from kmtrf_core import ClusterTransformer, sample_tasks  # noqa: E402
from kmtrf_core.dissimilarity import distance_samples, emd_matrix  # noqa: E402
from kmtrf_core import evaluate_models, family_tasks  # noqa: E402
from kmtrf_core.landscape import loss_surface  # noqa: E402


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), out


def bench_landscape(args):
    model = ClusterTransformer(args.d, args.k, "bn", generator=torch.Generator().manual_seed(0))
    X, C = sample_tasks(args.tasks, args.n, args.d, args.k, generator=1)
    grid = np.linspace(-1, 1, args.grid)
    t_batched, batched = timed(lambda: loss_surface(model, X, C, grid, grid, generator=2), args.repeats)
    t_loop, loop = timed(lambda: loss_surface(model, X, C, grid, grid, generator=2, batch_points=1), args.repeats)
    same = np.allclose(batched.smoothed, loop.smoothed, rtol=1e-4)
    print(f"loss_surface {args.grid}x{args.grid} grid, {args.tasks} tasks, n={args.n}, d={args.d}, k={args.k}: "
          f"batched {t_batched:.2f} s, one point per pass {t_loop:.2f} s -> {t_loop / t_batched:.1f}x "
          f"(same values: {same})")


def bench_emd(args):
    import ot

    tasks = family_tasks(args.m, args.n, args.d, args.k, generator=3)
    samples = np.concatenate([distance_samples(X, C) for X, C in tasks.values()])
    N, P = samples.shape
    pairs = N * (N - 1) // 2
    t_pot, D_pot = timed(lambda: emd_matrix(samples), args.repeats)
    t_sorted, D_sorted = timed(lambda: emd_matrix(samples, method="sorted"), args.repeats)
    w = np.full(P, 1.0 / P)
    lp_pairs = 3
    start = time.perf_counter()
    for i in range(lp_pairs):
        ot.emd2(w, w, np.abs(samples[i][:, None] - samples[i + 1][None, :]), numItermax=10**7)
    t_lp_pair = (time.perf_counter() - start) / lp_pairs
    print(f"emd_matrix {N} tasks ({pairs} pairs, {P} distances each): POT 1-D {t_pot:.2f} s, sorted {t_sorted:.3f} s "
          f"(max difference {np.abs(D_pot - D_sorted).max():.1e}); LP ot.emd2 {t_lp_pair:.2f} s per pair -> "
          f"~{t_lp_pair * pairs / 60:.0f} min for the matrix, {t_lp_pair * pairs / t_pot:.0f}x the 1-D solver")


def bench_multistep(args):
    S = 3
    members = [ClusterTransformer(args.d, args.k, "bn", generator=torch.Generator().manual_seed(s)) for s in range(S)]
    ensemble = ClusterTransformer.stack(members)
    X, C = sample_tasks(args.tasks, args.n, args.d, args.k, generator=4)
    tests = {"normal": (X, C)}
    t_ens, _ = timed(lambda: evaluate_models({"e": ensemble}, tests, steps=args.T), args.repeats)
    t_loop, _ = timed(lambda: evaluate_models({i: m for i, m in enumerate(members)}, tests, steps=args.T),
                      args.repeats)
    print(f"evaluate_models T={args.T}, {args.tasks} tasks, {S} seeds: ensemble {t_ens:.2f} s, "
          f"loop over seeds {t_loop:.2f} s -> {t_loop / t_ens:.1f}x")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    at_least(parser, ("--repeats", args.repeats, 1))
    if args.quick:
        args.n, args.d, args.k, args.tasks, args.grid, args.m, args.T, args.repeats = 32, 4, 4, 8, 5, 2, 3, 1
    else:
        args.n, args.d, args.k, args.tasks, args.grid, args.m, args.T = 128, 8, 10, 32, 21, 16, 20
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    bench_landscape(args)
    bench_emd(args)
    bench_multistep(args)


if __name__ == "__main__":
    main()
