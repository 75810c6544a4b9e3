"""Issue 13 item 7: private data never lands in world-readable places (Ray's local files)."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

from dpsynrag.pipeline import runners


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ray_temp_dir_is_private_and_inside_a_short_state_dir() -> None:
    state = Path(tempfile.mkdtemp(prefix="st"))  # /tmp/stXXXXXXXX: short enough for sockets
    try:
        path, temporary = runners.private_ray_temp_dir(state)
        assert path == state.resolve() / "ray" and not temporary
        assert _mode(path) == 0o700
    finally:
        shutil.rmtree(state)


def test_ray_temp_dir_for_a_long_state_dir_is_a_private_temporary_dir(tmp_path: Path) -> None:
    long_state = tmp_path / ("x" * 60) / "state"
    path, temporary = runners.private_ray_temp_dir(long_state)
    try:
        assert temporary
        assert _mode(path) == 0o700
        assert _mode(path.parent) == 0o700  # what Ray makes 0777 below it stays private
        assert len(str(path)) <= runners._RAY_TEMP_DIR_MAX_CHARS
    finally:
        shutil.rmtree(path.parent)


class _FakeRay(types.ModuleType):
    """Enough of ``ray`` for RayRunner.__init__/close: records ray.init's arguments."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.init_kwargs: dict[str, Any] = {}
        self.initialized = False

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs: Any) -> None:
        self.init_kwargs = kwargs
        self.initialized = True
        if "_temp_dir" in kwargs:  # as Ray 2.x does (ray._common.utils.try_to_create_directory)
            os.chmod(kwargs["_temp_dir"], 0o777)

    def shutdown(self) -> None:
        self.initialized = False

    def available_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": {"CPU": 2.0}}]

    def remote(self, cls: Any) -> Any:
        temp_dir = self.init_kwargs.get("_temp_dir")

        class _Handle:
            def options(self, **_: Any) -> Any:
                return self

            def remote(self, *_: Any) -> Any:
                if temp_dir is not None:  # so does each worker process Ray starts
                    os.chmod(temp_dir, 0o777)
                return types.SimpleNamespace(ping=types.SimpleNamespace(remote=lambda: None))

        return _Handle()

    def get(self, refs: Any) -> Any:
        return refs

    def kill(self, _actor: Any) -> None:
        pass


@pytest.mark.parametrize("long_path", [False, True])
def test_a_local_ray_cluster_is_started_in_a_private_temp_dir(tmp_path: Path, monkeypatch: Any,
                                                               long_path: bool) -> None:
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    state = Path(("y" * 60) if long_path else "st")
    runner = runners.RayRunner(state_dir=state)
    temp_dir = Path(fake.init_kwargs["_temp_dir"])
    assert _mode(temp_dir) == 0o700
    runner.close()
    if long_path:  # the mkdtemp directory is removed when the runner closes
        assert not temp_dir.exists() and not temp_dir.parent.exists()


def test_connecting_to_a_cluster_does_not_set_a_temp_dir(monkeypatch: Any) -> None:
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    runners.RayRunner(address="ray://head:10001").close()
    assert "_temp_dir" not in fake.init_kwargs


def test_the_summary_json_is_written_owner_only_even_over_a_readable_file(tmp_path) -> None:
    from dpsynrag.cli.build_report import write_private_text

    path = tmp_path / "summary.json"
    path.write_text("old")
    os.chmod(path, 0o644)
    write_private_text(path, '{"documents_in": 40}\n')
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text() == '{"documents_in": 40}\n'
