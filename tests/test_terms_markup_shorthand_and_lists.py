"""``facts.terms``: markup read as fields, clinical shorthand, words of hesitation and
elapsed time, what a clinician named did, a list's first item after its lead-in, and one
capitalised name word alone as a person."""

from __future__ import annotations

import pytest

from dpsynrag.facts.terms import _unmarked, document_terms
from dpsynrag.transforms.vocabulary import public_vocabulary


def _terms(note: str, k: int = 8) -> dict[str, str]:
    found = document_terms([note], public_vocabulary(), k)[0]
    return dict(zip(found.terms, found.roles, strict=True))


def _first(note: str) -> str:
    return document_terms([note], public_vocabulary(), 1)[0].terms[0]


def test_markup_tags_read_as_field_labels_and_their_attributes_are_dropped() -> None:
    assert _unmarked('<visit on="2024-03-02"><dx>gout</dx><br/></visit>') == \
        ". visit: . dx: gout. . . "
    # a chat nickname in angle brackets is no tag: it has no attribute values
    assert _unmarked("<Ana Lima> home now") == "<Ana Lima> home now"
    terms = _terms('<record id="7"><pt>Ana Lima</pt><sx>painful swollen big toe</sx>'
                   '<imp>gout</imp><rx>colchicine</rx></record>')
    assert terms["gout"] == "diagnosis"
    assert terms["colchicine"] == "treatment"
    assert not any("record" in t or t == "imp" for t in terms)


@pytest.mark.parametrize(("label", "role"), [("Imp", "diagnosis"), ("DDx", "diagnosis"),
                                             ("HPI", "symptom"), ("Rx", "treatment"),
                                             ("Tx", "treatment")])
def test_clinical_abbreviations_are_labels_with_roles(label: str, role: str) -> None:
    assert _terms(f"Seen today. {label}: plantar fasciitis.")["plantar fasciitis"] == role


def test_shorthand_for_no_finding_is_never_a_term() -> None:
    terms = _terms("PMHx: nil sig. DHx: NKDA. O/E: NAD. Imp: hay fever. Plan: cetirizine PRN.")
    assert terms["hay fever"] == "diagnosis"
    assert not {"nkda", "nad", "prn", "pmhx", "dhx", "nil sig"} & set(terms)


@pytest.mark.parametrize("note", [
    "Dr. Chen diagnosed pneumonia last week after a cough.",
    "It was um pneumonia, the doctor said.",
    "Dr. Chen diagnosed pneumonia, at long last.",
])
def test_hesitation_and_elapsed_time_end_a_term(note: str) -> None:
    terms = _terms(note)
    assert "pneumonia" in terms
    assert not any(t != "pneumonia" and "pneumonia" in t for t in terms)
    assert not any("last" in t or t in ("um", "long") for t in terms)


def test_a_capitalised_last_still_starts_a_title() -> None:
    assert "last harbour" in _terms("We watched Last Harbour on Friday.")


@pytest.mark.parametrize("note", [
    "Over a few weeks: a dull ache in the heel. After a chat with the practice nurse, "
    "Dr. Ines Moreau put it down to plantar fasciitis.",
    "Back from the clinic. Dr Ines Moreau is going with plantar fasciitis for all the "
    "heel pain, stiffness in the morning and tenderness under the heel.",
    "The doctor, doctor Ines Moreau, rang back and it's plantar fasciitis, so heel "
    "stretches it is.",
])
def test_what_a_clinician_named_did_is_what_the_record_is_about(note: str) -> None:
    assert _first(note) == "plantar fasciitis"


def test_a_term_right_after_a_clinicians_name_is_not_their_act() -> None:
    # "Dr. Moreau - Ana Lima": the patient's name, not what the doctor did
    note = "Booked with Dr. Ines Moreau - Carlota, 44. Outcome: heel spur surgery advised."
    assert _first(note) != "carlota"


def test_a_doctor_giving_something_gives_a_treatment() -> None:
    terms = _terms("2024-02-01: plantar fasciitis in a runner; Dr. Ines Moreau gave heel "
                   "stretches.")
    assert terms["heel stretches"] == "treatment"
    assert _first("2024-02-01: plantar fasciitis in a runner; Dr. Ines Moreau gave heel "
                  "stretches.") == "plantar fasciitis"


def test_a_lists_first_item_starts_after_its_lead_in() -> None:
    terms = _terms("Dr Ines Moreau is going with plantar fasciitis for all the heel pain, "
                   "stiffness in the morning and tenderness under the heel.", k=12)
    assert terms["plantar fasciitis"] == ""  # not an item of the list of symptoms
    assert terms["tenderness under the heel"] == "symptom"
    # "with" inside an item does not cut it: "about thick red plaques with silvery scales"
    terms = _terms("You told me about thick red plaques with silvery scales, pitted nails "
                   "and itchy flaking scalp. I think this is psoriasis.", k=12)
    assert terms["thick red plaques"] == "symptom"


def test_a_semicolon_ends_a_cues_reach_over_a_list() -> None:
    # "saw" names a film, but not across the semicolon: the list after it has no role
    terms = _terms("Saw Dr. Ines Moreau at last; the heel pain, stiffness in the morning and "
                   "tenderness under the heel finally have a name, plantar fasciitis.", k=12)
    assert terms["heel pain"] == terms["stiffness in the morning"] == "symptom"
    assert "title" not in terms.values()


@pytest.mark.parametrize(("note", "person"), [
    ("Things to ask Mum about on Sunday: her hay fever.", "mum"),
    ("Review by Bruno A. Quispe (2023-09-07): Copper Meadow is a comedy.", "quispe"),
])
def test_one_name_word_alone_ranks_as_a_person(note: str, person: str) -> None:
    found = document_terms([note], public_vocabulary(), 8)[0].terms
    assert person in found
    assert found[0] != person


def test_a_day_number_before_a_month_is_the_dates_not_the_titles() -> None:
    terms = _terms("wtchd Crimson Roads 5 September 2023; 4/5")
    assert "crimson roads" in terms and "crimson roads 5" not in terms
    assert "blue horizon 2" in _terms("We watched Blue Horizon 2 at home.")
    # a day has one or two digits: a year before the month stays the title's
    assert "hollow forest 1964" in _terms("wtchd Hollow Forest 1964 January 31, 2023; 2/5")


def test_a_shorthand_label_does_not_start_a_term() -> None:
    terms = _terms("dir Quentin Bjork; gnr crime drama; abt: a rival chef and a ghost ship")
    assert "crime drama" in terms and not any(t.startswith("gnr") for t in terms)


def test_lowercase_words_are_no_title() -> None:
    terms = _terms("He just picked from the recommendations. I only caught its name at the "
                   "end: Blue Whistle 1980.")
    assert terms.get("recommendations", "") != "title"
    assert _first("He just picked from the recommendations. I only caught its name at the "
                  "end: Blue Whistle 1980.") == "blue whistle 1980"


def test_a_channel_name_heads_the_record_and_is_not_what_it_is_about() -> None:
    note = ("* Ana Lima has joined #filmnight\n<Ana Lima> sat through Lonely Ribbon today\n"
            "<Ana Lima> a romance with a chess tournament, a haunted hotel and a magician")
    assert _first(note) == "lonely ribbon"


def test_a_year_before_yesterday_stays_the_titles() -> None:
    assert "blue whistle 1980" in _terms("sat through Blue Whistle 1980 yesterday (31 July)")
