"""The packed engine's batch rows and document-KV cache bound, sized from free device memory
(``transforms.engine_memory``), and their use by ``private_predict`` (CPU only: a model that
says it is on CUDA, with its free memory given, drives the engine on CPU)."""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import make_tiny_llm

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import decoding_stack, engine_memory
from dpsynrag.transforms import private_prediction as prediction
from dpsynrag.transforms.engine_memory import (
    CACHE_SHARE,
    FRACTION,
    MAX_ROWS,
    MIN_ROWS,
    ROW_MULTIPLE,
    ROW_SHARE,
    EngineMemoryError,
    ModelSizes,
    plan_engine_memory,
    planned_width,
    row_bytes,
)

GIB = 1 << 30
# Llama-3.1-8B and SmolLM2-135M in bfloat16 (the CUDA default): public configuration values
LLAMA_8B = ModelSizes(layers=32, heads=32, kv_heads=8, head_dim=128, hidden=4096,
                      intermediate=14336, vocab=128256, dtype_bytes=2)
SMOL = ModelSizes(layers=30, heads=9, kv_heads=3, head_dim=64, hidden=576,
                  intermediate=1536, vocab=49152, dtype_bytes=2)
_WORD_TEXT = ("rewrite the following note : . alpha beta gamma delta red green blue one two "
              "three patient doctor fever cough pain")
WORDS = _WORD_TEXT.split()
PROMPT = "rewrite the following note : {document} ."


def _min_free(sizes: ModelSizes, width: int, prefix_len: int = 0) -> int:
    """The least free memory at which ``MIN_ROWS`` rows fit."""
    per_row, fixed = row_bytes(sizes, width, prefix_len)
    return math.ceil((fixed + MIN_ROWS * per_row) / FRACTION)


def test_kv_bytes_per_token_is_layers_2_kv_heads_head_dim_dtype() -> None:
    assert LLAMA_8B.kv_token_bytes == 32 * 2 * 8 * 128 * 2 == 131072
    per_row, _ = row_bytes(LLAMA_8B, 1024, 0)
    assert per_row >= 2 * 1024 * 131072 + 128256 * (2 + 32)  # slots, logits and votes


@pytest.mark.parametrize("sizes", [LLAMA_8B, SMOL], ids=["llama-8b", "smollm2"])
def test_rows_monotone_multiple_of_64_clamped_and_fit(sizes: ModelSizes) -> None:
    width = planned_width(16)
    rs = np.random.default_rng(0)
    frees = sorted({_min_free(sizes, width, 20), *map(int, rs.integers(1, 1 << 41, 300)),
                    2 * GIB, 40 * GIB, 62 * GIB, 78 * GIB, 139 * GIB, 1 << 44})
    last = 0
    fitted = 0
    for free in frees:
        try:
            plan = plan_engine_memory(free, sizes, width=width, prefix_len=20)
        except EngineMemoryError:
            assert last == 0  # nothing fits below the least memory that fits
            continue
        fitted += 1
        assert plan.batch_rows % ROW_MULTIPLE == 0
        assert MIN_ROWS <= plan.batch_rows <= MAX_ROWS
        assert plan.batch_rows >= last  # more free memory never gives fewer rows
        assert plan.doc_cache_bytes >= 0
        assert plan.predicted_bytes <= FRACTION * free  # the plan fits the fraction
        budget = FRACTION * free - plan.fixed_bytes
        if plan.batch_rows > MIN_ROWS:  # the rows keep within their share of the budget
            assert plan.batch_rows * plan.per_row_bytes <= ROW_SHARE * budget
            assert plan.doc_cache_bytes >= CACHE_SHARE * (1 - ROW_SHARE) * budget - 1
        if plan.batch_rows < MAX_ROWS:  # rounded down: one more multiple would not fit
            more = plan.batch_rows + ROW_MULTIPLE
            assert more * plan.per_row_bytes > ROW_SHARE * budget
        last = plan.batch_rows
    assert fitted > 10 and last == MAX_ROWS


