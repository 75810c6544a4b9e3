"""Keyword extraction: normalisation and parsing of LLM answers, the statistical extractor, and
greedy batched LLM extraction whose output for a document does not depend on its batch.

The LLM tests use a tiny randomly initialised Llama and a word-level tokenizer built here (no
download); a random model says nonsense, so they check only limits, shape and determinism.
"""

from __future__ import annotations

import pytest
from tiny_models import make_tiny_llm

from dpsynrag.models.greedy import generate_greedy
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.prompts.templates import load_prompt
from dpsynrag.transforms.keywords import (
    inflected_form,
    keyword_prompt,
    llm_keywords,
    normalise_keywords,
    parse_keyword_answer,
    statistical_keywords,
)
from dpsynrag.transforms.vocabulary import PublicVocabulary, public_vocabulary

_SMALL_WORDS = (
    "fever cough pain chest rash asthma insulin diabetes hypertension patient symptom "
    "headache fatigue nausea vomiting box history blood pressure body")
SMALL = PublicVocabulary.from_words(_SMALL_WORDS.split())


# ---------------------------------------------------------------------------- prompt
def test_prompt_template_is_the_papers() -> None:
    template = load_prompt("keywords")
    assert template.startswith("Extract {K} single words from the following document that "
                               "represent key information specific to the content.")
    assert template.endswith("\n\nDocument: {document}")


def test_prompt_substitution_leaves_braces_in_documents_alone() -> None:
    doc = "a note with {braces}, {K} and {document} inside"
    prompt = keyword_prompt(doc, 7)
    assert prompt.startswith("Extract 7 single words")
    assert prompt.endswith("Document: " + doc)
    assert keyword_prompt("x", 3, "K={K} D={document}") == "K=3 D=x"


# ---------------------------------------------------------------------------- normalising
def test_normalise_lowercases_strips_dedupes_and_truncates() -> None:
    words = ["Fever", "fever.", "  COUGH ", "(rash)", "unknownword", "follow-up", "", "pain",
             "chest", "fever"]
    assert normalise_keywords(words, SMALL, 10) == ["fever", "cough", "rash", "pain", "chest"]
    assert normalise_keywords(words, SMALL, 2) == ["fever", "cough"]
    assert normalise_keywords([], SMALL, 3) == []


def test_normalise_folds_plurals_onto_the_vocabulary() -> None:
    assert normalise_keywords(["symptoms", "boxes", "patients", "histories", "cough"],
                              SMALL, 10) == ["symptom", "box", "patient", "history", "cough"]
    assert normalise_keywords(["symptom", "symptoms"], SMALL, 10) == ["symptom"]


def test_normalise_rejects_bad_k() -> None:
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            normalise_keywords(["fever"], SMALL, bad)  # type: ignore[arg-type]


ANSWERS = {
    "fever, cough, chest pain": ["fever", "cough", "chest", "pain"],
    "1. Fever\n2. Cough\n3. Rash": ["fever", "cough", "rash"],
    "1) fever 2) cough 3) rash": ["fever", "cough", "rash"],
    "- fever\n* cough\n\u2022 rash": ["fever", "cough", "rash"],
    "Keywords: fever, cough, fever, Fever.": ["fever", "cough"],
    "Sure! Here are 5 single words that represent key information:\n1. **Asthma**\n"
    "2. Insulin - a hormone\n3. Hypertension (high blood pressure)\n4. Fatigue: tiredness":
        ["asthma", "insulin", "hypertension", "fatigue"],
    "Sure, here are the keywords: asthma, \"diabetes\", 'nausea'": ["asthma", "diabetes",
                                                                    "nausea"],
    "The keywords are fever, cough and headache.": ["fever", "cough", "headache"],
    "fever; cough | nausea/vomiting": ["fever", "cough", "nausea", "vomiting"],
    "Here they are.\nunknownword, patients, symptoms": ["patient", "symptom"],
    "": [],
    "no vocabulary words at all": [],
}


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_parse_keyword_answer(answer: str) -> None:
    assert parse_keyword_answer(answer, SMALL, 10) == ANSWERS[answer]


def test_parse_truncates_to_k() -> None:
    answer = "fever, cough, pain, chest, rash, asthma, insulin"
    assert parse_keyword_answer(answer, SMALL, 3) == ["fever", "cough", "pain"]


# ---------------------------------------------------------------------------- statistical
def test_statistical_keywords_prefer_rare_words() -> None:
    vocab = public_vocabulary()
    docs = [
        "The patient has hypertension and the patient takes insulin.",
        "Good good good house house house.",
        "",
        "Nothing but the and of which.",
    ]
    out = statistical_keywords(docs, vocab, 2)
    assert sorted(out[0]) == ["hypertension", "insulin"]  # rarer than "patient", "take"
    assert statistical_keywords(docs[:1], vocab, 3)[0][2] == "patient"  # repeated beats "take"
    assert len(out) == 4 and all(len(words) <= 2 for words in out)
    assert out[2] == [] and out[3] == []
    assert all(len(set(words)) == len(words) and all(w in vocab for w in words)
               for words in out)
    assert statistical_keywords(docs, vocab, 2) == out
    many = statistical_keywords([" ".join(vocab.words[1000:1100])], vocab, 10)
    assert len(many[0]) == 10


