"""Issue 59: the n-gram mode's span histograms with memory bounded by a public batch size.

The exact counts stay sparse (``sparse_fact_counts``: the very cells and checks of
``fact_counts``), each batch of 32 clusters is made dense, noised on EVERY entry of D and
post-processed at once to its spans at or above KEEP_Z sigma_C (``KeptCounts``), which is
what the ledger stores. Checked here: the same charges, the same noise (the same random bits:
seeded outputs identical to the dense path of before) and the same notes; a resumed build,
whether its ledger holds kept entries or whole rows of the earlier version, draws and charges
nothing; never more than one batch of rows is dense. Every test is exact (fixed seeds)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpsynrag.accounting import Ledger, noise, secure_rng, sparse_noise
from dpsynrag.accounting import ledger as ledger_module
from dpsynrag.accounting.contributions import ContributionError, bounded_cells, bounded_counts
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.facts import fact_clusters
from dpsynrag.facts.fact_clusters import (
    KeptCounts,
    SparseCounts,
    anchor_clusters,
    fact_counts,
    fact_domain,
    kept_entries,
    release_fact_histograms,
    release_kept_counts,
    release_span_histograms,
    sparse_fact_counts,
)
from dpsynrag.facts.ngrams import level_keys
from dpsynrag.facts.span_corpus import SpanSettings, span_corpus
from dpsynrag.facts.span_notes import KEEP_Z, MAX_SPANS, SpanNote, span_notes
from dpsynrag.facts.span_releases import ExactReleases, LedgerReleases
from dpsynrag.facts.spans import note_order, note_text, stitch, trim_span, windows_released

ANCHORS = {"familial feshukia": 12, "grenaethix": 7, "e-4471": 30, "zorbex": 7,
           "bloom syndrome": 55}
KEYWORDS = ["fever", "cough", "rash", "pain", "fatigue"]


def _docs(seed: int, n: int, max_len: int = 4) -> list[list[str]]:
    gen = np.random.default_rng(seed)
    pool = [*ANCHORS, *KEYWORDS]
    return [[str(x) for x in gen.choice(pool, size=gen.integers(0, max_len + 1), replace=False)]
            for _ in range(n)]


def _old_span_notes(noisy: np.ndarray, domain: Sequence[str], anchors: Sequence[str],
                    sigma: float, *, stopwords: Collection[str],
                    released: Mapping[int, Collection[str]]) -> list[SpanNote]:
    """``span_notes`` as it was before issue 59 (dense rows, a loop over all of D)."""
    def kept(row: np.ndarray) -> list[str]:
        floor = KEEP_Z * sigma
        order = sorted((j for j in range(len(domain)) if row[j] >= floor),
                       key=lambda j: (-int(row[j]), domain[j]))
        return [domain[j] for j in order[:MAX_SPANS]]

    index = {span: j for j, span in enumerate(domain)}
    notes: list[SpanNote] = []
    for r, anchor in enumerate(anchors):
        row = noisy[r]
        j = index.get(anchor)
        if j is None or row[j] < KEEP_Z * sigma:
            continue
        spans = kept(row)
        if anchor not in spans:
            spans = [anchor, *spans[:MAX_SPANS - 1]]
        stitched = stitch(spans, stopwords=stopwords,
                          allowed=lambda tokens: windows_released(tokens, released))
        trimmed = [t for t in (trim_span(span, stopwords) for span in stitched) if t]
        stitched = note_order(list(dict.fromkeys(trimmed)), anchor)
        notes.append(SpanNote(r, anchor, tuple(stitched), note_text(stitched)))
    return notes


class _DenseKeptReleases(LedgerReleases):
    """Whole noisy rows as the dense release draws them, then reduced to their kept entries:
    the same releases as ``_DenseReleases`` under a seed, in the form the notes read now."""

    def histograms(self, members: Sequence[Sequence[int]], items: Sequence[Sequence[str]],
                   domain: Sequence[str], *, max_items: int, L: int,
                   progress: Any = None) -> Any:
        rows = release_fact_histograms(self.ledger, members, items, domain,
                                       sigma=self.sigma_clusters, max_items=max_items, L=L,
                                       progress=progress)
        floor = KEEP_Z * self.sigma_clusters
        return KeptCounts.from_rows([kept_entries(row, domain, floor) for row in rows],
                                    len(domain), floor)


class _DenseReleases(LedgerReleases):
    """The build's releases as they were before issue 59: whole noisy rows, clusters x |D|."""

    def histograms(self, members: Sequence[Sequence[int]], items: Sequence[Sequence[str]],
                   domain: Sequence[str], *, max_items: int, L: int,
                   progress: Any = None) -> Any:
        return release_fact_histograms(self.ledger, members, items, domain,
                                       sigma=self.sigma_clusters, max_items=max_items, L=L,
                                       progress=progress)