def test_a_large_model_gets_far_fewer_rows_than_a_small_one() -> None:
    free = 62 * GIB  # an 80 GB H100 after 16 GB of 8B weights
    llama = plan_engine_memory(free, LLAMA_8B, width=1024, prefix_len=30)
    smol = plan_engine_memory(free, SMOL, width=1024, prefix_len=30)
    # 8B: each row's two 1024-token slots take 256 MiB, so the old fixed 1024 rows cannot fit
    assert llama.batch_rows == 128
    assert llama.batch_rows * 2 * 1024 * LLAMA_8B.kv_token_bytes < free
    assert 1024 * 2 * 1024 * LLAMA_8B.kv_token_bytes > free
    assert smol.batch_rows > 4 * llama.batch_rows


def test_minimum_that_does_not_fit_raises_and_the_least_that_fits_gives_64() -> None:
    least = _min_free(SMOL, 1024, 10)
    with pytest.raises(EngineMemoryError, match="--batch-rows"):
        plan_engine_memory(least - 64, SMOL, width=1024, prefix_len=10)
    plan = plan_engine_memory(least, SMOL, width=1024, prefix_len=10)
    assert plan.batch_rows == MIN_ROWS
    assert plan.predicted_bytes <= FRACTION * least
    with pytest.raises(EngineMemoryError):
        plan_engine_memory(0, SMOL, width=1024)


def test_explicit_rows_are_kept_and_the_cache_gets_a_share_of_what_they_leave() -> None:
    free = 20 * GIB
    plan = plan_engine_memory(free, SMOL, width=1024, batch_rows=100)
    assert plan.batch_rows == 100
    budget = int(FRACTION * free) - plan.fixed_bytes
    assert plan.doc_cache_bytes == int(CACHE_SHARE * (budget - 100 * plan.per_row_bytes))
    tight = plan_engine_memory(GIB, SMOL, width=1024, batch_rows=4096)  # does not fit: no cache
    assert tight.batch_rows == 4096 and tight.doc_cache_bytes == 0
    low = plan_engine_memory(1, SMOL, width=1024, batch_rows=8)  # never raises when given
    assert low.batch_rows == 8 and low.doc_cache_bytes == 0


def test_wider_slots_and_more_tokens_cost_more() -> None:
    free = 62 * GIB
    narrow = plan_engine_memory(free, LLAMA_8B, width=1024)
    wide = plan_engine_memory(free, LLAMA_8B, width=2048)
    assert wide.batch_rows < narrow.batch_rows
    assert planned_width(16) == 1024 and planned_width(1024) == 1024
    assert planned_width(1500) == 2048


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        plan_engine_memory(GIB, SMOL, width=0)
    with pytest.raises(ValueError):
        plan_engine_memory(GIB, SMOL, width=64, fraction=1.5)


# ---------------------------------------------------------------------- private_predict


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return make_tiny_llm(WORDS)


def _groups() -> list[list[str]]:
    docs = ["patient fever cough", "doctor pain", "alpha beta gamma delta red", "one two"]
    return [docs[:2], [docs[1], docs[2]], [], [docs[3], docs[0], docs[2]]]


