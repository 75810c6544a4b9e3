"""The privacy ledger of one PRIVATE corpus: the offline build's spend plus every query's spend.

One durable SQLite file per private corpus (``default_corpus_ledger_path``), shared by every
process that touches that corpus: a DP-SynRAG build, and each query-time DP-RAG mechanism
(DP-KSA, DPVoteRAG, Grislain's DP-RAG) answering over the private documents themselves
(docs/mechanisms.md, section 8.4). Semantics:

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
* **One privacy unit per ledger.** A guarantee composes only with guarantees about the same
  neighbouring relation: a build with ``--unit-column person`` protects a person, a query
  without it protects a record, and their sum is neither. Every charge states its
  ``privacy_unit`` (``privacy_unit_definition``: ``"record"``, or the unit column and its
  bounding rule); the first accepted charge records it and any charge under another
  definition is refused before anything is recorded (``PrivacyUnitMismatchError``).
* **Query charges are receipts, used exactly once.** ``charge`` returns a ``ChargeReceipt``
  bound to (ledger, key, method, canonical mechanisms, privacy unit). The query-time answer
  functions take one receipt per question and ``consume_receipts`` marks them used in one
  transaction BEFORE any private computation, refusing (``ReceiptError``) an unknown, used,
  non-query or mismatched receipt; so no query-time mechanism can run on the private corpus
  without a committed charge, and no charge pays for two computations.
* **No cap** means every charge is accepted, and still recorded. A QUERY charge on a ledger
  without a cap is refused (``NoCapError``, nothing recorded) unless the caller passes
  ``allow_no_cap=True`` (``dpsynrag query --no-cap``): queries are open-ended, so their total
  must be bounded by a cap that the operator set on purpose (``dpsynrag ledger cap``).
* **Migration.** Schema 1 ledgers are upgraded in place on opening: the ``consumed`` table is
  added and every query charge already recorded is marked used (schema 1 code always ran a
  query right after its charge). The privacy unit of a schema 1 ledger that holds charges is
  unknown (builds may have used ``--unit-column``): such a ledger refuses every charge until
  the operator states the unit those charges were made under with ``declare_privacy_unit``;
  a ledger without charges simply records the unit of its first charge.

Keys, methods and descriptions are stored and shown: they must be public identifiers (a query
number, a run id), never query text. The ledger holds no private text, counts, similarities or
thresholds, and neither do its error messages.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpsynrag.accounting.conversions import Conversion, epsilon_for, rho_for
from dpsynrag.accounting.costs import dp_spend_of, spend_of
from dpsynrag.accounting.ledger import BudgetExceededError, LedgerError, ReleaseMismatchError
from dpsynrag.accounting.signing import default_key_path
from dpsynrag.accounting.sqlite_store import (
    connect,
    create_private_file,
    make_private_dirs,
    read_snapshot,
    utc_now,
    write_transaction,
)
from dpsynrag.io.units import UNIT_BOUND_RULES

SCHEMA_VERSION = 2  # 2: privacy unit in meta, the ``consumed`` table of used receipts
_UPGRADABLE_SCHEMAS = ("1",)
LEDGER_KIND = "corpus"
LEDGERS_DIR = "ledgers"
KINDS = ("build", "query")
BUSY_TIMEOUT_S = 600.0  # writers wait for each other; a transaction here lasts milliseconds
_EPSILON_SLACK = 1e-12  # relative float round-off allowed when comparing with the cap
RECORD_UNIT = "record"
_UNIT_META = "privacy_unit"

__all__ = [
    "RECORD_UNIT",
    "BudgetRefusedError",
    "Cap",
    "CapError",
    "ChargeMismatchError",
    "ChargeReceipt",
    "ChargeResult",
    "CorpusLedger",
    "LedgerEntry",
    "NoCapError",
    "PrivacyUnitMismatchError",
    "ReceiptError",
    "Refusal",
    "Spend",
    "consume_receipts",
    "corpus_ledgers_dir",
    "default_corpus_ledger_path",
    "privacy_unit_definition",
]


class BudgetRefusedError(BudgetExceededError):
    """A charge would take the corpus past its cap; it was recorded as refused, nothing ran."""


class ChargeMismatchError(ReleaseMismatchError):
    """A key was charged before with other mechanisms (or another kind or method)."""


class CapError(LedgerError):
    """A cap below what is already spent, or an invalid cap."""


class NoCapError(CapError):
    """A query charge on a ledger without a cap, and no explicit ``allow_no_cap``."""


class PrivacyUnitMismatchError(ChargeMismatchError):
    """A charge under another privacy-unit definition than the ledger's (nothing recorded)."""


