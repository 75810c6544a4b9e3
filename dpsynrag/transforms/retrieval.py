"""DP-SynRAG stage (c): per-cluster retrieval S_r by a noisy centroid and a private threshold.

For cluster r with members C_r (embeddings E(d), normalised to unit length):

    mu_r   = sum_{d in C_r} E(d) + N(0, sigma_mu^2 I)         ledger key cluster/RRRRR/mean
    s_d    = clip(cos(E(d), mu_r), 0, 1)                      public range [0, 1]
    theta  ~ exp(eps_theta * u(theta) / 2) on [0, 1],
             u(theta) = -| #{d in C_r : s_d > theta} - k |    ledger key cluster/RRRRR/threshold
    S_r    = { d in C_r : s_d > theta }

Privacy (zCDP, add/remove one document, which changes C_r by at most one member):
* the noisy **sum** has l2 sensitivity 1 (unit vectors): rho = 1 / (2 sigma_mu^2);
* given the released mu_r the scores of the other members are fixed, so the threshold count
  moves by at most 1: rho = eps_theta^2 / 8 (bounded-range exponential mechanism);
* per cluster: rho_r = 1 / (2 sigma_mu^2) + eps_theta^2 / 8 -- DP-SynRAG's Theorem 1 with
  the correction in docs/mechanisms.md section 10 (the retrieval pays both parts, not only
  one). Clusters compose in the ledger's parallel group "clusters" (a document is in at most
  L clusters).

**Exact noise on a fixed-point grid.** The noisy sum is computed without a floating-point
Gaussian (whose low-order bits are not an exact Gaussian and can reveal the input, Mironov
2012; Jin et al. 2022). Each member's unit embedding e is put on the grid 2^-b Z^d by
q = round(2^b e) (b = ``FIXED_POINT_BITS``), so ||q||_2 <= 2^b + sqrt(d)/2; q is then shrunk
toward zero, in exact integer arithmetic, until ||q||_2 <= B = 2^b + ceil(sqrt(d)/2) holds
exactly (float rounding in e's norm can never push it over). The integer sum over C_r gets
exact multivariate discrete Gaussian noise N_Z(0, (sigma_mu B)^2) per coordinate
(``noise.discrete_gaussian``): l2 sensitivity B in grid units, so rho = B^2 / (2 (sigma_mu B)^2)
= 1 / (2 sigma_mu^2) (Canonne, Kamath & Steinke 2020, Theorem 14), exactly what the ledger
charges ("gaussian", sigma_mu, sensitivity 1, with ``grid_bits`` recorded). In the original
units the noise is sigma_mu (1 + ceil(sqrt(d)/2) 2^-b): 1.2e-6 more than sigma_mu for d = 384.
The released value is the integer vector; mu_r = value / 2^b is post-processing.

The sum, not the mean, is released: it is defined for an empty cluster (the embedding
dimension is public) and its noise level does not depend on the private cluster size. An
empty cluster is processed like any other (skipping it would reveal that it is empty).

Both released values are private-derived: they live in the ledger only and are never logged,
printed or written to the output. S_r itself is private (a set of private documents) and only
feeds stage (d).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.threshold import exponential_threshold
from dpsynrag.models.vectors import scale_to_unit

GROUP = "clusters"
MEAN_STAGE = "c-noisy-sum"
THRESHOLD_STAGE = "c-threshold"
SIMILARITY_RANGE = (0.0, 1.0)  # public range of the clipped cosine similarity

__all__ = [
    "GROUP",
    "MEAN_STAGE",
    "THRESHOLD_STAGE",
    "mean_charge",
    "mean_key",
    "partition_name",
    "retrieval_rho",
    "retrieve_cluster",
    "retrieve_clusters",
    "similarities",
    "threshold_charge",
    "threshold_key",
]


def partition_name(r: int) -> str:
    """The ledger partition of cluster ``r`` (``cluster/00017``)."""
    if not (isinstance(r, int | np.integer) and r >= 0):
        raise ValueError(f"cluster index must be a non-negative integer, got {r!r}")
    return f"cluster/{int(r):05d}"


def mean_key(r: int) -> str:
    return f"{partition_name(r)}/mean"


def threshold_key(r: int) -> str:
    return f"{partition_name(r)}/threshold"


def retrieval_rho(sigma_mu: float, eps_theta: float) -> float:
    """Per-cluster retrieval cost in zCDP: 1 / (2 sigma_mu^2) + eps_theta^2 / 8."""
    return 1.0 / (2.0 * sigma_mu**2) + eps_theta**2 / 8.0


FIXED_POINT_BITS = 24  # grid 2^-24: q fits int64 with room (2^48 d per row, sums of 2^15 rows)


def grid_sensitivity(dimension: int, bits: int = FIXED_POINT_BITS) -> int:
    """B = 2^b + ceil(sqrt(d)/2): the exact l2 bound of one member's grid vector."""
    return (1 << bits) + math.isqrt(max(dimension - 1, 0)) // 2 + 1


