"""DP-SynRAG stage (e): the LLM decides YES/NO whether each synthetic text is worth keeping.

Privacy: none spent. The inputs are the synthetic texts (already DP outputs of stage (d)), the
public model and a public prompt, so the decisions are post-processing. No ledger.

Decision rule (deterministic, one forward pass per text, no sampling): the user turn is the
prompt with ``{document}`` replaced by the text; the model's next-token logits at the start of
the reply are compared between the YES side and the NO side, each side scored by its best
token among the first tokens of the spellings in ``YES_VARIANTS`` / ``NO_VARIANTS``. A text is
kept when YES scores strictly higher (a tie drops it).

Texts are batched with left padding, an attention mask and explicit position ids, so each row's
logits are those of the text run on its own (up to float round-off).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dpsynrag.models.protocols import LLM, CausalLM, Tokenizer
from dpsynrag.prompts.templates import PLACEHOLDER, load_prompt

YES_VARIANTS = ("YES", "Yes", "yes", " YES", " Yes", " yes")
NO_VARIANTS = ("NO", "No", "no", " NO", " No", " no")

__all__ = ["answer_token_ids", "decision_logits", "self_filter"]


def _check_prompt(prompt: str) -> str:
    if prompt.count(PLACEHOLDER) != 1:
        raise ValueError("the self-filter prompt must contain the placeholder {document} "
                         "exactly once")
    return prompt


def answer_token_ids(tokenizer: Tokenizer,
                     vocab_size: int | None = None) -> tuple[list[int], list[int]]:
    """Token ids that start a YES answer and a NO answer.

    For each spelling the first token of its encoding is taken (for tokenizers that split
    "YES" into "Y" + "ES", the "Y"); unknown-token ids, ids beyond ``vocab_size`` and ids that
    start both a YES and a NO spelling are dropped. Raises ``ValueError`` if a side is empty.
    """
    unk = getattr(tokenizer, "unk_token_id", None)

    def first_ids(variants: Sequence[str]) -> set[int]:
        ids: set[int] = set()
        for variant in variants:
            encoded = tokenizer.encode(variant, add_special_tokens=False)
            if len(encoded) == 0:
                continue
            token = int(encoded[0])
            if token == unk or (vocab_size is not None and token >= vocab_size):
                continue
            ids.add(token)
        return ids

    yes_ids, no_ids = first_ids(YES_VARIANTS), first_ids(NO_VARIANTS)
    shared = yes_ids & no_ids
    yes, no = sorted(yes_ids - shared), sorted(no_ids - shared)
    if not yes or not no:
        raise ValueError("the tokenizer has no token that starts a YES answer and a different "
                         "one that starts a NO answer")
    return yes, no


def _forward_last_logits(model: CausalLM, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor) -> torch.Tensor:
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                  use_cache=False)
    try:
        logits = model(**kwargs, logits_to_keep=1).logits
    except TypeError:  # models without logits_to_keep
        logits = model(**kwargs).logits
    return logits[:, -1, :]


@torch.inference_mode()
def decision_logits(
    llm: LLM, texts: Sequence[str], *, prompt: str | None = None, batch_size: int = 16
) -> torch.Tensor:
    """(n, 2) float32 tensor: best YES logit and best NO logit at the start of each reply."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    template = _check_prompt(load_prompt("self_filter") if prompt is None else prompt)
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    yes_ids, no_ids = answer_token_ids(llm.tokenizer, llm.vocab_size)
    device = torch.device(llm.device)
    yes_index = torch.tensor(yes_ids, dtype=torch.long, device=device)
    no_index = torch.tensor(no_ids, dtype=torch.long, device=device)
    rows = [llm.chat_prompt_ids(template.replace(PLACEHOLDER, text)) for text in texts]
    out = torch.empty((len(rows), 2), dtype=torch.float32)
    # Longest first, so that each batch holds rows of similar length (less padding);
    # ties keep input order. The order only affects speed, not the decisions.
    order = sorted(range(len(rows)), key=lambda i: (-len(rows[i]), i))
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = max(len(rows[i]) for i in chunk)
        input_ids = torch.zeros((len(chunk), width), dtype=torch.long)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for j, i in enumerate(chunk):  # left padding: every row ends at the reply's start
            ids = rows[i]
            input_ids[j, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[j, width - len(ids):] = 1
        logits = _forward_last_logits(llm.model, input_ids.to(device),
                                      attention_mask.to(device)).float()
        best = torch.stack([logits.index_select(1, yes_index).amax(dim=1),
                            logits.index_select(1, no_index).amax(dim=1)], dim=1)
        out[torch.tensor(chunk, dtype=torch.long)] = best.cpu()
    return out


def self_filter(
    llm: LLM, texts: Sequence[str], *, prompt: str | None = None, batch_size: int = 16
) -> list[bool]:
    """Keep-flags for ``texts``: True where the model answers YES rather than NO.

    ``prompt`` defaults to the packaged Medical Synth prompt (``load_prompt("self_filter")``)
    and must contain ``{document}`` exactly once (replaced verbatim, not ``str.format``).
    Post-processing of DP output: no privacy cost. Deterministic for a given model and batch
    size.
    """
    scores = decision_logits(llm, texts, prompt=prompt, batch_size=batch_size)
    return [bool(yes > no) for yes, no in scores.tolist()]
