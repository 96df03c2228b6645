"""The command line of training: ``python -m kmtrf_core.training --help``.

One option per :class:`~kmtrf_core.training.TrainConfig` field, generated from
the dataclass (``--val-tasks`` for ``val_tasks``; the help text, the choices
and the default come from the field), plus ``--out``, ``--checkpoint-every``,
``--resume``, ``--overwrite`` and ``--graph`` (on CUDA, the training step
replayed as one captured CUDA graph, :mod:`kmtrf_core.training.graphs`; on a
CPU, or for a config no graph can hold, the command ends with status 2 and one
line saying why). A usage error prints two lines, not argparse's whole usage:
``usage: ... (--help lists every option)`` and ``PROG: error: what to do``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch

from ..device import resolve_device
from .checkpoints import load_checkpoint, writable_folder
from .graphs import graph_obstacle
from .config import TrainConfig
from .loop import train

__all__ = ["build_parser", "parse_args", "main"]

PROG = "python -m kmtrf_core.training"
SEED_MAX = 2**63 - 1


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error prints one short usage line instead of every option's."""

    def error(self, message):
        usage = f"usage: {self.prog} [OPTIONS] (--help lists every option)"
        self.exit(2, f"{usage}\n{self.prog}: error: {message}\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's ``(default: X)`` after each option's help, but for a default of ``None``, whose help says
    itself what leaving the option out does (``--device``, ``--gamma-end``, ...) or else gets "off if omitted"."""

    def _get_help_string(self, action):
        if action.default is not None:
            return super()._get_help_string(action)
        text = action.help or ""
        return text if "default" in text or "omitted" in text else f"{text} (off if omitted)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: the config's fields, then the run's output options.

    >>> parser = build_parser()
    >>> parser.parse_args(["--scheme", "oh", "--seeds", "0", "1", "--anisotropic"]).seeds
    [0, 1]
    """
    parser = _Parser(
        prog=PROG,
        description="Train the clustering transformer layer (Algorithm 1 of Park et al.) on sampled tasks.",
        formatter_class=_HelpFormatter,
    )
    defaults = TrainConfig()
    for spec in dataclasses.fields(TrainConfig):
        meta, flag = spec.metadata, "--" + spec.name.replace("_", "-")
        default = getattr(defaults, spec.name)
        if meta["kind"] is bool:
            parser.add_argument(flag, action="store_true", help=meta["help"])
            continue
        options = dict(type=meta["kind"], help=meta["help"])
        if meta["choices"] is not None:
            options["choices"] = meta["choices"]
        if meta["several"]:
            options["nargs"] = "+"
            default = list(default) if isinstance(default, tuple) else [default]
        parser.add_argument(flag, default=default, **options)
    parser.add_argument("--out", default="runs/train", help="output folder: checkpoint.pt and history.csv")
    parser.add_argument("--checkpoint-every", type=int, default=1000, help="checkpoint interval in steps")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh even if OUT holds a run, replacing its checkpoint and history "
                             "(without it or --resume, an existing OUT/checkpoint.pt stops the command)")
    parser.add_argument("--graph", action="store_true",
                        help="on CUDA, replay the training step as one captured CUDA graph (kmtrf_core.training.graphs)")
    return parser


