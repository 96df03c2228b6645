"""The public API's contract under adversarial input (property-based; ``make fuzz`` runs it longer).

For every function below, whatever shapes, ranks, dtypes and values it is given:

* it raises ``ValueError`` or ``TypeError`` (a message naming the argument), or
* it returns, and then finite input gives finite output: every float in it, in tensors, NumPy arrays and
  floats, inside dicts, lists and tuples at any depth (:func:`_numbers`; tables and other objects are not read).

Each function is also called on one well-formed input (an explicit example, tried before the fuzzed
ones), and at least one of its calls must return: a function that refuses every input would keep
the two rules above without computing anything.

Any other exception, a NaN/inf out of finite input, or a refusal whose message names none of the
arguments it could refuse, fails the test. The names a refusal may use are read off the call
(:func:`argument_names`): the parameters of every ``kmtrf_core`` function, class (its ``__init__``),
method or model (its ``forward``) that the called function or lambda touches. ``make fuzz`` sets
``KMTRF_FUZZ_EXAMPLES`` (examples per function); the outcome counts are printed at the end of the
session (``tests/conftest.py``).
"""

from __future__ import annotations

import collections
import inspect
import math
import os
import re
import traceback
import types

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import kmtrf_core as K

EXAMPLES = int(os.environ.get("KMTRF_FUZZ_EXAMPLES", "25"))
OUTCOMES: collections.Counter = collections.Counter()
PROBLEMS: list = []  # (function, what went wrong, where a refusal was raised or "")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.bool]
VALUES = st.sampled_from(["unit", "unit", "unit", "huge", "tiny", "zero", "nan", "inf", "shifted", "negative"])


@st.composite
def tensors(draw, rank=None, dims=None, floats=False):
    rank = draw(st.integers(0, 4)) if rank is None else rank
    shape = [draw(st.integers(0, 5)) if dims is None else dims[i] for i in range(rank)]
    if floats:
        dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    else:
        dtype = draw(st.sampled_from(DTYPES)) if draw(st.booleans()) else torch.float32
    kind = draw(VALUES)
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64)
    if kind == "huge":
        x = x * 1e30
    elif kind == "tiny":
        x = x * 1e-30
    elif kind == "zero":
        x = x * 0
    elif kind == "shifted":
        x = x + 1000.0
    elif kind == "negative":
        x = -x * 50
    elif kind in ("nan", "inf") and x.numel():
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = math.nan if kind == "nan" else math.inf
    if dtype == torch.bool:
        return x > 0.5
    if not dtype.is_floating_point:
        return (x * 10).clamp(-1e6, 1e6).to(dtype)
    return x.to(dtype)


@st.composite
def tasks(draw):
    """Mostly well-formed (B, n, d) / (B, k, d) pairs, sometimes not."""
    mode = draw(st.integers(0, 9))
    if mode == 0:  # anything at all
        return draw(tensors()), draw(tensors())
    if mode <= 5:  # well-formed sizes and dtypes, adversarial values (huge, tiny, far away, NaN, ...)
        B, d, k = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 5))
        n = draw(st.integers(k, 9))
        X = draw(tensors(rank=3, dims=(B, n, d), floats=True))
        C = draw(tensors(rank=3, dims=(B, k, d), floats=True)).to(X.dtype)
        return X, C
    B, n, d, k = draw(st.integers(0, 3)), draw(st.integers(0, 8)), draw(st.integers(0, 4)), draw(st.integers(0, 6))
    X = draw(tensors(rank=3, dims=(B, n, d)))
    C = draw(tensors(rank=3, dims=(B, k, d)))
    return X, C


def _numbers(value):
    """The floating-point numbers in ``value``, as tensors: tensors, NumPy arrays and floats (NumPy's too), found
    inside dicts (their values), lists and tuples at any depth. Anything else (ints, strings, tables, objects)
    holds none that this contract checks."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield value
    elif isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            yield torch.from_numpy(value)
    elif isinstance(value, (float, np.floating)):
        yield torch.tensor(float(value), dtype=torch.float64)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _numbers(item)


def _finite(value) -> bool:
    return all(bool(torch.isfinite(x).all()) for x in _numbers(value))


def _inputs_finite(*args) -> bool:
    return all(_finite(a) for a in args)


# iterating a layer many times can diverge for real; these mark a diverged task with inf (documented), never NaN
DIVERGENCE_MARKED = {"center_trajectory", "center_trajectory_naive", "center_trajectory_gammas", "loss_trajectory",
                     "padded_trajectory"}


def _no_nan(value) -> bool:
    return not any(bool(torch.isnan(x).any()) for x in _numbers(value))


def _core_object(obj) -> bool:
    """A kmtrf_core function, class, method or model (not a lambda of this file)."""
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return module.startswith("kmtrf_core")


CORE_CLASSES = [obj for obj in vars(K).values() if inspect.isclass(obj) and _core_object(obj)]


def _parameters(obj) -> set:
    """Parameter names of a kmtrf_core callable: a class's ``__init__``, a model's ``forward``; no self/cls."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.forward
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return set()
    return {name for name in signature.parameters if name not in ("self", "cls")}


