"""The book's shared figure helpers: curves, heatmaps, labels and captions (matplotlib only).

Most helpers draw on an axis they are given and return it, so a chapter keeps
control of the figure layout; :func:`six_curve_figure` lays out a whole
figure. The caption helpers (:func:`training_caption`, :func:`group_caption`)
write the line that every figure made from trained layers carries: the
profile, the sizes and the training budget.
"""

from __future__ import annotations

import os
import re

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = [
    "SCHEME_COLORS",
    "animation_html",
    "budget_caption",
    "group_caption",
    "heatmap",
    "interactive",
    "l2_label",
    "label_color",
    "median_iqr",
    "plot_task",
    "run_label",
    "six_curve_figure",
    "step_curves",
    "training_caption",
    "training_curves",
]

STATIC_WIDGETS = "KMTRF_STATIC_WIDGETS"
"""The environment variable under which :func:`interactive` draws one static figure instead of a slider."""


def interactive(function, **sliders):
    """A figure with sliders (``ipywidgets.interact``) where a notebook front end runs it; one static figure
    in headless builds.

    With the environment variable ``KMTRF_STATIC_WIDGETS=1`` (``make book`` and ``make test`` set it) the
    function is called once at the sliders' starting values and no widget is made at all: a built page
    could not move the slider anyway, and a widget (its comm messages) in a headless run can leave the
    notebook client waiting for a reply that never comes (jupyter/nbclient#312). On Colab or in Jupyter
    the slider works as usual.

    Parameters
    ----------
    function : callable
        Draws the figure from keyword arguments.
    **sliders
        ``name=dict(min=..., max=..., step=..., value=...)``: an ``ipywidgets.FloatSlider`` per argument of
        ``function``; ``value`` is where it starts.

    Returns
    -------
    The ``interact`` widget, or ``None`` when static.

    Examples
    --------
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {STATIC_WIDGETS: "1"}):
    ...     interactive(lambda x: print(f"drawn at x={x}"), x=dict(min=0.0, max=5.0, step=0.5, value=2.5))
    drawn at x=2.5
    """
    for name, spec in sliders.items():
        if not isinstance(spec, dict) or "value" not in spec:
            raise ValueError(f"slider {name!r} must be a dict of FloatSlider arguments with a 'value', got {spec!r}")
    if os.environ.get(STATIC_WIDGETS) == "1":
        function(**{name: spec["value"] for name, spec in sliders.items()})
        return None
    import ipywidgets  # only where a slider is made: headless builds never load it

    return ipywidgets.interact(function, **{name: ipywidgets.FloatSlider(**spec) for name, spec in sliders.items()})


SCHEME_COLORS = {"OH:NE": "tab:blue", "OH:L2": "tab:cyan", "BN:NE": "tab:red", "BN:L2": "tab:orange",
                 "NA:NE": "tab:green", "NA:L2": "tab:olive", "OH": "tab:blue", "BN": "tab:red", "NA": "tab:green"}
"""One colour per curve label, shared by the chapters."""


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def median_iqr(ax, x, Y, label: str | None = None, color=None, axis: int = 0, **kwargs):
    """Median curve with the inter-quartile ribbon of ``Y`` over ``axis`` (e.g. seeds or tasks).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    x : array_like
        ``(T,)`` abscissae.
    Y : array_like
        Curves, ``T`` along the axis other than ``axis``, e.g. ``(seeds, T)``.
    label : str, optional
        Legend label of the median curve.
    color : optional
        A matplotlib colour; default the next of the cycle.
    axis : int
        The axis of ``Y`` to take quantiles over.
    **kwargs
        Passed to ``ax.plot``.

    Returns
    -------
    matplotlib.axes.Axes
        ``ax``.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> Y = np.array([[1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [3.0, 4.0, 9.0]])
    >>> _ = median_iqr(ax, [0, 1, 2], Y, label="BN")
    >>> ax.get_lines()[0].get_ydata().tolist()
    [2.0, 3.0, 4.0]
    >>> plt.close(fig)
    """
    Y = _np(Y)
    q25, q50, q75 = np.percentile(Y, [25, 50, 75], axis=axis)
    (line,) = ax.plot(_np(x), q50, label=label, color=color, **kwargs)
    ax.fill_between(_np(x), q25, q75, color=line.get_color(), alpha=0.25, linewidth=0)
    return ax


