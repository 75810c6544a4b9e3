"""``inverse_cdf_tokens`` (the device inverse CDF) against ``sample_tokens`` (the host reference).

Every test asserts exact equality of every token with the host reference for the same
uniforms (``RandomSource(seed).random(n)`` is the stream ``sample_tokens`` consumes). No
statistical test is needed here: the host sampler's distribution is tested in
``test_samplers_statistical.py``, and equality token for token carries it over.

The refactor of ``sample_tokens`` onto ``host_inverse_cdf`` is checked against a verbatim copy
of the former vectorised implementation (same tokens, same random-stream consumption).

CPU tensors throughout (what CI has); one test compares a CUDA tensor and runs only on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.token_sampling import (
    MIN_SLACK,
    host_inverse_cdf,
    inverse_cdf_tokens,
    sample_tokens,
)

LAST_UNIFORM = 1.0 - 2.0**-53


def _legacy_sample_tokens(summed_logits: torch.Tensor, temperature: float,
                          rng: RandomSource) -> np.ndarray:
    """The host sampler as it was before ``host_inverse_cdf`` existed (vectorised over rows)."""
    scores = summed_logits.detach().to(device="cpu", dtype=torch.float64).numpy() / temperature
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    cumulative = np.cumsum(weights, axis=1)
    targets = np.asarray(rng.random(scores.shape[0]), dtype=np.float64) * cumulative[:, -1]
    picks = np.empty(scores.shape[0], dtype=np.int64)
    for row in range(scores.shape[0]):
        index = int(np.searchsorted(cumulative[row], targets[row], side="right"))
        if index >= scores.shape[1]:
            index = int(np.flatnonzero(weights[row] > 0)[-1])
        picks[row] = index
    return picks


def _votes(seed: int, groups: int, vocab: int) -> torch.Tensor:
    """Random summed votes: smooth rows, rows with -inf entries, a single-finite-entry row and
    a very peaked row (votes * 1e3)."""
    gen = np.random.default_rng(seed)
    votes = gen.normal(0.0, 3.0, size=(groups, vocab))
    votes[1, gen.random(vocab) < 0.5] = -np.inf  # a public support of about half the tokens
    votes[1, gen.integers(vocab)] = 0.0
    votes[2, :] = -np.inf
    votes[2, gen.integers(vocab)] = 1.5  # only one token possible
    votes[3] *= 1e3  # nearly one-hot, most weights underflow to 0 or subnormals
    return torch.from_numpy(votes)


class _FixedUniform(RandomSource):
    """A source whose every uniform is the same value (for edge cases only)."""

    def __init__(self, value: float) -> None:
        super().__init__(seed=0)
        self._value = value

    def random(self, size: int | tuple[int, ...] | None = None) -> float | np.ndarray:
        return self._value if size is None else np.full(size, self._value)


def _uniforms(seed: int, groups: int) -> np.ndarray:
    return np.asarray(RandomSource(seed=seed).random(groups), dtype=np.float64)


CASES = [(seed, vocab, tau) for seed, vocab in [(0, 7), (1, 7), (2, 1000), (3, 1000), (4, 49152)]
         for tau in (0.5, 1.0, 3.0)]


@pytest.mark.parametrize(("seed", "vocab", "tau"), CASES)
def test_device_tokens_equal_host_reference(seed: int, vocab: int, tau: float) -> None:
    groups = 12
    votes = _votes(seed, groups, vocab)
    expected = sample_tokens(votes, tau, RandomSource(seed=seed))
    tokens, _fallbacks = inverse_cdf_tokens(votes, tau, _uniforms(seed, groups))
    assert tokens.dtype == np.int64
    np.testing.assert_array_equal(tokens, expected)


@pytest.mark.parametrize(("seed", "vocab", "tau"), CASES)
def test_refactored_host_sampler_matches_former_implementation(seed: int, vocab: int,
                                                               tau: float) -> None:
    votes = _votes(seed, 12, vocab)
    new_rng, old_rng = RandomSource(seed=seed), RandomSource(seed=seed)
    np.testing.assert_array_equal(sample_tokens(votes, tau, new_rng),
                                  _legacy_sample_tokens(votes, tau, old_rng))
    # the same random-stream consumption: the next draws agree
    assert np.asarray(new_rng.random(4)).tolist() == np.asarray(old_rng.random(4)).tolist()


@pytest.mark.parametrize("vocab", [7, 1000, 49152])
def test_smooth_rows_never_fall_back_at_the_default_slack(vocab: int) -> None:
    groups = 32
    votes = torch.from_numpy(np.random.default_rng(vocab).normal(0.0, 2.0, size=(groups, vocab)))
    uniforms = _uniforms(vocab, groups)
    tokens, fallbacks = inverse_cdf_tokens(votes, 1.0, uniforms)
    assert fallbacks == 0
    np.testing.assert_array_equal(tokens, sample_tokens(votes, 1.0, RandomSource(seed=vocab)))


@pytest.mark.parametrize("vocab", [7, 1000])
def test_huge_slack_sends_every_row_to_the_host(vocab: int) -> None:
    groups = 12
    votes = _votes(vocab, groups, vocab)
    tokens, fallbacks = inverse_cdf_tokens(votes, 0.7, _uniforms(vocab, groups), slack=1e15)
    assert fallbacks == groups
    np.testing.assert_array_equal(tokens, sample_tokens(votes, 0.7, RandomSource(seed=vocab)))


@pytest.mark.parametrize("vocab", [7, 1000, 49152])
def test_edge_uniforms_zero_and_one_minus_ulp(vocab: int) -> None:
    groups = 8
    votes = _votes(vocab + 1, groups, vocab)
    for u in (0.0, LAST_UNIFORM):
        uniforms = np.full(groups, u)
        expected = [host_inverse_cdf(votes[row].numpy() / 2.0, u) for row in range(groups)]
        tokens, fallbacks = inverse_cdf_tokens(votes, 2.0, uniforms)
        np.testing.assert_array_equal(tokens, expected)
        if u == LAST_UNIFORM:  # u * total is within one ulp of total: never accepted
            assert fallbacks == groups


def test_target_rounding_up_to_the_total_picks_the_last_token_with_mass() -> None:
    # total = 3 and (1 - 2^-53) * 3 rounds to 3: searchsorted runs off the end
    votes = torch.tensor([[0.0, 0.0, 0.0, -np.inf]], dtype=torch.float64)
    assert sample_tokens(votes, 1.0, _FixedUniform(LAST_UNIFORM)).tolist() == [2]
    tokens, fallbacks = inverse_cdf_tokens(votes, 1.0, [LAST_UNIFORM])
    assert tokens.tolist() == [2] and fallbacks == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_votes_match_the_host_on_the_same_tensor(dtype: torch.dtype) -> None:
    groups, vocab, seed = 10, 1000, 7
    votes = _votes(seed, groups, vocab)
    votes[3] /= 1e3  # undo the peaked row's scale: float16 would overflow to +inf
    votes = votes.to(dtype)
    expected = sample_tokens(votes, 0.8, RandomSource(seed=seed))
    tokens, _fallbacks = inverse_cdf_tokens(votes, 0.8, _uniforms(seed, groups))
    np.testing.assert_array_equal(tokens, expected)


def test_uniforms_may_be_a_sequence_and_empty_batches_work() -> None:
    votes = _votes(5, 4, 7)
    uniforms = [float(u) for u in _uniforms(5, 4)]
    tokens, _ = inverse_cdf_tokens(votes, 1.0, uniforms)
    np.testing.assert_array_equal(tokens, sample_tokens(votes, 1.0, RandomSource(seed=5)))
    empty, fallbacks = inverse_cdf_tokens(torch.zeros((0, 7)), 1.0, [])
    assert empty.shape == (0,) and empty.dtype == np.int64 and fallbacks == 0


def test_grad_tensors_are_accepted() -> None:
    votes = _votes(6, 4, 7).requires_grad_(True)
    tokens, _ = inverse_cdf_tokens(votes, 1.0, _uniforms(6, 4))
    np.testing.assert_array_equal(tokens, sample_tokens(votes, 1.0, RandomSource(seed=6)))


def _error_message(call: object) -> str:
    assert callable(call)
    with pytest.raises(ValueError) as caught:
        call()
    return str(caught.value)


@pytest.mark.filterwarnings("ignore:overflow encountered in divide:RuntimeWarning")
@pytest.mark.parametrize("bad", ["nan", "posinf", "all_neginf", "overflow"])
def test_invalid_scores_raise_the_host_samplers_error(bad: str) -> None:
    votes = torch.zeros((3, 5), dtype=torch.float64)
    tau = 1.0
    if bad == "nan":
        votes[1, 2] = float("nan")
    elif bad == "posinf":
        votes[2, 0] = float("inf")
    elif bad == "all_neginf":
        votes[1, :] = -float("inf")
    else:  # finite votes, +inf once divided by a tiny temperature
        votes[0, 0], tau = 1e300, 1e-10
    host = _error_message(lambda: sample_tokens(votes, tau, RandomSource(seed=0)))
    device = _error_message(lambda: inverse_cdf_tokens(votes, tau, [0.5, 0.5, 0.5]))
    assert device == host


def test_invalid_arguments_raise() -> None:
    votes = torch.zeros((3, 5))
    for temperature in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            inverse_cdf_tokens(votes, temperature, [0.5] * 3)
    with pytest.raises(ValueError, match="groups, vocab"):
        inverse_cdf_tokens(torch.zeros(5), 1.0, [0.5])
    for uniforms in (np.full(2, 0.5), np.full(4, 0.5), np.full((1, 3), 0.5)):
        with pytest.raises(ValueError, match="one uniform per row"):
            inverse_cdf_tokens(votes, 1.0, uniforms)
    for outside in (1.0, -1e-300, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            inverse_cdf_tokens(votes, 1.0, [0.5, outside, 0.5])
    for slack in (MIN_SLACK / 2, 0.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="slack"):
            inverse_cdf_tokens(votes, 1.0, [0.5] * 3, slack=slack)
    with pytest.raises(ValueError):
        host_inverse_cdf(np.full(4, -np.inf), 0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_matches_the_host_reference() -> None:
    for seed, vocab in [(10, 7), (11, 1000), (12, 49152), (13, 151936)]:
        groups = 64
        votes = _votes(seed, groups, vocab)
        for dtype in (torch.float64, torch.float32, torch.bfloat16):
            on_device = votes.to(dtype).cuda()
            expected = sample_tokens(on_device, 0.9, RandomSource(seed=seed))
            tokens, fallbacks = inverse_cdf_tokens(on_device, 0.9, _uniforms(seed, groups))
            np.testing.assert_array_equal(tokens, expected)
            assert fallbacks <= 3  # smooth rows essentially never fall back
