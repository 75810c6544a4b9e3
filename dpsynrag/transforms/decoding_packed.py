"""The packed, continuously batched private-prediction engine (Llama-family models).

How the work is shared (all exact: every row sees exactly the tokens of its own prompt):

* **Shared prefix.** The longest common token prefix of all rows (the chat template and the
  instruction before the document) is run once; its KV is kept as one copy that every row's
  attention broadcasts over.
* **Document KV reuse.** A row is (prefix, document tokens, generated tokens). The KV of a
  document's tokens (all but its last prompt token) does not depend on the generated suffix,
  so it is computed once and copied into the slot of each of the ≤ L groups' rows that use
  it. Identical documents are recognised by their token ids. The cache of document KV is
  bounded (bytes); an entry leaves when no waiting row needs it, or least-recently-used first
  when the bound is reached (a later use then recomputes it: same values).
* **Packing.** Rows of many groups share one slot buffer ``(layers, 2, rows, kvh, width, d)``.
  Each step feeds one token to every row (its document's last prompt token on its first step,
  then the group's latest token), computes the rows' logits, clips each row in float32 and
  adds the rows into their group's float64 vote with one ``index_add_`` (a segment sum).
* **Continuous batching.** When a group ends (EOS drawn or ``max_new_tokens`` reached), its
  rows leave; waiting groups (in input order) take the free slots at the next step. Slots are
  compacted when many are free, so a step computes only occupied rows (plus a few holes).

Memory is bounded for any number of groups: one slot buffer of ``max(batch_rows, largest
group)`` rows, the document-KV cache bound, and per-step logits of the rows in flight.

Privacy: the engine computes z_n = sum_{d in group} clip_c(logits_d) exactly as DP-SynRAG
stage (d) defines it, for every group independently (a row contributes only to its own
group's sum); the sampler is the only randomness. Scheduling (which groups share a step) and
timings depend on group sizes, so the ``on_step`` report must never be logged or released.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from dpsynrag.accounting.clipping import clip_logits
from dpsynrag.transforms.decoding_llama import LlamaStack, PrefixKV

Sampler = Callable[[torch.Tensor, list[int]], np.ndarray]
RowTransform = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class StepReport:
    """Progress and timings after one decode step.

    Contains counts that depend on private group sizes: for in-process progress and
    benchmarks only; never log or release it.
    """

    step: int
    active_groups: int
    active_rows: int
    finished_groups: int
    prefill_seconds: float
    decode_seconds: float
    distinct_prefills: int
    row_steps: int


@dataclass
class _Group:
    index: int
    rows: list[tuple[int, ...]]
    tokens: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    done: bool = False


class _DocCache:
    """Document KV tensors keyed by the document's token ids, bounded in bytes (LRU)."""

    def __init__(self, max_bytes: int, uses: dict[tuple[int, ...], int]) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()
        self.bytes = 0
        self.remaining = dict(uses)

    def get(self, key: tuple[int, ...]) -> torch.Tensor | None:
        kv = self.entries.get(key)
        if kv is not None:
            self.entries.move_to_end(key)
        return kv

    def put(self, key: tuple[int, ...], kv: torch.Tensor) -> None:
        if key in self.entries:
            return
        self.entries[key] = kv
        self.bytes += kv.numel() * kv.element_size()
        while self.bytes > self.max_bytes and len(self.entries) > 1:
            _, old = self.entries.popitem(last=False)
            self.bytes -= old.numel() * old.element_size()

    def used(self, key: tuple[int, ...]) -> None:
        """One waiting row took this document; drop it when no waiting row needs it."""
        self.remaining[key] -= 1
        if self.remaining[key] == 0 and key in self.entries:
            old = self.entries.pop(key)
            self.bytes -= old.numel() * old.element_size()


