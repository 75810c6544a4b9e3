"""Per-document open-vocabulary phrases (facts mode): one document in, at most K_e distinct
canonical phrases out, never across punctuation, and the facts that matter (disease and drug
names, product names, error codes) found in the generated clinic and support sets."""

from __future__ import annotations

import random
import re
import unicodedata
from collections import defaultdict

import pytest

from dpsynrag.eval.datasets import make_clinic_dataset, make_support_dataset
from dpsynrag.facts.phrases import MAX_WORDS, canonical_token, document_phrases
from dpsynrag.transforms.vocabulary import public_vocabulary

_WORDS = re.compile(r"[^\W_]+(?:(?:_+|['\u2019\-\u2010\u2011.])[^\W_]+)*")

EDGE_TEXTS = [
    "",
    "   ",
    "no rare words at all in this plain sentence.",
    "Error E-4471, then 0x8007A1F3; also ERR_SYNC_09 (twice: ERR_SYNC_09).",
    "The syncora client and vexlink-2 bridge crashed. Syncora crashed again!",
    "Continue Blornazole tablets. Patient Thandiwe Achterberg, a 45-year-old, has "
    "Kraxi\u2019s Disease.",
    "Zoe\u0308 Mu\u0308ller visited on 2023-05-14 for a follow-up by email.",
    "Kraxitis\nSyndrome spans a line break; Kraxitis\n\nSyndrome spans a paragraph.",
    "Dr. Felix Achterberg saw Quellaxa Vorn-Tibbet Stramoxi Plentharis Gruvvex today.",
]


@pytest.fixture(scope="module")
def vocab():
    return public_vocabulary()


@pytest.fixture(scope="module")
def clinic():
    return make_clinic_dataset(n_notes=2000, n_diseases=40, seed=0)


@pytest.fixture(scope="module")
def support():
    return make_support_dataset(n_tickets=2000, n_issues=40, seed=0)


def _canon(text: str) -> str:
    return " ".join(canonical_token(t) for t in _WORDS.findall(text))


def _occurs_within_a_clause(phrase: str, text: str) -> bool:
    """Whether the phrase's tokens occur in ``text`` as whole tokens separated by whitespace
    only (at most one line break): no punctuation in between."""
    parts = [re.escape(token).replace("'", "['\u2019]").replace(r"\-", "[-\u2010\u2011]")
             for token in phrase.split()]
    joiner = r"(?:[^\S\n]*\n[^\S\n]*|[^\S\n]+)"  # whitespace, at most one line break
    pattern = (r"(?<![\w'\u2019.\-])" + joiner.join(f"(?:{p})" for p in parts)
               + r"(?![\w'\u2019\-]|\.\w)")
    folded = unicodedata.normalize("NFC", text).lower()
    return re.search(pattern, folded) is not None


def _mixed_corpus(clinic, support) -> list[str]:
    return ([n.text for n in clinic.notes[:150]] + [t.text for t in support.tickets[:150]]
            + EDGE_TEXTS)


# ---------------------------------------------------------------------------- the contract
def test_a_document_alone_equals_it_inside_any_batch(vocab, clinic, support) -> None:
    texts = _mixed_corpus(clinic, support)
    batch = document_phrases(texts, vocab, 4)
    alone = [document_phrases([text], vocab, 4)[0] for text in texts]
    assert batch == alone
    order = list(range(len(texts)))
    random.Random(3).shuffle(order)
    shuffled = document_phrases([texts[i] for i in order], vocab, 4)
    assert [shuffled[order.index(i)] for i in range(len(texts))] == batch
    # the same text twice in one batch, or next to a very different one, changes nothing
    doubled = document_phrases([texts[5], texts[5], EDGE_TEXTS[3]], vocab, 4)
    assert doubled[0] == doubled[1] == batch[5]


