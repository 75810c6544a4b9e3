"""The zCDP privacy ledger: every release is charged here before its value is used.

A release is identified by a stable, public ``key`` (for example ``"histogram"`` or
``"cluster/00017/threshold"``). ``Ledger.release`` charges the mechanism's cost -- recomputed
from its parameters by its typed ``mechanisms.Mechanism``, never taken from the caller -- then
draws the value with the ledger's own random source (the draw callable receives it), stores it, and
commits, all before returning it. The ledger owns the only random source of a build, so noise
cannot be drawn around it; a seeded source marks the ledger ``seeded`` (not for release).
Each Gaussian sampler declares its sigma and its query's sensitivity to that source before
drawing, and the ledger refuses a release whose declared sigma / sensitivity is not the
charged one (``check_drawn_noise``; docs/mechanisms.md section 8.5), and the first time it
sees a sigma it probes the sampler at that sigma (``check_sampler``: a public draw on zeros
whose mean square must match the variance), so a sampler that declares one sigma and draws at
another is refused. A partition selection goes through ``Ledger.release_selection``: its draw
returns every candidate's noisy count and the ledger keeps those at the threshold the charge
records, so no draw chooses its own threshold (section 8.6).
Asking again for a key that is already released returns the stored value and charges
nothing: a resumed build spends exactly what an uninterrupted one spends, and released noise
is never redrawn. Asking with different parameters is refused.

Composition (DP-SynRAG Theorem 1 with the corrections of docs/mechanisms.md, sections 8, 10):
``Ledger.events`` describes everything charged as a tree of ``composition`` nodes, and
``composition.compose`` costs it:
* releases outside any group compose sequentially (their rho add up);
* a *parallel group* (the clusters) declares ``max_overlap`` L: each record touches at most L
  of its partitions, so the group costs the sum of its L most expensive partitions
  (<= L x the largest), where a partition's cost is the sum of its releases.

Mechanisms that are only approximately zCDP (partition selection, LimitedDomain, PTR; Bun &
Steinke 2016, Def. 8.1) also carry an approximate delta, re-derived from their parameters
(``mechanisms``) and composed like rho (``total_delta``): sequential releases add, a
parallel group costs the sum of its L largest per-partition deltas. The rho budget checks rho
only; the certificate converts rho at delta - total_delta.

The ledger is durable (SQLite, committed per release or per batch) and can be in memory for
tests and the budget planner.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpsynrag.accounting import composition
from dpsynrag.accounting.composition import Repeated, Sequential, compose
from dpsynrag.accounting.conversions import Conversion, epsilon_for
from dpsynrag.accounting.mechanisms import Mechanism, from_record
from dpsynrag.accounting.noise import (
    PROBE_DRAWS,
    PROBE_MIN_SIGMA,
    PROBE_REFUSAL_BOUND,
    PROBE_TOLERANCE,
    probe_sampler,
)
from dpsynrag.accounting.rng import NoiseDeclaration, RandomSource, secure_rng
from dpsynrag.accounting.sparse_probe import REFUSAL_BOUND as KEPT_REFUSAL_BOUND
from dpsynrag.accounting.sparse_probe import probe_kept
from dpsynrag.accounting.sqlite_store import (
    connect,
    create_private_file,
    utc_now,
    write_transaction,
)

SCHEMA_VERSION = 1
_RHO_SLACK = 1e-12  # float round-off allowed when comparing a total against a budget


class LedgerError(RuntimeError):
    """Base class for refusals by the ledger."""


class BudgetExceededError(LedgerError):
    """A charge would take the total past the ledger's budget; nothing was drawn."""


class ReleaseMismatchError(LedgerError):
    """A key was released before with other parameters; a resumed build must keep its plan."""


class NoiseMismatchError(LedgerError):
    """A release's draw used other Gaussian noise than its charge pays for (a bug): nothing of
    it is stored or returned, and its charge is rolled back with the transaction."""


