"""Drawing the next token from the exact softmax of summed clipped logits.

Sampling y ~ softmax(z / tau), where z is a sum of per-document rows each in [-c, c], is the
exponential mechanism with utility z and sensitivity c: epsilon = 2c / tau per token, and
because it is bounded-range, rho = (c / tau)^2 / 2 zCDP per token (DP-SynRAG Lemma 3).
See ``costs.token_rho``.

No warpers: no top-k, top-p, typical, min-p or repetition penalty touches z. Any of them would
make the output distribution depend on the data in a way the cost above does not cover.
"""

from __future__ import annotations

import numpy as np
import torch

from dpsynrag.accounting.rng import RandomSource


def _check_temperature(temperature: float) -> None:
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError("temperature must be a finite positive number (greedy decoding is not DP)")


def sample_tokens(summed_logits: torch.Tensor, temperature: float, rng: RandomSource) -> np.ndarray:
    """One token per row of a ``(groups, vocab)`` batch, each from softmax(row / temperature).

    Inverse-CDF sampling in float64 with one 53-bit CSPRNG uniform per row. A score of -inf
    (a token outside a public support, ``public_difference``) has probability exactly 0.
    Privacy: rho = (c / tau)^2 / 2 zCDP per row, where c bounds each document's contribution.
    """
    _check_temperature(temperature)
    if summed_logits.dim() != 2:
        raise ValueError("sample_tokens expects a (groups, vocab) batch")
    scores = summed_logits.detach().to(device="cpu", dtype=torch.float64).numpy() / temperature
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise ValueError("summed logits contain NaN or +infinity")
    if not np.isfinite(scores).any(axis=1).all():
        raise ValueError("every row needs a finite score (-infinity marks tokens outside the "
                         "public support)")
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    cumulative = np.cumsum(weights, axis=1)
    targets = np.asarray(rng.random(scores.shape[0]), dtype=np.float64) * cumulative[:, -1]
    picks = np.empty(scores.shape[0], dtype=np.int64)
    for row in range(scores.shape[0]):
        index = int(np.searchsorted(cumulative[row], targets[row], side="right"))
        if index >= scores.shape[1]:  # u * total rounded up to total: the last token with mass
            index = int(np.flatnonzero(weights[row] > 0)[-1])
        picks[row] = index
    return picks


def sample_token(summed_logits: torch.Tensor, temperature: float, rng: RandomSource) -> int:
    """One draw from exactly softmax(summed_logits / temperature); no warper of any kind.

    Privacy: rho = (c / tau)^2 / 2 zCDP, where c bounds each document's contribution.
    """
    if summed_logits.dim() != 1:
        raise ValueError("sample_token expects one (vocab,) vector; use sample_tokens for a batch")
    return int(sample_tokens(summed_logits.unsqueeze(0), temperature, rng)[0])
