"""What only the book needs: run profiles, the claims ledger, figure helpers, shared experiments.

Nothing here is part of the paper's mathematics; chapters import it as
``from kmtrf_core.book import get_profile, record, verdict, timed``.
"""

from .claims import CLAIMS, VERDICTS, Record, record, verdict
from .profiles import PROFILES, Profile, get_profile
from .timing import Stopwatch, timed

__all__ = [
    "CLAIMS",
    "PROFILES",
    "VERDICTS",
    "Profile",
    "Record",
    "Stopwatch",
    "get_profile",
    "record",
    "timed",
    "verdict",
]
