"""Milliseconds per training step on a GPU: the eager step against the step replayed as one CUDA graph.

Issue 25, part 1. For each configuration the script builds what :func:`kmtrf_core.training.train`
builds (the seeds' layers, Adam, the task generators), takes ``--warm`` steps untimed (the graph's
warm-up and capture among them), then times ``--steps`` steps between two device synchronizations,
so the time is the device's, not the host's launch queue. Eager and graphed alternate, ``--repeats``
times; the script prints the median ms per step of each and their ratio. The configurations are the
issue's: the paper's setting (n 512, d 32, k 10, B 32, OH, softmin loss at tau 0.1) with one seed and
with ten, BN with one, and Figure 2(a) at the ``paper`` profile (d 4, k 6, n 512, ten seeds,
sparsemax loss at tau 0.1), plus the book's n 128 setting of the time-to-quality benchmark.

    python bench/gpu_step.py                     # on a CUDA machine
    .venv/bin/python bench/gpu_step.py --quick   # on a CPU: the eager step only, small sizes
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import
from kmtrf_core.device import resolve_device
from kmtrf_core.training import TrainConfig
from kmtrf_core.training.config import initial_layer
from kmtrf_core.training.graphs import GRAPH_WARMUP, Stepper, graph_obstacle
from kmtrf_core.training.loop import task_generators, training_step

CONFIGS = {
    "paper OH, 1 seed": dict(n=512, d=32, k=10, scheme="oh", omega="ne", tau=0.1, seeds=(0,)),
    "paper OH, 10 seeds": dict(n=512, d=32, k=10, scheme="oh", omega="ne", tau=0.1, seeds=tuple(range(10))),
    "paper BN, 1 seed": dict(n=512, d=32, k=10, scheme="bn", omega="ne", tau=0.1, seeds=(0,)),
    "Figure 2(a) OH, 10 seeds": dict(n=512, d=4, k=6, scheme="oh", omega="l2", tau=0.1, seeds=tuple(range(10))),
    "time to quality, n 128": dict(n=128, d=4, k=6, scheme="oh", omega="ne", tau=0.1, seeds=(1,)),
}


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ms_per_step(config: TrainConfig, graph: bool, warm: int, steps: int) -> float:
    device = resolve_device(config.device)
    model = initial_layer(config, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, capturable=graph)
    gens = task_generators(config, device)
    stepper = Stepper(lambda step: training_step(model, optimizer, config, gens, step), optimizer, gens, graph)
    for step in range(1, warm + 1):
        stepper(step)
    _sync(device)
    start = time.perf_counter()
    for step in range(warm + 1, warm + steps + 1):
        losses, ok = stepper(step)
    _sync(device)
    if not bool(ok.all()):
        raise RuntimeError(f"{config}: a non-finite value in the timed steps")
    return 1000 * (time.perf_counter() - start) / steps


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="default: CUDA when present")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per measurement")
    parser.add_argument("--warm", type=int, default=10, help="untimed steps first (the graph's warm-up and capture)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--impl", default="direct", choices=["direct", "sdpa"])
    parser.add_argument("--quick", action="store_true", help="small sizes and few steps, for a smoke run on a CPU")
    args = parser.parse_args(argv)
    at_least(parser, ("--steps", args.steps, 1), ("--repeats", args.repeats, 1),  # (no capture in the timed steps)
             ("--warm", args.warm, GRAPH_WARMUP + 1, f"the graph's {GRAPH_WARMUP} eager steps and its capture"))
    device = resolve_device(args.device)
    print(json.dumps(dict(torch=torch.__version__, device=str(device),
                          name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")))
    for name, fields in CONFIGS.items():
        if args.quick:
            fields = {**fields, "n": min(fields["n"], 32), "d": min(fields["d"], 4), "seeds": fields["seeds"][:2]}
        config = TrainConfig(**fields, batch=32, lr=0.01, gamma=1.0, impl=args.impl, device=str(device))
        modes = [False] if graph_obstacle(config, device) else [False, True]
        times = {mode: [] for mode in modes}
        for _ in range(args.repeats):
            for mode in modes:
                times[mode].append(ms_per_step(config, mode, args.warm, args.steps))
        eager = statistics.median(times[False])
        row = dict(config=name, impl=args.impl, eager_ms=round(eager, 3))
        if True in times:
            graphed = statistics.median(times[True])
            row.update(graph_ms=round(graphed, 3), speedup=round(eager / graphed, 2))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
