"""Soft clustering (Algorithm 1 line 8): rarest keywords first, each document in <= L clusters,
a pure function of the documents' keywords and the public top words."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dpsynrag.transforms.clustering import cluster_membership_counts, soft_clusters


def literal_algorithm(docs: list[list[str]], top: list[str], L: int) -> list[list[int]]:
    """Line 8 as written: r from R down to 1, C_r = {d : w_r in d, d in < L clusters so far}."""
    clusters: list[list[int]] = [[] for _ in top]
    joined = [0] * len(docs)
    for r in range(len(top) - 1, -1, -1):
        for d, words in enumerate(docs):
            if top[r] in words and joined[d] < L:
                clusters[r].append(d)
                joined[d] += 1
    return clusters


def test_hand_made_example() -> None:
    top = ["fever", "cough", "rash", "asthma"]  # most frequent first: asthma is the rarest
    docs = [
        ["fever", "cough", "rash", "asthma"],  # joins asthma, rash
        ["fever"],                             # joins fever
        ["cough", "fever", "pain"],            # joins cough, fever ("pain" is not in W)
        ["pain", "headache"],                  # joins nothing
        ["asthma", "fever"],                   # joins asthma, fever
    ]
    clusters = soft_clusters(docs, top, 2)
    assert clusters == [[1, 2, 4], [2], [0], [0, 4]]
    assert cluster_membership_counts(clusters, len(docs)).tolist() == [2, 1, 2, 0, 2]
    assert soft_clusters(docs, top, 1) == [[1], [2], [], [0, 4]]
    assert soft_clusters(docs, top, 10) == [[0, 1, 2, 4], [0, 2], [0], [0, 4]]


def test_rarest_keywords_take_precedence() -> None:
    L = 3
    top = [f"w{r}" for r in range(10)]
    doc = ["w1", "w3", "w4", "w7"]  # L + 1 keywords in W
    clusters = soft_clusters([doc], top, L)
    assert [r for r, members in enumerate(clusters) if members] == [3, 4, 7]


def test_matches_the_literal_algorithm_and_respects_l() -> None:
    rs = random.Random(3)
    words = [f"w{i}" for i in range(40)]
    docs = [rs.sample(words, rs.randint(0, 10)) for _ in range(300)]
    top = rs.sample(words, 25)
    for L in (1, 2, 5):
        clusters = soft_clusters(docs, top, L)
        assert clusters == literal_algorithm(docs, top, L)
        assert cluster_membership_counts(clusters, len(docs)).max() <= L
        assert all(members == sorted(set(members)) for members in clusters)


def test_membership_depends_only_on_the_document() -> None:
    rs = random.Random(8)
    words = [f"w{i}" for i in range(30)]
    docs = [rs.sample(words, 5) for _ in range(50)]
    top = words[:20]
    full = soft_clusters(docs, top, 2)
    without = soft_clusters(docs[:10] + docs[11:], top, 2)
    renumber = {d: d - (d > 10) for d in range(len(docs)) if d != 10}
    assert without == [[renumber[d] for d in members if d != 10] for members in full]


def test_refuses_bad_input() -> None:
    with pytest.raises(ValueError):
        soft_clusters([["a"]], ["a", "a"], 2)
    with pytest.raises(ValueError):
        soft_clusters([["a"]], ["a"], 0)
    with pytest.raises(TypeError):
        soft_clusters(["abc"], ["a"], 1)
    assert soft_clusters([], ["a"], 1) == [[]]
    assert soft_clusters([["a"]], [], 1) == []
    assert cluster_membership_counts([], 3).dtype == np.int64
