"""The step-graph cache of the packed engine (``step_graphs``), on CPU with a stand-in
capturer: a key is captured once and replayed after, a changed binding captures it again, a
capture that raises turns graphs off with one warning, graphs are off where no capturer
exists, and they are on by default on CUDA only (``DPSYNRAG_STEP_GRAPHS=0`` turns them off).
The CUDA capturer itself needs a GPU and is not run here (a stand-in replaces it)."""

from __future__ import annotations

import logging
from typing import ClassVar

import pytest
import torch

from dpsynrag.transforms import step_graphs
from dpsynrag.transforms.step_graphs import Captured, StepFn, StepGraphs, Tensors

LOGGER = "dpsynrag.transforms.step_graphs"


class FakeCapturer:
    """Stands in for CUDA graphs on CPU. A capture does not touch the real state (it runs the
    function on a copy, to size the outputs); a replay runs the function on exactly the state
    and input tensors it was captured with and writes the captured outputs, as a graph replays
    fixed addresses: a stale state tensor is written, not the current one."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.warms = 0
        self.captures = 0

    def warm(self, fn: StepFn, state: Tensors, inputs: Tensors) -> Tensors:
        self.warms += 1
        return fn(state, inputs)

    def capture(self, fn: StepFn, state: Tensors, inputs: Tensors) -> Captured:
        if self.fail is not None:
            raise RuntimeError(self.fail)
        self.captures += 1
        outputs = tuple(t.clone() for t in fn(tuple(s.clone() for s in state), inputs))

        def replay() -> None:
            for out, new in zip(outputs, fn(state, inputs), strict=True):
                out.copy_(new)

        return Captured(replay=replay, outputs=outputs)


def _write(state: Tensors, inputs: Tensors) -> Tensors:
    """Like a decode step: writes its input at a place (idempotent) and reads the state."""
    (buffer,), (where, value) = state, inputs
    buffer[where] = value
    return (buffer * 2, buffer.sum().reshape(1))


def _inputs(where: int, value: float) -> Tensors:
    return torch.tensor([where]), torch.tensor([value])


def test_a_key_is_captured_on_its_second_step_and_replayed_after() -> None:
    fake = FakeCapturer()
    graphs = StepGraphs(fake)
    buffer = torch.zeros(4)
    seen = []
    for step, value in enumerate([1.0, 2.0, 3.0, 4.0]):
        out = graphs.run("a", 0, _write, (buffer,), _inputs(step, value))
        seen.append(out[1].item())
        assert torch.equal(out[0], buffer * 2)  # the returned values are this step's
    assert seen == [1.0, 3.0, 6.0, 10.0]
    assert torch.equal(buffer, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert (fake.warms, fake.captures) == (1, 1)
    assert (graphs.eager_steps, graphs.captures, graphs.replays) == (1, 1, 3)
    assert graphs.active and graphs.reason is None


def test_returned_outputs_are_copies_a_later_replay_does_not_change() -> None:
    graphs = StepGraphs(FakeCapturer(), capture_after=1)
    buffer = torch.zeros(3)
    first = graphs.run("a", 0, _write, (buffer,), _inputs(0, 5.0))
    second = graphs.run("a", 0, _write, (buffer,), _inputs(1, 7.0))
    assert first[1].item() == 5.0 and second[1].item() == 12.0
    assert graphs.captures == 1 and graphs.replays == 2


def test_each_key_has_its_own_graph() -> None:
    fake = FakeCapturer()
    graphs = StepGraphs(fake, capture_after=1)
    small, large = torch.zeros(2), torch.zeros(5)
    for _ in range(3):
        graphs.run(("lane", 2), 0, _write, (small,), _inputs(1, 1.0))
        graphs.run(("lane", 5), 0, _write, (large,), _inputs(4, 2.0))
    assert fake.captures == 2 and graphs.replays == 6
    assert small.tolist() == [0.0, 1.0] and large.tolist() == [0.0, 0.0, 0.0, 0.0, 2.0]


def test_a_changed_binding_captures_the_key_again_on_the_new_buffer() -> None:
    """A lane that grows gets a new slot buffer: the old graph would write the old one."""
    fake = FakeCapturer()
    graphs = StepGraphs(fake, capture_after=1)
    old = torch.zeros(2)
    graphs.run("a", 0, _write, (old,), _inputs(0, 1.0))
    grown = torch.cat([old, torch.zeros(2)])
    out = graphs.run("a", 1, _write, (grown,), _inputs(3, 9.0))
    assert graphs.invalidations == 1 and fake.captures == 2
    assert grown.tolist() == [1.0, 0.0, 0.0, 9.0] and old.tolist() == [1.0, 0.0]
    assert out[1].item() == 10.0
    # without the binding the stale graph would have written the old buffer
    stale = StepGraphs(FakeCapturer(), capture_after=1)
    old2 = torch.zeros(2)
    stale.run("a", 0, _write, (old2,), _inputs(0, 1.0))
    grown2 = torch.cat([old2, torch.zeros(2)])
    stale.run("a", 0, _write, (grown2,), _inputs(1, 9.0))
    assert grown2.tolist() == [1.0, 0.0, 0.0, 0.0] and old2.tolist() == [1.0, 9.0]


def test_a_failed_capture_falls_back_to_eager_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    fake = FakeCapturer(fail="operation not permitted when stream is capturing\nmore detail")
    graphs = StepGraphs(fake, capture_after=1)
    buffer = torch.zeros(4)
    totals = [graphs.run(key, 0, _write, (buffer,), _inputs(i, 1.0))[1].item()
              for i, key in enumerate(["a", "a", "b", "a"])]
    assert totals == [1.0, 2.0, 3.0, 4.0]  # every step computed, eagerly after the failure
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "RuntimeError: operation not permitted" in records[0].getMessage()
    assert "more detail" not in records[0].getMessage()  # one line
    assert not graphs.active and graphs.reason is not None
    assert fake.captures == 0 and graphs.replays == 0 and graphs.eager_steps == 4


def test_at_most_max_graphs_are_kept() -> None:
    fake = FakeCapturer()
    graphs = StepGraphs(fake, capture_after=1, max_graphs=2)
    buffer = torch.zeros(3)
    for key in ["a", "b", "c", "b", "a"]:
        graphs.run(key, 0, _write, (buffer,), _inputs(0, 1.0))
    assert list(graphs.graphs) == ["b", "a"]
    assert graphs.evictions == 2 and fake.captures == 4 and graphs.replays == 5


def test_graphs_are_off_without_a_capturer_and_on_with_one(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cpu = torch.device("cpu")
    monkeypatch.delenv(step_graphs.ENV_VAR, raising=False)
    assert not StepGraphs.for_device(cpu).active  # auto: off on CPU, silently
    assert not [r for r in caplog.records if r.name == LOGGER]
    forced = StepGraphs.for_device(cpu, graphs=True)  # asked for: one warning, then eager
    assert not forced.active and "CUDA device" in str(forced.reason)
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1
    assert StepGraphs.for_device(cpu, capturer=FakeCapturer()).active
    assert not StepGraphs.for_device(cpu, graphs=False, capturer=FakeCapturer()).active
    monkeypatch.setenv(step_graphs.ENV_VAR, "0")
    assert not StepGraphs.for_device(cpu, capturer=FakeCapturer()).active
    assert StepGraphs.for_device(cpu, graphs=True, capturer=FakeCapturer()).active
    off = StepGraphs.for_device(cpu)
    buffer = torch.zeros(2)
    assert off.run("a", 0, _write, (buffer,), _inputs(1, 3.0))[1].item() == 3.0
    assert off.eager_steps == 1


class _CudaStandIn(FakeCapturer):
    """Replaces ``CudaCapturer`` where no GPU exists: records the device it was made for."""

    made: ClassVar[list[torch.device]] = []

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        _CudaStandIn.made.append(device)


@pytest.mark.parametrize("value,on", [(None, True), ("", True), ("1", True), ("on", True),
                                      ("0", False), ("off", False), ("false", False),
                                      ("No", False)])
def test_graphs_are_on_by_default_on_cuda_only(monkeypatch: pytest.MonkeyPatch,
                                               value: str | None, on: bool) -> None:
    """The default (``graphs=None``): on for a CUDA device unless ``DPSYNRAG_STEP_GRAPHS``
    says 0/off/false/no; off on CPU whatever the variable; ``graphs`` given always wins."""
    if value is None:
        monkeypatch.delenv(step_graphs.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(step_graphs.ENV_VAR, value)
    monkeypatch.setattr(step_graphs, "CudaCapturer", _CudaStandIn)
    _CudaStandIn.made = []
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert step_graphs.wanted(cuda) is on
    assert step_graphs.wanted(cpu) is False
    assert step_graphs.wanted(cuda, True) and step_graphs.wanted(cpu, True)
    assert not step_graphs.wanted(cuda, False)
    auto = StepGraphs.for_device(cuda)
    assert auto.active is on and isinstance(auto.capturer, _CudaStandIn) is on
    assert (auto.reason == "disabled") is not on
    assert not StepGraphs.for_device(cpu).active  # CPU unchanged: eager steps
    assert not StepGraphs.for_device(cuda, graphs=False).active  # the explicit off switch
    assert StepGraphs.for_device(cuda, graphs=True).active  # forcing on beats the variable
    assert all(d.type == "cuda" for d in _CudaStandIn.made)
    assert len(_CudaStandIn.made) == (2 if on else 1)


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        StepGraphs(FakeCapturer(), capture_after=0)
    with pytest.raises(ValueError):
        StepGraphs(FakeCapturer(), max_graphs=0)