def heatmap(ax, M, row_labels, col_labels, fmt: str = "{:.2f}", cmap: str = "Greens", text=None, **kwargs):
    """A matrix as coloured cells with a value (or ``text[i][j]``) written in each (Fig. 1, 8, 9).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    M : array_like
        ``(R, K)`` values.
    row_labels, col_labels : sequence
        ``R`` and ``K`` tick labels.
    fmt : str
        Format of the value written in a cell.
    cmap : str
        Colour map.
    text : sequence of sequence of str, optional
        ``(R, K)`` texts to write instead of the values.
    **kwargs
        Passed to ``ax.imshow``.

    Returns
    -------
    matplotlib.image.AxesImage
        The image, for a colour bar.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> im = heatmap(ax, np.array([[0.5, 1.0], [1.5, 2.0]]), ["a", "b"], [4, 8])
    >>> im.get_array().shape, [t.get_text() for t in ax.texts]
    ((2, 2), ['0.50', '1.00', '1.50', '2.00'])
    >>> plt.close(fig)
    """
    M = _np(M)
    im = ax.imshow(M, cmap=cmap, aspect="auto", **kwargs)
    ax.set_xticks(range(len(col_labels)), labels=[str(c) for c in col_labels])
    ax.set_yticks(range(len(row_labels)), labels=[str(r) for r in row_labels])
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            label = text[i][j] if text is not None else fmt.format(M[i, j])
            ax.text(j, i, label, ha="center", va="center", fontsize=7, color=label_color(im, M[i, j]))
    return im


def label_color(im, value) -> str:
    """``"white"`` on a dark cell of image ``im`` at ``value``, else ``"black"`` (by the cell's luminance).

    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> im = ax.imshow(np.array([[0.0, 1.0]]), cmap="Greens")
    >>> label_color(im, 0.0), label_color(im, 1.0)
    ('black', 'white')
    >>> plt.close(fig)
    """
    r, g, b, _ = im.cmap(im.norm(value))
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.45 else "black"


