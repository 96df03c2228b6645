"""The ``paper`` catalog on one GPU: measured step costs of its run shapes, extrapolated to every run.

Issue 25, part 4. ``make models KMTRF_PROFILE=paper`` trains 276 runs (most of them 10 seeds x 10 000
steps); that is hours even on a GPU, too long for a lent session. This script groups the runs by what
sets a step's cost (n, d, k, codes, loss, unroll, number of seeds, batch, attention kernel, family, and
whether gamma or tau is annealed: :func:`shape_of`), times the shapes that hold the most steps first,
eager and as one CUDA graph (``bench/gpu_step.py``'s ``ms_per_step``), plus one validation of each,
until ``--budget-s`` is spent. Every run's time is then
``steps x step_ms + validations x validation_ms`` with its own shape's numbers where measured, and
otherwise those of the measured shape nearest in (n, seeds, d + k); the script says how much of the
catalog's steps were measured and how much extrapolated. Runs that stop early by the flatness rule
would take less: the estimate trains every run to its cap. Last, ``--share`` processes time the
largest shape together on the one GPU, for the throughput of runs sharing it (Dask workers on one
device).

    python bench/catalog_gpu.py --budget-s 60                # on a CUDA machine
    .venv/bin/python bench/catalog_gpu.py --quick            # on a CPU: a smoke run, tiny sizes
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import multiprocessing
import time

import torch

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import
from gpu_step import ms_per_step

from kmtrf_core.book.catalog import book_catalog
from kmtrf_core.book.profiles import PROFILES
from kmtrf_core.device import resolve_device
from kmtrf_core.evaluate import relative_loss
from kmtrf_core.lloyd import kmeans_objective, lloyd
from kmtrf_core.training.config import initial_layer
from kmtrf_core.training.graphs import graph_obstacle
from kmtrf_core.training.loop import validation_tasks


def shape_of(config) -> tuple:
    family = config.family if isinstance(config.family, str) else "mixture"
    # off the CPU "auto" runs the fused kernel, as "sdpa" does (kmtrf_core.attention): one shape, timed once
    on_cpu = config.device is None or str(config.device).startswith("cpu")
    impl = "sdpa" if config.impl == "auto" and not on_cpu else config.impl
    return (config.n, config.d, config.k, config.scheme, config.omega, config.unroll, len(config.seeds),
            config.batch, impl, family, config.gamma_end is not None or config.tau_end is not None)


def validation_ms(config, device) -> float:
    """One validation as :func:`kmtrf_core.training.train` runs it (the layer on the held-out tasks)."""
    model = initial_layer(config, device).eval()
    X, C = validation_tasks(config, device)
    with torch.no_grad():
        reference = kmeans_objective(X, lloyd(X, C, steps=config.unroll))
    relative_loss(model, X, C, chunk=config.batch, reference=reference, steps=config.unroll)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    relative_loss(model, X, C, chunk=config.batch, reference=reference, steps=config.unroll).sum().item()
    return 1000 * (time.perf_counter() - start)


def _share_worker(config, steps, queue) -> None:
    torch.set_num_threads(1)
    queue.put(ms_per_step(config, not graph_obstacle(config, resolve_device(config.device)), 10, steps))


def shared(config, processes: int, steps: int) -> list:
    """ms per step of each of ``processes`` processes training ``config`` at once on the one device."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_share_worker, args=(config, steps, queue)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    times = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="paper", choices=sorted(PROFILES))
    parser.add_argument("--device", default=None, help="default: CUDA when present")
    parser.add_argument("--budget-s", type=float, default=60.0,
                        help="seconds to spend timing shapes (the largest is always timed)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per shape and form")
    parser.add_argument("--share", type=int, nargs="*", default=[2, 4], help="processes sharing the device")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (n 32, d <= 4, 2 seeds), for a CPU")
    args = parser.parse_args(argv)
    at_least(parser, ("--budget-s", args.budget_s, 0), ("--steps", args.steps, 1),
             *(("--share", processes, 1) for processes in args.share))
    device = resolve_device(args.device)
    configs = book_catalog(args.profile).configs()
    if args.quick:
        configs = [dataclasses.replace(c, n=min(c.n, 32), d=min(c.d, 4), seeds=c.seeds[:2], val_tasks=16)
                   for c in configs]
    configs = [dataclasses.replace(c, device=str(device)) for c in configs]
    runs = collections.defaultdict(list)
    for config in configs:
        runs[shape_of(config)].append(config)
    order = sorted(runs, key=lambda shape: -sum(c.steps for c in runs[shape]))
    total_steps = sum(c.steps for c in configs)
    print(json.dumps(dict(profile=args.profile, device=str(device), runs=len(configs), shapes=len(runs),
                          steps=total_steps)), flush=True)

    measured = {}
    start = time.perf_counter()
    for shape in order:
        if measured and time.perf_counter() - start > args.budget_s:  # at least one shape, to price the rest
            break
        config = runs[shape][0]
        row = dict(eager_ms=ms_per_step(config, False, 10, args.steps), val_ms=validation_ms(config, device))
        if graph_obstacle(config, device) is None:
            row["graph_ms"] = ms_per_step(config, True, 10, args.steps)
        measured[shape] = row
        print(json.dumps(dict(shape=shape, runs=len(runs[shape]), **{k: round(v, 3) for k, v in row.items()})),
              flush=True)

    def nearest(shape):
        if shape in measured:
            return measured[shape]
        cost = lambda other: (abs(other[0] - shape[0]) / shape[0], abs(other[6] - shape[6]),  # noqa: E731
                              abs(other[1] + other[2] - shape[1] - shape[2]))
        return measured[min(measured, key=cost)]

    totals = {"eager": 0.0, "graph": 0.0}
    covered = sum(c.steps for shape in measured for c in runs[shape])
    for shape, group in runs.items():
        row = nearest(shape)
        for config in group:
            validations = config.steps // config.val_every + 1
            for form in totals:
                step_ms = row.get(f"{form}_ms", row["eager_ms"])  # a shape no graph can hold trains eagerly
                totals[form] += (config.steps * step_ms + validations * row["val_ms"]) / 1000
    print(json.dumps(dict(estimate="every run to its cap, one run at a time on the one device",
                          measured_steps_fraction=round(covered / total_steps, 3),
                          eager_minutes=round(totals["eager"] / 60, 1), graph_minutes=round(totals["graph"] / 60, 1))),
          flush=True)

    if not args.share:
        return
    largest = runs[order[0]][0]
    # alone as the sharers run: one spawned process, one torch thread (this process's threads and its
    # imports made the CPU smoke run's "alone" 20x slower than a sharer, a throughput that meant nothing)
    alone = shared(largest, 1, args.steps)[0]
    for processes in args.share:
        times = shared(largest, processes, args.steps)
        throughput = sum(alone / t for t in times)
        print(json.dumps(dict(shared_by=processes, shape=order[0], alone_ms=round(alone, 3),
                              each_ms=[round(t, 3) for t in times], throughput_vs_alone=round(throughput, 2))),
              flush=True)


if __name__ == "__main__":
    main()
