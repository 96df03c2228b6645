import json
import subprocess
import sys
from pathlib import Path

import pytest

import ast
import dataclasses

from kmtrf_core.book.claims import CLAIMS, VERDICTS, Finding, below_finding, better_finding, record, verdict, versus_finding

ROOT = Path(__file__).resolve().parent.parent


def test_verdict_all_some_none():
    assert verdict(True) == "reproduced" and verdict(False) == "not reproduced"
    assert [verdict(k, 4) for k in (4, 3, 1, 0)] == ["reproduced", "partly", "partly", "not reproduced"]


@pytest.mark.parametrize("ok,total", [(5, 4), (-1, 4), (1, 0), (1.5, 3), (True, 3), (1, "3")])
def test_verdict_rejects_bad_counts(ok, total):
    with pytest.raises(ValueError):
        verdict(ok, total)


def test_record_returns_the_claim_and_validates(monkeypatch):
    monkeypatch.setenv("KMTRF_PROFILE", "quick")
    out = record("cauchy_gap", Finding(" factor 12 ", "reproduced", check="gap above 10x"))
    assert out == {"claim": CLAIMS["cauchy_gap"].text, "source": CLAIMS["cauchy_gap"].source,
                   "value": "factor 12", "verdict": "reproduced", "check": "gap above 10x", "profile": "quick"}
    assert repr(out) == f"reproduced: factor 12 ({CLAIMS['cauchy_gap'].source}, profile quick)"
    with pytest.raises(ValueError, match="claim_id"):
        record("no_such_claim", Finding("x", "reproduced"))
    with pytest.raises(ValueError, match="finding"):
        record("cauchy_gap", "x")  # the old (value, verdict) form is gone


def test_a_finding_validates_and_prints_its_report():
    with pytest.raises(ValueError, match="verdict"):
        Finding("x", "maybe")
    with pytest.raises(ValueError, match="value"):
        Finding("  ", "partly")
    with pytest.raises(ValueError, match="check"):
        Finding("x", "partly", check=None)
    finding = Finding("2 of 3", "partly", check="all three below 1")
    assert str(finding) == "all three below 1 -> partly"
    assert str(dataclasses.replace(finding, report="line one\nline two")) == "line one\nline two"
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.verdict = "reproduced"


def test_better_below_and_versus_findings():
    better = better_finding({"lloyd": 1.0, "oh": 0.9, "bn": 1.1}, "lloyd", "loss")
    assert better.verdict == "partly" and "oh" in better.value
    assert better_finding({"lloyd": 1.0, "oh": 1.2}, "lloyd", "accuracy", lower=False).verdict == "reproduced"
    assert below_finding({"a": 0.5, "b": 0.99}, "ratio").verdict == "reproduced"
    assert below_finding({"a": 1.0}, "ratio").verdict == "not reproduced"  # not strictly below
    assert below_finding({"a": 1.5}, "ratio", threshold=2.0).verdict == "reproduced"
    import pandas as pd

    index = pd.MultiIndex.from_product([["plain", "ffn"], ["normal", "gumbel"]], names=["model", "test"])
    ratios = pd.DataFrame({"step1": [0.9, 1.0, 0.8, 0.9]}, index=index)
    versus = versus_finding(ratios, "ffn", "plain", "step1")
    assert versus.verdict == "reproduced" and "normal 0.800 vs 0.900" in versus.value


def _record_calls(chapter: str):
    tree = ast.parse("\n".join(line for line in _code(chapter).splitlines() if not line.lstrip().startswith("%")))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == "record"]


def test_every_chapter_records_a_finding_computed_in_code():
    """``record(claim_id, finding)``: two arguments, the claim a literal, the finding not a literal string."""
    for chapter in {c.chapter for c in CLAIMS.values()}:
        calls = _record_calls(chapter)
        assert calls, chapter
        for call in calls:
            assert len(call.args) == 2 and not call.keywords, (chapter, ast.unparse(call))
            assert isinstance(call.args[0], ast.Constant) and call.args[0].value in CLAIMS, ast.unparse(call)
            assert not isinstance(call.args[1], (ast.Constant, ast.JoinedStr)), (chapter, ast.unparse(call))


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