def _resolve(name: str) -> list:
    """The kmtrf_core callables a name in a lambda's code may mean: a public name, or a class's own attribute."""
    found = []
    public = getattr(K, name, None)
    if callable(public) and _core_object(public):
        found.append(public)
    for cls in CORE_CLASSES:
        for owner in cls.__mro__:
            if owner.__module__.startswith("kmtrf_core") and name in vars(owner):
                attribute = getattr(cls, name)
                if callable(attribute):
                    found.append(attribute)
                break
    return found


def argument_names(function, extra=()) -> set:
    """Every name a refusal by ``function`` may give for the argument it refuses.

    A kmtrf_core callable (or model) gives its own parameters; a lambda of this file gives the
    parameters of every kmtrf_core callable its code names (``co_names``: ``lloyd_trajectory``,
    ``ClusterTransformer``, ``from_lloyd``, ...), nested lambdas included. This file's helpers
    (``_model_for``, ``_size``) are not followed: they build valid models from the fuzzed sizes, and
    their parameters (``d``, ``k``, ``gamma``) would let a refusal pass that names none of the fuzzed
    arguments. ``extra`` adds names given by hand.
    """
    names, seen = set(extra), set()

    def walk(code):
        if code in seen:
            return
        seen.add(code)
        for name in code.co_names:
            for target in _resolve(name):
                names.update(_parameters(target))
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    if isinstance(function, torch.nn.Module) or _core_object(function):
        names.update(_parameters(function))
    elif hasattr(function, "__code__"):
        walk(function.__code__)
    return names


def names_an_argument(message: str, names) -> bool:
    """Whether the message names one of ``names`` as a whole word.

    A hyphenated word is one word: ``k`` is not named by ``k-means``, nor ``d`` by ``d_emb``.
    """
    return any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", message) for name in names)


def _place(frame) -> str:
    """``kmtrf_core/lloyd.py:40`` for a frame of the package, the full path for any other."""
    root = f"{os.sep}kmtrf_core{os.sep}"
    if root not in frame.filename:
        return f"{frame.filename}:{frame.lineno}"
    return f"kmtrf_core/{frame.filename.rpartition(root)[2].replace(os.sep, '/')}:{frame.lineno}"


def _raised_at(err) -> str:
    """Where a refusal was raised, innermost first: from the raising line out to the first kmtrf_core
    line outside ``validation.py`` (a check helper raises; its caller chose the argument's name)."""
    frames = traceback.extract_tb(err.__traceback__)
    outside = [i for i, f in enumerate(frames) if f"{os.sep}kmtrf_core{os.sep}" in f.filename
               and not f.filename.endswith(f"{os.sep}validation.py")]
    chain = frames[outside[-1]:] if outside else frames[-1:]
    return " <- ".join(_place(f) for f in reversed(chain)) or "?"


OVERFLOW = re.compile(r"\boverflows? torch\.float(32|64)\b")
"""A refusal of finite input that the contract allows (book/api.md): it says what overflowed, and in which dtype."""


def check_refusal(name, function, err, refusal_names=()):
    """A ValueError/TypeError keeps the contract only if its message names an argument it refuses."""
    message = str(err)
    if isinstance(err, ValueError) and OVERFLOW.search(message):
        OUTCOMES[(name, "overflow error")] += 1  # the contract's other refusal: says what overflowed, and in what
        return
    candidates = argument_names(function, refusal_names)
    if names_an_argument(message, candidates):
        OUTCOMES[(name, "named error")] += 1
        return
    OUTCOMES[(name, "unnamed error")] += 1
    PROBLEMS.append((name, f"unnamed {type(err).__name__}: {message}"[:200], _raised_at(err)))
    raise AssertionError(f"{name} refused with a {type(err).__name__} naming none of its arguments "
                         f"{sorted(candidates)}: {message!r} (raised at {_raised_at(err)})") from err


def check_contract(name, function, *args, refusal_names=(), **kwargs):
    """Call ``function(*args, **kwargs)`` and count the outcome; fail on a breach of the contract.

    ``refusal_names`` adds argument names a refusal may use beyond those :func:`argument_names` reads off.
    """
    try:
        out = function(*args, **kwargs)
    except (ValueError, TypeError) as err:
        check_refusal(name, function, err, refusal_names)
        return
    except Exception as err:  # noqa: BLE001 - the contract says: no other exception
        OUTCOMES[(name, "other exception")] += 1
        PROBLEMS.append((name, f"{type(err).__name__}: {err}"[:200], ""))
        raise AssertionError(f"{name} raised {type(err).__name__}: {err}") from err
    if _inputs_finite(*args) and not (_no_nan(out) if name in DIVERGENCE_MARKED else _finite(out)):
        OUTCOMES[(name, "non-finite from finite")] += 1
        PROBLEMS.append((name, "non-finite output", ""))
        raise AssertionError(f"{name} returned non-finite values from finite input")
    OUTCOMES[(name, "ok")] += 1


def _report_lines() -> list:
    """The outcome counts over every contract call of the session, then the problems met: one line per
    function and place (the first message seen there, and how many calls met it)."""
    totals = collections.Counter({outcome: 0 for outcome in
                                  ("ok", "named error", "overflow error", "unnamed error", "other exception",
                                   "non-finite from finite")})
    for (_, outcome), count in OUTCOMES.items():
        totals[outcome] += count
    lines = [f"contract calls: {sum(totals.values())}; " + ", ".join(f"{k}: {v}" for k, v in sorted(totals.items()))]
    first, seen = {}, collections.Counter()
    for name, problem, where in PROBLEMS:
        key = (name, where or problem)
        first.setdefault(key, (problem, where))
        seen[key] += 1
    for key, (problem, where) in list(first.items())[:80]:
        lines.append(f"  {key[0]}: {problem}" + (f" [at {where}]" if where else "") + f" ({seen[key]}x)")
    if len(first) > 80:
        lines.append(f"  ... and {len(first) - 80} more")
    return lines


