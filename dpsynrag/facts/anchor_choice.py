"""Which of its released anchors a document joins first: the one nearest its own text.

The n-gram mode makes one cluster per released anchor (``facts.span_corpus``) and puts each
document in the clusters of the first ``L`` anchors it holds. Which anchors come first
decides what a cluster is about. "Rarest released count first" puts a note about gout in the
cluster of its doctor's name (two content words, rarer than "gout") and a news snippet about
a hurricane in the cluster of "said Friday"; such clusters mix topics and their notes read as
word lists.

``nearest_first`` orders a document's held anchors by the cosine similarity of the public
embedder's vector of the document's text to the vector of each anchor's text, most similar
first (ties: the anchor's text). The anchor a document is *about* is the one its text is
closest to, in any domain and language the embedder reads, with no word list.

Privacy. The order is a function of the document's own text, the released anchors (public:
the output of the n-gram partition selections, already charged) and a public model (the
embedder, whose weights' sha256 the certificate records). Adding or removing one document
changes neither the anchors nor any other document's vector, so it changes no other
document's clusters: the histograms' sensitivity argument (``facts.fact_clusters``, each
document in at most ``L`` clusters, at most ``max_items`` spans in each) is unchanged. The
similarities are private intermediates: never logged, stored or returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dpsynrag.facts.tokens import detokenize, ngram_tokens

__all__ = ["ANCHOR_RULES", "Embed", "nearest_first"]

#: ``nearest``: by similarity to the document (``nearest_first``); ``rarest``: by the
#: released count, anchors of two content tokens or more first (``span_corpus``).
ANCHOR_RULES = ("nearest", "rarest")

#: texts -> unit-norm float32 vectors (rows), the public embedder's ``encode``.
Embed = Callable[[list[str]], np.ndarray]

#: documents embedded at once: the vectors of one batch are all that is held
BATCH = 256


def nearest_first(texts: Sequence[str], items: Sequence[Sequence[str]],
                  anchors: Mapping[str, int], embed: Embed) -> list[list[str]]:
    """Each document's items with its held anchors first, nearest its text first (cosine
    similarity of unit vectors; ties by the anchor's text), then its other items in their
    order. ``anchors`` are the released anchors (their counts are not read)."""
    if len(texts) != len(items):
        raise ValueError("one item list per document is needed")
    names = sorted(anchors)
    index = {name: i for i, name in enumerate(names)}
    vectors = embed([detokenize(ngram_tokens(name)) for name in names]) if names else None
    ordered: list[list[str]] = []
    for start in range(0, len(texts), BATCH):
        stop = min(start + BATCH, len(texts))
        held = [[a for a in dict.fromkeys(items[d]) if a in index] for d in range(start, stop)]
        if vectors is None or not any(held):
            ordered.extend(list(items[d]) for d in range(start, stop))
            continue
        documents = embed([texts[d] for d in range(start, stop)])
        for offset, own in enumerate(held):
            d = start + offset
            if not own:
                ordered.append(list(items[d]))
                continue
            rows = np.asarray([index[a] for a in own], dtype=np.int64)
            similarity = vectors[rows] @ documents[offset]
            first = [own[i] for i in sorted(range(len(own)),
                                            key=lambda i: (-float(similarity[i]), own[i]))]
            chosen = set(first)
            ordered.append(first + [x for x in items[d] if x not in chosen])
    return ordered
