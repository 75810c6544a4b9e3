"""A tiny randomly initialised Llama with a word-level tokenizer and a chat template, for tests
(no download, a few KB of weights). Each test module passes its own word list. The
``save_*`` helpers write a tiny LLM or embedder to a directory, for runners that load by path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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


def save_tiny_llm(directory: Path, words: Sequence[str], *,
                  specials: Sequence[str] = ("<unk>", "<|im_start|>", "<|im_end|>",
                                             "<|endoftext|>"), seed: int = 0) -> Path:
    """``make_tiny_llm``'s model and tokenizer saved as a Hugging Face directory, for runners
    that load models by path (Ray actors)."""
    llm = make_tiny_llm(words, specials=specials, seed=seed)
    llm.model.save_pretrained(directory)
    llm.tokenizer.save_pretrained(directory)
    return directory


def save_tiny_embedder(directory: Path, words: Sequence[str], *, seed: int = 0) -> Path:
    """A 1-layer BERT (hidden 16, mean pooling, 128 tokens at most) over ``words``, saved as a
    sentence-transformers directory."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as st_modules
    from transformers import BertConfig, BertModel, BertTokenizer

    raw = directory.with_name(directory.name + "-raw")
    raw.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({w.lower() for w in words})]
    (raw / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32,
                         max_position_embeddings=128)).save_pretrained(raw)
    BertTokenizer(vocab_file=str(raw / "vocab.txt")).save_pretrained(raw)
    transformer = st_modules.Transformer(str(raw), max_seq_length=128)
    model = SentenceTransformer(modules=[transformer, st_modules.Pooling(16, pooling_mode="mean")],
                                device="cpu")
    model.save(str(directory))
    return directory
