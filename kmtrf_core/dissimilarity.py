"""How different are two clustering tasks? Earth mover's distances between tasks (Fig. 9, Fig. 19).

Section 4 of the paper describes a task ``(X, C)`` by the empirical
distribution of the ``n k`` squared distances ``|x_i - c_j|^2`` between its
points and its initial centers, and compares two tasks by the earth mover's
(1-Wasserstein) distance between these distributions. On the real line that
distance is exact and cheap: with sorted samples it is the area between the
two quantile functions. We compute it with POT (Flamary et al., 2021),
``ot.wasserstein_1d``, for all pairs at once; ``method="sorted"`` is the
same identity written out for equal sample sizes (the mean absolute
difference of the sorted samples), which the tests check against POT and
against POT's linear-programming solver ``ot.emd2``.

Used in the chapter on task dissimilarities.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from .validation import check_choice, check_int, check_points_centers
from .attention import sqdist

__all__ = ["distance_samples", "emd_matrix", "block_summary", "block_labels"]

METHODS = ("pot", "sorted")


def distance_samples(X: torch.Tensor, C: torch.Tensor) -> np.ndarray:
    """Per task, the sorted ``n k`` squared distances between points and centers.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.

    Returns
    -------
    numpy.ndarray
        ``(B, n k)`` float64, each row sorted ascending.

    Examples
    --------
    >>> X = torch.tensor([[[0.], [2.]]]); C = torch.tensor([[[0.], [1.]]])
    >>> distance_samples(X, C).tolist()
    [[0.0, 1.0, 1.0, 4.0]]
    """
    check_points_centers(X, C, k_le_n=False)
    D = sqdist(X.double(), C.double())  # (B, n, k)
    return np.sort(D.flatten(1).cpu().numpy(), axis=1)


def _check_samples(samples) -> list:
    if isinstance(samples, torch.Tensor):
        samples = samples.detach().cpu().numpy()
    if isinstance(samples, np.ndarray):
        if samples.ndim != 2:
            raise ValueError(f"samples must be 2-D (tasks, values) or a list of 1-D arrays, got shape {samples.shape}")
        rows = list(samples)
    elif isinstance(samples, (list, tuple)):
        rows = [np.asarray(r.detach().cpu().numpy() if isinstance(r, torch.Tensor) else r, dtype=np.float64)
                for r in samples]
    else:
        raise ValueError(f"samples must be an array or a list of 1-D arrays, got {type(samples).__name__}")
    if len(rows) < 1:
        raise ValueError("samples must hold at least one task")
    for i, r in enumerate(rows):
        if r.ndim != 1 or r.size == 0:
            raise ValueError(f"samples[{i}] must be a non-empty 1-D array, got shape {r.shape}")
        if not np.isfinite(r).all():
            raise ValueError(f"samples[{i}] has non-finite values")
    return [np.asarray(r, dtype=np.float64) for r in rows]


def emd_matrix(samples, method: str = "pot", chunk: int = 256) -> np.ndarray:
    """Pairwise exact 1-D earth mover's distances between the empirical distributions of tasks.

    Parameters
    ----------
    samples : array ``(N, P)`` or list of 1-D arrays
        One row of values per task (e.g. :func:`distance_samples`), each with
        uniform weights; rows of a list may differ in length.
    method : {"pot", "sorted"}
        ``"pot"``: ``ot.wasserstein_1d`` on all pairs, ``chunk`` pairs per call.
        ``"sorted"``: the mean absolute difference of sorted rows (equal
        lengths only), with no POT call. Either in any case (``"POT"``).
    chunk : int
        Pairs per POT call.

    Returns
    -------
    numpy.ndarray
        ``(N, N)``, symmetric, zero on the diagonal.

    Examples
    --------
    >>> emd_matrix([[0.0, 1.0], [1.0, 2.0], [0.0, 3.0]])
    array([[0., 1., 1.],
           [1., 0., 1.],
           [1., 1., 0.]])
    """
    rows = _check_samples(samples)
    method = check_choice(method, "method", METHODS)
    check_int(chunk, "chunk")
    N = len(rows)
    out = np.zeros((N, N))
    iu, ju = np.triu_indices(N, k=1)
    if iu.size == 0:
        return out
    lengths = {r.size for r in rows}
    if method == "sorted":
        if len(lengths) != 1:
            raise ValueError("method='sorted' needs every task to have the same number of values; use 'pot'")
        S = torch.from_numpy(np.sort(np.stack(rows), axis=1))
        values = (torch.cdist(S.unsqueeze(0), S.unsqueeze(0), p=1)[0] / S.shape[1]).numpy()
        out[iu, ju] = values[iu, ju]
    else:
        import ot  # POT is imported only when an EMD is computed: its import takes seconds

        if len(lengths) == 1:
            M = np.stack(rows)  # (N, P)
            for start in range(0, iu.size, chunk):
                a, b = iu[start : start + chunk], ju[start : start + chunk]
                out[a, b] = ot.wasserstein_1d(M[a].T, M[b].T, p=1)  # one column per pair
        else:
            for a, b in zip(iu, ju):
                out[a, b] = float(ot.wasserstein_1d(rows[a], rows[b], p=1))
    out[ju, iu] = out[iu, ju]
    return out


def block_labels(tasks: dict) -> list:
    """The block label of every task of ``{label: (X, C)}`` in order, e.g. ``["normal"] * m + ...``.

    The labels that :func:`block_summary` groups by, for the tasks stacked
    block after block (Fig. 9, Fig. 19).

    Parameters
    ----------
    tasks : dict
        Label -> ``(X, C)`` with ``X`` ``(B_label, n, d)``, e.g. from
        :func:`~kmtrf_core.tasks.family_tasks`.

    Returns
    -------
    list
        ``sum(B_label)`` labels.

    Examples
    --------
    >>> tasks = {"normal": (torch.zeros(2, 5, 1), torch.zeros(2, 2, 1)),
    ...          "cauchy": (torch.zeros(1, 5, 1), torch.zeros(1, 2, 1))}
    >>> block_labels(tasks)
    ['normal', 'normal', 'cauchy']
    >>> block_labels({"normal": (torch.zeros(2, 5, 1), torch.zeros(2, 1, 1))})
    Traceback (most recent call last):
    ...
    ValueError: tasks['normal']: C must hold k >= 2 centers, got k=1
    """
    if not isinstance(tasks, dict):
        raise ValueError(f"tasks must be a dict label -> (X, C), got {type(tasks).__name__}")
    labels = []
    for label, pair in tasks.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"tasks[{label!r}] must be a pair (X, C)")
        try:
            check_points_centers(*pair, k_le_n=False)
        except ValueError as err:  # the message names X or C: say which entry of tasks they are
            raise ValueError(f"tasks[{label!r}]: {err}") from None
        labels += [label] * pair[0].shape[0]
    return labels


def block_summary(D, labels, include_diagonal: bool = False):
    """Mean distance between the tasks of each pair of blocks (e.g. families).

    Parameters
    ----------
    D : array ``(N, N)``
        A dissimilarity matrix.
    labels : sequence of length ``N``
        The block of each task; blocks are listed in order of first appearance.
    include_diagonal : bool
        Within a block, whether the zero distances of tasks to themselves count.

    Returns
    -------
    pandas.DataFrame
        Blocks x blocks of mean distances. Without the diagonal, a block of
        one task has no pair of tasks within it: its own entry is NaN (not a
        distance of 0).

    Examples
    --------
    >>> D = emd_matrix([[0.0], [0.5], [3.0], [4.0]])
    >>> block_summary(D, ["a", "a", "b", "b"]).round(2).values.tolist()
    [[0.5, 3.25], [3.25, 1.0]]
    >>> block_summary(D, ["a", "a", "a", "b"]).round(2).values.tolist()
    [[2.0, 2.83], [2.83, nan]]
    """
    D = np.asarray(D, dtype=np.float64)
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__iter__"):
        raise ValueError(f"labels must be a sequence of block names, one per task, got {labels!r}")
    labels = list(labels)
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise ValueError(f"D must be a square matrix, got shape {D.shape}")
    if len(labels) != D.shape[0]:
        raise ValueError(f"labels must have one entry per task ({D.shape[0]}), got {len(labels)}")
    blocks = list(dict.fromkeys(labels))
    lab = np.asarray(labels, dtype=object)
    out = np.zeros((len(blocks), len(blocks)))
    for i, a in enumerate(blocks):
        for j, b in enumerate(blocks):
            ia, jb = np.nonzero(lab == a)[0], np.nonzero(lab == b)[0]
            sub = D[np.ix_(ia, jb)]
            if a == b and not include_diagonal:
                mask = ~np.eye(len(ia), dtype=bool)
                out[i, j] = sub[mask].mean() if mask.any() else np.nan  # one task: no pair within the block
            else:
                out[i, j] = sub.mean()
    return pd.DataFrame(out, index=blocks, columns=blocks)
