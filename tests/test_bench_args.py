"""The bench scripts refuse impossible counts at parse time: one argparse usage line, status 2, no traceback.

Each script's ``main`` is called in this process (its module loaded from ``bench/``), so every check
costs no training; one case runs the script as a program, as a user would.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def load(monkeypatch):
    # table1 and section4 set OMP_WAIT_POLICY on import; keep this process's environment as it was
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their siblings (gpu_step, catalog_gpu)

    def loader(name: str):
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return loader


def _entry(module):
    return module.parse_args if hasattr(module, "parse_args") else module.main


CASES = [
    ("table1", ["--threads", "0"], "--threads must be >= 1, got 0"),
    ("table1", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
    ("estimator", ["--part", "speed", "--repeats", "0"], "--repeats must be >= 1, got 0"),
    ("estimator", ["--part", "seeding", "--n", "5", "--k", "10"], "--k must be at most --n (5), got 10"),
    ("estimator", ["--part", "memory", "--big", "5"], "--k must be at most --big (5), got 10"),
    ("estimator", ["--chunk", "0"], "--chunk must be >= 1, got 0"),
    ("estimator", ["--dtypes", "int8"], "argument --dtypes: invalid choice: 'int8'"),
    ("section4", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
    ("train_step", ["--steps", "1"], "--steps must be >= 2, got 1"),
    ("gpu_step", ["--steps", "0"], "--steps must be >= 1, got 0"),
    ("gpu_step", ["--warm", "3"], "--warm must be >= 4, got 3 (the graph's 3 eager steps and its capture)"),
    ("catalog_gpu", ["--share", "2", "0"], "--share must be >= 1, got 0"),
    ("catalog_gpu", ["--budget-s", "-1"], "--budget-s must be >= 0, got -1.0"),
    ("book_step", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
    ("catalog", ["--workers", "0"], "--workers must be >= 1, got 0"),
    ("catalog", ["--group", "nope"], "--group must be one of the book catalog's groups, got 'nope'"),
    ("catalog", ["--profile", "huge"], "argument --profile: invalid choice: 'huge'"),
    ("catalog_gpu", ["--profile", "huge"], "argument --profile: invalid choice: 'huge'"),
    ("book_step", ["--profile", "huge"], "argument --profile: invalid choice: 'huge'"),
    ("time_to_quality", ["--authors", ".", "--seeds", "1", "-2"], "--seeds must be >= 0, got -2"),
    ("time_to_quality", ["--authors", ".", "--cap", "0"], "--cap must be >= 1, got 0"),
    ("authors_schedule", ["--authors", ".", "--n", "5"], "--n must be >= 10, got 5 (the released code's lower bound)"),
    ("authors_schedule", ["--authors", ".", "--seeds", "0"], "--seeds must be >= 1, got 0"),
    ("authors_schedule", ["--authors", ".", "--tau", "0"], "--tau and --lr must be > 0, got 0.0 and 0.01"),
]


@pytest.mark.parametrize("script, argv, message", CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_a_bad_count_is_a_usage_error(load, capsys, script, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        _entry(load(script))(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: ") and f"error: {message}" in err[-1]


def test_good_counts_pass_the_checks(load):
    args = load("table1").parse_args(["--threads", "1", "--warmup", "0", "--memory-repeats", "1"])
    assert (args.threads, args.warmup, args.repeats) == (1, 0, 5)


def test_the_script_itself_prints_one_usage_line_and_no_traceback():
    out = subprocess.run([sys.executable, str(BENCH / "section4.py"), "--repeats", "0"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith("error: --repeats must be >= 1, got 0")


def test_authors_schedule_reads_the_released_scripts_lines(load):
    # train.py prints a validation line, then (after step 0) the rate the scheduler left
    stdout = "\n".join([
        "Step 0/300: Validation obj: 9.1, relative to Lloyd's: 18.8",
        "Step 100/300: Validation obj: 1.3, relative to Lloyd's: 1.29", " ... current lr: [0.01]",
        "Step 200/300: Validation obj: 1.3, relative to Lloyd's: 1.28", " ... current lr: [0.005]",
        "Step 300/300: Validation obj: 0.9, relative to Lloyd's: 0.95",
    ])
    out = load("authors_schedule").summarize(stdout, 0.01)
    assert (out["first_below_lloyd"], out["best"], out["last"], out["steps"]) == (300, 0.95, 0.95, 300)
    assert (out["halvings"], out["halvings_before_below"], out["final_lr"]) == (1, 1, 0.005)
