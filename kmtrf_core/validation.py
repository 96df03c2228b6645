"""Argument checks: one helper per kind of argument, one message per mistake.

Every public function of :mod:`kmtrf_core` validates what it is given with
these helpers and raises ``ValueError`` naming the offending argument, so a
wrong shape or a NaN fails at the call site instead of deep inside a matrix
product, and the same mistake reads the same wherever it is made.

Examples
--------
>>> check_int(3, "steps")
3
>>> check_int(1, "k", minimum=2)
Traceback (most recent call last):
...
ValueError: k must be an int >= 2, got 1
>>> check_choice("BN", "scheme", ("oh", "bn"))
'bn'
>>> check_number(0.0, "tau")
Traceback (most recent call last):
...
ValueError: tau must be a positive finite number, got 0.0
"""

from __future__ import annotations

import math
import numbers

import torch

__all__ = ["FLOAT_DTYPES", "INT64_MAX", "check_choice", "check_table", "check_clusters", "check_finite_result",
           "check_float_dtype", "check_int", "check_number", "check_points_centers", "check_same_dtype", "check_tensor"]


def _is_int(value) -> bool:
    # any integer, NumPy's included (numbers.Integral); bool is an int subclass, but True is no count of
    # anything (NumPy's bool_ is no numbers.Integral, so it is refused too)
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


INT64_MAX = 2**63 - 1
"""The largest int :func:`check_int` accepts: torch and numpy count in int64."""


def check_int(value, name: str, minimum: int | None = 1, maximum: int = INT64_MAX) -> int:
    """An int (not a bool) that is at least ``minimum`` (no bound when ``None``) and at most ``maximum``.

    Any integer type counts (a NumPy integer such as ``np.int64(2)`` too); it is
    returned as a Python ``int``. The default ``maximum`` is the int64 range, so
    a count or seed too large for torch fails here, by name, instead of deep
    inside as an ``OverflowError``.

    >>> check_int(0, "warmup", minimum=0), check_int(-5, "seed", minimum=None)
    (0, -5)
    >>> import numpy as np
    >>> check_int(np.int64(2), "batch")
    2
    >>> check_int(True, "steps")
    Traceback (most recent call last):
    ...
    ValueError: steps must be an int >= 1, got True
    >>> check_int(10**20, "k")
    Traceback (most recent call last):
    ...
    ValueError: k must be an int <= 9223372036854775807 (int64), got 100000000000000000000
    """
    if not _is_int(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name} must be an int{bound}, got {value!r}")
    if value > maximum or value < -INT64_MAX - 1:
        limit = f"{maximum} (int64)" if maximum == INT64_MAX else str(maximum)
        raise ValueError(f"{name} must be an int <= {limit}, got {value!r}")
    return int(value)


def check_choice(value, name: str, choices) -> str:
    """One of ``choices`` (case-insensitive for strings); returns it in lower case.

    >>> check_choice("L2", "omega", ("ne", "l2"))
    'l2'
    >>> check_choice("l1", "omega", ("ne", "l2"))
    Traceback (most recent call last):
    ...
    ValueError: omega must be one of ('ne', 'l2'), got 'l1'
    """
    key = value.lower() if isinstance(value, str) else value
    if key not in tuple(choices):
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return key


