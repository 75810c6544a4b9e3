"""``facts.terms`` rule 9: misspelt words read as the word meant, what fills a field's value
whole comes first among a record's unannounced terms, cues of attribution, and what someone
told."""

from __future__ import annotations

import pytest

from dpsynrag.facts.phrases import _classify
from dpsynrag.facts.terms import _misspelt, document_terms
from dpsynrag.transforms.vocabulary import public_vocabulary, stopwords


def _terms(note: str, k: int = 8) -> dict[str, str]:
    found = document_terms([note], public_vocabulary(), k)[0]
    return dict(zip(found.terms, found.roles, strict=True))


def _first(note: str) -> str:
    return document_terms([note], public_vocabulary(), 1)[0].terms[0]


def _meant(token: str) -> str | None:
    vocab = public_vocabulary()
    return _misspelt(token, _classify(token, vocab, stopwords()), vocab)


@pytest.mark.parametrize(("token", "meant"), [("docter", "doctor"), ("pateint", "patient"),
                                              ("complaning", "complaining")])
def test_a_rare_lowercase_word_one_edit_from_a_frequent_word_is_that_word(
        token: str, meant: str) -> None:
    assert _meant(token) == meant


@pytest.mark.parametrize("token", [
    "snurflepox", "kraxitis",  # invented names: no frequent word one edit away
    "strep", "shins", "twitching", "sciatica",  # words of their own, not rare enough
    "Docter",  # a capitalised word may be a name
    "sez",  # too short: many words are one edit away
])
def test_names_words_and_short_tokens_are_not_read_as_misspelt(token: str) -> None:
    assert _meant(token) is None


def test_a_misspelt_cue_gives_its_role_and_a_misspelt_title_takes_its_person() -> None:
    terms = _terms("pateint Ana Lima complaning of a dry cough and night sweats; seen by "
                   "docter Ruth Okafor. To come back if wors.")
    assert terms["dry cough"] == "symptom"
    assert "ruth okafor" not in terms
    assert not {"pateint", "complaning", "docter", "wors"} & set(terms)


def test_what_fills_a_field_whole_comes_first_among_unannounced_terms() -> None:
    # "bowls club first aid" and "fells" come before "gout" by the prior (last assertion)
    assert _first("Bowls club first aid book\nOutcome: gout; resting before "
                  "the fells next week") == "gout"
    assert _first("Bowls club first aid book\nthe verdict from the surgery: gout.\n"
                  "back on the fells soon") == "gout"
    # a field whose value goes on is not filled by its first words
    assert _first("Bowls club first aid book\nOutcome: gout flared on the fells "
                  "after the relay") != "gout"


def test_attribution_is_a_diagnosis_cue() -> None:
    assert _terms("Aching forearm when gripping, which I attribute to tennis elbow.")[
        "tennis elbow"] == "diagnosis"
    assert _terms("Her rash was attributed to contact dermatitis.")[
        "contact dermatitis"] == "diagnosis"


def test_what_someone_told_comes_first() -> None:
    assert _first("Long walk to the orienteering hut. The nurse was telling it is "
                  "shingles, so no fells this month.") == "shingles"
    assert _first("Orienteering again soon. Our GP told us it's shingles.") == "shingles"


def test_a_tab_kept_by_the_input_normalisation_parts_a_records_fields() -> None:
    from dpsynrag.io.text import normalise_text

    row = normalise_text("Harbour Lights 1987 \t Ines Moreau\tcrime drama\t4\t2024-05-13")
    terms = _terms(row)
    assert "harbour lights 1987" in terms
    assert not any("ines" in t and "1987" in t for t in terms)
    assert not any("drama 4" in t for t in terms)
