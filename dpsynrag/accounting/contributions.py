"""What one privacy unit adds to a noised array, checked on that array as it is built.

Every count release of the package (the keyword histogram, partition selection, the role
histogram, the fact histograms) adds discrete Gaussian noise to an integer array whose l2
sensitivity the charge records. The sensitivity proof is about the array itself: adding or
removing one unit changes it by a 0/1 array with at most ``max_rows`` rows touched and at most
``max_per_row`` ones in each row, so by at most sqrt(max_rows * max_per_row) in l2, and (for a
parallel group, one row per partition) by at most sqrt(max_per_row) in each of at most
``max_rows`` partitions.

``bounded_counts`` builds the noised array from each unit's cells and nothing else, and refuses
(``ContributionError``, a one-line message with the public bounds only, never a cell, a count
or which unit) the moment a unit adds a cell twice, a cell outside the array, more than
``max_per_row`` ones to one row or touches more than ``max_rows`` rows. So the bound is checked
on the very array that is noised, not on what the code that chose the cells meant to produce
(the number of terms a document lists, the L its membership rule was given): a rule that adds
two cells per term, or puts a document in L + 1 clusters, is refused before anything is drawn.

``bounded_cells`` makes the same checks and returns the non-zero cells and their counts only
(the span histograms of the n-gram mode, whose dense table would be clusters x |D|).

``weighted_cells`` is ``bounded_cells`` with a weight per unit: unit u adds the integer
``weights[u]`` (instead of 1) to each of its cells, and is refused unless, in every row it
touches, (its cells there) x weights[u]^2 <= ``scale``^2, so its contribution to each row has
l2 norm <= ``scale`` (the weighted span histograms of the n-gram mode, whose documents weigh
floor(scale / sqrt(m)) on each of their m spans).

``declared_overlap`` reads a parallel group's L from the ledger, where it is recorded and
composed, so that memberships are checked against the L the cost is computed with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dpsynrag.accounting.ledger import Ledger

__all__ = ["ContributionError", "bounded_cells", "bounded_counts", "declared_overlap",
           "membership_pairs", "unit_memberships", "weighted_cells"]


class ContributionError(ValueError):
    """A unit adds more to a noised array than its charge's sensitivity allows (a bug in the
    code that chose its cells): nothing is drawn. The message names the release and the
    public bound, never a cell, a count or a unit."""


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _longest_run(ordered: np.ndarray) -> int:
    """The length of the longest run of equal values in the sorted ``ordered`` (0 if
    empty)."""
    if ordered.size == 0:
        return 0
    bounds = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    return int(np.diff(np.concatenate(([0], bounds, [ordered.size]))).max())


def bounded_counts(units: np.ndarray | Sequence[int], cells: np.ndarray | Sequence[int],
                   size: int, *, row_size: int | None = None, max_rows: int = 1,
                   max_per_row: int, what: str) -> np.ndarray:
    """counts[c] = the number of units that add cell c (int64, length ``size``).

    ``units[i]`` and ``cells[i]`` say that unit ``units[i]`` adds 1 to flat cell ``cells[i]``
    of the noised array (row ``cells[i] // row_size``; without ``row_size`` the array is one
    row). Refuses (``ContributionError``) unless every unit adds each cell at most once, only
    cells in [0, size), at most ``max_per_row`` ones to any row and touches at most
    ``max_rows`` rows: its contribution is then a 0/1 array of l2 norm at most
    sqrt(max_rows * max_per_row). ``what`` names the release in the message (public).
    Vectorised: one sort of the cells, whatever the number of units.
    """
    size = _positive(size, "size")
    cell = _checked_cells(units, cells, size, row_size=row_size, max_rows=max_rows,
                          max_per_row=max_per_row, what=what)
    counts: np.ndarray = np.bincount(cell, minlength=size).astype(np.int64)
    return counts


def bounded_cells(units: np.ndarray | Sequence[int], cells: np.ndarray | Sequence[int],
                  size: int, *, row_size: int | None = None, max_rows: int = 1,
                  max_per_row: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``bounded_counts`` without the dense array: (the distinct cells any unit adds,
    ascending; the number of units adding each), both int64. The same checks on the same
    array (every cell of ``[0, size)`` that is not listed counts 0), so a table built from
    them is the table ``bounded_counts`` would build, at the memory of its non-zero cells."""
    size = _positive(size, "size")
    cell = _checked_cells(units, cells, size, row_size=row_size, max_rows=max_rows,
                          max_per_row=max_per_row, what=what)
    distinct, counts = np.unique(cell, return_counts=True)
    return distinct.astype(np.int64), counts.astype(np.int64)


