"""A tiny randomly initialised Llama with a word-level tokenizer and a chat template, for tests
(no download, a few KB of weights). Each test module passes its own word list."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from dpsynrag.models.llm import LoadedLLM

TEMPLATE = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


def make_tiny_llm(words: Sequence[str], *, specials: Sequence[str] = (
        "<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"),
        dtype: torch.dtype = torch.float32, seed: int = 0) -> LoadedLLM:
    """Vocabulary: ``specials`` then the sorted distinct ``words``; EOS is ``<|im_end|>``."""
    vocab = {t: i for i, t in enumerate([*specials, *sorted(set(words))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    extra = [t for t in specials if t not in ("<unk>", "<|im_end|>")]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", eos_token="<|im_end|>",
        additional_special_tokens=extra)
    tokenizer.chat_template = TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.3, eos_token_id=vocab["<|im_end|>"], bos_token_id=None,
        pad_token_id=None, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).to(dtype).eval()
    return LoadedLLM(model=model, tokenizer=tokenizer, device=torch.device("cpu"), dtype=dtype)
