"""Per-document terms of any vocabulary, each with its role cue (facts mode, before release).

``document_terms`` gives, for each document, at most ``K_e`` distinct canonical *terms* with
the *role* its first occurrence is announced by: ordinary multi-word terms ("urinary tract
infection", "acid reflux", "high blood pressure"), capitalised names ("Lyme disease", "The
Silent Harbor"), terms with digits ("type 2 diabetes", "covid-19", "Blue Horizon 2") and the
invented names and codes of ``facts.phrases`` ("Kraxitis", "E-4471"). Nothing is excluded
for being an English word: a public prior only ranks the candidates, and DP partition
selection later keeps the terms that enough documents share.

Privacy rests on one property: a document's terms and roles are a fixed public function of
that document alone (its text, the public vocabulary V, the stopword list, ``wordfreq``'s
shipped frequencies, the public lexicon pack ``PACK`` and ``K_e``). Adding or removing
one document adds or removes its own <= K_e (term, role) pairs and changes no other
document's. Nothing here is released or logged.

The rule (all constants public, below; every word list, cue table and role table is read
from the lexicon pack ``PACK``, ``dpsynrag/resources/packs/en``: ``facts.packs``):

1. Tokens and clauses as in ``facts.phrases``: runs of letters/digits joined by inner
   apostrophes, hyphens, underscores or dots; a clause is a stretch of tokens separated by
   whitespace only (punctuation and blank lines end it); a sentence ends at . ! ? or a line
   break (not after "Dr", "Mrs", ...).
2. *Breaks* end a term: stopwords, role cue words (``ROLE_CUES``, their third-person forms
   included: ``cue_of``), calendar words (``DATE_WORDS``), adverbs of time and manner
   (``ADVERBS``), dose forms and schedules (``FORM_WORDS``: "tablets", "twice"), titles of
   people (``HONORIFICS``) and the capitalised name right after one ("Dr. Jane Doe": a
   person, never a term), lowercase verb forms in -ed or -ing whose stem is in V ("visited",
   "presenting"), common report verbs and irregular past forms (``REPORT_VERBS``,
   ``IRREGULAR_VERBS``: "told", "begun"), tokens mixing digits and letters
   that are not identifier-shaped ("45-year-old"). An -ing form right after a word ends the
   term instead of breaking it when the clause (or the list item: "and", "or") ends there
   ("food poisoning"; "pain radiating to" breaks). A capital letter or a letter with one or
   two digits after a word stays in its term ("hepatitis B", "vitamin B12 deficiency").
   Contractions of stopwords ("it's", "I'll"), status words (``STATUS_WORDS``: "active",
   "known"), adverbs in -ly of a word of V ("honestly") and a word in -s right after a
   subject pronoun ("that fits", ``SUBJECT_PRONOUNS``) break too; British -ise forms count
   as verb forms ("mobilising"); so does an adverb in -ily of a word of V in -y ("happily").
   A key right before "=" is a label, a break ("rec_type=consult", "genre=romance"), and
   "=" starts a field like ":" (``LABEL_MARKS``).
   A capitalised word that starts a sentence or a field (after ``LABEL_MARKS``) and is an
   ordinary word ("Patient", "Diagnosis") is treated as lowercase, unless a name word
   follows that is not a person's ("Hollow Forest 1964", "Oskar Lachance"; not "Patient
   John Smith"); other capitalised words are *name* words. Between
   two name words, a lowercase stopword of ``NAME_GLUE`` stays in the run ("Master of the
   House"); a capitalised stopword may start a name run mid-sentence ("The Silent Harbor"),
   and "the" or "a" right before a name word starts the name, also right after another run
   ("return The Endless Highway" names "the endless highway", as "see The Endless Highway"
   does).
3. A *candidate* is a maximal run of at most ``MAX_WORDS`` non-break tokens (longer runs are
   cut from the left), without leading bare numbers, holding at least one letter. One
   lowercase word after name words stays in the run ("Lyme disease", "Bell's palsy"; a second
   one starts a new run) and the name words alone are a second candidate ("lyme"); that word
   must be a word of V ("watching Broken Ferry rn" -> "broken ferry") and not follow the
   name's glue ("The Glass Canyon and residents"), and a person's name takes none ("Pavel
   Haddad pls", "Oskar Lachance sets up"). A run cut at ``MAX_WORDS`` loses its trailing
   glue. A word of at most ``SHORT_WORD`` letters outside V that is no open-vocabulary word
   (chat shorthand: "pls", "rn", "GP") is no candidate alone; a rare one ("UTI", "dvt") is.
   Open-vocabulary and ordinary words share a run ("strep throat", "plantar fasciitis").
   A one-word lowercase candidate must be rarer than
   ``COMMON_ZIPF`` ("clinic" is kept, "patient" is not); numbers alone never are.
4. The role of a candidate: walking back from its first occurrence inside its sentence, at
   most ``CUE_REACH`` tokens, over commas and "and"/"or" (a list: the words of earlier items
   are passed over; a comma after a passed verb form ends it), over stopwords and -ing/-ed
   words, over a titled person ("by Dr. Jane Doe:"), over one object word before "with",
   "as", "for" or "from" ("diagnosed the patient with"), over the colon right before it (a
   label) but no other punctuation or word, nor a form of "have" (``POSSESSIVE_VERBS``: "I
   saw Jane Roe, who has X"), the first role cue word met gives the role
   ("diagnosed with influenza" -> diagnosis; "presenting with fever, dry cough and body
   aches" -> symptom for all three; "Assessment: gout" -> diagnosis). After "for", "of" or
   "against" (the first preposition met walking back, past the earlier items of a list) a
   cue of ``PURPOSE_ROLES`` names its purpose ("treated for influenza", "metformin for type
   2 diabetes", "symptoms of hay fever" -> diagnosis; "a workaround for E-4685" -> error);
   the object a walk passes may have up to ``MAX_WORDS`` words ("treated for kidney stones
   with colchicine"). A word of ``ENCOUNTER_WORDS`` before "for" names the visit's reason
   ("seen for kidney stones" -> diagnosis), one of ``EPISODE_WORDS`` before "of" a
   diagnosis ("a flare of gout"), except "History of" opening a sentence: a note's history
   section, whose items are complaints ("History of fever with headache"). No cue before
   the term: a passive cue right
   after it ("her migraine was managed with", "influenza has been confirmed"), read by
   ``PASSIVE_ROLES``. A noun cue (``NOUN_CUES``: "film", "error", "message") reaches only
   what follows it directly or after its colon, or its purpose ("a film featuring X", "a
   film about X", "the film club" get no role from it); after "of" it names nothing ("Kind
   of film: romance"). A person's name (below) gets no
   title role. No cue: a word shaped like a drug name (``DRUG_STEMS``) makes the term a
   treatment, and "for" after one names a diagnosis ("on clarithromycin from Dr. Doe for
   pneumonia"); a word of an unannounced list's item (rule 6) is a description (the
   symptom role); otherwise the empty role.
5. Order (the public prior): by role in ``ROLES`` order (what a question asks for first:
   a diagnosis, a title, a product, an error; then treatments, symptoms; no role last), then
   open-vocabulary terms (rule 2 of ``facts.phrases``; not an identifier of words of V
   joined by "_" or "-", "watch_complete": a record's field or event) first, then by
   score = lowest
   wordfreq Zipf frequency among the term's words - ``WORD_BONUS`` x (words - 1), then first
   occurrence; name-only prefixes of rule 3 after their full run. Inside a rank, name runs
   come before ordinary words, and two demotions apply: a *heading* (the document's first
   words right before a date or a number, "Donor session 22 November 2024:"; or a
   sentence's first word alone, "Rebook in three months."; or a field's label of ordinary
   words right before its colon, "Score on the fridge whiteboard: 5") after the other terms, a
   *person's name* after the headings (``_person_shaped``: two or three name words, the
   first a given name of ``io.person_names`` or no word of V, the last a surname of those
   lists or no word of V; "Freya O."). In a document where no term has a naming role, its
   first uncued term that is neither (what a verb of saying or finding reports first:
   ``SAYING_VERBS``, "Dr. Doe says sleep apnea", "finally said it's pneumonia") takes
   ``UNANNOUNCED_RANK``: what a record is about
   may be written with no cue ("2023-03-24 / Jane Roe / 47 / strep throat / ..."). So does
   the next best one, after it (``UNANNOUNCED_PLACES`` = 2): the best may
   be a template's fixed words that come first ("Dear Sir or Madam, ... The Winter Signal
   ..."; "Merchant: STRMFLIX*RENTAL  Description: Broken Ferry"), and with one place the
   answer fell behind the symptoms and out of the first ``K_e``. A term that is a run of
   the first one's words, or holds it, names the same thing and is not the second ("the
   guylian range" and "guylian range"). The first ``K_e`` distinct terms are the
   document's.
6. Whole items of a symptom list (``_items``): "has been suffering from ringing in the ears,
   crackling sound when breathing and hair loss in circular patches" gives the three items
   whole, with the symptom role, besides the shorter terms of rule 3 ("ears"). A list is
   cut at punctuation and "and"/"or"; the cue the list follows gives every item its role; an
   item has 2 to ``MAX_ITEM_WORDS`` tokens, two content words or more, and no stopword but
   ``ITEM_GLUE`` ("in the", "when", "behind"), no name, number or date. A question paraphrases
   a whole symptom, not its last noun: a note that writes "ringing in the ears" is found,
   and told apart from another disease's "pain in the ears", where "ears" alone is not.
   A list of three items or more that no cue announces is a description too (``_items``:
   "Honestly, weight loss, chronic diarrhoea and mouth ulcers", "Hard scenes: a message
   from space, a rival chef and a small-town baker").
7. Records of other shapes: markup tags read as field labels
   (``_unmarked``: "<imp>gout</imp>" as "imp: gout"); clinical abbreviations are cues (Imp,
   DDx, HPI, Hx, Sx, Rx, Tx) and shorthand for no finding, words of hesitation and a
   lowercase "last" or "ago" are breaks; among the uncued terms, after what a verb of saying
   reports, what a titled clinician named just before did comes first
   (``_after_clinician``: "Dr. Roe landed on sinus infection"); a list's first item starts
   after its lead-in ("for all the"); a semicolon ends a cue's reach over a list; one name
   word of the public lists or a family word is a person (``_lone_name``), a channel after
   "#" a heading; a title role needs a capitalised word or a field; a number before a month
   is the date's; a lowercase shorthand label ("gnr") starts no term.
8. A name run that a lowercase "the" or "a" starts (rule 2: "after the Autumn Lantern 2
   showing") also offers the name without it, ranked as a name-only prefix: the notes that
   write the name alone release it, and the few that put "the" before it would otherwise
   hold an unreleased term only.
9. A lowercase word of at least ``TYPO_MIN_LETTERS`` letters rarer than
   ``TYPO_ZIPF`` that is one edit (an inserted, dropped or changed letter, or two
   neighbours swapped) from a word of V at least ``TYPO_NEIGHBOUR_ZIPF`` frequent is read as
   that word (``_misspelt``: "complaning of" is a cue, "docter Ana Lima" a person, "if
   wors" no term); invented names ("snurflepox") have no such neighbour. Among the
   unannounced terms of one kind (open-vocabulary words, names, ordinary words: rule 5),
   after what a verb of saying reports and what a clinician named just before did, what
   fills a field's value whole comes first (``_field_value``: "what the GP thinks: hay
   fever", "Details: sinus infection; symptoms were ...", "problems += gout", a table
   cell); a name still comes before ordinary words ("logged Seven Doors (Pavel Haddad).
   Genre tag: family comedy."). A dash ends a clinician's act ("Examining physician: Dr.
   Roe - fit to dive" says nothing Dr. Roe found). Attribution is a diagnosis cue ("which
   I attribute to tennis elbow"), and telling a verb of saying ("was telling it is
   shingles", "told us it's shingles").
10. A line that starts with a capital letter starts a new clause, so no
   term runs into it ("Line 2: gout\nLine 3: ..."; a wrapped line that goes on in
   lowercase still continues its term). A column's first word after a tab is capitalised
   like a sentence's ("Slide 3<TAB>Obs normal"); the input normalisation turns a run of two
   or more spaces into a tab (``io.text.normalise_text``: columns of an exported record).
   A field's value takes the role of its label's first word when no cue reaches it
   (``_label_role``: "Diagnosis submitted by provider: shingles"). "Compatible" is a
   diagnosis cue ("a clinical picture compatible with sinus infection"), and a verb of
   saying reaches over a pronoun and a form of "have" ("I was told that I had kidney
   stones"). A number with a unit ("1h 05m", "250mg", "6yo") is a measurement, no term.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dpsynrag.facts.packs import builtin_pack
from dpsynrag.facts.phrases import _IDENT, _NAME, _classify, _Info, _zipf, scan_tokens
from dpsynrag.io.person_names import given_names, surnames
from dpsynrag.transforms.keywords import _check_k, inflected_form
from dpsynrag.transforms.vocabulary import PublicVocabulary, stopwords

__all__ = ["COMMON_ZIPF", "MAX_WORDS", "NAME_ARTICLES", "NAMING_ROLES", "NO_ROLE_RANK", "PACK",
           "ROLES", "ROLE_CUES", "ROLE_RANK", "UNANNOUNCED_RANK", "DocumentTerms", "cue_form",
           "cue_of", "document_terms"]

#: The lexicon pack every word list, cue table and role table below is read from: the
#: built-in English pack (``dpsynrag/resources/packs/en``, ``facts.packs``). Its files are
#: named with their sha256 in a terms build's certificate (``accounting.public_data``).
PACK = builtin_pack()
_PACK = PACK

#: Longest term, in tokens.
MAX_WORDS = 4
#: Verbs of saying or finding: the term right after one (past ``SAID_GLUE``) is what a record
#: says something is, first among a record's uncued terms (rule 5; public).
SAYING_VERBS = _PACK.words("cues", "saying_verbs")
SAID_GLUE = _PACK.words("grammar", "said_glue")
#: Forms of "have": a role walk stops at one ("who has readings above 140/90", rule 4).
POSSESSIVE_VERBS = _PACK.words("grammar", "possessive_verbs")
#: A lowercase word outside V of at most this many letters is no term alone: chat shorthand
#: ("pls", "rn", "tbh"), not a name (public).
SHORT_WORD = 3
#: A one-word lowercase term must be rarer than this wordfreq Zipf frequency.
COMMON_ZIPF = 4.6
#: Ranking bonus per extra word: "urinary tract infection" before "urinary".
WORD_BONUS = 0.5
#: How far back (tokens, inside the sentence) a role cue is looked for.
CUE_REACH = 12

#: The public role lexicon: cue word -> role. Roles are what a reader needs to tell which
#: item answers which question; the lexicon covers clinical notes, support tickets and
#: reviews. It is public (part of the package), never derived from data.
ROLE_CUES: dict[str, str] = _PACK.table("cues", "cues")
#: Words of a record's status before what it names ("excluded, active kidney stones",
#: "known asthma", "possible gout"): lowercase, they end a term (public).
STATUS_WORDS = _PACK.words("breaks", "status_words")
#: Words of hesitation in speech ("it's um sinus infection", rule 7): a break in any case.
FILLER_WORDS = _PACK.words("breaks", "filler_words")
#: Lowercase words of elapsed time that end a term ("diagnosed with pneumonia last week",
#: "at long last", "two days ago", rule 7; a capitalised "Last" may start a title).
TIME_BREAKS = _PACK.words("breaks", "time_breaks")
#: Family words that name a person ("Things to tell Mum", rule 7): ranked like a person's
#: name (public).
KIN_WORDS = _PACK.words("names", "kin_words")
#: Clinical shorthand for findings that are none ("NKDA", "NAD", "PRN", "PMHx: nil sig",
#: rule 7; public): a break, never a term.
CLINICAL_SHORTHAND = _PACK.words("breaks", "clinical_shorthand")
#: The naming cues that are nouns ("the film X", "error code E-4471", "Product: X"): they
#: name only what follows them directly or after a colon, or their purpose after "for"/"of"
#: ("a fix for X" is a verb cue's), never a term reached over a verb form or another
#: preposition ("a horror film featuring a twin brother", "a film about a rival chef", "an
#: error message from space"): there the term is what the film or message holds.
NOUN_CUES = _PACK.words("cues", "noun_cues")
#: The tails of English contractions: a contraction of a stopword ("it's", "I'll", "that's",
#: "we've", "don't") is a stopword too (it ends a term; a role walk passes it: "reckons
#: it's hay fever").
CONTRACTION_TAILS = _PACK.words("grammar", "contraction_tails")
#: Bases of a negated contraction that are no stopword themselves ("don't", "won't",
#: "can't", "shan't"): a stopword too.
NEGATED_CONTRACTIONS = _PACK.words("grammar", "negated_contractions")
#: Capital letters alone that are words, not a suffix ("hepatitis B"; "A" starting a
#: sentence is the article).
LETTER_WORDS = _PACK.words("grammar", "letter_words")
#: Articles that may start the item of an unannounced list (rule 6).
LIST_ARTICLES = _PACK.words("grammar", "list_articles")
#: British spellings of verb endings, read as the American ones ("mobilising", rule 2).
BRITISH_ENDINGS = _PACK.table("shapes", "british_endings")
#: Endings of international nonproprietary drug names (the WHO's public stems, and a few
#: common endings of drug names): a word of a term no cue announces that ends in one, is at
#: least ``DRUG_MIN_LENGTH`` letters long and rarer than ``DRUG_ZIPF`` names a drug, so the
#: term gets the treatment role ("currently on clarithromycin", "| nitrofurantoin |"): what a
#: record is about is not the drug it names.
DRUG_STEMS = _PACK.sequence("shapes", "drug_stems")
DRUG_MIN_LENGTH = 7
DRUG_ZIPF = 3.5
#: The roles, in their public rank order (``ROLE_RANK``) and the column order of the role
#: histogram (public). A note writes them in ``fact_writer.ROLE_LABELS``'s order.
ROLES: tuple[str, ...] = _PACK.sequence("roles", "roles")
#: The roles that name what a record is about (public): the answer a reader looks for. They
#: share the first rank, in a document's choice of terms and in the clusters' anchor order,
#: so that among them the more specific name comes first (an open-vocabulary error code
#: before a template word tagged as a product: "restart the app", "the log shows error X").
NAMING_ROLES = _PACK.words("roles", "naming")
#: Each role's public rank (lower first): the naming roles share 0, the others their place
#: in ``ROLES``; a term without a role ranks ``NO_ROLE_RANK``, after all of them (before
#: the release a document's unannounced terms are mostly names of people and places and
#: common words; after it, one of them may take the place ``term_choice`` keeps for it).
ROLE_RANK = {role: 0 if role in NAMING_ROLES else r for r, role in enumerate(ROLES)}
NO_ROLE_RANK = len(ROLES)
#: The rank, right after the naming roles and before a treatment, symptom or credit, that a
#: term no cue announces takes where it may be what a record is about: the one place a
#: document keeps for it after the release (``term_choice``) and its anchor rank
#: (``roles.role_priority``).
UNANNOUNCED_RANK = 1
#: How many terms no cue announces take ``UNANNOUNCED_RANK`` before the release (rule 5) in
#: a document where no term has a naming role: the best one may be a record's heading or a
#: template's fixed words ("Dear Sir or Madam", a merchant's name on a card statement) that
#: stand before what it is about, and a second place keeps the answer among the document's
#: first ``K_e``.
UNANNOUNCED_PLACES = 2
#: The rank of a name-only prefix of a longer run ("lyme" of "Lyme disease"): with the
#: terms without a role.
PREFIX_RANK = NO_ROLE_RANK
#: Past forms of common irregular English verbs, and forms of common verbs of saying and
#: judging (public grammar, not data): like the -ed forms, they end a term ("Ivan
#: told friends", "finally caught X", "have begun ibuprofen"). Forms that are often
#: adjectives or nouns of a term ("broken", "frozen", "stolen", "lost", "left", "cut", "shot",
#: "set") are not listed.
IRREGULAR_VERBS = _PACK.words("breaks", "irregular_verbs")
#: Adverbs of time and manner that end a term ("finally caught X", public).
ADVERBS = _PACK.words("breaks", "adverbs")
#: Common report verbs that end a term (public).
REPORT_VERBS = _PACK.words("breaks", "report_verbs") | IRREGULAR_VERBS
#: Words that join the items of a list: a cue before the list holds for every item.
LIST_JOINERS = _PACK.words("grammar", "list_joiners")
#: Calendar words end a term (a date is no fact; public).
DATE_WORDS = _PACK.words("breaks", "months") | _PACK.words("breaks", "days")
#: The articles that may start a name run (rule 2: "return The Endless Highway"); after a
#: lowercase one the name alone is offered too (rule 8), and ``facts.term_choice`` places
#: that name where its form with the article stands.
NAME_ARTICLES = _PACK.sequence("names", "name_articles")
#: Month names: a number right before one is a day ("Crimson Roads 5 September", rule 7);
#: one before "yesterday" or "tonight" stays a title's ("Blue Whistle 1980 yesterday").
MONTH_WORDS = _PACK.words("breaks", "months")
#: Marks after which a field starts ("Translator: Javier Dubois", "| Quiet Ribbon |"): its
#: first word is capitalised like a sentence's ("Honestly, ...", "Background: ...").
LABEL_MARKS = _PACK.sequence("grammar", "label_marks")
#: Subject pronouns: a word in -s right after one is a verb ("that fits hay fever", "it
#: seems"), and ends a term.
SUBJECT_PRONOUNS = _PACK.words("grammar", "subject_pronouns")
#: Lowercase stopwords that may stay between two name words ("Master of the House").
NAME_GLUE = _PACK.words("names", "name_glue")
#: Titles of people: a break, and the name run right after one is a person's, not a term.
HONORIFICS = _PACK.words("names", "honorifics")
#: Dose forms and schedules end a term: "oseltamivir tablets twice a day" -> "oseltamivir"
#: (public; the drug, not its form, is the fact that documents share).
FORM_WORDS = _PACK.words("breaks", "form_words")
#: Prepositions over which a role reaches past one object word ("diagnosed the patient with").
OBJECT_PREPOSITIONS = _PACK.words("grammar", "object_prepositions")
#: Prepositions that introduce a term (the first one met walking back from it, past the
#: earlier items of its list, decides whether a cue's purpose role applies).
PREPOSITIONS = _PACK.words("grammar", "prepositions")
#: Prepositions after which a cue names its purpose, not its object ("treated for X").
PURPOSE_PREPOSITIONS = _PACK.words("grammar", "purpose_prepositions")
#: The role of a term a cue names as its purpose (public grammar of clinical and support
#: writing): what is treated is a diagnosis ("treated for influenza", "metformin for type 2
#: diabetes", "treatment of gout"), what is fixed is an error ("a workaround for E-4685"),
#: and "symptoms of X" name the disease. Cues not listed keep their role after "for"/"of"
#: ("a course of amoxicillin", "complains of a cough", "a review of Copper Lantern").
PURPOSE_ROLES: dict[str, str] = _PACK.table("cues", "purpose")
#: The role of a term that a passive cue acts on, where it differs from the cue's own: what
#: is treated or managed is a diagnosis ("her migraine was managed with sumatriptan"); what
#: "was fixed" may be a product as well as an error, so it gets no role; a drug that "was
#: prescribed" keeps the treatment role.
PASSIVE_ROLES: dict[str, str] = _PACK.table("cues", "passive")
#: Words of a visit that name its reason after "for" ("seen for kidney stones", "admitted
#: for pneumonia", "follow-up for hay fever"): a diagnosis. Without "for" they give no role.
#: Lowercase, they end a term ("routine checkup" is no fact).
ENCOUNTER_WORDS = _PACK.words("cues", "encounter_words")
#: Words that name a diagnosis after "of" ("a case of shingles", "a flare of gout", "a
#: history of asthma", "a bout of food poisoning"). Lowercase, they end a term.
EPISODE_WORDS = _PACK.words("cues", "episode_words")
#: The visit and episode words: lowercase, they end a term.
VISIT_WORDS = ENCOUNTER_WORDS | EPISODE_WORDS
#: Forms of "be" and "have" that make a cue after a term passive ("influenza was diagnosed",
#: "her migraine has been managed with sumatriptan": the term is what the cue acts on).
PASSIVE_AUXILIARIES = _PACK.words("grammar", "passive_auxiliaries")
#: Longest symptom item, in tokens ("hair loss in circular patches", rule 6).
MAX_ITEM_WORDS = 6
#: Stopwords that may stay inside a symptom item ("ringing in the ears", "pain when chewing").
ITEM_GLUE = _PACK.words("grammar", "item_glue")
#: The roles whose list items are kept whole (rule 6): descriptions, not names (a note writes
#: them as released, lowercase: ``fact_writer.role_sentences``).
ITEM_ROLES = _PACK.words("roles", "items")


@functools.cache
def cue_form(canon: str) -> str | None:
    """The lexicon's form of a cue word (``ROLE_CUES``): the word itself, or for the
    third-person form of a cue verb its -ed form ("suspects" -> "suspected", "watches" ->
    "watched"); None for any other word ("patches" is no form of the cue "patch")."""
    if canon in ROLE_CUES:
        return canon
    if len(canon) > 3 and canon.endswith("s") and not canon.endswith("ss"):
        for stem in (canon[:-2], canon[:-1]) if canon.endswith("es") else (canon[:-1],):
            for form in (stem + "ed", stem + "d"):
                if form in ROLE_CUES:
                    return form
    return None


def cue_of(canon: str) -> str | None:
    """The role a cue word announces (``ROLE_CUES``, through ``cue_form``: a cue verb in the
    third person included); None for any other word."""
    form = cue_form(canon)
    return None if form is None else ROLE_CUES[form]


@dataclass(frozen=True)
class DocumentTerms:
    """One document's terms (canonical, at most K_e, ranked) and the role of each ("" when
    no cue announces it)."""

    terms: tuple[str, ...]
    roles: tuple[str, ...]

    def as_json(self) -> list[list[str]]:
        return [[t, r] for t, r in zip(self.terms, self.roles, strict=True)]

    @classmethod
    def from_json(cls, pairs: Sequence[Sequence[str]]) -> DocumentTerms:
        return cls(tuple(str(p[0]) for p in pairs), tuple(str(p[1]) for p in pairs))


@dataclass(frozen=True)
class _Tok:
    info: _Info
    start: int
    clause: int  # index of the clause the token is in
    sentence: int  # index of the sentence the token is in
    gap: str  # the first non-space character between the previous token and this one
    kind: int  # one of the kinds below
    field: bool = False  # the first token after a colon or a bar (``LABEL_MARKS``)
    column: bool = False  # the first token after a tab (a column's, rule 10)


# 0 break, 1 word, 2 name, 3 number, 4 glue (a name-run stopword), 5 identifier, 6 suffix (a
# capital letter or a letter with digits: "hepatitis B", "vitamin B12"), 7 a lowercase -ing
# form (a break unless it ends a term: "food poisoning."), 8 honorific ("Dr")
_BREAK, _WORDK, _NAMEK, _NUMK, _GLUEK, _IDENTK, _SUFFIXK, _INGK, _HONORK = range(9)
_SKIPPABLE = (_BREAK, _INGK)  # verb forms a role walk passes ("complained of burning ...")


def document_terms(texts: Sequence[str], vocab: PublicVocabulary, K_e: int
                   ) -> list[DocumentTerms]:
    """For each document, at most ``K_e`` distinct terms with their roles (module docstring).

    A function of each document and public inputs only; deterministic.
    """
    K_e = _check_k(K_e)
    stop = stopwords()
    cache: dict[str, _Info] = {}

    def info(token: str) -> _Info:
        found = cache.get(token)
        if found is None:
            found = _classify(token, vocab, stop)
            meant = _misspelt(token, found, vocab)
            if meant is not None:  # "complaning", "docter": read as the word meant (rule 9)
                found = _classify(meant, vocab, stop)
            if not found.stop and _contracted_stopword(found.canon, stop):
                found = dataclasses.replace(found, stop=True)
            cache[token] = found
        return found

    def verb_form(canon: str) -> bool:
        if canon in REPORT_VERBS:
            return True
        if not canon.isalpha() or len(canon) < 4:
            return False
        if canon.endswith("ly"):  # an adverb of a word of V: "honestly", "mildly", "happily"
            return len(canon) > 6 and (canon[:-2] in vocab.index or (
                canon.endswith("ily") and canon[:-3] + "y" in vocab.index))
        if not canon.endswith(("ed", "ing")):
            return False
        if inflected_form(canon, vocab.index) is not None:
            return True
        # British spelling: "mobilising", "recognised"
        for british, american in BRITISH_ENDINGS.items():
            if canon.endswith(british):
                return inflected_form(canon[:-len(british)] + american,
                                      vocab.index) is not None
        return False

    def known(canon: str) -> bool:
        return inflected_form(canon, vocab.index) is not None

    return [_terms_of(text, info, verb_form, known, K_e) for text in texts]


#: A lowercase word rarer than this Zipf frequency (rule 9) ...
TYPO_ZIPF = 2.0
#: ... with a word of V at least this frequent one edit away is that word misspelt.
TYPO_NEIGHBOUR_ZIPF = 4.0
#: Shortest misspelt word (rule 9): shorter ones have too many neighbours ("sez", "bak").
TYPO_MIN_LETTERS = 4
_LETTERS = _PACK.text("shapes", "alphabet")


def _misspelt(token: str, found: _Info, vocab: PublicVocabulary) -> str | None:
    """The frequent word a rare lowercase word misspells (rule 9), or None: the most
    frequent word of V or an inflection of one, of Zipf frequency at least
    ``TYPO_NEIGHBOUR_ZIPF``, one insertion, deletion, substitution or swap of two
    neighbouring letters away from a word of at least ``TYPO_MIN_LETTERS`` ASCII letters
    rarer than ``TYPO_ZIPF`` ("complaning" -> "complaining", "docter" -> "doctor",
    "pateint" -> "patient"). A function of the token and public data only."""
    if not (token.isascii() and token.isalpha() and token.islower()) \
            or len(token) < TYPO_MIN_LETTERS or found.prior >= TYPO_ZIPF:
        return None
    return _frequent_neighbour(token, vocab.index)


def _frequent_neighbour(word: str, known: dict[str, int]) -> str | None:
    edits = {word[:i] + word[i + 1:] for i in range(len(word))}
    edits |= {word[:i] + word[i + 1] + word[i] + word[i + 2:] for i in range(len(word) - 1)}
    for i in range(len(word) + 1):
        for letter in _LETTERS:
            edits.add(word[:i] + letter + word[i:])
            if i < len(word):
                edits.add(word[:i] + letter + word[i + 1:])
    edits.discard(word)
    scored = [(_zipf(edit), edit) for edit in sorted(edits)
              if inflected_form(edit, known) is not None]
    best = max(scored, default=(0.0, ""))
    return best[1] if best[0] >= TYPO_NEIGHBOUR_ZIPF else None


def _contracted_stopword(canon: str, stop: frozenset[str]) -> bool:
    """Whether ``canon`` is a contraction of a stopword ("it's", "i'll", "don't")."""
    base, mark, tail = canon.partition("'")
    if not mark:
        return False
    if tail == "t" and base.endswith("n"):
        return base in stop or base[:-1] in stop or base in NEGATED_CONTRACTIONS
    return base in stop and tail in CONTRACTION_TAILS


def _tokens(text: str, info: Callable[[str], _Info], verb_form: Callable[[str], bool],
            known: Callable[[str], bool]) -> list[_Tok]:
    """The document's tokens with their clause, sentence and kind (rule 1-2)."""
    out: list[_Tok] = []
    joins: list[int] = []
    clause = sentence = -1
    for match, tok, gap, new_clause, initial in scan_tokens(text, info):
        # a line that starts with a capital letter is a new field or sentence, not a wrapped
        # line of the one before ("Line 2: gout\nLine 3: ...", rule 10)
        clause += new_clause or ("\n" in gap and match.group()[:1].isupper())
        sentence += initial
        # a field's first word after a colon or a bar is capitalised like a sentence's
        field = gap.strip().rstrip("\"'“")[-1:] in LABEL_MARKS
        column = "\t" in gap  # a column's first word, after a tab (rule 10)
        # and so is a column's after a tab ("Slide 3<TAB>Obs normal", rule 10)
        kind = _kind(match.group(), tok, initial or field or column, verb_form)
        if kind in (_NAMEK, _GLUEK) and out and out[-1].kind == _HONORK and (
                not new_clause or out[-1].info.canon in HONORIFICS) and not initial:
            kind = _HONORK  # "Dr. Jane Doe": a person's name goes with the title
        if kind == _WORDK and out and out[-1].info.canon in SUBJECT_PRONOUNS \
                and out[-1].clause == clause and tok.canon.endswith("s") \
                and not tok.canon.endswith("ss"):
            kind = _BREAK  # "that fits X", "it seems": a verb after its subject
        if kind == _NAMEK and out and out[-1].kind in (_WORDK, _INGK) \
                and out[-1].clause == clause \
                and out[-1].sentence == sentence and _initial_capital(out, text):
            joins.append(len(out) - 1)
        if gap.strip()[:1] == "=" and out:  # "rec_type=consult": the key is a label
            out[-1] = dataclasses.replace(out[-1], kind=_BREAK)
        out.append(_Tok(tok, match.start(), clause, sentence, gap.strip()[:1], kind, field,
                        column))
    # "Hollow Forest 1964 | thriller", "Oskar Lachance u genius": a sentence's (or a
    # field's) first word, capitalised, before a name word is a word of that name, unless
    # the name words after it are a person's ("Patient John Smith", "Student Rania Chowdhury")
    for j in joins:
        names = [j + 1]
        while names[-1] + 1 < len(out) and out[names[-1] + 1].kind == _NAMEK \
                and out[names[-1] + 1].clause == out[j].clause:
            names.append(names[-1] + 1)
        if not _person_shaped(out, names, known):
            out[j] = dataclasses.replace(out[j], kind=_NAMEK)
    return out


