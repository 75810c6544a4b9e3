"""The packed engine's batch rows, slot budget and document-KV cache bound, sized from free
device memory (``transforms.engine_memory``), the engine keeping its slots within the budget,
and their use by ``private_predict`` (CPU only: a model that says it is on CUDA, with its free
memory given, drives the engine on CPU)."""

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
from dpsynrag.transforms.decoding_packed import PackedEngine
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
    planned_row_width,
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
    per_row, fixed = row_bytes(LLAMA_8B, 1024, 0, row_width=256)
    assert per_row >= 256 * 131072 + 128256 * (2 + 32)  # a slot, logits and votes
    assert fixed >= 1024 * 131072 + 8192 * 2 * 131072  # a long document, one prefill's KV


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
        assert plan.bound == ("max_rows" if plan.batch_rows == MAX_ROWS else "memory")
        if plan.batch_rows > MIN_ROWS:  # the rows keep within their share of the budget
            assert plan.batch_rows * plan.per_row_bytes <= ROW_SHARE * budget
            assert plan.doc_cache_bytes >= CACHE_SHARE * (1 - ROW_SHARE) * budget - 1
            # the slot budget holds every row at the planned width
            assert plan.slot_bytes >= plan.batch_rows * plan.row_width * sizes.kv_token_bytes
        if plan.batch_rows < MAX_ROWS:  # rounded down: one more multiple would not fit
            more = plan.batch_rows + ROW_MULTIPLE
            assert more * plan.per_row_bytes > ROW_SHARE * budget
        last = plan.batch_rows
    assert fitted > 10 and last == MAX_ROWS


def test_a_large_model_gets_far_fewer_rows_than_a_small_one() -> None:
    free = 62 * GIB  # an 80 GB H100 after 16 GB of 8B weights
    llama = plan_engine_memory(free, LLAMA_8B, width=1024, prefix_len=30, row_width=1024)
    smol = plan_engine_memory(free, SMOL, width=1024, prefix_len=30, row_width=1024)
    # 8B: a 1024-token slot takes 128 MiB a row, so 1024 such rows cannot fit
    assert llama.batch_rows == 256 and llama.bound == "memory"
    assert 1024 * 1024 * LLAMA_8B.kv_token_bytes > free
    assert smol.batch_rows > 4 * llama.batch_rows


@pytest.mark.parametrize("free_gib", [62, 63.5])
def test_the_8b_shape_on_an_80_gb_card_runs_at_least_1024_rows(free_gib: float) -> None:
    """Issue workload: Llama-3.1-8B in bf16 on an 80 GB card (62-63.5 GiB free after the
    16 GB of weights), 64 groups x 80 rows x 70 tokens, ~185 prompt tokens (45 of them the
    shared prefix): rows are planned at a 256-token slot, and the slot budget holds 1,024 of
    them with the lanes' growth copy."""
    plan = plan_engine_memory(int(free_gib * GIB), LLAMA_8B, width=planned_width(70),
                              prefix_len=45, row_width=planned_row_width(70))
    assert planned_row_width(70) == 256 and planned_width(70) == 1024
    assert plan.batch_rows >= 1024 and plan.bound == "memory"
    assert plan.slot_bytes >= 1024 * 256 * LLAMA_8B.kv_token_bytes
    assert plan.doc_cache_bytes > 2 * GIB  # documents of waiting groups stay cached
    assert plan.predicted_bytes <= FRACTION * free_gib * GIB
    summary = plan.summary()
    assert summary["bound"] == "memory" and summary["batch_rows"] == plan.batch_rows
    # the engine's admission: 13 groups of 80 rows of that width join an empty engine at
    # once (one growth of the lane, no copy), within the row budget and the slot budget
    from dpsynrag.transforms.decoding_packed import grown_capacity
    from dpsynrag.transforms.packed_step import bucket

    rows, part = 13 * 80, plan.batch_rows // 8
    capacity = grown_capacity(0, rows, part, bucket)
    assert rows >= 1024 and capacity <= plan.batch_rows
    assert capacity * 256 * LLAMA_8B.kv_token_bytes <= plan.slot_bytes
    # the old planning (two 1024-token slots a row) gave 128 rows on this card
    assert plan_engine_memory(int(free_gib * GIB), LLAMA_8B, width=1024, prefix_len=45,
                              row_width=2048).batch_rows <= 192


