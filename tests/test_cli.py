"""The training command line's help and its --graph refusal (kmtrf_core.training.cli)."""

from __future__ import annotations

import re

import pytest

from kmtrf_core.training.cli import build_parser, main


def _option_helps(text: str) -> dict:
    """Each option's help in ``--help`` output, whitespace collapsed, by its flag."""
    blocks, flag = {}, None
    for line in text.splitlines():
        match = re.match(r"  (--[a-z-]+)", line)
        if match:
            flag = match.group(1)
            blocks[flag] = line
        elif flag and line.startswith("   "):
            blocks[flag] += " " + line
    return {flag: " ".join(block.split()) for flag, block in blocks.items()}


def test_help_shows_one_default_per_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    helps = _option_helps(capsys.readouterr().out)
    assert len(helps) == len([a for a in build_parser()._actions if a.option_strings]) - 1  # but -h/--help
    for flag, text in helps.items():
        assert "(default: None)" not in text, flag
        assert text.count("default") + text.count("omitted") <= 1, f"{flag}: {text}"
    assert helps["--device"].endswith("torch device (default: cuda if available, else cpu)")
    assert helps["--gamma-end"].endswith("(fixed if omitted)") and helps["--tau-end"].endswith("(fixed if omitted)")
    assert helps["--clip"].endswith("per seed (off if omitted)")
    assert helps["--until-flat"].endswith("(off if omitted)")
    assert helps["--steps"].endswith("(default: 10000)") and helps["--out"].endswith("(default: runs/train)")


def test_graph_on_a_cpu_is_a_usage_error_before_training(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--d", "2", "--k", "3", "--steps", "2", "--graph", "--device", "cpu", "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("error: --graph: a CUDA graph needs a CUDA device, not cpu")
    assert not (tmp_path / "run").exists()  # refused before the output folder is made


TINY = ["--d", "2", "--k", "3", "--n", "16", "--steps", "2", "--batch", "2", "--val-tasks", "2"]


def _usage_error(args, capsys) -> list:
    """The stderr lines of a command that must end with argparse's usage status, 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


def test_a_usage_error_prints_two_lines_not_the_whole_usage(tmp_path, capsys):
    for args, message in ((["--tau", "-1"], "TrainConfig.tau must be a positive finite number"),
                          (["--no-such-option"], "unrecognized arguments: --no-such-option"),
                          (["--scheme", "xx"], "--scheme: invalid choice: 'xx'")):
        err = _usage_error(args + ["--out", str(tmp_path / "run")], capsys)
        assert len(err) == 2, err
        assert err[0] == "usage: python -m kmtrf_core.training [OPTIONS] (--help lists every option)"
        assert err[1].startswith("python -m kmtrf_core.training: error: ") and message in err[1], err


def test_an_existing_run_is_not_overwritten_without_resume_or_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(TINY + ["--out", str(out)]) == 0
    files = {name: (out / name).read_bytes() for name in ("checkpoint.pt", "history.csv")}
    capsys.readouterr()
    err = _usage_error(TINY + ["--steps", "4", "--out", str(out)], capsys)
    assert err[-1] == (f"python -m kmtrf_core.training: error: --out {out} already holds a run "
                       f"({out / 'checkpoint.pt'}); add --resume to continue it, --overwrite to replace it, "
                       "or choose another --out")
    assert {name: (out / name).read_bytes() for name in files} == files  # refused before training
    assert "--overwrite replaces it" in _usage_error(TINY + ["--out", str(out), "--resume", "--overwrite"],
                                                     capsys)[-1]
    assert main(TINY + ["--steps", "4", "--out", str(out), "--overwrite"]) == 0
    assert (out / "checkpoint.pt").read_bytes() != files["checkpoint.pt"]
    assert (out / "history.csv").read_text().splitlines()[-1].startswith("4,")  # trained afresh to step 4


def test_overwrite_into_an_empty_folder_just_trains(tmp_path, capsys):
    assert main(TINY + ["--out", str(tmp_path / "fresh"), "--overwrite"]) == 0
    assert (tmp_path / "fresh" / "checkpoint.pt").is_file()
