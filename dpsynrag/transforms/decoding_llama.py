"""Former home of the packed engine's forward passes; kept so old imports keep working.

The passes now cover several decoder families: see ``decoding_stack`` (``LlamaStack`` is
``DecoderStack``; ``supports`` and ``PrefixKV`` are the same objects).
"""

from __future__ import annotations

from dpsynrag.transforms.decoding_stack import (
    SUPPORTED_MODEL_TYPES,
    DecoderStack,
    PrefixKV,
    supports,
    unsupported_reason,
)

LlamaStack = DecoderStack

__all__ = ["SUPPORTED_MODEL_TYPES", "DecoderStack", "LlamaStack", "PrefixKV", "supports",
           "unsupported_reason"]