def _charges(ledger: Ledger) -> list[tuple[Any, ...]]:
    return [(r.key, r.stage, r.mechanism, sorted(r.params.items()), r.sensitivity,
             r.sensitivity_norm, r.rho, r.group, r.partition) for r in ledger.releases()]


# ---------------------------------------------------------------------- exact counts
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse_counts_are_the_dense_table_without_its_zeros(seed: int) -> None:
    docs = _docs(seed, 300)
    domain = fact_domain(ANCHORS, KEYWORDS)
    _order, clusters = anchor_clusters(docs, ANCHORS, 2)
    dense = fact_counts(clusters, docs, domain, 4, max_overlap=2)
    sparse = sparse_fact_counts(clusters, docs, domain, 4, max_overlap=2)
    assert sparse.rows == len(clusters) and sparse.width == len(domain)
    assert np.array_equal(sparse.to_dense(), dense)
    assert sparse.values.size == np.count_nonzero(dense) and bool(np.all(sparse.values > 0))
    for r in range(sparse.rows):  # ascending columns within each row
        cols = sparse.indices[sparse.indptr[r]:sparse.indptr[r + 1]]
        assert np.array_equal(cols, np.sort(cols))
    assert np.array_equal(sparse.dense(1, 3), dense[1:3])


def test_bounded_cells_checks_what_bounded_counts_checks() -> None:
    units, cells = [0, 0, 1, 1, 2], [0, 5, 5, 9, 0]
    distinct, counts = bounded_cells(units, cells, 10, row_size=5, max_rows=2, max_per_row=2,
                                     what="t")
    dense = bounded_counts(units, cells, 10, row_size=5, max_rows=2, max_per_row=2, what="t")
    assert distinct.tolist() == [0, 5, 9] and counts.tolist() == [2, 2, 1]
    assert dense[distinct].tolist() == counts.tolist() and dense.sum() == counts.sum()
    with pytest.raises(ContributionError, match="more than 1 ones"):  # unit 1: 2 in row 1
        bounded_cells(units, cells, 10, row_size=5, max_rows=2, max_per_row=1, what="t")
    with pytest.raises(ContributionError, match="more than 1 rows"):  # unit 0: rows 0 and 1
        bounded_cells(units, cells, 10, row_size=5, max_rows=1, max_per_row=2, what="t")
    with pytest.raises(ContributionError, match="twice"):
        bounded_cells([0, 0], [3, 3], 10, row_size=5, max_per_row=2, what="t")
    with pytest.raises(ContributionError, match="outside"):
        bounded_cells([0], [10], 10, row_size=5, max_per_row=2, what="t")


def test_sparse_counts_refuse_what_the_dense_counts_refuse() -> None:
    domain = ["a", "b", "c"]
    with pytest.raises(ContributionError):  # a document in 2 clusters with L = 1
        sparse_fact_counts([[0], [0]], [["a"]], domain, 2, max_overlap=1)
    with pytest.raises(ValueError, match="max_items"):  # 3 distinct items, cap 2
        sparse_fact_counts([[0]], [["a", "b", "c"]], domain, 2)
    with pytest.raises(ContributionError):  # a cluster lists a document twice
        sparse_fact_counts([[0, 0]], [["a"]], domain, 2)
    empty = sparse_fact_counts([[], []], [["a"]], domain, 2)
    assert empty.rows == 2 and empty.to_dense().tolist() == [[0, 0, 0], [0, 0, 0]]


