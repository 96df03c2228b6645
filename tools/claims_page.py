"""Write book/claims.md, the claims ledger, from kmtrf_core.book.claims.CLAIMS.

Each row pastes the value and the verdict that the claim's chapter glued
(``kmtrf_core.book.claims.record``) during the build, so the page never holds a
typed-in number. ``--check`` exits non-zero when book/claims.md is out of date
(the test suite runs it).

    .venv/bin/python tools/claims_page.py          # rewrite book/claims.md
    .venv/bin/python tools/claims_page.py --check  # fail if it would change
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kmtrf_core.book.claims import CLAIMS

PAGE = Path(__file__).resolve().parent.parent / "book" / "claims.md"

HEADER = """# Claims ledger

Every claim of {cite}`park2026leaner` that this book checks: where the paper makes it, what we
measured, the runs it rests on, the profile we measured it at, and our verdict. The last four columns
are not typed in. Each is pasted from the chapter that measures it (through `kmtrf_core.book.claims.record`, which
uses myst-nb's `glue`), so the page shows what the build that produced it computed. A claim is
*reproduced* when every check of it holds at that profile, *partly* when some do, and *not
reproduced* when none does. Where a check compares two models, or a model with one Lloyd step, it
is decided on a 95% bootstrap interval over held-out tasks and seeds, with the margin it states: a
check holds only when the whole interval is on its side, fails only when the whole interval is on
the other, and is *inconclusive* otherwise. A claim none of whose checks holds is *not reproduced*
when one of them fails, and *inconclusive* when all are undecided. Where a check is decided on an
interval, the Measured column shows the interval and its margin, or, for a claim made of several
such checks, how many held, failed and stayed inconclusive, with every interval printed in the
chapter; where a few seeds or searches give no interval (steps to leave the plateau, say), their
range stands in for one, and the column shows that range. An interval is about the median over seeds
of the mean over tasks; for the multi-step checks of chapters 10 and 11 (a layer against Lloyd after T
steps, and chapter 11's layers against each other) the mean is taken of the log ratio to Lloyd (a
geometric mean of the ratios), as the paper's multi-step figures average the log loss; every other
check averages the values themselves.

Claims about learned layers are the ones most sensitive to scale. With the `book` profile's values
(`kmtrf_core/book/profiles.py`), a run (its seeds train together) stops only once the median over
its seeds of the relative validation loss, averaged over the last 3 validations, beats one Lloyd
step and its best value has improved by less than 2% over the last 2000 steps (the patience),
checked from step 2500 on; a run that never gets there trains to the cap, 5000 steps. The rule never stops a run whose median is still on the plateau of
chapter 9 above one Lloyd step, however long it lasts; one of a few seeds may still be on its own
plateau when the run stops, and chapter 9 counts such a seed as never having left it. The "Rests on" column counts the runs behind each verdict
by how they ended: flat below Lloyd, at the cap (and on which side of Lloyd), or a longer probe. The
runs are smaller than the paper's (fewer points, dimensions and seeds, on a CPU); the paper trains
10000 steps on a GPU, and the `paper` profile reruns them at the paper's sizes.

Rows whose Paper column says *ours* are not the paper's: they are claims this book makes and
tests itself (chapter 15, and Part III, where "ours (Appendix A)" marks an answer to one of the
questions the paper's Appendix A leaves open), kept in the same ledger so that they are measured
the same way. For them, *reproduced* means that the statement held in our measurement, every time we
checked it, and *not reproduced* that it never did.

| Claim | Paper | Chapter | Measured | Rests on | Profile | Verdict |
|---|---|---|---|---|---|---|
"""


def render() -> str:
    # the ``:s`` format suffix: without one, myst-nb splits ``doc.ipynb::key`` at its last colon
    rows = []
    for key, claim in CLAIMS.items():
        nb = f"{claim.chapter}.ipynb"
        rows.append(
            f"| {claim.text} | {claim.source} | {{doc}}`{claim.chapter}` "
            f"| {{glue:text}}`{nb}::{key}_value:s` | {{glue:text}}`{nb}::{key}_rests:s` "
            f"| {{glue:text}}`{nb}::{key}_profile:s` "
            f"| **{{glue:text}}`{nb}::{key}_verdict:s`** |"
        )
    return HEADER + "\n".join(rows) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if book/claims.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE} is out of date: run python tools/claims_page.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
