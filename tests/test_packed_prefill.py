"""The packed prefill (``packed_prefill``): many documents' KV in one pass, row-wise layers on
fixed chunks of tokens, attention per document at its own length.

* Every decoder family: the KV equals a prefill of each document alone (``DecoderStack.prefill``,
  the engine's path before) within float rounding (alone, a matmul runs on the document's own
  rows, for which the CPU's BLAS may pick another kernel than for a packed chunk); with a
  shared prefix or none, with documents that span chunks.
* Batch invariance: a document's KV does not depend on which documents share its prefill or
  where it sits in the stream, bit for bit; a NaN or infinity in one document stays in it.
* The engine: votes with packed prefills equal those with one prefill per document within
  float rounding, and tokens exactly, on the clipped and public-difference paths, with
  lookahead and small batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from test_private_prediction import CLIP, PROMPT, WORDS, Scripted, _groups, tiny_llm
from tiny_models import FAMILY_KINDS, make_tiny_family_llm

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import decoding_packed, decoding_stack, engine_memory
from dpsynrag.transforms import private_prediction as pp
from dpsynrag.transforms.decoding_packed import PackedEngine
from dpsynrag.transforms.packed_prefill import packed_prefill, prefill_batches, stream_tokens
from dpsynrag.transforms.public_prior import PublicPriorSettings

LENGTHS = (1, 2, 3, 4, 5, 17, 33, 64, 100, 130)
# Against a prefill of each document alone, only float rounding may differ: which BLAS kernel a
# matmul of n rows gets depends on n and on the CPU (on one Xeon a 4-row document alone matched
# its packed chunk bit for bit, on CI's it did not), so those comparisons take a tolerance far
# below anything a vote or a token could notice; packed against packed stays bit for bit.
VOTE_ATOL = 1e-5
PUBLIC = PublicPriorSettings(documents="known facts : fever cough", top_k=6, temperature=2.0,
                             candidates=("chest pain",))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _seqs(seed: int, lengths: Sequence[int] = LENGTHS, vocab: int = 290) -> list[list[int]]:
    rs = np.random.default_rng(seed)
    return [[int(t) for t in rs.integers(4, vocab, n)] for n in lengths]


def _alone(stack: decoding_stack.DecoderStack, prefix: decoding_stack.PrefixKV | None,
           seqs: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """The engine's path before: one prefill per document, at its own length."""
    return [stack.prefill(prefix, [list(s)])[0][0] for s in seqs]


@pytest.mark.parametrize("kind", FAMILY_KINDS)
def test_each_family_kv_equals_a_prefill_of_each_document_alone(kind: str) -> None:
    stack = decoding_stack.DecoderStack(make_tiny_family_llm(kind, WORDS).model)
    seqs = _seqs(1)
    for prefix in (stack.prefix(_seqs(2, [20])[0]), None):
        alone = _alone(stack, prefix, seqs)
        for chunk in (8, 64, 256):  # 8: documents span many chunks
            packed = packed_prefill(stack, prefix, seqs, chunk_tokens=chunk)
            assert len(packed) == len(seqs)
            for seq, got, want in zip(seqs, packed, alone, strict=True):
                assert got.shape == want.shape == (2, 2, 2, len(seq), 16)
                where = f"{kind}, chunk {chunk}, {len(seq)} tokens"
                torch.testing.assert_close(got, want, rtol=1e-5, atol=5e-5,
                                           msg=lambda m, where=where: f"{where}: {m}")


def test_a_wrong_stack_breaks_the_match() -> None:
    """The comparison can fail: a packed prefill that lets documents attend to each other
    (one sequence made of two documents) gives the second document other KV."""
    stack = decoding_stack.DecoderStack(make_tiny_family_llm("llama", WORDS).model)
    a, b = _seqs(3, [12, 9])
    joined = packed_prefill(stack, None, [a + b], chunk_tokens=64)[0][:, :, :, len(a):]
    alone = packed_prefill(stack, None, [b], chunk_tokens=64)[0]
    assert not torch.allclose(joined, alone, atol=1e-3)


