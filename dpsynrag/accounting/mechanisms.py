"""Every mechanism the package charges, as a frozen, typed value with its sensitivity and cost.

One class per mechanism, in the manner of dp-accounting's ``DpEvent``: the fields are the
public parameters a release is calibrated with, ``cost`` is its privacy cost derived from
those fields alone (never from a caller), and each docstring states the formula next to the
code. A ledger row or a certificate entry is the record ``(name, params)`` of one of these
values: ``from_record`` reads it, ``Mechanism.params`` writes it, with the keys the package has
always written (docs/mechanisms.md, section 0, names the records).

Costs are zCDP first (docs/mechanisms.md, section 0):

* ``rho``: the zCDP cost;
* ``delta``: the approximate delta of a mechanism that is only delta-approximately rho-zCDP
  (Bun & Steinke 2016, Def. 8.1), 0 for a pure or zCDP mechanism;
* ``dp_epsilon``, ``dp_delta``: a cost charged in (epsilon, delta)-DP currency instead (Koga
  et al.'s per-query composition), composed by basic composition after conversion.

Parameters a record carries that the cost does not read (a histogram's width, a similarity
range, a domain fingerprint, the fixed-point grid) are kept in ``info``, so that a record
reads back to exactly the record it was.

The composition of mechanisms (sequential, repeated, overlapping parallel) is in
``composition``; the map to dp-accounting's events in ``dp_accounting_check``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from functools import cached_property
from typing import Any, ClassVar, Literal, Self, TypeAlias

from dpsynrag.accounting.calibration import koga_max_steps

Norm: TypeAlias = Literal["l2", "linf", "l1", "count"]
#: A JSON value made hashable (lists as tuples): what ``info`` holds.
FrozenJson: TypeAlias = str | int | float | bool | tuple["FrozenJson", ...] | None
Info: TypeAlias = tuple[tuple[str, FrozenJson], ...]


@dataclass(frozen=True)
class Cost:
    """What a mechanism (or a composition of them) costs.

    ``rho``-zCDP, ``delta``-approximately (Bun & Steinke 2016, Def. 8.1), plus
    (``dp_epsilon``, ``dp_delta``) charged in (epsilon, delta)-DP currency.
    """

    rho: float
    delta: float = 0.0
    dp_epsilon: float = 0.0
    dp_delta: float = 0.0


# ---------------------------------------------------------------------- the formulas
def gaussian_rho(l2_sensitivity: float, sigma: float) -> float:
    """Gaussian or discrete Gaussian noise: rho = Delta_2^2 / (2 sigma^2)."""
    _positive(sigma, "sigma")
    _non_negative(l2_sensitivity, "l2_sensitivity")
    return l2_sensitivity**2 / (2.0 * sigma**2)


def exponential_rho(epsilon: float) -> float:
    """Exponential mechanism (bounded range): rho = epsilon^2 / 8 (Cesar & Rogers 2021)."""
    _positive(epsilon, "epsilon")
    return epsilon**2 / 8.0


def token_rho(clip: float, temperature: float) -> float:
    """One softmax draw over summed rows in [-c, c]: epsilon = 2c/tau, rho = (c/tau)^2 / 2."""
    _positive(clip, "clip")
    _positive(temperature, "temperature")
    return (clip / temperature) ** 2 / 2.0


def pure_dp_rho(epsilon: float) -> float:
    """Pure epsilon-DP implies rho = epsilon^2 / 2 zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    _positive(epsilon, "epsilon")
    return epsilon**2 / 2.0