def test_from_cells_refuses_a_cell_twice_or_outside() -> None:
    with pytest.raises(ValueError):
        SparseCounts.from_cells(np.array([1, 1]), np.array([1, 2]), 2, 3)
    with pytest.raises(ValueError):
        SparseCounts.from_cells(np.array([6]), np.array([1]), 2, 3)
    with pytest.raises(ValueError):  # a repeat that is not adjacent in the input
        SparseCounts.from_cells(np.array([4, 1, 4]), np.array([1, 2, 3]), 2, 3)
    with pytest.raises(ValueError):
        SparseCounts.from_cells(np.array([-1, 2]), np.array([1, 1]), 2, 3)
    table = SparseCounts.from_cells(np.array([5, 0, 3]), np.array([2, 1, 4]), 2, 3)
    assert table.to_dense().tolist() == [[1, 0, 0], [4, 0, 2]]
    ascending = SparseCounts.from_cells(np.array([0, 3, 5]), np.array([1, 4, 2]), 2, 3)
    assert ascending.to_dense().tolist() == table.to_dense().tolist()
    assert ascending.indptr.tolist() == table.indptr.tolist() == [0, 1, 3]
    empty_rows = SparseCounts.from_cells(np.array([7]), np.array([3]), 4, 3)  # rows 0, 1, 3
    assert empty_rows.indptr.tolist() == [0, 0, 0, 1, 1]


# ---------------------------------------------------------------------- the release
def test_the_kept_release_is_charged_as_the_dense_release_and_keeps_what_it_must() -> None:
    """Same keys, charges and rho as the dense release; the counted entries far above the
    floor are kept, each row highest first (ties by the item), stored post-processed. (That
    the kept entries have the dense release's law is tests/test_sparse_noise.py's.)"""
    docs = _docs(3, 400)
    domain = fact_domain(ANCHORS, KEYWORDS)
    _order, clusters = anchor_clusters(docs, ANCHORS, 2)
    sigma, K, L = 2.0, 4, 2
    dense_ledger, kept_ledger = Ledger(rng=secure_rng(5)), Ledger(rng=secure_rng(5))
    release_fact_histograms(dense_ledger, clusters, docs, domain, sigma=sigma, max_items=K,
                            L=L, batch_size=2)
    done: list[int] = []
    kept = release_span_histograms(kept_ledger, clusters, docs, domain, sigma=sigma,
                                   max_items=K, L=L, floor=KEEP_Z * sigma, batch_size=2,
                                   progress=done.append)
    assert done == [2, 2, 1]
    assert _charges(kept_ledger) == _charges(dense_ledger)  # same keys, charges, rho
    assert math.isclose(kept_ledger.total_rho(), dense_ledger.total_rho(), rel_tol=0)
    exact = fact_counts(clusters, docs, domain, K, max_overlap=L)
    for r in range(len(clusters)):
        indices, values = kept.row(r)
        pairs = [(int(j), int(v)) for j, v in zip(indices, values, strict=True)]
        assert pairs == sorted(pairs, key=lambda p: (-p[1], domain[p[0]]))
        assert all(v >= KEEP_Z * sigma for _, v in pairs)
        sure = set(np.flatnonzero(exact[r] >= KEEP_Z * sigma + 8 * sigma).tolist())
        assert sure <= {j for j, _ in pairs}
    # what is stored is the post-processed row (JSON), not the row
    stored = kept_ledger.released_value(fact_clusters.facts_key(0))
    assert isinstance(stored, dict)
    assert set(stored) == {"floor", "size", "kept"} and stored["size"] == len(domain)


def test_zero_counts_are_noised_too() -> None:
    """A span no member holds is kept where its noise alone reaches the floor: the noise is
    drawn on every entry of D, not on the support only."""
    domain = [f"s{j:04d}" for j in range(2000)]
    ledger = Ledger(rng=secure_rng(9))
    kept = release_span_histograms(ledger, [[0]], [["s0000"]], domain, sigma=1.0,
                                   max_items=1, L=1, floor=2.0)
    indices, _values = kept.row(0)
    # P(N_Z(0, 1) >= 2) ~ 0.05: about 100 of the 1999 empty entries pass
    assert 40 < len(set(indices.tolist()) - {0}) < 200


