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
engine (``decoding_packed`` over ``decoding_stack``: Llama, Gemma 1-3, Mistral, Qwen2/2.5,
Qwen3) computes the same values; other architectures, and configurations ``decoding_stack``
does not compute exactly, run the straightforward per-group loop (``decoding_reference``)
after one warning per call naming the model type and the reason (never any data).

Batch invariance (the sensitivity argument needs each row's clipped logits, or its one-hot
greedy vote, to be a function of its own document and public values only; on a GPU a
different batch shape can round a row differently and flip a near-tie argmax):

* The packed engine's **shared prefix is public**: the chat template and instruction rendered
  around the document placeholder (``prompt_layout``; cut before trailing whitespace when
  fixed public probe documents show the tokenizer merges it into the document), tokenised
  on their own, never the longest common prefix of the rows (which adding one document
  could shorten). Each row is the joint tokenisation of its own prompt when that starts with
  the public prefix, else the public prefix followed by the separate tokenisation of the
  rest (``document_row_ids``): a rule applied to each row alone, so every row really starts
  with the prefix and no row's tokens depend on another document. With several prompts
  (one per query) the shared part is their prefixes' common part, a function of the public
  prompts.
* The engines compute every row with shapes that depend on that row and public settings only
  (see ``decoding_packed`` and ``decoding_reference``).

Nothing here logs document text, logits, or counts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from dpsynrag.accounting.clipping import clip_logits
from dpsynrag.accounting.public_difference import difference_clip, prior_votes, public_support
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.token_sampling import sample_tokens
from dpsynrag.models.protocols import LLM, CausalLM, Tokenizer
from dpsynrag.prompts.templates import PLACEHOLDER
from dpsynrag.transforms import decoding_stack
from dpsynrag.transforms.decoding_packed import PackedEngine, RowTransform, StepReport
from dpsynrag.transforms.decoding_reference import reference_tokens
from dpsynrag.transforms.engine_memory import (
    MIN_ROWS,
    EngineMemoryError,
    EnginePlan,
    ModelSizes,
    free_memory,
    plan_engine_memory,
    planned_row_width,
    planned_width,
    prefill_sizes,
)
from dpsynrag.transforms.public_prior import (
    PublicPrior,
    PublicPriorSettings,
    candidate_forced,
    candidate_next,
)

# marks the document's place when the chat template is rendered to text (never tokenised)
_MARK = "\ue000dpsynrag-document\ue000"
DEFAULT_BATCH_ROWS_CPU = 128  # on CUDA the rows come from free memory (engine_memory)

Sampler = Callable[[torch.Tensor, list[int]], np.ndarray]
logger = logging.getLogger(__name__)

__all__ = ["PromptLayout", "StepReport", "aggregated_logits", "aggregated_prior_votes",
           "candidate_ids", "document_row_ids", "packed_engine_plan", "packed_memory_plan",
           "private_predict",
           "prompt_layout", "public_prefix_length", "render_prompt"]


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


def response_prefix_ids(llm: LLM, response_prefix: str) -> list[int]:
    """Token ids of a public text that every reply starts with (no special tokens)."""
    if not response_prefix:
        return []
    return [int(t) for t in llm.tokenizer.encode(response_prefix, add_special_tokens=False)]


# public probe documents: they choose where the shared prefix ends (see ``prompt_layout``)
_PROBES = ("Patient", "the", " x", "1.", "\nA", "(a)", "\u00c9t\u00e9", "-")


@dataclass(frozen=True)
class PromptLayout:
    """Where the document sits in one prompt's chat text (public: prompt and template only).

    ``prefix`` is the token ids of the chat text before the document, less ``gap`` (its
    trailing whitespace when that tokenises better), tokenised on its own; ``tail`` the chat
    text after the document. An empty ``prefix`` means the layout could not be derived (a
    template that rewrites the message): nothing is then shared, at a speed cost.
    """

    prompt: str
    prefix: tuple[int, ...]
    tail: str
    add_special_tokens: bool
    gap: str = ""


def _chat_text(llm: LLM, message: str) -> tuple[str, bool]:
    """The text ``llm.chat_prompt_ids`` tokenises for ``message``, and whether it adds the
    tokenizer's special tokens (only without a chat template)."""
    tokenizer = llm.tokenizer
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], add_generation_prompt=True, tokenize=False)
        return str(text), False
    return f"User: {message}\nAssistant:", True


def _encode(tokenizer: Tokenizer, text: str, add_special_tokens: bool) -> list[int]:
    return [int(t) for t in tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]]


