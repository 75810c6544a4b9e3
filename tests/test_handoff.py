"""dpsynrag.handoff: a real output directory (packaged embedder) loads, is searched as built,
is refused when tampered with, and hands off to LangChain and LlamaIndex without re-embedding,
all with the network disabled."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpsynrag.handoff import (
    HANDOFF_INSTALL_HINT,
    CorpusIntegrityError,
    load_corpus,
    load_query_embedder,
    search,
    search_texts,
    to_langchain_faiss,
    to_llamaindex,
)
from dpsynrag.io.output_files import sha256_file
from dpsynrag.transforms.emit import write_output

TEXTS = [
    "The patient was diagnosed with asthma and was given a blue inhaler.",
    "Type 2 diabetes follow-up: the metformin dose was increased.",
    "A broken left wrist after a fall from a bicycle; a cast was applied.",
    "Seasonal hay fever with sneezing and itchy eyes, treated with antihistamines.",
    "Migraine headaches with aura, relieved by rest in a dark room.",
    "High blood pressure, managed with a low-salt diet and daily walks.",
    "A sprained ankle from playing football, treated with ice and compression.",
    "Iron deficiency anaemia causing fatigue, treated with iron tablets.",
]
KEYWORDS = ["asthma", "diabetes", "wrist", "hayfever", "migraine", "hypertension", "ankle",
            "anaemia"]
KEPT = [True, True, False, True, True, True, False, True]
TOKENS = [14, 12, 16, 15, 13, 14, 15, 12]
KEPT_ROWS = [i for i, k in enumerate(KEPT) if k]

LANGCHAIN_SKIP = "LangChain extras absent: pip install 'dpsynrag[handoff]'"
LLAMAINDEX_SKIP = "LlamaIndex extras absent: pip install 'dpsynrag[handoff]'"
SUNSET = "ignore:.*langchain-community.*:DeprecationWarning"


@pytest.fixture(scope="module")
def network_attempts() -> Iterator[list[Any]]:
    """Every socket connection or name lookup fails (and is recorded) while this module runs."""
    attempts: list[Any] = []

    def deny(*args: Any, **kwargs: Any) -> None:
        attempts.append(args[1:3] if args and isinstance(args[0], socket.socket) else args[:2])
        raise OSError("network disabled by tests/test_handoff.py")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", deny)
        patch.setattr(socket.socket, "connect_ex", deny)
        patch.setattr(socket, "getaddrinfo", deny)
        patch.setattr(socket, "create_connection", deny)
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            patch.setenv(name, "1")
        yield attempts


@pytest.fixture(scope="module")
def embedder(network_attempts: list[Any]) -> Any:
    from dpsynrag.models.embedder import load_embedder

    return load_embedder(device="cpu")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    out = tmp_path_factory.mktemp("handoff") / "corpus"
    out.mkdir()
    write_output(out, texts=TEXTS, cluster_keywords=KEYWORDS, kept=KEPT, token_counts=TOKENS,
                 embedder=embedder)
    return out


@pytest.fixture
def reuse_embedder(monkeypatch: pytest.MonkeyPatch, embedder: Any) -> list[Any]:
    """The adapters' default path loads the fixture's embedder (saves a reload); records calls."""
    calls: list[Any] = []

    def load(path: Any = None, device: Any = None, **kwargs: Any) -> Any:
        calls.append(path)
        return embedder

    monkeypatch.setattr("dpsynrag.models.embedder.load_embedder", load)
    return calls


@pytest.fixture
def copy_dir(corpus_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(corpus_dir, tmp_path / "copy"))


def test_network_is_really_disabled(network_attempts: list[Any]) -> None:
    with pytest.raises(OSError, match="network disabled"):
        socket.create_connection(("example.org", 443), timeout=1)
    assert network_attempts
    network_attempts.clear()


def test_loaded_rows_align_with_index_rows(corpus_dir: Path, embedder: Any) -> None:
    table, index, manifest = load_corpus(corpus_dir)
    assert table.column("text").to_pylist() == TEXTS
    assert table.column("id").to_pylist() == [f"syn-{i:05d}" for i in range(len(TEXTS))]
    assert index.ntotal == table.num_rows == manifest["rows"] == len(TEXTS)
    stored = index.reconstruct_n(0, index.ntotal)
    np.testing.assert_allclose(stored, embedder.encode(TEXTS), atol=1e-5)
    _, ids = index.search(stored, 1)
    assert ids[:, 0].tolist() == list(range(len(TEXTS)))


def test_query_for_a_text_returns_its_row_first(corpus_dir: Path) -> None:
    loaded = load_corpus(corpus_dir)
    query_embedder = load_query_embedder(loaded, device="cpu")
    assert query_embedder.identity["sha256"] == loaded.manifest["embedder"]["sha256"]
    everything = search_texts(loaded, TEXTS, 3, embedder=query_embedder, kept_only=False)
    for row, hits in enumerate(everything):
        assert hits[0].row == row and hits[0].text == TEXTS[row]
        assert hits[0].id == f"syn-{row:05d}" and hits[0].cluster_keyword == KEYWORDS[row]
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)
        assert hits[0].score > hits[1].score
    kept_only = search_texts(loaded, TEXTS, len(TEXTS), embedder=query_embedder)
    for row, hits in enumerate(kept_only):
        assert sorted(h.row for h in hits) == KEPT_ROWS
        assert (hits[0].row == row) == KEPT[row]
    # Unnormalised query vectors rank identically and still score as cosines.
    vectors = query_embedder.encode(TEXTS[:2]) * 7.0
    assert [h.row for h in search(corpus_dir, vectors, 1)[1]] == [1]
    assert search(corpus_dir, vectors, 1)[0][0].score == pytest.approx(1.0, abs=1e-4)


def test_search_rejects_bad_queries(corpus_dir: Path) -> None:
    loaded = load_corpus(corpus_dir)
    with pytest.raises(ValueError, match=r"dimension|shape"):
        search(loaded, np.ones((1, 5)), 1)
    with pytest.raises(ValueError, match="positive integer"):
        search(loaded, np.ones((1, loaded.dimension)), 0)


def _rewrite_manifest(directory: Path, **changes: Any) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest.update(changes)
    for name, entry in manifest["files"].items():
        entry.update(sha256=sha256_file(directory / name), bytes=(directory / name).stat().st_size)
    (directory / "manifest.json").write_text(json.dumps(manifest))


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("tamper", "pattern"), [
    (lambda d: _flip_last_byte(d / "corpus.parquet"), r"corpus\.parquet: sha256 .* does not match"),
    (lambda d: _flip_last_byte(d / "index.faiss"), r"index\.faiss: sha256 .* does not match"),
    (lambda d: (d / "index.faiss").write_bytes((d / "index.faiss").read_bytes()[:-4]),
     r"index\.faiss: \d+ bytes, manifest\.json says \d+"),
    (lambda d: (d / "corpus.parquet").unlink(), r"corpus\.parquet: missing"),
    (lambda d: (d / "manifest.json").unlink(), r"manifest\.json: missing"),
    (lambda d: (d / "manifest.json").write_text("{not json"), r"manifest\.json: not valid JSON"),
    (lambda d: _rewrite_manifest(d, rows=3), r"corpus\.parquet: 8 rows, manifest\.json says 3"),
    (lambda d: _rewrite_manifest(d, format_version=99), r"manifest\.json: unsupported format"),
])
def test_tampering_is_detected(copy_dir: Path, tamper: Any, pattern: str) -> None:
    load_corpus(copy_dir)
    tamper(copy_dir)
    with pytest.raises(CorpusIntegrityError, match=pattern) as caught:
        load_corpus(copy_dir)
    assert "\n" not in str(caught.value)


def test_consistently_rewritten_index_is_refused(copy_dir: Path) -> None:
    import faiss

    index = faiss.read_index(str(copy_dir / "index.faiss"))
    index.add(np.eye(1, index.d, dtype=np.float32))
    faiss.write_index(index, str(copy_dir / "index.faiss"))
    _rewrite_manifest(copy_dir)
    with pytest.raises(CorpusIntegrityError, match=r"index\.faiss: 9 vectors but corpus\.parquet"):
        load_corpus(copy_dir)


def test_public_key_runs_certificate_verification(corpus_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(CorpusIntegrityError, match=r"verification failed: .*certificate"):
        load_corpus(corpus_dir, public_key=tmp_path / "absent.pub")


def test_query_embedder_must_match_the_manifest(copy_dir: Path) -> None:
    _rewrite_manifest(copy_dir, embedder={"name": "my-embedder", "dimension": 384})
    with pytest.raises(ValueError, match=r"embedded with 'my-embedder'.*pass path="):
        load_query_embedder(copy_dir)


@pytest.mark.parametrize(("blocked", "adapter"), [
    ("langchain_community.vectorstores", to_langchain_faiss),
    ("llama_index.core", to_llamaindex),
])
def test_missing_extra_names_the_install(monkeypatch: pytest.MonkeyPatch, corpus_dir: Path,
                                         blocked: str, adapter: Any) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)
    with pytest.raises(ImportError, match=r"pip install 'dpsynrag\[handoff\]'"):
        adapter(corpus_dir)
    assert "dpsynrag[handoff]" in HANDOFF_INSTALL_HINT


class _Unnormalised:
    """LangChain/LlamaIndex-style embeddings returning a constant 2-norm vector."""

    def __init__(self, dimension: int) -> None:
        self.vector = [2.0] + [0.0] * (dimension - 1)

    def embed_query(self, text: str) -> list[float]:
        return self.vector

    get_query_embedding = embed_query


@pytest.mark.filterwarnings(SUNSET)
def test_langchain_store(corpus_dir: Path, embedder: Any, reuse_embedder: list[Any]) -> None:
    pytest.importorskip("langchain_community", reason=LANGCHAIN_SKIP)
    from langchain_community.vectorstores.utils import DistanceStrategy

    from dpsynrag.handoff import langchain_embeddings

    store = to_langchain_faiss(corpus_dir)
    assert reuse_embedder == [None]  # the packaged embedder the manifest names
    assert store.distance_strategy == DistanceStrategy.MAX_INNER_PRODUCT
    assert store.index.ntotal == len(KEPT_ROWS)
    np.testing.assert_array_equal(store.index.reconstruct_n(0, store.index.ntotal),
                                  load_corpus(corpus_dir).vectors()[KEPT_ROWS])
    doc = store.similarity_search(TEXTS[3], k=1)[0]
    assert doc.page_content == TEXTS[3] and doc.id == "syn-00003"
    assert doc.metadata == {"id": "syn-00003", "row": 3, "cluster_keyword": "hayfever",
                            "kept": True, "tokens": 15}
    found = store.similarity_search_with_relevance_scores(TEXTS[4], k=2)
    assert found[0][0].page_content == TEXTS[4]
    assert found[0][1] == pytest.approx(1.0, abs=1e-4) and found[0][1] > found[1][1]
    assert all(d.metadata["kept"] for d in store.similarity_search(TEXTS[2], k=len(TEXTS)))

    loaded = load_corpus(corpus_dir)
    everything = to_langchain_faiss(loaded, langchain_embeddings(embedder), kept_only=False)
    assert everything.index is loaded.index
    assert everything.similarity_search(TEXTS[2], k=1)[0].metadata["kept"] is False
    assert everything.similarity_search(TEXTS[2], k=1, filter={"kept": True})[0].metadata[
        "kept"] is True

    with pytest.raises(ValueError, match=r"8-dimensional .* dimension 384"):
        to_langchain_faiss(corpus_dir, _Unnormalised(8))
    with pytest.raises(ValueError, match=r"norm 2\.0000"):
        to_langchain_faiss(corpus_dir, _Unnormalised(384))


class _CountingEmbedder:
    """A dpsynrag-style embedder that counts the texts it embeds."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.calls = inner, inner.name, 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += len(texts)
        return self.inner.encode(texts)


