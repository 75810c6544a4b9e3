"""Writing a file that holds private data: owner-only, atomic, durable."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_private"]


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file, fsync, rename), owner-only.

    The temporary file is 0600 from its creation (also when a leftover one existed), so the
    data is never readable by others, even for a moment. Its name carries the process id, so
    two processes writing one path (the query embedding cache) never write into each other's
    file; it is removed when writing fails.
    """
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # O_CREAT keeps the mode of a leftover file
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