def _initial_capital(out: list[_Tok], text: str) -> bool:
    """Whether the last token so far starts its sentence, a field (``LABEL_MARKS``) or a
    column (after a tab) and is capitalised."""
    last = out[-1]
    return (len(out) == 1 or out[-2].sentence != last.sentence or last.field
            or last.column) and text[last.start].isupper()


def _kind(token: str, tok: _Info, initial: bool, verb_form: Callable[[str], bool]) -> int:
    canon = tok.canon
    if not any(c.isalpha() for c in canon):
        return _NUMK
    capital = token[:1].isupper()
    if canon in HONORIFICS:
        return _HONORK
    if len(token) == 1 and capital and not initial and token not in LETTER_WORDS:
        return _SUFFIXK  # "hepatitis B" ("A" starting a sentence is the article)
    if len(canon) <= 3 and canon[0].isalpha() and canon[1:].isdigit():
        return _SUFFIXK  # "B12", "D3"
    if tok.stop:
        if "'" in canon:
            return _BREAK  # "it's", "I'll"
        return _GLUEK if (canon in NAME_GLUE or (capital and not initial)) else _BREAK
    if cue_of(canon) or canon in DATE_WORDS or canon in FORM_WORDS or canon in ADVERBS \
            or (canon in VISIT_WORDS and (initial or not capital)):
        return _BREAK
    if canon in STATUS_WORDS and (initial or not capital):
        return _BREAK  # "active kidney stones" -> "kidney stones"
    if canon in FILLER_WORDS or canon in CLINICAL_SHORTHAND or (
            canon in TIME_BREAKS and not capital):
        return _BREAK  # "it's um sinus infection", "pneumonia last week", "NKDA"
    if (initial or not capital) and verb_form(canon):
        return _INGK if canon.endswith("ing") and canon not in REPORT_VERBS else _BREAK
    if tok.kind == _IDENT:
        if _MEASURE.fullmatch(canon):
            return _BREAK  # "1h 05m", "250mg", "3yo": a number with its unit (rule 10)
        return _IDENTK
    if canon[:1].isdigit() and tok.kind != _IDENT:
        return _BREAK  # "45-year-old", "3rd" (but "covid-19" and identifiers are terms)
    if capital and tok.kind == _NAME and (tok.is_open or not initial):
        return _NAMEK
    return _WORDK


