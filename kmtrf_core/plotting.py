"""The book's few shared figure helpers (matplotlib only).

Each helper draws on an axis it is given and returns it, so a chapter keeps
control of the figure layout and the caption.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["median_iqr", "heatmap", "plot_task", "training_curves", "run_label"]


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def median_iqr(ax, x, Y, label: str | None = None, color=None, axis: int = 0, **kwargs):
    """Median curve with the inter-quartile ribbon of ``Y`` over ``axis`` (e.g. seeds or tasks).

    Parameters
    ----------
    ax : matplotlib Axes
    x : array ``(T,)``
    Y : array with ``T`` along the other axis, e.g. ``(seeds, T)``.
    """
    Y = _np(Y)
    q25, q50, q75 = np.percentile(Y, [25, 50, 75], axis=axis)
    (line,) = ax.plot(_np(x), q50, label=label, color=color, **kwargs)
    ax.fill_between(_np(x), q25, q75, color=line.get_color(), alpha=0.25, linewidth=0)
    return ax


def heatmap(ax, M, row_labels, col_labels, fmt: str = "{:.2f}", cmap: str = "Greens", text=None, **kwargs):
    """A matrix as coloured cells with a value (or ``text[i][j]``) written in each.

    Returns the image, for a colour bar.
    """
    M = _np(M)
    im = ax.imshow(M, cmap=cmap, aspect="auto", **kwargs)
    ax.set_xticks(range(len(col_labels)), labels=[str(c) for c in col_labels])
    ax.set_yticks(range(len(row_labels)), labels=[str(r) for r in row_labels])
    lo, hi = np.nanmin(M), np.nanmax(M)
    mid = (lo + hi) / 2
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            label = text[i][j] if text is not None else fmt.format(M[i, j])
            ax.text(j, i, label, ha="center", va="center", fontsize=7, color="white" if M[i, j] > mid else "black")
    return im


def plot_task(ax, X, C=None, labels=None, centers_after=None, s: float = 6.0):
    """Scatter one 2-D task: points (coloured by ``labels`` if given), centers as crosses.

    Parameters
    ----------
    X : ``(n, 2)``; C : ``(k, 2)`` initial centers; labels : ``(n,)``;
    centers_after : ``(k, 2)`` centers after some steps, drawn as stars and
    joined to their initial position.
    """
    X = _np(X)
    if labels is None:
        ax.scatter(X[:, 0], X[:, 1], s=s, color="tab:blue", alpha=0.7)
    else:
        ax.scatter(X[:, 0], X[:, 1], c=_np(labels), s=s, cmap="tab10", alpha=0.7)
    if C is not None:
        C = _np(C)
        ax.scatter(C[:, 0], C[:, 1], marker="x", c="black", s=50, label="initial centers")
        if centers_after is not None:
            A = _np(centers_after)
            ax.scatter(A[:, 0], A[:, 1], marker="*", c="red", edgecolors="black", s=140, label="final centers")
            for c0, c1 in zip(C, A):
                ax.plot([c0[0], c1[0]], [c0[1], c1[1]], color="gray", linewidth=0.8)
    ax.set_aspect("equal")
    return ax


def run_label(key) -> str:
    """``("oh", "l2") -> "OH:L2"``: the paper's curve labels (Appendix F)."""
    key = key if isinstance(key, tuple) else (key,)
    return ":".join(str(v).upper() for v in key)


def training_curves(ax_train, ax_val, history, by=("scheme", "omega"), window: int = 10, x: str = "step",
                    lloyd: bool = True, colors: dict | None = None):
    """Figure 2 style: per group, the median and IQR over seeds of the training loss
    (a running mean over ``window`` steps) on ``ax_train`` and of the relative
    validation loss (Eq. 20) on ``ax_val``, with the one-Lloyd-step line at 1.

    ``history`` is the table of :func:`kmtrf_core.train.train` or
    :func:`~kmtrf_core.train.sweep`; ``x`` is ``"step"`` or ``"wall_time"``.
    """
    for key, part in history.groupby(list(by)):
        label = run_label(key)
        color = None if colors is None else colors.get(label)
        tr = part.dropna(subset=["train_loss"]).pivot_table(index=x, columns="seed", values="train_loss")
        tr = tr.rolling(window, min_periods=1).mean()
        median_iqr(ax_train, tr.index.to_numpy(), tr.to_numpy().T, label=label, color=color)
        va = part.dropna(subset=["val_relative_loss"]).pivot_table(index=x, columns="seed", values="val_relative_loss")
        median_iqr(ax_val, va.index.to_numpy(), va.to_numpy().T, label=label, color=color)
    if lloyd:
        ax_val.axhline(1.0, color="black", ls=":", lw=1, label="1 Lloyd step")
    ax_train.set_ylabel("training loss")
    ax_val.set_ylabel("relative validation loss")
    ax_val.set_xlabel("wall time (s)" if x == "wall_time" else "step")
    return ax_train, ax_val
