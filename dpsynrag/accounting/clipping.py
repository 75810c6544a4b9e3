"""The logit clipping transform of DP-SynRAG Appendix A.2 (Grislain's transform, alpha = 1).

For each row l (one document's next-token logits):
    l_exp  = exp(l - max l)                      (values in (0, 1], max exactly 1)
    l_cent = l_exp - (max l_exp + min l_exp) / 2
    clip_c = l_cent * min(1, c / ||l_cent||_inf), then clamped to [-c, c]

A row with a NaN or infinite logit votes zero (a constant row): whatever one document's
logits are, its vote stays in the bound, and one bad document cannot stop a build after its
charge. Every clipped row lies in [-c, c]^|V|, so adding or removing one document moves the
summed vote vector by at most c in every coordinate: the l_inf sensitivity that the token sampler's
cost (T * (c/tau)^2 / 2 per cluster) relies on. The clamp makes that bound hold after float
rounding too.
"""

from __future__ import annotations

import torch


def clip_logits(logits: torch.Tensor, c: float) -> torch.Tensor:
    """Clip a batch of logit rows (rows = documents) to l_inf norm <= c, in float32.

    Accepts a 1-D row or a 2-D ``(rows, vocab)`` batch of any float dtype; returns float32 on
    the same device. A constant row, and a row with a NaN or infinite logit, map to zeros.
    """
    if not (c > 0 and c < float("inf")):
        raise ValueError("the clip bound c must be a finite positive number")
    if logits.dim() not in (1, 2):
        raise ValueError("clip_logits expects a (vocab,) row or a (rows, vocab) batch")
    rows = logits.to(torch.float32)
    rows = rows.unsqueeze(0) if rows.dim() == 1 else rows
    clipped = clip_rows(rows, c)
    return clipped.squeeze(0) if logits.dim() == 1 else clipped


def clip_rows(rows: torch.Tensor, c: float) -> torch.Tensor:
    """``clip_logits``' arithmetic on a float32 ``(rows, vocab)`` batch, without its checks.

    For callers that check ``c`` themselves (the packed engine's step); ``c`` must be finite
    and positive, or the result is meaningless. A row with a NaN or infinite logit votes zero.
    """
    rows = torch.where(torch.isfinite(rows).all(dim=-1, keepdim=True), rows,
                       torch.zeros_like(rows))
    # exp(l - max) - 1 via expm1: the constant -1 cancels in the centring below, and expm1
    # keeps full relative precision for rows whose logits are close together (exp would
    # round to ~1 and the centring would cancel catastrophically in float32).
    shifted = torch.expm1(rows - rows.amax(dim=-1, keepdim=True))
    top = shifted.amax(dim=-1, keepdim=True)
    bottom = shifted.amin(dim=-1, keepdim=True)
    centred = shifted - (top + bottom) / 2
    half_range = centred.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(
        half_range > 0,
        torch.clamp(c / torch.clamp(half_range, min=torch.finfo(torch.float32).tiny), max=1.0),
        torch.zeros_like(half_range),
    )
    bound = float32_at_most(c)
    return torch.clamp(centred * scale, min=-bound, max=bound)


def float32_at_most(value: float) -> float:
    """The largest float32 that does not exceed ``value`` (float32(0.1) rounds *up*)."""
    as32 = torch.tensor(value, dtype=torch.float32)
    if float(as32) > value:
        as32 = torch.nextafter(as32, torch.tensor(0.0, dtype=torch.float32))
    return float(as32)
