"""Benchmark: the same catalog runs trained serially and on a 2-worker Dask LocalCluster.

The runs are one group of the book's catalog (default ``ablation_tau`` at the
``book`` profile: 12 configurations of 2 seeds, 150 steps each), each trained
from an empty cache:

* serially, one after the other in this process with one torch thread (what a
  chapter opened alone does), and with torch's default threads;
* as Dask tasks on a ``LocalCluster`` of ``--workers`` single-threaded
  processes (what ``make models`` does), cluster start-up included.

It prints the wall times and the ratios, and checks that the parallel runs
equal the serial single-threaded ones bit for bit.

Run: ``.venv/bin/python bench/catalog.py [--group NAME] [--profile book] [--workers 2]``.
Numbers are from one run on one machine: compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import

from kmtrf_core.book.catalog import book_catalog
from kmtrf_core.book.profiles import PROFILES
from kmtrf_core.training import train_cached
from kmtrf_core.training.executor import train_many


def serial(configs, folder, threads):
    torch.set_num_threads(threads)
    start = time.perf_counter()
    models = [train_cached(config, directory=folder)[0] for config in configs]
    return time.perf_counter() - start, models


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", default="ablation_tau")
    parser.add_argument("--profile", default="book", choices=sorted(PROFILES))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    at_least(parser, ("--workers", args.workers, 1))
    catalog = book_catalog(args.profile)
    if args.group not in catalog.groups:
        parser.error(f"--group must be one of the {args.profile} catalog's groups, got {args.group!r}")
    configs = catalog[args.group].configs()
    default_threads = torch.get_num_threads()
    print(f"group {args.group!r} at profile {args.profile!r}: {len(configs)} runs, "
          f"{configs[0].steps} steps, {len(configs[0].seeds)} seeds; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as many, \
            tempfile.TemporaryDirectory() as par:
        t_one, models = serial(configs, one, 1)
        t_many, _ = serial(configs, many, default_threads)
        start = time.perf_counter()
        table = train_many(configs, workers=args.workers, directory=par)
        t_par = time.perf_counter() - start
        torch.set_num_threads(1)
        same = all(torch.equal(model.Q, train_cached(config, directory=par)[0].Q)
                   for config, model in zip(configs, models))
    print(f"serial, 1 thread:            {t_one:7.1f} s")
    print(f"serial, {default_threads} threads:           {t_many:7.1f} s")
    print(f"Dask LocalCluster, {args.workers} workers: {t_par:7.1f} s (start-up included; "
          f"{table.seconds.sum():.1f} s of training in the workers)")
    print(f"speedup over serial 1 thread: {t_one / t_par:.2f}x; over serial {default_threads} threads: "
          f"{t_many / t_par:.2f}x; parallel runs equal serial ones: {same}")


if __name__ == "__main__":
    main()
