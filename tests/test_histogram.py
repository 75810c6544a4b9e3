"""The keyword histogram: exact counts, one ledger release at rho = K/(2 sigma^2) that is never
redrawn, sane discrete Gaussian noise, and deterministic top-R selection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynrag.accounting import Ledger, ReleaseMismatchError, secure_rng
from dpsynrag.transforms.histogram import (
    histogram_charge,
    keyword_counts,
    release_histogram,
    top_keywords,
)
from dpsynrag.transforms.vocabulary import PublicVocabulary

VOCAB = PublicVocabulary.from_words(["asthma", "cough", "fever", "pain", "rash"])


def test_counts_are_exact() -> None:
    docs = [["fever", "cough"], ["fever"], [], ["rash", "fever", "asthma"]]
    counts = keyword_counts(docs, VOCAB, 3)
    assert counts.dtype == np.int64 and counts.shape == (5,)
    assert counts.tolist() == [1, 1, 3, 0, 1]  # asthma cough fever pain rash
    assert keyword_counts([], VOCAB, 3).tolist() == [0] * 5


@pytest.mark.parametrize("docs", [
    [["fever", "cough", "rash", "pain"]],  # more than K
    [["fever", "fever"]],                  # a repeat
    [["fever", "unknown"]],                # outside V
])
def test_counts_refuse_what_breaks_the_sensitivity(docs: list[list[str]]) -> None:
    with pytest.raises(ValueError) as error:
        keyword_counts(docs, VOCAB, 3)
    assert "unknown" not in str(error.value)  # never names private words


def test_release_charges_exactly_once() -> None:
    K, sigma = 10, 7.0710678118654755
    ledger = Ledger(rng=secure_rng(1))
    counts = np.array([0, 3, 50, 7, 1], dtype=np.int64)
    noisy = release_histogram(ledger, counts, K=K, sigma=sigma)
    assert noisy.dtype == np.int64 and noisy.shape == counts.shape
    assert math.isclose(ledger.total_rho(), K / (2 * sigma**2), rel_tol=1e-12)
    assert math.isclose(ledger.total_rho(), 0.1, rel_tol=1e-9)  # the paper's rho_hist
    (release,) = ledger.releases()
    assert release.key == "histogram" and release.stage == "a-histogram"
    assert release.mechanism == "discrete_gaussian" and release.sensitivity_norm == "l2"
    assert release.params["size"] == 5 and release.params["K"] == K
    again = release_histogram(ledger, counts, K=K, sigma=sigma)
    assert np.array_equal(again, noisy) and again.dtype == np.int64
    assert len(ledger.releases()) == 1
    assert math.isclose(ledger.total_rho(), K / (2 * sigma**2), rel_tol=1e-12)
    with pytest.raises(ReleaseMismatchError):
        release_histogram(ledger, counts, K=K, sigma=2 * sigma)
    other = release_histogram(ledger, counts, K=K, sigma=sigma, key="histogram/2")
    assert math.isclose(ledger.total_rho(), K / sigma**2, rel_tol=1e-12)
    assert not np.array_equal(other, noisy)  # a fresh draw (equal w.p. ~1e-7)


def test_release_is_reproducible_only_with_a_seed() -> None:
    counts = np.zeros(50, dtype=np.int64)
    a = release_histogram(Ledger(rng=secure_rng(5)), counts, K=4, sigma=3.0)
    b = release_histogram(Ledger(rng=secure_rng(5)), counts, K=4, sigma=3.0)
    c = release_histogram(Ledger(), counts, K=4, sigma=3.0)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)  # fails with probability ~ 1e-30


def test_release_refuses_bad_input() -> None:
    ledger = Ledger(rng=secure_rng(0))
    with pytest.raises(TypeError):
        release_histogram(ledger, np.zeros(3), K=2, sigma=1.0)
    with pytest.raises(ValueError):
        release_histogram(ledger, np.array([1, -1]), K=2, sigma=1.0)
    with pytest.raises(ValueError):
        release_histogram(ledger, np.array([1, 1]), K=0, sigma=1.0)
    with pytest.raises(ValueError):
        release_histogram(ledger, np.array([1, 1]), K=2, sigma=0.0)
    assert ledger.total_rho() == 0.0 and ledger.releases() == []


def test_charge_matches_costs() -> None:
    charge = histogram_charge(10, 5.0, 100)
    assert math.isclose(charge.rho, 10 / 50)
    assert math.isclose(charge.sensitivity, math.sqrt(10))


def test_noise_statistics() -> None:
    sigma, n = 3.0, 20_000
    ledger = Ledger(rng=secure_rng(11))
    noise = release_histogram(ledger, np.zeros(n, dtype=np.int64), K=1, sigma=sigma)
    assert abs(noise.mean()) < 4 * sigma / math.sqrt(n)
    # var of the sample variance ~ 2 sigma^4 / n: 4 sd = 4 * sqrt(2/n) * sigma^2 ~ 4%
    assert abs(noise.var() / sigma**2 - 1) < 4 * math.sqrt(2 / n)
    assert np.abs(noise).max() < 8 * sigma


def test_top_keywords_descending_with_index_ties() -> None:
    noisy = np.array([5, 9, -2, 9, 5, 0], dtype=np.int64)
    assert top_keywords(noisy, 4).tolist() == [1, 3, 0, 4]
    assert top_keywords(noisy, 0).tolist() == []
    assert top_keywords(noisy, 10).tolist() == [1, 3, 0, 4, 5, 2]
    assert top_keywords(np.array([1.5, 2.5]), 1).tolist() == [1]
    with pytest.raises(ValueError):
        top_keywords(noisy, -1)
