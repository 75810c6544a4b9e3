"""Statistical tests of the DP samplers: discrete/continuous Gaussian noise, the continuous
top-k threshold (exponential mechanism), softmax token sampling, and logit clipping.

Reproducibility and false-positive rate
---------------------------------------
* Every test draws from ``secure_rng(<fixed seed>)`` (a reproducible ChaCha20 stream) and, where
  the test needs its own randomness, from ``numpy.random.default_rng(<fixed seed>)``. The tests
  are therefore deterministic in CI: a pass is a pass every time.
* Each statistical test is designed at significance level alpha = 1e-3: for a *correct* sampler
  and a seed drawn at random, the probability that the test fails is at most 1e-3. When a test
  makes several comparisons (e.g. chi-square + mean + variance, or one comparison per bin and
  direction), each comparison runs at alpha / m (Bonferroni), so the test as a whole still fails
  a correct sampler with probability <= 1e-3.
* 22 test cases are statistical (4 discrete-Gaussian pmf/moment cases, 1 shifted-counts case,
  2 Gaussian KS, 4 threshold KS, 1 within-interval KS, 4 empirical privacy-loss cases, the
  power check's own-sampler KS, 2 softmax chi-square, 1 large-vocabulary binomial, 1 batch
  case), so the family-wise false-positive rate for a random choice of seeds is <= 2.2% (union
  bound); with the fixed seeds here it is 0 or 1, decided once. The power check's "must
  detect" assertion misses the broken mechanism with negligible probability (its excess log
  ratio is many standard errors above the Bonferroni cut).
* If a sampler change alters the random stream and one test starts failing, check the p-value
  against alpha / m before suspecting the code: a failure at p ~ 1e-4 is possible (with
  probability alpha) for a correct sampler; a failure at p ~ 1e-30 is a bug.
* Every expected distribution is computed independently here, from the formulas (exact pmf of
  the discrete Gaussian, the threshold density from the raw un-clipped utility, softmax in
  float64), never through the module's own helpers.
* Power: each size was chosen so that a plausible bug (variance off by 1-2%, the wrong
  temperature, the threshold utility off by one score, a privacy loss of 4 epsilon) moves the
  statistic many standard errors; ``test_threshold_privacy_check_detects_a_broken_mechanism``
  demonstrates it for the privacy-loss check.

The discrete Gaussian sampler is pure Python (about 10-20 us per draw on the CI machine), the
threshold sampler about 40 us per draw; sample sizes are set to keep the file well under 90 s.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from dpsynrag.accounting.clipping import clip_logits
from dpsynrag.accounting.noise import discrete_gaussian, gaussian
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.threshold import exponential_threshold
from dpsynrag.accounting.token_sampling import sample_token, sample_tokens

ALPHA = 1e-3


# ----------------------------------------------------------------------------- helpers
def _merge_small_bins(
    observed: np.ndarray, expected: np.ndarray, min_expected: float = 5.0
) -> tuple[np.ndarray, np.ndarray]:
    """Merge adjacent bins (left to right, by *expected* count only) until each has >= 5.

    The merge depends on the expected counts only, never on the data, so the chi-square
    statistic keeps its null distribution.
    """
    obs_out: list[float] = []
    exp_out: list[float] = []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o += float(o)
        acc_e += float(e)
        if acc_e >= min_expected:
            obs_out.append(acc_o)
            exp_out.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:  # a small remainder joins the last full bin
        obs_out[-1] += acc_o
        exp_out[-1] += acc_e
    return np.asarray(obs_out), np.asarray(exp_out)


def _chisquare_pvalue(observed: np.ndarray, probabilities: np.ndarray) -> float:
    """Chi-square goodness of fit of counts against exact probabilities (bins merged to >= 5)."""
    observed = np.asarray(observed, dtype=np.float64)
    expected = observed.sum() * np.asarray(probabilities, dtype=np.float64)
    obs, exp = _merge_small_bins(observed, expected)
    assert obs.size >= 2, "need at least two bins after merging"
    exp = exp * obs.sum() / exp.sum()  # exact sums for scipy (only float rounding changes)
    return float(stats.chisquare(obs, exp).pvalue)


# ----------------------------------------------------------------------------- 1. discrete Gaussian
def _discrete_gaussian_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact pmf of N_Z(0, sigma^2) on [-R, R], normalised numerically (mass beyond R < 1e-300)."""
    radius = math.ceil(40 * sigma) + 10
    support = np.arange(-radius, radius + 1)
    log_w = -(support.astype(np.float64) ** 2) / (2.0 * sigma**2)
    pmf = np.exp(log_w - special.logsumexp(log_w))
    return support, pmf


