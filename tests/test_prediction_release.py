"""Stage (d) through the ledger: one charged release per token, the worst case T always charged,
and a resumed run replays the stored tokens without drawing or charging again."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynrag.accounting.costs import token_rho
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.transforms.prediction_release import (
    GROUP,
    LedgerTokenSampler,
    charge_unstarted,
    reserve_key,
    token_key,
)

CLIP, TEMPERATURE, T, VOCAB, EOS = 1.0, 2.0, 6, 5, 4


def _ledger(tmp_path, seed=1, L=2) -> Ledger:
    ledger = Ledger(tmp_path / "ledger.sqlite", rng=secure_rng(seed))
    ledger.declare_parallel_group(GROUP, L, "test clusters")
    return ledger


def _votes(n_rows: int, eos_weight: float) -> np.ndarray:
    votes = np.zeros((n_rows, VOCAB))
    votes[:, EOS] = eos_weight
    return votes


def _drive(sampler: LedgerTokenSampler, groups: int, eos_weight: float) -> list[list[int]]:
    """Play the engine: ask for tokens of every unfinished group until all are finished."""
    out: list[list[int]] = [[] for _ in range(groups)]
    while not all(sampler.finished):
        active = [g for g in range(groups) if not sampler.finished[g]]
        tokens = sampler(_votes(len(active), eos_weight), active)
        for g, t in zip(active, tokens, strict=True):
            out[g].append(int(t))
    return out


def test_every_cluster_is_charged_T_tokens_even_when_it_stops_early(tmp_path) -> None:
    ledger = _ledger(tmp_path)
    finished: dict[int, int] = {}
    sampler = LedgerTokenSampler(ledger, [3, 7, 9], clip=CLIP, temperature=TEMPERATURE,
                                 max_new_tokens=T, eos_ids=frozenset({EOS}),
                                 on_finish=lambda g, n: finished.setdefault(g, n))
    tokens = _drive(sampler, 3, eos_weight=3.0)  # EOS likely early
    per_token = token_rho(CLIP, TEMPERATURE)
    for group, cluster in enumerate([3, 7, 9]):
        n = len(tokens[group])
        assert finished[group] == n
        assert (tokens[group][-1] == EOS) or n == T
        released = [r for r in ledger.releases() if r.partition == f"cluster/{cluster:05d}"]
        assert math.isclose(sum(r.rho for r in released), T * per_token, rel_tol=1e-12)
        if n < T:
            assert ledger.released_value(reserve_key(cluster)) is None
            assert any(r.key == reserve_key(cluster) for r in released)
        for step, token in enumerate(tokens[group]):
            assert ledger.released_value(token_key(cluster, step)) == token
    # L = 2 most expensive partitions of equal cost
    assert math.isclose(ledger.total_rho(), 2 * T * per_token, rel_tol=1e-12)


def test_resume_replays_stored_tokens_without_new_charges(tmp_path) -> None:
    ledger = _ledger(tmp_path)
    sampler = LedgerTokenSampler(ledger, [0, 1], clip=CLIP, temperature=TEMPERATURE,
                                 max_new_tokens=T, eos_ids=frozenset({EOS}))
    first = _drive(sampler, 2, eos_weight=0.0)
    count, total = len(ledger.releases()), ledger.total_rho()
    ledger.close()
    # a different random source: a redraw would almost surely differ somewhere
    resumed = Ledger(tmp_path / "ledger.sqlite", rng=secure_rng(999))
    replay = LedgerTokenSampler(resumed, [0, 1], clip=CLIP, temperature=TEMPERATURE,
                                max_new_tokens=T, eos_ids=frozenset({EOS}))
    assert _drive(replay, 2, eos_weight=0.0) == first
    assert len(resumed.releases()) == count
    assert resumed.total_rho() == pytest.approx(total, rel=1e-15)


def test_a_crash_mid_cluster_resumes_to_the_same_total(tmp_path) -> None:
    ledger = _ledger(tmp_path)
    sampler = LedgerTokenSampler(ledger, [0, 1], clip=CLIP, temperature=TEMPERATURE,
                                 max_new_tokens=T, eos_ids=frozenset({EOS}))
    sampler(_votes(2, 0.0), [0, 1])
    sampler(_votes(2, 0.0), [0, 1])  # "crash" after two steps
    ledger.close()
    resumed = Ledger(tmp_path / "ledger.sqlite", rng=secure_rng(5))
    replay = LedgerTokenSampler(resumed, [0, 1], clip=CLIP, temperature=TEMPERATURE,
                                max_new_tokens=T, eos_ids=frozenset({EOS}))
    _drive(replay, 2, eos_weight=0.0)
    assert resumed.total_rho() == pytest.approx(2 * T * token_rho(CLIP, TEMPERATURE))


def test_unstarted_groups_are_charged_in_full(tmp_path) -> None:
    ledger = _ledger(tmp_path, L=1)
    sampler = LedgerTokenSampler(ledger, [0], clip=CLIP, temperature=TEMPERATURE,
                                 max_new_tokens=T, eos_ids=frozenset({EOS}))
    charge_unstarted(ledger, sampler)
    assert ledger.total_rho() == pytest.approx(T * token_rho(CLIP, TEMPERATURE))


def test_asking_past_T_is_refused(tmp_path) -> None:
    ledger = _ledger(tmp_path)
    sampler = LedgerTokenSampler(ledger, [0], clip=CLIP, temperature=TEMPERATURE,
                                 max_new_tokens=T, eos_ids=frozenset())
    _drive(sampler, 1, eos_weight=0.0)
    with pytest.raises(RuntimeError):
        sampler(_votes(1, 0.0), [0])
