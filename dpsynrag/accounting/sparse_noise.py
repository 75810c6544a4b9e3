"""The discrete Gaussian on a row of mostly zero counts, drawn only where it is kept.

A span histogram is released as ``c + Z`` with Z i.i.d. N_Z(0, sigma^2) on EVERY entry of the
domain D, and the build keeps of it (post-processing) the entries whose noisy count reaches
a public ``floor``. ``discrete_gaussian_kept`` returns those kept entries with exactly the law
they have under that dense draw, without drawing a Z for each of the |D| entries:

- the entries with c_j != 0 (the members' spans: the sparse table's cells) are drawn as
  ever, ``noise.discrete_gaussian_noise``, and kept where c_j + Z_j >= floor;
- among the n entries with c_j = 0, taken in increasing order, entry i is kept iff Z_i >= t,
  t = ceil(floor) (Z is an integer), independently with probability q = P(Z >= t). So the
  numbers of entries skipped before each kept one are i.i.d. Geometric(q) (failures before a
  success: P(G >= m) = (1 - q)^m), and drawn as such, one per kept entry, by inversion of
  a uniform U: G = floor(ln U / ln(1 - q)) (``_gaps``);
- the kept zero entries' values are i.i.d. from the law of Z given Z >= t (the Z_i of
  different entries are independent, so conditioning on which are kept leaves them i.i.d.
  with that law), drawn exactly by rejection (``tail_values``).

The pair (which zero entries are kept, their values) then has exactly the law of the dense
draw's kept zero entries, independently of the non-zero entries' draws, as in the dense
draw. This is the sparse sampling of Cormode, Procopiuc, Srivastava & Tran, "Differentially
private summaries for sparse data" (ICDT 2012), on the discrete Gaussian.

Privacy: what the ledger stores is a function of (c + Z) restricted to the entries at or
above floor, and the output of this module has exactly that function's law for every input
c. So the release is the same mechanism -- the discrete Gaussian on every entry of D, rho =
Delta_2^2 / (2 sigma^2), post-processed -- and is charged as before; no value is drawn twice
and none is redrawn. Exactness of each part:

- the non-zero entries and the conditional values use CKS's exact Bernoulli(exp(-gamma)) on
  rationals (sigma^2 the exact rational of float(sigma)^2, as ``discrete_gaussian_noise``):
  no floating point between the random bits and the output;
- the gaps need q, which is irrational (it has the discrete Gaussian's normaliser). U is a
  real number known by its first B random bits, so U lies in [k 2^-B, (k + 1) 2^-B), and q in
  the bracket ``partition_threshold.discrete_gaussian_tail_bracket`` gives (60 digits, a
  relative 1e-50 wide). G is taken only when every (U, q) of both brackets gives the same
  floor(ln U / ln(1 - q)): first in float64, each bound moved outward by a relative
  ``FLOAT_MARGIN`` = 1e-12 (thousands of times the few ulps by which numpy's log, log1p and
  a division can err), else (about 1e-9 of the gaps) with 60-digit arithmetic and 64 more
  random bits of U at a time. So G is exactly floor(ln U / ln(1 - q)) for a uniform U: the
  bits only decide when the answer is certain, which is the classical exact comparison of
  a lazily drawn uniform with a number known to any precision.

Rows with sigma > 500 (where the tail bracket is not available) are drawn densely
(``noise.discrete_gaussian_noise`` on all entries): the same law again.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction

import mpmath
import numpy as np

from dpsynrag.accounting.noise import discrete_gaussian_noise, exp_geometric_round
from dpsynrag.accounting.partition_threshold import discrete_gaussian_tail_bracket
from dpsynrag.accounting.rng import RandomSource

__all__ = ["FLOAT_MARGIN", "SPARSE_MAX_SIGMA", "discrete_gaussian_kept",
           "discrete_gaussian_kept_rows", "tail_values"]

#: The relative margin by which the float64 bounds of a gap are moved outward.
FLOAT_MARGIN = 1e-12
#: Above this sigma a row is drawn densely (the tail bracket sums the tail term by term).
SPARSE_MAX_SIGMA = 500.0
_UNIT_BITS = 53
_EXTRA_BITS = 64
_MAX_EXTENSIONS = 16  # each adds 64 bits to U; a gap undecided after all is an error
_DIGITS = 60


def _check(sigma: float, floor: float) -> int:
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite positive number, got {sigma!r}")
    if not (isinstance(floor, int | float) and math.isfinite(floor) and floor > 0):
        raise ValueError(f"floor must be a finite positive number, got {floor!r}")
    return math.ceil(floor)


def discrete_gaussian_kept(indices: np.ndarray, counts: np.ndarray, width: int, sigma: float,
                           floor: float, rng: RandomSource, *,
                           sensitivity: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The entries at or above ``floor`` of ``c + N_Z(0, sigma^2)`` noise on all ``width``
    entries, where c is ``counts`` at ``indices`` (distinct, ascending, in [0, width)) and 0
    elsewhere: (their indices ascending, their noisy counts), int64, with exactly the law of
    the dense draw's kept entries (module docstring). ``sigma`` and ``sensitivity`` are
    declared to ``rng`` as ``noise.discrete_gaussian`` declares them."""
    return discrete_gaussian_kept_rows([(indices, counts)], width, sigma, floor, rng,
                                       sensitivity=sensitivity)[0]


