"""Facts mode: the role histogram of the released terms (one release, then post-processing).

Input: each document's (term, role) pairs from ``facts.terms`` (a rule of that document
alone: at most K_e distinct terms, each with one role of the public list ``ROLES`` or none),
and the released term set A (the output of DP partition selection, already charged).

**The release.** h[t, j] = #{documents whose pair list holds (t, ROLES[j])} for every t in A
and every role j: a dense |A| x |ROLES| integer table over a public domain (A is released,
ROLES is a constant). A document holds at most K_e pairs, each in a distinct row, so adding
or removing it changes h by a 0/1 table with at most K_e ones: l2 sensitivity sqrt(K_e). The
table is released with exact discrete Gaussian noise N_Z(0, sigma_R^2) on every cell (zero
cells included), so the release is rho_R = K_e / (2 sigma_R^2) zCDP (Canonne, Kamath &
Steinke 2020, Thm 14), charged once under the ledger key ``roles`` (stage ``f-roles``), never
redrawn on resume. The table is built from each document's cells (``role_cells``) by
``accounting.contributions.bounded_counts``, which refuses a document adding more than one
cell to a term's row or cells in more than K_e rows: the bound is checked on the table that is
noised, not on the number of terms the document lists. The cost is conditional on A
(adaptive composition with its charge).

**The roles (post-processing, free).** Term t gets role j* = argmax_j noisy h[t, j] if that
count reaches ``role_threshold(sigma_R, |A| x |ROLES|)``: a count that no document holds passes
it with probability <= 1 / (|A| |ROLES|) per cell, so on average at most one term in the
whole build gets a role from noise alone. Otherwise the term has no role.

Exact counts are private intermediates: nothing here logs them, and errors never name a term.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from dpsynrag.accounting.contributions import bounded_counts
from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.facts.fact_clusters import domain_fingerprint
from dpsynrag.facts.fact_writer import absolute_threshold
from dpsynrag.facts.terms import ROLE_RANK, ROLES, UNANNOUNCED_RANK, DocumentTerms

__all__ = ["KEY", "MECHANISM", "OWN_ORDER_PRIORITIES", "STAGE", "release_roles", "role_cells",
           "role_charge", "role_counts", "role_priority", "term_roles"]

KEY = "roles"
STAGE = "f-roles"
MECHANISM = "discrete_gaussian"


def role_cells(document: DocumentTerms, row: Mapping[str, int], column: Mapping[str, int]
               ) -> list[int]:
    """The cells of the role table (flattened, row-major: term row x |ROLES| + role column)
    that ``document`` adds 1 to: one per (term, role) pair whose term is released and whose
    role is in ``ROLES``. A rule of the document and released values."""
    width = len(column)
    return [row[term] * width + column[role]
            for term, role in zip(document.terms, document.roles, strict=True)
            if term in row and role in column]


def role_counts(documents: Sequence[DocumentTerms], released: Sequence[str], K_e: int
                ) -> np.ndarray:
    """Exact h[t, j] over the released terms x ROLES (private; int64).

    The table is built from each document's cells (``role_cells``) by
    ``contributions.bounded_counts``, which refuses (``ContributionError``, a ``ValueError``)
    a document that adds a cell twice, more than one cell to a term's row or cells in more
    than ``K_e`` rows: the very table that is noised then changes by a 0/1 table with at most
    K_e ones when one document comes or goes, the sensitivity sqrt(K_e) its charge records.
    Also refuses a document listing more than ``K_e`` terms or one twice (the rule's input)."""
    row = {term: i for i, term in enumerate(released)}
    if len(row) != len(released):
        raise ValueError("the released terms must be distinct")
    column = {role: j for j, role in enumerate(ROLES)}
    units: list[int] = []
    cells: list[int] = []
    for d, document in enumerate(documents):
        if len(document.terms) > K_e or len(set(document.terms)) != len(document.terms):
            raise ValueError(f"a document holds more than K_e={K_e} distinct terms; the role "
                             "histogram's sensitivity sqrt(K_e) would not hold")
        added = role_cells(document, row, column)
        units.extend([d] * len(added))
        cells.extend(added)
    size = len(released) * len(ROLES)
    if size == 0:
        return np.zeros((0, len(ROLES)), dtype=np.int64)
    counts = bounded_counts(units, cells, size, row_size=len(ROLES), max_rows=K_e,
                            max_per_row=1, what="the role histogram")
    return counts.reshape(len(released), len(ROLES))


def role_charge(*, sigma: float, K_e: int, released: Sequence[str]) -> Charge:
    """The role histogram's charge: l2 sensitivity sqrt(K_e), rho = K_e / (2 sigma^2)."""
    sensitivity = math.sqrt(K_e)
    return Charge(stage=STAGE, mechanism=MECHANISM,
                  params={"sigma": float(sigma), "l2_sensitivity": sensitivity,
                          "max_items": int(K_e), "size": len(released) * len(ROLES),
                          "domain": domain_fingerprint([*released, "|", *ROLES])},
                  sensitivity=sensitivity, sensitivity_norm="l2")


def release_roles(ledger: Ledger, documents: Sequence[DocumentTerms], released: Sequence[str],
                  *, K_e: int, sigma: float) -> np.ndarray:
    """Release the noisy role histogram (|A| x |ROLES|, int64) through ``ledger``.

    Privacy: exact discrete Gaussian on every cell, rho = K_e / (2 sigma^2) (module
    docstring). A resumed build gets the stored table back, uncharged and undrawn."""
    if isinstance(K_e, bool) or not isinstance(K_e, int) or K_e < 1:
        raise ValueError(f"K_e must be a positive integer, got {K_e!r}")
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise ValueError("sigma must be a finite positive number")
    exact = role_counts(documents, released, K_e)

    def draw(rng: RandomSource) -> np.ndarray:
        # Privacy: exact discrete Gaussian on every cell, rho = K_e / (2 sigma^2).
        return discrete_gaussian(exact, float(sigma), rng, sensitivity=math.sqrt(K_e))

    value = ledger.release(KEY, role_charge(sigma=sigma, K_e=K_e, released=released), draw)
    noisy = np.asarray(value, dtype=np.int64).reshape(len(released), len(ROLES))
    return noisy


def term_roles(noisy: np.ndarray, released: Sequence[str], sigma: float) -> Mapping[str, str]:
    """Each released term's role from the noisy table (post-processing, free): the role of
    the largest noisy count if it reaches the public threshold, else none (left out)."""
    values = np.asarray(noisy)
    if values.shape != (len(released), len(ROLES)):
        raise ValueError("noisy must have shape (released terms, roles)")
    cut = absolute_threshold(sigma, max(values.size, 1), 1.0)
    roles: dict[str, str] = {}
    for i, term in enumerate(released):
        j = int(np.argmax(values[i]))  # ROLES is a non-empty constant
        if values[i, j] >= cut:
            roles[term] = ROLES[j]
    return roles


#: The anchor priorities within which a document joins the anchor it lists first, not the
#: rarest (``fact_clusters.anchor_clusters``): that of the released terms without a role.
#: Their released counts say how often documents offered them among their first K_e, not
#: how specific they are.
OWN_ORDER_PRIORITIES = frozenset({UNANNOUNCED_RANK})


def role_priority(roles: Mapping[str, str], released: Iterable[str] = ()) -> dict[str, int]:
    """Each term's anchor priority (lower first), a function of released values only: the
    released ``roles`` and, for the released terms without one (``released``), the rank
    ``facts.terms.UNANNOUNCED_RANK``, between the naming roles and the others.

    The naming roles (``NAMING_ROLES``: diagnosis, title, product, error) share rank 0, so a
    document naming two things (a product and an error code) joins the cluster of the rarer
    one (``anchor_order``: rarest first within a rank): the more specific name. Measured on
    the support tickets, ranking product before error let a template word tagged as a
    product ("the log shows error E-4685", "restart the app") gather tickets of many error
    codes into one cluster that named none of them. Every other role follows in its
    public order in ``ROLES`` (a treatment before a symptom).

    A released term without a role comes right after the naming roles: what a document is
    about may be written with words no cue of the lexicon announces ("Saw Summer Compass at
    the cinema"), and a term announced as a treatment, symptom or credit is known not to be
    it. Measured with the title cues taken out of the lexicon (films, epsilon 10, one build
    per setting, the same noise): a viewer's note then joined its director's cluster, and
    recall@10 was 0.50 and accuracy 0.03; with unannounced terms before the other roles,
    0.70 and 0.13."""
    priority = {term: UNANNOUNCED_RANK for term in released}
    priority.update({term: ROLE_RANK[role] for term, role in roles.items()})
    return priority
