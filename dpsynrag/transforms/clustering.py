"""Soft clustering by public keywords (DP-SynRAG stage b, Algorithm 1 line 8).

W = (w_0, ..., w_{R-1}) are the top-R words of the released histogram, most frequent first
(public). For r from R-1 (the rarest) down to 0, cluster C_r takes every document whose
keywords contain w_r and that so far belongs to fewer than L clusters. So each document joins
exactly the L rarest words of W among its keywords (all of them if it has fewer), and its
membership depends only on its own keywords and the public W. That is what lets stage (c)/(d)
charge by overlapping parallel composition: one document touches at most L clusters.

No release happens here and nothing is charged; memberships are private intermediates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def soft_clusters(doc_keywords: Sequence[Sequence[str]], top_words: Sequence[str],
                  L: int) -> list[list[int]]:
    """Clusters indexed like ``top_words``: ``clusters[r]`` = sorted indices of its documents.

    Algorithm 1 line 8: r runs from the last (rarest) word to the first, and C_r = documents
    containing ``top_words[r]`` that belong to fewer than ``L`` clusters so far. Each document
    ends up in at most ``L`` clusters: those of its L rarest words in W.
    """
    if isinstance(L, bool) or not isinstance(L, int | np.integer) or L < 1:
        raise ValueError(f"L must be a positive integer, got {L!r}")
    rank = {word: r for r, word in enumerate(top_words)}
    if len(rank) != len(top_words):
        raise ValueError("top_words must be distinct")
    clusters: list[list[int]] = [[] for _ in top_words]
    for d, words in enumerate(doc_keywords):
        if isinstance(words, str):
            raise TypeError("each document's keywords must be a sequence of words, not a str")
        ranks = sorted({rank[w] for w in words if w in rank}, reverse=True)  # rarest first
        for r in ranks[: int(L)]:
            clusters[r].append(d)  # d ascends, so every cluster stays sorted
    return clusters


def cluster_membership_counts(clusters: Sequence[Sequence[int]], n_docs: int) -> np.ndarray:
    """For each of ``n_docs`` documents, the number of clusters it belongs to (int64)."""
    counts = np.zeros(int(n_docs), dtype=np.int64)
    for members in clusters:
        np.add.at(counts, np.asarray(members, dtype=np.int64), 1)
    return counts