def discrete_gaussian_kept_rows(rows: Sequence[tuple[np.ndarray, np.ndarray]], width: int,
                                sigma: float, floor: float, rng: RandomSource, *,
                                sensitivity: float | None = None
                                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``discrete_gaussian_kept`` for several rows at once, each with its own independent
    noise: the rows' counted entries drawn in one call of the sampler, their zero entries
    taken as one sequence (row after row: the entries' Z are i.i.d. whichever row they are
    in, so one Geometric(q) gap sequence over the concatenation, cut at the rows' ends,
    gives each row exactly its own law, independently), and one call for all kept zero
    entries' values. Declares the noise once."""
    t = _check(sigma, floor)
    rng.declare_noise("gaussian", float(sigma), sensitivity)
    width = int(width)
    checked = [_checked_row(where, exact, width) for where, exact in rows]
    sizes = np.array([where.size for where, _ in checked], dtype=np.int64)
    if not checked:
        return []
    if float(sigma) > SPARSE_MAX_SIGMA:
        return [_dense_kept(where, exact, width, float(sigma), t, rng)
                for where, exact in checked]
    # the ledger probes this sampler at (sigma, t) once (accounting.sparse_probe)
    rng.declare_noise("gaussian_kept", float(sigma), floor=float(t))
    noise = discrete_gaussian_noise(int(sizes.sum()), sigma, rng)
    zeros = width - sizes
    ranks = _kept_zero_ranks(int(zeros.sum()), float(sigma), t, rng)
    values = tail_values(ranks.size, float(sigma), t, rng)
    zero_starts = np.concatenate(([0], np.cumsum(zeros)))
    cuts = np.searchsorted(ranks, zero_starts, side="left")
    out: list[tuple[np.ndarray, np.ndarray]] = []
    offset = 0
    for r, (where, exact) in enumerate(checked):
        noisy = exact.astype(np.int64) + noise[offset:offset + where.size]
        offset += where.size
        held = noisy >= t
        lo, hi = int(cuts[r]), int(cuts[r + 1])
        positions = _zero_positions(where, ranks[lo:hi] - zero_starts[r])
        index = np.concatenate([where[held], positions])
        value = np.concatenate([noisy[held], values[lo:hi]])
        order = np.argsort(index, kind="stable")
        out.append((index[order], value[order]))
    return out


def _checked_row(indices: np.ndarray, counts: np.ndarray, width: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    where = np.asarray(indices, dtype=np.int64).reshape(-1)
    exact = np.asarray(counts).reshape(-1)
    if not np.issubdtype(exact.dtype, np.integer):
        raise TypeError("discrete_gaussian_kept needs integer counts")
    if where.shape != exact.shape:
        raise ValueError("indices and counts must have the same length")
    if where.size and (where[0] < 0 or where[-1] >= width
                       or bool(np.any(where[1:] <= where[:-1]))):
        raise ValueError("indices must be distinct, ascending and inside the row")
    return where, exact


def _dense_kept(where: np.ndarray, exact: np.ndarray, width: int, sigma: float, t: int,
                rng: RandomSource) -> tuple[np.ndarray, np.ndarray]:
    """A row drawn densely (sigma above ``SPARSE_MAX_SIGMA``): the same law."""
    row = np.zeros(width, dtype=np.int64)
    row[where] = exact
    row += discrete_gaussian_noise(row.size, sigma, rng)
    kept = np.flatnonzero(row >= t)
    return kept.astype(np.int64), row[kept]


def _zero_positions(nonzero: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The row positions of the zero entries of ranks ``ranks`` (0 = the first position not
    in ``nonzero``, which is ascending)."""
    shifted = nonzero - np.arange(nonzero.size, dtype=np.int64)  # zeros before each non-zero
    positions: np.ndarray = ranks + np.searchsorted(shifted, ranks, side="right")
    return positions.astype(np.int64)


# ------------------------------------------------------------------ which zero entries
@functools.lru_cache(maxsize=256)
def _log_survival(sigma: float, t: int) -> tuple[mpmath.mpf, mpmath.mpf, float, float]:
    """a = -ln(1 - q) bracketed: (a_low, a_high) to 60 digits and as floats moved outward."""
    q_low, q_high = discrete_gaussian_tail_bracket(sigma, t)
    if not q_high < 1:
        raise ValueError("the floor is too low for sparse sampling")
    with mpmath.workdps(_DIGITS):
        a_low, a_high = -mpmath.log1p(-q_low), -mpmath.log1p(-q_high)
    return (a_low, a_high, float(a_low) * (1 - FLOAT_MARGIN),
            float(a_high) * (1 + FLOAT_MARGIN))


def _kept_zero_ranks(n: int, sigma: float, t: int, rng: RandomSource) -> np.ndarray:
    """The ranks (ascending) of the kept ones among ``n`` zero entries: the cumulative sums
    of i.i.d. Geometric(q) gaps, each plus one for the kept entry, while below ``n``."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    q_high = float(discrete_gaussian_tail_bracket(sigma, t)[1])
    expected = q_high * n
    found: list[np.ndarray] = []
    position = -1  # rank of the last kept entry
    while True:
        batch = int(expected + 4.0 * math.sqrt(expected) + 16)
        steps = _gaps(batch, sigma, t, rng) + 1
        ranks = position + np.cumsum(steps)
        inside = ranks[ranks < n]
        found.append(inside)
        if inside.size < ranks.size:  # a gap reached past the last entry: done
            break
        position = int(ranks[-1])
        expected = q_high * (n - 1 - position)
    return np.concatenate(found).astype(np.int64)


def _gaps(size: int, sigma: float, t: int, rng: RandomSource) -> np.ndarray:
    """``size`` i.i.d. Geometric(q) draws, q = P(Z >= t): floor(ln U / ln(1 - q)) decided
    exactly (module docstring)."""
    a_low, a_high, a_low_f, a_high_f = _log_survival(sigma, t)
    k = (rng.words(size) >> np.uint64(64 - _UNIT_BITS)).astype(np.float64)  # exact: < 2**53
    scale = 2.0 ** -_UNIT_BITS
    with np.errstate(divide="ignore"):
        least = -np.log((k + 1.0) * scale) / a_high_f * (1 - FLOAT_MARGIN)
        most = -np.log(k * scale) / a_low_f * (1 + FLOAT_MARGIN)
    gaps = np.floor(least)
    undecided = np.flatnonzero(~(np.isfinite(most) & (np.floor(most) == gaps)))
    out = gaps.astype(np.int64)
    for i in undecided:
        out[i] = _gap_exactly(int(k[i]), a_low, a_high, rng)
    return out


def _gap_exactly(k: int, a_low: mpmath.mpf, a_high: mpmath.mpf, rng: RandomSource) -> int:
    """The gap of a U whose first 53 bits are ``k``, with 64 more bits of U drawn at a time
    until floor(-ln U / a) is the same over U's interval and a's bracket (60 digits)."""
    bits = _UNIT_BITS
    with mpmath.workdps(_DIGITS):
        slack = mpmath.mpf(10) ** -45  # far above 60-digit rounding, far below the bracket
        for _ in range(_MAX_EXTENSIONS):
            k = (k << _EXTRA_BITS) | int(rng.words(1)[0])
            bits += _EXTRA_BITS
            low_u = mpmath.ldexp(mpmath.mpf(k), -bits)
            high_u = mpmath.ldexp(mpmath.mpf(k + 1), -bits)
            least = -mpmath.log(high_u) / a_high * (1 - slack)
            if k == 0:
                continue
            most = -mpmath.log(low_u) / a_low * (1 + slack)
            if mpmath.floor(least) == mpmath.floor(most):
                return int(mpmath.floor(least))
    raise RuntimeError("a sparse noise gap stayed undecided after "
                       f"{_UNIT_BITS + _MAX_EXTENSIONS * _EXTRA_BITS} bits")


# ------------------------------------------------------------------ their values
def tail_values(size: int, sigma: float, t: int, rng: RandomSource) -> np.ndarray:
    """``size`` i.i.d. exact draws of Z given Z >= t, Z ~ N_Z(0, sigma^2), t >= 1 (int64).

    Z = t + Y with P(Y = y) proportional to exp(-(t + y)^2 / (2 sigma^2)), y >= 0. Proposal:
    P(Y = y) proportional to exp(-y / s) with the integer s = ceil(sigma^2 / t)
    (``noise.exp_geometric_round``); the ratio of target to proposal is proportional to
    exp(-y (t / sigma^2 - 1 / s) - y^2 / (2 sigma^2)), at most 1 (1 / s <= t / sigma^2), and a
    proposal y is accepted with exactly that probability, the one rational
    (2 y (t den s - num) + den s y^2) / (2 s num) for sigma^2 = num / den
    (``RandomSource.bernoulli_exp_minus_grouped``: all proposals at once, one rational per y).
    """
    if size <= 0:
        return np.zeros(0, dtype=np.int64)
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise ValueError("t must be an integer >= 1")
    variance = Fraction(float(sigma)) ** 2
    num, den = variance.numerator, variance.denominator
    s = -(-num // (den * t))
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        proposals = exp_geometric_round(s, size - filled, rng)
        distinct, groups = np.unique(proposals, return_inverse=True)
        exponents = [2 * y * (t * den * s - num) + den * s * y * y for y in distinct.tolist()]
        accepted = rng.bernoulli_exp_minus_grouped(groups.ravel(), exponents, 2 * s * num)
        kept = proposals[accepted][:size - filled]
        out[filled:filled + kept.size] = t + kept
        filled += kept.size
    return out
