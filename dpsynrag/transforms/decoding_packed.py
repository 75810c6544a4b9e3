"""The packed, continuously batched private-prediction engine (the decoder families of
``decoding_stack``: Llama, Gemma 1-3, Mistral, Qwen2/2.5, Qwen3).

How the work is shared (all exact: every row sees exactly the tokens of its own prompt):

* **Shared prefix.** A public token prefix that every row starts with (the chat template and
  the instruction before the document, derived from the prompts alone by
  ``private_prediction.prompt_layout``) is run once; its KV is kept as one copy that every
  row's attention broadcasts over. The engine refuses a row that does not start with it.
* **Document KV reuse.** A row is (prefix, document tokens, generated tokens). The KV of a
  document's tokens (all but its last prompt token) does not depend on the generated suffix,
  so it is computed once and copied into the slot of each of the <= L groups' rows that use
  it. Identical documents are recognised by their token ids. The cache of document KV is
  bounded (bytes); an entry leaves when no waiting row needs it, or least-recently-used first
  when the bound is reached (a later use then recomputes it: same values).
* **Packing into lanes.** A row's slot width is a function of its own length: the next power
  of two (at least 64) of its document tokens plus T. Rows of one width share a lane, a slot
  buffer ``(layers, 2, rows, kvh, width, d)`` grown in parts of ``attn_rows = batch_rows //
  8`` slots. Each step feeds one token to every row (its document's last prompt token on its
  first step, then the group's latest token), computes the rows' logits, clips each row in
  float32 and adds the rows into their group's float64 vote with ``index_add_``.
* **Continuous batching.** When a group ends (EOS drawn or ``max_new_tokens`` reached), its
  rows leave; waiting groups (in input order) take their place at the next step while the
  rows computed per step (whole parts) stay within ``max(batch_rows, largest group)``
  rounded up to whole chunks of ``batch_rows``. A lane is compacted when that saves a part.

Batch invariance (why a row's output is a function of its own document): one-hot greedy
votes (Koga et al.) and clipped logits rest on each row being computed alone; on a GPU a
kernel chosen for a different shape rounds differently and can flip a near-tie argmax.
So every computation a row takes part in has a shape fixed by public values and that row:

* its document KV: a prefill of that document alone, unpadded, after the public prefix
  (never the longest common prefix of the rows);
* each decode step: attention on a part of exactly ``attn_rows`` slots at its lane's width
  (a function of its own length), over the whole width with a mask; every row-wise operation
  (norms, projections, MLP, logits, the clipping or ``row_transform``) on chunks of exactly
  ``batch_rows`` rows (holes and filler rows are computed and discarded).

What still depends on other documents is which slot, part and chunk a row occupies and which
rows share them: rows never mix (attention is per row, every other operation is row-wise),
and a deterministic kernel of a fixed shape computes each row by the same sequence of
operations whatever its index or its neighbours' values. That is the one assumption left; it
holds for the dense matmul, softmax and reduction kernels used here (no atomics, no split
chosen by content), on CPU and CUDA. The float64 ``index_add_`` of a group's own rows may add
them in a varying order on CUDA: that rounds the group's sum (~1e-16 relative), not any row.
Measured cost on the 2-core CPU (SmolLM2-135M, 16 groups x 12 documents of 20-250 words,
T = 16): 22-26 s before, 23-26 s after.

Memory is bounded for any number of groups: the rows in flight (the budget above plus one
part per lane), the document-KV cache bound, and the logits of one chunk.

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
from dpsynrag.transforms.decoding_stack import DecoderStack, PrefixKV
from dpsynrag.transforms.public_prior import PriorStep, PublicPrior

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


MIN_LANE_WIDTH = 64


def lane_width(row_length: int, max_new_tokens: int) -> int:
    """Slot width of a row of ``row_length`` tokens after the shared prefix.

    The slot holds the document tokens but the last, then every fed token (<= T of them);
    rounded up to a power of two, at least ``MIN_LANE_WIDTH``. A function of the row's own
    length and public T only: another document can never change it.
    """
    need = max(1, row_length - 1 + max_new_tokens)
    width = MIN_LANE_WIDTH
    while width < need:
        width *= 2
    return width


@dataclass
class _Group:
    index: int
    rows: list[tuple[int, ...]]
    tokens: list[int] = field(default_factory=list)
    slots: list[tuple[int, int]] = field(default_factory=list)  # (lane width, slot)
    done: bool = False


class _Lane:
    """Slots of one width, grown in chunks of ``chunk`` rows; decoded a chunk at a time."""

    def __init__(self, stack: DecoderStack, width: int, chunk: int) -> None:
        self.stack, self.width, self.chunk = stack, width, chunk
        device = stack.device
        self.slots = stack.new_slots(0, width)
        self.group = np.full(0, -1, dtype=np.int64)
        self.length = torch.zeros(0, dtype=torch.long, device=device)
        self.input = torch.zeros(0, dtype=torch.long, device=device)

    @property
    def capacity(self) -> int:
        return int(self.group.size)

    def take(self) -> int:
        """A free slot, growing the lane by one chunk when it is full."""
        free = np.flatnonzero(self.group < 0)
        if free.size:
            return int(free[0])
        grown = self.stack.new_slots(self.chunk, self.width)
        device = self.stack.device
        self.slots = torch.cat([self.slots, grown], dim=2)
        self.group = np.concatenate([self.group, np.full(self.chunk, -1, dtype=np.int64)])
        self.length = torch.cat([self.length, torch.zeros(self.chunk, dtype=torch.long,
                                                          device=device)])
        self.input = torch.cat([self.input, torch.zeros(self.chunk, dtype=torch.long,
                                                        device=device)])
        return self.capacity - self.chunk


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
    """Runs DP-SynRAG private prediction for many groups through packed slot lanes."""

    def __init__(
        self,
        stack: DecoderStack,
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
        prior: PublicPrior | None = None,
    ) -> None:
        if len(prefix_ids) != prefix_len:
            raise ValueError("prefix_ids must hold prefix_len tokens")
        if batch_rows < 1:
            raise ValueError("batch_rows must be positive")
        shared = tuple(prefix_ids)
        for rows in groups:
            for row in rows:
                if len(row) <= prefix_len or tuple(row[:prefix_len]) != shared:
                    raise ValueError("every row must start with the shared prefix and keep "
                                     "a token of its own")
        self.stack = stack
        self.groups = [_Group(i, [row[prefix_len:] for row in g]) for i, g in enumerate(groups)]
        self.prefix_ids = prefix_ids
        self.max_new_tokens = max_new_tokens
        self.clip = clip
        if prior is not None and row_transform is not None:
            raise ValueError("a public prior and a row transform exclude each other")
        self.row_transform = row_transform
        self.prior = prior
        self.sampler = sampler
        self.eos_ids = eos_ids
        self.vocab_size = vocab_size
        self.prefill_tokens = prefill_tokens  # kept for callers; prefill is per document now
        self.on_step = on_step
        self.batch_rows = batch_rows
        # slots per attention part: a public function of batch_rows
        self.attn_rows = max(1, batch_rows // 8)
        largest = max((len(g.rows) for g in self.groups), default=0)
        # rows in flight: a bound on memory and scheduling only; no row's shapes depend on it
        self.max_rows = max(batch_rows, largest)
        self.row_budget = -(-self.max_rows // batch_rows) * batch_rows
        widest = max((lane_width(len(r), max_new_tokens) for g in self.groups for r in g.rows),
                     default=MIN_LANE_WIDTH)
        uses: dict[tuple[int, ...], int] = {}
        for g in self.groups:
            for row in g.rows:
                uses[row] = uses.get(row, 0) + 1
        per_slot = (stack.n_layers * 2 * stack.n_kv * widest * stack.head_dim
                    * torch.finfo(stack.dtype).bits // 8)
        if doc_cache_bytes is None:
            doc_cache_bytes = 2 * per_slot * min(self.max_rows, max(1, len(uses)))
        self.cache = _DocCache(doc_cache_bytes, uses)
        self.lanes: dict[int, _Lane] = {}
        self.in_flight = 0
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.distinct_prefills = 0
        self.row_steps = 0
        # every (rows, width) an attention part ran with, and (rows, -1) for the logits chunks
        self.decode_shapes: set[tuple[int, int]] = set()

    # ------------------------------------------------------------------ public
    def run(self) -> list[list[int]]:
        """Generate every group's tokens; returns one token list per group (EOS excluded)."""
        if self.max_new_tokens == 0 or not self.groups:
            return [[] for _ in self.groups]
        start = time.perf_counter()
        self.prefix: PrefixKV | None = self.stack.prefix(self.prefix_ids)
        self.prefill_seconds += time.perf_counter() - start
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
                for width, slot in group.slots:
                    self.lanes[width].input[slot] = int(token)
                still.append(gi)
            finished += len(active) - len(still)
            active = still
            self.decode_seconds += time.perf_counter() - tick
            step += 1
            if self.on_step is not None:
                self.on_step(StepReport(
                    step=step, active_groups=len(active), active_rows=self.in_flight,
                    finished_groups=finished, prefill_seconds=self.prefill_seconds,
                    decode_seconds=self.decode_seconds,
                    distinct_prefills=self.distinct_prefills, row_steps=self.row_steps))
        return [g.tokens for g in self.groups]

    # ------------------------------------------------------------------ scheduling
    def _lane(self, row: tuple[int, ...]) -> _Lane:
        width = lane_width(len(row), self.max_new_tokens)
        lane = self.lanes.get(width)
        if lane is None:
            lane = self.lanes[width] = _Lane(self.stack, width, self.attn_rows)
        return lane

    def _fits(self, group: _Group) -> bool:
        """Whether ``group`` may join now: always when nothing is in flight, else when the
        rows computed per step (whole attention parts) stay within the row budget."""
        if self.in_flight == 0:
            return True
        occupied = {w: int((lane.group >= 0).sum()) for w, lane in self.lanes.items()}
        for row in group.rows:
            width = lane_width(len(row), self.max_new_tokens)
            occupied[width] = occupied.get(width, 0) + 1
        parts = sum(-(-n // self.attn_rows) for n in occupied.values())
        return parts * self.attn_rows <= self.row_budget

    def _admit(self, waiting: list[int], active: list[int]) -> None:
        """Move waiting groups (input order) into slots while the rows in flight fit."""
        admitted: list[_Group] = []
        while waiting and self._fits(self.groups[waiting[-1]]):
            group = self.groups[waiting.pop()]
            group.slots = []
            for row in group.rows:
                lane = self._lane(row)
                slot = lane.take()
                lane.group[slot] = group.index  # reserved now, filled by _fill
                group.slots.append((lane.width, slot))
            self.in_flight += len(group.rows)
            admitted.append(group)
            active.append(group.index)
        if not admitted:
            return
        start = time.perf_counter()
        self._fill(admitted)
        self.prefill_seconds += time.perf_counter() - start

    def _fill(self, admitted: list[_Group]) -> None:
        """Copy each admitted row's document KV into its slot, prefilling missing documents."""
        for group in admitted:
            for row, (width, slot) in zip(group.rows, group.slots, strict=True):
                lane = self.lanes[width]
                body = len(row) - 1
                if body:
                    kv = self.cache.get(row)
                    if kv is None:
                        kv = self._prefill(row)
                    lane.slots[:, :, slot, :, :body] = kv
                self.cache.used(row)
                lane.length[slot] = body
                lane.input[slot] = row[-1]

    def _prefill(self, row: tuple[int, ...]) -> torch.Tensor:
        """KV of one row's document tokens (all but the last), computed alone and unpadded.

        One document per call: the shape (1, its own length) is a function of the row only.
        """
        kvs, _ = self.stack.prefill(self.prefix, [list(row[:-1])])
        self.cache.put(row, kvs[0])
        self.distinct_prefills += 1
        return kvs[0]

    def _finish(self, group: _Group) -> None:
        group.done = True
        for width, slot in group.slots:
            lane = self.lanes[width]
            lane.group[slot] = -1
            lane.length[slot] = 0  # a hole writes at index 0 until it is refilled
        self.in_flight -= len(group.slots)
        group.slots = []

    def _compact(self, lane: _Lane) -> int:
        """Move occupied slots down into holes when that saves a chunk; returns the range."""
        occupied = np.flatnonzero(lane.group >= 0)
        if occupied.size == 0:
            return 0
        chunk = lane.chunk
        top = int(occupied[-1]) + 1
        if -(-top // chunk) <= -(-occupied.size // chunk):
            return top
        keep = occupied.size
        src = [int(s) for s in occupied if s >= keep]
        dst = [int(s) for s in np.flatnonzero(lane.group[:keep] < 0)]
        src_t = torch.tensor(src, device=self.stack.device)
        dst_t = torch.tensor(dst, device=self.stack.device)
        lane.slots[:, :, dst_t] = lane.slots[:, :, src_t]
        lane.length[dst_t] = lane.length[src_t]
        lane.input[dst_t] = lane.input[src_t]
        moved = dict(zip(src, dst, strict=True))
        for s, t in moved.items():
            lane.group[t] = lane.group[s]
            lane.group[s] = -1
        for gi in {int(lane.group[t]) for t in dst}:
            group = self.groups[gi]
            group.slots = [(w, moved.get(s, s) if w == lane.width else s)
                           for w, s in group.slots]
        return keep

    # ------------------------------------------------------------------ one step
    def _step(self, active: list[int]) -> np.ndarray:
        """Sum the clipped rows per active group and draw one token per group."""
        device = self.stack.device
        votes = torch.zeros((len(active), self.vocab_size), dtype=torch.float64, device=device)
        parts: list[tuple[_Lane, int]] = []
        for width in sorted(self.lanes):
            lane = self.lanes[width]
            top = self._compact(lane)
            parts.extend((lane, start) for start in range(0, top, lane.chunk)
                         if (lane.group[start:start + lane.chunk] >= 0).any())
        prior = None if self.prior is None else self.prior.step(
            active, [self.groups[gi].tokens for gi in active])
        if parts:
            self._decode(parts, {gi: i for i, gi in enumerate(active)}, votes, prior)
        if prior is not None:  # the public term, -inf off the public support
            votes = prior.votes(votes)
        tokens = np.asarray(self.sampler(votes, list(active)), dtype=np.int64)
        if tokens.shape != (len(active),):
            raise ValueError("the sampler must return one token id per active group")
        if ((tokens < 0) | (tokens >= self.vocab_size)).any():
            raise ValueError("the sampler returned a token id outside the vocabulary")
        return tokens

    def _decode(self, parts: list[tuple[_Lane, int]], position: dict[int, int],
                votes: torch.Tensor, prior: PriorStep | None = None) -> None:
        """One decode step over fixed-shape parts and chunks; adds each row to its vote.

        Every attention part is ``attn_rows`` slots of one lane at the lane's width, every
        row-wise operation (projections, MLP, logits, clipping or ``row_transform``) runs on
        chunks of exactly ``batch_rows`` rows (filler rows complete the last one).
        """
        device = self.stack.device
        views = [(lane.slots[:, :, start:start + lane.chunk],
                  lane.length[start:start + lane.chunk]) for lane, start in parts]
        ids = [lane.input[start:start + lane.chunk] for lane, start in parts]
        real = sum(int(i.shape[0]) for i in ids)
        total = -(-real // self.batch_rows) * self.batch_rows
        ids.append(torch.zeros(total - real, dtype=torch.long, device=device))
        hidden = self.stack.decode(self.prefix, views, torch.cat(ids), self.batch_rows)
        owners = np.concatenate([lane.group[start:start + lane.chunk] for lane, start in parts])
        for lane, start in parts:
            self.decode_shapes.add((lane.chunk, lane.width))
            part = slice(start, start + lane.chunk)
            busy = torch.as_tensor(lane.group[part] >= 0, device=device)
            # occupied rows advance; holes restart at index 0 (overwritten on admission)
            lane.length[part] = torch.where(busy, lane.length[part] + 1, 0)
        with torch.inference_mode():
            for c in range(0, total, self.batch_rows):
                mine = owners[c:c + self.batch_rows]
                occupied = np.flatnonzero(mine >= 0)
                if occupied.size == 0:
                    continue
                logits = self.stack.logits(hidden[c:c + self.batch_rows])  # a fixed shape
                self.decode_shapes.add((int(logits.shape[0]), -1))
                if prior is not None:  # public-difference rows; filler rows use group 0's
                    at = torch.zeros(int(logits.shape[0]), dtype=torch.long, device=device)
                    at[:mine.size] = torch.tensor([position[int(g)] if g >= 0 else 0
                                                   for g in mine], dtype=torch.long)
                    out = prior.rows(logits, at)
                elif self.row_transform is None:
                    out = clip_logits(logits, self.clip)
                else:
                    out = self.row_transform(logits)
                owner = torch.tensor([position[int(mine[r])] for r in occupied], device=device)
                rows = torch.as_tensor(occupied, device=device)
                votes.index_add_(0, owner, out[rows].to(torch.float64))
                self.row_steps += int(occupied.size)
