"""The Lipschitz bound of Theorem 3.1 / I.2 and an empirical estimate beside it (Appendix I).

The bound composes three pieces:

* Lemma I.1 (Eq. 37): norms of the tokens before and after the layer, from
  ``d``, ``d_E`` (the largest squared norm of an initial center token) and
  ``Gamma_2`` (spectral-norm bound of the value projections);
* Lemma I.2 (Eq. 45): ``kappa_1``, the loss's sensitivity to the layer output,
  through ``r*`` (Eq. 49-51) and the input stability ``omega_tau`` of the
  regularized argmin (Assumption H.1);
* Theorem I.1 (Eq. 116-160): ``phi``, the output's sensitivity to each of the
  twelve projection matrices, built from the attention constants
  ``kappa_2 .. kappa_5`` and the dispersion ``delta`` of Lemmas I.4-I.8 (Table 2),
  with the token norms of Table 3.

``alpha = kappa_1 * phi``. The numbers are astronomically large (``omega_tau``
of softmin holds ``exp(r*/tau)``), so everything is carried as natural logs.

Two choices are exposed rather than hidden:

* ``combine``: the paper takes the *maximum* of the twelve per-matrix
  constants (Eq. 161); changing all twelve matrices at once and chaining the
  triangle inequality gives their *sum*, which is what the argument supports.
  The two differ by at most a factor 12.
* ``refined``: the paper's softmax stability ``exp(delta)/m`` (Lemma I.3) can be
  replaced by the exact l1 operator norm of the softmax Jacobian,
  ``max_j 2 p_j (1 - p_j) <= 1/2``, and an attention weight never exceeds 1.
  For sparsemax (which Assumption H.1 leaves open) the Jacobian
  ``diag(s) - s s^T/|S|`` has l1 operator norm ``2 (1 - 1/|S|) <= 2 (1 - 1/k)``.
  ``refined=True`` uses these; the exponential factors then disappear.

Used in the Lipschitz chapter.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from .validation import check_choice, check_float_dtype, check_int, check_number, check_points_centers
from .embeddings import SCHEMES, cluster_codes, embedding_dim
from .model import ClusterTransformer
from .objectives import OMEGAS, smoothed_kmeans_loss
from .tasks import make_generator

_COMBINE = ("max", "sum")  # how lipschitz_bound forms phi from the twelve per-matrix constants

__all__ = ["center_norm_sq", "LipschitzBound", "lipschitz_bound", "random_parameters", "empirical_lipschitz"]


def center_norm_sq(d: int, k: int, scheme: str, exact: bool = False) -> float:
    """``d_E``: the largest squared norm of an initial center token (Theorem 3.1, Eq. 37).

    The paper's values are ``d + 1`` (OH) and ``d + ceil(log2 k)`` (BN, and
    our Gray codes); for our scalar codes it is ``d + (k - 1)^2`` and without
    codes ``d``. With
    ``exact=True`` the code part is the largest squared code norm actually
    used (for BN the largest number of one bits among ``0..k-1``).

    Parameters
    ----------
    d : int
        Data dimension.
    k : int
        Number of clusters, ``k >= 2``.
    scheme : {"oh", "bn", "gc", "sc", "na"}
        Token embedding.
    exact : bool
        Use the largest squared norm of the actual codes instead of the paper's value.
        ``True`` or ``False`` only.

    Returns
    -------
    int
        ``d_E``.

    Examples
    --------
    >>> center_norm_sq(4, 6, "oh"), center_norm_sq(4, 6, "bn"), center_norm_sq(4, 6, "bn", exact=True)
    (5, 7, 6)
    """
    check_int(d, "d")
    check_int(k, "k", minimum=2)
    scheme = check_choice(scheme, "scheme", SCHEMES)
    if not isinstance(exact, bool):
        raise ValueError(f"exact must be True or False, got {exact!r}")
    if exact:
        codes = cluster_codes(k, scheme, dtype=torch.float64)
        extra = int((codes * codes).sum(dim=1).max().item()) if codes.shape[1] else 0
    else:
        bits = (k - 1).bit_length()
        extra = {"oh": 1, "bn": bits, "gc": bits, "sc": (k - 1) ** 2, "na": 0}[scheme]
    return d + extra


def _logsum(logs) -> float:
    m = max(logs)
    return m + math.log(sum(math.exp(v - m) for v in logs))


@dataclass
class LipschitzBound:
    """All pieces of the bound of Theorem I.2, as returned by :func:`lipschitz_bound`.

    Every ``log_*`` is a natural log; ``log10_alpha`` is the headline number.

    Attributes
    ----------
    n, k, d, scheme, gamma, tau, omega, Gamma1, Gamma2, refined, combine
        The arguments of :func:`lipschitz_bound`.
    d_E : float
        Largest squared norm of an initial center token (:func:`center_norm_sq`).
    d_emb : int
        Token embedding size.
    norms : dict
        Token norm bounds of Lemma I.1 (Eq. 37): ``"x0"``, ``"x1"``, ``"c0"``, ``"c_out"``.
    r_star : float
        The bound ``r*`` on squared distances (Eq. 49-51).
    log_omega_tau : float
        Log of the input stability ``omega_tau`` of the regularized min (Assumption H.1).
    log_kappa1, log_phi : float
        Logs of ``kappa_1`` (Eq. 45) and ``phi`` (Theorem I.1).
    terms : dict
        Log of each of the twelve per-matrix constants of ``phi``, keys ``"Q1"`` .. ``"V4"``.

    Examples
    --------
    >>> b = lipschitz_bound(8, 3, 2, "bn")
    >>> b.d_E, b.d_emb, round(b.log10_alpha, 2)
    (4.0, 4, 25.67)
    >>> max(b.terms, key=b.terms.get)   # the matrix the bound is most sensitive to
    'K1'
    """

    n: int
    k: int
    d: int
    scheme: str
    d_E: float
    d_emb: int
    gamma: float
    tau: float
    omega: str
    Gamma1: float
    Gamma2: float
    refined: bool
    combine: str
    norms: dict
    r_star: float
    log_omega_tau: float
    log_kappa1: float
    log_phi: float
    terms: dict = field(repr=False)

    @property
    def log_alpha(self) -> float:
        """Natural log of the bound ``alpha = kappa_1 * phi``.

        >>> b = lipschitz_bound(8, 3, 2, "bn")
        >>> b.log_alpha == b.log_kappa1 + b.log_phi
        True
        """
        return self.log_kappa1 + self.log_phi

    @property
    def log10_alpha(self) -> float:
        """Base-10 log of ``alpha``.

        >>> round(lipschitz_bound(8, 3, 2, "bn").log10_alpha, 2)
        25.67
        """
        return self.log_alpha / math.log(10)

    @property
    def k_sqrt_dE(self) -> float:
        """The recurring quantity ``k sqrt(d_E)`` (Eq. 202).

        >>> lipschitz_bound(8, 3, 2, "bn").k_sqrt_dE   # d_E = 2 + 2 for BN with k = 3
        6.0
        """
        return self.k * math.sqrt(self.d_E)

    @property
    def dE_over_sqrt_demb(self) -> float:
        """The recurring quantity ``d_E / sqrt(d_emb)`` (Eq. 202), inside the exponentials.

        >>> lipschitz_bound(8, 3, 2, "bn").dE_over_sqrt_demb   # d_E = 4, d_emb = 4
        2.0
        """
        return self.d_E / math.sqrt(self.d_emb)


def _overflow_named(function):
    """Turn an ``OverflowError`` of the float arithmetic inside ``function`` into a ``ValueError`` naming its range."""

    @functools.wraps(function)
    def checked(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except OverflowError:
            raise ValueError(f"{function.__name__}: a term overflows float64 at these arguments (gamma, tau, "
                             "Gamma1, Gamma2 too large); the bound is only meaningful for moderate values") from None

    return checked


@_overflow_named
def lipschitz_bound(
    n: int,
    k: int,
    d: int,
    scheme: str = "bn",
    gamma: float = 1.0,
    tau: float = 0.1,
    omega: str = "l2",
    Gamma1: float = 1.0,
    Gamma2: float = 1.0,
    *,
    refined: bool = False,
    combine: str = "max",
    exact_dE: bool = False,
) -> LipschitzBound:
    """Theorem I.2's bound ``alpha`` on ``|L~(Theta) - L~(Theta')| / ||Theta - Theta'||`` for one task.

    ``||Theta - Theta'||`` is the largest spectral norm of the twelve
    differences; ``Gamma1`` bounds ``|Q_mu|, |K_mu|`` and ``Gamma2`` bounds
    ``|V_mu|`` (Assumption I.2); points and centers lie in ``[0, 1]^d``
    (Assumption I.1).

    Parameters
    ----------
    n, k, d : int
        Points, clusters, dimension.
    scheme : {"oh", "bn", "gc", "sc", "na"}
        Token embedding: sets ``d_E`` (:func:`center_norm_sq`) and ``d_emb``.
    gamma : float
        Attention inverse temperature, finite and ``> 0``.
    tau : float
        Penalty of the regularized min, ``> 0``.
    omega : {"ne", "l2"}
        Softmin or sparsemax. The paper bounds ``omega_tau`` only for softmin
        (``exp(r*/tau)/k``, Eq. 33); for sparsemax both modes use the exact
        ``2 (1 - 1/k)`` (module docstring).
    Gamma1, Gamma2 : float
        Spectral-norm bounds of the query/key and of the value projections,
        finite and ``> 0`` (a bool is refused).
    refined : bool
        Cap the softmax stability constants (the attentions', and
        ``omega_tau`` for softmin) at ``1/2`` and the largest attention
        weight at 1 (module docstring). ``True`` or ``False`` only.
    combine : {"max", "sum"}
        How the twelve per-matrix constants form ``phi`` (in any case).
    exact_dE : bool
        Take ``d_E`` from the actual codes (:func:`center_norm_sq` with ``exact=True``).
        ``True`` or ``False`` only.

    Returns
    -------
    LipschitzBound

    Examples
    --------
    >>> oh = lipschitz_bound(512, 6, 4, "oh", tau=0.1)
    >>> bn = lipschitz_bound(512, 6, 4, "bn", tau=0.1)
    >>> oh.log10_alpha < bn.log10_alpha   # OH has the smaller constant (Section 3)
    True
    >>> lipschitz_bound(512, 6, 4, "oh", combine="SUM").combine
    'sum'
    """
    check_int(n, "n")
    check_int(k, "k", minimum=2)
    scheme = check_choice(scheme, "scheme", SCHEMES)
    gamma = check_number(gamma, "gamma", allow_inf=True)
    if math.isinf(gamma):
        raise ValueError("gamma must be finite for the Lipschitz bound")
    tau = check_number(tau, "tau")
    omega = check_choice(omega, "omega", OMEGAS)
    G1, G2 = check_number(Gamma1, "Gamma1"), check_number(Gamma2, "Gamma2")
    for flag, value in (("refined", refined), ("exact_dE", exact_dE)):
        if not isinstance(value, bool):
            raise ValueError(f"{flag} must be True or False, got {value!r}")
    combine = check_choice(combine, "combine", _COMBINE)
    dE = float(center_norm_sq(d, k, scheme, exact=exact_dE))
    m_emb = embedding_dim(d, k, scheme)
    s = gamma / math.sqrt(m_emb)

    # Lemma I.1 (Eq. 37)
    norms = {
        "x0": math.sqrt(d),
        "x1": (1 + G2) * math.sqrt(d) + G2 * math.sqrt(dE),
        "c0": math.sqrt(dE),
        "c_out": (1 + 2 * G2 + 2 * G2**2) * math.sqrt(dE),
    }
    # Eq. 49-51: the paper continues with the looser 4 (1 + Gamma2)^4 d_E
    r_star = 4 * (1 + G2) ** 4 * dE

    # Assumption H.1
    if omega == "l2":
        log_omega = math.log(2 * (1 - 1 / k))
    else:
        log_omega = r_star / tau - math.log(k)  # exp(delta / tau) / k with delta = r* (Eq. 33)
        if refined:
            log_omega = min(log_omega, math.log(0.5))
    # Eq. 45: kappa_1 = 4 n (1 + G2)^2 sqrt(d_E) (1 + r* omega_tau / tau)
    log_inner = _logsum([0.0, math.log(r_star) + log_omega - math.log(tau)])
    log_kappa1 = math.log(4 * n) + 2 * math.log(1 + G2) + 0.5 * math.log(dE) + log_inner

    # Lemmas I.4-I.8 (Table 2), as logs
    def log_delta_exp(rho, rho_p):  # log of exp(delta), delta = s G1^2 (rho + rho')^2
        return s * G1**2 * (rho + rho_p) ** 2

    def log_stab(rho, rho_p, m_keys):
        # l1 stability of the attention softmax: exp(delta)/m' (Lemma I.3); refined: also <= 1/2
        paper = log_delta_exp(rho, rho_p) - math.log(m_keys)
        return min(paper, math.log(0.5)) if refined else paper

    def log_maxweight(rho, rho_p, m_keys):
        # largest attention weight: exp(delta)/m' (Lemma I.3); refined: also <= 1
        paper = log_delta_exp(rho, rho_p) - math.log(m_keys)
        return min(paper, 0.0) if refined else paper

    def k2(m, rho_p):  # value projection
        return math.log(m * rho_p)

    def k3(m, m_keys, rho, rho_p):  # query projection: 2 s m rho rho' (rho + rho') G1 G2 * stab * m'
        return math.log(2 * s * m * rho * rho_p * (rho + rho_p) * G1 * G2 * m_keys) + log_stab(rho, rho_p, m_keys)

    def k4(m, m_keys, rho, rho_p):  # key projection
        return math.log(2 * s * m * rho_p**2 * (rho + rho_p) * G1 * G2 * m_keys) + log_stab(rho, rho_p, m_keys)

    def k5(m, m_keys, rho, rho_p):  # key tokens (Eq. 100 + Eq. 112)
        first = math.log(G2 * m) + log_maxweight(rho, rho_p, m_keys)
        second = math.log(G2 * m * rho_p * 2 * s * G1**2 * (rho + rho_p)) + log_stab(rho, rho_p, m_keys)
        return _logsum([first, second])

    # Table 3 token norms, with the paper's simplification rho'_3 = sqrt(d_E) (1 + 2 G2)
    rX, rC, rX1 = math.sqrt(d), math.sqrt(dE), math.sqrt(dE) * (1 + 2 * G2)
    k5_3 = k5(k, n, rC, rX1)
    terms = {
        "Q1": k5_3 + k3(n, k, rX, rC),
        "K1": k5_3 + k4(n, k, rX, rC),
        "V1": k5_3 + k2(n, rC),
        "Q2": k5_3 + k3(n, n, rX, rX),
        "K2": k5_3 + k4(n, n, rX, rX),
        "V2": k5_3 + k2(n, rX),
        "Q3": k3(k, n, rC, rX1),
        "K3": k4(k, n, rC, rX1),
        "V3": k2(k, rX1),
        "Q4": k3(k, k, rC, rC),
        "K4": k4(k, k, rC, rC),
        "V4": k2(k, rC),
    }
    log_phi = max(terms.values()) if combine == "max" else _logsum(list(terms.values()))
    return LipschitzBound(
        n=n, k=k, d=d, scheme=scheme, d_E=dE, d_emb=m_emb, gamma=gamma, tau=tau, omega=omega,
        Gamma1=G1, Gamma2=G2, refined=refined, combine=combine, norms=norms, r_star=r_star,
        log_omega_tau=log_omega, log_kappa1=log_kappa1, log_phi=log_phi, terms=terms,
    )


def random_parameters(
    count: int, d_emb: int, Gamma1: float, Gamma2: float, generator=None, dtype=torch.float64
) -> dict:
    """``count`` random parameter sets inside Assumption I.2's ball.

    Each matrix is Gaussian, rescaled to a spectral norm drawn uniformly in
    ``[Gamma / 1000, Gamma)`` (``Gamma1`` for Q and K, ``Gamma2`` for V).

    Parameters
    ----------
    count : int
        Number of parameter sets.
    d_emb : int
        Token embedding size.
    Gamma1, Gamma2 : float
        Spectral-norm bounds of Q, K and of V, finite and ``> 0``.
    generator : torch.Generator or int, optional
        Source of randomness (:func:`~kmtrf_core.tasks.make_generator`: an
        int is a seed, None is seed 0).
    dtype : torch.dtype
        Of the returned tensors: ``torch.float32`` or ``torch.float64``.

    Returns
    -------
    dict
        ``"Q"``, ``"K"``, ``"V"``: ``(count, 4, d_emb, d_emb)``, on the
        generator's device.

    Raises
    ------
    ValueError
        Naming the argument: a count or size below 1, a bound that is not a
        positive finite number, another dtype, a generator that is neither a
        ``torch.Generator`` nor an int.

    Examples
    --------
    >>> p = random_parameters(3, 4, 1.0, 0.5, generator=torch.Generator().manual_seed(0))
    >>> p["V"].shape, bool(torch.linalg.matrix_norm(p["V"], ord=2).max() <= 0.5)
    (torch.Size([3, 4, 4, 4]), True)
    """
    check_int(count, "count")
    check_int(d_emb, "d_emb")
    Gamma1, Gamma2 = check_number(Gamma1, "Gamma1"), check_number(Gamma2, "Gamma2")
    check_float_dtype(dtype)
    gen = make_generator(generator, name="generator")
    draw = dict(generator=gen, dtype=dtype, device=gen.device)  # drawn where the generator lives
    out = {}
    for name, bound in (("Q", Gamma1), ("K", Gamma1), ("V", Gamma2)):
        W = torch.randn(count, 4, d_emb, d_emb, **draw)
        target = bound * torch.rand(count, 4, 1, 1, **draw).clamp_min(1e-3)
        out[name] = W / torch.linalg.matrix_norm(W, ord=2).unsqueeze(-1).unsqueeze(-1) * target
    return out


def empirical_lipschitz(
    X: torch.Tensor,
    C: torch.Tensor,
    scheme: str = "bn",
    gamma: float = 1.0,
    tau: float = 0.1,
    omega: str = "l2",
    Gamma1: float = 1.0,
    Gamma2: float = 1.0,
    pairs: int = 64,
    step: float = 1e-2,
    generator=None,
) -> dict:
    """Measured Lipschitz constants of the per-task smoothed loss in ``Theta``, inside the ball.

    Two estimates, both lower bounds on the true constant (so never above a
    valid bound):

    * ``quotient``: the largest ``|L~(Theta) - L~(Theta')| / ||Theta - Theta'||``
      over random pairs; ``Theta'`` is ``Theta`` plus a random direction of
      spectral size ``step`` times the radius (pairs far apart give small
      quotients);
    * ``gradient``: the largest dual norm of the gradient, ``sum`` of the
      nuclear norms of the twelve matrix gradients (the dual of the max of
      spectral norms), at random ``Theta``.

    Both take the largest value over the tasks of the batch. The parameter sets run together as
    ensembles (:class:`~kmtrf_core.model.ClusterTransformer` with ``ensemble``), a few million
    attention weights at a time: the same values as one set after another, several times faster.

    Parameters
    ----------
    X : torch.Tensor
        Points ``(B, n, d)``.
    C : torch.Tensor
        Initial centers ``(B, k, d)``.
    scheme, gamma, tau, omega, Gamma1, Gamma2
        As in :func:`lipschitz_bound` (``gamma`` finite: ``gamma = inf`` has no gradient).
    pairs : int
        Random parameter sets (and pairs) to try.
    step : float
        Size of the perturbation, relative to ``max(Gamma1, Gamma2)``; finite and ``> 0``.
    generator : torch.Generator or int, optional
        Source of randomness (:func:`random_parameters`: an int is a seed,
        None is seed 0). The parameters are drawn where the generator lives
        and the layers run on ``X``'s device.

    Returns
    -------
    dict
        ``"quotient"`` and ``"gradient"`` (floats, the largest values) and
        ``"quotients"``, ``"gradients"`` (lists of the ``pairs`` values).

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.rand(2, 8, 2, generator=g, dtype=torch.float64); C = X[:, :3].clone()
    >>> emp = empirical_lipschitz(X, C, "bn", pairs=2, generator=g)
    >>> len(emp["quotients"]), emp["quotient"] < 10 ** lipschitz_bound(8, 3, 2, "bn").log10_alpha
    (2, True)
    """
    check_points_centers(X, C)
    B, n, d = X.shape
    k = C.shape[1]
    check_int(pairs, "pairs")
    scheme = check_choice(scheme, "scheme", SCHEMES)
    gamma = check_number(gamma, "gamma", allow_inf=True)
    if math.isinf(gamma):
        raise ValueError("gamma must be finite for the empirical constant (gamma = inf has no gradient)")
    tau, omega = check_number(tau, "tau"), check_choice(omega, "omega", OMEGAS)
    Gamma1, Gamma2 = check_number(Gamma1, "Gamma1"), check_number(Gamma2, "Gamma2")
    step = check_number(step, "step")
    gen = make_generator(generator, name="generator")  # one stream: the parameters, then the directions
    d_emb = embedding_dim(d, k, scheme)
    params = {name: value.to(X.device) for name, value in
              random_parameters(pairs, d_emb, Gamma1, Gamma2, generator=gen, dtype=X.dtype).items()}
    direction = {name: value.to(X.device) for name, value in
                 random_parameters(pairs, d_emb, 1.0, 1.0, generator=gen, dtype=X.dtype).items()}
    quotients, gradients = [], []
    # the pairs run as ensembles of up to `chunk` members, a few million attention weights at a time
    chunk = max(1, min(pairs, _ENSEMBLE_WEIGHTS // (B * (n + k) ** 2)))
    for start in range(0, pairs, chunk):
        members = range(start, min(pairs, start + chunk))
        S = len(members)
        # a scratch generator: the weights are overwritten, and the caller's random state stays untouched
        model = ClusterTransformer(d, k, scheme, gamma, dtype=X.dtype, device=X.device, ensemble=S,
                                   generator=torch.Generator(device=X.device))
        with torch.no_grad():
            for name in "QKV":
                getattr(model, name).copy_(params[name][members.start:members.stop])

        def member_losses():  # (S, B)
            out = model(X, C)  # (S, B, k, d)
            return smoothed_kmeans_loss(X.expand(S, *X.shape).reshape(S * B, n, d), out.reshape(S * B, k, d),
                                        omega, tau).view(S, B)

        loss = member_losses()
        grads = torch.autograd.grad(loss.max(dim=1).values.sum(), [model.Q, model.K, model.V])
        gradients += sum(torch.linalg.matrix_norm(g, ord="nuc").sum(dim=1) for g in grads).tolist()
        with torch.no_grad():
            delta = {name: direction[name][members.start:members.stop] for name in "QKV"}  # (S, 4, m, m)
            size = torch.stack([torch.linalg.matrix_norm(delta[name], ord=2).amax(dim=1) for name in "QKV"]
                               ).amax(dim=0)  # (S,): the largest spectral norm of each member's direction
            scale = step * max(Gamma1, Gamma2) / size
            for name in "QKV":
                getattr(model, name).add_(scale[:, None, None, None] * delta[name])
            loss2 = member_losses()
        dist = scale * size
        quotients += ((loss2 - loss.detach()).abs().amax(dim=1) / dist).tolist()
    return {
        "quotient": max(quotients),
        "gradient": max(gradients),
        "quotients": quotients,
        "gradients": gradients,
    }


_ENSEMBLE_WEIGHTS = 1 << 22
"""About how many attention weights (members x tasks x tokens^2) :func:`empirical_lipschitz` holds at once."""