def test_the_bound_names_what_set_the_rows() -> None:
    assert plan_engine_memory(139 * GIB, SMOL, width=1024).bound == "max_rows"
    assert plan_engine_memory(139 * GIB, SMOL, width=1024).batch_rows == MAX_ROWS
    assert plan_engine_memory(62 * GIB, SMOL, width=1024).bound == "memory"
    assert plan_engine_memory(62 * GIB, LLAMA_8B, width=1024).bound == "memory"
    assert plan_engine_memory(62 * GIB, LLAMA_8B, width=1024, batch_rows=64).bound == \
        "explicit"


def test_planned_row_width_is_the_lane_of_a_planned_row() -> None:
    from dpsynrag.transforms.decoding_packed import lane_width

    for tokens in (0, 16, 70, 256, 1000):
        width = planned_row_width(tokens)
        assert width == lane_width(engine_memory.PLAN_ROW_TOKENS + 1, tokens)


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
    assert plan.batch_rows == 100 and plan.bound == "explicit"
    budget = int(FRACTION * free) - plan.fixed_bytes
    slots = int(ROW_SHARE * budget) - 100 * plan.step_row_bytes
    assert plan.slot_bytes == slots
    assert plan.doc_cache_bytes == int(CACHE_SHARE * (budget - 100 * plan.step_row_bytes
                                                      - slots))
    tight = plan_engine_memory(GIB, SMOL, width=1024, batch_rows=4096)  # does not fit: no cache
    assert tight.batch_rows == 4096 and tight.doc_cache_bytes == 0 and tight.slot_bytes == 0
    low = plan_engine_memory(1, SMOL, width=1024, batch_rows=8)  # never raises when given
    assert low.batch_rows == 8 and low.doc_cache_bytes == 0


def test_wider_slots_and_more_tokens_cost_more() -> None:
    free = 62 * GIB
    narrow = plan_engine_memory(free, LLAMA_8B, width=1024)
    wide = plan_engine_memory(free, LLAMA_8B, width=2048)
    assert wide.batch_rows < narrow.batch_rows
    wider_rows = plan_engine_memory(free, LLAMA_8B, width=1024, row_width=512)
    assert wider_rows.batch_rows < narrow.batch_rows
    assert planned_width(16) == 1024 and planned_width(1024) == 1024
    assert planned_width(1500) == 2048


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        plan_engine_memory(GIB, SMOL, width=0)
    with pytest.raises(ValueError):
        plan_engine_memory(GIB, SMOL, width=64, fraction=1.5)
    with pytest.raises(ValueError):
        plan_engine_memory(GIB, SMOL, width=64, row_width=0)


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


# ---------------------------------------------------------------------- the slot budget
def _slot_run(llm: LoadedLLM, groups: list[list[str]], slot_bytes: int | None,
              graphs: str = "eager") -> tuple[dict, PackedEngine]:
    from test_step_graphs import FakeCapturer

    layout = prediction.prompt_layout(llm, PROMPT)
    prefix = prediction.public_prefix_length([layout])
    rows = [[prediction.document_row_ids(llm, layout, d) for d in g] for g in groups]
    votes: dict[tuple[int, int], torch.Tensor] = {}
    steps: dict[int, int] = {}

    def sampler(v: torch.Tensor, active: list[int]) -> np.ndarray:
        for r, g in enumerate(active):
            votes[(g, steps.get(g, 0))] = v[r].clone()
            steps[g] = steps.get(g, 0) + 1
        return np.asarray([5 + (3 * g + steps[g]) % 7 for g in active])

    engine = PackedEngine(
        decoding_stack.DecoderStack(llm.model), rows, prefix_len=prefix,
        prefix_ids=list(layout.prefix[:prefix]), max_new_tokens=6, clip=1.0,
        sampler=sampler, eos_ids=frozenset(), batch_rows=8, vocab_size=llm.vocab_size,
        slot_bytes=slot_bytes, graphs=graphs == "fake",
        capturer=FakeCapturer() if graphs == "fake" else None)
    engine.run()
    return votes, engine


