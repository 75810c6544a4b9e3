"""Records written as fields (``key=value``, labels before a colon) and chat wording
(``facts.terms`` rules 2-5): keys and labels are not what a record is about, people and names
do not take the word after them, shorthand is no term."""

from __future__ import annotations

import pytest

from dpsynrag.facts.terms import document_terms
from dpsynrag.transforms.vocabulary import public_vocabulary


def _terms(note: str, k: int = 8) -> dict[str, str]:
    found = document_terms([note], public_vocabulary(), k)[0]
    return dict(zip(found.terms, found.roles, strict=True))


def _first(note: str) -> str:
    return document_terms([note], public_vocabulary(), 1)[0].terms[0]


@pytest.mark.parametrize(("note", "subject"), [
    # key=value log lines: the keys and an event name of ordinary words are no subject
    ('kind=view_finished who=Marta Kowalski when=2024-05-01 title="Copper Meadow" '
     'style=comedy by=Stefan Nowak', "copper meadow"),
    ("entry_kind=visit; date=2024-02-01; person=Ana Lima; doctor=Dr. Lee Chen; "
     "finding=plantar fasciitis; plan=calf stretches", "plantar fasciitis"),
    # a field's label of ordinary words before its colon is a heading
    ("Marks on the kitchen chalkboard: 4. Copper Meadow 1971 was the pick of the night.",
     "copper meadow 1971"),
    # a status word before the condition, an adverbial after it
    ("Cyclist, 34, stopped at the first aid point. Has a pre-existing sinus infection "
     "per the form.", "sinus infection"),
    ("The nurse spotted plantar fasciitis straight away.", "plantar fasciitis"),
])
def test_the_first_term_is_what_the_record_is_about(note: str, subject: str) -> None:
    assert _first(note) == subject


def test_a_key_before_equals_is_no_term_and_an_identifier_of_words_has_no_precedence(
        ) -> None:
    terms = _terms('kind=view_finished who=Marta Kowalski title="Copper Meadow"')
    assert "kind" not in terms and "who" not in terms and "title" not in terms
    order = list(terms)
    assert order.index("copper meadow") < order.index("view_finished")
    # an identifier with a part outside V keeps its open-vocabulary precedence
    assert _first("status was snurflepox_b after copper meadow") == "snurflepox_b"


def test_a_person_takes_no_lowercase_word_and_a_name_none_outside_the_vocabulary() -> None:
    terms = _terms("Stefan Nowak pls make more of these. Marta Kowalski sets up the plot.")
    assert "stefan nowak" in terms and "marta kowalski" in terms
    assert not any(t.startswith(("stefan nowak ", "marta kowalski ")) for t in terms)
    assert "pls" not in terms  # short shorthand outside V is no term alone
    assert "copper meadow" in _terms("watching Copper Meadow rn, so good")
    assert not any(t.endswith(" rn") for t in _terms("watching Copper Meadow rn, so good"))
    # a name still takes one ordinary word: "Lyme disease"
    assert "lyme disease" in _terms("She was treated for Lyme disease last spring.")


def test_a_name_run_cut_at_four_words_loses_its_trailing_glue() -> None:
    terms = _terms("the staff put on The Copper Meadow and residents stayed to the end")
    assert "the copper meadow" in terms
    assert not any(t.endswith(" and") for t in terms)


def test_a_noun_cue_after_of_names_nothing_and_an_ily_adverb_ends_a_term() -> None:
    terms = _terms("Kind of film: comedy. We loved the film Copper Meadow.")
    assert terms["copper meadow"] == "title" and terms["comedy"] == ""
    assert _terms("Film: comedy.")["comedy"] == "title"  # the cue itself still names
    terms = _terms("we watched happily enough through Copper Meadow")
    assert not any("happily" in t for t in terms)


