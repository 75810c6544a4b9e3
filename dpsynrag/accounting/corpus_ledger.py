"""The privacy ledger of one PRIVATE corpus: the offline build's spend plus every query's spend.

One durable SQLite file per private corpus (``default_corpus_ledger_path``), shared by every
process that touches that corpus: a DP-SynRAG build, and each query-time DP-RAG mechanism
(DP-KSA, DPVoteRAG, Grislain's DP-RAG) answering over the private documents themselves
(mechanism-specs.md, 7.2 and 7.3). Semantics:

* **zCDP primary, approximate delta.** Each charge lists the mechanisms it runs with their
  public parameters; its cost (rho, delta) is recomputed by ``costs.spend_of`` -- never taken
  from the caller. Mechanisms that are only (epsilon, delta)-DP (LimitedDomain, PTR) count as
  delta-approximately rho-zCDP (Bun & Steinke 2016, Def. 8.1). Approximate zCDP composes by
  adding rho and adding delta, so the ledger's total is (sum of rho, sum of delta_approx).
* **Conversion.** delta_approx-approximately rho-zCDP is (epsilon_for(rho, delta'), delta_approx
  + delta')-DP for every delta' > 0. Against a cap (epsilon_cap, delta_cap, conversion) the
  total fits when delta_approx < delta_cap and epsilon_for(rho, delta_cap - delta_approx,
  conversion) <= epsilon_cap. Every epsilon reported here names its conversion.
* **(epsilon, delta) currency.** A mechanism whose published analysis composes in (epsilon,
  delta) (Koga et al.'s per-query composition, ``dp_composition``) is charged as such: the
  ledger converts the zCDP part at delta' = delta_cap - (all deltas) and adds the DP-currency
  epsilons to it (basic composition of the two guarantees).
* **Charge first, never refund.** ``charge`` is called BEFORE any private computation, and
  checks and records the charge in one ``BEGIN IMMEDIATE`` transaction, so concurrent processes
  can never overspend the cap together. A refused charge is recorded (with the epsilon it would
  have reached) and raises ``BudgetRefusedError``: the caller must then not touch the private
  data. A charge is never refunded: a query that stops early (an early EOS, a PTR test that
  fails, an exception) keeps its full charge, since its plan was fixed before it ran.
* **Resumes.** A key charged before with the same mechanisms returns the stored charge and
  charges nothing (a resumed build); with other mechanisms it is refused.
* **Synthetic corpora are free.** Queries over a SYNTHETIC corpus built by DP-SynRAG are
  post-processing of its release and are never charged here; only the build is.
* **No cap** means every charge is accepted, and still recorded.

Keys, methods and descriptions are stored and shown: they must be public identifiers (a query
number, a run id), never query text. The ledger holds no private text, counts, similarities or
thresholds, and neither do its error messages.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpsynrag.accounting.conversions import Conversion, epsilon_for, rho_for
from dpsynrag.accounting.costs import dp_spend_of, spend_of
from dpsynrag.accounting.ledger import BudgetExceededError, LedgerError, ReleaseMismatchError
from dpsynrag.accounting.signing import default_key_path

SCHEMA_VERSION = 1
LEDGER_KIND = "corpus"
LEDGERS_DIR = "ledgers"
KINDS = ("build", "query")
BUSY_TIMEOUT_S = 600.0  # writers wait for each other; a transaction here lasts milliseconds
_EPSILON_SLACK = 1e-12  # relative float round-off allowed when comparing with the cap

__all__ = [
    "BudgetRefusedError",
    "Cap",
    "CapError",
    "ChargeMismatchError",
    "ChargeResult",
    "CorpusLedger",
    "LedgerEntry",
    "Refusal",
    "Spend",
    "corpus_ledgers_dir",
    "default_corpus_ledger_path",
]


class BudgetRefusedError(BudgetExceededError):
    """A charge would take the corpus past its cap; it was recorded as refused, nothing ran."""


class ChargeMismatchError(ReleaseMismatchError):
    """A key was charged before with other mechanisms (or another kind or method)."""


class CapError(LedgerError):
    """A cap below what is already spent, or an invalid cap."""


@dataclass(frozen=True)
class Cap:
    """The most this corpus may ever spend, as (epsilon, delta)-DP under ``conversion``."""

    epsilon: float
    delta: float
    conversion: str
    set_at: str


@dataclass(frozen=True)
class Spend:
    """Composed spend: delta_approx-approximately rho-zCDP, i.e. (epsilon, delta)-DP.

    ``epsilon`` holds at total ``delta`` (delta_approx included) under ``conversion``; it is
    ``inf`` when delta_approx >= delta and None when no delta was given and no cap is set.
    """

    rho: float
    delta_approx: float
    epsilon: float | None
    delta: float | None
    conversion: str | None
    epsilon_dp: float = 0.0  # charged in (epsilon, delta) currency, added after conversion


@dataclass(frozen=True)
class LedgerEntry:
    """One accepted charge as recorded."""

    seq: int
    key: str
    kind: str
    method: str
    mechanisms: list[dict[str, Any]]
    rho: float
    delta: float
    description: str
    charged_at: str
    epsilon_dp: float = 0.0


@dataclass(frozen=True)
class ChargeResult:
    """The accepted (or, with ``resumed``, previously accepted) charge and the total after it."""

    entry: LedgerEntry
    resumed: bool
    spent: Spend

    @property
    def key(self) -> str:
        return self.entry.key

    @property
    def rho(self) -> float:
        return self.entry.rho

    @property
    def delta(self) -> float:
        return self.entry.delta


@dataclass(frozen=True)
class Refusal:
    """One refused charge: its public cost and the cap it would have broken."""

    seq: int
    key: str
    kind: str
    method: str
    mechanisms: list[dict[str, Any]]
    rho: float
    delta: float
    reason: str  # "epsilon" or "delta"
    epsilon_would_be: float | None  # None when the delta alone was over the cap
    cap_epsilon: float
    cap_delta: float
    conversion: str
    refused_at: str


_TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS charges ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE,"
    " kind TEXT NOT NULL CHECK (kind IN ('build', 'query')), method TEXT NOT NULL,"
    " mechanisms TEXT NOT NULL, rho REAL NOT NULL, delta REAL NOT NULL,"
    " description TEXT NOT NULL, charged_at TEXT NOT NULL,"
    " epsilon_dp REAL NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS refusals ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, kind TEXT NOT NULL,"
    " method TEXT NOT NULL, mechanisms TEXT NOT NULL, rho REAL NOT NULL, delta REAL NOT NULL,"
    " reason TEXT NOT NULL, epsilon_would_be REAL, cap_epsilon REAL NOT NULL,"
    " cap_delta REAL NOT NULL, conversion TEXT NOT NULL, refused_at TEXT NOT NULL)",
    # The audit trail of the cap: the current cap is the last row.
    "CREATE TABLE IF NOT EXISTS cap_history ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, epsilon REAL NOT NULL, delta REAL NOT NULL,"
    " conversion TEXT NOT NULL, spent_rho REAL NOT NULL, spent_delta REAL NOT NULL,"
    " set_at TEXT NOT NULL)",
)


def corpus_ledgers_dir() -> Path:
    """``<config dir>/ledgers``, the config dir being the signing key's (``$DPSYNRAG_CONFIG_DIR``,
    else ``$XDG_CONFIG_HOME/dpsynrag`` or ``~/.config/dpsynrag``)."""
    return default_key_path().parent / LEDGERS_DIR


def default_corpus_ledger_path(private_input: str | os.PathLike[str]) -> Path:
    """``<config dir>/ledgers/<basename>-<16 hex of sha256(resolved absolute path)>.sqlite``.

    A URL-like input (``gs://bucket/notes/*.jsonl``) is hashed as written.
    """
    text = os.fspath(private_input)
    if "://" in text:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        name = text.rstrip("/").rsplit("/", 1)[-1].replace("*", "_") or "root"
        return corpus_ledgers_dir() / f"{name}-{digest}.sqlite"
    resolved = Path(private_input).expanduser().resolve()
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:16]
    return corpus_ledgers_dir() / f"{resolved.name or 'root'}-{digest}.sqlite"


class CorpusLedger:
    """The durable, multi-process privacy ledger of one private corpus (see module docstring).

    ``CorpusLedger(path)`` creates the file (0600, missing parent directories 0700) unless
    ``create=False``, which raises ``FileNotFoundError`` for a missing ledger.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path).expanduser()
        if not self.path.exists():
            if not create:
                raise FileNotFoundError(f"{self.path}: no corpus ledger here")
            _make_private_dirs(self.path.parent)
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S,
                                       isolation_level=None, check_same_thread=False)
            self._db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._init_schema()
        except sqlite3.DatabaseError as error:
            raise LedgerError(f"{self.path}: not a usable corpus ledger ({error})") from None

    # ------------------------------------------------------------------ set-up
    def _init_schema(self) -> None:
        tables = {row[0] for row in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            with self._transaction():
                for statement in _TABLES:
                    self._db.execute(statement)
                for key, value in (("ledger", LEDGER_KIND),
                                   ("schema_version", str(SCHEMA_VERSION)),
                                   ("created", _now())):
                    self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                                     (key, value))
        meta = self._meta()
        if meta.get("ledger") != LEDGER_KIND:
            raise LedgerError(f"{self.path}: not a corpus ledger (a build's state-directory "
                              "ledger is read with 'ledger show --state-dir')")
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            raise LedgerError(f"{self.path}: corpus ledger schema {meta.get('schema_version')} "
                              f"is not {SCHEMA_VERSION}; it was written by another dpsynrag "
                              "version")

    def _meta(self) -> dict[str, str]:
        try:
            return dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError:  # no meta table: some other SQLite file
            return {}

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock before the first read."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction: every read inside sees the same committed state."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield
            finally:
                self._db.execute("COMMIT")

    # ------------------------------------------------------------------ cap
    @property
    def cap(self) -> Cap | None:
        """The current cap, or None (then every charge is accepted)."""
        with self._lock:
            return self._read_cap()

    def _read_cap(self) -> Cap | None:
        row = self._db.execute("SELECT epsilon, delta, conversion, set_at FROM cap_history "
                               "ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else Cap(*row)

    def set_cap(self, epsilon: float, delta: float,
                conversion: Conversion | str = Conversion.BUN_STEINKE) -> Cap:
        """Set (or change) the cap; refuses one that what is already spent does not fit in.

        Every change is recorded in the cap history; setting the current cap again is a no-op.
        """
        if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
            raise CapError(f"the cap's epsilon must be a finite positive number, got {epsilon!r}")
        if not (isinstance(delta, int | float) and 0 < delta < 1):
            raise CapError(f"the cap's delta must lie strictly between 0 and 1, got {delta!r}")
        try:
            conversion = Conversion(conversion)
        except ValueError:
            known = ", ".join(c.value for c in Conversion)
            raise CapError(f"unknown conversion {conversion!r}; known: {known}") from None
        epsilon, delta = float(epsilon), float(delta)
        with self._transaction():
            current = self._read_cap()
            if current is not None and (current.epsilon, current.delta, current.conversion) == (
                    epsilon, delta, conversion.value):
                return current
            rho, delta_approx, eps_dp = self._totals()
            new = Cap(epsilon, delta, conversion.value, _now())
            if not _fits(rho, delta_approx, new, eps_dp):
                spent = _epsilon_at(rho, delta_approx, delta, conversion, eps_dp)
                raise CapError(
                    f"refusing the cap epsilon={epsilon:g}, delta={delta:g} ({conversion}): "
                    f"already spent rho={rho:.6g}, delta_approx={delta_approx:.3g}, i.e. "
                    f"epsilon={spent:.6g} at that delta; a cap cannot go below what is spent")
            self._db.execute(
                "INSERT INTO cap_history (epsilon, delta, conversion, spent_rho, spent_delta, "
                "set_at) VALUES (?, ?, ?, ?, ?, ?)",
                (epsilon, delta, conversion.value, rho, delta_approx, new.set_at))
        return new

    def cap_history(self) -> list[dict[str, Any]]:
        """Every cap ever set, oldest first, with what was spent when it was set."""
        with self._lock:
            rows = self._db.execute("SELECT epsilon, delta, conversion, spent_rho, spent_delta, "
                                    "set_at FROM cap_history ORDER BY seq").fetchall()
        names = ("epsilon", "delta", "conversion", "spent_rho", "spent_delta", "set_at")
        return [dict(zip(names, row, strict=True)) for row in rows]

    # ------------------------------------------------------------------ charging
    def charge(self, key: str, *, kind: str, method: str,
               mechanisms: Sequence[Mapping[str, Any]], description: str = "") -> ChargeResult:
        """Charge ``mechanisms`` (each ``{"mechanism", "params", "count"}``) under ``key``.

        Call it BEFORE touching the private data. The cost is recomputed from the mechanisms'
        parameters. Raises ``BudgetRefusedError`` (after recording the refusal) when the total
        would no longer fit the cap, and ``ChargeMismatchError`` when ``key`` was charged
        before with other mechanisms, kind or method. A key charged before with the same ones
        returns the stored charge (``resumed``) and charges nothing.
        """
        if not (isinstance(key, str) and key):
            raise ValueError("a charge needs a non-empty string key")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not (isinstance(method, str) and method):
            raise ValueError("a charge needs a non-empty method name")
        if not isinstance(description, str):
            raise ValueError("description must be a string")
        normalised = _normalise(mechanisms)
        rho, delta = spend_of(normalised)
        eps_dp, delta_dp = dp_spend_of(normalised)
        delta += delta_dp  # deltas add in either currency
        canonical = _canonical(normalised)
        with self._transaction():
            row = self._db.execute(f"SELECT {_ENTRY_COLUMNS} FROM charges WHERE key = ?",
                                   (key,)).fetchone()
            cap = self._read_cap()
            if row is not None:
                entry = _entry(row)
                if (entry.kind, entry.method, _canonical(entry.mechanisms)) != (
                        kind, method, canonical):
                    raise ChargeMismatchError(
                        f"charge {key!r} was recorded as a {entry.kind} charge of "
                        f"{entry.method} with other mechanisms; a resumed run must keep its "
                        "plan (or use a new key)")
                total_rho, total_delta, total_eps = self._totals()
                return ChargeResult(entry, True, _spend(total_rho, total_delta, cap, total_eps))
            total_rho, total_delta, total_eps = self._totals()
            after_rho, after_delta = total_rho + rho, total_delta + delta
            after_eps = total_eps + eps_dp
            if cap is not None and not _fits(after_rho, after_delta, cap, after_eps):
                self._refuse(key, kind, method, canonical, rho, delta, after_rho, after_delta,
                             cap, after_eps)
                refusal = _refusal_message(key, kind, method, rho, delta, total_rho,
                                           total_delta, after_rho, after_delta, cap,
                                           total_eps, after_eps)
            else:
                refusal = None
                now = _now()
                cursor = self._db.execute(
                    "INSERT INTO charges (key, kind, method, mechanisms, rho, delta, "
                    "description, charged_at, epsilon_dp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, kind, method, canonical, rho, delta, description, now, eps_dp))
                entry = LedgerEntry(int(cursor.lastrowid or 0), key, kind, method, normalised,
                                    rho, delta, description, now, eps_dp)
        if refusal is not None:  # raised after COMMIT, so that the refusal stays recorded
            raise BudgetRefusedError(refusal)
        return ChargeResult(entry, False, _spend(after_rho, after_delta, cap, after_eps))

    def _refuse(self, key: str, kind: str, method: str, canonical: str, rho: float,
                delta: float, after_rho: float, after_delta: float, cap: Cap,
                after_eps: float = 0.0) -> None:
        if after_delta >= cap.delta:
            reason, would_be = "delta", None
        else:
            reason = "epsilon"
            would_be = epsilon_for(after_rho, cap.delta - after_delta, cap.conversion) + after_eps
        self._db.execute(
            "INSERT INTO refusals (key, kind, method, mechanisms, rho, delta, reason, "
            "epsilon_would_be, cap_epsilon, cap_delta, conversion, refused_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, kind, method, canonical, rho, delta, reason, would_be, cap.epsilon,
             cap.delta, cap.conversion, _now()))

    def _totals(self) -> tuple[float, float, float]:
        """(sum of rho, sum of delta, sum of DP-currency epsilon), exactly rounded sums."""
        rows = self._db.execute("SELECT rho, delta, epsilon_dp FROM charges").fetchall()
        return (math.fsum(r for r, _, _ in rows), math.fsum(d for _, d, _ in rows),
                math.fsum(e for _, _, e in rows))

    # ------------------------------------------------------------------ reading
    def spent(self, delta: float | None = None,
              conversion: Conversion | str | None = None) -> Spend:
        """The composed spend; epsilon at total ``delta`` (default: the cap's) under
        ``conversion`` (default: the cap's, else Bun-Steinke)."""
        with self._snapshot():
            rho, delta_approx, eps_dp = self._totals()
            cap = self._read_cap()
        if delta is None and conversion is None:
            return _spend(rho, delta_approx, cap, eps_dp)
        if delta is None:
            delta = None if cap is None else cap.delta
        if conversion is None:
            conversion = Conversion.BUN_STEINKE if cap is None else cap.conversion
        conversion = Conversion(conversion).value
        if delta is None:
            return Spend(rho, delta_approx, None, None, conversion, eps_dp)
        if not 0 < delta < 1:
            raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")
        return Spend(rho, delta_approx,
                     _epsilon_at(rho, delta_approx, delta, conversion, eps_dp),
                     delta, conversion, eps_dp)

    def remaining_epsilon(self) -> float | None:
        """epsilon_cap minus the epsilon spent (at the cap's delta); None without a cap.

        Epsilons do not add under zCDP: a further charge fits when its rho fits in
        ``remaining_rho()`` (and its delta in what delta is left), not when its epsilon fits here.
        """
        with self._snapshot():
            rho, delta_approx, eps_dp = self._totals()
            cap = self._read_cap()
        return None if cap is None else _remaining(rho, delta_approx, cap, eps_dp)[0]

    def remaining_rho(self) -> float | None:
        """The rho a further pure/zCDP charge may still add; None without a cap."""
        with self._snapshot():
            rho, delta_approx, eps_dp = self._totals()
            cap = self._read_cap()
        return None if cap is None else _remaining(rho, delta_approx, cap, eps_dp)[1]

    def entries(self) -> list[LedgerEntry]:
        """Every accepted charge, oldest first."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_ENTRY_COLUMNS} FROM charges ORDER BY seq")
            return [_entry(row) for row in rows]

    def refusals(self) -> list[Refusal]:
        """Every refused charge, oldest first (``refusal_count()`` counts them)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, key, kind, method, mechanisms, rho, delta, reason, "
                "epsilon_would_be, cap_epsilon, cap_delta, conversion, refused_at "
                "FROM refusals ORDER BY seq").fetchall()
        return [Refusal(seq, key, kind, method, json.loads(mech), *rest)
                for seq, key, kind, method, mech, *rest in rows]

    def refusal_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM refusals").fetchone()[0])

    def summary(self, delta: float | None = None) -> dict[str, Any]:
        """Everything ``ledger show`` prints, as JSON-ready values (no private value exists)."""
        with self._snapshot():
            cap = self._read_cap()
            entries = self.entries()
            refusals = self.refusal_count()
            history = self.cap_history()
        rho = math.fsum(e.rho for e in entries)
        delta_approx = math.fsum(e.delta for e in entries)
        eps_dp = math.fsum(e.epsilon_dp for e in entries)
        at = delta if delta is not None else (None if cap is None else cap.delta)
        conversion = Conversion.BUN_STEINKE.value if cap is None else cap.conversion
        epsilon = None if at is None else _epsilon_at(rho, delta_approx, at, conversion, eps_dp)
        groups: dict[tuple[str, str], list[LedgerEntry]] = {}
        for e in entries:
            groups.setdefault((e.kind, e.method), []).append(e)
        per_method = [{"kind": kind, "method": method, "charges": len(group),
                       "rho": math.fsum(e.rho for e in group),
                       "delta_approx": math.fsum(e.delta for e in group),
                       "epsilon_dp": math.fsum(e.epsilon_dp for e in group)}
                      for (kind, method), group in sorted(groups.items())]
        remaining = (None, None) if cap is None else _remaining(rho, delta_approx, cap, eps_dp)
        return {
            "path": str(self.path),
            "conversion": conversion,
            "cap": None if cap is None else asdict(cap),
            "cap_changes": len(history),
            "spent": {"rho": rho, "delta_approx": delta_approx, "epsilon_dp": eps_dp,
                      "delta": at,
                      "epsilon": _json_float(epsilon)},
            "remaining_epsilon": remaining[0],
            "remaining_rho": remaining[1],
            "builds": sum(e.kind == "build" for e in entries),
            "queries": sum(e.kind == "query" for e in entries),
            "refusals": refusals,
            "methods": per_method,
            "build_charges": [{"key": e.key, "method": e.method, "rho": e.rho,
                               "charged_at": e.charged_at, "description": e.description}
                              for e in entries if e.kind == "build"],
        }

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> CorpusLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- helpers
_ENTRY_COLUMNS = ("seq, key, kind, method, mechanisms, rho, delta, description, charged_at, "
                  "epsilon_dp")


