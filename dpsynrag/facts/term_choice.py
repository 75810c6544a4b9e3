"""Facts mode: which of its terms a document uses once the terms A are released.

Before the release of A, a document offers the first ``K_e`` of its candidate terms in the
order of the public prior (``facts.terms``, rule 5). Many of those cannot be used afterwards:
a patient's or a doctor's name, a phrase only this note writes. The role histogram and the
fact clusters then see fewer than ``K_e`` useful terms of that document, and the term it is
about may have been cut: on notes that name the diagnosis without a cue word ("the nurse
and Dr. Doe agree on ear infection"), the symptoms and the names filled the ``K_e`` places.

After the release, ``released_choice`` picks the document's ``K_e`` terms again, among its
candidates (the first ``CANDIDATES`` of the same public order) that are in A:

0. a released term that begins another released candidate of the document, word for word,
   is not chosen where its cue is none or the longer term's ("hollow forest" beside
   "hollow forest 1964", the name-only prefix of ``facts.terms``): the longer term holds
   it, and the prefix, released from the documents where the run was cut, would otherwise
   take a place and anchor a second cluster of the same film;
1. with released roles, the terms whose *released* role names what a record is about
   (``NAMING_ROLES``) first;
2. then by the role the document itself gives the term (its cue, ``facts.terms`` rule 4),
   in the public order of ``ROLES``, terms without a cue last, except one: the document's
   own first released term without a cue (the first in its candidates' public order, which
   already puts headings and people's names after the other unannounced terms) comes right
   after the naming roles (``facts.terms.UNANNOUNCED_RANK``), before a treatment, symptom
   or credit. What a record is about may be written with words no cue announces, and one
   announced as a drug or a symptom is known not to be it; one place keeps the symptoms'
   places for the symptoms. (Giving that place to the uncued term of the smallest released
   count failed: a released count counts the documents that offered the term among their
   first ``K_e``, so a term most documents rank late -- a director's name, a
   genre -- has a small count however often it is written, and a popular title a large
   one: on the blind8 films set, ε = 3, 145 notes of "Twelve Winters" (released count 132)
   gave the place to its director (19), and 1,952 of 4,000 notes joined a cluster anchored
   on their title; with the document's own order and rule 0, 3,417 did.)
3. terms without a cue by their released count, smallest first: a term written in many
   documents is a template's words ("discharge summary", "referral letter"), not what one
   record is about;
4. then the public prior order, where a name that a lowercase article started stands at the
   place of its form with the article (``facts.terms`` rule 8: "the autumn lantern 2" is
   written by a few notes and not released, "autumn lantern 2" by most).

**Privacy.** The choice reads one document's candidates (a rule of that document alone) and
released values only (A with its noisy counts, the released roles): it is post-processing
of those releases applied per document. Adding or removing one document changes its own
chosen terms and no other document's, and each document still holds at most ``K_e``
distinct terms, each with one role. So the sensitivities of the releases that read the
choice are those stated for ``K_e`` terms per document: the role histogram (sqrt(K_e),
``facts.roles``) and the fact histograms (K_e + K_s items in each of at most L clusters,
``facts.fact_clusters``). Their costs are conditional on the released values the choice
reads (adaptive composition with the charges of those releases). Nothing here is logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dpsynrag.facts.terms import (
    NAME_ARTICLES,
    NAMING_ROLES,
    NO_ROLE_RANK,
    ROLE_RANK,
    UNANNOUNCED_RANK,
    DocumentTerms,
)

__all__ = ["CANDIDATES", "anchor_terms", "first_terms", "released_choice", "released_choices"]

#: How many candidate terms per document (public prior order) the choice after the release
#: may pick from.
CANDIDATES = 48


def first_terms(candidates: DocumentTerms, K_e: int) -> DocumentTerms:
    """The document's first ``K_e`` candidates: its terms before any release."""
    return DocumentTerms(candidates.terms[:K_e], candidates.roles[:K_e])


