"""Decoder-stack forward passes for the private-prediction engine (several model families).

Three passes over the model's own modules (embeddings, RMSNorms, projections, q/k norms,
MLPs, rotary embedding, LM head), with our own attention so that keys and values can live
where the engine wants them:

* ``prefix``: the KV of the shared instruction prefix, computed once per call;
* ``prefill``: the KV of many documents' prompt tokens (after the prefix), batched;
* ``decode``: one new token for every row of packed slot buffers, attending to the shared
  prefix (one copy, broadcast) and to the row's own slot (document KV + generated suffix);
  row-wise layers run on fixed chunks of rows, attention on fixed parts of slots.

One generic path drives every family in ``FAMILIES``; a ``Family`` names what a family's
Hugging Face forward adds to the Llama layout (read from ``transformers`` 5's modeling files):

* ``llama``, ``gemma`` (Gemma 1; its embedding module scales by sqrt(hidden) itself);
* ``qwen2`` (q/k/v biases live in the projection modules; optional sliding-window layers
  from ``config.layer_types``);
* ``qwen3`` (per-head ``q_norm`` / ``k_norm`` before the rotary embedding; windows as Qwen2);
* ``mistral`` (every layer windowed by ``config.sliding_window`` when it is set);
* ``gemma2`` (post-attention, pre- and post-feed-forward norms; ``query_pre_attn_scalar``
  scaling, read from the attention module; attention-score and final-logit tanh
  soft-capping; alternating sliding / global layers);
* ``gemma3_text`` (as Gemma 2 plus q/k norms and a rotary base per layer type; like Hugging
  Face, no attention soft-capping).

Sliding windows are exact: a query at position p sees keys at positions p - W < k <= p, as
Hugging Face's sliding mask does. ``unsupported_reason`` refuses what this path does not
compute exactly (other families, bidirectional attention, rotary types that rescale with the
longest position of the batch, unknown layer types); the caller then falls back to
``decoding_reference``.

Matmuls run in the model's dtype; attention scores, soft-capping and softmax in float32 (Hugging
Face's eager attention scales and caps in the model's dtype: the same values in float32).
Positions are the natural ones (prefix 0..P-1, then the row's tokens), so padding never shifts
a row: results equal an unpadded row-by-row forward up to float rounding.

Privacy: these are deterministic functions of public weights and the token ids given; nothing
here samples, logs, or keeps data beyond the buffers its caller owns. Every shape is the
caller's choice (``prefill``: the batch given; ``decode``: the chunk rows and each part's
rows and width, never a data-dependent truncation), so a caller can keep each row's shapes
public. A sliding window changes mask values only, as a function of the row's own length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from dpsynrag.models.protocols import CausalLM


@dataclass(frozen=True)
class Family:
    """What one family's forward adds to the Llama layout.

    ``sandwich_norms``: attention output normed before its residual, MLP between
    ``pre_feedforward_layernorm`` and ``post_feedforward_layernorm`` (Gemma 2/3).
    ``qk_norm``: per-head ``q_norm`` / ``k_norm`` on queries and keys before the rotary
    embedding. ``attn_softcap`` / ``final_softcap``: tanh capping of attention scores by
    ``config.attn_logit_softcapping`` / of logits by ``config.final_logit_softcapping``.
    ``rope_per_layer_type``: the rotary module takes the layer type (Gemma 3's local base).
    ``windows``: where sliding windows come from: none, ``config.sliding_window`` for every
    layer, or ``config.layer_types`` (``sliding_attention`` layers get the window).
    """

    sandwich_norms: bool = False
    qk_norm: bool = False
    attn_softcap: bool = False
    final_softcap: bool = False
    rope_per_layer_type: bool = False
    windows: Literal["none", "config", "layer_types"] = "none"


FAMILIES: dict[str, Family] = {
    "llama": Family(),
    "gemma": Family(),
    "mistral": Family(windows="config"),
    "qwen2": Family(windows="layer_types"),
    "qwen3": Family(qk_norm=True, windows="layer_types"),
    "gemma2": Family(sandwich_norms=True, attn_softcap=True, final_softcap=True,
                     windows="layer_types"),
    "gemma3_text": Family(sandwich_norms=True, qk_norm=True, final_softcap=True,
                          rope_per_layer_type=True, windows="layer_types"),
}
SUPPORTED_MODEL_TYPES = frozenset(FAMILIES)
# rotary types whose frequencies depend on the longest position in the batch (not per row)
_BATCH_DEPENDENT_ROPE = ("dynamic", "longrope")


def layer_windows(config: Any, family: Family) -> list[int | None]:
    """Each layer's sliding window (``None``: global attention), as Hugging Face masks it.

    Raises ``ValueError`` (the reason) for a layer type this module does not compute.
    """
    n = int(config.num_hidden_layers)
    if family.windows == "none":
        return [None] * n
    window = getattr(config, "sliding_window", None)
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"sliding_window={window!r} is not a positive integer")
    if family.windows == "config":
        return [window] * n
    types = list(getattr(config, "layer_types", None) or ["full_attention"] * n)[:n]
    out: list[int | None] = []
    for kind in types:
        if kind == "full_attention":
            out.append(None)
        elif kind == "sliding_attention" and window is not None:
            out.append(window)
        elif kind == "sliding_attention":
            raise ValueError("a sliding_attention layer but no sliding_window in the config")
        else:
            raise ValueError(f"layer type {kind!r} is not supported")
    return out


def _rope_types(config: Any) -> list[Any]:
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict):
        return []
    if "rope_type" in params or "rope_theta" in params:
        return [params.get("rope_type", "default")]
    return [p.get("rope_type", "default") if isinstance(p, dict) else None
            for p in params.values()]


def unsupported_reason(model: CausalLM) -> str | None:
    """Why the packed engine cannot drive ``model`` exactly (``None`` when it can).

    A function of the model's class, configuration and module layout only (public).
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        return f"not one of the supported decoder families: {', '.join(sorted(FAMILIES))}"
    assert config is not None  # a family was found from the config's model_type
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or not layers or not all(
            hasattr(inner, name) for name in ("embed_tokens", "norm", "rotary_emb")):
        return "the model has no embed_tokens / layers / norm / rotary_emb decoder stack"
    if model.get_output_embeddings() is None:
        return "the model has no LM head"
    if getattr(config, "use_bidirectional_attention", False):
        return "bidirectional attention is not causal decoding"
    attn_needed: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "scaling", "head_dim")
    attn_needed += ("q_norm", "k_norm") if family.qk_norm else ()
    layer_needed: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm", "mlp",
                                     "self_attn")
    layer_needed += (("pre_feedforward_layernorm", "post_feedforward_layernorm")
                     if family.sandwich_norms else ())
    for layer in layers[: config.num_hidden_layers]:
        if not all(hasattr(layer, name) for name in layer_needed):
            return f"a decoder layer lacks one of {', '.join(layer_needed)}"
        attn = layer.self_attn
        if not all(hasattr(attn, name) for name in attn_needed):
            return f"an attention module lacks one of {', '.join(attn_needed)}"
        if not family.qk_norm and (hasattr(attn, "q_norm") or hasattr(attn, "k_norm")):
            return "the attention has q/k norms this family does not expect"
    for rope_type in _rope_types(config):
        if rope_type is None:
            return "a layer type has no rotary parameters"
        if any(kind in str(rope_type) for kind in _BATCH_DEPENDENT_ROPE):
            return (f"rope_type {rope_type!r} rescales with the longest position in the "
                    "batch, so a row would depend on other rows")
    try:
        layer_windows(config, family)
    except ValueError as err:
        return str(err)
    return None


