"""Batch invariance and parity checks of the packed engine, for a GPU (runs on CPU too).

```
python benchmarks/engine_invariance.py [--shape smollm2-135m|llama-3.1-8b|qwen2.5-7b|tiny]
    [--device cuda|cpu] [--dtype bfloat16|float32] [--docs 48] [--groups 24] [--rows 12]
    [--tokens 6] [--batch-rows 128] [--out FILE]
```

Random weights of a real shape (``private_prediction.py``'s shapes) and random token ids
(no tokenizer, nothing downloaded). It reports, as JSON:

* ``prefill_batch_invariance``: each document's KV from ``packed_prefill`` alone against the
  same document inside a prefill of all documents (in order and reversed): ``bitwise`` and the
  largest difference. Expected bit for bit on any device (shapes fixed by public sizes and the
  document's own length).
* ``prefill_vs_alone``: ``packed_prefill`` against ``DecoderStack.prefill`` of each document
  alone (the engine's path before): bit for bit on CPU for documents of 4 tokens or more;
  on a GPU the kernels differ, so a difference of the order of the dtype's rounding.
* ``votes_batch_invariance``: every step's votes of a subset of the groups (every third)
  run alone against the same groups run among all the others, with the same scripted tokens
  and the same ``batch_rows``: ``bitwise`` and the largest difference (a group's float64 sum
  of its rows may add in another order on CUDA: ~1e-16 relative; a row's values must not move).
* ``graphs_vs_eager``: the votes of all the groups with CUDA graphs on and off (CUDA only).

Privacy: random weights and random ids; nothing private is read or written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from private_prediction import build_random_model, shape_config

from dpsynrag.transforms.decoding_packed import PackedEngine
from dpsynrag.transforms.decoding_stack import DecoderStack
from dpsynrag.transforms.packed_prefill import packed_prefill

PREFIX_TOKENS = 45  # the shared prefix of the benchmark's chat prompt


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def _summary(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
    return {"compared": len(pairs), "bitwise": all(torch.equal(a, b) for a, b in pairs),
            "max_abs_diff": max((_diff(a, b) for a, b in pairs), default=0.0),
            "max_abs_value": max((float(b.double().abs().max()) for _, b in pairs),
                                 default=0.0)}


def prefill_checks(stack: DecoderStack, prefix_ids: list[int], docs: list[list[int]],
                   chunk: int) -> dict[str, Any]:
    prefix = stack.prefix(prefix_ids)
    alone = [packed_prefill(stack, prefix, [d], chunk_tokens=chunk)[0] for d in docs]
    together = packed_prefill(stack, prefix, docs, chunk_tokens=chunk)
    backwards = packed_prefill(stack, prefix, docs[::-1], chunk_tokens=chunk)[::-1]
    single = [stack.prefill(prefix, [d])[0][0] for d in docs]
    return {
        "prefill_batch_invariance": _summary([*zip(together, alone, strict=True),
                                              *zip(backwards, alone, strict=True)]),
        "prefill_vs_alone": _summary(list(zip(together, single, strict=True))),
    }


def run_votes(stack: DecoderStack, groups: list[list[tuple[int, ...]]], names: list[int],
              prefix: list[int], tokens: int, batch_rows: int, vocab: int,
              graphs: bool | None) -> dict[tuple[int, int], torch.Tensor]:
    """Every (group name, step) vote; the tokens fed are scripted by (name, step) alone."""
    votes: dict[tuple[int, int], torch.Tensor] = {}
    steps: dict[int, int] = {}

    def sampler(v: torch.Tensor, active: list[int]) -> np.ndarray:
        out = []
        for row, g in enumerate(active):
            step = steps.get(g, 0)
            steps[g] = step + 1
            votes[(names[g], step)] = v[row].detach().double().cpu().clone()
            out.append(100 + (37 * names[g] + 11 * step) % 1000)
        return np.asarray(out)

    PackedEngine(stack, groups, prefix_len=len(prefix), prefix_ids=prefix,
                 max_new_tokens=tokens, clip=0.5, sampler=sampler, eos_ids=frozenset(),
                 batch_rows=batch_rows, vocab_size=vocab, graphs=graphs).run()
    return votes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="smollm2-135m")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--docs", type=int, default=48)
    parser.add_argument("--groups", type=int, default=24)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=6)
    parser.add_argument("--batch-rows", type=int, default=128)
    parser.add_argument("--min-len", type=int, default=40)
    parser.add_argument("--max-len", type=int, default=260)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (
        torch.bfloat16 if device.type == "cuda" else torch.float32)
    config = shape_config(args.shape)
    model = build_random_model(config, device, dtype)
    stack = DecoderStack(model)
    vocab = int(config.vocab_size)
    rs = np.random.default_rng(args.seed)
    ids = lambda n: [int(t) for t in rs.integers(10, min(vocab, 40_000), n)]  # noqa: E731
    prefix = ids(PREFIX_TOKENS)
    docs = [ids(int(n)) for n in rs.integers(args.min_len, args.max_len, args.docs)]
    from dpsynrag.transforms.engine_memory import prefill_sizes

    chunk, _ = prefill_sizes(device)
    result: dict[str, Any] = {"shape": args.shape, "device": str(device),
                              "dtype": str(dtype).removeprefix("torch."),
                              "prefill_chunk": chunk}
    result.update(prefill_checks(stack, prefix, docs, chunk))
    # rows: the prefix, a document, and a last prompt token; each document in 3 groups
    rows = [tuple(prefix + d + [7]) for d in docs]
    step = max(1, args.rows // 3)
    groups = [[rows[(g * step + j) % len(rows)] for j in range(args.rows)]
              for g in range(args.groups)]
    subset = list(range(0, args.groups, 3))
    names = list(range(args.groups))
    every = run_votes(stack, groups, names, prefix, args.tokens, args.batch_rows, vocab, None)
    few = run_votes(stack, [groups[g] for g in subset], subset, prefix, args.tokens,
                    args.batch_rows, vocab, None)
    pairs = [(few[(g, s)], every[(g, s)]) for g in subset for s in range(args.tokens)]
    result["votes_batch_invariance"] = _summary(pairs)
    if device.type == "cuda":
        eager = run_votes(stack, groups, names, prefix, args.tokens, args.batch_rows, vocab,
                          False)
        result["graphs_vs_eager"] = _summary([(every[k], eager[k]) for k in eager])
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