class ReceiptError(LedgerError):
    """A query receipt that is unknown, already used or does not match the computation."""


def privacy_unit_definition(unit_column: str | None, unit_bound: str = "pick") -> str:
    """The privacy unit (the neighbouring relation) as a corpus ledger records it.

    ``"record"`` without a unit column: one record is one unit, nothing is bounded, so
    ``unit_bound`` does not matter and is ignored. With one: ``unit-column "<name>"; bound
    <rule>`` (the name JSON-quoted, so any name is unambiguous). Public: a column name and a
    rule chosen by the operator, never data.
    """
    if unit_bound not in UNIT_BOUND_RULES:
        raise ValueError(f"unknown unit bound rule {unit_bound!r}; expected "
                         f"{' or '.join(UNIT_BOUND_RULES)}")
    if unit_column is None or unit_column == "":
        return RECORD_UNIT
    if not isinstance(unit_column, str):
        raise ValueError("the unit column must be a column name (a string) or None")
    return f"unit-column {json.dumps(unit_column, ensure_ascii=False)}; bound {unit_bound}"


def _check_unit(privacy_unit: object) -> str:
    """``privacy_unit`` if it is a definition ``privacy_unit_definition`` can produce."""
    if privacy_unit == RECORD_UNIT:
        return RECORD_UNIT
    if isinstance(privacy_unit, str) and privacy_unit.startswith("unit-column "):
        name, sep, rule = privacy_unit[len("unit-column "):].rpartition("; bound ")
        try:
            column = json.loads(name) if sep else None
        except json.JSONDecodeError:
            column = None
        if isinstance(column, str) and column and rule in UNIT_BOUND_RULES and \
                privacy_unit_definition(column, rule) == privacy_unit:
            return privacy_unit
    raise ValueError(f"privacy_unit must come from privacy_unit_definition(), got "
                     f"{privacy_unit!r}")


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
class ChargeReceipt:
    """Proof of one committed charge, spent by exactly one query computation.

    Bound to the ledger file (resolved path), the charge key, its method, its canonical
    mechanisms (JSON) and the privacy unit it was charged under. ``consume_receipts`` checks
    all of them against the ledger and the computation and marks the key used; a copied or
    hand-made receipt can still only use a committed, unused charge, once.
    """

    ledger_path: str
    key: str
    method: str
    mechanisms: str
    privacy_unit: str


