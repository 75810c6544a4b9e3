"""Embedding rows scaled to unit length: the one normalisation of every index and query.

The FAISS indexes are inner-product indexes over unit vectors, so a score is a cosine
similarity; the build, the evaluation, the hand-off and the query-time retrieval all scale
rows here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["scale_to_unit", "unit_rows"]


def scale_to_unit(array: np.ndarray) -> np.ndarray:
    """Every row of a 2-D array divided by its L2 norm; a zero row stays zero (never NaN)."""
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return array / np.where(norms > 0, norms, 1.0)


def unit_rows(vectors: Any, *, rows: int | None = None, dimension: int | None = None,
              what: str = "embeddings", dtype: Any = np.float32) -> np.ndarray:
    """``vectors`` checked and scaled to unit rows, as a C-contiguous ``dtype`` array.

    ``ValueError`` (naming ``what``) unless they are 2-D, ``rows`` x ``dimension`` (each
    only when given) and finite.
    """
    array = np.asarray(vectors, dtype=dtype)
    if array.ndim != 2 or (rows is not None and array.shape[0] != rows) or (
            dimension is not None and array.shape[1] != dimension):
        expected = f"({'n' if rows is None else rows}, " \
                   f"{'dimension' if dimension is None else dimension})"
        raise ValueError(f"{what} have shape {array.shape}, expected {expected}")
    if not np.isfinite(array).all():
        raise ValueError(f"{what} contain NaN or infinite values")
    return np.ascontiguousarray(scale_to_unit(array), dtype=dtype)
