"""Randomness for every DP mechanism: a CSPRNG byte stream with exact integer helpers.

Unseeded sources read the operating system's CSPRNG (``os.urandom``). Seeded sources exist
for tests only: they expand the seed with ChaCha20 (via ``cryptography``), so they are
reproducible, and they mark themselves ``seeded`` so that the ledger and the certificate can
say "not for release".

All floats are built from 53 random bits; all integers by rejection sampling on whole bytes,
so ``integers(n)`` is exactly uniform for any ``n`` (Python big integers included).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

_BUFFER_BYTES = 1 << 16
_TWO_POW_MINUS_53 = 2.0**-53
_TWO_POW_63 = 1 << 63
_TWO_POW_64 = 1 << 64
_UNSEEDED_SOURCES: weakref.WeakSet[RandomSource] = weakref.WeakSet()


def _forget_inherited_bytes() -> None:
    """In a forked child: drop every unseeded source's buffered parent bytes."""
    for source in list(_UNSEEDED_SOURCES):
        source._drop_buffer()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_bytes)


@dataclass(frozen=True)
class NoiseDeclaration:
    """One noise sampler's call: ``kind`` (``"gaussian"``; ``"gaussian_kept"`` where the
    sparse sampler draws only the entries at or above ``floor``, beside its ``"gaussian"``
    declaration), its ``scale`` (sigma) and the query's ``sensitivity`` in the draw's units as
    the drawing code computes it (None: the charge's)."""

    kind: str
    scale: float
    sensitivity: float | None = None
    floor: float | None = None