def prompt_layout(llm: LLM, prompt: str) -> PromptLayout:
    """The public layout of ``prompt``: the template rendered around the document placeholder.

    A function of the prompt, the chat template, the tokenizer and fixed public probe
    documents only (no private document). The head (chat text before the document) is cut
    either at its end or before its trailing whitespace (which a BPE tokenizer merges into
    the document's first word), whichever the probes' joint tokenisations start with. The
    layout is kept only if the empty document's chat text is head + tail and tokenises
    exactly as ``llm.chat_prompt_ids`` does (a self-check of the rendering); otherwise the
    prefix is empty (public too).
    """
    text, special = _chat_text(llm, render_prompt(prompt, _MARK))
    none = PromptLayout(prompt, (), "", special)
    if text.count(_MARK) != 1:
        return none
    head, tail = text.split(_MARK)
    empty_text, _ = _chat_text(llm, render_prompt(prompt, ""))
    empty_ids = [int(t) for t in llm.chat_prompt_ids(render_prompt(prompt, ""))]
    if head + tail != empty_text or _encode(llm.tokenizer, empty_text, special) != empty_ids:
        return none
    probes = [tuple(int(t) for t in llm.chat_prompt_ids(render_prompt(prompt, probe)))
              for probe in _PROBES]
    best: PromptLayout | None = None
    best_hits = -1
    for cut in dict.fromkeys((len(head), len(head.rstrip()))):
        prefix = tuple(_head_ids(llm.tokenizer, head[:cut], special))
        hits = sum(probe[:len(prefix)] == prefix for probe in probes)
        if hits > best_hits:
            best, best_hits = PromptLayout(prompt, prefix, tail, special, head[cut:]), hits
    return best if best is not None else none


def _head_ids(tokenizer: Tokenizer, head: str, special: bool) -> list[int]:
    """Token ids of the head text; a trailing special token (e.g. an EOS some tokenizers
    append to any text) is dropped when the tokenizer adds its special tokens."""
    ids = _encode(tokenizer, head, special)
    if special:
        specials = set(getattr(tokenizer, "all_special_ids", []) or [])
        while len(ids) > 1 and ids[-1] in specials:
            ids.pop()
    return ids


def document_row_ids(llm: LLM, layout: PromptLayout, document: str) -> tuple[int, ...]:
    """Token ids of one document's chat prompt, guaranteed to start with ``layout.prefix``.

    The joint tokenisation of the whole prompt when it starts with the public prefix (the
    usual case); otherwise (the document's first characters merged with the prefix's last
    token) the prefix followed by the separate tokenisation of gap + document + tail. Either
    way a function of this document and public values only.
    """
    joint = tuple(int(t) for t in llm.chat_prompt_ids(render_prompt(layout.prompt, document)))
    if joint[:len(layout.prefix)] == layout.prefix:
        return joint
    rest = _encode(llm.tokenizer, layout.gap + document + layout.tail, False)
    return (*layout.prefix, *rest)


def public_prefix_length(layouts: Sequence[PromptLayout]) -> int:
    """Tokens every row shares: the public prefixes' common part less one token.

    A function of the prompts only. Every row starts with its prompt's prefix, so it starts
    with this many shared tokens and keeps at least one token of its own (the prefix's last,
    at least) for the engine to feed.
    """
    if not layouts:
        return 0
    first = layouts[0].prefix
    length = min(len(layout.prefix) for layout in layouts)
    for layout in layouts[1:]:
        i = 0
        while i < length and layout.prefix[i] == first[i]:
            i += 1
        length = i
    return max(length - 1, 0)


@torch.inference_mode()
def aggregated_logits(
    llm: LLM, docs: Sequence[str], *, prompt: str, generated: Sequence[int], clip: float,
    response_prefix: str = "",
) -> torch.Tensor:
    """z = sum over ``docs`` of clip_c(next-token logits after ``generated``), float64 (vocab,).

    The audit reference: each document's full sequence (chat prompt + ``generated``) runs
    through the model on its own, no cache and no padding; rows are clipped in float32 and
    summed in float64. No documents give the zero vector. Rows are tokenised as the engines
    tokenise them (``document_row_ids``).
    """
    _check(clip, None, 0)
    total = torch.zeros(llm.vocab_size, dtype=torch.float64)
    layout = prompt_layout(llm, prompt)
    for doc in docs:
        ids = [*document_row_ids(llm, layout, doc),
               *response_prefix_ids(llm, response_prefix), *map(int, generated)]
        input_ids = torch.tensor([ids], dtype=torch.long, device=llm.device)
        logits = llm.model(input_ids=input_ids).logits[0, -1]
        total += clip_logits(logits, clip).to(device="cpu", dtype=torch.float64)
    return total