def approximate_delta(delta: float) -> float:
    """The approximate delta of an (epsilon, delta)-DP mechanism: delta itself, in (0, 1)."""
    if not (isinstance(delta, int | float) and not isinstance(delta, bool)
            and math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")
    return float(delta)


def _positive(value: object, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def _non_negative(value: object, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


# ---------------------------------------------------------------------- the base class
def _freeze(value: Any) -> FrozenJson:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError(f"a mechanism parameter must be a JSON scalar or list, got "
                     f"{type(value).__name__}")


def _thaw(value: FrozenJson) -> Any:
    return [_thaw(v) for v in value] if isinstance(value, tuple) else value


@dataclass(frozen=True)
class Mechanism(ABC):
    """A mechanism run once with public parameters. Subclasses are frozen dataclasses whose
    fields (before ``info``) are the parameters their cost reads; a field whose default is
    None is left out of the record when None.

    Constructing one validates it: an invalid parameter raises ``ValueError``.
    """

    name: ClassVar[str]
    norm: ClassVar[Norm]

    def __post_init__(self) -> None:
        _ = self.cost  # validates every parameter once

    @abstractmethod
    def _cost(self) -> Cost:
        """The cost, from the fields (subclasses state the formula)."""

    @abstractmethod
    def sensitivity(self) -> float:
        """The sensitivity (in ``norm``) the release is calibrated to."""

    @cached_property
    def cost(self) -> Cost:
        """The mechanism's privacy cost (computed once; the fields are frozen)."""
        return self._cost()

    @classmethod
    def _param_fields(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "info"]

    def params(self) -> dict[str, Any]:
        """The record's parameters: the cost fields (None ones left out) and ``info``."""
        record: dict[str, Any] = {}
        for name in self._param_fields():
            value = getattr(self, name)
            if value is not None:
                record[name] = value
        for key, value in getattr(self, "info", ()):
            record[key] = _thaw(value)
        return record

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """Read a record's parameters (``ValueError`` when one the cost needs is missing)."""
        if not isinstance(params, Mapping):
            raise ValueError(f"mechanism {cls.name!r}: 'params' must be a mapping")
        kwargs: dict[str, Any] = {}
        for field in fields(cls):
            if field.name == "info":
                continue
            if field.name in params:
                kwargs[field.name] = params[field.name]
            elif field.default is MISSING:
                raise ValueError(f"mechanism {cls.name!r} needs parameter '{field.name}'")
        kwargs["info"] = tuple(sorted((str(k), _freeze(v)) for k, v in params.items()
                                      if k not in kwargs))
        return cls(**kwargs)


@dataclass(frozen=True)
class CountMechanism(Mechanism):
    """A mechanism on counts of sensitivity 1 (one unit moves each count by at most 1)."""

    norm: ClassVar[Norm] = "count"

    def sensitivity(self) -> float:
        return 1.0


@dataclass(frozen=True)
class PureCountMechanism(CountMechanism):
    """A count mechanism whose only cost parameter is its epsilon."""

    epsilon: float
    info: Info = ()


@dataclass(frozen=True)
class GaussianNoise(Mechanism):
    """Gaussian noise of scale ``sigma`` on a query of l2 sensitivity ``l2_sensitivity``:
    rho = Delta_2^2 / (2 sigma^2), delta 0."""

    norm: ClassVar[Norm] = "l2"
    sigma: float
    l2_sensitivity: float
    info: Info = ()

    def _cost(self) -> Cost:
        return Cost(gaussian_rho(self.l2_sensitivity, self.sigma))

    def sensitivity(self) -> float:
        return float(self.l2_sensitivity)


# ---------------------------------------------------------------------- the mechanisms
@dataclass(frozen=True)
class DiscreteGaussian(GaussianNoise):
    """Exact discrete Gaussian noise N_Z(0, sigma^2) on every entry of an integer vector of
    l2 sensitivity Delta_2 (keyword histogram, fact histograms; docs/mechanisms.md, sections
    2 and 7): rho = Delta_2^2 / (2 sigma^2) (Canonne, Kamath & Steinke 2020), delta 0.

    dp-accounting has no discrete Gaussian event; the cross-check uses its continuous
    ``GaussianDpEvent`` with the same sigma / Delta_2, whose rho is the same formula.
    """

    name: ClassVar[str] = "discrete_gaussian"


@dataclass(frozen=True)
class Gaussian(GaussianNoise):
    """Gaussian noise sum of unit embeddings, l2 sensitivity Delta_2 (1), noise sigma_mu
    (docs/mechanisms.md, section 3): rho = Delta_2^2 / (2 sigma^2), delta 0. Drawn as the
    equivalent exact discrete Gaussian on the fixed-point grid recorded in ``info``
    (``grid_bits``). Cross-checked with dp-accounting's ``GaussianDpEvent(sigma / Delta_2)``.
    """

    name: ClassVar[str] = "gaussian"


@dataclass(frozen=True)
class ExponentialThreshold(PureCountMechanism):
    """Exponential-mechanism similarity threshold, utility of count sensitivity 1
    (docs/mechanisms.md, section 4): epsilon-DP and epsilon-bounded-range, so
    rho = epsilon^2 / 8 (Cesar & Rogers 2021), delta 0.

    dp-accounting has no bounded-range (exponential mechanism) event: tested against the
    formula.
    """

    name: ClassVar[str] = "exponential_threshold"

    def _cost(self) -> Cost:
        return Cost(exponential_rho(self.epsilon))


@dataclass(frozen=True)
class Exponential(PureCountMechanism):
    """Exponential mechanism by Gumbel-max at scale 2 Delta_u / epsilon (DP-KSA's FindBestK;
    docs/mechanisms.md, sections 1 and 12): rho = epsilon^2 / 8 (bounded range), delta 0.

    dp-accounting has no bounded-range event: tested against the formula.
    """

    name: ClassVar[str] = "exponential"

    def _cost(self) -> Cost:
        return Cost(exponential_rho(self.epsilon))


@dataclass(frozen=True)
class TokenSoftmax(Mechanism):
    """``tokens`` draws from exactly softmax(z / tau) where each coordinate of z moves by at most
    c (the clip) between neighbours (docs/mechanisms.md, section 5): each draw is the
    exponential mechanism with epsilon = 2c / tau, so rho = tokens * (c / tau)^2 / 2, delta 0.
    ``tokens`` left out of the record means 1.

    dp-accounting has no bounded-range event: tested against the formula.
    """

    name: ClassVar[str] = "token_softmax"
    norm: ClassVar[Norm] = "linf"
    clip: float
    temperature: float
    tokens: int | None = None
    info: Info = ()

    def _cost(self) -> Cost:
        per_draw = token_rho(self.clip, self.temperature)
        if self.tokens is None:
            return Cost(1 * per_draw)
        return Cost(_positive_int(self.tokens, "tokens") * per_draw)

    def sensitivity(self) -> float:
        return float(self.clip)


@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace noise of scale b on a query of l1 sensitivity Delta_1: epsilon-DP with
    epsilon = Delta_1 / b (Dwork et al. 2006), so rho = epsilon^2 / 2 (Bun & Steinke 2016,
    Prop. 1.4), delta 0. No stage releases a Laplace value, so the ledger does not accept it as a
    record (it is not in ``MECHANISMS``; the sparse vector's Laplace draws, compared and never
    released, are charged as ``SparseVectorEpoch``); it exists for composition trees and the
    cross-check. Cross-checked with dp-accounting's
    ``LaplaceDpEvent(b / Delta_1)``, whose exact Renyi curve lies below alpha * rho.
    """

    name: ClassVar[str] = "laplace"
    norm: ClassVar[Norm] = "l1"
    scale: float
    l1_sensitivity: float
    info: Info = ()

    def _cost(self) -> Cost:
        _positive(self.scale, "scale")
        _positive(self.l1_sensitivity, "l1_sensitivity")
        return Cost(pure_dp_rho(self.l1_sensitivity / self.scale))

    def sensitivity(self) -> float:
        return float(self.l1_sensitivity)


@dataclass(frozen=True)
class LimitedDomain(CountMechanism):
    """LimitedDomain (Durfee & Rogers 2019) on a vote histogram of count sensitivity 1,
    (epsilon, delta)-DP (docs/mechanisms.md, section 13): delta-approximately
    rho = epsilon^2 / 2 zCDP (Bun & Steinke 2016, Prop. 1.4 and Def. 8.1).

    dp-accounting has no event for it: tested against the formula.
    """

    name: ClassVar[str] = "limited_domain"
    epsilon: float
    delta: float
    info: Info = ()

    def _cost(self) -> Cost:
        rho = pure_dp_rho(self.epsilon)
        return Cost(rho, approximate_delta(self.delta))


@dataclass(frozen=True)
class SparseVectorEpoch(PureCountMechanism):
    """One sparse-vector epoch (AboveThreshold up to one crossing) on queries of sensitivity 1,
    epsilon-DP (Dwork & Roth 2014, Thm 3.23; docs/mechanisms.md, section 13):
    rho = epsilon^2 / 2 (Bun & Steinke 2016, Prop. 1.4), delta 0.

    dp-accounting has no sparse-vector event: tested against the formula.
    """

    name: ClassVar[str] = "sparse_vector_epoch"

    def _cost(self) -> Cost:
        return Cost(pure_dp_rho(self.epsilon))


@dataclass(frozen=True)
class PtrGaussian(Mechanism):
    """DP-KSA's propose-test-release: a statistic of l2 sensitivity 2 plus N(0, (2 sigma)^2),
    passing an unstable input with probability delta (docs/mechanisms.md, section 12):
    rho = 2^2 / (2 (2 sigma)^2) = 1 / (2 sigma^2), delta-approximate.

    Cross-checked with dp-accounting's ``GaussianDpEvent((2 sigma) / 2)`` (its rho; the delta
    of the test has no event there).
    """

    name: ClassVar[str] = "ptr_gaussian"
    norm: ClassVar[Norm] = "l2"
    sigma: float
    delta: float
    info: Info = ()

    def _cost(self) -> Cost:
        rho = gaussian_rho(2.0, 2.0 * self.sigma)
        return Cost(rho, approximate_delta(self.delta))

    def sensitivity(self) -> float:
        return 2.0


@dataclass(frozen=True)
class PartitionSelection(Mechanism):
    """DP partition selection of open-vocabulary phrases (docs/mechanisms.md, section 6):
    discrete Gaussian counts of l2 sensitivity sqrt(max_items), kept at or above an integer
    threshold >= 2. rho = max_items / (2 sigma^2), delta-approximate with
    delta = max_items * P(Z >= threshold - 1), re-derived (rounded up) from sigma, max_items and
    threshold; a recorded ``delta`` smaller than that is refused.

    With ``weight_scale`` W (weighted contributions, docs/mechanisms.md section 6.3): a unit
    with m <= max_items phrases adds the integer floor(W / sqrt(m)) to each, so its
    contribution has l2 norm <= W: rho = W^2 / (2 sigma^2) and delta = max_m m * P(Z >=
    threshold - floor(W / sqrt(m))) (``partition_threshold.weighted_selection_delta``).

    Cross-checked with dp-accounting's ``GaussianDpEvent(sigma / sqrt(max_items))`` for rho;
    dp-accounting has no event for the threshold's delta (tested against the tail sum).
    """

    name: ClassVar[str] = "partition_selection"
    norm: ClassVar[Norm] = "l2"
    sigma: float
    max_items: int
    threshold: int
    delta: float  # the recorded bound; the cost's delta is re-derived
    weight_scale: int | None = None  # None: every phrase of a unit counts 1
    info: Info = ()

    def _cost(self) -> Cost:
        # mpmath (60-digit tails): loaded when a partition selection is checked, not before
        from dpsynrag.accounting.partition_threshold import (
            partition_selection_delta,
            weighted_selection_delta,
        )

        _positive(self.sigma, "sigma")
        max_items = _positive_int(self.max_items, "max_items")
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2:
            raise ValueError(f"threshold must be an integer >= 2, got {threshold!r}")
        recorded = approximate_delta(self.delta)
        if self.weight_scale is None:
            rho = max_items / (2.0 * float(self.sigma) ** 2)
            derived = partition_selection_delta(float(self.sigma), max_items, threshold)
            rule = "max_items * P(Z >= threshold - 1)"
        else:
            scale = _positive_int(self.weight_scale, "weight_scale")
            if scale * scale < max_items:
                raise ValueError("weight_scale^2 must be at least max_items (every weight >= 1)")
            rho = scale * scale / (2.0 * float(self.sigma) ** 2)
            derived = weighted_selection_delta(float(self.sigma), max_items, scale, threshold)
            rule = "max_m m * P(Z >= threshold - floor(weight_scale / sqrt(m)))"
        if recorded < derived:
            raise ValueError(f"partition_selection: the recorded delta {recorded!r} is smaller "
                             f"than {rule} = {derived!r}")
        return Cost(rho, derived)

    def sensitivity(self) -> float:
        if self.weight_scale is not None:
            return float(self.weight_scale)
        return math.sqrt(self.max_items)


@dataclass(frozen=True)
class DpComposition(CountMechanism):
    """Koga et al.'s per-query composition: ``steps`` (token_epsilon, token_delta)-DP private
    tokens that fit in the charged (epsilon, delta) by the better of sequential and advanced
    composition (docs/mechanisms.md, sections 8.3 and 13). Charged in (epsilon, delta)
    currency: rho = 0, dp_epsilon = epsilon, dp_delta = delta.

    dp-accounting has no event for it (its analysis is not zCDP): tested against Koga's rule.
    """

    name: ClassVar[str] = "dp_composition"
    epsilon: float
    delta: float
    token_epsilon: float
    token_delta: float
    steps: int
    info: Info = ()

    def _cost(self) -> Cost:
        epsilon, delta = float(self.epsilon), float(self.delta)
        token_epsilon, token_delta = float(self.token_epsilon), float(self.token_delta)
        _positive(epsilon, "epsilon")
        _positive(token_epsilon, "token_epsilon")
        approximate_delta(delta)
        approximate_delta(token_delta)
        steps = _positive_int(self.steps, "steps")
        if koga_max_steps(token_epsilon, token_delta, epsilon, delta) < steps:
            raise ValueError(f"{steps} steps of ({token_epsilon:g}, {token_delta:g})-DP do not "
                             f"fit in ({epsilon:g}, {delta:g})-DP")
        return Cost(0.0, 0.0, epsilon, delta)


#: The mechanisms a ledger row, a certificate entry or a corpus-ledger charge may name.
MECHANISMS: Mapping[str, type[Mechanism]] = {
    cls.name: cls for cls in (
        DiscreteGaussian, Gaussian, ExponentialThreshold, TokenSoftmax, Exponential,
        LimitedDomain, SparseVectorEpoch, PtrGaussian, DpComposition, PartitionSelection)
}


def from_record(mechanism: object, params: object) -> Mechanism:
    """The mechanism of a record ``(name, params)``; ``ValueError`` if unknown or invalid."""
    cls = MECHANISMS.get(mechanism) if isinstance(mechanism, str) else None
    if cls is None:
        raise ValueError(f"unknown mechanism {mechanism!r}; known: {sorted(MECHANISMS)}")
    if not isinstance(params, Mapping):
        raise ValueError(f"mechanism {mechanism!r}: 'params' must be a mapping")
    try:
        return cls.from_params(params)
    except TypeError as error:  # a parameter of the wrong type for the formula
        raise ValueError(f"mechanism {mechanism!r}: {error}") from None
