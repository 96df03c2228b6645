"""The clustering transformer layer of Definition 2.3 (Eq. 4).

One layer holds four squared-distance attentions with projections
``Q_mu, K_mu, V_mu`` of size ``d_emb x d_emb`` (no bias), shared across
layers:

* points:  ``X' = X + A(X, C; 1) + A(X, X; 2)``  (cross, then self attention)
* centers: ``C' = C + A(C, X'; 3) + A(C, C; 4)`` (uses the *updated* points)

The model output is the first ``d`` coordinates of the center tokens.
With ``ffn = h > 0`` (ours, not the paper's: Appendix A asks how a
feedforward block would change learning) a token-wise two-layer network
with a residual follows each of the two updates.
Used in chapters 4 and 5; trained in the training chapter.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .embeddings import SCHEMES
from .validation import (check_choice, check_finite_result, check_float_dtype, check_int, check_number,
                         check_points_centers)
from .attention import IMPLS, attend
from .embeddings import cluster_codes, embed, embed_unchecked

__all__ = ["ClusterTransformer", "check_model", "lloyd_weights"]


GAMMA_MAX = 1e20
"""The largest finite inverse temperature: ``gamma / sqrt(d_emb)`` times a logit of unit-cube tasks stays
far inside float32's range (use ``math.inf`` for the exact limit)."""


def lloyd_weights(d: int, m: int, dtype: torch.dtype = torch.float64, device=None):
    """Projections ``(Q, K, V)``, each ``(4, d + m, d + m)``, of the proof of Theorem B.1.

    Parameters
    ----------
    d : int
        Data dimension.
    m : int
        Code dimension (``k`` for OH, ``ceil(log2 k)`` for BN and GC, 1 for SC).
    dtype, device
        Of the returned tensors.

    Returns
    -------
    Q, K, V : torch.Tensor
        Each ``(4, d + m, d + m)``; index ``mu - 1`` holds attention ``mu``
        of Eq. 4 (the table of :mod:`kmtrf_core.construction`).

    Examples
    --------
    >>> Q, K, V = lloyd_weights(2, 1)
    >>> V[0].diagonal().tolist(), V[3].diagonal().tolist()
    ([0.0, 0.0, 1.0], [-1.0, -1.0, -0.0])
    """
    check_int(d, "d")
    check_int(m, "m")
    P_x = torch.diag(torch.cat([torch.ones(d), torch.zeros(m)])).to(dtype=dtype, device=device)
    P_c = torch.diag(torch.cat([torch.zeros(d), torch.ones(m)])).to(dtype=dtype, device=device)
    Q = torch.stack([P_x, P_x, P_c, P_c])
    K = Q.clone()
    V = torch.stack([P_c, -P_c, P_x, -P_x])
    return Q, K, V


def check_gamma(gamma, name: str = "gamma") -> float:
    """An inverse temperature: a positive number at most :data:`GAMMA_MAX`, or ``math.inf``.

    >>> check_gamma(4), check_gamma(math.inf)
    (4.0, inf)
    >>> check_gamma(1e30)
    Traceback (most recent call last):
    ...
    ValueError: gamma must be at most 1e+20 (beyond it the scaled logits overflow), or math.inf for the exact limit; got 1e+30
    """
    value = check_number(gamma, name, allow_inf=True)
    if math.isfinite(value) and value > GAMMA_MAX:
        raise ValueError(f"{name} must be at most {GAMMA_MAX:g} (beyond it the scaled logits overflow), or "
                         f"math.inf for the exact limit; got {gamma!r}")
    return value


