"""The local safetensors cache of converted GGUF models.

Loading a GGUF de-quantises every tensor and converts the tokenizer (15-45 s on CPU). That is
done once per GGUF file: the result is saved as a plain Hugging Face directory under
``<cache root>/models/<sha256 of the gguf>/`` and loaded from there afterwards (under 1 s).
The cache root is ``$DPSYNRAG_CACHE_DIR`` or ``~/.cache/dpsynrag``. A conversion is written to
a temporary sibling directory and renamed into place, so a crash never leaves a half cache:
a cache directory exists only if it is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from dpsynrag.io.paths import cache_root
from dpsynrag.models.errors import ModelLoadError
from dpsynrag.models.hashing import file_sha256

MANIFEST = "dpsynrag_cache.json"

# SmolLM2-Instruct's own ChatML template (identical to the one the GGUF carries today); used
# only if a converted tokenizer comes without a template but has the ChatML special tokens.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def hash_index(cache_dir: str | Path | None = None) -> Path:
    """The file remembering sha256 values by (path, size, mtime)."""
    return cache_root(cache_dir) / "hashes.json"


def converted_gguf(gguf_file: Path, cache_dir: str | Path | None = None) -> tuple[Path, str]:
    """The cached Hugging Face directory for ``gguf_file`` (converting it once), and its sha256."""
    sha = file_sha256(gguf_file, hash_index(cache_dir))
    models = cache_root(cache_dir) / "models"
    target = models / sha
    if (target / MANIFEST).is_file():
        return target, sha
    try:
        models.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=models, prefix=f".{sha[:16]}-", suffix=".partial"))
    except OSError as error:
        raise ModelLoadError(f"{models}: cannot create the model cache: {error}") from None
    try:
        _convert(gguf_file, tmp)
        (tmp / MANIFEST).write_text(json.dumps(
            {"source_file": gguf_file.name, "source_sha256": sha}, indent=2))
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process finished the same conversion first; keep theirs.
            if not (target / MANIFEST).is_file():
                raise
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(
            f"{gguf_file}: GGUF conversion failed: {type(error).__name__}: "
            f"{_first_line(error)}") from error
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                shutil.rmtree(tmp)
    return target, sha


def _convert(gguf_file: Path, out_dir: Path) -> None:
    """De-quantise ``gguf_file`` to float32 safetensors and save it with its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    if not getattr(tokenizer, "chat_template", None) and "<|im_start|>" in tokenizer.get_vocab():
        # The converted tokenizer lost its template: restore SmolLM2's ChatML explicitly.
        tokenizer.chat_template = CHATML_TEMPLATE
    # dequantize=True gives plain dense Linear layers (no packed GGUF blocks), which are
    # serialisable; float32 keeps the de-quantised values exactly.
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, local_files_only=True, dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True))
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
