"""Benchmark data: a fictitious-clinic corpus in the spirit of the paper's Medical Synth.

:func:`make_clinic_dataset` invents ``n_diseases`` diseases (names that are not English
words, 3–4 symptoms each, one treatment with an invented drug) and writes ``n_notes`` doctor
notes about uniquely named patients, plus patient questions that describe a disease's
symptoms *in other words* and whose answer is the disease name. A model cannot answer them
without retrieving the notes (the names are invented), so the data measures what a
(synthetic) RAG corpus retains; the patient names allow leakage checks.

Generation rules (all deterministic from ``seed`` through ``numpy.random.default_rng``):

* Disease frequencies ``p ~ Dirichlet(1, ..., 1)``, so some diseases are rare. When there
  are at least as many first-visit notes as diseases, every disease gets one note and the
  rest are drawn ``Multinomial(n - n_diseases, p)``; otherwise notes are drawn from ``p``
  alone and some diseases have no note.
* A disease name is multi-token and its invented tokens are checked, lowercased, against
  the ``english-words`` lists (web2 and gcide); invented tokens are unique across diseases
  and drugs. Symptom sets are unique per disease and, where possible, two diseases share at
  most one symptom.
* Patient, doctor and asker names are unique across the whole dataset: first + last name,
  with a middle initial only where needed for uniqueness.
* Each patient is one privacy unit (``unit`` = ``patient-<k>``). With ``revisit_fraction``
  > 0 that share of notes are follow-up visits of an earlier patient (same unit, same
  disease), which exercises ``--unit-column``; the default 0 gives one note per patient.
* Queries go to diseases that have at least one note, in disease order, cycling when
  ``n_queries`` exceeds their number; each cycle uses another combination of symptom
  paraphrases, another symptom order and another template. The asker's name (in some
  templates) is a fresh name, never a patient's. ``patient`` is a patient with that disease
  (another one in each cycle where possible), for leakage checks.

:func:`make_support_dataset` is a second shape, so that rules are not tuned to capitalised
disease names: fictitious software support tickets. Each issue has an invented product
name (lowercase, with digits, or camelCase), a unique error code ("E-4471", "0x8007A1F3",
"ERR_SYNC_09", "KX203"), 2–3 plain-English symptoms and a fix; issue frequencies follow
Zipf's law; every ticket names a unique customer and one agent of a small pool. Queries
paraphrase an issue's symptoms, name neither product nor code, and are answered by the
**error code**. Files as for the clinic, with ``issues.json`` for ``diseases.json``.
Deterministic from ``seed`` through ``random.Random``.
"""

from __future__ import annotations

import datetime as _dt
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from dpsynrag.io.errors import InputError
from dpsynrag.io.jsonl import json_error_text

__all__ = [
    "SUPPORT_SYMPTOMS",
    "SYMPTOMS",
    "ClinicDataset",
    "ClinicNote",
    "DatasetError",
    "Disease",
    "Issue",
    "QAItem",
    "SupportDataset",
    "SupportTicket",
    "is_english_word",
    "load_qa_jsonl",
    "make_clinic_dataset",
    "make_support_dataset",
    "write_clinic_dataset",
    "write_support_dataset",
]

GENERATOR_VERSION = "dpsynrag.eval.datasets/clinic-v1"
N_DOCTORS = 12

