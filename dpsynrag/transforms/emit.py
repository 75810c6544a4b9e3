"""The hand-off: write the synthetic corpus as files any RAG stack can load without dpsynrag.

Privacy: none spent. Everything written here is post-processing of DP outputs (the synthetic
texts of stage (d), their public cluster keywords from the noisy histogram, the self-filter
flags of stage (e)) and public facts (the embedder, the package version). Nothing private
(no input document, count, similarity or threshold) may be passed in.

Files (row i of every file is synthetic text i):
* ``corpus.parquet``: ``id`` (string ``syn-00000``), ``text``, ``cluster_keyword``,
  ``kept`` (bool, the self-filter's decision), ``tokens`` (int32, generated tokens);
* ``index.faiss``: ``faiss.IndexFlatIP`` over the embedder's unit-normalised float32 vectors of
  **all** rows (``"index_rows": "all"``), so FAISS id i is parquet row i; drop hits whose
  ``kept`` is false to use only the self-filtered corpus;
* ``manifest.json``: how to read the two (embedder name and dimension, metric, normalisation,
  row counts) and the sha256 of every file it describes.

The caller writes into a fresh temporary directory and renames it when complete (and adds
``certificate.json``, which covers this manifest's hash, afterwards).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import dpsynrag
from dpsynrag.io.output_files import (
    CORPUS_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    RESERVED_FILES,
    sha256_file,
)
from dpsynrag.models.protocols import NamedEmbedder
from dpsynrag.models.vectors import unit_rows

MANIFEST_FORMAT = "dpsynrag-output"
MANIFEST_FORMAT_VERSION = 1

__all__ = ["write_output"]


def _check_name(name: str) -> None:
    if (not name or name in RESERVED_FILES or "/" in name or "\\" in name
            or name.startswith(".") or name != Path(name).name):
        raise ValueError(f"extra file name {name!r} is reserved or not a plain file name")


def write_output(
    out_dir: Path,
    *,
    texts: Sequence[str],
    cluster_keywords: Sequence[str],
    kept: Sequence[bool],
    token_counts: Sequence[int],
    embedder: NamedEmbedder,
    extra_files: Mapping[str, bytes | str | Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write corpus.parquet, index.faiss, the extra files and manifest.json into ``out_dir``.

    ``embedder`` needs ``encode(list[str]) -> (n, dimension)``, ``name`` and ``dimension`` (and
    optionally ``identity`` with a ``sha256``). ``extra_files`` maps plain file names to bytes,
    text or a JSON-serialisable mapping; they are hashed in the manifest too. Returns the
    manifest dict.
    """
    import faiss
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    if not out.is_dir():
        raise FileNotFoundError(f"{out}: the output directory must exist")
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings")
    n = len(texts)
    for name, column in (("cluster_keywords", cluster_keywords), ("kept", kept),
                         ("token_counts", token_counts)):
        if len(column) != n:
            raise ValueError(f"{name} has {len(column)} entries for {n} texts")
    tokens = np.asarray(token_counts, dtype=np.int64)
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(np.int32).max):
        raise ValueError("token counts must be non-negative 32-bit integers")
    extras = dict(extra_files or {})
    for name in extras:
        _check_name(name)

    dimension = int(embedder.dimension)
    table = pa.table({
        "id": pa.array([f"syn-{i:05d}" for i in range(n)], type=pa.string()),
        "text": pa.array([str(t) for t in texts], type=pa.string()),
        "cluster_keyword": pa.array([str(w) for w in cluster_keywords], type=pa.string()),
        "kept": pa.array([bool(k) for k in kept], type=pa.bool_()),
        "tokens": pa.array(tokens.astype(np.int32), type=pa.int32()),
    })
    pq.write_table(table, out / CORPUS_FILE)

    vectors = (np.zeros((0, dimension), dtype=np.float32) if n == 0
               else embedder.encode(list(map(str, texts))))
    index = faiss.IndexFlatIP(dimension)
    index.add(unit_rows(vectors, rows=n, dimension=dimension, what="the embedder's vectors"))
    faiss.write_index(index, str(out / INDEX_FILE))

    for name, content in extras.items():
        if isinstance(content, bytes):
            data = content
        elif isinstance(content, str):
            data = content.encode("utf-8")
        else:
            data = (json.dumps(content, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
        (out / name).write_bytes(data)

    described = [CORPUS_FILE, INDEX_FILE, *sorted(extras)]
    identity = dict(getattr(embedder, "identity", {}) or {})
    embedder_entry: dict[str, Any] = {"name": str(embedder.name), "dimension": dimension}
    if identity.get("sha256"):
        embedder_entry["sha256"] = str(identity["sha256"])
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_FORMAT_VERSION,
        "package": "dpsynrag",
        "package_version": dpsynrag.__version__,
        "rows": n,
        "kept_rows": int(sum(bool(k) for k in kept)),
        "corpus": {"file": CORPUS_FILE, "columns": ["id", "text", "cluster_keyword", "kept",
                                                    "tokens"]},
        "index": {"file": INDEX_FILE, "type": "IndexFlatIP", "metric": "inner_product",
                  "normalized": True, "index_rows": "all",
                  "row_alignment": "faiss id i is corpus.parquet row i; filter on kept"},
        "embedder": embedder_entry,
        "metric": "inner_product",
        "normalized": True,
        "index_rows": "all",
        "files": {name: {"sha256": sha256_file(out / name), "bytes": (out / name).stat().st_size}
                  for name in described},
    }
    (out / MANIFEST_FILE).write_text(
        json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    return manifest
