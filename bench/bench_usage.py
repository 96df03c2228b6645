"""The bench scripts' argument checks: an impossible count ends in one argparse usage line (status 2),
never in a traceback from the measurement it would break. The scripts import it as a sibling (``bench/`` is
a script's folder on ``sys.path``)."""

from __future__ import annotations


def at_least(parser, *checks) -> None:
    """``parser.error`` for the first check ``(flag, value, least)`` or ``(flag, value, least, why)`` whose
    ``value`` is not ``>= least`` (a NaN fails too); ``why`` is added to the message in parentheses."""
    for flag, value, least, *why in checks:
        if not value >= least:
            parser.error(f"{flag} must be >= {least}, got {value}" + (f" ({why[0]})" if why else ""))
