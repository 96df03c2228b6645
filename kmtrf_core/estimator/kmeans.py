"""A scikit-learn clustering estimator whose update step is a transformer layer.

:class:`TransformerKMeans` runs k-means iterations in which each step is
either Lloyd's update (``layer="lloyd"``: what the constructed layer of
Theorem 2.1 computes at ``gamma = inf``, in closed form) or one application
of a transformer layer (``layer="learned"``, a
:class:`~kmtrf_core.model.ClusterTransformer`, or a checkpoint file). It has
the scikit-learn estimator API (``fit``, ``predict``, ``fit_predict``,
``transform``, ``score``; ``cluster_centers_``, ``labels_``, ``inertia_``,
``n_iter_``), validates its input with scikit-learn's own utilities, and works
inside a ``Pipeline`` or ``GridSearchCV``.

Everything that touches all the points (assignments, sums, distances) runs in
chunks of ``chunk_size`` points, so a million points in ``d = 16`` fit in
bounded memory on top of the data itself.

Used in the real-data chapter.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.cluster import kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..attention import task_sqdist
from ..device import resolve_device
from ..model import ClusterTransformer, check_model
from ..validation import check_finite_result
from ..training import TrainConfig, train_cached
from ..training.convergence import validation_curve
from ..training.checkpoints import load_checkpoint, load_weights
from ..training.config import layer_for

__all__ = ["LAYERS", "TransformerKMeans", "learned_config", "load_layer"]

LAYERS = ("lloyd", "learned")
"""The named update steps of :class:`TransformerKMeans` (a model or a checkpoint path also work)."""

# The recipe a learned layer for a new (d, k) is trained with: chapter 15's "plain" recipe at the book
# profile (Section 4 / Appendix D: normal mixtures, BN, the sparsemax loss at tau 0.1, gamma 1, lr 0.01),
# trained until its validation curve is flat (kmtrf_core.training.convergence). Equal configs share the
# run cache, so for the book's data sets the estimator loads the layer chapter 15 shows; a test
# (tests/test_book_ch15_real_data.py) keeps the two equal.
_LEARNED = dict(n=64, scheme="bn", omega="l2", tau=0.1, gamma=1.0, lr=0.01, batch=32, seeds=(0,), steps=5000,
                min_steps=2500, until_flat=0.02, patience=2000, val_tasks=128, val_every=100, impl="direct")


def learned_config(d: int, k: int, **overrides):
    """The :class:`~kmtrf_core.training.TrainConfig` of the layer ``layer="learned"`` trains for ``(d, k)``.

    BN codes, the sparsemax-smoothed loss (L2, ``tau = 0.1``), ``gamma = 1``,
    lr 0.01 on normal mixtures of ``n = 64`` points (Appendix D), one seed,
    trained by the stop rule (beat Lloyd on the validation tasks and flat for
    2000 steps, from step 2500, cap 5000), with the direct attention kernel; this is chapter 15's
    ``plain`` layer at the book profile, less its other two seeds (the chapter trains seeds 0, 1 and 2
    as one ensemble, which equals three separate runs up to rounding). ``overrides`` replace any field (for
    example a broader task distribution: ``family=("normal", "gumbel")``,
    ``anisotropic=True``).

    >>> cfg = learned_config(4, 3)
    >>> cfg.d, cfg.k, cfg.scheme, cfg.omega, cfg.until_flat
    (4, 3, 'bn', 'l2', 0.02)
    >>> learned_config(4, 3, anisotropic=True).anisotropic
    True
    """
    return TrainConfig(**{**_LEARNED, "d": d, "k": k, **overrides})


def load_layer(path) -> ClusterTransformer:
    """The layer stored in a checkpoint file of :func:`~kmtrf_core.training.train` (one seed).

    The file is read with its checksum verified and ``weights_only=True``
    (:func:`~kmtrf_core.training.checkpoints.load_checkpoint`): a damaged or
    foreign file raises ``CorruptFileError`` (a ``ValueError``) naming it.

    >>> import tempfile
    >>> from kmtrf_core.training import TrainConfig, train
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     model, _ = train(TrainConfig(d=2, k=3, n=16, steps=2, batch=2, val_tasks=2, val_every=1),
    ...                      checkpoint=f"{folder}/layer.pt")
    ...     layer = load_layer(f"{folder}/layer.pt")
    >>> layer.d, layer.k, torch.equal(layer.Q, model.Q)
    (2, 3, True)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a file path, got {type(path).__name__}")
    if not os.path.isfile(path):
        raise ValueError(f"no checkpoint file at {os.fspath(path)!r}")
    state = load_checkpoint(path)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    config = TrainConfig(**{key: value for key, value in state["config"].items() if key in names})
    weights = state["weights"]
    if weights["Q"].dim() != 3:
        raise ValueError(f"checkpoint {os.fspath(path)!r} holds {weights['Q'].shape[0]} layers (one per seed); "
                         "train one seed, or load the run and pick one with model.members()[i]")
    model = layer_for(config, ensemble=False, dtype=weights["Q"].dtype)
    return load_weights(model, weights).requires_grad_(False)


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _weights(sample_weight, n: int, dtype):
    """``None`` (every point weighs 1) or a finite, non-negative ``(n,)`` array with a positive sum."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=dtype)
    if w.ndim == 0:
        w = np.full(n, float(w), dtype=dtype)
    if w.shape != (n,):
        raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("sample_weight must be finite and non-negative, and not all zero")
    return w


def _squared_norms(X: torch.Tensor, chunk: int) -> torch.Tensor:
    """``|x|^2`` of every row, chunk by chunk (no temporary the size of ``X``)."""
    out = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
    for part in _chunks(X.shape[0], chunk):
        out[part] = (X[part] * X[part]).sum(dim=1)
    return out


def _pass(X: torch.Tensor, x2: torch.Tensor, C: torch.Tensor, chunk: int, w: torch.Tensor | None = None,
          means: bool = False):
    """One pass over the points: nearest center, its squared distance and, with ``means``, Lloyd's means.

    ``|x - c|^2 = |x|^2 + (|c|^2 - 2 x.c)``: the bracket decides the nearest
    center (the lowest index on a tie), one ``addmm`` per chunk laid out
    ``(k, chunk)`` so that the minimum runs across contiguous rows, and
    ``|x|^2`` (``x2``, once per fit) is added to the minimum only. The caller
    works on centered data, as scikit-learn's KMeans does, which keeps the
    cancellation small. The per-cluster sums are accumulated chunk by chunk
    while the chunk is in cache. A center whose cluster is empty stays where
    it was. A distance that overflows the dtype raises ``ValueError``.
    """
    k = C.shape[0]
    c2 = (C * C).sum(dim=1, keepdim=True)  # (k, 1)
    labels = torch.empty(X.shape[0], dtype=torch.int64, device=X.device)
    dist = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
    sums = torch.zeros_like(C) if means else None
    for part in _chunks(X.shape[0], chunk):
        torch.min(torch.addmm(c2, C, X[part].t(), alpha=-2.0), dim=0, out=(dist[part], labels[part]))
        if means:
            sums.index_add_(0, labels[part], X[part] if w is None else X[part] * w[part].unsqueeze(1))
    check_finite_result(dist.add_(x2).clamp_min_(0.0), "squared distances")
    if not means:
        return labels, dist, None
    counts = torch.bincount(labels, weights=w, minlength=k).to(C.dtype).unsqueeze(1)
    return labels, dist, torch.where(counts > 0, sums / counts.clamp_min(1), C)


class TransformerKMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """k-means whose update step is a transformer layer: the exact Lloyd construction or a learned one.

    Parameters
    ----------
    n_clusters : int
        The number of clusters ``k``.
    layer : {"lloyd", "learned"}, ClusterTransformer or path
        The update step.

        * ``"lloyd"``: Lloyd's update, which the constructed layer of
          Theorem 2.1 executes exactly at ``gamma = inf`` (chapter 5 checks
          that equality). It is computed in closed form, chunked, so it scales
          to millions of points; from the same initial centers, in float64, it
          equals ``sklearn.cluster.KMeans(algorithm="lloyd")`` (labels,
          iterations, and centers to rounding) whenever no cluster runs empty.
          An empty cluster keeps its center (scikit-learn moves it to a far
          point instead).
        * ``"learned"``: a layer trained for the data's ``(d, k)`` with
          :func:`learned_config` (``training`` overrides its fields), through
          the run cache (:func:`~kmtrf_core.training.train_cached`): the first
          fit at a new ``(d, k)`` trains, with a progress bar when
          ``verbose``; later fits load it. With ``pad_to=d'``, the data are
          zero-padded to ``d'`` columns and the layer is trained at
          ``(d', k)`` instead, so one layer serves every ``d <= d'``
          (Appendix A). A layer that did not beat one Lloyd step on its own
          validation tasks raises a ``RuntimeWarning`` naming its relative
          validation loss.
        * a :class:`~kmtrf_core.model.ClusterTransformer` (a single layer) of
          the data's ``d`` (or ``pad_to``) and ``k``;
        * a path to a checkpoint written by :func:`~kmtrf_core.training.train`
          (:func:`load_layer`).

        A layer step re-embeds the task (the points carry code 0) and runs one
        layer. The layers of this package were trained on tasks whose every
        coordinate spans ``[0, 1]``, so each step runs the layer on the data
        min-max scaled per feature to ``[0, 1]`` and maps the new centers back.
        A learned layer costs ``O(n^2 d_emb)`` per step (its point-to-point
        attention), in ``chunk_size`` queries at a time.
    max_iter : int
        Most iterations per initialization.
    tol : float
        Stop when the centers move by at most ``tol`` times the mean variance
        of the features (squared Frobenius norm), as scikit-learn does. Lloyd
        also stops as soon as no label changes.
    init : {"k-means++", "random"} or array (n_clusters, n_features)
        Initial centers: scikit-learn's k-means++ seeding, distinct random
        points, or given centers (then ``n_init`` is 1).
    n_init : int
        Initializations; the fit with the lowest inertia is kept.
    random_state : int, RandomState or None
        Seeds the initializations.
    pad_to : int, optional
        See ``layer="learned"``.
    training : dict, optional
        Overrides of :func:`learned_config` for ``layer="learned"``.
    chunk_size : int
        Points per chunk in the assignment and the layer's attention.
    device : str or torch.device, optional
        Where to compute; default CUDA when present, else the CPU.
    verbose : bool
        Progress while a learned layer trains.

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    labels_ : ndarray (n_samples,)
        The nearest final center of each training point.
    inertia_ : float
        Sum of squared distances of the points to their nearest final center.
    n_iter_ : int
        Iterations run by the kept initialization.
    inertia_path_ : ndarray ``(n_iter_ + 1,)`` or ``(n_iter_,)``
        The inertia of the centers before each iteration and of the final
        centers (for Lloyd it never increases); ``n_iter_`` entries when Lloyd
        stopped because no label changed (its last iteration moved nothing).
    layer_ : ClusterTransformer or None
        The layer used (``None`` for ``"lloyd"``).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [5.0, 5.0], [5.1, 5.0], [5.0, 5.1]])
    >>> km = TransformerKMeans(n_clusters=2, random_state=0).fit(X)
    >>> sorted(km.cluster_centers_.round(3).tolist())
    [[0.033, 0.033], [5.033, 5.033]]
    >>> km.predict([[0.2, 0.2], [4.0, 4.0]]).tolist() == [km.labels_[0], km.labels_[3]]
    True
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "layer": [StrOptions(set(LAYERS)), ClusterTransformer, str, os.PathLike],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "init": [StrOptions({"k-means++", "random"}), "array-like"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "pad_to": [Interval(Integral, 1, None, closed="left"), None],
        "training": [dict, None],
        "chunk_size": [Interval(Integral, 1, None, closed="left")],
        "device": [str, torch.device, None],
        "verbose": ["boolean"],
    }

    def __init__(self, n_clusters: int = 8, *, layer="lloyd", max_iter: int = 300, tol: float = 1e-4,
                 init="k-means++", n_init: int = 1, random_state=None, pad_to: int | None = None,
                 training: dict | None = None, chunk_size: int = 16384, device=None, verbose: bool = False):
        self.n_clusters = n_clusters
        self.layer = layer
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.n_init = n_init
        self.random_state = random_state
        self.pad_to = pad_to
        self.training = training
        self.chunk_size = chunk_size
        self.device = device
        self.verbose = verbose

    # -- the layer ----------------------------------------------------------------------------------

    def _resolve_layer(self, d: int):
        layer = self.layer
        if isinstance(layer, str) and layer == "lloyd":
            if self.pad_to is not None:
                raise ValueError("pad_to applies to a layer, not to layer='lloyd'")
            return None
        width = d if self.pad_to is None else self.pad_to
        if width < d:
            raise ValueError(f"pad_to={self.pad_to} is smaller than the data's {d} features")
        if self.n_clusters < 2:
            raise ValueError(f"a transformer layer needs n_clusters >= 2, got {self.n_clusters}")
        if isinstance(layer, str) and layer == "learned":
            config = learned_config(width, self.n_clusters, **(self.training or {}))
            if len(config.seeds) != 1:
                raise ValueError(f"training must train one layer (one seed), got seeds={config.seeds}")
            model, history = train_cached(config, progress=self.verbose)
            model = model.requires_grad_(False)
            final = float(validation_curve(history).iloc[-1])
            if not final < 1.0:
                warnings.warn(f"the learned layer for d={width}, k={self.n_clusters} did not beat one Lloyd step on "
                              f"its own validation tasks (relative validation loss {final:.3f} >= 1 after "
                              f"{int(history.step.max())} steps); layer='lloyd' is the safer step", RuntimeWarning,
                              stacklevel=3)
        elif isinstance(layer, ClusterTransformer):
            model = check_model(layer, "layer", single=True)
        else:
            model = load_layer(layer)
        if model.d != width or model.k != self.n_clusters:
            raise ValueError(f"the layer clusters d={model.d}, k={model.k}, but the data have {d} features"
                             f"{f' (padded to {width})' if width != d else ''} and n_clusters={self.n_clusters}")
        return model

    def _layer_step(self, X: torch.Tensor, C: torch.Tensor, lo: torch.Tensor, span: torch.Tensor):
        """One layer step on the task scaled into the unit cube, the centers mapped back."""
        model = self.layer_
        dtype = model.Q.dtype
        Xs, Cs = ((X - lo) / span), ((C - lo) / span)
        if self.pad_to is not None and self.pad_to > X.shape[1]:
            pad = self.pad_to - X.shape[1]
            Xs = torch.nn.functional.pad(Xs, (0, pad))
            Cs = torch.nn.functional.pad(Cs, (0, pad))
        device = model.Q.device
        with torch.no_grad():
            new = model(Xs.to(device, dtype).unsqueeze(0), Cs.to(device, dtype).unsqueeze(0),
                        chunk=self.chunk_size)[0]
        return new[:, : X.shape[1]].to(X.device, X.dtype) * span + lo

    # -- fitting ------------------------------------------------------------------------------------

    def _initial_centers(self, X: np.ndarray, random_state, X_mean: np.ndarray, w) -> np.ndarray:
        k = self.n_clusters
        n = X.shape[0]
        w = np.ones(n, dtype=X.dtype) if w is None else w
        # X is centered (as inside scikit-learn's KMeans), so both seedings draw what KMeans draws
        if isinstance(self.init, str) and self.init == "k-means++":
            return kmeans_plusplus(X, k, sample_weight=w, random_state=random_state)[0]
        if isinstance(self.init, str) and self.init == "random":
            return X[random_state.choice(n, size=k, replace=False, p=w / w.sum())].copy()
        centers = np.asarray(self.init, dtype=X.dtype)
        if centers.shape != (k, X.shape[1]):
            raise ValueError(f"init must have shape (n_clusters, n_features) = {(k, X.shape[1])}, "
                             f"got {centers.shape}")
        if not np.isfinite(centers).all():
            raise ValueError("init has non-finite values (nan or inf)")
        return centers - X_mean

    def _run(self, X: torch.Tensor, x2: torch.Tensor, C: torch.Tensor, tol: float, lo, span, w):
        chunk = self.chunk_size

        def inertia(dist):
            return float(dist.sum() if w is None else (w * dist).sum())

        labels_old = None
        path = []
        strict = False
        iterations = 0
        for iterations in range(1, self.max_iter + 1):
            labels, dist, means = _pass(X, x2, C, chunk, w, means=self.layer_ is None)
            path.append(inertia(dist))
            if self.layer_ is None:
                if labels_old is not None and torch.equal(labels, labels_old):
                    strict = True  # the labels did not change: Lloyd has converged, C is its fixed point
                    break
                new = means
            else:
                new = self._layer_step(X, C, lo, span)
            shift = float(((new - C) ** 2).sum())
            C = new
            labels_old = labels
            if shift <= tol:
                break
        labels, dist, _ = _pass(X, x2, C, chunk)
        if not strict:
            path.append(inertia(dist))
        return C, labels, inertia(dist), max(iterations, 1), np.asarray(path)

    def fit(self, X, y=None, sample_weight=None):
        """Cluster ``X`` (array-like ``(n_samples, n_features)``, float32 stays float32); returns ``self``.

        ``sample_weight`` (``(n_samples,)``, non-negative) weighs the points in
        the seeding, the means and the inertia, as in scikit-learn's KMeans;
        a layer step weighs every point equally, so unequal weights need
        ``layer="lloyd"``.

        Raises ``ValueError`` for NaN or inf, fewer samples than clusters, a
        wrong shape, or a layer of another ``d`` or ``k``.
        """
        self._validate_params()
        X = validate_data(self, X, dtype=[np.float64, np.float32], order="C", copy=True)
        w = _weights(sample_weight, X.shape[0], X.dtype)
        if w is not None and not (isinstance(self.layer, str) and self.layer == "lloyd") and np.ptp(w) > 0:
            raise ValueError("sample_weight: a layer step weighs every point equally; unequal weights need "
                             "layer='lloyd'")
        if X.shape[0] < self.n_clusters:
            raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}")
        n_init = self.n_init
        if not isinstance(self.init, str) and n_init != 1:
            warnings.warn(f"init is an array of centers: n_init={n_init} is ignored (one run)", RuntimeWarning,
                          stacklevel=2)
            n_init = 1
        random_state = check_random_state(self.random_state)
        device = resolve_device(self.device)
        self.layer_ = self._resolve_layer(X.shape[1])
        if self.layer_ is not None and self.layer_.Q.device != device:
            self.layer_ = copy.deepcopy(self.layer_).to(device)
        # like scikit-learn: work on the centered data, for precision; the distances are unchanged
        X_mean = X.mean(axis=0)
        X -= X_mean
        Xt = torch.from_numpy(X).to(device)
        tol = self.tol * float(Xt.var(dim=0, correction=0).mean()) if X.shape[0] > 1 else 0.0
        lo = Xt.amin(dim=0)
        span = (Xt.amax(dim=0) - lo)
        span = torch.where(span > 0, span, torch.ones((), dtype=span.dtype, device=device))
        x2 = _squared_norms(Xt, self.chunk_size)
        best = None
        for _ in range(n_init):
            C0 = torch.from_numpy(self._initial_centers(X, random_state, X_mean, w)).to(device)
            run = self._run(Xt, x2, C0, tol, lo, span, None if w is None else torch.from_numpy(w).to(device))
            if best is None or run[2] < best[2]:
                best = run
        C, labels, inertia, n_iter, path = best
        if not math.isfinite(inertia):
            raise ValueError("the clustering overflowed the data's dtype; rescale the data or use float64")
        self.cluster_centers_ = (C.cpu().numpy() + X_mean).astype(X.dtype, copy=False)
        self.labels_ = labels.cpu().numpy().astype(np.int32)
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        self.inertia_path_ = path
        distinct = len(np.unique(self.labels_))
        if distinct < self.n_clusters:
            warnings.warn(f"Number of distinct clusters ({distinct}) found smaller than n_clusters "
                          f"({self.n_clusters}).", ConvergenceWarning, stacklevel=2)
        return self

    # -- using the fit ------------------------------------------------------------------------------

    def _points(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], order="C", reset=False)
        device = resolve_device(self.device)
        C = torch.from_numpy(np.ascontiguousarray(self.cluster_centers_, dtype=X.dtype)).to(device)
        origin = C.mean(dim=0)  # distances do not move with the origin; their rounding does
        return torch.from_numpy(X).to(device) - origin, C - origin

    def predict(self, X):
        """The index of the nearest center of each point, ``(n_samples,)``."""
        X, C = self._points(X)
        return _pass(X, _squared_norms(X, self.chunk_size), C, self.chunk_size)[0].cpu().numpy().astype(np.int32)

    def fit_predict(self, X, y=None, sample_weight=None):
        """:meth:`fit`, then the labels of the training points."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def transform(self, X):
        """Euclidean distances of each point to each center, ``(n_samples, n_clusters)``."""
        X, C = self._points(X)
        out = torch.empty(X.shape[0], C.shape[0], dtype=X.dtype, device=X.device)
        for part in _chunks(X.shape[0], self.chunk_size):
            out[part] = task_sqdist(X[part].unsqueeze(0), C.unsqueeze(0))[0].sqrt_()
        return out.cpu().numpy()

    def score(self, X, y=None, sample_weight=None):
        """Minus the (weighted) k-means objective of ``X`` on the fitted centers (higher is better)."""
        X, C = self._points(X)
        dist = _pass(X, _squared_norms(X, self.chunk_size), C, self.chunk_size)[1].cpu().numpy()
        w = _weights(sample_weight, X.shape[0], dist.dtype)
        return -float(dist.sum() if w is None else (w * dist).sum())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
