"""Checks that can fail, run before the build's first charge (issue 16, "fail before spending").

A build that would fail at its end -- an unreadable or world-readable signing key, an output
location it cannot write, a full disk, a model or embedder that does not load, a ``--device
cuda`` without CUDA -- must fail before the corpus ledger is charged and before any noise is
drawn, so that the operator fixes it and pays once. Each check reads only the operator's
setup (paths, permissions, free space, model files), never the private documents, and its
error is one line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynrag.accounting.signing import (
    CONFIG_ENV,
    default_key_path,
    ensure_default_key,
    fingerprint,
    load_private_key,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from dpsynrag.pipeline.runners import Runner

#: Free space an output directory and a state directory need at the least, on top of the
#: input's own size (the corpus, its index and the intermediates are a fraction of it).
MIN_FREE_BYTES = 64 * 1024 * 1024


class PreflightError(RuntimeError):
    """A setup problem found before spending anything (one line, no private data)."""


def load_signer(signing_key: Path | None) -> tuple[Ed25519PrivateKey, str, bool]:
    """``(private key, fingerprint, created)``: the given key (must be 0600, Ed25519, PEM) or
    the default one, created on first use. Raises ``SigningKeyError`` (one line)."""
    if signing_key is None:
        try:
            return ensure_default_key()
        except OSError as error:  # the config directory cannot hold the key
            where = error.filename or default_key_path().parent
            raise PreflightError(
                f"{where}: cannot create the default signing key here "
                f"({error.strerror or error}); pass --signing-key KEY from 'dpsynrag keygen' "
                f"or set {CONFIG_ENV} to a writable directory (nothing was spent)") from None
    key = load_private_key(signing_key)
    return key, fingerprint(key.public_key()), False


def required_free_bytes(input_path: str | Path) -> int:
    """``MIN_FREE_BYTES`` plus the input's size on disk (0 for a remote pattern)."""
    path = Path(input_path)
    size = 0
    try:
        if path.is_file():
            size = path.stat().st_size
        elif path.is_dir():
            size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        size = 0
    return MIN_FREE_BYTES + size


def probe_write(directory: Path) -> None:
    """Create and remove a new file in ``directory``: raises the ``OSError`` that writing there
    would raise (permissions, a read-only or full file system)."""
    fd, probe = tempfile.mkstemp(prefix=".dpsynrag-probe-", dir=directory)
    os.close(fd)
    os.unlink(probe)


def check_writable_directory(directory: Path, needed_bytes: int, what: str) -> None:
    """``directory`` exists or can be created, accepts a new file, and has ``needed_bytes``
    free. Raises ``PreflightError`` naming ``what`` and the directory."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe_write(directory)
    except OSError as error:
        raise PreflightError(f"{directory}: cannot write the {what} here "
                             f"({error.strerror or error})") from None
    free = shutil.disk_usage(directory).free
    if free < needed_bytes:
        raise PreflightError(f"{directory}: only {free / 2**20:.0f} MiB free for the {what}; "
                             f"the build needs about {needed_bytes / 2**20:.0f} MiB")


def preload_models(runner: Runner, uses_llm: bool) -> None:
    """Load the embedder (every mode writes vectors) and, when the build runs it (token mode,
    the facts mode's token writer), the LLM, so that a missing model or an unavailable device
    fails now. ``ModelLoadError`` and friends pass through unchanged (one-line messages)."""
    runner.embedder_identity()
    if uses_llm:
        runner.llm_identity()