def check_number(value, name: str, *, allow_inf: bool = False, allow_zero: bool = False) -> float:
    """A real number ``> 0`` (``>= 0`` with ``allow_zero``), finite unless ``allow_inf``; returned as a float.

    Any real number (an int, a float, a NumPy scalar such as ``np.float32(1.0)``)
    or a one-element real tensor; a bool is refused.

    >>> check_number(math.inf, "gamma", allow_inf=True), check_number(2, "lr")
    (inf, 2.0)
    >>> import numpy as np
    >>> check_number(np.float32(0.5), "gamma")
    0.5
    >>> check_number(float("nan"), "gamma", allow_inf=True)
    Traceback (most recent call last):
    ...
    ValueError: gamma must be a positive number or math.inf, got nan
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)  # NumPy's bool_ is no numbers.Real
    if not ok and isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex:
        value, ok = value.item(), True
    if ok:
        value = float(value)
        ok = (value >= 0 if allow_zero else value > 0) and (math.isfinite(value) or (allow_inf and value == math.inf))
    if not ok:
        sign = "non-negative" if allow_zero else "positive"
        kind = "number or math.inf" if allow_inf else "finite number"
        raise ValueError(f"{name} must be a {sign} {kind}, got {value!r}")
    return value


def check_clusters(k, n, name: str = "k") -> int:
    """A number of clusters: an int ``>= 2`` and at most the number of points ``n``.

    >>> check_clusters(7, 5)
    Traceback (most recent call last):
    ...
    ValueError: k must be <= n, got k=7 centers for n=5 points
    """
    check_int(k, name, minimum=2)
    if k > n:
        raise ValueError(f"{name} must be <= n, got {name}={k} centers for n={n} points")
    return k


FLOAT_DTYPES = (torch.float32, torch.float64)
"""The dtypes the package computes in; anything else is refused by :func:`check_tensor`."""


def check_float_dtype(dtype, name: str = "dtype") -> torch.dtype:
    """A dtype the package computes in: ``torch.float32`` or ``torch.float64`` (:data:`FLOAT_DTYPES`).

    A function that creates tensors checks its ``dtype`` argument here, so
    float16, bfloat16 or an integer dtype fails up front, by the argument's name,
    instead of later at a tensor check under another name.

    >>> check_float_dtype(torch.float64)
    torch.float64
    >>> check_float_dtype(torch.float16)
    Traceback (most recent call last):
    ...
    ValueError: dtype must be torch.float32 or torch.float64, got torch.float16
    """
    if not isinstance(dtype, torch.dtype) or dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be torch.float32 or torch.float64, got {dtype!r}")
    return dtype


def check_tensor(x, name: str, rank: int | None, last: int | None = None, *, min_rank: int = 0,
                 nonempty: bool = True) -> torch.Tensor:
    """A float32 or float64 tensor of the given rank (any rank for ``None``) with finite entries.

    Parameters
    ----------
    x : object
        The argument.
    name : str
        Its name, for the message.
    rank : int or None
        The exact rank, or ``None``.
    last : int, optional
        The required size of the last dimension.
    min_rank : int
        With ``rank=None``, the least rank.
    nonempty : bool
        Refuse a tensor with a dimension of size 0.

    Raises
    ------
    ValueError
        Naming ``name`` and what was expected: not a tensor, a dtype other than
        float32/float64 (float16, integers and bool are not cast silently), a
        wrong rank or last dimension, an empty dimension, or NaN/inf entries.

    Examples
    --------
    >>> check_tensor(torch.zeros(2, 3), "X", 2, last=3).shape
    torch.Size([2, 3])
    >>> check_tensor(torch.tensor([1.0, float("inf")]), "z", None)
    Traceback (most recent call last):
    ...
    ValueError: z has non-finite values (nan or inf)
    >>> check_tensor(torch.zeros(2, 3, dtype=torch.float16), "X", 2)
    Traceback (most recent call last):
    ...
    ValueError: X must be a float32 or float64 tensor, got dtype torch.float16 (convert it with .float() or .double())
    >>> check_tensor(torch.zeros(2, 0), "X", 2)
    Traceback (most recent call last):
    ...
    ValueError: X must not have an empty dimension, got shape (2, 0)
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if rank is not None and x.dim() != rank:
        raise ValueError(f"{name} must have rank {rank}, got shape {tuple(x.shape)}")
    if rank is None and x.dim() < min_rank:
        raise ValueError(f"{name} must have rank >= {min_rank}, got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be a float32 or float64 tensor, got dtype {x.dtype} "
                         "(convert it with .float() or .double())")
    if last is not None and x.shape[-1] != last:
        raise ValueError(f"{name} must have last dimension {last}, got shape {tuple(x.shape)}")
    if nonempty and 0 in x.shape:
        raise ValueError(f"{name} must not have an empty dimension, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} has non-finite values (nan or inf)")
    return x


