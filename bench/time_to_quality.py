"""Time to beat one Lloyd step: the authors' released ``train.py`` against ``kmtrf_core``, same config and machine.

Issue 25, part 2. Both train the paper's layer at d 4, k 6, n 128, B 32, one-hot codes, the softmin
loss at tau 0.1 (the authors' ``--loss_itemp 10``), gamma 1, Adam at lr 0.01, validating every 100
steps on 128 held-out tasks (the authors: 4 batches of 32), and each run's time is the wall time from
its first validation until the first validation whose loss relative to one Lloyd step is below 1.
Seeds alternate between the two programs, so a slow spell of a shared machine hits both.

The authors' code is not vendored: pass a checkout of ``rithram/kmeans-trf`` with ``--authors``. It
runs as released, but for one default flipped on a machine without CUDA (its own task sampler, dropout 0.01 and ReduceLROnPlateau with patience 5 and
decay 0.5, on CUDA when there is one), in a subprocess whose printed validations are read as they
come. Ours runs :func:`kmtrf_core.training.train` in a subprocess too, to its cap, and reads the
history's wall times.

    .venv/bin/python bench/time_to_quality.py --authors /path/to/kmeans-trf --seeds 1 2
    python bench/time_to_quality.py --authors /path/to/kmeans-trf --device cuda --graph   # on a GPU

Output keys: ``ratio_ours`` (and ``ratio_ours_graph``) are the authors' seconds over ours (above 1: we are faster).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import

LINE = re.compile(r"Step (\d+)/\d+: Validation obj: [\d.]+, relative to Lloyd's: ([\d.]+)")

# The released utils.lloyds_iters_batched moves its input to CUDA unless told otherwise (use_cuda defaults to
# True, and train.py does not pass it); without a GPU, the wrapper only flips that default, nothing else.
AUTHORS_RUNNER = """
import runpy, sys, torch
sys.path.insert(0, ".")
import utils
if not torch.cuda.is_available():
    code = utils.lloyds_iters_batched.__code__
    names = code.co_varnames[:code.co_argcount]
    defaults = list(utils.lloyds_iters_batched.__defaults__)
    defaults[names.index("use_cuda") - (len(names) - len(defaults))] = False
    utils.lloyds_iters_batched.__defaults__ = tuple(defaults)
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""

OURS = """
import json, sys, torch
from kmtrf_core.training import TrainConfig, train
seed, cap, device, graph = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "graph"
cfg = TrainConfig(d=4, k=6, n=128, scheme="oh", omega="ne", tau=0.1, gamma=1.0, lr=0.01, batch=32, steps=cap,
                  val_every=100, val_tasks=128, until_flat=None, seeds=(seed,), device=device)
_, history = train(cfg, graph=graph)
rows = history[history.val_relative_loss.notna()]
print(json.dumps([[int(s), float(v), float(t)] for s, v, t in zip(rows.step, rows.val_relative_loss, rows.wall_time)]))
"""


def authors(path: str, seed: int, cap: int) -> dict:
    """Run the authors' train.py until its first validation below one Lloyd step (or its cap)."""
    command = [sys.executable, "-u", "-c", AUTHORS_RUNNER, "-n", "128", "-N", "128", "-k", "6", "-d", "4", "-D", "normal",
               "-s", "0.1", "--em", "--es", "--sdb", "-e", "onehot", "-q", "1", "-A", "softmax", "-a", "1.0",
               "-p", "0.01", "-L", "softmax", "-l", "10", "-E", str(seed), "-b", "32", "-r", "0.01",
               "-C", "0.5", "-P", "5", "-T", str(cap), "-t", "100", "-B", "4"]
    start = None
    process = subprocess.Popen(command, cwd=path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in process.stdout:
            match = LINE.search(line)
            if not match:
                continue
            step, relative = int(match.group(1)), float(match.group(2))
            now = time.perf_counter()
            if start is None:
                start = now
            if step > 0 and relative < 1.0:
                return dict(step=step, relative=relative, seconds=round(now - start, 1))
    finally:
        process.kill()
        process.wait()
    return dict(step=None, relative=None, seconds=None)


def ours(seed: int, cap: int, device: str, graph: bool = False) -> dict:
    out = subprocess.run([sys.executable, "-c", OURS, str(seed), str(cap), device, "graph" if graph else "eager"],
                         capture_output=True, text=True, check=True, env={**os.environ})
    curve = json.loads(out.stdout.strip().splitlines()[-1])
    for step, relative, wall in curve:
        if step > 0 and relative < 1.0:
            return dict(step=step, relative=round(relative, 4), seconds=round(wall, 1))
    return dict(step=None, relative=None, seconds=None)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors", required=True, help="a checkout of rithram/kmeans-trf")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cap", type=int, default=4000, help="most steps either program trains")
    parser.add_argument("--device", default="cpu", help="where ours trains (the authors' picks CUDA itself)")
    parser.add_argument("--graph", action="store_true", help="ours also with its step replayed as one CUDA graph")
    args = parser.parse_args(argv)
    at_least(parser, ("--cap", args.cap, 1), *(("--seeds", seed, 0) for seed in args.seeds))
    if not os.path.isfile(os.path.join(args.authors, "train.py")):
        raise SystemExit(f"no train.py in {args.authors!r}: pass a checkout of rithram/kmeans-trf with --authors")
    for seed in args.seeds:
        theirs = authors(args.authors, seed, args.cap)
        row = dict(seed=seed, authors=theirs)
        for label, graph in [("ours", False)] + ([("ours_graph", True)] if args.graph else []):
            mine = ours(seed, args.cap, args.device, graph)
            row[label] = mine
            row[f"ratio_{label}"] = (round(theirs["seconds"] / mine["seconds"], 2)
                                     if theirs["seconds"] and mine["seconds"] else None)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