def test_statistical_keywords_break_ties_by_first_position() -> None:
    vocab = public_vocabulary()
    # words wordfreq does not know tie at zipf 0: the earlier one wins
    rare = [w for w in vocab.words[5000:6000] if len(w) > 12][:3]
    assert statistical_keywords([" ".join(rare)], vocab, 3) == [rare]
    assert statistical_keywords([" ".join(rare[::-1])], vocab, 3) == [rare[::-1]]


# ---------------------------------------------------------------------------- LLM
_WORD_TEXT = (
    "fever cough pain chest rash asthma insulin diabetes patient headache red green blue one "
    "two three the a of extract single words from following document that represent key "
    "information specific to content answer with only separated by commas , . : { } user "
    "assistant"
)
SPECIALS = ["<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]

def tiny_llm(seed: int = 0) -> LoadedLLM:
    return make_tiny_llm(_WORD_TEXT.split(), specials=SPECIALS, seed=seed)


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm()


DOCS = [
    "fever cough",
    "the patient has asthma and a rash on the chest",
    "insulin for diabetes , one two three red green blue " * 3,
    "pain",
    "headache { braces } patient",
    "blue " * 20,
    "chest pain fever",
]


def test_llm_keywords_shape_limits_and_determinism(llm: LoadedLLM) -> None:
    vocab = PublicVocabulary.from_words(w for w in _WORD_TEXT.split() if w.isalpha())
    calls: list[int] = []
    out = llm_keywords(llm, DOCS, vocab, 3, max_new_tokens=12, batch_size=3, pad_multiple=8,
                       on_batch=calls.append)
    assert len(out) == len(DOCS) and sum(calls) == len(DOCS)
    assert all(len(words) <= 3 and len(set(words)) == len(words) for words in out)
    assert all(w in vocab for words in out for w in words)
    assert any(out)  # the random model does say some vocabulary words
    again = llm_keywords(llm, DOCS, vocab, 3, max_new_tokens=12, batch_size=3, pad_multiple=8)
    assert again == out
    assert llm_keywords(llm, [], vocab, 3) == []


def test_a_documents_answer_does_not_depend_on_its_batch(llm: LoadedLLM) -> None:
    """The sensitivity sqrt(K) needs keywords(d) to be a function of d alone."""
    prompts = [llm.chat_prompt_ids(keyword_prompt(d, 3)) for d in DOCS]
    kwargs = dict(max_new_tokens=10, batch_size=4, pad_multiple=16)
    together = generate_greedy(llm, prompts, **kwargs)
    alone = [generate_greedy(llm, [p], **kwargs)[0] for p in prompts]
    reordered = generate_greedy(llm, prompts[::-1], **kwargs)[::-1]
    without_one = generate_greedy(llm, prompts[1:], **kwargs)
    assert together == alone == reordered
    assert without_one == together[1:]
    assert any(together)


def test_inflected_form_folds_ing_ed_and_irregular_plurals_onto_the_vocabulary() -> None:
    index = public_vocabulary().index
    assert "twitching" not in index and "concentrating" not in index  # the gap it closes
    assert inflected_form("twitching", index) == "twitch"
    assert inflected_form("concentrating", index) == "concentrate"  # stem + "e"
    assert inflected_form("slurred", index) == "slur"  # doubled consonant
    assert inflected_form("feet", index) == "foot"
    assert inflected_form("patients", index) == "patient"  # plain plural, as before
    assert inflected_form("fever", index) == "fever"
    assert inflected_form("xqzzing", index) is None  # no stem in V
    assert inflected_form("bing", index) == "bing"  # a word of V is never cut
    assert "dure" in index  # an archaic word of V ...
    assert inflected_form("during", index) is None  # ... that a stopword is never folded onto
    assert inflected_form("being", index) is None


def test_statistical_keywords_fold_inflections_only_when_asked() -> None:
    vocab = public_vocabulary()
    doc = ["Twitching of the eyelids and difficulty concentrating; swollen feet."]
    plain = statistical_keywords(doc, vocab, 10)[0]
    folded = statistical_keywords(doc, vocab, 10, fold_inflections=True)[0]
    assert "twitch" not in plain and "concentrate" not in plain and "foot" not in plain
    assert {"twitch", "concentrate", "foot", "eyelid"} <= set(folded)
    assert set(plain) <= set(folded)  # folding only adds words the document spells
