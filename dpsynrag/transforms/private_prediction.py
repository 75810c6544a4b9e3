"""DP-SynRAG stage (d): private prediction of one synthetic text per group of documents.

For each group (cluster S_r) and each step n = 1..T:

    z_n = sum_{d in S_r} clip_c( LLM(prompt(d), y_{<n}) )      (float32 rows, float64 sum)
    y_n ~ softmax(z_n / tau)                                   (exact; no warper of any kind)

Every document of the group is rephrased with the same prompt and the whole group shares the
generated prefix y_{<n}. Each clipped row lies in [-c, c]^|V|, so adding or removing one
document moves z_n by at most c per coordinate: the per-token exponential mechanism costs
rho = (c / tau)^2 / 2 zCDP, T of them per group, and a document in at most L groups pays L
groups' worth (overlapping parallel composition; ``accounting.costs``).

A group stops at its sampled end-of-sequence token (not part of the text) or after
``max_new_tokens`` tokens. Group size is private, so an **empty group is sampled like any
other**: its vote is the zero vector and its tokens are uniform draws; skipping it would
reveal emptiness.

``aggregated_logits`` computes z_n row by row with no cache: the audit reference. The fast
engine (``decoding_packed``, Llama-family models) computes the same values; other
architectures run the straightforward per-group loop (``decoding_reference``).

Nothing here logs document text, logits, or counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch

from dpsynrag.accounting.clipping import clip_logits
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.token_sampling import sample_tokens
from dpsynrag.transforms import decoding_llama
from dpsynrag.transforms.decoding_packed import PackedEngine, RowTransform, StepReport
from dpsynrag.transforms.decoding_reference import reference_tokens

PLACEHOLDER = "{document}"
DEFAULT_BATCH_ROWS_CPU = 128
DEFAULT_BATCH_ROWS_GPU = 1024

Sampler = Callable[[torch.Tensor, list[int]], np.ndarray]

__all__ = ["StepReport", "aggregated_logits", "private_predict", "render_prompt"]


def render_prompt(prompt: str, document: str) -> str:
    """The user turn for one document: ``{document}`` replaced verbatim (no str.format)."""
    if prompt.count(PLACEHOLDER) != 1:
        raise ValueError("the prompt must contain the placeholder {document} exactly once")
    return prompt.replace(PLACEHOLDER, document)


def _check(clip: float, temperature: float | None, max_new_tokens: int) -> None:
    if not (isinstance(clip, int | float) and math.isfinite(clip) and clip > 0):
        raise ValueError("clip must be a finite positive number")
    if temperature is not None and not (math.isfinite(temperature) and temperature > 0):
        raise ValueError("temperature must be a finite positive number (greedy is not DP)")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError("max_new_tokens must be a non-negative integer")


def response_prefix_ids(llm: Any, response_prefix: str) -> list[int]:
    """Token ids of a public text that every reply starts with (no special tokens)."""
    if not response_prefix:
        return []
    return [int(t) for t in llm.tokenizer.encode(response_prefix, add_special_tokens=False)]


@torch.inference_mode()
def aggregated_logits(
    llm: Any, docs: Sequence[str], *, prompt: str, generated: Sequence[int], clip: float,
    response_prefix: str = "",
) -> torch.Tensor:
    """z = sum over ``docs`` of clip_c(next-token logits after ``generated``), float64 (vocab,).

    The audit reference: each document's full sequence (chat prompt + ``generated``) runs
    through the model on its own, no cache and no padding; rows are clipped in float32 and
    summed in float64. No documents give the zero vector.
    """
    _check(clip, None, 0)
    total = torch.zeros(llm.vocab_size, dtype=torch.float64)
    for doc in docs:
        ids = [*llm.chat_prompt_ids(render_prompt(prompt, doc)),
               *response_prefix_ids(llm, response_prefix), *map(int, generated)]
        input_ids = torch.tensor([ids], dtype=torch.long, device=llm.device)
        logits = llm.model(input_ids=input_ids).logits[0, -1]
        total += clip_logits(logits, clip).to(device="cpu", dtype=torch.float64)
    return total


def private_predict(
    llm: Any,
    groups: Sequence[Sequence[str]],
    *,
    prompt: str | Sequence[str],
    max_new_tokens: int,
    clip: float,
    temperature: float,
    rng: RandomSource,
    batch_rows: int | None = None,
    on_step: Callable[[StepReport], None] | None = None,
    sampler: Sampler | None = None,
    engine: Literal["auto", "packed", "reference"] = "auto",
    response_prefix: str | Sequence[str] = "",
    row_transform: RowTransform | None = None,
) -> list[str]:
    """One synthetic text per group: DP-SynRAG private prediction (see the module docstring).

    ``prompt`` holds ``{document}`` exactly once; each document's user turn is
    ``prompt.replace("{document}", doc)`` through ``llm.chat_prompt_ids``. ``sampler`` (for a
    privacy-ledger wrapper) receives the ``(active_groups, vocab)`` float64 votes and the
    active groups' indices and returns one token id per group; the default draws
    ``sample_tokens(votes, temperature, rng)``. Its tokens are used as they are, never redrawn.
    An empty group is still sampled (from the zero vector) for up to ``max_new_tokens`` steps.

    ``batch_rows`` bounds the rows decoded together (default 128 on CPU, 1024 on GPU; raised
    to the largest group, whose rows must decode together). ``response_prefix`` is public
    text that every reply starts with (appended after the chat prompt, part of the returned
    text): it costs nothing, since it does not depend on the data, and spares the first
    sampled tokens, which otherwise need a consensus of their own. A sequence gives one public
    prefix per group (e.g. naming the cluster's released keyword); likewise ``prompt`` may be
    one prompt per group (query-time DP-RAG: each query's question). ``row_transform``
    replaces the clipping of each row (e.g. a one-hot greedy vote for Koga et al.); the
    caller then owns the sensitivity argument. ``on_step`` receives a
    ``StepReport`` after each step of the packed engine: it holds counts derived from private
    data, for progress bars and benchmarks in this process only; never log it.
    """
    _check(clip, temperature, max_new_tokens)
    prompts = [prompt] * len(groups) if isinstance(prompt, str) else list(prompt)
    if len(prompts) != len(groups):
        raise ValueError("one prompt per group is required")
    if any(p.count(PLACEHOLDER) != 1 for p in prompts) or (isinstance(prompt, str)
                                                          and prompt.count(PLACEHOLDER) != 1):
        raise ValueError("the prompt must contain the placeholder {document} exactly once")
    if batch_rows is not None and batch_rows < 1:
        raise ValueError("batch_rows must be positive")
    if sampler is None:
        def sampler(votes: torch.Tensor, _active: list[int]) -> np.ndarray:
            return sample_tokens(votes, temperature, rng)

    prefixes = [response_prefix] * len(groups) if isinstance(response_prefix, str) \
        else list(response_prefix)
    if len(prefixes) != len(groups):
        raise ValueError("one response prefix per group is required")
    forced_of = {p: tuple(response_prefix_ids(llm, p)) for p in set(prefixes)}
    prompt_ids: dict[tuple[str, str], tuple[int, ...]] = {}
    token_ids: dict[tuple[str, str, str], tuple[int, ...]] = {}
    rows: list[list[tuple[int, ...]]] = []
    for group, group_prompt, prefix in zip(groups, prompts, prefixes, strict=True):
        rows.append([])
        for doc in group:
            if (group_prompt, doc) not in prompt_ids:
                prompt_ids[(group_prompt, doc)] = tuple(
                    llm.chat_prompt_ids(render_prompt(group_prompt, doc)))
            if (group_prompt, doc, prefix) not in token_ids:
                token_ids[(group_prompt, doc, prefix)] = (*prompt_ids[(group_prompt, doc)],
                                                          *forced_of[prefix])
            rows[-1].append(token_ids[(group_prompt, doc, prefix)])
    eos = frozenset(int(t) for t in llm.eos_token_ids)
    device = torch.device(llm.device)
    packed = engine == "packed" or (engine == "auto" and decoding_llama.supports(llm.model))
    if packed:
        if batch_rows is None:
            batch_rows = DEFAULT_BATCH_ROWS_GPU if device.type == "cuda" else \
                DEFAULT_BATCH_ROWS_CPU
        prefix_len = _shared_prefix_length(list(token_ids.values()))
        some_row = next(iter(token_ids.values()), ())
        tokens = PackedEngine(
            decoding_llama.LlamaStack(llm.model), rows, prefix_len=prefix_len,
            prefix_ids=list(some_row[:prefix_len]), max_new_tokens=max_new_tokens, clip=clip,
            sampler=sampler, eos_ids=eos, batch_rows=batch_rows, vocab_size=llm.vocab_size,
            on_step=on_step, row_transform=row_transform).run()
    else:
        tokens = reference_tokens(
            llm.model, rows, max_new_tokens=max_new_tokens, clip=clip, sampler=sampler,
            eos_ids=eos, vocab_size=llm.vocab_size, device=device, row_transform=row_transform)
    return [_decode(llm.tokenizer, [*forced_of[p], *t]) for p, t in zip(prefixes, tokens,
                                                                        strict=True)]


def _shared_prefix_length(rows: list[tuple[int, ...]]) -> int:
    """Longest common token prefix of all rows, leaving every row at least one own token."""
    if not rows:
        return 0
    first = rows[0]
    length = min(len(r) for r in rows) - 1
    for row in rows[1:]:
        i = 0
        while i < length and row[i] == first[i]:
            i += 1
        length = i
    return max(length, 0)


def _decode(tokenizer: Any, tokens: list[int]) -> str:
    """Text of the sampled tokens (post-processing; special tokens are dropped)."""
    known = len(tokenizer)
    return tokenizer.decode([t for t in tokens if t < known], skip_special_tokens=True)