@pytest.fixture(scope="module", autouse=True)
def _report_at_the_end_of_the_session(end_of_session_report):
    """The counts are printed by ``tests/conftest.py`` once the session is over, whatever ran last."""
    end_of_session_report("contract outcomes (tests/test_contract.py)", _report_lines)
    yield


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def fuzz(run, names, *examples):
    """Run the hypothesis test ``run`` with the well-formed ``examples`` (argument tuples, tried first),
    then require a call that returned normally for each of ``names`` (the contract's names in it).

    Refusals alone keep the contract trivially: this checks that the function was run, and on valid input
    returned finite output, in every session, whatever the number of fuzzed examples.
    """
    for args in examples:
        run = example(*args)(run)
    before = {name: OUTCOMES[(name, "ok")] for name in names}
    run()
    silent = [name for name in names if OUTCOMES[(name, "ok")] == before[name]]
    assert not silent, f"no call of {silent} returned normally: every input, the well-formed ones too, was refused"


def _rand(*shape, dtype=torch.float32):
    """Fixed uniform values for the well-formed examples."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(0), dtype=dtype)


WELL_FORMED_TASKS = K.sample_tasks(2, 8, 2, 3, generator=0)
"""A well-formed (X, C): two tasks of 8 points in 2-D, 3 centers."""


def _size(t, axis, default):
    """A size read off a fuzzed tensor for building a matching model, or a default."""
    if isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[axis] >= 2:
        return t.shape[axis]
    return default


def _dtype(t):
    return t.dtype if isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float64) else torch.float32


MORE_PAIR_FUNCTIONS = {
    "lloyd_trajectory": lambda X, C: K.lloyd_trajectory(X, C, 2),
    "has_empty_cluster": lambda X, C: K.has_empty_cluster(X, C, 2),
    "smoothing_constant": K.smoothing_constant,
    "distance_samples": K.distance_samples,
    "lloyd_loss_trajectory": lambda X, C: K.lloyd_loss_trajectory(X, C, 2),
    "code_lloyd_step_bn": lambda X, C: K.code_lloyd_step(X, C, K.cluster_codes(_size(C, 1, 3), "bn")),
    "attention_weights": lambda q, k: K.attention_weights(q, k, 1.0),
    "attention_weights_inf": lambda q, k: K.attention_weights(q, k, math.inf),
    "relative_loss": lambda X, C: K.relative_loss(
        K.ClusterTransformer.from_lloyd(_size(X, 2, 2), _size(C, 1, 3), "bn", gamma=10.0, dtype=_dtype(X)), X, C),
    "relative_loss_steps": lambda X, C: K.relative_loss(
        K.ClusterTransformer.from_lloyd(_size(X, 2, 2), _size(C, 1, 3), "bn", dtype=_dtype(X)), X, C, steps=2),
    "smoothed_kmeans_loss_trimmed": lambda X, C: K.smoothed_kmeans_loss(X, C, trim=0.25),
    "soft_kmeans_step": lambda X, C: K.soft_kmeans_step(X, C, 10.0),
    "soft_kmeans_step_inf": lambda X, C: K.soft_kmeans_step(X, C, math.inf),
    "relaxed_lloyd_step": lambda X, C: K.relaxed_lloyd_step(X, C, 1.5),
    "minibatch_kmeans_step": lambda X, C: K.minibatch_kmeans_step(X, C, max(1, _size(X, 1, 2) // 2), generator=0),
    "algorithm_distance": lambda X, C: K.algorithm_distance(X, C, C, K.lloyd_step(X, C)),
    "fit_reference": lambda X, C: K.fit_reference(X, C, K.lloyd_step(X, C), "soft", [1.0, 100.0]).curve,
    "pad_tasks": lambda X, C: K.pad_tasks(X, C, d=_size(X, 2, 2) + 1, k=_size(C, 1, 3)),
    "pad_tasks_copy": lambda X, C: K.pad_tasks(X, C, k=_size(C, 1, 3), fill="copy"),
    "trajectory_table": lambda X, C: K.trajectory_table({"lloyd": K.lloyd_trajectory(X, C, 2).centers}, X, C),
}


MORE_SINGLE_FUNCTIONS = {
    "weight_gap_l2": lambda r: K.weight_gap(r, "l2", 0.1),
    "sparsemax_is_tight": lambda r: K.sparsemax_is_tight(r, 0.1),
    "emd_matrix": lambda z: K.emd_matrix(z.numpy() if isinstance(z, torch.Tensor) else z),
}


PAIR_FUNCTIONS = {
    "sqdist": K.sqdist,
    "assign": K.assign,
    "kmeans_objective": K.kmeans_objective,
    "lloyd_step": K.lloyd_step,
    "lloyd": K.lloyd,
    "smoothed_kmeans_loss": K.smoothed_kmeans_loss,
    "smoothed_point_losses": K.smoothed_point_losses,
    "smoothing_gap": K.smoothing_gap,
    "to_unit_cube": K.to_unit_cube,
    "embed": K.embed,
    **MORE_PAIR_FUNCTIONS,
}


@pytest.mark.parametrize("name", sorted(PAIR_FUNCTIONS))
def test_task_functions_keep_the_contract(name):
    @SETTINGS
    @given(tasks())
    def run(pair):
        check_contract(name, PAIR_FUNCTIONS[name], *pair)

    fuzz(run, [name], (WELL_FORMED_TASKS,))


SINGLE_FUNCTIONS = {
    "sparsemax": K.sparsemax,
    "sparsemax_threshold": K.sparsemax_threshold,
    "hardmax_weights": K.hardmax_weights,
    "min_max_scale": K.min_max_scale,
    "regularized_weights_l2": lambda r: K.regularized_weights(r, "l2", 0.1),
    "regularized_weights_ne": lambda r: K.regularized_weights(r, "ne", 0.1),
    **MORE_SINGLE_FUNCTIONS,
}


WELL_FORMED_ARRAYS = {"emd_matrix": _rand(3, 6)}  # (tasks, values); the others take (B, n, d) scores or points


@pytest.mark.parametrize("name", sorted(SINGLE_FUNCTIONS))
def test_array_functions_keep_the_contract(name):
    @SETTINGS
    @given(tensors())
    def run(z):
        check_contract(name, SINGLE_FUNCTIONS[name], z)

    fuzz(run, [name], (WELL_FORMED_ARRAYS.get(name, _rand(2, 6, 3)),))


def test_the_layer_keeps_the_contract():
    @SETTINGS
    @given(tasks(), st.sampled_from(["oh", "bn", "na", "sc"]),
           st.sampled_from([0.0, 1e-8, 0.1, 1.0, 1e4, 1e308, math.inf, math.nan, -1.0]))
    def run(pair, scheme, gamma):
        X, C = pair
        d = X.shape[-1] if X.dim() == 3 and X.shape[-1] > 0 else 2
        k = C.shape[-2] if C.dim() == 3 and C.shape[-2] >= 2 else 3
        try:
            model = K.ClusterTransformer.from_lloyd(d, k, scheme, gamma=gamma)
        except (ValueError, TypeError) as err:
            check_refusal("ClusterTransformer.from_lloyd", K.ClusterTransformer.from_lloyd, err)
            return
        check_contract("ClusterTransformer.forward", model, X, C)

    # the layer is float64 by default: well-formed tasks for it are float64
    tasks64 = tuple(t.double() for t in WELL_FORMED_TASKS)
    fuzz(run, ["ClusterTransformer.forward"], (tasks64, "bn", 1.0))


def test_extreme_tau_keeps_the_contract():
    @SETTINGS
    @given(tasks(), st.sampled_from([1e-320, 1e-46, 1e-40, 1e-8, 0.1, 1e8]), st.sampled_from(["ne", "l2"]))
    def run(pair, tau, omega):
        check_contract(f"smoothed_kmeans_loss[{omega}]", K.smoothed_kmeans_loss, *pair, omega=omega, tau=tau)

    fuzz(run, ["smoothed_kmeans_loss[ne]", "smoothed_kmeans_loss[l2]"],
         (WELL_FORMED_TASKS, 0.1, "ne"), (WELL_FORMED_TASKS, 0.1, "l2"))


@pytest.mark.parametrize("shift", [100.0, 300.0, 1000.0])
def test_float32_assignments_do_not_depend_on_where_the_data_sit(shift):
    g = torch.Generator().manual_seed(0)
    X, C = torch.rand(32, 50, 4, generator=g), torch.rand(32, 5, 4, generator=g)
    exact = K.sqdist(X.double(), C.double())
    top2 = exact.topk(2, dim=-1, largest=False).values
    clear = (top2[..., 1] - top2[..., 0]) > 1e-3  # not a genuine tie
    moved = K.assign(X + shift, C + shift)
    assert torch.equal(moved[clear], K.assign(X, C)[clear])
    # one Lloyd step on the tasks without a near-tie: float32 holds a coordinate near 1000 to about 6e-5,
    # and the new centers agree to a few of those
    tasks = clear.all(dim=1)
    assert tasks.sum() >= 4
    torch.testing.assert_close((K.lloyd(X + shift, C + shift) - shift)[tasks], K.lloyd(X, C)[tasks],
                               atol=2e-7 * shift, rtol=0)
    torch.testing.assert_close(K.kmeans_objective(X + shift, C + shift), K.kmeans_objective(X, C), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheme", ["oh", "bn", "sc"])
@pytest.mark.parametrize("shift", [100.0, 1000.0])
def test_the_constructed_layer_does_not_depend_on_where_the_data_sit(scheme, shift):
    # from_lloyd centers each task inside the layer: at gamma = inf in float32 the new centers move
    # with the data to the rounding of the shifted input (about 6e-5 at 1000)
    g = torch.Generator().manual_seed(0)
    X, C = torch.rand(32, 50, 4, generator=g), torch.rand(32, 5, 4, generator=g)
    ok = ~K.has_empty_cluster(X, C, 1)
    model = K.ClusterTransformer.from_lloyd(4, 5, scheme, dtype=torch.float32)
    assert model.center
    torch.testing.assert_close((model(X + shift, C + shift) - shift)[ok], model(X, C)[ok], atol=2e-7 * shift, rtol=0)
    torch.testing.assert_close(model(X, C)[ok], K.lloyd(X, C)[ok], atol=1e-6, rtol=0)
    # the same weights without centering lose the assignments far from the origin
    raw = K.ClusterTransformer.from_lloyd(4, 5, scheme, dtype=torch.float32)
    raw.center = False
    assert ((raw(X + 1000.0, C + 1000.0) - 1000.0 - model(X, C))[ok].abs().max() > 0.01)


def test_sparsemax_is_shift_invariant_in_code():
    z = torch.tensor([[1.7e7, 0.0], [0.5, 0.2]])
    assert torch.equal(K.sparsemax(z)[0], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(K.sparsemax(z[1:] + 1e6), K.sparsemax(z[1:]), atol=1e-2, rtol=0)


@pytest.mark.parametrize("omega", ["ne", "l2"])
@pytest.mark.parametrize("tau", [1e-40, 1e-8, 1e8])
def test_extreme_tau_gives_finite_losses(omega, tau):
    X, C = K.sample_tasks(3, 20, 2, 4, generator=0)
    loss = K.smoothed_kmeans_loss(X, C, omega, tau)
    assert torch.isfinite(loss).all()
    if tau < 1e-6:
        torch.testing.assert_close(loss, K.kmeans_objective(X, C), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gamma", [1e-8, 1e4, 1e30, 1e308])
def test_extreme_gamma_gives_finite_centers_or_a_named_error(gamma):
    X, C = K.sample_tasks(3, 20, 2, 4, generator=0)
    try:
        model = K.ClusterTransformer.from_lloyd(2, 4, "bn", gamma=gamma, dtype=X.dtype)
        out = model(X, C)
    except ValueError as err:
        assert "gamma" in str(err)
        return
    assert torch.isfinite(out).all()


def test_a_float64_layer_on_float32_tasks_names_both_dtypes():
    model = K.ClusterTransformer.from_lloyd(4, 5)
    X, C = K.sample_tasks(2, 10, 4, 5, generator=0)
    with pytest.raises(ValueError, match="float32.*float64|float64.*float32"):
        model(X, C)


@pytest.mark.parametrize("omega", ["ne", "l2"])
def test_a_tau_that_rounds_to_zero_in_the_dtype_is_refused_by_name(omega):
    X, C = K.sample_tasks(3, 20, 2, 4, generator=0)
    with pytest.raises(ValueError, match=r"tau=1e-320 .*float32"):
        K.smoothed_kmeans_loss(X, C, omega, 1e-320)
    assert torch.isfinite(K.smoothed_kmeans_loss(X.double(), C.double(), omega, 1e-320)).all()  # float64 holds it


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, "float32", None, torch.float16, torch.bfloat16])
def test_the_samplers_refuse_a_dtype_that_is_not_floating_point(dtype):
    for sampler in (K.sample_tasks, K.family_tasks):
        with pytest.raises(ValueError, match=r"^dtype must be torch.float32 or torch.float64, got"):
            sampler(2, 10, 2, 3, dtype=dtype)
        check_contract(sampler.__name__, sampler, 2, 10, 2, 3, dtype=dtype)


SIZES = st.sampled_from([0, 1, 2, 3, 5, -1, True, 2.5, None, "2", 10**20])


SAMPLERS = {"sample_tasks": K.sample_tasks, "family_tasks": K.family_tasks,
            "shifted_tasks": lambda *sizes: K.shifted_tasks(None, *sizes)}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_the_task_samplers_keep_the_contract(name):
    @SETTINGS
    @given(SIZES, SIZES, SIZES, SIZES)
    def run(B, n, d, k):
        check_contract(name, SAMPLERS[name], B, n, d, k)

    fuzz(run, [name], (2, 5, 2, 3))


# -- every other public name: sizes, numbers, schemes, models, tables and configs ---------------------

ANY = st.sampled_from([0, 1, 2, 3, 5, -1, True, 2.5, None, "2", 10**20, math.nan, math.inf, -math.inf, 1e308, 1e-8,
                       0.1, 1.0, 4.0])
SCHEME_ARGS = st.sampled_from(["oh", "bn", "sc", "na", "BN", "xx", None, 3])
OMEGA_ARGS = st.sampled_from(["l2", "ne", "L2", "xx", None, 0])


def _codes_m(k, scheme):
    return K.cluster_codes(k, scheme).shape[1]


SIZE_FUNCTIONS = {
    "code_dim": lambda d, k, s, x: K.code_dim(k, s),
    "embedding_dim": lambda d, k, s, x: K.embedding_dim(d, k, s),
    "parameter_count": lambda d, k, s, x: K.parameter_count(d, k, s),
    "parameter_reduction": lambda d, k, s, x: K.parameter_reduction(d, k, s),
    "center_norm_sq": lambda d, k, s, x: K.center_norm_sq(d, k, s, exact=bool(x == 1)),
    "weight_gap_bound": lambda d, k, s, x: K.weight_gap_bound(k, x),
    "binary_codes": lambda d, k, s, x: K.binary_codes(k),
    "cluster_codes": lambda d, k, s, x: K.cluster_codes(k, s),
    "lloyd_weights": lambda d, k, s, x: K.lloyd_weights(d, k),
    "code_geometry": lambda d, k, s, x: K.code_geometry(k, s),
    "lipschitz_bound": lambda d, k, s, x: K.lipschitz_bound(d, k, 3, s, gamma=x),
    "lipschitz_bound_tau": lambda d, k, s, x: K.lipschitz_bound(8, k, d, s, tau=x, Gamma1=x),
    "attention_cost": lambda d, k, s, x: K.attention_cost(d, k, 16, s, batch=x),
    "random_parameters": lambda d, k, s, x: K.random_parameters(d, k, x, 1.0, generator=0),
    "make_generator": lambda d, k, s, x: K.make_generator(x),
    "ClusterTransformer": lambda d, k, s, x: K.ClusterTransformer(d, k, s, gamma=x),
    "ClusterTransformer.from_lloyd": lambda d, k, s, x: K.ClusterTransformer.from_lloyd(d, k, s, gamma=x),
    "TrainConfig": lambda d, k, s, x: K.TrainConfig(d=d, k=k, n=16, scheme=s, tau=x, steps=2),
    "measure_model": lambda d, k, s, x: K.measure_model(d, k, s, 16, 2, gamma=x, repeats=1, warmup=0, memory=False),
    "machine_description": lambda d, k, s, x: K.machine_description(s),
}


def _small(value):
    """Sizes a fuzzed call may really allocate; the huge ones must be refused before any allocation."""
    return not (isinstance(value, int) and value > 64)


WELL_FORMED_SIZES = {"weight_gap_bound": (2, 4, "bn", "l2"), "attention_cost": (2, 4, "bn", 2),
                     "make_generator": (2, 4, "bn", 1), "machine_description": (2, 4, "cpu", 1.0)}
"""Well-formed (d, k, scheme, x) where the default (2, 4, "bn", 1.0) is not: x is an omega, a batch, a seed; s a
device."""


@pytest.mark.parametrize("name", sorted(SIZE_FUNCTIONS))
def test_size_functions_keep_the_contract(name):
    @SETTINGS
    @given(ANY, ANY, SCHEME_ARGS, ANY)
    def run(d, k, scheme, x):
        check_contract(name, SIZE_FUNCTIONS[name], d, k, scheme, x)

    fuzz(run, [name], WELL_FORMED_SIZES.get(name, (2, 4, "bn", 1.0)))


def _model_for(X, C, scheme="bn", gamma=1.0):
    return K.ClusterTransformer(_size(X, 2, 2), _size(C, 1, 3), scheme, gamma=gamma, dtype=_dtype(X),
                                generator=torch.Generator().manual_seed(0))


MODEL_FUNCTIONS = {
    "center_trajectory": lambda X, C, x: K.center_trajectory(_model_for(X, C), X, C, x),
    "center_trajectory_naive": lambda X, C, x: K.center_trajectory(_model_for(X, C), X, C, 2, mode="naive", chunk=x),
    "loss_trajectory": lambda X, C, x: K.loss_trajectory(_model_for(X, C), X, C, x),
    "finite_gamma_error": lambda X, C, x: K.finite_gamma_error(X, C, "bn", x),
    "layer_trace": lambda X, C, x: K.layer_trace(_model_for(X, C), *K.embed(X, C, "bn")),
    "empirical_lipschitz": lambda X, C, x: K.empirical_lipschitz(X, C, "bn", gamma=x, pairs=4, generator=0),
    "filter_normalized_direction": lambda X, C, x: K.filter_normalized_direction(_model_for(X, C), generator=x),
    "loss_surface": lambda X, C, x: K.loss_surface(_model_for(X, C), X, C, [0.0, x], [-1.0, 1.0], generator=0),
    "evaluate_models": lambda X, C, x: K.evaluate_models({"m": _model_for(X, C)}, {"t": (X, C)}, steps=x),
    "center_trajectory_gammas": lambda X, C, x: K.center_trajectory(_model_for(X, C), X, C, 2, gammas=[1.0, x]),
    "padded_trajectory": lambda X, C, x: K.padded_trajectory(K.ClusterTransformer(
        _size(X, 2, 2) + 1, _size(C, 1, 3), "bn", dtype=_dtype(X), generator=torch.Generator().manual_seed(0)),
        X, C, x),
    "compare_algorithms": lambda X, C, x: K.compare_algorithms(K.lloyd_step, X, C, x, betas=[1.0, x],
                                                               alphas=[1.0], batch=1),
    "distance_attention": lambda X, C, x: K.distance_attention(
        X, C, *(torch.eye(_size(X, 2, 2), dtype=_dtype(X)),) * 3, gamma=x),
}


MODEL_REFUSAL_NAMES = {"evaluate_models": ("X", "C")}
"""Names a refusal may use beyond the parameters: ``evaluate_models`` takes its tasks inside ``tests``, as the
``(X, C)`` pairs its docstring names."""


@pytest.mark.parametrize("name", sorted(MODEL_FUNCTIONS))
def test_model_functions_keep_the_contract(name):
    @SETTINGS
    @given(tasks(), ANY)
    def run(pair, x):
        if not _small(x):
            x = 10**20  # the refusal is what is checked
        check_contract(name, MODEL_FUNCTIONS[name], *pair, x, refusal_names=MODEL_REFUSAL_NAMES.get(name, ()))

    fuzz(run, [name], (WELL_FORMED_TASKS, 2))  # x = 2: steps, a chunk, a gamma, a seed, a grid coordinate


def _evaluation_table():
    X, C = K.sample_tasks(2, 12, 2, 3, generator=0, dtype=torch.float64)
    models = {(fam, "bn"): K.ClusterTransformer.from_lloyd(2, 3, "bn") for fam in ("normal", "cauchy")}
    return K.evaluate_models(models, {"normal": (X, C), "cauchy": (X, C)}, steps=2)


EVALUATION = _evaluation_table()
# with the columns a sweep's history has (convergence_summary groups by them)
HISTORY = K.train(K.TrainConfig(d=2, k=3, n=8, steps=3, batch=2, seeds=(0, 1), val_tasks=2, val_every=1))[1].assign(
    scheme="bn", omega="l2")


@st.composite
def tables(draw, base):
    """A real table, sometimes damaged: rows or columns dropped, NaN written in, or not a table at all."""
    kind = draw(st.sampled_from(["intact", "no rows", "drop column", "nan", "none", "list", "dict"]))
    table = base.copy()
    if kind == "no rows":
        return table.iloc[:0]
    if kind == "drop column":
        return table.drop(columns=[draw(st.sampled_from(list(table.columns)))])
    if kind == "nan":
        numeric = [c for c in table.columns if table[c].dtype.kind == "f"]
        table.loc[table.index[draw(st.integers(0, len(table) - 1))], draw(st.sampled_from(numeric))] = math.nan
        return table
    if kind == "none":
        return None
    if kind == "list":
        return table.values.tolist()
    if kind == "dict":
        return {}
    return table


COST_TABLE = pd.DataFrame(dict(d=[2, 2], k=[4, 4], scheme=["oh", "bn"], d_emb=[6, 4], peak_mb=[10.0, 8.0],
                               forward_median_ms=[4.0, 2.0], backward_median_ms=[6.0, 3.0],
                               eval_median_ms=[3.0, 3.0]))

TABLE_FUNCTIONS = {
    "compare_schemes": (COST_TABLE, lambda t, x: K.compare_schemes(t, stat=x if isinstance(x, str) else "median")),
    "final_ratios": (EVALUATION, lambda t, x: K.final_ratios(t, step=x)),
    "family_matrix": (EVALUATION, lambda t, x: K.family_matrix(t, "bn", step=x)),
    "convergence_summary": (HISTORY, lambda t, x: K.convergence_summary(t, fraction=x)),
}


@pytest.mark.parametrize("name", sorted(TABLE_FUNCTIONS))
def test_table_functions_keep_the_contract(name):
    base, function = TABLE_FUNCTIONS[name]

    @SETTINGS
    @given(tables(base), st.sampled_from([None, None, 1, 2, 0, -1, 2.5, "1", 10**20, math.nan, 0.5]))
    def run(table, x):
        check_contract(name, function, table, x)

    fuzz(run, [name], (base, 0.5 if name == "convergence_summary" else None))


DISSIMILARITY_HELPERS = {
    "block_summary": lambda z, labels: K.block_summary(z.numpy() if isinstance(z, torch.Tensor) else z, labels),
    # {label: (X, C)}, or a task that is not a pair, or not a dict at all
    "block_labels": lambda z, labels: K.block_labels({"a": (z, z) if isinstance(labels, list) else z} if labels
                                                     else labels),
}


@pytest.mark.parametrize("name", sorted(DISSIMILARITY_HELPERS))
def test_dissimilarity_helpers_keep_the_contract(name):
    @SETTINGS
    @given(tensors(), st.sampled_from([None, [], ["a"], ["a", "b"], "ab", 3]))
    def run(z, labels):
        # block_labels names the entry of its tasks that it refuses (tasks['a']: X must ...): no names beyond its own
        check_contract(name, DISSIMILARITY_HELPERS[name], z, labels)

    fuzz(run, [name], (_rand(2, 2), ["a", "b"]) if name == "block_summary" else (_rand(2, 6, 2), ["a"]))


CONFIG_FIELDS = {
    "d": ANY, "k": ANY, "n": ANY, "scheme": SCHEME_ARGS, "omega": OMEGA_ARGS, "tau": ANY, "gamma": ANY, "lr": ANY,
    "steps": ANY, "batch": ANY, "family": st.sampled_from(["normal", "cauchy", ("normal", "gumbel"), (), "xx", 3]),
    "scale": ANY, "anisotropic": ANY, "unequal_weights": ANY, "clip": ANY,
    "seeds": st.sampled_from([(0,), (0, 1), (), (0, 0), (-1,), (2.5,), 3, None, ("a",)]),
    "device": st.sampled_from([None, "cpu", "xx", 3, "cuda:99"]), "val_tasks": ANY, "val_every": ANY,
    "val_seed": ANY, "impl": st.sampled_from(["sdpa", "direct", "auto", "xx", None]), "until_flat": ANY, "min_steps": ANY,
    "snapshots": ANY,
}


WELL_FORMED_FIELDS = {
    "d": 3, "k": 4, "n": 32, "scheme": "oh", "omega": "ne", "tau": 0.5, "gamma": 2.0, "lr": 0.001, "steps": 5,
    "batch": 4, "family": ("normal", "gumbel"), "scale": 0.2, "anisotropic": True, "unequal_weights": True,
    "clip": 1.0, "seeds": (0, 1), "device": "cpu", "val_tasks": 8, "val_every": 2, "val_seed": 1, "impl": "direct",
    "until_flat": 0.01, "min_steps": 2, "snapshots": True,
}
"""A valid value, not the default, for each fuzzed field."""


def test_train_config_fields_keep_the_contract():
    fields = st.sampled_from(sorted(CONFIG_FIELDS))

    @SETTINGS
    @given(fields.flatmap(lambda field: st.tuples(st.just(field), CONFIG_FIELDS[field])))
    def run(field_value):
        field, value = field_value
        check_contract(f"TrainConfig.{field}", K.TrainConfig, **{field: value})

    assert set(WELL_FORMED_FIELDS) == set(CONFIG_FIELDS)
    fuzz(run, [f"TrainConfig.{field}" for field in CONFIG_FIELDS], *[(item,) for item in WELL_FORMED_FIELDS.items()])


def test_non_tensor_input_is_refused_with_its_type():
    X, C = K.sample_tasks(2, 10, 2, 3, generator=0)
    for function in (K.sqdist, K.assign, K.lloyd, K.kmeans_objective, K.smoothed_kmeans_loss):
        with pytest.raises((TypeError, ValueError), match="ndarray"):
            function(X.numpy(), C.numpy())


# -- the checks themselves -------------------------------------------------------------------------


def test_argument_names_are_read_off_the_call():
    trajectory = argument_names(MORE_PAIR_FUNCTIONS["lloyd_trajectory"])
    assert {"X", "C", "steps"} <= trajectory and not {"self", "cls"} & trajectory
    # relative_loss and the layer the lambda builds with ClusterTransformer.from_lloyd
    assert {"model", "X", "C", "d", "k", "scheme", "gamma"} <= argument_names(MORE_PAIR_FUNCTIONS["relative_loss"])
    assert {"X", "C", "steps"} <= argument_names(K.ClusterTransformer.from_lloyd(2, 3))  # a model: its forward
    assert {"d", "k", "n", "scheme", "seeds"} <= argument_names(K.TrainConfig)  # a class: its __init__
    assert argument_names(K.sparsemax) == set(inspect.signature(K.sparsemax).parameters)
    # this file's helpers are not followed: _model_for's ClusterTransformer is not the call's
    assert "k" not in argument_names(MODEL_FUNCTIONS["center_trajectory"])
    assert argument_names(lambda z: z + 1) == set()
    assert argument_names(lambda z: z + 1, extra=("z",)) == {"z"}


def test_a_name_counts_as_a_whole_word():
    assert names_an_argument("X must have rank 3, got shape (4,)", {"X"})
    assert names_an_argument("TrainConfig.k must be <= n, got 9", {"k"})
    assert names_an_argument("X and C must share a dtype", {"C"})
    assert not names_an_argument("one Lloyd step reaches zero k-means loss", {"k"})
    assert not names_an_argument("d_emb must be an int", {"d"})
    assert not names_an_argument("Xs must be a tensor", {"X"})


def test_a_refusal_that_names_no_argument_breaks_the_contract():
    outcomes, problems = OUTCOMES.copy(), list(PROBLEMS)
    try:
        check_contract("lloyd", lambda X, C: K.lloyd(X, C, steps=0), *K.sample_tasks(1, 4, 2, 2, generator=0))
        assert OUTCOMES[("lloyd", "named error")] == outcomes[("lloyd", "named error")] + 1

        def refuses(X, C):
            raise ValueError("the input is wrong")

        with pytest.raises(AssertionError, match="naming none of its arguments"):
            check_contract("refuses", refuses, None, None)
        assert OUTCOMES[("refuses", "unnamed error")] == 1 and PROBLEMS[-1][0] == "refuses"
        check_contract("refuses", refuses, None, None, refusal_names=("input",))
    finally:
        OUTCOMES.clear()
        OUTCOMES.update(outcomes)
        PROBLEMS[:] = problems


@pytest.mark.parametrize("out", [
    {"a": math.nan},
    {"a": {"b": [1.0, torch.tensor([0.0, math.inf])]}},
    [torch.zeros(2), np.array([1.0, math.nan])],
    (1.0, np.float32(math.inf)),
    {"quotients": [0.5, np.float64(math.nan)]},
])
def test_a_non_finite_number_inside_an_output_breaks_the_contract(out):
    outcomes, problems = OUTCOMES.copy(), list(PROBLEMS)
    X, C = WELL_FORMED_TASKS
    try:
        with pytest.raises(AssertionError, match="non-finite values from finite input"):
            check_contract("returns_non_finite", lambda X, C: out, X, C)
    finally:
        OUTCOMES.clear()
        OUTCOMES.update(outcomes)
        PROBLEMS[:] = problems


def test_finite_containers_and_other_values_keep_the_contract():
    finite = {"a": 1.0, "b": [torch.ones(2), np.arange(3.0)], "c": ("x", 3, None, np.float32(2.0)),
              "d": torch.tensor([1, 2]), "e": np.array([True, False])}
    assert _finite(finite) and _no_nan(finite)
    # a diverged task is marked with inf, never NaN: inf passes the divergence-marked check, NaN does not
    assert _no_nan({"centers": torch.tensor([math.inf])}) and not _no_nan({"centers": [np.array([math.nan])]})
    # inputs are read the same way: a NaN inside a dict argument makes the input non-finite
    assert not _inputs_finite(torch.ones(2), {"a": [math.nan]})
