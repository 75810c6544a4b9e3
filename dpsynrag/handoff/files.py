"""Load a dpsynrag output directory with plain pyarrow and faiss, checking it first.

Every check compares the files with ``manifest.json`` (sha256 and size of each listed file,
row counts, dimension, metric); with ``public_key`` the signed certificate is verified too
(the manifest alone can be rewritten consistently by whoever changes the files; the
certificate's signature covers the manifest's hash). Errors are one line naming the file.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np

from dpsynrag.io.output_files import (
    CERTIFICATE_FILE,
    CORPUS_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    sha256_file,
)

if TYPE_CHECKING:
    import faiss
    import pyarrow as pa

MANIFEST_FORMAT = "dpsynrag-output"
SUPPORTED_FORMAT_VERSIONS = frozenset({1})
REQUIRED_COLUMNS = ("id", "text", "cluster_keyword", "kept")


class CorpusIntegrityError(ValueError):
    """A corpus directory that is incomplete, changed since it was built, or inconsistent."""


class EmptyCorpusWarning(UserWarning):
    """The corpus has no row the self-filter kept: kept-only searches return nothing."""


class LoadedCorpus(NamedTuple):
    """``(table, index, manifest)``: row i of ``table`` is vector i of ``index``."""

    table: pa.Table
    index: faiss.Index  # type: ignore[assignment]  # shadows tuple.index: a public field name
    manifest: dict[str, Any]

    @property
    def dimension(self) -> int:
        """Width of the stored vectors."""
        return int(self.index.d)

    def kept_mask(self) -> np.ndarray:
        """Boolean array: True where the self-filter kept the row."""
        return np.asarray(self.table.column("kept").to_pylist(), dtype=bool)

    def vectors(self) -> np.ndarray:
        """All stored vectors as an ``(n, dimension)`` float32 array (no re-embedding)."""
        if self.index.ntotal == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.asarray(self.index.reconstruct_n(0, self.index.ntotal), dtype=np.float32)


CorpusSource: TypeAlias = "str | os.PathLike[str] | LoadedCorpus"


def ensure_loaded(corpus: CorpusSource) -> LoadedCorpus:
    """``corpus`` itself if already loaded, else :func:`load_corpus` of the directory."""
    if isinstance(corpus, LoadedCorpus):
        return corpus
    return load_corpus(corpus)


def load_corpus(directory: str | os.PathLike[str], *,
                public_key: str | os.PathLike[str] | None = None,
                check_hashes: bool = True, allow_seeded: bool = False) -> LoadedCorpus:
    """Read ``corpus.parquet``, ``index.faiss`` and ``manifest.json`` after checking them.

    A seeded build is refused (its ``certificate.json`` says ``seeded: true``, or the
    certificate is unreadable): its noise came from a reproducible seed, so it carries no
    privacy guarantee. ``allow_seeded=True`` is for tests only. A directory without
    ``certificate.json`` loads on the manifest's checks; pass ``public_key`` to require a
    verified certificate.

    Raises :class:`CorpusIntegrityError` (one line, naming the file) when a listed file is
    missing or its size or sha256 differs from the manifest, when the row counts of the table,
    the index and the manifest differ, or when the dimension or metric is not the manifest's.
    ``public_key`` also runs ``dpsynrag verify`` (signature, ε re-derivation);
    ``check_hashes=False`` skips the sha256 pass (for very large corpora already verified).
    """
    import faiss
    import pyarrow.parquet as pq

    out = Path(directory)
    if not out.is_dir():
        raise CorpusIntegrityError(f"{out}: not a directory")
    if not allow_seeded:
        _refuse_seeded(out)
    if public_key is not None:
        _verify_certificate(out, Path(public_key), allow_seeded)
    manifest = _read_manifest(out / MANIFEST_FILE)
    files = manifest.get("files")
    if not isinstance(files, Mapping):
        raise CorpusIntegrityError(f"{out / MANIFEST_FILE}: no 'files' table")
    for required in (CORPUS_FILE, INDEX_FILE):
        if required not in files:
            raise CorpusIntegrityError(f"{out / MANIFEST_FILE}: does not list {required}")
    for name, entry in files.items():
        _check_file(out, str(name), entry, check_hashes)

    corpus_path, index_path = out / CORPUS_FILE, out / INDEX_FILE
    try:
        table = pq.read_table(corpus_path)
    except Exception as error:
        raise CorpusIntegrityError(f"{corpus_path}: unreadable Parquet "
                                   f"({type(error).__name__}: {_first_line(error)})") from error
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise CorpusIntegrityError(f"{corpus_path}: missing column(s) {', '.join(missing)}")
    try:
        index = faiss.read_index(str(index_path))
    except Exception as error:
        raise CorpusIntegrityError(f"{index_path}: unreadable FAISS index "
                                   f"({type(error).__name__}: {_first_line(error)})") from error
    _check_shapes(out, table, index, manifest)
    loaded = LoadedCorpus(table=table, index=index, manifest=manifest)
    kept = int(loaded.kept_mask().sum())
    if kept == 0:
        warnings.warn(f"{out}: the corpus has 0 kept rows (of {table.num_rows}): searches "
                      "and stores with kept_only=True (the default) return nothing; see the "
                      "build summary and its exit status", EmptyCorpusWarning, stacklevel=2)
    return loaded


def _refuse_seeded(out: Path) -> None:
    path = out / CERTIFICATE_FILE
    if not path.exists():
        return
    try:
        certificate = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorpusIntegrityError(f"{path}: unreadable certificate "
                                   f"({type(error).__name__})") from None
    if not isinstance(certificate, dict) or certificate.get("seeded") is not False:
        raise CorpusIntegrityError(
            f"{path}: a seeded build (reproducible noise, no privacy guarantee; tests only): "
            "refusing to load it")


def _verify_certificate(out: Path, public_key: Path, allow_seeded: bool) -> None:
    # cryptography, scipy: loaded only when a certificate is checked
    from dpsynrag.accounting.certificate import verify_output

    problems = verify_output(out, public_key, allow_seeded=allow_seeded)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CorpusIntegrityError(f"{out}: verification failed: {problems[0]}{more}")


def _read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CorpusIntegrityError(f"{path}: missing; not a dpsynrag output directory")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorpusIntegrityError(f"{path}: not valid JSON ({_first_line(error)})") from error
    if not isinstance(manifest, dict):
        raise CorpusIntegrityError(f"{path}: not a JSON object")
    if manifest.get("format") != MANIFEST_FORMAT \
            or manifest.get("format_version") not in SUPPORTED_FORMAT_VERSIONS:
        raise CorpusIntegrityError(
            f"{path}: unsupported format {manifest.get('format')!r} version "
            f"{manifest.get('format_version')!r} (this dpsynrag reads {MANIFEST_FORMAT!r} "
            f"version {', '.join(map(str, sorted(SUPPORTED_FORMAT_VERSIONS)))})")
    return manifest


def _check_file(out: Path, name: str, entry: Any, check_hashes: bool) -> None:
    manifest_path = out / MANIFEST_FILE
    if not name or name != Path(name).name or name.startswith("."):
        raise CorpusIntegrityError(f"{manifest_path}: lists {name!r}, not a plain file name")
    if not isinstance(entry, Mapping) or not isinstance(entry.get("sha256"), str):
        raise CorpusIntegrityError(f"{manifest_path}: no sha256 for {name}")
    path = out / name
    if not path.is_file():
        raise CorpusIntegrityError(f"{path}: missing (listed in {MANIFEST_FILE})")
    size = path.stat().st_size
    expected_size = entry.get("bytes")
    if isinstance(expected_size, int) and size != expected_size:
        raise CorpusIntegrityError(f"{path}: {size} bytes, {MANIFEST_FILE} says "
                                   f"{expected_size}; the file was changed or truncated")
    if check_hashes:
        actual = sha256_file(path)
        if actual != entry["sha256"]:
            raise CorpusIntegrityError(
                f"{path}: sha256 {actual[:16]}… does not match {MANIFEST_FILE} "
                f"({str(entry['sha256'])[:16]}…); the file was changed or corrupted")


def _check_shapes(out: Path, table: pa.Table, index: faiss.Index,
                  manifest: Mapping[str, Any]) -> None:
    import faiss

    index_path, corpus_path = out / INDEX_FILE, out / CORPUS_FILE
    if index.ntotal != table.num_rows:
        raise CorpusIntegrityError(f"{index_path}: {index.ntotal} vectors but {CORPUS_FILE} has "
                                   f"{table.num_rows} rows (vector i must be row i)")
    if manifest.get("rows") != table.num_rows:
        raise CorpusIntegrityError(f"{corpus_path}: {table.num_rows} rows, {MANIFEST_FILE} says "
                                   f"{manifest.get('rows')!r}")
    embedder = manifest.get("embedder")
    dimension = embedder.get("dimension") if isinstance(embedder, Mapping) else None
    if dimension != index.d:
        raise CorpusIntegrityError(f"{index_path}: dimension {index.d}, {MANIFEST_FILE} says "
                                   f"{dimension!r}")
    if manifest.get("metric") != "inner_product" or index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise CorpusIntegrityError(f"{index_path}: metric is not inner product (manifest "
                                   f"{manifest.get('metric')!r}, index type {index.metric_type})")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0]
