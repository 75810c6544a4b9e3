"""The public prior of the public-difference token sampler (issue 15): phi_pub per group.

Each group has one **public row**: the token ids of its prompt with a public text in place of
the document (e.g. the rephrase instruction and "Known facts: <released phrases>"), then the
public reply prefix; never a private document. At every step the model runs on that row
followed by the group's released tokens, and its next-token logits phi_pub give

* the support V_t: the public top-k, the EOS tokens, and the next token of every released
  candidate string whose earlier tokens the group has just generated (``candidate_next``);
  **trie completion**: once the last ``COMPLETE_AFTER`` or more generated tokens begin a
  released candidate and every candidate they begin continues with the same token, V_t is
  that one token (``candidate_forced``), so the draw returns it with probability 1 and a
  released name is spelled out whole;
* the public term of the votes and the reference of each document's difference row
  (``accounting.public_difference``).

All of it is a function of public values (prompt, public text, model, released candidates,
released tokens), so it costs nothing; each document's row stays in [-c, c] and the token
keeps the plain sampler's cost rho = (c / tau)^2 / 2 (see ``accounting.public_difference``).
Public rows run one at a time through the model's own KV cache (shape (1, its length)):
their values are public, and a group's public logits never depend on another group.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dpsynrag.accounting.public_difference import difference_clip, prior_votes, public_support
from dpsynrag.models.protocols import CausalLM
from dpsynrag.transforms.kv_cache import feed_token, prefill_rows

DEFAULT_TOP_K = 50
COMPLETE_AFTER = 2  # tokens of a candidate that must be generated before it is completed
DEFAULT_PUBLIC_TEMPERATURE = 1.0

__all__ = ["DEFAULT_PUBLIC_TEMPERATURE", "DEFAULT_TOP_K", "PriorStep", "PublicPrior",
           "PublicPriorSettings", "candidate_next"]


@dataclass(frozen=True)
class PublicPriorSettings:
    """The public settings of the sampler; all of them go into the build's certificate.

    ``documents``: the public text put in place of ``{document}`` (one for every group, or one
    per group); ``top_k``: the public top-k of the support; ``temperature``: tau_pub, the public
    prior's temperature (its weight in the votes is tau / tau_pub); ``candidates``: released
    strings per group (or one list for all) whose next tokens join the support;
    ``candidate_support`` / ``trie_completion``: whether the candidates' next tokens join the
    support and whether a begun candidate is completed (both on by default; off only for the
    writer's ablation, ``--writer-ablate``). Every setting is public: none changes the cost.
    """

    documents: str | Sequence[str]
    top_k: int = DEFAULT_TOP_K
    temperature: float = DEFAULT_PUBLIC_TEMPERATURE
    candidates: Sequence[str] | Sequence[Sequence[str]] = ()
    candidate_support: bool = True
    trie_completion: bool = True

    def validate(self) -> None:
        if not (isinstance(self.top_k, int) and not isinstance(self.top_k, bool)
                and self.top_k >= 1):
            raise ValueError("the public top-k must be a positive integer")
        if not (isinstance(self.temperature, int | float) and 0 < self.temperature < float("inf")):
            raise ValueError("the public temperature must be a finite positive number")

    def subset(self, indices: Sequence[int]) -> PublicPriorSettings:
        """The settings of the groups at ``indices`` (a worker's shard)."""
        documents = self.documents if isinstance(self.documents, str) \
            else [self.documents[i] for i in indices]
        candidates = list(self.candidates)
        if candidates and not all(isinstance(c, str) for c in candidates):
            candidates = [candidates[i] for i in indices]
        return PublicPriorSettings(documents=documents, top_k=self.top_k,
                                   temperature=self.temperature, candidates=candidates,
                                   candidate_support=self.candidate_support,
                                   trie_completion=self.trie_completion)

    def per_group(self, groups: int) -> tuple[list[str], list[list[str]]]:
        """The public text and the candidate strings of each of ``groups`` groups."""
        documents = [self.documents] * groups if isinstance(self.documents, str) \
            else list(self.documents)
        if len(documents) != groups:
            raise ValueError("one public document per group is required")
        candidates = list(self.candidates)
        if not candidates or all(isinstance(c, str) for c in candidates):
            per_group = [[str(c) for c in candidates] for _ in range(groups)]
        else:
            per_group = [[str(c) for c in group] for group in candidates]
            if len(per_group) != groups:
                raise ValueError("one list of candidates per group is required")
        return documents, per_group


def candidate_next(generated: Sequence[int], candidates: Iterable[tuple[int, ...]]) -> set[int]:
    """Token ids that continue a candidate: the first token of every candidate, and token j of
    a candidate whose tokens 0..j-1 are the last j generated tokens. Public in, public out."""
    nxt: set[int] = set()
    tail = tuple(int(t) for t in generated)
    for ids in candidates:
        for j in range(len(ids)):
            if j == 0 or (j <= len(tail) and tail[len(tail) - j:] == ids[:j]):
                nxt.add(int(ids[j]))
    return nxt


def candidate_forced(generated: Sequence[int], candidates: Iterable[tuple[int, ...]],
                     complete_after: int = COMPLETE_AFTER) -> int | None:
    """The next token of the released candidate the generated tokens have begun, or None.

    Some candidate's first j >= ``complete_after`` tokens must be the last j generated tokens
    (j short of its length), and every such match (any candidate, any j >= 1) must continue
    with the same token. Public in, public out: the released prefix and released strings.
    """
    tail = tuple(int(t) for t in generated)
    longest = 0
    nexts: set[int] = set()
    for ids in candidates:
        for j in range(1, min(len(ids), len(tail) + 1)):
            if tail[len(tail) - j:] == ids[:j]:
                nexts.add(int(ids[j]))
                longest = max(longest, j)
    return next(iter(nexts)) if longest >= complete_after and len(nexts) == 1 else None


@dataclass
class PriorStep:
    """One step's public logits and support for the active groups (rows in ``active`` order)."""

    public: torch.Tensor  # (active, vocab) float32
    support: torch.Tensor  # (active, vocab) bool
    scale: float  # tau / tau_pub
    clip: float

    def rows(self, logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Difference rows of documents whose group sits at ``positions`` among the active."""
        return difference_clip(logits, self.public[positions], self.support[positions],
                               self.clip)

    def votes(self, summed: torch.Tensor) -> torch.Tensor:
        """The votes the sampler draws from: the public term added, -inf off the support."""
        return prior_votes(summed, self.public.to(summed.device), self.support.to(summed.device),
                           self.scale)


class PublicPrior:
    """The public rows of every group and their incremental KV caches (active groups only)."""

    def __init__(self, model: CausalLM, rows: Sequence[Sequence[int]],
                 candidates: Sequence[Sequence[tuple[int, ...]]], *, eos_ids: Iterable[int],
                 top_k: int, scale: float, clip: float, device: torch.device,
                 vocab_size: int, candidate_support: bool = True,
                 trie_completion: bool = True) -> None:
        if len(candidates) != len(rows):
            raise ValueError("one list of candidate token ids per group is required")
        if any(len(row) == 0 for row in rows):
            raise ValueError("every public row needs at least one token")
        self.model, self.device, self.vocab_size = model, device, vocab_size
        self.rows = [tuple(int(t) for t in row) for row in rows]
        self.candidates = [list(c) for c in candidates]
        self.eos_ids = sorted(int(t) for t in eos_ids)
        self.top_k, self.scale, self.clip = top_k, float(scale), float(clip)
        self.candidate_support, self.trie_completion = candidate_support, trie_completion
        self._states: dict[int, tuple[Any, int, torch.Tensor]] = {}

    @torch.inference_mode()
    def _logits(self, group: int, generated: Sequence[int]) -> torch.Tensor:
        state = self._states.get(group)
        if state is None:
            logits, cache = prefill_rows(self.model, [self.rows[group]], self.device)
            state = (cache, 0, logits[0])
        cache, fed, logits = state
        if fed > len(generated):
            raise ValueError("a group's released tokens cannot shrink")
        for token in generated[fed:]:
            out, cache = feed_token(self.model, cache, int(token))
            logits = out[0]
        self._states[group] = (cache, len(generated), logits)
        return logits[:self.vocab_size].float()

    def step(self, active: Sequence[int], generated: Sequence[Sequence[int]]) -> PriorStep:
        """Public logits and support of each active group after its released tokens."""
        for gone in set(self._states) - set(active):  # finished groups never come back
            del self._states[gone]
        public = torch.stack([self._logits(g, tokens) for g, tokens
                              in zip(active, generated, strict=True)]) if active else \
            torch.zeros((0, self.vocab_size), dtype=torch.float32, device=self.device)
        extra = [{*self.eos_ids, *(candidate_next(tokens, self.candidates[g])
                                   if self.candidate_support else ())}
                 for g, tokens in zip(active, generated, strict=True)]
        support = public_support(public, self.top_k, extra) if active else \
            torch.zeros((0, self.vocab_size), dtype=torch.bool, device=self.device)
        for row, (g, tokens) in enumerate(zip(active, generated, strict=True)):
            forced = candidate_forced(tokens, self.candidates[g]) \
                if self.trie_completion else None
            if forced is not None and forced < self.vocab_size:  # trie completion
                support[row] = False
                support[row, forced] = True
        return PriorStep(public=public, support=support, scale=self.scale, clip=self.clip)
