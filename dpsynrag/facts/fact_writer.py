"""Fact mode (issue 14), step 5: select each cluster's facts and write one note per cluster.

Everything here is post-processing of released values (no cost, no ledger): the noisy fact
histograms of :mod:`dpsynrag.facts.fact_clusters`, the public domain D, the released
anchors and the public parameters below. No function of this module takes a document, its
items, a membership or an exact count, so the notes cannot depend on private data except
through the released noisy counts.

Selection rule for cluster r with anchor a (all values noisy, all thresholds public):

* support s_r = noisy h_r[a], the anchor's own count in its cluster (every member holds a, so
  it estimates the cluster's size). The cluster is dropped if s_r < ``min_support``
  (default: the absolute threshold below), unless s_r >= 1 and s_r >=
  ``held_share`` x the anchor's released count in the phrase release (``anchor_counts``):
  the anchor was released, and most documents that offered it are in its cluster. At small
  epsilon the absolute threshold (about 25 at epsilon 1) lies above the phrase threshold
  (22), so an answer written by 25 documents was released and then dropped here; a cluster
  left with few of the documents that offered its anchor (a drug whose documents joined
  their diagnoses' clusters) is still dropped;
* a keyword v is kept if noisy h_r[v] >= max(c_kw, frac * s_r) and, given the corpus
  shares estimated from the released keyword histogram, its share in the cluster is at least
  ``min_lift`` times its share in the corpus; a related phrase is kept if h_r[v] >=
  max(c_abs, frac_phrases * s_r). c_abs is the smallest integer c with |D| * P(N_Z(0,
  sigma^2) >= c) <= ``false_facts``: an item no member holds passes it with probability <=
  false_facts / |D|, so a cluster gets at most ``false_facts`` invented facts on average
  (computed from the exact discrete Gaussian pmf). c_kw is the same threshold at
  ``false_keywords`` (0.1; it was ``false_facts``, 1, before): with one invented
  keyword per cluster on average, a build of 30 clusters at epsilon 1 wrote about 30 words
  that no document holds ("Reported: heterodontoid. Likely diagnosis: Asthma."), and a
  sentence embedder matched questions to them;
* kept items are ordered by noisy count (descending, ties by string) and capped, phrases of A
  (``max_phrases``) and keywords of W (``max_keywords``) separately; a cluster with fewer than
  ``min_facts`` kept items, or (``require_keywords``) without a kept keyword, is dropped.
  Both are off by default: a kept cluster with no fact passing the
  threshold is written with its names ("Likely diagnosis: Type 2 Diabetes."), which a
  reader can still retrieve and answer from. Before, at epsilon 1 (sigma_C about 8.6) few
  clusters of a few dozen documents had a keyword over the threshold, and those that did
  often had it from noise.

Measured (keeping the held clusters and those without a keyword against dropping them,
the same seeded noise, one build per set, recall@10 of the evaluation's retriever, the
five read conditions sets and five read films sets): at epsilon 1 conditions 0.47 -> 0.55
on average and films level (docs/evaluation.md). ``false_keywords`` 1 -> 0.1, the same
way: epsilon 1 conditions 0.546 -> 0.568, films 0.395 -> 0.403; epsilon 3 conditions
0.693 -> 0.706, films 0.594 -> 0.586; epsilon 10 level (a stricter threshold for the support
as well lost clusters of films at epsilon 3).

The note is a fixed template: ``"{label}: {keyword} {keyword}. {Name} / {Name}."`` with
phrases in title case (:func:`display_phrase`), names with more words first (:func:`write_note`).
:func:`missing_facts` checks that every kept fact appears in the written text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dpsynrag.facts.terms import ITEM_ROLES, NAMING_ROLES, PACK

__all__ = [
    "ClusterFacts",
    "FactRule",
    "absolute_threshold",
    "display_phrase",
    "keyword_shares",
    "missing_facts",
    "select_facts",
    "write_note",
    "write_notes",
]

_SMALL_WORDS = frozenset({"a", "an", "and", "as", "at", "by", "for", "from", "in", "of", "on",
                          "or", "the", "to", "vs", "with"})


@dataclass(frozen=True)
class FactRule:
    """Public selection parameters (see the module docstring)."""

    frac: float = 0.2  # keywords: kept at >= frac x the anchor's noisy count
    false_facts: float = 1.0  # support and related phrases: invented ones per cluster (c_abs)
    false_keywords: float = 0.1  # keywords: invented ones per cluster (c_kw; rules <= 17: 1.0)
    min_support: float | None = None  # None: the absolute threshold c_abs
    min_facts: int = 0
    max_phrases: int = 8
    max_keywords: int = 16
    frac_phrases: float = 0.5  # related phrases: kept at >= frac_phrases x the anchor's count
    min_lift: float = 3.0  # keywords: cluster share / corpus share (needs keyword_share)
    require_keywords: bool = False  # drop a cluster with no kept keyword (rules <= 16: True)
    held_share: float = 0.5  # below min_support, kept at >= held_share x the released count
    label: str = "Reported"  # the note's public lead word: "{label}: keywords. Names."

    def __post_init__(self) -> None:
        if not (math.isfinite(self.frac) and 0 <= self.frac <= 1):
            raise ValueError("frac must lie in [0, 1]")
        if not (math.isfinite(self.false_facts) and self.false_facts > 0):
            raise ValueError("false_facts must be a finite positive number")
        if not (math.isfinite(self.false_keywords) and self.false_keywords > 0):
            raise ValueError("false_keywords must be a finite positive number")
        if not (math.isfinite(self.frac_phrases) and self.frac_phrases >= 0):
            raise ValueError("frac_phrases must be a finite non-negative number")
        if not (math.isfinite(self.held_share) and self.held_share >= 0):
            raise ValueError("held_share must be a finite non-negative number")
        if not (math.isfinite(self.min_lift) and self.min_lift >= 0):
            raise ValueError("min_lift must be a finite non-negative number")
        if not self.label.strip() or "\n" in self.label:
            raise ValueError("label must be one non-empty line")
        for name in ("min_facts", "max_phrases", "max_keywords"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer")


@dataclass(frozen=True)
class ClusterFacts:
    """The kept facts of one cluster, from released values only."""

    cluster: int
    anchor: str
    support: int  # the anchor's noisy count in its own cluster
    phrases: tuple[str, ...]  # kept items of A (anchor excluded), most frequent first
    keywords: tuple[str, ...]  # kept items of W that are not in A, most frequent first
    label: str = "Reported"  # the note's public lead word
    # released roles of the cluster's names (anchor and phrases): (name, role) pairs; empty:
    # the note is written without roles
    roles: tuple[tuple[str, str], ...] = ()

    @property
    def facts(self) -> tuple[str, ...]:
        return (self.anchor, *self.phrases, *self.keywords)


def absolute_threshold(sigma: float, domain_size: int, false_facts: float = 0.05) -> int:
    """Smallest integer c >= 1 with domain_size * P(N_Z(0, sigma^2) >= c) <= false_facts.

    Public: a function of sigma, |D| and the target only. The tail uses the exact discrete
    Gaussian pmf exp(-x^2 / (2 sigma^2)) / Z (float64; summed over |x| <= 40 sigma + 10).
    """
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError("sigma must be a finite positive number")
    if not (math.isfinite(false_facts) and false_facts > 0):
        raise ValueError("false_facts must be a finite positive number")
    size = max(int(domain_size), 1)
    span = math.ceil(40 * sigma) + 10
    x = np.arange(-span, span + 1, dtype=np.float64)
    weights = np.exp(-(x * x) / (2.0 * sigma * sigma))
    pmf = weights / weights.sum()
    upper = np.cumsum(pmf[::-1])[::-1]  # upper[i] = P(X >= x[i])
    ok = np.flatnonzero((x >= 1) & (size * upper <= false_facts))
    return int(x[ok[0]]) if ok.size else span + 1


def select_facts(
    noisy: np.ndarray,
    domain: Sequence[str],
    anchors: Sequence[str],
    phrases: Collection[str],
    sigma: float,
    rule: FactRule | None = None,
    keyword_share: Mapping[str, float] | None = None,
    *,
    phrase_share: Mapping[str, float] | None = None,
    roles: Mapping[str, str] | None = None,
    anchor_counts: Mapping[str, int] | None = None,
) -> list[ClusterFacts | None]:
    """Kept facts of each cluster (``None``: dropped), by the public rule of the module.

    ``noisy``: the released histograms (clusters x |D|); ``anchors[r]``: cluster r's anchor;
    ``phrases``: the released phrase set A (an item of D in A is a phrase, else a keyword);
    ``sigma``: the noise scale of the release. ``keyword_share[w]``: the share of documents
    holding keyword w, estimated from a released value (the stage-(a) noisy histogram); with
    it a keyword is kept only if its share in the cluster is at least ``min_lift`` times its
    share in the corpus (words every document uses, such as a template's, are not facts of
    any cluster). ``phrase_share[p]``: the same for the released phrases (from their released
    partition-selection counts): a related phrase is then kept only with the same lift (a
    term every template writes is no fact of any cluster). ``roles``: each released term's
    released role (``facts.roles``), kept with the cluster's names. ``anchor_counts[a]``:
    anchor a's noisy count in the phrase release, which lets a cluster below ``min_support``
    stay (the module docstring). Post-processing only (no cost).
    """
    rule = rule or FactRule()
    values = np.asarray(noisy)
    if values.ndim != 2 or values.shape != (len(anchors), len(domain)):
        raise ValueError("noisy must have shape (clusters, domain size)")
    index = {item: j for j, item in enumerate(domain)}
    if len(index) != len(domain):
        raise ValueError("the domain must not list an item twice")
    c_abs = absolute_threshold(sigma, len(domain), rule.false_facts)
    c_kw = absolute_threshold(sigma, len(domain), rule.false_keywords)
    min_support = c_abs if rule.min_support is None else rule.min_support
    phrase_set = set(phrases)
    out: list[ClusterFacts | None] = []
    for r, anchor in enumerate(anchors):
        if anchor not in index:
            raise ValueError(f"cluster {r}: its anchor is not in the domain")
        row = values[r].astype(np.int64)
        support = int(row[index[anchor]])
        if support < min_support and not _held(support, anchor, anchor_counts, rule):
            out.append(None)
            continue
        cut = max(float(c_kw), rule.frac * support)
        cut_phrases = max(float(c_abs), rule.frac_phrases * support)
        kept = [int(j) for j in np.flatnonzero(row >= min(cut, cut_phrases))
                if domain[int(j)] != anchor]
        kept.sort(key=lambda j: (-int(row[j]), domain[j]))
        chosen_phrases = tuple(
            domain[j] for j in kept if domain[j] in phrase_set and row[j] >= cut_phrases
            and _lift_ok(float(row[j]) / support, domain[j], phrase_share, rule.min_lift))
        chosen_keywords = tuple(
            domain[j] for j in kept if domain[j] not in phrase_set and row[j] >= cut
            and _lift_ok(float(row[j]) / support, domain[j], keyword_share, rule.min_lift))
        names = (anchor, *chosen_phrases[: rule.max_phrases])
        facts = ClusterFacts(r, anchor, support, chosen_phrases[: rule.max_phrases],
                             chosen_keywords[: rule.max_keywords], rule.label,
                             tuple((n, roles[n]) for n in names if n in roles) if roles else ())
        if len(facts.phrases) + len(facts.keywords) < rule.min_facts or (
                rule.require_keywords and not facts.keywords):
            out.append(None)
            continue
        out.append(facts)
    return out


def _held(support: int, anchor: str, anchor_counts: Mapping[str, int] | None,
          rule: FactRule) -> bool:
    """A cluster below the support threshold that still holds most documents that offered
    its released anchor: support >= 1 and >= held_share x the anchor's released count."""
    released = None if anchor_counts is None else anchor_counts.get(anchor)
    return released is not None and support >= 1 and support >= rule.held_share * released


