"""Fact mode steps 3-4: clusters anchored on released phrases (each document in <= L, rarest
anchors first, stable under add/remove of another document, cluster list a function of the
anchors only) and one noisy fact histogram per cluster (charged once per cluster in a
parallel group, noise on every entry, never redrawn).

Statistical test: ``test_noise_matches_the_discrete_gaussian_pmf`` is one chi-square
goodness-of-fit test at alpha = 1e-3 with a fixed seed (``secure_rng(11)``), so it is
deterministic; for a correct sampler and a seed drawn at random it would fail with
probability <= 1e-3 (its only comparison). Every other test is exact.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpsynrag.accounting import Ledger, ReleaseMismatchError, secure_rng
from dpsynrag.facts.fact_clusters import (
    GROUP,
    anchor_clusters,
    anchor_order,
    fact_counts,
    fact_domain,
    fact_histogram_rho,
    facts_key,
    release_fact_histograms,
)

ALPHA = 1e-3
ANCHORS = {"familial feshukia": 12, "grenaethix": 7, "e-4471": 30, "zorbex": 7,
           "bloom syndrome": 55}
# rarest first: grenaethix (7) < zorbex (7, by string) < familial feshukia < e-4471 < bloom


def _random_docs(seed: int, n: int, pool: list[str], max_len: int = 5) -> list[list[str]]:
    gen = np.random.default_rng(seed)
    return [[str(x) for x in gen.choice(pool, size=gen.integers(0, max_len + 1), replace=False)]
            for _ in range(n)]


def _doc_clusters(anchors: list[str], clusters: list[list[int]], n: int) -> list[set[str]]:
    """For each document, the anchors of the clusters it is in."""
    out: list[set[str]] = [set() for _ in range(n)]
    for anchor, members in zip(anchors, clusters, strict=True):
        for d in members:
            out[d].add(anchor)
    return out


# ---------------------------------------------------------------------- step 3
def test_anchor_order_is_rarest_first_with_ties_by_phrase() -> None:
    assert anchor_order(ANCHORS) == ["grenaethix", "zorbex", "familial feshukia", "e-4471",
                                     "bloom syndrome"]
    assert anchor_order(ANCHORS, min_anchor_count=12) == ["familial feshukia", "e-4471",
                                                          "bloom syndrome"]


@pytest.mark.parametrize("L", [1, 2, 3])
def test_each_document_joins_its_L_rarest_anchors(L: int) -> None:
    pool = [*ANCHORS, "fever", "cough", "rash"]
    docs = _random_docs(3, 300, pool)
    order, clusters = anchor_clusters(docs, ANCHORS, L)
    assert order == anchor_order(ANCHORS)
    per_doc = _doc_clusters(order, clusters, len(docs))
    ranks = {a: (c, a) for a, c in ANCHORS.items()}  # independent of the module's order
    for items, joined in zip(docs, per_doc, strict=True):
        held = sorted((a for a in set(items) if a in ANCHORS), key=ranks.__getitem__)
        assert len(joined) <= L
        assert joined == set(held[:L])
    for members in clusters:
        assert members == sorted(set(members))
    assert max(len(j) for j in per_doc) == L  # the bound is reached, so it is tested


def test_membership_of_others_is_unchanged_by_adding_or_removing_a_document() -> None:
    pool = [*ANCHORS, "fever", "cough"]
    docs = _random_docs(5, 120, pool)
    order, clusters = anchor_clusters(docs, ANCHORS, 2)
    before = _doc_clusters(order, clusters, len(docs))
    for removed in (0, 17, 119):
        fewer = docs[:removed] + docs[removed + 1:]
        order_f, clusters_f = anchor_clusters(fewer, ANCHORS, 2)
        assert order_f == order
        after = _doc_clusters(order_f, clusters_f, len(fewer))
        assert after == before[:removed] + before[removed + 1:]
    added = [*docs, list(ANCHORS)]  # a document holding every anchor
    order_a, clusters_a = anchor_clusters(added, ANCHORS, 2)
    after = _doc_clusters(order_a, clusters_a, len(added))
    assert after[:-1] == before and after[-1] == {"grenaethix", "zorbex"}
    # only the <= L clusters of the added document changed, each by that document only
    changed = [r for r in range(len(order)) if clusters_a[r] != clusters[r]]
    assert len(changed) <= 2
    for r in changed:
        assert clusters_a[r] == [*clusters[r], len(docs)]


def test_the_cluster_list_depends_only_on_the_anchors() -> None:
    corpora = [[], [["fever"]], _random_docs(9, 50, [*ANCHORS, "fever"]),
               [["grenaethix"]] * 10]
    results = [anchor_clusters(docs, ANCHORS, 2) for docs in corpora]
    for order, clusters in results:
        assert order == anchor_order(ANCHORS)
        assert len(clusters) == len(ANCHORS)  # empty clusters exist too
    assert results[0][1] == [[] for _ in ANCHORS]
    order, clusters = anchor_clusters(corpora[3], ANCHORS, 2, min_anchor_count=10)
    assert order == ["familial feshukia", "e-4471", "bloom syndrome"]
    assert clusters == [[], [], []]  # grenaethix is below the minimum: no cluster at all


def test_anchor_clusters_refuses_bad_input() -> None:
    with pytest.raises(ValueError):
        anchor_clusters([["zorbex"]], ANCHORS, 0)
    with pytest.raises(TypeError):
        anchor_clusters(["zorbex"], ANCHORS, 1)  # type: ignore[list-item]


# ---------------------------------------------------------------------- step 4: counts
def test_fact_counts_count_each_distinct_item_once() -> None:
    domain = fact_domain({"grenaethix": 3, "zorbex": 4}, ["fever", "cough"])
    assert domain == ["cough", "fever", "grenaethix", "zorbex"]
    docs = [["grenaethix", "fever", "fever"], ["zorbex", "unknown"], ["grenaethix", "cough"]]
    counts = fact_counts([[0, 2], [1], []], docs, domain, max_items=2)
    assert counts.dtype == np.int64
    assert counts.tolist() == [[1, 1, 2, 0], [0, 0, 0, 1], [0, 0, 0, 0]]


def test_release_refuses_a_document_with_too_many_items_and_charges_nothing() -> None:
    domain = ["cough", "fever", "grenaethix", "rash"]
    ledger = Ledger(rng=secure_rng(1))
    docs = [["fever"], ["grenaethix", "fever", "rash", "secretname"]]
    with pytest.raises(ValueError) as error:
        release_fact_histograms(ledger, [[1]], docs, domain, sigma=2.0, max_items=2, L=1)
    for word in ("grenaethix", "fever", "rash", "secretname"):
        assert word not in str(error.value)
    assert ledger.releases() == [] and ledger.total_rho() == 0.0


def test_release_refuses_a_document_in_more_than_L_clusters() -> None:
    ledger = Ledger(rng=secure_rng(1))
    with pytest.raises(ValueError):
        release_fact_histograms(ledger, [[0], [0], [0]], [["a"]], ["a"], sigma=2.0,
                                max_items=1, L=2)
    with pytest.raises(ValueError):
        release_fact_histograms(ledger, [[0, 0]], [["a"]], ["a"], sigma=2.0, max_items=1, L=2)
    assert ledger.releases() == []


# ---------------------------------------------------------------------- step 4: charges
def _small_build(n_docs: int = 200, seed: int = 2) -> tuple[list[list[str]], list[str],
                                                            list[str], list[list[int]]]:
    keywords = ["fever", "cough", "rash", "pain", "fatigue"]
    docs = _random_docs(seed, n_docs, [*ANCHORS, *keywords], max_len=4)
    domain = fact_domain(ANCHORS, keywords)
    order, clusters = anchor_clusters(docs, ANCHORS, 2)
    return docs, domain, order, clusters


def test_one_charge_per_cluster_in_the_parallel_group() -> None:
    docs, domain, order, clusters = _small_build()
    L, K, sigma = 2, 4, 3.0
    ledger = Ledger(rng=secure_rng(4))
    done: list[int] = []
    noisy = release_fact_histograms(ledger, clusters, docs, domain, sigma=sigma, max_items=K,
                                    L=L, batch_size=2, progress=done.append)
    assert done == [2, 2, 1]  # three ledger transactions for five clusters
    assert noisy.shape == (len(order), len(domain)) and noisy.dtype == np.int64
    releases = ledger.releases()
    assert [r.key for r in releases] == [facts_key(r) for r in range(len(order))]
    assert [r.partition for r in releases] == [f"cluster/{r:05d}" for r in range(len(order))]
    for release in releases:
        assert release.group == GROUP and release.stage == "f-facts"
        assert release.mechanism == "discrete_gaussian" and release.sensitivity_norm == "l2"
        assert math.isclose(release.params["l2_sensitivity"], math.sqrt(K), rel_tol=1e-12)
        assert release.params["sigma"] == sigma and release.params["size"] == len(domain)
        assert math.isclose(release.rho, K / (2 * sigma**2), rel_tol=1e-12)
    assert ledger.parallel_groups()[GROUP].max_overlap == L
    assert len(order) >= L
    assert math.isclose(ledger.total_rho(), L * K / (2 * sigma**2), rel_tol=1e-12)
    assert math.isclose(fact_histogram_rho(L, K, sigma), ledger.total_rho(), rel_tol=1e-12)
    again = release_fact_histograms(ledger, clusters, docs, domain, sigma=sigma, max_items=K,
                                    L=L)
    assert np.array_equal(again, noisy)
    assert len(ledger.releases()) == len(order)
    assert math.isclose(ledger.total_rho(), L * K / (2 * sigma**2), rel_tol=1e-12)


def test_fewer_clusters_than_L_cost_only_what_they_are() -> None:
    ledger = Ledger(rng=secure_rng(4))
    release_fact_histograms(ledger, [[0, 1]], [["a"], ["a", "b"]], ["a", "b"], sigma=2.0,
                            max_items=2, L=3)
    assert math.isclose(ledger.total_rho(), 2 / (2 * 2.0**2), rel_tol=1e-12)


def test_another_L_for_the_same_group_is_refused() -> None:
    docs, domain, _order, clusters = _small_build()
    ledger = Ledger(rng=secure_rng(4))
    ledger.declare_parallel_group(GROUP, 3, "declared elsewhere")
    with pytest.raises(ReleaseMismatchError):
        release_fact_histograms(ledger, clusters, docs, domain, sigma=3.0, max_items=4, L=2)


# ---------------------------------------------------------------------- step 4: noise
def _discrete_gaussian_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    span = int(40 * sigma) + 10
    x = np.arange(-span, span + 1)
    weights = np.exp(-(x.astype(np.float64) ** 2) / (2 * sigma**2))
    return x, weights / weights.sum()


def _chisquare_pvalue(noise: np.ndarray, sigma: float) -> float:
    """Chi-square of integer draws against the exact pmf; bins merged (by expected count
    only, never by the data) until each expects >= 5."""
    support, pmf = _discrete_gaussian_pmf(sigma)
    clipped = np.clip(noise, support[0], support[-1]) - support[0]
    observed = np.bincount(clipped, minlength=support.size).astype(np.float64)
    expected = noise.size * pmf
    obs_bins: list[float] = []
    exp_bins: list[float] = []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o += o
        acc_e += e
        if acc_e >= 5.0:
            obs_bins.append(acc_o)
            exp_bins.append(acc_e)
            acc_o = acc_e = 0.0
    obs_bins[-1] += acc_o
    exp_bins[-1] += acc_e
    exp_arr = np.asarray(exp_bins)
    exp_arr *= np.sum(obs_bins) / exp_arr.sum()
    return float(stats.chisquare(np.asarray(obs_bins), exp_arr).pvalue)


def test_noise_matches_the_discrete_gaussian_pmf() -> None:
    """One chi-square at alpha = 1e-3 on 36,000 noise values (noisy - exact), zero and
    non-zero counts alike; seed fixed (see the module docstring)."""
    sigma, K = 2.5, 3
    gen = np.random.default_rng(0)
    domain = [f"item{j:04d}" for j in range(1200)]
    docs = [[str(x) for x in gen.choice(domain, size=K, replace=False)] for _ in range(300)]
    clusters = [list(range(i, 300, 30)) for i in range(30)]  # disjoint, 10 documents each
    ledger = Ledger(rng=secure_rng(11))
    noisy = release_fact_histograms(ledger, clusters, docs, domain, sigma=sigma, max_items=K,
                                    L=1)
    exact = fact_counts(clusters, docs, domain, K)
    assert exact.max() >= 1 and (exact == 0).mean() > 0.9
    noise = (noisy - exact).ravel()
    assert noise.size == 36_000
    assert _chisquare_pvalue(noise, sigma) >= ALPHA
    # the test has power: a 10 % larger sigma is rejected on the same draws
    assert _chisquare_pvalue(noise, sigma * 1.1) < ALPHA


def test_zero_counts_are_released_with_noise_too() -> None:
    """An empty cluster and unheld items are released noisy over the whole domain."""
    domain = [f"item{j:03d}" for j in range(400)]
    docs = [["item000", "item001"]] * 5
    ledger = Ledger(rng=secure_rng(12))
    noisy = release_fact_histograms(ledger, [[0, 1, 2, 3, 4], []], docs, domain, sigma=2.0,
                                    max_items=2, L=1)
    assert noisy.shape == (2, 400)
    zeros = np.concatenate([noisy[0, 2:], noisy[1]])  # entries whose exact count is 0
    assert (zeros > 0).sum() > 100 and (zeros < 0).sum() > 100
    assert len(ledger.releases()) == 2  # the empty cluster is charged like any other


def test_resumed_build_returns_the_stored_values(tmp_path: Path) -> None:
    docs, domain, order, clusters = _small_build()
    path = tmp_path / "ledger.sqlite"
    with Ledger(path, rng=secure_rng(21)) as ledger:
        first = release_fact_histograms(ledger, clusters[:1], docs, domain, sigma=3.0,
                                        max_items=4, L=2)  # "crash" after one cluster
        partial_rho = ledger.total_rho()
    with Ledger(path, rng=secure_rng(22)) as ledger:
        full = release_fact_histograms(ledger, clusters, docs, domain, sigma=3.0,
                                       max_items=4, L=2)
        assert np.array_equal(full[:1], first)  # not redrawn with the new random source
        assert len(ledger.releases()) == len(order)
        total = ledger.total_rho()
    assert math.isclose(partial_rho, 4 / (2 * 3.0**2), rel_tol=1e-12) and partial_rho < total
    with Ledger(path, rng=secure_rng(23)) as ledger:
        again = release_fact_histograms(ledger, clusters, docs, domain, sigma=3.0,
                                        max_items=4, L=2)
        assert np.array_equal(again, full)
        assert len(ledger.releases()) == len(order)
        assert math.isclose(ledger.total_rho(), total, rel_tol=1e-12)
        with pytest.raises(ReleaseMismatchError):  # another domain under the same keys
            release_fact_histograms(ledger, clusters, docs, [*domain, "zzz"], sigma=3.0,
                                    max_items=4, L=2)
        with pytest.raises(ReleaseMismatchError):
            release_fact_histograms(ledger, clusters, docs, domain, sigma=4.0, max_items=4,
                                    L=2)
