"""The build's state directory: the ledger and the private intermediates that make resume work.

Layout (created 0700, files 0600, never inside the output directory)::

    STATE/ledger.sqlite        every release (dpsynrag.accounting.ledger)
    STATE/state.json           config fingerprint, finished stages (public bookkeeping)
    STATE/fingerprint.key      random key of the input's keyed hash
    STATE/<stage>.json         private intermediates (keywords, clusters, selections, texts)
    STATE/lock                 held (flock) while a build runs

Everything here except ``state.json`` is derived from the private data: delete it with
``--purge-state`` once the build is complete.

``BuildState.checkpoint`` is how a stage uses it: load the stage's stored output, else compute
it and store it before the next stage starts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from dpsynrag.io.private_files import write_private

STATE_VERSION = 1


class StateError(RuntimeError):
    """The state directory cannot be used for this build."""


def default_state_dir(out_dir: Path) -> Path:
    """``./.dpsynrag-state/<out name>-<hash of its absolute path>``: outside OUT, per OUT."""
    resolved = out_dir.expanduser().resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    return Path.cwd() / ".dpsynrag-state" / f"{resolved.name}-{digest}"


def _exclusive_lock(path: Path, held_message: str) -> IO[str]:
    """``path`` opened and flock-ed exclusively (held until ``_release`` or the process
    ends); ``StateError(held_message)`` when another process holds it."""
    handle = open(path, "a")  # noqa: SIM115 - held open while the lock is held
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StateError(held_message) from None
    return handle


def _release(handle: IO[str]) -> None:
    if not handle.closed:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def output_lock_path(out_dir: Path) -> Path:
    """The lock file of an output directory: ``<parent>/.<name>.dpsynrag-lock``."""
    out = out_dir.expanduser().absolute()
    return out.with_name(f".{out.name}.dpsynrag-lock")


class OutputLock:
    """An exclusive lock on an output directory's name, held while a build may write it:
    ``<parent>/.<name>.dpsynrag-lock`` (flock, released when the process ends). Two builds to
    one ``-o``, even with different state directories, cannot both run; the second is refused
    before it spends anything. The lock file stays (removing it would race a waiting build)."""

    def __init__(self, out_dir: Path) -> None:
        out = out_dir.expanduser().absolute()
        self.path = output_lock_path(out_dir)
        self._handle = _exclusive_lock(self.path, f"{out}: another build is writing this "
                                                  f"output directory (lock {self.path.name} held)")

    def close(self) -> None:
        _release(self._handle)

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BuildState:
    """Open (or create) a state directory for a build with the given config fingerprint."""

    def __init__(self, directory: Path, config_fingerprint: str, out_dir: Path) -> None:
        self.directory = directory.expanduser().resolve()
        out = out_dir.expanduser().resolve()
        if self.directory == out or out in self.directory.parents:
            raise StateError(f"{self.directory}: the state directory must not be inside the "
                             "output directory (it holds private intermediates)")
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)
        self._lock_handle = _exclusive_lock(
            self.directory / "lock",
            f"{self.directory}: another build is using this state directory (lock held)")
        self._meta_path = self.directory / "state.json"
        meta = self._read_meta()
        if meta is None:
            meta = {"version": STATE_VERSION, "config_fingerprint": config_fingerprint,
                    "finished": []}
            self._meta = meta
            self._save_meta()
        elif meta.get("config_fingerprint") != config_fingerprint:
            self.close()
            raise StateError(
                f"{self.directory}: this state directory belongs to a build with a different "
                "configuration (or made by another version of the facts rules); rerun with the "
                "same options, or use a new --state-dir (a fresh build spends a fresh budget)")
        self._meta = meta
        #: seconds per build stage in this run (loading or computing), for the summary
        self.stage_seconds: dict[str, float] = {}

    @property
    def ledger_path(self) -> Path:
        return self.directory / "ledger.sqlite"

    @property
    def resumed(self) -> bool:
        return bool(self._meta["finished"]) or self.ledger_path.exists()

    def _read_meta(self) -> dict[str, Any] | None:
        if not self._meta_path.exists():
            return None
        try:
            return json.loads(self._meta_path.read_text())
        except json.JSONDecodeError:
            raise StateError(f"{self._meta_path}: corrupt state file") from None

    def _save_meta(self) -> None:
        write_private(self._meta_path, json.dumps(self._meta, indent=1).encode())

    # ------------------------------------------------------------------ stages
    def save(self, name: str, value: Any) -> None:
        """Store a private intermediate as JSON (0600)."""
        write_private(self.directory / f"{name}.json", json.dumps(value).encode())

    def load(self, name: str) -> Any | None:
        """The intermediate stored as ``name``, or None when no run has stored it yet."""
        path = self.directory / f"{name}.json"
        if not path.exists():
            return None
        return json.loads(path.read_text())

    def checkpoint(self, name: str, compute: Callable[[], Any], *,
                   stage: str | None = None) -> Any:
        """Stage output ``name``: read back when a previous run stored it, else
        ``compute()``-d, stored (``<name>.json``, 0600), and returned.

        Privacy: a stage's output is computed at most once per state directory. What an
        interrupted run stored (its released values and the private intermediates they were
        computed from) is read back by every later run and never recomputed, so no noise is
        redrawn and a resumed build releases exactly what an uninterrupted one does; the
        releases inside ``compute`` go through the ledger, which answers a released key with
        its stored value in the same way. The value returned is always the file as read back
        (JSON: tuples become lists), so a first run and a resumed run go on from the same value.

        The seconds spent here (loading, or computing and storing) are added to
        ``stage_seconds[stage]``; without ``stage`` the caller times the enclosing stage.
        """
        with self.timed(stage):
            stored = self.load(name)
            if stored is None:
                self.save(name, compute())
                stored = self.load(name)
            return stored

    @contextmanager
    def timed(self, stage: str | None) -> Iterator[None]:
        """Add the seconds of the ``with`` body to ``stage_seconds[stage]`` (None: not timed)."""
        started = time.monotonic()
        yield
        if stage is not None:
            self.stage_seconds[stage] = (self.stage_seconds.get(stage, 0.0)
                                         + time.monotonic() - started)

    def fingerprint_key(self) -> bytes:
        """A random key for the input's keyed hash, created once per state directory."""
        path = self.directory / "fingerprint.key"
        if not path.exists():
            write_private(path, secrets.token_bytes(32))
        return path.read_bytes()

    def purge(self) -> None:
        """Delete the state directory (private intermediates and ledger) after a build."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def close(self) -> None:
        _release(self._lock_handle)

    def __enter__(self) -> BuildState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
