"""Token embeddings of a clustering task (Definition 2.1, (OH), (BN)).

A task is a batch of points ``X`` (B, n, d) and initial centers ``C`` (B, k, d).
Each scheme appends a *code* of ``m`` extra coordinates to every token: the
center tokens carry the code of their cluster index, the point tokens start
with zeros there (the scratch space the layer writes assignments into).

=========  ====================  ===========================================
scheme     code of cluster j     m (extra dims)
=========  ====================  ===========================================
``"oh"``   one-hot e_j           k                      (Clarkson et al.)
``"bn"``   j in binary, LSB      ceil(log2 k)           (the paper, Def. 2.1)
``"sc"``   the scalar j          1                      (ours, not in the paper)
``"gc"``   j's Gray code, LSB    ceil(log2 k)           (ours: BN's codes in another order)
``"na"``   none                  0                      (no token embedding)
=========  ====================  ===========================================

Used in chapters 3 (sizes) and 5 (the construction).
"""

from __future__ import annotations

import torch

from .validation import check_choice, check_int, check_points_centers, check_same_dtype, check_tensor

__all__ = [
    "SCHEMES",
    "binary_codes",
    "code_dim",
    "cluster_codes",
    "embedding_dim",
    "embed",
    "embed_unchecked",
    "parameter_count",
    "parameter_reduction",
]

SCHEMES = ("oh", "bn", "na", "sc", "gc")
"""Token-embedding schemes: one-hot, binary, none, and our scalar and Gray codes."""


def _log2_ceil(k: int) -> int:
    return (k - 1).bit_length()


