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
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.tokenize import TreebankWordTokenizer
    from nltk.tokenize.treebank import TreebankWordDetokenizer

__all__ = ["TOKENIZER", "detokenize", "ngram_key", "ngram_tokens", "tokenize"]

TOKENIZER = "nltk.TreebankWordTokenizer+final-period-split"


@functools.lru_cache(maxsize=1)
def _tokenizer() -> TreebankWordTokenizer:
    # nltk loads in about a second: only when a build or an eval tokenizes
    from nltk.tokenize import TreebankWordTokenizer

    return TreebankWordTokenizer()


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