def _runs(tokens: list[_Tok], known: Callable[[str], bool]) -> list[list[int]]:
    """Maximal runs of term tokens inside one clause (rule 2-3), as token indices."""
    runs: list[list[int]] = []
    run: list[int] = []

    def score(i: int) -> bool:  # "rated Quiet Ribbon 4/5": the 4 is a score, not a name's
        return tokens[i].kind == _NUMK and (
            (i + 1 < len(tokens) and tokens[i + 1].gap == "/" and tokens[i + 1].kind == _NUMK)
            or (i > 0 and tokens[i - 1].kind == _NUMK))

    def dated(i: int) -> bool:  # "Crimson Roads 5 September 2023": the 5 is the date's
        # (a day has one or two digits: "Hollow Forest 1964 January 31" keeps its year)
        return tokens[i].kind == _NUMK and i + 1 < len(tokens) \
            and tokens[i + 1].info.canon in MONTH_WORDS and len(tokens[i].info.canon) <= 2

    def flush() -> None:
        while run and (tokens[run[-1]].kind == _GLUEK  # glue only between name words
                       or (tokens[run[-1]].kind == _NUMK  # "aged 34", not "Blue Horizon 2"
                           and (score(run[-1]) or dated(run[-1])
                                or not any(tokens[i].kind == _NAMEK for i in run)))):
            run.pop()
        while run and tokens[run[0]].kind == _NUMK:
            run.pop(0)
        if run:
            runs.append(list(run))
        run.clear()

    for i, tok in enumerate(tokens):
        if run and tokens[run[-1]].clause != tok.clause:
            flush()
        if tok.kind in (_BREAK, _HONORK):
            flush()
            continue
        if tok.kind == _INGK:  # "food poisoning" at a term's end; "pain radiating to": a break
            after = tokens[i + 1] if i + 1 < len(tokens) else None
            ends = after is None or after.clause != tok.clause \
                or after.info.canon in LIST_JOINERS
            if run and tokens[run[-1]].kind == _WORDK and ends:
                run.append(i)
            flush()
            continue
        if tok.kind == _SUFFIXK:
            if run and tokens[run[-1]].kind in (_WORDK, _NAMEK):
                run.append(i)  # "hepatitis B", "vitamin B12 deficiency"
            else:
                flush()
                if tok.info.kind == _IDENT:  # "B12" alone is an identifier term
                    run.append(i)
                    flush()
            continue
        if tok.kind == _GLUEK:
            # glue joins only after a name word (or glue) and, mid-sentence, a capitalised
            # stopword may start a name run; it is trimmed at the run's end
            after_name = bool(run) and tokens[run[-1]].kind in (_NAMEK, _GLUEK)
            starts_name = i + 1 < len(tokens) and tokens[i + 1].kind == _NAMEK \
                and tokens[i + 1].clause == tok.clause and tok.info.canon in NAME_ARTICLES
            if after_name:
                run.append(i)
            elif starts_name:  # also right after another run ("return The Endless Highway")
                flush()
                run.append(i)
            else:
                flush()
            continue
        if tok.kind == _IDENTK:  # an identifier is a term of its own ("e-4471")
            flush()
            run.append(i)
            flush()
            continue
        if run and tok.kind == _NAMEK and tokens[run[-1]].kind == _WORDK:
            flush()  # "patient John Smith": the name starts its own run
        elif run and tok.kind == _WORDK and (
                tokens[run[-1]].kind in (_WORDK, _SUFFIXK, _GLUEK)
                or not known(tok.info.canon)) and any(tokens[j].kind == _NAMEK for j in run):
            # a name takes one lowercase word of V ("Lyme disease"), not more, none after
            # its glue ("The Glass Canyon and residents") and no word outside V ("Broken
            # Ferry rn")
            flush()
        run.append(i)
    flush()
    return runs


