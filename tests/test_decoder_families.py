"""Issue 17: the packed engine drives Llama, Gemma 1-3, Mistral, Qwen2/2.5 and Qwen3 exactly,
and any other model falls back to the reference loop with one warning naming the reason.

Each family is a tiny random float32 model (2 layers, hidden 64, GQA 4/2 heads, 300 logits,
eager attention, norms perturbed off their initial values) built in ``tiny_models``; windowed
kinds use an 8-position window, shorter than every row, so the window really cuts attention.
The votes of every step must equal the audit reference ``aggregated_logits`` (a full forward
of each row through the Hugging Face model, no cache), and the tokens drawn with fixed
per-(group, step) uniforms must equal those of the reference engine.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch
from test_packed_prefill import VOTE_ATOL
from test_private_prediction import CLIP, PROMPT, WORDS
from tiny_models import FAMILY_KINDS, WINDOW, make_tiny_family_llm

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import decoding_llama, decoding_packed, decoding_stack
from dpsynrag.transforms.decoding_packed import PackedEngine
from dpsynrag.transforms.private_prediction import (
    aggregated_logits,
    document_row_ids,
    private_predict,
    prompt_layout,
    public_prefix_length,
)

TAU = 0.3  # sharp enough that a wrong vote changes the drawn tokens
STEPS = 5
# The tiny random models' logits lie close together, so the clipping transform's rescaling
# (c / half-range of exp(l - max l) - 1) multiplies float32 rounding of the logits by far more
# than 1: measured worst gaps are 6e-7 to 1.2e-5 per family and 2.2e-5 for qwen2-window (whose
# 8-position window sums attention in another order), about 1e-5 relative to votes of 1.5. A
# real indexing or masking error moves a vote by the order of the clip bound (1.0).
ATOL = 5e-5
LOGGER = "dpsynrag.transforms.private_prediction"


def _groups() -> list[list[str]]:
    """Rows from one word (the query still sees the shared prefix through an 8-window) to
    60 words (a 128-wide lane); one empty group, one document in two groups."""
    rs = np.random.default_rng(17)
    docs = [" ".join(rs.choice(WORDS[:-8], n)) for n in (1, 3, 12, 25, 60)]
    return [[docs[0], docs[3]], [docs[2], docs[4], docs[1]], [], [docs[3]]]


class Draws:
    """Inverse-CDF draws from softmax(votes / TAU) with one fixed uniform per (group, step):
    the same draws in whatever order an engine asks for them. Records every vote vector."""

    def __init__(self, seed: int = 5) -> None:
        self.uniform = np.random.default_rng(seed).random((16, 16))
        self.votes: dict[tuple[int, int], torch.Tensor] = {}
        self.tokens: dict[int, list[int]] = {}

    def __call__(self, votes: torch.Tensor, active: list[int]) -> np.ndarray:
        out = []
        for row, g in enumerate(active):
            made = self.tokens.setdefault(g, [])
            self.votes[(g, len(made))] = votes[row].clone()
            cdf = torch.cumsum(torch.softmax(votes[row] / TAU, dim=0), dim=0).numpy()
            token = min(int(np.searchsorted(cdf, self.uniform[g, len(made)])), cdf.size - 1)
            made.append(token)
            out.append(token)
        return np.asarray(out)


def _run(llm: LoadedLLM, engine: str) -> Draws:
    draws = Draws()
    private_predict(llm, _groups(), prompt=PROMPT, max_new_tokens=STEPS, clip=CLIP,
                    temperature=TAU, rng=secure_rng(0), batch_rows=16, sampler=draws,
                    engine=engine)
    return draws


def _worst_error(llm: LoadedLLM, draws: Draws) -> float:
    """The largest gap between recorded votes and the audit reference."""
    groups = _groups()
    worst = 0.0
    for (g, step), votes in draws.votes.items():
        expected = aggregated_logits(llm, groups[g], prompt=PROMPT,
                                     generated=draws.tokens[g][:step], clip=CLIP)
        worst = max(worst, float((votes - expected).abs().max()))
    return worst


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=FAMILY_KINDS)
def family_llm(request: pytest.FixtureRequest) -> LoadedLLM:
    return make_tiny_family_llm(request.param, WORDS)


def test_family_packed_votes_and_tokens_match_references(
        family_llm: LoadedLLM, caplog: pytest.LogCaptureFixture) -> None:
    llm = family_llm
    assert decoding_stack.unsupported_reason(llm.model) is None
    caplog.set_level(logging.WARNING, logger=LOGGER)
    packed = _run(llm, "auto")
    assert not [r for r in caplog.records if r.name == LOGGER]  # no fallback happened
    groups = _groups()
    for g, group in enumerate(groups):  # every group sampled until EOS or STEPS
        made = packed.tokens[g]
        assert len(made) == STEPS or made[-1] in llm.eos_token_ids
        assert group or torch.count_nonzero(packed.votes[(g, 0)]) == 0
    assert len(packed.votes) >= 3 * STEPS
    assert _worst_error(llm, packed) <= ATOL
    reference = _run(llm, "reference")
    assert reference.tokens == packed.tokens
    assert reference.votes.keys() == packed.votes.keys()
    for key, votes in packed.votes.items():  # each within ATOL of the audit reference
        torch.testing.assert_close(reference.votes[key], votes, rtol=0, atol=2 * ATOL)


def test_family_packed_prefill_votes_equal_one_prefill_per_document(
        family_llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batched prefill (``packed_prefill``: several documents per pass, row-wise layers on
    fixed chunks) against one prefill per document (the path before): the same votes within
    float rounding (the BLAS kernel for a matmul may depend on its row count and the CPU) and
    the same tokens."""
    packed = _run(family_llm, "packed")
    sizes: list[int] = []

    def alone(stack: decoding_stack.DecoderStack, prefix: decoding_stack.PrefixKV | None,
              seqs: list[list[int]], *, chunk_tokens: int) -> list[torch.Tensor]:
        sizes.append(len(seqs))
        return [stack.prefill(prefix, [list(s)])[0][0] for s in seqs]

    monkeypatch.setattr(decoding_packed, "packed_prefill", alone)
    single = _run(family_llm, "packed")
    assert sizes and max(sizes) > 1  # the engine did ask for several documents at once
    assert single.tokens == packed.tokens
    assert single.votes.keys() == packed.votes.keys()
    for key, votes in packed.votes.items():
        torch.testing.assert_close(single.votes[key], votes, rtol=0, atol=VOTE_ATOL,
                                   msg=lambda m, key=key: f"{key}: {m}")