def check_drawn_noise(key: str, charge: Charge,
                      declared: Sequence[NoiseDeclaration]) -> None:
    """Refuse a draw whose Gaussian noise is not the noise ``charge`` records.

    The noise samplers declare their scale to the ledger's random source before drawing
    (``RandomSource.declare_noise``), with the query's l2 sensitivity as the drawing code
    computes it beside the draw (sqrt(K), sqrt(K_e), the grid bound B), apart from the
    charge function. A charge that records a ``sigma`` must have drawn Gaussian noise, and
    every Gaussian draw must have sigma / sensitivity equal to the charge's sigma /
    sensitivity (the charge's sensitivity where a draw declares none): so a release cannot be
    charged for a smaller rho than its noise gives, whether the charge understates the
    sensitivity or overstates sigma. A charge without ``sigma`` must draw no Gaussian noise.
    Raises ``NoiseMismatchError``. What this cannot see: a draw that declares the same wrong
    sensitivity as its charge (the sensitivity proofs and their tests cover that).
    """
    gaussian = [d for d in declared if d.kind == "gaussian"]
    sigma = charge.params.get("sigma")
    if sigma is None:
        if gaussian:
            raise NoiseMismatchError(f"release {key!r} drew Gaussian noise, but its charge "
                                     f"({charge.mechanism}) records no sigma")
        return
    if not gaussian:
        raise NoiseMismatchError(f"release {key!r} is charged as {charge.mechanism} with sigma "
                                 f"{float(sigma):g} but drew no Gaussian noise")
    charged = float(sigma) / float(charge.sensitivity)
    for noise in gaussian:
        unit = float(charge.sensitivity) if noise.sensitivity is None else noise.sensitivity
        if not math.isclose(noise.scale / unit, charged, rel_tol=1e-12):
            raise NoiseMismatchError(
                f"release {key!r} drew Gaussian noise with sigma/sensitivity "
                f"{noise.scale / unit:g}, but is charged for {charged:g}")


class SamplerCheckError(NoiseMismatchError):
    """The Gaussian sampler does not draw at the sigma it declares (a bug): a public probe of
    it at that sigma failed (``check_sampler``). Nothing of the release is stored."""


class SelectionThresholdError(LedgerError):
    """A partition selection's draw chose what passes its threshold, or released a count
    below the threshold its charge records (a bug): nothing of it is stored or returned."""


#: The mechanisms that release only what passes a threshold recorded in their charge: the
#: ledger applies it (``Ledger.release_selection``), never the draw.
SELECTION_MECHANISMS = frozenset({"partition_selection"})


def check_sampler(key: str, declared: Sequence[NoiseDeclaration],
                  probed: set[float | tuple[float, float]]) -> None:
    """Refuse a draw whose Gaussian sampler does not draw at the sigma it declares.

    ``check_drawn_noise`` compares the declared sigma with the charge; this compares what
    the sampler returns with the declared sigma. For each declared sigma >=
    ``noise.PROBE_MIN_SIGMA`` not in ``probed`` (each ledger probes a sigma once), a public
    probe of ``noise.PROBE_DRAWS`` draws of the discrete Gaussian sampler at that sigma
    (``noise.probe_sampler``: zeros, a fresh CSPRNG source, draws discarded) must have a mean
    square within (1 +- ``noise.PROBE_TOLERANCE``) of the exact variance; an exact sampler is
    refused with probability below ``noise.PROBE_REFUSAL_BOUND`` = 1e-9 per sigma
    (``noise.probe_refusal_bound``: below 1e-16 for every sigma >= 0.75), a sampler at
    sigma / 2 passes with probability below 1e-300. A draw by the sparse kept-entries sampler
    (declared ``"gaussian_kept"`` with its floor t) is probed too, once per (sigma, t):
    ``sparse_probe.probe_kept`` (how many zero cells it keeps, where, and their tail law;
    an exact sampler is refused with probability below 3e-12). Raises ``SamplerCheckError``.
    What this cannot see: a sampler that is wrong only on some inputs (a size, a seed, a
    sigma below the minimum), or noise added outside the sampler.
    """
    for noise in declared:
        scale = float(noise.scale)
        if noise.kind == "gaussian_kept" and noise.floor is not None:
            _check_kept_sampler(key, scale, math.ceil(noise.floor), probed)
            continue
        if noise.kind != "gaussian" or scale < PROBE_MIN_SIGMA or scale in probed:
            continue
        ratio = probe_sampler(scale)
        if abs(ratio - 1.0) > PROBE_TOLERANCE:
            raise SamplerCheckError(
                f"release {key!r}: the discrete Gaussian sampler does not draw at the sigma "
                f"{scale:g} it declares: a public probe of {PROBE_DRAWS} draws at that sigma "
                f"has a mean square of {ratio:.3f} x its variance, outside 1 +- "
                f"{PROBE_TOLERANCE:g} (an exact sampler fails this with probability below "
                f"{PROBE_REFUSAL_BOUND:g})")
        probed.add(scale)