def _lift_ok(cluster_share: float, word: str, keyword_share: Mapping[str, float] | None,
             min_lift: float) -> bool:
    if keyword_share is None:
        return True
    corpus_share = keyword_share.get(word)
    return corpus_share is None or corpus_share <= 0 or cluster_share >= min_lift * corpus_share


def keyword_shares(noisy_counts: Mapping[str, float], keywords_per_document: int
                   ) -> dict[str, float]:
    """Each keyword's share of documents, from the released noisy keyword histogram alone:
    count / N_hat with N_hat = (sum of the released counts) / keywords_per_document (every
    document adds at most that many keywords). Post-processing (no cost)."""
    n_hat = estimated_documents(noisy_counts, keywords_per_document)
    return {word: max(float(v), 0.0) / n_hat for word, v in noisy_counts.items()}


def estimated_documents(noisy_counts: Mapping[str, float], keywords_per_document: int) -> float:
    """N_hat = (sum of the released keyword counts) / keywords_per_document, at least 1: the
    documents the released keyword histogram accounts for. Post-processing (no cost)."""
    total = sum(max(float(v), 0.0) for v in noisy_counts.values())
    return max(total / max(keywords_per_document, 1), 1.0)


def _display_word(word: str) -> str:
    """``word`` capitalised for display, or ``word`` itself when the case change would not
    fold back to it (``str.casefold``; dotless "ı" -> "I" is "i"): any released string, so the
    note always holds every kept fact (``missing_facts``) and writing it never fails."""
    if "_" in word:  # an identifier ("err_sync_09"): all capitals
        shown = word.upper()
    else:  # title case of the first letter: "ﬁbrosis" -> "Fibrosis", "ǆemal" -> "ǅemal"
        shown = "-".join(part[:1].title() + part[1:] for part in word.split("-"))
    return shown if shown.casefold() == word.casefold() else word


