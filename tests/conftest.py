import math

import numpy as np
import pandas as pd
import pytest
import torch

# Reports that tests register (a title and a callable giving the lines), printed by pytest at the very
# end of the session, after every test ran, whatever the order of the tests and with or without -s.
END_OF_SESSION_REPORTS = pytest.StashKey[list]()


def pytest_configure(config):
    config.stash[END_OF_SESSION_REPORTS] = []


@pytest.fixture(scope="session")
def end_of_session_report(pytestconfig):
    """``register(title, lines)``: ``lines()`` is called at the end of the session and printed under ``title``."""
    reports = pytestconfig.stash[END_OF_SESSION_REPORTS]

    def register(title, lines):
        if all(title != known for known, _ in reports):
            reports.append((title, lines))

    return register


def pytest_terminal_summary(terminalreporter, config):
    for title, lines in config.stash.get(END_OF_SESSION_REPORTS, []):
        terminalreporter.section(title)
        for line in lines():
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture
def step_table():
    """Build a table shaped like :func:`kmtrf_core.evaluate.evaluate_models`' from losses:
    ``step_table({model: {mode: (members, steps) losses}}, lloyd_losses)`` (test ``"normal"``)."""

    def build(mode_losses, lloyd_losses):
        rows = []
        for model, modes in mode_losses.items():
            for mode, losses in modes.items():
                losses = np.asarray(losses, dtype=float)
                for member in range(losses.shape[0]):
                    for step in range(losses.shape[1]):
                        loss, ref = losses[member, step], lloyd_losses[step]
                        rows.append(dict(model=model, member=member, test="normal", mode=mode,
                                         step=step, loss=loss, lloyd_loss=ref, ratio=loss / ref,
                                         diverged=float(not math.isfinite(loss))))
        return pd.DataFrame(rows)

    return build