def test_family_rows_exceed_the_window() -> None:
    """The windowed kinds' rows are longer than the window, so the mask is exercised."""
    llm = make_tiny_family_llm("mistral", WORDS)
    layout = prompt_layout(llm, PROMPT)
    lengths = [len(document_row_ids(llm, layout, d)) for g in _groups() for d in g]
    assert min(lengths) < WINDOW + public_prefix_length([layout]) < max(lengths)
    assert max(lengths) > 64  # one row needs a 128-wide lane


def _packed_votes(llm: LoadedLLM, stack: decoding_stack.DecoderStack) -> float:
    """Worst vote error of the packed engine with ``stack`` (possibly mutated) vs the audit
    reference, over three steps with fixed tokens."""
    groups = [g for g in _groups() if g]
    layout = prompt_layout(llm, PROMPT)
    rows = [[document_row_ids(llm, layout, d) for d in g] for g in groups]
    prefix = public_prefix_length([layout])
    fixed = [9, 23, 41]
    votes: dict[tuple[int, int], torch.Tensor] = {}
    steps: dict[int, int] = {}

    def sampler(v: torch.Tensor, active: list[int]) -> np.ndarray:
        for row, g in enumerate(active):
            votes[(g, steps.get(g, 0))] = v[row].clone()
            steps[g] = steps.get(g, 0) + 1
        return np.asarray([fixed[steps[g] - 1] for g in active])

    PackedEngine(stack, rows, prefix_len=prefix, prefix_ids=list(layout.prefix[:prefix]),
                 max_new_tokens=len(fixed), clip=CLIP, sampler=sampler,
                 eos_ids=llm.eos_token_ids, batch_rows=8, vocab_size=llm.vocab_size).run()
    return max(float((v - aggregated_logits(llm, groups[g], prompt=PROMPT,
                                            generated=fixed[:s], clip=CLIP)).abs().max())
               for (g, s), v in votes.items())


