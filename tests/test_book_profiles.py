import pytest
import torch

from kmtrf_core import default_device
from kmtrf_core.book import PROFILES, get_profile


def test_every_profile_defines_the_same_chapters_and_keys():
    names = list(PROFILES)
    assert names == ["quick", "book", "paper"]
    reference = PROFILES["book"]
    for name in names:
        assert set(PROFILES[name]) == set(reference), name
        for chapter, sizes in reference.items():
            assert set(PROFILES[name][chapter]) == set(sizes), (name, chapter)


def test_environment_variable_selects_the_profile(monkeypatch):
    monkeypatch.delenv("KMTRF_PROFILE", raising=False)
    assert get_profile().name == "book"
    monkeypatch.setenv("KMTRF_PROFILE", "quick")
    assert get_profile().name == "quick"
    assert get_profile("paper").name == "paper"  # an explicit name wins
    monkeypatch.setenv("KMTRF_PROFILE", "huge")
    with pytest.raises(ValueError, match="profile"):
        get_profile()


def test_chapter_sizes_and_description():
    p = get_profile("quick")
    s = p.chapter("construction")
    assert s.table_k <= s.table_n
    assert "quick" in p.describe() and "table_k=" in p.describe("construction")
    with pytest.raises(ValueError, match="chapter"):
        p.chapter("nonexistent")


def test_quick_is_never_larger_than_book():
    for chapter, sizes in PROFILES["quick"].items():
        for key, value in sizes.items():
            other = PROFILES["book"][chapter][key]
            if isinstance(value, int) and not isinstance(value, bool) and key not in ("d", "k", "n"):
                assert value <= other, (chapter, key)


def test_device_is_cuda_when_available_else_cpu():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert default_device().type == expected
    assert get_profile().device.type == expected
