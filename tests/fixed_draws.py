"""A deterministic stand-in for the token sampler of the engine tests.

``FixedDraws`` draws by inverse CDF from softmax(votes / tau) with one fixed uniform per
(group, step), so equal votes give equal tokens in whatever order the engine asks for them.
It records every call and every step's votes, and fails on a second draw of a (group, step):
one aggregate per group per step. ``released`` starts a group's tokens with tokens drawn
before (a resumed build), so its steps are numbered after them.
"""

from __future__ import annotations

import numpy as np
import torch


class FixedDraws:
    def __init__(self, released: list[list[int]] | None = None, *, tau: float = 0.3,
                 seed: int = 5, float64_votes: bool = True) -> None:
        self.tau, self.float64_votes = tau, float64_votes
        self.uniform = np.random.default_rng(seed).random((16, 16))
        self.tokens: dict[int, list[int]] = {g: list(t) for g, t in
                                             enumerate(released or []) if t}
        self.votes: dict[tuple[int, int], torch.Tensor] = {}
        self.calls: list[list[int]] = []

    def __call__(self, votes: torch.Tensor, active: list[int]) -> np.ndarray:
        assert votes.shape[0] == len(active)
        assert votes.dtype == torch.float64 or not self.float64_votes
        assert len(set(active)) == len(active)
        self.calls.append(list(active))
        out = []
        for row, g in enumerate(active):
            made = self.tokens.setdefault(g, [])
            assert (g, len(made)) not in self.votes  # never a second release of a step
            self.votes[(g, len(made))] = votes[row].clone()
            weights = torch.softmax(votes[row] / self.tau, dim=0)
            cdf = torch.cumsum(torch.where(torch.isfinite(weights), weights, 0), dim=0)
            token = min(int(np.searchsorted(cdf.numpy(), self.uniform[g, len(made)])),
                        cdf.numel() - 1)
            made.append(token)
            out.append(token)
        return np.asarray(out)