#: A markup tag: ``<imp>``, ``<who age="38">``, ``</imp>``, ``<br/>`` (not ``<Mira Horvath>``,
#: a chat nickname: a tag's attributes have values).
_MARKUP_TAG = re.compile(r"<(/?)([A-Za-z][\w.-]*)"
                         r"((?:\s+[\w:.-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))*)\s*(/?)>")


def _unmarked(text: str) -> str:
    """The text with its markup read as fields (rule 7): an opening tag is its name as a
    label ("<imp>sinus infection</imp>" reads "imp: sinus infection."), a closing or empty
    tag ends a sentence, attributes are dropped."""
    def field(match: re.Match[str]) -> str:
        if match.group(1) or match.group(4):
            return ". "
        return f". {match.group(2)}: "
    return _MARKUP_TAG.sub(field, text)


def _terms_of(text: str, info: Callable[[str], _Info], verb_form: Callable[[str], bool],
              known: Callable[[str], bool], K_e: int) -> DocumentTerms:
    text = _unmarked(unicodedata.normalize("NFC", text))
    tokens = _tokens(text, info, verb_form, known)
    items, described = _items(tokens)
    # term -> (role rank, demotion, class, score, start, first token)
    best: dict[str, tuple[int, int, int, float, int, int]] = {}
    roles: dict[str, str] = {}
    last_token: dict[str, int] = {}  # term -> the last token of its best occurrence

    def add(piece: list[int], penalty: int, given_role: str | None = None) -> None:
        content = [tokens[i].info for i in piece
                   if tokens[i].kind in (_WORDK, _NAMEK, _IDENTK, _SUFFIXK, _INGK)]
        if not content:
            return
        if len(piece) == 1 and tokens[piece[0]].kind == _WORDK and (
                (content[0].prior >= COMMON_ZIPF and not content[0].is_open)
                or (len(content[0].canon) <= SHORT_WORD and not known(content[0].canon)
                    and not content[0].is_open)):
            return  # a common word alone; a short word outside V alone ("pls", "rn", not "uti")
        term = " ".join(tokens[i].info.canon for i in piece)
        opened = any(tokens[i].info.is_open and not _plain_identifier(tokens[i].info, known)
                     for i in piece)
        score = min(t.prior for t in content) - WORD_BONUS * (len(content) - 1)
        person = _person_shaped(tokens, piece, known) or (
            len(piece) == 1 and _lone_name(tokens[piece[0]], known))
        if term in roles and (roles[term] or given_role is None):
            role = roles[term]
        else:  # a whole list item gives its list's role to a term that had none
            role = given_role if given_role is not None else (
                _role(tokens, piece[0]) or _passive_role(tokens, piece[-1]))
            if role == "title" and (person or not (
                    tokens[piece[0]].field or any(tokens[i].kind == _NAMEK for i in piece))):
                # a person's name is no title ("picked X, directed by Kofi Uchenna"), nor
                # are lowercase words outside a field ("picked from the recommendations"; a
                # field "Film: comedy" may name one in lowercase, rule 7)
                role = ""
            elif role != "treatment" and not person and _drug_shaped(content):
                role = "treatment"
            elif not role and not person and piece[0] in described:
                role = _DESCRIBED_ROLE  # a word of an unannounced list's item
        rank = PREFIX_RANK if penalty else ROLE_RANK.get(role, NO_ROLE_RANK)
        demotion = PERSON_DEMOTION if person else (
            HEADING_DEMOTION if _heading(tokens, piece) or tokens[piece[0]].gap == "#"
            else 0)  # a channel or tag ("has joined #moviechat") heads a record (rule 7)
        named = any(tokens[i].kind == _NAMEK for i in piece)
        kind_class = 0 if opened else 3 if penalty else 1 if named else 2
        key = (rank, demotion, kind_class, score, tokens[piece[0]].start, piece[0])
        # an occurrence with a role beats one without (a list item's "symptom" over the bare
        # term's none, though none ranks first); among equals the better key
        if term not in best or (bool(role) > bool(roles[term])) or (
                bool(role) == bool(roles[term]) and key < best[term]):
            roles[term] = role
            best[term] = key
            last_token[term] = piece[-1]

    for run in _runs(tokens, known):
        names = 0
        while names < len(run) and tokens[run[names]].kind == _NAMEK:
            names += 1
        if 2 <= names < len(run) and tokens[run[names]].kind == _WORDK \
                and _person_shaped(tokens, run[:names], known):
            run = run[:names]  # "Pavel Haddad pls", "Oskar Lachance sets up": the person
        if len(run) > 1 and _shorthand(tokens[run[0]], known):
            run = run[1:]  # "gnr crime drama", "abt rival chef": a shorthand label (rule 7)
        for start in range(0, len(run), MAX_WORDS):
            piece = run[start:start + MAX_WORDS]
            while piece and (tokens[piece[0]].kind == _NUMK or (
                    tokens[piece[0]].kind == _GLUEK and start > 0)):
                piece = piece[1:]
            while piece and tokens[piece[-1]].kind == _GLUEK:
                piece = piece[:-1]  # "The Glass Canyon and" (a run cut at MAX_WORDS)
            add(piece, 0)
            if len(piece) > 1 and tokens[piece[0]].kind == _GLUEK \
                    and text[tokens[piece[0]].start].islower():
                # "after the Autumn Lantern 2 showing": also the name without the article, as
                # the notes that write it alone release it (rule 8)
                add(piece[1:], 1)
            name_part = [i for i in piece if tokens[i].kind in (_NAMEK, _GLUEK)]
            while name_part and tokens[name_part[-1]].kind == _GLUEK:
                name_part.pop()
            if name_part and len(name_part) < len(piece) and piece[:len(name_part)] == name_part:
                add(name_part, 1)  # "Lyme disease" -> also "lyme"
    for piece, role in items:
        add(piece, 0, role)
    # in a document that no cue says is about something (no naming role), the best two
    # unannounced terms that are neither headings nor people's names may be what it is
    # about: they take the places after the naming roles (``UNANNOUNCED_RANK``, rule 5)
    unannounced = [t for t, key in best.items()
                   if key[0] == NO_ROLE_RANK and key[1] == 0 and key[2] < 3 and not roles[t]]
    if unannounced and not NAMING_ROLES & set(roles.values()):
        # what someone says or finds it is comes first ("Dr. Doe says sleep apnea", "finally
        # said it's pneumonia", "spotted kidney stones")
        # and then what a clinician named just before it did ("Dr. Doe landed on sinus
        # infection", "Dr Roe is going with kidney stones", rule 7), and then what fills a
        # field's value whole ("what the GP thinks: hay fever", "Details: gout; ...", rule 9)
        firsts = sorted(unannounced, key=lambda t: (
            not _said(tokens, best[t][5]), not _after_clinician(tokens, best[t][5]),
            best[t][2], not _field_value(tokens, best[t][5], last_token[t]), best[t]))
        chosen: list[str] = []
        for term in firsts:  # a part of a chosen term names the same thing: not a second
            if len(chosen) < UNANNOUNCED_PLACES and not any(
                    _word_part(term, other) or _word_part(other, term) for other in chosen):
                # the second sorts right after the first (its demotion slot holds 1)
                best[term] = (UNANNOUNCED_RANK, len(chosen), *best[term][2:])
                chosen.append(term)
    ranked = sorted(best, key=lambda term: best[term])[:K_e]
    return DocumentTerms(tuple(ranked), tuple(roles[t] for t in ranked))


