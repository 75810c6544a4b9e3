"""DP-Synth baseline: the plan puts the whole budget on prediction, the run charges exactly that
budget through the ledger (disjoint batches, overlap 1), and the batching is uniform.

Statistical tests use a fixed seed and reject at alpha = 1e-3: a correct sampler fails one of
them with probability 1e-3 per seed, and the seed is fixed, so the outcome is reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from test_build import HashEmbedder
from test_private_prediction import WORDS, tiny_llm

from dpsynrag.accounting.conversions import Conversion, epsilon_for, rho_for
from dpsynrag.accounting.costs import token_rho
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.planner import PlanError
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.eval.dp_synth import (
    GROUP,
    STAGE,
    PartitionTokenSampler,
    check_batches,
    partition_name,
    plan_dp_synth,
    random_assignment,
    random_batches,
    run_dp_synth,
)
from dpsynrag.pipeline.runners import LocalRunner

ALPHA = 1e-3
PROMPT = "rewrite the following note : {document} ."


@pytest.fixture(scope="module")
def runner() -> LocalRunner:
    return LocalRunner(tiny_llm(), HashEmbedder())


def _texts(n: int, seed: int = 4) -> list[str]:
    rs = np.random.default_rng(seed)
    return [" ".join(rs.choice(WORDS[:-8], int(rs.integers(2, 9)))) for _ in range(n)]


@pytest.mark.parametrize("conversion", [Conversion.BUN_STEINKE, Conversion.CKS])
def test_plan_gives_the_whole_budget_to_prediction(conversion) -> None:
    plan = plan_dp_synth(10.0, 1e-3, conversion, T=70, clip=2.0)
    rho = rho_for(10.0, 1e-3, conversion)
    assert plan.rho_total == rho == plan.rho_per_batch
    assert math.isclose(plan.c_over_tau, math.sqrt(2 * rho / 70), rel_tol=1e-15)
    assert math.isclose(plan.temperature, 2.0 / plan.c_over_tau, rel_tol=1e-15)
    assert math.isclose(70 * token_rho(plan.clip, plan.temperature), rho, rel_tol=1e-12)
    assert math.isclose(plan.epsilon_per_token, 2 * plan.c_over_tau, rel_tol=1e-15)
    assert plan.epsilon_cks <= plan.epsilon_bun_steinke
    named = plan.epsilon_bun_steinke if conversion is Conversion.BUN_STEINKE else plan.epsilon_cks
    assert math.isclose(named, 10.0, rel_tol=1e-9)
    if conversion is Conversion.BUN_STEINKE:  # docs/mechanisms.md V5: rho(10, 1e-3) = 2.2012
        assert plan.rho_total == pytest.approx(2.2012, abs=1e-4)
    assert plan.consensus_rows >= 1


def test_plan_refuses_bad_input() -> None:
    for kwargs in ({"T": 0}, {"T": 5, "clip": 0.0}, {"T": 5, "delta": 1.0},
                   {"T": 5, "epsilon": -1.0}):
        args = {"epsilon": 1.0, "delta": 1e-5, "conversion": "cks", **kwargs}
        with pytest.raises(PlanError):
            plan_dp_synth(**args)


@pytest.mark.parametrize(("n", "batch_size"), [(11, 4), (12, 4), (1, 3), (0, 2), (7, 1)])
def test_random_batches_partition_the_index_set(n, batch_size) -> None:
    batches = random_batches(n, batch_size, secure_rng(n))
    assert len(batches) == math.ceil(n / batch_size)
    assert sorted(i for b in batches for i in b) == list(range(n))
    sizes = [len(b) for b in batches]
    assert all(s == batch_size for s in sizes[:-1])
    assert all(0 < s <= batch_size for s in sizes)
    check_batches(batches, n)


def test_random_assignment_partitions_the_index_set() -> None:
    batches = random_assignment(50, 7, secure_rng(2))
    assert len(batches) == 7
    assert sorted(i for b in batches for i in b) == list(range(50))
    check_batches(batches, 50)
    with pytest.raises(ValueError, match="two batches"):
        check_batches([[0, 1], [1]], 2)
    with pytest.raises(ValueError, match="outside"):
        check_batches([[0, 5]], 3)


def test_random_batches_put_documents_in_every_batch_uniformly() -> None:
    """Chi-square (seed 12, alpha 1e-3) over 4,000 partitions of 10 documents into batches of
    sizes 3, 3, 3, 1. In a uniformly random partition with these sizes, a document sits in
    batch a with probability s_a / n (every position equally likely), and documents 0 and 9
    sit in batches (a, b) with probability s_a (s_b - [a = b]) / (n (n - 1)).
    """
    n, size, draws = 10, 3, 4000
    sizes = np.array([3, 3, 3, 1])
    rng = secure_rng(12)
    single = {0: np.zeros(4), 9: np.zeros(4)}
    pair = np.zeros((4, 4))
    for _ in range(draws):
        batches = random_batches(n, size, rng)
        where = {doc: b for b, batch in enumerate(batches) for doc in batch}
        for doc in single:
            single[doc][where[doc]] += 1
        pair[where[0], where[9]] += 1
    for doc, observed in single.items():
        p = stats.chisquare(observed, draws * sizes / n).pvalue
        assert p > ALPHA, (doc, observed, p)
    joint = np.outer(sizes, sizes) - np.diag(sizes)
    expected = draws * joint / (n * (n - 1))
    cells = expected > 0  # the lone slot of batch 3 cannot hold both documents
    assert pair[~cells].sum() == 0
    assert stats.chisquare(pair[cells], expected[cells]).pvalue > ALPHA


def test_random_assignment_is_uniform_over_batches() -> None:
    """Chi-square (seed 5, alpha 1e-3): document 3 of 20 lands in each of 6 batches w.p. 1/6,
    independently of document 4 (the pair's 36 joint cells are uniform)."""
    rng = secure_rng(5)
    single, pair = np.zeros(6), np.zeros(36)
    for _ in range(3600):
        batches = random_assignment(20, 6, rng)
        where = {doc: b for b, batch in enumerate(batches) for doc in batch}
        single[where[3]] += 1
        pair[6 * where[3] + where[4]] += 1
    assert stats.chisquare(single).pvalue > ALPHA
    assert stats.chisquare(pair).pvalue > ALPHA


def _sampler(ledger: Ledger, parts: list[str], T: int, eos: int) -> PartitionTokenSampler:
    ledger.declare_parallel_group(GROUP, 1, "test")
    return PartitionTokenSampler(ledger, parts, group=GROUP, stage=STAGE, clip=1.0,
                                 temperature=0.5, max_new_tokens=T, eos_ids={eos})


def test_sampler_reserves_the_unused_draws_after_an_early_eos() -> None:
    T, vocab, eos = 6, 5, 4
    ledger = Ledger(rng=secure_rng(1))
    parts = [partition_name(0), partition_name(1)]
    sampler = _sampler(ledger, parts, T, eos)
    votes = np.zeros((2, vocab))
    votes[:, eos] = 20.0  # EOS almost surely at the first step
    tokens = sampler(votes, [0, 1])
    assert list(tokens) == [eos, eos] and all(sampler.finished)
    per_token = token_rho(1.0, 0.5)
    for part in parts:
        mine = [r for r in ledger.releases() if r.partition == part]
        assert [r.key for r in mine] == [f"{part}/token/000", f"{part}/token-reserve"]
        assert ledger.released_value(f"{part}/token-reserve") is None
        assert math.isclose(sum(r.rho for r in mine), T * per_token, rel_tol=1e-12)
    assert math.isclose(ledger.total_rho(), T * per_token, rel_tol=1e-12)  # overlap 1
    with pytest.raises(RuntimeError, match="finished"):
        sampler(votes[:1], [0])


def test_groups_left_unfinished_are_charged_their_remaining_draws() -> None:
    T, vocab, eos = 6, 5, 4
    ledger = Ledger(rng=secure_rng(2))
    parts = [partition_name(b) for b in range(3)]
    sampler = _sampler(ledger, parts, T, eos)
    votes = np.zeros((1, vocab))
    votes[0, eos] = -50.0  # never EOS
    sampler(votes, [1])
    sampler(votes, [1])  # group 1 stopped by the engine after 2 tokens; 0 and 2 never sampled
    sampler.charge_unfinished()
    count = len(ledger.releases())
    sampler.charge_unfinished()  # idempotent
    assert len(ledger.releases()) == count
    per_token = token_rho(1.0, 0.5)
    for part in parts:
        mine = [r for r in ledger.releases() if r.partition == part]
        assert math.isclose(sum(r.rho for r in mine), T * per_token, rel_tol=1e-12)
    reserve = next(r for r in ledger.releases() if r.key == f"{parts[1]}/token-reserve")
    assert reserve.params["tokens"] == T - 2


@pytest.mark.parametrize("conversion", [Conversion.BUN_STEINKE, Conversion.CKS])
def test_run_spends_exactly_the_plan(runner, conversion) -> None:
    texts = _texts(11)
    T, batch_size = 5, 4
    plan = plan_dp_synth(4.0, 1e-5, conversion, T=T)
    ledger = Ledger(rng=secure_rng(7))
    done: list[int] = []
    out = run_dp_synth(texts, runner, ledger, plan=plan, batch_size=batch_size, T=T,
                       prompt=PROMPT, eos_ids=None, progress=done.append)
    assert len(out) == math.ceil(len(texts) / batch_size) == 3
    assert all(isinstance(t, str) for t in out)
    assert sum(done) == 3
    assert ledger.parallel_groups()[GROUP].max_overlap == 1
    assert math.isclose(ledger.total_rho(), plan.rho_total, rel_tol=1e-12)
    assert math.isclose(ledger.epsilon(1e-5, conversion), 4.0, rel_tol=1e-9)
    assert math.isclose(epsilon_for(plan.rho_total, 1e-5, conversion), 4.0, rel_tol=1e-9)
    # every batch is charged all T draws (tokens + reservation), nothing outside the group
    releases = ledger.releases()
    assert {r.group for r in releases} == {GROUP}
    for b in range(3):
        mine = [r for r in releases if r.partition == partition_name(b)]
        assert math.isclose(sum(r.rho for r in mine), plan.rho_total, rel_tol=1e-12)
        tokens = [r for r in mine if "/token/" in r.key]
        assert 1 <= len(tokens) <= T
        assert all(r.released for r in tokens)


def test_resume_with_stored_batches_regenerates_the_same_texts(runner, tmp_path) -> None:
    texts = _texts(9, seed=8)
    T = 4
    plan = plan_dp_synth(2.0, 1e-5, "cks", T=T)
    batches = random_assignment(len(texts), 3, secure_rng(1))
    path = tmp_path / "ledger.sqlite"
    with Ledger(path, rng=secure_rng(3)) as ledger:
        first = run_dp_synth(texts, runner, ledger, plan=plan, batch_size=3, T=T,
                             prompt=PROMPT, eos_ids=None, batches=batches)
        count, total = len(ledger.releases()), ledger.total_rho()
    with Ledger(path, rng=secure_rng(99)) as ledger:
        again = run_dp_synth(texts, runner, ledger, plan=plan, batch_size=3, T=T,
                             prompt=PROMPT, eos_ids=None, batches=batches)
        assert again == first
        assert len(ledger.releases()) == count
        assert ledger.total_rho() == total


def test_run_refuses_bad_arguments(runner) -> None:
    plan = plan_dp_synth(1.0, 1e-5, "cks", T=3)
    ledger = Ledger(rng=secure_rng(0))
    with pytest.raises(ValueError, match="placeholder"):
        run_dp_synth(["a"], runner, ledger, plan=plan, batch_size=1, T=3, prompt="no slot",
                     eos_ids=None)
    with pytest.raises(ValueError, match="T="):
        run_dp_synth(["a"], runner, ledger, plan=plan, batch_size=1, T=4, prompt=PROMPT,
                     eos_ids=None)
    with pytest.raises(ValueError, match="two batches"):
        run_dp_synth(["a", "b"], runner, ledger, plan=plan, batch_size=1, T=3, prompt=PROMPT,
                     eos_ids=None, batches=[[0], [0, 1]])
    assert ledger.total_rho() == 0.0
