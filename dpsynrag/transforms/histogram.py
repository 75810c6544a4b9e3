"""The noisy keyword histogram (DP-SynRAG stage a) and its top-R words (stage b).

h(D)[v] = number of documents whose keywords include word v of the public vocabulary V. Each
document holds at most K distinct words of V (checked here), so adding or removing one
document changes h by a 0/1 vector with at most K ones: l2 sensitivity sqrt(K). h is released
once with exact discrete Gaussian noise through the ledger; everything after that
(``top_keywords``) is post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.transforms.vocabulary import PublicVocabulary

STAGE = "a-histogram"
MECHANISM = "discrete_gaussian"


def keyword_counts(doc_keywords: Sequence[Sequence[str]], vocab: PublicVocabulary,
                   K: int) -> np.ndarray:
    """h(D): for each word of ``vocab``, the number of documents listing it (int64).

    Raises ``ValueError`` if a document lists more than ``K`` words, a word twice, or a word
    outside ``vocab``: the sensitivity sqrt(K) of the release assumes none of these. The
    message never names the words.
    """
    if isinstance(K, bool) or not isinstance(K, int | np.integer) or K < 1:
        raise ValueError(f"K must be a positive integer, got {K!r}")
    index = vocab.index
    flat: list[int] = []
    for words in doc_keywords:
        if isinstance(words, str):
            raise TypeError("each document's keywords must be a sequence of words, not a str")
        if len(words) > K:
            raise ValueError(f"a document has more than K={K} keywords")
        ids = [index.get(w, -1) for w in words]
        if min(ids, default=0) < 0:
            raise ValueError("a document has a keyword outside the public vocabulary")
        if len(set(ids)) != len(ids):
            raise ValueError("a document lists the same keyword twice")
        flat.extend(ids)
    return np.bincount(np.asarray(flat, dtype=np.int64), minlength=len(vocab)).astype(np.int64)


def histogram_charge(K: int, sigma: float, size: int) -> Charge:
    """The ledger charge of one histogram release: rho = K / (2 sigma^2)."""
    sensitivity = math.sqrt(K)
    return Charge(stage=STAGE, mechanism=MECHANISM,
                  params={"sigma": float(sigma), "l2_sensitivity": sensitivity, "K": int(K),
                          "size": int(size)},
                  sensitivity=sensitivity, sensitivity_norm="l2")


def release_histogram(ledger: Ledger, counts: np.ndarray, *, K: int, sigma: float,
                      key: str = "histogram") -> np.ndarray:
    """Release ``counts + N_Z(0, sigma^2 I)`` (exact discrete Gaussian) through ``ledger``.

    Privacy: the counts of documents with <= K distinct words each have l2 sensitivity
    sqrt(K) under add/remove of one document, so this release costs
    rho = K / (2 sigma^2) zCDP (Canonne, Kamath & Steinke 2020, Theorem 14), charged once
    under ``key``. A second call with the same key (a resumed build) returns the stored noisy
    histogram and charges nothing; other parameters under the same key are refused.
    Returns the noisy histogram (int64, same length as ``counts``). Never log it raw alongside
    ``counts``.
    """
    values = np.asarray(counts)
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise TypeError("counts must be a 1-D integer array")
    if values.size and values.min() < 0:
        raise ValueError("counts must be non-negative")
    if isinstance(K, bool) or not isinstance(K, int | np.integer) or K < 1:
        raise ValueError(f"K must be a positive integer, got {K!r}")
    charge = histogram_charge(int(K), sigma, values.size)
    exact = values.astype(np.int64)

    def draw(rng: RandomSource) -> np.ndarray:
        # the draw declares sqrt(K), the bound of this query, for the ledger's check
        return discrete_gaussian(exact, float(sigma), rng, sensitivity=math.sqrt(K))

    noisy = ledger.release(key, charge, draw)
    return np.asarray(noisy, dtype=np.int64)


def top_keywords(noisy: np.ndarray, R: int) -> np.ndarray:
    """Indices of the ``R`` largest noisy counts, largest first; ties by vocabulary index.

    Post-processing of the released histogram (no cost). Returns fewer than ``R`` indices only
    if the vocabulary is smaller than ``R``.
    """
    values = np.asarray(noisy)
    if values.ndim != 1:
        raise ValueError("noisy must be a 1-D array")
    if isinstance(R, bool) or not isinstance(R, int | np.integer) or R < 0:
        raise ValueError(f"R must be a non-negative integer, got {R!r}")
    order = np.lexsort((np.arange(values.size), -values))
    return order[: int(R)].astype(np.int64)


def released_top_keywords(ledger: Ledger, doc_keywords: Sequence[Sequence[str]],
                          vocab: PublicVocabulary, *, K: int, sigma: float, R: int
                          ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Stage (a) in one call: exact counts, the released noisy histogram (the one charge,
    K / (2 sigma^2) zCDP, see ``release_histogram``) and its top-R words (post-processing).
    Returns ``(noisy histogram, top indices, top words)``."""
    counts = keyword_counts(doc_keywords, vocab, K)
    noisy = release_histogram(ledger, counts, K=K, sigma=sigma)
    top = top_keywords(noisy, min(R, len(vocab)))
    return noisy, top, [vocab.words[int(i)] for i in top]