def _word_part(part: str, whole: str) -> bool:
    """``part`` is ``whole`` or a run of its words ("guylian range" of "the guylian range")."""
    return f" {part} " in f" {whole} "


#: Demotions of an unannounced term inside its role rank (public prior, rule 5): a heading
#: ("Rugby club medical log, 2024-01-19:") after the other terms, a person's name after it.
HEADING_DEMOTION = 1
PERSON_DEMOTION = 2
#: The role of the words of an unannounced list's items (rule 6): a description.
_DESCRIBED_ROLE = _PACK.text("roles", "described")


def _person_shaped(tokens: list[_Tok], piece: list[int], known: Callable[[str], bool]
                   ) -> bool:
    """Whether a term is a person's name (rule 5): two or three name words first, no
    digit, the first a given name of the public lists (``io.person_names``) or no word of
    V, and the last
    (its possessive "'s" taken off) a surname of those lists or no word of V ("Oskar
    Lachance", "John Smith", "Pavel Haddad's distributor"), nothing after them but one word
    after a possessive; or a given name and an initial ("Freya O."). A title of ordinary
    words ("Quiet Ribbon", "Silver Feathers") is none."""
    names = 0
    while names < len(piece) and tokens[piece[names]].kind == _NAMEK:
        names += 1
    first = tokens[piece[0]].info.canon
    if not names or not (first in given_names() or (first.isalpha() and not known(first))):
        return False
    if names == 1:  # "Freya O." (an initial)
        return len(piece) == 2 and tokens[piece[1]].kind == _SUFFIXK \
            and len(tokens[piece[1]].info.canon) == 1
    last = tokens[piece[names - 1]].info.canon
    possessive = last.endswith("'s")
    if names > 3 or (names < len(piece) and not (possessive and names + 1 == len(piece))):
        return False
    surname = last[:-2] if possessive else last
    return surname.replace("-", "").isalpha() and (
        surname in surnames() or not known(surname))