@dataclass(frozen=True)
class ChargeResult:
    """The accepted (or, with ``resumed``, previously accepted) charge and the total after it.

    ``receipt`` is what a query-time answer function needs (a resumed key's receipt is
    refused if that charge was already used).
    """

    entry: LedgerEntry
    resumed: bool
    spent: Spend
    receipt: ChargeReceipt

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
    # The query charges already used by a computation (one row per consumed receipt).
    "CREATE TABLE IF NOT EXISTS consumed (key TEXT PRIMARY KEY, consumed_at TEXT NOT NULL)",
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
            make_private_dirs(self.path.parent)
            create_private_file(self.path)
        self._lock = threading.RLock()
        try:
            self._db = connect(self.path, timeout_s=BUSY_TIMEOUT_S)
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
                                   ("created", utc_now())):
                    self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                                     (key, value))
        meta = self._meta()
        if meta.get("ledger") != LEDGER_KIND:
            raise LedgerError(f"{self.path}: not a corpus ledger (a build's state-directory "
                              "ledger is read with 'ledger show --state-dir')")
        if meta.get("schema_version") in _UPGRADABLE_SCHEMAS:
            self._upgrade()
            meta = self._meta()
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            raise LedgerError(f"{self.path}: corpus ledger schema {meta.get('schema_version')} "
                              f"is not {SCHEMA_VERSION}; it was written by another dpsynrag "
                              "version")

    def _upgrade(self) -> None:
        """Schema 1 -> 2 in one transaction (module docstring, "Migration").

        Adds the ``consumed`` table and marks every recorded query charge used: schema 1 code
        ran each query right after charging it, so none of them may pay for another
        computation. The privacy unit is left unrecorded: with charges, it is unknown until
        ``declare_privacy_unit``; without, the first charge records it.
        """
        with self._transaction():
            row = self._db.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None or row[0] not in _UPGRADABLE_SCHEMAS:
                return  # another process upgraded it first
            for statement in _TABLES:
                self._db.execute(statement)
            self._db.execute("INSERT OR IGNORE INTO consumed (key, consumed_at) "
                             "SELECT key, ? FROM charges WHERE kind = 'query'", (utc_now(),))
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                             (str(SCHEMA_VERSION),))

    def _meta(self) -> dict[str, str]:
        try:
            return dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError:  # no meta table: some other SQLite file
            return {}

    def _transaction(self) -> AbstractContextManager[None]:
        return write_transaction(self._db, self._lock)

    def _snapshot(self) -> AbstractContextManager[None]:
        return read_snapshot(self._db, self._lock)

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
            new = Cap(epsilon, delta, conversion.value, utc_now())
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

    # ------------------------------------------------------------------ privacy unit
    @property
    def privacy_unit(self) -> str | None:
        """The recorded privacy-unit definition (``privacy_unit_definition``), or None before
        the first charge (and for an upgraded schema 1 ledger until ``declare_privacy_unit``)."""
        with self._lock:
            return self._meta().get(_UNIT_META)

    def declare_privacy_unit(self, privacy_unit: str) -> None:
        """Record the unit of a ledger that has none: for an upgraded schema 1 ledger, the
        operator's statement of the unit its charges were made under (the one trusted input
        of the migration). The recorded unit again is a no-op; another raises
        ``PrivacyUnitMismatchError``."""
        privacy_unit = _check_unit(privacy_unit)
        with self._transaction():
            recorded = self._meta().get(_UNIT_META)
            if recorded is None:
                self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?)",
                                 (_UNIT_META, privacy_unit))
            elif recorded != privacy_unit:
                raise PrivacyUnitMismatchError(_unit_mismatch(self.path, recorded, privacy_unit))

    def _unit_problem(self, privacy_unit: str) -> str | None:
        """Why a charge under ``privacy_unit`` must be refused, or None (call under the lock)."""
        recorded = self._meta().get(_UNIT_META)
        if recorded is not None:
            return None if recorded == privacy_unit else \
                _unit_mismatch(self.path, recorded, privacy_unit)
        if self._db.execute("SELECT 1 FROM charges LIMIT 1").fetchone() is None:
            return None
        return (f"{self.path}: this corpus ledger holds charges from before privacy units were "
                "recorded; state the unit they were made under with 'dpsynrag ledger "
                "declare-unit --corpus-ledger PATH [--unit-column COL --unit-bound RULE]' "
                "before charging it again; nothing was charged")

    def check_query_allowed(self, privacy_unit: str, *, allow_no_cap: bool = False) -> None:
        """Raise what a query charge under ``privacy_unit`` would raise before its cost is
        checked (``PrivacyUnitMismatchError``, ``NoCapError``), charging nothing: lets a caller
        fail before it loads models or reads the corpus."""
        privacy_unit = _check_unit(privacy_unit)
        with self._snapshot():
            problem = self._unit_problem(privacy_unit)
            cap = self._read_cap()
        if problem is not None:
            raise PrivacyUnitMismatchError(problem)
        if cap is None and not allow_no_cap:
            raise NoCapError(_no_cap_message(self.path))

    # ------------------------------------------------------------------ charging
    def charge(self, key: str, *, kind: str, method: str,
               mechanisms: Sequence[Mapping[str, Any]], privacy_unit: str,
               description: str = "", allow_no_cap: bool = False) -> ChargeResult:
        """Charge ``mechanisms`` (each ``{"mechanism", "params", "count"}``) under ``key``.

        Call it BEFORE touching the private data. The cost is recomputed from the mechanisms'
        parameters. ``privacy_unit`` (required, from ``privacy_unit_definition``) is the unit
        the mechanisms protect; the first accepted charge records it in the ledger. Refused,
        with nothing recorded: a charge under another unit (``PrivacyUnitMismatchError``) and
        a query charge on a ledger without a cap unless ``allow_no_cap`` (``NoCapError``).
        Raises ``BudgetRefusedError`` (after recording the refusal) when the total would no
        longer fit the cap, and ``ChargeMismatchError`` when ``key`` was charged before with
        other mechanisms, kind or method. A key charged before with the same ones returns the
        stored charge (``resumed``) and charges nothing. The result's ``receipt`` is what a
        query-time answer function consumes (``consume_receipts``).
        """
        if not (isinstance(key, str) and key):
            raise ValueError("a charge needs a non-empty string key")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not (isinstance(method, str) and method):
            raise ValueError("a charge needs a non-empty method name")
        if not isinstance(description, str):
            raise ValueError("description must be a string")
        privacy_unit = _check_unit(privacy_unit)
        normalised = _normalise(mechanisms)
        rho, delta = spend_of(normalised)
        eps_dp, delta_dp = dp_spend_of(normalised)
        delta += delta_dp  # deltas add in either currency
        canonical = _canonical(normalised)
        receipt = ChargeReceipt(str(self.path.resolve()), key, method, canonical, privacy_unit)
        with self._transaction():
            problem = self._unit_problem(privacy_unit)
            if problem is not None:
                raise PrivacyUnitMismatchError(problem)
            cap = self._read_cap()
            if kind == "query" and cap is None and not allow_no_cap:
                raise NoCapError(_no_cap_message(self.path))
            row = self._db.execute(f"SELECT {_ENTRY_COLUMNS} FROM charges WHERE key = ?",
                                   (key,)).fetchone()
            if row is not None:
                entry = _entry(row)
                if (entry.kind, entry.method, _canonical(entry.mechanisms)) != (
                        kind, method, canonical):
                    raise ChargeMismatchError(
                        f"charge {key!r} was recorded as a {entry.kind} charge of "
                        f"{entry.method} with other mechanisms; a resumed run must keep its "
                        "plan (or use a new key)")
                total_rho, total_delta, total_eps = self._totals()
                return ChargeResult(entry, True, _spend(total_rho, total_delta, cap, total_eps),
                                    receipt)
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
                entry = self._record(key, kind, method, normalised, canonical, rho, delta,
                                     description, eps_dp, privacy_unit)
        if refusal is not None:  # raised after COMMIT, so that the refusal stays recorded
            raise BudgetRefusedError(refusal)
        return ChargeResult(entry, False, _spend(after_rho, after_delta, cap, after_eps),
                            receipt)

    def _record(self, key: str, kind: str, method: str, normalised: list[dict[str, Any]],
                canonical: str, rho: float, delta: float, description: str, eps_dp: float,
                privacy_unit: str) -> LedgerEntry:
        """Insert one accepted charge (inside ``charge``'s transaction); the first one also
        records the ledger's privacy unit."""
        now = utc_now()
        cursor = self._db.execute(
            "INSERT INTO charges (key, kind, method, mechanisms, rho, delta, "
            "description, charged_at, epsilon_dp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, kind, method, canonical, rho, delta, description, now, eps_dp))
        self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                         (_UNIT_META, privacy_unit))
        return LedgerEntry(int(cursor.lastrowid or 0), key, kind, method, normalised, rho,
                           delta, description, now, eps_dp)

    # ------------------------------------------------------------------ receipts
    def consume(self, receipts: Sequence[ChargeReceipt], *, method: str,
                mechanisms: Sequence[Mapping[str, Any]], privacy_unit: str) -> None:
        """Mark each receipt's charge used by one computation of ``method`` with
        ``mechanisms`` on a corpus bounded to ``privacy_unit``; all or none, in one transaction.

        Refuses (``ReceiptError``, nothing marked) a receipt of another ledger, an unknown key,
        a build charge, a charge already used (also twice in ``receipts``), and a receipt whose
        method, mechanisms or privacy unit differ from the computation's or from what the
        ledger recorded. Call it BEFORE touching the private data: the charge is then spent
        whatever happens next (never refunded).
        """
        privacy_unit = _check_unit(privacy_unit)
        canonical = _canonical(_normalise(mechanisms))
        here = str(self.path.resolve())
        for receipt in receipts:
            if not isinstance(receipt, ChargeReceipt):
                raise ReceiptError(f"expected a ChargeReceipt from CorpusLedger.charge, got "
                                   f"{type(receipt).__name__}")
            if receipt.ledger_path != here:
                raise ReceiptError(f"receipt {receipt.key!r} belongs to another corpus ledger "
                                   f"({receipt.ledger_path}), not {here}")
            if (receipt.method, receipt.mechanisms, receipt.privacy_unit) != (
                    method, canonical, privacy_unit):
                raise ReceiptError(f"receipt {receipt.key!r} was charged for another "
                                   f"computation than this {method} query (method, "
                                   "mechanisms or privacy unit differ); nothing was computed")
        now = utc_now()
        with self._transaction():
            recorded = self._meta().get(_UNIT_META)
            for receipt in receipts:
                self._consume_one(receipt, recorded, now)

    def _consume_one(self, receipt: ChargeReceipt, recorded_unit: str | None,
                     now: str) -> None:
        row = self._db.execute("SELECT kind, method, mechanisms FROM charges WHERE key = ?",
                               (receipt.key,)).fetchone()
        if row is None:
            raise ReceiptError(f"receipt {receipt.key!r}: no such charge in {self.path}; "
                               "nothing was computed")
        kind, method, mechanisms = row
        if kind != "query":
            raise ReceiptError(f"receipt {receipt.key!r} is a {kind} charge, not a query's")
        if (method, _canonical(json.loads(mechanisms)), recorded_unit) != (
                receipt.method, receipt.mechanisms, receipt.privacy_unit):
            raise ReceiptError(f"receipt {receipt.key!r} does not match its recorded charge "
                               "(method, mechanisms or privacy unit); nothing was computed")
        used = self._db.execute("INSERT OR IGNORE INTO consumed (key, consumed_at) "
                                "VALUES (?, ?)", (receipt.key, now))
        if used.rowcount != 1:
            raise ReceiptError(f"receipt {receipt.key!r} was already used by a computation; "
                               "each query charge pays for one computation (charge again)")

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
             cap.delta, cap.conversion, utc_now()))

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
        """Everything ``ledger show`` prints, as JSON-ready values (no private value exists).

        ``privacy_unit`` is the unit every charge protects (``privacy_unit_definition``)."""
        with self._snapshot():
            cap = self._read_cap()
            entries = self.entries()
            refusals = self.refusal_count()
            history = self.cap_history()
            unit = self._meta().get(_UNIT_META)
            used = int(self._db.execute("SELECT COUNT(*) FROM consumed").fetchone()[0])
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
            # charged but never computed (a refusal or a crash between charge and answer)
            "queries_unused": sum(e.kind == "query" for e in entries) - used,
            # None: no charge yet, or an upgraded schema 1 ledger awaiting declare_privacy_unit
            "privacy_unit": unit,
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


