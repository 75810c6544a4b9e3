"""Issue 13.1 (query side): the tie-breaks and the voter partition of ``PrivateCorpus`` are
functions of each document itself, never of its position. Without an id column ids are
``row-<n>``; removing one document used to shift every later id and so move most of the
other documents to another voter (measured: 194 of 199) and reorder ties."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpsynrag.query.private_corpus import PrivateCorpus

N_DOCS, VOTERS, REMOVED = 200, 30, 0  # removing the first shifts every id


class ConstantEmbedder:
    """Every text gets the same unit vector: every similarity ties."""

    dimension = 8

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        out[:, 0] = 1.0
        return out


def _write(path: Path, texts: list[str]) -> Path:
    """JSONL without an id column (ids become row numbers)."""
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


@pytest.fixture()
def neighbours(tmp_path: Path) -> tuple[PrivateCorpus, PrivateCorpus, str]:
    """The corpus of 200 id-less notes and its neighbour without note ``REMOVED``."""
    texts = [f"note {i}: patient reports symptom {i * 7 % 13} since day {i % 9}"
             for i in range(N_DOCS)]
    full = PrivateCorpus.from_path(_write(tmp_path / "full.jsonl", texts), ConstantEmbedder())
    rest = texts[:REMOVED] + texts[REMOVED + 1:]
    smaller = PrivateCorpus.from_path(_write(tmp_path / "smaller.jsonl", rest),
                                      ConstantEmbedder())
    # ids without an id column come from the record's content, so they do not shift either
    assert smaller.ids[REMOVED] == full.ids[REMOVED + 1]
    return full, smaller, texts[REMOVED]


def test_item1_removing_one_document_moves_no_other_document_to_another_voter(
        neighbours) -> None:
    full, smaller, removed = neighbours
    before = dict(zip(full.texts, full.voter_of(VOTERS).tolist(), strict=True))
    after = dict(zip(smaller.texts, smaller.voter_of(VOTERS).tolist(), strict=True))
    assert len(after) == N_DOCS - 1 and removed not in after
    moved = sum(before[text] != voter for text, voter in after.items())
    assert moved == 0
    # the partition is not degenerate: the documents spread over the voters
    assert len(set(before.values())) == VOTERS


def test_item1_removing_one_document_keeps_the_tie_order_of_the_others(neighbours) -> None:
    full, smaller, removed = neighbours
    query = ConstantEmbedder().encode(["q"])[0]
    order_full = [full.texts[i] for i in full.exact_top(full.similarities(query), N_DOCS)]
    order_smaller = [smaller.texts[i]
                     for i in smaller.exact_top(smaller.similarities(query), N_DOCS)]
    assert len(set(full.similarities(query).tolist())) == 1  # every document ties
    assert order_smaller == [t for t in order_full if t != removed]
    # and the order is not the input order (the key is a hash, not a position)
    assert order_full != full.texts


def test_item1_voters_and_ties_ignore_ids_and_input_order() -> None:
    texts = [f"document {i}" for i in range(40)]
    vectors = ConstantEmbedder().encode(texts)
    rs = np.random.default_rng(0)
    perm = rs.permutation(40)
    a = PrivateCorpus([f"row-{i + 1}" for i in range(40)], texts, vectors)
    b = PrivateCorpus([f"other-{i}" for i in range(40)], [texts[i] for i in perm], vectors)
    voters_a = dict(zip(a.texts, a.voter_of(7).tolist(), strict=True))
    voters_b = dict(zip(b.texts, b.voter_of(7).tolist(), strict=True))
    assert voters_a == voters_b
    query = vectors[0]
    assert [a.texts[i] for i in a.exact_top(a.similarities(query), 40)] == \
        [b.texts[i] for i in b.exact_top(b.similarities(query), 40)]
