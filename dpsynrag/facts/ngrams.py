"""DP n-gram extraction: the collection's phrases, released level by level, no lexicon.

After Kim, Gopi, Kulkarni & Yekhanin, "Differentially Private n-gram Extraction" (NeurIPS
2021), on the DP set union / partition selection of Gopi et al. (2020). Each document
(one privacy unit after ingest) is a token sequence (``facts.tokens``: punctuation and digits
are tokens, case is kept). For the public lengths n_1 < n_2 < ... < n_J (``lengths``):

* tokens of a public list (punctuation and the public stopwords) need no release: an
  n-gram of such tokens only is public, never a candidate, and a released window wherever
  a longer n-gram holds it;
* level 1: the candidates of a document are its distinct n_1-grams (not all public);
* level j > 1: an n_j-gram of the document is a candidate only where every window of length
  n_{j-1} inside it was released at level j - 1 (with consecutive lengths: its two
  (n-1)-grams), a rule of the document and released values;
* each document contributes at most K_j distinct candidates at level j (``max_items``: one
  public cap, or one per level), chosen
  by a public rule of the document and released values (``unit_choice``): at level 1 its
  most frequent tokens first, at later levels the candidates whose least released window is
  rarest first (a phrase that barely passed needs all its holders; a common one has
  slack), ties in a pseudo-random order keyed by the document itself;
* level j is one DP partition selection (``accounting.partition_selection``): exact discrete
  Gaussian N_Z(0, sigma^2) on the count of every candidate present, released where the noisy
  count reaches tau (the smallest threshold whose delta_A <= the level's delta).

Privacy (add/remove one unit u). Fix the releases of levels < j. The candidates and choices of
every other unit are functions of that unit and those released values, so they are the same
in both neighbours; the counts of level j differ by u's own chosen set: at most K_j
coordinates by 1 each (l2 sensitivity sqrt(K_j); ``phrase_counts`` refuses more). Level j is
therefore delta_j-approximately rho_j-zCDP, rho_j = K_j / (2 sigma^2), delta_j = K_j P(Z >=
tau_j - 1) for the n-grams only u holds (``partition_selection``'s argument), and the levels
compose adaptively: the whole release is (sum_j delta_j)-approximately (sum_j rho_j)-zCDP,
sum_j K_j / (2 sigma^2) with one sigma for every level. Every level is one ledger release under
``ngrams/NN`` (charged before drawing, stored, never redrawn on resume); nothing here logs a
count or an n-gram.

``exact_release`` is the same stage without noise (every candidate held by at least
``min_count`` units): the eval's epsilon = inf ceiling runs this very code with it.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.partition_selection import phrase_counts, release_partitions
from dpsynrag.accounting.weighted_selection import release_weighted_partitions, weighted_counts

__all__ = [
    "DEFAULT_LENGTHS",
    "STAGE",
    "CountRelease",
    "NgramLevels",
    "exact_release",
    "iter_level_choices",
    "ledger_release",
    "level_candidates",
    "level_caps",
    "level_counts",
    "level_key",
    "level_keys",
    "merge_pass",
    "release_level_counts",
    "release_ngrams",
    "unit_choice",
]

STAGE = "f-ngrams"
DEFAULT_LENGTHS = (1, 2, 3, 4, 6, 8)

# (key, each document's chosen n-grams, max_items) -> {released n-gram: released count};
# the choices are read once, in order (a build passes them lazily: no level's choices are
# ever all held at once)
CountRelease = Callable[[str, Iterable[Sequence[str]], int], dict[str, int]]


def level_key(length: int, occurrence: int = 1) -> str:
    """The ledger key of the release of the n-grams of ``length`` tokens (``occurrence`` 2
    and on: a second pass at that length, ``ngrams/01-2``)."""
    key = f"ngrams/{int(length):02d}"
    return key if occurrence == 1 else f"{key}-{int(occurrence)}"


def level_keys(lengths: Sequence[int]) -> list[str]:
    """The ledger key of every level of ``lengths``, a repeated length counted."""
    seen: Counter[int] = Counter()
    keys = []
    for n in lengths:
        seen[n] += 1
        keys.append(level_key(n, seen[n]))
    return keys


def level_counts(choices: Iterable[Sequence[str]], max_items: int,
                 weight_scale: int | None = None) -> dict[str, int]:
    """The counts a level releases: the number of documents choosing each n-gram
    (``weight_scale`` None), or their weights floor(W / sqrt(m)) summed
    (``accounting.weighted_selection``). Refuses a document over its bound."""
    if weight_scale is None:
        return phrase_counts(choices, max_items)
    return weighted_counts(choices, max_items, weight_scale)


def release_level_counts(ledger: Ledger, key: str, counts: Mapping[str, int], max_items: int,
                         *, sigma: float, delta: float,
                         weight_scale: int | None = None) -> dict[str, int]:
    """One level's counts (``level_counts``, or the Beam path's sums of them) through the
    ledger: DP partition selection at ``sigma`` and ``delta``, uniform or weighted
    (``weight_scale`` W; ``sigma`` then in weight units)."""
    if weight_scale is None:
        return release_partitions(ledger, key, counts, max_items=max_items, sigma=sigma,
                                  delta=delta, stage=STAGE)
    return release_weighted_partitions(ledger, key, counts, max_items=max_items,
                                       scale=weight_scale, sigma=sigma, delta=delta,
                                       stage=STAGE)


def ledger_release(ledger: Ledger, *, sigma: float, delta: float,
                   weight_scale: int | None = None) -> CountRelease:
    """Each level through the ledger: each document's choices counted (``level_counts``,
    which refuses a document over its bound), then ``release_level_counts``."""
    def release(key: str, choices: Iterable[Sequence[str]], max_items: int) -> dict[str, int]:
        counts = level_counts(choices, max_items, weight_scale)
        return release_level_counts(ledger, key, counts, max_items, sigma=sigma, delta=delta,
                                    weight_scale=weight_scale)
    return release


def exact_release(min_count: int = 2, weight_scale: int | None = None) -> CountRelease:
    """No noise (the epsilon = inf ceiling of the eval only): every candidate whose exact
    count (``level_counts``) is at least ``min_count``. Never used by a build."""
    def release(key: str, choices: Iterable[Sequence[str]], max_items: int) -> dict[str, int]:
        counts = level_counts(choices, max_items, weight_scale)
        return {g: int(c) for g, c in counts.items() if c >= min_count}
    return release


@dataclass(frozen=True)
class NgramLevels:
    """The released n-grams of each length: {length: {n-gram key: released count}}."""

    lengths: tuple[int, ...]
    released: dict[int, dict[str, int]]

    def all_released(self) -> dict[str, int]:
        """Every released n-gram of every length with its released count."""
        merged: dict[str, int] = {}
        for length in self.lengths:
            merged.update(self.released.get(length, {}))
        return merged


def merge_pass(before: Mapping[str, int] | None, level: Mapping[str, int]) -> dict[str, int]:
    """A length's released n-grams after one more pass: those of the passes before and this
    one's (disjoint: a pass's candidates are what the passes before did not release)."""
    return {**(before or {}), **level}


def level_caps(max_items: int | Sequence[int], levels: int) -> tuple[int, ...]:
    """The cap of each level: one integer for all, or one per level."""
    caps = (max_items,) * levels if isinstance(max_items, int) else tuple(max_items)
    if len(caps) != levels or any(isinstance(k, bool) or not isinstance(k, int) or k < 1
                                  for k in caps):
        raise ValueError(f"max_items must be a positive integer or one per level, got "
                         f"{max_items!r}")
    return caps


def _check_lengths(lengths: Sequence[int]) -> tuple[int, ...]:
    values = tuple(int(n) for n in lengths)
    if not values or values[0] < 1 or any(b < a for a, b in itertools.pairwise(values)):
        raise ValueError("n-gram lengths must be non-decreasing positive integers")
    if any(b > 2 * a for a, b in itertools.pairwise(values)):
        raise ValueError("each n-gram length must be at most twice the one before it (its "
                         "windows of the previous length must cover it)")
    return values


def _no_public_token(_token: str) -> bool:
    return False


def level_candidates(tokens: Sequence[str], length: int, previous: Mapping[str, int] | None,
                     previous_length: int | None,
                     public: Callable[[str], bool] = _no_public_token) -> dict[str, int]:
    """The distinct ``length``-grams of one document that are candidates, each with its
    support: at the first level (``previous`` None) all of them with their count in the
    document; later, those whose every window of ``previous_length`` tokens was released,
    with the smallest released count among those windows. A function of the document and
    released values only. A level of the same length as the one before
    (``previous_length == length``) is a second pass: its candidates are the document's
    n-grams of that length that the pass before did not release, counted as at a first level.

    ``public(token)`` marks the tokens of a public list (punctuation, stopwords): an n-gram
    of public tokens only is public, never a candidate, and counts as released (support
    unbounded) where it is a window of a longer one."""
    found: dict[str, int] = {}
    size = len(tokens)
    if size < length:
        return found
    content = [0]  # content[i]: the tokens before i that are not public
    seen = 0
    for token in tokens:
        if not public(token):
            seen += 1
        content.append(seen)
    join = " ".join  # tokens.ngram_key, inlined: this loop is the build's hottest

    if previous is None or previous_length == length:
        # the first level, or a second pass at the same length: every n-gram not released yet
        for i in range(size - length + 1):
            if content[i + length] == content[i]:
                continue  # public tokens only
            key = join(tokens[i:i + length])
            if previous is None or key not in previous:
                found[key] = found.get(key, 0) + 1
        return found
    assert previous_length is not None
    unbounded = size + 2**62
    get = previous.get
    window_count = [unbounded if content[i + previous_length] == content[i]
                    else get(join(tokens[i:i + previous_length]))
                    for i in range(size - previous_length + 1)]
    span = length - previous_length + 1  # windows inside one candidate
    missing = [0]  # missing[i]: the windows before i that were not released
    for c in window_count:
        missing.append(missing[-1] + (c is None))
    for i in range(size - length + 1):
        if missing[i + span] == missing[i] and content[i + length] != content[i]:
            key = join(tokens[i:i + length])
            # every window is released here (no None among them)
            support: int = min(window_count[i:i + span])  # type: ignore[type-var,assignment]
            before = found.get(key)
            if before is None or support < before:
                found[key] = support
    return found


def _keyed_order(document_key: bytes, item: str) -> bytes:
    return hashlib.blake2b(item.encode("utf-8"), digest_size=8, key=document_key).digest()


def unit_choice(candidates: Mapping[str, int], max_items: int, document_key: bytes, *,
                first_level: bool) -> list[str]:
    """At most ``max_items`` of one document's candidates (a public rule of the document and
    released values): at the first level the most frequent in the document first, later the
    rarest released support first; ties in a pseudo-random order keyed by the document."""
    if len(candidates) <= max_items:
        return sorted(candidates)
    sign = -1 if first_level else 1
    ranked = sorted(candidates, key=lambda g: (sign * candidates[g],
                                               _keyed_order(document_key, g)))
    return sorted(ranked[:max_items])


def document_key(tokens: Sequence[str]) -> bytes:
    """The key of a document's tie order: a hash of its own tokens (16 bytes)."""
    return hashlib.blake2b("\x1f".join(tokens).encode("utf-8"), digest_size=16).digest()