def _slot_groups() -> list[list[str]]:
    short = ["patient fever cough", "doctor pain", "one two", "red green blue"]
    long = " ".join(["alpha beta gamma delta"] * 17)  # a 128-wide lane (T = 6)
    return [short[:2], [short[2], long], short[1:4], [long, short[0]], short[:3], [short[3]]]


@pytest.mark.parametrize("graphs", ["eager", "fake"])
def test_the_slot_budget_bounds_the_slots_and_changes_no_vote(llm: LoadedLLM,
                                                              graphs: str) -> None:
    """Groups wait while the lanes' slots (and a growing lane's copy) would exceed
    ``slot_bytes``; lanes left empty are freed; the votes are those of an unbounded run bit
    for bit (with stand-in graphs too: a freed and remade lane is never replayed stale)."""
    groups = _slot_groups()
    free_votes, free = _slot_run(llm, groups, None, graphs)
    assert free.stopped["slots"] == 0
    kv = free.kv_token_bytes
    assert free.lanes.keys() == {64, 128} and kv == 2 * 2 * 2 * 8 * 4
    budget = free.peak_slot_bytes // 2
    assert budget >= (128 + 64) * kv  # every group's slots fit it alone
    votes, bounded = _slot_run(llm, groups, budget, graphs)
    assert bounded.stopped["slots"] > 0  # the budget, not the rows, held groups back
    assert 0 < bounded.peak_slot_bytes <= budget < free.peak_slot_bytes
    assert bounded.peak_rows < free.peak_rows
    assert votes.keys() == free_votes.keys()
    for key, vote in free_votes.items():
        assert torch.equal(votes[key], vote), key
    if graphs == "fake":  # graphs replayed, and lanes remade after a drop were recaptured
        assert bounded.graphs.replays > 0 and bounded.graphs.invalidations > 0


def test_a_group_alone_joins_whatever_its_slots(llm: LoadedLLM) -> None:
    """A budget below one group's slots still runs every group (one at a time): memory is
    then one group's slots, never a refusal after the charge."""
    groups = _slot_groups()
    free_votes, _ = _slot_run(llm, groups, None)
    votes, engine = _slot_run(llm, groups, 1)
    assert engine.peak_rows <= max(len(g) for g in groups) and engine.stopped["slots"] > 0
    for key, vote in free_votes.items():
        assert torch.equal(votes[key], vote), key


def test_cuda_private_predict_hands_the_engine_the_slot_budget(
        llm: LoadedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    free = _free_for(llm, 192)
    plan = _plan(llm, free)
    seen: list[object] = []
    real = prediction.PackedEngine

    def engine(*args: object, **kwargs: object) -> object:
        seen.append(kwargs["slot_bytes"])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(prediction, "PackedEngine", engine)
    _predict(_as_cuda(llm, free))
    _predict(llm)
    assert seen == [plan.slot_bytes, None] and plan.slot_bytes > 0
    stack = decoding_stack.DecoderStack(llm.model)
    layout = prediction.prompt_layout(llm, PROMPT)
    got = prediction.packed_engine_plan(_as_cuda(llm, free), stack, max_new_tokens=3,
                                        prefix_len=prediction.public_prefix_length([layout]))
    assert got == plan and prediction.packed_engine_plan(
        llm, stack, max_new_tokens=3, prefix_len=1) is None
