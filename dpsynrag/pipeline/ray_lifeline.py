"""The processes of a local Ray cluster end with the build that started them, even after
``kill -9`` of the build.

A local cluster that ``RayRunner`` starts is a tree of processes: the GCS server, the raylet,
the dashboard, the monitor and the log monitor are the driver's children, and Ray ties them to
it on Linux (``PR_SET_PDEATHSIG``); the raylet's children are two agents
(``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) and the workers. When the driver is killed
the raylet dies with it and its workers notice within seconds, but the two agents, which log
"Raylet is dead" at once, exit about a minute later (61 s measured with Ray 2.60: their last
report goes to the GCS server, dead too; runbooks/ray-cluster.md, "When a build fails on the
cluster").

The lifeline is a small process (this file, standard library only) that the driver starts
before ``ray.init`` (:meth:`Lifeline.start`). It waits on a pipe from the driver and checks
that the driver is still its parent. When the pipe ends or the parent changes without a word
(the driver died, however), or when the runner closes and asks for it (:meth:`Lifeline.close`),
it stops the processes of that Ray session: SIGTERM, then SIGKILL after
:data:`GRACE_SECONDS`. When the driver died and its temp dir was a temporary one (``r`` in
its own ``mkdtemp`` directory, which the runner removes when it closes), the lifeline removes
it: Ray's logs and spilled objects may hold private intermediates.

A process of the session is one of this user's that holds a file of the session directory open
(every Ray process writes its logs there) and is a Ray process: a ``ray::`` title, or one of
its first arguments inside Ray's package (``gcs_server``, ``raylet``, Ray's Python scripts).
So an operator's ``tail -f`` of a session log is left alone, and so is every other session:
an earlier run's in the same state directory, the one that a resumed build starts there next,
and any other user's Ray. Linux only (``/proc``); elsewhere there is no lifeline.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterable
from pathlib import Path

POLL_SECONDS = 0.2  # how often the lifeline checks that the driver is still its parent
GRACE_SECONDS = 2.0  # between SIGTERM and SIGKILL
SESSION_PREFIX = "session_"


def supported() -> bool:
    """True where the lifeline can find a session's processes (Linux's ``/proc``)."""
    return sys.platform.startswith("linux") and Path("/proc/self/fd").is_dir()


def _arguments(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_ray(arguments: list[str], ray_dirs: Collection[str]) -> bool:
    if not arguments:
        return False
    if arguments[0].startswith("ray::"):  # a Ray worker's or agent's title
        return True
    return any(arg.startswith(prefix) for arg in arguments[:3] for prefix in ray_dirs)


def _holds_file_under(pid: int, prefix: str) -> bool:
    links = [f"/proc/{pid}/cwd"]
    try:
        links += [entry.path for entry in os.scandir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    for link in links:
        try:
            if os.readlink(link).startswith(prefix):
                return True
        except OSError:
            continue
    return False


def _prefixes(path: Path) -> set[str]:
    return {str(path).rstrip(os.sep) + os.sep, os.path.realpath(path).rstrip(os.sep) + os.sep}


def session_processes(session_dir: Path, ray_dir: Path, *,
                      exclude: Collection[int] = ()) -> list[int]:
    """This user's Ray processes that hold a file under ``session_dir`` open (or work in it),
    except ``exclude`` and this process."""
    session = os.path.realpath(session_dir).rstrip(os.sep) + os.sep  # what /proc links show
    ray_dirs = _prefixes(ray_dir)
    uid, me = os.getuid(), os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me or pid in exclude:
            continue
        try:
            if entry.stat().st_uid != uid or not _is_ray(_arguments(pid), ray_dirs):
                continue
        except OSError:  # gone meanwhile
            continue
        if _holds_file_under(pid, session):
            found.append(pid)
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended: only its parent's wait is missing


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):  # ended meanwhile
            os.kill(pid, sig)


def stop_session(session_dir: Path, ray_dir: Path, *, exclude: Collection[int] = (),
                 grace: float = GRACE_SECONDS) -> list[int]:
    """Stop the Ray processes of ``session_dir`` (:func:`session_processes`): SIGTERM, and
    SIGKILL for those still there after ``grace`` seconds; a few rounds, for a process that a
    dying raylet started meanwhile. Returns the pids signalled."""
    stopped: list[int] = []
    for _ in range(3):
        pids = session_processes(session_dir, ray_dir, exclude=exclude)
        if not pids:
            break
        stopped += pids
        _signal(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.05)
        _signal([pid for pid in pids if _alive(pid)], signal.SIGKILL)
    return stopped


def _sessions(temp_dir: Path) -> set[Path]:
    try:
        return {entry for entry in temp_dir.iterdir()
                if entry.name.startswith(SESSION_PREFIX) and not entry.is_symlink()}
    except OSError:
        return set()


def _named_after(driver: int, temp_dir: Path) -> set[Path]:
    """The sessions in ``temp_dir`` that ``ray.init`` named after a caller of pid ``driver``."""
    return {path for path in _sessions(temp_dir) if path.name.endswith(f"_{driver}")}


def watch(driver: int, temp_dir: Path, ray_dir: Path, commands: int = 0, *,
          remove: bool = False) -> str:
    """The lifeline's loop: read ``known NAME``, ``session PATH`` and ``stop`` lines from
    ``commands`` (the driver's pipe) until ``stop``, the pipe's end or a new parent; then stop
    the session.

    Before ``session PATH`` arrives (the driver died inside ``ray.init``), the session is the
    one that ``ray.init`` names after its caller (``session_..._<driver pid>``) and that the
    driver did not list as ``known`` before ``ray.init`` (an earlier process with the same
    pid). ``remove``: the driver died: remove ``temp_dir`` and its parent (a temporary
    directory's ``mkdtemp`` parent, which nothing else uses). Returns why it stopped."""
    known: set[str] = set()
    session: Path | None = None
    pending = b""
    reason = "the driver is gone"
    while True:
        ready, _, _ = select.select([commands], [], [], POLL_SECONDS)
        if ready:
            chunk = os.read(commands, 4096)
            if not chunk:  # every copy of the driver's end is closed
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            words = [line.decode(errors="replace").partition(" ") for line in lines]
            for command, _, argument in words:
                if command == "session":
                    session = Path(argument)
                elif command == "known":
                    known.add(argument)
            if any(command == "stop" for command, _, _ in words):
                reason = "the runner closed"
                break
        elif os.getppid() != driver:  # a forked child of the driver may hold the pipe open
            break
    sessions = [session] if session is not None else sorted(
        path for path in _named_after(driver, temp_dir) if path.name not in known)
    for path in sessions:
        stop_session(path, ray_dir, exclude={driver})
    if remove and reason == "the driver is gone":
        shutil.rmtree(temp_dir.parent, ignore_errors=True)
    return reason


class Lifeline:
    """The driver's end: start the lifeline, tell it the session, close it."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @classmethod
    def start(cls, temp_dir: Path, *, temporary: bool = False) -> Lifeline | None:
        """Start a lifeline for the local Ray cluster about to start in ``temp_dir``; None
        where it cannot work (not Linux). ``temporary``: ``temp_dir`` is ``r`` in a
        ``mkdtemp`` directory of its own, removed if the driver dies."""
        if not supported():
            return None
        import importlib.util

        try:
            spec = importlib.util.find_spec("ray")
        except ValueError:  # a module named ray without a spec (a stand-in): no files to watch
            return None
        if spec is None or spec.origin is None:
            return None
        # a session of its own (setsid): a signal to the build's process group (Ctrl-C, a
        # scheduler's kill of the group) leaves it to see the driver end; -I: the standard
        # library only, whatever the environment
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()),
                 str(temp_dir), str(Path(spec.origin).parent),
                 "remove" if temporary else "keep"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
        except OSError:  # no interpreter to run it: the build goes on as Ray alone leaves it
            return None
        lifeline = cls(process)
        for path in sorted(_named_after(os.getpid(), temp_dir)):  # not the one to come
            lifeline._send(f"known {path.name}")
        return lifeline

    def _send(self, line: str) -> None:
        stdin = self.process.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
        except OSError:  # the lifeline is gone: nothing to tell
            pass

    def session(self, session_dir: str | Path) -> None:
        """The session that ``ray.init`` started (``RayContext.address_info``)."""
        self._send(f"session {session_dir}")

    def close(self, timeout: float = 30.0) -> None:
        """After ``ray.shutdown``: the lifeline stops what is left of the session, and ends."""
        self._send("stop")
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    for ignored in (signal.SIGINT, signal.SIGHUP):
        signal.signal(ignored, signal.SIG_IGN)
    watch(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), remove=sys.argv[4] == "remove")