class PackedEngine:
    """Runs DP-SynRAG private prediction for many groups through one packed slot buffer."""

    def __init__(
        self,
        stack: LlamaStack,
        groups: Sequence[Sequence[tuple[int, ...]]],
        *,
        prefix_len: int,
        prefix_ids: list[int],
        max_new_tokens: int,
        clip: float,
        sampler: Sampler,
        eos_ids: frozenset[int],
        batch_rows: int,
        vocab_size: int,
        doc_cache_bytes: int | None = None,
        prefill_tokens: int = 4096,
        on_step: Callable[[StepReport], None] | None = None,
        row_transform: RowTransform | None = None,
    ) -> None:
        self.stack = stack
        self.groups = [_Group(i, [row[prefix_len:] for row in g]) for i, g in enumerate(groups)]
        self.prefix_ids = prefix_ids
        self.max_new_tokens = max_new_tokens
        self.clip = clip
        self.row_transform = row_transform
        self.sampler = sampler
        self.eos_ids = eos_ids
        self.vocab_size = vocab_size
        self.prefill_tokens = prefill_tokens
        self.on_step = on_step
        largest = max((len(g.rows) for g in self.groups), default=0)
        total_rows = sum(len(g.rows) for g in self.groups)
        self.capacity = max(1, min(max(batch_rows, largest), total_rows))
        longest = max((len(r) for g in self.groups for r in g.rows), default=1)
        # a slot holds the document tokens but the last, then every fed token (<= T of them)
        self.width = max(1, longest - 1 + max_new_tokens)
        uses: dict[tuple[int, ...], int] = {}
        for g in self.groups:
            for row in g.rows:
                uses[row] = uses.get(row, 0) + 1
        per_slot = (stack.n_layers * 2 * stack.n_kv * self.width * stack.head_dim
                    * torch.finfo(stack.dtype).bits // 8)
        if doc_cache_bytes is None:
            doc_cache_bytes = 2 * per_slot * self.capacity
        self.cache = _DocCache(doc_cache_bytes, uses)
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.distinct_prefills = 0
        self.row_steps = 0

    # ------------------------------------------------------------------ public
    def run(self) -> list[list[int]]:
        """Generate every group's tokens; returns one token list per group (EOS excluded)."""
        if self.max_new_tokens == 0 or not self.groups:
            return [[] for _ in self.groups]
        start = time.perf_counter()
        self.prefix: PrefixKV | None = self.stack.prefix(self.prefix_ids)
        device = self.stack.device
        self.slots = self.stack.new_slots(self.capacity, self.width)
        self.prefill_seconds += time.perf_counter() - start
        self.slot_group = np.full(self.capacity, -1, dtype=np.int64)
        self.slot_len = torch.zeros(self.capacity, dtype=torch.long, device=device)
        self.slot_input = torch.zeros(self.capacity, dtype=torch.long, device=device)
        waiting = list(range(len(self.groups)))[::-1]  # pop() takes the next in input order
        active: list[int] = []
        finished = 0
        step = 0
        while waiting or active:
            self._admit(waiting, active)
            tick = time.perf_counter()
            tokens = self._step(active)
            still: list[int] = []
            for gi, token in zip(active, tokens, strict=True):
                group = self.groups[gi]
                if int(token) in self.eos_ids:
                    self._finish(group)
                    continue
                group.tokens.append(int(token))
                if len(group.tokens) >= self.max_new_tokens:
                    self._finish(group)
                    continue
                if group.slots:
                    self.slot_input[group.slots] = int(token)
                still.append(gi)
            finished += len(active) - len(still)
            active = still
            self.decode_seconds += time.perf_counter() - tick
            step += 1
            if self.on_step is not None:
                self.on_step(StepReport(
                    step=step, active_groups=len(active), active_rows=int(
                        (self.slot_group >= 0).sum()), finished_groups=finished,
                    prefill_seconds=self.prefill_seconds, decode_seconds=self.decode_seconds,
                    distinct_prefills=self.distinct_prefills, row_steps=self.row_steps))
        return [g.tokens for g in self.groups]

    # ------------------------------------------------------------------ scheduling
    def _free_slots(self) -> list[int]:
        return [int(s) for s in np.flatnonzero(self.slot_group < 0)]

    def _admit(self, waiting: list[int], active: list[int]) -> None:
        """Move waiting groups (input order) into free slots while they fit."""
        free = self._free_slots()
        admitted: list[_Group] = []
        while waiting and len(self.groups[waiting[-1]].rows) <= len(free):
            group = self.groups[waiting.pop()]
            group.slots = free[: len(group.rows)]
            free = free[len(group.rows):]
            admitted.append(group)
            active.append(group.index)
        if not admitted:
            return
        start = time.perf_counter()
        self._fill(admitted)
        self.prefill_seconds += time.perf_counter() - start

    def _fill(self, admitted: list[_Group]) -> None:
        """Copy each admitted row's document KV into its slot, prefilling missing documents."""
        missing: dict[tuple[int, ...], None] = {}
        for group in admitted:
            for row in group.rows:
                if len(row) > 1 and self.cache.get(row) is None:
                    missing[row] = None
        fresh = self._prefill(list(missing))
        for group in admitted:
            for row, slot in zip(group.rows, group.slots, strict=True):
                body = len(row) - 1
                if body:
                    kv = fresh.get(row)
                    if kv is None:
                        kv = self.cache.get(row)
                    if kv is None:  # evicted after prefill by the byte bound: recompute
                        kv = self._prefill([row])[row]
                    self.slots[:, :, slot, :, :body] = kv
                self.cache.used(row)
                self.slot_group[slot] = group.index
                self.slot_len[slot] = body
                self.slot_input[slot] = row[-1]

    def _prefill(self, rows: list[tuple[int, ...]]) -> dict[tuple[int, ...], torch.Tensor]:
        """KV of each row's document tokens (all but the last), batched by length."""
        out: dict[tuple[int, ...], torch.Tensor] = {}
        order = sorted(rows, key=len)
        chunk: list[tuple[int, ...]] = []
        for row in [*order, None]:
            if row is not None and (not chunk or len(row) * (len(chunk) + 1)
                                    <= self.prefill_tokens):
                chunk.append(row)
                continue
            if chunk:
                kvs, _ = self.stack.prefill(self.prefix, [list(r[:-1]) for r in chunk])
                for r, kv in zip(chunk, kvs, strict=True):
                    out[r] = kv
                    self.cache.put(r, kv)
                self.distinct_prefills += len(chunk)
            chunk = [row] if row is not None else []
        return out

    def _finish(self, group: _Group) -> None:
        group.done = True
        if group.slots:
            self.slot_group[group.slots] = -1
            self.slot_len[group.slots] = 0  # a hole writes at index 0 until it is refilled
        group.slots = []

    def _compact(self) -> int:
        """Move occupied slots down into holes when the holes are many; returns the range."""
        occupied = np.flatnonzero(self.slot_group >= 0)
        if occupied.size == 0:
            return 0
        top = int(occupied[-1]) + 1
        holes = top - occupied.size
        if holes <= max(4, top // 8):
            return top
        keep = occupied.size
        src = [int(s) for s in occupied if s >= keep]
        dst = [int(s) for s in np.flatnonzero(self.slot_group[:keep] < 0)]
        src_t = torch.tensor(src, device=self.stack.device)
        dst_t = torch.tensor(dst, device=self.stack.device)
        self.slots[:, :, dst_t] = self.slots[:, :, src_t]
        self.slot_len[dst_t] = self.slot_len[src_t]
        self.slot_input[dst_t] = self.slot_input[src_t]
        moved = dict(zip(src, dst, strict=True))
        for s, t in moved.items():
            self.slot_group[t] = self.slot_group[s]
            self.slot_group[s] = -1
        for gi in {int(self.slot_group[t]) for t in dst}:
            group = self.groups[gi]
            group.slots = [moved.get(s, s) for s in group.slots]
        return keep

    # ------------------------------------------------------------------ one step
    def _step(self, active: list[int]) -> np.ndarray:
        """Sum the clipped rows per active group and draw one token per group."""
        device = self.stack.device
        votes = torch.zeros((len(active), self.vocab_size), dtype=torch.float64, device=device)
        top = self._compact()
        if top:
            hidden = self.stack.decode(
                self.prefix, self.slots, self.slot_input[:top], self.slot_len[:top])
            occupied = np.flatnonzero(self.slot_group[:top] >= 0)
            busy = torch.as_tensor(self.slot_group[:top] >= 0, device=device)
            # occupied rows advance; holes restart at index 0 (overwritten on admission)
            self.slot_len[:top] = torch.where(busy, self.slot_len[:top] + 1, 0)
            position = {gi: i for i, gi in enumerate(active)}
            owner = torch.tensor([position[int(self.slot_group[s])] for s in occupied],
                                 device=device)
            rows = torch.as_tensor(occupied, device=device)
            with torch.inference_mode():
                logits = self.stack.logits(hidden[rows])
                clipped = clip_logits(logits, self.clip) if self.row_transform is None \
                    else self.row_transform(logits)
                votes.index_add_(0, owner, clipped.to(torch.float64))
            self.row_steps += int(occupied.size)
        tokens = np.asarray(self.sampler(votes, list(active)), dtype=np.int64)
        if tokens.shape != (len(active),):
            raise ValueError("the sampler must return one token id per active group")
        if ((tokens < 0) | (tokens >= self.vocab_size)).any():
            raise ValueError("the sampler returned a token id outside the vocabulary")
        return tokens
