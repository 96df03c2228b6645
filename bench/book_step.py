"""The CPU training step at the book's sizes: this checkout against another, shape by shape (issue 25, part 3).

Groups the ``book`` profile's catalog by step cost (``catalog_gpu.shape_of``: n, d, k, codes, loss, unroll,
seeds, batch, kernel, family, annealing), takes the shapes that hold the most steps to their caps, and times
``training_step`` (sampling, layer, loss, backward, Adam: what ``train`` repeats) of one config of each shape
in a child process with one torch thread, as a worker of ``make models`` runs it (with the allocator
settings ``train`` makes, :mod:`kmtrf_core.training.heap`, where the checkout has them). With ``--compare PATH`` (a
checkout of an earlier commit, for example ``git worktree add /tmp/before HEAD~1``) the two checkouts
alternate round by round, so a slow spell of the machine hits both, and the script prints the ratio per
shape and the steps of those shapes priced at each checkout's times.

    .venv/bin/python bench/book_step.py --compare /tmp/before            # about 4 minutes
    .venv/bin/python bench/book_step.py --quick                          # smoke run
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import
from catalog_gpu import shape_of

CHILD = """
import json, sys, time, torch
torch.set_num_threads(1)
from kmtrf_core.training import TrainConfig
from kmtrf_core.training.config import initial_layer
from kmtrf_core.training.loop import task_generators, training_step
try:  # what train() does first on the CPU, where the checkout has it
    from kmtrf_core.training.heap import hold_freed_memory
    hold_freed_memory()
except ImportError:
    pass
fields, warm, steps = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
fields["seeds"] = tuple(fields["seeds"])
from kmtrf_core.attention import IMPLS
if fields["impl"] not in IMPLS:  # "auto" on a checkout before it: that checkout's default kernel
    fields["impl"] = "sdpa"
if isinstance(fields["family"], list):
    fields["family"] = tuple(fields["family"])
config = TrainConfig(**fields)
model = initial_layer(config, "cpu")
optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
gens = task_generators(config, "cpu")
for step in range(1, warm + 1):
    training_step(model, optimizer, config, gens, step)
start = time.perf_counter()
for step in range(warm + 1, warm + steps + 1):
    losses, ok = training_step(model, optimizer, config, gens, step)
print(json.dumps(1000 * (time.perf_counter() - start) / steps))
"""


def book_shapes(profile: str, count: int):
    """The ``count`` shapes of the profile's catalog holding the most steps: ``(shape, runs, steps, config)``."""
    from kmtrf_core.book.catalog import book_catalog

    runs, steps, example = collections.Counter(), collections.Counter(), {}
    configs = book_catalog(profile).configs()
    for config in configs:
        shape = shape_of(config)
        runs[shape] += 1
        steps[shape] += config.steps
        example.setdefault(shape, config)
    total = sum(steps.values())
    return [(shape, runs[shape], n, example[shape]) for shape, n in steps.most_common(count)], total, len(configs)


def ms_per_step(checkout: Path, config, warm: int, steps: int) -> float:
    fields = {**config.to_dict(), "device": "cpu"}
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(fields), str(warm), str(steps)], cwd=checkout,
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    from kmtrf_core.book.profiles import PROFILES  # this checkout's, as book_shapes imports its catalog
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", type=Path, help="a checkout of another commit to time against this one")
    parser.add_argument("--profile", default="book", choices=sorted(PROFILES))
    parser.add_argument("--shapes", type=int, default=12, help="how many of the largest shapes to time")
    parser.add_argument("--steps", type=int, default=150, help="timed steps per measurement")
    parser.add_argument("--warm", type=int, default=10, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurements per checkout and shape")
    parser.add_argument("--quick", action="store_true", help="3 shapes, 20 steps, 1 round: a smoke run")
    args = parser.parse_args(argv)
    at_least(parser, ("--shapes", args.shapes, 1), ("--steps", args.steps, 1), ("--warm", args.warm, 0),
             ("--rounds", args.rounds, 1))
    if args.quick:
        args.shapes, args.steps, args.rounds, args.warm = 3, 20, 1, 2
    here = Path(__file__).resolve().parent.parent
    checkouts = {"this": here} | ({"compare": args.compare.resolve()} if args.compare else {})
    for label, path in checkouts.items():
        if not (path / "kmtrf_core" / "__init__.py").is_file():
            raise SystemExit(f"no kmtrf_core in {path} ({label})")
    shapes, total, runs = book_shapes(args.profile, args.shapes)
    print(json.dumps(dict(profile=args.profile, runs=runs, steps_to_caps=total, timed_shapes=len(shapes),
                          timed_share=round(sum(s[2] for s in shapes) / total, 3), threads=1)))
    priced = dict.fromkeys(checkouts, 0.0)
    for shape, count, steps, config in shapes:
        times = {label: [] for label in checkouts}
        for _ in range(args.rounds):
            for label, path in checkouts.items():
                times[label].append(ms_per_step(path, config, args.warm, args.steps))
        row = dict(n=shape[0], d=shape[1], k=shape[2], scheme=shape[3], omega=shape[4], unroll=shape[5],
                   seeds=shape[6], impl=shape[8], family=shape[9], runs=count, steps=steps)
        for label in checkouts:
            row[f"ms_{label}"] = round(statistics.median(times[label]), 2)
            priced[label] += steps * row[f"ms_{label}"] / 60000
        if args.compare:
            row["ratio"] = round(row["ms_compare"] / row["ms_this"], 2)
        print(json.dumps(row), flush=True)
    summary = {f"minutes_{label}": round(value, 1) for label, value in priced.items()}
    if args.compare:
        summary["ratio"] = round(priced["compare"] / priced["this"], 2)
    print(json.dumps(dict(timed_steps_priced=summary)))


if __name__ == "__main__":
    main()
