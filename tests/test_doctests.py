"""Every docstring example in kmtrf_core runs and prints what it says."""

import doctest
import importlib
import inspect
import pkgutil
import re

import pytest

import kmtrf_core

MODULES = sorted(m.name for m in pkgutil.walk_packages(kmtrf_core.__path__, "kmtrf_core.") if not m.name.endswith("__main__"))

TRAINS = re.compile(r"(>>>|\.\.\.) .*(\b(train|train_cached|sweep|parallel_sweep|training_step_ms|family_generalization)\(|"
                    r"\.runs\(|\.run\(|layer=\"learned\")")
"""A doctest line that trains a layer (or reads the catalog's runs, training them on a cold cache)."""


def _trains(name: str) -> bool:
    return any(TRAINS.search(line) for line in inspect.getsource(importlib.import_module(name)).splitlines())


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if _trains(name) else name
                                  for name in MODULES])
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_public_api_is_flat_and_complete():
    for name in kmtrf_core.__all__:
        assert hasattr(kmtrf_core, name), name
    for name in ["binary_codes", "ClusterTransformer", "lloyd", "kmeans_objective", "sample_tasks"]:
        assert name in kmtrf_core.__all__


def test_public_functions_have_docstrings():
    for name in kmtrf_core.__all__:
        obj = getattr(kmtrf_core, name)
        if callable(obj):
            assert obj.__doc__ and len(obj.__doc__.strip()) > 20, name


def test_every_public_function_and_class_has_an_example():
    missing = []
    for name in MODULES:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", []):
            obj = getattr(module, public)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == name:
                if ">>>" not in (obj.__doc__ or ""):
                    missing.append(f"{name}.{public}")
    assert not missing, f"public names without a doctest example: {missing}"
