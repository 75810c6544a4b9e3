"""The tokens of the n-gram release: nltk's data-free Treebank tokenizer, case kept.

A document's token sequence is a function of that document alone (no model, no data file):
``TreebankWordTokenizer`` splits words, punctuation, digits and clitics ("It's" -> "It",
"'s"); it leaves a sentence-final period glued to its word inside a line, so a token longer
than one character that ends in one period and holds no other is split ("reflux." ->
"reflux", "."), which keeps "U.S." and "3.5" whole. Tokens never hold whitespace, so an
n-gram is written unambiguously as its tokens joined by single spaces (``ngram_key``).
``detokenize`` is the Treebank detokenizer: it writes a released span back as text
("( 1977 )" -> "(1977)"), post-processing of public values.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nltk.tokenize import TreebankWordTokenizer
    from nltk.tokenize.treebank import TreebankWordDetokenizer

__all__ = ["TOKENIZER", "detokenize", "ngram_key", "ngram_tokens", "tokenize"]

TOKENIZER = "nltk.TreebankWordTokenizer+final-period-split"


def _stdlib_flags(flags: int) -> int | None:
    """The ``re`` flags of a pattern the ``regex`` engine compiled with ``flags``, or None
    when it holds a flag ``re`` has no equal of (``regex`` numbers its flags its own way)."""
    import regex  # nltk's dependency, loaded with it

    same = {regex.IGNORECASE: re.IGNORECASE, regex.MULTILINE: re.MULTILINE,
            regex.DOTALL: re.DOTALL, regex.VERBOSE: re.VERBOSE, regex.UNICODE: re.UNICODE,
            regex.ASCII: re.ASCII}
    rest = flags & ~regex.VERSION0  # VERSION0: regex's re-compatible behaviour
    out = 0
    for theirs, ours in same.items():
        if rest & theirs:
            out |= ours
            rest &= ~theirs
    return None if rest else out


def _stdlib_pattern(item: Any) -> Any:
    """``item`` (a pattern, or a tuple or list holding patterns and replacement strings) with
    each pattern of the ``regex`` engine compiled again by ``re`` from its own pattern string
    and flags; ``re`` patterns, strings and patterns of flags ``re`` lacks stay as they are."""
    if isinstance(item, (tuple, list)):
        return type(item)(_stdlib_pattern(part) for part in item)
    pattern, flags = getattr(item, "pattern", None), getattr(item, "flags", None)
    if isinstance(item, (str, re.Pattern)) or not isinstance(pattern, str) \
            or not isinstance(flags, int):
        return item
    converted = _stdlib_flags(flags)
    return item if converted is None else re.compile(pattern, converted)


@functools.lru_cache(maxsize=1)
def _tokenizer() -> TreebankWordTokenizer:
    """nltk's Treebank tokenizer with its own patterns run by Python's ``re``.

    nltk routes every pattern through its ReDoS guard (``nltk.redos``: the ``regex`` engine
    under a wall-clock timeout), meant for patterns a caller supplies; the Treebank patterns
    are nltk's fixed ones, and under the guard tokenizing took twice as long (the same tokens
    on 65,019 lines of the real development sets' notes and queries). The tokenizer's own
    ``tokenize`` runs unchanged on its pattern tables (``STARTING_QUOTES``, ...), each
    pattern compiled again from nltk's pattern string and flags; a table of another shape
    is left as nltk has it. ``tests/test_tokens.py`` checks the tokens against nltk's
    guarded tokenizer."""
    # nltk loads in about a second: only when a build or an eval tokenizes
    from nltk.tokenize import TreebankWordTokenizer

    tokenizer = TreebankWordTokenizer()
    for name in dir(TreebankWordTokenizer):
        if name.isupper():
            setattr(tokenizer, name, _stdlib_pattern(getattr(TreebankWordTokenizer, name)))
    return tokenizer


@functools.lru_cache(maxsize=1)
def _detokenizer() -> TreebankWordDetokenizer:
    from nltk.tokenize.treebank import TreebankWordDetokenizer

    return TreebankWordDetokenizer()


def _split_period(token: str) -> list[str]:
    if len(token) > 1 and token.endswith(".") and token.count(".") == 1:
        return [token[:-1], "."]
    return [token]


def tokenize(text: str) -> tuple[str, ...]:
    """The token sequence of ``text``, line by line (a rule of the text alone). Each token
    is interned (``sys.intern``): a collection repeats its words, so a build holding every
    document's tokens keeps one string per distinct token, not one per occurrence."""
    tokens: list[str] = []
    for line in text.splitlines():
        for token in _tokenizer().tokenize(line):
            tokens.extend(_split_period(token))
    return tuple(sys.intern(token) for token in tokens)


def detokenize(tokens: Sequence[str]) -> str:
    """Text from tokens (Treebank's detokenizer): spacing of punctuation and quotes undone."""
    return str(_detokenizer().detokenize(list(tokens)))


def ngram_key(tokens: Sequence[str]) -> str:
    """The release key of an n-gram: its tokens joined by single spaces."""
    return " ".join(tokens)


def ngram_tokens(key: str) -> tuple[str, ...]:
    """The tokens of an n-gram key (``ngram_key``'s inverse)."""
    return tuple(key.split(" "))
