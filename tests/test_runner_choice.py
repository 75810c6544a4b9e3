"""``--runner auto`` (the default): Ray only where a build runs the language model or is
given a Ray cluster; a facts build with the template writer runs in one process."""

from __future__ import annotations

import pytest

from dpsynrag.pipeline.build import make_runner
from dpsynrag.pipeline.config import BuildConfig, ConfigError
from dpsynrag.pipeline.runners import LocalRunner


@pytest.mark.parametrize(("options", "expected"), [
    ({}, "local"),  # the default facts build: only embeds its texts
    ({"generate": "tokens"}, "ray"),
    ({"writer": "tokens"}, "ray"),
    ({"ray_address": "ray://head:10001"}, "ray"),
    ({"runner": "ray"}, "ray"),
    ({"runner": "local", "generate": "tokens"}, "local"),
])
def test_auto_picks_ray_only_for_model_work_or_a_given_cluster(
        options: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = BuildConfig(**options)  # type: ignore[arg-type]
    assert config.runner == options.get("runner", "auto")
    assert config.resolved_runner == expected


def test_auto_attaches_inside_a_ray_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert BuildConfig().resolved_runner == "ray"


def test_the_default_facts_build_gets_a_local_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert isinstance(make_runner(BuildConfig()), LocalRunner)


def test_an_unknown_runner_is_refused() -> None:
    with pytest.raises(ConfigError, match="--runner must be 'auto', 'ray' or 'local'"):
        BuildConfig(runner="spark").validate()
