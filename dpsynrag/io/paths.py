"""Where dpsynrag keeps its per-user caches (one rule for every cache)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_root"]

CACHE_ENV = "DPSYNRAG_CACHE_DIR"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$DPSYNRAG_CACHE_DIR``, else ``~/.cache/dpsynrag``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dpsynrag"
