"""The loaded language model: what every model stage (keywords, prediction, self-filter) uses.

``LoadedLLM`` is the contract between model loading and the engines. Build one with
``load_llm`` (packaged SmolLM2 or a local path) or directly from a model and tokenizer in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class LoadedLLM:
    """A causal LM ready for inference, with its tokenizer and chat formatting.

    ``model`` is a Hugging Face causal LM in eval mode on ``device``; ``tokenizer`` has a chat
    template (or ``chat_template_fallback`` is used). ``identity`` names the weights (a file
    name and its sha256) for certificates; it never includes private data.
    """

    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    identity: dict[str, str] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        """Width of the model's logit rows (may exceed the tokenizer's vocabulary)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Tokens that end a generation (the tokenizer's EOS and the model's configured ones)."""
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config,
                       self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list | tuple):
                ids.update(int(v) for v in value)
        return frozenset(ids)

    def chat_prompt_ids(self, user_message: str) -> list[int]:
        """Token ids of ``user_message`` as one user turn, ending where the reply begins."""
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": user_message}], add_generation_prompt=True,
                tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        text = f"User: {user_message}\nAssistant:"
        return [int(i) for i in self.tokenizer(text, add_special_tokens=True)["input_ids"]]
