"""The output directory: loads with plain pyarrow and faiss, rows align, manifest hashes match."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import dpsynrag
from dpsynrag.io.output_files import output_file_hashes, sha256_file
from dpsynrag.transforms.emit import write_output

TEXTS = [
    "The patient was diagnosed with asthma and given an inhaler.",
    "A follow-up visit for type 2 diabetes; metformin dose increased.",
    "Chest pain at rest; ECG normal; discharged.",
    "",
    "Fever and cough for three days, suspected influenza.",
]
KEYWORDS = ["asthma", "diabetes", "chest", "empty", "influenza"]
KEPT = [True, True, False, False, True]
TOKENS = [12, 14, 9, 0, 11]


class FakeEmbedder:
    """Deterministic hashed bag-of-words vectors, NOT normalised (emit must normalise)."""

    name = "fake-embedder"
    dimension = 16
    identity: ClassVar[dict[str, str]] = {"name": "fake-embedder", "source": "test",
                                          "sha256": "ab" * 32}

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split() or ["<empty>"]:
                h = hashlib.sha256(word.encode()).digest()
                out[i, h[0] % self.dimension] += 1.0 + h[1] / 255.0
        return out * 3.0


def write(tmp_path: Path, **overrides) -> tuple[Path, dict]:
    out = tmp_path / "out"
    out.mkdir()
    args = dict(texts=TEXTS, cluster_keywords=KEYWORDS, kept=KEPT, token_counts=TOKENS,
                embedder=FakeEmbedder())
    args.update(overrides)
    return out, write_output(out, **args)


def test_files_load_without_dpsynrag(tmp_path: Path) -> None:
    out, _ = write(tmp_path)
    script = textwrap.dedent(f"""
        import json, sys
        import faiss, numpy as np, pyarrow.parquet as pq
        out = {str(out)!r}
        table = pq.read_table(out + "/corpus.parquet")
        assert table.column_names == ["id", "text", "cluster_keyword", "kept", "tokens"]
        assert [str(t) for t in table.schema.types] == ["string", "string", "string", "bool",
                                                         "int32"]
        rows = table.to_pylist()
        assert [r["id"] for r in rows] == ["syn-0000" + str(i) for i in range(5)]
        index = faiss.read_index(out + "/index.faiss")
        assert index.ntotal == len(rows) and index.metric_type == faiss.METRIC_INNER_PRODUCT
        vectors = index.reconstruct_n(0, index.ntotal)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
        scores, ids = index.search(vectors, 1)
        assert ids[:, 0].tolist() == list(range(len(rows))), ids
        manifest = json.load(open(out + "/manifest.json"))
        assert manifest["rows"] == len(rows) and manifest["index_rows"] == "all"
        assert "dpsynrag" not in sys.modules
        print(json.dumps([r["kept"] for r in rows]))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == KEPT


def test_table_contents_and_search(tmp_path: Path) -> None:
    import faiss
    import pyarrow.parquet as pq

    out, manifest = write(tmp_path)
    table = pq.read_table(out / "corpus.parquet").to_pydict()
    assert table["text"] == TEXTS
    assert table["cluster_keyword"] == KEYWORDS
    assert table["kept"] == KEPT
    assert table["tokens"] == TOKENS
    index = faiss.read_index(str(out / "index.faiss"))
    query = FakeEmbedder().encode(["inhaler asthma patient"])
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    _, ids = index.search(query, 1)
    assert ids[0, 0] == 0
    assert manifest["kept_rows"] == 3 and manifest["rows"] == 5


def test_manifest(tmp_path: Path) -> None:
    out, manifest = write(tmp_path, extra_files={"plan.json": {"epsilon": 10.0},
                                                 "README.txt": "hello\n", "blob.bin": b"\x00"})
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    assert manifest["embedder"] == {"name": "fake-embedder", "dimension": 16,
                                    "sha256": "ab" * 32}
    assert manifest["metric"] == "inner_product" and manifest["normalized"] is True
    assert manifest["index"]["index_rows"] == "all"
    assert manifest["package_version"] == dpsynrag.__version__
    assert manifest["format_version"] == 1
    assert set(manifest["files"]) == {"corpus.parquet", "index.faiss", "plan.json",
                                      "README.txt", "blob.bin"}
    for name, entry in manifest["files"].items():
        data = (out / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert json.loads((out / "plan.json").read_text()) == {"epsilon": 10.0}
    hashes = output_file_hashes(out)
    assert set(hashes) == set(manifest["files"]) | {"manifest.json"}
    assert hashes["manifest.json"] == sha256_file(out / "manifest.json")


def test_empty_corpus(tmp_path: Path) -> None:
    import faiss
    import pyarrow.parquet as pq

    out, manifest = write(tmp_path, texts=[], cluster_keywords=[], kept=[], token_counts=[])
    assert pq.read_table(out / "corpus.parquet").num_rows == 0
    index = faiss.read_index(str(out / "index.faiss"))
    assert index.ntotal == 0 and index.d == 16
    assert manifest["rows"] == 0 and manifest["kept_rows"] == 0


@pytest.mark.parametrize("overrides", [
    dict(kept=[True]),
    dict(token_counts=[1, 2, 3, 4, -1]),
    dict(extra_files={"manifest.json": "x"}),
    dict(extra_files={"certificate.json": "x"}),
    dict(extra_files={"../escape.txt": "x"}),
    dict(extra_files={"sub/dir.txt": "x"}),
])
def test_bad_inputs_are_refused(tmp_path: Path, overrides: dict) -> None:
    with pytest.raises(ValueError):
        write(tmp_path, **overrides)


def test_embedder_with_wrong_shape_is_refused(tmp_path: Path) -> None:
    class Wrong(FakeEmbedder):
        def encode(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 3), dtype=np.float32)

    with pytest.raises(ValueError):
        write(tmp_path, embedder=Wrong())


@pytest.mark.slow
def test_with_the_packaged_embedder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import faiss

    from dpsynrag.models.embedder import load_embedder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = load_embedder(device="cpu")
    out, manifest = write(tmp_path, embedder=embedder)
    assert manifest["embedder"]["name"] == embedder.name
    assert manifest["embedder"]["dimension"] == embedder.dimension == 384
    index = faiss.read_index(str(out / "index.faiss"))
    _, ids = index.search(embedder.encode(["influenza with fever"]), 1)
    assert ids[0, 0] == 4