class ClusterTransformer(nn.Module):
    """Transformer layer that maps a clustering task ``(X, C)`` to new centers.

    Parameters
    ----------
    d : int
        Data dimension.
    k : int
        Number of clusters (``>= 2``).
    scheme : {"oh", "bn", "gc", "sc", "na"}
        Token embedding (see :mod:`kmtrf_core.embeddings`).
    gamma : float
        Attention inverse temperature, ``> 0`` and at most ``1e20``;
        ``math.inf`` for the exact hard-attention limit (the paper trains
        with ``gamma = 1``).
    codes : torch.Tensor, optional
        A custom real ``(k, m)`` code matrix, replacing the scheme's codes
        (``scheme`` is then reported as ``"custom"``); its rows must stay
        finite and distinct once cast to ``dtype``.
    generator : torch.Generator, optional
        For the initial weights, drawn uniformly in ``[-1/sqrt(d_emb), 1/sqrt(d_emb)]``.
    dtype : torch.dtype
        Of the parameters: ``torch.float32`` or ``torch.float64``.
    device
        Of the parameters.
    impl : {"direct", "sdpa", "auto"}
        Finite-gamma attention kernel (see :func:`~kmtrf_core.attention.distance_attention`).
    ensemble : int, optional
        Stack ``S`` independent layers (e.g. one per training seed) that run
        as one vectorized model: the projections get a leading ``S`` axis and
        the forward maps tasks ``(B, n, d)`` (shared) or ``(S, B, n, d)`` (one
        batch per member) to centers ``(S, B, k, d)``. See :meth:`stack` and
        :meth:`members`.
    center : bool
        Run the layer on the task moved so that its centers' mean sits at the
        origin, and move the new centers back. Squared-distance attention forms
        ``|q|^2 + |k|^2 - 2 q.k``, which cancels catastrophically for data far
        from the origin (in float32, assignments flip at offsets of about 100 on
        unit-scale data); centering removes that. It is exact in real
        arithmetic for a layer that is translation-equivariant, as the
        constructed layer of :meth:`from_lloyd` is at every gamma, and
        :meth:`from_lloyd` turns it on. A *learned* layer is not
        translation-equivariant (its projections mix coordinates with codes),
        so it is off by default: such a layer sees tasks where it was trained,
        scaled into the unit cube (:func:`~kmtrf_core.tasks.to_unit_cube`).
    ffn : int
        Hidden width ``h`` of a feedforward block (0: none, the paper's layer,
        Definition 2.3). With ``h > 0`` one two-layer network, shared by all
        tokens, follows the points' update and the centers' update:
        ``z <- z + ReLU(z F1 + b1) F2 + b2`` (ours, for Appendix A's question
        on the feedforward block; chapter 19). ``F1``, ``F2`` start uniform
        in ``+-1/sqrt(fan_in)``, drawn after ``Q, K, V`` (so a seed gives the
        same attention weights with or without the block), the biases at 0.
        :meth:`from_lloyd` has no block.

    Attributes
    ----------
    Q, K, V : torch.nn.Parameter
        ``(4, d_emb, d_emb)`` (``(S, 4, d_emb, d_emb)`` for an ensemble); index
        ``mu - 1`` holds attention ``mu`` of Eq. 4.
    F1, b1, F2, b2 : torch.nn.Parameter
        With ``ffn = h > 0``: ``(d_emb, h)``, ``(h,)``, ``(h, d_emb)``, ``(d_emb,)``
        (a leading ``S`` for an ensemble).
    codes : torch.Tensor
        Buffer ``(k, m)``, the cluster codes the center tokens carry.

    Examples
    --------
    >>> model = ClusterTransformer(d=2, k=3, scheme="bn", generator=torch.Generator().manual_seed(0))
    >>> X, C = torch.rand(4, 10, 2), torch.rand(4, 3, 2)
    >>> model(X, C).shape
    torch.Size([4, 3, 2])
    >>> model.d_emb, model.num_parameters()
    (4, 192)

    With a feedforward block of width 8 (``12 * 4**2 + 4*8 + 8 + 8*4 + 4`` parameters):

    >>> ClusterTransformer(2, 3, ffn=8).num_parameters()
    268
    """

    def __init__(
        self,
        d: int,
        k: int,
        scheme: str = "bn",
        gamma: float = 1.0,
        *,
        codes: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        device=None,
        impl: str = "direct",
        ensemble: int | None = None,
        center: bool = False,
        ffn: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(center, bool):
            raise ValueError(f"center must be True or False, got {center!r}")
        self.center = center
        if ensemble is not None:
            check_int(ensemble, "ensemble")
        self.ensemble = ensemble
        self.d = check_int(d, "d")
        self.k = check_int(k, "k", minimum=2)
        self.gamma = check_gamma(gamma)
        self.impl = check_choice(impl, "impl", IMPLS)
        check_float_dtype(dtype)  # a float16 or integer layer could never run (nor draw its weights)
        if codes is None:
            self.scheme = check_choice(scheme, "scheme", SCHEMES)
            codes = cluster_codes(k, self.scheme, dtype=dtype, device=device)
        else:
            if not isinstance(codes, torch.Tensor) or codes.dim() != 2 or codes.shape[0] != k:
                raise ValueError(f"codes must be a (k, m) tensor with k={k} rows")
            if codes.dtype.is_complex:
                raise ValueError(f"codes must be a real tensor, got dtype {codes.dtype}")
            # checked as the layer will hold them: two rows may coincide (or overflow) only after the cast
            codes = codes.to(dtype=dtype, device=device)
            if not bool(torch.isfinite(codes).all()):
                raise ValueError(f"codes has non-finite values in {dtype}")
            if torch.unique(codes, dim=0).shape[0] != k:
                raise ValueError(f"codes must have distinct rows in {dtype}")
            self.scheme = "custom"
        self.register_buffer("codes", codes)
        m = d + codes.shape[1]
        self.d_emb = m
        bound = 1.0 / math.sqrt(m)

        shape = (4, m, m) if ensemble is None else (ensemble, 4, m, m)

        def init() -> nn.Parameter:
            w = torch.rand(shape, generator=generator, dtype=dtype, device=device)
            return nn.Parameter((2.0 * w - 1.0) * bound)

        self.Q, self.K, self.V = init(), init(), init()
        self.ffn = check_int(ffn, "ffn", minimum=0)
        if self.ffn:  # drawn after Q, K, V: the same seed gives the same attention weights as without the block
            lead = () if ensemble is None else (ensemble,)

            def uniform(*size, fan_in):
                w = torch.rand(lead + size, generator=generator, dtype=dtype, device=device)
                return nn.Parameter((2.0 * w - 1.0) / math.sqrt(fan_in))

            self.F1 = uniform(m, self.ffn, fan_in=m)
            self.b1 = nn.Parameter(torch.zeros(lead + (self.ffn,), dtype=dtype, device=device))
            self.F2 = uniform(self.ffn, m, fan_in=self.ffn)
            self.b2 = nn.Parameter(torch.zeros(lead + (m,), dtype=dtype, device=device))

    def extra_repr(self) -> str:
        center = ", center=True" if self.center else ""
        block = f", ffn={self.ffn}" if self.ffn else ""
        return (f"d={self.d}, k={self.k}, scheme={self.scheme!r}, d_emb={self.d_emb}, gamma={self.gamma}"
                f"{center}{block}")

    def parameter_names(self) -> list:
        """The names of the trainable tensors: ``Q, K, V`` and, with a block, ``F1, b1, F2, b2``.

        >>> ClusterTransformer(2, 3, ffn=4).parameter_names()
        ['Q', 'K', 'V', 'F1', 'b1', 'F2', 'b2']
        """
        return [name for name, _ in self.named_parameters()]

    def num_parameters(self) -> int:
        """Number of trainable parameters, ``12 d_emb^2`` (plus ``2 d_emb h + h + d_emb`` with a block).

        An ensemble holds ``S`` times as many.

        >>> ClusterTransformer(2, 3).num_parameters(), ClusterTransformer(2, 3, ffn=8).num_parameters()
        (192, 268)
        """
        return sum(p.numel() for p in self.parameters())

    def embed(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Initial token embeddings ``(X_bar (B, n, d_emb), C_bar (B, k, d_emb))`` with this layer's codes."""
        return embed(X, C, codes=self.codes.to(X.dtype))

    def _projections(self, mu: int):
        Q, K, V = self.Q[..., mu, :, :], self.K[..., mu, :, :], self.V[..., mu, :, :]
        if self.ensemble is not None:  # (S, m, m) -> (S, 1, m, m), against tokens (S, B, q, m)
            Q, K, V = Q.unsqueeze(1), K.unsqueeze(1), V.unsqueeze(1)
        return Q, K, V

    def layer(
        self, X_bar: torch.Tensor, C_bar: torch.Tensor, trace: dict | None = None, chunk: int | None = None,
        gamma: float | None = None, points: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One application of Eq. 4 to token embeddings; returns the updated ``(X_bar, C_bar)``.

        With a ``trace`` dict, the attention weights of attention ``mu`` are
        stored under ``"weights_mu"`` (``(B, queries, keys)``), the two
        updates under ``"update_x"`` / ``"update_c"`` and, with a feedforward
        block, its outputs under ``"update_ffn_x"`` / ``"update_ffn_c"``
        (see :func:`kmtrf_core.construction.layer_trace`). With ``chunk`` (and
        no ``trace``), at most ``chunk`` queries are attended at a time
        (bounded memory).
        ``gamma`` overrides the layer's temperature for this application
        (an inference-time schedule, :func:`~kmtrf_core.evaluate.center_trajectory`).
        ``points``, when ``X_bar`` is the fresh embedding ``[X, 0]`` of these
        points ``X``: the two attentions that read ``X_bar`` then read ``X``
        with the projections' first ``d`` columns, the same values for less
        work (:meth:`run_unchecked` passes it; ignored with a ``trace``).
        """
        temperature = self.gamma if gamma is None else check_gamma(gamma)

        def a(mu, Zq, Zk, narrow=None):
            Q, K, V = self._projections(mu)
            if narrow == "q":  # plain points ask: only the data columns of Q meet them
                Q = Q[..., : self.d]
            elif narrow == "qkv":
                Q, K, V = Q[..., : self.d], K[..., : self.d], V[..., : self.d]
            return chunked(mu, Zq, Zk, Q, K, V)

        def chunked(mu, Zq, Zk, Q, K, V):
            if chunk is not None and trace is None and Zq.shape[-2] > chunk:
                return torch.cat([chunked(mu, Zq[..., i : i + chunk, :], Zk, Q, K, V)
                                  for i in range(0, Zq.shape[-2], chunk)], dim=-2)
            return attend(Zq, Zk, Q, K, V, temperature, self.impl, trace, f"weights_{mu + 1}")

        if points is not None and trace is None:
            update_x = a(0, points, C_bar, "q") + a(1, points, points, "qkv")  # (B, n, d_emb)
        else:
            update_x = a(0, X_bar, C_bar) + a(1, X_bar, X_bar)  # (B, n, d_emb)
        X_new = X_bar + update_x
        if self.ffn:
            block_x = self._block(X_new)
            X_new = X_new + block_x
        update_c = a(2, C_bar, X_new) + a(3, C_bar, C_bar)  # (B, k, d_emb)
        C_new = C_bar + update_c
        if trace is not None:
            trace.update(update_x=update_x, update_c=update_c)
        if self.ffn:
            block_c = self._block(C_new)
            C_new = C_new + block_c
            if trace is not None:
                trace.update(update_ffn_x=block_x, update_ffn_c=block_c)
        return X_new, C_new

    def _block(self, Z: torch.Tensor) -> torch.Tensor:
        """The feedforward block on every token: ``ReLU(Z F1 + b1) F2 + b2`` (the residual is added by the caller)."""
        F1, b1, F2, b2 = self.F1, self.b1, self.F2, self.b2
        if self.ensemble is not None:  # (S, ., .) against tokens (S, B, q, m)
            F1, F2 = F1.unsqueeze(1), F2.unsqueeze(1)
            b1, b2 = b1[:, None, None, :], b2[:, None, None, :]
        return torch.relu(Z @ F1 + b1) @ F2 + b2

    def forward(
        self,
        X: torch.Tensor,
        C: torch.Tensor,
        steps: int = 1,
        return_embeddings: bool = False,
        chunk: int | None = None,
    ):
        """Embed the task, apply the shared layer ``steps`` times, read out the centers.

        Finite tasks give finite centers, or a ``ValueError`` saying that the
        layer overflowed the dtype at this input's scale (rescale the data, for
        example with :func:`~kmtrf_core.tasks.to_unit_cube`).
        :meth:`apply_layers` is the same computation without that check (the
        training loop uses it and names non-finite centers as divergence).

        Parameters
        ----------
        X : torch.Tensor
            Points ``(B, n, d)``.
        C : torch.Tensor
            Initial centers ``(B, k, d)``.
        steps : int
            Number of layers ``T`` (weights shared across layers).
        return_embeddings : bool
            Also return the final token embeddings.
        chunk : int, optional
            Compute the attentions for at most ``chunk`` query tokens at a
            time, so the point-to-point weights take ``chunk x n`` memory
            instead of ``n x n`` (same result, up to rounding).

        Returns
        -------
        torch.Tensor or tuple
            Centers ``(B, k, d)`` (``(S, B, k, d)`` for an ensemble): the first
            ``d`` coordinates of the center tokens; with ``return_embeddings``,
            ``(centers, X_bar, C_bar)`` (the embeddings of the centered task
            when ``center`` is on).
        """
        out = self.apply_layers(X, C, steps, return_embeddings, chunk)
        centers = out[0] if return_embeddings else out
        check_finite_result(centers, "the layer's new centers")
        return out

    def apply_layers(
        self,
        X: torch.Tensor,
        C: torch.Tensor,
        steps: int = 1,
        return_embeddings: bool = False,
        chunk: int | None = None,
    ):
        """:meth:`forward` without its check of the output: centers that overflowed come back non-finite.

        >>> model = ClusterTransformer.from_lloyd(1, 2, "bn")
        >>> model.apply_layers(torch.tensor([[[0.0], [1.0]]], dtype=torch.float64),
        ...                    torch.tensor([[[0.0], [1.0]]], dtype=torch.float64)).flatten().tolist()
        [0.0, 1.0]
        """
        X, C = self.prepare_tasks(X, C)
        check_int(steps, "steps")
        if chunk is not None:
            check_int(chunk, "chunk")
        return self.run_unchecked(X, C, steps, return_embeddings, chunk)

    def run_unchecked(self, X, C, steps: int = 1, return_embeddings: bool = False, chunk: int | None = None):
        """:meth:`apply_layers` on tasks already checked (and, for an ensemble, shaped ``(S, B, ., d)``).

        It reads nothing back to the host, so a GPU training step built on it
        can be captured as one graph; the training loop calls it on tasks it
        sampled itself.
        """
        origin = None
        if self.center:
            origin = C.mean(dim=-2, keepdim=True)  # (..., 1, d), per task
            X, C = X - origin, C - origin
        X_bar, C_bar = embed_unchecked(X, C, self.codes.to(X.dtype))
        for step in range(steps):
            X_bar, C_bar = self.layer(X_bar, C_bar, chunk=chunk, points=X if step == 0 else None)
        centers = C_bar[..., : self.d]  # (B, k, d)
        if origin is not None:
            centers = centers + origin
        if return_embeddings:
            return centers, X_bar, C_bar
        return centers

    def prepare_tasks(self, X: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Check tasks ``(X, C)`` against this layer; an ensemble gets them broadcast to ``(S, B, ., d)``.

        Raises ``ValueError`` for tasks that are not a valid batch
        (:func:`~kmtrf_core.validation.check_points_centers`), whose ``d``, ``k``
        or dtype differ from the layer's, or, for an ensemble, whose leading
        axis is not ``S``.

        >>> model = ClusterTransformer(2, 3, ensemble=4)
        >>> X, C = model.prepare_tasks(torch.rand(5, 10, 2), torch.rand(5, 3, 2))
        >>> tuple(X.shape), tuple(C.shape)
        ((4, 5, 10, 2), (4, 5, 3, 2))
        """
        S = self.ensemble
        if S is None:
            check_points_centers(X, C)
        elif X.dim() == 3 and C.dim() == 3:
            check_points_centers(X, C)
            X, C = X.expand(S, *X.shape), C.expand(S, *C.shape)
        elif X.dim() == 4 and C.dim() == 4 and X.shape[0] == S and C.shape[0] == S:
            check_points_centers(X.flatten(0, 1), C.flatten(0, 1))
        else:
            raise ValueError(
                f"an ensemble of {S} takes X (B, n, d) and C (B, k, d), or X ({S}, B, n, d) and C ({S}, B, k, d); "
                f"got X {tuple(X.shape)} and C {tuple(C.shape)}"
            )
        if X.shape[-1] != self.d:
            raise ValueError(f"X must have d={self.d} columns for this model, got shape {tuple(X.shape)}")
        if C.shape[-2] != self.k:
            raise ValueError(f"C must hold k={self.k} centers for this model, got shape {tuple(C.shape)}")
        if X.dtype != self.Q.dtype:
            raise ValueError(f"X has dtype {X.dtype} but the model's weights are {self.Q.dtype}; convert one of them")
        return X, C

    def like(self, ensemble: int | None = None) -> "ClusterTransformer":
        """A fresh layer of the same configuration (scheme or codes, gamma, impl, center, ffn, dtype, device).

        The weights are not copied.

        >>> model = ClusterTransformer(2, 3, "oh", gamma=4.0)
        >>> twin = model.like(ensemble=2)
        >>> twin.scheme, twin.gamma, twin.ensemble
        ('oh', 4.0, 2)
        """
        # a private generator: building the copy must not move torch's global random state
        scratch = torch.Generator(device=self.Q.device).manual_seed(0)
        return ClusterTransformer(self.d, self.k, self.scheme, self.gamma, impl=self.impl, ensemble=ensemble,
                                  center=self.center, ffn=self.ffn,
                                  codes=self.codes if self.scheme == "custom" else None,
                                  dtype=self.Q.dtype, device=self.Q.device, generator=scratch)

    def hyperparameters(self) -> dict:
        """``d, k, scheme, gamma, impl, center, ffn``: what two layers must share (with their codes) to be stacked."""
        return dict(d=self.d, k=self.k, scheme=self.scheme, gamma=self.gamma, impl=self.impl, center=self.center,
                    ffn=self.ffn)

    @classmethod
    def stack(cls, models) -> "ClusterTransformer":
        """An ensemble holding copies of the trained tensors of several single models of one configuration.

        >>> g = torch.Generator().manual_seed(0)
        >>> ms = [ClusterTransformer(2, 3, generator=g) for _ in range(3)]
        >>> ens = ClusterTransformer.stack(ms)
        >>> X, C = torch.rand(5, 10, 2), torch.rand(5, 3, 2)
        >>> torch.allclose(ens(X, C)[1], ms[1](X, C))
        True
        """
        models = list(models)
        if not models or any(m.ensemble is not None for m in models):
            raise ValueError("models must be a non-empty sequence of single (non-ensemble) models")
        first = models[0]
        if any(m.Q.dtype != first.Q.dtype or m.Q.device != first.Q.device for m in models):
            raise ValueError("models must share their weights' dtype and device, got "
                             f"{sorted({(str(m.Q.dtype), str(m.Q.device)) for m in models})}")
        if any(m.hyperparameters() != first.hyperparameters() or not torch.equal(m.codes, first.codes)
               for m in models):
            raise ValueError("models must share d, k, scheme, codes, gamma, impl, center and ffn")
        ens = first.like(ensemble=len(models))
        states = [m.state_dict() for m in models]
        trained = set(first.parameter_names())
        ens.load_state_dict({name: torch.stack([state[name] for state in states]) if name in trained else value
                             for name, value in states[0].items()})
        return ens

    def members(self) -> list:
        """The single models of an ensemble (copies), in order."""
        if self.ensemble is None:
            return [self]
        state = self.state_dict()
        trained = set(self.parameter_names())
        out = []
        for i in range(self.ensemble):
            m = self.like()
            m.load_state_dict({name: value[i] if name in trained else value for name, value in state.items()})
            out.append(m)
        return out

    @classmethod
    def from_lloyd(
        cls,
        d: int,
        k: int,
        scheme: str = "bn",
        gamma: float = math.inf,
        *,
        codes: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float64,
        device=None,
    ) -> "ClusterTransformer":
        """The constructed layer of Theorem 2.1 / Appendix B.

        At ``gamma = inf`` each layer executes one Lloyd iteration exactly on
        tasks whose Lloyd iterations have no empty cluster and no tie in the
        assignments. A finite ``gamma`` gives the same weights at a finite
        temperature. ``scheme="na"`` has no code space and no construction.
        The returned model is frozen (``requires_grad=False``); call
        ``model.requires_grad_(True)`` to train from it. It centers each task
        (``center=True``): the construction is translation-equivariant, so this
        changes nothing in real arithmetic and keeps float32 exact for data far
        from the origin.

        Examples
        --------
        >>> from kmtrf_core.lloyd import has_empty_cluster, lloyd
        >>> X = torch.rand(3, 40, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> C = X[:, :4].clone()
        >>> bool(has_empty_cluster(X, C, steps=3).any())  # so the theorem's assumption holds
        False
        >>> model = ClusterTransformer.from_lloyd(2, 4, "bn")
        >>> torch.allclose(model(X, C, steps=3), lloyd(X, C, steps=3), rtol=1e-12, atol=0)
        True
        """
        model = cls(d, k, scheme, gamma, codes=codes, dtype=dtype, device=device, center=True)
        if model.codes.shape[1] == 0:
            raise ValueError("scheme 'na' has no code coordinates: there is no Lloyd construction for it")
        Q, K, V = lloyd_weights(d, model.codes.shape[1], dtype=dtype, device=device)
        model.load_state_dict({"Q": Q, "K": K, "V": V, "codes": model.codes})
        return model.requires_grad_(False)


def check_model(model, name: str = "model", single: bool = False) -> ClusterTransformer:
    """A :class:`ClusterTransformer`; with ``single=True``, not an ensemble.

    >>> check_model(ClusterTransformer(2, 3, ensemble=2), single=True)
    Traceback (most recent call last):
    ...
    ValueError: model must be a single layer, not an ensemble of 2; pick one with model.members()[i]
    """
    if not isinstance(model, ClusterTransformer):
        raise ValueError(f"{name} must be a ClusterTransformer, got {type(model).__name__}")
    if single and model.ensemble is not None:
        raise ValueError(f"{name} must be a single layer, not an ensemble of {model.ensemble}; "
                         f"pick one with {name}.members()[i]")
    return model
