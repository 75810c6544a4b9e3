"""Public-difference clipping on a public support: the token sampler of issue 15.

For one group at one step, ``public`` is the model's next-token logits phi_pub on a public
prompt (no private document) followed by the group's released prefix, and the support V_t is
chosen from public values only (``public_support``: the public top-k, EOS, and the next
tokens of released candidate strings). Each document i of the group contributes

    d_i       = log_softmax_{V_t}(phi_i) - log_softmax_{V_t}(phi_pub)      (on V_t)
    row_i(v)  = clamp(d_i(v), -c, c)  for v in V_t, 0 elsewhere

(how much more, in log-probability on the support, this document's model likes the token than
the public model does: a token both like equally gets 0 and is left to the public prior; one
the document likes more gets up to +c), and the token is drawn from

    z(v) = (tau / tau_pub) phi_pub(v) + sum_i row_i(v)   on V_t,   -inf elsewhere
    y ~ softmax(z / tau)

i.e. the exponent is phi_pub / tau_pub + sum_i row_i / tau: the public prior at its own
public temperature, steered by the documents.

Privacy cost: unchanged from the plain token sampler, rho = (c / tau)^2 / 2 zCDP per token.
Every row lies in [-c, c]^|V| whatever the document (the clamp holds after float rounding:
``float32_at_most``), so adding or removing one document moves every coordinate of z by at
most c: the exponential mechanism on the candidate set V_t with a utility of range 2c, which
is (2c/tau)-bounded-range, hence (c/tau)^2/2-zCDP. V_t, phi_pub and tau_pub depend on the
public prompt, the public model and the released tokens only, so the restriction to V_t and
the public term are free. Nothing here ranks or truncates by a private score: the support
never reads a document's logits (a test changes the private rows and checks the support).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from dpsynrag.accounting.clipping import float32_at_most

__all__ = ["difference_clip", "difference_rows", "prior_votes", "public_support"]


def public_support(public_logits: torch.Tensor, top_k: int,
                   extra: Sequence[Iterable[int]]) -> torch.Tensor:
    """The sampling support of each group: a ``(groups, vocab)`` boolean mask.

    The ``top_k`` largest public logits of each row (ties broken by the lower token id: a
    stable sort, so the set is a deterministic function of the public logits), plus that
    row's ``extra`` token ids (EOS, the next tokens of released candidates). Public values in,
    public set out: no private score is read.
    """
    if public_logits.dim() != 2:
        raise ValueError("public_support expects a (groups, vocab) batch of public logits")
    if len(extra) != public_logits.shape[0]:
        raise ValueError("one set of extra token ids per group is required")
    if not (isinstance(top_k, int) and top_k >= 1):
        raise ValueError("top_k must be a positive integer")
    groups, vocab = public_logits.shape
    order = torch.sort(public_logits.to(torch.float32), dim=1, descending=True,
                       stable=True).indices[:, :min(top_k, vocab)]
    support = torch.zeros((groups, vocab), dtype=torch.bool, device=public_logits.device)
    support.scatter_(1, order, True)
    for row, ids in enumerate(extra):
        kept = [int(t) for t in ids if 0 <= int(t) < vocab]
        if kept:
            support[row, torch.tensor(kept, dtype=torch.long, device=support.device)] = True
    return support


def difference_clip(private_logits: torch.Tensor, public_logits: torch.Tensor,
                    support: torch.Tensor, c: float) -> torch.Tensor:
    """Each document row's public-difference vote, float32 ``(rows, vocab)`` in [-c, c].

    ``private_logits`` are the rows' next-token logits, ``public_logits`` and ``support`` the
    public logits and support of each row's group (already gathered row by row). Off the
    support a row is 0. A function of that row's logits and public values only.
    Privacy: the l_inf bound c per row gives rho = (c / tau)^2 / 2 per token (module docstring).
    """
    if not (c > 0 and c < float("inf")):
        raise ValueError("the clip bound c must be a finite positive number")
    if private_logits.shape != public_logits.shape or private_logits.shape != support.shape \
            or private_logits.dim() != 2:
        raise ValueError("private logits, public logits and support must be (rows, vocab) "
                         "batches of one shape")
    if not support.any(dim=1).all():
        raise ValueError("every row needs a non-empty support")
    private = private_logits.to(torch.float32)
    public = public_logits.to(torch.float32)
    if not torch.isfinite(public[support]).all():  # public values: refusing reveals nothing
        raise ValueError("public logits contain NaN or infinity on the support")
    return difference_rows(private, public, support, c)


def difference_rows(private: torch.Tensor, public: torch.Tensor, support: torch.Tensor,
                    c: float) -> torch.Tensor:
    """``difference_clip``' arithmetic on float32 rows of one shape, without its checks.

    For callers that check the inputs themselves without a host read per call (the packed
    engine folds the support and finiteness checks into a device flag it reads once per
    step); ``c`` must be finite and positive, every support row non-empty and the public
    logits finite on the support, or the result is meaningless. A document row with a NaN or
    infinite logit on the support votes zero (its logits are taken as the public ones).
    """
    off = ~support  # -inf off the support: masked_fill takes the scalar, no host tensor
    bad = ~torch.isfinite(private.masked_fill(off, 0.0)).all(dim=1, keepdim=True)
    private = torch.where(bad, public, private)
    diff = torch.log_softmax(private.masked_fill(off, float("-inf")), dim=1) \
        - torch.log_softmax(public.masked_fill(off, float("-inf")), dim=1)
    bound = float32_at_most(c)
    rows = torch.clamp(torch.where(support, diff, torch.zeros_like(diff)), min=-bound,
                       max=bound)
    return torch.where(support, rows, torch.zeros_like(rows))


def prior_votes(summed_rows: torch.Tensor, public_logits: torch.Tensor, support: torch.Tensor,
                public_scale: float) -> torch.Tensor:
    """z = public_scale * phi_pub + sum of rows on the support, -inf off it (float64).

    ``public_scale`` is tau / tau_pub (public). Sampling softmax(z / tau) then draws from
    exactly the mechanism of the module docstring; an empty group gets the public prior alone.
    """
    if not (public_scale > 0 and public_scale < float("inf")):
        raise ValueError("the public scale tau / tau_pub must be a finite positive number")
    if summed_rows.shape != public_logits.shape or summed_rows.shape != support.shape:
        raise ValueError("votes, public logits and support must have one shape")
    votes = summed_rows.to(torch.float64) + public_scale * public_logits.to(torch.float64)
    return torch.where(support, votes, torch.full_like(votes, float("-inf")))