def _shorthand(tok: _Tok, known: Callable[[str], bool]) -> bool:
    """Whether a token is a lowercase shorthand label: at most ``SHORT_WORD`` letters, no
    word of V ("gnr", "abt", "dir")."""
    canon = tok.info.canon
    return tok.kind == _WORDK and canon.isalpha() and len(canon) <= SHORT_WORD \
        and not known(canon)


def _lone_name(tok: _Tok, known: Callable[[str], bool]) -> bool:
    """Whether one capitalised word alone is a person (rule 7): a family word ("Mum") or a
    given name or surname of the public lists that is no word of V ("Bruno" and "Quispe" of
    "Bruno A. Quispe", where the initial's full stop parts them)."""
    canon = tok.info.canon
    if canon in KIN_WORDS:
        return True
    name = canon[:-2] if canon.endswith("'s") else canon
    return tok.kind == _NAMEK and name.isalpha() and not known(name) and (
        name in given_names() or name in surnames())


def _said(tokens: list[_Tok], first: int) -> bool:
    """Whether the term whose first token is ``first`` is what a verb of saying or finding
    (``SAYING_VERBS``) right before it reports, in the same sentence, past at most three
    words of ``SAID_GLUE`` ("said it's pneumonia", "says sleep apnea", "believe this is
    hay fever"; not "said this musical")."""
    j = first - 1
    while j >= 0 and first - j <= 3 and tokens[j].info.canon in SAID_GLUE \
            and tokens[j].sentence == tokens[first].sentence:
        if tokens[j].info.canon == "this" and tokens[j + 1].info.canon not in ("is", "was"):
            return False  # "said this musical": a thing named before, not a finding
        j -= 1
    return j >= 0 and tokens[j].sentence == tokens[first].sentence \
        and tokens[j].info.canon in SAYING_VERBS and not any(
            tokens[i].gap not in ("", "'") for i in range(j + 1, first + 1))


