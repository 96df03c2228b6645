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
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..validation import check_finite_result
from . import fused, seeding
from .passes import device_chunks, lloyd_pass, lloyd_update, same_clustering, sample_weights, squared_norms
from ..device import resolve_device
from ..model import ClusterTransformer, check_model
from ..training import TrainConfig, train_cached
from ..training.convergence import validation_curve
from ..training.checkpoints import load_checkpoint, load_weights
from ..training.config import layer_for

__all__ = ["EMPTY", "LAYERS", "TransformerKMeans", "learned_config", "load_layer"]

LAYERS = ("lloyd", "learned")
"""The named update steps of :class:`TransformerKMeans` (a model or a checkpoint path also work)."""

EMPTY = ("relocate", "keep")
"""What a Lloyd step of :class:`TransformerKMeans` does with an empty cluster: scikit-learn's rule, or the paper's."""

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
          iterations, and centers to rounding), empty clusters included
          (see ``empty``).
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
          (:func:`load_layer`). A string that names one of :data:`LAYERS` in
          any case (``"Lloyd"``) is that choice, not a path; a checkpoint file
          of such a name is reached as ``"./lloyd"``.

        A layer step re-embeds the task (the points carry code 0) and runs one
        layer on the data mapped into the unit cube as
        :func:`~kmtrf_core.tasks.to_unit_cube` maps a task: minus the
        per-feature minimum, divided by one common scale (the widest
        feature's span), the new centers mapped back. A translation and one
        common scale keep the k-means problem (every assignment, every mean,
        Lloyd's whole trajectory), so the constructed layer gives Lloyd's
        labels and centers on any data (under Theorem 2.1's conditions: no
        empty cluster, no tie); a scale per feature would change the
        distances, and so the problem. A learned layer therefore sees the
        widest feature spanning ``[0, 1]`` and every other feature a part of
        it, while its training tasks were min-max scaled per feature, every
        feature spanning ``[0, 1]`` (:func:`~kmtrf_core.tasks.min_max_scale`,
        Appendix D): on features of unequal spread it is asked about the
        data's own k-means problem, from inputs narrower than those it was
        trained on. Data min-max scaled per feature beforehand
        (``sklearn.preprocessing.MinMaxScaler``, as chapter 15 does) are the
        inputs it was trained on, and on them the two scalings coincide. A
        learned layer costs ``O(n^2 d_emb)`` per step (its point-to-point
        attention), in ``chunk_size`` queries at a time.
    max_iter : int
        Most iterations per initialization.
    tol : float
        Stop when the centers move by at most ``tol`` times the mean variance
        of the features (squared Frobenius norm), as scikit-learn does. Lloyd
        also stops as soon as no label changes.
    init : {"k-means++", "random"}, callable or array (n_clusters, n_features)
        Initial centers, as in ``KMeans``: scikit-learn's k-means++ seeding,
        distinct random points, ``init(X, n_clusters, random_state)`` (called
        on the data centered at their mean, as ``KMeans`` calls it), or given
        centers.
    n_init : "auto" or int
        Initializations; the fit with the lowest inertia is kept. ``"auto"``
        (``KMeans``'s default): 1 for k-means++ and given centers, 10 for
        ``"random"`` and a callable.
    verbose : int or bool
        Print what ``KMeans`` prints (initialization, the inertia of each
        iteration, why it stopped); a learned layer's training shows a
        progress bar.
    random_state : int, RandomState or None
        Seeds the initializations.
    copy_x : bool
        As in ``KMeans``: ``False`` centers a float, C-ordered ``X`` in
        place during the fit and restores it after (to rounding).
    algorithm : {"lloyd", "elkan"}
        Accepted for ``KMeans`` compatibility; both run Lloyd's iterations
        (Elkan's algorithm computes the same iterations with fewer distances).
    empty : {"relocate", "keep"}
        What a Lloyd step does with a cluster that has lost all its points.
        ``"relocate"`` (default): scikit-learn's rule, so that labels equal
        ``KMeans``'s from the same start in this case too: the cluster takes
        one of the points farthest from their own center. ``"keep"``: the
        center stays where it was, the convention of the paper's Algorithm 2
        and of :func:`~kmtrf_core.lloyd.lloyd`; the fit may then end with
        fewer than ``n_clusters`` non-empty clusters (``ConvergenceWarning``).
        A layer step computes its own centers and ignores this.
    pad_to : int, optional
        See ``layer="learned"``.
    training : dict, optional
        Overrides of :func:`learned_config` for ``layer="learned"``.
    chunk_size : int
        Points per chunk in the assignment and the layer's attention.
    device : str or torch.device, optional
        Where to compute; default CUDA when present, else the CPU. Every
        pass over the points runs there, k-means++ seeding included
        (:func:`~kmtrf_core.estimator.seeding.kmeans_plusplus`: off the CPU
        it keeps scikit-learn's draws on the host and runs its passes on the
        device; in float64 it picks the points ``KMeans`` picks). A callable
        ``init`` runs on the host.
    stream : "auto" or bool
        Keep the data in host memory and copy them to ``device`` a chunk at a
        time in every pass, for data larger than a GPU's memory. ``"auto"``:
        when they take more than half of the device's free memory. ``True``
        on the CPU only exercises the same code paths (k-means++ seeding
        included).

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
        "init": [StrOptions({"k-means++", "random"}), callable, "array-like"],
        "n_init": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
        "copy_x": ["boolean"],
        "algorithm": [StrOptions({"lloyd", "elkan"})],
        "layer": [StrOptions(set(LAYERS)), ClusterTransformer, str, os.PathLike],
        "empty": [StrOptions(set(EMPTY))],
        "pad_to": [Interval(Integral, 1, None, closed="left"), None],
        "training": [dict, None],
        "chunk_size": [Interval(Integral, 1, None, closed="left")],
        "device": [str, torch.device, None],
        "stream": [StrOptions({"auto"}), "boolean"],
    }

    def __init__(self, n_clusters: int = 8, *, init="k-means++", n_init="auto", max_iter: int = 300,
                 tol: float = 1e-4, verbose=0, random_state=None, copy_x: bool = True, algorithm: str = "lloyd",
                 layer="lloyd", empty: str = "relocate", pad_to: int | None = None, training: dict | None = None,
                 chunk_size: int = 16384, device=None, stream="auto"):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state
        self.copy_x = copy_x
        self.algorithm = algorithm
        self.layer = layer
        self.empty = empty
        self.pad_to = pad_to
        self.training = training
        self.chunk_size = chunk_size
        self.device = device
        self.stream = stream

    # -- the layer ----------------------------------------------------------------------------------

    def _named_layer(self):
        """``"lloyd"`` or ``"learned"`` when ``layer`` is a string naming one of them in any case, else ``None``."""
        if isinstance(self.layer, str) and self.layer.lower() in LAYERS:
            return self.layer.lower()
        return None

    def _resolve_layer(self, d: int):
        layer = self.layer
        named = self._named_layer()
        if named == "lloyd":
            if self.pad_to is not None:
                raise ValueError("pad_to applies to a layer, not to layer='lloyd'")
            return None
        width = d if self.pad_to is None else self.pad_to
        if width < d:
            raise ValueError(f"pad_to={self.pad_to} is smaller than the data's {d} features")
        if self.n_clusters < 2:
            raise ValueError(f"a transformer layer needs n_clusters >= 2, got {self.n_clusters}")
        if named == "learned":
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
        """One layer step on the task in the unit cube (one common scale ``span``), the centers mapped back."""
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

    def _given_centers(self) -> bool:
        """Whether ``init`` is an array of centers (not a seeding's name, not a callable)."""
        return not isinstance(self.init, str) and not callable(self.init)

    def _n_init(self) -> int:
        """``n_init`` resolved as ``KMeans`` resolves it, with its warning for given centers."""
        init = self.init
        if self.n_init == "auto":
            n_init = 10 if (isinstance(init, str) and init == "random") or callable(init) else 1
        else:
            n_init = self.n_init
        if self._given_centers() and n_init != 1:
            warnings.warn(f"Explicit initial center position passed: performing only one init in "
                          f"{type(self).__name__} instead of n_init={n_init}.", RuntimeWarning, stacklevel=3)
            n_init = 1
        return n_init

    def _check_centers(self, X: np.ndarray, centers) -> np.ndarray:
        """Given or returned initial centers: ``KMeans``'s checks and its messages."""
        centers = check_array(centers, dtype=X.dtype, copy=True, order="C")
        if centers.shape[0] != self.n_clusters:
            raise ValueError(f"The shape of the initial centers {centers.shape} does not match the number of "
                             f"clusters {self.n_clusters}.")
        if centers.shape[1] != X.shape[1]:
            raise ValueError(f"The shape of the initial centers {centers.shape} does not match the number of "
                             f"features of the data {X.shape[1]}.")
        return centers

    def _initial_centers(self, X: np.ndarray, Xt: torch.Tensor, x2: torch.Tensor, device, streamed: bool,
                         random_state, init_array, w) -> torch.Tensor:
        """The initial centers on ``device``; ``X`` is the centered data on the host, ``Xt`` the same on ``device``,
        or on the host when ``streamed``."""
        k = self.n_clusters
        n = X.shape[0]
        w = np.ones(n, dtype=X.dtype) if w is None else w
        # X is centered (as inside scikit-learn's KMeans), so every seeding draws what KMeans draws
        if isinstance(self.init, str) and self.init == "k-means++":
            if device.type == "cpu" and not streamed:
                return torch.from_numpy(kmeans_plusplus(X, k, sample_weight=w, random_state=random_state)[0])
            # the same algorithm and draws with the passes on the device (float64: the same points, see seeding);
            # streamed data on the CPU take this path too, so that the CPU tests exercise it
            return seeding.kmeans_plusplus(Xt, k, random_state, sample_weight=w, x_squared_norms=x2,
                                           chunk=self.chunk_size, device=device)[0]
        if isinstance(self.init, str) and self.init == "random":
            centers = X[random_state.choice(n, size=k, replace=False, p=w / w.sum())].copy()
        elif callable(self.init):
            centers = self._check_centers(X, self.init(X, k, random_state=random_state))
        else:
            centers = init_array
        return torch.from_numpy(centers).to(device)

    def _pass(self, X: torch.Tensor, x2: torch.Tensor, C: torch.Tensor, w=None, means: bool = False, labels=None):
        """One pass over the points: ``(labels, inertia, unchanged, sums)``.

        ``unchanged``: no label differs from ``labels`` (the previous pass's, or
        ``None``); ``sums``: ``(sums, weights)`` with ``means``, else ``None``. On
        the CPU the fused numba pass (when numba is here), which updates
        ``labels`` in place; elsewhere
        :func:`~kmtrf_core.estimator.passes.lloyd_pass`.
        """
        if C.device.type != "cpu" or not fused.AVAILABLE:
            new, dist, sums = lloyd_pass(X, x2, C, self.chunk_size, w, means)
            # in float64, as the fused pass sums it: float32 distances may sum past float32's range
            inertia = float(dist.sum(dtype=torch.float64) if w is None else torch.dot(w.double(), dist.double()))
            return new, inertia, labels is not None and torch.equal(new, labels), sums
        out = fused.fused_lloyd_pass(X.numpy(), x2.numpy(), C.numpy(), None if w is None else w.numpy(),
                                     min(self.chunk_size, fused.CHUNK), None if labels is None else labels.numpy(),
                                     means)
        if not math.isfinite(out.inertia):  # an inf or nan distance makes the sum inf or nan
            check_finite_result(torch.tensor([out.inertia], dtype=X.dtype), "squared distances")
        sums = (torch.from_numpy(out.sums), torch.from_numpy(out.weights)) if means else None
        return torch.from_numpy(out.labels), out.inertia, labels is not None and out.changed == 0, sums

    def _streams(self, X: torch.Tensor, device) -> bool:
        """Whether the data stay in host memory and go to ``device`` a chunk at a time (see ``stream``)."""
        if self.stream != "auto":
            return bool(self.stream)
        if device.type != "cuda":
            return False
        # leave room for the distances and the layer
        return X.element_size() * X.numel() > torch.cuda.mem_get_info(device)[0] / 2

    def _say(self, message: str) -> None:
        if self.verbose:
            print(message)

    def _run(self, X: torch.Tensor, x2: torch.Tensor, C: torch.Tensor, tol: float, lo, span, w):
        labels = None
        path = []
        strict = False
        iterations = 0
        for iterations in range(1, self.max_iter + 1):
            labels, inertia, unchanged, sums = self._pass(X, x2, C, w, means=self.layer_ is None, labels=labels)
            path.append(inertia)
            self._say(f"Iteration {iterations - 1}, inertia {inertia}.")
            if self.layer_ is None:
                new = lloyd_update(X, C, labels, *sums, w, self.empty, self.chunk_size)
            else:
                new = self._layer_step(X, C, lo, span)
            shift = float(((new - C) ** 2).sum())
            C = new
            if self.layer_ is None and unchanged:
                strict = True  # the labels did not change: Lloyd has converged
                self._say(f"Converged at iteration {iterations - 1}: strict convergence.")
                break
            if shift <= tol:
                self._say(f"Converged at iteration {iterations - 1}: center shift {shift} within tolerance {tol}.")
                break
        labels, inertia, _, _ = self._pass(X, x2, C, w, labels=labels)
        if not strict:
            path.append(inertia)
        return C, labels, inertia, max(iterations, 1), np.asarray(path)

    def fit(self, X, y=None, sample_weight=None):
        """Cluster ``X`` (array-like ``(n_samples, n_features)``, float32 stays float32); returns ``self``.

        ``sample_weight`` (``(n_samples,)``, non-negative) weighs the points in
        the seeding, the means and the inertia, as in scikit-learn's KMeans;
        a layer step weighs every point equally, so unequal weights need
        ``layer="lloyd"``.

        Raises ``ValueError`` for NaN or inf, fewer samples than clusters, a
        wrong shape, or a layer of another ``d`` or ``k``, with ``KMeans``'s
        words where ``KMeans`` has the same check.
        """
        self._validate_params()
        X = validate_data(self, X, dtype=[np.float64, np.float32], order="C", copy=self.copy_x)
        if X.shape[0] < self.n_clusters:
            raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}.")
        n_init = self._n_init()
        w = sample_weights(sample_weight, X.shape[0], X.dtype)
        if w is not None and self._named_layer() != "lloyd" and np.ptp(w) > 0:
            raise ValueError("sample_weight: a layer step weighs every point equally; unequal weights need "
                             "layer='lloyd'")
        init_array = self._check_centers(X, self.init) if self._given_centers() else None
        random_state = check_random_state(self.random_state)
        device = resolve_device(self.device)
        self.layer_ = self._resolve_layer(X.shape[1])
        if self.layer_ is not None and self.layer_.Q.device != device:
            self.layer_ = copy.deepcopy(self.layer_).to(device)
        # like scikit-learn: work on the centered data, for precision; the distances are unchanged
        X_mean = X.mean(axis=0)
        X -= X_mean
        if init_array is not None:
            init_array -= X_mean
        try:
            best = self._fit_centered(X, device, n_init, init_array, random_state, w)
        finally:
            if not self.copy_x:
                X += X_mean  # the caller's array, restored
        C, labels, inertia, n_iter, path = best
        if not math.isfinite(inertia):
            raise ValueError("the clustering overflowed the data's dtype; rescale the data or use float64")
        self.cluster_centers_ = (C.cpu().numpy() + X_mean).astype(X.dtype, copy=False)
        self.labels_ = labels.cpu().numpy().astype(np.int32, copy=False)
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        self.inertia_path_ = path
        distinct = len(np.unique(self.labels_))
        if distinct < self.n_clusters:
            warnings.warn(f"Number of distinct clusters ({distinct}) found smaller than n_clusters "
                          f"({self.n_clusters}). Possibly due to duplicate points in X.", ConvergenceWarning,
                          stacklevel=2)
        return self

    def _fit_centered(self, X: np.ndarray, device, n_init: int, init_array, random_state, w):
        """The ``n_init`` runs on the centered data; the best by inertia, as ``KMeans`` picks it."""
        Xt = torch.from_numpy(X)
        streamed = self._streams(Xt, device)
        if not streamed:
            Xt = Xt.to(device)
        tol = self.tol * float(Xt.var(dim=0, correction=0).mean()) if X.shape[0] > 1 and self.tol > 0 else 0.0
        lo = span = None
        if self.layer_ is not None:  # a layer runs on the data in the unit cube, as tasks.to_unit_cube maps them:
            # the per-feature minimum and one common scale (the widest span) keep the k-means problem
            lo = Xt.amin(dim=0)
            span = (Xt.amax(dim=0) - lo).amax()
            span = torch.where(span > 0, span, torch.ones((), dtype=span.dtype, device=span.device))
        x2 = squared_norms(Xt, self.chunk_size, device)
        wt = None if w is None else torch.from_numpy(w).to(device)
        best = None
        for _ in range(n_init):
            C0 = self._initial_centers(X, Xt, x2, device, streamed, random_state, init_array, w)
            self._say("Initialization complete")
            run = self._run(Xt, x2, C0, tol, lo, span, wt)
            # a new run wins with a lower inertia and another partition (not the same one renumbered)
            if best is None or (run[2] < best[2] and not same_clustering(
                    run[1].cpu().numpy(), best[1].cpu().numpy(), self.n_clusters)):
                best = run
        return best

    # -- using the fit ------------------------------------------------------------------------------

    def _points(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], order="C", reset=False)
        device = resolve_device(self.device)
        C = torch.from_numpy(np.ascontiguousarray(self.cluster_centers_, dtype=X.dtype)).to(device)
        origin = C.mean(dim=0)  # distances do not move with the origin; their rounding does
        points = torch.from_numpy(X)
        if not self._streams(points, device):
            return points.to(device) - origin, C - origin
        return points - origin.cpu(), C - origin  # data larger than the device: chunks are copied in turn

    def predict(self, X):
        """The index of the nearest center of each point, ``(n_samples,)``."""
        X, C = self._points(X)
        return self._pass(X, squared_norms(X, self.chunk_size, C.device), C)[0].cpu().numpy().astype(np.int32)

    def fit_predict(self, X, y=None, sample_weight=None):
        """:meth:`fit`, then the labels of the training points.

        >>> TransformerKMeans(n_clusters=2, random_state=0).fit_predict([[0.0], [0.1], [5.0], [5.1]]).tolist()
        [1, 1, 0, 0]
        """
        return self.fit(X, sample_weight=sample_weight).labels_

    def transform(self, X):
        """Euclidean distances of each point to each center, ``(n_samples, n_clusters)``.

        From the coordinate differences, not the expansion that the assignment
        uses: a point equal to a center is at distance exactly 0, as in ``KMeans``.

        >>> sorted(TransformerKMeans(n_clusters=2, random_state=0).fit([[0.0], [4.0]]).transform([[1.0]])[0].tolist())
        [1.0, 3.0]
        """
        X, C = self._points(X)
        out = torch.empty(X.shape[0], C.shape[0], dtype=X.dtype, device=C.device)
        for part, rows in device_chunks(X, self.chunk_size, C.device):
            # no gradient is taken here, so cdist's slow backward (the reason the core avoids it) does not apply
            out[part] = torch.cdist(rows, C, compute_mode="donot_use_mm_for_euclid_dist")
        return check_finite_result(out, "distances").cpu().numpy()

    def score(self, X, y=None, sample_weight=None):
        """Minus the (weighted) k-means objective of ``X`` on the fitted centers (higher is better).

        >>> TransformerKMeans(n_clusters=2, random_state=0).fit([[0.0], [4.0]]).score([[1.0], [4.0]])  # -(1^2 + 0^2)
        -1.0
        """
        X, C = self._points(X)
        w = sample_weights(sample_weight, X.shape[0], X.dtype)
        w = None if w is None else torch.from_numpy(w).to(C.device)
        return -self._pass(X, squared_norms(X, self.chunk_size, C.device), C, w)[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