# ------------------------------------------------------------------ public tables
SYMPTOMS: tuple[tuple[str, tuple[str, str]], ...] = (
    # (clinical phrase used in notes, (two lay paraphrases used in questions))
    ("persistent dry cough", ("a cough that won't go away and brings nothing up",
                              "a tickly hacking that has lasted weeks without any phlegm")),
    ("severe itching around the waistline", ("an unbearable itch all along my belt line",
                                             "skin around my middle that I can't stop "
                                             "scratching")),
    ("redness of both ears", ("my ears turning bright red",
                              "ears that look flushed and pink all the time")),
    ("heightened skin sensitivity to cotton fabrics",
     ("my skin reacting badly whenever I wear cotton clothes",
      "irritation wherever a cotton shirt touches me")),
    ("sudden weakness in the limbs", ("my arms and legs suddenly giving out",
                                      "moments where I lose all strength in my arms and legs")),
    ("tingling in the left nostril", ("a prickly pins-and-needles feeling inside the left side "
                                      "of my nose", "a buzzing sensation up my left nostril")),
    ("blurred vision in the evening", ("everything going fuzzy once the sun sets",
                                       "trouble seeing sharply at night as if things are "
                                       "smeared")),
    ("metallic taste in the mouth", ("a taste like coins on my tongue",
                                     "food tasting as if I had been sucking on a spoon")),
    ("swelling of the fingertips", ("puffy ends of my fingers",
                                    "fingertips that look fat and tight")),
    ("night sweats", ("waking up drenched", "soaking my sheets while I sleep")),
    ("recurrent nosebleeds", ("my nose bleeding again and again",
                              "frequent blood coming from my nose")),
    ("ringing in the ears", ("a constant high-pitched whine that only I can hear",
                             "a buzzing noise in my head that never stops")),
    ("joint stiffness in the morning", ("achy and rigid knees and hands when I get out of bed",
                                        "my joints feeling locked for the first hour of the "
                                        "day")),
    ("intense thirst", ("being parched no matter how much water I drink",
                        "a craving for water all day long")),
    ("hair loss in circular patches", ("round bald spots appearing on my scalp",
                                       "hair falling out in coin-shaped areas")),
    ("yellowing of the fingernails", ("my nails turning a yellowish colour",
                                      "nails that have gone a dull amber shade")),
    ("chest tightness after meals", ("a squeezing feeling behind my ribs after I eat",
                                     "pressure across my chest once I finish eating")),
    ("hoarse voice", ("my voice sounding rough and croaky",
                      "speech that comes out scratchy and strained")),
    ("numbness in the toes", ("toes that feel dead and asleep",
                              "a lack of feeling in my toes")),
    ("sensitivity to bright light", ("sunlight hurting my eyes",
                                     "having to squint and look away from lamps")),
    ("dizziness when standing up", ("the room spinning when I get up from a chair",
                                    "feeling lightheaded whenever I rise to my feet")),
    ("persistent hiccups", ("hiccups that won't stop for hours",
                            "hiccupping on and off all day")),
    ("purple spots on the shins", ("violet blotches on the front of my lower legs",
                                   "dark bruise-like marks below my knees")),
    ("cold hands and feet", ("icy fingers and toes even in a warm room",
                             "extremities that never warm up")),
    ("loss of the sense of smell", ("not being able to smell anything at all",
                                    "my nose no longer picking up any odours")),
    ("excessive yawning", ("yawning constantly even after a full night's sleep",
                           "not being able to stop gaping with tiredness")),
    ("twitching of the eyelids", ("my eyelid jumping and fluttering on its own",
                                  "little spasms around my eyes")),
    ("burning sensation in the palms", ("my palms feeling like they are on fire",
                                        "hot and stinging hands")),
    ("difficulty swallowing", ("food getting stuck on the way down",
                               "struggling to get food and drink down my throat")),
    ("pain behind the left knee", ("an ache at the back of my left knee",
                                   "soreness in the hollow of my left leg")),
    ("frequent sneezing at dawn", ("sneezing fits as soon as I wake up",
                                   "bouts of sneezing early every morning")),
    ("ring-shaped rash on the forearms", ("circular red marks on my lower arms",
                                          "round blotches along my arms")),
    ("craving for salty food", ("wanting crisps and salty snacks all the time",
                                "an urge to add salt to everything")),
    ("uncontrollable laughter", ("fits of giggling I can't stop",
                                 "bursting out laughing for no reason")),
    ("excessive drooling", ("saliva dribbling out of my mouth",
                            "my mouth watering far too much")),
    ("heaviness of the eyelids", ("eyelids that feel weighed down",
                                  "struggling to keep my eyes open")),
    ("swollen ankles", ("puffy feet and ankles by the evening", "my ankles ballooning up")),
    ("crackling sound when breathing", ("a rattling noise in my chest as I breathe",
                                        "my lungs making a crunchy noise")),
    ("flaking skin on the scalp", ("white flakes falling from my head", "my scalp peeling")),
    ("sour smell on the breath", ("breath that smells like vinegar",
                                  "people telling me my breath is sour")),
    ("mild fever in the afternoon", ("running a slight temperature every afternoon",
                                     "feeling hot and feverish later in the day")),
    ("bleeding gums", ("blood when I brush my teeth",
                       "gums that bleed at the slightest touch")),
    ("pain when chewing", ("my jaw hurting when I eat", "pain whenever I bite into food")),
    ("blue tint on the lips", ("my lips looking bluish", "lips that have gone a greyish blue")),
    ("hearing one's own heartbeat in the ear", ("a thumping pulse I can hear in my ear",
                                                "hearing my heart beating inside my head")),
    ("sudden craving for ice", ("wanting to chew on ice cubes constantly",
                                "an urge to crunch frozen water")),
    ("rapid weight loss", ("dropping pounds without trying",
                           "my clothes suddenly hanging loose on me")),
    ("clumsiness of the right hand", ("dropping things from my right hand",
                                      "my right hand fumbling everything")),
    ("tremor in the thumbs", ("my thumbs shaking on their own",
                              "trembling thumbs when I hold my phone")),
    ("dark circles under the eyes", ("shadowy rings below my eyes",
                                     "eyes that look bruised underneath")),
    ("gritty feeling in the eyes", ("a scratchy feeling when I blink",
                                    "eyes that feel like they have sand in them")),
    ("cracks at the corners of the mouth", ("split skin at the edges of my lips",
                                            "sore splits where my lips meet")),
    ("sensation of insects crawling on the skin", ("feeling like ants are walking over me",
                                                   "a creepy-crawly feeling on my arms")),
    ("stomach cramps after drinking milk", ("painful belly spasms after dairy",
                                            "my tummy knotting up whenever I have milk")),
    ("bloating in the evening", ("my belly swelling up as the day goes on",
                                 "feeling puffed up and gassy at night")),
    ("uncontrolled gas release", ("passing wind constantly without being able to hold it in",
                                  "embarrassing flatulence I can't control")),
    ("lower back pain when coughing", ("my lower back hurting every time I cough",
                                       "a stab in my lumbar area with each cough")),
    ("forgetfulness about recent events", ("not remembering what I did yesterday",
                                           "losing track of things that happened only hours "
                                           "ago")),
    ("vivid nightmares", ("terrifying dreams that feel completely real",
                          "waking up shaken from intense bad dreams")),
    ("difficulty concentrating", ("my mind wandering whenever I try to focus",
                                  "a fog that stops me from thinking clearly")),
    ("unusual irritability", ("snapping at people over nothing", "a very short temper lately")),
    ("palpitations at rest", ("my heart racing while I'm just sitting",
                              "a fluttering heartbeat when I'm resting")),
    ("shortness of breath on stairs", ("getting winded climbing a single flight of steps",
                                       "running out of puff going upstairs")),
    ("pale waxy skin", ("skin that looks pale and shiny like a candle",
                        "a complexion gone colourless and glossy")),
    ("green discoloration of the tongue", ("my tongue turning greenish",
                                           "a greenish coat on my tongue")),
    ("itching inside the ears", ("ears that itch deep inside",
                                 "wanting to scratch inside my ear canals")),
    ("aching teeth in cold weather", ("toothache when it's chilly outside",
                                      "my teeth hurting whenever the weather turns cold")),
    ("thickened skin on the elbows", ("rough leathery patches on my elbows",
                                      "elbows covered in hard tough skin")),
    ("sweet cravings at night", ("a desperate need for sugar late in the evening",
                                 "raiding the biscuit tin at midnight")),
    ("whistling sound when exhaling", ("a wheeze when I breathe out",
                                       "my breath whistling on the way out")),
    ("pain in the soles of the feet", ("sore feet from the very first step in the morning",
                                       "the bottoms of my feet aching")),
    ("slurred speech in the evening", ("my words coming out mumbled by nightfall",
                                       "trouble pronouncing words clearly late in the day")),
    ("excessive sweating of the palms", ("clammy dripping hands",
                                         "hands so damp I leave wet prints")),
    ("pulling sensation in the neck", ("a tugging feeling along my neck",
                                       "my neck feeling stretched and tight")),
    ("orange-tinted urine", ("pee that looks orange", "urine with an orangey colour")),
    ("hives after exposure to cold water", ("itchy welts popping up after a cold shower",
                                            "raised bumps whenever I swim in chilly water")),
    ("constant feeling of fullness", ("feeling stuffed even when I haven't eaten",
                                      "never being hungry because my stomach feels full")),
    ("double vision when reading", ("seeing two of every word on a page",
                                    "text doubling up when I read")),
    ("throbbing headache behind the eyes", ("a pounding pain just behind my eyeballs",
                                            "a pulsing ache deep behind my eyes")),
    ("hypersensitivity to loud noises", ("everyday sounds feeling painfully loud",
                                         "wincing at sounds that don't bother others")),
    ("pins and needles in the lips", ("a prickling feeling on my lips",
                                      "lips that feel fizzy and numb")),
    ("stiffness in the jaw upon waking", ("my jaw feeling locked when I wake up",
                                          "trouble opening my mouth in the morning")),
)

