"""facts.tokens: nltk's Treebank tokenizer with its patterns run by Python's ``re`` gives
nltk's own tokens (the tokenizer the certificate names)."""

from __future__ import annotations

import random
import re

from nltk.tokenize import TreebankWordTokenizer

from dpsynrag.facts import tokens

#: pieces the Treebank rules treat specially: quotes, contractions, brackets, dashes,
#: ellipses, clitics, numbers with separators, symbols, non-ASCII letters and spaces
PIECES = ['"', "''", "``", "'", "`", "(", ")", "[", "]", "{", "}", "<", ">", "--", "-",
          "...", ".", ",", ":", ";", "?", "!", "@", "#", "$", "%", "&", "cannot", "CANNOT",
          "gonna", "Gonna", "wanna ", "'tis", "'twas", "d'ye", "gimme", "lemme", "more'n",
          "don't", "I'm", "they'll", "we're", "you've", "she'd", "it's", "IT'S", "O'Neil",
          "3.5", "3,36",
          "1,000.00", "U.S.", "e.g.", "Toy Story (1995)", "Dr.", "café", "naïve", "Ǆemal",
          "Zürich", "\u00a0", "\t", "  ", " ", "word", "Word", "x", "42", "2023-05-07",
          "{$2300.00}", "XX/XX/2018", "a.m.", "'s", "s'", "N'T"]


def _random_lines(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        parts = [rng.choice(PIECES) for _ in range(rng.randint(1, 12))]
        glue = [rng.choice(["", " ", " ", "  "]) for _ in parts]
        lines.append("".join(p + g for p, g in zip(parts, glue, strict=True)))
    return lines


def test_the_stdlib_patterns_give_nltks_own_tokens() -> None:
    """3,000 random lines of the pieces above and a few sentences: the same tokens as nltk's
    guarded tokenizer, line by line."""
    guarded = TreebankWordTokenizer()
    fast = tokens._tokenizer()
    lines = [*_random_lines(3000, seed=57),
             'He said, "It\'s 3.5 km -- not 4!" (roughly).', "They'll pay $3.88... won't they?",
             "In particular, she likes Star Wars: Episode IV - A New Hope (1977), The Godfather."]
    assert [fast.tokenize(line) for line in lines] == [guarded.tokenize(line)
                                                      for line in lines]


def test_the_patterns_are_the_stdlib_engines_and_nltks_strings() -> None:
    fast, guarded = tokens._tokenizer(), TreebankWordTokenizer()
    pattern, replacement = fast.PUNCTUATION[0]
    assert isinstance(pattern, re.Pattern)
    assert pattern.pattern == guarded.PUNCTUATION[0][0].pattern
    assert replacement == guarded.PUNCTUATION[0][1]
    assert all(isinstance(p, re.Pattern) for p in fast.CONTRACTIONS2)


def test_a_table_of_another_shape_is_left_as_it_is() -> None:
    import regex

    assert tokens._stdlib_pattern("text") == "text"
    assert tokens._stdlib_pattern(3) == 3
    plain = re.compile("a+")
    converted = tokens._stdlib_pattern([(regex.compile("a+", regex.I | regex.V0), r"\g<0>"),
                                        "b", plain])
    assert isinstance(converted, list) and converted[1] == "b" and converted[2] is plain
    assert isinstance(converted[0][0], re.Pattern) and converted[0][1] == r"\g<0>"
    assert converted[0][0].flags & re.IGNORECASE
    fuzzy = regex.compile("a+", regex.V1)  # no re equal: kept for the regex engine
    assert tokens._stdlib_pattern(fuzzy) is fuzzy
    assert tokens._stdlib_flags(regex.A | regex.V0) == re.ASCII
