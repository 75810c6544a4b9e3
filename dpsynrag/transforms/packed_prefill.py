"""Packed prefill of many documents' KV for the packed engine (``decoding_packed``).

The engine needs, for every distinct document, the KV of its tokens after the shared public
prefix. It used to run one forward pass per document (shape: its own length): on a GPU that is
host-bound (≈ 25 ms a document whatever the model size). ``packed_prefill`` runs many
documents in one pass:

* **Row-wise layers on fixed chunks.** The documents' tokens are laid end to end in a token
  stream (no padding between documents) of whole chunks of ``chunk_tokens`` tokens (public;
  the last chunk is filled with filler tokens whose results are dropped). Embeddings, norms,
  projections, q/k norms, rotary embeddings, output projections and MLPs run on one chunk at
  a time, so every such call has the shape ``(chunk_tokens, hidden)`` whatever the documents.
* **Attention per document, at its own length.** Each document's queries attend to the
  prefix KV and to its own keys only (causal, within the layer's sliding window), in one call
  of the shape ``(1, heads, L, P + L)`` for its own L: exactly the attention call of a
  prefill of that document alone.
* **Positions** are each document's own (P, P + 1, ...), as in a prefill alone.
* The last layer's output projection and MLP are skipped: no KV depends on them.

Equality with a prefill of each document alone. On this CPU (float32, 2 threads) the KV of a
document of at least 5 tokens is **bit for bit** that of ``DecoderStack.prefill`` of the
document alone, for every family of ``decoding_stack`` (tested): the CPU GEMM computes a row
the same way for any row count of 5 or more, and the attention call has the same shape. A
document of at most 4 tokens differs by float rounding (~1e-6 relative): the prefill alone
ran its matmuls on at most 4 rows, for which the CPU BLAS picks another kernel. On a GPU the
chunk's GEMMs are other kernels than a prefill alone's, so KV values differ from the
per-document prefill by rounding (never by more than float rounding of the same sums).

Batch invariance (a document's KV must not depend on the other documents): every shape a
document's tokens take part in is public or its own: row-wise calls on chunks of exactly
``chunk_tokens`` rows, attention on its own length. Which other tokens share its chunks, and
where its tokens sit in them, changes no value under the assumption the decode step already
makes (``decoding_packed``): a deterministic kernel of a fixed shape computes each row by
the same sequence of operations whatever its index and its neighbours' values (no atomics,
no split chosen by content). Tested bit for bit on CPU (a document's KV alone, with others,
at another place in the stream). Rows never mix: a GEMM's output row depends on its own
input row only, norms are per row, attention per document; filler tokens and pad rows hold
zeros or token 0, never another document's values. A NaN or infinity in one document (a
pathological token) stays in that document's rows (tested).

Privacy: deterministic functions of public weights and the given token ids; nothing here
samples, logs, or keeps data beyond the returned tensors. The chunk size and the batch bound
(``prefill_batches``) are public numbers; the engine fixes them before it sees a document.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dpsynrag.transforms.decoding_stack import DecoderStack, PrefixKV

__all__ = ["packed_prefill", "prefill_batches", "stream_tokens"]


def stream_tokens(lengths: Sequence[int], chunk_tokens: int) -> int:
    """Tokens of the stream that holds documents of ``lengths``: whole chunks."""
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be positive")
    total = sum(lengths)
    return -(-total // chunk_tokens) * chunk_tokens


def prefill_batches(lengths: Sequence[int], batch_tokens: int,
                    chunk_tokens: int) -> list[list[int]]:
    """Split documents (by index, in order) into packed prefills of at most ``batch_tokens``
    stream tokens each (whole chunks); a document whose own stream exceeds the bound goes
    alone. A public bound on the memory of one prefill whatever the documents."""
    if batch_tokens < chunk_tokens:
        raise ValueError("batch_tokens must hold at least one chunk")
    batches: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, length in enumerate(lengths):
        if current and stream_tokens([total + length], chunk_tokens) > batch_tokens:
            batches.append(current)
            current, total = [], 0
        current.append(i)
        total += length
    if current:
        batches.append(current)
    return batches


@torch.inference_mode()
def packed_prefill(stack: DecoderStack, prefix: PrefixKV | None,
                   seqs: Sequence[Sequence[int]], *, chunk_tokens: int) -> list[torch.Tensor]:
    """KV ``(layers, 2, kvh, len, d)`` of each sequence placed after ``prefix``, computed in
    one packed pass (module docstring): row-wise layers on chunks of ``chunk_tokens`` tokens,
    attention per sequence at its own length. Every sequence must be non-empty."""
    lengths = [len(s) for s in seqs]
    if not seqs:
        return []
    if min(lengths) < 1:
        raise ValueError("every sequence needs at least one token")
    device, dtype = stack.device, stack.dtype
    size = stream_tokens(lengths, chunk_tokens)
    chunks = size // chunk_tokens
    p_len = 0 if prefix is None else prefix.length
    ids = torch.zeros(size, dtype=torch.long)
    positions = torch.zeros(size, dtype=torch.long)
    starts: list[int] = []
    start = 0
    for seq, length in zip(seqs, lengths, strict=True):
        starts.append(start)
        ids[start:start + length] = torch.tensor(list(seq), dtype=torch.long)
        positions[start:start + length] = torch.arange(p_len, p_len + length)
        start += length
    ids = ids.to(device)
    positions = positions.to(device)
    span = [slice(c * chunk_tokens, (c + 1) * chunk_tokens) for c in range(chunks)]
    xs = [stack.embed(ids[s]).unsqueeze(0) for s in span]  # (1, chunk, hidden) each
    rots = [stack._rotary(x, positions[s].unsqueeze(0)) for x, s in zip(xs, span, strict=True)]
    # each document's masks, per distinct length and window (shared by the layers)
    masks = {(length, window): stack._prefill_mask(p_len, length, window)
             for length in dict.fromkeys(lengths) for window in dict.fromkeys(stack.windows)}
    heads, kvh, d = stack.n_heads, stack.n_kv, stack.head_dim
    kv = torch.empty((stack.n_layers, 2, kvh, size, d), dtype=dtype, device=device)
    q_all = torch.empty((size, heads, d), dtype=dtype, device=device)
    k_all = torch.empty((size, kvh, d), dtype=dtype, device=device)
    v_all = torch.empty((size, kvh, d), dtype=dtype, device=device)
    last = stack.n_layers - 1
    for li, layer in enumerate(stack.layers):
        for c, s in enumerate(span):
            q, k, v = stack._qkv(layer, xs[c], *rots[c][stack.rope_keys[li]])
            q_all[s] = q[0].transpose(0, 1)
            k_all[s] = k[0].transpose(0, 1)
            v_all[s] = v[0].transpose(0, 1)
        kv[li, 0] = k_all.transpose(0, 1)
        kv[li, 1] = v_all.transpose(0, 1)
        if li == last:  # the last layer's attention output and MLP change no KV
            break
        out = torch.zeros((size, heads * d), dtype=dtype, device=device)
        for first, length in zip(starts, lengths, strict=True):
            doc = slice(first, first + length)
            q = q_all[doc].transpose(0, 1).unsqueeze(0)  # (1, H, L, d)
            k = k_all[doc].transpose(0, 1).unsqueeze(0)
            v = v_all[doc].transpose(0, 1).unsqueeze(0)
            if prefix is not None and p_len:
                k = torch.cat([prefix.kv[li, 0].unsqueeze(0), k], dim=2)
                v = torch.cat([prefix.kv[li, 1].unsqueeze(0), v], dim=2)
            attended = stack._prefill_attention(q, k, v, masks[(length, stack.windows[li])],
                                                stack.scalings[li])
            out[doc] = attended[0].transpose(0, 1).reshape(length, heads * d)
        xs = [stack._finish_layer(layer, xs[c], out[s].unsqueeze(0))
              for c, s in enumerate(span)]
    return [kv[:, :, :, first:first + length].clone()
            for first, length in zip(starts, lengths, strict=True)]
