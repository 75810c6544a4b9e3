"""The one error type model loading raises."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model or embedder could not be loaded; the message is one line naming path and problem.

    Messages never contain private data: only paths, package names and the reason.
    """
