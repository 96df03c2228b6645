import json
import os
import subprocess
import sys

import pytest

from kmtrf_core.training import TrainConfig, loop
from kmtrf_core.training.heap import MMAP_THRESHOLD, TRIM_THRESHOLD, hold_freed_memory

# training steps at the size where the faults were found (bench/README.md): page faults per step
CHILD = """
import json, resource, sys, torch
torch.set_num_threads(1)
from kmtrf_core.training import TrainConfig
from kmtrf_core.training.config import initial_layer
from kmtrf_core.training.heap import hold_freed_memory
from kmtrf_core.training.loop import task_generators, training_step
held = hold_freed_memory() if sys.argv[1] == "hold" else None
config = TrainConfig(d=4, k=6, n=128, batch=32, omega="ne", seeds=(1,))
model = initial_layer(config, "cpu")
optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
gens = task_generators(config, "cpu")
for step in range(1, 11):
    training_step(model, optimizer, config, gens, step)
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for step in range(11, 31):
    training_step(model, optimizer, config, gens, step)
print(json.dumps({"held": held, "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 20}))
"""

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux only)")


def _child(mode, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, env=environ,
                         check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc
def test_held_memory_takes_no_page_faults_where_the_default_allocator_trims():
    default, held = _child("default"), _child("hold")
    assert held["held"] is True
    if default["faults"] < 100:
        pytest.skip(f"this allocator does not trim between steps here ({default['faults']} faults per step)")
    assert held["faults"] < min(50, default["faults"] / 10), (default, held)  # a stray heap growth: 512 per 2 MB


@glibc
def test_the_environment_keeps_its_own_thresholds():
    assert _child("hold", MALLOC_TRIM_THRESHOLD_="16384")["held"] is False
    assert _child("hold", MALLOC_MMAP_THRESHOLD_="16384")["held"] is False


def test_thresholds_are_within_glibcs_bounds_and_the_call_is_idempotent():
    assert MMAP_THRESHOLD <= 32 << 20  # glibc refuses larger mmap thresholds on 64-bit
    assert TRIM_THRESHOLD >= MMAP_THRESHOLD
    assert hold_freed_memory() is hold_freed_memory()


@pytest.mark.parametrize("device", ["cpu"])
def test_train_holds_freed_memory_on_the_cpu(monkeypatch, device):
    calls = []
    monkeypatch.setattr(loop, "hold_freed_memory", lambda: calls.append(1) or True)
    loop.train(TrainConfig(d=2, k=3, n=16, steps=1, batch=2, val_tasks=2, val_every=1, device=device))
    assert calls == [1]
