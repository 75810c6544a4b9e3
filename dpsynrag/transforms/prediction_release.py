"""Stage (d) through the ledger: every sampled token of every cluster is a charged release.

The engine (``private_prediction``) computes each step's summed clipped votes z; this module's
``LedgerTokenSampler`` releases one token per active cluster from exactly softmax(z / tau)
under the key ``cluster/<r>/token/<n>``, inside the parallel group ``clusters``.

Privacy (DP-SynRAG Lemma 3): each document's clipped row lies in [-c, c], so one draw is the
exponential mechanism with sensitivity c: rho = (c/tau)^2 / 2 per token. A cluster's
generation stops at an end-of-sequence token; the worst case of T draws is what the guarantee
covers, so a cluster that stops after n < T tokens is charged the remaining T - n draws as a
reservation (``cluster/<r>/token-reserve``, no value). The per-cluster cost is therefore always
T (c/tau)^2 / 2, the planner's figure, independent of the data.

Resume: a token already in the ledger is returned as stored (never redrawn, never charged
again), so replaying a cluster after a crash regenerates the same text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.token_sampling import sample_tokens

STAGE = "d-prediction"
GROUP = "clusters"


def partition_name(cluster: int) -> str:
    return f"cluster/{cluster:05d}"


def token_key(cluster: int, step: int) -> str:
    return f"{partition_name(cluster)}/token/{step:03d}"


def reserve_key(cluster: int) -> str:
    return f"{partition_name(cluster)}/token-reserve"


class LedgerTokenSampler:
    """The driver-side sampler: ``(votes, active group indices) -> tokens`` via the ledger.

    ``clusters[g]`` is the cluster id of group g. ``on_finish(g, n_tokens)`` is called when a
    group ends (EOS or T tokens).
    """

    def __init__(self, ledger: Ledger, clusters: Sequence[int], *, clip: float,
                 temperature: float, max_new_tokens: int, eos_ids: frozenset[int],
                 on_finish: Callable[[int, int], None] | None = None) -> None:
        self.ledger = ledger
        self.clusters = list(clusters)
        self.clip, self.temperature, self.T = clip, temperature, max_new_tokens
        self.eos_ids = eos_ids
        self.on_finish = on_finish
        self.steps = [0] * len(self.clusters)
        self.finished = [False] * len(self.clusters)

    def _charge(self, cluster: int, tokens: int | None = None) -> Charge:
        params: dict[str, float | int] = {"clip": self.clip, "temperature": self.temperature}
        if tokens is not None:
            params["tokens"] = tokens
        return Charge(stage=STAGE, mechanism="token_softmax", params=params,
                      sensitivity=self.clip, sensitivity_norm="linf", group=GROUP,
                      partition=partition_name(cluster))

    def __call__(self, votes: np.ndarray, active: list[int]) -> np.ndarray:
        votes = np.asarray(votes, dtype=np.float64)
        if votes.shape[0] != len(active):
            raise ValueError("one row of votes per active group is required")
        requests = []
        for row, group in enumerate(active):
            if self.finished[group]:
                raise RuntimeError("the engine asked for a token of a finished group")
            step = self.steps[group]
            if step >= self.T:
                raise RuntimeError("the engine asked for more than T tokens")
            requests.append((token_key(self.clusters[group], step), self._charge(
                self.clusters[group]), _draw_one(votes[row], self.temperature)))
        tokens = [int(t) for t in self.ledger.release_many(requests)]
        reserves = []
        for group, token in zip(active, tokens, strict=True):
            self.steps[group] += 1
            n = self.steps[group]
            if token in self.eos_ids or n >= self.T:
                self.finished[group] = True
                if n < self.T:
                    reserves.append((reserve_key(self.clusters[group]),
                                     self._charge(self.clusters[group], self.T - n), _no_value))
                if self.on_finish is not None:
                    self.on_finish(group, n)
        if reserves:
            self.ledger.release_many(reserves)
        return np.asarray(tokens, dtype=np.int64)


def _draw_one(row: np.ndarray, temperature: float) -> Callable[[RandomSource], int]:
    import torch

    def draw(rng: RandomSource) -> int:
        return int(sample_tokens(torch.from_numpy(np.array(row[None, :])), temperature, rng)[0])

    return draw


def _no_value(_rng: RandomSource) -> None:
    return None


def charge_unstarted(ledger: Ledger, sampler: LedgerTokenSampler) -> None:
    """Charge the remaining draws (T - steps) of every group the engine did not finish.

    Normally none: the engine stops a group only at the model's EOS or after T tokens. This
    keeps the per-cluster charge at exactly T draws even if the two ever disagree.
    """
    reserves = []
    for group, cluster in enumerate(sampler.clusters):
        if not sampler.finished[group]:
            sampler.finished[group] = True
            reserves.append((reserve_key(cluster),
                             sampler._charge(cluster, sampler.T - sampler.steps[group]),
                             _no_value))
    if reserves:
        ledger.release_many(reserves)
