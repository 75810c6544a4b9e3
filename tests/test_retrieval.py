"""Stage (c) retrieval: exact per-cluster charge, S_r near k, resume without redraw."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynrag.accounting import Ledger, LedgerError, secure_rng
from dpsynrag.accounting.ledger import ReleaseMismatchError
from dpsynrag.transforms import retrieval
from dpsynrag.transforms.retrieval import (
    mean_key,
    retrieval_rho,
    retrieve_cluster,
    retrieve_clusters,
    similarities,
    threshold_key,
)

SIGMA_MU = 7.45
EPS_THETA = 0.4


def ledger(seed: int = 0, L: int = 5) -> Ledger:
    led = Ledger(rng=secure_rng(seed))
    led.declare_parallel_group("clusters", L, "each document in at most L clusters")
    return led


def clustered(n_close: int, n_far: int, dim: int = 32, seed: int = 1) -> np.ndarray:
    """n_close rows near one direction, then n_far rows near the opposite-ish directions."""
    rs = np.random.default_rng(seed)
    centre = np.zeros(dim)
    centre[0] = 1.0
    close = centre + 0.05 * rs.standard_normal((n_close, dim))
    far = rs.standard_normal((n_far, dim))
    far[:, 0] = -np.abs(far[:, 0]) - 1.0
    rows = np.vstack([close, far])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_charges_exactly_one_cluster_cost_into_its_partition() -> None:
    led = ledger()
    emb = clustered(20, 10)
    retrieve_cluster(led, 3, emb, sigma_mu=SIGMA_MU, eps_theta=EPS_THETA, k=5)
    expected = 1 / (2 * SIGMA_MU**2) + EPS_THETA**2 / 8
    assert retrieval_rho(SIGMA_MU, EPS_THETA) == pytest.approx(expected, rel=1e-15)
    assert led.total_rho() == pytest.approx(expected, rel=1e-12)
    releases = {r.key: r for r in led.releases()}
    assert set(releases) == {"cluster/00003/mean", "cluster/00003/threshold"}
    mean, theta = releases["cluster/00003/mean"], releases["cluster/00003/threshold"]
    assert (mean.stage, mean.mechanism, mean.group, mean.partition) == (
        "c-noisy-sum", "gaussian", "clusters", "cluster/00003")
    assert mean.params == {"sigma": SIGMA_MU, "l2_sensitivity": 1.0,
                           "grid_bits": retrieval.FIXED_POINT_BITS}
    assert mean.rho == pytest.approx(1 / (2 * SIGMA_MU**2), rel=1e-15)
    assert (theta.stage, theta.mechanism, theta.partition) == (
        "c-threshold", "exponential_threshold", "cluster/00003")
    assert theta.params == {"epsilon": EPS_THETA, "k": 5, "lo": 0.0, "hi": 1.0}
    assert theta.rho == pytest.approx(EPS_THETA**2 / 8, rel=1e-15)
    # the released values are stored: an int64 grid vector of the embedding width and a float
    stored_sum = led.released_value(mean_key(3))
    assert isinstance(stored_sum, np.ndarray) and stored_sum.dtype == np.int64
    assert stored_sum.shape == (emb.shape[1],)
    assert isinstance(led.released_value(threshold_key(3)), float)


def test_parallel_clusters_cost_l_times_one_cluster() -> None:
    led = ledger(L=2)
    for r in range(4):
        retrieve_cluster(led, r, clustered(5, 5, seed=r), sigma_mu=SIGMA_MU,
                         eps_theta=EPS_THETA, k=3)
    assert led.total_rho() == pytest.approx(2 * retrieval_rho(SIGMA_MU, EPS_THETA), rel=1e-12)


def test_undeclared_group_is_refused() -> None:
    led = Ledger(rng=secure_rng(0))
    with pytest.raises(LedgerError):
        retrieve_cluster(led, 0, clustered(3, 3), sigma_mu=SIGMA_MU, eps_theta=EPS_THETA, k=2)


def test_tiny_noise_retrieves_about_k_members() -> None:
    """Noise negligible (sigma 1e-6, eps_theta 50): S_r is the k most similar, up to ~1."""
    emb = clustered(40, 40, seed=3)
    sizes = []
    for seed in range(10):
        led = ledger(seed)
        chosen = retrieve_cluster(led, 0, emb, sigma_mu=1e-6, eps_theta=50.0, k=12)
        assert np.all(np.diff(chosen) > 0)
        sizes.append(chosen.size)
        # every selected member is at least as similar as every unselected one
        scores = similarities(emb, emb.sum(axis=0))
        rest = np.setdiff1d(np.arange(len(emb)), chosen)
        assert scores[chosen].min() >= scores[rest].max()
    assert all(abs(s - 12) <= 2 for s in sizes), sizes
    assert np.median(sizes) == 12


def test_realistic_noise_prefers_the_cluster_core() -> None:
    """Paper-like sigma_mu on a big cluster: the retrieved set is mostly the coherent core."""
    emb = clustered(300, 30, dim=16, seed=4)
    led = ledger(5)
    chosen = retrieve_cluster(led, 0, emb, sigma_mu=SIGMA_MU, eps_theta=EPS_THETA, k=80)
    assert chosen.size > 0
    assert np.mean(chosen < 300) > 0.95


def test_resume_returns_identical_set_without_new_charge() -> None:
    emb = clustered(25, 25, seed=5)
    led, twin = ledger(7), ledger(7)
    first = retrieve_cluster(led, 9, emb, sigma_mu=0.5, eps_theta=2.0, k=10)
    retrieve_cluster(twin, 9, emb, sigma_mu=0.5, eps_theta=2.0, k=10)
    total, count = led.total_rho(), len(led.releases())
    again = retrieve_cluster(led, 9, emb, sigma_mu=0.5, eps_theta=2.0, k=10)
    np.testing.assert_array_equal(first, again)
    assert led.total_rho() == total and len(led.releases()) == count
    # nothing was drawn on resume: the random stream stands where the twin's does
    assert led.rng.bytes(32) == twin.rng.bytes(32)


def test_resume_from_a_durable_ledger_draws_nothing(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    emb = clustered(25, 25, seed=6)
    with Ledger(path, rng=secure_rng(11)) as led:
        led.declare_parallel_group("clusters", 5, "L")
        first = retrieve_cluster(led, 1, emb, sigma_mu=0.5, eps_theta=2.0, k=10)
        total = led.total_rho()
    # a different seed on resume: had anything been redrawn, the set would differ
    with Ledger(path, rng=secure_rng(999)) as led:
        led.declare_parallel_group("clusters", 5, "L")
        again = retrieve_cluster(led, 1, emb, sigma_mu=0.5, eps_theta=2.0, k=10)
        assert led.total_rho() == total
    np.testing.assert_array_equal(first, again)


def test_resume_with_other_parameters_is_refused() -> None:
    led = ledger()
    emb = clustered(5, 5)
    retrieve_cluster(led, 0, emb, sigma_mu=1.0, eps_theta=1.0, k=3)
    with pytest.raises(ReleaseMismatchError):
        retrieve_cluster(led, 0, emb, sigma_mu=1.0, eps_theta=1.0, k=4)


def test_empty_cluster_is_charged_and_returns_nothing() -> None:
    led = ledger()
    chosen = retrieve_cluster(led, 2, np.zeros((0, 16)), sigma_mu=SIGMA_MU,
                              eps_theta=EPS_THETA, k=80)
    assert chosen.shape == (0,)
    assert led.total_rho() == pytest.approx(retrieval_rho(SIGMA_MU, EPS_THETA), rel=1e-12)
    assert led.released_value(mean_key(2)).shape == (16,)
    theta = led.released_value(threshold_key(2))
    assert 0.0 <= theta <= 1.0


def test_unnormalised_embeddings_are_normalised_first() -> None:
    """Sensitivity 1 needs unit rows: scaling a member must not change anything."""
    emb = clustered(10, 10, seed=8)
    scaled = emb * np.linspace(0.1, 30, len(emb))[:, None]
    a = retrieve_cluster(ledger(3), 0, emb, sigma_mu=0.3, eps_theta=1.0, k=5)
    b = retrieve_cluster(ledger(3), 0, scaled, sigma_mu=0.3, eps_theta=1.0, k=5)
    np.testing.assert_array_equal(a, b)


def test_batched_helper_matches_one_by_one() -> None:
    clusters = {r: clustered(4 + 3 * r, 6, seed=20 + r) for r in range(5)}
    clusters[5] = np.zeros((0, 32))
    led = ledger(4)
    batched = retrieve_clusters(led, clusters, sigma_mu=0.8, eps_theta=1.5, k=4)
    assert led.total_rho() == pytest.approx(5 * retrieval_rho(0.8, 1.5), rel=1e-12)
    assert len(led.releases()) == 2 * len(clusters)  # one key per release
    for r, emb in clusters.items():  # one by one on the same ledger: the stored values
        np.testing.assert_array_equal(
            batched[r], retrieve_cluster(led, r, emb, sigma_mu=0.8, eps_theta=1.5, k=4))
    assert len(led.releases()) == 2 * len(clusters)
    # the same S_r as recomputing by hand from the released values
    for r, emb in clusters.items():
        scores = similarities(emb, led.released_value(mean_key(r)))
        expected = np.flatnonzero(scores > led.released_value(threshold_key(r)))
        np.testing.assert_array_equal(batched[r], expected)


@pytest.mark.parametrize("bad", [
    dict(sigma_mu=0.0, eps_theta=1.0, k=3),
    dict(sigma_mu=1.0, eps_theta=-1.0, k=3),
    dict(sigma_mu=1.0, eps_theta=1.0, k=-1),
    dict(sigma_mu=math.inf, eps_theta=1.0, k=3),
])
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        retrieve_cluster(ledger(), 0, clustered(3, 3), **bad)


def test_one_dimensional_input_is_refused() -> None:
    with pytest.raises(ValueError):
        retrieve_cluster(ledger(), 0, np.zeros(8), sigma_mu=1.0, eps_theta=1.0, k=1)


# ---------------------------------------------------------------- issue 13: exact noise for mu_r
def test_grid_rows_never_exceed_the_sensitivity_bound_even_for_float_overshoot() -> None:
    """One member's grid vector has l2 norm <= B exactly, so the discrete Gaussian's
    sensitivity is B whatever float rounding did to the unit embedding."""
    rs = np.random.default_rng(7)
    for dim in (1, 3, 32, 384):
        rows = rs.standard_normal((200, dim))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        rows *= 1.0 + 1e-7 * rs.random((200, 1))  # norms slightly above 1, as float32 gives
        rows[0] = 0.0
        rows[1, :] = 1.0 / math.sqrt(dim) + 4e-8  # every coordinate rounds up
        grid = retrieval.grid_rows(rows)
        assert grid.dtype == np.int64
        bound = retrieval.grid_sensitivity(dim)
        assert bound >= (1 << retrieval.FIXED_POINT_BITS) + math.sqrt(dim) / 2
        assert max(sum(int(v) ** 2 for v in row) for row in grid) <= bound * bound
        assert np.abs(grid / float(1 << retrieval.FIXED_POINT_BITS) - rows).max() < 1e-5


def test_released_noisy_sum_is_an_integer_grid_vector_with_discrete_gaussian_noise() -> None:
    """The released value is the integer grid sum plus N_Z(0, (sigma_mu B)^2) per coordinate
    (no floating-point Gaussian). KS test of the standardised noise against N(0, 1) at a
    scale where the discrete Gaussian is indistinguishable from it; fixed seed, so the test is
    deterministic (its false-positive rate over seeds would be 1e-3)."""
    from scipy import stats

    dim = 384
    led = ledger(seed=11)
    members = clustered(30, 0, dim=dim)
    retrieve_clusters(led, {0: members}, sigma_mu=SIGMA_MU, eps_theta=EPS_THETA, k=5)
    released = led._lookup(mean_key(0), retrieval.mean_charge(0, SIGMA_MU))
    assert released is not None and released[0]
    value = np.asarray(released[1])
    assert value.shape == (dim,) and np.issubdtype(value.dtype, np.integer)
    exact = retrieval.grid_rows(members).sum(axis=0)
    noise = (value - exact) / (SIGMA_MU * retrieval.grid_sensitivity(dim))
    assert stats.kstest(noise, "norm").pvalue > 1e-3