@pytest.mark.parametrize("kind", ["llama", "qwen2-window", "gemma2"])
def test_a_documents_kv_does_not_depend_on_the_others(kind: str) -> None:
    """Alone, first, last, among others of every length, split across chunks: bit for bit
    the same KV (short documents included: their chunk always has ``chunk_tokens`` rows)."""
    stack = decoding_stack.DecoderStack(make_tiny_family_llm(kind, WORDS).model)
    prefix = stack.prefix(_seqs(2, [20])[0])
    seqs = _seqs(4)
    others = _seqs(5, (7, 50, 3, 90))
    for i, seq in enumerate(seqs):
        alone = packed_prefill(stack, prefix, [seq], chunk_tokens=32)[0]
        for batch, at in (([seq, *others], 0), ([*others, seq], len(others)),
                          ([others[0], seq, others[1]], 1),
                          ([*seqs[:i], seq, *seqs[i + 1:]], i)):
            got = packed_prefill(stack, prefix, batch, chunk_tokens=32)[at]
            assert torch.equal(got, alone), (kind, len(seq), at)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_document_leaves_the_others_untouched(bad: float) -> None:
    """One document whose embedding is non-finite (a pathological token) poisons its own KV
    only: the others in its chunks and its prefill keep their KV bit for bit."""
    stack = decoding_stack.DecoderStack(make_tiny_family_llm("gemma2", WORDS).model)
    prefix = stack.prefix(_seqs(2, [20])[0])
    seqs = _seqs(6, (5, 40, 12, 70))
    clean = [packed_prefill(stack, prefix, [s], chunk_tokens=32)[0] for s in seqs]
    poison = 3  # a token id none of the clean documents holds
    assert all(poison not in s for s in seqs)
    real = stack.embed

    def embed(ids: torch.Tensor) -> torch.Tensor:
        out = real(ids)
        return out.masked_fill((ids == poison).unsqueeze(-1), bad)

    stack.embed = embed
    bad_doc = [9, 10, poison, 11, 12, 13]
    got = packed_prefill(stack, prefix, [seqs[0], bad_doc, *seqs[1:]], chunk_tokens=32)
    assert not torch.isfinite(got[1][:, :, :, 2:]).all()  # the poison is really there
    for want, have in zip(clean, [got[0], *got[2:]], strict=True):
        assert torch.equal(have, want)


def test_batches_hold_whole_chunks_within_the_bound_in_order() -> None:
    assert stream_tokens([3, 5], 4) == 8 and stream_tokens([3, 6], 4) == 12
    assert stream_tokens([], 4) == 0
    lengths = [30, 10, 200, 5, 60, 64, 1]
    batches = prefill_batches(lengths, 128, 32)
    assert [i for b in batches for i in b] == list(range(len(lengths)))
    for batch in batches:
        size = stream_tokens([lengths[i] for i in batch], 32)
        assert size <= 128 or len(batch) == 1  # a long document goes alone
    assert [2] in batches
    with pytest.raises(ValueError):
        prefill_batches(lengths, 16, 32)
    with pytest.raises(ValueError):
        stream_tokens([1], 0)


def test_prefill_sizes_are_public_and_fit_the_chunk() -> None:
    for device in ("cpu", "cuda", "meta"):
        chunk, tokens = engine_memory.prefill_sizes(torch.device(device))
        assert 1 <= chunk <= tokens and tokens % chunk == 0
    assert engine_memory.prefill_sizes(torch.device("cuda"))[0] > \
        engine_memory.prefill_sizes(torch.device("cpu"))[0]


