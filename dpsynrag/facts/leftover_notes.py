"""Notes of the released anchors that no cluster's note holds (post-processing, free).

A cluster's note (``facts.span_notes``) lists the spans its histogram released at or above
3 sigma_C; a released anchor whose cluster falls below that bar, or whose words no note
writes, is then in no note at all, although the n-gram release published it. These notes
give each such anchor a place. Each anchor is written as the cluster notes write a span:
without its loose ends (``spans.trim_span``: "), Titanic (1997" loses "), ") and closed
where a released n-gram closes its bracket (``spans.close_bracket``). The written anchors of
two content tokens or more (a lone word is no fact) that no note's spans contain, and that
no other such anchor contains (the longer one writes them), are taken in the public order
of their released count (highest first, ties by the anchor) and grouped ``PER_NOTE`` at a
time by the public embedder: the first anchor not yet placed leads, the ``PER_NOTE - 1``
unplaced anchors nearest it (inner product of the embedder's unit vectors; ties in the
public order) follow it. The grouping runs inside consecutive blocks of ``BLOCK`` anchors
of that order, so its cost grows linearly with the anchors (one block's similarities at a
time) rather than with their square. The note is written as the cluster notes are
(``spans.note_text``); its anchor (the corpus's ``cluster_keyword``) is the released anchor
its lead was written from.

Privacy: every input is a released value (the level releases' anchors, n-grams and counts),
the cluster notes (themselves post-processing of released values) or the public embedder;
no document is read. By post-processing, the notes cost nothing and the guarantee is the
build's. A written anchor is a run of a released n-gram (each of its windows of a
released length is released, as the levels release an n-gram only where its shorter
windows were) or a released n-gram's bracket closed where ``close_bracket`` finds every
new window released; the n-grams of a
note are these joined by the notes' separator, which ends a span, so a leftover note holds
no n-gram that the release did not publish.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from dpsynrag.facts.anchor_choice import Embed
from dpsynrag.facts.span_notes import SpanNote
from dpsynrag.facts.spans import close_bracket, is_content, note_text, trim_span
from dpsynrag.facts.tokens import detokenize, ngram_tokens

__all__ = ["BLOCK", "LEFTOVER_CLUSTER", "PER_NOTE", "leftover_notes", "leftover_spans"]

#: anchors a leftover note lists (the cluster cap K_e + K_s of the default plan)
PER_NOTE = 16
#: the ``SpanNote.cluster`` of a leftover note: it comes from no one cluster's histogram
LEFTOVER_CLUSTER = -1
#: the content tokens an anchor needs to be placed (a lone word is no fact)
MIN_CONTENT = 2
#: the anchors, consecutive in the public order, among which a note's anchors are chosen
BLOCK = 2048


def _written(anchor: str, stop: Collection[str],
             released: Mapping[int, Collection[str]] | None) -> tuple[str, ...]:
    """An anchor as a note writes it: trimmed, its bracket closed where released n-grams
    close it."""
    trimmed = trim_span(ngram_tokens(anchor), stop)
    return close_bracket(trimmed, released) if trimmed and released else trimmed


def _leftover(notes: Sequence[SpanNote], anchor_counts: Mapping[str, int],
              stop: Collection[str], released: Mapping[int, Collection[str]] | None
              ) -> dict[tuple[str, ...], str]:
    """``leftover_spans``, each written anchor with the released anchor it was written from
    (the first in the public order)."""
    ordered = sorted(anchor_counts, key=lambda anchor: (-anchor_counts[anchor], anchor))
    written: dict[tuple[str, ...], str] = {}
    for anchor in ordered:
        tokens = _written(anchor, stop, released)
        if sum(is_content(t, stop) for t in tokens) >= MIN_CONTENT:
            written.setdefault(tokens, anchor)
    # every run of a written anchor's length inside a span, or strictly inside another
    # written anchor: a set lookup per anchor, not a search of all the notes' text
    lengths = {len(span) for span in written}
    covered = {span[i:i + n] for note in notes for span in note.spans
               for n in lengths for i in range(len(span) - n + 1)}
    covered.update(span[i:i + n] for span in written for n in lengths if n < len(span)
                   for i in range(len(span) - n + 1))
    return {span: anchor for span, anchor in written.items() if span not in covered}


def leftover_spans(notes: Sequence[SpanNote], anchor_counts: Mapping[str, int],
                   stop: Collection[str],
                   released: Mapping[int, Collection[str]] | None = None
                   ) -> list[tuple[str, ...]]:
    """The written anchors (module docstring) of at least ``MIN_CONTENT`` content tokens that
    no note's spans and no other written anchor contain (as whole tokens), highest released
    count first, ties by the anchor; each once. ``released``: the level releases (length ->
    released n-gram keys) that close brackets; without them, brackets stay open."""
    return list(_leftover(notes, anchor_counts, stop, released))


def _groups(vectors: np.ndarray, per_note: int) -> list[list[int]]:
    """The greedy grouping (module docstring) of one block's unit vectors: positions."""
    similarity = vectors @ vectors.T
    placed = np.zeros(len(vectors), dtype=bool)
    groups: list[list[int]] = []
    for lead in range(len(vectors)):
        if placed[lead]:
            continue
        row = np.where(placed, -np.inf, similarity[lead])
        row[lead] = np.inf  # the lead comes first
        free = int((~placed).sum())
        picked = np.argsort(-row, kind="stable")[:min(per_note, free)]  # ties: public order
        placed[picked] = True
        groups.append([int(i) for i in picked])
    return groups


def leftover_notes(notes: Sequence[SpanNote], anchor_counts: Mapping[str, int],
                   embed: Embed, stop: Collection[str], per_note: int = PER_NOTE, *,
                   released: Mapping[int, Collection[str]] | None = None,
                   block: int = BLOCK) -> list[SpanNote]:
    """The leftover notes (module docstring), in the order their leading anchors come."""
    for name, value in (("per_note", per_note), ("block", block)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer")
    sources = _leftover(notes, anchor_counts, stop, released)
    left = list(sources)
    if not left:
        return []
    vectors = np.asarray(embed([detokenize(t) for t in left]), dtype=np.float32)
    if vectors.shape[0] != len(left):
        raise ValueError("the embedder returned another number of vectors than anchors")
    out: list[SpanNote] = []
    for start in range(0, len(left), block):
        for group in _groups(vectors[start:start + block], per_note):
            spans = tuple(left[start + i] for i in group)
            # the note's keyword: the released anchor its lead was written from
            out.append(SpanNote(LEFTOVER_CLUSTER, sources[spans[0]], spans, note_text(spans)))
    return out