class RandomSource:
    """A buffered stream of cryptographically strong random bytes and samplers built on it."""

    def __init__(self, seed: int | None = None) -> None:
        self._seed = seed
        self._buffer = b""
        self._offset = 0
        self._noise_log: list[NoiseDeclaration] | None = None
        if seed is None:
            self._encryptor = None
            _UNSEEDED_SOURCES.add(self)
        else:
            if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
                raise ValueError("seed must be a non-negative integer")
            key = hashlib.sha256(b"dpsynrag/seeded-rng/v1:" + str(seed).encode()).digest()
            nonce = bytes(16)  # the key is unique per seed; a zero nonce is fine for a keystream
            self._encryptor = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()

    @property
    def seeded(self) -> bool:
        """True when this source is reproducible (tests only; never for a release)."""
        return self._seed is not None

    def __repr__(self) -> str:
        return f"RandomSource(seeded={self.seeded})"

    # -------------------------------------------------- what the noise samplers declare
    def declare_noise(self, kind: str, scale: float, sensitivity: float | None = None,
                      floor: float | None = None) -> None:
        """Called by a noise sampler before it draws: its kind and scale, and the query's
        sensitivity in the draw's units (None: the charge's).

        While the ledger meters a release (:meth:`start_noise_log`) the declaration is kept, so
        the ledger can check the noise drawn against the noise charged; otherwise a no-op."""
        if self._noise_log is not None:
            self._noise_log.append(NoiseDeclaration(kind, float(scale),
                                                    None if sensitivity is None
                                                    else float(sensitivity),
                                                    None if floor is None else float(floor)))

    def start_noise_log(self) -> None:
        """Begin keeping the noise samplers' declarations (the ledger, around one draw)."""
        self._noise_log = []

    def stop_noise_log(self) -> tuple[NoiseDeclaration, ...]:
        """Stop keeping declarations and return those made since :meth:`start_noise_log`."""
        declared, self._noise_log = tuple(self._noise_log or ()), None
        return declared

    # ------------------------------------------------------------------ raw bytes
    def _drop_buffer(self) -> None:
        self._buffer = b""
        self._offset = 0

    def _refill(self, at_least: int) -> None:
        size = max(_BUFFER_BYTES, at_least)
        fresh = os.urandom(size) if self._encryptor is None else self._encryptor.update(bytes(size))
        self._buffer = self._buffer[self._offset :] + fresh
        self._offset = 0

    def bytes(self, n: int) -> bytes:
        """Return ``n`` random bytes."""
        if n < 0:
            raise ValueError("n must be non-negative")
        if len(self._buffer) - self._offset < n:
            self._refill(n)
        out = self._buffer[self._offset : self._offset + n]
        self._offset += n
        return out

    # ------------------------------------------------------------------ integers
    def integers(self, high: int) -> int:
        """One exactly uniform integer in ``[0, high)`` (``high`` may be any positive int)."""
        if high <= 0:
            raise ValueError("high must be positive")
        if high == 1:
            return 0
        bits = (high - 1).bit_length()
        nbytes = (bits + 7) // 8
        excess = nbytes * 8 - bits
        while True:
            candidate = int.from_bytes(self.bytes(nbytes), "little") >> excess
            if candidate < high:
                return candidate

    def bernoulli_fraction(self, numerator: int, denominator: int) -> bool:
        """Exact Bernoulli(numerator / denominator) for integers 0 <= numerator <= denominator."""
        if denominator <= 0 or numerator < 0 or numerator > denominator:
            raise ValueError("need 0 <= numerator <= denominator and denominator > 0")
        return self.integers(denominator) < numerator

    # ------------------------------------------------------------------ arrays (exact)
    def words(self, size: int) -> np.ndarray:
        """``size`` uniform 64-bit words (uint64), eight fresh bytes each."""
        return np.frombuffer(self.bytes(8 * size), dtype="<u8").astype(np.uint64)

    def integers_array(self, high: int, size: int) -> np.ndarray:
        """``size`` exactly uniform integers in ``[0, high)`` (int64), for 1 <= high <= 2**63.

        Rejection on whole 64-bit words: a word below the largest multiple of ``high`` that
        fits in 64 bits is kept and reduced modulo ``high``; the others are redrawn."""
        if not 1 <= high <= _TWO_POW_63:
            raise ValueError("integers_array needs 1 <= high <= 2**63")
        out = np.empty(size, dtype=np.int64)
        limit = (_TWO_POW_64 // high) * high  # the words kept: [0, limit)
        filled = 0
        while filled < size:
            need = size - filled
            drawn = self.words(need + (need >> 3) + 1)
            if limit < _TWO_POW_64:
                drawn = drawn[drawn < np.uint64(limit)]
            kept = drawn[:need] % np.uint64(high)
            out[filled:filled + kept.size] = kept.astype(np.int64)
            filled += kept.size
        return out

    def bernoulli_exp_minus_array(self, numerators: np.ndarray, denominator: int) -> np.ndarray:
        """Exact Bernoulli(exp(-numerators[i] / denominator)) for each element (bool array).

        ``numerators`` are non-negative int64 and ``denominator * k`` must stay at most 2**63
        for the rounds k used (small integers: the discrete Laplace proposals). Canonne,
        Kamath and Steinke (2020), Algorithm 1 (and 2 for gamma > 1), one round for all
        elements at a time: no floating point anywhere."""
        values = np.asarray(numerators, dtype=np.int64)
        if denominator <= 0 or (values.size and values.min() < 0):
            raise ValueError("need numerators >= 0 and denominator > 0")
        whole, rest = np.divmod(values, denominator)
        result = self._survive_whole_units(whole)
        alive = np.flatnonzero(result)
        rest_alive = rest[alive]
        result[alive] = self._odd_first_failure(
            alive.size,
            lambda k, running: self.integers_array(denominator * k, running.size)
            < rest_alive[running])
        return result

    def bernoulli_exp_minus_one(self, size: int) -> np.ndarray:
        """``size`` exact Bernoulli(exp(-1)) draws (CKS Algorithm 1 with gamma = 1)."""
        return self._odd_first_failure(
            size, lambda k, running: self.integers_array(k, running.size) < 1)

    def bernoulli_exp_minus_repeated(self, size: int, numerator: int, denominator: int
                                     ) -> np.ndarray:
        """``size`` independent exact Bernoulli(exp(-numerator / denominator)) draws for one
        rational of any size: :meth:`bernoulli_exp_minus_grouped` with one group."""
        return self.bernoulli_exp_minus_grouped(np.zeros(size, dtype=np.int64), [numerator],
                                                denominator)

    def bernoulli_exp_minus_grouped(self, groups: np.ndarray, numerators: Sequence[int],
                                    denominator: int) -> np.ndarray:
        """Independent exact Bernoulli(exp(-numerators[groups[i]] / denominator)) for each
        element i (bool array): many rationals of any size over one denominator (Python
        integers: the discrete Gaussian's acceptance tests, one rational per proposed
        magnitude), all elements in the same rounds.

        Element by element: the integer part of gamma by Bernoulli(exp(-1)) draws
        (``_survive_whole_units``), then CKS Algorithm 1 on the fractional part r / m, each
        of its Bernoulli(r / (m k)) one 64-bit word (``_bernoulli_fraction_words``), so each
        element's probability is exp(-gamma) exactly. All elements run in the same rounds
        (one word per element and round, for every group at once)."""
        if denominator <= 0 or any(n < 0 for n in numerators):
            raise ValueError("need numerators >= 0 and denominator > 0")
        index = np.asarray(groups, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= len(numerators)):
            raise ValueError("groups must index numerators")
        wholes = [n // denominator for n in numerators]
        rests = [n % denominator for n in numerators]
        small = all(w < 2**62 for w in wholes)
        result = self._survive_whole_units(
            np.asarray(wholes, dtype=np.int64 if small else object)[index] if index.size
            else np.zeros(0, dtype=np.int64))
        alive = np.flatnonzero(result)
        alive_groups = index[alive]

        def succeeds(k: int, running: np.ndarray) -> np.ndarray:
            return self._bernoulli_fraction_words(rests, denominator * k, alive_groups[running])

        result[alive] = self._odd_first_failure(alive.size, succeeds)
        return result

    def _survive_whole_units(self, whole: np.ndarray) -> np.ndarray:
        """True where ``whole[i]`` independent Bernoulli(exp(-1)) draws all succeed (CKS
        Algorithm 2's integer part of gamma); stops once every element has failed."""
        result = np.ones(whole.size, dtype=bool)
        for unit in range(int(whole.max()) if whole.size else 0):
            alive = np.flatnonzero(result & (whole > unit))
            if not alive.size:
                break
            result[alive] = self.bernoulli_exp_minus_one(alive.size)
        return result

    def _odd_first_failure(self, size: int,
                           succeeds: Callable[[int, np.ndarray], np.ndarray]) -> np.ndarray:
        """CKS Algorithm 1 for ``size`` elements at once: K_i is the first round k in which
        ``succeeds(k, running)`` (Bernoulli(gamma_i / k) for the elements still running, by
        their positions) fails; the result is "K_i odd", Bernoulli(exp(-gamma_i))."""
        k_final = np.zeros(size, dtype=np.int64)
        running = np.arange(size)
        k = 1
        while running.size:
            success = succeeds(k, running)
            k_final[running[~success]] = k
            running = running[success]
            k += 1
        odd: np.ndarray = k_final % 2 == 1
        return odd

    def _bernoulli_fraction_words(self, numerators: Sequence[int], denominator: int,
                                  members: np.ndarray) -> np.ndarray:
        """Exact Bernoulli(numerators[members[i]] / denominator) for each element i, numerators
        of any size with 0 <= numerator (at least ``denominator``: always 1), by one 64-bit
        word U each against q = floor(n 2^64 / d): U < q is 1, U > q is 0, and U = q
        (probability 2^-64) is settled exactly by :meth:`bernoulli_fraction` on the
        remainder, so the probability is q / 2^64 + (n 2^64 - q d) / (d 2^64) = n / d."""
        table = np.zeros(len(numerators), dtype=np.uint64)
        certain = np.zeros(len(numerators), dtype=bool)
        for g in np.unique(members).tolist():
            if numerators[g] >= denominator:
                certain[g] = True
            else:
                table[g] = (numerators[g] << 64) // denominator  # < 2**64
        thresholds = table[members]
        drawn = self.words(members.size)
        out: np.ndarray = (drawn < thresholds) | certain[members]
        for tie in np.flatnonzero((drawn == thresholds) & ~certain[members]).tolist():
            scaled = numerators[int(members[tie])] << 64
            out[tie] = self.bernoulli_fraction(scaled - int(thresholds[tie]) * denominator,
                                               denominator)
        return out

    # ------------------------------------------------------------------ floats
    def random(self, size: int | tuple[int, ...] | None = None) -> float | np.ndarray:
        """Uniform floats in ``[0, 1)`` with 53 random bits each."""
        count = 1 if size is None else int(np.prod(size))
        words = np.frombuffer(self.bytes(8 * count), dtype="<u8") >> np.uint64(11)
        values = words.astype(np.float64) * _TWO_POW_MINUS_53
        if size is None:
            return float(values[0])
        return values.reshape(size)

    def open_unit(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform floats in the open interval ``(0, 1)`` (0 is replaced by a fresh draw)."""
        values = np.asarray(self.random(size), dtype=np.float64)
        zeros = values == 0.0
        while zeros.any():
            values[zeros] = np.asarray(self.random(int(zeros.sum())))
            zeros = values == 0.0
        return values

    def uniform(self, low: float, high: float) -> float:
        """One uniform float in ``[low, high)``."""
        value = low + (high - low) * float(self.random())
        return min(value, np.nextafter(high, low)) if high > low else low

    def gumbel(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Standard Gumbel(0, 1) variates."""
        values: np.ndarray = -np.log(-np.log(self.open_unit(size)))
        return values

    def standard_normal(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Standard normal variates (Box-Muller on 53-bit uniforms)."""
        count = int(np.prod(size))
        pairs = (count + 1) // 2
        u1 = self.open_unit(pairs)
        u2 = np.asarray(self.random(pairs))
        radius = np.sqrt(-2.0 * np.log(u1))
        angle = 2.0 * np.pi * u2
        values = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:count]
        return values.reshape(size)


def secure_rng(seed: int | None = None) -> RandomSource:
    """The random source every mechanism uses.

    ``seed=None`` (production): backed by ``os.urandom``. An integer seed gives a reproducible
    ChaCha20 stream for tests; a ledger that sees it records the build as ``seeded``.
    """
    return RandomSource(seed)
