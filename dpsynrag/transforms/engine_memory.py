"""Batch rows and the document-KV cache bound of the packed engine, sized from device memory.

On CUDA, ``private_predict`` sizes the packed engine's two memory knobs (``batch_rows``: the
rows of every row-wise chunk, and the byte bound of its document-KV cache) from the device's
free memory instead of a fixed 1024 rows. ``plan_engine_memory`` is the whole rule, a pure
function of numbers; its formula, in bytes (e: bytes per element of the model's dtype; W: the
planned slot width; P: the shared prefix's tokens; H / kvh: query / KV heads of head_dim d;
I: the MLP's intermediate size; V: the logit width)::

    kv       = layers * 2 * kvh * d * e                      KV of one token of one row
    act      = e * (6 * hidden + 4 * (H + kvh) * d + 4 * I)  one token's live activations
    attn     = 12 * H * (P + W)                              float32 scores, mask, softmax
    per_row  = 2 * W * kv + act + attn + V * (e + 32)        slots, one decode step, logits
    fixed    = (P + 2 * W) * kv + W * act + W * attn         prefix KV, one document's prefill
    budget   = fraction * free - fixed
    batch_rows      = min(8192, max(64, floor(row_share * budget / per_row / 64) * 64))
    doc_cache_bytes = cache_share * (budget - batch_rows * per_row)

``V * (e + 32)``: a row's logits in the model's dtype, their float32 copy, the clipped float32
row and its float64 copy (e + 16), plus the row's share of the float64 votes and one copy
(16; a group has at least one row in flight). ``2 * W * kv``: a row's slot at the planned width
W, doubled because a lane's growth copies it and narrower lanes (powers of two below W) keep
their slots; an estimate, not a worst case. The rest of ``fraction * free`` (at least
``(1 - row_share) * (1 - cache_share)`` of the budget) is slack for what the estimate misses
(allocator fragmentation, kernels' workspaces). ``budget < 64 * per_row`` raises
``EngineMemoryError``. Rows wider than W (long documents) take more than planned: pass
``--batch-rows`` then. A group larger than ``batch_rows`` does not: the engine keeps at most
``batch_rows`` rows in flight and runs such a group in shards, keeping swapped-out shards
within the document-cache bound (``decoding_packed``), so its size costs time, never memory.
Two things of the decode step (``packed_step``, ``step_graphs``) are not in the formula: a
lane's capacity is a bucket size of parts (up to 1.5x the parts its rows need; the rows
computed per step still stay within the row budget), and on CUDA each
captured step graph keeps its static inputs and outputs (the votes: active groups x V
float64, ~70 MB for 64 groups of a 128k vocabulary; at most ``step_graphs.MAX_GRAPHS``
graphs, their intermediates in one shared pool): both come out of the slack, unmeasured.

Privacy: ``batch_rows`` and the cache bound must be public. Both are functions of public model
sizes, public settings (T, the public prefix, W) and the device's free memory, measured once
per loaded model right after loading (``models.devices.free_cuda_memory``, after emptying
PyTorch's cache), before that model has seen any document; never of documents. This assumes
no process working on private data shares the GPU at that moment (the build starts one model
actor per GPU). The packed engine's row shapes are functions of ``batch_rows`` and the row's
own length (``decoding_packed``), so which documents share a chunk never changes a row; a
different ``batch_rows`` changes the kernels' shapes, hence possibly a row's float rounding,
which is why it must not depend on data, and why two devices with different free memory may
round differently (pass ``--batch-rows`` for bitwise-identical runs across machines). The
cache bound changes no value at all: a document evicted early is recomputed by a packed prefill
(``packed_prefill``: chunks of a public size, attention at its own length), to the same values.
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
ROW_SHARE = 0.75  # of the budget, at most, for the rows
CACHE_SHARE = 0.5  # of what the rows leave, for the document-KV cache
ROW_MULTIPLE = 64
MIN_ROWS = 64
MAX_ROWS = 8192
PLAN_SLOT_WIDTH = 1024  # planned slot width W: document (after the prefix) plus T tokens
# packed prefill (``packed_prefill``): tokens of every row-wise call, per device type, and
# chunks of one prefill (its token stream, hence its memory, is at most this many chunks)
PREFILL_CHUNK_TOKENS = {"cuda": 2048}
PREFILL_CHUNK_TOKENS_OTHER = 256
PREFILL_BATCH_CHUNKS = 8


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
    """The engine's public memory knobs and the bytes the formula predicts for them."""

    batch_rows: int
    doc_cache_bytes: int
    per_row_bytes: int
    fixed_bytes: int

    @property
    def predicted_bytes(self) -> int:
        return self.fixed_bytes + self.batch_rows * self.per_row_bytes + self.doc_cache_bytes