@pytest.mark.parametrize(("note", "subject"), [
    # what someone says or finds it is comes before the record's other uncued terms
    ("Card from the ward: in spite of the readings on repeated checks, Dr. Lee Chen says "
     "high blood pressure, so I am on amlodipine.", "high blood pressure"),
    ("weeks of night sweats and four visits later the clinic finally said it's "
     "kidney stones. Now on tamsulosin.", "kidney stones"),
    ("I examined her this morning. I believe this is plantar fasciitis.", "plantar fasciitis"),
])
def test_what_a_verb_of_saying_reports_is_first_among_uncued_terms(note: str,
                                                                   subject: str) -> None:
    assert _first(note) == subject


def test_a_demonstrative_after_said_is_no_finding_and_has_ends_a_role_walk() -> None:
    # "said this musical": a thing named before; the title stays first
    assert _first("We put on Copper Meadow 1971 for the club. One said this musical was "
                  "too long.") == "copper meadow 1971"
    # "I saw Jane Roe, who has X": X is what she has, not a title
    terms = _terms("I saw Marta Kowalski, 60, who has occasional nosebleeds and headaches.")
    assert terms.get("occasional nosebleeds") != "title"


@pytest.mark.parametrize(("note", "subject"), [
    ("Diagnosed with UTI, started nitrofurantoin.", "uti"),
    ("the nurse thinks it's a uti, started nitrofurantoin", "uti"),
    ("Seen today: DVT in the left calf, apixaban started.", "dvt")])
def test_a_rare_short_word_stays_a_term_alone(note: str, subject: str) -> None:
    """Shorthand of chat ("pls", "rn", "gp": common enough to be no open-vocabulary word) is
    no term alone; a rare one ("uti", "dvt": an abbreviated diagnosis) stays one, first."""
    assert _first(note) == subject
    assert "gp" not in _terms("the GP says it's hay fever, pls call back rn")


def test_history_opening_a_sentence_is_no_diagnosis_cue() -> None:
    """"History of ..." opening a sentence is the history of the presenting
    complaint; "a history of asthma" in a sentence, or after a field's label, names one."""
    note = ("History of fever with headache and persistent cough. The working diagnosis is "
            "COVID-19, to be managed with nirmatrelvir.")
    roles = _terms(note)
    assert roles["covid-19"] == "diagnosis" and roles["fever"] != "diagnosis"
    assert _first(note) == "covid-19"
    assert _terms("She has a history of asthma and was seen today.")["asthma"] == "diagnosis"
    assert _terms("PMH: history of asthma. Seen today.")["asthma"] == "diagnosis"


def test_a_tab_separates_a_records_fields() -> None:
    """No term runs across a tab ("The Glass Canyon<TAB>Oskar Wagner" was one
    term); the same words with a space between them stay one run."""
    note = "The Glass Canyon\tOskar Wagner\tdrama\t4\t2024-05-01\tretired boxer"
    terms = _terms(note)
    assert "the glass canyon" in terms
    assert not any("canyon" in t and "oskar" in t for t in terms)
    assert _first(note) == "the glass canyon"
    assert any("canyon oskar" in t for t in _terms("The Glass Canyon Oskar Wagner drama"))


@pytest.mark.parametrize("note", [
    "remember to return The Endless Highway by May 2, 2024!",
    "This week our guest Maite G. Horvath champions The Endless Highway, a war drama.",
    "You have to see The Endless Highway.",
    "The Endless Highway!!! a family restaurant and a volcanic eruption.",
])
def test_a_the_before_a_name_belongs_to_the_name_wherever_the_name_stands(note: str) -> None:
    """"The" before a name starts the name also right after another run
    ("return The Endless Highway" gave "endless highway", so one title counted as two terms
    and neither reached its release threshold); every note names the same term."""
    terms = _terms(note)
    assert "the endless highway" in terms
    assert "endless highway" not in terms
    # a lowercase "the" that no name follows stays a break
    assert "the volcanic eruption" not in _terms("after the volcanic eruption, the Glass Canyon")
    assert "the glass canyon" in _terms("after the volcanic eruption, the Glass Canyon")