# ---------------------------------------------------------------------------- the engine
def _one_by_one(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the engine's prefills compute each document alone (the path before packed
    prefills); returns the list the engine's calls' sizes are recorded in."""
    sizes: list[int] = []

    def alone(stack: Any, prefix: Any, seqs: Sequence[Sequence[int]], *,
              chunk_tokens: int) -> list[torch.Tensor]:
        sizes.append(len(seqs))
        return _alone(stack, prefix, seqs)

    monkeypatch.setattr(decoding_packed, "packed_prefill", alone)
    return sizes


def _recorded(llm: LoadedLLM, groups: list[list[str]], prior: bool,
              **engine: Any) -> Scripted:
    eos = next(iter(llm.eos_token_ids))
    script = Scripted(llm.vocab_size, eos, {0: 2, 3: 1})
    calls: list[int] = []
    real = PackedEngine

    def spy(*args: Any, **kwargs: Any) -> PackedEngine:
        made = real(*args, **{**kwargs, **engine})
        calls.append(1)
        return made

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pp, "PackedEngine", spy)
        pp.private_predict(llm, groups, prompt=PROMPT, max_new_tokens=4, clip=CLIP,
                           temperature=0.7, rng=secure_rng(0), batch_rows=8, sampler=script,
                           engine="packed", public_prior=PUBLIC if prior else None)
    assert calls == [1]
    return script


@pytest.mark.parametrize("prior", [False, True], ids=["clipped", "public-difference"])
@pytest.mark.parametrize("sizes", [{}, {"prefill_chunk": 16, "prefill_tokens": 32}],
                         ids=["default", "small-batches"])
def test_engine_votes_equal_one_prefill_per_document(monkeypatch: pytest.MonkeyPatch,
                                                     prior: bool, sizes: dict) -> None:
    llm = tiny_llm()
    groups = _groups("mixed")
    packed = _recorded(llm, groups, prior, **sizes)
    calls = _one_by_one(monkeypatch)
    alone = _recorded(llm, groups, prior, **sizes)
    assert calls and max(calls) > 1  # the engine asked for several documents at once
    assert packed.tokens == alone.tokens
    assert packed.votes.keys() == alone.votes.keys() and packed.votes
    for key, votes in packed.votes.items():
        torch.testing.assert_close(votes, alone.votes[key], rtol=0, atol=VOTE_ATOL,
                                   msg=lambda m, key=key: f"{key}: {m}")


def test_engine_prefills_documents_together_and_each_once() -> None:
    """An admission's missing documents go in packed prefills of at most ``prefill_tokens``
    stream tokens; the room of a prefill's last chunk takes documents of waiting groups
    (lookahead), which are then not prefilled again."""
    llm = tiny_llm()
    layout = pp.prompt_layout(llm, PROMPT)
    prefix = pp.public_prefix_length([layout])
    rs = np.random.default_rng(8)
    docs = [" ".join(rs.choice(WORDS[:-8], int(n))) for n in rs.integers(2, 12, 12)]
    groups = [[pp.document_row_ids(llm, layout, d) for d in docs[i:i + 3]]
              for i in range(0, 12, 3)]
    stack = decoding_stack.DecoderStack(llm.model)
    seen: list[list[int]] = []
    real = decoding_packed.packed_prefill

    def spy(stack: Any, prefix: Any, seqs: Sequence[Sequence[int]], *,
            chunk_tokens: int) -> list[torch.Tensor]:
        seen.append([len(s) for s in seqs])
        return real(stack, prefix, seqs, chunk_tokens=chunk_tokens)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decoding_packed, "packed_prefill", spy)
        engine = PackedEngine(
            stack, groups, prefix_len=prefix, prefix_ids=list(layout.prefix[:prefix]),
            max_new_tokens=2, clip=CLIP, sampler=Scripted(llm.vocab_size, -1, {}),
            eos_ids=llm.eos_token_ids, batch_rows=3, vocab_size=llm.vocab_size,
            prefill_chunk=64, prefill_tokens=128)
        engine.run()
    assert sum(len(call) for call in seen) == engine.distinct_prefills == len(set(docs))
    assert any(len(call) > 1 for call in seen)  # documents were prefilled together
    assert all(stream_tokens(call, 64) <= 128 for call in seen)
    # one group runs at a time (batch_rows 3): a prefill with more than 3 documents took
    # documents of waiting groups into its last chunk's room
    assert len(seen) < len(groups) and any(len(call) > 3 for call in seen)


def test_engine_refuses_a_chunk_above_the_prefill_bound() -> None:
    llm = tiny_llm()
    layout = pp.prompt_layout(llm, PROMPT)
    prefix = pp.public_prefix_length([layout])
    common: dict[str, Any] = dict(
        prefix_len=prefix, prefix_ids=list(layout.prefix[:prefix]), max_new_tokens=1,
        clip=CLIP, sampler=Scripted(llm.vocab_size, 0, {}), eos_ids=llm.eos_token_ids,
        batch_rows=8, vocab_size=llm.vocab_size)
    rows = [[pp.document_row_ids(llm, layout, "fever cough")]]
    stack = decoding_stack.DecoderStack(llm.model)
    with pytest.raises(ValueError, match="prefill_chunk"):
        PackedEngine(stack, rows, prefill_chunk=64, prefill_tokens=32, **common)
    engine = PackedEngine(stack, rows, **common)
    assert (engine.prefill_chunk, engine.prefill_tokens) == engine_memory.prefill_sizes(
        torch.device("cpu"))


def test_the_gpu_invariance_script_finds_every_check_bitwise_on_cpu(tmp_path: Any) -> None:
    """``benchmarks/engine_invariance.py`` (the GPU session's check) on CPU with the tiny
    shape: batched prefill equals each document alone and the per-document prefill, and a
    subset of groups votes exactly as among all the groups."""
    from benchmark_modules import load_benchmark

    script = load_benchmark("engine_invariance")
    out = tmp_path / "invariance.json"
    assert script.main(["--shape", "tiny", "--device", "cpu", "--docs", "10", "--groups", "9",
                        "--rows", "6", "--tokens", "3", "--batch-rows", "16",
                        "--out", str(out)]) == 0
    import json

    result = json.loads(out.read_text())
    for check in ("prefill_batch_invariance", "prefill_vs_alone", "votes_batch_invariance"):
        assert result[check]["bitwise"] and result[check]["compared"] > 0, check
        assert result[check]["max_abs_diff"] == 0.0 < result[check]["max_abs_value"]
    assert "graphs_vs_eager" not in result  # CUDA only
