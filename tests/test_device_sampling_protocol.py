"""Device-side token sampling through the runner (issue 17): the worker asks the driver for
each step's uniforms, computes the tokens itself and reports them; the ledger charges before
it draws and stores every token. It must release exactly what host-side sampling releases:
the same tokens, texts, ledger values and rho, on a fresh and on a resumed ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_private_prediction import tiny_llm

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.pipeline import worker as worker_module
from dpsynrag.pipeline.config import ConfigError, make_config
from dpsynrag.pipeline.runners import LocalRunner
from dpsynrag.transforms.prediction_release import GROUP, LedgerTokenSampler

PROMPT = "Rephrase: {document}"
GROUPS = [["alpha beta gamma delta", "beta gamma delta alpha", "gamma alpha"],
          ["delta delta beta", "alpha gamma"],
          ["beta alpha gamma delta beta", "gamma", "delta alpha", "alpha beta"]]
CLIP, TEMPERATURE = 1.0, 0.5  # c/tau = 2: peaked enough that EOS may come early


class _NoEmbedder:
    dimension = 4


def _predict(runner: LocalRunner, ledger: Ledger, mode: str, tokens: int,
             eos: list[int]) -> tuple[list[str], LedgerTokenSampler]:
    sampler = LedgerTokenSampler(ledger, list(range(len(GROUPS))), clip=CLIP,
                                 temperature=TEMPERATURE, max_new_tokens=tokens, eos_ids=eos)
    texts = runner.predict(GROUPS, sampler, prompt=PROMPT, max_new_tokens=tokens, clip=CLIP,
                           temperature=TEMPERATURE, batch_rows=None, token_sampling=mode)
    sampler.charge_unfinished()
    return texts, sampler


def _values(ledger: Ledger) -> dict[str, Any]:
    return {release.key: ledger.released_value(release.key) for release in ledger.releases()}


def _ledger(path: Path | None, seed: int) -> Ledger:
    ledger = Ledger(path, rng=RandomSource(seed=seed))
    if GROUP not in ledger.parallel_groups():
        ledger.declare_parallel_group(GROUP, 1, "test clusters")
    return ledger


@pytest.fixture(scope="module")
def runner() -> LocalRunner:
    return LocalRunner(tiny_llm(), _NoEmbedder())  # type: ignore[arg-type]


def _eos(runner: LocalRunner) -> list[int]:
    return list(runner.worker.llm.eos_token_ids)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_device_sampling_releases_exactly_what_host_sampling_releases(
        runner: LocalRunner, seed: int) -> None:
    host_ledger, device_ledger = _ledger(None, seed), _ledger(None, seed)
    host_texts, host = _predict(runner, host_ledger, "host", 6, _eos(runner))
    device_texts, device = _predict(runner, device_ledger, "device", 6, _eos(runner))
    assert device_texts == host_texts
    assert device.steps == host.steps and all(device.finished)
    assert _values(device_ledger) == _values(host_ledger)
    assert any(key.endswith("/token/000") for key in _values(host_ledger))
    assert device_ledger.total_rho() == pytest.approx(host_ledger.total_rho(), rel=1e-12)
    assert device_ledger.total_rho() == pytest.approx(6 * (CLIP / TEMPERATURE)
                                                      ** 2 / 2, rel=1e-9)


class _Crash(Exception):
    pass


def _crash_after(calls: int, method: str) -> type[LedgerTokenSampler]:
    """A sampler whose ``method`` raises on its ``calls + 1``-th call (a driver crash)."""
    count = [0]

    class Crashing(LedgerTokenSampler):
        pass

    original = getattr(LedgerTokenSampler, method)

    def crashing(self: LedgerTokenSampler, *args: Any) -> Any:
        count[0] += 1
        if count[0] > calls:
            raise _Crash
        return original(self, *args)

    setattr(Crashing, method, crashing)
    return Crashing


def _crashed_run(runner: LocalRunner, path: Path, mode: str, method: str) -> None:
    ledger = _ledger(path, 7)
    sampler = _crash_after(2, method)(ledger, list(range(len(GROUPS))), clip=CLIP,
                                      temperature=TEMPERATURE, max_new_tokens=5,
                                      eos_ids=_eos(runner))
    with pytest.raises(_Crash):
        runner.predict(GROUPS, sampler, prompt=PROMPT, max_new_tokens=5, clip=CLIP,
                       temperature=TEMPERATURE, batch_rows=None, token_sampling=mode)
    ledger.close()


def test_a_resumed_build_reuses_the_stored_tokens_in_either_mode(runner: LocalRunner,
                                                                  tmp_path: Path) -> None:
    """A host run crashes after two steps; resuming on its ledger must take the stored tokens
    as they are and draw only the rest, with the same result in both modes."""
    results = {}
    for mode in ("host", "device"):
        path = tmp_path / f"{mode}.sqlite"
        _crashed_run(runner, path, "host", "__call__")
        stored = _values(_ledger(path, 0))
        assert stored and all(key.split("/")[-1] in ("000", "001") for key in stored)
        resumed = _ledger(path, 8)
        texts, _sampler = _predict(runner, resumed, mode, 5, _eos(runner))
        values = _values(resumed)
        assert all(values[key] == value for key, value in stored.items())
        assert resumed.total_rho() == pytest.approx(5 * (CLIP / TEMPERATURE)
                                                    ** 2 / 2, rel=1e-9)
        results[mode] = (texts, values)
    assert results["device"] == results["host"]


def test_a_crash_between_draw_and_record_leaves_charged_draws_that_resume_once(
        runner: LocalRunner, tmp_path: Path) -> None:
    """Device mode: the driver crashes after the third step's uniforms were drawn (charged)
    and before its tokens were stored. Those keys stay charged with no value; the resumed
    build draws each once more as its first stored use and charges nothing twice."""
    path = tmp_path / "ledger.sqlite"
    _crashed_run(runner, path, "device", "record")
    crashed = _ledger(path, 0)
    releases = crashed.releases()
    without_value = [r.key for r in releases if not r.released]
    assert without_value and all(key.endswith("/token/002") for key in without_value)
    rho = crashed.total_rho()
    crashed.close()
    resumed = _ledger(path, 9)
    _predict(runner, resumed, "device", 5, _eos(runner))
    assert all(r.released for r in resumed.releases())
    assert resumed.total_rho() == pytest.approx(5 * (CLIP / TEMPERATURE)
                                                ** 2 / 2, rel=1e-9)
    assert resumed.total_rho() > rho


def test_auto_is_device_only_on_cuda_and_bad_modes_are_refused() -> None:
    class OnDevice:
        def __init__(self, kind: str) -> None:
            import torch
            self.device = torch.device(kind)

    resolve = worker_module.resolve_token_sampling
    assert resolve("auto", OnDevice("cpu")) == "host"
    assert resolve("auto", OnDevice("cuda")) == "device"
    assert resolve("device", OnDevice("cpu")) == "device"
    assert resolve("host", OnDevice("cuda")) == "host"
    with pytest.raises(ValueError, match="token_sampling"):
        resolve("gpu", OnDevice("cpu"))
    with pytest.raises(ConfigError, match="--token-sampling"):
        make_config(None, {"token_sampling": "gpu"})
    assert make_config(None, {"token_sampling": "device"}).token_sampling == "device"


def test_the_driver_refuses_tokens_that_do_not_answer_its_uniforms() -> None:
    ledger = _ledger(None, 4)
    sampler = LedgerTokenSampler(ledger, [0, 1], clip=CLIP, temperature=TEMPERATURE,
                                 max_new_tokens=3, eos_ids=[])
    with pytest.raises(RuntimeError, match="without uniforms"):
        sampler.record([0, 1], [5, 6])
    answers = sampler.draw_uniforms([0, 1])
    assert [stored for stored, _u in answers] == [False, False]
    assert all(0.0 <= u < 1.0 for _stored, u in answers)
    with pytest.raises(RuntimeError, match="not recorded"):
        sampler.draw_uniforms([0, 1])
    with pytest.raises(RuntimeError, match="do not answer"):
        sampler.record([0, 1], [5])
    sampler.record([0, 1], [5, 6])
    assert sampler.steps == [1, 1]
    assert [ledger.released_value(f"cluster/0000{g}/token/000") for g in (0, 1)] == [5, 6]
    # two workers: each has its own step's uniforms outstanding, recorded in any order
    sampler.draw_uniforms([0])
    sampler.draw_uniforms([1])
    with pytest.raises(RuntimeError, match="without uniforms"):
        sampler.record([0, 1, 2], [1, 2, 3])
    sampler.record([1], [8])
    sampler.record([0], [7])
    assert sampler.steps == [2, 2]
    assert [ledger.released_value(f"cluster/0000{g}/token/001") for g in (0, 1)] == [7, 8]


def test_tokens_from_answers_keeps_stored_tokens_and_samples_the_rest() -> None:
    import torch

    from dpsynrag.accounting.token_sampling import sample_tokens

    votes = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    expected = sample_tokens(votes, TEMPERATURE, RandomSource(seed=12))
    uniforms = np.asarray(RandomSource(seed=12).random(3), dtype=np.float64)
    answers = [(False, float(uniforms[0])), (True, 49), (False, float(uniforms[2]))]
    tokens = worker_module.tokens_from_answers(votes, TEMPERATURE, answers)
    assert tokens.tolist() == [expected[0], 49, expected[2]]
