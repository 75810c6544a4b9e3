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


SPECIALS = ("<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>")


def make_tokenizer(words: Sequence[str], specials: Sequence[str] = SPECIALS) -> tuple[
        PreTrainedTokenizerFast, dict[str, int]]:
    """A word-level tokenizer with the chat template: ``specials`` then the sorted distinct
    ``words``; EOS is ``<|im_end|>``. Returns the tokenizer and its vocabulary."""
    vocab = {t: i for i, t in enumerate([*specials, *sorted(set(words))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    extra = [t for t in specials if t not in ("<unk>", "<|im_end|>")]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", eos_token="<|im_end|>",
        additional_special_tokens=extra)
    tokenizer.chat_template = TEMPLATE
    return tokenizer, vocab


def make_tiny_llm(words: Sequence[str], *, specials: Sequence[str] = SPECIALS,
                  dtype: torch.dtype = torch.float32, seed: int = 0) -> LoadedLLM:
    """Vocabulary: ``specials`` then the sorted distinct ``words``; EOS is ``<|im_end|>``."""
    tokenizer, vocab = make_tokenizer(words, specials)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.3, eos_token_id=vocab["<|im_end|>"], bos_token_id=None,
        pad_token_id=None, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).to(dtype).eval()
    return LoadedLLM(model=model, tokenizer=tokenizer, device=torch.device("cpu"), dtype=dtype)


# The decoder families the packed engine drives, as tiny float32 configs (2 layers, hidden 64,
# 4 query heads over 2 KV heads of 16 dims); windowed kinds use a window of 8 positions, far
# shorter than the rows, so the window really cuts attention.
WINDOW = 8
FAMILY_KINDS = ("llama", "gemma", "qwen2", "qwen2-window", "qwen3", "mistral", "gemma2",
                "gemma3")


def _family_model(kind: str, vocab_size: int, eos: int) -> torch.nn.Module:
    import transformers as tf

    common = {
        "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "max_position_embeddings": 512, "initializer_range": 0.3,
        "eos_token_id": eos, "bos_token_id": None, "pad_token_id": None,
        "tie_word_embeddings": True,
    }
    gemma = {"query_pre_attn_scalar": 24, "sliding_window": WINDOW}  # scaling != head_dim
    configs = {
        "llama": lambda: (tf.LlamaConfig, tf.LlamaForCausalLM, {}),
        "gemma": lambda: (tf.GemmaConfig, tf.GemmaForCausalLM, {}),
        "qwen2": lambda: (tf.Qwen2Config, tf.Qwen2ForCausalLM, {}),
        "qwen2-window": lambda: (tf.Qwen2Config, tf.Qwen2ForCausalLM, {
            "use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1}),
        "qwen3": lambda: (tf.Qwen3Config, tf.Qwen3ForCausalLM, {}),
        "mistral": lambda: (tf.MistralConfig, tf.MistralForCausalLM,
                            {"sliding_window": WINDOW}),
        "gemma2": lambda: (tf.Gemma2Config, tf.Gemma2ForCausalLM, {
            **gemma, "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0,
            "layer_types": ["sliding_attention", "full_attention"]}),
        "gemma3": lambda: (tf.Gemma3TextConfig, tf.Gemma3ForCausalLM, {
            **gemma, "layer_types": ["sliding_attention", "full_attention"]}),
        "gpt2": lambda: (tf.GPT2Config, tf.GPT2LMHeadModel, {}),
    }
    config_cls, model_cls, extra = configs[kind]()
    if kind == "gpt2":
        config = config_cls(vocab_size=vocab_size, n_embd=64, n_layer=2, n_head=4,
                            n_positions=512, initializer_range=0.3, eos_token_id=eos,
                            bos_token_id=eos)
    else:
        config = config_cls(**{**common, **extra})
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    with torch.no_grad():  # norms start at 1 (or 0 for Gemma's 1 + w): make them matter
        for name, param in model.named_parameters():
            if "norm" in name or "ln_" in name:
                param.add_(0.3 * torch.randn_like(param))
    return model


def make_tiny_family_llm(kind: str, words: Sequence[str], *, vocab_size: int = 300,
                         seed: int = 0) -> LoadedLLM:
    """A tiny random float32 model of one family (``FAMILY_KINDS`` or ``"gpt2"``) with the
    word-level tokenizer; the model's vocabulary may be wider than the tokenizer's."""
    tokenizer, vocab = make_tokenizer(words)
    torch.manual_seed(seed)
    model = _family_model(kind, max(vocab_size, len(vocab)), vocab["<|im_end|>"])
    return LoadedLLM(model=model, tokenizer=tokenizer, device=torch.device("cpu"),
                     dtype=torch.float32)


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