def display_phrase(phrase: str) -> str:
    """Title case for a canonical lowercase phrase: "familial feshukia" -> "Familial Feshukia",
    "e-4471" -> "E-4471", "err_sync_09" -> "ERR_SYNC_09"; short function words stay lowercase
    except first. The result equals ``phrase`` under ``str.casefold`` (words split on
    whitespace, joined by one space), for every string (``_display_word``)."""
    words = phrase.split()
    return " ".join(w if i and w in _SMALL_WORDS else _display_word(w)
                    for i, w in enumerate(words))


def write_note(facts: ClusterFacts) -> str:
    """One note from one cluster's kept facts, by the public template (post-processing):
    ``"{label}: keyword keyword. Anchor / Phrase / Phrase."`` (keywords first: measured on
    the clinic set, a sentence embedder then matches a paraphrased question better than when
    the invented names lead; recall@10 0.75 against 0.40 with the same facts). The keywords
    are joined by spaces, not commas, in the kept order (by noisy count): with the packaged
    MiniLM embedder, simulated over 6 noise draws at the eval defaults, recall@10 rose from
    0.79 to 0.81 (clinic, ε = 10), 0.72 to 0.75 (clinic, ε = 3) and 0.88 to 0.95 (support
    tickets, ε = 10) with the same facts: words that co-occur in the notes then read as
    phrases ("crack corner mouth"). Names with more
    words come first, then the anchor, then by count ("Kimasox / Trouman's Disease" is written
    "Trouman's Disease / Kimasox"): a multi-word name (a disease, a product's full name) is
    more often the answer a reader looks for than a one-word one (a drug, a code), and the
    model answering from the note tends to take the first name. A rule of the kept facts
    only."""
    names = note_names(facts)
    if not facts.keywords:
        return names
    return f"{facts.label}: " + " ".join(facts.keywords) + ". " + names


