"""Row selection, per-row metadata and vector subsets shared by the framework adapters."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynrag.handoff.files import LoadedCorpus

# Embedded once to check that application-supplied embeddings fit the corpus.
PROBE_QUERY = "dimension check"


def selected_rows(loaded: LoadedCorpus, kept_only: bool) -> np.ndarray:
    """Corpus rows the adapters expose: the kept rows, or every row."""
    kept = loaded.kept_mask()
    return np.flatnonzero(kept) if kept_only else np.arange(len(kept))


def row_metadata(loaded: LoadedCorpus) -> list[dict[str, Any]]:
    """Per-row metadata shared by the adapters: id, row, cluster_keyword, kept, tokens."""
    data = loaded.table.to_pydict()
    tokens = data.get("tokens", [None] * loaded.table.num_rows)
    return [{"id": str(data["id"][i]), "row": i, "cluster_keyword": str(data["cluster_keyword"][i]),
             "kept": bool(data["kept"][i]),
             "tokens": None if tokens[i] is None else int(tokens[i])}
            for i in range(loaded.table.num_rows)]


def subset_index(loaded: LoadedCorpus, rows: np.ndarray) -> Any:
    """The index itself when ``rows`` is every row, else a new IndexFlatIP of their vectors."""
    import faiss

    if len(rows) == loaded.index.ntotal:
        return loaded.index
    index = faiss.IndexFlatIP(loaded.dimension)
    if len(rows):
        index.add(np.ascontiguousarray(loaded.vectors()[rows], dtype=np.float32))
    return index
