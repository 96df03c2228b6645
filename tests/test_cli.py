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
