"""``facts.terms`` rule 5: in a document where no term has a naming role, the two best terms
no cue announces take the places after the naming roles, in that order, so a template's fixed
words that come first do not push what the record is about out of its first ``K_e`` terms."""

from __future__ import annotations

from dpsynrag.facts.terms import UNANNOUNCED_PLACES, document_terms
from dpsynrag.io.text import normalise_text
from dpsynrag.transforms.vocabulary import public_vocabulary


def _first(note: str, k: int = 4) -> tuple[tuple[str, ...], tuple[str, ...]]:
    found = document_terms([normalise_text(note)], public_vocabulary(), k)[0]
    return found.terms, found.roles


CARD_STATEMENT = ("Merchant: QWIXFLOR*STREAM\nItem on statement: Quiet Harbour 2\n"
                  "Hard scenes: a runaway bride, a stolen violin and a ghost ship.")


def test_a_title_after_a_merchants_name_stays_among_the_first_terms() -> None:
    terms, roles = _first(CARD_STATEMENT)
    # the merchant's invented name is the rarest unannounced term and comes first; the
    # title has the second place, before the scenes (with one place it fell to the fifth)
    assert terms[:2] == ("qwixflor", "quiet harbour 2")
    assert roles[:2] == ("", "")
    assert roles[2:] == ("symptom", "symptom")


def test_a_diagnosis_no_cue_announces_stays_after_an_ordinary_phrase() -> None:
    terms, _ = _first("Seen today, complaining of a burning feeling when passing urine, "
                      "needing to pass urine often and cloudy urine. Kidney infection "
                      "likely, nitrofurantoin started.")
    assert "kidney infection" in terms
    assert terms.index("kidney infection") < terms.index("nitrofurantoin")


def test_a_document_with_a_naming_cue_keeps_its_places_for_the_symptoms() -> None:
    # the title is announced: no unannounced place is kept, and the three scenes follow it
    terms, roles = _first("Dear Sir or Madam, I wish to contest the parking charge. That "
                          "evening I was inside the cinema watching Broken Ferry. Scenes: a "
                          "deaf pianist, a prison escape and a snowbound cabin.")
    assert terms[0] == "broken ferry" and roles[0] == "title"
    assert roles[1:] == ("symptom", "symptom", "symptom")


def test_the_places_are_two_and_the_order_is_the_documents_choice() -> None:
    assert UNANNOUNCED_PLACES == 2
    # one place asked for: the merchant alone
    terms, _ = _first(CARD_STATEMENT, k=1)
    assert terms == ("qwixflor",)


def test_the_second_place_is_not_a_part_of_the_first() -> None:
    # "the Qwixflor range" also offers "qwixflor range" (rule 8); it names the same thing and
    # does not take the second place from the title
    terms, _ = _first("Wish list for Ann\n- anything from the Qwixflor range\n"
                      "- Quiet Harbour 2 on disc\nScenes: a runaway bride, a stolen violin "
                      "and a ghost ship.", k=8)
    assert "quiet harbour 2" in terms[:3]
