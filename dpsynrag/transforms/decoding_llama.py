"""Llama-family forward passes for the private-prediction engine.

Three passes over the model's own modules (embeddings, RMSNorms, projections, MLPs, rotary
embedding, LM head), with our own attention so that keys and values can live where the
engine wants them:

* ``prefix``: the KV of the shared instruction prefix, computed once per call;
* ``prefill``: the KV of many documents' prompt tokens (after the prefix), batched;
* ``decode``: one new token for every row of packed slot buffers, attending to the shared
  prefix (one copy, broadcast) and to the row's own slot (document KV + generated suffix);
  row-wise layers run on fixed chunks of rows, attention on fixed parts of slots.

Matmuls run in the model's dtype; attention softmax in float32 (as Hugging Face's eager
attention does). Positions are the natural ones (prefix 0..P-1, then the row's tokens), so
padding never shifts a row: results equal an unpadded row-by-row forward up to float rounding.

Privacy: these are deterministic functions of public weights and the token ids given; nothing
here samples, logs, or keeps data beyond the buffers its caller owns. Every shape is the
caller's choice (``prefill``: the batch given; ``decode``: the chunk rows and each part's
rows and width, never a data-dependent truncation), so a caller can keep each row's shapes
public.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

SUPPORTED_MODEL_TYPES = frozenset({"llama"})


def supports(model: Any) -> bool:
    """True when ``model`` is a Llama-architecture causal LM this module can drive."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or not layers or not hasattr(inner, "rotary_emb"):
        return False
    attn = layers[0].self_attn
    needed = ("q_proj", "k_proj", "v_proj", "o_proj")
    return all(hasattr(attn, name) for name in needed) and not hasattr(attn, "q_norm")


@dataclass
class PrefixKV:
    """Keys and values of the shared prefix: ``(layers, 2, kv_heads, P, head_dim)``."""

    kv: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.kv.shape[3])