_FIRST_NAMES = (
    "Aaliyah", "Abdul", "Ada", "Adrian", "Aiko", "Alba", "Alejandro", "Amara", "Amir", "Ana",
    "Anders", "Anika", "Arjun", "Astrid", "Aurelio", "Beatriz", "Benedikt", "Bianca", "Bjorn",
    "Bongani", "Bruno", "Camille", "Carlos", "Chen", "Chiara", "Cyrus", "Dalia", "Damian", "Dara",
    "Dmitri", "Elena", "Elif", "Emeka", "Emil", "Esther", "Fatima", "Felix", "Fernando", "Freya",
    "Gabriel", "Giulia", "Hana", "Hassan", "Helga", "Hiroshi", "Ines", "Ingrid", "Isaac", "Ivan",
    "Jamal", "Jana", "Javier", "Joon", "Kaito", "Kalani", "Karim", "Katarina", "Kofi", "Laila",
    "Lars", "Leila", "Lorenzo", "Lucia", "Magnus", "Maite", "Malik", "Maren", "Mateo", "Mei",
    "Milan", "Mira", "Nadia", "Naveen", "Nia", "Nikolai", "Noor", "Olga", "Omar", "Oskar",
    "Paloma", "Pavel", "Priya", "Quentin", "Rafael", "Rania", "Ravi", "Rosa", "Ruben", "Saanvi",
    "Samir", "Selin", "Sven", "Tariq", "Thandiwe", "Tomas", "Ulrike", "Valentina", "Vikram",
    "Wanjiru", "Xavier", "Yara", "Yusuf", "Zainab", "Zofia"
)
_LAST_NAMES = (
    "Abara", "Achterberg", "Adeyemi", "Albescu", "Almeida", "Andersen", "Arslan", "Baptiste",
    "Barros", "Bergstrom", "Bianchi", "Bjork", "Castellanos", "Chakraborty", "Chowdhury", "Costa",
    "Dahl", "Delacroix", "Dimitrov", "Dubois", "Eklund", "Ekwueme", "Esposito", "Falk", "Ferreira",
    "Fischer", "Fontaine", "Gallagher", "Garcia", "Gupta", "Haddad", "Halvorsen", "Hoffmann",
    "Horvath", "Ibrahim", "Iwasaki", "Jankowski", "Jensen", "Kaminski", "Karlsson", "Kowalczyk",
    "Kuznetsova", "Lachance", "Lindqvist", "Lund", "Mahlangu", "Marchetti", "Moreau", "Mwangi",
    "Nakamura", "Nguyen", "Nordberg", "Novak", "Nyberg", "Obi", "Okafor", "Oliveira", "Ortega",
    "Osei", "Pacheco", "Papadopoulos", "Park", "Petrov", "Quispe", "Rahman", "Ramirez",
    "Rasmussen", "Reyes", "Rinaldi", "Rossi", "Sato", "Schneider", "Silva", "Sokolov", "Stavros",
    "Suzuki", "Takahashi", "Tanaka", "Toivonen", "Torres", "Uchenna", "Valdez", "Varga", "Vasquez",
    "Virtanen", "Wagner", "Wojcik", "Xu", "Yamamoto", "Yilmaz", "Zapata", "Zhou", "Zielinski"
)

_ONSETS = (
    "b", "br", "d", "dr", "f", "fl", "g", "gl", "gr", "k", "kl", "kr", "l", "m", "n", "p", "pl",
    "pr", "r", "s", "sk", "st", "t", "tr", "v", "vr", "z", "th", "sh", "ch", "j"
)
_INNER_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "th", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "a", "ae", "ia", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "x", "nd", "rn", "st", "k", "th")
_MEDICAL_SUFFIXES = ("itis", "osis", "emia", "algia", "opathy", "ia")
_ADJECTIVES = ("Acute", "Chronic", "Familial", "Benign", "Juvenile", "Migrating")
_DRUG_SUFFIXES = ("ex", "ol", "amine", "azole", "ix", "ovir", "afen", "idine", "ox", "il")
_DRUG_FORMS = (
    "{d} tablets twice a day", "a two-week course of {d}", "{d} drops three times daily",
    "{d} ointment applied every night", "weekly {d} injections", "{d} syrup after meals",
)
_PROCEDURES = (
    "plenty of rest", "warm compresses", "a low-salt diet", "daily saline rinses",
    "physiotherapy twice a week", "avoiding cold drafts", "breathing exercises",
    "a follow-up visit after two weeks", "cool baths", "light stretching each morning",
)
_NOTE_TEMPLATES = (
    "Patient {name}, a {age}-year-old, visited the clinic on {date} presenting with "
    "{symptoms}. After examination, Dr. {doctor} diagnosed {disease}. Treatment: {treatment}.",
    "{date}. {name} ({age}) reports {symptoms}. Assessment by Dr. {doctor}: {disease}. "
    "Plan: {treatment}.",
    "Dr. {doctor} saw {name}, aged {age}, on {date}. The patient complained of {symptoms}. "
    "The findings are consistent with {disease}, and the recommended treatment is "
    "{treatment}.",
    "Visit note ({date}): {name} is a {age}-year-old experiencing {symptoms}. Based on these "
    "symptoms, the diagnosis is {disease}. Dr. {doctor} prescribed {treatment}.",
    "On {date}, {name}, {age}, came in with {symptoms}. Dr. {doctor} confirmed {disease} and "
    "started {treatment}.",
    "Consultation with Dr. {doctor} on {date}. {name}, age {age}, has been suffering from "
    "{symptoms}. Diagnosis: {disease}. Recommended: {treatment}.",
)
_FOLLOW_UP_TEMPLATES = (
    "Follow-up on {date}: {name} ({age}) returned to Dr. {doctor}. The {disease} is still "
    "causing {symptoms}. Continue {treatment}.",
    "Dr. {doctor}, follow-up visit, {date}. {name}, aged {age}, previously diagnosed with "
    "{disease}, still reports {symptoms}. Plan: keep to {treatment}.",
)
_QUERY_TEMPLATES = (
    "I am {asker}. Lately I have been dealing with {symptoms}. Which disease might I have?",
    "Hello doctor, I've noticed {symptoms}. What condition could this be?",
    "My name is {asker} and I am suffering from {symptoms}. What is my disease?",
    "For a few weeks now I've had {symptoms}. Which illness could explain this?",
    "I keep experiencing {symptoms}. Do you know what disease this is?",
    "Hi, I'm {asker}. My symptoms are {symptoms}. What might I be suffering from?",
)
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December"
)


# ------------------------------------------------------------------ data classes
class DatasetError(InputError):
    """A problem with an evaluation data file, on one line naming the file and line."""


@dataclass(frozen=True)
class Disease:
    """An invented disease; ``frequency`` is its Dirichlet weight, ``n_notes`` its notes."""

    name: str
    symptoms: tuple[str, ...]
    treatment: str
    frequency: float
    n_notes: int


@dataclass(frozen=True)
class ClinicNote:
    """One doctor note (``id``, ``text``, ``unit`` are what ``notes.jsonl`` holds)."""

    id: str
    text: str
    unit: str
    patient: str
    disease: str


@dataclass(frozen=True)
class QAItem:
    """An evaluation question with its reference answer (and, optionally, a patient name).

    ``alternatives``: the other accepted answers (a ``queries.jsonl`` row's ``answers``
    besides ``answer``); the query is answered when any of :attr:`answers` is."""

    id: str
    question: str
    answer: str
    patient: str | None = None
    alternatives: tuple[str, ...] = ()

    @property
    def answers(self) -> tuple[str, ...]:
        """Every accepted answer, ``answer`` first."""
        return (self.answer, *self.alternatives)


@dataclass(frozen=True)
class ClinicDataset:
    """Diseases, notes and queries of one generated clinic."""

    seed: int
    diseases: tuple[Disease, ...]
    notes: tuple[ClinicNote, ...]
    queries: tuple[QAItem, ...]

    def describe(self) -> dict[str, Any]:
        """The public description written to ``diseases.json``."""
        return {
            "generator": GENERATOR_VERSION,
            "seed": self.seed,
            "n_notes": len(self.notes),
            "n_queries": len(self.queries),
            "n_diseases": len(self.diseases),
            "diseases": [
                {"name": d.name, "symptoms": list(d.symptoms), "treatment": d.treatment,
                 "frequency": d.frequency, "n_notes": d.n_notes}
                for d in self.diseases
            ],
        }


# ------------------------------------------------------------------ word checks
@lru_cache(maxsize=1)
def _english_words() -> frozenset[str]:
    from english_words import get_english_words_set

    return frozenset(get_english_words_set(["web2", "gcide"], lower=True))


def is_english_word(token: str) -> bool:
    """Whether ``token`` (lowercased, apostrophe suffix dropped) is in english-words."""
    word = token.lower().removesuffix("'s")
    return word in _english_words()


