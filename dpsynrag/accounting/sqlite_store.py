"""The SQLite set-up both ledgers share: owner-only files, durable connections, transactions.

A ledger file is created 0600 before SQLite opens it (SQLite would create it with the umask's
mode); every connection runs in autocommit mode with explicit transactions, waits for other
writers (``busy_timeout``), and commits durably (``journal_mode=WAL``, ``synchronous=FULL``;
an in-memory ledger journals in memory).
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "connect",
    "create_private_file",
    "make_private_dirs",
    "read_snapshot",
    "utc_now",
    "write_transaction",
]

DEFAULT_TIMEOUT_S = 5.0  # sqlite3's own default wait for a locked database


def utc_now() -> str:
    """The current UTC time as ISO 8601 with microseconds (the ledgers' timestamps)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each with mode 0700."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (its directory must exist)."""
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def connect(path: Path | None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> sqlite3.Connection:
    """A durable autocommit connection to the ledger at ``path`` (None: in memory)."""
    db = sqlite3.connect(":memory:" if path is None else str(path), timeout=timeout_s,
                         isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
    db.execute("PRAGMA journal_mode=WAL" if path is not None else "PRAGMA journal_mode=MEMORY")
    db.execute("PRAGMA synchronous=FULL")
    return db


@contextmanager
def write_transaction(db: sqlite3.Connection, lock: threading.RLock) -> Iterator[None]:
    """One write transaction; BEGIN IMMEDIATE takes the write lock before the first read.
    Rolled back when the body (or the commit) raises."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


@contextmanager
def read_snapshot(db: sqlite3.Connection, lock: threading.RLock) -> Iterator[None]:
    """One read transaction: every read inside sees the same committed state."""
    with lock:
        db.execute("BEGIN")
        try:
            yield
        finally:
            db.execute("COMMIT")