def released_choice(candidates: DocumentTerms, released: Mapping[str, int], K_e: int,
                    roles: Mapping[str, str] | None = None) -> DocumentTerms:
    """The document's ``K_e`` terms among its candidates in ``released`` (module docstring).

    ``released`` maps each released term to its released noisy count; ``roles`` is each
    term's released role (``facts.roles.term_roles``), or None before the role release.
    """
    if K_e < 1:
        raise ValueError(f"K_e must be a positive integer, got {K_e!r}")

    usable = [p for p, term in enumerate(candidates.terms) if term in released]
    usable = [p for p in usable if not _held_by_longer(p, usable, candidates)]
    uncued = [p for p in usable if ROLE_RANK.get(candidates.roles[p], NO_ROLE_RANK)
              == NO_ROLE_RANK]
    # a name a lowercase article started stands where its unreleased form with the article
    # stands ("the autumn lantern 2" -> "autumn lantern 2", ``facts.terms`` rule 8)
    where = {term: p for p, term in enumerate(candidates.terms)}
    place = {p: min([p, *(where[f"{a} {candidates.terms[p]}"] for a in NAME_ARTICLES
                          if f"{a} {candidates.terms[p]}" in where)])
             for p in usable}
    # the document's own first uncued term takes the place kept for it (rule 2)
    first_uncued = min(uncued, key=place.__getitem__, default=-1)

    def order(position: int) -> tuple[int, int, int, int]:
        term, cue = candidates.terms[position], candidates.roles[position]
        naming = 0 if roles is not None and roles.get(term) in NAMING_ROLES else 1
        cue_rank = ROLE_RANK.get(cue, NO_ROLE_RANK)
        count = int(released[term]) if cue_rank == NO_ROLE_RANK else 0
        if position == first_uncued:
            cue_rank = UNANNOUNCED_RANK
        return naming, cue_rank, count, place[position]

    chosen = sorted(usable, key=order)[:K_e]
    return DocumentTerms(tuple(candidates.terms[p] for p in chosen),
                         tuple(candidates.roles[p] for p in chosen))


def _held_by_longer(position: int, usable: Sequence[int], candidates: DocumentTerms) -> bool:
    """Rule 0: another usable term of the document begins with this one, word for word, and
    this one's cue is none or the longer term's."""
    term, cue = candidates.terms[position], candidates.roles[position]
    return any(candidates.terms[p].startswith(term + " ") and cue in ("", candidates.roles[p])
               for p in usable if p != position)


def released_choices(candidates: Sequence[DocumentTerms], released: Mapping[str, int],
                     K_e: int, roles: Mapping[str, str] | None = None
                     ) -> list[DocumentTerms]:
    """``released_choice`` for each document."""
    return [released_choice(item, released, K_e, roles) for item in candidates]


def anchor_terms(choice: DocumentTerms, roles: Mapping[str, str]) -> list[str]:
    """The document's chosen terms that may anchor its cluster: all of them
    but a term whose released naming role (``NAMING_ROLES``) its own cue contradicts (the
    document announces it as another role: a symptom, a treatment) while another of its
    terms has a released naming role that its own cue agrees with.

    The role threshold admits about one false role per build by design; a false naming role
    makes a term an anchor, rarest first, and on blind7 conditions (ε = 3) "rapid
    breathing", released with the error role, drew 258 notes whose own cues said "diagnosed
    with pneumonia" away from pneumonia's cluster; with this rule, 137 of them return, and
    no other set changes (offline, the same releases).

    **Privacy.** Post-processing per document: it reads the document's own chosen terms
    and cues and the released roles, and only narrows which of its terms choose its cluster
    (its items in the fact histograms are unchanged), so each document still joins at most
    L clusters and the fact histograms' sensitivity is unchanged."""
    agreed = any(roles.get(term) in NAMING_ROLES and cue == roles.get(term)
                 for term, cue in zip(choice.terms, choice.roles, strict=True))
    return [term for term, cue in zip(choice.terms, choice.roles, strict=True)
            if not (agreed and roles.get(term) in NAMING_ROLES and cue
                    and cue != roles.get(term))]
