"""Typed mechanisms and compose() (issue 18): the same costs as the lookup tables they replaced.

``legacy_costs`` is a frozen copy of accounting/costs.py, of the composition rule and of the
build's corpus-ledger dicts as they were before the refactor; every cost here is compared with
it bit for bit, and with the formula of docs/mechanisms.md.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import shutil
from dataclasses import FrozenInstanceError
from pathlib import Path

import legacy_costs
import pytest

from dpsynrag.accounting.composition import (
    ParallelGroup,
    Repeated,
    Sequential,
    compose,
    records,
)
from dpsynrag.accounting.costs import spend_of
from dpsynrag.accounting.ledger import Charge, Ledger, ReleaseMismatchError
from dpsynrag.accounting.mechanisms import (
    MECHANISMS,
    DiscreteGaussian,
    DpComposition,
    Exponential,
    ExponentialThreshold,
    Gaussian,
    LimitedDomain,
    PartitionSelection,
    PtrGaussian,
    SparseVectorEpoch,
    TokenSoftmax,
    from_record,
)
from dpsynrag.accounting.partition_selection import selection_threshold
from dpsynrag.pipeline.build import corpus_ledger_mechanisms, make_plan
from dpsynrag.pipeline.config import BuildConfig

SIGMAS = [0.3, 1, 1.1595, 2.0, 5.0, 7.0710678118654755, 7.453559924999299, 123.4]
SENSITIVITIES = [0.0, 1, 1.0, math.sqrt(2), math.sqrt(10), math.sqrt(16), 3.7]
EPSILONS = [1e-3, 0.1, 0.2115, 0.4, 1, 2.0, 7.5]
DELTAS = [1e-9, 1e-5, 5e-5, 1e-3, 0.3]


def _grid() -> list[tuple[str, dict[str, object]]]:
    """Records of every chargeable mechanism on a grid of parameters (with their info keys)."""
    grid: list[tuple[str, dict[str, object]]] = []
    for sigma, sens in itertools.product(SIGMAS, SENSITIVITIES):
        grid.append(("discrete_gaussian", {"sigma": sigma, "l2_sensitivity": sens, "K": 10,
                                           "size": 500}))
        grid.append(("gaussian", {"sigma": sigma, "l2_sensitivity": sens, "grid_bits": 24}))
        grid.append(("gaussian", {"sigma": sigma, "l2_sensitivity": sens}))
    for eps in EPSILONS:
        grid.append(("exponential_threshold", {"epsilon": eps, "k": 8, "lo": 0.0, "hi": 1.0}))
        grid.append(("exponential", {"epsilon": eps}))
        grid.append(("sparse_vector_epoch", {"epsilon": eps}))
        for delta in DELTAS:
            grid.append(("limited_domain", {"epsilon": eps, "delta": delta}))
    for sigma, delta in itertools.product(SIGMAS, DELTAS):
        grid.append(("ptr_gaussian", {"sigma": sigma, "delta": delta}))
    for clip, temp in itertools.product([0.05, 0.5, 1], [0.01, 0.4254025564926557, 1.0, 3]):
        grid.append(("token_softmax", {"clip": clip, "temperature": temp}))
        for tokens in (1, 3, 70):
            grid.append(("token_softmax", {"clip": clip, "temperature": temp, "tokens": tokens}))
    for sigma, items in itertools.product([0.8, 1.1595, 3.4804, 10.0], [1, 2, 5]):
        for delta in (1e-6, 1e-4):
            threshold = selection_threshold(sigma, items, delta)
            grid.append(("partition_selection", {"sigma": sigma, "max_items": items,
                                                 "threshold": threshold, "delta": delta}))
            grid.append(("partition_selection", {"sigma": sigma, "max_items": items,
                                                 "threshold": threshold + 3, "delta": delta}))
    for tok_eps, eps in itertools.product([0.5, 1.0, 2.0], [2.0, 5.0, 10.0]):
        grid.append(("dp_composition", {"token_epsilon": tok_eps, "token_delta": 1e-5,
                                        "steps": 1, "epsilon": eps, "delta": 1e-4}))
    return grid


GRID = _grid()


def test_the_grid_covers_every_chargeable_mechanism() -> None:
    assert {name for name, _ in GRID} == set(MECHANISMS) == set(legacy_costs.MECHANISM_COSTS)


@pytest.mark.parametrize(("name", "params"), GRID, ids=lambda x: x if isinstance(x, str) else "")
def test_each_mechanism_costs_exactly_what_the_old_tables_said(name: str,
                                                                params: dict[str, object]) -> None:
    event = from_record(name, params)
    assert type(event) is MECHANISMS[name]
    # bit for bit: rho, approximate delta, (epsilon, delta) currency, sensitivity
    assert event.cost.rho == legacy_costs.mechanism_rho(name, params)
    assert event.cost.delta == legacy_costs.mechanism_delta(name, params)
    assert (event.cost.dp_epsilon, event.cost.dp_delta) == legacy_costs.mechanism_dp(name,
                                                                                   params)
    assert (event.norm, event.sensitivity()) == legacy_costs.mechanism_sensitivity(name, params)
    # the record reads back to exactly the record it was (ledger keys and resumes use it)
    assert json.dumps(event.params(), sort_keys=True) == json.dumps(params, sort_keys=True)
    assert from_record(name, event.params()) == event


def _formula(name: str, p: dict[str, float]) -> float:
    """docs/mechanisms.md, section 0's cost table, written out independently."""
    if name in ("discrete_gaussian", "gaussian"):
        return p["l2_sensitivity"] ** 2 / (2 * p["sigma"] ** 2)
    if name in ("exponential_threshold", "exponential"):
        return p["epsilon"] ** 2 / 8
    if name == "token_softmax":
        return p.get("tokens", 1) * (p["clip"] / p["temperature"]) ** 2 / 2
    if name in ("limited_domain", "sparse_vector_epoch"):
        return p["epsilon"] ** 2 / 2
    if name == "ptr_gaussian":
        return 1 / (2 * p["sigma"] ** 2)
    if name == "partition_selection":
        return p["max_items"] / (2 * p["sigma"] ** 2)
    assert name == "dp_composition"
    return 0.0