def weighted_cells(units: np.ndarray | Sequence[int], cells: np.ndarray | Sequence[int],
                   weights: np.ndarray | Sequence[int], size: int, *, row_size: int,
                   max_rows: int = 1, max_per_row: int, scale: int,
                   what: str) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct cells any unit adds, ascending; the sum of the weights of the units
    adding each), both int64: ``bounded_cells`` where unit u adds ``weights[u]`` (an integer
    >= 1, indexed by unit) to each of its cells. The checks of ``bounded_cells``, and
    ``ContributionError`` unless every unit's cells in every row it touches have
    count x weight^2 <= ``scale``^2 (l2 norm <= ``scale`` per row), checked on the arrays
    that are summed."""
    size = _positive(size, "size")
    width = _positive(row_size, "row_size")
    scale = _positive(scale, "scale")
    cell = _checked_cells(units, cells, size, row_size=width, max_rows=max_rows,
                          max_per_row=max_per_row, what=what)
    if cell.size == 0:
        return cell, cell.copy()
    unit = np.asarray(units, dtype=np.int64).reshape(-1)
    weight = np.asarray(weights, dtype=np.int64).reshape(-1)
    if int(unit.max()) >= weight.size:
        raise ValueError("every unit needs a weight")
    per_cell = weight[unit]
    if int(per_cell.min()) < 1 or int(per_cell.max()) > scale:
        raise ContributionError(f"{what}: a unit's weight is outside [1, scale]")
    rows_total = -(-size // width)
    unit_row = unit * rows_total + cell // width
    distinct_rows, per_row = np.unique(unit_row, return_counts=True)
    row_weight = weight[distinct_rows // rows_total]
    if bool(np.any(per_row * row_weight * row_weight > scale * scale)):
        raise ContributionError(f"{what}: a unit's weights in one row exceed the l2 bound "
                                "scale; the recorded sensitivity would not hold")
    order = np.argsort(cell, kind="stable")
    ordered = cell[order]
    starts = np.concatenate(([0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1))
    sums = np.add.reduceat(per_cell[order], starts)  # exact int64 sums
    return ordered[starts].astype(np.int64), sums.astype(np.int64)


def _checked_cells(units: np.ndarray | Sequence[int], cells: np.ndarray | Sequence[int],
                   size: int, *, row_size: int | None, max_rows: int, max_per_row: int,
                   what: str) -> np.ndarray:
    """The cells (int64), once every unit's contribution is checked (``bounded_counts``)."""
    max_rows = _positive(max_rows, "max_rows")
    max_per_row = _positive(max_per_row, "max_per_row")
    width = size if row_size is None else _positive(row_size, "row_size")
    unit = np.asarray(units, dtype=np.int64).reshape(-1)
    cell = np.asarray(cells, dtype=np.int64).reshape(-1)
    if unit.shape != cell.shape:
        raise ValueError("units and cells must have the same length")
    if cell.size == 0:
        return cell
    if cell.min() < 0 or cell.max() >= size or unit.min() < 0:
        raise ContributionError(f"{what}: a unit adds a cell outside the noised array")
    rows_total = -(-size // width)
    if int(unit.max()) >= (2**62) // size:
        raise ValueError("too many units for one array")
    pair = np.sort(unit * size + cell)  # by unit, then row, then cell
    if pair.size > 1 and bool(np.any(pair[1:] == pair[:-1])):
        raise ContributionError(f"{what}: a unit adds 1 to the same cell twice; its "
                                "contribution would not be a 0/1 array")
    unit_row = (pair // size) * rows_total + (pair % size) // width  # sorted too
    if _longest_run(unit_row) > max_per_row:
        raise ContributionError(f"{what}: a unit adds more than {max_per_row} ones to one "
                                "row; the recorded sensitivity would not hold")
    touched = unit_row[np.concatenate(([True], unit_row[1:] != unit_row[:-1]))]
    if _longest_run(touched // rows_total) > max_rows:
        raise ContributionError(f"{what}: a unit touches more than {max_rows} rows; the "
                                "recorded sensitivity would not hold")
    return cell


def membership_pairs(clusters: Sequence[Sequence[int]], n_units: int, max_overlap: int, *,
                     what: str) -> tuple[np.ndarray, np.ndarray]:
    """(unit, cluster) of every membership, sorted by unit then cluster (int64 arrays);
    refuses (``ContributionError``) a member that is no unit, a cluster listing a unit twice,
    or a unit in more than ``max_overlap`` clusters (the L its parallel group declares)."""
    max_overlap = _positive(max_overlap, "max_overlap")
    n = int(n_units)
    lists = [np.asarray(members, dtype=np.int64).reshape(-1) for members in clusters]
    unit = np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64)
    cluster = np.repeat(np.arange(len(lists), dtype=np.int64), [m.size for m in lists])
    if unit.size and (unit.min() < 0 or unit.max() >= n):
        raise ContributionError(f"{what}: a cluster member is not a unit")
    order = np.lexsort((cluster, unit))
    unit, cluster = unit[order], cluster[order]
    if unit.size > 1 and bool(np.any((unit[1:] == unit[:-1]) & (cluster[1:] == cluster[:-1]))):
        raise ContributionError(f"{what}: a cluster lists the same unit twice")
    if _longest_run(unit) > max_overlap:
        raise ContributionError(f"{what}: a unit is in more than L={max_overlap} clusters, "
                                "the overlap its parallel group declares; the parallel "
                                "composition would not hold")
    return unit, cluster


def unit_memberships(clusters: Sequence[Sequence[int]], n_units: int, max_overlap: int, *,
                     what: str) -> list[np.ndarray]:
    """Each unit's sorted clusters (int64), checked as ``membership_pairs`` checks them."""
    unit, cluster = membership_pairs(clusters, n_units, max_overlap, what=what)
    per_unit = np.bincount(unit, minlength=int(n_units))
    return np.split(cluster, np.cumsum(per_unit)[:-1]) if int(n_units) else []


def declared_overlap(ledger: Ledger, group: str) -> int:
    """The ``max_overlap`` L that ``ledger`` records for parallel group ``group`` (the L its
    cost is composed with); ``LookupError`` if the group was never declared."""
    declared = ledger.parallel_groups().get(group)
    if declared is None:
        raise LookupError(f"parallel group {group!r} is not declared in this ledger")
    return int(declared.max_overlap)
