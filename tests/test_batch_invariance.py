"""Issue 13 item 8: a greedy vote (or a clipped row) must not depend on other documents.

Adding one document must never change another document's greedy answer (DP-KSA's
one-document answers, keyword extraction) nor its clipped logits or one-hot vote in the
private-prediction engines, and the shapes each row is computed with (the shared prefix, the
batch rows, the padded width, the mask layout) must not change either: on a GPU a different
shape can round differently and flip a near-tie argmax, so these tests assert the structure
as well as the values (bit for bit on this CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from test_private_prediction import WORDS, tiny_llm

from dpsynrag.accounting.clipping import clip_logits
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models import greedy
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.prompts.rag import answer_prompt
from dpsynrag.transforms import decoding_reference, decoding_stack, engine_memory, keywords
from dpsynrag.transforms import private_prediction as pp

PROMPT = "rewrite the following note : {document} ."
CLIP = 1.0
BATCH_ROWS = 8


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm()


def _docs(seed: int, count: int, first: str = "patient") -> list[str]:
    """Random documents of different lengths that all start with ``first``."""
    rs = np.random.default_rng(seed)
    return [" ".join([first, *rs.choice(WORDS[:-8], int(n))])
            for n in rs.integers(1, 40, size=count)]


def _one_hot(logits: torch.Tensor) -> torch.Tensor:
    """Sparse voting's greedy vote: one-hot rows at each row's argmax."""
    out = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
    return out.scatter_(1, torch.argmax(logits, dim=-1, keepdim=True), 1.0)


class Recorder:
    """A sampler that records every group's vote and returns tokens fixed by the step, so
    the generated suffixes depend neither on the votes nor on the other groups."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.votes: dict[tuple[int, int], torch.Tensor] = {}
        self.steps: dict[int, int] = {}

    def __call__(self, votes: torch.Tensor, active: list[int]) -> np.ndarray:
        out = []
        for row, g in enumerate(active):
            step = self.steps.get(g, 0)
            self.steps[g] = step + 1
            self.votes[(g, step)] = votes[row].clone()
            out.append(4 + (7 + 5 * step) % (self.vocab - 4))
        return np.asarray(out)


def _predict(llm: LoadedLLM, groups: list[list[str]], engine: str,
             transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
             prompt: str = PROMPT) -> Recorder:
    recorder = Recorder(llm.vocab_size)
    pp.private_predict(llm, groups, prompt=prompt, max_new_tokens=4, clip=CLIP,
                       temperature=1.0, rng=secure_rng(0), sampler=recorder, engine=engine,
                       batch_rows=BATCH_ROWS, row_transform=transform)
    return recorder


@contextmanager
def _engine_prefixes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, ...]]]:
    """Records the shared prefix token ids each packed engine run was given."""
    seen: list[tuple[int, ...]] = []
    real = pp.PackedEngine

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(tuple(kwargs["prefix_ids"][:kwargs["prefix_len"]]))
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(pp, "PackedEngine", spy)
        yield seen


# ---------------------------------------------------------------------------- packed engine
@pytest.mark.parametrize("prompt", [PROMPT, "rewrite the following note :{document} ."])
def test_batch_invariance_prefix_length_does_not_depend_on_documents(
        llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch, prompt: str) -> None:
    """Every document starts with "patient"; the extra one does not. The shared prefix must
    be the same with and without it (on d08ac16 it was the rows' longest common prefix, which
    the extra document shortened). The second prompt has no space before the document, so
    the word-level tokenizer merges the junction (":patient" is one unknown token)."""
    docs = _docs(1, 5)
    extra = "fever cough"
    with _engine_prefixes(monkeypatch) as seen:
        _predict(llm, [[d] for d in docs], "packed", prompt=prompt)
        _predict(llm, [[d] for d in docs] + [[extra]], "packed", prompt=prompt)
        _predict(llm, [[extra]], "packed", prompt=prompt)
    assert len(seen) == 3
    assert seen[0] == seen[1] == seen[2]


def test_batch_invariance_public_prefix_is_the_template_before_the_document(
        llm: LoadedLLM) -> None:
    """Every row starts with the public prefix, also when the document's first characters
    merge with the template's last token (then the rest is tokenised on its own)."""
    for prompt in (PROMPT, "rewrite the following note :{document} ."):
        layout = pp.prompt_layout(llm, prompt)
        assert layout.prefix  # derived: something is shared
        shared = pp.public_prefix_length([layout])
        assert 0 < shared < len(layout.prefix) + 1
        for doc in [*_docs(2, 4), "", "fever", " cough", "{document}"]:
            row = pp.document_row_ids(llm, layout, doc)
            assert row[:len(layout.prefix)] == layout.prefix
            assert len(row) > shared
    merged = pp.prompt_layout(llm, "rewrite the following note :{document} .")
    row = pp.document_row_ids(llm, merged, "fever cough")
    rest = llm.tokenizer("fever cough" + merged.tail, add_special_tokens=False)["input_ids"]
    assert list(row) == [*merged.prefix, *rest]


