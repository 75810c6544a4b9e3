"""Shared test set-up: no test writes to the real config directory (keys, corpus ledgers)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "dpsynrag-config"))
