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

Resume: every token is stored in the ledger as it is drawn (one transaction per step for all
active clusters), so a killed build has each cluster's tokens up to its last step. A resumed
build reads them first (``PartitionTokenSampler.resume``: no draw, no charge) and the engine
continues each cluster after its stored tokens (``released``: the rows are prefilled with them,
no votes are computed for stored steps); a cluster whose stored tokens end at EOS or reach T
is not run at all. A token the engine still asks for that the ledger holds is returned as
stored (never redrawn, never charged again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

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


class PartitionTokenSampler:
    """Driver-side sampler ``(votes, active group indices) -> tokens`` through the ledger.

    Group g's tokens are released under
    ``<partitions[g]>/token/<step>`` in partition ``partitions[g]`` of parallel group
    ``group``, stage ``stage``.

    Privacy: each released token is one exponential-mechanism draw from exactly
    softmax(votes / temperature) over rows clipped to [-clip, clip]: rho = (clip/temperature)^2
    / 2, recomputed by the ledger from the recorded parameters. A group that stops after
    n < T tokens (EOS) is charged the remaining T - n draws under ``<partition>/token-reserve``
    (no value), so every partition costs exactly T (clip/temperature)^2 / 2 whatever the data.
    A token already in the ledger (resume) is returned as stored: never redrawn or recharged.
    """

    def __init__(self, ledger: Ledger, partitions: Sequence[str], *, group: str, stage: str,
                 clip: float, temperature: float, max_new_tokens: int,
                 eos_ids: Iterable[int],
                 on_finish: Callable[[int, int], None] | None = None,
                 on_tokens: Callable[[int], None] | None = None) -> None:
        if len(set(partitions)) != len(partitions):
            raise ValueError("partition names must be distinct")
        self.ledger = ledger
        self.partitions = list(partitions)
        self.group, self.stage = group, stage
        self.clip, self.temperature, self.T = float(clip), float(temperature), max_new_tokens
        self.eos_ids = frozenset(int(t) for t in eos_ids)
        self.on_finish = on_finish
        self.on_tokens = on_tokens  # count of draws settled (tokens and reserved): progress
        self.steps = [0] * len(self.partitions)
        self.finished = [False] * len(self.partitions)
        # device-side sampling: group -> (key, ledger answer) of a uniform awaiting its token
        self._drawn: dict[int, tuple[str, tuple[bool, Any]]] = {}

    def _charge(self, partition: str, tokens: int | None = None) -> Charge:
        params: dict[str, float | int] = {"clip": self.clip, "temperature": self.temperature}
        if tokens is not None:
            params["tokens"] = tokens
        return Charge(stage=self.stage, mechanism="token_softmax", params=params,
                      sensitivity=self.clip, sensitivity_norm="linf", group=self.group,
                      partition=partition)

    def _keys(self, active: Sequence[int]) -> list[tuple[str, str]]:
        """(key, partition) of each active group's next token; refuses a finished group."""
        keys = []
        for group in active:
            if self.finished[group]:
                raise RuntimeError("the engine asked for a token of a finished group")
            step = self.steps[group]
            if step >= self.T:
                raise RuntimeError("the engine asked for more than T tokens")
            partition = self.partitions[group]
            keys.append((f"{partition}/token/{step:03d}", partition))
        return keys

    def __call__(self, votes: np.ndarray, active: list[int]) -> np.ndarray:
        votes = np.asarray(votes, dtype=np.float64)
        if votes.ndim != 2 or votes.shape[0] != len(active):
            raise ValueError("one row of votes per active group is required")
        requests = [(key, self._charge(partition), _draw_one(votes[row], self.temperature))
                    for row, (key, partition) in enumerate(self._keys(active))]
        tokens = [int(t) for t in self.ledger.release_many(requests)]
        self._advance(active, tokens)
        return np.asarray(tokens, dtype=np.int64)

    def resume(self) -> list[list[int]]:
        """Read each group's tokens already released (a resumed build) and continue after them.

        Returns, per group, its stored tokens from step 0 up to the first step without a
        stored value, an end-of-sequence token (kept, last) or T tokens. Nothing is drawn or
        charged: the ledger is only read (``Ledger.lookup``, which refuses a key recorded with
        other parameters); a group that ends among them is finished here, its reservation
        released as at its end (stored already, unless the build died between the two). The
        engine must then ask for each group's next token only (``released`` of
        ``private_predict``). Must run before the first step."""
        if any(self.steps) or any(self.finished) or self._drawn:
            raise RuntimeError("resume runs before the first step")
        released: list[list[int]] = []
        for group, partition in enumerate(self.partitions):
            tokens: list[int] = []
            charge = self._charge(partition)
            while len(tokens) < self.T:
                found = self.ledger.lookup(f"{partition}/token/{len(tokens):03d}", charge)
                if found is None or not found[0]:
                    break
                tokens.append(int(found[1]))
                if tokens[-1] in self.eos_ids:
                    break
            for token in tokens:
                self._advance([group], [token])
            released.append(tokens)
        return released

    def draw_uniforms(self, active: list[int]) -> list[tuple[bool, float | int]]:
        """Device-side sampling, first half: charge each active group's next token and draw
        its uniform u (one 53-bit CSPRNG uniform, the one ``sample_tokens`` would consume).

        Returns ``(True, token)`` for a token the ledger already holds (a resumed build: the
        worker must use it) and ``(False, u)`` otherwise; the worker turns u into the token by
        the exact float64 inverse CDF of softmax(votes / temperature)
        (``token_sampling.inverse_cdf_tokens``) and gives it back to ``record``. Privacy: the
        same draw as ``__call__``, charged (and committed) before u exists."""
        waiting = [group for group in active if group in self._drawn]
        if waiting:
            raise RuntimeError("the tokens of the last uniforms were not recorded")
        keys = self._keys(active)
        answers = self.ledger.draw_many([(key, self._charge(partition), _draw_uniform)
                                         for key, partition in keys])
        for group, (key, _partition), answer in zip(active, keys, answers, strict=True):
            self._drawn[group] = (key, answer)
        return [(bool(stored), int(value) if stored else float(value))
                for stored, value in answers]

    def record(self, active: list[int], tokens: Sequence[int]) -> None:
        """Device-side sampling, second half: store the tokens computed from the uniforms
        ``draw_uniforms`` gave these groups (the releases), before anything else uses them on
        the driver. Several workers may each have a step's uniforms outstanding (their groups
        are disjoint); each group has at most one."""
        tokens = [int(t) for t in tokens]
        if len(tokens) != len(active) or len(set(active)) != len(active):
            raise RuntimeError("the worker's tokens do not answer the uniforms it was sent")
        if any(group not in self._drawn for group in active):
            raise RuntimeError("tokens arrived without uniforms drawn for them")
        drawn = [self._drawn[group] for group in active]
        for (_key, (stored, value)), token in zip(drawn, tokens, strict=True):
            if stored and int(value) != token:
                raise RuntimeError("the worker replaced a token the ledger already holds")
        self.ledger.store_many([(key, token) for (key, (stored, _v)), token
                                in zip(drawn, tokens, strict=True) if not stored])
        for group in active:
            del self._drawn[group]
        self._advance(active, tokens)

    def _advance(self, active: Sequence[int], tokens: Sequence[int]) -> None:
        """Count each group's released token; a group that stops early (EOS) is charged its
        remaining draws as one reservation."""
        reserves = []
        finished = []
        settled = 0
        for group, token in zip(active, tokens, strict=True):
            self.steps[group] += 1
            n = self.steps[group]
            settled += 1
            if token in self.eos_ids or n >= self.T:
                self.finished[group] = True
                if n < self.T:
                    partition = self.partitions[group]
                    reserves.append((f"{partition}/token-reserve",
                                     self._charge(partition, self.T - n), _no_value))
                    settled += self.T - n
                finished.append((group, n))
        if reserves:
            self.ledger.release_many(reserves)
        if self.on_tokens is not None:
            self.on_tokens(settled)
        if self.on_finish is not None:
            for group, n in finished:
                self.on_finish(group, n)

    def charge_unfinished(self) -> None:
        """Charge the remaining draws of every group that did not finish through this sampler.

        Normally none: the engine stops a group only at an EOS token or after T tokens, which
        the sampler sees. A group the engine never sampled, or stopped at a token outside
        ``eos_ids`` (a caller passing another EOS set than the model's), would otherwise be
        charged fewer than T draws; here it is charged ``T - steps`` as a reservation.
        """
        reserves = []
        for group, partition in enumerate(self.partitions):
            if not self.finished[group]:
                reserves.append((f"{partition}/token-reserve",
                                 self._charge(partition, self.T - self.steps[group]),
                                 _no_value))
                self.finished[group] = True
        if reserves:
            self.ledger.release_many(reserves)
            if self.on_tokens is not None:
                self.on_tokens(sum(int(charge.params["tokens"]) for _k, charge, _d in reserves))


class LedgerTokenSampler(PartitionTokenSampler):
    """DP-SynRAG's stage (d) sampler: partition ``cluster/<r>`` of the group ``clusters``.

    ``clusters[g]`` is the cluster id of group g; see ``PartitionTokenSampler`` for the
    privacy cost (T (c/tau)^2 / 2 per cluster, whatever the data).
    """

    def __init__(self, ledger: Ledger, clusters: Sequence[int], *, clip: float,
                 temperature: float, max_new_tokens: int, eos_ids: Iterable[int],
                 on_finish: Callable[[int, int], None] | None = None,
                 on_tokens: Callable[[int], None] | None = None) -> None:
        self.clusters = list(clusters)
        super().__init__(ledger, [partition_name(c) for c in self.clusters], group=GROUP,
                         stage=STAGE, clip=clip, temperature=temperature,
                         max_new_tokens=max_new_tokens, eos_ids=eos_ids, on_finish=on_finish,
                         on_tokens=on_tokens)


def _draw_one(row: np.ndarray, temperature: float) -> Callable[[RandomSource], int]:
    """One draw from exactly softmax(row / temperature) with the ledger's random source."""
    import torch

    def draw(rng: RandomSource) -> int:
        return int(sample_tokens(torch.from_numpy(np.array(row[None, :])), temperature, rng)[0])

    return draw


def _draw_uniform(rng: RandomSource) -> float:
    """The uniform ``sample_tokens`` consumes for one row: 53 CSPRNG bits."""
    return float(rng.random())


def _no_value(_rng: RandomSource) -> None:
    return None


def charge_unstarted(ledger: Ledger, sampler: PartitionTokenSampler) -> None:
    """Charge the remaining draws (T - steps) of every group the engine did not finish.

    Normally none: the engine stops a group only at the model's EOS or after T tokens. This
    keeps the per-cluster charge at exactly T draws even if the two ever disagree.
    """
    if sampler.ledger is not ledger:
        raise ValueError("the sampler charges a different ledger")
    sampler.charge_unfinished()
