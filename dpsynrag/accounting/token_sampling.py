"""Drawing the next token from the exact softmax of summed clipped logits.

Sampling y ~ softmax(z / tau), where z is a sum of per-document rows each in [-c, c], is the
exponential mechanism with utility z and sensitivity c: epsilon = 2c / tau per token, and
because it is bounded-range, rho = (c / tau)^2 / 2 zCDP per token (DP-SynRAG Lemma 3).
See ``costs.token_rho``.

No warpers: no top-k, top-p, typical, min-p or repetition penalty touches z. Any of them would
make the output distribution depend on the data in a way the cost above does not cover.

Two ways to turn a uniform u into the token, with identical results:

* ``sample_tokens`` (the audit reference): float64 inverse CDF with numpy on the host, one
  ``host_inverse_cdf`` per row, each row's u drawn from the given ``RandomSource``.
* ``inverse_cdf_tokens``: the same inverse CDF in torch float64 on the tensor's device, given
  the uniforms (drawn by the driver's CSPRNG); a margin check sends every row whose answer
  rounding could change to ``host_inverse_cdf``, so each token equals the host reference's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from dpsynrag.accounting.rng import RandomSource

_BATCH_SHAPE = "sample_tokens expects a (groups, vocab) batch"
_NOT_FINITE = "summed logits contain NaN or +infinity"
_NO_SUPPORT = ("every row needs a finite score (-infinity marks tokens outside the "
               "public support)")
_UNIT_ROUNDOFF = 2.0**-53
#: The smallest ``slack`` ``inverse_cdf_tokens`` accepts: below it the exactness argument in
#: its docstring no longer covers exp implementations a few ulps apart.
MIN_SLACK = 8.0


def _check_temperature(temperature: float) -> None:
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError("temperature must be a finite positive number (greedy decoding is not DP)")


def host_inverse_cdf(scores_row: np.ndarray, u: float) -> int:
    """The token of one row: float64 inverse CDF of softmax(scores_row) at the uniform u.

    ``scores_row`` is a float64 ``(vocab,)`` array already divided by the temperature (-inf:
    probability 0); ``u`` is in [0, 1). weights = exp(scores - max), cumulative = cumsum,
    token = searchsorted(cumulative, u * cumulative[-1], side="right"); if u * total rounds up
    to total, the last token with positive weight. This is the audit reference.
    """
    top = scores_row.max()
    if not np.isfinite(top):
        raise ValueError(f"{_NOT_FINITE}, or a row has no finite score")
    weights = np.exp(scores_row - top)
    cumulative = np.cumsum(weights)
    target = np.float64(u) * cumulative[-1]
    index = int(np.searchsorted(cumulative, target, side="right"))
    if index >= scores_row.shape[0]:  # u * total rounded up to total: the last token with mass
        index = int(np.flatnonzero(weights > 0)[-1])
    return index


def sample_tokens(summed_logits: torch.Tensor, temperature: float, rng: RandomSource) -> np.ndarray:
    """One token per row of a ``(groups, vocab)`` batch, each from softmax(row / temperature).

    Inverse-CDF sampling in float64 with one 53-bit CSPRNG uniform per row (``rng.random(groups)``,
    in row order; ``host_inverse_cdf``). A score of -inf (a token outside a public support,
    ``public_difference``) has probability exactly 0.
    Privacy: rho = (c / tau)^2 / 2 zCDP per row, where c bounds each document's contribution.
    """
    _check_temperature(temperature)
    if summed_logits.dim() != 2:
        raise ValueError(_BATCH_SHAPE)
    scores = summed_logits.detach().to(device="cpu", dtype=torch.float64).numpy() / temperature
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise ValueError(_NOT_FINITE)
    if not np.isfinite(scores).any(axis=1).all():
        raise ValueError(_NO_SUPPORT)
    uniforms = np.asarray(rng.random(scores.shape[0]), dtype=np.float64)
    picks = np.empty(scores.shape[0], dtype=np.int64)
    for row in range(scores.shape[0]):
        picks[row] = host_inverse_cdf(scores[row], float(uniforms[row]))
    return picks


def inverse_cdf_tokens(summed_logits: torch.Tensor, temperature: float,
                       uniforms: np.ndarray | Sequence[float], *,
                       slack: float = 16.0) -> tuple[np.ndarray, int]:
    """``sample_tokens``' tokens for given uniforms, computed on the tensor's device.

    Returns ``(tokens, fallbacks)``: one int64 token per row of the ``(groups, vocab)`` batch,
    exactly the token ``host_inverse_cdf(row / temperature, u)`` gives (so exactly what
    ``sample_tokens`` gives when its ``rng.random(groups)`` returns ``uniforms``), and the
    number of rows recomputed on the host.

    Method: in torch float64 on the device, scores = votes / tau, weights = exp(scores -
    rowmax), c = cumsum(weights), target = u * c[-1], idx = searchsorted(c, target, right).
    With n = vocab, T = c[-1] (>= 1: the row maximum's weight is exp(0) = 1) and
    B = slack * (n + 2) * 2^-53 * T, a row's idx is accepted only if idx < n,
    (idx == 0 or target - c[idx-1] > 2B) and c[idx] - target > 2B; every other row is
    recomputed by ``host_inverse_cdf`` on that row alone, moved to the CPU.

    Why accepted rows are exact (u = 2^-53):
    * scores and scores - rowmax are bitwise the host's: float64 conversion of the votes and
      max are exact, division and subtraction are correctly rounded on CPU and CUDA (the
      temperature is a 0-dim device tensor, so CUDA does not divide via a reciprocal).
    * exp is within a few ulps of exp(x) in numpy, torch CPU (SLEEF, 1 ulp) and CUDA (1 ulp),
      so device and host weights differ by at most a few times 2u relatively (plus subnormal
      noise, at most n * 2^-1022 in all, far below u * T since T >= 1).
    * any summation order (numpy's sequential cumsum, a parallel scan on the GPU) of k + 1
      non-negative float64 terms is within k * u * sum * (1 + O(u)) of their exact sum, so
      device and host cumulative values differ by at most about (2(n - 1) + 8) u T, and the
      targets (one more correctly rounded product) by at most that plus 2 u T.
    * together these are below 2B for slack >= ``MIN_SLACK`` (the default 16 leaves about a
      factor 8). An accepted idx therefore has host c[idx-1] < host target < host c[idx];
      the host cumulative is non-decreasing, so its searchsorted returns idx too (and idx < n
      means the host's "last token with mass" branch is not taken). The argument does not
      need the device cumulative to be monotone: the margins are checked at idx itself.

    Privacy: the same exponential-mechanism draw as ``sample_tokens``, rho = (c / tau)^2 / 2
    zCDP per row. The uniforms must come from the driver's CSPRNG (the ledger, charged before
    they were drawn); none are drawn here, and only the tokens leave the device (plus the
    fallback rows, read to the host to be recomputed).

    Host reads: one combined validity flag, the index and accept mask at the end, and each
    fallback row. The device must support float64 (CPU and CUDA do).
    """
    _check_temperature(temperature)
    if summed_logits.dim() != 2:
        raise ValueError(_BATCH_SHAPE)
    if not (math.isfinite(slack) and slack >= MIN_SLACK):
        raise ValueError(f"slack must be a finite number >= {MIN_SLACK} (exactness needs it)")
    groups, vocab = summed_logits.shape
    draws = np.asarray(uniforms, dtype=np.float64)
    if draws.ndim != 1 or draws.shape[0] != groups:
        raise ValueError(f"need one uniform per row: {groups} rows, uniforms of shape "
                         f"{draws.shape}")
    if not ((draws >= 0.0) & (draws < 1.0)).all():
        raise ValueError("every uniform must lie in [0, 1)")
    if groups == 0:
        return np.empty(0, dtype=np.int64), 0

    votes = summed_logits.detach()
    device = votes.device
    # A 0-dim tensor on the device, not a Python float: CUDA turns division by a CPU scalar into
    # multiplication by its reciprocal, which is not correctly rounded.
    scores = votes.to(torch.float64) / torch.tensor(float(temperature), dtype=torch.float64,
                                                    device=device)
    bad_value = (torch.isnan(scores) | torch.isposinf(scores)).any()
    no_support = torch.isfinite(scores).any(dim=1).all().logical_not()
    has_bad_value, lacks_support = torch.stack([bad_value, no_support]).tolist()
    if has_bad_value:
        raise ValueError(_NOT_FINITE)
    if lacks_support:
        raise ValueError(_NO_SUPPORT)

    weights = torch.exp(scores - scores.amax(dim=1, keepdim=True))
    cumulative = torch.cumsum(weights, dim=1)
    total = cumulative[:, -1]
    targets = torch.from_numpy(draws).to(device) * total
    index = torch.searchsorted(cumulative, targets.unsqueeze(1), right=True).squeeze(1)
    margin = total * (2.0 * float(slack) * (vocab + 2) * _UNIT_ROUNDOFF)
    above = cumulative.gather(1, index.clamp(max=vocab - 1).unsqueeze(1)).squeeze(1)
    below = cumulative.gather(1, (index - 1).clamp(min=0, max=vocab - 1).unsqueeze(1)).squeeze(1)
    accept = ((index < vocab) & ((index == 0) | (targets - below > margin))
              & (above - targets > margin))
    packed = torch.stack([index, accept.to(torch.int64)]).cpu().numpy()

    tokens = packed[0].astype(np.int64, copy=True)
    fallback_rows = np.flatnonzero(packed[1] == 0)
    for row in fallback_rows:
        host_row = votes[int(row)].to(device="cpu", dtype=torch.float64).numpy() / temperature
        tokens[row] = host_inverse_cdf(host_row, float(draws[row]))
    return tokens, int(fallback_rows.size)


def sample_token(summed_logits: torch.Tensor, temperature: float, rng: RandomSource) -> int:
    """One draw from exactly softmax(summed_logits / temperature); no warper of any kind.

    Privacy: rho = (c / tau)^2 / 2 zCDP, where c bounds each document's contribution.
    """
    if summed_logits.dim() != 1:
        raise ValueError("sample_token expects one (vocab,) vector; use sample_tokens for a batch")
    return int(sample_tokens(summed_logits.unsqueeze(0), temperature, rng)[0])
