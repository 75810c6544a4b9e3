"""The private-prediction benchmark (benchmarks/private_prediction.py): its workload builder,
its random-weight model shapes, and the JSON of a tiny CPU run.

No download: the shapes are counted on the meta device, the CPU run uses the test's word-level
tokenizer (tiny_models) in place of the packaged SmolLM2 tokenizer.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from benchmark_modules import load_benchmark
from tiny_models import make_tiny_llm

from dpsynrag.transforms import decoding_stack


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("private_prediction")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """Word-level: every whitespace-separated word is one token (unknown words: <unk>)."""
    words = "rephrase the following document in your own words keeping every fact it states"
    return make_tiny_llm([*words.split(), "document:"]).tokenizer


def _tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


# ------------------------------------------------------------------------------ workload
def test_workload_builder_at_paper_scale(bench: ModuleType, tokenizer: Any) -> None:
    """64 groups × 80 documents, L = 5 (its speed is a target of benchmarks/helper_speed.py:
    each 8-word draw once converted the ~234k-word list, minutes in all)."""
    groups, distinct = bench.make_workload(tokenizer, 64, 80, 5, 120)
    assert len(groups) == 64 and all(len(g) == 80 for g in groups)
    assert distinct == 64 * 80 // 5
    # every document sits in exactly L = 5 groups, and has at least doc_tokens tokens
    counts = Counter(d for g in groups for d in g)
    assert set(counts.values()) == {5} and len(counts) == distinct
    assert min(_tokens(tokenizer, d) for d in counts) >= 120


def test_workload_builder_is_deterministic_per_seed(bench: ModuleType, tokenizer: Any) -> None:
    first = bench.make_workload(tokenizer, 6, 8, 2, 24, seed=7)
    again = bench.make_workload(tokenizer, 6, 8, 2, 24, seed=7)
    other = bench.make_workload(tokenizer, 6, 8, 2, 24, seed=8)
    assert first == again
    assert first[0] != other[0]
    assert first[1] == other[1] == 6 * 4


def test_workload_words_are_the_list_draws_of_before(bench: ModuleType, tokenizer: Any) -> None:
    """Drawing from the array gives the words the old per-draw list conversion gave."""
    groups, _ = bench.make_workload(tokenizer, 1, 1, 1, 16)  # one word = one token: 2 draws
    words_list = [str(w) for w in bench.public_words()]
    rs = np.random.default_rng(bench.WORKLOAD_SEED)
    old = [str(w) for _ in range(2) for w in rs.choice(words_list, 8)]
    assert groups[0][0].split() == old


# ------------------------------------------------------------------------------ shapes
# (hidden, layers, heads, kv heads, intermediate, vocab, rope theta, public parameter count)
PUBLIC = {
    "smollm2-135m": (576, 30, 9, 3, 1536, 49_152, 100_000.0, 135e6),
    "llama-3.1-8b": (4096, 32, 32, 8, 14_336, 128_256, 500_000.0, 8.0e9),
    "qwen2.5-7b": (3584, 28, 28, 4, 18_944, 152_064, 1_000_000.0, 7.6e9),
}


def _rope_theta(config: Any) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(config, "rope_theta", math.nan)))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_named_shape_has_the_public_dimensions(bench: ModuleType, name: str) -> None:
    hidden, layers, heads, kv, inter, vocab, theta, public = PUBLIC[name]
    config = bench.shape_config(name)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.intermediate_size, config.vocab_size) == (
        hidden, layers, heads, kv, inter, vocab)
    assert _rope_theta(config) == theta
    counts = bench.parameter_counts(config)  # built on the meta device: nothing allocated
    assert counts["total"] == pytest.approx(public, rel=0.03)
    assert counts["total"] == pytest.approx(bench.SHAPES[name].public_parameters, rel=0.01)
    assert counts["non_embedding"] + counts["embedding"] + counts["lm_head"] == counts["total"]


def test_shape_families_and_vocab_override(bench: ModuleType) -> None:
    assert bench.shape_config("qwen2.5-7b").model_type == "qwen2"
    assert bench.shape_config("llama-3.1-8b").model_type == "llama"
    qwen = bench.parameter_counts(bench.shape_config("qwen2.5-7b"))
    assert qwen["non_embedding"] == pytest.approx(6.53e9, rel=0.01)  # the model card's figure
    smol = bench.parameter_counts(bench.shape_config("smollm2-135m"))
    assert smol["lm_head"] == 0  # tied embeddings
    full = bench.parameter_counts(bench.shape_config("llama-3.1-8b"))
    small = bench.parameter_counts(bench.shape_config("llama-3.1-8b", vocab_size=49_152))
    # embedding and (untied) LM head each lose (128256 - 49152) rows of 4096
    assert full["total"] - small["total"] == 2 * 4096 * (128_256 - 49_152)
    assert small["non_embedding"] == full["non_embedding"]


def test_default_peak_by_device_name(bench: ModuleType) -> None:
    assert bench.default_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert bench.default_peak_tflops("NVIDIA H100 SXM5 80GB") == 989.0
    assert bench.default_peak_tflops("NVIDIA H200") == 989.0
    assert bench.default_peak_tflops("NVIDIA H100 PCIe") is None
    assert bench.default_peak_tflops("NVIDIA A100-SXM4-80GB") is None
    assert bench.default_peak_tflops("Intel(R) Xeon(R) Processor") is None
    assert bench.default_peak_tflops(None) is None


# ------------------------------------------------------------------------------ runs
def test_qwen2_shape_runs_and_records_its_engine(bench: ModuleType, tokenizer: Any) -> None:
    """A Qwen2-shaped model is built and run; the JSON names the engine private_predict chose
    (the packed one: decoding_stack drives Qwen2)."""
    shape = bench.ModelShape("qwen2", 32, 1, 4, 2, 64, 128, 1_000_000.0, 1e-6, 512, False, None)
    llm = bench.random_weights_llm(shape, "cpu", "float32", tokenizer=tokenizer)
    assert llm.model.config.model_type == "qwen2" and llm.vocab_size == 128
    groups, _ = bench.make_workload(tokenizer, 2, 2, 1, 6)
    run = bench.run_engine(llm, groups, 2, None)
    assert decoding_stack.supports(llm.model)
    assert run["engine"] == "packed"
    assert run["token_steps"] > 0
    assert run["prefill_seconds"] is not None and run["decode_seconds"] is not None
    assert run["decode_token_steps_per_s"] > 0


def test_device_token_sampling_draws_the_same_tokens(bench: ModuleType, tokenizer: Any) -> None:
    """The benchmark's device sampler (inverse_cdf_tokens from the same CSPRNG uniforms)
    returns what its host sampler returns, step by step."""
    from dpsynrag.accounting.rng import RandomSource

    groups = [["a"] * 3, ["b"] * 2]
    host, host_counts = bench._counting_sampler(groups, RandomSource(seed=5))
    device, device_counts = bench._counting_sampler(groups, RandomSource(seed=5), device=True)
    generator = torch.Generator().manual_seed(1)
    for _ in range(6):
        votes = torch.randn(2, 300, generator=generator) * 4
        assert device(votes, [0, 1]).tolist() == host(votes, [0, 1]).tolist()
    assert device_counts == host_counts == {"token_steps": 30, "group_tokens": 12}
    shape = bench.ModelShape("llama", 32, 1, 4, 2, 64, 128, 10_000.0, 1e-5, 512, False, None)
    llm = bench.random_weights_llm(shape, "cpu", "float32", tokenizer=tokenizer)
    workload, _ = bench.make_workload(tokenizer, 2, 2, 1, 6)
    assert bench.run_engine(llm, workload, 2, None, token_sampling="device")[
        "token_sampling"] == "device"
    assert bench.run_engine(llm, workload, 2, None)["token_sampling"] == "host"  # auto on CPU


def test_tiny_cpu_run_reports_the_new_fields(bench: ModuleType, tokenizer: Any,
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "packaged_tokenizer", lambda: tokenizer)
    out = tmp_path / "bench.json"
    assert bench.main(["--random-weights", "tiny", "--vocab-size", "128", "--device", "cpu",
                       "--dtype", "float32", "--groups", "2", "--docs", "3", "--tokens", "3",
                       "--doc-tokens", "8", "--reference-groups", "1", "--batch-rows", "8",
                       "--peak-tflops", "2.5", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert isinstance(result["device_name"], str) and result["device_name"]
    assert result["dtype"] == "float32"
    assert result["peak_gpu_memory_bytes"] is None  # CPU

    model = result["model"]
    counts = bench.parameter_counts(bench.shape_config("tiny", vocab_size=128))
    assert model["parameters"] == counts["total"] > 0
    assert model["shape"] == "tiny" and model["vocab_size"] == 128
    assert (model["hidden_size"], model["layers"], model["attention_heads"]) == (64, 2, 4)

    engine = result["engine"]
    assert engine["engine"] == "packed"  # tiny is a Llama
    # the step's engine facts: no CUDA graphs on CPU, a few distinct step shapes
    assert engine["graphs_requested"] == "auto" and engine["graphs"] is False
    assert engine["graph_captures"] == engine["graph_replays"] == 0
    assert 1 <= engine["step_keys"] <= 3 * 2  # tokens x groups steps at most
    # what bounded the batch: the explicit --batch-rows; 2 groups of 3 rows fit 8 rows
    batch = result["batch"]
    assert batch["bound"] == "explicit" and batch["plan"] is None  # no memory plan on CPU
    assert batch["peak_rows"] == engine["peak_rows"] == 6
    assert engine["admissions_stopped_by"] == {"batch_rows": 0, "slot_bytes": 0}
    assert batch["rows_in_flight_bound"] == "workload"
    fake = {"admissions_stopped_by": {"batch_rows": 2, "slot_bytes": 5}, "peak_rows": 64}
    assert bench.batch_bounds(fake, None, explicit=False) == {
        "bound": "cpu_default", "plan": None, "peak_rows": 64,
        "rows_in_flight_bound": "slot_bytes"}
    flops = result["flops"]
    unit = 4 * model["layers"] * model["attention_heads"] * model["head_dim"]
    per_token = 2 * (flops["weights_layers"] + flops["weights_lm_head"]) \
        + unit * flops["decode_context"]
    assert flops["decode"] == pytest.approx(engine["token_steps"] * per_token, rel=1e-3)
    assert flops["prefill"] > 2 * flops["weights_layers"] * flops["prefill_tokens"] > 0
    assert flops["total"] == pytest.approx(flops["prefill"] + flops["decode"])
    achieved = flops["total"] / engine["wall_seconds"] / 1e12
    assert flops["achieved_tflops"] == pytest.approx(achieved, rel=1e-2)
    assert flops["peak_tflops"] == 2.5 and flops["peak_tflops_source"] == "--peak-tflops"
    assert flops["share_of_peak"] == pytest.approx(achieved / 2.5, rel=1e-2)
    assert 0 < flops["share_of_peak"] < 1
    assert flops["decode_share_of_peak"] > 0

    paper = result["paper_projection"]
    assert (paper["R"], paper["k"], paper["T"], paper["L"]) == (500, 80, 70, 5)
    projected = paper["engine"]
    assert projected["row_token_steps"] == 2_800_000 and projected["prompt_prefills"] == 8000
    expected = 2_800_000 / engine["decode_token_steps_per_s"] \
        + 8000 * engine["prefill_seconds"] / engine["documents_prefilled"]
    assert projected["seconds"] == pytest.approx(expected, rel=1e-2)
    assert paper["reference"]["prompt_prefills"] == 40_000


def test_cli_refuses_vocab_without_shape_and_bad_projection(bench: ModuleType) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--vocab-size", "49152"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--projection", "500,80,70"])
    assert bench.parse_args(["--projection", "10,8,7,2"]).projection == (10, 8, 7, 2)
    assert bench.parse_args([]).projection == (500, 80, 70, 5)


def test_random_weights_refuse_a_vocab_below_the_tokenizer(bench: ModuleType,
                                                           tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="smaller than the tokenizer"):
        bench.random_weights_llm("tiny", "cpu", "float32", vocab_size=len(tokenizer) - 1,
                                 tokenizer=tokenizer)
    assert torch.get_default_dtype() == torch.float32


def test_random_weights_are_built_in_the_asked_dtype(bench: ModuleType, tokenizer: Any) -> None:
    llm = bench.random_weights_llm("tiny", "cpu", "bfloat16", vocab_size=128,
                                   tokenizer=tokenizer)
    assert llm.dtype == torch.bfloat16 and llm.device == torch.device("cpu")
    weights = llm.model.model.layers[0].mlp.up_proj.weight
    assert weights.dtype == torch.bfloat16
    assert torch.isfinite(weights).all() and 0.005 < float(weights.float().std()) < 0.1
    assert llm.eos_token_ids == {tokenizer.eos_token_id}
    assert torch.get_default_dtype() == torch.float32