def note_names(facts: ClusterFacts) -> str:
    """The names part of a cluster's texts: by released role (``role_sentences``) or, without
    roles, numbered like a role's group (``listed``: "(1) Name, (2) Name.", in
    ``display_names``' order). Released values only. The numbers keep two released items
    from reading as one run of a private note: with "Name / Name." two symptom items side
    by side ("waking the patient at night / numbness in the thumb") formed an 8-word span
    that six private notes share (conditions, epsilon 3)."""
    return role_sentences(facts) if facts.roles else listed(display_names(facts)) + "."


#: The note's labels (public; the lexicon pack's ``roles.toml``, hashed into the
#: certificate): the names without a role when no name has a naming role, the descriptions
#: of a cluster without a diagnosis or treatment, the other names without a role, and each
#: role's label in the order a note writes them (the measurements are beside them there).
UNNAMED_LABEL = PACK.text("roles", "unnamed_label")
DETAILS_LABEL = PACK.text("roles", "details_label")
OTHER_LABEL = PACK.text("roles", "other_label")
ROLE_LABELS: dict[str, str] = PACK.table("roles", "labels")


def role_sentences(facts: ClusterFacts) -> str:
    """The cluster's names grouped by their released role, in the public role order
    (``ROLE_LABELS``), each group one sentence ("Symptoms: Joint Pain. Likely diagnosis:
    Lyme Disease. Treatment: Doxycycline."); names without a
    role (or with a role ``ROLE_LABELS`` does not name) last ("Also: ..."). When no name
    has a naming role (``NAMING_ROLES``: a diagnosis, title, product or error), the names
    without a role say what the cluster is about: they come first, most frequent in the
    cluster first ("About: (1) Hay Fever, (2) Nose. Treatment: Cetirizine."), and a reader
    that takes the first name takes the likeliest answer (measured with the diagnosis cues
    taken out of the lexicon, conditions, epsilon 10, the same noise: accuracy 0.225 ->
    0.250, recall unchanged; no change with the lexicon as shipped). They stay first with
    the symptoms before the diagnosis too: put where a diagnosis goes, after the symptoms,
    the same build gave 0.225 against 0.350.
    Post-processing of released values."""
    role_of = {name: role for name, role in facts.roles if role in ROLE_LABELS}
    groups: dict[str, list[str]] = {}
    for name in display_order(facts):
        role = role_of.get(name, "")
        # a description (a whole list item of terms rule 6: "ringing in the ears") reads as
        # released; a name in title case
        groups.setdefault(role, []).append(name if role in ITEM_ROLES
                                           else display_phrase(name))
    parts = [f"{role_label(role, groups)}: {listed(groups[role])}."
             for role in ROLE_LABELS if role in groups]
    if "" in groups:
        if not NAMING_ROLES & set(groups):  # no name says what the cluster is about
            by_count = {name: k for k, name in enumerate((facts.anchor, *facts.phrases))}
            unnamed = sorted((name for name in display_order(facts) if name not in role_of),
                             key=by_count.__getitem__)
            parts.insert(0, f"{UNNAMED_LABEL}: {listed([display_phrase(n) for n in unnamed])}.")
        else:
            parts.append(f"{OTHER_LABEL}: {listed(groups[''])}.")
    return " ".join(parts)


