"""Lazy imports of the optional RAG frameworks, with one clear error when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType

HANDOFF_INSTALL_HINT = "pip install 'dpsynrag[handoff]'"


def import_extra(module: str, feature: str) -> ModuleType:
    """Import ``module`` or raise ``ImportError`` naming ``feature`` and the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{feature} needs the optional package providing {module!r} "
            f"({type(error).__name__}: {error}); install it with {HANDOFF_INSTALL_HINT}"
        ) from error