def plot_task(ax, X, C=None, labels=None, centers_after=None, s: float = 6.0):
    """Scatter one 2-D task: points (coloured by ``labels`` if given), centers as crosses.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    X : array_like or torch.Tensor
        Points ``(n, 2)``.
    C : array_like or torch.Tensor, optional
        Initial centers ``(k, 2)``.
    labels : array_like, optional
        ``(n,)`` cluster (or component) of every point.
    centers_after : array_like or torch.Tensor, optional
        Centers ``(k, 2)`` after some steps, drawn as stars and joined to
        their initial position.
    s : float
        Marker size of the points.

    Returns
    -------
    matplotlib.axes.Axes
        ``ax``.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from kmtrf_core.lloyd import lloyd
    >>> from kmtrf_core.tasks import sample_tasks
    >>> X, C = sample_tasks(1, 50, 2, 3, generator=0)
    >>> fig, ax = plt.subplots()
    >>> _ = plot_task(ax, X[0], C[0], centers_after=lloyd(X, C, steps=3)[0])
    >>> len(ax.collections), ax.get_legend_handles_labels()[1]
    (3, ['initial centers', 'final centers'])
    >>> plt.close(fig)
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
    """``("oh", "l2") -> "OH:L2"``: the paper's curve labels (Appendix F).

    Parameters
    ----------
    key : tuple or scalar
        A group key, e.g. ``(scheme, omega)``.

    Returns
    -------
    str

    Examples
    --------
    >>> run_label(("oh", "l2")), run_label("bn")
    ('OH:L2', 'BN')
    """
    key = key if isinstance(key, tuple) else (key,)
    return ":".join(str(v).upper() for v in key)


def l2_label(key) -> str:
    """Legend label of an L2 layer from its scheme or ``(family, scheme)`` key (chapters 11, 14).

    >>> l2_label("oh"), l2_label(("cauchy", "bn"))
    ('OH:L2', 'BN:L2')
    """
    scheme = key[-1] if isinstance(key, tuple) else key
    return run_label((scheme, "l2"))


def training_caption(sizes) -> str:
    """The layers' sizes for a figure caption: ``n, d, k, tau``, the training budget and seeds.

    Used in the captions of Figures 4, 6, 7 and 18 (chapters 10, 11 and 13).

    Parameters
    ----------
    sizes : Sizes
        A profile's ``section4`` sizes (``profile.chapter("section4")``).

    Returns
    -------
    str

    Examples
    --------
    >>> from kmtrf_core.book.profiles import get_profile
    >>> training_caption(get_profile("quick").chapter("section4"))
    'n=32, d=4, k=4, tau=0.1, trained until below Lloyd and flat for 20 steps (from step 30; cap 40), seeds [0, 1]'
    >>> training_caption(get_profile("paper").chapter("section4")).split(", ")[4]
    '10000 training steps'
    """
    return f"n={sizes.n}, d={sizes.d}, k={sizes.k}, tau={sizes.tau}, {budget_caption(sizes)}, seeds {sizes.seeds}"


def budget_caption(sizes) -> str:
    """The training budget in a few words, from a profile's sizes or a :class:`~kmtrf_core.training.TrainConfig`.

    >>> from kmtrf_core.training import TrainConfig
    >>> budget_caption(TrainConfig(steps=5000, until_flat=0.02, min_steps=2500, patience=2000))
    'trained until below Lloyd and flat for 2000 steps (from step 2500; cap 5000)'
    >>> budget_caption(TrainConfig(steps=10000))
    '10000 training steps'
    """
    if sizes.until_flat is None:
        return f"{sizes.steps} training steps"
    return f"trained until below Lloyd and flat for {sizes.patience} steps (from step {sizes.min_steps}; cap {sizes.steps})"


def group_caption(profile, group, extra: str = "") -> str:
    """The caption line of a figure made from a catalog group: profile, sizes, budget rule (Part III).

    >>> from kmtrf_core.book.catalog import book_catalog
    >>> catalog = book_catalog("quick")
    >>> group_caption(catalog.profile, catalog["openq_codes"]).startswith("profile `quick`")
    True
    """
    cfg = group.base
    text = (f"{profile.describe()}: d={cfg.d}, k={cfg.k}, n={cfg.n}, B={cfg.batch}, {cfg.omega.upper()}, "
            f"tau={cfg.tau:g}, gamma={cfg.gamma:g}, lr={cfg.lr:g}, {len(cfg.seeds)} seeds, {group.rule}")
    return f"{text}; {extra}" if extra else text


def training_curves(ax_train, ax_val, history, by=("scheme", "omega"), window: int = 10, x: str = "step",
                    lloyd: bool = True, colors: dict | None = None):
    """Training curves in the style of Figure 2, one per group of runs.

    Per group, the median and IQR over seeds of the training loss (a running
    mean over ``window`` steps) on ``ax_train`` and of the relative validation
    loss (Eq. 20) on ``ax_val``, with the one-Lloyd-step line at 1.

    Parameters
    ----------
    ax_train, ax_val : matplotlib.axes.Axes
        Where to draw the two panels.
    history : pandas.DataFrame
        The table of :func:`kmtrf_core.training.train` or :func:`~kmtrf_core.training.sweep`.
    by : tuple of str
        Columns that define a curve, labelled by :func:`run_label`.
    window : int
        Running-mean window of the training loss, in rows.
    x : {"step", "wall_time"}
        The abscissa.
    lloyd : bool
        Draw the line at 1 (one Lloyd step) on ``ax_val``.
    colors : dict, optional
        Label -> colour, e.g. :data:`SCHEME_COLORS`.

    Returns
    -------
    tuple
        ``(ax_train, ax_val)``.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> import pandas as pd
    >>> history = pd.DataFrame({"scheme": "bn", "omega": "l2", "seed": [0, 0, 1, 1], "step": [0, 1, 0, 1],
    ...     "train_loss": [np.nan, 2.0, np.nan, 3.0], "val_relative_loss": [1.2, 0.9, 1.3, 1.0]})
    >>> fig, (ax_train, ax_val) = plt.subplots(1, 2)
    >>> _ = training_curves(ax_train, ax_val, history)
    >>> [line.get_label() for line in ax_val.get_lines()]
    ['BN:L2', '1 Lloyd step']
    >>> plt.close(fig)
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