# ---------------------------------------------------------------------- receipts
def consume_receipts(receipts: Sequence[ChargeReceipt], *, questions: int, method: str,
                     mechanisms: Sequence[Mapping[str, Any]], privacy_unit: str,
                     corpus_ledger: str | Path | None) -> None:
    """The gate of every query-time answer function: one unused receipt per question.

    ``corpus_ledger`` is the ledger the private corpus being read is charged to
    (``PrivateCorpus.ledger_path``): a receipt of another corpus's ledger opens nothing, and
    a corpus bound to no ledger answers nothing. Checks that there are exactly ``questions``
    receipts, all of that ledger, then marks them
    used there (``CorpusLedger.consume``: all or none, one transaction). Raises
    ``ReceiptError`` before anything private is touched. Privacy: reads and writes only
    public ledger values (keys, methods, mechanism parameters).
    """
    if isinstance(receipts, ChargeReceipt) or not isinstance(receipts, Sequence):
        raise ReceiptError("receipts must be a list of ChargeReceipt, one per question "
                           "(charge each question with CorpusLedger.charge first)")
    if len(receipts) != questions:
        raise ReceiptError(f"{len(receipts)} receipt(s) for {questions} question(s): each "
                           "question needs its own committed charge; nothing was computed")
    if not receipts:
        return
    paths = {getattr(r, "ledger_path", None) for r in receipts}
    if len(paths) != 1 or not all(isinstance(r, ChargeReceipt) for r in receipts):
        raise ReceiptError("the receipts of one call must all be ChargeReceipts of one corpus "
                           "ledger")
    [path] = paths
    if corpus_ledger is None:
        raise ReceiptError("this private corpus is bound to no corpus ledger (load it with the "
                           "ledger its queries are charged to); nothing was computed")
    bound = str(Path(corpus_ledger).resolve())
    if path != bound:
        raise ReceiptError(f"the receipts were charged to {path}, but this private corpus is "
                           f"charged to {bound}: a receipt opens only its own corpus; nothing "
                           "was computed")
    try:
        ledger = CorpusLedger(str(path), create=False)
    except FileNotFoundError:
        raise ReceiptError(f"{path}: the receipts' corpus ledger does not exist; nothing was "
                           "computed") from None
    with ledger:
        ledger.consume(receipts, method=method, mechanisms=mechanisms,
                       privacy_unit=privacy_unit)


# ---------------------------------------------------------------------- helpers
def _unit_mismatch(path: Path, recorded: str, asked: str) -> str:
    return (f"{path}: this corpus ledger composes guarantees about the privacy unit "
            f"{recorded!r}; refusing a charge under {asked!r} (guarantees about different "
            "units do not compose): use the same --unit-column / --unit-bound as its other "
            "charges, or another ledger; nothing was charged")


def _no_cap_message(path: Path) -> str:
    return (f"{path}: this corpus ledger has no cap, and query-time charges need one: set it "
            f"with 'dpsynrag ledger cap --corpus-ledger {path} --epsilon E --delta D', or pass "
            "--no-cap (allow_no_cap=True) to accept an unbounded total; nothing was charged")


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


