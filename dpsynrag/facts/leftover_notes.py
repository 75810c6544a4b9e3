"""Notes of the released anchors that no cluster's note holds (post-processing, free).

A cluster's note (``facts.span_notes``) lists the spans its histogram released at or above
3 sigma_C; a released anchor whose cluster falls below that bar, or whose words no note
writes, is then in no note at all, although the n-gram release published it. These notes
give each such anchor a place: the anchors of two content tokens or more (a lone word is
no fact) that no note's spans contain, taken in the public order of their released count
(highest first, ties by the anchor), grouped ``PER_NOTE`` at a time by the public
embedder: the first anchor not yet placed leads, the ``PER_NOTE - 1`` unplaced anchors
nearest it (inner product of the embedder's unit vectors; ties in the public order)
follow it. The note is written as the cluster notes are (``spans.note_text``).

Privacy: every input is a released value (the level releases' anchors and counts), the
cluster notes (themselves post-processing of released values) or the public embedder; no
document is read. By post-processing, the notes cost nothing and the guarantee is the
build's. The n-grams of a note are released n-grams joined by the notes' separator, so a
leftover note holds no n-gram that the release did not publish (the separator ends a span).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from dpsynrag.facts.anchor_choice import Embed
from dpsynrag.facts.span_notes import SpanNote
from dpsynrag.facts.spans import is_content, note_text
from dpsynrag.facts.tokens import detokenize, ngram_tokens

__all__ = ["LEFTOVER_CLUSTER", "PER_NOTE", "leftover_anchors", "leftover_notes"]

#: anchors a leftover note lists (the cluster cap K_e + K_s of the default plan)
PER_NOTE = 16
#: the ``SpanNote.cluster`` of a leftover note: it comes from no one cluster's histogram
LEFTOVER_CLUSTER = -1
#: the content tokens an anchor needs to be placed (a lone word is no fact)
MIN_CONTENT = 2


def leftover_anchors(notes: Sequence[SpanNote], anchor_counts: Mapping[str, int],
                     stop: Collection[str]) -> list[str]:
    """The anchors of at least ``MIN_CONTENT`` content tokens that no note's spans contain
    (as whole tokens), highest released count first, ties by the anchor."""
    ordered = sorted(anchor_counts, key=lambda anchor: (-anchor_counts[anchor], anchor))
    placeable = [anchor for anchor in ordered
                 if sum(is_content(t, stop) for t in ngram_tokens(anchor)) >= MIN_CONTENT]
    # every run of a placeable anchor's length inside a span: a set lookup per anchor, not
    # a search of all the notes' text (anchors and notes both grow with the collection)
    lengths = {len(ngram_tokens(anchor)) for anchor in placeable}
    covered = {" ".join(span[i:i + n]) for note in notes for span in note.spans
               for n in lengths for i in range(len(span) - n + 1)}
    return [anchor for anchor in placeable if anchor not in covered]


def leftover_notes(notes: Sequence[SpanNote], anchor_counts: Mapping[str, int],
                   embed: Embed, stop: Collection[str],
                   per_note: int = PER_NOTE) -> list[SpanNote]:
    """The leftover notes (module docstring), in the order their leading anchors come."""
    if isinstance(per_note, bool) or not isinstance(per_note, int) or per_note < 1:
        raise ValueError("per_note must be a positive integer")
    left = leftover_anchors(notes, anchor_counts, stop)
    if not left:
        return []
    tokens = [ngram_tokens(anchor) for anchor in left]
    vectors = np.asarray(embed([detokenize(t) for t in tokens]), dtype=np.float32)
    if vectors.shape[0] != len(left):
        raise ValueError("the embedder returned another number of vectors than anchors")
    remaining = np.arange(len(left))
    out: list[SpanNote] = []
    while remaining.size:
        lead = int(remaining[0])
        similarity = vectors[remaining] @ vectors[lead]
        similarity[0] = np.inf  # the lead comes first
        picked = np.argsort(-similarity, kind="stable")[:per_note]  # ties: public order
        group = remaining[picked]
        spans = tuple(tokens[int(i)] for i in group)
        out.append(SpanNote(LEFTOVER_CLUSTER, left[lead], spans, note_text(spans)))
        keep = np.ones(remaining.size, dtype=bool)
        keep[picked] = False
        remaining = remaining[keep]
    return out
