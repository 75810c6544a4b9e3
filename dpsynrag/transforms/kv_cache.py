"""Rows through a Hugging Face causal LM's own KV cache: prefill once, then one token a step.

The reference engine (``decoding_reference``), the public prior (``public_prior``) and the
query-time public stream (``query.public_stream``) all run rows this way. A state is
``{"mask", "next", "cache"}``: the attention mask so far, each row's next position and the
model's ``past_key_values``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dpsynrag.models.protocols import CausalLM

__all__ = ["feed_token", "prefill_rows"]


def prefill_rows(
    model: CausalLM, rows: Sequence[Sequence[int]], device: torch.device
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Run left-padded ``rows`` once; their next-token logits and a cache state for feeding."""
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(list(row), dtype=torch.long)
        mask[i, width - len(row):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                logits_to_keep=1)
    state = {"mask": mask, "next": positions[:, -1:] + 1, "cache": out.past_key_values}
    return out.logits[:, -1].float(), state


def feed_token(model: CausalLM, state: dict[str, Any],
               token: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """Append ``token`` to every row of ``state``; the next-token logits and the new state."""
    mask = state["mask"]
    mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    ids = torch.full_like(state["next"], token)
    out = model(input_ids=ids, attention_mask=mask, position_ids=state["next"],
                past_key_values=state["cache"], use_cache=True)
    state = {"mask": mask, "next": state["next"] + 1, "cache": out.past_key_values}
    return out.logits[:, -1].float(), state