def level_choices(docs_tokens: Sequence[Sequence[str]], length: int,
                  previous: Mapping[str, int] | None, previous_length: int | None,
                  max_items: int, keys: Sequence[bytes],
                  public: Callable[[str], bool] = _no_public_token) -> list[list[str]]:
    """Every document's chosen candidates of one level (private)."""
    return list(iter_level_choices(docs_tokens, length, previous, previous_length, max_items,
                                   keys, public))


def iter_level_choices(docs_tokens: Sequence[Sequence[str]], length: int,
                       previous: Mapping[str, int] | None, previous_length: int | None,
                       max_items: int, keys: Sequence[bytes],
                       public: Callable[[str], bool] = _no_public_token
                       ) -> Iterator[list[str]]:
    """``level_choices`` one document at a time, so that a level's counts are summed
    without every document's choices held at once."""
    first = previous is None or previous_length == length  # counted as at a first level
    for tokens, key in zip(docs_tokens, keys, strict=True):
        yield unit_choice(level_candidates(tokens, length, previous, previous_length, public),
                          max_items, key, first_level=first)


def release_ngrams(docs_tokens: Sequence[Sequence[str]], lengths: Sequence[int], *,
                   max_items: int | Sequence[int], release: CountRelease,
                   public: Callable[[str], bool] = _no_public_token,
                   progress: Callable[[int], None] | None = None) -> NgramLevels:
    """Release the n-grams of every length, level by level (module docstring).

    ``release`` is ``ledger_release`` in a build (one charge per level) or ``exact_release``
    for the ceiling. ``max_items`` is one cap for every level or one per level; each level's
    counts are checked to hold at most its cap of distinct n-grams per document before they
    are released. ``progress(1)`` after each level.
    """
    levels = _check_lengths(lengths)
    caps = level_caps(max_items, len(levels))
    keys = [document_key(tokens) for tokens in docs_tokens]
    released: dict[int, dict[str, int]] = {}
    previous: dict[str, int] | None = None
    previous_length: int | None = None
    for length, cap, key in zip(levels, caps, level_keys(levels), strict=True):
        choices = iter_level_choices(docs_tokens, length, previous, previous_length, cap,
                                     keys, public)
        # every level is released (charged) even when no document has a candidate: the
        # charges never depend on the data; the release refuses > cap per document
        level = merge_pass(released.get(length), release(key, choices, cap))
        released[length] = level
        previous, previous_length = level, length
        if progress is not None:
            progress(1)
    return NgramLevels(levels, released)
