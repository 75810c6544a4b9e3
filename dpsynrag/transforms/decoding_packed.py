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
* **Packed prefill** (``packed_prefill``). The documents an admission needs and the cache
  lacks are prefilled together: their tokens end to end in a stream of whole chunks of
  ``prefill_chunk`` tokens (public), every row-wise layer on one chunk at a time, attention
  per document at its own length; at most ``prefill_tokens`` stream tokens per prefill
  (public; a longer document goes alone). The room left in a prefill's last chunk (filler
  otherwise) takes documents of the next waiting groups when the cache can keep them
  without evicting anything. On CPU a document's KV equals that of a prefill of it alone bit
  for bit (documents of at least 4 tokens; tested for every family).
* **Packing into lanes.** A row's slot width is a function of its own length: the next power
  of two (at least 64) of its document tokens plus T. Rows of one width share a lane, a slot
  buffer ``(layers, 2, slots, kvh, width, d)`` in parts of ``attn_rows = batch_rows // 8``
  slots; a full lane grows to the next bucket size of parts (below). The device holds only
  the slot buffers; each slot's group, cached length and next input token are kept on the
  host, which knows them.
* **The decode step** (``packed_step``). For each lane holding a row, the first
  ``bucket(parts)`` parts (``parts``: up to its highest occupied slot; extra parts are hole
  slots), then filler rows up to whole chunks of ``batch_rows``. Bucket sizes are 1, 2, 3, 4,
  6, 8, 12, ... (powers of two and three times powers of two), and the votes buffer has
  ``bucket(active groups) + 1`` rows (the last a dummy that takes hole and filler rows), so a
  step's shapes, its **key** (``step_key()``; ``step_keys``: the distinct keys of the run),
  repeat. The host builds the step's one index tensor (each row's input token, cached length
  and votes row), pinned on CUDA and copied with one non-blocking transfer; the device feeds
  one token to every row, computes the logits of each chunk that holds a lane row, clips each
  row in float32 and adds the chunk's rows into the float64 votes with one ``index_add_``. The
  checks on the logits (finite; non-empty public supports) are a device flag pair read once,
  where the votes go to the sampler; nothing else in a step waits for the device (admission
  steps also prefill documents, and a compaction sends its slot indices by one pinned copy).
* **CUDA graphs** (``step_graphs``). On CUDA, by default (off with ``graphs=False`` or
  ``DPSYNRAG_STEP_GRAPHS=0``), the step of a key is captured into a CUDA graph the second time
  the key occurs and replayed after that; a lane's growth gives it a new slot buffer, so the
  graphs of that lane are captured again; a capture that raises turns graphs off for the run
  (one warning line). The same step function runs eagerly on CPU and whenever graphs are off.
  Measured on an H200 (Llama-3.1-8B shape, bf16): votes bit-identical and tokens equal with
  graphs on and off, decode 2.7x faster with them; the cache, invalidation, fallback and
  default are tested on CPU with a stand-in capturer.