@pytest.mark.parametrize("transform", [None, _one_hot], ids=["clipped", "greedy-vote"])
@pytest.mark.parametrize("engine", ["packed", "reference"])
@pytest.mark.parametrize("seed", [3, 4, 5])
def test_batch_invariance_extra_document_leaves_other_rows_bit_identical(
        llm: LoadedLLM, engine: str, transform: Callable | None, seed: int) -> None:
    """One document per group, so a group's vote is its row's clipped logits (or one-hot
    vote) exactly. Adding a document (its own group, or a row of an existing group) must
    leave every other row bit for bit the same at every step."""
    docs = _docs(seed, 6)
    extra = _docs(seed + 100, 1, first="fever")[0] + " chest pain head"
    base = _predict(llm, [[d] for d in docs], engine, transform)
    added = _predict(llm, [[d] for d in docs] + [[extra]], engine, transform)
    first = _predict(llm, [[extra]] + [[d] for d in docs], engine, transform)
    for (g, step), votes in base.votes.items():
        assert torch.equal(added.votes[(g, step)], votes), (g, step)
        assert torch.equal(first.votes[(g + 1, step)], votes), (g, step)
    # in the same group: the group's vote is the sum of the two rows' own votes, exactly
    alone = _predict(llm, [[extra]], engine, transform)
    for g in (0, 3):
        grouped = _predict(llm, [[docs[g], extra]], engine, transform)
        for step in range(4):
            expected = base.votes[(g, step)] + alone.votes[(0, step)]
            assert torch.equal(grouped.votes[(0, step)], expected), (g, step)


