"""What one unit adds to a noised array is checked on that array (issue 58, item 2):
``contributions.bounded_counts`` and ``membership_pairs``, and the counting functions that
build their arrays with them (the role histogram, the fact histograms, the token mode's
clusters)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynrag.accounting.contributions import (
    ContributionError,
    bounded_counts,
    declared_overlap,
    membership_pairs,
    unit_memberships,
)
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.facts import roles
from dpsynrag.facts.fact_clusters import fact_counts, release_fact_histograms
from dpsynrag.facts.roles import ROLES, release_roles, role_counts
from dpsynrag.facts.terms import DocumentTerms


# ---------------------------------------------------------------------- bounded_counts
def test_bounded_counts_is_the_histogram_of_the_cells() -> None:
    units = [0, 0, 1, 2, 2, 2]
    cells = [1, 3, 1, 0, 1, 2]
    counts = bounded_counts(units, cells, 4, max_per_row=3, what="h")
    assert counts.tolist() == [1, 3, 1, 1] and counts.dtype == np.int64
    assert bounded_counts([], [], 3, max_per_row=1, what="h").tolist() == [0, 0, 0]


def test_a_unit_over_its_cells_is_refused_naming_only_the_bound() -> None:
    with pytest.raises(ContributionError, match=r"^h: a unit adds more than 2 ones to one "
                                                r"row; the recorded sensitivity would not "
                                                r"hold$"):
        bounded_counts([0, 0, 0, 1], [0, 1, 2, 0], 4, max_per_row=2, what="h")
    # one unit over, among many within: still refused
    units = np.repeat(np.arange(100), 2)
    cells = np.tile([0, 1], 100)
    assert bounded_counts(units, cells, 2, max_per_row=2, what="h").tolist() == [100, 100]
    with pytest.raises(ContributionError):
        bounded_counts(np.append(units, 57), np.append(cells, 1) % 2, 3, max_per_row=2,
                       what="h")


def test_a_cell_twice_or_outside_the_array_is_refused() -> None:
    with pytest.raises(ContributionError, match="same cell twice"):
        bounded_counts([3, 3], [1, 1], 4, max_per_row=4, what="h")
    with pytest.raises(ContributionError, match="outside the noised array"):
        bounded_counts([0], [4], 4, max_per_row=4, what="h")
    with pytest.raises(ContributionError, match="outside the noised array"):
        bounded_counts([0], [-1], 4, max_per_row=4, what="h")
    with pytest.raises(ValueError, match="same length"):
        bounded_counts([0, 1], [0], 4, max_per_row=4, what="h")


def test_rows_touched_and_ones_per_row_are_bounded_apart() -> None:
    # a 3 x 4 table: unit 0 adds 2 ones to row 0 and 1 to row 2
    counts = bounded_counts([0, 0, 0], [0, 1, 9], 12, row_size=4, max_rows=2, max_per_row=2,
                            what="t")
    assert counts.reshape(3, 4).tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]]
    with pytest.raises(ContributionError, match="touches more than 1 rows"):
        bounded_counts([0, 0, 0], [0, 1, 9], 12, row_size=4, max_rows=1, max_per_row=2,
                       what="t")
    with pytest.raises(ContributionError, match="more than 1 ones to one row"):
        bounded_counts([0, 0, 0], [0, 1, 9], 12, row_size=4, max_rows=2, max_per_row=1,
                       what="t")
    # another unit's cells in the same rows do not count against the first
    assert bounded_counts([0, 1, 2], [0, 0, 0], 12, row_size=4, max_rows=1, max_per_row=1,
                          what="t")[0] == 3


# ---------------------------------------------------------------------- memberships
def test_memberships_are_checked_against_the_declared_overlap() -> None:
    clusters = [[0, 2], [2], [1, 2]]
    unit, cluster = membership_pairs(clusters, 4, 3, what="c")
    assert unit.tolist() == [0, 1, 2, 2, 2] and cluster.tolist() == [0, 2, 0, 1, 2]
    assert [m.tolist() for m in unit_memberships(clusters, 4, 3, what="c")] == [
        [0], [2], [0, 1, 2], []]
    with pytest.raises(ContributionError, match=r"^c: a unit is in more than L=2 clusters, "
                                                r"the overlap its parallel group declares"):
        membership_pairs(clusters, 4, 2, what="c")
    with pytest.raises(ContributionError, match="same unit twice"):
        membership_pairs([[1, 1]], 4, 3, what="c")
    with pytest.raises(ContributionError, match="not a unit"):
        membership_pairs([[4]], 4, 3, what="c")
    assert [m.tolist() for m in unit_memberships([], 2, 1, what="c")] == [[], []]


def test_the_declared_overlap_is_the_ledgers() -> None:
    ledger = Ledger(rng=secure_rng(0))
    ledger.declare_parallel_group("g", 3, "each unit in at most 3")
    assert declared_overlap(ledger, "g") == 3
    with pytest.raises(LookupError):
        declared_overlap(ledger, "other")


# ---------------------------------------------------------------------- the fact histograms
DOMAIN = ["a", "b", "c", "d"]


def test_fact_counts_count_each_member_once_per_item() -> None:
    doc_items = [["a", "b"], ["b", "x"], ["c", "d", "a"]]
    clusters = [[0, 2], [1, 2], []]
    counts = fact_counts(clusters, doc_items, DOMAIN, 3, max_overlap=2)
    assert counts.tolist() == [[2, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]]
    with pytest.raises(ContributionError, match="more than L=1 clusters"):
        fact_counts(clusters, doc_items, DOMAIN, 3, max_overlap=1)
    # without max_overlap (the eval's exact ceiling): no overlap bound, the same table
    assert fact_counts(clusters, doc_items, DOMAIN, 3).tolist() == counts.tolist()
    assert fact_counts([], doc_items, DOMAIN, 3).shape == (0, 4)


def test_a_document_in_more_clusters_than_the_group_declares_is_refused_before_a_draw(
) -> None:
    """The L checked is the one the ledger declares for the group, and nothing is charged."""
    ledger = Ledger(rng=secure_rng(1))
    ledger.declare_parallel_group("fact-clusters", 1, "each document in at most 1 cluster")
    doc_items = [["a"], ["b"]]
    with pytest.raises(ContributionError, match="more than L=1 clusters"):
        release_fact_histograms(ledger, [[0], [0, 1]], doc_items, DOMAIN, sigma=2.0,
                                max_items=2, L=1)
    assert ledger.releases() == []
    noisy = release_fact_histograms(ledger, [[0], [1]], doc_items, DOMAIN, sigma=2.0,
                                    max_items=2, L=1)
    assert noisy.shape == (2, 4) and len(ledger.releases()) == 2


# ---------------------------------------------------------------------- the role histogram
def _doc(*pairs: tuple[str, str]) -> DocumentTerms:
    return DocumentTerms(tuple(t for t, _ in pairs), tuple(r for _, r in pairs))


def test_role_counts_are_the_cells_of_released_terms_and_roles() -> None:
    released = ["fever", "ibuprofen"]
    docs = [_doc(("fever", ROLES[0]), ("ibuprofen", ROLES[1]), ("other", ROLES[0])),
            _doc(("fever", ROLES[0]))]
    counts = role_counts(docs, released, 3)
    assert counts.shape == (2, len(ROLES))
    assert counts[0, 0] == 2 and counts[1, 1] == 1 and int(counts.sum()) == 3
    with pytest.raises(ValueError, match="more than K_e=2"):
        role_counts(docs, released, 2)  # the rule's input: three terms


def test_a_rule_adding_two_cells_per_term_is_refused_on_the_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One term's row gets two ones: refused whatever the number of terms, and nothing is
    charged or drawn."""
    real = roles.role_cells

    def two_cells(document: DocumentTerms, row: dict[str, int], column: dict[str, int]
                  ) -> list[int]:
        return [c for cell in real(document, row, column) for c in (cell, cell + 1)]

    monkeypatch.setattr(roles, "role_cells", two_cells)
    docs = [_doc(("fever", ROLES[0]))]
    with pytest.raises(ContributionError, match="the role histogram: a unit adds more than 1 "
                                                "ones to one row"):
        role_counts(docs, ["fever"], 6)
    ledger = Ledger(rng=secure_rng(2))
    with pytest.raises(ContributionError):
        release_roles(ledger, docs, ["fever"], K_e=6, sigma=3.0)
    assert ledger.releases() == []


def test_a_rule_adding_cells_in_more_rows_than_k_e_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    released = ["a", "b", "c"]
    width = len(ROLES)
    monkeypatch.setattr(roles, "role_cells",
                        lambda document, row, column: [0, width, 2 * width])
    with pytest.raises(ContributionError, match="touches more than 2 rows"):
        role_counts([_doc(("a", ROLES[0]))], released, 2)