def check_same_dtype(a: torch.Tensor, b: torch.Tensor, names: str) -> None:
    """Two tensors of one dtype, or a ``ValueError`` naming both.

    >>> check_same_dtype(torch.zeros(1), torch.zeros(1, dtype=torch.float64), "X and C")
    Traceback (most recent call last):
    ...
    ValueError: X and C must share a dtype, got torch.float32 and torch.float64
    """
    if a.dtype != b.dtype:
        raise ValueError(f"{names} must share a dtype, got {a.dtype} and {b.dtype}")


def check_finite_result(x: torch.Tensor, what: str) -> torch.Tensor:
    """A computed tensor that must be finite; else a ``ValueError`` saying the input's range overflowed.

    >>> check_finite_result(torch.tensor([1.0, float("inf")]), "squared distances")
    Traceback (most recent call last):
    ...
    ValueError: squared distances overflow torch.float32 at this input's scale; rescale the data (for example with kmtrf_core.to_unit_cube) or use float64
    """
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{what} overflow {x.dtype} at this input's scale; rescale the data (for example "
                         "with kmtrf_core.to_unit_cube) or use float64")
    return x


def check_points_centers(X, C, k_le_n: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a batch of tasks: points ``X`` (B, n, d) and centers ``C`` (B, k, d); returns ``(X, C)``.

    Both pass :func:`check_tensor`, share ``B``, ``d`` and the dtype, and
    ``k >= 2``. ``k_le_n=False`` allows more centers than points (loss
    evaluations of a few points); clustering itself needs ``k <= n``.

    >>> X, C = check_points_centers(torch.rand(2, 5, 3), torch.rand(2, 4, 3))
    >>> check_points_centers(torch.rand(2, 5, 3), torch.rand(2, 4, 2))
    Traceback (most recent call last):
    ...
    ValueError: C must have the same d as X: X has d=3, C has d=2
    """
    check_tensor(X, "X", 3)
    check_tensor(C, "C", 3)
    if X.shape[0] != C.shape[0]:
        raise ValueError(f"X and C must have the same batch size, got {X.shape[0]} and {C.shape[0]}")
    if X.shape[2] != C.shape[2]:
        raise ValueError(f"C must have the same d as X: X has d={X.shape[2]}, C has d={C.shape[2]}")
    k, n = C.shape[1], X.shape[1]
    if k < 2:
        raise ValueError(f"C must hold k >= 2 centers, got k={k}")
    if k_le_n and k > n:
        raise ValueError(f"C must hold at most as many centers as X has points (k <= n), got k={k} for n={n}")
    check_same_dtype(X, C, "X and C")
    return X, C


def check_table(table, name: str, columns) -> "pandas.DataFrame":
    """A non-empty ``pandas.DataFrame`` holding ``columns``; else a ``ValueError`` naming what is missing.

    >>> import pandas as pd
    >>> check_table(pd.DataFrame({"step": [0, 1]}), "table", ["step"]).shape
    (2, 1)
    >>> check_table(pd.DataFrame({"step": [0, 1]}), "table", ["step", "ratio"])
    Traceback (most recent call last):
    ...
    ValueError: table lacks the column(s) ['ratio'] (it has ['step'])
    """
    import pandas as pd  # only table checks need pandas; tensors are checked without importing it

    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas.DataFrame, got {type(table).__name__}")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{name} lacks the column(s) {missing} (it has {list(table.columns)})")
    if table.empty:
        raise ValueError(f"{name} has no rows")
    return table
