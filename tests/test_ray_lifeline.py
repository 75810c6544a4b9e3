"""A local Ray cluster's processes end with the build that started it, also after ``kill -9``
(``pipeline.ray_lifeline``).

Without Ray: stand-in processes (a ``ray::`` title, or a script in a stand-in Ray package) that
hold a log file of a stand-in session open, beside processes that must be left alone (an
operator's ``tail -f`` of the same log, a Ray process of another session of the same temp
dir); a stand-in driver that starts the lifeline and is killed, or closes it. With Ray (slow): a
``RayRunner`` in a driver process killed with SIGKILL; every process of its session is gone
within seconds (Ray 2.60 alone: its two agents stay about a minute, runbooks/ray-cluster.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dpsynrag.pipeline import ray_lifeline
from dpsynrag.pipeline.ray_lifeline import session_processes, stop_session

pytestmark = pytest.mark.skipif(not ray_lifeline.supported(), reason="Linux /proc only")


def _alive(pid: int) -> bool:
    return ray_lifeline._alive(pid)


def _wait(condition: Callable[[], bool], seconds: float) -> float:
    """Seconds until ``condition()`` held; fails after ``seconds``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not within {seconds} s")
        time.sleep(0.05)
    return time.monotonic() - start


class Processes:
    """Stand-in processes, each in a session of its own (a driver's kill leaves them); every
    one left is killed at the end of the test."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def title(self, title: str, log: Path) -> int:
        """A process titled ``title`` (argv[0], as Ray's workers and agents set it) whose
        stdout is ``log``."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            process = subprocess.Popen(["bash", "-c", f'exec -a "{title}" sleep 120'],
                                       stdout=out, start_new_session=True)
        self.started.append(process)
        return process.pid

    def run(self, args: list[str], log: Path) -> int:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            process = subprocess.Popen(args, stdout=out, start_new_session=True)
        self.started.append(process)
        return process.pid

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait()


@pytest.fixture
def processes() -> Iterator[Processes]:
    started = Processes()
    try:
        yield started
    finally:
        started.close()


def _fake_ray(root: Path) -> Path:
    """A stand-in Ray package directory with a script that sleeps (as gcs_server would)."""
    ray_dir = root / "site-packages" / "ray"
    ray_dir.mkdir(parents=True)
    (ray_dir / "gcs.py").write_text("import time\ntime.sleep(120)\n")
    return ray_dir


def _started(pids: list[int]) -> None:
    """Wait until each process has exec'd (its title and files are in place)."""
    for pid in pids:
        _wait(lambda pid=pid: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")
              or b"gcs.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
              or b"tail" in Path(f"/proc/{pid}/cmdline").read_bytes(), 10)


def test_stopping_a_session_stops_its_ray_processes_only(tmp_path: Path,
                                                        processes: Processes) -> None:
    ray_dir = _fake_ray(tmp_path)
    temp = tmp_path / "state" / "ray"
    session, other = temp / "session_1_100", temp / "session_2_200"
    agent = processes.title("ray::DashboardAgent", session / "logs" / "dashboard_agent.out")
    head = processes.run([sys.executable, str(ray_dir / "gcs.py")],
                         session / "logs" / "gcs_server.out")
    # left alone: an operator's tail of the session's log; a Ray process of another session
    tail = processes.run(["tail", "-f", str(session / "logs" / "gcs_server.out")],
                         tmp_path / "tail.out")
    elsewhere = processes.title("ray::RuntimeEnvAgent", other / "logs" / "agent.out")
    _started([agent, head, tail, elsewhere])
    assert session_processes(session, ray_dir) == sorted([agent, head])
    assert session_processes(session, ray_dir, exclude={head}) == [agent]
    assert sorted(stop_session(session, ray_dir, grace=1.0)) == sorted([agent, head])
    _wait(lambda: not _alive(agent) and not _alive(head), 5)
    assert _alive(tail) and _alive(elsewhere)
    assert session_processes(session, ray_dir) == []


DRIVER = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    from dpsynrag.pipeline.ray_lifeline import Lifeline
    temp, tell, how = Path(sys.argv[1]), sys.argv[2] == "tell", sys.argv[3]
    temporary = sys.argv[4] == "temporary"  # temp is r in a directory of its own
    def agent(session):  # a Ray agent of ``session``, which logs into it
        (session / "logs").mkdir(parents=True)
        with (session / "logs" / "agent.out").open("wb") as out:
            return subprocess.Popen(["bash", "-c", 'exec -a "ray::DashboardAgent" sleep 120'],
                                    stdout=out, start_new_session=True).pid
    # an earlier run's session in this temp dir, by a process that had this pid: left alone
    earlier = agent(temp / f"session_2025-01-01_00-00-00_000000_{os.getpid()}")
    lifeline = Lifeline.start(temp, temporary=temporary)
    # what ray.init does: a session named after its caller, processes that log into it
    session = temp / f"session_2026-01-01_00-00-00_000000_{os.getpid()}"
    ours = agent(session)
    if tell:
        lifeline.session(session)
    print(lifeline.process.pid, ours, earlier, flush=True)
    if how == "close":
        sys.stdin.readline()
        lifeline.close()
        print("closed", flush=True)
    time.sleep(120)
