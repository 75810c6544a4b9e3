"""Batch rows, the slot budget and the document-KV cache bound of the packed engine, sized
from device memory.

On CUDA, ``private_predict`` sizes the packed engine's memory knobs (``batch_rows``: the rows
of every row-wise chunk and the most rows in flight; ``slot_bytes``: the bound on the lanes'
slot buffers; the byte bound of its document-KV cache) from the device's free memory.
``plan_engine_memory`` is the whole rule, a pure function of numbers; its formula, in bytes
(e: bytes per element of the model's dtype; W: the planned width of one long document; Wr:
the planned slot width of a row; P: the shared prefix's tokens; H / kvh: query / KV heads of
head_dim d; I: the MLP's intermediate size; V: the logit width; B / C: the packed prefill's
stream and chunk tokens, ``prefill_sizes``)::

    kv       = layers * 2 * kvh * d * e                      KV of one token of one row
    act      = e * (6 * hidden + 4 * (H + kvh) * d + 4 * I)  one token's live activations
    attn     = 12 * H * (P + W)                              float32 scores, mask, softmax
    step_row = act + attn + V * (e + 32)                     one decode step, logits, votes
    per_row  = Wr * kv + step_row                            with a slot of the planned width
    prefill  = B * (2 * kv + e * (2 * hidden + (2 * H + 4 * kvh) * d)) + C * act
               + 12 * H * W * (P + W)                        one packed prefill
    fixed    = (P + W) * kv + prefill                        prefix KV, one long document
    budget   = fraction * free - fixed
    batch_rows      = min(8192, max(64, floor(row_share * budget / per_row / 64) * 64))
    slot_bytes      = row_share * budget - batch_rows * step_row
    doc_cache_bytes = cache_share * (budget - batch_rows * step_row - slot_bytes)

``V * (e + 32)``: a row's logits in the model's dtype, their float32 copy, the clipped float32
row and its float64 copy (e + 16), plus the row's share of the float64 votes and one copy
(16; a group has at least one row in flight). ``Wr`` (``planned_row_width``): the lane width of
a row of ``PLAN_ROW_TOKENS`` document tokens and T; ``batch_rows`` rows of that width fit the
slot budget. The engine keeps the slots within ``slot_bytes`` whatever the rows' widths: it
admits a waiting group only when every lane's slot buffer, after the lanes grow for it (and
the copy a growing lane makes), stays within the bound, and it frees lanes left empty when
that makes room; a group joins an empty engine whatever its slots (one group of very long
documents can exceed the bound, as it exceeds any plan). So rows wider than Wr cost rows in
flight (time), not memory; the plan's ``bound`` says what set ``batch_rows`` (``memory``,
``max_rows``, ``explicit``), and the engine counts which limit stopped admissions (rows or
slot bytes; private counts, benchmarks only). The rest of ``fraction * free`` (at least
``(1 - row_share) * (1 - cache_share)`` of the budget) is slack for what the estimate misses
(allocator fragmentation, kernels' workspaces). ``budget < 64 * per_row`` raises
``EngineMemoryError``. A group larger than ``batch_rows`` does not take more memory: the
engine keeps at most ``batch_rows`` rows in flight and runs such a group in shards, keeping
swapped-out shards within the document-cache bound (``decoding_packed``), so its size costs
time, never memory. On CUDA each captured step graph keeps its static inputs and outputs (the
votes: active groups x V float64, ~70 MB for 64 groups of a 128k vocabulary; at most
``step_graphs.MAX_GRAPHS`` graphs, their intermediates in one shared pool): that comes out
of the slack, unmeasured.

Llama-3.1-8B in bf16 on an 80 GB card (62 GiB free after the weights, T = 70, P = 45): 1,088
rows (bound: memory), slots for 1,088 rows of width 256 (documents of up to ~186 tokens after
the prefix), a 5 GB document cache (tested; not yet measured on a GPU).

Privacy: ``batch_rows``, ``slot_bytes`` and the cache bound must be public. They are
functions of public model sizes, public settings (T, the public prefix, W, Wr, the prefill
sizes) and the device's free memory, measured once per loaded model right after loading
(``models.devices.free_cuda_memory``, after emptying PyTorch's cache), before that model has
seen any document; never of documents. This assumes no process working on private data
shares the GPU at that moment (the build starts one model actor per GPU). The packed engine's
row shapes are functions of ``batch_rows`` and the row's own length (``decoding_packed``), so
which documents share a chunk never changes a row; a different ``batch_rows`` changes the
kernels' shapes, hence possibly a row's float rounding, which is why it must not depend on
data, and why two devices with different free memory may round differently (pass
``--batch-rows`` for bitwise-identical runs across machines). The slot budget and the cache
bound change no value at all: they decide when a group is admitted and whether a document's
KV is recomputed, and a document evicted early is recomputed by a packed prefill
(``packed_prefill``: chunks of a public size, attention at its own length), to the same
values.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from dpsynrag.models.devices import free_cuda_memory
from dpsynrag.models.protocols import LLM
from dpsynrag.transforms.decoding_stack import DecoderStack

FRACTION = 0.85  # of the free memory measured at load
ROW_SHARE = 0.8  # of the budget, at most, for the rows (their steps and slots)
CACHE_SHARE = 0.5  # of what the rows leave, for the document-KV cache
ROW_MULTIPLE = 64
MIN_ROWS = 64
MAX_ROWS = 8192
PLAN_SLOT_WIDTH = 1024  # planned width W of one long document (after the prefix) plus T
PLAN_ROW_TOKENS = 186  # document tokens (after the prefix) a row is planned for: Wr
# packed prefill (``packed_prefill``): tokens of every row-wise call, per device type, and
# chunks of one prefill (its token stream, hence its memory, is at most this many chunks)
PREFILL_CHUNK_TOKENS = {"cuda": 2048}
PREFILL_CHUNK_TOKENS_OTHER = 256
PREFILL_BATCH_CHUNKS = 4


class EngineMemoryError(MemoryError):
    """Even ``MIN_ROWS`` rows do not fit the free memory (public numbers only)."""


@dataclass(frozen=True)
class ModelSizes:
    """Public sizes of a decoder that the engine's memory depends on."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    dtype_bytes: int

    @classmethod
    def of(cls, stack: DecoderStack, config: Any) -> ModelSizes:
        """From a ``DecoderStack`` and its model's config."""
        hidden = int(stack.embed.weight.shape[1])
        return cls(layers=int(stack.n_layers), heads=int(stack.n_heads),
                   kv_heads=int(stack.n_kv), head_dim=int(stack.head_dim), hidden=hidden,
                   intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
                   vocab=int(stack.lm_head.weight.shape[0]),
                   dtype_bytes=torch.finfo(stack.dtype).bits // 8)

    @property
    def kv_token_bytes(self) -> int:
        """KV of one token of one row over all layers."""
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def activation_bytes(self) -> int:
        """Live activations of one token through a layer (residual, q/k/v, MLP)."""
        return self.dtype_bytes * (6 * self.hidden + 4 * (self.heads + self.kv_heads)
                                   * self.head_dim + 4 * self.intermediate)


@dataclass(frozen=True)
class EnginePlan:
    """The engine's public memory knobs and the bytes the formula predicts for them.

    ``bound``: what set ``batch_rows``: ``memory`` (the rows that fit), ``max_rows``
    (``MAX_ROWS`` fit), ``explicit`` (given). ``step_row_bytes``: a row's decode-step bytes
    without its slot; ``per_row_bytes``: with a slot of ``row_width``."""

    batch_rows: int
    doc_cache_bytes: int
    per_row_bytes: int
    fixed_bytes: int
    slot_bytes: int = 0
    step_row_bytes: int = 0
    row_width: int = 0
    bound: str = "memory"

    @property
    def predicted_bytes(self) -> int:
        return (self.fixed_bytes + self.batch_rows * self.step_row_bytes + self.slot_bytes
                + self.doc_cache_bytes)

    def summary(self) -> dict[str, int | str]:
        """The plan's public numbers (for a benchmark's JSON)."""
        return {"batch_rows": self.batch_rows, "bound": self.bound,
                "slot_bytes": self.slot_bytes, "row_width": self.row_width,
                "doc_cache_bytes": self.doc_cache_bytes, "fixed_bytes": self.fixed_bytes,
                "per_row_bytes": self.per_row_bytes, "predicted_bytes": self.predicted_bytes}


def prefill_bytes(sizes: ModelSizes, width: int, prefix_len: int, stream_tokens: int,
                  chunk_tokens: int) -> int:
    """One packed prefill of ``stream_tokens`` in chunks of ``chunk_tokens``, with a document
    of ``width`` tokens' attention (module docstring)."""
    e = sizes.dtype_bytes
    per_token = 2 * sizes.kv_token_bytes + e * (
        2 * sizes.hidden + (2 * sizes.heads + 4 * sizes.kv_heads) * sizes.head_dim)
    return (stream_tokens * per_token + chunk_tokens * sizes.activation_bytes
            + 12 * sizes.heads * width * (prefix_len + width))


def row_bytes(sizes: ModelSizes, width: int, prefix_len: int, *, row_width: int | None = None,
              prefill: tuple[int, int] | None = None) -> tuple[int, int]:
    """``(per_row, fixed)`` bytes of the module docstring's formula; ``row_width``: Wr
    (default ``planned_row_width(0)``), ``prefill``: (C, B) as ``prefill_sizes`` gives them
    (default CUDA's)."""
    kv = sizes.kv_token_bytes
    row_width = planned_row_width(0) if row_width is None else row_width
    chunk, stream = prefill_sizes(torch.device("cuda")) if prefill is None else prefill
    per_row = row_width * kv + _step_row_bytes(sizes, width, prefix_len)
    fixed = (prefix_len + width) * kv + prefill_bytes(sizes, width, prefix_len, stream, chunk)
    return per_row, fixed


def _step_row_bytes(sizes: ModelSizes, width: int, prefix_len: int) -> int:
    attn = 12 * sizes.heads * (prefix_len + width)
    return sizes.activation_bytes + attn + sizes.vocab * (sizes.dtype_bytes + 32)


def plan_engine_memory(
    free_bytes: int, sizes: ModelSizes, *, width: int, prefix_len: int = 0,
    batch_rows: int | None = None, row_width: int | None = None,
    prefill: tuple[int, int] | None = None, fraction: float = FRACTION,
    row_share: float = ROW_SHARE, cache_share: float = CACHE_SHARE,
) -> EnginePlan:
    """``batch_rows``, ``slot_bytes`` and ``doc_cache_bytes`` for ``free_bytes`` of device
    memory; ``row_width``: Wr (default ``planned_row_width(0)``); ``prefill``: the packed
    prefill's (chunk, stream) tokens (default ``prefill_sizes`` of CUDA).

    The rule and its privacy argument are in the module docstring. An explicit
    ``batch_rows`` is kept as it is (``bound`` ``explicit``); the slots and the cache then
    share what it leaves (0 when nothing is left). Raises ``EngineMemoryError`` when
    ``MIN_ROWS`` rows do not fit and no ``batch_rows`` is given.
    """
    if free_bytes < 0 or width < 1 or prefix_len < 0 or (row_width is not None
                                                         and row_width < 1):
        raise ValueError("free_bytes, width and prefix_len must be non-negative (widths >= 1)")
    if not (0 < fraction <= 1 and 0 < row_share <= 1 and 0 <= cache_share <= 1):
        raise ValueError("fraction and row_share must lie in (0, 1], cache_share in [0, 1]")
    row_width = planned_row_width(0) if row_width is None else row_width
    per_row, fixed = row_bytes(sizes, width, prefix_len, row_width=row_width,
                               prefill=prefill)
    step_row = _step_row_bytes(sizes, width, prefix_len)
    budget = int(fraction * free_bytes) - fixed
    bound = "explicit"
    if batch_rows is None:
        if budget < MIN_ROWS * per_row:
            raise EngineMemoryError(
                f"{MIN_ROWS} rows need {fixed + MIN_ROWS * per_row} bytes at slot width "
                f"{row_width}; {fraction:.0%} of the {free_bytes} free bytes is "
                f"{int(fraction * free_bytes)}: pass batch_rows (--batch-rows)")
        fitting = int(row_share * budget) // per_row // ROW_MULTIPLE * ROW_MULTIPLE
        batch_rows = min(MAX_ROWS, max(MIN_ROWS, fitting))
        bound = "max_rows" if fitting > MAX_ROWS else "memory"
    slots = max(0, int(row_share * budget) - batch_rows * step_row)
    left = max(0, budget - batch_rows * step_row - slots)
    return EnginePlan(batch_rows=batch_rows, doc_cache_bytes=int(cache_share * left),
                      per_row_bytes=per_row, fixed_bytes=fixed, slot_bytes=slots,
                      step_row_bytes=step_row, row_width=row_width, bound=bound)


def prefill_sizes(device: torch.device) -> tuple[int, int]:
    """``(chunk_tokens, batch_tokens)`` of the packed prefill on ``device``: the rows of every
    row-wise call and the most stream tokens of one prefill (a longer document goes alone).
    Public: a function of the device type only."""
    chunk = PREFILL_CHUNK_TOKENS.get(device.type, PREFILL_CHUNK_TOKENS_OTHER)
    return chunk, chunk * PREFILL_BATCH_CHUNKS


def planned_row_width(max_new_tokens: int) -> int:
    """The slot width Wr rows are planned at: the lane width of a row of ``PLAN_ROW_TOKENS``
    document tokens and ``max_new_tokens`` (a power of two, at least 64; public)."""
    width = 64
    while width < PLAN_ROW_TOKENS + max_new_tokens:
        width *= 2
    return width


def planned_width(max_new_tokens: int) -> int:
    """The slot width W the plan assumes: ``PLAN_SLOT_WIDTH``, or more for a long T (a public
    setting); wider rows (long documents) take more memory than planned."""
    width = PLAN_SLOT_WIDTH
    while width < max_new_tokens:
        width *= 2
    return width


def free_memory(llm: LLM) -> int:
    """Free bytes on ``llm``'s CUDA device as measured once: ``llm.free_memory`` (taken by
    ``load_llm`` right after loading), else measured now and kept on ``llm`` (a model built
    outside ``load_llm``: then measure it before any document reaches it)."""
    known = getattr(llm, "free_memory", None)
    if known is None:
        known = free_cuda_memory(torch.device(llm.device))
        with contextlib.suppress(AttributeError):  # a frozen wrapper: measured again next time
            llm.free_memory = known
    return int(known)