class _Spy:
    """Records the memory knobs ``private_predict`` hands the packed engine."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[int, int | None]] = []
        real = prediction.PackedEngine

        def engine(*args: object, **kwargs: object) -> object:
            self.seen.append((kwargs["batch_rows"], kwargs["doc_cache_bytes"]))  # type: ignore
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(prediction, "PackedEngine", engine)


def _predict(llm: LoadedLLM, batch_rows: int | None = None, seed: int = 3) -> list[str]:
    return prediction.private_predict(
        llm, _groups(), prompt=PROMPT, max_new_tokens=3, clip=1.0, temperature=1.0,
        rng=secure_rng(seed), batch_rows=batch_rows, engine="packed")


def _as_cuda(llm: LoadedLLM, free: int | None) -> LoadedLLM:
    """The tiny CPU model, labelled as on CUDA with ``free`` bytes measured at load (the
    engine runs where the weights are: CPU)."""
    return dataclasses.replace(llm, device=torch.device("cuda"), free_memory=free)


def _plan(llm: LoadedLLM, free: int, batch_rows: int | None = None) -> engine_memory.EnginePlan:
    layout = prediction.prompt_layout(llm, PROMPT)
    stack = decoding_stack.DecoderStack(llm.model)
    return plan_engine_memory(
        free, ModelSizes.of(stack, llm.model.config), width=planned_width(3),
        prefix_len=prediction.public_prefix_length([layout]), batch_rows=batch_rows)


def _free_for(llm: LoadedLLM, rows: int) -> int:
    """Free memory at which the plan gives exactly ``rows`` rows."""
    per_row, fixed = _plan(llm, GIB).per_row_bytes, _plan(llm, GIB).fixed_bytes
    return math.ceil((fixed + math.ceil(rows * per_row / ROW_SHARE) + 1) / FRACTION)


def test_sizes_of_the_tiny_stack(llm: LoadedLLM) -> None:
    sizes = ModelSizes.of(decoding_stack.DecoderStack(llm.model), llm.model.config)
    assert sizes == ModelSizes(layers=2, heads=4, kv_heads=2, head_dim=8, hidden=32,
                               intermediate=64, vocab=llm.vocab_size, dtype_bytes=4)


def test_cuda_private_predict_uses_the_rows_computed_from_free_memory(
        llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    free = _free_for(llm, 192)
    plan = _plan(llm, free)
    assert plan.batch_rows == 192  # neither the CPU default nor the old fixed 1024
    spy = _Spy(monkeypatch)
    texts = _predict(_as_cuda(llm, free))
    assert spy.seen == [(192, plan.doc_cache_bytes)]
    assert plan.doc_cache_bytes > 0
    # the same rows given explicitly on the CPU give the same texts (same seed)
    assert _predict(llm, batch_rows=192) == texts
    assert spy.seen[-1] == (192, None)


def test_explicit_batch_rows_wins_on_cuda_and_cpu_keeps_128(
        llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    free = _free_for(llm, 256)
    spy = _Spy(monkeypatch)
    _predict(_as_cuda(llm, free), batch_rows=8)
    assert spy.seen[-1] == (8, _plan(llm, free, batch_rows=8).doc_cache_bytes)
    _predict(llm)
    assert spy.seen[-1] == (prediction.DEFAULT_BATCH_ROWS_CPU, None) == (128, None)


def test_free_memory_is_probed_once_and_kept_on_the_model(
        llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[torch.device] = []
    free = _free_for(llm, 320)

    def probe(device: torch.device) -> int:
        probes.append(device)
        return free

    monkeypatch.setattr(engine_memory, "free_cuda_memory", probe)
    spy = _Spy(monkeypatch)
    cuda_llm = _as_cuda(llm, None)
    _predict(cuda_llm)
    _predict(cuda_llm, seed=4)
    assert probes == [torch.device("cuda")]
    assert cuda_llm.free_memory == free
    assert [rows for rows, _ in spy.seen] == [320, 320]


def test_too_little_memory_warns_and_tries_the_minimum(
        llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    spy = _Spy(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=prediction.__name__):
        texts = _predict(_as_cuda(llm, 1 << 20))
    assert spy.seen == [(MIN_ROWS, 0)]
    assert len(texts) == len(_groups())
    assert "trying 64 rows" in caplog.text and "patient" not in caplog.text


def test_load_llm_measures_free_memory_after_loading_on_cuda_only(
        llm: LoadedLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynrag.models import llm as llm_module

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    events: list[str] = []

    def fake_load(_directory: Path, _device: torch.device, _dtype: torch.dtype) -> tuple:
        events.append("loaded")
        return llm.model, llm.tokenizer

    def probe(device: torch.device) -> int:
        events.append(f"probe {device.type}")
        return 12345

    monkeypatch.setattr(llm_module, "_load_from_dir", fake_load)
    monkeypatch.setattr(llm_module, "free_cuda_memory", probe)
    monkeypatch.setattr(llm_module, "resolve_device", lambda device: torch.device(device))
    loaded = llm_module.load_llm(tmp_path / "model", device="cuda", dtype="float32",
                                 cache_dir=tmp_path / "cache")
    assert events == ["loaded", "probe cuda"] and loaded.free_memory == 12345
    events.clear()
    on_cpu = llm_module.load_llm(tmp_path / "model", device="cpu", dtype="float32",
                                 cache_dir=tmp_path / "cache")
    assert events == ["loaded"] and on_cpu.free_memory is None