def test_a_resumed_release_draws_and_charges_nothing_from_either_stored_form() -> None:
    docs = _docs(4, 200)
    domain = fact_domain(ANCHORS, KEYWORDS)
    _order, clusters = anchor_clusters(docs, ANCHORS, 2)
    floor = KEEP_Z * 2.0
    for first in ("kept", "dense"):
        ledgers = [Ledger(rng=secure_rng(6)), Ledger(rng=secure_rng(6))]
        for ledger in ledgers:
            if first == "dense":  # a ledger written by the version before issue 59
                rows = release_fact_histograms(ledger, clusters, docs, domain, sigma=2.0,
                                               max_items=4, L=2)
                expected = KeptCounts.from_rows([kept_entries(r, domain, floor)
                                                 for r in rows], len(domain), floor)
            else:
                expected = release_span_histograms(ledger, clusters, docs, domain, sigma=2.0,
                                                   max_items=4, L=2, floor=floor)
        resumed, untouched = ledgers
        charges, rho = _charges(resumed), resumed.total_rho()
        again = release_span_histograms(resumed, clusters, docs, domain, sigma=2.0,
                                        max_items=4, L=2, floor=floor)
        assert _charges(resumed) == charges and resumed.total_rho() == rho
        assert resumed.rng.bytes(16) == untouched.rng.bytes(16)  # nothing drawn
        for name in ("indptr", "indices", "values"):
            assert np.array_equal(getattr(again, name), getattr(expected, name))
        if first == "kept":  # kept at 6: cannot serve a lower floor
            with pytest.raises(ValueError, match="floor"):
                release_span_histograms(resumed, clusters, docs, domain, sigma=2.0,
                                        max_items=4, L=2, floor=1.0)


def test_no_row_is_ever_dense_and_only_counted_entries_get_a_draw_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _docs(5, 300)
    domain = fact_domain(ANCHORS, KEYWORDS)
    _order, clusters = anchor_clusters(docs, ANCHORS, 2)
    counts = sparse_fact_counts(clusters, docs, domain, 4, max_overlap=2)
    drawn: list[int] = []
    real = noise.discrete_gaussian_noise

    def spy(size: int, sigma: float, rng: Any) -> np.ndarray:
        drawn.append(size)
        return real(size, sigma, rng)

    def never(self: SparseCounts, start: int, stop: int) -> np.ndarray:
        raise AssertionError("a dense row was made")

    monkeypatch.setattr(SparseCounts, "dense", never)
    monkeypatch.setattr(sparse_noise, "discrete_gaussian_noise", spy)
    # the ledger's public probe of the sparse sampler draws a row of its own (its own test:
    # tests/test_sparse_probe.py); only the build's rows are counted here
    monkeypatch.setattr(ledger_module, "probe_kept", lambda sigma, t: None)
    ledger = Ledger(rng=secure_rng(7))
    ledger.declare_parallel_group(fact_clusters.GROUP, 2, "test")
    release_kept_counts(ledger, counts, domain, sigma=2.0, max_items=4, floor=6.0,
                        batch_size=2)
    # one sampler call per batch of 2, 2, 1 rows, for their counted entries only
    assert len(drawn) == 3 and sum(drawn) == counts.values.size


# ---------------------------------------------------------------------- notes
def _stop() -> frozenset[str]:
    from dpsynrag.transforms.vocabulary import stopwords

    return frozenset(stopwords())