""")


@pytest.mark.parametrize("tell,temporary", [
    ("tell", "kept"),  # a state directory's STATE/ray: kept for the resumed build
    ("silent", "temporary"),  # killed inside ray.init; a mkdtemp directory: removed
])
def test_the_lifeline_stops_the_session_when_its_driver_is_killed(
        tmp_path: Path, tell: str, temporary: str) -> None:
    temp = tmp_path / "state" / "ray"
    started: list[int] = []
    try:
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(temp), tell, "kill",
                                   temporary], stdout=subprocess.PIPE, start_new_session=True)
        assert driver.stdout is not None
        lifeline, agent, earlier = (int(word) for word in driver.stdout.readline().split())
        started += [lifeline, agent, earlier]
        _started([agent, earlier])
        assert _alive(lifeline) and _alive(agent)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        seconds = _wait(lambda: not _alive(agent) and not _alive(lifeline), 10)
        assert seconds < 5
        assert _alive(earlier)  # another session: only its directory is gone if temporary
        assert temp.parent.exists() == (temporary == "kept")
    finally:
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_closing_the_lifeline_stops_what_the_shutdown_left(tmp_path: Path) -> None:
    temp = tmp_path / "state" / "ray"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(temp), "tell", "close",
                               "temporary"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              start_new_session=True)
    assert driver.stdin is not None and driver.stdout is not None
    started: list[int] = []
    try:
        lifeline, agent, earlier = (int(word) for word in driver.stdout.readline().split())
        started += [lifeline, agent, earlier]
        _started([agent, earlier])
        driver.stdin.write(b"close\n")
        driver.stdin.flush()
        assert driver.stdout.readline() == b"closed\n"  # close() returned: all of it is done
        assert not _alive(agent) and not _alive(lifeline)
        assert driver.poll() is None and _alive(earlier)  # the driver itself goes on
        assert temp.exists()  # the runner removes its temporary directory itself, after
    finally:
        driver.kill()
        driver.wait()
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------- with Ray
RAY_DRIVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import ray
    from dpsynrag.pipeline.runners import RayRunner
    runner = RayRunner(sys.argv[1], sys.argv[2], workers=1, device="cpu",
                       state_dir=Path(sys.argv[3]))
    print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
    time.sleep(300)
""")


@pytest.mark.slow
def test_a_killed_ray_build_leaves_no_ray_process(tmp_path: Path) -> None:
    """kill -9 of a driver whose RayRunner started a local cluster: every process of that
    session (raylet, GCS, agents, the model actor) is gone within seconds."""
    ray = pytest.importorskip("ray")
    from test_private_prediction import SPECIALS, WORDS
    from tiny_models import save_tiny_embedder, save_tiny_llm

    llm = save_tiny_llm(tmp_path / "llm", WORDS, specials=SPECIALS)
    embedder = save_tiny_embedder(tmp_path / "embedder", WORDS)
    state = tmp_path / "state"  # too long for Ray's sockets: a mkdtemp directory instead
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen([sys.executable, "-c", RAY_DRIVER, str(llm), str(embedder),
                               str(state)], stdout=subprocess.PIPE, env=env,
                              start_new_session=True)
    ray_dir = Path(ray.__file__).parent
    session: Path | None = None
    try:
        assert driver.stdout is not None
        session = Path(driver.stdout.readline().decode().strip())
        assert session.name.startswith("session_") and session.is_dir()
        before = session_processes(session, ray_dir)
        titles = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in before]
        assert any(t.startswith(b"ray::ModelWorker") for t in titles)
        assert any(t.startswith(b"ray::DashboardAgent") for t in titles)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        seconds = _wait(lambda: not session_processes(session, ray_dir), 20)
        print(f"{len(before)} processes of the session, all gone {seconds:.1f} s after kill -9")
        assert seconds < 10
        # its temp dir was a mkdtemp one (tmp_path is too long for Ray's sockets): removed
        _wait(lambda: not session.parent.parent.exists(), 5)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if session is not None:
            stop_session(session, ray_dir, grace=0.5)