class LlamaStack:
    """The forward passes of one Llama model, for the packed engine."""

    def __init__(self, model: Any) -> None:
        if not supports(model):
            raise ValueError("LlamaStack needs a Llama-architecture causal LM")
        inner = model.model
        config = model.config
        self.embed = inner.embed_tokens
        self.layers = list(inner.layers[: config.num_hidden_layers])
        self.norm = inner.norm
        self.rotary = inner.rotary_emb
        self.lm_head = model.get_output_embeddings()
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.n_heads = int(config.num_attention_heads)
        self.n_kv = int(config.num_key_value_heads)
        self.rep = self.n_heads // self.n_kv
        self.scaling = float(attn.scaling)
        self.dtype = self.embed.weight.dtype
        self.device = self.embed.weight.device

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    # ------------------------------------------------------------------ shared pieces
    def _qkv(
        self, layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (B, H, M, d) and rotated keys/values (B, kvh, M, d) of ``x`` (B, M, hid)."""
        attn = layer.self_attn
        batch, length, _ = x.shape
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(batch, length, self.n_kv, self.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(batch, length, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def _finish_layer(self, layer: Any, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """Output projection, residuals and MLP; ``attn_out`` is (B, M, H * d)."""
        x = x + layer.self_attn.o_proj(attn_out)
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits (rows, vocab) in float32 from final hidden states (rows, hid)."""
        return self.lm_head(hidden).float()

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(
        self, prefix: PrefixKV | None, seqs: list[list[int]]
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """KV of each sequence placed after ``prefix``, and each sequence's last hidden state.

        Sequences are right-padded into one batch; causality keeps padding out of every real
        position. Returns per-sequence KV tensors ``(layers, 2, kvh, len, d)`` and the final
        (normed) hidden states ``(n, hid)`` of each sequence's last token.
        """
        n = len(seqs)
        lengths = [len(s) for s in seqs]
        width = max(lengths)
        p_len = 0 if prefix is None else prefix.length
        ids = torch.zeros((n, width), dtype=torch.long)
        for i, seq in enumerate(seqs):
            ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        ids = ids.to(self.device)
        x = self.embed(ids)
        positions = (torch.arange(width, device=self.device) + p_len).unsqueeze(0).expand(n, -1)
        cos, sin = self.rotary(x, positions)
        allowed = torch.ones((width, p_len + width), dtype=torch.bool, device=self.device)
        allowed[:, p_len:] = torch.tril(allowed[:, p_len:])
        kv_out = torch.empty(
            (self.n_layers, 2, n, self.n_kv, width, self.head_dim), dtype=self.dtype,
            device=self.device)
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos, sin)
            kv_out[li, 0] = k
            kv_out[li, 1] = v
            if p_len:
                pk = prefix.kv[li, 0].unsqueeze(0).expand(n, -1, -1, -1)
                pv = prefix.kv[li, 1].unsqueeze(0).expand(n, -1, -1, -1)
                k = torch.cat([pk, k], dim=2)
                v = torch.cat([pv, v], dim=2)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, scale=self.scaling, enable_gqa=self.rep > 1)
            x = self._finish_layer(layer, x, out.transpose(1, 2).reshape(n, width, -1))
        last = torch.tensor([length - 1 for length in lengths], device=self.device)
        hidden = self.norm(x[torch.arange(n, device=self.device), last])
        kvs = [kv_out[:, :, i, :, : lengths[i]].clone() for i in range(n)]
        return kvs, hidden

    def prefix(self, ids: list[int]) -> PrefixKV | None:
        """The shared prefix's KV (``None`` for an empty prefix)."""
        if not ids:
            return None
        kvs, _ = self.prefill(None, [ids])
        return PrefixKV(kvs[0])

    # ------------------------------------------------------------------ decode
    def new_slots(self, rows: int, width: int) -> torch.Tensor:
        """A slot buffer ``(layers, 2, rows, kvh, width, d)`` for packed decoding."""
        return torch.zeros(
            (self.n_layers, 2, rows, self.n_kv, width, self.head_dim), dtype=self.dtype,
            device=self.device)

    @torch.inference_mode()
    def decode(
        self,
        prefix: PrefixKV | None,
        parts: list[tuple[torch.Tensor, torch.Tensor]],
        input_ids: torch.Tensor,
        chunk_rows: int,
    ) -> torch.Tensor:
        """Feed one token to every row of ``parts``; final hidden states (rows, hid).

        ``parts`` is a list of ``(slots, lengths)``: ``slots`` a view
        ``(layers, 2, a, kvh, width, d)`` of ``a`` rows, ``lengths`` their cached token counts.
        ``input_ids`` holds one token per row of the parts in order, then filler rows up to a
        multiple of ``chunk_rows``. Slot row ``i`` gets its new token's KV at index
        ``lengths[i]`` (position ``P + lengths[i]``) and attends to the prefix and to slot
        indices ``0..lengths[i]``; the rest of the width is masked. Every row-wise operation
        (norms, projections, MLP) runs on fixed chunks of ``chunk_rows`` rows and attention
        on each part at its own width: the caller fixes every shape. The caller advances the
        lengths. Filler rows attend to nothing (their output is discarded).
        """
        total = int(input_ids.shape[0])
        if total % chunk_rows:
            raise ValueError("input_ids must fill whole chunks of chunk_rows")
        p_len = 0 if prefix is None else prefix.length
        lengths = [length for _, length in parts]
        counts = [int(length.shape[0]) for length in lengths]
        positions = torch.zeros(total, dtype=torch.long, device=self.device)
        if parts:
            positions[: sum(counts)] = torch.cat(lengths)
        x = self.embed(input_ids).unsqueeze(1)
        cos, sin = self.rotary(x, (positions + p_len).unsqueeze(1))
        for li, layer in enumerate(self.layers):
            qkv = [self._qkv(layer, x[c:c + chunk_rows], cos[c:c + chunk_rows],
                             sin[c:c + chunk_rows]) for c in range(0, total, chunk_rows)]
            q, k, v = (torch.cat(t) for t in zip(*qkv, strict=True))
            out = torch.zeros((total, 1, self.n_heads * self.head_dim), dtype=self.dtype,
                              device=self.device)
            start = 0
            for (slots, length), n in zip(parts, counts, strict=True):
                part = slice(start, start + n)
                out[part] = self._attend(None if prefix is None else prefix.kv[li], slots[li],
                                         length, q[part], k[part], v[part])
                start += n
            x = torch.cat([self._finish_layer(layer, x[c:c + chunk_rows], out[c:c + chunk_rows])
                           for c in range(0, total, chunk_rows)])
        return torch.cat([self.norm(x[c:c + chunk_rows, 0]) for c in range(0, total, chunk_rows)])

    def _attend(self, prefix_kv: torch.Tensor | None, slots: torch.Tensor,
                lengths: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        """One part's attention in one layer: writes the new KV into ``slots``
        ``(2, n, kvh, width, d)`` at ``lengths``, attends over the layer's prefix KV
        ``(2, kvh, P, d)`` and the slots; returns ``(n, 1, H * d)``. Shapes fixed by the part."""
        n, width = int(lengths.shape[0]), int(slots.shape[3])
        p_len = 0 if prefix_kv is None else int(prefix_kv.shape[2])
        d, kvh, rep = self.head_dim, self.n_kv, self.rep
        rows = torch.arange(n, device=self.device)
        invalid = torch.arange(width, device=self.device).unsqueeze(0) > lengths.unsqueeze(1)
        invalid = invalid.view(n, 1, 1, width)
        k_slot, v_slot = slots[0], slots[1]
        k_slot[rows, :, lengths] = k[:, :, 0]
        v_slot[rows, :, lengths] = v[:, :, 0]
        qg = q.view(n, kvh, rep, d)
        scores = torch.matmul(qg, k_slot.transpose(-1, -2)).float()
        scores.masked_fill_(invalid, float("-inf"))
        if prefix_kv is not None and p_len:
            qp = qg.permute(1, 0, 2, 3).reshape(kvh, n * rep, d)
            pre = torch.matmul(qp, prefix_kv[0].transpose(-1, -2)).float()
            pre = pre.view(kvh, n, rep, p_len).permute(1, 0, 2, 3)
            scores = torch.cat([pre, scores], dim=-1)
        probs = torch.softmax(scores * self.scaling, dim=-1).to(self.dtype)
        out = torch.matmul(probs[..., p_len:], v_slot)
        if prefix_kv is not None and p_len:
            pp = probs[..., :p_len].permute(1, 0, 2, 3).reshape(kvh, n * rep, p_len)
            out = out + torch.matmul(pp, prefix_kv[1]).view(
                kvh, n, rep, d).permute(1, 0, 2, 3)
        return out.reshape(n, 1, self.n_heads * d)
