"""What only the book needs: its plumbing by kind, and one module per chapter.

The plumbing, by kind:

* :mod:`~kmtrf_core.book.profiles`: the run profiles (``quick``, ``book``, ``paper``), each chapter's sizes typed;
* :mod:`~kmtrf_core.book.catalog`: every training run the book uses, per profile, by name;
* :mod:`~kmtrf_core.book.groups`: the runs a chapter gets (:class:`~kmtrf_core.book.groups.Runs`), each loaded
  once per process, and how each ended under the stop rule;
* :mod:`~kmtrf_core.book.claims`: the claims, the one verdict type (:class:`~kmtrf_core.book.claims.Finding`)
  and the ledger's :func:`~kmtrf_core.book.claims.record`;
* :mod:`~kmtrf_core.book.comparisons`: the interval verdicts several chapters share;
* :mod:`~kmtrf_core.book.uncertainty`: bootstrap intervals, margins and the verdict of one comparison;
* :mod:`~kmtrf_core.book.heldout`: held-out tasks and the ratio tables read on them (Part III);
* :mod:`~kmtrf_core.book.plotting`: figure helpers, labels and captions;
* :mod:`~kmtrf_core.book.timing`: how long a cell's experiment took.

What a chapter computes lives in the module named after its notebook:
``book/10_multistep.ipynb`` reads :mod:`kmtrf_core.book.ch10_multistep`, and its tests are
``tests/test_book_ch10_multistep.py`` (chapter 9's plateau section has a module of its own,
:mod:`kmtrf_core.book.ch09_plateau`). Chapter modules do not import each other. A chapter
without such a module computes nothing of its own beyond the paper room and the plumbing. Chapters import the plumbing as
``from kmtrf_core.book import get_profile, record, timed``; the numbers that a chapter's prose quotes are
glued with :func:`~kmtrf_core.book.claims.glue_value`.
"""

from .claims import CLAIMS, VERDICTS, Finding, Record, glue_value, record, verdict
from .profiles import PROFILES, Profile, Sizes, get_profile
from .timing import Stopwatch, timed

__all__ = [
    "CLAIMS",
    "PROFILES",
    "VERDICTS",
    "Finding",
    "Profile",
    "Record",
    "Sizes",
    "Stopwatch",
    "get_profile",
    "glue_value",
    "record",
    "timed",
    "verdict",
]