def row_bytes(sizes: ModelSizes, width: int, prefix_len: int) -> tuple[int, int]:
    """``(per_row, fixed)`` bytes of the module docstring's formula."""
    kv = sizes.kv_token_bytes
    attn = 12 * sizes.heads * (prefix_len + width)
    per_row = 2 * width * kv + sizes.activation_bytes + attn \
        + sizes.vocab * (sizes.dtype_bytes + 32)
    fixed = (prefix_len + 2 * width) * kv + width * (sizes.activation_bytes + attn)
    return per_row, fixed


def plan_engine_memory(
    free_bytes: int, sizes: ModelSizes, *, width: int, prefix_len: int = 0,
    batch_rows: int | None = None, fraction: float = FRACTION, row_share: float = ROW_SHARE,
    cache_share: float = CACHE_SHARE,
) -> EnginePlan:
    """``batch_rows`` and ``doc_cache_bytes`` for ``free_bytes`` of device memory.

    The rule and its privacy argument are in the module docstring. An explicit
    ``batch_rows`` is kept as it is; the cache then gets ``cache_share`` of what it leaves
    (0 when nothing is left). Raises ``EngineMemoryError`` when ``MIN_ROWS`` rows do not fit
    and no ``batch_rows`` is given.
    """
    if free_bytes < 0 or width < 1 or prefix_len < 0:
        raise ValueError("free_bytes, width and prefix_len must be non-negative (width >= 1)")
    if not (0 < fraction <= 1 and 0 < row_share <= 1 and 0 <= cache_share <= 1):
        raise ValueError("fraction and row_share must lie in (0, 1], cache_share in [0, 1]")
    per_row, fixed = row_bytes(sizes, width, prefix_len)
    budget = int(fraction * free_bytes) - fixed
    if batch_rows is None:
        if budget < MIN_ROWS * per_row:
            raise EngineMemoryError(
                f"{MIN_ROWS} rows need {fixed + MIN_ROWS * per_row} bytes at slot width "
                f"{width}; {fraction:.0%} of the {free_bytes} free bytes is "
                f"{int(fraction * free_bytes)}: pass batch_rows (--batch-rows)")
        fitting = int(row_share * budget) // per_row // ROW_MULTIPLE * ROW_MULTIPLE
        batch_rows = min(MAX_ROWS, max(MIN_ROWS, fitting))
    left = max(0, budget - batch_rows * per_row)
    return EnginePlan(batch_rows=batch_rows, doc_cache_bytes=int(cache_share * left),
                      per_row_bytes=per_row, fixed_bytes=fixed)


def prefill_sizes(device: torch.device) -> tuple[int, int]:
    """``(chunk_tokens, batch_tokens)`` of the packed prefill on ``device``: the rows of every
    row-wise call and the most stream tokens of one prefill (a longer document goes alone).
    Public: a function of the device type only."""
    chunk = PREFILL_CHUNK_TOKENS.get(device.type, PREFILL_CHUNK_TOKENS_OTHER)
    return chunk, chunk * PREFILL_BATCH_CHUNKS


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