def grid_rows(unit_embeddings: np.ndarray, bits: int = FIXED_POINT_BITS) -> np.ndarray:
    """Members on the grid: q = round(2^b e), shrunk until ||q||_2 <= B exactly (int64)."""
    rows = np.rint(np.asarray(unit_embeddings, dtype=np.float64) * float(1 << bits))
    grid = rows.astype(np.int64)
    bound = grid_sensitivity(grid.shape[1], bits)
    # int64 is exact here: q_j^2 <= (2^b + 1)^2 and d q_j^2 < 2^63 for d < 2^14.
    over = np.flatnonzero((grid * grid).sum(axis=1) > bound * bound)
    for i in over:
        row = grid[i]
        while sum(int(v) * int(v) for v in row) > bound * bound:
            row = np.trunc(row * (1.0 - 2.0**-20)).astype(np.int64)  # toward zero: shrinks
        grid[i] = row
    return grid


def mean_charge(r: int, sigma_mu: float) -> Charge:
    """Noise on the sum of unit vectors: rho = 1 / (2 sigma_mu^2).

    Charged as a Gaussian of sensitivity 1 and scale sigma_mu; drawn as the equivalent exact
    discrete Gaussian on the fixed-point grid (sensitivity B, scale sigma_mu B; module doc).
    """
    return Charge(stage=MEAN_STAGE, mechanism="gaussian",
                  params={"sigma": float(sigma_mu), "l2_sensitivity": 1.0,
                          "grid_bits": FIXED_POINT_BITS},
                  sensitivity=1.0, sensitivity_norm="l2", group=GROUP,
                  partition=partition_name(r))


def threshold_charge(r: int, eps_theta: float, k: int) -> Charge:
    """Top-k threshold EM, count sensitivity 1: rho = eps_theta^2 / 8."""
    lo, hi = SIMILARITY_RANGE
    return Charge(stage=THRESHOLD_STAGE, mechanism="exponential_threshold",
                  params={"epsilon": float(eps_theta), "k": int(k), "lo": lo, "hi": hi},
                  sensitivity=1.0, sensitivity_norm="count", group=GROUP,
                  partition=partition_name(r))


def _unit_rows(member_embeddings: np.ndarray) -> np.ndarray:
    """float64 copy with every row scaled to unit length (a zero row stays zero)."""
    emb = np.asarray(member_embeddings, dtype=np.float64)
    if emb.ndim != 2 or emb.shape[1] < 1:
        raise ValueError("member_embeddings must be a 2-D array (members, dimension); pass "
                         "shape (0, dimension) for an empty cluster")
    if not np.isfinite(emb).all():
        raise ValueError("member_embeddings contain NaN or infinite values")
    return scale_to_unit(emb)


