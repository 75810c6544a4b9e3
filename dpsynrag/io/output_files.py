"""The files of a build's output directory: their names and their sha256.

``corpus.parquet``, ``index.faiss`` and ``manifest.json`` are written by
:mod:`dpsynrag.transforms.emit`, ``certificate.json`` by
:mod:`dpsynrag.accounting.certificate`, which covers the hashes of all the others.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = [
    "CERTIFICATE_FILE",
    "CORPUS_FILE",
    "INDEX_FILE",
    "MANIFEST_FILE",
    "REQUIRED_OUTPUT_FILES",
    "RESERVED_FILES",
    "output_file_hashes",
    "sha256_file",
]

CORPUS_FILE = "corpus.parquet"
INDEX_FILE = "index.faiss"
MANIFEST_FILE = "manifest.json"
CERTIFICATE_FILE = "certificate.json"
REQUIRED_OUTPUT_FILES = (CORPUS_FILE, INDEX_FILE, MANIFEST_FILE)
"""The files every certificate must cover."""
RESERVED_FILES = frozenset({*REQUIRED_OUTPUT_FILES, CERTIFICATE_FILE})
"""Names an extra output file may not take."""


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def output_file_hashes(out_dir: str | Path) -> dict[str, str]:
    """sha256 of every regular file in ``out_dir`` except the certificate (for the certificate)."""
    directory = Path(out_dir)
    return {p.name: sha256_file(p) for p in sorted(directory.iterdir())
            if p.is_file() and not p.is_symlink() and p.name != CERTIFICATE_FILE}
