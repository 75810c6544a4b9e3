"""Writing the notes is total: no released string makes it fail (issue 29, item 8).

A released phrase is any string the rule let through; its notes are written again from the
stored releases on every resume, so a phrase whose title case does not fold back to it (a
leading "ß" upper-cases to "SS", the ligature "ﬁ" to "FI") used to stop every build and every
resume for good. The tests pin the display of such words and check ``write_notes`` and
``note_views`` over every code point with an irregular case mapping.
"""

from __future__ import annotations

import sys

import pytest

from dpsynrag.facts.fact_writer import (
    ClusterFacts,
    display_phrase,
    missing_facts,
    note_views,
    write_note,
    write_notes,
)

# Words whose first letter changes length or does not fold back under case mapping.
AWKWARD = ["ßtraße", "straße", "ﬁbrosis", "ﬂu", "ﬀ", "ǆemal", "ǳ-x", "i̇stanbul", "İzmir",
           "ılık", "ŉ", "ΐon", "ς", "ſ", "err_ß_1", "ﬁ_code", "ა", "\u0301accent", "x\u00a0y",
           "", "  ", "of", "a-", "-b", "--", "'s", "e\u0301", "\ud800lone", "ǅ", "ᾳ", "ﬆ"]


def _irregular_code_points() -> list[str]:
    """Every code point whose upper, title, lower or folded form is not a one-to-one,
    round-tripping change, and every whitespace character."""
    found = []
    for i in range(sys.maxunicode + 1):
        c = chr(i)
        upper, title, lower, folded = c.upper(), c.title(), c.lower(), c.casefold()
        if (len(upper) != 1 or len(title) != 1 or title != upper or folded != lower
                or (upper != c and upper.lower() != c) or (lower != c and lower.upper() != c)
                or title.casefold() != folded or c.isspace()):
            found.append(c)
    return found


IRREGULAR = _irregular_code_points()


def test_the_irregular_set_holds_the_known_cases() -> None:
    assert len(IRREGULAR) > 300
    for c in "ßﬁﬂﬀǆǅıİŉΐςſ\u00a0":
        assert c in IRREGULAR


@pytest.mark.parametrize("phrase", AWKWARD)
def test_a_note_holds_an_awkward_phrase_and_writing_it_does_not_fail(phrase: str) -> None:
    facts = ClusterFacts(0, phrase, 5, ("kimasox",), ("fever",))
    [note] = write_notes([facts])
    assert note == write_note(facts)
    assert missing_facts(facts, note) == []


def test_title_case_that_does_not_fold_back_keeps_the_released_word() -> None:
    assert display_phrase("ßtraße") == "Sstraße"  # "ß".title() is "Ss": folds back
    assert display_phrase("ﬁbrosis") == "Fibrosis"  # the ligature's title case, not "FIbrosis"
    assert display_phrase("ǆemal") == "ǅemal"  # the title-case digraph, not the upper "Ǆ"
    assert display_phrase("ılık") == "ılık"  # "I" folds to "i", not "ı": kept as released
    assert display_phrase("err_ß_1") == "ERR_SS_1"
    assert display_phrase("familial feshukia") == "Familial Feshukia"  # ASCII unchanged
    # the check the note is held to is case folding, still on whole words
    facts = ClusterFacts(0, "ßtraße", 5, (), ("fever",))
    assert missing_facts(facts, "Reported: fever. SSTRASSE.") == []
    assert missing_facts(facts, "Reported: fever. Sstrassen.") == ["ßtraße"]


@pytest.mark.parametrize("roles", [False, True])
def test_every_irregular_code_point_in_every_position_is_written(roles: bool) -> None:
    """Property over every irregular code point c: as a whole name, at the start and end of
    words, after a hyphen, in an identifier, after a small word, and as a keyword. The notes
    are written without error, name every kept fact (under case folding), fold back to the
    released phrase, and every view names every name."""
    items = []
    for k, c in enumerate(IRREGULAR):
        phrases = (f"{c}x y{c}", f"a-{c}", f"{c}_9", f"of {c}{c}", f"{c} of {c}")
        anchor = c
        role_pairs = tuple((name, role) for name, role in zip(
            (anchor, *phrases), ("diagnosis", "treatment", "not-a-role", "symptom", "", ""),
            strict=True)) if roles else ()
        items.append(ClusterFacts(k, anchor, 5, phrases, (f"{c}k", c), "Reported", role_pairs))
    notes = write_notes([*items, None])
    assert len(notes) == len(items)
    for item, note in zip(items, notes, strict=True):
        assert missing_facts(item, note) == [], (item.anchor, note)
        for name in (item.anchor, *item.phrases):
            assert display_phrase(name).casefold() == " ".join(name.split()).casefold()
        for view in note_views(item, 3):
            assert missing_facts(ClusterFacts(0, item.anchor, 5, item.phrases, ()), view) == []