def test_at_most_k_distinct_phrases_of_at_most_max_words(vocab, clinic, support) -> None:
    texts = _mixed_corpus(clinic, support)
    for K in (1, 2, 4, 8):
        for phrases in document_phrases(texts, vocab, K):
            assert len(phrases) <= K
            assert len(set(phrases)) == len(phrases)
            for phrase in phrases:
                assert 1 <= len(phrase.split()) <= MAX_WORDS
                assert phrase == phrase.strip() and "  " not in phrase
    # a larger K_e only extends the list (a fixed order, then a cut)
    small, large = document_phrases(texts, vocab, 2), document_phrases(texts, vocab, 8)
    assert all(b[:len(a)] == a for a, b in zip(small, large, strict=True))


@pytest.mark.parametrize("K", [0, -1, 2.0, True, None])
def test_invalid_k_is_refused(vocab, K) -> None:
    with pytest.raises(ValueError):
        document_phrases(["Kraxitis"], vocab, K)


def test_no_phrase_crosses_punctuation(vocab, clinic, support) -> None:
    texts = _mixed_corpus(clinic, support)
    for text, phrases in zip(texts, document_phrases(texts, vocab, 8), strict=True):
        for phrase in phrases:
            assert _occurs_within_a_clause(phrase, text), (phrase, text)
    # every punctuation mark between two rare words separates them
    for mark in (".", ",", ";", ":", "(", ")", "!", "?", '"', "/"):
        text = f"Quellaxa{mark} Vornibbet"
        assert document_phrases([text], vocab, 4) == [["quellaxa", "vornibbet"]], mark
    assert document_phrases(["Quellaxa Vornibbet"], vocab, 4) == [["quellaxa vornibbet"]]
    assert document_phrases(["Quellaxa\nVornibbet"], vocab, 4) == [["quellaxa vornibbet"]]
    assert document_phrases(["Quellaxa\n\nVornibbet"], vocab, 4) == [["quellaxa",
                                                                    "vornibbet"]]


def test_deterministic(vocab, clinic, support) -> None:
    texts = _mixed_corpus(clinic, support)
    first = document_phrases(texts, vocab, 6)
    assert document_phrases(list(texts), vocab, 6) == first
    assert all(isinstance(p, str) for phrases in first for p in phrases)


# ---------------------------------------------------------------------------- the rule
def test_canonical_form(vocab) -> None:
    [phrases] = document_phrases(["She has Kraxi\u2019s Disease (per \u201cE\u20104471\u201d)."],
                                 vocab, 4)
    assert set(phrases) == {"kraxi's disease", "e-4471"}
    decomposed = "Yesterday Zoe\u0308 Mu\u0308llerova\u0301 was seen by Dr. Quellaxa."
    [phrases] = document_phrases([decomposed], vocab, 4)
    assert "zo\u00eb m\u00fcllerov\u00e1" in phrases and "quellaxa" in phrases
    assert all(unicodedata.is_normalized("NFC", p) for p in phrases)
    assert canonical_token("ERR_SYNC_09") == "err_sync_09"


def test_common_words_numbers_and_compounds_are_not_phrases(vocab) -> None:
    text = ("A 45-year-old came for a follow-up on 2023-05-14 at 10:30 and sent an email "
            "about the two-week course; she couldn't sleep, flaking skin, slurred speech, "
            "9 spreadsheets and 2,500 files.")
    assert document_phrases([text], vocab, 8) == [[]]


def test_codes_and_invented_lowercase_names(vocab) -> None:
    text = ("Ticket: syncora shows E-4471 after the update. vexlink-2 logs 0x8007A1F3 and "
            "ERR_SYNC_09, and voraLink reports KX203.")
    [phrases] = document_phrases([text], vocab, 8)
    assert set(phrases) == {"syncora", "e-4471", "vexlink-2", "0x8007a1f3", "err_sync_09",
                            "voralink", "kx203"}


def test_names_are_one_phrase_and_sentence_starts_do_not_join(vocab) -> None:
    text = ("Continue Blornazole tablets. Patient Thandiwe Achterberg came in. Dr. Felix "
            "Achterberg diagnosed Acute Blornitis. Error E-4471 returned.")
    [phrases] = document_phrases([text], vocab, 8)
    assert set(phrases) == {"blornazole", "thandiwe achterberg", "felix achterberg",
                            "acute blornitis", "e-4471"}