def step_curves(ax, table, value: str = "loss", colors: dict | None = None, lloyd: bool = True, label=run_label):
    """Multi-step curves (Fig. 6, 7, 12, 18), one per model of an evaluation table.

    Per model, the median and IQR over ensemble members of ``value`` after
    each step, and Lloyd's algorithm in black (its mean loss, or the line at 1
    for ratios). Diverged steps (infinite loss) are left out of the curve.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    table : pandas.DataFrame
        One test and one mode of :func:`kmtrf_core.evaluate.evaluate_models`.
    value : {"loss", "ratio"}
        The column to draw.
    colors : dict, optional
        Label -> colour; default :data:`SCHEME_COLORS`.
    lloyd : bool
        Draw Lloyd's algorithm.
    label : callable
        Model label -> legend label; default :func:`run_label`.

    Returns
    -------
    matplotlib.axes.Axes
        ``ax``.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> import pandas as pd
    >>> table = pd.DataFrame({"model": [("bn", "l2")] * 4, "member": [0, 0, 1, 1], "step": [0, 1, 0, 1],
    ...     "loss": [5.0, 3.0, 5.0, 2.0], "lloyd_loss": [5.0, 4.0, 5.0, 4.0], "ratio": [1.0, 0.75, 1.0, 0.5]})
    >>> fig, ax = plt.subplots()
    >>> _ = step_curves(ax, table, value="ratio")
    >>> [line.get_label() for line in ax.get_lines()], ax.get_lines()[0].get_ydata().tolist()
    (['BN:L2', 'Lloyd'], [1.0, 0.625])
    >>> plt.close(fig)
    """
    colors = SCHEME_COLORS if colors is None else colors
    for key, part in table.groupby("model", sort=False):
        wide = part.pivot_table(index="step", columns="member", values=value, aggfunc="first")
        Y = wide.to_numpy().T.astype(float)
        Y[~np.isfinite(Y)] = np.nan
        name = label(key)
        keep = ~np.isnan(Y).any(axis=0)
        if keep.any():
            median_iqr(ax, wide.index.to_numpy()[keep], Y[:, keep], label=name, color=colors.get(name))
    if lloyd:
        if value == "ratio":
            ax.axhline(1.0, color="black", lw=1.2, label="Lloyd")
        else:
            ref = table.groupby("step").lloyd_loss.first()
            ax.plot(ref.index.to_numpy(), ref.to_numpy(), color="black", lw=1.5, label="Lloyd")
    ax.set_xlabel("clustering step t")
    ax.set_ylabel("k-means loss" if value == "loss" else "loss / Lloyd's loss")
    return ax


