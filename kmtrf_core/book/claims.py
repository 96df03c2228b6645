"""The claims the book checks, the one verdict type, and the ledger's record of each.

:data:`CLAIMS` lists the claims that the book checks (the paper's, and the
book's own): an id, the claim in our words, where the paper makes it, and the
chapter that measures it. Every verdict is a :class:`Finding` (the measured
value, the check it passed or failed, the verdict from :func:`verdict`, and
room for an uncertainty and a training budget), computed in the chapter's
module (``kmtrf_core.book.chNN_<chapter>``) and handed to :func:`record`.
Under Jupyter Book the value, the verdict and the profile are glued (myst-nb)
as ``<id>_value``, ``<id>_verdict`` and ``<id>_profile``, and the claims ledger
page pastes them, so the ledger always shows what the last build computed.
Outside a notebook :func:`record` just returns the record.

The comparisons several chapters share, each returning a :class:`Finding`, are
in :mod:`~kmtrf_core.book.comparisons`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..validation import check_choice, check_int
from .profiles import get_profile

__all__ = ["CLAIMS", "CLAIM_COLUMNS", "VERDICTS", "Claim", "Finding", "Record", "claims_table", "glue_value",
           "progression", "record", "rests_on", "verdict"]

VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive")


class Claim(NamedTuple):
    """One checked claim of the paper: a named tuple ``(text, source, chapter, trained)``.

    * ``text``: the claim, in our words;
    * ``source``: where the paper makes it (figure, table, theorem or section);
    * ``chapter``: the book chapter that measures it;
    * ``trained``: whether its verdict rests on trained layers (then :func:`record` needs the runs).

    Examples
    --------
    >>> claim = CLAIMS["construction_exact"]
    >>> claim.source, claim.chapter
    ('Theorem 2.1, Appendix B', '05_construction')
    """

    text: str
    source: str
    chapter: str
    trained: bool = True


CLAIMS: dict[str, Claim] = {
    "construction_exact": Claim(
        "With the constructed weights at gamma = inf, T layers equal T Lloyd iterations (BN and OH).",
        "Theorem 2.1, Appendix B", "05_construction", trained=False),

    "parameter_reduction": Claim(
        "BN needs d + ceil(log2 k) embedding dimensions instead of d + k, so 12 d_emb^2 parameters shrink accordingly.",
        "Definition 2.1, Table 1", "03_embeddings", trained=False),

    "cost_speedup": Claim(
        "BN's forward pass is several times faster than OH's at large k (12.1x at k = 1000).",
        "Figure 1, Table 1", "08_cost", trained=False),

    "smoothing_bound": Claim(
        "The regularized-min weights stay within the bound of Proposition H.1 of the hard assignment.",
        "Proposition H.1, Eqs. 30-31", "06_smoothing", trained=False),

    "lipschitz_bound": Claim(
        "The Lipschitz bound of Theorem 3.1 holds above measured constants, and OH's constant is below BN's "
        "(in the bound, and in our measurements).",
        "Theorem 3.1 / I.2", "07_lipschitz", trained=False),

    "learned_step": Claim(
        "At tau = 0.1 the trained layer beats one Lloyd step on held-out tasks (OH and BN).",
        "Section 3, Figure 2", "09_training"),
    "oh_faster_convergence": Claim(
        "Training converges faster with OH than with BN.",
        "Section 3, Figure 2", "09_training"),
    "multistep_naive": Claim(
        "Iterating the layer on its own tokens fails after the first step.",
        "Section 4, Figure 6 (left)", "10_multistep"),
    "multistep_reembed": Claim(
        "Re-embedding at every step keeps improving, and OH/BN beat Lloyd's iterations.",
        "Section 4, Figure 6 (right), Appendix C", "10_multistep"),
    "shift_generalization": Claim(
        "After T = 20 re-embedded steps, OH/BN beat Lloyd under all 4 mixture shifts (under double scale only "
        "eventually, after starting behind).",
        "Section 4, Figure 7", "11_generalization"),
    "family_generalization": Claim(
        "Outside cauchy, layers trained on one family beat Lloyd on the other families.",
        "Section 4, Figures 8 and 18", "11_generalization"),
    "length_generalization": Claim(
        "Layers trained at one n beat Lloyd on tasks with 1/4 to 4 times as many points.",
        "Figure 12", "11_generalization"),
    "landscape_unimodal": Claim(
        "Loss surfaces around trained weights look unimodal; OH and BN differ at d = 4 and look alike at d = 32, read as: more alike at d = 32 than at d = 4.",
        "Section 3, Figure 3", "12_landscapes"),
    "cauchy_fails": Claim(
        "Training on cauchy tasks does not generalize, unlike the other four families.",
        "Section 3, Figure 4", "13_cauchy"),
    "cauchy_gap": Claim(
        "The gap between the smoothed and the k-means loss is an order of magnitude larger for cauchy (> 5 vs < 0.5).",
        "Section 3, Figure 5", "13_cauchy"),
    "emd_structure": Claim(
        "Cauchy tasks are far (in EMD) from the other families, which are close to each other.",
        "Section 4, Figures 9 and 19", "14_dissimilarity", trained=False),

    "emd_predicts_transfer": Claim(
        "Task dissimilarities line up with the generalization matrix.",
        "Section 4 (Figures 8 and 9)", "14_dissimilarity"),
    "estimator_equals_kmeans": Claim(
        "TransformerKMeans with the Lloyd step returns scikit-learn KMeans's labels and centers from the same starts.",
        "ours (not in the paper)", "15_real_data", trained=False),

    "realdata_first_step": Claim(
        "A layer trained on normal mixtures beats Lloyd's first step on real data it never saw, from the same starts.",
        "ours (not in the paper)", "15_real_data"),
    "realdata_many_steps": Claim(
        "Used for T re-embedded steps, that layer stays ahead of T Lloyd steps on real data.",
        "ours (not in the paper)", "15_real_data"),
    "recipe_transfers": Claim(
        "A broader training distribution (mixed families, anisotropic components) transfers better to real data.",
        "ours (not in the paper)", "15_real_data"),
    "codes_needed": Claim(
        "Every embedding with code dimensions (OH, BN, Gray-coded BN, scalar codes) trains below one Lloyd "
        "step; the one without (NA) does not.",
        "ours (Appendix A)", "16_codes"),
    "one_dimension_learns": Claim(
        "One extra dimension is enough: a layer with scalar codes (d + 1 dimensions) learns to beat one Lloyd step.",
        "ours (Appendix A)", "16_codes"),
    "code_order": Claim(
        "Training makes a layer with codes depend on which code each center carries more than its initialization "
        "did; a layer without codes does not depend on it.",
        "ours (Appendix A)", "16_codes"),
    "gray_order": Claim(
        "Giving BN's bits in Gray-code order leaves the trained layer's quality unchanged (within 0.02 of BN's "
        "ratio to Lloyd after one step, shown on a 95% interval).",
        "ours (Appendix A)", "16_codes"),
    "pad_d": Claim(
        "A layer trained at a larger d' clusters zero-padded tasks of d as well as a layer trained at d "
        "(within 5%, after 1 and T steps).",
        "ours (Appendix A)", "17_d_and_k"),
    "pad_k": Claim(
        "A layer trained at a larger k' clusters tasks of k, with far filler centers, as well as a layer "
        "trained at k (within 5%, after 1 and T steps).",
        "ours (Appendix A)", "17_d_and_k"),
    "unroll_training": Claim(
        "Training through T unrolled steps gives a better T-step clusterer than the one-step layer run T times.",
        "ours (Appendix A)", "18_multistep_training"),
    "anneal_training": Claim(
        "Annealing gamma up or tau down during training ends with a better one-step layer than the fixed values.",
        "ours (Appendix A)", "18_multistep_training"),
    "anneal_inference": Claim(
        "Raising gamma over the inference steps improves a trained layer's T-step result.",
        "ours (Appendix A)", "18_multistep_training"),
    "ffn_helps": Claim(
        "A feedforward block makes the trained layer better on its own task family and on the others.",
        "ours (Appendix A)", "19_feedforward"),
    "learned_algorithm": Claim(
        "A fitted Lloyd variant (soft k-means or relaxed Lloyd) is less than half as far from the learned step "
        "as Lloyd's step is, on every task family.",
        "ours (Appendix A)", "20_algorithm"),
    "trim_cauchy": Claim(
        "With a trimmed loss, layers trained on Cauchy tasks beat one Lloyd step on held-out Cauchy tasks.",
        "ours (Appendix A)", "21_cauchy_robust"),
    "trim_transfer": Claim(
        "Layers trained on Cauchy tasks with a trimmed loss beat one Lloyd step on normal tasks.",
        "ours (Appendix A)", "21_cauchy_robust"),
}
"""Claim id -> :class:`Claim`, in the order of the ledger."""


class _Plain(str):
    """A string whose repr is itself, so a glued text pastes without quotes."""

    def __repr__(self) -> str:
        return str(self)


def verdict(ok, total: int | None = None) -> str:
    """``"reproduced"``, ``"partly"`` or ``"not reproduced"``.

    ``verdict(flag)`` for a single yes/no check; ``verdict(ok, total)`` for
    ``ok`` successes out of ``total`` checks (all, some, none).

    Parameters
    ----------
    ok : bool or int
        The check's outcome, or the number of checks that passed.
    total : int, optional
        The number of checks, ``>= 1``; omit for a single check.

    Returns
    -------
    str
        One of :data:`VERDICTS`.

    Examples
    --------
    >>> verdict(True), verdict(3, 3), verdict(1, 3), verdict(0, 3)
    ('reproduced', 'reproduced', 'partly', 'not reproduced')
    """
    if total is None:
        return VERDICTS[0] if bool(ok) else VERDICTS[2]
    check_int(total, "total")
    if check_int(ok, "ok", minimum=0) > total:
        raise ValueError(f"ok must be an int between 0 and total={total}, got {ok!r}")
    return VERDICTS[0] if ok == total else VERDICTS[1] if ok else VERDICTS[2]


@dataclass(frozen=True)
class Finding:
    """A measured statement about one claim: what the ledger records and what a chapter prints.

    Every verdict of the book is one: the chapter modules compute it from
    their tables, a chapter prints it and hands it to :func:`record`.

    Attributes
    ----------
    value : str
        The measured value in a few words, with numbers (the ledger's "Measured").
    verdict : str
        One of :data:`VERDICTS`.
    check : str
        What had to hold for the verdict, in words (the test the value passed or failed).
    report : str
        The lines a chapter prints; empty: ``"<check> -> <verdict>"``.
    uncertainty : str, optional
        How far the value can move (for example an interval over tasks and seeds).
    budget : str, optional
        The training budget of the layers the verdict rests on.

    Examples
    --------
    >>> finding = Finding("2 of 3 cases", "partly", "ratio to Lloyd below 1 in every case")
    >>> print(finding)
    ratio to Lloyd below 1 in every case -> partly
    >>> Finding("", "partly")
    Traceback (most recent call last):
    ...
    ValueError: value must be a non-empty string
    """

    value: str
    verdict: str
    check: str = ""
    report: str = ""
    uncertainty: str | None = None
    budget: str | None = None

    def __post_init__(self):
        if not isinstance(self.value, str) or not self.value.strip():
            raise ValueError("value must be a non-empty string")
        if self.verdict not in VERDICTS:  # exactly: the ledger and the chapters compare the words
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        for name in ("check", "report"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {type(getattr(self, name)).__name__}")

    def __str__(self) -> str:
        return self.report or f"{self.check} -> {self.verdict}"


def record(claim_id: str, finding: Finding, runs=None) -> "Record":
    """Record what a chapter measured about a claim; glue it for the claims ledger.

    Parameters
    ----------
    claim_id : str
        A key of :data:`CLAIMS`.
    finding : Finding
        The measured value and its verdict.
    runs : Runs or sequence of Runs, optional
        The catalog runs the verdict rests on (:class:`~kmtrf_core.book.catalog.Runs`); required for a
        claim about trained layers (``Claim.trained``). The ledger's "Rests on" column counts them by
        how they ended (:meth:`~kmtrf_core.book.catalog.Runs.rests_on`: flat below Lloyd, the cap,
        a probe). A verdict other than "reproduced" on trained layers must include a probe group
        (:func:`~kmtrf_core.book.catalog.probe_group`: twice the cap, one seed), so that no negative
        verdict rests on a budget that was too short.

    Returns
    -------
    Record
        A dict ``{"claim", "source", "value", "verdict", "check", "rests_on", "profile"}`` that
        shows as one line in a notebook (the profile in force,
        :func:`~kmtrf_core.book.profiles.get_profile`).

    Examples
    --------
    >>> record("construction_exact", Finding("max error 3e-16 over 250 tasks", "reproduced"))["rests_on"]
    'no trained layer'
    >>> record("learned_step", Finding("0.9", "reproduced"))
    Traceback (most recent call last):
    ...
    ValueError: claim 'learned_step' rests on trained layers: pass the catalog runs it was measured on (runs=)
    >>> class Fake:
    ...     group = type("G", (), {"probe": False})()
    ...     def rests_on(self): return {"cap 5000, above Lloyd": 1}
    >>> record("learned_step", Finding("1.1", "not reproduced"), runs=Fake())
    Traceback (most recent call last):
    ...
    ValueError: claim 'learned_step': a verdict of 'not reproduced' on trained layers needs a longer probe among its runs (a catalog probe group)
    """
    claim_id = check_choice(claim_id, "claim_id", CLAIMS)
    if not isinstance(finding, Finding):
        raise ValueError(f"finding must be a Finding, got {type(finding).__name__}")
    claim = CLAIMS[claim_id]
    rests = rests_on(runs)
    if claim.trained and runs is None:
        raise ValueError(f"claim {claim_id!r} rests on trained layers: pass the catalog runs it was measured on "
                         "(runs=)")
    if claim.trained and finding.verdict != VERDICTS[0] and not _has_probe(runs):
        raise ValueError(f"claim {claim_id!r}: a verdict of {finding.verdict!r} on trained layers needs a longer probe "
                         "among its runs (a catalog probe group)")
    value = finding.value.strip()
    profile = get_profile().name
    for key, text in (("value", value), ("verdict", finding.verdict), ("rests", rests), ("profile", profile)):
        glue_value(f"{claim_id}_{key}", text)
    return Record(claim=claim.text, source=claim.source, value=value, verdict=finding.verdict,
                  check=finding.check, rests_on=rests, profile=profile)


def glue_value(name: str, value) -> bool:
    """Glue a number or a text for the book's prose (myst-nb), so that a paragraph quotes the run.

    A chapter's "What we found" writes ``{glue:text}`name:.3f``` instead of a typed number. Outside
    an IPython kernel with myst-nb (a script, the unit tests) this does nothing.

    Parameters
    ----------
    name : str
        The glue key: letters, digits and underscores.
    value : str, int or float
        A text (pasted as it is) or a number (formatted by the role's spec).

    Returns
    -------
    bool
        Whether it was glued.

    >>> glue_value("ch16_sc_final", 1.04)   # outside a kernel: nothing to glue into
    False
    >>> glue_value("bad name", 1.0)
    Traceback (most recent call last):
    ...
    ValueError: name must be letters, digits and underscores, got 'bad name'
    """
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise ValueError(f"name must be letters, digits and underscores, got {name!r}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (str, int, float, np.integer, np.floating)):
        raise ValueError(f"value must be a text or a number, got {type(value).__name__}")
    if not isinstance(value, str) and not math.isfinite(float(value)):
        raise ValueError(f"value of {name!r} must be finite, got {value!r}: prose cannot quote a missing number")
    value = _Plain(value) if isinstance(value, str) else float(value) if isinstance(value, (float, np.floating)) \
        else int(value)
    try:  # only inside an IPython kernel with myst-nb installed
        from IPython import get_ipython

        if get_ipython() is None:
            return False
        from myst_nb import glue  # present where the book is built, not for a plain user
    except ImportError:
        return False
    glue(name, value, display=False)
    return True


def _run_groups(runs) -> list:
    """``runs`` as a list of Runs: one Runs, or a sequence of them."""
    return [runs] if hasattr(runs, "rests_on") else list(runs)


def _has_probe(runs) -> bool:
    return any(getattr(getattr(group, "group", None), "probe", False) for group in _run_groups(runs))


def rests_on(runs) -> str:
    """The ledger's "Rests on" text: the runs counted by how they ended (``"no trained layer"`` without runs).

    Parameters
    ----------
    runs : Runs, sequence of Runs, or None
        Anything with a ``rests_on()`` method returning label -> count
        (:meth:`~kmtrf_core.book.catalog.Runs.rests_on`).

    Examples
    --------
    >>> class Fake:
    ...     def __init__(self, counts): self.counts = counts
    ...     def rests_on(self): return self.counts
    >>> rests_on([Fake({"flat below Lloyd": 2}), Fake({"flat below Lloyd": 1, "cap 5000, above Lloyd": 1})])
    '3 flat below Lloyd; 1 cap 5000, above Lloyd'
    >>> rests_on(None)
    'no trained layer'
    """
    if runs is None:
        return "no trained layer"
    groups = _run_groups(runs)
    counts: dict = {}
    for group in groups:
        if not hasattr(group, "rests_on"):
            raise ValueError(f"runs must be catalog Runs (or a sequence of them), got {type(group).__name__}")
        for label, count in group.rests_on().items():
            counts[label] = counts.get(label, 0) + count
    if not counts:
        raise ValueError("runs holds no run")
    return "; ".join(f"{count} {label}" for label, count in counts.items())


class Record(dict):
    """What :func:`record` returns: a dict that a notebook shows as one line, verdict first.

    >>> Record(claim="c", source="Fig. 1", value="1.2x", verdict="partly", rests_on="no trained layer",
    ...        profile="quick")
    partly: 1.2x (Fig. 1, profile quick)
    """

    def __repr__(self) -> str:
        rests = self.get("rests_on", "no trained layer")
        runs = "" if rests == "no trained layer" else f"; runs: {rests}"
        return f"{self['verdict']}: {self['value']} ({self['source']}, profile {self['profile']}{runs})"


CLAIM_COLUMNS = ("claim", "paper", "ours", "agree")
"""The columns of a claims table: the claim, the paper's number, ours, and whether they agree."""


def progression(values, fmt: str = "{}") -> str:
    """Values in order, joined by arrows: ``"1.0% -> 6.7% -> 36.9%"`` (a "grows with k" claim).

    >>> progression([1.04, 0.82, 2.675], "{:.2f}x")
    '1.04x -> 0.82x -> 2.67x'
    """
    return " -> ".join(fmt.format(v) for v in values)


def claims_table(rows, columns=CLAIM_COLUMNS, index: bool = True, words: bool = False) -> pd.DataFrame:
    """A table of claim checks from rows, the last column the check's outcome (chapter 8).

    Parameters
    ----------
    rows : iterable of tuple
        One tuple per claim, in the order of ``columns``; the last entry is the check's outcome:
        anything with a truth value, or ``"inconclusive"`` (its uncertainty straddles its threshold).
    columns : sequence of str
        Column names; default :data:`CLAIM_COLUMNS` (claim, paper, ours, agree).
    index : bool
        Index the table by its first column (the claim).
    words : bool
        Write ``"yes"`` / ``"no"`` for the truth values, as a table with an ``"inconclusive"`` row
        always does (so that a check inside the noise does not show as a disagreement).

    Returns
    -------
    pandas.DataFrame
        The outcome column plain ``bool``, or words.

    Examples
    --------
    >>> table = claims_table([("BN is faster at k=400", "4.90x", "8.00x", np.True_)])
    >>> table.loc["BN is faster at k=400", "ours"], table.agree.tolist()
    ('8.00x', [True])
    >>> claims_table([("a", "x", 1), ("b", "y", "inconclusive")], columns=("claim", "ours", "holds")).holds.tolist()
    ['yes', 'inconclusive']
    """
    columns, rows = list(columns), [tuple(row) for row in rows]
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"every row needs {len(columns)} entries ({columns}), got {row!r}")
        if isinstance(row[-1], str) and row[-1] != "inconclusive":
            raise ValueError(f"a row's outcome must have a truth value or be 'inconclusive', got {row[-1]!r}")
    words = words or any(isinstance(row[-1], str) for row in rows)
    table = pd.DataFrame([(*row[:-1], row[-1] if isinstance(row[-1], str) else ("yes" if row[-1] else "no")
                           if words else bool(row[-1])) for row in rows], columns=columns)
    if not words:
        table[columns[-1]] = table[columns[-1]].astype(bool)
    return table.set_index(columns[0]) if index else table
