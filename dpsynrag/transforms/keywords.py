"""Per-document keyword extraction (DP-SynRAG stage a, before the histogram).

Every function here is a deterministic function of ONE document and public inputs (the public
vocabulary, the model weights, the prompt, K). That is what the histogram's l2 sensitivity
sqrt(K) rests on: adding or removing one document adds or removes its own <= K distinct
in-vocabulary words and changes no other document's keywords. Nothing here is released, so
nothing here is charged; keywords per document are private intermediates (state directory
only, never logged).

Two extractors:
* ``llm_keywords``: the paper's method, greedy generation of the keyword prompt. Batches are
  laid out so that a document's computation does not depend on which other documents share
  its batch (fixed batch shape, filler rows, padding fixed by the document's own length and
  never absent, so the attention-mask path is the same for every batch).
* ``statistical_keywords``: no LLM; a document's own vocabulary words ranked by a public
  rarity prior (``wordfreq``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpsynrag.models.greedy import generate_greedy
from dpsynrag.prompts.templates import load_prompt
from dpsynrag.transforms.vocabulary import PublicVocabulary, stopwords

if TYPE_CHECKING:
    from dpsynrag.models.protocols import LLM

_WORD = re.compile(r"[A-Za-z]+")
_LIST_MARKER = re.compile(r"^\s*(?:\(?\d{1,3}[.):]|\(?[A-Za-z][.)]|[-*+\u2022\u00b7\u2013>])\s+")
_LABEL = re.compile(r"^\s*([^:,;]{1,40}):\s*(.*)$")
_MARKUP = re.compile(r"[*_`#\"\u201c\u201d\u2018\u2019]")
_INLINE_ITEM = re.compile(r"(?<=\S)\s+(?=\(?\d{1,3}[.)]\s)")
_ITEM_SEPARATORS = re.compile(r"[,;|/\t]")
_EXPLANATION = re.compile(r"\s+[-\u2013\u2014]\s+|\s*\(|\s*=")
_CHATTY = re.compile(
    r"^\s*(?:sure|certainly|okay|ok|of course|here (?:are|is)|i (?:have|would|will|can|hope))\b",
    re.IGNORECASE)
_ECHO = re.compile(
    r"^\s*(?:the\s+)?(?:\d+\s+)?(?:key\s*words?|single\s+words|words)\s+(?:are|is)\b",
    re.IGNORECASE)


# ---------------------------------------------------------------------------- prompt
def keyword_prompt(document: str, K: int, template: str | None = None) -> str:
    """The keyword prompt for one document: ``{K}`` then ``{document}`` substituted.

    ``str.replace``, not ``str.format``: documents contain braces. ``{K}`` is replaced before
    the document goes in, so a document containing ``{K}`` is left as written.
    """
    template = load_prompt("keywords") if template is None else template
    return template.replace("{K}", str(int(K))).replace("{document}", document)


# ---------------------------------------------------------------------------- normalising
def _vocab_form(word: str, index: dict[str, int]) -> str | None:
    """``word`` (lowercase letters) if in V, else a plural folded into V, else None.

    Folding (public, deterministic): ``-ies`` -> ``-y``, then ``-s``, then ``-es``, each tried
    only when the word itself is not in V (web2 lists few plurals: "patients", "symptoms").
    """
    if word in index:
        return word
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        if word.endswith("ies") and word[:-3] + "y" in index:
            return word[:-3] + "y"
        if word[:-1] in index:
            return word[:-1]
        if word.endswith("es") and word[:-2] in index:
            return word[:-2]
    return None


#: Irregular plurals folded onto their singular (public, fixed): "feet" -> "foot".
IRREGULAR_PLURALS = {"feet": "foot", "teeth": "tooth", "geese": "goose", "mice": "mouse",
                     "children": "child", "women": "woman", "men": "man", "lice": "louse"}


def inflected_form(word: str, index: dict[str, int]) -> str | None:
    """``word`` folded onto V as by ``_vocab_form``, else an irregular plural's singular, else
    an ``-ing`` / ``-ed`` form folded onto its stem in V ("twitching" -> "twitch",
    "flaking" -> "flake", "slurred" -> "slur"); None if none of these is in V. A stopword
    is never folded: "during" is no inflection of the archaic "dure".

    A fixed public rule of the word alone (the order of the tries is part of the rule).
    """
    form = _vocab_form(word, index)
    if form is not None:
        return form
    if word in stopwords():
        return None
    singular = IRREGULAR_PLURALS.get(word)
    if singular is not None and singular in index:
        return singular
    for suffix in ("ing", "ed"):
        stem = word.removesuffix(suffix)
        if stem == word or len(stem) < 3:
            continue
        candidates = [stem, stem + "e"]
        if len(stem) > 3 and stem[-1] == stem[-2]:
            candidates.append(stem[:-1])
        for candidate in candidates:
            if candidate in index:
                return candidate
    return None


def normalise_keywords(candidates: Iterable[str], vocab: PublicVocabulary, K: int) -> list[str]:
    """At most ``K`` distinct words of ``vocab``, in the order the candidates give them.

    Each candidate is lowercased and stripped of surrounding punctuation (a candidate with
    inner non-letters, e.g. "follow-up", is dropped; ``parse_keyword_answer`` splits such
    items into words first), simple plurals are folded onto V, words not in V are dropped,
    repeats keep their first occurrence, and the list is cut at K. Deterministic.
    """
    K = _check_k(K)
    out: list[str] = []
    seen: set[str] = set()
    for candidate in candidates:
        if len(out) >= K:
            break
        word = candidate.strip().strip("\"'`.,;:!?()[]{}<>*_-#").lower()
        if not (word.isascii() and word.isalpha()):
            continue
        form = _vocab_form(word, vocab.index)
        if form is not None and form not in seen:
            seen.add(form)
            out.append(form)
    return out


def parse_keyword_answer(text: str, vocab: PublicVocabulary, K: int) -> list[str]:
    """The keywords of an LLM answer: at most ``K`` distinct words of ``vocab``.

    Accepts comma/semicolon/newline separated words, numbered or bulleted lists, a label such
    as "Keywords: a, b", quotes and markdown, and items of several words (each word counts,
    in order). List items with an explanation ("1. Fever - high temperature", "Fever: ...")
    keep only their head; inline numbering ("1. a 2. b") counts as a list. Header lines
    ("Here are the keywords:"), chatty lines without a colon ("Sure! Here they are.") and an
    echo of the question ("The keywords are ...") are dropped; on any other line with a
    colon only the part after the first colon counts. Then ``normalise_keywords``.
    """
    words: list[str] = []
    lines = [part for raw in _MARKUP.sub(" ", text).splitlines()
             for part in _INLINE_ITEM.split(raw)]
    for raw in lines:
        line = raw.strip()
        if not line or line.endswith(":") or (_CHATTY.match(line) and ":" not in line):
            continue
        marker = _LIST_MARKER.match(line)
        if marker:
            line = line[marker.end():]
            label = _LABEL.match(line)
            if label:  # "Fever: a high temperature" -> the item is its label
                line = label.group(1)
            items = [_EXPLANATION.split(line, maxsplit=1)[0]]
        else:
            if ":" in line:  # "Keywords: a, b" or "Sure, here they are: a, b" -> "a, b"
                line = line.split(":", 1)[1]
            echo = _ECHO.match(line)
            if echo:  # "The keywords are a, b and c." -> "a, b and c."
                line = line[echo.end():]
            items = _ITEM_SEPARATORS.split(line)
        for item in items:
            words.extend(_WORD.findall(item))
    return normalise_keywords(words, vocab, K)


# ---------------------------------------------------------------------------- statistical
_ZIPF_TABLES: dict[str, np.ndarray] = {}


def _zipf_table(vocab: PublicVocabulary) -> np.ndarray:
    """Zipf frequency (log10 per billion words, ``wordfreq`` English) of each word of V; 0 when
    wordfreq does not know the word. Public: wordfreq's data ships with the package."""
    table = _ZIPF_TABLES.get(vocab.sha256)
    if table is None:
        try:
            from wordfreq import get_frequency_dict
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("statistical keywords need the 'wordfreq' package "
                              "(pip install wordfreq)") from error
        freq = get_frequency_dict("en", wordlist="best")
        table = np.zeros(len(vocab), dtype=np.float64)
        for i, word in enumerate(vocab.words):
            f = freq.get(word)
            if f:
                table[i] = max(0.0, math.log10(f) + 9.0)
        _ZIPF_TABLES[vocab.sha256] = table
    return table