DG_SIGMAS = [0.8, 1.0, 3.0, 7.0710678]  # 1.0: t = floor(sigma) + 1 jumps; 7.07 = paper's sigma_h
DG_DRAWS = 100_000


@functools.cache
def _discrete_gaussian_noise(sigma: float, seed: int, n: int) -> np.ndarray:
    return discrete_gaussian(np.zeros(n, dtype=np.int64), sigma, secure_rng(seed))


@pytest.mark.parametrize("sigma", DG_SIGMAS)
def test_discrete_gaussian_matches_exact_pmf_and_moments(sigma: float) -> None:
    """Chi-square GOF + mean z-test + variance z-test; 3 comparisons at alpha/3 each.

    n = 100,000 draws per sigma. Expected pmf p(x) ∝ exp(-x^2 / (2 sigma^2)) over the integers;
    the variance is the exact sum x^2 p(x) (not sigma^2: the two differ for small sigma), and
    its standard error uses the exact 4th moment: Var(x^2) = E[x^4] - E[x^2]^2.
    """
    alpha_each = ALPHA / 3
    noise = _discrete_gaussian_noise(sigma, 1000 + int(sigma * 1000), DG_DRAWS)
    assert noise.dtype == np.int64
    support, pmf = _discrete_gaussian_pmf(sigma)
    radius = int(support[-1])

    observed = np.bincount(np.clip(noise, -radius, radius) + radius, minlength=support.size)
    assert _chisquare_pvalue(observed, pmf) > alpha_each

    x = support.astype(np.float64)
    m2 = float(np.sum(x**2 * pmf))
    m4 = float(np.sum(x**4 * pmf))
    crit = stats.norm.isf(alpha_each / 2)  # two-sided
    values = noise.astype(np.float64)
    z_mean = values.mean() / math.sqrt(m2 / values.size)
    assert abs(z_mean) < crit, f"mean {values.mean()} (z = {z_mean:.2f})"
    z_var = (np.mean(values**2) - m2) / math.sqrt((m4 - m2**2) / values.size)
    assert abs(z_var) < crit, f"second moment {np.mean(values**2)} vs exact {m2} (z = {z_var:.2f})"


def test_discrete_gaussian_exact_variance_differs_from_sigma_squared_only_for_small_sigma() -> None:
    """Sanity of the reference itself (not statistical): the integer pmf's variance."""
    for sigma in (3.0, 7.0710678):
        support, pmf = _discrete_gaussian_pmf(sigma)
        assert np.sum(support.astype(float) ** 2 * pmf) == pytest.approx(sigma**2, rel=1e-9)
    support, pmf = _discrete_gaussian_pmf(0.3)
    assert np.sum(support.astype(float) ** 2 * pmf) < 0.3**2 / 2


