"""Chapter 5's exactness measurements and verdict (kmtrf_core.book.ch05_construction)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from kmtrf_core import ClusterTransformer, lloyd, sample_tasks
from kmtrf_core.book.ch05_construction import (
    closest_gap,
    exactness_finding,
    layerwise_lloyd_errors,
    mean_log_error,
    relative_center_error,
    smallest_error,
)


def test_relative_center_error():
    ref = torch.rand(3, 4, 2, dtype=torch.float64) + 0.5
    assert relative_center_error(ref, ref).tolist() == [0.0, 0.0, 0.0]
    shifted = ref.clone()
    shifted[1, 2, 0] += 0.25
    err = relative_center_error(shifted, ref)
    assert err[1].item() == pytest.approx(0.25 / ref[1].abs().max().item())
    assert err[0].item() == 0.0 and err[2].item() == 0.0
    with pytest.raises(ValueError):
        relative_center_error(ref, ref[:, :3])


@pytest.mark.parametrize("scheme", ["oh", "bn", "sc"])
def test_layerwise_errors_are_exact_and_end_at_the_model_output(scheme):
    X, C = sample_tasks(6, 64, 3, 5, generator=7, dtype=torch.float64)
    errors = layerwise_lloyd_errors(X, C, scheme, steps=4)
    assert errors.shape == (4, 6)
    assert bool((errors <= 1e-12).all())
    model = ClusterTransformer.from_lloyd(3, 5, scheme)
    with torch.no_grad():
        last = relative_center_error(model(X, C, steps=4), lloyd(X, C, steps=4))
    torch.testing.assert_close(errors[-1], last, rtol=0, atol=1e-15)


def test_layerwise_errors_grow_at_finite_precision_only_outside_the_theorem():
    # a tie: the point at 0.5 is equidistant from both centers, so the layer is not Lloyd
    X = torch.tensor([[[0.0], [0.25], [0.5], [0.75], [1.0]]], dtype=torch.float64)
    C = torch.tensor([[[0.25], [0.75]]], dtype=torch.float64)
    assert layerwise_lloyd_errors(X, C, "bn", steps=1).item() > 0.1


def test_exactness_finding_names_the_schemes_it_counted():
    table = pd.DataFrame({"scheme": ["oh", "bn", "sc", "sc"], "T": [1, 1, 1, 2], "tasks_in_theorem": [4, 4, 4, 0],
                          "exact": [4, 4, 3, 0], "worst_rel_error": [1e-16, 2e-16, 0.3, float("nan")]})
    finding = exactness_finding(table)
    assert finding.verdict == "not reproduced"
    assert finding.value.startswith("11 of 12 (task, T <= 2) cases exact to 1e-12 in float64 (OH, BN, SC)")
    with pytest.raises(ValueError, match="scheme"):
        exactness_finding(table.drop(columns="scheme"))


def test_smallest_error_needs_the_interval():
    rng = np.random.default_rng(3)
    base = rng.random((40, 3)) * 1e-2
    errors = {"oh": base * 5, "bn": base, "sc": base * 2}
    assert smallest_error(errors, [1, 10, 100]).tolist() == ["BN", "BN", "BN"]
    errors["sc"] = base * np.exp(0.01 * rng.standard_normal((40, 3)))  # BN's errors up to noise
    assert set(smallest_error(errors, [1, 10, 100]).tolist()) <= {"BN ~ SC", "SC ~ BN"}
    exact = {"oh": np.zeros((5, 1)), "bn": np.zeros((5, 1))}  # both exact: a tie
    assert smallest_error(exact, [math.inf]).tolist() == ["OH ~ BN"]
    # median and mean disagree: OH is tiny on 60% of the tasks and large on the rest, BN moderate
    # everywhere; the interval tests the mean of the log errors, so BN is closer, not a tie
    split = {"oh": np.where(np.arange(40) < 24, 1e-6, 1e-1)[:, None], "bn": np.full((40, 1), 1e-5)}
    assert smallest_error(split, [1.0]).tolist() == ["BN"]
    # a third scheme inside the noise of the best is named too
    noisy = base * np.exp(0.01 * rng.standard_normal((40, 3)))
    three = {"oh": base * 5, "bn": base, "sc": noisy, "na": base * np.exp(0.01 * rng.standard_normal((40, 3)))}
    assert all(label.count("~") == 2 and "OH" not in label for label in smallest_error(three, [1, 10, 100]))
    with pytest.raises(ValueError, match="at least two schemes"):
        smallest_error({"bn": base}, [1, 10, 100])
    with pytest.raises(ValueError, match=r"errors\['oh'\] must be \(tasks >= 2, 2 gammas\)"):
        smallest_error(errors, [1, 10])
    with pytest.raises(ValueError, match="same tasks"):
        smallest_error({"oh": base, "bn": base[:10]}, [1, 10, 100])
    with pytest.raises(ValueError, match="finite and non-negative"):
        smallest_error({"oh": base, "bn": -base}, [1, 10, 100])


def test_mean_log_error_is_what_smallest_error_ranks():
    # OH is tiny on 60% of the tasks and large on the rest, BN moderate everywhere: OH has the
    # smaller median but the larger mean log10 error, and the verdict follows the mean
    split = {"oh": np.where(np.arange(40) < 24, 1e-6, 1e-1)[:, None], "bn": np.full((40, 1), 1e-5)}
    table = mean_log_error(split, [1.0])
    assert table.columns.tolist() == ["OH", "BN"] and table.index.tolist() == [1.0]
    assert table.loc[1.0, "OH"] == pytest.approx(0.6 * -6 + 0.4 * -1)
    assert table.loc[1.0, "BN"] == pytest.approx(-5.0)
    assert np.median(split["oh"]) < np.median(split["bn"])
    assert smallest_error(split, [1.0]).tolist() == [table.loc[1.0].idxmin()]
    # exact zeros are floored, as in smallest_error
    exact = {"oh": np.zeros((3, 2)), "bn": np.full((3, 2), 1e-12)}
    assert mean_log_error(exact, [1, 2], floor=1e-20).to_numpy().tolist() == [[-20.0, -12.0], [-20.0, -12.0]]
    assert mean_log_error(exact, [1, 2]).loc[2, "OH"] == pytest.approx(-17.0)
    # torch tensors are read like arrays
    assert mean_log_error({"bn": torch.full((4, 1), 1e-3, dtype=torch.float64)}, [5.0]).loc[5.0, "BN"] == pytest.approx(-3.0)
    with pytest.raises(ValueError, match="at least one scheme"):
        mean_log_error({}, [1.0])
    with pytest.raises(ValueError, match="floor"):
        mean_log_error(split, [1.0], floor=0.0)
    with pytest.raises(ValueError, match="floor"):
        smallest_error(split, [1.0], floor=-1.0)
    with pytest.raises(ValueError, match=r"errors\['oh'\] must be \(tasks >= 2, 2 gammas\)"):
        mean_log_error(split, [1.0, 2.0])
    with pytest.raises(ValueError, match="same tasks"):
        mean_log_error({"oh": split["oh"], "bn": split["bn"][:10]}, [1.0])
    with pytest.raises(ValueError, match="finite and non-negative"):
        mean_log_error({"oh": -split["oh"]}, [1.0])


def test_closest_gap_is_the_interval_behind_smallest_error():
    rng = np.random.default_rng(1)
    base = rng.random((64, 2)) * 1e-3
    errors = {"oh": base * np.array([10.0, 1.0]), "bn": base.copy(), "sc": base * 1e3}
    errors["bn"][:, 1] *= np.exp(0.01 * rng.standard_normal(64))
    gaps = closest_gap(errors, [1.0, 100.0])
    names = smallest_error(errors, [1.0, 100.0])
    assert names[1.0] == "BN" and gaps[1.0].startswith("BN - OH: -1.000 [-1.000, -1.000]")  # a lead: BN alone
    assert "; BN - SC: -3.000 [" in gaps[1.0]  # every other scheme, nearest first
    # each scheme whose interval reaches 0 is the one named beside the first, and only those
    for gamma in (1.0, 100.0):
        first = names[gamma].split(" ~ ")[0]
        tied = []
        for part in gaps[gamma].split("); "):
            pair, rest = part.split(": ", 1)
            low, high = (float(x) for x in rest.split("[")[1].split("]")[0].split(", "))
            assert pair.startswith(f"{first} - ")
            if high >= 0:
                tied.append(pair.split(" - ")[1])
        assert names[gamma] == " ~ ".join([first, *tied])
    assert names[100.0] == "BN ~ OH"
    with pytest.raises(ValueError, match="at least two schemes"):
        closest_gap({"oh": errors["oh"]}, [1.0, 100.0])
    with pytest.raises(ValueError, match="floor"):
        closest_gap(errors, [1.0, 100.0], floor="tiny")
