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

Memory: at most ``batch_rows`` rows (public) hold a KV cache at any time, whatever a group's
size (private). A group of at most ``batch_rows`` rows keeps every row's cache across its
steps. A larger group keeps the caches of its first ``batch_rows - 1`` rows and streams the
others one at a time through each step: such a row is rebuilt by the very calls a kept row
went through (prefill of the prompt and the released tokens, then one feed per token
generated so far, the earlier feeds' logits dropped), clipped, added to the float64 votes
and dropped. A streamed row therefore gives the same clipped vector as a kept one, and rows
are added in the same order, so the votes equal those of the group with every cache kept.
The price is time: at step k (k tokens generated in this call) a streamed row costs one
prefill and k feeds instead of one feed, i.e. T prefills and T(T-1)/2 feeds over T steps.
No row's logits are kept past its addition (memory is a few vocabulary-sized vectors).
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

# the rows holding a KV cache at once when the caller names no bound (public)
DEFAULT_BATCH_ROWS = 128

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
    batch_rows: int | None = None,
) -> list[list[int]]:
    """Generate one token list per group (EOS excluded).

    ``timings`` gets ``prefill_seconds`` (the prefill calls, replays included),
    ``decode_seconds`` (the rest of the steps), and counts: ``row_steps`` (rows voting, summed
    over steps), ``replayed_row_steps`` (the calls that rebuilt streamed rows' caches: a
    prefill and the feeds before the voting one) and ``peak_rows`` (the most rows holding a
    KV cache at once, at most ``batch_rows``). They derive from private group sizes: for
    benchmarks and tests in this process, never to be logged.

    ``batch_rows`` (public; ``DEFAULT_BATCH_ROWS`` when ``None``) bounds the rows holding a KV
    cache at once: a larger group streams its rows beyond ``batch_rows - 1`` through each
    step (see the module docstring); the votes and tokens are those of the group in one piece.

    ``released``: per group, tokens a resumed build already released (an EOS only last): the
    group continues after them (its rows are prefilled with them, no vote for any of them),
    or is not run when they end (EOS, or ``max_new_tokens`` of them).

    With a ``prior`` (``transforms.public_prior``) each row is its public-difference row and
    the votes get the public term and the public support, exactly as in the packed engine.
    """
    if prior is not None and row_transform is not None:
        raise ValueError("a public prior and a row transform exclude each other")
    rows_bound = DEFAULT_BATCH_ROWS if batch_rows is None else int(batch_rows)
    if rows_bound < 1:
        raise ValueError("batch_rows must be positive")
    first = torch.zeros(1, dtype=torch.long, device=device)
    clock = {"prefill_seconds": 0.0, "decode_seconds": 0.0, "row_steps": 0.0,
             "replayed_row_steps": 0.0, "peak_rows": 0.0}
    results: list[list[int]] = []
    if released is not None and len(released) != len(groups):
        raise ValueError("one list of released tokens per group is required")

    def prefill(row: tuple[int, ...]) -> tuple[torch.Tensor, dict[str, Any]]:
        tick = time.perf_counter()
        out = _prefill(model, [row], device)
        clock["prefill_seconds"] += time.perf_counter() - tick
        return out

    for gi, group_rows in enumerate(groups):
        tokens = [] if released is None else [int(t) for t in released[gi]]
        if len(tokens) > max_new_tokens or any(t in eos_ids for t in tokens[:-1]):
            raise ValueError("released tokens hold at most T tokens, EOS only last")
        ended = bool(tokens) and tokens[-1] in eos_ids
        if ended or len(tokens) == max_new_tokens:
            results.append(tokens[:-1] if ended else tokens)
            continue
        resumed_at = len(tokens)
        rows = [(*row, *tokens) for row in group_rows]
        # rows 0 .. kept-1 keep their cache; the rest are streamed (public bound: rows_bound)
        kept = len(rows) if len(rows) <= rows_bound else rows_bound - 1
        states: list[dict[str, Any]] = []
        for _ in range(max_new_tokens - resumed_at):
            step = None if prior is None else prior.step([gi], [tokens])
            tick = time.perf_counter()
            prefill_before = clock["prefill_seconds"]
            votes = torch.zeros((1, vocab_size), dtype=torch.float64, device=device)
            generated = tokens[resumed_at:]
            for ri, row in enumerate(rows):  # row order: the sum's order never changes
                if ri < kept and len(states) > ri:
                    logits, states[ri] = _feed(model, states[ri], tokens[-1])
                elif ri < kept:
                    logits, state = prefill(row)
                    states.append(state)
                else:  # streamed: rebuilt by a kept row's own calls, then dropped
                    logits, state = prefill(row)
                    clock["peak_rows"] = max(clock["peak_rows"], len(states) + 1)
                    for token in generated:
                        logits, state = _feed(model, state, token)
                    del state
                    clock["replayed_row_steps"] += len(generated)
                clock["peak_rows"] = max(clock["peak_rows"], len(states))
                if step is not None:
                    row_out = step.rows(logits, first)
                elif row_transform is None:
                    row_out = clip_logits(logits, clip)
                else:
                    row_out = row_transform(logits)  # each row alone: shape (1, vocab)
                votes += row_out.to(torch.float64)
                del logits, row_out
            clock["row_steps"] += len(rows)
            if step is not None:
                votes = step.votes(votes)
            token = int(np.asarray(sampler(votes, [gi]), dtype=np.int64).reshape(-1)[0])
            clock["decode_seconds"] += (time.perf_counter() - tick
                                        - (clock["prefill_seconds"] - prefill_before))
            if token in eos_ids:
                break
            tokens.append(token)
        del states
        results.append(tokens)
    if timings is not None:
        timings.update(clock)
    return results