def _check_kept_sampler(key: str, sigma: float, t: int,
                        probed: set[float | tuple[float, float]]) -> None:
    """The sparse sampler's probe at (sigma, t), once per ledger (``check_sampler``)."""
    if sigma < PROBE_MIN_SIGMA or (sigma, float(t)) in probed:
        return
    probe = probe_kept(sigma, t)
    if probe is not None and not probe.passes:
        raise SamplerCheckError(
            f"release {key!r}: the sparse discrete Gaussian sampler does not draw the kept "
            f"entries of N_Z(0, {sigma:g}^2) at or above {t}: a public probe kept "
            f"{probe.kept} of {probe.width} zero cells (expected {probe.expected_kept:.0f}), "
            f"their mean position {probe.position_mean:.3f} (expected 0.5), a share "
            f"{probe.tail_share:.3f} at or above {t + probe.tail_offset} (expected "
            f"{probe.expected_tail_share:.3f}) (an exact sampler fails this with probability "
            f"below {KEPT_REFUSAL_BOUND:g})")
    probed.add((sigma, float(t)))


def _selection_threshold(charge: Charge) -> int:
    """The threshold a selection charge records, read from its typed mechanism."""
    threshold = getattr(charge.event, "threshold", None)
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise SelectionThresholdError(f"{charge.mechanism} records no integer threshold")
    return threshold


def apply_threshold(key: str, charge: Charge, candidates: Sequence[str],
                    noisy: Any) -> dict[str, int]:
    """{candidate: noisy count} of the candidates whose noisy count reaches the threshold
    ``charge`` records: the rule of ``Ledger.release_selection``, applied by the ledger.

    ``noisy`` must hold one integer per candidate, in the order of ``candidates`` (what the
    draw returns: every candidate's noisy count, none left out); else
    ``SelectionThresholdError``. The message names no candidate and no count."""
    values = np.asarray(noisy)
    if values.shape != (len(candidates),) or (values.size and not np.issubdtype(
            values.dtype, np.integer)):
        raise SelectionThresholdError(
            f"release {key!r}: a selection draw must return one integer noisy count per "
            f"candidate ({len(candidates)}), not its own choice of them")
    threshold = _selection_threshold(charge)
    return {str(c): int(v) for c, v in zip(candidates, values.tolist(), strict=True)
            if v >= threshold}


def _check_selected(key: str, charge: Charge, value: Any) -> None:
    """A selection released through ``release``/``release_many``/``draw_many`` (not
    ``release_selection``): refused if it releases anything (uniform or weighted): its draw
    would have chosen what passes."""
    if not isinstance(value, Mapping):
        raise SelectionThresholdError(f"release {key!r}: a selection releases a mapping of "
                                      "counts")
    if not value:
        return  # nothing released: nothing below any threshold
    raise SelectionThresholdError(
        f"release {key!r}: a partition selection that releases anything goes through "
        "Ledger.release_selection, which applies the threshold its charge records; its "
        "draw chose what passes")


