"""The three CPU forms of one squared-distance attention, and what the heap setting does to a training step.

Issue 25, part 3 (``bench/README.md``, "The CPU step", third change). Part ``kernels`` times forward and
backward of one attention of 32 tasks, one torch thread, in the three forms
:func:`kmtrf_core.attention.attend` chooses from on the CPU: explicit weights through autograd, the
explicit-weights node of :mod:`kmtrf_core.explicit_attention`, and PyTorch's fused kernel on the augmented
vectors ``[q, 1]``, ``[2k, -|k|^2]`` (best of 5 blocks). Part ``faults`` runs the n 128 time-to-quality
step (OH, NE, d 4, k 6, B 32, one seed) in two child processes, one with
:func:`kmtrf_core.training.heap.hold_freed_memory` and one without, and prints per step the milliseconds of
user and system time and the page faults.

    .venv/bin/python bench/attention_kernels.py            # about a minute
    .venv/bin/python bench/attention_kernels.py --part faults
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

SHAPES = [(10, 64, 12), (64, 64, 4), (128, 128, 4), (128, 128, 10), (128, 128, 32), (256, 256, 4), (512, 512, 4)]

STEP = """
import json, resource, sys, torch
torch.set_num_threads(1)
from kmtrf_core.training import TrainConfig
from kmtrf_core.training.config import initial_layer
from kmtrf_core.training.heap import hold_freed_memory
from kmtrf_core.training.loop import task_generators, training_step
held = hold_freed_memory() if sys.argv[1] == "hold" else False
config = TrainConfig(d=4, k=6, n=128, batch=32, omega="ne", tau=0.1, seeds=(1,))
model = initial_layer(config, "cpu")
optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
gens = task_generators(config, "cpu")
for step in range(1, 31):
    training_step(model, optimizer, config, gens, step)
before = resource.getrusage(resource.RUSAGE_SELF)
for step in range(31, 231):
    training_step(model, optimizer, config, gens, step)
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"held": held, "user_ms": round((after.ru_utime - before.ru_utime) * 5, 2),
                  "system_ms": round((after.ru_stime - before.ru_stime) * 5, 2),
                  "faults": round((after.ru_minflt - before.ru_minflt) / 200, 1)}))
"""


def _best_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    block = max(1, reps // 5)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(block):
            fn()
        times.append((time.perf_counter() - start) / block)
    return 1000 * min(times)


def kernels(batch: int = 32) -> None:
    import torch
    import torch.nn.functional as F

    from kmtrf_core.explicit_attention import explicit_attention

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    scale = 1 / math.sqrt(10)
    for q_len, r_len, width in SHAPES:
        q, k, v = (torch.randn(batch, n, width, generator=g, requires_grad=True) for n in (q_len, r_len, r_len))
        target = torch.randn(batch, q_len, width, generator=g)

        def autograd():
            logits = (2 * scale * q) @ k.transpose(-1, -2) - scale * (k * k).sum(-1).unsqueeze(-2)
            ((torch.softmax(logits, -1) @ v) * target).sum().backward()

        def node():
            (explicit_attention(q, k, (k * k).sum(-1), v, scale) * target).sum().backward()

        def fused():
            q_aug = torch.cat([q, q.new_ones(q.shape[:-1] + (1,))], -1)
            k_aug = torch.cat([2 * k, -(k * k).sum(-1, keepdim=True)], -1)
            v_pad = torch.cat([v, v.new_zeros(v.shape[:-1] + (1,))], -1)
            out = F.scaled_dot_product_attention(q_aug[:, None], k_aug[:, None], v_pad[:, None], scale=scale)
            (out[:, 0, :, :width] * target).sum().backward()

        reps = 10 if q_len >= 512 else 25 if q_len >= 256 else 100
        row = {"weights_per_task": f"{q_len} x {r_len}", "width": width, "tasks": batch}
        row.update({name: round(_best_ms(fn, reps), 3) for name, fn in
                    (("autograd_ms", autograd), ("node_ms", node), ("fused_ms", fused))})
        print(json.dumps(row), flush=True)


def faults() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    for mode in ("default", "hold"):
        out = subprocess.run([sys.executable, "-c", STEP, mode], capture_output=True, text=True, env=env, check=True)
        print(json.dumps({"allocator": mode, **json.loads(out.stdout.strip().splitlines()[-1])}), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["kernels", "faults", "all"], default="all")
    args = parser.parse_args(argv)
    if args.part in ("kernels", "all"):
        kernels()
    if args.part in ("faults", "all"):
        faults()


if __name__ == "__main__":
    main()