def test_rarest_first_then_first_occurrence(vocab) -> None:
    # "achterberg" is known to wordfreq (a real surname), the invented words are not
    text = "Yesterday Felix Achterberg had Kraxitis and took Blornazole."
    assert document_phrases([text], vocab, 3) == [["kraxitis", "blornazole",
                                                   "felix achterberg"]]
    assert document_phrases([text], vocab, 1) == [["kraxitis"]]


# ---------------------------------------------------------------------------- on the data
def test_clinic_disease_and_drug_names_are_found(vocab, clinic) -> None:
    texts = [n.text for n in clinic.notes]
    drug_of = {d.name: _canon(next(w for w in d.treatment.split() if w[0].isupper()))
               for d in clinic.diseases}
    per_k = {}
    for K in (2, 4):
        phrases = document_phrases(texts, vocab, K)
        disease = sum(_canon(n.disease) in p for n, p in zip(clinic.notes, phrases,
                                                             strict=True))
        drug = sum(drug_of[n.disease] in p for n, p in zip(clinic.notes, phrases, strict=True))
        per_k[K] = (disease / len(texts), drug / len(texts), phrases)
    # measured (seed 0): K_e=2 disease 1.000, drug 0.975; K_e=4 both 1.000
    assert per_k[2][0] >= 0.97 and per_k[2][1] >= 0.93
    assert per_k[4][0] >= 0.98 and per_k[4][1] >= 0.98
    # each disease's exact name is carried by (almost) all of its notes
    carried = defaultdict(int)
    for note, phrases in zip(clinic.notes, per_k[4][2], strict=True):
        carried[note.disease] += _canon(note.disease) in phrases
    for d in clinic.diseases:
        assert carried[d.name] >= 0.95 * d.n_notes, d.name


def test_clinic_patient_names_are_not_shared(vocab, clinic) -> None:
    phrases = document_phrases([n.text for n in clinic.notes], vocab, 8)
    full_names = {_canon(n.patient) for n in clinic.notes}
    patients_with = defaultdict(set)
    for note, found in zip(clinic.notes, phrases, strict=True):
        for phrase in found:
            patients_with[phrase].add(note.patient)
    shared = [p for p, who in patients_with.items() if p in full_names and len(who) >= 2]
    assert shared == []
    # the full name is one phrase in most notes (not two fragments taking two slots)
    whole = sum(_canon(n.patient) in p for n, p in zip(clinic.notes, phrases, strict=True))
    assert whole >= 0.5 * len(clinic.notes)  # measured 0.58: common first names are closed
    # a patient-name fragment (one word of a patient's name that is no doctor's) stays rare
    doctors = {m.group(1) for n in clinic.notes
               for m in [re.search(r"Dr\. (\S+(?: [A-Z]\.)? \S+?)[ .,:]", n.text)] if m}
    doctor_words = {w for d in doctors for w in _canon(d).split()}
    words = {w for n in clinic.notes for w in _canon(n.patient).split()}
    fragments = defaultdict(int)
    for found in phrases:
        for phrase in found:
            if (phrase not in full_names and all(w in words for w in phrase.split())
                    and not set(phrase.split()) & doctor_words):
                fragments[phrase] += 1
    assert max(fragments.values(), default=0) <= 14  # measured 11 (threshold ~15-40)


def test_support_codes_and_products_are_found(vocab, support) -> None:
    texts = [t.text for t in support.tickets]
    by_name = {i.name: i for i in support.issues}
    phrases = document_phrases(texts, vocab, 4)
    code = sum(_canon(by_name[t.issue].code) in p
               for t, p in zip(support.tickets, phrases, strict=True))
    product = sum(_canon(by_name[t.issue].product) in p
                  for t, p in zip(support.tickets, phrases, strict=True))
    # measured (seed 0, K_e=4): codes 1.000, products 1.000
    assert code >= 0.97 * len(texts) and product >= 0.97 * len(texts)
    lowercase = [i for i in support.issues if i.product.islower()]
    assert lowercase  # invented lowercase product names are among them
    for issue in support.issues:
        [found] = document_phrases([f"The {issue.product} client failed with {issue.code}."],
                                   vocab, 4)
        assert set(found) == {_canon(issue.product), _canon(issue.code)}, issue
