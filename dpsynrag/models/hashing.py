"""sha256 of weight files, for model identities and cache keys.

Hashing is chunked (never reads a whole file into memory). Results are remembered in a small
JSON index keyed by (absolute path, size, mtime_ns), so a multi-GB file is hashed once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

_CHUNK = 1 << 20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx", ".msgpack", ".h5")


def file_sha256(path: Path, index_file: Path | None = None) -> str:
    """Hex sha256 of a file's bytes; reuses ``index_file``'s entry if size and mtime match."""
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    index = _read_index(index_file) if index_file is not None else {}
    cached = index.get(key)
    if isinstance(cached, str) and len(cached) == 64:
        return cached
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    if index_file is not None:
        index[key] = value
        _write_index(index_file, index)
    return value


def weights_sha256(directory: Path, index_file: Path | None = None) -> str:
    """One sha256 over all weight files under ``directory`` (names and contents, sorted).

    Each weight file contributes ``relative/path<NUL>file-sha256<LF>``; configs and tokenizers
    are not included (they are not weights). A directory without weight files hashes to the
    sha256 of the empty string.
    """
    directory = Path(directory)
    files = sorted(p for p in directory.rglob("*")
                   if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    digest = hashlib.sha256()
    for file in files:
        rel = file.relative_to(directory).as_posix()
        digest.update(f"{rel}\0{file_sha256(file, index_file)}\n".encode())
    return digest.hexdigest()


def _read_index(index_file: Path) -> dict[str, str]:
    try:
        data = json.loads(Path(index_file).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_index(index_file: Path, index: dict[str, str]) -> None:
    """Replace the index atomically; an index that cannot be written is simply not kept."""
    index_file = Path(index_file)
    try:
        index_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=index_file.parent, prefix=".hashes-", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(index, handle, indent=0, sort_keys=True)
        os.replace(tmp, index_file)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
