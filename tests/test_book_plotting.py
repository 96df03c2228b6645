"""The book's figure helpers that decide behaviour (kmtrf_core.book.plotting)."""

import pytest

from kmtrf_core.book.plotting import STATIC_WIDGETS, interactive


def test_interactive_draws_once_when_static_and_makes_a_slider_otherwise(monkeypatch):
    calls = []
    spec = dict(min=-1.0, max=5.0, step=0.5, value=0.5)
    monkeypatch.setenv(STATIC_WIDGETS, "1")
    assert interactive(lambda g: calls.append(g), g=spec) is None
    assert calls == [0.5]
    monkeypatch.delenv(STATIC_WIDGETS)
    widget = interactive(lambda g: calls.append(g), g=spec)
    assert widget is not None and calls == [0.5, 0.5]  # interact draws once at the start value
    with pytest.raises(ValueError, match="'g'"):
        interactive(lambda g: None, g=0.5)