def animation_html(anim) -> str:
    """A matplotlib animation as a self-contained HTML/JS player, with no request to a CDN.

    ``anim.to_jshtml()`` links Font Awesome 4.4 from maxcdn.bootstrapcdn.com for its button
    icons; the book's theme already ships Font Awesome (whose ``fa fa-play`` style names it
    still accepts), so the link is dropped and the page loads nothing from outside.

    Parameters
    ----------
    anim : matplotlib.animation.Animation

    Returns
    -------
    str
        HTML to pass to ``IPython.display.HTML``.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from matplotlib.animation import FuncAnimation
    >>> fig, ax = plt.subplots()
    >>> (line,) = ax.plot([0, 1], [0, 1])
    >>> html = animation_html(FuncAnimation(fig, lambda i: (line,), frames=2))
    >>> plt.close(fig)
    >>> "bootstrapcdn" in html, "<script" in html
    (False, True)
    """

    html = anim.to_jshtml()
    return re.sub(r"<link[^>]*font-awesome[^>]*>\s*", "", html)


def six_curve_figure(history, panel_col: str, panel_values, title: str, *, window: int = 10,
                     x: str = "step", by=("scheme", "omega"), colors: dict | None = None,
                     linthresh: float | None = 100):
    """One column of panels per value of ``panel_col``, each with one curve per run group.

    Top row: the training loss (log scale, running mean over ``window``
    steps); bottom row: the relative validation loss (Eq. 20) with the
    one-Lloyd-step line at 1; median and inter-quartile ribbon over seeds
    (:func:`training_curves`). The step axis is
    logarithmic beyond ``linthresh`` (linear below it, so step 0 shows), so
    the plateau and the drop both get room. Chapter 9 draws Figure 2 and the
    ablations of Appendix F with it.

    Parameters
    ----------
    history : pandas.DataFrame
        From :func:`~kmtrf_core.training.sweep`, with a ``panel_col`` column.
    panel_col : str
        The column whose values make the panels.
    panel_values : sequence
        The values, one panel each, in this order.
    title : str
        The figure's caption.
    window : int
        Running-mean window of the training loss.
    x : {"step", "wall_time"}
        The abscissa; the panels share it when it is ``"step"``.
    by : tuple of str
        Columns that define a curve.
    colors : dict, optional
        Curve label -> colour; default :data:`SCHEME_COLORS`.
    linthresh : float or None
        With ``x="step"``: the symmetric-log axis is linear up to this step;
        ``None`` keeps a linear axis.

    Returns
    -------
    matplotlib.figure.Figure
        Not shown yet: a chapter calls ``plt.show()``.

    Examples
    --------
    >>> import pandas as pd
    >>> history = pd.DataFrame({"tau": 0.1, "scheme": "bn", "omega": "l2", "seed": [0, 0, 1, 1],
    ...     "step": [0, 1, 0, 1], "train_loss": [np.nan, 2.0, np.nan, 3.0],
    ...     "val_relative_loss": [1.2, 0.9, 1.3, 1.0]})
    >>> fig = six_curve_figure(history, "tau", [0.1], "a test")
    >>> [ax.get_title() for ax in fig.axes], fig.axes[1].get_legend() is not None
    (['tau = 0.1', ''], True)
    >>> plt.close(fig)
    """
    panel_values = list(panel_values)
    if not panel_values:
        raise ValueError("panel_values must not be empty")
    colors = SCHEME_COLORS if colors is None else colors
    fig, axes = plt.subplots(2, len(panel_values), figsize=(5 * len(panel_values), 6.4),
                             sharex=x == "step", squeeze=False)
    for j, value in enumerate(panel_values):
        part = history[history[panel_col] == value]
        training_curves(axes[0, j], axes[1, j], part, by=by, window=window, x=x, colors=colors)
        axes[0, j].set_title(f"{panel_col} = {value}")
        axes[0, j].set_yscale("log")
        if x == "step" and linthresh is not None:
            axes[1, j].set_xscale("symlog", linthresh=linthresh)
    axes[1, -1].legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=9)
    return fig
