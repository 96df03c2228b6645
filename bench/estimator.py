"""TransformerKMeans(layer="lloyd") against scikit-learn's KMeans, and its memory at a million points.

Part 1 (``speed``): both fit the same data from the same initial centers, with ``tol=0`` and the same
``max_iter`` (so both run exactly ``max_iter`` Lloyd iterations), alternating, ``--repeats`` times;
the script prints the medians and the ratio ours / scikit-learn (above 1: we are slower).

Part 2 (``seeding``): k-means++ seeding alone, scikit-learn's ``kmeans_plusplus`` against
:func:`kmtrf_core.estimator.seeding.kmeans_plusplus` with its passes on ``--device``, from the same
random state; it says whether both picked the same points.

Part 3 (``memory``): a child process fits ``--big`` points in ``d = 16`` (float32) for a few
iterations and reports its peak resident set (``VmHWM``) above the data it was given, so the
chunked passes can be seen to add a bounded amount (about ``chunk_size x k`` per pass), not a
multiple of the data.

    .venv/bin/python bench/estimator.py                     # 100 000 x 16, k 10; 1 000 000 x 16
    .venv/bin/python bench/estimator.py --part speed --n 20000 --repeats 3
    python bench/estimator.py --part speed --device cuda --n 10000000 --d 32 --k 100 --repeats 3 --dtypes float64
    python bench/estimator.py --part seeding --device cuda --n 10000000 --d 32 --k 100 --repeats 1 --dtypes float64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from bench_usage import at_least  # bench/ is the script's folder, so its siblings import


def speed(n: int, d: int, k: int, iters: int, repeats: int, dtype, device: str = "cpu", chunk: int = 16384) -> dict:
    import torch
    from sklearn.cluster import KMeans

    from kmtrf_core import TransformerKMeans

    rng = np.random.default_rng(0)
    X = (rng.normal(size=(n, d)) + rng.integers(0, 5, size=(n, 1))).astype(dtype)
    init = X[rng.choice(n, k, replace=False)]
    times = {"ours": [], "sklearn": []}
    # untimed: loads numba's compiled pass (and CUDA's kernels) once per process, as any first call pays
    TransformerKMeans(k, init=init, tol=0, max_iter=2, device=device, chunk_size=chunk).fit(X[: min(n, 10_000)])
    for _ in range(repeats):
        for name in ("sklearn", "ours"):
            est = (KMeans(k, init=init, n_init=1, tol=0, max_iter=iters, algorithm="lloyd") if name == "sklearn"
                   else TransformerKMeans(k, init=init, tol=0, max_iter=iters, device=device, chunk_size=chunk))
            start = time.perf_counter()
            est.fit(X)
            times[name].append(time.perf_counter() - start)
            if name == "ours":
                ours_iter, ours_labels = est.n_iter_, est.labels_
            else:
                ref_iter, ref_labels = est.n_iter_, est.labels_
    med = {name: statistics.median(t) for name, t in times.items()}
    return dict(n=n, d=d, k=k, dtype=np.dtype(dtype).name, device=device, chunk_size=chunk,
                iterations=(ours_iter, ref_iter),
                labels_differing=int((ours_labels != ref_labels).sum()), cpu_cores=os.cpu_count(),
                torch_threads=torch.get_num_threads(), ours_s=round(med["ours"], 4),
                sklearn_s=round(med["sklearn"], 4), ratio=round(med["ours"] / med["sklearn"], 2))


def seeding(n: int, d: int, k: int, repeats: int, dtype, device: str = "cpu", chunk: int = 16384) -> dict:
    """k-means++ seeds: scikit-learn's ``kmeans_plusplus`` (numpy, all CPU cores) against
    :func:`kmtrf_core.estimator.seeding.kmeans_plusplus` with its passes on ``device``, same random state."""
    import torch
    from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus

    from kmtrf_core.estimator.seeding import kmeans_plusplus

    rng = np.random.default_rng(1)
    X = (rng.normal(size=(n, d)) + rng.integers(0, 5, size=(n, 1))).astype(dtype)
    X -= X.mean(axis=0)
    Xt = torch.from_numpy(X).to(device)
    kmeans_plusplus(Xt[: min(n, 10_000)], min(k, 10), 0)  # untimed: CUDA's kernels load once per process
    times = {"ours": [], "sklearn": []}
    for seed in range(repeats):
        start = time.perf_counter()
        ref = sklearn_kmeans_plusplus(X, k, random_state=seed)[1]
        times["sklearn"].append(time.perf_counter() - start)
        start = time.perf_counter()
        ours = kmeans_plusplus(Xt, k, seed, chunk=chunk)[1]
        if device != "cpu":
            torch.cuda.synchronize()
        times["ours"].append(time.perf_counter() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    return dict(part="seeding", n=n, d=d, k=k, dtype=np.dtype(dtype).name, device=device, chunk_size=chunk,
                same_points_last_seed=bool(np.array_equal(ref, ours)), ours_s=round(med["ours"], 4),
                sklearn_s=round(med["sklearn"], 4), ratio=round(med["ours"] / med["sklearn"], 3))


def _peak_child(n: int, d: int, k: int, iters: int, chunk: int) -> None:
    """Run in a child: fit, print JSON with the resident set before and the peak during the fit."""
    from kmtrf_core import TransformerKMeans

    rng = np.random.default_rng(0)
    X = rng.random((n, d), dtype=np.float32)

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024  # MB
        return float("nan")

    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current resident set
        f.write("5")
    start = time.perf_counter()
    est = TransformerKMeans(k, init="random", random_state=0, tol=0, max_iter=iters, chunk_size=chunk,
                            device="cpu").fit(X)
    seconds = time.perf_counter() - start
    print(json.dumps(dict(n=n, d=d, k=k, iterations=est.n_iter_, chunk_size=chunk, data_mb=round(X.nbytes / 2**20),
                          rss_before_mb=round(before), peak_mb=round(status("VmHWM")),
                          added_mb=round(status("VmHWM") - before), seconds=round(seconds, 2))))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["speed", "seeding", "memory", "all"], default="all")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=16)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=16384, help="TransformerKMeans's chunk_size (and the seeding's)")
    parser.add_argument("--device", default="cpu", help="where TransformerKMeans runs (KMeans: all CPU cores)")
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    at_least(parser, ("--n", args.n, 1), ("--d", args.d, 1), ("--k", args.k, 1), ("--iters", args.iters, 1),
             ("--repeats", args.repeats, 1), ("--big", args.big, 1), ("--chunk", args.chunk, 1))
    if args.part != "memory" and not args.child and args.k > args.n:  # the child fits --big points, not --n
        parser.error(f"--k must be at most --n ({args.n}), got {args.k}")
    if args.part in ("memory", "all") and args.k > args.big:
        parser.error(f"--k must be at most --big ({args.big}), got {args.k}")
    if args.child:
        _peak_child(args.big, args.d, args.k, 5, args.chunk)
        return
    if args.part in ("speed", "all"):
        for dtype in args.dtypes:
            print(json.dumps(speed(args.n, args.d, args.k, args.iters, args.repeats, np.dtype(dtype), args.device,
                                   args.chunk)), flush=True)
    if args.part in ("seeding", "all"):
        for dtype in args.dtypes:
            print(json.dumps(seeding(args.n, args.d, args.k, args.repeats, np.dtype(dtype), args.device, args.chunk)),
                  flush=True)
    if args.part in ("memory", "all"):
        for chunk in (args.chunk, 1024):
            out = subprocess.run([sys.executable, __file__, "--child", "--big", str(args.big), "--d", str(args.d),
                                  "--k", str(args.k), "--chunk", str(chunk)],
                                 capture_output=True, text=True, check=True, env={**os.environ})
            print(out.stdout.strip())


if __name__ == "__main__":
    main()