@dataclass(frozen=True)
class Charge:
    """What one release costs and why: all public, all re-derivable.

    ``mechanism`` and ``params`` are the record the ledger stores (``Charge.of`` writes them
    from a typed ``mechanisms.Mechanism``); ``event`` is that typed mechanism, read back from
    the record, and the cost is its cost.
    """

    stage: str
    mechanism: str
    params: Mapping[str, Any]
    sensitivity: float
    sensitivity_norm: str  # "l2", "linf", "l1" or "count"
    group: str | None = None
    partition: str | None = None

    def __post_init__(self) -> None:
        event = from_record(self.mechanism, self.params)
        norm, sensitivity = event.norm, event.sensitivity()
        if norm != self.sensitivity_norm or not math.isclose(sensitivity, self.sensitivity,
                                                             rel_tol=1e-12):
            raise ValueError(
                f"{self.mechanism} with these parameters is calibrated to {norm} sensitivity "
                f"{sensitivity:g}, not {self.sensitivity_norm} {self.sensitivity:g}")
        object.__setattr__(self, "_event", event)

    @classmethod
    def of(cls, stage: str, event: Mechanism, *, group: str | None = None,
           partition: str | None = None) -> Charge:
        """The charge of ``event`` (its record, norm and sensitivity written from it)."""
        return cls(stage=stage, mechanism=event.name, params=event.params(),
                   sensitivity=event.sensitivity(), sensitivity_norm=event.norm, group=group,
                   partition=partition)

    @property
    def event(self) -> Mechanism:
        """The typed mechanism this charge records."""
        event: Mechanism = self.__dict__["_event"]
        return event

    @property
    def rho(self) -> float:
        return self.event.cost.rho

    @property
    def delta(self) -> float:
        """The approximate delta of this release (0.0 for a pure or zCDP mechanism)."""
        return self.event.cost.delta

    def canonical_params(self) -> str:
        return json.dumps(dict(self.params), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Release:
    """One row of the ledger as recorded."""

    key: str
    stage: str
    mechanism: str
    params: dict[str, Any]
    sensitivity: float
    sensitivity_norm: str
    rho: float
    group: str | None
    partition: str | None
    released: bool

    @property
    def event(self) -> Mechanism:
        """The typed mechanism of this row, read from its recorded parameters."""
        return from_record(self.mechanism, self.params)

    @property
    def delta(self) -> float:
        """The approximate delta, re-derived from the recorded parameters (0.0 if none)."""
        return self.event.cost.delta


@dataclass(frozen=True)
class GroupDeclaration:
    """A declared parallel group: its name, overlap bound L and public description."""

    name: str
    max_overlap: int
    description: str


#: The name this declaration had before ``composition.ParallelGroup`` existed.
ParallelGroup = GroupDeclaration


@dataclass
class _Totals:
    """What was charged, as counts of identical mechanisms: sequential, and per group and
    partition. ``Ledger.events`` turns it into a composition tree."""

    sequential: Counter[Mechanism] = field(default_factory=Counter)
    partitions: dict[str, dict[str, Counter[Mechanism]]] = field(default_factory=dict)

    def copy(self) -> _Totals:
        return _Totals(Counter(self.sequential),
                       {g: {p: Counter(c) for p, c in parts.items()}
                        for g, parts in self.partitions.items()})


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS parallel_groups (
    name TEXT PRIMARY KEY, max_overlap INTEGER NOT NULL, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS releases (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    stage TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    params TEXT NOT NULL,
    sensitivity REAL NOT NULL,
    sensitivity_norm TEXT NOT NULL,
    rho REAL NOT NULL,
    grp TEXT,
    part TEXT,
    charged_at TEXT NOT NULL,
    value BLOB,
    released_at TEXT);
"""


class Ledger:
    """A durable zCDP ledger. Use ``Ledger(path)`` for a build, ``Ledger()`` in memory.

    ``rng`` defaults to a fresh CSPRNG source; pass ``secure_rng(seed)`` in tests only.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        rng: RandomSource | None = None,
        rho_budget: float | None = None,
    ) -> None:
        self.rng = secure_rng() if rng is None else rng
        seeded = self.rng.seeded
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            create_private_file(self.path)
        self._db = connect(self.path)
        self._lock = threading.RLock()
        self._db.executescript(_SCHEMA)
        self._init_meta(rho_budget, seeded)
        self._totals = self._load_totals()
        self._awaiting_value: set[str] = set()  # drawn by draw_many, not yet stored
        # the sigmas (and sparse (sigma, floor)s) whose sampler this ledger probed
        self._probed: set[float | tuple[float, float]] = set()

    # ------------------------------------------------------------------ set-up
    def _init_meta(self, rho_budget: float | None, seeded: bool) -> None:
        meta = self._meta()
        if "schema_version" not in meta:
            self._set_meta("schema_version", str(SCHEMA_VERSION))
            self._set_meta("created", utc_now())
        elif int(meta["schema_version"]) != SCHEMA_VERSION:
            raise LedgerError(f"{self.path}: ledger schema {meta['schema_version']} is not "
                              f"{SCHEMA_VERSION}; it was written by another dpsynrag version")
        if seeded:
            self._set_meta("seeded", "true")  # once seeded, always seeded
        if rho_budget is not None:
            if not (math.isfinite(rho_budget) and rho_budget > 0):
                raise ValueError("rho_budget must be a finite positive number")
            stored = meta.get("rho_budget")
            if stored is not None and not math.isclose(float(stored), rho_budget, rel_tol=1e-12):
                raise ReleaseMismatchError(
                    f"{self.path}: this ledger was opened with rho budget {float(stored):.6g}; "
                    f"refusing to continue with {rho_budget:.6g}")
            self._set_meta("rho_budget", repr(float(rho_budget)))

    def _meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def _load_totals(self) -> _Totals:
        totals = _Totals()
        events: dict[tuple[str, str], Mechanism] = {}  # one parse per distinct record
        rows = self._db.execute("SELECT grp, part, mechanism, params FROM releases ORDER BY seq")
        for grp, part, mechanism, params in rows:
            event = events.get((mechanism, params))
            if event is None:
                event = events[(mechanism, params)] = from_record(mechanism, json.loads(params))
            self._add_to_totals(totals, event, grp, part)
        return totals

    @staticmethod
    def _add_to_totals(totals: _Totals, event: Mechanism, grp: str | None,
                       part: str | None) -> None:
        if grp is None:
            totals.sequential[event] += 1
        else:
            parts = totals.partitions.setdefault(grp, {})
            parts.setdefault(part or "", Counter())[event] += 1

    # ------------------------------------------------------------------ properties
    @property
    def seeded(self) -> bool:
        """True if any random source used with this ledger was seeded (not for release)."""
        return self._meta().get("seeded") == "true"

    @property
    def rho_budget(self) -> float | None:
        stored = self._meta().get("rho_budget")
        return None if stored is None else float(stored)

    def record_target(self, delta: float, conversion: Conversion | str) -> None:
        """Store the build's target delta and conversion (public: the operator's plan), so
        that ``dpsynrag ledger show --state-dir`` converts to epsilon the way the build did.
        Raises ``LedgerError`` if a different target was stored before."""
        conversion = Conversion(conversion).value
        if isinstance(delta, bool) or not (isinstance(delta, int | float) and 0 < delta < 1):
            raise LedgerError(f"delta must lie strictly between 0 and 1, got {delta!r}")
        meta = self._meta()
        stored = (meta.get("target_delta"), meta.get("target_conversion"))
        if stored != (None, None) and stored != (repr(float(delta)), conversion):
            raise LedgerError(f"{self.path}: this ledger was started for delta={stored[0]} "
                              f"({stored[1]}), not delta={float(delta)!r} ({conversion})")
        self._set_meta("target_delta", repr(float(delta)))
        self._set_meta("target_conversion", conversion)

    @property
    def target(self) -> tuple[float, str] | None:
        """(delta, conversion) of ``record_target``, or None."""
        meta = self._meta()
        if "target_delta" not in meta:
            return None
        return float(meta["target_delta"]), meta["target_conversion"]

    # ------------------------------------------------------------------ groups
    def declare_parallel_group(self, name: str, max_overlap: int, description: str) -> None:
        """Declare a parallel-composition group whose records touch <= ``max_overlap`` parts."""
        if not (isinstance(max_overlap, int) and max_overlap >= 1):
            raise ValueError("max_overlap must be a positive integer")
        with self._lock:
            row = self._db.execute("SELECT max_overlap FROM parallel_groups WHERE name = ?",
                                   (name,)).fetchone()
            if row is not None:
                if row[0] != max_overlap:
                    raise ReleaseMismatchError(
                        f"parallel group {name!r} was declared with overlap {row[0]}, "
                        f"not {max_overlap}")
                return
            self._db.execute("INSERT INTO parallel_groups VALUES (?, ?, ?)",
                             (name, max_overlap, description))

    def parallel_groups(self) -> dict[str, GroupDeclaration]:
        rows = self._db.execute("SELECT name, max_overlap, description FROM parallel_groups")
        return {name: GroupDeclaration(name, overlap, desc) for name, overlap, desc in rows}

    # ------------------------------------------------------------------ totals
    def events(self) -> Sequential:
        """Everything charged so far as one composition tree: the sequential releases (as
        ``Repeated`` counts of identical mechanisms), then one ``composition.ParallelGroup``
        per group with one ``Sequential`` per partition."""
        return self._events_of(self._totals)

    def _events_of(self, totals: _Totals) -> Sequential:
        groups = self.parallel_groups()
        nodes: list[composition.Node] = [Repeated(event, n)
                                         for event, n in totals.sequential.items()]
        for name, parts in totals.partitions.items():
            partitions = tuple(Sequential(tuple(Repeated(event, n) for event, n in c.items()))
                               for c in parts.values())
            nodes.append(composition.ParallelGroup(groups[name].max_overlap, partitions, name))
        return Sequential(tuple(nodes))

    def total_rho(self) -> float:
        """Total zCDP cost of everything charged so far (see module docstring)."""
        return compose(self.events()).rho

    def total_delta(self) -> float:
        """Total approximate delta of everything charged so far, composed like rho.

        Sequential releases add; a parallel group costs the sum of its ``max_overlap`` largest
        per-partition deltas (a partition's delta is the sum of its releases'). 0.0 when every
        release is a pure or zCDP mechanism.
        """
        return compose(self.events()).delta

    def epsilon(self, delta: float, conversion: Conversion | str) -> float:
        """epsilon of the total at ``delta``: rho converted at delta - total_delta()."""
        approx = self.total_delta()
        if approx >= delta:
            raise ValueError(f"the releases' approximate delta {approx:.3g} is not below "
                             f"delta={delta:g}")
        return epsilon_for(self.total_rho(), delta - approx, conversion)

    # ------------------------------------------------------------------ releases
    def release(self, key: str, charge: Charge, draw: Callable[[RandomSource], Any]) -> Any:
        """Charge ``charge``, draw the value with ``draw(self.rng)``, store it, and return it.

        If ``key`` was released before (a resumed build), the stored value is returned, nothing
        is drawn and nothing is charged; different parameters are refused.
        """
        return self.release_many([(key, charge, draw)])[0]

    def release_selection(self, key: str, charge: Charge, candidates: Sequence[str],
                          draw: Callable[[RandomSource], Any]) -> dict[str, int]:
        """A partition selection: charge ``charge``, draw every candidate's noisy count with
        ``draw(self.rng)`` (one integer per candidate, in the order of ``candidates``), keep
        those at or above the threshold ``charge`` records, store them and return them.

        The threshold is the charge's own (its typed mechanism, re-read from the record: the
        delta the ledger composes is derived from it), applied here (``apply_threshold``): the
        draw cannot choose what passes. A resumed build gets the stored selection back,
        nothing drawn or charged. ``candidates`` must be distinct strings."""
        if charge.mechanism not in SELECTION_MECHANISMS:
            raise LedgerError(f"release {key!r}: {charge.mechanism} is not a selection")
        chosen = list(candidates)
        if len(set(chosen)) != len(chosen) or not all(isinstance(c, str) for c in chosen):
            raise LedgerError(f"release {key!r}: the candidates must be distinct strings")
        stored = self._charge_and_draw([(key, charge, draw)], store=True,
                                       selections={key: chosen})
        return {str(c): int(v) for c, v in dict(stored[0][1]).items()}

    def release_many(
        self, requests: Sequence[tuple[str, Charge, Callable[[RandomSource], Any]]]
    ) -> list[Any]:
        """Several releases in one transaction (one commit), e.g. one token for every group."""
        return [value for _stored, value in self._charge_and_draw(requests, store=True)]

    def draw_many(
        self, requests: Sequence[tuple[str, Charge, Callable[[RandomSource], Any]]]
    ) -> list[tuple[bool, Any]]:
        """Charge each key and draw its randomness, but leave its value to ``store_many``.

        For a mechanism whose release is computed elsewhere from randomness the ledger draws:
        device-side token sampling (``prediction_release``), where the driver's uniform u goes
        to the model worker and the token, the release, comes back. Returns ``(True, value)``
        for a key released before (a resumed build: the stored value, nothing drawn or
        charged) and ``(False, draw(rng))`` otherwise. The charges are committed before this
        returns, so nothing drawn here leaves the driver uncharged. A key charged here whose
        value never reaches ``store_many`` (a crash in between) stays charged with no value;
        a resumed build draws it afresh, as ``release_many`` does for such a key: its first
        computation was never stored or output.
        """
        with self._lock:
            results = self._charge_and_draw(requests, store=False)
            self._awaiting_value.update(key for (key, _c, _d), (stored, _v)
                                        in zip(requests, results, strict=True) if not stored)
            return results

    def store_many(self, values: Sequence[tuple[str, Any]]) -> None:
        """Record the released values of keys charged by ``draw_many``, in one transaction.

        Only a key this ledger drew with ``draw_many`` and that awaits its value is accepted: a
        key never drawn here, or already holding a value, is refused (a released value is never
        replaced)."""
        with self._lock, write_transaction(self._db, self._lock):
            for key, value in values:
                if key not in self._awaiting_value:
                    raise LedgerError(f"release {key!r} was not drawn by draw_many in this "
                                      "ledger, or already holds its value")
                if not self._store_value(key, value, only_if_empty=True):
                    raise LedgerError(f"release {key!r} is not charged, or already holds a "
                                      "value")
            self._awaiting_value.difference_update(key for key, _value in values)

    def _charge_and_draw(
        self, requests: Sequence[tuple[str, Charge, Callable[[RandomSource], Any]]], *,
        store: bool, selections: Mapping[str, Sequence[str]] | None = None
    ) -> list[tuple[bool, Any]]:
        with self._lock:
            again = [key for key, _charge, _draw in requests if key in self._awaiting_value]
            if again:
                raise LedgerError(f"release {again[0]!r} was drawn and awaits its value; its "
                                  "randomness is never drawn twice")
            self._check_groups(requests)
            stored = {key: self._lookup(key, charge) for key, charge, _ in requests}
            fresh = [(key, charge) for key, charge, _ in requests if stored[key] is None]
            if len({key for key, _ in fresh}) != len(fresh):
                raise LedgerError("the same key appears twice in one batch of releases")
            self._check_budget(fresh)
            results: list[tuple[bool, Any]] = []
            try:
                with write_transaction(self._db, self._lock):
                    for key, charge in fresh:
                        self._insert_charge(key, charge)
                    for key, charge, draw in requests:
                        previous = stored[key]
                        if previous is not None and previous[0]:
                            results.append((True, previous[1]))
                            continue
                        self.rng.start_noise_log()
                        try:
                            value = draw(self.rng)
                        finally:
                            declared = self.rng.stop_noise_log()
                        check_drawn_noise(key, charge, declared)
                        check_sampler(key, declared, self._probed)
                        if selections is not None and key in selections:
                            value = apply_threshold(key, charge, selections[key], value)
                        elif charge.mechanism in SELECTION_MECHANISMS:
                            _check_selected(key, charge, value)
                        if store:
                            self._store_value(key, value)
                        results.append((False, value))
            except BaseException:
                self._totals = self._load_totals()
                raise
            for _key, charge in fresh:
                self._add_to_totals(self._totals, charge.event, charge.group, charge.partition)
            return results

    def _check_groups(
        self, requests: Sequence[tuple[str, Charge, Callable[[RandomSource], Any]]]
    ) -> None:
        groups = self.parallel_groups()
        for key, charge, _ in requests:
            if charge.group is not None and charge.group not in groups:
                raise LedgerError(f"release {key!r}: parallel group {charge.group!r} is not "
                                  "declared")
            if charge.group is not None and charge.partition is None:
                raise LedgerError(f"release {key!r}: a grouped release needs a partition")

    def _lookup(self, key: str, charge: Charge) -> tuple[bool, Any] | None:
        """None if never charged, else (has_value, value)."""
        row = self._db.execute(
            "SELECT stage, mechanism, params, sensitivity, sensitivity_norm, grp, part, value "
            "FROM releases WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        recorded = (row[0], row[1], row[2], row[3], row[4], row[5], row[6])
        requested = (charge.stage, charge.mechanism, charge.canonical_params(),
                     float(charge.sensitivity), charge.sensitivity_norm, charge.group,
                     charge.partition)
        if recorded != requested:
            raise ReleaseMismatchError(
                f"release {key!r} was recorded with other parameters; a resumed build must use "
                "the plan it started with (or a fresh state directory)")
        if row[7] is None:
            return (False, None)  # charged, drawn value never stored: drawing now is its first use
        return (True, decode_value(row[7]))

    def _check_budget(self, fresh: Sequence[tuple[str, Charge]]) -> None:
        budget = self.rho_budget
        if budget is None or not fresh:
            return
        trial = self._totals.copy()
        for _, charge in fresh:
            self._add_to_totals(trial, charge.event, charge.group, charge.partition)
        after = compose(self._events_of(trial)).rho
        if after > budget * (1 + _RHO_SLACK):
            raise BudgetExceededError(
                f"release {fresh[0][0]!r} would bring the total to rho={after:.6g}, over the "
                f"budget rho={budget:.6g}; nothing was drawn")

    def _insert_charge(self, key: str, charge: Charge) -> None:
        self._db.execute(
            "INSERT INTO releases (key, stage, mechanism, params, sensitivity, sensitivity_norm,"
            " rho, grp, part, charged_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, charge.stage, charge.mechanism, charge.canonical_params(),
             float(charge.sensitivity), charge.sensitivity_norm, charge.rho, charge.group,
             charge.partition, utc_now()))

    def _store_value(self, key: str, value: Any, *, only_if_empty: bool = False) -> bool:
        """Store ``key``'s value; with ``only_if_empty`` only into a charged row with none.
        Returns whether a row was written."""
        condition = " AND value IS NULL" if only_if_empty else ""
        cursor = self._db.execute(
            f"UPDATE releases SET value = ?, released_at = ? WHERE key = ?{condition}",
            (encode_value(value), utc_now(), key))
        return cursor.rowcount == 1

    # ------------------------------------------------------------------ reading
    def releases(self) -> list[Release]:
        rows = self._db.execute(
            "SELECT key, stage, mechanism, params, sensitivity, sensitivity_norm, rho, grp, part,"
            " value IS NOT NULL FROM releases ORDER BY seq")
        return [Release(k, s, m, json.loads(p), sens, norm, rho, g, part, bool(has))
                for k, s, m, p, sens, norm, rho, g, part, has in rows]

    def audit_releases(self) -> list[dict[str, Any]]:
        """Every release as recorded, for an auditor (``dpsynrag ledger show``): its charge,
        when it was charged and the sha256 of its stored value (None until the value is
        drawn), never the value itself. Reads only; JSON-ready."""
        rows = self._db.execute(
            "SELECT key, stage, mechanism, params, sensitivity, sensitivity_norm, rho, grp, part,"
            " value, charged_at FROM releases ORDER BY seq").fetchall()
        return [{"key": key, "stage": stage, "mechanism": mechanism, "params": json.loads(params),
                 "sensitivity": sensitivity, "sensitivity_norm": norm, "rho": rho, "group": grp,
                 "partition": part, "charged_at": charged_at,
                 "value_sha256": None if value is None else hashlib.sha256(value).hexdigest()}
                for key, stage, mechanism, params, sensitivity, norm, rho, grp, part, value,
                charged_at in rows]

    def lookup(self, key: str, charge: Charge) -> tuple[bool, Any] | None:
        """Read only: ``None`` if ``key`` was never charged, ``(False, None)`` if it was charged
        but holds no value, else ``(True, value)``; a key recorded with other parameters than
        ``charge`` is refused (``ReleaseMismatchError``), as ``release`` refuses it. Charges
        and draws nothing (a resumed build reads what it released before)."""
        with self._lock:
            return self._lookup(key, charge)

    def released_value(self, key: str) -> Any | None:
        row = self._db.execute("SELECT value FROM releases WHERE key = ?", (key,)).fetchone()
        return None if row is None or row[0] is None else decode_value(row[0])

    def stage_summary(self) -> list[dict[str, Any]]:
        """Per (stage, mechanism, group): release count and rho before composition."""
        summary: dict[tuple[str, str, str | None], dict[str, Any]] = {}
        for release in self.releases():
            entry = summary.setdefault(
                (release.stage, release.mechanism, release.group),
                {"stage": release.stage, "mechanism": release.mechanism,
                 "group": release.group, "releases": 0, "rho_sum": 0.0})
            entry["releases"] += 1
            entry["rho_sum"] += release.rho
        return list(summary.values())

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- value encoding
def encode_value(value: Any) -> bytes:
    """Serialise a released value without pickle: numpy arrays as .npy, the rest as JSON."""
    if isinstance(value, np.ndarray):
        buffer = io.BytesIO()
        np.save(buffer, value, allow_pickle=False)
        return b"N" + buffer.getvalue()
    if isinstance(value, np.generic):
        value = value.item()
    return b"J" + json.dumps(value, separators=(",", ":")).encode()


def decode_value(blob: bytes) -> Any:
    kind, body = blob[:1], blob[1:]
    if kind == b"N":
        return np.load(io.BytesIO(body), allow_pickle=False)
    if kind == b"J":
        return json.loads(body.decode())
    raise LedgerError("unknown value encoding in the ledger")