def role_label(role: str, groups: Mapping[str, object]) -> str:
    """How a note names ``role`` among the cluster's ``groups`` of names (public): the
    descriptions of a cluster without a diagnosis or a treatment read "Details", not
    "Symptoms" ("Title: Hollow Forest 1964. Details: (1) a time traveller, ...")."""
    if role in ITEM_ROLES and not {"diagnosis", "treatment"} & set(groups):
        return DETAILS_LABEL
    return ROLE_LABELS[role]


def listed(items: Sequence[str]) -> str:
    """A group's items as a note lists them: one item alone, several numbered ("(1) night-time
    cough, (2) chest tightness"). The number between two items keeps every run of words that
    crosses from one released item into the next out of the private notes: without it, three
    symptom items side by side in the order one note listed them formed an 8-word span of that
    note alone (clinic: 11-14 per build with 6 terms per document). Public formatting."""
    if len(items) < 2:
        return ", ".join(items)
    return ", ".join(f"({k}) {item}" for k, item in enumerate(items, 1))


def display_order(facts: ClusterFacts) -> list[str]:
    """The cluster's names (canonical) as ``display_names`` orders them: names with more
    words first; a name whose words lie, in order, inside a longer name of the same cluster
    is written once, inside it ("sour taste" within "sour taste in the mouth", "cough"
    within "dry cough"). A reader then sees each fact once; every kept fact is still
    mentioned (``missing_facts``)."""
    ordered = sorted((facts.anchor, *facts.phrases), key=lambda p: -len(p.split()))
    padded = [f" {name} " for name in ordered]  # distinct names: an earlier one is longer
    return [name for i, name in enumerate(ordered)
            if not any(padded[i] in longer for longer in padded[:i])]


