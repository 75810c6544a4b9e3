"""The build's embedder, loaded offline, to embed queries exactly as the corpus was embedded."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpsynrag.handoff.files import CorpusIntegrityError, CorpusSource, ensure_loaded
from dpsynrag.models.locate import PACKAGED_EMBEDDER_NAME

if TYPE_CHECKING:
    from dpsynrag.models.embedder import LoadedEmbedder

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def load_query_embedder(corpus: CorpusSource, path: str | os.PathLike[str] | None = None, *,
                        device: str | None = None) -> LoadedEmbedder:
    """The embedder the manifest names, from local files only, checked against the manifest.

    ``path`` is ``None`` for the packaged all-MiniLM-L6-v2 (what ``build-corpus`` uses unless
    ``--embedder`` was given) or the local sentence-transformers directory the build used.
    The dimension must equal the index's and, when both are known, the weights' sha256 the
    manifest's. ``encode`` returns unit-norm float32 rows (inner product = cosine). Sets
    ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` unless already set: nothing is
    downloaded.
    """
    # loads torch: imported when this runs, not with this module
    from dpsynrag.models.embedder import load_embedder

    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)
    loaded = ensure_loaded(corpus)
    entry = loaded.manifest.get("embedder")
    entry = entry if isinstance(entry, Mapping) else {}
    named = str(entry.get("name", ""))
    if path is None and named != PACKAGED_EMBEDDER_NAME:
        raise ValueError(f"the corpus was embedded with {named!r}, not the packaged "
                         f"{PACKAGED_EMBEDDER_NAME}; pass path= to a local copy of that model")
    embedder = load_embedder(path, device)
    if embedder.dimension != loaded.dimension:
        raise CorpusIntegrityError(f"embedder {embedder.name!r} has dimension "
                                   f"{embedder.dimension}, the corpus index {loaded.dimension}")
    ours, theirs = embedder.identity.get("sha256"), entry.get("sha256")
    if ours and theirs and ours != theirs:
        raise CorpusIntegrityError(f"embedder {embedder.name!r}: weights sha256 {ours[:16]}… "
                                   f"differ from the build's ({str(theirs)[:16]}…)")
    return embedder


def check_query_vector(vector: Any, dimension: int, source: str) -> None:
    """Refuse a probe query embedding of the wrong width or not unit-norm (one-line error)."""
    import numpy as np

    array = np.asarray(vector, dtype=np.float64).reshape(-1)
    if array.size != dimension:
        raise ValueError(f"{source} returns {array.size}-dimensional vectors, the corpus index "
                         f"(manifest) has dimension {dimension}")
    norm = float(np.linalg.norm(array))
    if not np.isfinite(norm) or abs(norm - 1.0) > 1e-3:
        raise ValueError(f"{source} returns vectors of norm {norm:.4f}; the corpus is searched "
                         f"by inner product on unit vectors, so query vectors must be normalised")