def candidate_ids(llm: LLM, candidates: Sequence[str]) -> list[tuple[int, ...]]:
    """Token ids of each released candidate string, as a word inside a reply (with a leading
    space) and at the start of one (without): public strings in, public ids out."""
    seen: dict[tuple[int, ...], None] = {}
    for text in candidates:
        for form in (" " + text, text):
            ids = tuple(int(t) for t in llm.tokenizer.encode(form, add_special_tokens=False))
            if ids:
                seen.setdefault(ids, None)
    return list(seen)


def _public_rows(llm: LLM, prompts: Sequence[str], prefixes: Sequence[str],
                 documents: Sequence[str]) -> list[tuple[int, ...]]:
    """Each group's public row: its prompt around its public text, then its reply prefix."""
    layouts = {p: prompt_layout(llm, p) for p in dict.fromkeys(prompts)}
    return [(*document_row_ids(llm, layouts[p], doc), *response_prefix_ids(llm, prefix))
            for p, prefix, doc in zip(prompts, prefixes, documents, strict=True)]


def _make_prior(llm: LLM, settings: PublicPriorSettings, prompts: Sequence[str],
                prefixes: Sequence[str], *, clip: float, temperature: float) -> PublicPrior:
    settings.validate()
    documents, candidates = settings.per_group(len(prompts))
    ids_of = {c: candidate_ids(llm, [c]) for group in candidates for c in group}
    return PublicPrior(
        llm.model, _public_rows(llm, prompts, prefixes, documents),
        [[ids for c in group for ids in ids_of[c]] for group in candidates],
        eos_ids=llm.eos_token_ids, top_k=settings.top_k,
        scale=temperature / float(settings.temperature), clip=clip,
        device=torch.device(llm.device), vocab_size=llm.vocab_size,
        candidate_support=settings.candidate_support,
        trie_completion=settings.trie_completion)


@torch.inference_mode()
def aggregated_prior_votes(
    llm: LLM, docs: Sequence[str], *, prompt: str, generated: Sequence[int], clip: float,
    temperature: float, public_prior: PublicPriorSettings, response_prefix: str = "",
) -> torch.Tensor:
    """The votes of one group under the public-difference sampler, float64 (vocab,).

    The audit reference (no cache, no padding): phi_pub from the public row followed by
    ``generated``, the public support, each document's difference row, their float64 sum,
    the public term and -inf off the support. ``public_prior`` holds one group's public text
    and candidates (the first group's when it holds several).
    """
    _check(clip, temperature, 0)
    public_prior.validate()
    documents, candidates = public_prior.per_group(1) if isinstance(
        public_prior.documents, str) else public_prior.per_group(len(public_prior.documents))

    def logits_of(ids: Sequence[int]) -> torch.Tensor:
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=llm.device)
        return llm.model(input_ids=input_ids).logits[0, -1].float()

    forced = response_prefix_ids(llm, response_prefix)
    public_row = _public_rows(llm, [prompt], [response_prefix], documents[:1])[0]
    public = logits_of([*public_row, *map(int, generated)]).unsqueeze(0)
    cands = candidate_ids(llm, candidates[0])
    extra = {*map(int, llm.eos_token_ids),
             *(candidate_next(generated, cands) if public_prior.candidate_support else ())}
    support = public_support(public, public_prior.top_k, [extra])
    completion = candidate_forced(generated, cands) if public_prior.trie_completion else None
    if completion is not None:  # trie completion: the one continuation of a begun candidate
        support[:] = False
        support[0, completion] = True
    total = torch.zeros((1, llm.vocab_size), dtype=torch.float64)
    layout = prompt_layout(llm, prompt)
    for doc in docs:
        ids = [*document_row_ids(llm, layout, doc), *forced, *map(int, generated)]
        row = difference_clip(logits_of(ids).unsqueeze(0), public, support, clip)
        total += row.to(device="cpu", dtype=torch.float64)
    return prior_votes(total, public.cpu(), support.cpu(),
                       temperature / float(public_prior.temperature))[0]


