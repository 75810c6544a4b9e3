"""One decode step of the packed engine: bucket sizes, the step's key, its index, its votes.

A step decodes, for each lane (slots of one width) that holds a row, the lane's first
``bucket(parts)`` attention parts of ``part_rows`` slots (``parts`` = the parts up to its
highest occupied slot, after compaction; the extra parts are hole slots, computed and
discarded), then the filler rows that complete the last chunk of ``batch_rows``. Its
**key** (``StepKey``) is the tuple of its shapes: each lane's width and bucketed part count,
the chunk count, and the rows of the votes buffer (``bucket(active groups) + 1``, the last
row a dummy that takes hole and filler rows and is dropped). Bucket sizes are 1, 2, 3, 4, 6,
8, 12, 16, 24, ... (powers of two and three times powers of two): a count rounds up by less
than half, and a run sees few distinct keys, so a key's shapes repeat (what a CUDA graph per
key, ``step_graphs``, needs). The chunk count is a function of the lanes' bucketed parts, so
it is not rounded again (that would only add filler chunks). A key with ``votes == 0`` is a
**KV-only** step: the engine feeds tokens again to a shard of a large group that comes back
to the slots (``decoding_packed``); it decodes with the same shapes and computes no logits.

Everything per row that the device needs is built on the host, where the engine keeps it
(each slot's cached length and next input token, its group), into **one** int64 tensor
``(3, chunk rows)``: input token, cached length, votes row (a position among the active
groups, or the dummy row). It is pinned on CUDA and moved with one ``non_blocking`` copy; a
pinned block is reused only once its copy is done (PyTorch's host allocator records it).

``StepVotes`` is the device side: a function of the key, the lanes' slot buffers (state,
updated in place: each row's new KV at its length) and the step's inputs (the index, and
the public prior's logits and support padded to the votes rows). It runs ``decode``, then,
per chunk that holds a lane row, the logits, the clipping (or the public-difference rows,
or ``row_transform``) and one ``index_add_`` of the chunk's rows into the float64 votes by
their votes row. It never reads a value back to the host: the checks that ``clip_logits``
and ``difference_clip`` make per call (finite logits, non-empty supports) become a device
flag pair that the engine reads once, where it hands the votes to the sampler.

Exactness: every row is clipped in float32 from its own logits; each group's vote is the
float64 sum of its own rows (``index_add_``: row order on CPU, where it equals the
engine before buckets bit for bit; on CUDA the float64 additions may come in any order,
which rounds the sum at ~1e-16 relative, never a row). One ``index_add_`` per chunk, not
one for the whole step, so the float64 copy of the rows stays one chunk (the memory plan of
``engine_memory`` counts one chunk); the chunk count is part of the key.

Privacy: deterministic functions of public weights and the rows' own tokens; nothing here
samples, logs or keeps data. The key and the index depend on group sizes (private): never log
or release them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from dpsynrag.accounting.clipping import clip_rows
from dpsynrag.accounting.public_difference import difference_rows
from dpsynrag.transforms.decoding_stack import DecoderStack, PrefixKV

RowTransform = Callable[[torch.Tensor], torch.Tensor]
Tensors = tuple[torch.Tensor, ...]


def bucket(count: int) -> int:
    """The smallest bucket size >= ``count``: 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, ...

    Powers of two and three times powers of two: rounding up adds less than half.
    """
    if count <= 0:
        return 0
    size = 1
    while True:
        if size >= count:
            return size
        if size >= 2 and size * 3 // 2 >= count:
            return size * 3 // 2
        size *= 2


def unbucketed(count: int) -> int:
    """No rounding (the engine before buckets; tests compare the two)."""
    return max(0, count)


class StepKey(NamedTuple):
    """The shapes of one decode step (hashable): see the module docstring."""

    lanes: tuple[tuple[int, int], ...]  # (width, parts) of each lane decoded, by width
    chunks: int  # chunks of batch_rows rows through the layers
    votes: int  # rows of the float64 votes buffer, the dummy row last; 0: KV only


@dataclass
class LaneRows:
    """What a step reads of one lane: its first ``parts`` parts (host arrays, by slot)."""

    width: int
    parts: int
    group: np.ndarray  # owner group index, -1 for a hole
    length: np.ndarray  # tokens already in the slot
    token: np.ndarray  # the token fed at this step


@dataclass
class StepIndex:
    """A step's key and its one index tensor (host; pinned when ``pin``)."""

    key: StepKey
    index: torch.Tensor  # (3, chunks * batch_rows) int64: token, length, votes row
    occupied: int  # lane rows that belong to a group