def binary_codes(k: int, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """Binary codes of the cluster indices 0..k-1, one row per cluster.

    Row ``j`` is the integer ``j`` written with ``ceil(log2 k)`` bits, least
    significant bit first. This is the matrix :math:`B_k` of Definition 2.1,
    transposed to rows.

    Parameters
    ----------
    k : int
        Number of clusters, ``k >= 2``.
    dtype, device
        Of the returned tensor.

    Returns
    -------
    torch.Tensor
        Shape ``(k, ceil(log2 k))``, entries in {0, 1}; all rows distinct.

    Examples
    --------
    >>> binary_codes(6).T.int()
    tensor([[0, 1, 0, 1, 0, 1],
            [0, 0, 1, 1, 0, 0],
            [0, 0, 0, 0, 1, 1]], dtype=torch.int32)
    """
    check_int(k, "k", minimum=2)
    bits = torch.arange(_log2_ceil(k), device=device)
    idx = torch.arange(k, device=device)
    return ((idx[:, None] >> bits[None, :]) & 1).to(dtype)


def code_dim(k: int, scheme: str) -> int:
    """Number of code coordinates ``m`` a scheme appends to each token (Definition 2.1).

    Parameters
    ----------
    k : int
        Number of clusters, ``k >= 2``.
    scheme : {"oh", "bn", "gc", "sc", "na"}
        Token embedding.

    Returns
    -------
    int
        ``k`` (OH), ``ceil(log2 k)`` (BN, GC), 1 (SC) or 0 (NA).

    Examples
    --------
    >>> [code_dim(10, s) for s in ("oh", "bn", "sc", "na")]
    [10, 4, 1, 0]
    """
    check_int(k, "k", minimum=2)
    scheme = check_choice(scheme, "scheme", SCHEMES)
    return {"oh": k, "bn": _log2_ceil(k), "gc": _log2_ceil(k), "sc": 1, "na": 0}[scheme]


def cluster_codes(k: int, scheme: str, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The code matrix of a scheme, one row per cluster: ``(k, code_dim(k, scheme))``.

    ``"oh"`` gives the identity, ``"bn"`` :func:`binary_codes`, ``"gc"`` the
    binary codes of the Gray code ``j ^ (j >> 1)`` (BN's bits with neighbouring
    clusters one bit apart; for ``k`` not a power of two a different subset of
    the cube's corners), ``"sc"`` the column ``0, 1, ..., k-1`` and ``"na"``
    an empty ``(k, 0)`` matrix (the center codes ``E_C`` of Definition 2.1).

    Parameters
    ----------
    k : int
        Number of clusters, ``k >= 2``.
    scheme : {"oh", "bn", "gc", "sc", "na"}
        Token embedding.
    dtype, device
        Of the returned tensor.

    Returns
    -------
    torch.Tensor
        ``(k, m)`` with ``m = code_dim(k, scheme)``; row ``j`` is the code of cluster ``j``.

    Examples
    --------
    >>> cluster_codes(3, "sc").flatten().tolist()
    [0.0, 1.0, 2.0]
    >>> cluster_codes(6, "gc").T.int()
    tensor([[0, 1, 1, 0, 0, 1],
            [0, 0, 1, 1, 1, 1],
            [0, 0, 0, 0, 1, 1]], dtype=torch.int32)
    """
    scheme = check_choice(scheme, "scheme", SCHEMES)
    check_int(k, "k", minimum=2)
    if scheme == "oh":
        return torch.eye(k, dtype=dtype, device=device)
    if scheme == "bn":
        return binary_codes(k, dtype=dtype, device=device)
    if scheme == "gc":
        bits = torch.arange(_log2_ceil(k), device=device)
        gray = torch.arange(k, device=device)
        gray = gray ^ (gray >> 1)
        return ((gray[:, None] >> bits[None, :]) & 1).to(dtype)
    if scheme == "sc":
        return torch.arange(k, dtype=dtype, device=device)[:, None]
    return torch.zeros(k, 0, dtype=dtype, device=device)


def embedding_dim(d: int, k: int, scheme: str) -> int:
    """Token embedding size ``d + code_dim(k, scheme)``.

    (OH) gives ``d + k``, (BN) ``d + ceil(log2 k)`` (Definition 2.1).

    Parameters
    ----------
    d : int
        Data dimension.
    k : int
        Number of clusters, ``k >= 2``.
    scheme : {"oh", "bn", "gc", "sc", "na"}
        Token embedding.

    Returns
    -------
    int
        ``d_emb``, the size of every token and of each projection's side.

    Examples
    --------
    >>> embedding_dim(32, 10, "oh"), embedding_dim(32, 10, "bn")
    (42, 36)
    """
    check_int(d, "d")
    return d + code_dim(k, scheme)


def parameter_count(d: int, k: int, scheme: str) -> int:
    """Parameters of one layer: four attentions, each with Q, K, V of size ``d_emb x d_emb``.

    Parameters
    ----------
    d, k, scheme
        As in :func:`embedding_dim`.

    Returns
    -------
    int
        ``12 * embedding_dim(d, k, scheme) ** 2`` (the layer of Definition 2.3, Eq. 4).

    Examples
    --------
    >>> parameter_count(2, 2, "oh")
    192
    """
    return 12 * embedding_dim(d, k, scheme) ** 2


def parameter_reduction(d: int, k: int, scheme: str = "bn", baseline: str = "oh") -> float:
    """Fraction of the baseline's parameters that ``scheme`` saves, ``1 - P(scheme) / P(baseline)``.

    The paper's "up to 75% fewer parameters when k is about d" (Section 1) is
    ``parameter_reduction(d, d)`` for large ``d``.

    Parameters
    ----------
    d, k
        As in :func:`embedding_dim`.
    scheme, baseline : {"oh", "bn", "gc", "sc", "na"}
        The scheme to rate and the one it is compared with.

    Returns
    -------
    float
        In ``[0, 1)`` when ``scheme`` is the smaller one; negative when it is larger.

    Examples
    --------
    >>> round(parameter_reduction(1024, 1024), 3)
    0.745
    """
    return 1.0 - parameter_count(d, k, scheme) / parameter_count(d, k, baseline)


def embed(
    X: torch.Tensor, C: torch.Tensor, scheme: str = "bn", *, codes: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Initial token embeddings ``(X_bar, C_bar)`` of a batch of tasks (Definition 2.1).

    Parameters
    ----------
    X : torch.Tensor
        Points, ``(B, n, d)`` (an ensemble's ``(S, B, n, d)`` also works).
    C : torch.Tensor
        Initial centers, ``(B, k, d)`` (or ``(S, B, k, d)``, with ``X``'s ``S`` and ``B``).
    scheme : {"oh", "bn", "gc", "sc", "na"}
        Token embedding; ignored when ``codes`` is given.
    codes : torch.Tensor, optional
        A ``(k, m)`` code matrix of ``X``'s dtype to use instead of the scheme's.

    Returns
    -------
    X_bar : torch.Tensor
        ``(..., n, d_emb)``: the points followed by ``m`` zeros.
    C_bar : torch.Tensor
        ``(..., k, d_emb)``: the centers followed by their cluster codes.

    Examples
    --------
    >>> X, C = torch.rand(2, 7, 3), torch.rand(2, 5, 3)
    >>> Xb, Cb = embed(X, C, "bn")
    >>> Xb.shape, Cb.shape
    (torch.Size([2, 7, 6]), torch.Size([2, 5, 6]))
    >>> embed(torch.rand(2, 3, 5, 2), torch.rand(3, 2, 3, 2))
    Traceback (most recent call last):
    ...
    ValueError: X (S, B, n, d) and C (S, B, k, d) must share S and B, got shapes (2, 3, 5, 2) and (3, 2, 3, 2)
    """
    if isinstance(X, torch.Tensor) and isinstance(C, torch.Tensor) and X.dim() == 4 and C.dim() == 4:
        if X.shape[:2] != C.shape[:2]:
            raise ValueError(f"X (S, B, n, d) and C (S, B, k, d) must share S and B, got shapes {tuple(X.shape)} "
                             f"and {tuple(C.shape)}")
        check_points_centers(X.flatten(0, 1), C.flatten(0, 1))  # an ensemble's (S, B, ., d) tasks
    else:
        check_points_centers(X, C)
    k = C.shape[-2]
    if codes is None:
        codes = cluster_codes(k, scheme, dtype=X.dtype, device=X.device)  # (k, m)
    else:
        check_tensor(codes, "codes", 2, nonempty=False)
        check_same_dtype(X, codes, "X and codes")
        if codes.shape[0] != k:
            raise ValueError(f"codes must have shape (k, m) with k={k}, got {tuple(codes.shape)}")
    return embed_unchecked(X, C, codes)


def embed_unchecked(X: torch.Tensor, C: torch.Tensor, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`embed` with given ``codes`` and no input checks (the training step's hot path).

    >>> Xb, Cb = embed_unchecked(torch.zeros(1, 2, 1), torch.ones(1, 2, 1), torch.eye(2))
    >>> Cb.tolist()
    [[[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]]]
    """
    m = codes.shape[1]
    X_bar = torch.cat([X, X.new_zeros(X.shape[:-1] + (m,))], dim=-1)  # (B, n, d_emb)
    C_bar = torch.cat([C, codes.expand(C.shape[:-1] + (m,))], dim=-1)  # (B, k, d_emb)
    return X_bar, C_bar