def test_llamaindex_retriever(corpus_dir: Path, embedder: Any,
                              reuse_embedder: list[Any]) -> None:
    pytest.importorskip("llama_index.vector_stores.faiss", reason=LLAMAINDEX_SKIP)
    from dpsynrag.handoff import llamaindex_embedding

    counting = _CountingEmbedder(embedder)
    index = to_llamaindex(corpus_dir, llamaindex_embedding(counting))
    assert counting.calls == 1  # the dimension probe only: the corpus is not re-embedded
    stored = index.vector_store.client
    assert stored.ntotal == len(KEPT_ROWS)
    np.testing.assert_array_equal(stored.reconstruct_n(0, stored.ntotal),
                                  load_corpus(corpus_dir).vectors()[KEPT_ROWS])
    nodes = index.as_retriever(similarity_top_k=2).retrieve(TEXTS[1])
    assert nodes[0].node.node_id == "syn-00001" and nodes[0].node.get_content() == TEXTS[1]
    assert nodes[0].node.metadata["cluster_keyword"] == "diabetes"
    assert nodes[0].score == pytest.approx(1.0, abs=1e-4) and nodes[0].score > nodes[1].score
    assert counting.calls == 2

    default = to_llamaindex(corpus_dir, kept_only=False)
    assert reuse_embedder == [None]
    top = default.as_retriever(similarity_top_k=1).retrieve(TEXTS[6])[0]
    assert top.node.node_id == "syn-00006" and top.node.metadata["kept"] is False
    with pytest.raises(ValueError, match="8-dimensional"):
        to_llamaindex(corpus_dir, _Unnormalised(8))


def test_no_network_was_attempted(network_attempts: list[Any]) -> None:
    assert network_attempts == []


def test_a_corpus_without_kept_rows_loads_with_a_warning(tmp_path: Path, embedder: Any) -> None:
    from dpsynrag.handoff import EmptyCorpusWarning

    out = tmp_path / "empty"
    out.mkdir()
    write_output(out, texts=TEXTS, cluster_keywords=KEYWORDS, kept=[False] * len(TEXTS),
                 token_counts=TOKENS, embedder=embedder)
    with pytest.warns(EmptyCorpusWarning, match=f"0 kept rows \\(of {len(TEXTS)}\\)"):
        loaded = load_corpus(out)
    assert search(loaded, embedder.encode([TEXTS[0]]), 3) == [[]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyCorpusWarning)
        (tmp_path / "fine").mkdir()
        write_output(tmp_path / "fine", texts=TEXTS, cluster_keywords=KEYWORDS, kept=KEPT,
                     token_counts=TOKENS, embedder=embedder)
        load_corpus(tmp_path / "fine")  # kept rows: no warning