def test_batch_invariance_packed_shapes_are_public(llm: LoadedLLM,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents are prefilled together (``packed_prefill``), but every row-wise call of a
    prefill has exactly ``prefill_chunk`` token rows and every attention call is one
    document's alone at its own length; every decode call computes whole chunks of
    ``batch_rows`` rows; with or without the extra document."""
    docs = _docs(6, 5)
    extra = "fever cough chest"
    qkv_rows: list[tuple[int, int]] = []  # (batch, tokens) of each q/k/v call
    attention: list[tuple[int, int, int]] = []  # (batch, queries, keys) of each prefill's
    decodes: list[int] = []
    stack_cls = decoding_stack.DecoderStack
    real_qkv, real_attention = stack_cls._qkv, stack_cls._prefill_attention
    real_decode = stack_cls.decode

    def qkv(self: Any, layer: Any, x: torch.Tensor, *rest: Any) -> Any:
        qkv_rows.append((int(x.shape[0]), int(x.shape[1])))
        return real_qkv(self, layer, x, *rest)

    def attend(self: Any, q: torch.Tensor, k: torch.Tensor, *rest: Any) -> Any:
        attention.append((int(q.shape[0]), int(q.shape[2]), int(k.shape[2])))
        return real_attention(self, q, k, *rest)

    def decode(self: Any, prefix: Any, slots: Any, input_ids: torch.Tensor, *rest: Any) -> Any:
        decodes.append(int(input_ids.shape[0]))
        return real_decode(self, prefix, slots, input_ids, *rest)

    monkeypatch.setattr(stack_cls, "_qkv", qkv)
    monkeypatch.setattr(stack_cls, "_prefill_attention", attend)
    monkeypatch.setattr(stack_cls, "decode", decode)
    chunk, _ = engine_memory.prefill_sizes(torch.device("cpu"))
    layout = pp.prompt_layout(llm, PROMPT)
    prefix = pp.public_prefix_length([layout])
    layers = llm.model.config.num_hidden_layers
    shapes = []
    for groups in ([[d] for d in docs], [[d] for d in docs] + [[extra]],
                   [[*docs[:3], extra], docs[3:]]):
        qkv_rows.clear()
        attention.clear()
        decodes.clear()
        _predict(llm, groups, "packed")
        assert decodes and all(n % BATCH_ROWS == 0 for n in decodes)
        prefill_calls = [shape for shape in qkv_rows if shape[1] != 1]  # decode feeds 1 token
        # the shared prefix alone once; then every call a whole chunk of the token stream
        assert prefill_calls[:layers] == [(1, prefix)] * layers
        assert set(prefill_calls[layers:]) == {(1, chunk)}
        # attention: one document alone, at its own length, after the prefix (the shared
        # prefix's own attention first, then each document's per layer but the last)
        docs_attention = attention[layers:]
        assert all(b == 1 and k == prefix + q for b, q, k in docs_attention)
        lengths = sorted({len(pp.document_row_ids(llm, layout, d)) - prefix - 1
                          for g in groups for d in g})
        assert sorted({q for _, q, _ in docs_attention}) == lengths
        shapes.append(sorted(q for _, q, _ in docs_attention))
    # each document's attention had its own length only: the extra adds one (per layer but
    # the last, whose attention no KV needs), changes none
    assert [n for n in shapes[1] if n in shapes[0]] == shapes[0]
    assert len(shapes[1]) == len(shapes[0]) + layers - 1


def test_batch_invariance_lane_width_is_a_function_of_the_row() -> None:
    from dpsynrag.transforms.decoding_packed import MIN_LANE_WIDTH, lane_width

    assert lane_width(1, 1) == MIN_LANE_WIDTH
    assert lane_width(60, 5) == 64 and lane_width(61, 5) == 128
    for length in range(1, 300, 7):
        width = lane_width(length, 16)
        assert width >= length - 1 + 16 and width & (width - 1) == 0


def test_batch_invariance_reference_engine_runs_each_row_alone(
        llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-group loop (non-Llama models) must not pad a group's rows together: adding a
    longer document to a group would change the other rows' padded width."""
    calls: list[int] = []
    transformed: list[int] = []
    real = decoding_reference._prefill

    def spy(model: Any, rows: Any, device: Any) -> Any:
        calls.append(len(rows))
        return real(model, rows, device)

    def transform(logits: torch.Tensor) -> torch.Tensor:
        transformed.append(int(logits.shape[0]))
        return clip_logits(logits, CLIP)

    monkeypatch.setattr(decoding_reference, "_prefill", spy)
    docs = _docs(7, 3)
    _predict(llm, [[*docs, "fever " * 30]], "reference", transform)
    assert calls and set(calls) == {1}
    assert set(transformed) == {1}


# ---------------------------------------------------------------------------- greedy answers
@contextmanager
def _generate_calls(llm: LoadedLLM) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Records (input_ids, attention_mask) of every ``generate`` call."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = llm.model.generate

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append((kwargs["input_ids"].cpu().clone(), kwargs["attention_mask"].cpu().clone()))
        return real(*args, **kwargs)

    llm.model.generate = spy
    try:
        yield seen
    finally:
        del llm.model.generate


def _row_shapes(calls: list[tuple[torch.Tensor, torch.Tensor]],
                target: list[int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """(batch rows, width, the target's mask row) of every call that computed ``target``."""
    out = []
    for ids, mask in calls:
        for r in range(ids.shape[0]):
            real = ids[r][mask[r].bool()].tolist()
            if real == target:
                out.append((int(ids.shape[0]), int(ids.shape[1]), tuple(mask[r].tolist())))
                break
    return out


def _rag_prompts(seed: int, count: int) -> list[str]:
    rs = np.random.default_rng(seed)
    return [answer_prompt("patient fever", [" ".join(rs.choice(WORDS[:-8], int(n)))])
            for n in rs.integers(2, 12, size=count)]


@pytest.mark.parametrize("batch_size", [None, 1, 4])
def test_batch_invariance_rag_answers_do_not_depend_on_other_prompts(
        llm: LoadedLLM, batch_size: int | None) -> None:
    """DP-KSA's one-document answers: adding one prompt (same length bucket) changes no
    other prompt's answer, nor the shapes and mask it was computed with."""
    prompts = _rag_prompts(8, 5)
    kwargs = {"max_new_tokens": 6, "batch_size": batch_size, "pad_multiple": 16}
    extra = prompts[0] + " red"
    with _generate_calls(llm) as calls:
        base = greedy.answer_questions(llm, prompts, **kwargs)
        base_calls = list(calls)
        calls.clear()
        more = greedy.answer_questions(llm, [*prompts, extra], **kwargs)
        more_calls = list(calls)
    assert more[:len(prompts)] == base
    rows = 1 if batch_size is None else batch_size  # CPU default: one prompt per call
    for ids, mask in [*base_calls, *more_calls]:
        assert ids.shape[0] == rows  # fixed batch shape, filler rows complete it
        assert bool((mask == 0).any(dim=1).all())  # every row padded: one mask path
    for prompt in prompts:
        target = llm.chat_prompt_ids(prompt)
        assert _row_shapes(base_calls, target) == _row_shapes(more_calls, target) != []


def test_batch_invariance_keyword_answers_keep_their_shapes(llm: LoadedLLM) -> None:
    """Keyword extraction: a prompt whose length is a multiple of ``pad_multiple`` still gets
    a padding token, so its batch uses the masked path whether or not a shorter prompt
    shares it (on d08ac16 a batch of full-width rows ran without any padding)."""
    docs = _docs(9, 4)
    prompts = [llm.chat_prompt_ids(keywords.keyword_prompt(d, 3)) for d in docs]
    pad = len(prompts[0])
    same = [p for p in prompts if len(p) <= pad]
    kwargs = {"max_new_tokens": 5, "batch_size": 2, "pad_multiple": pad}
    with _generate_calls(llm) as calls:
        alone = greedy.generate_greedy(llm, [prompts[0]], **kwargs)
        alone_calls = list(calls)
        calls.clear()
        together = greedy.generate_greedy(llm, same, **kwargs)
        together_calls = list(calls)
    assert together[0] == alone[0]
    for _ids, mask in [*alone_calls, *together_calls]:
        assert bool((mask == 0).any(dim=1).all())
    assert _row_shapes(alone_calls, prompts[0]) == _row_shapes(together_calls, prompts[0])