def similarities(unit_embeddings: np.ndarray, noisy_sum: np.ndarray) -> np.ndarray:
    """Cosine similarity of each unit row to ``noisy_sum``, clipped into [0, 1] (private)."""
    direction = np.asarray(noisy_sum, dtype=np.float64)
    norm = float(np.linalg.norm(direction))
    if not np.isfinite(norm) or norm == 0.0:
        return np.zeros(unit_embeddings.shape[0], dtype=np.float64)
    lo, hi = SIMILARITY_RANGE
    return np.clip(unit_embeddings @ (direction / norm), lo, hi)


def _check_params(sigma_mu: float, eps_theta: float, k: int) -> None:
    for name, value in (("sigma_mu", sigma_mu), ("eps_theta", eps_theta)):
        if not (isinstance(value, int | float) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite positive number")
    if not (isinstance(k, int | np.integer) and k >= 0):
        raise ValueError("k must be a non-negative integer")


def retrieve_cluster(
    ledger: Ledger,
    r: int,
    member_embeddings: np.ndarray,
    *,
    sigma_mu: float,
    eps_theta: float,
    k: int,
) -> np.ndarray:
    """Positions (into ``member_embeddings``) of S_r, in increasing order.

    Releases the noisy embedding sum (``cluster/RRRRR/mean``) and the threshold
    (``cluster/RRRRR/threshold``) through ``ledger`` in the parallel group "clusters", which
    the caller must have declared. Cost per cluster: 1 / (2 sigma_mu^2) + eps_theta^2 / 8
    (zCDP). On a resumed build both values come back from the ledger: nothing is charged or
    drawn again and S_r is the same. ``member_embeddings`` has shape (|C_r|, dimension);
    (0, dimension) for an empty cluster.
    """
    return retrieve_clusters(ledger, {r: member_embeddings}, sigma_mu=sigma_mu,
                             eps_theta=eps_theta, k=k)[r]


def retrieve_clusters(
    ledger: Ledger,
    clusters: Mapping[int, np.ndarray],
    *,
    sigma_mu: float,
    eps_theta: float,
    k: int,
) -> dict[int, np.ndarray]:
    """``retrieve_cluster`` for many clusters with two ledger transactions instead of 2R.

    All noisy sums are released in one batch, then all thresholds; one ledger key per release
    as in ``retrieve_cluster``, with identical values, costs and resume behaviour.
    """
    _check_params(sigma_mu, eps_theta, k)
    units = {int(r): _unit_rows(emb) for r, emb in clusters.items()}

    def sum_draw(unit: np.ndarray) -> Any:
        # Privacy: discrete Gaussian on the grid sum, l2 sensitivity B, sigma_mu B:
        # rho = 1 / (2 sigma_mu^2).
        total = grid_rows(unit).sum(axis=0)
        bound = grid_sensitivity(unit.shape[1])
        sigma = float(sigma_mu) * bound
        return lambda rng: discrete_gaussian(total, sigma, rng, sensitivity=float(bound))

    sums = ledger.release_many([
        (mean_key(r), mean_charge(r, sigma_mu), sum_draw(unit)) for r, unit in units.items()])
    scores: dict[int, np.ndarray] = {}
    for (r, unit), noisy_sum in zip(units.items(), sums, strict=True):
        noisy_sum = np.asarray(noisy_sum, dtype=np.float64) / float(1 << FIXED_POINT_BITS)
        if noisy_sum.shape != (unit.shape[1],):
            raise ValueError(f"cluster {r}: the released sum has another dimension than the "
                             "embeddings (different embedder on resume?)")
        scores[r] = similarities(unit, noisy_sum)

    def threshold_draw(s: np.ndarray) -> Any:
        # Privacy: exponential mechanism, count sensitivity 1, rho = eps_theta^2 / 8.
        lo, hi = SIMILARITY_RANGE
        return lambda rng: float(exponential_threshold(s, int(k), eps_theta, rng, lo=lo,
                                                       hi=hi))

    thetas = ledger.release_many([
        (threshold_key(r), threshold_charge(r, eps_theta, int(k)), threshold_draw(scores[r]))
        for r in units])
    return {r: np.flatnonzero(scores[r] > float(theta))
            for r, theta in zip(units, thetas, strict=True)}
