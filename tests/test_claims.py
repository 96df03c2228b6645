import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ast
import dataclasses

from kmtrf_core.book.claims import CLAIMS, VERDICTS, Finding, record, verdict

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
    out = record("construction_exact", Finding(" max error 3e-16 ", "reproduced", check="error below 1e-12"))
    claim = CLAIMS["construction_exact"]
    assert out == {"claim": claim.text, "source": claim.source, "value": "max error 3e-16", "verdict": "reproduced",
                   "check": "error below 1e-12", "rests_on": "no trained layer", "profile": "quick"}
    assert repr(out) == f"reproduced: max error 3e-16 ({claim.source}, profile quick)"
    with pytest.raises(ValueError, match="claim_id"):
        record("no_such_claim", Finding("x", "reproduced"))
    with pytest.raises(ValueError, match="finding"):
        record("cauchy_gap", "x")  # the old (value, verdict) form is gone


class _FakeRuns:
    def __init__(self, counts, probe=False):
        self.counts = counts
        self.group = type("Group", (), {"probe": probe})()

    def rests_on(self):
        return self.counts


@pytest.mark.parametrize("outcome", ["partly", "not reproduced", "inconclusive"])
def test_a_verdict_short_of_reproduced_needs_a_longer_probe(monkeypatch, outcome):
    monkeypatch.setenv("KMTRF_PROFILE", "quick")
    capped = _FakeRuns({"cap 5000, above Lloyd": 2})
    with pytest.raises(ValueError, match="needs a longer probe"):
        record("cauchy_gap", Finding("factor 2", outcome), runs=capped)
    out = record("cauchy_gap", Finding("factor 2", outcome), runs=[capped, _FakeRuns({"probe 10000": 1}, probe=True)])
    assert out["rests_on"] == "2 cap 5000, above Lloyd; 1 probe 10000"
    assert record("cauchy_gap", Finding("factor 12", "reproduced"), runs=capped)["verdict"] == "reproduced"


def test_a_claim_about_trained_layers_needs_its_runs(monkeypatch):
    monkeypatch.setenv("KMTRF_PROFILE", "quick")
    assert CLAIMS["cauchy_gap"].trained and not CLAIMS["construction_exact"].trained
    with pytest.raises(ValueError, match="rests on trained layers"):
        record("cauchy_gap", Finding("factor 12", "reproduced"))
    runs = [_FakeRuns({"flat below Lloyd": 2}), _FakeRuns({"cap 5000, above Lloyd": 1, "flat below Lloyd": 1})]
    out = record("cauchy_gap", Finding("factor 12", "reproduced"), runs=runs)
    assert out["rests_on"] == "3 flat below Lloyd; 1 cap 5000, above Lloyd"
    assert repr(out).endswith("runs: 3 flat below Lloyd; 1 cap 5000, above Lloyd)")
    with pytest.raises(ValueError, match="no run"):
        record("cauchy_gap", Finding("factor 12", "reproduced"), runs=[_FakeRuns({})])
    with pytest.raises(ValueError, match="catalog Runs"):
        record("cauchy_gap", Finding("factor 12", "reproduced"), runs=["figure2a"])


def test_runs_rest_on_how_they_ended():
    import pandas as pd

    from kmtrf_core.book.groups import Run, RunGroup, Runs
    from kmtrf_core.training import TrainConfig

    base = TrainConfig(d=2, k=3, n=16, steps=300, until_flat=0.02, patience=100, val_every=100)
    group = RunGroup("demo", base, {"scheme": ["oh", "bn"]}, "9", "a test")
    flat = pd.DataFrame({"step": [0, 100, 200], "seed": 0, "val_relative_loss": [0.9, 0.9, 0.9]})
    capped = pd.DataFrame({"step": [0, 100, 200, 300], "seed": 0, "val_relative_loss": [1.7, 1.6, 1.5, 1.4]})
    runs = Runs(group, {("oh",): Run(TrainConfig(**{**base.to_dict(), "scheme": "oh", "seeds": (0,)}), None, flat),
                        ("bn",): Run(TrainConfig(**{**base.to_dict(), "seeds": (0,)}), None, capped)})
    assert runs.rests_on() == {"flat below Lloyd": 1, "cap 300, above Lloyd": 1}
    assert runs.where(scheme="bn").rests_on() == {"cap 300, above Lloyd": 1}
    assert runs.stops() == "demo: 2 runs; stopped: beat Lloyd, flat 1, cap 1 (300 steps; none below Lloyd at the end)"
    with pytest.raises(ValueError, match="varies"):
        runs.where(omega="l2")


def test_a_finding_validates_and_prints_its_report():
    with pytest.raises(ValueError, match="verdict"):
        Finding("x", "maybe")
    with pytest.raises(ValueError, match="value"):
        Finding("  ", "partly")
    with pytest.raises(ValueError, match="check"):
        Finding("x", "partly", check=None)
    with pytest.raises(ValueError, match="verdict"):
        Finding("x", "Reproduced", check="c")  # the ledger compares the words exactly
    finding = Finding("2 of 3", "partly", check="all three below 1")
    assert str(finding) == "all three below 1 -> partly"
    assert str(dataclasses.replace(finding, report="line one\nline two")) == "line one\nline two"
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.verdict = "reproduced"


def _record_calls(chapter: str):
    tree = ast.parse("\n".join(line for line in _code(chapter).splitlines() if not line.lstrip().startswith("%")))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == "record"]


def test_every_chapter_records_a_finding_computed_in_code():
    """``record(claim_id, finding[, runs=...])``: the claim a literal, the finding not a literal string, and the
    catalog runs exactly for the claims about trained layers."""
    for chapter in {c.chapter for c in CLAIMS.values()}:
        calls = _record_calls(chapter)
        assert calls, chapter
        for call in calls:
            assert len(call.args) == 2, (chapter, ast.unparse(call))
            assert isinstance(call.args[0], ast.Constant) and call.args[0].value in CLAIMS, ast.unparse(call)
            assert not isinstance(call.args[1], (ast.Constant, ast.JoinedStr)), (chapter, ast.unparse(call))
            keywords = [keyword.arg for keyword in call.keywords]
            assert keywords == (["runs"] if CLAIMS[call.args[0].value].trained else []), (chapter, ast.unparse(call))


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
    assert VERDICTS == ("reproduced", "partly", "not reproduced", "inconclusive")


def test_glue_value_refuses_a_missing_number():
    from kmtrf_core.book.claims import glue_value

    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="must be finite"):
            glue_value("ch16_sc_final", bad)
    assert glue_value("ch16_sc_final", "nan as a text is the writer's choice") is False
