"""Stage (e) self-filter: batched decisions equal the row-by-row reference, padding included.

A tiny randomly initialised Llama and a word-level tokenizer (with YES/NO tokens) built here.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_llm

from dpsynrag.models.llm import LoadedLLM
from dpsynrag.prompts.templates import load_prompt
from dpsynrag.transforms.self_filter import (
    answer_token_ids,
    decision_logits,
    self_filter,
)

_WORD_TEXT = (
    "does the following document contain any specific diagnosis names , even if they are "
    "fictional ? answer only YES or NO . Document: Answer: Yes No yes patient fever cough "
    "asthma diabetes flu pain head chest red green blue one two three the a with and "
    "{document} user assistant"
)
WORDS = _WORD_TEXT.split()
SPECIALS = ["<unk>", "<|im_start|>", "<|im_end|>"]
BODY = "patient fever cough asthma diabetes flu pain head chest red green blue one two three"


def tiny_llm(seed: int = 0) -> LoadedLLM:
    return make_tiny_llm(WORDS, specials=SPECIALS, seed=seed)


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm()


def texts() -> list[str]:
    words = BODY.split()
    out = []
    for i in range(23):  # lengths 0..~40 words: plenty of left padding in every batch
        n = (7 * i) % 41
        out.append(" ".join(words[(i + j) % len(words)] for j in range(n)))
    out.append("a text that mentions {document} literally")
    return out


@torch.inference_mode()
def reference_logits(llm: LoadedLLM, items: list[str], prompt: str) -> torch.Tensor:
    """Each text on its own: no batch, no padding, no position ids."""
    yes, no = answer_token_ids(llm.tokenizer, llm.vocab_size)
    rows = []
    for text in items:
        ids = llm.chat_prompt_ids(prompt.replace("{document}", text))
        logits = llm.model(input_ids=torch.tensor([ids])).logits[0, -1]
        rows.append(torch.stack([logits[yes].max(), logits[no].max()]))
    return torch.stack(rows)


def test_packaged_prompt_is_the_papers_medical_prompt() -> None:
    assert load_prompt("self_filter") == (
        "Does the following document contain any specific diagnosis names, even if they are "
        "fictional? Answer only YES or NO.\n\nDocument: {document}\n\nAnswer:")
    with pytest.raises(ValueError):
        load_prompt("no_such_prompt")
    with pytest.raises(ValueError):
        load_prompt("../etc/passwd")


def test_answer_tokens(llm: LoadedLLM) -> None:
    yes, no = answer_token_ids(llm.tokenizer, llm.vocab_size)
    vocab = llm.tokenizer.get_vocab()
    assert set(yes) == {vocab["YES"], vocab["Yes"], vocab["yes"]}
    assert set(no) == {vocab["NO"], vocab["No"]}  # "no" is unknown here: its <unk> is dropped
    assert vocab["<unk>"] not in yes + no


@pytest.mark.parametrize("batch_size", [1, 3, 16, 64])
def test_batched_equals_row_by_row(llm: LoadedLLM, batch_size: int) -> None:
    items = texts()
    prompt = load_prompt("self_filter")
    expected = reference_logits(llm, items, prompt)
    got = decision_logits(llm, items, batch_size=batch_size)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    decisions = self_filter(llm, items, batch_size=batch_size)
    assert decisions == [bool(y > n) for y, n in expected.tolist()]


def test_decisions_are_mixed_and_deterministic() -> None:
    """Over a few random models both answers occur (the test is not vacuous)."""
    seen = set()
    for seed in range(4):
        model = tiny_llm(seed)
        first = self_filter(model, texts(), batch_size=5)
        assert first == self_filter(model, texts(), batch_size=5)
        assert first == self_filter(model, texts(), batch_size=1)
        seen.update(first)
    assert seen == {True, False}


def test_custom_prompt(llm: LoadedLLM) -> None:
    prompt = "answer YES or NO : {document} ?"
    items = texts()[:6]
    expected = reference_logits(llm, items, prompt)
    torch.testing.assert_close(decision_logits(llm, items, prompt=prompt, batch_size=4),
                               expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("prompt", ["no placeholder", "{document} twice {document}",
                                    "{Document}"])
def test_prompt_needs_exactly_one_placeholder(llm: LoadedLLM, prompt: str) -> None:
    with pytest.raises(ValueError):
        self_filter(llm, ["patient"], prompt=prompt)


def test_empty_input_and_bad_arguments(llm: LoadedLLM) -> None:
    assert self_filter(llm, []) == []
    with pytest.raises(TypeError):
        self_filter(llm, "one string")
    with pytest.raises(ValueError):
        self_filter(llm, ["x"], batch_size=0)


def test_tokenizer_without_answer_tokens_is_refused(llm: LoadedLLM) -> None:
    class NoYes:
        unk_token_id = 0

        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [0]

    with pytest.raises(ValueError):
        answer_token_ids(NoYes(), 100)