def display_names(facts: ClusterFacts) -> list[str]:
    """The cluster's names as a note writes them: names with more words first, then the
    anchor, then by count; title case (``display_phrase``). Released values only."""
    return [display_phrase(p) for p in display_order(facts)]


def _mentions(text: str, fact: str) -> bool:
    """``fact`` appears in ``text`` as whole words, whitespace-normalised and compared under
    full case folding (``str.casefold``: "Straße" mentions "STRASSE", "Fibrosis" "ﬁbrosis"),
    the equality ``display_phrase`` keeps."""
    pattern = (r"(?<!\w)" + r"\s+".join(re.escape(w.casefold()) for w in fact.split())
               + r"(?!\w)")
    return re.search(pattern, text.casefold()) is not None


def missing_facts(facts: ClusterFacts, text: str) -> list[str]:
    """The kept facts of ``facts`` that do not appear in ``text`` (empty: all covered)."""
    return [f for f in facts.facts if not _mentions(text, f)]


#: Texts a kept cluster gets by default (``--texts-per-cluster``), at every epsilon: see
#: ``note_views``.
TEXTS_PER_CLUSTER = 5


def note_views(facts: ClusterFacts, n: int = TEXTS_PER_CLUSTER) -> list[str]:
    """Up to ``n`` distinct texts of one cluster's kept facts (post-processing, free). Every
    view names every kept name and holds every kept keyword, in this order: the note
    (``write_note``); the names first, then the keywords; the note with its keywords reversed;
    the names first, then the keywords reversed; the note with its keywords rotated by half
    their number. A private corpus holds many documents per frequent answer, and a small
    reader that sees several of its top five agree answers from them; texts of other clusters
    among the five pull it away (the packaged 135M reader most often names the last text's
    answer). Views that hold the same words embed alike and rank together, so a cluster's
    texts fill the reader's top five. Measured with the packaged reader at epsilon 10, the
    released facts of one build per set re-written (40 queries each; accuracy / recall@10):
    0.40 / 0.775 (clinic), 0.575 / 0.875 (conditions), 0.55 / 0.85 (films) against 0.275 /
    0.775, 0.35 / 0.875 and 0.425 / 0.825 with views that differ in their keywords. Below
    epsilon 5 (where there were three views that differ in their keywords), the same
    re-writing of 160-query builds at epsilon 3 gave accuracy +1.9 to +9.4 points and
    recall@10 -4.4 to -6.3 points (docs/evaluation.md)."""
    if n < 1:
        raise ValueError("a cluster needs at least one text")
    keywords = facts.keywords
    if not keywords:
        return [write_note(facts)]
    names = note_names(facts)

    def note(words: Sequence[str]) -> str:
        return write_note(replace(facts, keywords=tuple(words)))

    def names_first(words: Sequence[str]) -> str:
        return f"{names} {facts.label}: {' '.join(words)}."

    reverse = keywords[::-1]
    half = len(keywords) // 2  # rotated by half (for two keywords: the reversed order)
    views = [note(keywords), names_first(keywords), note(reverse), names_first(reverse),
             *([note((*keywords[half:], *keywords[:half]))] if len(keywords) > 2 else [])]
    return list(dict.fromkeys(views))[:n]


def distinct_views(facts: Sequence[ClusterFacts], n: int = TEXTS_PER_CLUSTER
                   ) -> list[tuple[str, str]]:
    """(anchor, text) of every kept cluster's ``note_views``, in
    cluster order, each text once (post-processing, free): two clusters can keep the same
    facts, and a second copy of a text only takes a slot of a reader's top k; the first
    cluster's copy stays."""
    first: dict[str, str] = {}
    for item in facts:
        for view in note_views(item, n):
            first.setdefault(view, item.anchor)
    return [(anchor, view) for view, anchor in first.items()]


def write_notes(facts: Sequence[ClusterFacts | None]) -> list[str]:
    """Notes of the kept clusters, in cluster order (dropped clusters are skipped).

    Raises ``RuntimeError`` if a note misses one of its kept facts (a template bug).
    """
    notes: list[str] = []
    for item in facts:
        if item is None:
            continue
        note = write_note(item)
        if missing_facts(item, note):
            raise RuntimeError(f"the note of cluster {item.cluster} misses a kept fact")
        notes.append(note)
    return notes
