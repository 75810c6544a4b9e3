"""Per-document open-vocabulary phrases (the "facts" mode, before DP partition selection).

``document_phrases`` gives, for each document, at most ``K_e`` distinct canonical phrases that
name something the public vocabulary V cannot spell: invented or rare names (diseases, drugs,
products, people) and codes ("E-4471", "0x8007A1F3", "ERR_SYNC_09"). The DP mechanism then
releases the phrases that a noisy count of documents puts over a threshold.

Privacy rests on one property: a document's phrases are a fixed public function of that
document alone (the text, V, the stopword list, ``wordfreq``'s shipped English frequencies
and ``K_e``): no corpus statistics, no other document, nothing random. Adding or removing one
document adds or removes its own <= K_e distinct phrases and changes no other document's.
Nothing here is released or logged; the phrases are private intermediates.

The rule (all constants public, below):

1. Text is NFC-normalised and cut into tokens: runs of letters/digits joined by single inner
   apostrophes, hyphens, underscores or dots ("kraxi's", "vexlink-2", "ERR_SYNC_09", "v2.3").
   Two tokens are in the same clause only when nothing but whitespace (at most one line
   break) separates them, so no phrase ever crosses punctuation (. , ; : ( ) ! ? quotes ...).
2. A token is *open-vocabulary* when its wordfreq Zipf frequency is below ``OPEN_ZIPF`` and
   either it has an identifier shape (an underscore, a part mixing letters and digits, a
   single letter joined to digits, or camelCase) or one of its letter parts is rare: not a
   stopword, not in V (plurals, ``-ing`` and ``-ed`` folded), and Zipf below ``OPEN_ZIPF``
   (a plural also needs its singular below it: "spreadsheets"). Bare
   numbers (dates, ages, amounts, ids) are never open. So "45-year-old", "follow-up",
   "email" and "couldn't" are not open; "Kraxitis", "syncora", "Achterberg", "E-4471" are.
3. Candidate phrases (1 to ``MAX_WORDS`` tokens, inside one clause):
   * a *name run*: consecutive capitalised name-shaped tokens ("Kraxitis Syndrome", "Acute
     Blornitis", "Kraxi's Disease", "Felix Achterberg") holding at least one open token. A
     closed capitalised word that starts a sentence (capitalised only by position:
     "Continue", "Patient", "Error") and stopwords ("The") do not join; a period after a
     capitalised token of at most two letters, or of three without a vowel ("Dr", "Mrs",
     "A"), ends no sentence. So a person's full name is one phrase, not two fragments
     competing for slots;
   * a *word run*: consecutive open lowercase (or digit-suffixed) words ("syncora",
     "vexlink-2");
   * an *identifier*: one open identifier-shaped token ("e-4471", "err_sync_09").
   Runs longer than ``MAX_WORDS`` are cut from the left into pieces of ``MAX_WORDS``; pieces
   without an open token are dropped.
4. Canonical form: tokens lowercased (NFC), curly apostrophes and Unicode hyphens mapped to
   ASCII, joined by one space; surrounding punctuation is never part of a token.
5. Order: rarest first by the public prior (the lowest wordfreq Zipf frequency among the
   phrase's open tokens), then first occurrence in the document; repeats count once; the
   first ``K_e`` distinct phrases are the document's.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from dpsynrag.transforms.keywords import _check_k, inflected_form
from dpsynrag.transforms.vocabulary import PublicVocabulary, stopwords

__all__ = ["MAX_WORDS", "OPEN_ZIPF", "canonical_token", "document_phrases"]

#: A token (and a rare part of it) must be rarer than this wordfreq Zipf frequency (log10 of
#: occurrences per billion words; 3.0 = once per million) to be open-vocabulary.
OPEN_ZIPF = 3.0
#: Longest phrase, in tokens.
MAX_WORDS = 4

_A = r"[^\W_]"  # a letter or a digit (any script)
_TOKEN = re.compile(rf"{_A}+(?:(?:_+|['\u2019\-\u2010\u2011.]){_A}+)*")
_PART_SPLIT = re.compile(r"[_'\-.]+")
_CASE_PART_SPLIT = re.compile(r"['\-]")
_SENTENCE_END = re.compile(r"[.!?\u2026\n]")
_CAMEL = re.compile(r"[a-z][A-Z]")
_CANON = str.maketrans({"\u2019": "'", "\u2010": "-", "\u2011": "-"})

_NAME, _WORD, _IDENT = 1, 2, 3


@dataclass(frozen=True)
class _Info:
    """What the rule needs to know of one token (a function of the token's text only)."""

    canon: str
    is_open: bool
    kind: int  # _NAME (capitalised name shape), _WORD, _IDENT; 0 for bare numbers
    stop: bool
    short_cap: bool  # "Dr", "Mr", "Mrs", "St", "A": a period after it ends no sentence
    prior: float  # wordfreq Zipf frequency of the canonical token


def canonical_token(token: str) -> str:
    """The canonical form of one token: NFC, lower case, ASCII apostrophe and hyphen."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", token).lower()
                                 .translate(_CANON))


@functools.lru_cache(maxsize=1 << 18)
def _zipf(word: str) -> float:
    """wordfreq's English Zipf frequency of ``word`` (public data shipped with the package)."""
    try:
        from wordfreq import zipf_frequency
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("document phrases need the 'wordfreq' package "
                          "(pip install wordfreq)") from error
    return float(zipf_frequency(word, "en"))


def _name_shaped(token: str) -> bool:
    """Capitalised word shape: no digits or underscores, first letter upper case, and each
    apostrophe/hyphen part either capitalised-then-lower ("Kraxi-Blorn", "O'Neil") or lower
    ("Kraxi's")."""
    if not token[0].isupper() or "_" in token or any(c.isdigit() for c in token):
        return False
    if sum(c.isalpha() for c in token) < 2:
        return False
    return all(part[1:] == part[1:].lower() for part in _CASE_PART_SPLIT.split(token) if part)


def _known(part: str, vocab: PublicVocabulary) -> bool:
    """Whether a lowercase word is in V, plurals folded (as for keywords) and, failing that,
    an irregular plural or ``-ing`` / ``-ed`` folded onto a stem in V ("flaking" -> "flake",
    "slurred" -> "slur", "syncing" -> "sync"): ``keywords.inflected_form``."""
    return inflected_form(part, vocab.index) is not None


def _classify(token: str, vocab: PublicVocabulary, stop: frozenset[str]) -> _Info:
    canon = canonical_token(token)
    parts = [p for p in _PART_SPLIT.split(canon) if p]
    has_alpha = any(c.isalpha() for c in canon)
    short_cap = token[0].isupper() and token.isalpha() and (
        len(token) <= 2 or (len(token) == 3 and not any(c in "aeiouAEIOU" for c in token)))
    if not has_alpha:  # bare numbers, dates, versions: never open
        return _Info(canon, False, 0, False, False, _zipf(canon))
    prior = _zipf(canon)
    has_digit = any(c.isdigit() for c in canon)
    identifier = ("_" in token or _CAMEL.search(token) is not None
                  or any(any(c.isdigit() for c in p) and any(c.isalpha() for c in p)
                         for p in parts)
                  or (has_digit and any(p.isalpha() and len(p) == 1 for p in parts)))
    rare_part = any(
        p.isalpha() and len(p) >= 2 and p not in stop and not _known(p, vocab)
        and _zipf(p) < OPEN_ZIPF and not (p.endswith("s") and _zipf(p[:-1]) >= OPEN_ZIPF)
        for p in parts)
    is_open = prior < OPEN_ZIPF and (identifier or rare_part)
    kind = _IDENT if identifier else _NAME if _name_shaped(token) else _WORD
    return _Info(canon, is_open, kind, canon in stop, short_cap, prior)


def document_phrases(texts: Sequence[str], vocab: PublicVocabulary,
                     K_e: int) -> list[list[str]]:
    """For each document, at most ``K_e`` distinct canonical open-vocabulary phrases.

    See the module docstring for the rule. Each document's list depends on that document,
    ``vocab``, ``K_e`` and public constants only (not on the batch, its order or its size),
    and is ordered rarest first, then by first occurrence. Deterministic.
    """
    K_e = _check_k(K_e)
    stop = stopwords()
    cache: dict[str, _Info] = {}  # token text -> _Info (a pure function of the token)

    def info(token: str) -> _Info:
        found = cache.get(token)
        if found is None:
            found = cache[token] = _classify(token, vocab, stop)
        return found

    return [_phrases_of(text, info, K_e) for text in texts]


def scan_tokens(text: str, info: Callable[[str], _Info]
                ) -> Iterator[tuple[re.Match[str], _Info, str, bool, bool]]:
    """The tokens of ``text`` (rule 1) as ``(match, info, gap, new_clause, initial)``: the gap
    is the text since the previous token; a token starts a clause unless only whitespace
    (at most one line break, no tab: a tab separates a record's fields) precedes it, and a
    sentence after . ! ? or a line break (not after "Dr", "Mrs", ...). The first token
    starts both."""
    previous_end = 0
    previous: _Info | None = None
    for match in _TOKEN.finditer(text):
        tok = info(match.group())
        gap = text[previous_end:match.start()]
        new_clause = previous is None or not gap.isspace() or gap.count("\n") > 1 \
            or "\t" in gap
        initial = previous is None or (
            _SENTENCE_END.search(gap) is not None
            and not (gap.startswith(".") and "\n" not in gap and previous.short_cap))
        yield match, tok, gap, new_clause, initial
        previous_end, previous = match.end(), tok


def _phrases_of(text: str, info: Callable[[str], _Info], K_e: int) -> list[str]:
    """The phrases of one document (``info`` maps a token to its ``_Info``)."""
    text = unicodedata.normalize("NFC", text)
    best: dict[str, tuple[float, int]] = {}
    run: list[tuple[_Info, int]] = []
    run_kind = 0

    def flush() -> None:
        for start in range(0, len(run), MAX_WORDS):
            piece = run[start:start + MAX_WORDS]
            opens = [t.prior for t, _ in piece if t.is_open]
            if opens:
                phrase = " ".join(t.canon for t, _ in piece)
                if phrase not in best:
                    best[phrase] = (min(opens), piece[0][1])
        run.clear()

    for match, tok, _gap, new_clause, initial in scan_tokens(text, info):
        if new_clause:
            flush()
            run_kind = 0
        if tok.kind == _NAME and (tok.is_open or not (tok.stop or initial)):
            kind = _NAME
        elif tok.is_open and tok.kind in (_WORD, _IDENT):
            kind = tok.kind
        else:
            kind = 0
        if kind != run_kind or kind == _IDENT:
            flush()
        if kind:
            run.append((tok, match.start()))
        run_kind = kind
    flush()
    ranked = sorted(best, key=lambda phrase: best[phrase])
    return ranked[:K_e]