def test_discrete_gaussian_shifts_counts_and_keeps_shape_and_dtype() -> None:
    """Noise added to a non-zero int32 matrix: output int64, same shape, noise = output - counts
    is centred with the exact variance (two z-tests at alpha/2 each, n = 20,000 cells)."""
    sigma = 3.0
    base = np.random.default_rng(5).integers(-1000, 1_000_000, size=(100, 200)).astype(np.int32)
    out = discrete_gaussian(base, sigma, secure_rng(21))
    assert out.shape == base.shape
    assert out.dtype == np.int64
    noise = (out - base.astype(np.int64)).ravel().astype(np.float64)
    support, pmf = _discrete_gaussian_pmf(sigma)
    m2 = float(np.sum(support.astype(float) ** 2 * pmf))
    m4 = float(np.sum(support.astype(float) ** 4 * pmf))
    crit = stats.norm.isf(ALPHA / 4)
    assert abs(noise.mean() / math.sqrt(m2 / noise.size)) < crit
    assert abs((np.mean(noise**2) - m2) / math.sqrt((m4 - m2**2) / noise.size)) < crit
    # every cell got its own draw: the noise is not one shared value
    assert np.unique(noise).size > 10

    # integers beyond 2**53 stay exact (no float round trip)
    huge = np.array([2**53 + 1, -(2**53) - 3, 7], dtype=np.int64)
    shifted = discrete_gaussian(huge, 0.8, secure_rng(22))
    assert shifted.dtype == np.int64 and shifted.shape == (3,)
    assert np.all(np.abs(shifted - huge) <= 10)  # P(|N_Z(0, 0.64)| > 10) < 1e-30

    # 0-d and list inputs
    assert discrete_gaussian(np.int64(5), 1.0, secure_rng(23)).shape == ()
    assert discrete_gaussian([1, 2, 3], 1.0, secure_rng(24)).dtype == np.int64  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), np.array([0.5]), np.zeros((2, 2))])
def test_discrete_gaussian_refuses_float_input(bad: np.ndarray) -> None:
    with pytest.raises(TypeError):
        discrete_gaussian(bad, 1.0, secure_rng(0))


# ----------------------------------------------------------------------------- 2. gaussian
@pytest.mark.parametrize("sigma", [0.37, 4.0])
def test_gaussian_noise_is_normal(sigma: float) -> None:
    """KS test of (output - x) against N(0, sigma^2), n = 200,000, alpha = 1e-3."""
    x = np.linspace(-50.0, 50.0, 200_000).reshape(400, 500)
    out = gaussian(x, sigma, secure_rng(31))
    assert out.shape == x.shape and out.dtype == np.float64
    noise = (out - x).ravel()
    assert stats.kstest(noise, "norm", args=(0.0, sigma)).pvalue > ALPHA


