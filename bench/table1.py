"""Table 1 of the paper, measured on this machine: OH vs BN at d = 32, k from 6 to 1000.

Usage (from the repository root)::

    .venv/bin/python bench/table1.py                  # full size: B = 32 tasks, n = 1024 points
    .venv/bin/python bench/table1.py --repeats 10 --impl direct sdpa
    .venv/bin/python bench/table1.py --quick          # a small smoke run (seconds)

Every configuration runs ``--warmup`` untimed and ``--repeats`` timed
repetitions of: forward (train mode), backward of the smoothed training loss,
forward in eval mode under ``torch.no_grad``; then one training step in a
worker process measures its peak memory (on the CPU; on CUDA the allocator's
peak). See ``kmtrf_core.cost`` for the details of each measure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# OpenMP's default wait policy spins; on a CPU shared with another busy process that stalls
# multi-threaded ops for hundreds of ms. Passive waiting avoids it; set before torch loads, and
# an explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from bench_usage import at_least  # noqa: E402  (a sibling: bench/ is the script's folder)
from kmtrf_core.cost.harness import compare_schemes, machine_description, measure_grid  # noqa: E402

PAPER_K = [6, 25, 100, 400, 1000]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per configuration (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions first (default 1)")
    parser.add_argument("--memory-repeats", type=int, default=1,
                        help="measurements of the peak memory per configuration, each a fresh step (default 1)")
    parser.add_argument("--quick", action="store_true", help="n=256, B=4, k in {6, 25, 100}: a smoke run")
    parser.add_argument("--impl", nargs="+", default=["direct"], choices=["direct", "sdpa"],
                        help="attention kernel(s) to measure (default: direct, the paper's explicit weights)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    parser.add_argument("--csv", default=None, help="also write the raw per-configuration rows to this CSV file")
    args = parser.parse_args(argv)
    at_least(parser, ("--repeats", args.repeats, 1), ("--warmup", args.warmup, 0),
             ("--memory-repeats", args.memory_repeats, 1),
             *([("--threads", args.threads, 1)] if args.threads is not None else []))  # set_num_threads(0) raises
    return args


def fmt_pair(a, b, ratio, unit_fmt="{:.1f}", ratio_fmt="[{:.2f}x]"):
    return f"{unit_fmt.format(a)} / {unit_fmt.format(b)} {ratio_fmt.format(ratio)}"


def table(comparison: pd.DataFrame) -> pd.DataFrame:
    """The paper's layout: ``OH / BN [speedup]`` per column, from one statistic of the repetitions."""
    rows = []
    for _, r in comparison.iterrows():
        row = {"k": int(r.k), "d_emb-d OH / BN": f"{int(r.extra_oh)} / {int(r.extra_bn)}"}
        for metric in ("forward", "backward", "eval"):
            row[f"{metric} ms OH / BN [speedup]"] = fmt_pair(
                r[f"{metric}_oh"], r[f"{metric}_bn"], r[f"{metric}_speedup"]
            )
        row["peak MB OH / BN [reduction]"] = fmt_pair(
            r.peak_mb_oh, r.peak_mb_bn, r.memory_reduction_pct, ratio_fmt="[{:.1f}%]"
        )
        rows.append(row)
    return pd.DataFrame(rows)


def spread(raw: pd.DataFrame) -> pd.DataFrame:
    """min-max of the timed repetitions and of the peak memory's measurements, per scheme and metric."""
    rows = []
    for k in sorted(raw.k.unique()):
        oh, bn = (raw[(raw.k == k) & (raw.scheme == s)].iloc[0] for s in ("oh", "bn"))
        row = {"k": int(k)}
        for metric in ("forward", "backward", "eval"):
            row[f"{metric} ms min-max OH | BN"] = (
                f"{oh[f'{metric}_min_ms']:.1f}-{oh[f'{metric}_max_ms']:.1f} | "
                f"{bn[f'{metric}_min_ms']:.1f}-{bn[f'{metric}_max_ms']:.1f}"
            )
        row["peak MB min-max OH | BN"] = (f"{oh.peak_min_mb:.1f}-{oh.peak_max_mb:.1f} | "
                                          f"{bn.peak_min_mb:.1f}-{bn.peak_max_mb:.1f}")
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    d, n, batch, ks = (32, 256, 4, [6, 25, 100]) if args.quick else (32, 1024, 32, PAPER_K)
    info = machine_description(args.device)
    print("machine:", ", ".join(f"{key}={value}" for key, value in info.items()))
    print(f"Table 1 setting: d={d}, k in {ks}, B={batch} tasks, n={n} points, float32, gamma=1, "
          f"{args.warmup} warm-up + {args.repeats} timed repetitions (OH and BN interleaved); times in ms")
    all_rows = []
    for impl in args.impl:
        raw = []
        for k in ks:
            t0 = time.perf_counter()
            df = measure_grid([d], [k], n=n, batch=batch, impl=impl, repeats=args.repeats, warmup=args.warmup,
                              device=args.device, memory_repeats=args.memory_repeats)
            raw.append(df)
            c = compare_schemes(df, stat="median").iloc[0]
            print(f"  [{impl}] k={k}: forward {c.forward_oh:.1f} / {c.forward_bn:.1f} ms, "
                  f"peak {c.peak_mb_oh:.0f} / {c.peak_mb_bn:.0f} MB ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
        raw = pd.concat(raw, ignore_index=True)
        all_rows.append(raw)
        print(f"\nattention impl = {impl!r}; memory: {raw.memory_method.iloc[0]}")
        with pd.option_context("display.width", 250, "display.max_columns", 20):
            for stat in ("median", "min"):
                print(f"-- {stat} of the {args.repeats} timed repetitions; speedup = OH / BN")
                print(table(compare_schemes(raw, stat=stat)).to_string(index=False))
            print("-- spread of the timed repetitions")
            print(spread(raw).to_string(index=False))
        k_last = raw.k.max()
        oh, bn = (raw[(raw.k == k_last) & (raw.scheme == s)].iloc[0] for s in ("oh", "bn"))
        # on the range of the peak's measurements: lower only when every BN one is below every OH one
        memory = ("lower in every measurement" if bn.peak_max_mb < oh.peak_min_mb
                  else "NOT lower in any" if bn.peak_min_mb >= oh.peak_max_mb else "overlapping OH's")
        for stat in ("median", "min"):
            last = compare_schemes(raw, stat=stat).iloc[-1]
            fast = last.forward_speedup >= 5
            print(f"[{impl}, {stat}] at k={int(last.k)}: BN forward speedup {last.forward_speedup:.2f}x "
                  f"({'at least' if fast else 'below'} 5x), backward {last.backward_speedup:.2f}x, "
                  f"eval {last.eval_speedup:.2f}x; BN peak memory {memory} "
                  f"({last.memory_reduction_pct:.1f}% reduction, median of {args.memory_repeats})")
    if args.csv:
        pd.concat(all_rows, ignore_index=True).to_csv(args.csv, index=False)
        print(f"raw rows written to {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