#: A number with a unit of time, size, dose or age ("05m", "3h", "250mg", "6yo", "2wks"):
#: a measurement, no term (rule 10; public).
_MEASURE = re.compile(
    r"\d+(?:[.,]\d+)?(?:"
    + "|".join(re.escape(unit) for unit in _PACK.sequence("shapes", "measure_units")) + ")")
#: Dashes that part a clinician's name from what follows (rule 9: "Examining physician:
#: Dr. Roe - fit to dive" reports no act of hers).
CLAUSE_DASHES = _PACK.words("grammar", "clause_dashes")
#: How many tokens a clinician's act may take between the name and the term (rule 7).
CLINICIAN_REACH = 6


def _after_clinician(tokens: list[_Tok], first: int) -> bool:
    """Whether the term whose first token is ``first`` is what a clinician named right
    before it did, in the same sentence (rule 7): walking back at most ``CLINICIAN_REACH``
    tokens over verbs, stopwords and common words ("landed on", "pinned the lot on",
    "chalked it up to", "rang back and it's") reaches a titled name ("Dr. Doe", "doctor
    Nadia Eklund"), with no other term between."""
    j = first - 1
    while j >= 0 and first - j <= CLINICIAN_REACH and tokens[j].sentence == tokens[first].sentence:
        tok = tokens[j]
        if tokens[j + 1].gap in CLAUSE_DASHES:
            return False  # a dash between: "Dr. Roe - fit to dive" is no act of hers
        if tok.kind == _HONORK:
            return j < first - 1  # an act between: not "Dr. Roe - Kofi V. Zhou"
        if tok.kind in (_BREAK, _GLUEK, _INGK, _NUMK) or (
                tok.kind == _WORDK and tok.info.prior >= COMMON_ZIPF):
            j -= 1
            continue
        return False
    return False


def _field_value(tokens: list[_Tok], first: int, last: int) -> bool:
    """Whether the term from token ``first`` to ``last`` fills a field's value whole (rule
    9): it starts right after a label mark (``LABEL_MARKS``: "Details: ...", "problems +=
    ...", "| ... |") and the record, its sentence or line ends right after it, or a
    semicolon or bar does ("what the GP thinks: hay fever", "Details: sinus infection;
    symptoms were ...", "CALLER: hay fever. I'd had ...")."""
    if not tokens[first].field:
        return False
    after = last + 1
    return after >= len(tokens) or tokens[after].sentence != tokens[last].sentence \
        or tokens[after].gap in (";", "|")


def _plain_identifier(tok: _Info, known: Callable[[str], bool]) -> bool:
    """Whether an identifier is words of V joined by "_" or "-" ("watch_complete",
    "rec_type"): a field or event name of a record, not a word outside V (it gets no
    open-vocabulary precedence; "E-4471", "ERR_42" and "snurflepox_b" keep it)."""
    parts = re.split(r"[_\-]+", tok.canon)
    return tok.kind == _IDENT and len(parts) > 1 and all(
        p.isalpha() and known(p) for p in parts)


def _drug_shaped(content: list[_Info]) -> bool:
    """Whether a term names a drug by the shape of one of its words (``DRUG_STEMS``)."""
    for tok in content:
        word = tok.canon.rsplit("-", 1)[-1]  # "co-amoxiclav"
        if len(word) >= DRUG_MIN_LENGTH and tok.prior < DRUG_ZIPF and word.isalpha() \
                and word.endswith(DRUG_STEMS):
            return True
    return False


def _heading(tokens: list[_Tok], piece: list[int]) -> bool:
    """Whether a term is the heading of its record or of a sentence (rule 5): one ordinary
    word that starts a sentence ("Rebook in three months.", "Overheard at a bus stop"), or
    the document's first words right before a date or a number ("Donor session 22 November 2024:",
    "Projection booth notes, 12 May 2024", "Movie night (April 21, 2023)"), past at most
    one stopword or a punctuation mark; or a field's label of lowercase words, right before
    its colon ("Score on the fridge whiteboard: 5", "Clinical justification: ...")."""
    last = piece[-1]
    if last + 1 < len(tokens) and tokens[last + 1].gap == ":" \
            and tokens[last + 1].sentence == tokens[last].sentence \
            and all(tokens[i].kind in (_WORDK, _GLUEK, _INGK) for i in piece):
        return True  # a field's label of ordinary words: "Score on the fridge whiteboard: 5"
    if len(piece) == 1 and tokens[last].kind == _WORDK and _leads_sentence(tokens, last):
        return True  # a sentence's first word alone: "Rebook in three months.", "Overheard"
    if tokens[last].sentence != 0 or any(
            tokens[j].kind in (_WORDK, _NAMEK, _IDENTK) for j in range(piece[0])):
        return False
    for j in range(last + 1, min(last + 3, len(tokens))):
        if tokens[j].sentence != 0:
            return False
        if tokens[j].kind == _NUMK or tokens[j].info.canon in DATE_WORDS:
            return True
        if not tokens[j].info.stop or j > last + 1:
            return False
    return False


def _role(tokens: list[_Tok], first: int) -> str:
    """The role of the term whose first token is ``first`` (rule 4)."""
    sentence = tokens[first].sentence
    in_item = False  # inside an earlier item of the same list ("fever, dry cough and ...")
    verb = False  # a verb form passed since the last comma: a comma then ends the list
    preposition = False  # "diagnosed the patient with X": one object of at most MAX_WORDS
    object_words = 0
    introduced = ""  # the preposition that introduces the term (or its list)
    for j in range(first - 1, max(first - 1 - CUE_REACH, -1), -1):
        boundary = tokens[j + 1].gap
        titled = tokens[j].kind == _HONORK and tokens[j + 1].kind == _HONORK  # "Dr. Doe"
        if tokens[j].sentence != sentence or (
                boundary and boundary != "," and not (boundary == ":" and j + 1 == first)
                and not titled):
            break  # a list goes on over commas; a label reaches over its own colon
        if boundary == ",":
            if verb:
                break  # "X, to be seen again": not a list
            in_item = True
        canon = tokens[j].info.canon
        role = cue_of(canon)
        if role is not None:
            if canon in NOUN_CUES and (
                    verb or introduced not in ("", *PURPOSE_PREPOSITIONS)
                    or (j and tokens[j - 1].info.canon == "of")  # "kind of film: romance"
                    or (not introduced and tokens[first].kind == _WORDK
                        and tokens[first].gap != ":")):
                return ""  # "a film featuring X", "a film about X", "the film club"
            if introduced in PURPOSE_PREPOSITIONS:
                return PURPOSE_ROLES.get(cue_form(canon) or canon, role)
            return role
        if (canon in ENCOUNTER_WORDS and introduced == "for") or (
                canon in EPISODE_WORDS and introduced == "of"):
            if canon == "history" and _leads_sentence(tokens, j):
                return ""  # "History of fever with headache ...": a note's history section
            return "diagnosis"  # "seen for kidney stones", "a flare of gout"
        if tokens[j].kind == _HONORK:
            continue  # "Assessment by Dr. Tariq Arslan: gout"
        if tokens[j].info.stop:
            if canon in POSSESSIVE_VERBS:
                break  # "I saw Jane Roe, who has X": what someone has, not what was seen
            if not introduced and canon in PREPOSITIONS:
                introduced = canon
            in_item = canon in LIST_JOINERS
            preposition = preposition or canon in OBJECT_PREPOSITIONS
        elif tokens[j].kind in _SKIPPABLE and canon.endswith(("ing", "ed")):
            verb = True
            continue  # a verb form or a modifier: "complained of burning urination"
        elif not in_item:
            if introduced == "for" and _drug_shaped([tokens[j].info]):
                return "diagnosis"  # "on clarithromycin from Dr. Doe for pneumonia"
            if preposition and object_words < MAX_WORDS and (
                    not object_words
                    or (tokens[j + 1].gap == "" and not tokens[j + 1].info.stop)):
                object_words += 1  # one object: consecutive words ("kidney stones")
                continue
            break  # another word: the cue, if any, is not this term's
    return _label_role(tokens, first)