@pytest.mark.parametrize(("name", "params"), GRID, ids=lambda x: x if isinstance(x, str) else "")
def test_each_mechanism_costs_its_documented_formula(name: str,
                                                     params: dict[str, float]) -> None:
    event = from_record(name, params)
    assert event.cost.rho == pytest.approx(_formula(name, params), rel=1e-12, abs=0)
    if name in ("limited_domain", "ptr_gaussian"):
        assert event.cost.delta == params["delta"]
    elif name == "partition_selection":
        assert 0 < event.cost.delta <= params["delta"]
    else:
        assert event.cost.delta == 0.0


def test_mechanisms_are_frozen_typed_and_validated() -> None:
    event = DiscreteGaussian(sigma=2.0, l2_sensitivity=2.0)
    with pytest.raises(FrozenInstanceError):
        event.sigma = 1.0  # type: ignore[misc]
    assert event.cost.rho == 0.5 and event.params() == {"sigma": 2.0, "l2_sensitivity": 2.0}
    assert hash(event) == hash(DiscreteGaussian(sigma=2.0, l2_sensitivity=2.0))
    for bad in (lambda: DiscreteGaussian(sigma=0.0, l2_sensitivity=1.0),
                lambda: ExponentialThreshold(epsilon=-1.0),
                lambda: TokenSoftmax(clip=0.5, temperature=0.1, tokens=0),
                lambda: LimitedDomain(epsilon=1.0, delta=1.0),
                lambda: PtrGaussian(sigma=1.0, delta=0.0),
                lambda: PartitionSelection(sigma=1.0, max_items=2, threshold=2, delta=1e-9),
                lambda: DpComposition(epsilon=1.0, delta=1e-4, token_epsilon=1.0,
                                      token_delta=1e-5, steps=50)):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(ValueError, match="needs parameter 'sigma'"):
        from_record("gaussian", {"l2_sensitivity": 1.0})
    with pytest.raises(ValueError, match="unknown mechanism"):
        from_record("laplace", {"scale": 1.0, "l1_sensitivity": 1.0})
    for cls in (Gaussian, Exponential, SparseVectorEpoch):
        assert cls.__doc__ and "rho" in cls.__doc__


def test_charge_of_a_typed_mechanism_writes_the_old_record() -> None:
    event = TokenSoftmax(clip=0.5, temperature=0.25, tokens=3)
    charge = Charge.of("d-prediction", event, group="clusters", partition="cluster/00001")
    assert charge == Charge("d-prediction", "token_softmax",
                            {"clip": 0.5, "temperature": 0.25, "tokens": 3}, 0.5, "linf",
                            "clusters", "cluster/00001")
    assert charge.event == event and charge.rho == 3 * (0.5 / 0.25) ** 2 / 2


# ---------------------------------------------------------------------- composition
def _random_costs(rng: random.Random) -> list[float]:
    return [rng.choice([0.0, rng.random(), rng.uniform(1e-6, 1e-3), rng.expovariate(0.1)])
            for _ in range(rng.randint(1, 40))]