# ------------------------------------------------------------------ generation helpers
class _Coiner:
    """Invents pronounceable tokens that are not English words and never repeat."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def _pick(self, options: Sequence[str]) -> str:
        return options[int(self.rng.integers(len(options)))]

    def word(self, suffix: str = "") -> str:
        """A new capitalised token: 2–3 invented syllables, a coda, then ``suffix``."""
        for _ in range(10_000):
            n = 2 if suffix or self.rng.random() < 0.6 else 3
            stem = self._pick(_ONSETS) + self._pick(_VOWELS)
            stem += "".join(self._pick(_INNER_ONSETS) + self._pick(_VOWELS) for _ in range(n - 1))
            stem += self._pick(_CODAS)
            if suffix[:1] in "aeiouy":
                stem = stem.rstrip("aeiouy")
            word = stem + suffix
            if (len(stem) >= 4 and stem not in self.used and word not in self.used
                    and not is_english_word(stem) and not is_english_word(word)):
                self.used.update((stem, word))
                return word.capitalize()
        raise RuntimeError("could not invent a new word")  # pragma: no cover


def _disease_name(coiner: _Coiner, rng: np.random.Generator) -> str:
    form = int(rng.integers(5))
    med = _MEDICAL_SUFFIXES[int(rng.integers(len(_MEDICAL_SUFFIXES)))]
    if form == 0:
        return f"{coiner.word()} Syndrome"
    if form == 1:
        return f"{coiner.word()}-{coiner.word()} Fever"
    if form == 2:
        return f"{coiner.word()} {coiner.word(med)}"
    if form == 3:
        return f"{coiner.word()}'s Disease"
    return f"{_ADJECTIVES[int(rng.integers(len(_ADJECTIVES)))]} {coiner.word(med)}"


def _choose_symptom_sets(n_diseases: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Unique 3–4 symptom sets: least-used symptoms first (random tie-break), and no pair
    of symptoms shared by two diseases while that can be had in a few tries."""
    n_symptoms = len(SYMPTOMS)
    usage = np.zeros(n_symptoms)
    chosen: list[tuple[int, ...]] = []
    taken: set[tuple[int, ...]] = set()
    pairs: set[tuple[int, int]] = set()
    for _ in range(n_diseases):
        size = int(rng.integers(3, 5))
        best: tuple[int, ...] | None = None
        best_shared = size * size
        for attempt in range(40):
            noise = rng.random(n_symptoms) * (1.5 + attempt)
            candidate = tuple(sorted(int(i) for i in np.argsort(usage + noise)[:size]))
            if candidate in taken:
                continue
            shared = sum((a, b) in pairs for a in candidate for b in candidate if a < b)
            if shared < best_shared:
                best, best_shared = candidate, shared
            if shared == 0:
                break
        while best is None or best in taken:
            best = tuple(sorted(int(i) for i in rng.choice(n_symptoms, size, replace=False)))
        taken.add(best)
        pairs.update((a, b) for a in best for b in best if a < b)
        usage[list(best)] += 1
        chosen.append(tuple(int(i) for i in rng.permutation(best)))
    return chosen


def _treatment(drug: str, rng: np.random.Generator) -> str:
    text = _DRUG_FORMS[int(rng.integers(len(_DRUG_FORMS)))].format(d=drug)
    if rng.random() < 0.7:
        text += " combined with " + _PROCEDURES[int(rng.integers(len(_PROCEDURES)))]
    return text


def _draw_name(used: set[str], pick: Callable[[Sequence[str]], str],
               letter: Callable[[], int]) -> str | None:
    """A first + last name not in ``used`` (added to it), a middle initial only where the
    pair is taken; None after 1000 tries. ``pick`` draws a list's item and ``letter`` an
    initial's index (each generator's own random source, in this order)."""
    for _ in range(1000):
        first = pick(_FIRST_NAMES)
        last = pick(_LAST_NAMES)
        name = f"{first} {last}"
        if name in used:
            name = f"{first} {chr(65 + letter())}. {last}"
        if name not in used:
            used.add(name)
            return name
    return None


