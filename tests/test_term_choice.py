"""Each document's terms chosen again once the terms A (and their roles) are released."""

from __future__ import annotations

import pytest

from dpsynrag.facts.term_choice import first_terms, released_choice, released_choices
from dpsynrag.facts.terms import DocumentTerms, document_terms
from dpsynrag.transforms.vocabulary import public_vocabulary

CANDIDATES = DocumentTerms(
    ("fever", "dry cough", "jane doe", "discharge summary", "ear infection", "amoxicillin",
     "ear"),
    ("symptom", "symptom", "", "", "", "", "symptom"))
RELEASED = {"fever": 300, "dry cough": 120, "discharge summary": 900, "ear infection": 84,
            "amoxicillin": 90, "ear": 400}


def test_only_released_terms_are_chosen_at_most_k_e() -> None:
    chosen = released_choice(CANDIDATES, RELEASED, 4)
    assert len(chosen.terms) == 4 and set(chosen.terms) <= set(RELEASED)
    assert "jane doe" not in released_choice(CANDIDATES, RELEASED, 7).terms
    assert first_terms(CANDIDATES, 2).terms == ("fever", "dry cough")


def test_one_uncued_term_then_cued_terms_then_uncued_by_released_count() -> None:
    """Without a released naming role: the released term no cue announces of the smallest
    released count first (it may be what the record is about), then the cued terms, then
    the other uncued terms by released count, smallest first (a template's words, written in
    most documents, last)."""
    chosen = released_choice(CANDIDATES, RELEASED, 6)
    assert chosen.terms == ("ear infection", "fever", "dry cough", "ear", "amoxicillin",
                            "discharge summary")
    assert chosen.roles == ("", "symptom", "symptom", "symptom", "", "")
    assert released_choice(CANDIDATES, RELEASED, 2).terms == ("ear infection", "fever")
    assert "discharge summary" not in released_choice(CANDIDATES, RELEASED, 5).terms


def test_a_released_naming_role_puts_the_term_first() -> None:
    roles = {"ear infection": "diagnosis", "amoxicillin": "treatment", "fever": "symptom"}
    chosen = released_choice(CANDIDATES, RELEASED, 2, roles)
    assert chosen.terms == ("ear infection", "fever")
    assert chosen.roles == ("", "symptom")  # the document's own cue stays its role


def test_a_documents_choice_does_not_depend_on_other_documents() -> None:
    texts = ["Triage: fever and dry cough. Dr. Ann Lee agrees on influenza; oseltamivir given.",
             "Discharge summary: final diagnosis influenza, discharged on oseltamivir.",
             "Presenting with a sore throat and fever; strep throat, penicillin started."]
    candidates = document_terms(texts, public_vocabulary(), 48)
    released = {"influenza": 40, "oseltamivir": 41, "fever": 80, "dry cough": 30,
                "strep throat": 20, "penicillin": 22}
    together = released_choices(candidates, released, 3, {"influenza": "diagnosis"})
    for i, item in enumerate(candidates):
        assert released_choice(item, released, 3, {"influenza": "diagnosis"}) == together[i]
    assert together[0].terms[0] == "influenza"  # uncued in its own note, named by its role


def test_k_e_must_be_positive() -> None:
    with pytest.raises(ValueError, match="K_e"):
        released_choice(CANDIDATES, RELEASED, 0)
