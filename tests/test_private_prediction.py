"""Private prediction (DP-SynRAG stage d): the packed engine computes exactly the votes of the
row-by-row reference, samples from exactly softmax(z / tau), and is deterministic per seed.

Every test uses a tiny randomly initialised Llama model and a word-level tokenizer built here
(no download, a few KB of weights).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from tiny_models import make_tiny_llm

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import decoding_stack
from dpsynrag.transforms.decoding_packed import PackedEngine
from dpsynrag.transforms.private_prediction import (
    PromptLayout,
    aggregated_logits,
    document_row_ids,
    private_predict,
    prompt_layout,
    public_prefix_length,
)

_WORD_TEXT = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega red green blue cyan magenta yellow black white one two "
    "three four five six seven eight nine ten rewrite the following note , . : {x} } user "
    "assistant patient doctor fever cough pain head chest"
)
WORDS = _WORD_TEXT.split()
SPECIALS = ["<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
PROMPT = "rewrite the following note : {document} ."
CLIP = 1.0
FIRST_WORD = len(SPECIALS)


def tiny_llm(dtype: torch.dtype = torch.float32, seed: int = 0) -> LoadedLLM:
    return make_tiny_llm(WORDS, specials=SPECIALS, dtype=dtype, seed=seed)


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm()


def _doc(rs: np.random.Generator, n: int) -> str:
    return " ".join(rs.choice(WORDS[:-8], n))


def _groups(kind: str) -> list[list[str]]:
    rs = np.random.default_rng(7)
    if kind == "uniform":  # every row the same length: no padding anywhere
        docs = [_doc(rs, 6) for _ in range(8)]
        return [docs[0:3], docs[3:6], [*docs[6:8], docs[0]]]
    docs = [_doc(rs, n) for n in (1, 30, 4, 17, 2, 45, 9, 3)]
    docs.append("note with {braces} and {document} inside")
    return [
        docs[0:3],
        [docs[1], docs[3], docs[5], docs[8]],  # shares docs[1] with group 0
        [],  # an empty group is still sampled
        [docs[2], docs[2], docs[6]],  # a document twice in one group: two rows
        [docs[5], docs[7]],
        [docs[4]],
        docs[0:8],
    ]


class Scripted:
    """A sampler hook that records every vote vector and returns scripted tokens.

    Group g draws EOS at step ``stops[g]`` (if any); otherwise a fixed non-special token.
    """

    def __init__(self, vocab: int, eos: int, stops: dict[int, int]) -> None:
        self.vocab, self.eos, self.stops = vocab, eos, stops
        self.votes: dict[tuple[int, int], torch.Tensor] = {}
        self.tokens: dict[int, list[int]] = {}

    def __call__(self, votes: torch.Tensor, active: list[int]) -> np.ndarray:
        assert votes.dtype == torch.float64 and votes.shape == (len(active), self.vocab)
        out = []
        for row, g in enumerate(active):
            made = self.tokens.setdefault(g, [])
            step = len(made)
            self.votes[(g, step)] = votes[row].clone()
            if self.stops.get(g) == step:
                token = self.eos
            else:
                token = FIRST_WORD + (5 * g + 7 * step) % (self.vocab - FIRST_WORD)
            made.append(token)
            out.append(token)
        return np.asarray(out)


def _check_votes(llm: LoadedLLM, groups: list[list[str]], script: Scripted,
                 atol: float) -> int:
    checked = 0
    for (g, step), votes in script.votes.items():
        generated = script.tokens[g][:step]
        expected = aggregated_logits(llm, groups[g], prompt=PROMPT, generated=generated,
                                     clip=CLIP)
        torch.testing.assert_close(votes, expected, rtol=0, atol=atol)
        if not groups[g]:
            assert torch.count_nonzero(votes) == 0
        checked += 1
    return checked


@pytest.mark.parametrize("kind", ["mixed", "uniform"])
@pytest.mark.parametrize("batch_rows,engine", [
    (None, "packed"),  # every group packed into one batch
    (8, "packed"),  # one large group at a time; continuous batching fills the rest
    (None, "reference"),  # the straightforward per-group loop
])
def test_votes_equal_row_by_row_reference(llm: LoadedLLM, kind: str, batch_rows: int | None,
                                          engine: str) -> None:
    groups = _groups(kind)
    eos = next(iter(llm.eos_token_ids))
    stops = {0: 1, 3: 3, 4: 0} if kind == "mixed" else {1: 2}
    script = Scripted(llm.vocab_size, eos, stops)
    reports: list = []
    texts = private_predict(llm, groups, prompt=PROMPT, max_new_tokens=5, clip=CLIP,
                            temperature=1.0, rng=secure_rng(0), batch_rows=batch_rows,
                            sampler=script, engine=engine, on_step=reports.append)
    assert len(texts) == len(groups)
    for g in range(len(groups)):  # every group sampled until its EOS or max_new_tokens
        expected_steps = stops[g] + 1 if g in stops else 5
        assert len(script.tokens[g]) == expected_steps
        made = [t for t in script.tokens[g] if t != eos]
        assert texts[g] == llm.tokenizer.decode(made, skip_special_tokens=True)
    assert _check_votes(llm, groups, script, atol=2e-5) == len(script.votes)
    if engine == "packed":
        distinct = {d for g in groups for d in g}
        assert reports[-1].distinct_prefills <= len(distinct)  # each document's KV once


def test_bfloat16_engine_matches_within_tolerance() -> None:
    llm16 = tiny_llm(torch.bfloat16)
    groups = _groups("mixed")
    script = Scripted(llm16.vocab_size, next(iter(llm16.eos_token_ids)), {0: 2})
    private_predict(llm16, groups, prompt=PROMPT, max_new_tokens=3, clip=CLIP,
                    temperature=1.0, rng=secure_rng(0), sampler=script)
    worst = 0.0
    for (g, step), votes in script.votes.items():
        ref = aggregated_logits(llm16, groups[g], prompt=PROMPT,
                                generated=script.tokens[g][:step], clip=CLIP)
        bound = 0.1 * CLIP * max(1, len(groups[g]))  # bf16 keeps ~3 significant digits
        worst = max(worst, float((votes - ref).abs().max()) / bound)
    assert worst < 1.0


def test_many_groups_with_staggered_stops_compact_and_match(llm: LoadedLLM) -> None:
    rs = np.random.default_rng(3)
    docs = [_doc(rs, int(n)) for n in rs.integers(1, 25, size=20)]
    groups = [[docs[(3 * g + j) % 20] for j in range(int(rs.integers(0, 6)))]
              for g in range(24)]
    stops = {g: g % 7 for g in range(0, 24, 2)}
    script = Scripted(llm.vocab_size, next(iter(llm.eos_token_ids)), stops)
    private_predict(llm, groups, prompt=PROMPT, max_new_tokens=7, clip=CLIP,
                    temperature=1.0, rng=secure_rng(0), batch_rows=40, sampler=script)
    _check_votes(llm, groups, script, atol=2e-5)


def test_bounded_document_cache_recomputes_identically(llm: LoadedLLM) -> None:
    groups = _groups("mixed")
    layout = prompt_layout(llm, PROMPT)
    rows = [[document_row_ids(llm, layout, d) for d in g] for g in groups]
    prefix = public_prefix_length([layout])
    results = []
    for cache_bytes in (None, 1):
        script = Scripted(llm.vocab_size, next(iter(llm.eos_token_ids)), {1: 2})
        PackedEngine(decoding_stack.DecoderStack(llm.model), rows, prefix_len=prefix,
                     prefix_ids=list(layout.prefix[:prefix]), max_new_tokens=4, clip=CLIP,
                     sampler=script, eos_ids=llm.eos_token_ids, batch_rows=4,
                     vocab_size=llm.vocab_size, doc_cache_bytes=cache_bytes).run()
        results.append(script)
    for key, votes in results[0].votes.items():
        torch.testing.assert_close(results[1].votes[key], votes, rtol=0, atol=1e-5)


def test_same_seed_same_texts(llm: LoadedLLM) -> None:
    groups = _groups("mixed")

    def run(seed: int) -> list[str]:
        return private_predict(llm, groups, prompt=PROMPT, max_new_tokens=6, clip=CLIP,
                               temperature=0.5, rng=secure_rng(seed), batch_rows=6)

    first = run(11)
    assert run(11) == first
    assert run(12) != first


def test_first_token_follows_softmax_of_summed_clipped_logits(llm: LoadedLLM) -> None:
    """Chi-square goodness of fit of the engine's first tokens against softmax(z / tau).

    3000 identical groups (so 3000 independent draws through the packed engine, with the
    documents' KV shared across groups) against the expected probabilities from
    ``aggregated_logits``; classes with expected count < 5 are pooled. The seed is fixed, so
    the outcome is deterministic; for a correct sampler the false-positive rate of the test
    is alpha = 1e-3.
    """
    tau = 0.6
    draws = 3000
    docs = ["fever cough head pain", "patient doctor chest", "red green blue"]
    texts = []
    seen: list[int] = []

    def recorder(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        from dpsynrag.accounting.token_sampling import sample_tokens

        picks = sample_tokens(votes, tau, rng)
        seen.extend(int(p) for p in picks)
        return picks

    rng = secure_rng(2024)
    texts = private_predict(llm, [docs] * draws, prompt=PROMPT, max_new_tokens=1, clip=CLIP,
                            temperature=tau, rng=rng, batch_rows=600, sampler=recorder)
    assert len(texts) == draws and len(seen) == draws
    z = aggregated_logits(llm, docs, prompt=PROMPT, generated=[], clip=CLIP)
    p = torch.softmax(z / tau, dim=0).numpy()
    counts = np.bincount(seen, minlength=llm.vocab_size).astype(float)
    expected = p * draws
    order = np.argsort(expected)
    big = expected[order] >= 5
    obs = np.append(counts[order][big], counts[order][~big].sum())
    exp = np.append(expected[order][big], expected[order][~big].sum())
    if exp[-1] < 5:  # fold a too-small pooled class into the smallest kept one
        obs[0] += obs[-1]
        exp[0] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    assert len(exp) >= 5  # the test has power: several classes with real mass
    result = stats.chisquare(obs, exp * obs.sum() / exp.sum())
    assert result.pvalue > 1e-3


def test_default_sampler_texts_and_eos(llm: LoadedLLM) -> None:
    groups = _groups("mixed")
    texts = private_predict(llm, groups, prompt=PROMPT, max_new_tokens=3, clip=CLIP,
                            temperature=1.0, rng=secure_rng(5))
    assert all(len(t.split()) <= 3 for t in texts)
    assert all("<|im_end|>" not in t for t in texts)


def test_zero_tokens_and_bad_arguments(llm: LoadedLLM) -> None:
    calls: list[int] = []

    def never(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        calls.append(1)
        return np.zeros(len(active), dtype=np.int64)

    out = private_predict(llm, _groups("mixed"), prompt=PROMPT, max_new_tokens=0, clip=CLIP,
                          temperature=1.0, rng=secure_rng(0), sampler=never)
    assert set(out) == {""} and not calls
    kwargs = {"max_new_tokens": 2, "clip": CLIP, "temperature": 1.0, "rng": secure_rng(0)}
    for bad_prompt in ("no placeholder", "{document} twice {document}"):
        with pytest.raises(ValueError):
            private_predict(llm, [["a"]], prompt=bad_prompt, **kwargs)
    with pytest.raises(ValueError):
        private_predict(llm, [["a"]], prompt=PROMPT, **{**kwargs, "clip": 0.0})
    with pytest.raises(ValueError):
        private_predict(llm, [["a"]], prompt=PROMPT, **{**kwargs, "temperature": 0.0})
    with pytest.raises(ValueError):
        private_predict(llm, [["alpha"]], prompt=PROMPT, sampler=lambda v, a: np.zeros(3),
                        **kwargs)


def test_public_prefix_length_is_the_prompts_common_part_less_one() -> None:
    def layout(*ids: int) -> PromptLayout:
        return PromptLayout("{document}", ids, "", False)

    assert public_prefix_length([layout(1, 2, 3), layout(1, 2, 4)]) == 1
    assert public_prefix_length([layout(1, 2, 3), layout(1, 2, 3)]) == 2
    assert public_prefix_length([layout(1, 2), layout(1, 2, 3, 4)]) == 1
    assert public_prefix_length([layout(5), layout(6)]) == 0
    assert public_prefix_length([layout()]) == 0
    assert public_prefix_length([]) == 0


def test_prompt_layout_prefix_is_the_template_before_the_document(llm: LoadedLLM) -> None:
    layout = prompt_layout(llm, PROMPT)
    head = "<|im_start|> user rewrite the following note :"
    assert list(layout.prefix) == llm.tokenizer(head, add_special_tokens=False)["input_ids"]
    for doc in ("", "fever", "red green blue", "{document}"):
        row = document_row_ids(llm, layout, doc)
        assert row[:len(layout.prefix)] == layout.prefix
        assert list(row) == llm.chat_prompt_ids(PROMPT.replace("{document}", doc))


@pytest.mark.parametrize("engine", ["packed", "reference"])
def test_response_prefix_is_forced_public_text_and_votes_follow_it(llm: LoadedLLM,
                                                                   engine: str) -> None:
    """A public reply prefix sits after the chat prompt of every row: the votes equal the
    row-by-row reference computed with the same prefix, and the texts start with it."""
    prefix = "red green"
    groups = _groups("mixed")
    eos = next(iter(llm.eos_token_ids))
    script = Scripted(llm.vocab_size, eos, {0: 1})
    texts = private_predict(llm, groups, prompt=PROMPT, max_new_tokens=3, clip=CLIP,
                            temperature=1.0, rng=secure_rng(0), sampler=script, engine=engine,
                            response_prefix=prefix)
    for g, text in enumerate(texts):
        assert text.startswith(prefix)
        assert text == llm.tokenizer.decode(
            [*llm.tokenizer.encode(prefix, add_special_tokens=False),
             *[t for t in script.tokens[g] if t != eos]], skip_special_tokens=True)
    for (g, step), votes in script.votes.items():
        expected = aggregated_logits(llm, groups[g], prompt=PROMPT,
                                     generated=script.tokens[g][:step], clip=CLIP,
                                     response_prefix=prefix)
        torch.testing.assert_close(votes, expected, rtol=0, atol=2e-5)
        if groups[g] and step == 0:  # the prefix changes what the model sees
            plain = aggregated_logits(llm, groups[g], prompt=PROMPT, generated=[], clip=CLIP)
            assert not torch.allclose(votes, plain)


def test_one_public_prefix_per_group(llm: LoadedLLM) -> None:
    groups = _groups("mixed")
    prefixes = [["red", "green blue", ""][g % 3] for g in range(len(groups))]
    eos = next(iter(llm.eos_token_ids))
    script = Scripted(llm.vocab_size, eos, {})
    texts = private_predict(llm, groups, prompt=PROMPT, max_new_tokens=2, clip=CLIP,
                            temperature=1.0, rng=secure_rng(0), sampler=script,
                            response_prefix=prefixes)
    for g, text in enumerate(texts):
        assert text.startswith(prefixes[g])
    for (g, step), votes in script.votes.items():
        expected = aggregated_logits(llm, groups[g], prompt=PROMPT,
                                     generated=script.tokens[g][:step], clip=CLIP,
                                     response_prefix=prefixes[g])
        torch.testing.assert_close(votes, expected, rtol=0, atol=2e-5)
    with pytest.raises(ValueError, match="one response prefix per group"):
        private_predict(llm, groups, prompt=PROMPT, max_new_tokens=1, clip=CLIP,
                        temperature=1.0, rng=secure_rng(0), response_prefix=["x"])