def statistical_keywords(texts: Sequence[str], vocab: PublicVocabulary,
                         K: int, *, fold_inflections: bool = False) -> list[list[str]]:
    """For each document, its ``K`` most distinctive words of V, by a public rarity prior.

    Score of a word w of V occurring tf times in the document (plurals folded as in
    ``normalise_keywords``): ``zipf(w) - log10(tf)``, lower is better, where ``zipf`` is the
    wordfreq English Zipf frequency (0, the rarest, for words wordfreq does not know). So the
    rarest words win, and repetition within the document counts as a tenfold rarity per
    decade of repeats. Ties go to the word seen first in the document. Deterministic, and a
    function of the document and public data only (no corpus statistics).

    ``fold_inflections`` (the facts mode) also folds irregular plurals and ``-ing`` / ``-ed``
    forms onto V (``inflected_form``), so "twitching" counts as "twitch" instead of being
    lost to a vocabulary that lists few inflected forms.
    """
    fold = inflected_form if fold_inflections else _vocab_form
    K = _check_k(K)
    zipf = _zipf_table(vocab)
    index = vocab.index
    forms: dict[str, int] = {}  # lowercase token -> vocabulary index, or -1 (public cache)
    results: list[list[str]] = []
    for text in texts:
        first: dict[int, int] = {}
        count: dict[int, int] = {}
        for position, token in enumerate(_WORD.findall(text.lower())):
            idx = forms.get(token)
            if idx is None:
                form = fold(token, index)
                idx = -1 if form is None else index[form]
                forms[token] = idx
            if idx < 0:
                continue
            if idx in count:
                count[idx] += 1
            else:
                count[idx] = 1
                first[idx] = position
        ranked = sorted(count, key=lambda i: (zipf[i] - math.log10(count[i]), first[i]))
        results.append([vocab.words[i] for i in ranked[:K]])
    return results


