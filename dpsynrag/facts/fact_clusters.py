"""Fact mode (issue 14), steps 3-4: clusters anchored on released phrases, one noisy fact
histogram per cluster.

Inputs (all produced upstream):

* ``doc_items[i]``: the items of document i -- open-vocabulary phrases and statistical
  keywords -- chosen by a rule that reads document i only (private);
* ``anchors``: the released phrases A with their released noisy counts (public: the output of
  DP partition selection, already charged);
* ``domain``: the public fact domain D = sorted(A u W), W the top keywords of the released
  stage-(a) histogram (:func:`fact_domain`). D is fixed before any cluster is looked at.

**Step 3, anchored clustering (no release, no cost).** There is one cluster per released
anchor (optionally only anchors whose released count is at least a public minimum), in the
public order "rarest first": smallest released noisy count first, ties by the phrase string.
With released roles (``facts.roles``) the order puts anchors by the public rank of their
role first (a diagnosis, a title, a product or an error before a treatment or a symptom), so
a document joins the cluster of what it is about. Document i joins the clusters of the first
``L`` anchors of that order that it holds, except that among anchors of a priority listed in
``own_order`` (the build lists the rank of the released terms without a role) the
document's own order of its items decides, not the rarest first: its items come from
``facts.term_choice``, whose order puts first the unannounced term the document itself
ranks first. (A released count counts the documents that offered a term among their
first K_e, so a director's name most notes rank late had a smaller count than a popular
title and took the notes of "Twelve Winters" into its own cluster.) So:

* the list of clusters is a function of the released anchors only (an empty cluster exists
  like any other: skipping it would reveal that it is empty);
* a document's clusters are a function of its own items and public values only, so adding
  or removing one document changes the membership of no other document;
* each document is in at most ``L`` clusters.

**Step 4, the fact histograms (one release per cluster).** For cluster r,
h_r[v] = #{members d of C_r : d holds item v}, v over all of D. A document holds at most
``max_items`` = K' = K_e + K_s distinct items of D (checked; duplicates count once), so adding
or removing one document changes h_r by a 0/1 vector with at most K' ones in each of the <= L
clusters it belongs to, and leaves the other clusters unchanged.

Privacy: each h_r is released with exact discrete Gaussian noise N_Z(0, sigma^2) on EVERY
entry of D (zero counts included: noising only the non-zero entries would release the
support), l2 sensitivity sqrt(K'), so rho_r = K' / (2 sigma^2) zCDP per cluster (Canonne,
Kamath & Steinke 2020, Thm 14). The clusters are partitions of a parallel group with
``max_overlap`` L (overlapping parallel composition; docs/mechanisms.md 8.2), so the step
costs at most L K' / (2 sigma^2) in total, whatever the number of clusters. The releases go
through the build ledger under ``cluster/RRRRR/facts``: charged before drawing, stored, never
redrawn on resume. The cost is conditional on the released anchors and W (adaptive
composition with their own charges).

**Bounded memory (the n-gram mode's releases).** ``release_span_histograms`` makes the
same releases as ``release_fact_histograms`` -- the same checks, charges, keys, sigma,
sensitivity and group -- without ever holding a clusters x |D| table or drawing clusters x
|D| values: the exact counts stay sparse (``sparse_fact_counts``, checked by
``contributions.bounded_cells`` on the very table that is noised), and ``release_kept_counts``
draws of each row's discrete Gaussian release on EVERY entry of D (zero counts included)
exactly what the notes read -- its entries at or above a public ``floor`` (KEEP_Z sigma_C),
highest first, with their noisy counts (``KeptCounts``) -- with exactly the law they have
under the full draw (``accounting.sparse_noise``: a draw per non-zero cell, Geometric gaps
between the kept zero cells, their values from the tail law). The ledger stores that reduced
row: post-processing of the full-row release, free; a resumed build gets it back undrawn (a
ledger holding whole rows, written before, is reduced the same way). Work and memory: the
non-zero cells plus the kept entries (about |D| P(Z >= floor) per row beside the members'
own spans). The Beam path (``pipeline.beam_ngrams``) feeds its combined sparse cells to the
same ``release_kept_counts``. ``fact_counts`` / ``release_fact_histograms`` (dense) stay
for the lexicon facts mode and the evaluation.

The default group is ``"fact-clusters"``, not the token mode's ``"clusters"``: the anchored
clusters are another partition of the documents than the keyword soft clusters, so their
costs must not be summed partition by partition with those of stage (c)/(d).

Memberships and exact counts are private intermediates; nothing here logs them, and error
messages never name an item.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from dpsynrag.accounting.contributions import (
    bounded_cells,
    bounded_counts,
    declared_overlap,
    membership_pairs,
    weighted_cells,
)
from dpsynrag.accounting.ledger import Charge, Ledger
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.accounting.sparse_noise import discrete_gaussian_kept_rows

T = TypeVar("T")

GROUP = "fact-clusters"
STAGE = "f-facts"
MECHANISM = "discrete_gaussian"
GROUP_DESCRIPTION = ("fact mode: clusters anchored on released phrases; each document in at "
                     "most L clusters")

__all__ = [
    "GROUP",
    "MECHANISM",
    "STAGE",
    "AnchorRanks",
    "KeptCounts",
    "SparseCounts",
    "anchor_clusters",
    "anchor_order",
    "document_clusters",
    "domain_fingerprint",
    "fact_charge",
    "fact_counts",
    "fact_domain",
    "fact_histogram_rho",
    "facts_key",
    "histogram_sensitivity",
    "kept_entries",
    "partition_name",
    "release_fact_histograms",
    "release_kept_counts",
    "release_span_histograms",
    "sparse_fact_counts",
]


# ---------------------------------------------------------------------- public set-up
def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _item_list(items: object) -> Sequence[str]:
    if isinstance(items, str):
        raise TypeError("each document's items must be a sequence of strings, not a str")
    return items  # type: ignore[return-value]


def fact_domain(phrases: Mapping[str, int] | Sequence[str], keywords: Sequence[str]) -> list[str]:
    """The public fact domain D = sorted(A u W) (released phrases and top keywords)."""
    return sorted(set(phrases) | set(keywords))


def domain_fingerprint(domain: Sequence[str]) -> str:
    """A short hash of the public domain, recorded with each release to catch a changed plan."""
    digest = hashlib.sha256("\n".join(domain).encode("utf-8")).hexdigest()
    return digest[:16]


def anchor_order(anchors: Mapping[str, int], min_anchor_count: int | None = None,
                 priority: Mapping[str, int] | None = None) -> list[str]:
    """Released anchors, rarest first (noisy count ascending, ties by phrase); with
    ``priority`` (a released value per anchor, e.g. the rank of its released role: a
    diagnosis before a symptom), by priority first (missing: after all given).

    Only anchors whose released count is at least ``min_anchor_count`` (if given) are kept.
    A function of released values only.
    """
    counts = {str(a): int(c) for a, c in anchors.items()}
    if len(counts) != len(anchors):
        raise ValueError("anchors must be distinct strings")
    kept = [a for a, c in counts.items() if min_anchor_count is None or c >= min_anchor_count]
    last = 1 + max(priority.values(), default=0) if priority else 0
    return sorted(kept, key=lambda a: (priority.get(a, last) if priority else 0, counts[a], a))


# ---------------------------------------------------------------------- step 3
def anchor_clusters(
    doc_items: Sequence[Sequence[str]],
    anchors: Mapping[str, int],
    L: int,
    min_anchor_count: int | None = None,
    priority: Mapping[str, int] | None = None,
    own_order: Collection[int] = (),
) -> tuple[list[str], list[list[int]]]:
    """(anchor of each cluster, sorted member indices of each cluster).

    Clusters follow :func:`anchor_order` (one per released anchor, empty ones included);
    document i joins the clusters of the (at most) ``L`` first anchors among its items: by
    ``priority``, then rarest first, or, for anchors whose priority is in ``own_order``, in
    the order the document lists them (``document_clusters``). No release, no cost; the
    memberships are private.
    """
    L = _positive_int(L, "L")
    ranks = AnchorRanks.of(anchors, min_anchor_count, priority, own_order)
    clusters: list[list[int]] = [[] for _ in ranks.order]
    for d, items in enumerate(doc_items):
        for r in document_clusters(items, ranks, L):
            clusters[r].append(d)  # d ascends: every cluster stays sorted
    return list(ranks.order), clusters


@dataclass(frozen=True)
class AnchorRanks:
    """The public order of the clusters (``anchor_order``) as the rules read it: each
    anchor's cluster index (``rank``) and, for an anchor whose priority is in ``own_order``,
    its priority's first index (``start``). Computed once per build from released values,
    so that a batch of documents costs nothing per anchor."""

    order: tuple[str, ...]
    rank: Mapping[str, int]
    start: Mapping[str, int]

    @classmethod
    def of(cls, anchors: Mapping[str, int], min_anchor_count: int | None = None,
           priority: Mapping[str, int] | None = None,
           own_order: Collection[int] = ()) -> AnchorRanks:
        order = anchor_order(anchors, min_anchor_count, priority)
        rank = {anchor: r for r, anchor in enumerate(order)}
        # the anchors of one priority are contiguous in the public order: an own-order
        # anchor sorts at its priority's first place, then by its position in the document
        start: dict[str, int] = {}
        if priority:
            first_rank: dict[int, int] = {}
            for r, anchor in enumerate(order):
                first_rank.setdefault(priority.get(anchor, -1), r)
            start = {a: first_rank[priority[a]] for a in order
                     if a in priority and priority[a] in own_order}
        return cls(tuple(order), rank, start)


def document_clusters(items: Sequence[str], ranks: AnchorRanks, L: int) -> list[int]:
    """The clusters one document joins (``anchor_clusters``' rule, a function of the
    document's items and released values): those of its first ``L`` held anchors."""
    rank, start = ranks.rank, ranks.start
    held: dict[str, tuple[int, int]] = {}
    for position, item in enumerate(_item_list(items)):
        if item in rank and item not in held:
            held[item] = (start[item], position) if item in start else (rank[item], -1)
    return [rank[anchor] for anchor in sorted(held, key=held.__getitem__)[:L]]


# ---------------------------------------------------------------------- step 4
def partition_name(r: int) -> str:
    """The ledger partition of cluster ``r`` (``cluster/00017``), inside the fact group."""
    if isinstance(r, bool) or not isinstance(r, int | np.integer) or r < 0:
        raise ValueError(f"cluster index must be a non-negative integer, got {r!r}")
    return f"cluster/{int(r):05d}"


def facts_key(r: int) -> str:
    """The ledger key of cluster ``r``'s fact histogram (``cluster/00017/facts``)."""
    return f"{partition_name(r)}/facts"


def fact_histogram_rho(L: int, max_items: int, sigma: float) -> float:
    """Whole-step cost with >= L clusters: L K' / (2 sigma^2) zCDP."""
    return _positive_int(L, "L") * _positive_int(max_items, "max_items") / (2.0 * sigma**2)


def histogram_sensitivity(max_items: int, weight_scale: int | None = None) -> float:
    """The l2 sensitivity of one cluster's histogram: sqrt(K') for 0/1 counts, the weight
    scale S for weighted ones (``sparse_fact_counts``)."""
    if weight_scale is None:
        return math.sqrt(_positive_int(max_items, "max_items"))
    return float(_positive_int(weight_scale, "weight_scale"))


def fact_charge(r: int, *, sigma: float, max_items: int, domain: Sequence[str],
                group: str = GROUP, fingerprint: str | None = None,
                weight_scale: int | None = None) -> Charge:
    """Charge of one cluster's histogram: l2 sensitivity sqrt(K'), rho = K' / (2 sigma^2), or
    with ``weight_scale`` S (weighted counts, ``sigma`` in weight units) S, rho = S^2 / (2
    sigma^2). ``fingerprint``: ``domain_fingerprint(domain)``, computed once by a caller
    charging many clusters over the same domain (None: computed here)."""
    k = _positive_int(max_items, "max_items")
    sensitivity = histogram_sensitivity(k, weight_scale)
    params: dict[str, Any] = {"sigma": float(sigma), "l2_sensitivity": sensitivity,
                              "max_items": k, "size": len(domain),
                              "domain": (domain_fingerprint(domain) if fingerprint is None
                                         else fingerprint)}
    if weight_scale is not None:
        params["weight_scale"] = int(weight_scale)
    return Charge(stage=STAGE, mechanism=MECHANISM,
                  params=params,
                  sensitivity=sensitivity, sensitivity_norm="l2", group=group,
                  partition=partition_name(r))


def _doc_indices(doc_items: Sequence[Sequence[str]], domain: Sequence[str],
                 max_items: int) -> list[np.ndarray]:
    """For each document, the sorted distinct domain indices it holds (<= max_items)."""
    index = {item: j for j, item in enumerate(domain)}
    if len(index) != len(domain):
        raise ValueError("the domain must not list an item twice")
    rows: list[np.ndarray] = []
    for items in doc_items:
        ids = sorted({index[x] for x in _item_list(items) if x in index})
        if len(ids) > max_items:
            raise ValueError(f"a document holds more than max_items={max_items} distinct "
                             "domain items; the sensitivity sqrt(max_items) would not hold")
        rows.append(np.asarray(ids, dtype=np.int64))
    return rows


def _fact_cells(clusters: Sequence[Sequence[int]], doc_items: Sequence[Sequence[str]],
                domain: Sequence[str], max_items: int, max_overlap: int | None,
                sizes: list[int] | None = None
                ) -> tuple[np.ndarray, np.ndarray, int, int, int, int]:
    """Every (document, flat cell r |D| + j) a document adds to the clusters x D table, with
    the number of rows, the width, the overlap and the cap they are checked against.
    ``sizes``, when given, receives each document's number of distinct domain items."""
    k = _positive_int(max_items, "max_items")
    rows = _doc_indices(doc_items, domain, k)
    if sizes is not None:
        sizes.extend(int(ids.size) for ids in rows)
    width = len(domain)
    n_rows = len(clusters)
    overlap = max(n_rows, 1) if max_overlap is None else _positive_int(max_overlap, "max_overlap")
    # a member in more than L clusters is refused even where it holds no item (the token
    # writer, --writer tokens, reads the same clusters in the same group)
    member, joined = membership_pairs(clusters, len(doc_items), overlap,
                                      what="the fact histograms")
    if n_rows == 0 or width == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, n_rows, width, overlap, k
    # every (membership, item) pair of a document: its cells of the clusters x D table
    held = np.asarray([ids.size for ids in rows], dtype=np.int64)
    items = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    first = np.cumsum(held) - held
    repeats = held[member]
    units = np.repeat(member, repeats)
    within = np.arange(int(repeats.sum())) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    cells = np.repeat(joined, repeats) * width + items[np.repeat(first[member], repeats)
                                                       + within]
    return units, cells, n_rows, width, overlap, k


def fact_counts(clusters: Sequence[Sequence[int]], doc_items: Sequence[Sequence[str]],
                domain: Sequence[str], max_items: int, *, max_overlap: int | None = None
                ) -> np.ndarray:
    """Exact h_r[v] for every cluster r and domain item v (private; int64, clusters x |D|).

    The table is built by ``contributions.bounded_counts`` from each document's cells (its
    clusters x its distinct domain items) and nothing else, which refuses
    (``ContributionError``, a ``ValueError``) a document that adds more than ``max_items``
    ones to one cluster's row or, with ``max_overlap`` (the L of the clusters' parallel
    group), touches more than ``max_overlap`` rows: checked on the very table whose rows are
    noised. Also refuses a document holding more than ``max_items`` distinct domain items, a
    cluster member that is no document and a cluster listing a document twice.
    ``sparse_fact_counts`` is the same table without its zeros.
    """
    units, cells, n_rows, width, overlap, k = _fact_cells(clusters, doc_items, domain,
                                                          max_items, max_overlap)
    if n_rows == 0 or width == 0:
        return np.zeros((n_rows, width), dtype=np.int64)
    counts = bounded_counts(units, cells, n_rows * width,
                            row_size=width, max_rows=overlap, max_per_row=k,
                            what="the fact histograms")
    return counts.reshape(n_rows, width)


@dataclass(frozen=True)
class SparseCounts:
    """A clusters x |D| table of exact counts, its non-zero cells only (private), by rows:
    row r's cells are ``indices[indptr[r]:indptr[r + 1]]`` (ascending) with counts
    ``values[...]`` (CSR, int64). Memory: the non-zero cells, never clusters x |D|."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    width: int

    @property
    def rows(self) -> int:
        return int(self.indptr.size) - 1

    @classmethod
    def from_cells(cls, cells: np.ndarray, counts: np.ndarray, n_rows: int,
                   width: int) -> SparseCounts:
        """The table whose flat cell ``cells[i]`` (r |D| + j, distinct) holds ``counts[i]``;
        cells not listed hold 0. Cells already ascending (the Beam path's combined parts)
        are taken as they are: no sort, no copy beyond the column indices."""
        flat = np.asarray(cells, dtype=np.int64).reshape(-1)
        value = np.asarray(counts, dtype=np.int64).reshape(-1)
        if flat.shape != value.shape:
            raise ValueError("cells and counts must have the same length")
        if flat.size > 1 and not bool(np.all(flat[1:] > flat[:-1])):
            order = np.argsort(flat, kind="stable")
            flat, value = flat[order], value[order]
            del order
            if bool(np.any(flat[1:] == flat[:-1])):
                raise ValueError("a counted cell is listed twice")
        span = max(width, 1)
        if flat.size and (flat[0] < 0 or flat[-1] >= n_rows * span):
            raise ValueError("a counted cell lies outside the clusters x domain table")
        # row r's cells are those in [r |D|, (r + 1) |D|): no per-cell row array
        indptr = np.searchsorted(flat, np.arange(n_rows + 1, dtype=np.int64) * span,
                                 side="left").astype(np.int64)
        return cls(indptr, flat % span, value, int(width))

    def dense(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start`` to ``stop`` as a dense int64 (stop - start) x |D| table."""
        out = np.zeros((stop - start, self.width), dtype=np.int64)
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        rows = np.repeat(np.arange(stop - start), np.diff(self.indptr[start:stop + 1]))
        out[rows, self.indices[lo:hi]] = self.values[lo:hi]
        return out

    def to_dense(self) -> np.ndarray:
        """The whole table (for tests and small tables only: clusters x |D|)."""
        return self.dense(0, self.rows)


def sparse_fact_counts(clusters: Sequence[Sequence[int]], doc_items: Sequence[Sequence[str]],
                       domain: Sequence[str], max_items: int, *,
                       max_overlap: int | None = None,
                       weight_scale: int | None = None) -> SparseCounts:
    """``fact_counts`` without its zeros: the same cells, the same checks
    (``contributions.bounded_cells``, the sparse form of ``bounded_counts`` on the very
    table whose rows are noised), memory of the non-zero cells only.

    With ``weight_scale`` S (weighted span histograms, ``span_weights``): a document
    holding m distinct domain items adds floor(S / sqrt(m)) to each of its cells instead of
    1 (``partition_threshold.contribution_weight``), so each of its rows has l2 norm <= S,
    checked on the summed arrays (``contributions.weighted_cells``)."""
    sizes: list[int] = []
    units, cells, n_rows, width, overlap, k = _fact_cells(clusters, doc_items, domain,
                                                          max_items, max_overlap, sizes)
    if n_rows == 0 or width == 0 or cells.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SparseCounts(np.zeros(n_rows + 1, dtype=np.int64), empty, empty, width)
    if weight_scale is None:
        distinct, counts = bounded_cells(units, cells, n_rows * width, row_size=width,
                                         max_rows=overlap, max_per_row=k,
                                         what="the fact histograms")
    else:
        from dpsynrag.accounting.partition_threshold import contribution_weight

        scale = _positive_int(weight_scale, "weight_scale")
        weights = np.asarray([contribution_weight(max(m, 1), scale) for m in sizes],
                             dtype=np.int64)
        distinct, counts = weighted_cells(units, cells, weights, n_rows * width,
                                          row_size=width, max_rows=overlap, max_per_row=k,
                                          scale=scale, what="the fact histograms")
    return SparseCounts.from_cells(distinct, counts, n_rows, width)


def release_fact_histograms(
    ledger: Ledger,
    clusters: Sequence[Sequence[int]],
    doc_items: Sequence[Sequence[str]],
    domain: Sequence[str],
    *,
    sigma: float,
    max_items: int,
    L: int,
    group: str = GROUP,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Release every cluster's noisy fact histogram; returns int64 (clusters x |D|).

    Privacy: per cluster, discrete Gaussian N_Z(0, sigma^2) on all |D| entries, l2
    sensitivity sqrt(max_items): rho_r = max_items / (2 sigma^2), charged under
    ``cluster/RRRRR/facts`` in the parallel group ``group`` with max_overlap ``L`` (declared
    here; a different L for an existing group is refused). Total <= L max_items / (2 sigma^2).

    Refuses (``ValueError``, nothing charged or drawn) a document with more than
    ``max_items`` distinct domain items, and clusters in which a document appears more than
    L times in all, L read back from the ledger's declaration of ``group``
    (``contributions.declared_overlap``) and checked on the table that is noised.
    Releases go in ledger transactions of ``batch_size`` clusters; ``progress(n)`` is called
    after each with the number of clusters done. Already released clusters (a resumed build)
    come back from the ledger unchanged, uncharged and undrawn.
    """
    k, step = _declare_release(ledger, sigma=sigma, max_items=max_items, L=L,
                               batch_size=batch_size, group=group)
    # memberships checked against the L the ledger composes the group with, on the table
    # whose rows are noised (contributions.bounded_counts)
    counts = fact_counts(clusters, doc_items, domain, k,
                         max_overlap=declared_overlap(ledger, group))

    def read(value: Any) -> np.ndarray:
        row = np.asarray(value, dtype=np.int64)
        if row.shape != (len(domain),):
            raise ValueError("a stored fact histogram has another size than the domain")
        return row

    noisy = np.zeros_like(counts)
    draws = _dense_draws(lambda a, b: counts[a:b], sigma=float(sigma), max_items=k,
                         stored=lambda row: row)
    for start, rows in _release_rows(ledger, counts.shape[0], draws, domain,
                                     sigma=float(sigma), max_items=k, group=group,
                                     batch_size=step, read=read, progress=progress):
        noisy[start:start + len(rows)] = rows
    return noisy


def _declare_release(ledger: Ledger, *, sigma: float, max_items: int, L: int,
                     batch_size: int, group: str) -> tuple[int, int]:
    """The checks of a histogram release before anything is counted, and its parallel
    group declared with max_overlap ``L`` (a different L for an existing group is refused):
    returns (max_items, batch_size) as checked."""
    k = _positive_int(max_items, "max_items")
    overlap = _positive_int(L, "L")
    step = _positive_int(batch_size, "batch_size")
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise ValueError("sigma must be a finite positive number")
    ledger.declare_parallel_group(group, overlap, GROUP_DESCRIPTION)
    return k, step


def _dense_draws(exact_rows: Callable[[int, int], np.ndarray], *, sigma: float,
                 max_items: int, stored: Callable[[np.ndarray], Any]
                 ) -> Callable[[int, int], list[Callable[[RandomSource], Any]]]:
    """The draws of rows ``start .. stop - 1`` of a dense counted table: exact discrete
    Gaussian on every entry, the ledger storing ``stored(noisy row)``."""
    sensitivity = histogram_sensitivity(max_items)

    def draw(exact: np.ndarray) -> Callable[[RandomSource], Any]:
        # Privacy: exact discrete Gaussian on every entry, rho = max_items / (2 sigma^2);
        # what is stored is that row or post-processing of it
        return lambda rng: stored(discrete_gaussian(exact, sigma, rng, sensitivity=sensitivity))

    def draws(start: int, stop: int) -> list[Callable[[RandomSource], Any]]:
        exact = exact_rows(start, stop)
        return [draw(row) for row in exact]

    return draws


def _release_rows(ledger: Ledger, n_rows: int,
                  draws: Callable[[int, int], list[Callable[[RandomSource], Any]]],
                  domain: Sequence[str], *, sigma: float, max_items: int, group: str,
                  batch_size: int, read: Callable[[Any], T],
                  progress: Callable[[int], None] | None,
                  weight_scale: int | None = None) -> Iterator[tuple[int, list[T]]]:
    """Release rows ``0 .. n_rows - 1`` of a counted table, ``batch_size`` rows per ledger
    transaction: ``draws(start, stop)`` gives a batch's draws (each document's contribution
    already bounded; each draws the row's discrete Gaussian release, or a post-processing
    of it with exactly its law, and returns what the ledger stores), each row charged
    ``fact_charge``; ``read`` turns each stored value, drawn now or by an earlier run, into
    what the caller keeps. Yields (start, the batch's read values); ``progress(n)`` after
    each batch."""
    fingerprint = domain_fingerprint(domain)  # one hash of D for all the rows' charges
    for start in range(0, n_rows, batch_size):
        stop = min(start + batch_size, n_rows)
        batch = draws(start, stop)
        values = ledger.release_many([
            (facts_key(r), fact_charge(r, sigma=sigma, max_items=max_items, domain=domain,
                                       group=group, fingerprint=fingerprint,
                                       weight_scale=weight_scale),
             batch[r - start])
            for r in range(start, stop)])
        del batch
        rows = [read(value) for value in values]
        if progress is not None:
            progress(stop - start)
        yield start, rows


# ---------------------------------------------------------------------- step 4, bounded memory
@dataclass(frozen=True)
class KeptCounts:
    """Every cluster's released span histogram, post-processed to what the notes read: the
    domain entries whose noisy count reaches ``floor``, highest noisy count first (ties by
    the domain item), with their noisy counts. Row r is ``indices[indptr[r]:indptr[r + 1]]``
    and ``values[...]`` (int64). A deterministic function of the released rows and public
    values (post-processing: free); memory of the kept entries, never clusters x |D|."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    width: int
    floor: float

    @property
    def rows(self) -> int:
        return int(self.indptr.size) - 1

    def __len__(self) -> int:
        return self.rows

    def row(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """(domain indices, noisy counts) of cluster ``r``'s kept entries, highest first."""
        lo, hi = int(self.indptr[r]), int(self.indptr[r + 1])
        return self.indices[lo:hi], self.values[lo:hi]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[Sequence[int]]], width: int,
                  floor: float) -> KeptCounts:
        """From each cluster's ``[[j, noisy count], ...]`` (``kept_entries``)."""
        builder = _KeptBuilder()
        builder.add(rows)
        return builder.finish(width, floor)

    @classmethod
    def from_sparse(cls, counts: SparseCounts, domain: Sequence[str],
                    floor: float) -> KeptCounts:
        """The entries of a (noiseless) sparse table at or above ``floor`` (> 0), in the
        order ``kept_entries`` gives: for the evaluation's ceiling only."""
        if not floor > 0:
            raise ValueError("floor must be positive (zero entries are not listed)")
        rank = _domain_rank(domain)
        row = np.repeat(np.arange(counts.rows), np.diff(counts.indptr))
        keep = counts.values >= floor
        row, index, value = row[keep], counts.indices[keep], counts.values[keep]
        order = np.lexsort((rank[index], -value, row))
        sizes = np.bincount(row, minlength=counts.rows)
        indptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        return cls(indptr, index[order].astype(np.int64), value[order].astype(np.int64),
                   counts.width, float(floor))


class _KeptBuilder:
    """Collects kept rows batch by batch as int64 arrays (never one Python list of all)."""

    def __init__(self) -> None:
        self.sizes: list[np.ndarray] = []
        self.pairs: list[np.ndarray] = []

    def add(self, rows: Sequence[Sequence[Sequence[int]]]) -> None:
        self.sizes.append(np.asarray([len(r) for r in rows], dtype=np.int64))
        self.pairs.append(np.asarray([p for r in rows for p in r],
                                     dtype=np.int64).reshape(-1, 2))

    def finish(self, width: int, floor: float) -> KeptCounts:
        sizes = np.concatenate(self.sizes) if self.sizes else np.zeros(0, dtype=np.int64)
        pairs = (np.concatenate(self.pairs) if self.pairs
                 else np.zeros((0, 2), dtype=np.int64))
        indptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        return KeptCounts(indptr, pairs[:, 0].copy(), pairs[:, 1].copy(), int(width),
                          float(floor))


def kept_entries(noisy: np.ndarray, domain: Sequence[str], floor: float) -> list[list[int]]:
    """``[[j, noisy[j]], ...]`` for the entries of one noisy row at or above ``floor``,
    highest first, ties by ``domain[j]`` (post-processing of the row; the order in which
    ``span_notes`` takes a cluster's spans)."""
    row = np.asarray(noisy)
    chosen = np.flatnonzero(row >= floor).tolist()
    chosen.sort(key=lambda j: (-int(row[j]), domain[j]))
    return [[int(j), int(row[j])] for j in chosen]


def _kept_value(kept: list[list[int]], domain: Sequence[str], floor: float) -> dict[str, Any]:
    """What the ledger stores of one released row (JSON): its kept entries
    (``kept_entries``' form and order), the floor they are kept at and the domain's size."""
    return {"floor": float(floor), "size": len(domain), "kept": kept}


def _sparse_draws(counts: SparseCounts, domain: Sequence[str], *, sigma: float,
                  max_items: int, floor: float, weight_scale: int | None = None
                  ) -> Callable[[int, int], list[Callable[[RandomSource], Any]]]:
    """The draws of rows ``start .. stop - 1`` of a sparse counted table: each row's entries
    at or above ``floor`` of its discrete Gaussian release on every entry of D, drawn with
    exactly that law without a draw per zero entry (``sparse_noise``), the ledger storing
    them as ``_kept_value`` does.

    The batch's rows are drawn together, at the first of its draws that the ledger makes
    (``sparse_noise.discrete_gaussian_kept_rows``: each row's noise independent of the
    others', as if drawn one by one): inside the one transaction of ``release_many``, after
    every row of the batch is charged. A row the ledger already holds (a resumed build) is
    not asked for, and what was drawn for it is discarded, never stored or released."""
    sensitivity = histogram_sensitivity(max_items, weight_scale)
    rank = _domain_rank(domain)

    def draws(start: int, stop: int) -> list[Callable[[RandomSource], Any]]:
        drawn: list[list[tuple[np.ndarray, np.ndarray]]] = []

        def row(rng: RandomSource, r: int) -> Any:
            if not drawn:
                # Privacy: the kept entries of exact discrete Gaussian noise on every entry
                # of D, rho = sensitivity^2 / (2 sigma^2) per row (max_items, or S^2 for
                # weighted counts), each row charged already
                drawn.append(discrete_gaussian_kept_rows(
                    [_sparse_row(counts, i) for i in range(start, stop)], len(domain), sigma,
                    floor, rng, sensitivity=sensitivity))
            else:
                rng.declare_noise("gaussian", sigma, sensitivity)
            index, value = drawn[0][r - start]
            order = np.lexsort((rank[index], -value))  # kept_entries' order
            return _kept_value([[int(j), int(v)] for j, v in zip(index[order], value[order],
                                                                 strict=True)], domain, floor)

        return [functools.partial(row, r=r) for r in range(start, stop)]

    return draws


def _sparse_row(counts: SparseCounts, r: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = int(counts.indptr[r]), int(counts.indptr[r + 1])
    return counts.indices[lo:hi], counts.values[lo:hi]


def _domain_rank(domain: Sequence[str]) -> np.ndarray:
    """Each domain index's rank in the sorted domain (kept entries' ties go by the item)."""
    rank = np.empty(len(domain), dtype=np.int64)
    rank[np.argsort(np.asarray(domain, dtype=object), kind="stable")] = np.arange(len(domain))
    return rank


def _read_kept(value: Any, domain: Sequence[str], floor: float) -> list[list[int]]:
    """The kept entries at ``floor`` of a stored release: a stored ``_kept_value`` (kept at a
    floor no higher), or a whole noisy row stored by an earlier version (post-processed
    here, the same function of the same release)."""
    if isinstance(value, dict):
        if int(value.get("size", -1)) != len(domain):
            raise ValueError("a stored fact histogram has another size than the domain")
        if float(value["floor"]) > floor:
            raise ValueError("a stored span histogram keeps fewer entries than this build "
                             "reads (a higher floor); use a fresh state directory")
        kept = [[int(j), int(v)] for j, v in value["kept"]]
        if any(not 0 <= j < len(domain) for j, _ in kept):
            raise ValueError("a stored span histogram names an entry outside the domain")
        return [pair for pair in kept if pair[1] >= floor]
    row = np.asarray(value, dtype=np.int64)
    if row.shape != (len(domain),):
        raise ValueError("a stored fact histogram has another size than the domain")
    return kept_entries(row, domain, floor)


def release_kept_counts(ledger: Ledger, counts: SparseCounts, domain: Sequence[str], *,
                        sigma: float, max_items: int, floor: float, group: str = GROUP,
                        batch_size: int = 32,
                        progress: Callable[[int], None] | None = None,
                        weight_scale: int | None = None) -> KeptCounts:
    """Release the rows of a counted table as ``release_fact_histograms`` does -- the same
    charges, keys, order and noise: exact discrete Gaussian on EVERY entry of D, zero
    counts included -- and keep of each noisy row its entries at or above ``floor``
    (``KeptCounts``).

    ``counts`` is sparse (``sparse_fact_counts``, or the Beam path's checked sums), each
    document's contribution already bounded to ``max_items`` items and the group's L;
    ``group`` declared by the caller. ``batch_size`` rows per ledger transaction, drawn
    together (``_sparse_draws``): no row is made dense, and work and memory are the
    sparse counts plus the kept entries (``floor`` a few sigma: about |D| P(Z >= floor)
    kept per row beside the members' entries).

    Privacy: the ledger stores, and a resumed build gets back undrawn, the kept entries of
    each row (a deterministic function of the released row and public values: post-
    processing, which costs nothing), drawn with exactly their law under the full row's
    draw (``accounting.sparse_noise``); the charge is the full row's release, unchanged.
    """
    k = _positive_int(max_items, "max_items")
    step = _positive_int(batch_size, "batch_size")
    if not (isinstance(floor, int | float) and math.isfinite(floor) and floor > 0):
        raise ValueError("floor must be a finite positive number")
    if counts.width != len(domain):
        raise ValueError("the counted table has another width than the domain")
    floor = float(floor)

    kept = _KeptBuilder()
    draws = _sparse_draws(counts, domain, sigma=float(sigma), max_items=k, floor=floor,
                          weight_scale=weight_scale)
    for _, rows in _release_rows(ledger, counts.rows, draws, domain, sigma=float(sigma),
                                 max_items=k, group=group, batch_size=step,
                                 read=lambda value: _read_kept(value, domain, floor),
                                 progress=progress, weight_scale=weight_scale):
        kept.add(rows)
    return kept.finish(len(domain), floor)


def release_span_histograms(
    ledger: Ledger,
    clusters: Sequence[Sequence[int]],
    doc_items: Sequence[Sequence[str]],
    domain: Sequence[str],
    *,
    sigma: float,
    max_items: int,
    L: int,
    floor: float,
    group: str = GROUP,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
    weight_scale: int | None = None,
) -> KeptCounts:
    """``release_fact_histograms`` with bounded memory: the same checks, charges, keys and
    noise (so the same released rows under the same seed), the exact counts kept sparse
    (``sparse_fact_counts``) and each noisy row post-processed to its entries at or above
    ``floor`` as soon as it is drawn (``release_kept_counts``). Returns ``KeptCounts``.
    ``weight_scale`` S: weighted counts (``sparse_fact_counts``), l2 sensitivity S per row,
    ``sigma`` and ``floor`` in weight units."""
    k, step = _declare_release(ledger, sigma=sigma, max_items=max_items, L=L,
                               batch_size=batch_size, group=group)
    counts = sparse_fact_counts(clusters, doc_items, domain, k,
                                max_overlap=declared_overlap(ledger, group),
                                weight_scale=weight_scale)
    return release_kept_counts(ledger, counts, domain, sigma=float(sigma), max_items=k,
                               floor=floor, group=group, batch_size=step, progress=progress,
                               weight_scale=weight_scale)