def supports(model: CausalLM) -> bool:
    """True when ``model`` is a causal LM of a family this module drives exactly."""
    return unsupported_reason(model) is None


@dataclass
class PrefixKV:
    """Keys and values of the shared prefix: ``(layers, 2, kv_heads, P, head_dim)``."""

    kv: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.kv.shape[3])


Rotary = dict[str | None, tuple[torch.Tensor, torch.Tensor]]


class DecoderStack:
    """The forward passes of one decoder-only model (a family of ``FAMILIES``)."""

    def __init__(self, model: CausalLM) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            model_type = getattr(getattr(model, "config", None), "model_type", None)
            raise ValueError(f"the packed engine cannot drive model_type={model_type!r}: "
                             f"{reason}")
        inner = model.model
        config = model.config
        self.model_type = str(config.model_type)
        self.family = FAMILIES[self.model_type]
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
        self.scalings = [float(layer.self_attn.scaling) for layer in self.layers]
        self.windows: list[int | None] = layer_windows(config, self.family)
        self.rope_keys: list[str | None] = (
            [str(t) for t in config.layer_types[: len(self.layers)]]
            if self.family.rope_per_layer_type else [None] * len(self.layers))
        self.attn_softcap = _cap(config, "attn_logit_softcapping", self.family.attn_softcap)
        self.final_softcap = _cap(config, "final_logit_softcapping", self.family.final_softcap)
        self.dtype = self.embed.weight.dtype
        self.device = self.embed.weight.device

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    # ------------------------------------------------------------------ shared pieces
    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> Rotary:
        """cos/sin of ``positions`` for each rotary variant the layers use."""
        return {key: (self.rotary(x, positions) if key is None
                      else self.rotary(x, positions, key))
                for key in dict.fromkeys(self.rope_keys)}

    def _qkv(
        self, layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (B, H, M, d) and rotated keys/values (B, kvh, M, d) of ``x`` (B, M, hid)."""
        attn = layer.self_attn
        batch, length, _ = x.shape
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).view(batch, length, self.n_heads, self.head_dim)
        k = attn.k_proj(h).view(batch, length, self.n_kv, self.head_dim)
        v = attn.v_proj(h).view(batch, length, self.n_kv, self.head_dim).transpose(1, 2)
        if self.family.qk_norm:  # per head, over head_dim: layout-independent
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return q, k, v

    def _finish_layer(self, layer: Any, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """Output projection, residuals and MLP (with the family's norms); ``attn_out`` is
        (B, M, H * d)."""
        out = layer.self_attn.o_proj(attn_out)
        if self.family.sandwich_norms:
            x = x + layer.post_attention_layernorm(out)
            h = layer.mlp(layer.pre_feedforward_layernorm(x))
            return x + layer.post_feedforward_layernorm(h)
        x = x + out
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def _scores(self, scores: torch.Tensor, scaling: float) -> torch.Tensor:
        """Scaled (and soft-capped) float32 attention scores, before the mask."""
        scores = scores.float() * scaling
        if self.attn_softcap is not None:
            scores = torch.tanh(scores / self.attn_softcap) * self.attn_softcap
        return scores

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits (rows, vocab) in float32 from final hidden states (rows, hid)."""
        out = self.lm_head(hidden)
        if self.final_softcap is not None:  # in the model's dtype, as Hugging Face does
            out = torch.tanh(out / self.final_softcap) * self.final_softcap
        return out.float()

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
        rot = self._rotary(x, positions)
        masks = {window: self._prefill_mask(p_len, width, window)
                 for window in dict.fromkeys(self.windows)}
        kv_out = torch.empty(
            (self.n_layers, 2, n, self.n_kv, width, self.head_dim), dtype=self.dtype,
            device=self.device)
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, *rot[self.rope_keys[li]])
            kv_out[li, 0] = k
            kv_out[li, 1] = v
            if prefix is not None and p_len:  # p_len > 0 only with a prefix
                pk = prefix.kv[li, 0].unsqueeze(0).expand(n, -1, -1, -1)
                pv = prefix.kv[li, 1].unsqueeze(0).expand(n, -1, -1, -1)
                k = torch.cat([pk, k], dim=2)
                v = torch.cat([pv, v], dim=2)
            out = self._prefill_attention(q, k, v, masks[self.windows[li]], self.scalings[li])
            x = self._finish_layer(layer, x, out.transpose(1, 2).reshape(n, width, -1))
        last = torch.tensor([length - 1 for length in lengths], device=self.device)
        hidden = self.norm(x[torch.arange(n, device=self.device), last])
        kvs = [kv_out[:, :, i, :, : lengths[i]].clone() for i in range(n)]
        return kvs, hidden

    def _prefill_mask(self, p_len: int, width: int, window: int | None) -> torch.Tensor:
        """Allowed (query, key) pairs ``(width, P + width)``: causal, within the window."""
        q_pos = torch.arange(width, device=self.device).unsqueeze(1) + p_len
        k_pos = torch.arange(p_len + width, device=self.device).unsqueeze(0)
        allowed = k_pos <= q_pos
        if window is not None:
            allowed &= q_pos - k_pos < window
        return allowed

    def _prefill_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           allowed: torch.Tensor, scaling: float) -> torch.Tensor:
        """Attention of (B, H, M, d) queries over (B, kvh, K, d) keys/values; (B, H, M, d)."""
        if self.attn_softcap is None:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, scale=scaling, enable_gqa=self.rep > 1)
        k = k.repeat_interleave(self.rep, dim=1)
        v = v.repeat_interleave(self.rep, dim=1)
        scores = self._scores(torch.matmul(q, k.transpose(-1, -2)), scaling)
        scores = scores.masked_fill(~allowed, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1).to(self.dtype), v)

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
        indices ``0..lengths[i]`` (those within the layer's sliding window, if any); the rest
        of the width is masked. Every row-wise operation (norms, projections, MLP) runs on
        fixed chunks of ``chunk_rows`` rows and attention on each part at its own width: the
        caller fixes every shape. The caller advances the lengths. Filler rows attend to
        nothing (their output is discarded). Each part's masks are built once per call and
        shared by the layers; nothing is read back to the host, so a CUDA graph can capture
        the call (``step_graphs``).
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
        rot = self._rotary(x, (positions + p_len).unsqueeze(1))
        # each part's masks, once per call for every layer (a function of its lengths only)
        masks = [self._part_masks(length, int(slots.shape[4]), p_len) for slots, length in parts]
        for li, layer in enumerate(self.layers):
            cos, sin = rot[self.rope_keys[li]]
            qkv = [self._qkv(layer, x[c:c + chunk_rows], cos[c:c + chunk_rows],
                             sin[c:c + chunk_rows]) for c in range(0, total, chunk_rows)]
            q, k, v = (torch.cat(t) for t in zip(*qkv, strict=True))
            out = torch.zeros((total, 1, self.n_heads * self.head_dim), dtype=self.dtype,
                              device=self.device)
            start = 0
            for (slots, _), n, mask in zip(parts, counts, masks, strict=True):
                part = slice(start, start + n)
                out[part] = self._attend(None if prefix is None else prefix.kv[li], slots[li],
                                         mask, q[part], k[part], v[part],
                                         self.scalings[li], self.windows[li])
                start += n
            x = torch.cat([self._finish_layer(layer, x[c:c + chunk_rows], out[c:c + chunk_rows])
                           for c in range(0, total, chunk_rows)])
        return torch.cat([self.norm(x[c:c + chunk_rows, 0]) for c in range(0, total, chunk_rows)])

    def _part_masks(self, lengths: torch.Tensor, width: int, p_len: int) -> _PartMasks:
        """The masks of one part of ``len(lengths)`` slots of ``width``, for each window the
        layers use (shared by every layer with that window)."""
        n = int(lengths.shape[0])
        index = torch.arange(width, device=self.device).unsqueeze(0)
        after = index > lengths.unsqueeze(1)
        slot: dict[int | None, torch.Tensor] = {}
        far: dict[int | None, torch.Tensor | None] = {}
        for window in dict.fromkeys(self.windows):
            invalid = after
            if window is not None:  # query at P + L, key at P + j: visible when L - j < window
                invalid = after | (index <= lengths.unsqueeze(1) - window)
            slot[window] = invalid.view(n, 1, 1, width)
            far[window] = None
            if window is not None and p_len:  # prefix key j: visible when P + L - j < window
                near = (torch.arange(p_len, device=self.device).unsqueeze(0)
                        <= (lengths + p_len - window).unsqueeze(1))
                far[window] = near.view(n, 1, 1, p_len)
        return _PartMasks(rows=torch.arange(n, device=self.device), lengths=lengths,
                          slot=slot, far=far)

    def _attend(self, prefix_kv: torch.Tensor | None, slots: torch.Tensor, masks: _PartMasks,
                q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scaling: float, window: int | None) -> torch.Tensor:
        """One part's attention in one layer: writes the new KV into ``slots``
        ``(2, n, kvh, width, d)`` at ``masks.lengths``, attends over the layer's prefix KV
        ``(2, kvh, P, d)`` and the slots (within ``window`` positions when it is set);
        returns ``(n, 1, H * d)``. Shapes fixed by the part; the mask is each row's own."""
        lengths = masks.lengths
        n = int(lengths.shape[0])
        p_len = 0 if prefix_kv is None else int(prefix_kv.shape[2])
        d, kvh, rep = self.head_dim, self.n_kv, self.rep
        k_slot, v_slot = slots[0], slots[1]
        k_slot[masks.rows, :, lengths] = k[:, :, 0]
        v_slot[masks.rows, :, lengths] = v[:, :, 0]
        qg = q.view(n, kvh, rep, d)
        scores = self._scores(torch.matmul(qg, k_slot.transpose(-1, -2)), scaling)
        scores.masked_fill_(masks.slot[window], float("-inf"))
        if prefix_kv is not None and p_len:
            qp = qg.permute(1, 0, 2, 3).reshape(kvh, n * rep, d)
            pre = torch.matmul(qp, prefix_kv[0].transpose(-1, -2))
            pre = self._scores(pre.view(kvh, n, rep, p_len).permute(1, 0, 2, 3), scaling)
            far = masks.far[window]
            if far is not None:
                pre = pre.masked_fill(far, float("-inf"))
            scores = torch.cat([pre, scores], dim=-1)
        probs = torch.softmax(scores, dim=-1).to(self.dtype)
        out = torch.matmul(probs[..., p_len:], v_slot)
        if prefix_kv is not None and p_len:
            pp = probs[..., :p_len].permute(1, 0, 2, 3).reshape(kvh, n * rep, p_len)
            out = out + torch.matmul(pp, prefix_kv[1]).view(
                kvh, n, rep, d).permute(1, 0, 2, 3)
        return out.reshape(n, 1, self.n_heads * d)


@dataclass
class _PartMasks:
    """One part's slot indices, lengths and masks (``True``: hidden) per layer window:
    ``slot`` over its slots ``(n, 1, 1, width)``, ``far`` over the prefix ``(n, 1, 1, P)``
    (``None``: the whole prefix is visible)."""

    rows: torch.Tensor
    lengths: torch.Tensor
    slot: dict[int | None, torch.Tensor]
    far: dict[int | None, torch.Tensor | None]


def _cap(config: Any, name: str, used: bool) -> float | None:
    """A soft-capping value the family applies (``None``: off or not part of the family)."""
    value = getattr(config, name, None) if used else None
    return None if value is None else float(value)