# ---------------------------------------------------------------------------- LLM
def llm_keywords(
    llm: LLM,
    texts: Sequence[str],
    vocab: PublicVocabulary,
    K: int,
    *,
    prompt: str | None = None,
    max_new_tokens: int = 48,
    batch_size: int = 16,
    pad_multiple: int = 64,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[str]]:
    """For each document, the keywords the LLM gives for the keyword prompt (greedy decoding).

    ``prompt`` is a template with ``{K}`` and ``{document}`` (default: prompts/keywords.txt).
    ``on_batch(n)`` is called after each batch with the number of documents it finished
    (real documents only; for progress bars, carries no text).

    Batch independence (the sensitivity argument needs each document's keywords to depend on
    that document alone): see :mod:`dpsynrag.models.greedy`. ``batch_size=1`` is the simplest strict
    setting. No sampling: nothing here is random.
    """
    K = _check_k(K)
    if batch_size < 1 or pad_multiple < 1 or max_new_tokens < 1:
        raise ValueError("batch_size, pad_multiple and max_new_tokens must be positive")
    template = load_prompt("keywords") if prompt is None else prompt
    prompts = [llm.chat_prompt_ids(keyword_prompt(text, K, template)) for text in texts]
    answers = generate_greedy(llm, prompts, max_new_tokens=max_new_tokens,
                              batch_size=batch_size, pad_multiple=pad_multiple,
                              on_batch=on_batch)
    return [parse_keyword_answer(answer, vocab, K) for answer in answers]


def _check_k(K: int) -> int:
    if isinstance(K, bool) or not isinstance(K, int | np.integer) or K < 1:
        raise ValueError(f"K must be a positive integer, got {K!r}")
    return int(K)
