import json
import subprocess
import sys
from pathlib import Path

import pytest

from kmtrf_core.book.claims import CLAIMS, VERDICTS, record, verdict

ROOT = Path(__file__).resolve().parent.parent


def test_verdict_all_some_none():
    assert verdict(True) == "reproduced" and verdict(False) == "not reproduced"
    assert [verdict(k, 4) for k in (4, 3, 1, 0)] == ["reproduced", "partly", "partly", "not reproduced"]


@pytest.mark.parametrize("ok,total", [(5, 4), (-1, 4), (1, 0), (1.5, 3), (True, 3), (1, "3")])
def test_verdict_rejects_bad_counts(ok, total):
    with pytest.raises(ValueError):
        verdict(ok, total)


def test_record_returns_the_claim_and_validates():
    out = record("cauchy_gap", "factor 12", "reproduced")
    assert out == {"claim": CLAIMS["cauchy_gap"].text, "source": CLAIMS["cauchy_gap"].source,
                   "value": "factor 12", "verdict": "reproduced", "profile": "quick"}
    with pytest.raises(ValueError, match="claim_id"):
        record("no_such_claim", "x", "reproduced")
    with pytest.raises(ValueError, match="outcome"):
        record("cauchy_gap", "x", "maybe")
    with pytest.raises(ValueError, match="value"):
        record("cauchy_gap", "  ", "partly")


def test_every_claim_names_an_existing_chapter():
    for key, claim in CLAIMS.items():
        assert (ROOT / "book" / f"{claim.chapter}.ipynb").exists(), key
        assert claim.text and claim.source


def _code(chapter: str) -> str:
    nb = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def test_each_chapter_records_exactly_its_claims():
    import re

    for chapter in {c.chapter for c in CLAIMS.values()}:
        recorded = set(re.findall(r'record\(\s*"([a-z_0-9]+)"', _code(chapter)))
        owned = {key for key, c in CLAIMS.items() if c.chapter == chapter}
        assert recorded == owned, (chapter, recorded, owned)


def test_claims_page_is_in_sync_with_the_registry():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "claims_page.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    page = (ROOT / "book" / "claims.md").read_text()
    for key, claim in CLAIMS.items():
        for field in ("value", "verdict", "profile"):
            assert f"{claim.chapter}.ipynb::{key}_{field}:s" in page


def test_verdicts_are_the_three_words():
    assert VERDICTS == ("reproduced", "partly", "not reproduced")
