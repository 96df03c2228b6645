"""What the layer costs by count: FLOPs and bytes of its four attentions (Figure 1, Table 1).

The analytic side of the cost chapter: :func:`attention_cost` counts the work
of one forward pass for a configuration, so that a measurement of
:mod:`kmtrf_core.cost.harness` can be explained (and fitted) by it.
"""

from __future__ import annotations

from ..embeddings import SCHEMES, embedding_dim
from ..validation import check_choice, check_clusters, check_int

__all__ = ["attention_cost"]


def attention_cost(d: int, k: int, n: int, scheme: str, batch: int = 1, itemsize: int = 4) -> dict:
    """FLOPs and bytes of the forward pass of one layer (Eq. 4), attention by attention.

    For an attention with ``q`` queries, ``r`` keys and token size
    ``m = d_emb`` the count is

    * projections: ``2 m^2 (q + 2 r)`` FLOPs (``Q`` on the queries, ``K`` and ``V`` on the keys),
    * scores and weighted values: ``2 q r m`` FLOPs each (two GEMMs),
    * weights: one ``q x r`` matrix, ``q r`` numbers,
    * tokens: the projected queries, keys and values, ``(q + 2 r) m`` numbers,

    for the four attentions points->centers ``(n, k)``, points->points
    ``(n, n)``, centers->points ``(k, n)`` and centers->centers ``(k, k)``,
    times ``batch``; bytes are numbers times ``itemsize``. The total is

    .. math::

        \\mathrm{FLOPs} = B\\,[\\,12\\, m^2 (n + k) + 4\\, m\\, (n + k)^2\\,],\\qquad
        \\mathrm{weights} = B\\,(n + k)^2 .

    Softmax, norms and residual additions (``O(q r)`` or ``O(q m)``) are
    left out of the FLOPs; their cost is memory traffic over the same
    ``q x r`` weights and tokens that are counted in bytes. A backward pass
    costs about twice the forward FLOPs. Only ``m`` depends on the embedding:
    the projection FLOPs scale with ``m^2``, the attention GEMMs with ``m``,
    and the weight bytes not at all.

    Parameters
    ----------
    d, k, n : int
        Data dimension, clusters (``2 <= k <= n``), points per task.
    scheme : str
        Token embedding, one of :data:`~kmtrf_core.embeddings.SCHEMES`, which
        sets ``m = embedding_dim(d, k, scheme)``.
    batch : int
        Tasks ``B``.
    itemsize : int
        Bytes per number (4 for float32).

    Returns
    -------
    dict
        ``d_emb``; totals ``projection_flops``, ``attention_flops``,
        ``flops``, ``weight_bytes``, ``token_bytes``, ``param_bytes``
        (``12 m^2`` numbers) and ``bytes`` (their sum); and ``attentions``, a
        list of four dicts with ``name, queries, keys, projection_flops,
        attention_flops, flops, weight_bytes, token_bytes``.

    Examples
    --------
    >>> cost = attention_cost(d=2, k=2, n=4, scheme="bn")
    >>> cost["d_emb"], cost["flops"] == 12 * 3**2 * 6 + 4 * 3 * 6**2
    (3, True)
    >>> [a["weight_bytes"] // 4 for a in cost["attentions"]]
    [8, 16, 8, 4]
    """
    check_int(d, "d")
    check_int(k, "k", minimum=2)
    check_int(n, "n")
    scheme = check_choice(scheme, "scheme", SCHEMES)
    check_int(batch, "batch")
    check_int(itemsize, "itemsize")
    check_clusters(k, n)
    m = embedding_dim(d, k, scheme)
    attentions = []
    for name, q, r in (
        ("points->centers", n, k),
        ("points->points", n, n),
        ("centers->points", k, n),
        ("centers->centers", k, k),
    ):
        projection = 2 * m * m * (q + 2 * r) * batch
        attention = 4 * q * r * m * batch
        attentions.append(
            dict(
                name=name,
                queries=q,
                keys=r,
                projection_flops=projection,
                attention_flops=attention,
                flops=projection + attention,
                weight_bytes=q * r * batch * itemsize,
                token_bytes=(q + 2 * r) * m * batch * itemsize,
            )
        )
    total = {key: sum(a[key] for a in attentions) for key in
             ("projection_flops", "attention_flops", "flops", "weight_bytes", "token_bytes")}
    total["param_bytes"] = 12 * m * m * itemsize
    total["bytes"] = total["weight_bytes"] + total["token_bytes"] + total["param_bytes"]
    return dict(d_emb=m, **total, attentions=attentions)
