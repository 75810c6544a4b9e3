"""The straightforward private-prediction loop: one group at a time, Hugging Face KV cache.

Works for any Hugging Face causal LM (it is the engine for architectures the packed engine
does not drive) and is the baseline the benchmark compares against. Each row of a group runs
on its own (batch of one, no padding, its own KV cache); each step feeds the group's token
to every row through ``past_key_values``, and each row's logits are clipped (or
transformed) on their own.

Privacy: the same mechanism as the packed engine: z_n = sum_{d in group} clip_c(logits_d),
summed in float64, one sampler call per step per group; an empty group is sampled from the
zero vector. Batch invariance: a row's computation has shapes fixed by its own length only,
so adding a document to the group (or to another group) never changes another row's
clipped logits or greedy vote; batching a group's rows would pad them to the group's
longest row and let one document change another's kernels.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from dpsynrag.accounting.clipping import clip_logits
from dpsynrag.models.protocols import CausalLM
from dpsynrag.transforms.kv_cache import feed_token, prefill_rows
from dpsynrag.transforms.public_prior import PublicPrior

Sampler = Callable[[torch.Tensor, list[int]], np.ndarray]

# the per-row steps the loop calls, by module name (a batch-invariance test spies on _prefill)
_prefill, _feed = prefill_rows, feed_token


@torch.inference_mode()
def reference_tokens(
    model: CausalLM,
    groups: Sequence[Sequence[Sequence[int]]],
    *,
    max_new_tokens: int,
    clip: float,
    sampler: Sampler,
    eos_ids: frozenset[int],
    vocab_size: int,
    device: torch.device,
    timings: dict[str, float] | None = None,
    row_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    prior: PublicPrior | None = None,
    released: Sequence[Sequence[int]] | None = None,
) -> list[list[int]]:
    """Generate one token list per group (EOS excluded); ``timings`` gets prefill/decode s.

    ``released``: per group, tokens a resumed build already released (an EOS only last): the
    group continues after them (its rows are prefilled with them, no vote for any of them),
    or is not run when they end (EOS, or ``max_new_tokens`` of them).

    With a ``prior`` (``transforms.public_prior``) each row is its public-difference row and
    the votes get the public term and the public support, exactly as in the packed engine.
    """
    if prior is not None and row_transform is not None:
        raise ValueError("a public prior and a row transform exclude each other")
    first = torch.zeros(1, dtype=torch.long, device=device)
    clock = {"prefill_seconds": 0.0, "decode_seconds": 0.0, "row_steps": 0.0}
    results: list[list[int]] = []
    if released is not None and len(released) != len(groups):
        raise ValueError("one list of released tokens per group is required")
    for gi, rows in enumerate(groups):
        tokens = [] if released is None else [int(t) for t in released[gi]]
        if len(tokens) > max_new_tokens or any(t in eos_ids for t in tokens[:-1]):
            raise ValueError("released tokens hold at most T tokens, EOS only last")
        ended = bool(tokens) and tokens[-1] in eos_ids
        if ended or len(tokens) == max_new_tokens:
            results.append(tokens[:-1] if ended else tokens)
            continue
        rows = [(*row, *tokens) for row in rows]
        states: list[dict[str, Any]] = []
        for _ in range(max_new_tokens - len(tokens)):
            step = None if prior is None else prior.step([gi], [tokens])
            if rows:
                tick = time.perf_counter()
                if not states:
                    outputs = [_prefill(model, [row], device) for row in rows]
                    clock["prefill_seconds"] += time.perf_counter() - tick
                    tick = time.perf_counter()
                else:
                    outputs = [_feed(model, state, tokens[-1]) for state in states]
                states = [state for _, state in outputs]
                votes = torch.zeros((1, vocab_size), dtype=torch.float64, device=device)
                for logits, _ in outputs:  # each row alone: shape (1, vocab)
                    if step is not None:
                        row_out = step.rows(logits, first)
                    elif row_transform is None:
                        row_out = clip_logits(logits, clip)
                    else:
                        row_out = row_transform(logits)
                    votes += row_out.to(torch.float64)
                clock["row_steps"] += len(rows)
            else:
                tick = time.perf_counter()
                votes = torch.zeros((1, vocab_size), dtype=torch.float64, device=device)
            if step is not None:
                votes = step.votes(votes)
            token = int(np.asarray(sampler(votes, [gi]), dtype=np.int64).reshape(-1)[0])
            clock["decode_seconds"] += time.perf_counter() - tick
            if token in eos_ids:
                break
            tokens.append(token)
        results.append(tokens)
    if timings is not None:
        timings.update(clock)
    return results