def _entry(row: Sequence[Any]) -> LedgerEntry:
    seq, key, kind, method, mechanisms, rho, delta, description, charged_at, eps_dp = row
    return LedgerEntry(seq, key, kind, method, json.loads(mechanisms), rho, delta, description,
                       charged_at, eps_dp)


def _normalise(mechanisms: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``[{"mechanism", "params", "count"}]`` with the default count filled in; validated."""
    if isinstance(mechanisms, str | bytes | Mapping) or not isinstance(mechanisms, Sequence):
        raise ValueError("mechanisms must be a list of {mechanism, params, count} mappings")
    if not mechanisms:
        raise ValueError("a charge needs at least one mechanism")
    spend_of(mechanisms)  # validates names, fields, parameters and counts
    return [{"mechanism": m["mechanism"], "params": dict(m.get("params", {})),
             "count": m.get("count", 1)} for m in mechanisms]


def _canonical(mechanisms: Sequence[Mapping[str, Any]]) -> str:
    try:
        return json.dumps(list(mechanisms), sort_keys=True, separators=(",", ":"),
                          allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"mechanism parameters must be finite JSON values: {error}") from None


def _epsilon_at(rho: float, delta_approx: float, delta: float,
                conversion: Conversion | str, eps_dp: float = 0.0) -> float:
    """epsilon of delta_approx-approximate rho-zCDP as (epsilon, delta)-DP, plus the epsilon
    charged in DP currency (basic composition); inf if impossible. ``delta_approx`` holds the
    deltas of both currencies."""
    if delta_approx >= delta:
        return math.inf
    return epsilon_for(rho, delta - delta_approx, conversion) + eps_dp


def _fits(rho: float, delta_approx: float, cap: Cap, eps_dp: float = 0.0) -> bool:
    if delta_approx >= cap.delta:
        return False
    epsilon = _epsilon_at(rho, delta_approx, cap.delta, cap.conversion, eps_dp)
    return epsilon <= cap.epsilon * (1.0 + _EPSILON_SLACK)


def _remaining(rho: float, delta_approx: float, cap: Cap,
               eps_dp: float = 0.0) -> tuple[float, float]:
    """(epsilon left, rho left) under ``cap`` at the current delta_approx."""
    if delta_approx >= cap.delta or eps_dp >= cap.epsilon:
        return 0.0, 0.0
    spent = _epsilon_at(rho, delta_approx, cap.delta, cap.conversion, eps_dp)
    rho_cap = rho_for(cap.epsilon - eps_dp, cap.delta - delta_approx, cap.conversion)
    return max(0.0, cap.epsilon - spent), max(0.0, rho_cap - rho)


def _spend(rho: float, delta_approx: float, cap: Cap | None, eps_dp: float = 0.0) -> Spend:
    if cap is None:
        return Spend(rho, delta_approx, None, None, None, eps_dp)
    return Spend(rho, delta_approx,
                 _epsilon_at(rho, delta_approx, cap.delta, cap.conversion, eps_dp),
                 cap.delta, cap.conversion, eps_dp)


def _refusal_message(key: str, kind: str, method: str, rho: float, delta: float,
                     total_rho: float, total_delta: float, after_rho: float,
                     after_delta: float, cap: Cap, total_eps: float = 0.0,
                     after_eps: float = 0.0) -> str:
    spent = _epsilon_at(total_rho, total_delta, cap.delta, cap.conversion, total_eps)
    eps_left, rho_left = _remaining(total_rho, total_delta, cap, total_eps)
    if after_delta >= cap.delta:
        why = f"its delta would bring delta_approx to {after_delta:.3g}, not below the cap's"
    else:
        would_be = _epsilon_at(after_rho, after_delta, cap.delta, cap.conversion, after_eps)
        why = f"it would bring epsilon to {would_be:.6g}"
    return (f"refused {kind} charge {key!r} ({method}, rho={rho:.6g}, delta={delta:.3g}): {why}; "
            f"spent so far epsilon={spent:.6g} (rho={total_rho:.6g}, "
            f"delta_approx={total_delta:.3g}); remaining epsilon={eps_left:.6g} "
            f"(rho={rho_left:.6g}); cap epsilon={cap.epsilon:g}, delta={cap.delta:g} "
            f"({cap.conversion}); nothing was computed")


def _json_float(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each with mode 0700."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
