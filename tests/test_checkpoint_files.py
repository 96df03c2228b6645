"""Checkpoint and cache files: checksums, no code on load, file modes, one-line CLI errors."""

import os
import pickle
import stat
import subprocess
import sys

import pytest
import torch

from kmtrf_core.training import TrainConfig, load_checkpoint, train, train_cached
from kmtrf_core.training.checkpoints import CorruptFileError, atomic_save, load_file
from kmtrf_core.training.runs import cached_path

TINY = TrainConfig(d=2, k=3, n=16, steps=4, batch=2, val_tasks=2, val_every=2, impl="direct")


def _flip(path, offset_from_end=40):
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


def test_round_trip_and_checksum(tmp_path):
    path = tmp_path / "state.pt"
    atomic_save({"w": torch.arange(5.0), "rows": [(1, 0.5)], "name": "x", "none": None}, path)
    state = load_file(path)
    assert torch.equal(state["w"], torch.arange(5.0)) and state["rows"] == [(1, 0.5)]
    assert path.read_bytes().startswith(b"kmtrf-checkpoint 1 ")


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_a_damaged_checkpoint_is_refused_with_its_path(tmp_path, damage):
    ckpt = tmp_path / "checkpoint.pt"
    train(TINY, checkpoint=ckpt)
    if damage == "flip":
        _flip(ckpt)
    elif damage == "truncate":
        ckpt.write_bytes(ckpt.read_bytes()[:-100])
    elif damage == "garbage":
        ckpt.write_bytes(b"not a checkpoint at all\n" * 10)
    else:
        ckpt.write_bytes(b"")
    with pytest.raises(CorruptFileError, match="delete the file") as info:
        load_checkpoint(ckpt, TINY)
    assert str(ckpt) in str(info.value)
    with pytest.raises(CorruptFileError):
        train(TINY, checkpoint=ckpt, resume=ckpt)


def test_a_flipped_bit_in_a_cache_entry_is_refused(tmp_path):
    train_cached(TINY, directory=tmp_path)
    path = cached_path(TINY, tmp_path)
    _flip(path, 100)
    with pytest.raises(CorruptFileError, match=str(path.name)):
        train_cached(TINY, directory=tmp_path)


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_pickle_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "checkpoint.pt"
    # a file with a valid header and checksum whose payload would create `marker` if unpickled freely
    atomic_save({"step": 1}, path)
    torch.save({"config": _Exploit(str(marker))}, tmp_path / "payload.pt", pickle_protocol=2)
    payload = (tmp_path / "payload.pt").read_bytes()
    import hashlib

    path.write_bytes(b"kmtrf-checkpoint 1 " + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    with pytest.raises(CorruptFileError, match="refused unread"):
        load_file(path)
    assert not marker.exists()
    # and a plain pickle (the format torch.load would have run) is not ours at all
    with open(tmp_path / "plain.pt", "wb") as file:
        pickle.dump(_Exploit(str(marker)), file)
    with pytest.raises(CorruptFileError):
        load_file(tmp_path / "plain.pt")
    assert not marker.exists()


def test_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_save({"a": 1}, tmp_path / "f.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.pt").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["f.pt"]


def _cli(*args, cwd):
    command = [sys.executable, "-m", "kmtrf_core.training", "--d", "2", "--k", "3", "--n", "16", "--steps", "2",
               "--batch", "2", "--val-tasks", "2", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cli_answers_file_problems_in_one_line(tmp_path):
    out = tmp_path / "run"
    done = _cli("--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr
    ckpt = out / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:-50])
    cases = [
        (("--out", str(out), "--resume", "--steps", "4"), "fails its SHA-256 checksum"),
        (("--out", str(tmp_path / "fresh"), "--resume"), "no checkpoint at"),
        (("--out", str(ckpt)), "is a file, not a folder"),
        (("--out", str(out), "--checkpoint-every", "0"), "--checkpoint-every must be >= 1"),
    ]
    for args, message in cases:
        done = _cli(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and message in done.stderr, (args, done.stderr)
        assert done.stderr.strip().splitlines()[-1].startswith("python -m kmtrf_core.training: error:")


def test_cli_refuses_an_unwritable_out_before_training(tmp_path, monkeypatch, capsys):
    # in-process, with training replaced by a failure: the refusal must come first. A folder below a regular file
    # cannot be made even by root (CI runs as root); a read-only folder stops everyone else
    from kmtrf_core.training import cli  # the module whose train() is replaced

    def no_training(*args, **kwargs):
        raise AssertionError("training started before --out was checked")

    monkeypatch.setattr(cli, "train", no_training)
    (tmp_path / "a_file").write_text("")
    targets = [(tmp_path / "a_file" / "run", "Not a directory")]
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        targets.append((locked / "run", "Permission denied"))
    args = ["--d", "2", "--k", "3", "--n", "16", "--steps", "2", "--batch", "2", "--val-tasks", "2"]
    for out, reason in targets:
        with pytest.raises(SystemExit) as exit_info:
            cli.main(args + ["--out", str(out)])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith(f"python -m kmtrf_core.training: error: --out {out} cannot be written"), error
        assert reason in error
        assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cli_names_an_unavailable_device_and_a_seed_too_large(tmp_path):
    for args, message in ((("--device", "cuda"), "no CUDA device"),
                          (("--val-seed", str(2**70)), "--val-seed must be at most")):
        done = _cli("--out", str(tmp_path / "run"), *args, cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_reproduces_the_run_bit_for_bit(tmp_path):
    import random
    import shutil
    import signal
    import time

    import pandas as pd

    args = ["--d", "2", "--k", "3", "--n", "16", "--steps", "300", "--batch", "4", "--val-tasks", "4",
            "--val-every", "10", "--checkpoint-every", "3", "--scheme", "oh"]
    base = [sys.executable, "-m", "kmtrf_core.training", *args]
    whole = tmp_path / "whole"
    start = time.perf_counter()
    subprocess.run(base + ["--out", str(whole)], check=True, capture_output=True, timeout=300)
    duration = time.perf_counter() - start  # import and training: kills land inside it on any machine
    killed = tmp_path / "killed"
    rng, kills, attempts, share = random.Random(0), 0, 0, 1.0
    # up to three kills at random moments, each resuming from the last checkpoint; a run that ends before its
    # first kill (the timed run may have paid for cold imports) starts over with the kill moved earlier
    while kills < 3 and attempts < 10:
        attempts += 1
        resume = ["--resume"] if (killed / "checkpoint.pt").exists() else []
        process = subprocess.Popen(base + ["--out", str(killed), *resume], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 0.7) * duration * share)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
            continue
        assert process.returncode == 0
        if kills:
            break  # it finished after a kill: nothing left to interrupt
        shutil.rmtree(killed)
        share /= 2
    resume = ["--resume"] if (killed / "checkpoint.pt").exists() else []
    subprocess.run(base + ["--out", str(killed), *resume], check=True, capture_output=True, timeout=300)
    assert kills >= 1
    a, b = load_file(whole / "checkpoint.pt"), load_file(killed / "checkpoint.pt")
    for name in ("Q", "K", "V"):
        assert torch.equal(a["weights"][name], b["weights"][name])
    columns = ["step", "seed", "train_loss", "val_relative_loss"]
    pd.testing.assert_frame_equal(pd.read_csv(whole / "history.csv")[columns],
                                  pd.read_csv(killed / "history.csv")[columns])
    assert not list(killed.glob("*.tmp"))