class _Names:
    """Unique person names: first + last, a middle initial only when needed; once those run
    out (a collection of some 10^5 people), two middle initials for every later name (the
    names of a smaller collection are unchanged)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.used: set[str] = set()
        self.crowded = False  # the one-initial names have run out

    def new(self) -> str:
        rng = self.rng
        if not self.crowded:
            name = _draw_name(self.used, lambda names: names[int(rng.integers(len(names)))],
                              lambda: int(rng.integers(26)))
            if name is not None:
                return name
            self.crowded = True
        for _ in range(1000):
            first = _FIRST_NAMES[int(rng.integers(len(_FIRST_NAMES)))]
            last = _LAST_NAMES[int(rng.integers(len(_LAST_NAMES)))]
            middle = "".join(f"{chr(65 + int(i))}. " for i in rng.integers(26, size=2))
            name = f"{first} {middle}{last}"
            if name not in self.used:
                self.used.add(name)
                return name
        raise ValueError("too many people for the built-in name lists")


def _join(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _format_date(day: _dt.date, style: int) -> str:
    if style == 0:
        return day.isoformat()
    if style == 1:
        return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"
    return f"{_MONTHS[day.month - 1]} {day.day}, {day.year}"


# ------------------------------------------------------------------ the generator
def make_clinic_dataset(
    *,
    n_notes: int = 2000,
    n_diseases: int = 40,
    n_queries: int | None = None,
    seed: int = 0,
    revisit_fraction: float = 0.0,
) -> ClinicDataset:
    """Generate a fictitious clinic: diseases, ``n_notes`` notes and the queries.

    ``n_queries=None`` gives one query per disease that has a note. See the module
    docstring for the rules. Deterministic in all arguments.
    """
    if n_notes < 1 or n_diseases < 1:
        raise ValueError("n_notes and n_diseases must be positive")
    if n_diseases > 5000:
        raise ValueError("n_diseases must be at most 5000")
    if n_queries is not None and n_queries < 0:
        raise ValueError("n_queries must be non-negative")
    if not 0.0 <= revisit_fraction < 1.0:
        raise ValueError("revisit_fraction must lie in [0, 1)")
    rng = np.random.default_rng(seed)
    coiner = _Coiner(rng)

    # diseases
    names_seen: set[str] = set()
    disease_names: list[str] = []
    while len(disease_names) < n_diseases:
        name = _disease_name(coiner, rng)
        if name.lower() not in names_seen:
            names_seen.add(name.lower())
            disease_names.append(name)
    symptom_sets = _choose_symptom_sets(n_diseases, rng)
    treatments = [
        _treatment(coiner.word(_DRUG_SUFFIXES[int(rng.integers(len(_DRUG_SUFFIXES)))]), rng)
        for _ in range(n_diseases)
    ]
    frequencies = rng.dirichlet(np.ones(n_diseases))

    # first visits and follow-ups
    n_first = n_notes - round(revisit_fraction * n_notes)
    n_first = max(n_first, min(n_notes, n_diseases))
    if n_first >= n_diseases:
        counts = 1 + rng.multinomial(n_first - n_diseases, frequencies)
    else:
        counts = rng.multinomial(n_first, frequencies)
    patient_disease = rng.permutation(np.repeat(np.arange(n_diseases), counts))
    follow_up_of = rng.integers(0, n_first, size=n_notes - n_first)

    people = _Names(rng)
    doctors = [people.new() for _ in range(N_DOCTORS)]
    patients = [people.new() for _ in range(n_first)]
    ages = rng.integers(18, 90, size=n_first)
    start = _dt.date(2023, 1, 1).toordinal()
    first_days = rng.integers(0, 730, size=n_first)
    width = max(5, len(str(n_notes)))

    visits: list[tuple[int, int, bool]] = [(p, int(first_days[p]), False)
                                           for p in range(n_first)]
    visits += [(int(p), int(first_days[p] + rng.integers(7, 90)), True) for p in follow_up_of]
    order = rng.permutation(len(visits))
    notes: list[ClinicNote] = []
    note_counts = np.zeros(n_diseases, dtype=int)
    for k, v in enumerate(order, start=1):
        patient, day, follow_up = visits[int(v)]
        d = int(patient_disease[patient])
        note_counts[d] += 1
        symptoms = [SYMPTOMS[i][0] for i in rng.permutation(symptom_sets[d])]
        templates = _FOLLOW_UP_TEMPLATES if follow_up else _NOTE_TEMPLATES
        text = templates[int(rng.integers(len(templates)))].format(
            name=patients[patient], age=int(ages[patient]),
            date=_format_date(_dt.date.fromordinal(start + day), int(rng.integers(3))),
            symptoms=_join(symptoms), doctor=doctors[int(rng.integers(N_DOCTORS))],
            disease=disease_names[d], treatment=treatments[d])
        notes.append(ClinicNote(id=f"note-{k:0{width}d}", text=text,
                                unit=f"patient-{patient + 1:0{width}d}",
                                patient=patients[patient], disease=disease_names[d]))

    diseases = tuple(
        Disease(name=disease_names[d],
                symptoms=tuple(SYMPTOMS[i][0] for i in symptom_sets[d]),
                treatment=treatments[d], frequency=float(frequencies[d]),
                n_notes=int(note_counts[d]))
        for d in range(n_diseases))

    # queries
    present = [d for d in range(n_diseases) if note_counts[d] > 0]
    by_disease: dict[int, list[str]] = {d: [] for d in present}
    for p, d in enumerate(patient_disease):
        by_disease[int(d)].append(patients[p])
    offsets = {d: int(rng.integers(len(by_disease[d]))) for d in present}
    base_variant = {d: rng.integers(0, 2, size=len(symptom_sets[d])) for d in present}
    total = len(present) if n_queries is None else n_queries
    qwidth = max(4, len(str(total)))
    queries: list[QAItem] = []
    for k in range(total):
        d = present[k % len(present)]
        cycle = k // len(present)
        sset = symptom_sets[d]
        variants = [(int(base_variant[d][s]) + (cycle >> s)) % 2 for s in range(len(sset))]
        phrases = [SYMPTOMS[sset[s]][1][variants[s]] for s in rng.permutation(len(sset))]
        template = _QUERY_TEMPLATES[(int(rng.integers(len(_QUERY_TEMPLATES))))]
        question = template.format(symptoms=_join(phrases),
                                   asker=people.new() if "{asker}" in template else "")
        pool = by_disease[d]
        queries.append(QAItem(id=f"q-{k + 1:0{qwidth}d}", question=question,
                              answer=disease_names[d],
                              patient=pool[(offsets[d] + cycle) % len(pool)]))
    return ClinicDataset(seed=seed, diseases=diseases, notes=tuple(notes),
                         queries=tuple(queries))


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def write_clinic_dataset(
    out_dir: Path | str,
    *,
    n_notes: int = 2000,
    n_diseases: int = 40,
    n_queries: int | None = None,
    seed: int = 0,
    revisit_fraction: float = 0.0,
) -> dict[str, Path]:
    """Generate a clinic and write ``notes.jsonl``, ``queries.jsonl`` and ``diseases.json``.

    ``notes.jsonl`` holds ``id, text, unit`` (the private input of ``build-corpus``);
    ``queries.jsonl`` holds ``id, question, answer, patient, disease``; ``diseases.json``
    the public description. Returns the paths keyed ``notes``, ``queries``, ``diseases``.
    Same arguments, same bytes.
    """
    data = make_clinic_dataset(n_notes=n_notes, n_diseases=n_diseases, n_queries=n_queries,
                               seed=seed, revisit_fraction=revisit_fraction)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"notes": out / "notes.jsonl", "queries": out / "queries.jsonl",
             "diseases": out / "diseases.json"}
    paths["notes"].write_text(
        "".join(_dumps({"id": n.id, "text": n.text, "unit": n.unit}) + "\n" for n in data.notes),
        encoding="utf-8")
    paths["queries"].write_text(
        "".join(_dumps({"id": q.id, "question": q.question, "answer": q.answer,
                        "patient": q.patient, "disease": q.answer}) + "\n"
                for q in data.queries),
        encoding="utf-8")
    paths["diseases"].write_text(json.dumps(data.describe(), ensure_ascii=False, indent=2)
                                 + "\n", encoding="utf-8")
    return paths


# ------------------------------------------------------------------ support tickets
SUPPORT_GENERATOR_VERSION = "dpsynrag.eval.datasets/support-v1"
N_AGENTS = 8

SUPPORT_SYMPTOMS: tuple[tuple[str, tuple[str, str]], ...] = (
    # (phrase used in tickets, (two lay paraphrases used in questions))
    ("the app freezing on startup", ("the program hanging as soon as I open it",
                                     "a frozen window every time I launch it")),
    ("repeated login prompts", ("being asked for my password again and again",
                                "the sign-in box popping up over and over")),
    ("duplicate calendar entries", ("every meeting showing up twice in my schedule",
                                    "doubled appointments in my diary")),
    ("a blank settings page", ("the options screen coming up completely empty",
                               "nothing showing when I open the preferences")),
    ("uploads stalling halfway", ("files stopping in the middle of sending",
                                  "transfers that never get past the midpoint")),
    ("the fan spinning loudly during sync", ("my computer getting very noisy while it copies "
                                             "files", "a roaring cooling fan whenever files "
                                             "are being copied")),
    ("missing attachments in sent mail", ("emails going out without the files I added",
                                          "recipients never getting the documents I attach")),
    ("slow page loads after the update", ("everything taking ages to open since the upgrade",
                                          "screens crawling onto the display since the new "
                                          "version")),
    ("garbled characters in file names", ("strange symbols replacing letters in my document "
                                          "titles", "file titles turning into gibberish")),
    ("notifications arriving hours late", ("alerts showing up long after the event",
                                           "getting reminders well after they matter")),
    ("the battery draining overnight", ("my laptop being flat every morning",
                                        "losing all charge while the machine sleeps")),
    ("printing only blank pages", ("the printer feeding out empty sheets",
                                   "pages coming out with nothing on them")),
    ("the screen flickering when scrolling", ("the display blinking as I move down a page",
                                              "a shimmering picture whenever I scroll")),
    ("audio cutting out in calls", ("voices dropping away in the middle of a meeting",
                                    "losing sound every few seconds on calls")),
    ("the camera not being detected", ("video calls saying there is no camera at all",
                                       "my built-in camera not showing up")),
    ("deleted files reappearing", ("things I removed coming back the next day",
                                   "old documents returning after I throw them away")),
    ("the search returning no results", ("looking for anything and finding nothing",
                                         "an empty list whatever I type into the find box")),
    ("passwords not being saved", ("having to type my credentials every single time",
                                   "the program forgetting my sign-in details")),
    ("the installer rolling back at the end", ("the setup undoing itself right before it "
                                               "finishes", "installation reversing at the last "
                                               "step")),
    ("a crash when exporting reports", ("the program closing whenever I try to save a summary",
                                        "everything shutting down every time I export")),
    ("the clock drifting by several minutes", ("the time on my machine slowly going wrong",
                                               "the displayed time running minutes off")),
    ("shared folders showing as empty", ("team directories that look like they contain "
                                         "nothing", "folders my colleagues share appearing "
                                         "with no files")),
    ("the mouse cursor lagging", ("the pointer trailing behind my hand",
                                  "a sluggish arrow on screen")),
    ("emails stuck in the outbox", ("messages that never leave",
                                    "mail sitting unsent for hours")),
    ("the keyboard layout switching by itself", ("my keys suddenly typing the wrong letters",
                                                 "the typing language changing without me "
                                                 "asking")),
    ("thumbnails failing to load", ("grey boxes where the picture previews should be",
                                    "no small previews of my photos")),
    ("the disk filling up with temporary files", ("my storage running out for no reason",
                                                  "free space vanishing day by day")),
    ("video playback stuttering", ("films jerking and pausing",
                                   "choppy movies that keep freezing")),
    ("the connection dropping every few minutes", ("the network going away again and again",
                                                   "losing internet access repeatedly")),
    ("high memory use when idle", ("the computer getting sluggish even when I am doing "
                                   "nothing", "lots of memory used while nothing is open")),
    ("a licence expired warning", ("a message saying my subscription ran out even though I "
                                   "paid", "being told my paid plan has lapsed")),
    ("contacts losing their phone numbers", ("my address book entries missing their numbers",
                                             "people in my contacts with no number any more")),
    ("the dark theme turning off at random", ("the screen colours switching back to bright "
                                              "by themselves", "the night look resetting on "
                                              "its own")),
    ("the update check looping forever", ("the program searching for a new version without "
                                          "ever stopping", "an endless hunt for upgrades")),
    ("spreadsheets opening as read only", ("not being allowed to edit my tables",
                                           "workbooks that refuse any change")),
    ("the backup skipping large files", ("big files never getting copied to the safe store",
                                         "my largest documents missing from the saved "
                                         "copies")),
    ("the sidebar disappearing", ("the side menu vanishing",
                                  "losing the panel on the left of the window")),
    ("security codes being rejected", ("the numbers texted to my phone not being accepted",
                                       "the extra sign-in code always failing")),
    ("wrong time zones on invitations", ("meeting requests showing the wrong hour",
                                         "appointments shifted by a few hours")),
    ("the tablet app logging out on rotation", ("being signed out when I turn the tablet "
                                                "sideways", "losing my session when the "
                                                "screen turns")),
    ("the microphone picking up echo", ("people hearing their own voice back when I talk",
                                        "an echo on my side of the call")),
    ("document previews rendering upside down", ("pages showing up flipped",
                                                 "inverted pages in the preview pane")),
    ("the scanner producing striped images", ("lines across every page I scan",
                                              "scans covered in streaks")),
    ("the progress bar jumping backwards", ("the loading bar going in reverse",
                                            "the completion meter moving back instead of "
                                            "forward")),
    ("bookmarks vanishing after a restart", ("saved pages gone after I reboot",
                                             "my favourites list emptying when I turn the "
                                             "machine on")),
    ("the chat window opening off screen", ("the messaging box appearing where I cannot see "
                                            "it", "the conversation panel placed outside the "
                                            "display")),
    ("the payment page timing out", ("checkout never finishing",
                                     "the pay screen giving up before I can pay")),
    ("washed out colours on the second monitor", ("my extra screen looking faded",
                                                  "dull pale colours on the other display")),
)
_PRODUCT_SUFFIXES = ("ora", "ix", "io", "ex", "ly", "on", "ara", "ium")
_PRODUCT_WORDS = ("Link", "Drive", "Sync", "Vault", "Desk", "Cast", "Hub", "Mail", "Box", "Pay")
_CODE_WORDS = ("SYNC", "AUTH", "DISK", "NET", "IO", "TLS", "DB", "CACHE", "QUOTA", "TOKEN")
_FIX_ACTIONS = (
    "clear the local cache", "sign out and sign in again", "reinstall the client",
    "roll back to the previous version", "reset the network settings",
    "renew the licence key", "turn off the battery saver", "re-pair the device",
    "delete the temporary folder", "rebuild the search index", "update the graphics driver",
    "switch the proxy setting to automatic", "remove the stored credentials",
    "disable the browser extension", "reset the sync database", "restore the default theme",
    "allow the app through the firewall", "set the clock to update automatically",
    "repair the user profile", "free up disk space",
)
_FIX_FOLLOW_UPS = (
    "restart the computer", "wait for a full resync", "run the built-in repair tool",
    "log the next error if it comes back", "check for updates", "reboot the router",
    "restart the app twice", "keep the machine plugged in overnight",
)
_TICKET_TEMPLATES = (
    "{date}. {customer} reports {symptoms} in {product}. The log shows error {code}. "
    "{agent} advised the customer to {fix}.",
    "Customer {customer} contacted support on {date} about {product}: {symptoms}. Error "
    "code {code} appeared each time. Resolution by {agent}: {fix}.",
    "Hi, this is {customer}. Since {date} my {product} keeps failing with \"{code}\" and "
    "I see {symptoms}. Reply from {agent}: please {fix}.",
    "Case opened on {date} for {customer}. Component: {product}. Observed: {symptoms}. "
    "Error: {code}. Fixed by {agent}, who told the customer to {fix}.",
    "Agent {agent} took a call from {customer} on {date}. The {product} client returned "
    "{code} together with {symptoms}. Suggested fix: {fix}.",
    "On {date}, {customer} wrote that {product} shows {code}. They also noticed {symptoms}. "
    "Workaround given by {agent}: {fix}.",
)
_SUPPORT_QUERY_TEMPLATES = (
    "Hi, I'm {asker}. I keep running into {symptoms}. Which error code is behind this?",
    "Lately I've been dealing with {symptoms}. What error code does this match?",
    "My name is {asker} and I am seeing {symptoms}. Which error should I look up?",
    "Our office has {symptoms}. What is the error code for this problem?",
    "Since last week I get {symptoms}. Do you know which error this is?",
    "Hello, {asker} here. The trouble is {symptoms}. What error code would that be?",
)


@dataclass(frozen=True)
class Issue:
    """An invented software issue; ``name`` is ``"<product> <code>"``, ``n_notes`` its
    tickets, ``frequency`` its Zipf weight."""

    name: str
    product: str
    code: str
    symptoms: tuple[str, ...]
    fix: str
    frequency: float
    n_notes: int


@dataclass(frozen=True)
class SupportTicket:
    """One support ticket (``id``, ``text``, ``unit`` are what ``notes.jsonl`` holds)."""

    id: str
    text: str
    unit: str
    customer: str
    issue: str


@dataclass(frozen=True)
class SupportDataset:
    """Issues, tickets and queries of one generated help desk."""

    seed: int
    issues: tuple[Issue, ...]
    tickets: tuple[SupportTicket, ...]
    queries: tuple[QAItem, ...]

    def describe(self) -> dict[str, Any]:
        """The public description written to ``issues.json``."""
        return {
            "generator": SUPPORT_GENERATOR_VERSION,
            "seed": self.seed,
            "answer": "code",
            "n_notes": len(self.tickets),
            "n_queries": len(self.queries),
            "n_issues": len(self.issues),
            "issues": [
                {"name": i.name, "product": i.product, "code": i.code,
                 "symptoms": list(i.symptoms), "fix": i.fix, "frequency": i.frequency,
                 "n_notes": i.n_notes}
                for i in self.issues
            ],
        }


class _SupportCoiner:
    """Invented lowercase stems, from ``random.Random``: not English words (nor plurals of
    one), unknown to wordfreq (Zipf < 1), never repeated."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.used: set[str] = set()

    def stem(self) -> str:
        rnd = self.rnd
        for _ in range(10_000):
            stem = rnd.choice(_ONSETS) + rnd.choice(_VOWELS)
            stem += rnd.choice(_INNER_ONSETS) + rnd.choice(_VOWELS)
            stem += rnd.choice(_CODAS)
            if (len(stem) >= 4 and stem not in self.used and not _english_or_plural(stem)
                    and _web_zipf(stem) < 1.0):
                self.used.add(stem)
                return stem
        raise RuntimeError("could not invent a new word")  # pragma: no cover

    def product(self) -> str:
        """A product name: lowercase ("vexora"), with digits ("kalo-2", "drumex360") or
        camelCase ("voraLink")."""
        rnd = self.rnd
        for _ in range(10_000):
            stem = self.stem()
            form = rnd.randrange(4)
            if form == 0:
                name = stem.rstrip("aeiouy") + rnd.choice(_PRODUCT_SUFFIXES)
            elif form == 1:
                name = f"{stem}-{rnd.randrange(2, 10)}"
            elif form == 2:
                name = f"{stem}{rnd.choice(('360', '365', '64', '2000', '7', '11'))}"
            else:
                name = stem + rnd.choice(_PRODUCT_WORDS)
            if name.lower() not in self.used and not is_english_word(name):
                self.used.add(name.lower())
                return name
        raise RuntimeError("could not invent a product name")  # pragma: no cover