@pytest.mark.parametrize("seed", range(40))
def test_parallel_group_equals_the_old_rule_on_random_partitions(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(10):
        costs = _random_costs(rng)
        overlap = rng.randint(1, len(costs) + 3)
        # each partition a Gaussian whose rho is the random cost (sigma solved from it)
        parts = tuple(DiscreteGaussian(sigma=1.0, l2_sensitivity=math.sqrt(2 * c))
                      for c in costs)
        rhos = [p.cost.rho for p in parts]
        group = compose(ParallelGroup(overlap, parts))
        assert group.rho == legacy_costs.certificate_top_sum(rhos, overlap)  # bit for bit
        assert group.rho == pytest.approx(legacy_costs.ledger_top_sum(rhos, overlap),
                                          rel=1e-15, abs=0)
        assert group.rho <= overlap * max(rhos) * (1 + 1e-15)


@pytest.mark.parametrize("seed", range(10))
def test_ledger_total_equals_the_old_rule_on_random_releases(seed: int) -> None:
    """Random sequential releases and groups with random partitions: the ledger's total rho and
    delta equal the old rule (sequential sum plus the L most expensive partitions)."""
    rng = random.Random(seed)
    ledger = Ledger()
    sequential: list[float] = []
    seq_deltas: list[float] = []
    old_groups: dict[str, tuple[int, dict[str, float], dict[str, float]]] = {}
    for g in range(rng.randint(0, 3)):
        overlap = rng.randint(1, 4)
        ledger.declare_parallel_group(f"g{g}", overlap, "test")
        old_groups[f"g{g}"] = (overlap, {}, {})
    for i in range(rng.randint(1, 60)):
        if rng.random() < 0.5:
            charge = Charge("s", "exponential_threshold", {"epsilon": rng.uniform(0.1, 2)},
                            1.0, "count")
        else:
            charge = Charge("s", "limited_domain", {"epsilon": rng.uniform(0.1, 2),
                                                    "delta": rng.uniform(1e-7, 1e-5)},
                            1.0, "count")
        if old_groups and rng.random() < 0.7:
            name = rng.choice(sorted(old_groups))
            part = f"p{rng.randint(0, 6)}"
            charge = Charge(charge.stage, charge.mechanism, charge.params, 1.0, "count", name,
                            part)
            _, rhos, deltas = old_groups[name]
            rhos[part] = rhos.get(part, 0.0) + legacy_costs.mechanism_rho(charge.mechanism,
                                                                          charge.params)
            deltas[part] = deltas.get(part, 0.0) + legacy_costs.mechanism_delta(
                charge.mechanism, charge.params)
        else:
            sequential.append(legacy_costs.mechanism_rho(charge.mechanism, charge.params))
            seq_deltas.append(legacy_costs.mechanism_delta(charge.mechanism, charge.params))
        ledger.release(f"k{i}", charge, lambda rng: 0)
    old_rho = sum(sequential) + sum(legacy_costs.ledger_top_sum(list(r.values()), L)
                                    for L, r, _ in old_groups.values())
    assert ledger.total_rho() == pytest.approx(old_rho, rel=1e-14, abs=1e-300)
    old_delta = sum(seq_deltas) + sum(legacy_costs.ledger_top_sum(list(d.values()), L)
                                      for L, _, d in old_groups.values())
    assert ledger.total_delta() == pytest.approx(old_delta, rel=1e-14, abs=1e-300)


def test_sequential_and_repeated_nodes() -> None:
    token = TokenSoftmax(clip=0.5, temperature=0.5)
    assert compose(Repeated(token, 70)).rho == 70 * token.cost.rho
    ptr = PtrGaussian(sigma=2.0, delta=1e-5)
    tree = Sequential((Repeated(token, 3), ptr, ParallelGroup(2, (ptr, ptr, token))))
    cost = compose(tree)
    assert cost.rho == math.fsum([3 * token.cost.rho, ptr.cost.rho,
                                  *sorted([ptr.cost.rho, ptr.cost.rho, token.cost.rho])[-2:]])
    assert cost.delta == pytest.approx(3e-5)
    with pytest.raises(ValueError):
        Repeated(token, 0)
    with pytest.raises(ValueError):
        ParallelGroup(0, (token,))
    with pytest.raises(ValueError, match="identical partitions"):
        records(ParallelGroup(1, (token, ptr)))


def test_spend_of_is_compose_of_its_items() -> None:
    items = [{"mechanism": "exponential", "params": {"epsilon": 0.5}, "count": 1},
             {"mechanism": "ptr_gaussian", "params": {"sigma": 3.0, "delta": 5e-5}, "count": 2}]
    rho, delta = spend_of(items)
    assert rho == pytest.approx(0.5**2 / 8 + 2 / (2 * 9.0), rel=1e-15)
    assert delta == pytest.approx(1e-4, rel=1e-15)
    old = (sum(i["count"] * legacy_costs.mechanism_rho(i["mechanism"], i["params"])
               for i in items))
    assert rho == pytest.approx(old, rel=1e-15)


# ---------------------------------------------------------------------- the plan's events
def _configs() -> list[BuildConfig]:
    configs = []
    for eps, L, T, clip in itertools.product([3.0, 10.0], [1, 2, 5], [3, 32, 70], [0.5, 0.3]):
        configs.append(BuildConfig(generate="tokens", epsilon=eps, L=L, T=T, clip=clip))
        configs.append(BuildConfig(generate="tokens", epsilon=eps, L=L, T=T, clip=clip,
                                   no_retrieval=True))
        # the legacy list knows the lexicon pack's facts plan (the n-gram plan came later)
        configs.append(BuildConfig(generate="facts", facts_items="terms", epsilon=eps, L=L,
                                   T=T, clip=clip))
        configs.append(BuildConfig(generate="facts", facts_items="terms", epsilon=eps, L=L,
                                   T=T, clip=clip, writer="tokens"))
    return configs


@pytest.mark.parametrize("config", _configs(), ids=lambda c: f"{c.generate}-{c.epsilon}-"
                         f"L{c.L}-T{c.T}-{c.clip}-{c.no_retrieval}-{c.writer}")
def test_plan_events_write_the_old_corpus_ledger_dicts(config: BuildConfig) -> None:
    """The corpus ledger's build charge (resumed by key: it must be the same JSON) is written
    from plan.events(); it is exactly the old hand-built list, and composes to the plan's rho."""
    plan = make_plan(config)
    new, old = corpus_ledger_mechanisms(config, plan), legacy_costs.corpus_ledger_mechanisms(
        config, plan)
    assert json.dumps(new, sort_keys=True) == json.dumps(old, sort_keys=True)
    events = plan.events(config.clip)
    assert compose(events).rho == pytest.approx(plan.rho_total, rel=1e-12)
    assert spend_of(new)[0] == pytest.approx(compose(events).rho, rel=1e-15)


# ---------------------------------------------------------------------- old ledgers
OLD_LEDGER = Path(__file__).parent / "data" / "ledger-a622f4a"


def test_a_ledger_written_before_the_refactor_totals_and_resumes_the_same(
        tmp_path: Path) -> None:
    """A build ledger written by a622f4a (make_ledger.py beside it: a histogram, a phrase
    release, 8 clusters in a group of overlap 3 with Gaussian sums, thresholds, tokens, token
    reserves and LimitedDomain): every row's recorded rho is today's to the last bit; the totals
    agree to 1e-15 (the old ledger summed left to right, compose() uses math.fsum: they may
    differ in the last bit); stored values come back on resume without a charge, and other
    parameters are refused."""
    path = tmp_path / "ledger.sqlite"
    shutil.copyfile(OLD_LEDGER / "ledger.sqlite", path)
    path.chmod(0o600)
    old_rho, old_delta = json.loads((OLD_LEDGER / "totals.json").read_text())
    with Ledger(path) as ledger:
        releases = ledger.releases()
        assert len(releases) > 40
        for release in releases:
            assert release.rho == release.event.cost.rho  # the recorded column, bit for bit
        assert ledger.total_rho() == pytest.approx(old_rho, rel=1e-15, abs=0)
        assert ledger.total_delta() == pytest.approx(old_delta, rel=1e-15, abs=0)
        mean = Charge("c-noisy-sum", "gaussian", {"sigma": 7.453559924999299,
                                                  "l2_sensitivity": 1.0, "grid_bits": 24},
                      1.0, "l2", "clusters", "cluster/00003")
        before = ledger.total_rho()
        assert ledger.release("cluster/00003/mean", mean, lambda rng: "redrawn") == [0]
        assert ledger.total_rho() == before
        other = Charge("c-noisy-sum", "gaussian", {"sigma": 7.0, "l2_sensitivity": 1.0,
                                                   "grid_bits": 24},
                       1.0, "l2", "clusters", "cluster/00003")
        with pytest.raises(ReleaseMismatchError):
            ledger.release("cluster/00003/mean", other, lambda rng: 0)
        groups = [n for n in ledger.events().children if isinstance(n, ParallelGroup)]
        assert [(g.name, g.max_overlap, len(g.partitions)) for g in groups] == [
            ("clusters", 3, 8)]