* **Continuous batching.** When a group ends (EOS drawn or ``max_new_tokens`` reached), its
  rows leave; waiting groups (in input order) take their place at the next step while the
  rows computed per step (whole parts, bucketed per lane) stay within ``batch_rows`` and, when
  ``slot_bytes`` is given (CUDA, ``engine_memory``), every lane's slot buffer after the lanes
  grow for the admitted groups (once per lane, plus that growth's copy) stays within it, lanes
  left empty being freed to make room (a group joins an empty engine whatever its parts and
  slots). A lane is compacted when that saves a part.
* **Groups larger than ``shard_rows``** (public, default ``batch_rows``). Such a group waits
  until no row is in flight, then runs alone in **shards** of at most ``shard_rows`` of its
  rows (grouped by lane width), one shard in the slots at a time. At each step every shard in
  turn gets its vote step (the step above, ``bucket(1) + 1`` votes rows), its float64 votes
  row is added to the step's total, and the sampler is called **once** with the total, as for
  any group. Shards go back and forth (0..K-1, then K-1..0), so the shard that voted last
  stays in the slots for the next step. A shard that leaves the slots is kept in the document
  cache (its rows' KV so far, ``("shard", group, k)``) when the cache's byte bound can hold
  it, evicting older entries; when it comes back, its KV is copied into slots, or, if it was
  evicted, its documents' KV is copied (cached or prefilled again) and the tokens fed since
  are fed again by KV-only steps (``StepKey.votes == 0``: decode, no logits) over the
  shard's rows. A row then gets every KV entry from the computation of the same shapes
  (its document's packed prefill; one decode step per token, a part of ``attn_rows`` slots
  at its width, a chunk of ``batch_rows`` rows) with the same inputs as when it was first
  fed: the same values, whether its group was sharded, swapped or recomputed. Only the
  order of the float64 additions of a group's rows changes (at most ~n^2 c 2^-53 per
  coordinate for n rows; 0 measured in ``tests/test_engine_chunked_groups.py``, where the
  votes also equal the previous engine's bit for bit, checked once). Cost: a shard evicted
  from the cache is recomputed with up to n KV-only steps at step n (at worst ~T/2 times the
  decode work of a group in one piece), plus its documents' prefills when they were evicted.

**Resume** (``released``). A group with tokens released before (a resumed build) starts after
them: they are appended to each of its rows, whose KV is then the packed prefill of its
document and those tokens (public chunk shapes, attention at the row's own length), and its
first step
feeds the last of them. Its votes for the following steps equal the uninterrupted run's up to
the rounding of prefill against decode kernels; no step votes or samples a released token. A
group whose released tokens end (EOS, or ``max_new_tokens`` of them) never enters the slots.

Batch invariance (why a row's output is a function of its own document): one-hot greedy
votes (Koga et al.) and clipped logits rest on each row being computed alone; on a GPU a
kernel chosen for a different shape rounds differently and can flip a near-tie argmax.
So every computation a row takes part in has a shape fixed by public values and that row:

* its document KV: a packed prefill (``packed_prefill``): every row-wise layer on a chunk of
  exactly ``prefill_chunk`` stream tokens, attention of the document alone at its own length
  after the public prefix (never the longest common prefix of the rows);
* each decode step: attention on a part of exactly ``attn_rows`` slots at its lane's width
  (a function of its own length), over the whole width with a mask; every row-wise operation
  (norms, projections, MLP, logits, the clipping or ``row_transform``) on chunks of exactly
  ``batch_rows`` rows (holes, filler parts and filler rows are computed and discarded).

What still depends on other documents is which slot, part and chunk a row occupies, which rows
share them, how many parts and chunks a step has, which prefill computes a document's KV and
where in its token stream the document sits, and whether the step runs eagerly or replays
a graph: rows never mix (attention is per row, every other operation is row-wise), and a
deterministic kernel of a fixed shape computes each row by the same sequence of operations
whatever its index or its neighbours' values. That is the one assumption left; it holds for
the dense matmul, softmax and reduction kernels used here (no atomics, no split chosen by
content), on CPU and CUDA, and it assumes a graph replay launches the kernels eager execution
launches for the same shapes (unverified on a GPU). The float64 ``index_add_`` of a group's
own rows may add them in a varying order on CUDA: that rounds the group's sum (~1e-16
relative), not any row. On CPU the bucketed votes equal the unbucketed ones bit for bit, with
or without (stand-in) graphs (tested), and those of the engine before this step on the tests'
workloads (checked once against the previous commit). Measured cost on the 2-core CPU
(SmolLM2-135M, 16 groups x 12 documents of 20-250 words, T = 16), before the step of
``packed_step``: 22-26 s before batch invariance, 23-26 s after; the tiny benchmark of issue
17 before and after this step is in ``benchmarks/README.md``.

Memory is bounded by public values for any number and size of groups: at most
``batch_rows`` rows in flight (``max_rows``; ``peak_rows`` is the most seen), lanes of at
most 1.5x their rows' parts (a lane keeps the slots it grew to; with ``slot_bytes``, all lanes'
slots within it but for one group alone, and empty lanes freed), the document-KV cache bound
(documents and swapped-out shards together; one document's KV may exceed it, a shard never
does), one packed prefill (a stream of at most ``prefill_tokens`` tokens, or one longer
document, and its documents' KV), the logits of one chunk, and on CUDA at most
``step_graphs.MAX_GRAPHS`` graphs' static buffers. What still depends on the documents is
the slot width (each row's length, up to the longest document; with ``slot_bytes`` it costs
rows in flight instead) and, on CPU only, the default cache bound (two slots of the widest row
per row of ``batch_rows``).

Privacy: the engine computes z_n = sum_{d in group} clip_c(logits_d) exactly as DP-SynRAG
stage (d) defines it (or, with a ``PublicPrior``, each document's public-difference row),
for every group independently (a row contributes only to its own group's sum), once per step
and group, however many shards its rows took; the sampler is the only randomness, and
nothing random happens in the engine. Sharding a group changes neither any row's clipped
vector nor which rows its group sums (``docs/mechanisms.md`` section 5, "Large groups"), so
the per-row sensitivity argument is untouched; memory, hence whether a run can finish, no
longer depends on a group's size. Scheduling (which groups share a step, which run in
shards), the step keys, graph counts, replays and timings depend on group sizes, so the
``on_step`` report must never be logged or released.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from dpsynrag.transforms.decoding_stack import DecoderStack, PrefixKV
from dpsynrag.transforms.engine_memory import prefill_sizes
from dpsynrag.transforms.packed_prefill import packed_prefill, stream_tokens
from dpsynrag.transforms.packed_step import (
    LaneRows,
    RowTransform,
    StepIndex,
    StepKey,
    StepVotes,
    bucket,
    step_index,
)
from dpsynrag.transforms.public_prior import PriorStep, PublicPrior
from dpsynrag.transforms.step_graphs import Capturer, StepGraphs

Sampler = Callable[[torch.Tensor, list[int]], np.ndarray]
Bucket = Callable[[int], int]

__all__ = ["MIN_LANE_WIDTH", "PackedEngine", "RowTransform", "Sampler", "StepReport",
           "lane_width"]


@dataclass
class StepReport:
    """Progress and timings after one decode step.

    Contains counts that depend on private group sizes: for in-process progress and
    benchmarks only; never log or release it. ``graphs``: whether the CUDA-graph path is
    still on; ``step_keys``: distinct step keys so far; ``graph_captures`` /
    ``graph_replays``: captures and replays so far; ``replayed_row_steps``: row-steps
    recomputed to bring a shard of a large group back (KV only, no vote); ``peak_rows`` /
    ``peak_slot_bytes``: the most rows in flight and slot-buffer bytes so far;
    ``stopped_by_rows`` / ``stopped_by_slots``: admissions a waiting group could not make
    because of the row budget / the slot budget (what bounded the rows in flight).
    """

    step: int
    active_groups: int
    active_rows: int
    finished_groups: int
    prefill_seconds: float
    decode_seconds: float
    distinct_prefills: int
    row_steps: int
    graphs: bool = False
    step_keys: int = 0
    graph_captures: int = 0
    graph_replays: int = 0
    replayed_row_steps: int = 0
    peak_rows: int = 0
    peak_slot_bytes: int = 0
    stopped_by_rows: int = 0
    stopped_by_slots: int = 0


MIN_LANE_WIDTH = 64
_BUFFERS = itertools.count()  # slot buffers made so far (their identities for graph bindings)
LOOKAHEAD_ROWS = 4  # rows of waiting groups scanned per admission, per row of batch_rows


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


def _device_index(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """A long index tensor on ``device`` by one non-blocking copy from pinned memory on
    CUDA (no host wait); a plain tensor elsewhere."""
    host = torch.tensor(list(values), dtype=torch.long)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


@dataclass
class _Group:
    index: int
    rows: list[tuple[int, ...]]
    tokens: list[int] = field(default_factory=list)
    slots: list[tuple[int, int]] = field(default_factory=list)  # (lane width, slot)
    done: bool = False
    # a group larger than shard_rows: its shards (row indices) and the one in the slots
    shards: list[list[int]] | None = None
    resident: int | None = None
    # tokens released before this run (a resumed build): the first ``start`` of ``tokens``,
    # already at the end of every row (prefilled with its document, never voted on here)
    start: int = 0


def grown_capacity(capacity: int, rows: int, chunk: int, sizes: Bucket) -> int:
    """A lane's capacity once it holds ``rows`` rows: bucket sizes of parts of ``chunk``
    slots, in the steps a full lane grows by, from ``capacity``."""
    while capacity < rows:
        capacity = sizes(capacity // chunk + 1) * chunk
    return capacity


class _Lane:
    """Slots of one width in parts of ``chunk`` slots; ``bucket`` sizes its growth.

    The device holds the slot buffer only; the slots' groups, cached lengths and next input
    tokens live on the host (the engine knows them) and reach the device in each step's index.
    """

    def __init__(self, stack: DecoderStack, width: int, chunk: int, sizes: Bucket) -> None:
        self.stack, self.width, self.chunk, self.sizes = stack, width, chunk, sizes
        self.slots = stack.new_slots(0, width)
        self.group = np.full(0, -1, dtype=np.int64)
        self.length = np.zeros(0, dtype=np.int64)
        self.input = np.zeros(0, dtype=np.int64)
        # a buffer's identity (unique across lanes and runs): a graph captured on another
        # buffer of this lane (before a growth, or of a dropped lane of this width) is stale
        self.generation = next(_BUFFERS)

    @property
    def capacity(self) -> int:
        return int(self.group.size)

    @property
    def occupied(self) -> int:
        return int((self.group >= 0).sum())

    def grown(self, more: int) -> int:
        """The capacity after ``more`` rows take slots (``grown_capacity``)."""
        return grown_capacity(self.capacity, self.occupied + more, self.chunk, self.sizes)

    def reserve(self, more: int) -> None:
        """Grow once (one new buffer, one copy) to the capacity ``more`` rows need."""
        extra = self.grown(more) - self.capacity
        if extra <= 0:
            return
        self.slots = torch.cat([self.slots, self.stack.new_slots(extra, self.width)], dim=2)
        self.group = np.concatenate([self.group, np.full(extra, -1, dtype=np.int64)])
        self.length = np.concatenate([self.length, np.zeros(extra, dtype=np.int64)])
        self.input = np.concatenate([self.input, np.zeros(extra, dtype=np.int64)])
        self.generation = next(_BUFFERS)

    def take(self) -> int:
        """A free slot; a full lane grows to the next bucket size of parts (a new buffer)."""
        free = np.flatnonzero(self.group < 0)
        if free.size:
            return int(free[0])
        old = self.capacity
        self.reserve(1)
        return old

    def place(self, slot: int, group: int, kv: torch.Tensor | None, length: int,
              token: int) -> None:
        """Put a row into ``slot``: its first ``length`` KV entries (``kv``; none when
        ``length`` is 0), the rest of the slot zeroed, and the token it feeds next.

        Zeroing changes no finite value (masked positions weigh exactly 0) but keeps a
        previous occupant's non-finite KV out of this row's attention (0 * inf is NaN).
        """
        if length:
            assert kv is not None
            self.slots[:, :, slot, :, :length] = kv[:, :, :, :length]
        self.slots[:, :, slot, :, length:] = 0
        self.group[slot] = group
        self.length[slot] = length
        self.input[slot] = token

    def free(self, slot: int) -> None:
        self.group[slot] = -1
        self.length[slot] = 0  # a hole writes at index 0 until it is refilled


@dataclass
class _Entry:
    """A cache entry: a document's KV, or a swapped-out shard's rows (``fed`` tokens each
    after their documents)."""

    kv: tuple[torch.Tensor, ...]
    nbytes: int
    fed: int = 0


def _nbytes(kv: torch.Tensor) -> int:
    return kv.numel() * kv.element_size()


class _DocCache:
    """Document KV tensors keyed by the document's token ids, and the KV of swapped-out
    shards of groups larger than ``shard_rows`` keyed by ``("shard", group, shard)``; one
    bound in bytes, least recently used out first."""

    def __init__(self, max_bytes: int, uses: dict[tuple[int, ...], int]) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self.bytes = 0
        self.peak_bytes = 0  # after each insertion's evictions (private: never log it)
        self.remaining = dict(uses)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.entries

    @property
    def free_bytes(self) -> int:
        return self.max_bytes - self.bytes

    def get(self, key: tuple[int, ...]) -> torch.Tensor | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.entries.move_to_end(key)
        return entry.kv[0]

    def put(self, key: tuple[int, ...], kv: torch.Tensor) -> None:
        """Keep a document's KV; older entries leave while over the bound (the newest stays:
        its caller copies it at once)."""
        if key in self.entries:
            return
        self._add(key, _Entry((kv,), _nbytes(kv)))
        while self.bytes > self.max_bytes and len(self.entries) > 1:
            self._pop(next(iter(self.entries)))
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def used(self, key: tuple[int, ...]) -> None:
        """One waiting row took this document; drop it when no waiting row needs it."""
        self.remaining[key] -= 1
        if self.remaining[key] == 0 and key in self.entries:
            self._pop(key)

    def make_room(self, nbytes: int) -> bool:
        """Evict least recently used entries until ``nbytes`` more fit within the bound;
        ``False`` (nothing evicted) when ``nbytes`` alone exceeds it."""
        if nbytes > self.max_bytes:
            return False
        while self.entries and self.bytes + nbytes > self.max_bytes:
            self._pop(next(iter(self.entries)))
        return True

    def put_shard(self, key: Hashable, kv: tuple[torch.Tensor, ...], fed: int) -> None:
        """Keep a swapped-out shard (``make_room`` made room for it first)."""
        self._add(key, _Entry(kv, sum(_nbytes(t) for t in kv), fed))
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def take_shard(self, key: Hashable) -> _Entry | None:
        """A swapped-out shard's entry, removed from the cache (it is about to change)."""
        return self._pop(key) if key in self.entries else None

    def _add(self, key: Hashable, entry: _Entry) -> None:
        self.entries[key] = entry
        self.bytes += entry.nbytes

    def _pop(self, key: Hashable) -> _Entry:
        entry = self.entries.pop(key)
        self.bytes -= entry.nbytes
        return entry


class PackedEngine:
    """Runs DP-SynRAG private prediction for many groups through packed slot lanes.

    ``graphs``: the CUDA-graph path of the decode step (``step_graphs``): ``None`` is on for
    CUDA unless ``DPSYNRAG_STEP_GRAPHS=0`` (off on CPU), ``True``/``False`` force it;
    ``capturer`` replaces the CUDA capturer (tests). ``bucket``: the rounding of part counts
    and of the active groups (``packed_step.bucket``; ``packed_step.unbucketed`` turns it off).
    ``shard_rows`` (public, ``1 <= shard_rows <= batch_rows``, default ``batch_rows``): the
    most rows of one group in the slots at once; a larger group runs in shards (module
    docstring). ``released``: per group, the tokens a resumed build already released (in
    order; an end-of-sequence token only last): the group continues after them without a
    vote for any of them (``_resume``) and its returned tokens start with them. Public sizing:
    ``max_rows`` (= ``row_budget`` = ``batch_rows``) bounds the
    rows in flight; ``peak_rows`` is the most there were (private: never log it).
    ``prefill_chunk`` / ``prefill_tokens`` (public; default ``engine_memory.prefill_sizes`` of
    the device): the token rows of every row-wise call of a packed prefill and the most
    stream tokens of one prefill (``packed_prefill``). ``slot_bytes`` (public; ``None``: no
    bound): the most bytes of all lanes' slot buffers, the copy a growing lane makes
    included; a waiting group joins only when its slots fit (lanes left empty are freed to
    make room), except into an empty engine (``engine_memory``).
    """

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
        slot_bytes: int | None = None,
        prefill_tokens: int | None = None,
        prefill_chunk: int | None = None,
        on_step: Callable[[StepReport], None] | None = None,
        row_transform: RowTransform | None = None,
        prior: PublicPrior | None = None,
        graphs: bool | None = None,
        capturer: Capturer | None = None,
        bucket: Bucket = bucket,
        shard_rows: int | None = None,
        released: Sequence[Sequence[int]] | None = None,
    ) -> None:
        if len(prefix_ids) != prefix_len:
            raise ValueError("prefix_ids must hold prefix_len tokens")
        if batch_rows < 1:
            raise ValueError("batch_rows must be positive")
        shard_rows = batch_rows if shard_rows is None else shard_rows
        if not 1 <= shard_rows <= batch_rows:
            raise ValueError("shard_rows must lie in [1, batch_rows]")
        if row_transform is None and not (0 < clip < float("inf")):
            raise ValueError("the clip bound c must be a finite positive number")
        shared = tuple(prefix_ids)
        for rows in groups:
            for row in rows:
                if len(row) <= prefix_len or tuple(row[:prefix_len]) != shared:
                    raise ValueError("every row must start with the shared prefix and keep "
                                     "a token of its own")
        self.stack = stack
        self.groups = [_Group(i, [row[prefix_len:] for row in g]) for i, g in enumerate(groups)]
        self._resume(released, eos_ids, max_new_tokens)
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
        chunk, tokens = prefill_sizes(stack.device)
        self.prefill_chunk = chunk if prefill_chunk is None else prefill_chunk
        self.prefill_tokens = tokens if prefill_tokens is None else prefill_tokens
        if not 1 <= self.prefill_chunk <= self.prefill_tokens:
            raise ValueError("prefill_chunk must lie in [1, prefill_tokens]")
        self.on_step = on_step
        self.batch_rows = batch_rows
        self.shard_rows = shard_rows
        self.bucket = bucket
        # slots per attention part: a public function of batch_rows
        self.attn_rows = max(1, batch_rows // 8)
        # rows in flight: public (batch_rows), whatever the groups' sizes; no row's shapes
        # depend on it
        self.max_rows = batch_rows
        self.row_budget = batch_rows
        widest = max((lane_width(len(r), max_new_tokens - g.start)
                      for g in self.groups for r in g.rows), default=MIN_LANE_WIDTH)
        uses: dict[tuple[int, ...], int] = {}
        for g in self.groups:
            for row in g.rows:
                uses[row] = uses.get(row, 0) + 1
        self.kv_token_bytes = (stack.n_layers * 2 * stack.n_kv * stack.head_dim
                               * torch.finfo(stack.dtype).bits // 8)
        if doc_cache_bytes is None:
            doc_cache_bytes = 2 * self.kv_token_bytes * widest * min(self.max_rows,
                                                                    max(1, len(uses)))
        self.cache = _DocCache(doc_cache_bytes, uses)
        self.slot_bytes = slot_bytes
        self.peak_slot_bytes = 0  # private: never log it
        self.stopped = {"rows": 0, "slots": 0}  # admissions refused by each bound (private)
        self.lanes: dict[int, _Lane] = {}
        self.in_flight = 0
        self.peak_rows = 0  # the most rows in flight so far (private: never log it)
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.distinct_prefills = 0
        self.prefill_calls = 0  # packed prefills run (private: never log it)
        self.row_steps = 0
        self.replayed_row_steps = 0
        self.steps = 0
        self.finished = sum(g.done for g in self.groups)  # ended among released tokens
        # every (rows, width) an attention part ran with, and (rows, -1) for the logits chunks
        self.decode_shapes: set[tuple[int, int]] = set()
        self.step_keys: set[StepKey] = set()  # the distinct keys of the steps run
        self.last_key: StepKey | None = None
        self.graphs = StepGraphs.for_device(stack.device, graphs, capturer)
        self._pin = stack.device.type == "cuda"

    def _resume(self, released: Sequence[Sequence[int]] | None, eos_ids: frozenset[int],
                max_new_tokens: int) -> None:
        """Start each group after its released tokens (a resumed build; public values).

        A group whose tokens end with an end-of-sequence token, or number
        ``max_new_tokens``, is done (its tokens less the EOS). Otherwise its tokens go to the
        end of every row: the row's KV then comes from one prefill of its document and those
        tokens (alone, unpadded: shapes of the row and public tokens only), and the group
        feeds its last released token first. No step votes for a released token."""
        if released is None:
            return
        if len(released) != len(self.groups):
            raise ValueError("one list of released tokens per group is required")
        for group, tokens in zip(self.groups, released, strict=True):
            tokens = [int(t) for t in tokens]
            if len(tokens) > max_new_tokens or any(t in eos_ids for t in tokens[:-1]):
                raise ValueError("released tokens hold at most T tokens, EOS only last")
            if tokens and tokens[-1] in eos_ids:
                group.tokens, group.done = tokens[:-1], True
            elif len(tokens) == max_new_tokens:
                group.tokens, group.done = tokens, True
            elif tokens:
                group.tokens, group.start = tokens, len(tokens)
                group.rows = [(*row, *tokens) for row in group.rows]

    # ------------------------------------------------------------------ public
    def run(self) -> list[list[int]]:
        """Generate every group's tokens; returns one token list per group (EOS excluded)."""
        if self.max_new_tokens == 0 or not self.groups:
            return [[] for _ in self.groups]
        if all(g.done for g in self.groups):  # every group ended among its released tokens
            return [g.tokens for g in self.groups]
        start = time.perf_counter()
        self.prefix: PrefixKV | None = self.stack.prefix(self.prefix_ids)
        self.prefill_seconds += time.perf_counter() - start
        self.votes_fn = StepVotes(
            self.stack, self.prefix, batch_rows=self.batch_rows, part_rows=self.attn_rows,
            vocab_size=self.vocab_size, clip=self.clip, row_transform=self.row_transform,
            prior=self.prior is not None)
        # pop() takes the next in input order; a group ended among its released tokens is done
        waiting = [g.index for g in self.groups if not g.done][::-1]
        active: list[int] = []
        while waiting or active:
            if not active and self._sharded(self.groups[waiting[-1]]):
                self._run_shards(self.groups[waiting.pop()])
                continue
            self._admit(waiting, active)
            tick = time.perf_counter()
            tokens = self._step(active)
            still = [gi for gi, token in zip(active, tokens.tolist(), strict=True)
                     if self._advance(self.groups[gi], token)]
            self.finished += len(active) - len(still)
            active = still
            self.decode_seconds += time.perf_counter() - tick
            self._report(len(active))
        return [g.tokens for g in self.groups]

    def step_key(self) -> StepKey | None:
        """The key (tuple of shapes) of the latest decode step; ``None`` before the first
        step or when it decoded no row. Depends on group sizes: never log or release it."""
        return self.last_key

    @property
    def slot_capacity(self) -> int:
        """Slots allocated over all lanes (each lane: a bucket size of parts)."""
        return sum(lane.capacity for lane in self.lanes.values())

    # ------------------------------------------------------------------ scheduling
    def _report(self, active: int) -> None:
        self.steps += 1
        if self.on_step is not None:
            self.on_step(StepReport(
                step=self.steps, active_groups=active, active_rows=self.in_flight,
                finished_groups=self.finished, prefill_seconds=self.prefill_seconds,
                decode_seconds=self.decode_seconds,
                distinct_prefills=self.distinct_prefills, row_steps=self.row_steps,
                graphs=self.graphs.active, step_keys=len(self.step_keys),
                graph_captures=self.graphs.captures, graph_replays=self.graphs.replays,
                replayed_row_steps=self.replayed_row_steps, peak_rows=self.peak_rows,
                peak_slot_bytes=self.peak_slot_bytes, stopped_by_rows=self.stopped["rows"],
                stopped_by_slots=self.stopped["slots"]))

    def _advance(self, group: _Group, token: int) -> bool:
        """Take a group's sampled token; whether the group goes on."""
        if token in self.eos_ids:
            self._finish(group)
            return False
        group.tokens.append(token)
        if len(group.tokens) >= self.max_new_tokens:
            self._finish(group)
            return False
        for width, slot in group.slots:
            self.lanes[width].input[slot] = token
        return True

    def _width(self, group: _Group, row: tuple[int, ...]) -> int:
        """A row's lane width: its length and the tokens left to feed (a resumed group's
        rows hold its released tokens: the same width as without them)."""
        return lane_width(len(row), self.max_new_tokens - group.start)

    def _lane(self, group: _Group, row: tuple[int, ...]) -> _Lane:
        return self._lane_for(self._width(group, row))

    def _lane_for(self, width: int) -> _Lane:
        lane = self.lanes.get(width)
        if lane is None:
            lane = self.lanes[width] = _Lane(self.stack, width, self.attn_rows, self.bucket)
        return lane

    def _sharded(self, group: _Group) -> bool:
        """Whether ``group`` runs in shards: more rows than ``shard_rows`` (public)."""
        return len(group.rows) > self.shard_rows

    def _fits(self, group: _Group, pending: dict[int, int]) -> bool:
        """Whether ``group`` may join now, after the groups this admission already chose
        (``pending``: their rows per lane width): never a sharded group (it runs alone);
        always into an empty engine; else when the rows computed per step (whole attention
        parts, bucketed per lane) stay within the row budget and the slots within
        ``slot_bytes`` (``_slots_fit``; lanes left empty are freed when that makes room)."""
        if self._sharded(group):
            return False
        need = dict(pending)
        for width, more in self._needs(group, group.rows).items():
            need[width] = need.get(width, 0) + more
        slots_fit = self._slots_fit(need)
        if not slots_fit:  # lanes left empty hold memory no row uses: free it
            self._drop_empty_lanes(keep=pending)
            slots_fit = self._slots_fit(need)
        if self.in_flight == 0 and not pending:
            return True
        occupied = {w: lane.occupied for w, lane in self.lanes.items()}
        for width, more in need.items():
            occupied[width] = occupied.get(width, 0) + more
        parts = sum(self.bucket(-(-n // self.attn_rows)) for n in occupied.values())
        if parts * self.attn_rows > self.row_budget:
            self.stopped["rows"] += 1
            return False
        if not slots_fit:
            self.stopped["slots"] += 1
        return slots_fit

    def _needs(self, group: _Group, rows: Iterable[tuple[int, ...]]) -> dict[int, int]:
        """Rows per lane width."""
        need: dict[int, int] = {}
        for row in rows:
            width = self._width(group, row)
            need[width] = need.get(width, 0) + 1
        return need

    def _slots_fit(self, need: dict[int, int]) -> bool:
        """Whether every lane's slot buffer, after the lanes grow once for ``need`` more rows
        per width, and the copy the largest growing lane makes, stay within ``slot_bytes``."""
        if self.slot_bytes is None:
            return True
        total = copy = 0
        for width in set(self.lanes) | set(need):
            lane = self.lanes.get(width)
            capacity, occupied = (0, 0) if lane is None else (lane.capacity, lane.occupied)
            grown = grown_capacity(capacity, occupied + need.get(width, 0), self.attn_rows,
                                   self.bucket)
            total += grown * width
            if grown > capacity:  # torch.cat holds the old buffer and the new one at once
                copy = max(copy, capacity * width)
        return (total + copy) * self.kv_token_bytes <= self.slot_bytes

    def _drop_empty_lanes(self, keep: Iterable[int] = ()) -> None:
        """Free the slot buffers of lanes with no row (a later row recreates its lane),
        except the widths in ``keep``."""
        kept = set(keep)
        for width in [w for w, lane in self.lanes.items()
                      if lane.occupied == 0 and w not in kept]:
            del self.lanes[width]

    def _note_slots(self) -> None:
        self.peak_slot_bytes = max(self.peak_slot_bytes, self.kv_token_bytes * sum(
            lane.capacity * lane.width for lane in self.lanes.values()))

    def _admit(self, waiting: list[int], active: list[int]) -> None:
        """Move waiting groups (input order) into slots while the rows in flight fit; each
        lane grows once (one new buffer, one copy) for all the groups admitted."""
        admitted: list[_Group] = []
        pending: dict[int, int] = {}
        while waiting and self._fits(self.groups[waiting[-1]], pending):
            group = self.groups[waiting.pop()]
            for width, more in self._needs(group, group.rows).items():
                pending[width] = pending.get(width, 0) + more
            admitted.append(group)
        if not admitted:
            return
        for width, more in pending.items():
            self._lane_for(width).reserve(more)
        self._note_slots()
        for group in admitted:
            group.slots = []
            for row in group.rows:
                lane = self._lane(group, row)
                slot = lane.take()
                lane.group[slot] = group.index  # reserved now, filled by _fill
                group.slots.append((lane.width, slot))
            self.in_flight += len(group.rows)
            active.append(group.index)
        self.peak_rows = max(self.peak_rows, self.in_flight)
        start = time.perf_counter()
        self._fill(admitted, waiting)
        self.prefill_seconds += time.perf_counter() - start

    def _fill(self, admitted: list[_Group], waiting: list[int]) -> None:
        """Copy each admitted row's document KV into its slot, prefilling missing documents
        together (and, in the room left in the prefill's last chunk, documents of the next
        waiting groups, when the cache holds them without evicting anything)."""
        rows = [row for group in admitted for row in group.rows]
        places = [(group.index, width, slot) for group in admitted
                  for width, slot in group.slots]
        ahead = itertools.islice(
            (row for gi in reversed(waiting) for row in self.groups[gi].rows),
            LOOKAHEAD_ROWS * self.batch_rows)
        for row, (gi, width, slot), kv in zip(rows, places, self._documents(rows, ahead),
                                              strict=True):
            self.lanes[width].place(slot, gi, kv, len(row) - 1, row[-1])
            self.cache.used(row)

    def _documents(self, rows: Sequence[tuple[int, ...]],
                   ahead: Iterable[tuple[int, ...]] = ()) -> Iterator[torch.Tensor | None]:
        """The KV of each row's document tokens (all but the last; ``None`` for none), in
        order: cached, or prefilled by packed prefills of the missing documents (in order,
        each at most ``prefill_tokens`` stream tokens); ``ahead``: rows whose documents may
        fill the room left in a prefill's last chunk. A prefill's KV is held only until its
        rows are yielded."""
        ahead = iter(ahead)
        i = 0
        while i < len(rows):
            batch: list[tuple[int, ...]] = []
            tokens, j = 0, i
            while j < len(rows):
                row = rows[j]
                if len(row) > 1 and row not in self.cache and row not in batch:
                    n = len(row) - 1
                    if batch and stream_tokens([tokens + n],
                                               self.prefill_chunk) > self.prefill_tokens:
                        break
                    batch.append(row)
                    tokens += n
                j += 1
            held = self._prefill(batch, ahead) if batch else {}
            for row in rows[i:j]:
                kv = held.get(row) if len(row) > 1 else None
                if kv is None and len(row) > 1:
                    kv = self.cache.get(row)
                if kv is None and len(row) > 1:  # evicted by this very prefill's entries
                    kv = self._prefill([row])[row]
                yield kv
            del held
            i = j

    def _prefill(self, batch: list[tuple[int, ...]],
                 ahead: Iterator[tuple[int, ...]] | None = None
                 ) -> dict[tuple[int, ...], torch.Tensor]:
        """Prefill the documents of ``batch`` (distinct rows, all uncached) in one packed
        prefill (``packed_prefill``: row-wise layers on chunks of ``prefill_chunk`` tokens,
        attention per document at its own length), with documents of ``ahead`` in the room
        left in its last chunk when the cache holds them without an eviction; every result
        goes to the cache. Returns the KV of ``batch``'s rows.

        A document's KV is the same whichever documents share its prefill
        (``packed_prefill``: shapes fixed by public sizes and its own length)."""
        tokens = sum(len(row) - 1 for row in batch)
        room = stream_tokens([tokens], self.prefill_chunk) - tokens
        free = self.cache.free_bytes - tokens * self.kv_token_bytes
        extra: list[tuple[int, ...]] = []
        if room and ahead is not None:
            for row in ahead:
                n = len(row) - 1
                if (n < 1 or n > room or n * self.kv_token_bytes > free or row in self.cache
                        or row in batch or row in extra):
                    continue
                extra.append(row)
                room -= n
                free -= n * self.kv_token_bytes
                if not room:
                    break
        everything = [*batch, *extra]
        kvs = packed_prefill(self.stack, self.prefix, [list(row[:-1]) for row in everything],
                             chunk_tokens=self.prefill_chunk)
        for row, kv in zip(everything, kvs, strict=True):
            self.cache.put(row, kv)
        self.distinct_prefills += len(everything)
        self.prefill_calls += 1
        return dict(zip(batch, kvs[:len(batch)], strict=True))

    def _finish(self, group: _Group) -> None:
        group.done = True
        for width, slot in group.slots:
            self.lanes[width].free(slot)
        self.in_flight -= len(group.slots)
        group.slots = []
        if group.shards is not None:  # its documents and swapped shards are needed no more
            for k in range(len(group.shards)):
                self.cache.take_shard(("shard", group.index, k))
            for row in group.rows:
                self.cache.used(row)
            group.shards, group.resident = None, None

    def _compact(self, lane: _Lane) -> int:
        """Move occupied slots down into holes when that saves a part; returns the range."""
        occupied = np.flatnonzero(lane.group >= 0)
        if occupied.size == 0:
            return 0
        chunk = lane.chunk
        top = int(occupied[-1]) + 1
        if -(-top // chunk) <= -(-occupied.size // chunk):
            return top
        keep = occupied.size
        src = occupied[occupied >= keep]
        dst = np.flatnonzero(lane.group[:keep] < 0)
        device = self.stack.device
        lane.slots[:, :, _device_index(dst.tolist(), device)] = \
            lane.slots[:, :, _device_index(src.tolist(), device)]
        for array in (lane.length, lane.input, lane.group):
            array[dst] = array[src]
        lane.group[src] = -1
        lane.length[src] = 0
        moved = dict(zip(src.tolist(), dst.tolist(), strict=True))
        for gi in {int(lane.group[t]) for t in dst}:
            group = self.groups[gi]
            group.slots = [(w, moved.get(s, s) if w == lane.width else s)
                           for w, s in group.slots]
        return keep

    # ------------------------------------------------------------------ large groups
    def _run_shards(self, group: _Group) -> None:
        """Run a group of more than ``shard_rows`` rows alone, in shards of at most
        ``shard_rows`` rows: at each step every shard in turn gets its vote step, the float64
        votes of the shards are added, and the sampler is called once for the group."""
        if self.slot_bytes is not None:  # nothing is in flight: no lane holds a row
            self._drop_empty_lanes()
        order = sorted(range(len(group.rows)),  # rows of one width together: fewer parts
                       key=lambda r: self._width(group, group.rows[r]))
        group.shards = [order[i:i + self.shard_rows]
                        for i in range(0, len(order), self.shard_rows)]
        while not group.done:
            tick, prefill = time.perf_counter(), self.prefill_seconds
            n = len(group.tokens) - group.start  # tokens fed to the rows in this run
            prior = None if self.prior is None else self.prior.step([group.index],
                                                                    [group.tokens])
            shards = range(len(group.shards))
            total: torch.Tensor | None = None
            # back and forth: the shard that voted last stays in the slots for the next step
            for k in (shards if n % 2 == 0 else reversed(shards)):
                self._bring(group, k, n)
                votes = self._votes(self._plan([group.index]), prior, 1)
                total = votes if total is None else total + votes
            assert total is not None  # a sharded group has at least two shards
            token = int(self._sample(total, [group.index], prior)[0])
            if not self._advance(group, token):
                self.finished += 1
            self.decode_seconds += (time.perf_counter() - tick
                                    - (self.prefill_seconds - prefill))
            self._report(0 if group.done else 1)

    def _bring(self, group: _Group, k: int, n: int) -> None:
        """Make shard ``k`` of ``group`` the one in the slots, its rows fed the first ``n``
        tokens of the step inputs (the last prompt token, then the group's tokens): from its
        swapped-out KV when the cache kept it, else from its documents' KV; the tokens fed
        since are fed again by KV-only steps of the very shapes the first feeding had."""
        if group.resident == k:
            return
        if group.resident is not None:
            self._swap_out(group)
        assert group.shards is not None
        start = time.perf_counter()
        entry = self.cache.take_shard(("shard", group.index, k))
        fed = 0 if entry is None else entry.fed
        rows = [group.rows[r] for r in group.shards[k]]
        group.slots = []
        kvs = self._documents(rows) if entry is None else iter(entry.kv)
        for row, kv in zip(rows, kvs, strict=True):
            lane = self._lane(group, row)
            slot = lane.take()
            body = len(row) - 1
            lane.place(slot, group.index, kv, body + fed, self._fed_token(group, row, fed))
            group.slots.append((lane.width, slot))
        del entry, kvs
        self._note_slots()
        group.resident = k
        self.in_flight += len(rows)
        self.peak_rows = max(self.peak_rows, self.in_flight)
        self.prefill_seconds += time.perf_counter() - start
        for s in range(fed, n):
            self._replay()
            for row, (width, slot) in zip(rows, group.slots, strict=True):
                self.lanes[width].input[slot] = self._fed_token(group, row, s + 1)

    @staticmethod
    def _fed_token(group: _Group, row: tuple[int, ...], s: int) -> int:
        """The token a row of ``group`` feeds at step ``s`` of this run."""
        return row[-1] if s == 0 else group.tokens[group.start + s - 1]

    def _swap_out(self, group: _Group) -> None:
        """Free the slots of the group's shard in them; its KV goes to the cache when the
        cache's bound can hold it (else it is recomputed when the shard comes back)."""
        assert group.shards is not None and group.resident is not None
        rows = [group.rows[r] for r in group.shards[group.resident]]
        lengths = [int(self.lanes[w].length[s]) for w, s in group.slots]
        fed = {length - (len(row) - 1) for row, length in zip(rows, lengths, strict=True)}
        assert len(fed) == 1, "the rows of a shard are fed alike"
        if self.cache.make_room(sum(lengths) * self.kv_token_bytes):  # before the copy
            kv = tuple(self.lanes[w].slots[:, :, s, :, :length].clone()
                       for (w, s), length in zip(group.slots, lengths, strict=True))
            self.cache.put_shard(("shard", group.index, group.resident), kv, fed.pop())
        for width, slot in group.slots:
            self.lanes[width].free(slot)
        self.in_flight -= len(group.slots)
        group.slots, group.resident = [], None

    def _replay(self) -> None:
        """A KV-only step (no logits, no votes) over the rows in the slots."""
        plan = self._plan([], votes_rows=0)
        self._device_step(plan, None)
        self.replayed_row_steps += plan.occupied

    # ------------------------------------------------------------------ one step
    def _plan(self, active: list[int], votes_rows: int | None = None) -> StepIndex:
        """Compact the lanes and build the step's key and index (host only); ``votes_rows``
        0 is a KV-only step."""
        lanes: list[LaneRows] = []
        for width in sorted(self.lanes):
            lane = self.lanes[width]
            parts = -(-self._compact(lane) // lane.chunk)
            if parts:
                lanes.append(LaneRows(width=width, parts=self.bucket(parts), group=lane.group,
                                      length=lane.length, token=lane.input))
        positions = np.full(len(self.groups), -1, dtype=np.int64)
        positions[active] = np.arange(len(active), dtype=np.int64)
        if votes_rows is None:
            votes_rows = self.bucket(len(active)) + 1
        return step_index(lanes, positions, len(active), part_rows=self.attn_rows,
                          batch_rows=self.batch_rows, votes_rows=votes_rows, pin=self._pin)

    def _step(self, active: list[int]) -> np.ndarray:
        """Sum the clipped rows per active group and draw one token per group."""
        plan = self._plan(active)
        prior = None if self.prior is None else self.prior.step(
            active, [self.groups[gi].tokens for gi in active])
        return self._sample(self._votes(plan, prior, len(active)), active, prior)

    def _sample(self, votes: torch.Tensor, active: list[int],
                prior: PriorStep | None) -> np.ndarray:
        """The sampler's one call for these groups' summed votes: one token per group."""
        if prior is not None:  # the public term, -inf off the public support
            votes = prior.votes(votes)
        tokens = np.asarray(self.sampler(votes, list(active)), dtype=np.int64)
        if tokens.shape != (len(active),):
            raise ValueError("the sampler must return one token id per active group")
        if ((tokens < 0) | (tokens >= self.vocab_size)).any():
            raise ValueError("the sampler returned a token id outside the vocabulary")
        return tokens

    def _votes(self, plan: StepIndex, prior: PriorStep | None, active: int) -> torch.Tensor:
        """The step's float64 votes ``(active, vocab)``: every lane row's clipped logits (or
        public-difference row, or ``row_transform``) added into its group's row.

        The device work is ``packed_step.StepVotes`` on the plan's key, eager or by a CUDA
        graph (``step_graphs``); one host-to-device copy (the index) goes in, and the one
        host read is the flag pair, right where the votes go to the sampler. Then each
        decoded occupied slot holds one more token (hole slots stay at length 0).
        """
        if not plan.key.lanes:  # no group of the step has a row: zero votes
            self.last_key = None
            return torch.zeros((active, self.vocab_size), dtype=torch.float64,
                               device=self.stack.device)
        votes, flags = self._device_step(plan, prior)
        # the step's one host read, where its votes go to the sampler (which then finds
        # them computed): the checks clip_logits / difference_clip make per call
        finite, supported = flags.tolist()
        if not supported:
            raise ValueError("every row needs a non-empty support")
        if not finite:  # only public logits can raise: a document's bad row votes zero
            raise ValueError("public logits contain NaN or infinity on the support")
        self.row_steps += plan.occupied
        return votes[:active]

    def _device_step(self, plan: StepIndex,
                     prior: PriorStep | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the step of ``plan`` (its key has lanes) on the device; advance the lengths."""
        device = self.stack.device
        key = plan.key
        self.last_key = key
        self.step_keys.add(key)
        inputs: tuple[torch.Tensor, ...] = (plan.index.to(device, non_blocking=True),)
        if prior is not None:  # padded to the votes rows less the dummy: fixed shapes
            active = int(prior.public.shape[0])
            public = torch.zeros((key.votes - 1, self.vocab_size), dtype=torch.float32,
                                 device=device)
            support = torch.zeros((key.votes - 1, self.vocab_size), dtype=torch.bool,
                                  device=device)
            public[:active] = prior.public.to(device)
            support[:active] = prior.support.to(device)
            inputs += (public, support)
        lanes = [self.lanes[width] for width, _ in key.lanes]
        state = tuple(lane.slots for lane in lanes)
        binding = tuple(lane.generation for lane in lanes)
        votes, flags = self.graphs.run(key, binding, partial(self.votes_fn, key), state, inputs)
        for width, parts in key.lanes:
            lane = self.lanes[width]
            self.decode_shapes.add((lane.chunk, width))
            rows = slice(0, parts * lane.chunk)
            lane.length[rows] += lane.group[rows] >= 0
        self.decode_shapes.add((self.batch_rows, -1))
        return votes, flags
