"""Each document's terms chosen again once the terms A (and their roles) are released."""

from __future__ import annotations

import pytest

from dpsynrag.facts.term_choice import first_terms, released_choice, released_choices
from dpsynrag.facts.terms import DocumentTerms, document_terms
from dpsynrag.transforms.vocabulary import public_vocabulary

# in the public order of ``facts.terms`` (rule 5): cued symptoms, the unannounced terms, a
# person's name, a heading last
CANDIDATES = DocumentTerms(
    ("fever", "dry cough", "ear infection", "jane doe", "amoxicillin", "ear",
     "discharge summary"),
    ("symptom", "symptom", "", "", "", "symptom", ""))
RELEASED = {"fever": 300, "dry cough": 120, "discharge summary": 900, "ear infection": 84,
            "amoxicillin": 90, "ear": 400}


def test_only_released_terms_are_chosen_at_most_k_e() -> None:
    chosen = released_choice(CANDIDATES, RELEASED, 4)
    assert len(chosen.terms) == 4 and set(chosen.terms) <= set(RELEASED)
    assert "jane doe" not in released_choice(CANDIDATES, RELEASED, 7).terms
    assert first_terms(CANDIDATES, 2).terms == ("fever", "dry cough")


def test_one_uncued_term_then_cued_terms_then_uncued_by_released_count() -> None:
    """Without a released naming role: the document's own first released term no cue
    announces first (it may be what the record is about), then the cued terms, then the
    other uncued terms by released count, smallest first (a template's words, written in
    most documents, last)."""
    chosen = released_choice(CANDIDATES, RELEASED, 6)
    assert chosen.terms == ("ear infection", "fever", "dry cough", "ear", "amoxicillin",
                            "discharge summary")
    assert chosen.roles == ("", "symptom", "symptom", "symptom", "", "")
    assert released_choice(CANDIDATES, RELEASED, 2).terms == ("ear infection", "fever")
    assert "discharge summary" not in released_choice(CANDIDATES, RELEASED, 5).terms


def test_the_documents_own_first_uncued_term_takes_the_place_not_the_rarest() -> None:
    """A released count counts the documents that offered a term among their first K_e: a
    director's name or a genre most notes rank late has a small count however often it is
    written, a popular title a large one. The title the document ranks first keeps the place
    (facts rules 12)."""
    candidates = DocumentTerms(("twelve winters", "dance competition", "long-lost sister",
                                "thriller", "samir jensen"), ("", "symptom", "symptom", "", ""))
    released = {"twelve winters": 132, "dance competition": 178, "long-lost sister": 149,
                "thriller": 49, "samir jensen": 19}
    chosen = released_choice(candidates, released, 4)
    assert chosen.terms == ("twelve winters", "dance competition", "long-lost sister",
                            "samir jensen")
    assert released_choice(candidates, released, 1).terms == ("twelve winters",)


def test_a_released_prefix_of_a_longer_released_term_is_not_chosen() -> None:
    """ "hollow forest" (released from the notes where the title's year was cut) beside
    "hollow forest 1964" in one note: the longer term holds it. A prefix with a cue of its
    own ("ear", a symptom, beside "ear infection") stays."""
    candidates = DocumentTerms(("hollow forest 1964", "time traveller", "hollow forest"),
                               ("title", "symptom", "title"))
    released = {"hollow forest 1964": 397, "time traveller": 709, "hollow forest": 22}
    assert released_choice(candidates, released, 3).terms == ("hollow forest 1964",
                                                              "time traveller")
    uncued_prefix = DocumentTerms(("hollow forest 1964", "hollow forest"), ("title", ""))
    assert released_choice(uncued_prefix, released, 2).terms == ("hollow forest 1964",)
    assert "ear" in released_choice(CANDIDATES, RELEASED, 6).terms
    assert released_choice(DocumentTerms(("hollow forest",), ("",)), released, 2).terms == (
        "hollow forest",)  # alone, the prefix is the document's term


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


def test_a_lowercase_article_before_a_name_also_offers_the_name_alone() -> None:
    """Rule 8 of ``facts.terms`` (facts rules 12): "after the Autumn Lantern 2 showing"
    offers "autumn lantern 2" too, after the document's other terms, so a note that writes
    "the" before a title the other notes release without it still holds the title."""
    vocab = public_vocabulary()
    lost, named, plain = document_terms(
        ["Lost property: a black umbrella left after the Autumn Lantern 2 showing.",
         "We finally watched The Endless Highway.", "Autumn Lantern 2 was fine."], vocab, 48)
    assert lost.terms[0] == "the autumn lantern 2"
    assert "autumn lantern 2" in lost.terms[1:]
    assert "endless highway" not in named.terms  # a capitalised "The" is the title's
    chosen = released_choice(lost, {"autumn lantern 2": 50, "black umbrella left": 90}, 1)
    assert chosen.terms == ("autumn lantern 2",)
    assert plain.terms[0] == "autumn lantern 2"


def test_a_released_naming_role_the_documents_own_cue_contradicts_anchors_no_cluster() -> None:
    from dpsynrag.facts.term_choice import anchor_terms

    roles = {"pneumonia": "diagnosis", "rapid breathing": "error"}  # the second one false
    choice = DocumentTerms(("pneumonia", "rapid breathing", "clarithromycin"),
                           ("diagnosis", "symptom", "treatment"))
    assert anchor_terms(choice, roles) == ["pneumonia", "clarithromycin"]
    # with no term whose own cue agrees with its released naming role, nothing is dropped:
    # "suffers from hay fever" (a symptom cue) still anchors on hay fever
    alone = DocumentTerms(("hay fever", "cetirizine"), ("symptom", "treatment"))
    assert anchor_terms(alone, {"hay fever": "diagnosis"}) == ["hay fever", "cetirizine"]
    # an uncued term keeps its released role
    uncued = DocumentTerms(("pneumonia", "rapid breathing"), ("diagnosis", ""))
    assert anchor_terms(uncued, roles) == ["pneumonia", "rapid breathing"]
