"""Released spans: what each document holds of the released n-grams, and notes stitched
from a cluster's released spans (the n-gram mode of the facts stages).

``document_spans`` (a rule of one document and released values): the released n-grams of a
document's token sequence that no longer released n-gram containing them covers at the same
place (its *maximal* released spans), longest first: first those at least half of which lies
outside the spans taken before them, then the others (overlapping windows of one shared run of
text come after the document's other spans). A span is a candidate item of the
cluster histograms; its text is the document's own words only where at least tau units
wrote the very same n-gram.

``stitch`` (post-processing of released values, free): a cluster's kept spans in a public
order (released count, highest first), each merged with another where one's last tokens are
the other's first ones (the longest overlap first; at least ``min_overlap`` tokens, or one
token that is not a stopword or punctuation), spans inside a longer kept one dropped. "In
particular , she likes" and "she likes Toy Story ( 1995 )" become one span. No vocabulary is
needed: where a span holds its role ("diagnosed with acid reflux"), the reader sees it.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Collection, Mapping, Sequence

from dpsynrag.facts.tokens import detokenize, ngram_key, ngram_tokens

__all__ = ["FRESH_SHARE", "SPAN_SEPARATOR", "close_bracket", "document_spans", "is_content",
           "note_order", "note_text", "stitch", "trim_span", "windows_released"]

SPAN_SEPARATOR = " … "
#: The brackets a span may leave open, with the token that closes each.
_BRACKETS = {"(": ")", "[": "]", "{": "}"}
_OPENING = frozenset({*_BRACKETS, "``", '"', "'"})
_CLOSING = frozenset({*_BRACKETS.values(), "''", '"', "'", ".", "!", "?", "%"})
#: Each closing bracket with the one it closes.
_CLOSERS = {close: opener for opener, close in _BRACKETS.items()}


def trim_span(tokens: Sequence[str], stopwords: Collection[str]) -> tuple[str, ...]:
    """A span without its loose ends (post-processing, public rule): the tail of an item
    that the span does not hold, numbers and marks only (its first tokens up to a bracket
    they close but never opened, "1981 ) , The Godfather ( 1972 )", or a bracket group that
    opens it and is followed by punctuation, "( 1996 ) , The Empire Strikes Back"), leading
    punctuation other than an opening bracket or quote, trailing punctuation other than a
    closing one or a full stop, and trailing stopwords ("), Jerry Maguire (1996), The"
    becomes "Jerry Maguire (1996)"). () when no content token with a letter is left (a bare
    year or number says nothing a reader can use)."""
    start, stop = 0, len(tokens)
    while True:
        while start < stop and not any(ch.isalnum() for ch in tokens[start]) \
                and tokens[start] not in _OPENING:
            start += 1
        cut = _item_tail(tokens[start:])
        if not cut:
            break
        start += cut
    while stop > start and (tokens[stop - 1].lower() in stopwords
                            or (not any(ch.isalnum() for ch in tokens[stop - 1])
                                and tokens[stop - 1] not in _CLOSING)):
        stop -= 1
    trimmed = tuple(tokens[start:stop])
    return trimmed if any(is_content(t, stopwords) and any(ch.isalpha() for ch in t)
                          for t in trimmed) else ()


#: A closing bracket among a span's first this many tokens, after numbers and marks only,
#: that the span never opened ends the tail of an item before it ("1981 ) , The
#: Godfather"); further on, or after a word, it is left alone.
ITEM_TAIL_REACH = 3


def _item_tail(tokens: Sequence[str]) -> int:
    """Where a span starts once the tail of an item it does not hold is cut (a rule that
    never cuts a word): after a bracket among its first ``ITEM_TAIL_REACH`` tokens that
    it closes without opening, numbers and marks before it, or after a
    bracket group of no word that opens it when punctuation follows the group ("( 1996 ) ,");
    0 otherwise."""
    for i, token in enumerate(tokens[:ITEM_TAIL_REACH]):
        if token in _BRACKETS or any(ch.isalpha() for ch in token):
            break  # a word is never cut ("gout ) , fever" stays)
        if token in _CLOSERS:
            return i + 1
    if not tokens or tokens[0] not in _BRACKETS:
        return 0
    close = _BRACKETS[tokens[0]]
    for i, token in enumerate(tokens[1:], start=1):
        if token in _BRACKETS or (token in _CLOSERS and token != close) \
                or any(ch.isalpha() for ch in token):
            return 0  # nested, mismatched, or words ("(gout), fever"): leave it
        if token == close:
            after = tokens[i + 1] if i + 1 < len(tokens) else None
            return i + 1 if after is not None and not any(ch.isalnum() for ch in after) else 0
    return 0


def close_bracket(tokens: Sequence[str],
                  released: Mapping[int, Collection[str]]) -> tuple[str, ...]:
    """A span that ends inside a bracket it opened, closed where the released n-grams close
    it: the shortest released length n >= 2 holding the span's last n - 1 tokens followed by
    the closing bracket ("Toy Story ( 1995" and the released "1995 )" give "Toy Story ( 1995
    )"), and only where the closed span's last window of the longest released length is
    released too (as ``windows_released`` asks of a join: the bracket writes no long n-gram
    that fewer than tau units wrote). Post-processing of released values, a public rule;
    any other span is unchanged."""
    open_brackets: list[str] = []
    for token in tokens:
        if token in _BRACKETS:
            open_brackets.append(_BRACKETS[token])
        elif open_brackets and token == open_brackets[-1]:
            open_brackets.pop()
    lengths = sorted(n for n in released if n >= 2)
    if not open_brackets or not lengths or lengths[0] - 1 > len(tokens):
        return tuple(tokens)
    n = lengths[0]
    whole = (*tokens, open_brackets[-1])
    # the bracket adds one window at each length: the shortest one closes it, the longest
    # one must be released as a join's must (windows_released of the last longest tokens)
    if ngram_key(whole[len(whole) - n:]) in released[n] \
            and windows_released(whole[-max(released):], released):
        return whole
    return tuple(tokens)


def note_order(spans: Sequence[tuple[str, ...]], anchor: str) -> list[tuple[str, ...]]:
    """A note's spans in a public order: the one holding the anchor first, the others in a
    pseudo-random order keyed by the anchor (a released value), so that two spans sit side
    by side in a note for no reason a document could share (ordered by count, a list of
    popular titles would repeat the order in which some documents list them)."""
    anchor_tokens = tuple(ngram_tokens(anchor))

    def holds_anchor(span: tuple[str, ...]) -> bool:
        n = len(anchor_tokens)
        return any(span[i:i + n] == anchor_tokens for i in range(len(span) - n + 1))

    key = hashlib.blake2b(anchor.encode("utf-8"), digest_size=16).digest()

    def order(span: tuple[str, ...]) -> tuple[bool, bytes]:
        digest = hashlib.blake2b(ngram_key(span).encode("utf-8"), digest_size=8, key=key)
        return (not holds_anchor(span), digest.digest())

    return sorted(spans, key=order)


def is_content(token: str, stopwords: Collection[str]) -> bool:
    """A token that is neither punctuation nor a public stopword."""
    return any(ch.isalnum() for ch in token) and token.lower() not in stopwords


#: A document's maximal spans are taken in two tiers (``document_spans``): first those with at
#: least this share of their tokens outside the spans taken before them, then the others.
FRESH_SHARE = 0.5


def document_spans(tokens: Sequence[str], released: Mapping[int, Mapping[str, int]],
                   fresh_share: float = FRESH_SHARE) -> tuple[list[str], list[str]]:
    """The maximal released spans of one document (distinct), in two tiers, each longest
    first, then in the order they occur: (fresh, overlapping). A span is fresh where at
    least ``fresh_share`` of its tokens lie outside the fresh spans taken before it; the
    others (none of them fresh elsewhere in the document) follow. ``released``:
    {length: {n-gram key: released count}}.

    A run of text that many documents share ("I finally got an appointment and Dr ... told
    me") holds one maximal 8-gram per start, each a token further on. Ranked as they come,
    those windows fill the document's item cap and push out the single words that a short
    span carries (a diagnosis); as the second tier they fill only the room the fresh spans
    leave (a run of k tokens gives about 2k / n fresh n-grams instead of k - n + 1). A rule
    of the document and released values."""
    lengths = sorted(released, reverse=True)
    # reach[i]: the furthest stop of the spans met so far that start at or before i and
    # end after it, so [start, stop) lies inside one of them iff reach[start] >= stop
    reach = [0] * (len(tokens) + 1)
    taken = [False] * len(tokens)  # token i lies inside a fresh span
    fresh: dict[str, None] = {}
    overlapping: dict[str, None] = {}
    join = " ".join  # ngram_key, inlined (one call per window of every document)
    for length in lengths:
        level = released[length]
        if not level:
            continue
        need = fresh_share * length
        for start in range(len(tokens) - length + 1):
            stop = start + length
            if reach[start] >= stop:
                continue
            key = join(tokens[start:stop])
            if key in level:
                for i in range(start, stop):
                    if reach[i] < stop:
                        reach[i] = stop
                if length - sum(taken[start:stop]) >= need:
                    taken[start:stop] = [True] * length
                    fresh.setdefault(key, None)
                else:
                    overlapping.setdefault(key, None)
    # one string per distinct span however many documents hold it (a build keeps every
    # document's spans until the histograms are counted)
    return ([sys.intern(key) for key in fresh],
            [sys.intern(key) for key in overlapping if key not in fresh])


def _overlap(left: tuple[str, ...], right: tuple[str, ...], min_overlap: int,
             stopwords: Collection[str]) -> int:
    """The longest k such that left's last k tokens are right's first k (0 if too weak)."""
    for k in range(min(len(left), len(right)) - 1, 0, -1):
        if left[-k:] == right[:k]:
            if k >= min_overlap or (k == 1 and is_content(left[-1], stopwords)):
                return k
            return 0
    return 0


def _contains(outer: tuple[str, ...], inner: tuple[str, ...]) -> bool:
    n = len(inner)
    return any(outer[i:i + n] == inner for i in range(len(outer) - n + 1))


def _always(_tokens: tuple[str, ...]) -> bool:
    return True


def stitch(spans: Sequence[str], *, min_overlap: int = 2,
           stopwords: Collection[str] = (),
           allowed: Callable[[tuple[str, ...]], bool] = _always) -> list[tuple[str, ...]]:
    """Merge spans (given in their public order) by their overlaps into maximal spans.

    Greedy and deterministic: repeatedly the pair with the longest overlap (ties: the
    earlier left span, then the earlier right span) whose join ``allowed`` accepts is joined
    into the left one's place, until no pair overlaps; a span contained in another is
    dropped first. Returns the stitched spans as token tuples, in the order of their first
    span. (``allowed``: e.g. every window of the longest released length is released, so a
    join never writes a long n-gram that was not released.)
    """
    items = [ngram_tokens(s) for s in spans]
    items = [t for i, t in enumerate(items) if t not in items[:i]]
    kept = [t for t in items if not any(o != t and len(o) > len(t) and _contains(o, t)
                                        for o in items)]
    while True:
        best: tuple[int, int, int] | None = None  # (-overlap, left, right)
        for i, left in enumerate(kept):
            for j, right in enumerate(kept):
                if i == j:
                    continue
                k = _overlap(left, right, min_overlap, stopwords)
                if k and (best is None or (-k, i, j) < best) and allowed(left + right[k:]):
                    best = (-k, i, j)
        if best is None:
            return kept
        k, i, j = -best[0], best[1], best[2]
        merged = kept[i] + kept[j][k:]
        kept = [merged if m == i else t for m, t in enumerate(kept) if m != j]
        kept = [t for t in kept if t == merged or not _contains(merged, t)]


def note_text(stitched: Sequence[Sequence[str]]) -> str:
    """One note: the stitched spans written as text, joined by an ellipsis."""
    return SPAN_SEPARATOR.join(detokenize(span) for span in stitched if span)


def windows_released(tokens: Sequence[str], released: Mapping[int, Collection[str]]) -> bool:
    """Whether every window of the longest released length inside ``tokens`` was released
    at that length (True for a span shorter than it): a stitched span then holds no long
    n-gram that fewer than tau units wrote."""
    if not released:
        return True
    longest = max(released)
    level = released[longest]
    return all(ngram_key(tokens[i:i + longest]) in level
               for i in range(len(tokens) - longest + 1))