@pytest.mark.parametrize("kind,change", [
    ("mistral", {"windows": [None, None]}),
    ("qwen2-window", {"windows": [None, None]}),
    ("gemma2", {"windows": [None, None]}),
    ("gemma2", {"attn_softcap": None}),
    ("gemma2", {"final_softcap": None}),
    ("gemma2", {"family": {"sandwich_norms": False}}),
    ("gemma3", {"rope_keys": ["full_attention", "full_attention"]}),
    ("gemma3", {"family": {"qk_norm": False}}),
    ("qwen3", {"family": {"qk_norm": False}}),
])
def test_each_family_feature_matters(kind: str, change: dict) -> None:
    """Dropping one family feature from the stack breaks the match: the tests above can fail,
    and each feature is computed by the stack, not by chance."""
    llm = make_tiny_family_llm(kind, WORDS)
    stack = decoding_stack.DecoderStack(llm.model)
    assert _packed_votes(llm, stack) <= ATOL
    for name, value in change.items():
        if name == "family":
            value = dataclasses.replace(stack.family, **value)
        setattr(stack, name, value)
    assert _packed_votes(llm, stack) > 20 * ATOL  # rounding stays below ATOL


def test_unsupported_model_falls_back_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    llm = make_tiny_family_llm("gpt2", WORDS)
    reason = decoding_stack.unsupported_reason(llm.model)
    assert reason is not None and "supported decoder families" in reason
    caplog.set_level(logging.WARNING, logger=LOGGER)
    auto = _run(llm, "auto")
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1  # once per call, not per group or step
    message = records[0].getMessage()
    assert records[0].levelno == logging.WARNING and "\n" not in message
    assert "model_type='gpt2'" in message and reason in message and "reference" in message
    caplog.clear()
    reference = _run(llm, "reference")
    assert not [r for r in caplog.records if r.name == LOGGER]  # asked for: silent
    assert auto.tokens == reference.tokens
    assert auto.votes.keys() == reference.votes.keys()
    assert all(torch.equal(auto.votes[k], reference.votes[k]) for k in auto.votes)
    assert _worst_error(llm, auto) <= ATOL
    with pytest.raises(ValueError, match="gpt2"):
        _run(llm, "packed")


def test_configurations_computed_inexactly_are_refused() -> None:
    """Settings the stack would get wrong make ``supports`` false with a reason."""
    import transformers as tf

    def model(config_cls: type, model_cls: type, **kwargs: object) -> torch.nn.Module:
        config = config_cls(vocab_size=50, hidden_size=16, intermediate_size=32,
                            num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, head_dim=8, **kwargs)
        return model_cls(config)

    cases = [
        (model(tf.Gemma2Config, tf.Gemma2ForCausalLM, use_bidirectional_attention=True),
         "bidirectional"),
        (model(tf.LlamaConfig, tf.LlamaForCausalLM, rope_parameters={
            "rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}), "dynamic"),
    ]
    for bad, words in cases:
        reason = decoding_stack.unsupported_reason(bad)
        assert reason is not None and words in reason
        assert not decoding_stack.supports(bad)
        with pytest.raises(ValueError, match=words):
            decoding_stack.DecoderStack(bad)
    assert decoding_stack.supports(model(tf.Gemma2Config, tf.Gemma2ForCausalLM))


def test_decoding_llama_still_imports() -> None:
    assert decoding_llama.LlamaStack is decoding_stack.DecoderStack
    assert decoding_llama.supports is decoding_stack.supports
    assert decoding_llama.PrefixKV is decoding_stack.PrefixKV
    assert {"llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text"} <= \
        decoding_llama.SUPPORTED_MODEL_TYPES
