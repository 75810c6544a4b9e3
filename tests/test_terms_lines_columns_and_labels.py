"""``facts.terms`` rule 10: a line that starts with a capital letter starts a new term, a
column's first word after a tab reads like a sentence's, a field's label gives its value the
role of its first word, and reports of what someone was told."""

from __future__ import annotations

from dpsynrag.facts.terms import document_terms
from dpsynrag.io.text import normalise_text
from dpsynrag.transforms.vocabulary import public_vocabulary


def _terms(note: str, k: int = 10) -> dict[str, str]:
    found = document_terms([normalise_text(note)], public_vocabulary(), k)[0]
    return dict(zip(found.terms, found.roles, strict=True))


def _first(note: str) -> str:
    return document_terms([normalise_text(note)], public_vocabulary(), 1)[0].terms[0]


def test_a_line_starting_with_a_capital_starts_a_new_term() -> None:
    terms = _terms("Bracelet engraving request\nRow A: Tom Iles\nRow B: plantar fasciitis\n"
                   "Row C: heel cups")
    assert "plantar fasciitis" in terms
    assert not any(t.startswith("plantar fasciitis ") or t.startswith("heel cups ")
                   for t in terms)
    # a wrapped line goes on in lowercase: the term runs across the line break
    assert "urinary tract infection" in _terms("Seen today and diagnosed with urinary tract\n"
                                               "infection, started on nitrofurantoin.")


def test_columns_parted_by_several_spaces_are_separate_fields() -> None:
    terms = _terms("Member: Ruth Okafor   Member age: 61   Plan: silver\n"
                   "Diagnosis billed   gout")
    assert not any("okafor member" in t for t in terms)


def test_a_columns_first_word_after_a_tab_reads_like_a_sentences() -> None:
    # "Obs" starts a column: an ordinary word, not a name that outranks the answer
    assert _first("Case review\nItem 3\tObs stable; labs due\nItem 5\tAnswer: gout.\n"
                  "Item 6\tcolchicine") == "gout"


def test_a_field_label_gives_its_value_the_role_of_its_first_word() -> None:
    assert _terms("Diagnosis entered by billing clerk: plantar fasciitis\n")[
        "plantar fasciitis"] == "diagnosis"
    assert _terms("Symptoms noted by school nurse: itchy scalp\n")["itchy scalp"] == "symptom"
    # a label whose first word is no cue gives none
    assert _terms("Entered by billing clerk: plantar fasciitis\n")["plantar fasciitis"] == ""
    # nor does a cue inside a label longer than LABEL_REACH words
    assert _terms("Entered diagnosis late by the night clerk: plantar fasciitis\n")[
        "plantar fasciitis"] == ""


def test_compatible_with_is_a_diagnosis_cue() -> None:
    assert _terms("Imaging picture compatible with frozen shoulder; rest advised.")[
        "frozen shoulder"] == "diagnosis"


def test_what_someone_was_told_they_had_comes_first() -> None:
    assert _first("Statement of the Claimant, a retired Harbour Pilot.\nI was told that I "
                  "had kidney stones.") == "kidney stones"


def test_a_person_at_a_columns_start_stays_a_person() -> None:
    row = "Harbour Lights 2\tQuentin Bjork\tfantasy\t2\t2023-01-28\tBianca Castellanos"
    found = document_terms([normalise_text(row)], public_vocabulary(), 8)[0]
    assert found.terms[0] == "harbour lights 2"
    assert "bjork" not in found.terms and "castellanos" not in found.terms


def test_a_number_with_its_unit_is_no_term() -> None:
    terms = _terms("Screen time: Minecraft 3h 40m, Drawing Pad 1h 05m. Films: Harbour Lights 2")
    assert not {"3h", "40m", "05m", "1h"} & set(terms)
    # codes and names with digits stay terms
    assert "e-4471" in _terms("The app shows error E-4471 on start.")
    assert "covid-19" in _terms("Tested positive for covid-19 yesterday.")
