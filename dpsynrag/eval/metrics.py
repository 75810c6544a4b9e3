"""Evaluation metrics: answer matching, retrieval recall, name leakage and verbatim copying.

Pure functions of strings, no models. Every match works on :func:`normalise_for_match` text,
so case, accents, hyphen and apostrophe variants and punctuation do not matter, and every
match respects word boundaries ("Velarin Syndrome" is found in "velarin-syndrome." but not in
"Velarinx Syndrome").

Definitions (all counts exact):

* a query's gold answer is one string or a non-empty sequence of strings (its accepted
  answers, e.g. several films a user likes): the query counts as answered or recalled when
  ANY of them is contained (:func:`answer_options`);
* :func:`contains_answer`: the normalised answer's tokens occur as a contiguous run of the
  normalised text's tokens.
* :func:`answer_recall_at_k`: share of queries with at least one retrieved text (the caller
  passes exactly the top-k) containing the gold answer.
* :func:`accuracy`: share of model outputs containing the gold answer.
* :func:`answer_weights`: per query, the private notes holding (any of) its answer;
  :func:`supported_queries` the queries at least ``min_support`` notes hold (the paper's
  SearchQA rule, :data:`MIN_SUPPORT` = 40).
* :func:`name_leaks`: number of outputs that contain at least one of the given full names
  (each name exactly as given, "First Last" or "First M. Last"; "John Smith" does not match
  "John A. Smith" nor the reverse).
* :func:`names_in_corpus`: number of distinct given names found in at least one text.
* :func:`verbatim_spans`: number of distinct word n-grams (default 8) of the private texts
  that also occur in some synthetic text (n-grams never span two texts).
* :func:`span_share`: readability of a corpus, the share of its tokens
  (``facts.tokens.tokenize``, case kept) inside a token 3-gram that at least 2 private notes
  hold (real text shared by units, not a bare keyword list).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence

__all__ = [
    "MIN_SUPPORT",
    "SPAN_MIN_NOTES",
    "SPAN_N",
    "Answer",
    "accuracy",
    "answer_options",
    "answer_recall_at_k",
    "answer_weights",
    "contains_answer",
    "first_answer",
    "mean_std",
    "name_leaks",
    "names_in_corpus",
    "normalise_for_match",
    "shared_token_ngrams",
    "span_share",
    "supported_queries",
    "verbatim_spans",
    "weighted_recall_at_k",
]

#: A query's gold answer: one string, or a non-empty sequence of accepted answers (any counts).
Answer = str | Sequence[str]

#: The paper's SearchQA rule: recall and accuracy are also reported over the queries whose
#: answer at least this many private notes hold (``dpsynrag eval --min-support``).
MIN_SUPPORT = 40
#: :func:`span_share`: a token counts where a window of SPAN_N tokens around it is a token
#: SPAN_N-gram that at least SPAN_MIN_NOTES private notes hold.
SPAN_N = 3
SPAN_MIN_NOTES = 2

_HYPHENS = re.compile("[\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d]")
_APOSTROPHES = re.compile("[\u2018\u2019\u201b\u02bc\u02b9\u0060\u00b4\u2032\uff07]")
_INNER_APOSTROPHE = re.compile(r"(?<=\w)'(?=\w)")
_SEPARATORS = re.compile(r"[\W_]+")


def normalise_for_match(text: str) -> str:
    """Text reduced to lowercase word tokens separated by single spaces.

    Steps: Unicode compatibility decomposition with accents dropped ("é" → "e"), casefold,
    every hyphen/dash variant to "-" and apostrophe variant to "'", apostrophes inside a word
    removed ("Velarin's" → "velarins"), then every run of whitespace, punctuation or
    underscores becomes one space (so hyphens separate words: "Ka-Lum" → "ka lum"); no leading
    or trailing space.
    """
    text = str(text)
    if text.isascii():  # NFKD leaves ASCII as it is and it has no combining marks
        stripped = text
    else:
        decomposed = unicodedata.normalize("NFKD", text)
        stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    folded = stripped.casefold()
    folded = _HYPHENS.sub("-", folded)
    folded = _APOSTROPHES.sub("'", folded)
    folded = _INNER_APOSTROPHE.sub("", folded)
    return _SEPARATORS.sub(" ", folded).strip()


def _padded(text: str) -> str:
    return f" {normalise_for_match(text)} "


def _contains_normalised(padded_text: str, normalised_answer: str) -> bool:
    return bool(normalised_answer) and f" {normalised_answer} " in padded_text


def answer_options(answer: Answer) -> tuple[str, ...]:
    """A query's accepted answers: ``(answer,)`` for a string, else the sequence's strings.

    Raises ``TypeError`` for an item that is not a string and ``ValueError`` for an empty
    sequence (a query without an answer has no defined hit).
    """
    if isinstance(answer, str):
        return (answer,)
    if not isinstance(answer, Sequence):
        raise TypeError(f"an answer must be a string or a sequence of strings, not "
                        f"{type(answer).__name__}")
    options = tuple(answer)
    if not options:
        raise ValueError("a query's answers must not be empty")
    if not all(isinstance(a, str) for a in options):
        raise TypeError("every answer of a query must be a string")
    return options


def first_answer(answer: Answer) -> str:
    """The first (primary) of a query's answers: what a question built from the answer text
    (the attack questions) uses."""
    return answer_options(answer)[0]


def _targets(answer: Answer) -> list[str]:
    return [normalise_for_match(a) for a in answer_options(answer)]


def _hit(padded_texts: Iterable[str], targets: Sequence[str]) -> bool:
    return any(_contains_normalised(t, target) for t in padded_texts for target in targets)


def contains_answer(text: str, answer: Answer) -> bool:
    """Whether ``answer`` (any of them, for a sequence) occurs in ``text`` on word boundaries
    after normalisation.

    An answer that normalises to nothing (empty or only punctuation) is never contained.
    """
    padded = _padded(text)
    return any(_contains_normalised(padded, t) for t in _targets(answer))


def _check_lengths(what: str, items: Sequence[object], answers: Sequence[Answer]) -> None:
    if isinstance(items, str) or isinstance(answers, str):
        raise TypeError(f"{what} and answers must be sequences, not strings")
    if len(items) != len(answers):
        raise ValueError(f"{len(items)} {what} for {len(answers)} answers")
    if not answers:
        raise ValueError(f"no {what}: the metric is undefined")


def answer_weights(answers: Sequence[Answer], notes: Sequence[str]) -> list[int]:
    """For each query, the number of private notes that contain its answer (any of its
    answers; a note holding two of them counts once): the frequency weight of its query
    (queries drawn in proportion to notes, as the paper's held-out patients are).
    Computed from private data: the evaluation's report is the data owner's."""
    if isinstance(answers, str):
        raise TypeError("answers must be a sequence, not a string")
    padded = [_padded(n) for n in notes]
    return [sum(_hit((n,), targets) for n in padded) for targets in map(_targets, answers)]


def supported_queries(weights: Sequence[float], min_support: int = MIN_SUPPORT) -> list[int]:
    """Positions of the queries whose answer at least ``min_support`` private notes hold
    (``weights`` from :func:`answer_weights`): the paper's SearchQA rule."""
    if isinstance(min_support, bool) or not isinstance(min_support, int) or min_support < 0:
        raise ValueError(f"min_support must be a non-negative integer, got {min_support!r}")
    return [i for i, w in enumerate(weights) if w >= min_support]


def weighted_recall_at_k(retrieved: Sequence[Sequence[str]], answers: Sequence[Answer],
                         weights: Sequence[float]) -> float | None:
    """Recall@k with query i weighted by ``weights[i]`` (None when every weight is 0)."""
    _check_lengths("weights", weights, answers)
    total = float(sum(weights))
    if total <= 0:
        return None
    _check_lengths("retrieved lists", retrieved, answers)
    hit = 0.0
    for texts, answer, weight in zip(retrieved, answers, weights, strict=True):
        if _hit(map(_padded, texts), _targets(answer)):
            hit += float(weight)
    return hit / total


def answer_recall_at_k(retrieved: Sequence[Sequence[str]], answers: Sequence[Answer]) -> float:
    """Share of queries whose retrieved texts contain the gold answer (any of its answers).

    ``retrieved[i]`` holds the texts retrieved for query i (already cut to the top k);
    ``answers[i]`` is its gold answer. Raises ``ValueError`` on a length mismatch or no queries.
    """
    _check_lengths("retrieved lists", retrieved, answers)
    hits = 0
    for texts, answer in zip(retrieved, answers, strict=True):
        if isinstance(texts, str):
            raise TypeError("each retrieved entry must be a sequence of texts, not a string")
        hits += _hit(map(_padded, texts), _targets(answer))
    return hits / len(answers)


def accuracy(outputs: Sequence[str], answers: Sequence[Answer]) -> float:
    """Share of model outputs that contain their gold answer (any of its answers; see
    :func:`contains_answer`)."""
    _check_lengths("outputs", outputs, answers)
    hits = sum(contains_answer(o, a) for o, a in zip(outputs, answers, strict=True))
    return hits / len(answers)


class _NameMatcher:
    """Finds given full names in texts by token n-gram lookup (one pass per name length)."""

    def __init__(self, names: Iterable[str]) -> None:
        if isinstance(names, str):
            raise TypeError("names must be an iterable of names, not a string")
        self.by_tokens: dict[tuple[str, ...], set[str]] = {}
        for name in names:
            tokens = tuple(normalise_for_match(name).split())
            if tokens:
                self.by_tokens.setdefault(tokens, set()).add(name)
        self.lengths = sorted({len(t) for t in self.by_tokens})

    def found(self, text: str) -> set[str]:
        """The given names (as given) that occur in ``text``."""
        tokens = normalise_for_match(text).split()
        hits: set[str] = set()
        for length in self.lengths:
            for gram in set(_ngrams(tokens, length)):
                names = self.by_tokens.get(gram)
                if names:
                    hits.update(names)
        return hits


def name_leaks(outputs: Sequence[str], names: Iterable[str]) -> int:
    """Number of ``outputs`` that contain at least one of ``names`` (full name, as given).

    Case-insensitive on word boundaries after :func:`normalise_for_match`; "First M. Last"
    also matches "first m last" but not "First Last", and "First Last" does not match
    "First M. Last".
    """
    if isinstance(outputs, str):
        raise TypeError("outputs must be a sequence of texts, not a string")
    matcher = _NameMatcher(names)
    return sum(bool(matcher.found(text)) for text in outputs)


def names_in_corpus(corpus_texts: Iterable[str], names: Iterable[str]) -> int:
    """Number of distinct ``names`` that occur (as in :func:`name_leaks`) in some text."""
    if isinstance(corpus_texts, str):
        raise TypeError("corpus_texts must be an iterable of texts, not a string")
    matcher = _NameMatcher(names)
    found: set[tuple[str, ...]] = set()
    for text in corpus_texts:
        for name in matcher.found(text):
            found.add(tuple(normalise_for_match(name).split()))
    return len(found)


def _ngrams(tokens: Sequence[str], n: int) -> Iterator[tuple[str, ...]]:
    return zip(*(tokens[i:] for i in range(n)), strict=False)


def verbatim_spans(corpus_texts: Iterable[str], private_texts: Iterable[str], n: int = 8, *,
                   max_private_frequency: int | None = None) -> int:
    """Number of distinct word ``n``-grams of ``private_texts`` found in ``corpus_texts``.

    Both sides are tokenised by :func:`normalise_for_match` (split on spaces); an n-gram lies
    within one text. Each distinct private n-gram counts once however often it recurs.
    ``max_private_frequency`` (optional) counts only n-grams that occur in at most that many
    private texts: 1 keeps spans unique to one note (template text shared by many notes is
    public-looking and is then not counted).

    Sets hold Python's 64-bit hashes of the n-gram tuples (collision chance ≈ m²/2⁶⁴ for m
    n-grams, negligible); about 0.1 s for 2,000 notes × 500 texts.
    """
    if isinstance(corpus_texts, str) or isinstance(private_texts, str):
        raise TypeError("corpus_texts and private_texts must be iterables of texts")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if max_private_frequency is not None and max_private_frequency < 1:
        raise ValueError("max_private_frequency must be at least 1")
    synthetic: set[int] = set()
    for text in corpus_texts:
        synthetic.update(map(hash, _ngrams(normalise_for_match(text).split(), n)))
    if max_private_frequency is None:
        copied: set[int] = set()
        for text in private_texts:
            grams = set(map(hash, _ngrams(normalise_for_match(text).split(), n)))
            copied.update(grams & synthetic)
        return len(copied)
    frequency: Counter[int] = Counter()
    for text in private_texts:
        frequency.update(set(map(hash, _ngrams(normalise_for_match(text).split(), n))))
    return sum(1 for gram, count in frequency.items()
               if count <= max_private_frequency and gram in synthetic)


def shared_token_ngrams(private_texts: Iterable[str], n: int = SPAN_N,
                        min_notes: int = SPAN_MIN_NOTES) -> frozenset[tuple[str, ...]]:
    """The token ``n``-grams (``facts.tokens.tokenize``: Treebank tokens, case kept) that at
    least ``min_notes`` of ``private_texts`` hold (a text holding one twice counts once)."""
    from dpsynrag.facts.tokens import tokenize  # nltk: loaded when a corpus is measured

    if isinstance(private_texts, str):
        raise TypeError("private_texts must be an iterable of texts, not a string")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(min_notes, bool) or not isinstance(min_notes, int) or min_notes < 1:
        raise ValueError(f"min_notes must be a positive integer, got {min_notes!r}")
    holders: Counter[tuple[str, ...]] = Counter()
    for text in private_texts:
        holders.update(set(_ngrams(tokenize(text), n)))
    return frozenset(g for g, c in holders.items() if c >= min_notes)


def span_share(corpus_texts: Iterable[str], shared: Collection[tuple[str, ...]],
               n: int = SPAN_N) -> float | None:
    """The share of the corpus texts' tokens (``facts.tokens.tokenize``, all texts pooled)
    that lie inside a window of ``n`` consecutive tokens of their text that is one of
    ``shared`` (:func:`shared_token_ngrams` of the private notes; a longer window of real
    text is covered by its ``n``-token windows). 1.0: every token sits in text that units
    share; a keyword list ("Reported: flat abdominal hoarse") scores near 0. None for a
    corpus without tokens. A text shorter than ``n`` tokens adds its tokens, none covered.
    """
    from dpsynrag.facts.tokens import tokenize  # nltk: loaded when a corpus is measured

    if isinstance(corpus_texts, str):
        raise TypeError("corpus_texts must be an iterable of texts, not a string")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    total = covered = 0
    for text in corpus_texts:
        tokens = tokenize(text)
        inside = [False] * len(tokens)
        for start, gram in enumerate(_ngrams(tokens, n)):
            if gram in shared:
                inside[start:start + n] = [True] * n
        total += len(tokens)
        covered += sum(inside)
    return covered / total if total else None


def mean_std(values: Iterable[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n − 1 denominator; 0.0 for a single value).

    Raises ``ValueError`` for no values.
    """
    data = [float(v) for v in values]
    if not data:
        raise ValueError("mean_std needs at least one value")
    mean = math.fsum(data) / len(data)
    if len(data) == 1:
        return mean, 0.0
    variance = math.fsum((v - mean) ** 2 for v in data) / (len(data) - 1)
    return mean, math.sqrt(variance)