def step_index(lanes: Sequence[LaneRows], positions: np.ndarray, active: int, *,
               part_rows: int, batch_rows: int, votes_rows: int, pin: bool) -> StepIndex:
    """The key and the index of a step over ``lanes`` (their parts already bucketed).

    ``positions[g]`` is group g's position among the ``active`` groups (its votes row).
    Hole and filler rows feed token 0 at length 0 and go to the dummy votes row.
    ``votes_rows == active == 0``: a KV-only step (no votes; the votes rows read 0).
    """
    rows = sum(lane.parts * part_rows for lane in lanes)
    chunks = -(-rows // batch_rows)
    kv_only = votes_rows == active == 0
    dummy = 0 if kv_only else votes_rows - 1
    if votes_rows <= active and not kv_only:
        raise ValueError("the votes buffer needs a row per active group and a dummy row")
    index = torch.zeros((3, chunks * batch_rows), dtype=torch.long, pin_memory=pin)
    view = index.numpy()
    view[2] = dummy
    start, occupied = 0, 0
    for lane in lanes:
        n = lane.parts * part_rows
        group = lane.group[:n]
        if group.size != n:
            raise ValueError("a lane holds fewer slots than its bucketed parts")
        busy = group >= 0
        view[0, start:start + n] = np.where(busy, lane.token[:n], 0)
        view[1, start:start + n] = np.where(busy, lane.length[:n], 0)
        view[2, start:start + n] = dummy if kv_only else np.where(
            busy, positions[np.maximum(group, 0)], dummy)
        occupied += int(busy.sum())
        start += n
    key = StepKey(lanes=tuple((lane.width, lane.parts) for lane in lanes), chunks=chunks,
                  votes=votes_rows)
    return StepIndex(key=key, index=index, occupied=occupied)


class StepVotes:
    """The device side of a step: ``(state, inputs) -> (votes, flags)`` for a key.

    ``state``: each decoded lane's slot buffer ``(layers, 2, slots, kvh, width, d)``, in
    the key's order (written in place). ``inputs``: the index on the device, then, with a
    public prior, its public logits and support ``(votes - 1, vocab)`` (rows past the active
    groups are padding). Returns the float64 votes ``(votes, vocab)`` (dummy row last) and
    two device booleans: every computed row's logits finite (on its support, with a prior),
    and, with a prior, every row's support non-empty. A key with ``votes == 0`` only feeds
    the token (decode writes each row's KV; no logits): empty votes, both flags true.
    """

    def __init__(self, stack: DecoderStack, prefix: PrefixKV | None, *, batch_rows: int,
                 part_rows: int, vocab_size: int, clip: float,
                 row_transform: RowTransform | None, prior: bool) -> None:
        self.stack, self.prefix = stack, prefix
        self.batch_rows, self.part_rows, self.vocab_size = batch_rows, part_rows, vocab_size
        self.clip, self.row_transform, self.prior = clip, row_transform, prior

    def __call__(self, key: StepKey, state: Tensors, inputs: Tensors) -> Tensors:
        index = inputs[0]
        tokens, lengths, owner = index[0], index[1], index[2]
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        start = 0
        for (_, count), slots in zip(key.lanes, state, strict=True):
            for p in range(count):
                parts.append((slots[:, :, p * self.part_rows:(p + 1) * self.part_rows],
                              lengths[start:start + self.part_rows]))
                start += self.part_rows
        hidden = self.stack.decode(self.prefix, parts, tokens, self.batch_rows)
        device = hidden.device
        if key.votes == 0:  # a KV-only step: the rows' new KV is all it is for
            return (torch.zeros((0, self.vocab_size), dtype=torch.float64, device=device),
                    torch.ones(2, dtype=torch.bool, device=device))
        votes = torch.zeros((key.votes, self.vocab_size), dtype=torch.float64, device=device)
        finite = torch.ones((), dtype=torch.bool, device=device)
        supported = torch.ones((), dtype=torch.bool, device=device)
        with torch.inference_mode():
            for c in range(0, start, self.batch_rows):  # chunks that hold a lane row
                logits = self.stack.logits(hidden[c:c + self.batch_rows])  # a fixed shape
                mine = owner[c:c + self.batch_rows]
                if self.prior:  # public-difference rows; hole and filler rows use row 0's
                    at = torch.where(mine == key.votes - 1, 0, mine)
                    public, support = inputs[1][at], inputs[2][at]
                    out = difference_rows(logits, public, support, self.clip)
                    supported = supported & support.any(dim=1).all()
                    # a document row's NaN votes zero; a NaN in public logits is an error
                    finite = finite & torch.isfinite(public.masked_fill(~support, 0)).all()
                elif self.row_transform is None:
                    out = clip_rows(logits, self.clip)  # a non-finite row votes zero
                else:
                    out = self.row_transform(logits)
                n = min(self.batch_rows, start - c)  # filler rows after the lanes' rows: none
                votes.index_add_(0, mine[:n], out[:n].to(torch.float64))
            flags = torch.stack([finite, supported])
        return votes, flags