@pytest.fixture(scope="module")
def clinic(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    import json

    notes = write_clinic_dataset(tmp_path_factory.mktemp("clinic"), n_notes=600,
                                 n_diseases=10, seed=3)["notes"]
    return [json.loads(line)["text"] for line in Path(notes).read_text().splitlines()]


SETTINGS = SpanSettings(lengths=(1, 2, 4), level_items=(32, 32, 16), cluster_cap=12, L=2)


def _releases(cls: type[LedgerReleases], seed: int) -> LedgerReleases:
    return cls(Ledger(rng=secure_rng(seed)), sigma_levels=4.0, level_delta=1e-4,
               sigma_clusters=3.0)


@pytest.mark.parametrize("seed", [11, 12])
def test_the_notes_are_those_of_the_dense_path_on_the_same_releases(
        clinic: list[str], seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = _stop()
    old = _releases(_DenseReleases, seed)
    monkeypatch.setattr("dpsynrag.facts.span_corpus.span_notes", _old_span_notes)
    before = span_corpus(clinic, SETTINGS, old, stop=stop)
    monkeypatch.undo()
    new = _releases(_DenseKeptReleases, seed)
    after = span_corpus(clinic, SETTINGS, new, stop=stop)
    assert before.clusters == after.clusters > 10
    assert before.notes and after.notes == before.notes  # byte-identical texts and spans
    assert _charges(new.ledger) == _charges(old.ledger)
    assert new.ledger.total_rho() == old.ledger.total_rho()
    # the build's own (sparse) release: the same clusters and charges, notes of its own noise
    sparse = _releases(LedgerReleases, seed)
    built = span_corpus(clinic, SETTINGS, sparse, stop=stop)
    assert built.clusters == before.clusters and len(built.notes) > 0.8 * len(before.notes)
    assert _charges(sparse.ledger) == _charges(old.ledger)


def test_span_notes_read_dense_rows_and_kept_entries_alike(clinic: list[str]) -> None:
    stop = _stop()
    releases = _releases(_DenseReleases, 13)
    captured: dict[str, Any] = {}

    def capture(noisy: Any, domain: Any, anchors: Any, sigma: float, **kw: Any) -> Any:
        captured.update(noisy=noisy, domain=domain, anchors=anchors, sigma=sigma, kw=kw)
        return span_notes(noisy, domain, anchors, sigma, **kw)

    import dpsynrag.facts.span_corpus as module

    original = module.span_notes
    module.span_notes = capture
    try:
        span_corpus(clinic, SETTINGS, releases, stop=stop)
    finally:
        module.span_notes = original
    noisy, domain, sigma = captured["noisy"], captured["domain"], captured["sigma"]
    floor = KEEP_Z * sigma
    kept = KeptCounts.from_rows([kept_entries(r, domain, floor) for r in noisy], len(domain),
                                floor)
    dense_notes = span_notes(noisy, domain, captured["anchors"], sigma, **captured["kw"])
    assert dense_notes == span_notes(kept, domain, captured["anchors"], sigma,
                                     **captured["kw"])
    assert dense_notes == _old_span_notes(noisy, domain, captured["anchors"], sigma,
                                          **captured["kw"])
    with pytest.raises(ValueError, match="floor"):
        span_notes(kept, domain, captured["anchors"], sigma, z=1.0, **captured["kw"])


def test_the_exact_ceiling_keeps_every_held_span(clinic: list[str]) -> None:
    stop = _stop()
    exact = ExactReleases(dict.fromkeys(level_keys(SETTINGS.lengths), 3))
    captured: dict[str, Any] = {}
    real = exact.histograms

    def histograms(members: Any, items: Any, domain: Any, **kw: Any) -> KeptCounts:
        captured.update(members=members, items=items, domain=domain, kw=kw)
        return real(members, items, domain, **kw)

    object.__setattr__(exact, "histograms", histograms)
    corpus = span_corpus(clinic, SETTINGS, exact, stop=stop)
    assert corpus.notes
    dense = fact_counts(captured["members"], captured["items"], captured["domain"],
                        SETTINGS.cluster_cap)
    kept = real(captured["members"], captured["items"], captured["domain"], **captured["kw"])
    for r in range(len(dense)):
        indices, values = kept.row(r)
        assert [[int(j), int(v)] for j, v in zip(indices, values, strict=True)] == \
            kept_entries(dense[r], captured["domain"], KEEP_Z * exact.sigma_clusters)
