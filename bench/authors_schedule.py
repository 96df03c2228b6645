"""The authors' released ``train.py`` on one task family, with and without its learning-rate schedule.

A side-by-side probe for chapter 13 (the Cauchy problem). The released code (``rithram/kmeans-trf``) halves
Adam's rate whenever the relative validation loss (Eq. 20) has not improved for ``patience`` validations
(``ReduceLROnPlateau(factor=0.5, patience=5)``, stepped every 50 steps by ``expt-run.sh``); ``kmtrf_core``
trains at a constant rate. On Cauchy tasks our layers sit on a plateau above one Lloyd step for thousands of
steps before they drop below it, so a schedule that shrinks the rate during the plateau could be what keeps
the paper's Cauchy layers above Lloyd (Section 3, Figure 4). This script runs the authors' own code both ways
(the schedule as released, and the same run with a patience no run reaches) and reports, per seed, the first
validation below one Lloyd step, the best and last relative validation loss, and how often the rate was halved.

    python bench/authors_schedule.py --authors <checkout of rithram/kmeans-trf> [--family cauchy]

One JSON line per (seed, schedule). The defaults are the book profile's Section 4 sizes (n 64, d 8, k 10) with
the released code's loss (the softmin, ``-l 10`` = tau 0.1), one-hot codes, lr 0.01, batch 32, the paper's
10,000 steps, and ``expt-run.sh``'s 10 validation batches. The released code picks CUDA itself when present.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import
from time_to_quality import AUTHORS_RUNNER, LINE

LR_LINE = re.compile(r"current lr: \[([0-9.eE+-]+)\]")
NEVER = 10**9  # a patience no run reaches: the released schedule switched off


def run(path: str, args, seed: int, patience: float) -> dict:
    """One run of the authors' train.py; its validation curve and learning rates, read from its output."""
    command = [sys.executable, "-u", "-c", AUTHORS_RUNNER, "-n", str(args.n), "-N", str(args.n), "-k", str(args.k),
               "-d", str(args.d), "-D", args.family, "-s", "0.1", "--em", "--es", "--sdb", "-e", "onehot",
               "-q", "1", "-A", "softmax", "-a", "1.0", "-p", "0.01", "-L", "softmax", "-l", str(1.0 / args.tau),
               "-E", str(seed), "-b", "32", "-r", str(args.lr), "-C", "0.5", "-P", str(patience),
               "-T", str(args.steps), "-t", str(args.every), "-B", str(args.val_batches)]
    out = subprocess.run(command, cwd=path, capture_output=True, text=True, check=True)
    row = dict(seed=seed, schedule="released" if patience != NEVER else "off", family=args.family)
    return {**row, **summarize(out.stdout, args.lr)}


def summarize(stdout: str, lr: float) -> dict:
    """The first validation below one Lloyd step, the best and last ratio, and the rate's halvings, from train.py's
    printed lines ("Step s/T: ... relative to Lloyd's: r" at each validation, then " ... current lr: [x]")."""
    curve, rates = [], []
    for line in stdout.splitlines():
        if (match := LINE.search(line)):
            curve.append((int(match.group(1)), float(match.group(2))))
        elif (match := LR_LINE.search(line)):
            rates.append((curve[-1][0] if curve else 0, float(match.group(1))))
    if not curve:
        raise SystemExit(f"no validation lines in the output of train.py:\n{stdout[-2000:]}")
    below = next((step for step, value in curve if step > 0 and value < 1.0), None)
    previous = [lr] + [rate for _, rate in rates[:-1]]
    halvings = [step for (step, rate), before in zip(rates, previous) if rate < before]
    return dict(first_below_lloyd=below, best=min((value for step, value in curve if step > 0), default=None),
                last=curve[-1][1], steps=curve[-1][0], final_lr=rates[-1][1] if rates else lr,
                halvings=len(halvings), halvings_before_below=sum(step < (below or NEVER) for step in halvings),
                curve=[[step, round(value, 4)] for step, value in curve[:: max(1, len(curve) // 40)]])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors", required=True, help="a checkout of rithram/kmeans-trf")
    parser.add_argument("--family", default="cauchy", help="the task family of training and validation")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="the released code's -E seeds (> 0)")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--tau", type=float, default=0.1, help="the loss's temperature (the released -l is 1/tau)")
    parser.add_argument("--lr", type=float, default=0.01, help="the initial learning rate")
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--every", type=int, default=50, help="steps between validations (expt-run.sh: 50)")
    parser.add_argument("--patience", type=float, default=5, help="validations without improvement before halving")
    parser.add_argument("--val-batches", type=int, default=10,
                        help="validation batches of 32 tasks (expt-run.sh: 10; the README's runs: 4)")
    parser.add_argument("--schedule", choices=("both", "released", "off"), default="both",
                        help="the released schedule, the same run without it, or both")
    args = parser.parse_args(argv)
    at_least(parser, ("--n", args.n, 10, "the released code's lower bound"), ("--d", args.d, 2), ("--k", args.k, 2),
             ("--steps", args.steps, 1), ("--every", args.every, 1), ("--patience", args.patience, 1),
             ("--val-batches", args.val_batches, 1),
             *(("--seeds", seed, 1) for seed in args.seeds))
    if not args.tau > 0 or not args.lr > 0:
        parser.error(f"--tau and --lr must be > 0, got {args.tau} and {args.lr}")
    if not os.path.isfile(os.path.join(args.authors, "train.py")):
        raise SystemExit(f"no train.py in {args.authors!r}: pass a checkout of rithram/kmeans-trf with --authors")
    for seed in args.seeds:
        for patience in {"both": (args.patience, NEVER), "released": (args.patience,), "off": (NEVER,)}[args.schedule]:
            print(json.dumps(run(args.authors, args, seed, patience)), flush=True)


if __name__ == "__main__":
    main()