# ----------------------------------------------------------------------------- 3. threshold EM
def _threshold_log_density(
    scores: np.ndarray, k: int, coefficient: float, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """Independent reference: breakpoints and log density (unnormalised) on each interval.

    The density is ``exp(coefficient * u(theta))`` with u(theta) = -|#{i: s_i > theta} - k|
    counted on the RAW (un-clipped) scores: clipping to [lo, hi] does not change the count for
    any theta strictly inside (lo, hi), so this also checks the module's clipping. The correct
    mechanism has coefficient = epsilon / 2.
    """
    raw = np.asarray(scores, dtype=np.float64)
    inside = raw[(raw > lo) & (raw < hi)]
    breaks = np.unique(np.concatenate([[lo, hi], inside]))
    mids = (breaks[:-1] + breaks[1:]) / 2
    counts = np.array([np.count_nonzero(raw > m) for m in mids])
    utility = -np.abs(counts - k).astype(np.float64)
    return breaks, coefficient * utility


def _threshold_cdf(breaks: np.ndarray, log_density: np.ndarray):
    widths = np.diff(breaks)
    mass = widths * np.exp(log_density - log_density.max())
    cdf_at_breaks = np.concatenate([[0.0], np.cumsum(mass)]) / mass.sum()
    return lambda theta: np.interp(theta, breaks, cdf_at_breaks)


def _bin_probabilities(breaks: np.ndarray, log_density: np.ndarray, edges: np.ndarray):
    """Exact probability of each bin [edges[i], edges[i+1]] (sum of overlaps; no CDF difference)."""
    density = np.exp(log_density - log_density.max())
    total = np.sum(np.diff(breaks) * density)
    left = np.maximum(breaks[:-1][None, :], edges[:-1][:, None])
    right = np.minimum(breaks[1:][None, :], edges[1:][:, None])
    overlap = np.clip(right - left, 0.0, None)
    return overlap @ density / total


# 40 scores in [0, 1] plus 4 outside (clipped), and two exact ties
THRESHOLD_SCORES = np.concatenate(
    [
        np.round(np.random.default_rng(20240611).random(38), 6),
        [0.5, 0.5],  # a tie
        [-0.25, -1.0, 1.5, 2.0],  # clipped to lo / hi
    ]
)
THRESHOLD_K = 10
THRESHOLD_DRAWS = 20_000


@functools.cache
def _threshold_samples(
    scores: tuple[float, ...], k: int, epsilon: float, seed: int, n: int, lo: float, hi: float
) -> np.ndarray:
    rng = secure_rng(seed)
    arr = np.asarray(scores)
    return np.array([exponential_threshold(arr, k, epsilon, rng, lo=lo, hi=hi) for _ in range(n)])


@pytest.mark.parametrize(
    "epsilon,lo,hi",
    [(0.5, 0.0, 1.0), (2.0, 0.0, 1.0), (1.0, 0.3, 0.9), (0.7, -1.0, 3.0)],
)
def test_exponential_threshold_matches_exact_cdf(epsilon: float, lo: float, hi: float) -> None:
    """KS test against the exact piecewise-linear CDF, n = 20,000, alpha = 1e-3.

    Also (deterministic): every theta lies in [lo, hi] and no two draws coincide (the
    sampler is continuous, not a grid).
    """
    samples = _threshold_samples(
        tuple(THRESHOLD_SCORES),
        THRESHOLD_K,
        epsilon,
        40 + int(10 * epsilon),
        THRESHOLD_DRAWS,
        lo,
        hi,
    )
    assert np.all((samples >= lo) & (samples <= hi))
    assert np.unique(samples).size == samples.size
    breaks, log_density = _threshold_log_density(THRESHOLD_SCORES, THRESHOLD_K, epsilon / 2, lo, hi)
    assert stats.kstest(samples, _threshold_cdf(breaks, log_density)).pvalue > ALPHA


def test_exponential_threshold_is_not_on_a_grid_within_an_interval() -> None:
    """Draws inside one score interval spread over it: with scores = [0.5] * 30 and k = 0 all
    the mass (up to e^-15) is on (0.5, 1]; its draws must look uniform there (KS at alpha)."""
    rng = secure_rng(77)
    draws = np.array([exponential_threshold([0.5] * 30, 0, 1.0, rng) for _ in range(3000)])
    assert np.unique(draws).size == draws.size
    breaks, log_density = _threshold_log_density(np.full(30, 0.5), 0, 0.5, 0.0, 1.0)
    assert stats.kstest(draws, _threshold_cdf(breaks, log_density)).pvalue > ALPHA


# ----------------------------------------------------------------------------- 5. privacy loss
PRIVACY_EPSILON = 1.0
PRIVACY_DRAWS = 40_000
PRIVACY_BINS = np.linspace(0.0, 1.0, 21)
PRIVACY_MIN_EXPECTED = 50.0
# extra scores for the neighbour D' = D + {extra}: both extremes and one in the dense region
PRIVACY_EXTRAS = [0.0, 1.0, 0.5, 0.745]


def _empirical_privacy_violations(
    counts_d: np.ndarray,
    counts_dp: np.ndarray,
    prob_d: np.ndarray,
    prob_dp: np.ndarray,
    epsilon: float,
    alpha: float,
) -> list[str]:
    """One-sided tests of H0: P_D(bin) <= e^eps P_D'(bin) (and the reverse) for every bin.

    Per bin and direction: reject when the one-sided Clopper-Pearson lower bound for the larger
    side exceeds e^eps times the one-sided upper bound for the other side. Under H0 this happens
    with probability <= 2 * gamma (union bound over the two bounds). Bonferroni over all bins and
    both directions: gamma = alpha / (2 * bins * 2). Only bins whose exact expected count is at
    least PRIVACY_MIN_EXPECTED under both datasets are tested (chosen from the exact
    probabilities, not the data).
    """
    bins = counts_d.size
    gamma = alpha / (2 * bins * 2)
    n_d, n_dp = int(counts_d.sum()), int(counts_dp.sum())

    def lower(a: int, n: int) -> float:
        return 0.0 if a == 0 else float(stats.beta.ppf(gamma, a, n - a + 1))

    def upper(a: int, n: int) -> float:
        return 1.0 if a == n else float(stats.beta.ppf(1 - gamma, a + 1, n - a))

    violations = []
    for i in range(bins):
        if min(prob_d[i] * n_d, prob_dp[i] * n_dp) < PRIVACY_MIN_EXPECTED:
            continue
        a, b = int(counts_d[i]), int(counts_dp[i])
        if lower(a, n_d) > math.exp(epsilon) * upper(b, n_dp):
            violations.append(f"bin {i}: P_D/P_D' ~ {a / n_d / (b / n_dp):.3f} > e^eps")
        if lower(b, n_dp) > math.exp(epsilon) * upper(a, n_d):
            violations.append(f"bin {i}: P_D'/P_D ~ {b / n_dp / (a / n_d):.3f} > e^eps")
    return violations


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("extra", [*PRIVACY_EXTRAS, -3.0, 0.2, 0.9])
def test_threshold_exact_privacy_loss_is_at_most_epsilon(epsilon: float, extra: float) -> None:
    """Exact (not statistical): max over 20 bins of |log P_D(bin) - log P_D'(bin)| <= eps."""
    d = THRESHOLD_SCORES
    dp = np.append(THRESHOLD_SCORES, extra)
    edges = PRIVACY_BINS
    p_d = _bin_probabilities(*_threshold_log_density(d, THRESHOLD_K, epsilon / 2, 0, 1), edges)
    p_dp = _bin_probabilities(*_threshold_log_density(dp, THRESHOLD_K, epsilon / 2, 0, 1), edges)
    assert np.all(p_d > 0) and np.all(p_dp > 0)
    assert np.max(np.abs(np.log(p_d) - np.log(p_dp))) <= epsilon + 1e-9
    # and the bound is essentially tight for an extra score above every theta (k-th score moves)
    if extra >= 1.0:
        assert np.max(np.abs(np.log(p_d) - np.log(p_dp))) > epsilon / 2


def _bin_counts(samples: np.ndarray) -> np.ndarray:
    return np.histogram(samples, bins=PRIVACY_BINS)[0]


@pytest.mark.slow
@pytest.mark.parametrize("extra", PRIVACY_EXTRAS)
def test_threshold_empirical_privacy_loss_is_at_most_epsilon(extra: float) -> None:
    """Empirical: n = 40,000 draws under D (shared across the four cases) and under D'.

    alpha = 1e-3 per case, Bonferroni over 20 bins x 2 directions (see
    ``_empirical_privacy_violations``). The same check rejects a broken mechanism: see the
    next test.
    """
    eps = PRIVACY_EPSILON
    d = THRESHOLD_SCORES
    dp = np.append(THRESHOLD_SCORES, extra)
    samples_d = _threshold_samples(tuple(d), THRESHOLD_K, eps, 501, PRIVACY_DRAWS, 0.0, 1.0)
    samples_dp = _threshold_samples(
        tuple(dp), THRESHOLD_K, eps, 502 + PRIVACY_EXTRAS.index(extra), PRIVACY_DRAWS, 0.0, 1.0
    )
    p_d = _bin_probabilities(*_threshold_log_density(d, THRESHOLD_K, eps / 2, 0, 1), PRIVACY_BINS)
    p_dp = _bin_probabilities(*_threshold_log_density(dp, THRESHOLD_K, eps / 2, 0, 1), PRIVACY_BINS)
    tested = np.minimum(p_d, p_dp) * PRIVACY_DRAWS >= PRIVACY_MIN_EXPECTED
    assert tested.sum() >= 5, "too few bins with enough mass: the check would be vacuous"
    violations = _empirical_privacy_violations(
        _bin_counts(samples_d), _bin_counts(samples_dp), p_d, p_dp, eps, ALPHA
    )
    assert not violations, violations


def _exact_interval_sampler(
    breaks: np.ndarray, log_density: np.ndarray, n: int, gen: np.random.Generator
) -> np.ndarray:
    """The test's own exact sampler: interval ∝ width * density, then uniform inside it."""
    weights = np.diff(breaks) * np.exp(log_density - log_density.max())
    j = gen.choice(weights.size, size=n, p=weights / weights.sum())
    return breaks[j] + gen.random(n) * (breaks[j + 1] - breaks[j])


def test_threshold_privacy_check_detects_a_broken_mechanism() -> None:
    """Power: samples from exp(2 eps u) (4x the privacy loss of exp(eps u / 2)), same n and the
    same check at the assumed eps, must be flagged. Also checks the test's own sampler is right
    (KS of the correct-eps version at alpha = 1e-3), so the rejection is about the epsilon."""
    eps = PRIVACY_EPSILON
    gen = np.random.default_rng(4242)
    d = THRESHOLD_SCORES
    dp = np.append(THRESHOLD_SCORES, 1.0)  # an extra score above every theta
    broken_d = _threshold_log_density(d, THRESHOLD_K, 2 * eps, 0, 1)
    broken_dp = _threshold_log_density(dp, THRESHOLD_K, 2 * eps, 0, 1)
    samples_d = _exact_interval_sampler(*broken_d, PRIVACY_DRAWS, gen)
    samples_dp = _exact_interval_sampler(*broken_dp, PRIVACY_DRAWS, gen)
    p_d = _bin_probabilities(*broken_d, PRIVACY_BINS)
    p_dp = _bin_probabilities(*broken_dp, PRIVACY_BINS)
    assert np.max(np.abs(np.log(p_d / p_dp))) > eps + 0.5  # exact check (a) would catch it too
    violations = _empirical_privacy_violations(
        _bin_counts(samples_d), _bin_counts(samples_dp), p_d, p_dp, eps, ALPHA
    )
    assert violations, "the empirical privacy check failed to detect a 4x-epsilon mechanism"

    correct = _threshold_log_density(d, THRESHOLD_K, eps / 2, 0, 1)
    own = _exact_interval_sampler(*correct, 20_000, gen)
    assert stats.kstest(own, _threshold_cdf(*correct)).pvalue > ALPHA


# ----------------------------------------------------------------------------- 4. token sampling
def _softmax64(logits: torch.Tensor, temperature: float) -> np.ndarray:
    return special.softmax(logits.double().numpy() / temperature, axis=-1)


VOCAB_LOGITS = torch.tensor(np.random.default_rng(8).normal(0.0, 1.5, size=40), dtype=torch.float32)


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sample_token_matches_softmax(temperature: float) -> None:
    """Chi-square against softmax(z / tau) over a 40-token vocabulary, n = 20,000, alpha = 1e-3."""
    rng = secure_rng(60 + int(temperature * 10))
    draws = np.array([sample_token(VOCAB_LOGITS, temperature, rng) for _ in range(20_000)])
    probs = _softmax64(VOCAB_LOGITS, temperature)
    counts = np.bincount(draws, minlength=probs.size)
    assert counts.size == probs.size
    assert _chisquare_pvalue(counts, probs) > ALPHA


def test_sample_token_large_vocabulary_dominant_token() -> None:
    """49,152-entry vocabulary, one token with probability ~0.5 at tau = 0.8: two-sided binomial
    test of its frequency, n = 400 draws, alpha = 1e-3. A wrong temperature (tau = 1 instead)
    would give it probability ~0.15, far outside."""
    vocab = 49_152
    gen = np.random.default_rng(9)
    logits = torch.tensor(gen.normal(0.0, 1.0, size=vocab), dtype=torch.float32)
    logits[31_337] = 9.25
    probs = _softmax64(logits, 0.8)
    assert 0.3 < probs[31_337] < 0.7
    rng = secure_rng(90)
    n = 400
    draws = np.array([sample_token(logits, 0.8, rng) for _ in range(n)])
    assert np.all((draws >= 0) & (draws < vocab))
    hits = int(np.count_nonzero(draws == 31_337))
    assert stats.binomtest(hits, n, float(probs[31_337])).pvalue > ALPHA


def test_sample_tokens_rows_match_and_are_independent() -> None:
    """A (4, 6) batch, 8,000 calls; then one call on a 20,000-row batch of identical rows.

    Comparisons (Bonferroni, alpha/6 each): chi-square per row (4), chi-square of the joint
    (row 0, row 1) pairs against the product of their softmaxes (independence across rows), and
    the 20,000 i.i.d. rows of one call against their softmax.
    """
    alpha_each = ALPHA / 6
    tau = 1.5
    batch = torch.tensor(
        [
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            [5.0, 4.0, 3.0, 2.0, 1.0, 0.0],
            [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            [-2.0, 3.0, 0.0, 3.0, -2.0, 1.0],
        ],
        dtype=torch.float32,
    )
    probs = _softmax64(batch, tau)
    rng = secure_rng(101)
    calls = 8_000
    picks = np.stack([sample_tokens(batch, tau, rng) for _ in range(calls)])
    assert picks.shape == (calls, 4) and picks.dtype == np.int64
    for row in range(4):
        counts = np.bincount(picks[:, row], minlength=6)
        assert _chisquare_pvalue(counts, probs[row]) > alpha_each, f"row {row}"
    joint = np.bincount(picks[:, 0] * 6 + picks[:, 1], minlength=36)
    assert _chisquare_pvalue(joint, np.outer(probs[0], probs[1]).ravel()) > alpha_each

    many = sample_tokens(batch[3].repeat(20_000, 1), tau, rng)
    assert many.shape == (20_000,)
    assert _chisquare_pvalue(np.bincount(many, minlength=6), probs[3]) > alpha_each


# ----------------------------------------------------------------------------- 6. clip_logits
def _clip_reference(logits: torch.Tensor, c: float) -> np.ndarray:
    """float64 reference of DP-SynRAG's transform (alpha = 1), from the float32 input."""
    rows = np.atleast_2d(logits.to(torch.float32).double().numpy())
    l_exp = np.exp(rows - rows.max(axis=-1, keepdims=True))
    l_cent = l_exp - (l_exp.max(axis=-1, keepdims=True) + l_exp.min(axis=-1, keepdims=True)) / 2
    half = np.abs(l_cent).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        scale = np.where(half > 0, np.minimum(1.0, c / half), 0.0)
    return l_cent * scale


def _clip_batch(dtype: torch.dtype) -> torch.Tensor:
    gen = np.random.default_rng(123)
    vocab = 300
    rows = [
        gen.normal(0.0, 5.0, vocab),
        gen.normal(0.0, 0.05, vocab),  # small spread: no rescaling for moderate c
        np.full(vocab, 3.25),  # constant row -> zeros
        np.where(gen.random(vocab) < 0.5, 1e4, -1e4),  # huge logits, two values
        gen.uniform(-1e4, 1e4, vocab),  # huge spread
        np.concatenate([[1e4], gen.normal(9990.0, 4.0, vocab - 1)]),  # huge, close to max
        np.linspace(-20.0, 20.0, vocab),
        np.concatenate([[0.0, 1e-3], np.zeros(vocab - 2)]),  # tiny spread (exp cancels)
        np.concatenate([[-2e-6, 1e-6], np.zeros(vocab - 2)]),  # tinier (float32 exp ~ 1)
    ]
    return torch.tensor(np.stack(rows), dtype=torch.float64).to(dtype)


CLIP_CS = [0.1, 0.3, 1 / 3, 0.25, 0.5, 1.0, 2.5, 1e-6]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("c", CLIP_CS)
def test_clip_logits_bound_and_reference(dtype: torch.dtype, c: float) -> None:
    logits = _clip_batch(dtype)
    assert torch.isfinite(logits).all()
    out = clip_logits(logits, c)
    assert out.dtype == torch.float32 and out.shape == logits.shape
    out64 = out.double().numpy()
    # the l_inf bound holds exactly, compared in float64 against the Python float c
    # (float32(0.1), float32(0.3), float32(1/3) all round UP: the clamp must take care of it)
    assert np.all(np.abs(out64) <= c), f"max |out| = {np.abs(out64).max()!r} > c = {c!r}"
    ref = _clip_reference(logits, c)
    np.testing.assert_allclose(out64, ref, rtol=0, atol=1e-6 * c)
    assert np.all(out64[2] == 0.0)  # constant row


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_clip_logits_gives_a_non_finite_row_a_zero_vote(bad: float, dtype: torch.dtype) -> None:
    """One document's NaN or infinite logit cannot stop a build after its charge: that row
    votes zero (inside the [-c, c] bound), and the other rows are clipped as before."""
    logits = _clip_batch(dtype)
    clean = clip_logits(logits, 0.3)
    logits[1, 7] = bad
    out = clip_logits(logits, 0.3)
    assert torch.all(out[1] == 0) and torch.equal(out[0], clean[0])
    assert torch.equal(out[2:], clean[2:])
    assert torch.all(clip_logits(logits[1], 0.3) == 0)


def test_clip_logits_is_invariant_to_a_constant_shift_per_row() -> None:
    """Dyadic logits (multiples of 1/1024 in [-16, 16]) so that adding a dyadic constant is
    exact in float32: the outputs must then be bit-identical; for arbitrary float shifts, equal
    to 1e-6 * c."""
    gen = np.random.default_rng(7)
    base = np.round(gen.uniform(-16.0, 16.0, size=(6, 500)) * 1024) / 1024
    shifts = np.array([0.0, 3.0, -17.5, 64.0, 1000.0, -0.0009765625])[:, None]
    c = 0.1
    a = clip_logits(torch.tensor(base, dtype=torch.float32), c)
    b = clip_logits(torch.tensor(base + shifts, dtype=torch.float32), c)
    assert torch.equal(a, b)
    odd = clip_logits(torch.tensor(base + np.pi, dtype=torch.float32), c)
    np.testing.assert_allclose(odd.numpy(), a.numpy(), rtol=0, atol=1e-6 * c)


def test_clip_logits_one_dimensional_and_rows_independent() -> None:
    logits = _clip_batch(torch.float32)
    c = 1 / 3
    batch = clip_logits(logits, c)
    for i in range(logits.shape[0]):
        single = clip_logits(logits[i], c)
        assert single.shape == (logits.shape[1],) and single.dtype == torch.float32
        assert torch.equal(single, batch[i])
    perm = torch.tensor([5, 2, 7, 0, 8, 1, 6, 3, 4])
    assert torch.equal(clip_logits(logits[perm], c), batch[perm])
    # changing one row leaves the others untouched
    changed = logits.clone()
    changed[4] = -changed[4] * 0.5
    out = clip_logits(changed, c)
    keep = [i for i in range(logits.shape[0]) if i != 4]
    assert torch.equal(out[keep], batch[keep])