def private_predict(
    llm: LLM,
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
    public_prior: PublicPriorSettings | None = None,
    step_graphs: bool | None = None,
    released: Sequence[Sequence[int]] | None = None,
) -> list[str]:
    """One synthetic text per group: DP-SynRAG private prediction (see the module docstring).

    ``prompt`` holds ``{document}`` exactly once; each document's user turn is
    ``prompt.replace("{document}", doc)`` through ``llm.chat_prompt_ids``. ``sampler`` (for a
    privacy-ledger wrapper) receives the ``(active_groups, vocab)`` float64 votes and the
    active groups' indices and returns one token id per group; the default draws
    ``sample_tokens(votes, temperature, rng)``. Its tokens are used as they are, never redrawn.
    An empty group is still sampled (from the zero vector) for up to ``max_new_tokens`` steps.

    ``batch_rows`` is the fixed number of rows of every packed decode call (default 128 on
    CPU; on CUDA sized from the free memory measured when the model was loaded, see
    ``packed_memory_plan``; rows in flight are bounded by it whatever the groups' sizes: a
    larger group runs in shards whose votes are added before its one draw per step, see
    ``decoding_packed``; the reference engine holds at most ``batch_rows`` rows' KV caches,
    default 128, and streams a larger group's other rows, see ``decoding_reference``).
    ``response_prefix`` is public text that every reply starts with (appended after the chat
    prompt, part of the returned text): it costs nothing, since it does not depend on the
    data, and spares the first sampled tokens, which otherwise need a consensus of their
    own. A sequence gives one public prefix per group (e.g. naming the cluster's released
    keyword); likewise ``prompt`` may be one prompt per group (query-time DP-RAG: each
    query's question). ``row_transform`` replaces the clipping of each row (e.g. a one-hot
    greedy vote for Koga et al.); the caller then owns the sensitivity argument.
    ``public_prior`` switches to the public-difference sampler of issue 15
    (``transforms.public_prior``: each row is clamp(phi_i - phi_pub) on a public support,
    the votes get the public term; the same rho = (c / tau)^2 / 2 per token). ``on_step``
    receives a ``StepReport`` after each step of the packed engine: it holds counts derived
    from private data, for progress bars and benchmarks in this process only; never log it.

    ``released`` (a resumed build): per group, the tokens released before, in order, an
    end-of-sequence token only last (``PartitionTokenSampler.resume``). The group continues
    after them: its rows are prefilled with them and the sampler is asked for the next step
    only, never for a released one; a group they end (EOS, or ``max_new_tokens`` of them) is
    not run. The returned text holds them (EOS dropped), as an uninterrupted run's would.

    ``step_graphs`` picks the packed engine's CUDA-graph decode steps (``step_graphs``
    module): ``None`` is on for CUDA unless ``DPSYNRAG_STEP_GRAPHS=0`` (off on CPU),
    ``True`` / ``False`` force it on / off (the same votes either way, measured on an H200).

    ``engine="auto"`` uses the packed engine when ``decoding_stack.supports`` the model, else
    the reference loop after one logged warning naming the model type and the reason;
    ``"packed"`` raises ``ValueError`` for a model it cannot drive; ``"reference"`` always
    runs the per-group loop (silently).
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
    if torch.device(llm.device).type == "cuda":
        free_memory(llm)  # kept on llm: measured before this call reads any document
    if sampler is None:
        def sampler(votes: torch.Tensor, _active: list[int]) -> np.ndarray:
            return sample_tokens(votes, temperature, rng)

    prefixes = [response_prefix] * len(groups) if isinstance(response_prefix, str) \
        else list(response_prefix)
    if len(prefixes) != len(groups):
        raise ValueError("one response prefix per group is required")
    forced_of = {p: tuple(response_prefix_ids(llm, p)) for p in set(prefixes)}
    layouts = {p: prompt_layout(llm, p) for p in dict.fromkeys(prompts)}
    prompt_ids: dict[tuple[str, str], tuple[int, ...]] = {}
    token_ids: dict[tuple[str, str, str], tuple[int, ...]] = {}
    rows: list[list[tuple[int, ...]]] = []
    for group, group_prompt, prefix in zip(groups, prompts, prefixes, strict=True):
        rows.append([])
        for doc in group:
            if (group_prompt, doc) not in prompt_ids:
                prompt_ids[(group_prompt, doc)] = document_row_ids(
                    llm, layouts[group_prompt], doc)
            if (group_prompt, doc, prefix) not in token_ids:
                token_ids[(group_prompt, doc, prefix)] = (*prompt_ids[(group_prompt, doc)],
                                                          *forced_of[prefix])
            rows[-1].append(token_ids[(group_prompt, doc, prefix)])
    eos = frozenset(int(t) for t in llm.eos_token_ids)
    device = torch.device(llm.device)
    if public_prior is not None and row_transform is not None:
        raise ValueError("a public prior and a row transform exclude each other")
    prior = None if public_prior is None else _make_prior(
        llm, public_prior, prompts, prefixes, clip=clip, temperature=temperature)
    packed = engine == "packed" or (engine == "auto" and _packed_engine_fits(llm.model))
    if packed:
        # public: a function of the prompts, never of the rows (see the module docstring)
        prefix_len = public_prefix_length(list(layouts.values()))
        some_prefix = next(iter(layouts.values())).prefix if layouts else ()
        stack = decoding_stack.DecoderStack(llm.model)
        plan = packed_engine_plan(llm, stack, max_new_tokens=max_new_tokens,
                                  prefix_len=prefix_len, batch_rows=batch_rows)
        tokens = PackedEngine(
            stack, rows, prefix_len=prefix_len, prefix_ids=list(some_prefix[:prefix_len]),
            max_new_tokens=max_new_tokens, clip=clip, sampler=sampler, eos_ids=eos,
            batch_rows=(plan.batch_rows if plan is not None
                        else batch_rows or DEFAULT_BATCH_ROWS_CPU),
            vocab_size=llm.vocab_size,
            doc_cache_bytes=None if plan is None else plan.doc_cache_bytes,
            slot_bytes=None if plan is None else plan.slot_bytes,
            on_step=on_step, row_transform=row_transform, prior=prior,
            graphs=step_graphs, released=released).run()
    else:
        tokens = reference_tokens(
            llm.model, rows, max_new_tokens=max_new_tokens, clip=clip, sampler=sampler,
            eos_ids=eos, vocab_size=llm.vocab_size, device=device, row_transform=row_transform,
            prior=prior, released=released, batch_rows=batch_rows)
    return [_decode(llm.tokenizer, [*forced_of[p], *t]) for p, t in zip(prefixes, tokens,
                                                                        strict=True)]


def packed_memory_plan(
    llm: LLM, stack: decoding_stack.DecoderStack, *, max_new_tokens: int, prefix_len: int,
    batch_rows: int | None = None,
) -> tuple[int, int | None]:
    """``(batch_rows, doc_cache_bytes)`` for the packed engine; both public.

    On CPU: ``batch_rows`` or ``DEFAULT_BATCH_ROWS_CPU``, and the engine's own cache bound
    (``None``). On CUDA: those of ``packed_engine_plan``.
    """
    plan = packed_engine_plan(llm, stack, max_new_tokens=max_new_tokens,
                              prefix_len=prefix_len, batch_rows=batch_rows)
    if plan is None:
        return (DEFAULT_BATCH_ROWS_CPU if batch_rows is None else batch_rows), None
    return plan.batch_rows, plan.doc_cache_bytes


def packed_engine_plan(
    llm: LLM, stack: decoding_stack.DecoderStack, *, max_new_tokens: int, prefix_len: int,
    batch_rows: int | None = None,
) -> EnginePlan | None:
    """The packed engine's memory plan on CUDA (``None`` elsewhere: the CPU engine keeps
    ``batch_rows`` or ``DEFAULT_BATCH_ROWS_CPU`` and its own cache bound); all public.

    ``engine_memory.plan_engine_memory`` over the free memory measured once
    (``engine_memory.free_memory``), the model's sizes, T, the public prefix length and the
    device's prefill sizes: ``batch_rows``, the slot budget and the cache bound; an explicit
    ``batch_rows`` wins and the slots and the cache share what it leaves. When not even the
    minimum fits (shorter rows may still fit), one warning (public numbers only) and
    ``MIN_ROWS`` rows with what is left.
    """
    if torch.device(llm.device).type != "cuda":
        return None
    sizes = ModelSizes.of(stack, llm.model.config)
    free = free_memory(llm)

    def plan(rows: int | None) -> EnginePlan:
        return plan_engine_memory(
            free, sizes, width=planned_width(max_new_tokens), prefix_len=prefix_len,
            batch_rows=rows, row_width=planned_row_width(max_new_tokens),
            prefill=prefill_sizes(torch.device("cuda")))

    try:
        return plan(batch_rows)
    except EngineMemoryError as error:
        logger.warning("private prediction: %s; trying %d rows", error, MIN_ROWS)
        return plan(MIN_ROWS)


def _packed_engine_fits(model: CausalLM) -> bool:
    """Whether the packed engine drives ``model`` exactly; if not, one warning line naming
    the model type and the reason (public: the model's configuration only, never data)."""
    reason = decoding_stack.unsupported_reason(model)
    if reason is None:
        return True
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    logger.warning("private prediction: packed engine unavailable for model_type=%r (%s); "
                   "falling back to the slower reference engine", model_type, reason)
    return False


def _decode(tokenizer: Tokenizer, tokens: list[int]) -> str:
    """Text of the sampled tokens (post-processing; special tokens are dropped)."""
    known = len(tokenizer)
    return tokenizer.decode([t for t in tokens if t < known], skip_special_tokens=True)
