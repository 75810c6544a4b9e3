"""Greedy (temperature 0) decoding with fixed shapes: an answer depends on its prompt alone.

Batch independence (a greedy answer that feeds a vote or a histogram must depend on its own
prompt alone: DP-KSA's one-document answers are votes, per-document keywords feed the
histogram): every generate call has the fixed shape ``batch_size`` x a width bucket. A prompt
of n tokens is left-padded to :func:`bucket_width` ``(n, pad_multiple)`` (a function of n
only, always at least one padding token, so every batch takes the masked attention path
whatever its other rows are), prompts are batched with others of the same bucket, and a short
last batch is filled with copies of its first row (their output is discarded). So each row is
computed with the same shapes, mask layout and kernels whatever the other rows are (rows never
mix in a causal LM); otherwise one added document could flip another's near-tie argmax (on a
GPU, a different batch shape rounds differently).

The fixed-shape switch, ``batch_size=None``: one row per call on CPU (no filler rows to
compute) and :data:`DEFAULT_BATCH_GPU` rows on CUDA. Nothing here is random or charged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from dpsynrag.models.protocols import LLM

__all__ = [
    "DEFAULT_BATCH_GPU",
    "answer_questions",
    "bucket_width",
    "default_batch_size",
    "generate_greedy",
]

DEFAULT_BATCH_GPU = 8


def bucket_width(length: int, pad_multiple: int) -> int:
    """Padded width of a prompt of ``length`` tokens: the next multiple of ``pad_multiple``
    strictly above ``length`` (at least one padding token). A function of the length only."""
    return (length // pad_multiple + 1) * pad_multiple


def default_batch_size(device: torch.device | str) -> int:
    """Rows per generate call when none is given: 1 on CPU, :data:`DEFAULT_BATCH_GPU` on CUDA."""
    return DEFAULT_BATCH_GPU if str(device).startswith("cuda") else 1


def generate_greedy(
    llm: LLM,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    batch_size: int | None = None,
    pad_multiple: int,
    on_batch: Callable[[int], None] | None = None,
) -> list[str]:
    """Greedy completions of token-id prompts, batched with fixed shapes (module docstring).

    ``batch_size`` None: the device's default (:func:`default_batch_size`). ``on_batch(n)``
    is called after each batch with the number of real prompts it finished. Decoding stops
    at EOS or after ``max_new_tokens``; only new tokens are decoded.
    """
    import torch

    if batch_size is None:
        batch_size = default_batch_size(llm.device)
    for name, value in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size),
                        ("pad_multiple", pad_multiple)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    tokenizer, model = llm.tokenizer, llm.model
    eos = sorted(llm.eos_token_ids)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = eos[0] if eos else 0
    buckets: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        if not ids:
            raise ValueError("empty prompt")
        buckets.setdefault(bucket_width(len(ids), pad_multiple), []).append(i)
    answers: list[str] = [""] * len(prompts)
    for width in sorted(buckets):
        members = buckets[width]
        for start in range(0, len(members), batch_size):
            rows = members[start:start + batch_size]
            batch = [list(prompts[i]) for i in rows]
            batch += [batch[0]] * (batch_size - len(batch))  # filler rows: output discarded
            input_ids = torch.full((batch_size, width), pad, dtype=torch.long)
            mask = torch.zeros((batch_size, width), dtype=torch.long)
            for r, ids in enumerate(batch):
                input_ids[r, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
                mask[r, width - len(ids):] = 1
            with torch.inference_mode():
                out = model.generate(
                    input_ids=input_ids.to(llm.device), attention_mask=mask.to(llm.device),
                    do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                    pad_token_id=pad, eos_token_id=eos or None, temperature=None, top_p=None,
                    top_k=None)
            generated = out[:, width:].tolist()
            for r, i in enumerate(rows):
                tokens = generated[r]
                for n, token in enumerate(tokens):
                    if token in eos:
                        tokens = tokens[:n]
                        break
                answers[i] = tokenizer.decode(tokens, skip_special_tokens=True)
            if on_batch is not None:
                on_batch(len(rows))
    return answers


def answer_questions(llm: LLM, prompts: Sequence[str], *, max_new_tokens: int = 24,
                     batch_size: int | None = None, pad_multiple: int = 16) -> list[str]:
    """Greedy answers to user messages, one stripped string per prompt.

    Each prompt becomes one chat user turn (``llm.chat_prompt_ids``), then
    :func:`generate_greedy` (so a prompt's answer does not depend on the other prompts).
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not a string")
    ids = [llm.chat_prompt_ids(str(p)) for p in prompts]
    return [answer.strip() for answer in generate_greedy(
        llm, ids, max_new_tokens=max_new_tokens, batch_size=batch_size,
        pad_multiple=pad_multiple)]