def _web_zipf(word: str) -> float:
    """wordfreq's English Zipf frequency (0 for words it has never seen)."""
    from wordfreq import zipf_frequency

    return float(zipf_frequency(word, "en"))


def _english_or_plural(word: str) -> bool:
    """Whether ``word`` or the singular it may be (``-s``, ``-es``, ``-ies``) is English."""
    forms = [word, word.removesuffix("s"), word.removesuffix("es")]
    if word.endswith("ies"):
        forms.append(word[:-3] + "y")
    return any(is_english_word(form) for form in forms if form)


def _error_code(rnd: random.Random) -> str:
    form = rnd.randrange(4)
    if form == 0:
        return f"E-{rnd.randrange(3000, 10000)}"  # not a year: "E-1998" reads as one
    if form == 1:
        return f"0x{rnd.randrange(0x80000000, 0x100000000):08X}"
    if form == 2:
        return f"ERR_{rnd.choice(_CODE_WORDS)}_{rnd.randrange(1, 100):02d}"
    letters = "".join(rnd.choice("BCDFGHJKLMNPQRSTVWXZ") for _ in range(2))
    return f"{letters}{rnd.randrange(100, 1000)}"


def _support_symptom_sets(n_issues: int, rnd: random.Random) -> list[tuple[int, ...]]:
    """Unique sets of 2-3 symptoms, least-used symptoms first (random tie-break)."""
    n = len(SUPPORT_SYMPTOMS)
    usage = [0] * n
    taken: set[tuple[int, ...]] = set()
    chosen: list[tuple[int, ...]] = []
    for _ in range(n_issues):
        size = rnd.randint(2, 3)
        candidate: tuple[int, ...] = ()
        for attempt in range(100):
            order = sorted(range(n), key=lambda i: usage[i] + rnd.random() * (1.5 + attempt))
            candidate = tuple(sorted(order[:size]))
            if candidate not in taken:
                break
        while candidate in taken:
            candidate = tuple(sorted(rnd.sample(range(n), size)))
        taken.add(candidate)
        for i in candidate:
            usage[i] += 1
        shuffled = list(candidate)
        rnd.shuffle(shuffled)
        chosen.append(tuple(shuffled))
    return chosen


