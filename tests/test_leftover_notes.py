"""The notes of released anchors that no cluster's note holds (``facts.leftover_notes``):
which anchors are placed, how they are grouped, and that they depend on released values
and the public embedder only (a document that changes no release changes none of them)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dpsynrag.facts.leftover_notes import (
    LEFTOVER_CLUSTER,
    leftover_notes,
    leftover_spans,
)
from dpsynrag.facts.ngrams import level_keys
from dpsynrag.facts.span_corpus import SpanSettings, span_corpus
from dpsynrag.facts.span_notes import SpanNote
from dpsynrag.facts.span_releases import ExactReleases
from dpsynrag.facts.spans import note_text
from dpsynrag.facts.tokens import ngram_tokens

STOP = frozenset({"the", "of", "with", "has", "in", "a", "."})


def _note(*spans: str) -> SpanNote:
    tokens = tuple(tuple(s.split()) for s in spans)
    return SpanNote(0, spans[0], tokens, note_text(tokens))


def topic_embed(texts: list[str]) -> np.ndarray:
    """A public stand-in: 'heart' texts along one axis, 'skin' texts along another, the
    rest along a third, a small text-keyed tilt so that no two vectors are equal."""
    rows = []
    for text in texts:
        axis = 0 if "heart" in text else 1 if "skin" in text else 2
        tilt = int.from_bytes(hashlib.sha256(text.encode()).digest()[:2], "big") / 2**20
        row = np.zeros(4, dtype=np.float32)
        row[axis], row[3] = 1.0, tilt
        rows.append(row / np.linalg.norm(row))
    return np.asarray(rows, dtype=np.float32)


def test_only_uncovered_anchors_of_two_content_words_are_placed_by_released_count() -> None:
    notes = [_note("chest pain at rest", "shortness of breath")]
    counts = {"chest pain": 90, "heart failure": 40, "skin rash": 70, "gout": 99,
              "of breath": 50, "pain at": 60, "heart": 80}
    # covered: "chest pain" and "pain at" (whole tokens inside a span); "of breath" has one
    # content word; "gout" and "heart" are single words
    assert leftover_spans(notes, counts, STOP) == [("skin", "rash"), ("heart", "failure")]
    # a span holding the words without their token boundary does not cover an anchor
    assert leftover_spans([_note("heart failures")], {"heart failure": 5}, STOP) == [
        ("heart", "failure")]


def test_anchors_are_written_trimmed_closed_and_once_without_those_others_hold() -> None:
    stop = STOP | {"(", ")", ","}
    released = {1: {"Toy", "Story", "(", "1995", ")", ","},
                2: {"Toy Story", "Story (", "( 1995", "1995 )", ") ,", ", Toy"},
                3: {"Toy Story (", "Story ( 1995", "( 1995 )"}}
    counts = {") , Toy Story ( 1995": 30,  # loose ends cut, the bracket closed
              "Toy Story ( 1995": 20,  # written as the first: once
              "heart failure": 25,  # inside a longer one written: dropped
              "acute heart failure": 5,
              "skin rash with": 10,  # the trailing stopword cut
              "rash with": 9}  # one content token once trimmed: not placed
    assert leftover_spans([], counts, stop, released) == [
        ("Toy", "Story", "(", "1995", ")"), ("skin", "rash"), ("acute", "heart", "failure")]
    notes = leftover_notes([], counts, topic_embed, stop, released=released)
    assert notes[0].anchor == ") , Toy Story ( 1995"  # the released anchor, as the keyword
    assert notes[0].text.startswith("Toy Story (1995)")
    # without the level releases a bracket stays open
    assert leftover_spans([], counts, stop)[0] == ("Toy", "Story", "(", "1995")


def test_the_grouping_runs_inside_blocks_of_the_public_order() -> None:
    counts = {"heart sign x": 9, "skin sign x": 8, "heart sign b": 7, "skin sign b": 6}
    whole = leftover_notes([], counts, topic_embed, STOP, per_note=2)
    assert [[" ".join(s) for s in n.spans] for n in whole] == [
        ["heart sign x", "heart sign b"], ["skin sign x", "skin sign b"]]
    blocks = leftover_notes([], counts, topic_embed, STOP, per_note=2, block=2)
    assert [[" ".join(s) for s in n.spans] for n in blocks] == [
        ["heart sign x", "skin sign x"], ["heart sign b", "skin sign b"]]
    with pytest.raises(ValueError, match="block"):
        leftover_notes([], counts, topic_embed, STOP, block=0)


def test_anchors_are_grouped_by_the_embedder_each_once_the_lead_first() -> None:
    counts = {f"heart sign {i}": 100 - i for i in range(6)}
    counts.update({f"skin sign {i}": 50 - i for i in range(3)})
    notes = leftover_notes([], counts, topic_embed, STOP, per_note=3)
    placed = [" ".join(span) for note in notes for span in note.spans]
    assert sorted(placed) == sorted(counts)  # every anchor once
    assert all(len(note.spans) <= 3 for note in notes)
    assert notes[0].anchor == "heart sign 0"  # the highest released count leads
    for note in notes:
        assert " ".join(note.spans[0]) == note.anchor
        assert note.cluster == LEFTOVER_CLUSTER
        assert note.text == note_text(note.spans)
        topics = {"heart" in " ".join(span) for span in note.spans}
        assert len(topics) == 1, "a note mixes the two topics although each has room"
    assert len(notes) == 3 and notes[2].anchor == "skin sign 0"
    leads = [counts[note.anchor] for note in notes]
    assert leads == sorted(leads, reverse=True)  # each lead: the first anchor left


def test_the_notes_are_the_same_for_the_same_released_values() -> None:
    counts = {"heart failure": 9, "skin rash": 8, "heart murmur": 7}
    first = leftover_notes([], counts, topic_embed, STOP)
    again = leftover_notes([], dict(reversed(counts.items())), topic_embed, STOP)
    assert first == again  # the order of the mapping is not an input
    assert leftover_notes([], {}, topic_embed, STOP) == []
    with pytest.raises(ValueError, match="per_note"):
        leftover_notes([], counts, topic_embed, STOP, per_note=0)
    with pytest.raises(ValueError, match="number of vectors"):
        leftover_notes([], counts, lambda texts: np.zeros((1, 4), np.float32), STOP)


def test_a_document_that_changes_no_release_changes_no_leftover_note() -> None:
    """Neighbouring inputs: one added document whose every n-gram is its own (released
    nowhere) changes no released value, so neither the cluster notes nor the leftover
    notes change: they read released values and the public embedder, not documents."""
    base = ([f"Patient {i} has heart failure with skin rash ." for i in range(8)]
            + [f"Patient {i} has heart murmur in the chest ." for i in range(8)])
    extra = [*base, "Zyxw qvop unmatched wording nobody else wrote"]
    settings = SpanSettings((1, 2), (32, 32), cluster_cap=1, L=1)  # notes: the anchor only

    def corpus(texts: list[str]) -> list[SpanNote]:
        releases = ExactReleases(dict.fromkeys(level_keys((1, 2)), 6))
        return span_corpus(texts, settings, releases,
                           stop=STOP, embed=topic_embed).notes

    with_embed, neighbour = corpus(base), corpus(extra)
    assert with_embed == neighbour
    leftovers = [n for n in with_embed if n.cluster == LEFTOVER_CLUSTER]
    cluster_notes = [n for n in with_embed if n.cluster != LEFTOVER_CLUSTER]
    assert [n.text for n in leftovers] == ["skin rash"]  # released, in no cluster's note
    releases = ExactReleases(dict.fromkeys(level_keys((1, 2)), 6))
    plain = span_corpus(base, settings, releases, stop=STOP).notes
    assert plain == cluster_notes  # without the embedder: the cluster notes only
    for note in leftovers:  # every leftover span is a released anchor no cluster note holds
        for span in note.spans:
            assert all(" ".join(span) not in " ".join(" ".join(s) for s in n.spans)
                       for n in cluster_notes)
            assert len(ngram_tokens(" ".join(span))) >= 2
