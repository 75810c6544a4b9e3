"""What a document is about when no cue announces it (``facts.terms`` rules 2 and 4-6):
people's names and headings rank last, drugs are treatments by their shape, unannounced lists
are descriptions, noun cues reach only what follows them."""

from __future__ import annotations

import pytest

from dpsynrag.facts.fact_writer import ClusterFacts, write_note
from dpsynrag.facts.terms import document_terms
from dpsynrag.io.person_names import given_names, surnames
from dpsynrag.transforms.vocabulary import public_vocabulary


def _terms(note: str, k: int = 8) -> dict[str, str]:
    found = document_terms([note], public_vocabulary(), k)[0]
    return dict(zip(found.terms, found.roles, strict=True))


def _first(note: str) -> str:
    return document_terms([note], public_vocabulary(), 1)[0].terms[0]


def test_the_public_name_lists_hold_common_names_and_no_ordinary_title_words() -> None:
    assert {"john", "maria", "oskar", "aiko"} <= given_names()
    assert {"smith", "garcia", "nowak"} <= surnames()
    assert not {"hollow", "quiet", "patient", "burning"} & given_names()


@pytest.mark.parametrize(("note", "subject"), [
    # a record without a single cue: the condition, not the patient, drug or symptoms
    ("2024-02-11 / Ana Lima / 52 / gout / swollen big toe, red hot joint and pain at night "
     "/ colchicine / Dr. Reyes", "gout"),
    # a heading before a date, a person's name, a drug: the condition is left
    ("Ward round notes, 4 March 2024. Marta Kowalski, 40, still on doxycycline for "
     "cellulitis.", "cellulitis"),
    # a film log: the director's and the viewer's names rank after the title
    ("Viewing log, 3 May 2024: Marta Kowalski on Copper Meadow 1971, a heist film by "
     "Stefan Nowak. Scenes: a broken clock, a night train and a lost violinist.",
     "copper meadow 1971"),
    # a title first in its record, its first word capitalised like a sentence's
    ("Quiet Harbour 1999 | drama | Stefan Nowak | 4 stars", "quiet harbour 1999"),
])
def test_with_no_cue_the_first_term_is_what_the_record_is_about(note: str,
                                                                subject: str) -> None:
    assert _first(note) == subject


def test_people_drugs_and_lists_get_no_naming_place() -> None:
    terms = _terms("2024-02-11 / Ana Lima / 52 / gout / swollen big toe, red hot joint and "
                   "pain at night / colchicine / Dr. Reyes")
    assert terms["colchicine"] == "treatment"  # by its shape (-chicine)
    assert terms["swollen big toe"] == terms["red hot joint"] == "symptom"  # a 3-item list
    assert list(terms)[-1] == "ana lima"  # a person's name ranks last


def test_a_drug_names_the_purpose_after_for_and_status_words_end_a_term() -> None:
    terms = _terms("Excluded: active psoriasis. Currently on amoxicillin from Dr. Lee for "
                   "sinusitis.")
    assert terms["amoxicillin"] == "treatment"
    assert terms["sinusitis"] == "diagnosis"
    assert "psoriasis" in terms and "active psoriasis" not in terms


def test_contractions_adverbs_and_verbs_after_a_subject_end_a_term() -> None:
    terms = _terms("Honestly, I think it's shingles and that fits the rash. I'll send "
                   "valaciclovir.")
    assert "shingles" in terms and "valaciclovir" in terms
    assert not any(t.startswith(("it's", "honestly", "fits", "send", "i'll"))
                   for t in terms)


def test_a_noun_cue_reaches_only_what_follows_it() -> None:
    terms = _terms("We saw a comedy film featuring a twin brother and then the film club "
                   "met. The film Copper Meadow was next.")
    assert terms.get("twin brother", "") != "title"
    assert terms.get("club", "") != "title"
    assert terms["copper meadow"] == "title"


def test_a_two_item_list_and_a_list_with_a_cue_keep_their_roles() -> None:
    terms = _terms("Presenting with fever, dry cough and body aches. Cough and cold.")
    assert terms["dry cough"] == terms["body aches"] == "symptom"
    two = _terms("Kim Park was seen. Paper Valley and Quiet Ribbon.")
    assert two.get("paper valley", "") == ""  # two names, no list of three


def test_a_description_reads_details_without_a_diagnosis_or_treatment() -> None:
    film = ClusterFacts(0, "copper meadow 1971", 30, ("night train", "broken clock"), (),
                        "Reported", (("copper meadow 1971", "title"),
                                     ("night train", "symptom"), ("broken clock", "symptom")))
    assert "Details: (1) night train, (2) broken clock." in write_note(film) \
        or "Details: (1) broken clock, (2) night train." in write_note(film)
    clinic = ClusterFacts(0, "gout", 30, ("colchicine", "red hot joint"), (), "Reported",
                          (("gout", "diagnosis"), ("colchicine", "treatment"),
                           ("red hot joint", "symptom")))
    assert "Symptoms: red hot joint." in write_note(clinic)