def parse_args(argv=None) -> tuple[TrainConfig, argparse.Namespace]:
    """The config and the remaining options from command-line arguments.

    An invalid value ends the program with status 2 and one line naming it
    (as argparse does for a malformed option).

    >>> config, args = parse_args(["--d", "2", "--k", "3", "--family", "normal", "cauchy"])
    >>> config.d, config.family, args.out
    (2, ('normal', 'cauchy'), 'runs/train')
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    values = {}
    for spec in dataclasses.fields(TrainConfig):
        value = getattr(args, spec.name)
        if spec.metadata["several"]:
            value = value[0] if spec.name == "family" and len(value) == 1 else tuple(value)
        values[spec.name] = value
    if values["val_seed"] > SEED_MAX:
        parser.error(f"--val-seed must be at most {SEED_MAX} (a torch seed is 64 bits), got {values['val_seed']}")
    try:
        config = TrainConfig(**values)
    except ValueError as err:  # a value argparse accepts but the config does not
        parser.error(str(err))
    if config.device is not None:
        device = torch.device(config.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error(f"--device {config.device}: this machine has no CUDA device; leave --device out "
                         "to use the CPU")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            parser.error(f"--device {config.device}: only {torch.cuda.device_count()} CUDA device(s) here")
    return config, args


def _check_out(parser: argparse.ArgumentParser, out: Path) -> None:
    """End with one line (status 2) unless ``out`` is a folder we can write, checked before any training."""
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file, not a folder; name a folder for checkpoint.pt and history.csv")
    try:
        writable_folder(out)
    except OSError as err:
        parser.error(f"--out {out} cannot be written ({err.strerror}); choose another folder")


def main(argv=None) -> int:
    """Command-line entry point: train, write ``OUT/checkpoint.pt`` and ``OUT/history.csv``.

    ``python -m kmtrf_core.training --help`` lists the options: one per
    :class:`~kmtrf_core.training.config.TrainConfig` field (``--val-tasks``
    for ``val_tasks``, ...), and ``--out``, ``--checkpoint-every``,
    ``--resume``, ``--overwrite``, ``--graph``. A folder ``--out`` that cannot
    be written, a ``--checkpoint-every`` below 1, a ``--resume`` without a
    readable checkpoint there (missing, truncated, damaged, or for another
    config), an ``--out`` that already holds a checkpoint while neither
    ``--resume`` nor ``--overwrite`` is given, or a ``--graph`` that no CUDA
    graph can serve (on a CPU; for an annealed gamma or tau, or a mixture of
    task families: the line says which) ends the program before training with
    status 2 and one line saying what to do (after a one-line usage).

    Parameters
    ----------
    argv : list of str, optional
        The arguments; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 on success (the process exit status).

    Examples
    --------
    >>> import contextlib, io, tempfile
    >>> args = ["--d", "2", "--k", "3", "--n", "16", "--steps", "2", "--batch", "2", "--val-tasks", "2"]
    >>> with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()) as log:
    ...     status = main(args + ["--out", out])
    ...     files = sorted(p.name for p in Path(out).iterdir())
    >>> status, files, log.getvalue().startswith("wrote")
    (0, ['checkpoint.pt', 'history.csv'], True)
    """
    parser = build_parser()
    config, args = parse_args(argv)
    if args.checkpoint_every < 1:
        parser.error(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}")
    if args.graph and (reason := graph_obstacle(config, resolve_device(config.device))) is not None:
        parser.error(f"--graph: {reason}")
    if args.resume and args.overwrite:
        parser.error("--resume continues the run in --out and --overwrite replaces it; give one of them")
    out = Path(args.out)
    _check_out(parser, out)
    ckpt = out / "checkpoint.pt"
    if not args.resume and not args.overwrite and ckpt.exists():
        parser.error(f"--out {out} already holds a run ({ckpt}); add --resume to continue it, --overwrite "
                     "to replace it, or choose another --out")
    if args.resume:
        if not ckpt.is_file():
            parser.error(f"--resume: no checkpoint at {ckpt}; run without --resume to start, or point --out "
                         "at the folder of the run")
        try:
            load_checkpoint(ckpt, config)
        except ValueError as err:  # CorruptFileError or a config that differs: one line, no traceback
            parser.error(f"--resume: {err}")
    model, history = train(
        config, checkpoint=ckpt, checkpoint_every=args.checkpoint_every,
        resume=ckpt if args.resume else None, progress=True, graph=args.graph,
    )
    history.to_csv(out / "history.csv", index=False)
    last = history[history.step == history.step.max()]
    print(f"wrote {ckpt} and {out / 'history.csv'}")
    print(last.to_string(index=False))
    return 0