#: Longest field label whose first word gives its value a role (rule 10), in tokens.
LABEL_REACH = 6


def _label_role(tokens: list[_Tok], first: int) -> str:
    """The role a field's label gives the term that starts its value (rule 10): the label is
    the words of the value's sentence right before its colon, at most ``LABEL_REACH``, with
    no punctuation between them, and its first word is a cue ("Diagnosis submitted by
    provider: shingles", "Symptoms reported by parent: cough"); "" otherwise."""
    if tokens[first].gap != ":" or first == 0:
        return ""
    sentence = tokens[first].sentence
    start = first - 1
    while start > 0 and tokens[start - 1].sentence == sentence and not tokens[start].gap:
        start -= 1  # back to the label's first word
    if tokens[start].sentence != sentence or first - start > LABEL_REACH:
        return ""  # no label in this sentence, or a longer one than a label's
    return cue_of(tokens[start].info.canon) or ""


def _leads_sentence(tokens: list[_Tok], j: int) -> bool:
    """Whether token ``j`` begins its sentence."""
    return j == 0 or tokens[j - 1].sentence != tokens[j].sentence


def _passive_role(tokens: list[_Tok], last: int) -> str:
    """The role a passive cue right after a term gives it ("influenza was diagnosed",
    "her migraine was managed with sumatriptan", "the crash has been fixed"): walking forward
    inside the clause over forms of "be"/"have" (at least one) and adverbs, the first cue
    word met, as ``PASSIVE_ROLES`` reads it (what is treated is a diagnosis). The empty role
    otherwise."""
    auxiliary = False
    for j in range(last + 1, min(last + 1 + 4, len(tokens))):
        if tokens[j].clause != tokens[last].clause:
            break
        canon = tokens[j].info.canon
        if canon in PASSIVE_AUXILIARIES:
            auxiliary = True
            continue
        if canon in ADVERBS:
            continue
        role = cue_of(canon) if auxiliary and canon.endswith("ed") else None
        return "" if role is None else PASSIVE_ROLES.get(canon, role)
    return ""


def _items(tokens: list[_Tok]) -> tuple[list[tuple[list[int], str]], set[int]]:
    """Whole list items of a symptom list (rule 6), with their role, and the tokens of the
    items of unannounced lists.

    A sentence is cut into segments at punctuation and at "and" / "or". A segment that holds
    a role cue sets the sentence's current role (its last cue); a report verb or an -ed verb
    form without a cue ends it. The part of a segment after its last cue, report verb or
    verb form, without leading or trailing stopwords, is an item when the current role is in
    ``ITEM_ROLES``, it has 2 to ``MAX_ITEM_WORDS`` tokens and at least two content words,
    and it holds only ordinary words, -ing forms, dose-form words and ``ITEM_GLUE`` (no
    name, number, date or person).

    An *unannounced list* (no current role) of three items or more is read as a description
    too ("Honestly, unexplained weight loss, chronic diarrhoea and mouth ulcers", "Hard
    scenes: a message from space, a rival chef and a small-town baker"): its items are
    items, and their tokens are returned, so that the shorter terms inside them get the
    same role. Such a list is the segment after an "and" / "or" and the segments before it
    joined by commas, back to the first one that starts with a stopword other than an
    article, leads in (``_leads_in``) or follows other punctuation ("for pneumonia, after
    weeks of rapid breathing, cough and fever": the list starts at "after weeks of")."""
    segments: list[tuple[list[int], str]] = []  # (token indices, what precedes: "and", ",")
    segment: list[int] = []
    before = ""
    joined = False
    for i, tok in enumerate(tokens):
        if segment and (tok.sentence != tokens[segment[-1]].sentence
                        or tok.clause != tokens[segment[-1]].clause):
            segments.append((segment, before))
            segment = []
        if tok.info.canon in LIST_JOINERS and tok.info.stop:
            if segment:
                segments.append((segment, before))
                segment = []
            joined = True
            continue
        if not segment:
            same = i > 0 and tok.sentence == tokens[i - 1].sentence
            before = "and" if joined and same else (tok.gap if same else "")
        joined = False
        segment.append(i)
    if segment:
        segments.append((segment, before))
    listed = _unannounced_lists(tokens, segments)

    items: list[tuple[list[int], str]] = []
    described: set[int] = set()
    role = ""
    for k, (part, before) in enumerate(segments):
        if k and (tokens[part[0]].sentence != tokens[segments[k - 1][0][0]].sentence
                  or before == ";"):
            role = ""  # a sentence, or a clause after a semicolon, starts without a role
        cut = -1
        for position, i in enumerate(part):
            canon = tokens[i].info.canon
            cue = cue_of(canon)
            if cue is not None and canon not in NOUN_CUES:  # "Message to the practice: X"
                role, cut = cue, position
            elif canon in REPORT_VERBS or (tokens[i].kind == _BREAK and not tokens[i].info.stop
                                           and canon.endswith("ed")):
                role, cut = "", position
        part = part[cut + 1:]
        if not role and k in listed and k - 1 not in listed:
            # a list's first item starts after the words that lead to it ("going with
            # kidney stones for all the nausea, ...": rule 7)
            lead = [p for p, i in enumerate(part) if tokens[i].info.stop
                    and tokens[i].info.canon not in ITEM_GLUE and tokens[i].info.canon != "with"
                    and any(not tokens[j].info.stop for j in part[p + 1:])]
            if lead:
                part = part[lead[-1] + 1:]
        while part and tokens[part[0]].info.stop:
            part.pop(0)
        while part and tokens[part[-1]].info.stop:
            part.pop()
        item_role = role if role in ITEM_ROLES else (
            _DESCRIBED_ROLE if not role and k in listed else "")
        if not item_role:
            continue
        if not role and k in listed and all(tokens[i].kind != _NAMEK for i in part):
            described.update(part)
        if _item_shaped(tokens, part):
            items.append((part, item_role))
    return items, described


def _unannounced_lists(tokens: list[_Tok], segments: list[tuple[list[int], str]]
                       ) -> set[int]:
    """The segments (indices) that are items of a list of three or more (``_items``)."""
    listed: set[int] = set()
    for k, (_, before) in enumerate(segments):
        if before != "and" or not k:
            continue
        members = [k]
        m = k - 1
        while m >= 0:
            members.append(m)
            first = tokens[segments[m][0][0]]
            if (first.info.stop and first.info.canon not in LIST_ARTICLES) \
                    or any(_leads_in(tokens, i) for i in segments[m][0]) \
                    or segments[m][1] != "," or (
                    m and tokens[segments[m - 1][0][0]].sentence != first.sentence):
                break
            m -= 1
        if len(members) >= 3:
            listed.update(members)
    return listed


def _leads_in(tokens: list[_Tok], i: int) -> bool:
    """Whether token ``i`` makes its segment the head of a list: a cue, a report verb or a
    visit word ("sat out training with X, Y and Z"); verb forms are not ("blocked nose",
    "fever with shaking chills" are items)."""
    canon = tokens[i].info.canon
    return cue_of(canon) is not None or canon in REPORT_VERBS or canon in VISIT_WORDS


def _item_shaped(tokens: list[_Tok], part: list[int]) -> bool:
    """Whether a segment's part is a whole item: 2 to ``MAX_ITEM_WORDS`` tokens, two content
    words or more, only ordinary words, -ing forms, dose-form words and ``ITEM_GLUE``."""
    if not 2 <= len(part) <= MAX_ITEM_WORDS:
        return False
    content = 0
    for i in part:
        tok = tokens[i]
        if tok.info.stop:
            if tok.info.canon not in ITEM_GLUE:
                return False
        elif tok.kind in (_WORDK, _INGK) or tok.info.canon in FORM_WORDS:
            content += 1
        else:
            return False
    return content >= 2
