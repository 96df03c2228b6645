"""Benchmark of one training step (Algorithm 1) and its memory, for the training issue's targets.

Four tables:

1. step time at the paper's setting (n=512, d=32, k=10, B=32), OH and BN, with
   the SDPA and the direct attention kernels: median / min / max ms per step
   and steps per second, from ``kmtrf_core.training.train`` itself (sampling,
   forward, loss, backward, Adam);
2. where the time of one step goes (sampling, forward, loss, backward, Adam),
   timed phase by phase;
3. peak memory of one step against n = 512 .. 8192 (``kmtrf_core.cost``,
   a separate worker process per configuration), SDPA vs direct;
4. the ensemble speedup: S seeds trained together vs S separate runs.

Run: ``.venv/bin/python bench/train_step.py`` (add ``--quick`` for a fast smoke run).
Numbers are from one run of this script on one machine: compare ratios, not
absolute values, across machines.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import
from kmtrf_core import ClusterTransformer, sample_tasks, smoothed_kmeans_loss
from kmtrf_core.cost.harness import measure_model
from kmtrf_core.training import TrainConfig, train


def step_times(n, d, k, scheme, impl, steps, seeds=(0,)):
    cfg = TrainConfig(d=d, k=k, n=n, scheme=scheme, impl=impl, steps=steps, seeds=tuple(seeds),
                      val_every=10**9, val_tasks=8)
    start = time.perf_counter()
    _, hist = train(cfg)
    total = time.perf_counter() - start
    t = np.diff(hist[hist.seed == seeds[0]].wall_time.to_numpy())[1:] * 1000  # ms, skip the first step
    return t, total


def phases(n, d, k, scheme, impl, repeats):
    model = ClusterTransformer(d, k, scheme, impl=impl, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    acc = {"sample": [], "forward": [], "loss": [], "backward": [], "adam": []}
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        X, C = sample_tasks(32, n, d, k, generator=gen)
        t1 = time.perf_counter()
        out = model(X, C)
        t2 = time.perf_counter()
        loss = smoothed_kmeans_loss(X, out, "l2", 0.1).mean()
        t3 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        t4 = time.perf_counter()
        opt.step()
        t5 = time.perf_counter()
        if i >= 2:
            for key, dt in zip(acc, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                acc[key].append(1000 * dt)
    return {key: statistics.median(v) for key, v in acc.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--steps", type=int, default=40, help="timed training steps per configuration")
    args = parser.parse_args(argv)
    at_least(parser, ("--steps", args.steps, 2))  # the first step is dropped
    steps = 6 if args.quick else args.steps
    n0, d0, k0 = (64, 8, 4) if args.quick else (512, 32, 10)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu")

    print(f"\n1. training step, n={n0}, d={d0}, k={k0}, B=32 ({steps} steps, first dropped)")
    print(f"{'scheme':>6} {'impl':>6} {'median ms':>10} {'min':>8} {'max':>8} {'steps/s':>8} {'10000 steps':>12}")
    medians = {}
    for scheme in ("oh", "bn"):
        for impl in ("sdpa", "direct"):
            t, _ = step_times(n0, d0, k0, scheme, impl, steps)
            med = float(np.median(t))
            medians[(scheme, impl)] = med
            print(f"{scheme:>6} {impl:>6} {med:10.1f} {t.min():8.1f} {t.max():8.1f} {1000 / med:8.2f} "
                  f"{10000 * med / 60000:9.1f} min")

    print(f"\n2. where one step goes (OH, median ms over {max(steps // 2, 3)} steps)")
    for impl in ("sdpa", "direct"):
        parts = phases(n0, d0, k0, "oh", impl, max(steps // 2, 3))
        total = sum(parts.values())
        print(f"{impl:>6}: " + ", ".join(f"{key} {v:.1f} ({100 * v / total:.0f}%)" for key, v in parts.items()))

    ns = [64, 128, 256] if args.quick else [512, 1024, 2048, 4096, 8192]
    print(f"\n3. peak memory of one training step vs n (d={d0}, k={k0}, OH, B=32)")
    print(f"{'n':>6} {'sdpa MB':>10} {'MB per 1k points':>17} {'direct MB':>10}")
    for n in ns:
        sd = measure_model(d0, k0, "oh", n, 32, impl="sdpa", repeats=1, warmup=0)
        direct = (measure_model(d0, k0, "oh", n, 32, impl="direct", repeats=1, warmup=0).peak_mb
                  if n <= (256 if args.quick else 2048) else float("nan"))
        print(f"{n:6d} {sd.peak_mb:10.1f} {1000 * sd.peak_mb / n:17.1f} {direct:10.1f}")
    print(f"   memory method: {sd.memory_method}")

    S = 2 if args.quick else 4
    print(f"\n4. ensemble: {S} seeds together vs {S} separate runs (n={n0}, d={d0}, k={k0}, OH, {steps} steps)")
    _, together = step_times(n0, d0, k0, "oh", "sdpa", steps, seeds=tuple(range(S)))
    separate = sum(step_times(n0, d0, k0, "oh", "sdpa", steps, seeds=(s,))[1] for s in range(S))
    print(f"   together {together:.1f} s, separate {separate:.1f} s, speedup {separate / together:.2f}x")
    print(f"\ntarget: median step at n=512, d=32, k=10, B=32, OH <= 130 ms; "
          f"measured {medians[('oh', 'sdpa')]:.1f} ms (sdpa), {medians[('oh', 'direct')]:.1f} ms (direct)")


if __name__ == "__main__":
    main()