class _RandomNames:
    """Unique person names (first + last, a middle initial only when needed), from
    ``random.Random``."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.used: set[str] = set()

    def new(self) -> str:
        rnd = self.rnd
        name = _draw_name(self.used, rnd.choice, lambda: rnd.randrange(26))
        if name is None:
            raise ValueError("too many people for the built-in name lists")
        return name


def make_support_dataset(
    *,
    n_tickets: int = 2000,
    n_issues: int = 40,
    n_queries: int | None = None,
    seed: int = 0,
) -> SupportDataset:
    """Generate a fictitious help desk: issues, ``n_tickets`` tickets and the queries.

    Each issue has an invented product (lowercase, with digits, or camelCase), a unique
    error code ("E-4471", "0x8007A1F3", "ERR_SYNC_09", "KX203"), 2-3 plain-English symptoms
    (a unique set) and a fix. Issue weights follow Zipf's law (the r-th most common issue
    has weight proportional to 1/r, ranks shuffled), every issue gets one ticket when
    there are enough and the rest are drawn by weight, so some issues have few tickets.
    Each ticket names a unique customer (one privacy unit each: ``unit`` =
    ``customer-<k>``) and one of ``N_AGENTS`` agents. A query paraphrases an issue's
    symptoms without naming the product or the code; its answer is the issue's **error
    code** and ``patient`` a customer with that issue (for leakage checks). Queries cycle
    over the issues that have tickets as in the clinic set. Deterministic in all arguments
    (``random.Random(seed)``: public synthetic data, not DP noise).
    """
    if n_tickets < 1 or n_issues < 1:
        raise ValueError("n_tickets and n_issues must be positive")
    if n_issues > 1000:
        raise ValueError("n_issues must be at most 1000")
    if n_queries is not None and n_queries < 0:
        raise ValueError("n_queries must be non-negative")
    rnd = random.Random(seed)
    coiner = _SupportCoiner(rnd)
    products = [coiner.product() for _ in range(n_issues)]
    codes: list[str] = []
    while len(codes) < n_issues:
        code = _error_code(rnd)
        if code not in codes:
            codes.append(code)
    symptom_sets = _support_symptom_sets(n_issues, rnd)
    fixes: list[str] = []
    for _ in range(n_issues):
        for _attempt in range(100):
            fix = rnd.choice(_FIX_ACTIONS)
            if rnd.random() < 0.7:
                fix += " and " + rnd.choice(_FIX_FOLLOW_UPS)
            if fix not in fixes:
                break
        fixes.append(fix)
    ranks = list(range(1, n_issues + 1))
    rnd.shuffle(ranks)
    total_weight = sum(1.0 / r for r in ranks)
    frequencies = [1.0 / r / total_weight for r in ranks]
    if n_tickets >= n_issues:
        drawn = list(range(n_issues)) + rnd.choices(range(n_issues), weights=frequencies,
                                                     k=n_tickets - n_issues)
    else:
        drawn = rnd.choices(range(n_issues), weights=frequencies, k=n_tickets)
    rnd.shuffle(drawn)

    people = _RandomNames(rnd)
    agents = [people.new() for _ in range(N_AGENTS)]
    customers = [people.new() for _ in range(n_tickets)]
    start = _dt.date(2023, 1, 1).toordinal()
    width = max(5, len(str(n_tickets)))
    names = [f"{products[i]} {codes[i]}" for i in range(n_issues)]
    tickets: list[SupportTicket] = []
    counts = [0] * n_issues
    by_issue: dict[int, list[str]] = {}
    for k, i in enumerate(drawn):
        counts[i] += 1
        by_issue.setdefault(i, []).append(customers[k])
        symptoms = [SUPPORT_SYMPTOMS[s][0] for s in symptom_sets[i]]
        rnd.shuffle(symptoms)
        text = rnd.choice(_TICKET_TEMPLATES).format(
            customer=customers[k], agent=rnd.choice(agents), product=products[i],
            code=codes[i], symptoms=_join(symptoms), fix=fixes[i],
            date=_format_date(_dt.date.fromordinal(start + rnd.randrange(730)),
                              rnd.randrange(3)))
        tickets.append(SupportTicket(id=f"ticket-{k + 1:0{width}d}", text=text,
                                     unit=f"customer-{k + 1:0{width}d}",
                                     customer=customers[k], issue=names[i]))
    issues = tuple(
        Issue(name=names[i], product=products[i], code=codes[i],
              symptoms=tuple(SUPPORT_SYMPTOMS[s][0] for s in symptom_sets[i]), fix=fixes[i],
              frequency=frequencies[i], n_notes=counts[i])
        for i in range(n_issues))

    present = [i for i in range(n_issues) if counts[i] > 0]
    offsets = {i: rnd.randrange(len(by_issue[i])) for i in present}
    base_variant = {i: [rnd.randrange(2) for _ in symptom_sets[i]] for i in present}
    total = len(present) if n_queries is None else n_queries
    qwidth = max(4, len(str(total)))
    queries: list[QAItem] = []
    for k in range(total):
        i = present[k % len(present)]
        cycle = k // len(present)
        sset = symptom_sets[i]
        order = list(range(len(sset)))
        rnd.shuffle(order)
        phrases = [SUPPORT_SYMPTOMS[sset[s]][1][(base_variant[i][s] + (cycle >> s)) % 2]
                   for s in order]
        template = rnd.choice(_SUPPORT_QUERY_TEMPLATES)
        question = template.format(symptoms=_join(phrases),
                                   asker=people.new() if "{asker}" in template else "")
        pool = by_issue[i]
        queries.append(QAItem(id=f"q-{k + 1:0{qwidth}d}", question=question, answer=codes[i],
                              patient=pool[(offsets[i] + cycle) % len(pool)]))
    return SupportDataset(seed=seed, issues=issues, tickets=tuple(tickets),
                          queries=tuple(queries))


def write_support_dataset(
    out_dir: Path | str,
    n_tickets: int = 2000,
    n_issues: int = 40,
    seed: int = 0,
    *,
    n_queries: int | None = None,
) -> dict[str, Path]:
    """Generate a help desk and write ``notes.jsonl``, ``queries.jsonl`` and ``issues.json``.

    The layout of :func:`write_clinic_dataset`: ``notes.jsonl`` holds ``id, text, unit``
    (one ticket per customer); ``queries.jsonl`` holds ``id, question, answer`` (the error
    code), ``patient`` (a customer with that issue; the key the eval harness reads) and
    ``disease`` (the issue's name, ``"<product> <code>"``); ``issues.json`` the public
    description. Returns the paths keyed ``notes``, ``queries``, ``issues``. Same
    arguments, same bytes.
    """
    data = make_support_dataset(n_tickets=n_tickets, n_issues=n_issues, n_queries=n_queries,
                                seed=seed)
    issue_of = {i.code: i.name for i in data.issues}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"notes": out / "notes.jsonl", "queries": out / "queries.jsonl",
             "issues": out / "issues.json"}
    paths["notes"].write_text(
        "".join(_dumps({"id": t.id, "text": t.text, "unit": t.unit}) + "\n"
                for t in data.tickets),
        encoding="utf-8")
    paths["queries"].write_text(
        "".join(_dumps({"id": q.id, "question": q.question, "answer": q.answer,
                        "patient": q.patient, "disease": issue_of[q.answer]}) + "\n"
                for q in data.queries),
        encoding="utf-8")
    paths["issues"].write_text(json.dumps(data.describe(), ensure_ascii=False, indent=2)
                               + "\n", encoding="utf-8")
    return paths


# ------------------------------------------------------------------ loading QA sets
def load_qa_jsonl(path: Path | str) -> list[QAItem]:
    """Read an evaluation set: one JSON object per line with ``question`` (a non-empty
    string) and ``answer`` (a non-empty string) or ``answers`` (a non-empty list of
    non-empty strings: the query is answered when any of them is) or both (``answer`` is the
    primary answer and is counted among the answers; when ``answers`` lacks it, it is
    added first), optional ``id`` (string or integer, unique; default ``line-<n>``) and
    ``patient`` (string or null); other fields are ignored. Blank lines are skipped.
    Without ``answer`` the first of ``answers`` is the primary one; answers are stripped and
    exact repeats dropped. Raises :class:`DatasetError` naming the file and line; values are
    never quoted.
    """
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise DatasetError(file, None, "does not exist or is not a file")
    items: list[QAItem] = []
    seen: dict[str, int] = {}
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            where = f"line {line_no}"
            if line_no == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DatasetError(file, where, f"not valid UTF-8 (byte {error.start} of the "
                                                "line)") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as error:
                raise DatasetError(file, where,
                                   f"malformed JSON: {json_error_text(error)}") from None
            if not isinstance(obj, dict):
                raise DatasetError(file, where, "expected a JSON object")
            fields: dict[str, str] = {}
            for key in ("question", "answer"):
                value = obj.get(key)
                if key not in obj:
                    if key == "answer" and "answers" in obj:
                        continue
                    raise DatasetError(file, where, f"missing field {key!r}" + (
                        " (or 'answers')" if key == "answer" else ""))
                if not isinstance(value, str) or not value.strip():
                    raise DatasetError(file, where, f"field {key!r} must be a non-empty string")
                fields[key] = value.strip()
            answers: list[str] = []
            if "answers" in obj:
                listed = obj["answers"]
                if not isinstance(listed, list) or not listed or not all(
                        isinstance(a, str) and a.strip() for a in listed):
                    raise DatasetError(file, where, "field 'answers' must be a non-empty list of "
                                                    "non-empty strings")
                answers = [a.strip() for a in listed]
            primary = fields.get("answer", answers[0] if answers else "")
            alternatives = tuple(a for a in dict.fromkeys(answers) if a != primary)
            item_id = obj.get("id", f"line-{line_no}")
            if isinstance(item_id, bool) or not isinstance(item_id, str | int) \
                    or not str(item_id).strip():
                raise DatasetError(file, where, "field 'id' must be a non-empty string or an "
                                                "integer")
            item_id = str(item_id)
            if item_id in seen:
                raise DatasetError(file, where, f"duplicate id (first at line {seen[item_id]})")
            seen[item_id] = line_no
            patient = obj.get("patient")
            if patient is not None and not isinstance(patient, str):
                raise DatasetError(file, where, "field 'patient' must be a string or null")
            items.append(QAItem(id=item_id, question=fields["question"], answer=primary,
                                patient=patient or None, alternatives=alternatives))
    if not items:
        raise DatasetError(file, None, "no questions (empty file)")
    return items
