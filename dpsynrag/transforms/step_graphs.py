"""CUDA graphs of the packed engine's decode step: one per step key, replayed, or eager.

A decode step launches thousands of small kernels (per layer, per attention part, per chunk);
on a GPU the host cannot launch them as fast as the device runs them. ``StepGraphs`` captures
the step function of a key (``packed_step.StepKey``: every shape of the step) into a
``torch.cuda.CUDAGraph`` the second time that key occurs (a key seen once is not worth a
capture) and replays it whenever the key comes back: one launch per step instead of thousands.

* **Static buffers.** A graph replays fixed device addresses. The step's per-step inputs (the
  index tensor, the public prior's padded logits and support) are copied into the graph's own
  input buffers before each replay; its outputs (votes, flags) live in buffers the graph
  writes on each replay, and ``run`` returns clones of them. The state the step writes in
  place, each lane's slot buffer, is used where it is: a lane that grows gets a new buffer
  (``torch.cat``), so each graph records the **binding** it was captured with (the engine
  passes each decoded lane's growth count) and a key whose binding changed is captured again.
  Compaction moves rows inside a buffer and changes no binding.
* **First use.** The capture step runs the function once eagerly on the capture stream (the
  warm-up PyTorch recommends before a capture), captures, then replays, and returns the
  replay's outputs: the slot KV the warm-up wrote is rewritten, at the same places, by the
  graph's own kernels. Every step of a key after its first occurrence therefore takes its
  values from the graph; the assumption (see ``decoding_packed``) is that a replay runs the
  kernels eager execution launches for the same shapes, so a row's values do not depend on
  whether its step replayed.
* **Memory.** All graphs of a run share one memory pool (``graph_pool_handle``): a capture may
  reuse what another's intermediates used. That is safe here because graphs never run
  concurrently (one stream), every replay rewrites its whole outputs before they are read,
  and ``run`` clones them before any other replay. Each graph keeps its static inputs and
  outputs (votes ``(rows, vocab)`` float64: ~70 MB for 64 groups of a 128k vocabulary),
  outside ``engine_memory``'s plan; at most ``max_graphs`` graphs are kept (least recently
  used first out). ``torch.cuda.graph`` synchronises the device and empties PyTorch's cache
  at each capture.
* **Default and fallback.** On by default on CUDA (``graphs=None``); off with
  ``graphs=False`` or ``DPSYNRAG_STEP_GRAPHS=0`` (also ``off``, ``false``, ``no``), off on CPU
  (no capturer; CPU behaviour is unchanged), and off after a capture raises: one warning line
  naming the reason, then eager steps (the same function) for the rest of the run.

Status: measured on an H200 (Llama-3.1-8B shape, bf16): graphs on and off gave
bit-identical votes and the same tokens, and graphs ran the decode 2.7x faster, hence on by
default on CUDA. The cache, the invalidation, the fallback and the default are tested on CPU
with an injected capturer.

Privacy: graphs replay deterministic kernels on the inputs given; nothing is sampled, logged
or kept beyond the run. Keys and counts depend on group sizes: never log or release them.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

import torch

logger = logging.getLogger(__name__)

# "0", "off", "false" or "no": no graphs (they are on by default on CUDA)
ENV_VAR = "DPSYNRAG_STEP_GRAPHS"
CAPTURE_AFTER = 2  # occurrences of a key before it is captured
MAX_GRAPHS = 16

Tensors = tuple[torch.Tensor, ...]
StepFn = Callable[[Tensors, Tensors], Tensors]


@dataclass
class Captured:
    """A captured step: ``replay()`` rewrites ``outputs`` from the captured input buffers."""

    replay: Callable[[], None]
    outputs: Tensors


class Capturer(Protocol):
    """How a step function is warmed up and captured (CUDA, or a test's stand-in)."""

    def warm(self, fn: StepFn, state: Tensors, inputs: Tensors) -> Tensors:
        """Run ``fn`` eagerly as the warm-up before a capture; returns its outputs."""
        ...

    def capture(self, fn: StepFn, state: Tensors, inputs: Tensors) -> Captured:
        """Capture ``fn(state, inputs)``; replays read these very ``inputs`` tensors."""
        ...


class CudaCapturer:
    """``torch.cuda.CUDAGraph`` captures on one side stream, into one shared memory pool."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.pool = torch.cuda.graph_pool_handle()

    def warm(self, fn: StepFn, state: Tensors, inputs: Tensors) -> Tensors:
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            outputs = fn(state, inputs)
        current.wait_stream(self.stream)
        for tensor in outputs:  # made on the side stream, used on the current one
            tensor.record_stream(current)
        return outputs

    def capture(self, fn: StepFn, state: Tensors, inputs: Tensors) -> Captured:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            outputs = fn(state, inputs)
        return Captured(replay=graph.replay, outputs=tuple(outputs))


def env_disabled() -> bool:
    """Whether ``ENV_VAR`` turns graphs off (``0``, ``off``, ``false`` or ``no``)."""
    return os.environ.get(ENV_VAR, "").strip().lower() in ("0", "off", "false", "no")


def wanted(device: torch.device, graphs: bool | None = None) -> bool:
    """Whether the decode steps on ``device`` should run through CUDA graphs: ``graphs`` when
    given, else on for CUDA unless ``ENV_VAR`` turns them off, off elsewhere."""
    if graphs is not None:
        return graphs
    return device.type == "cuda" and not env_disabled()


@dataclass
class _Graph:
    binding: Hashable
    inputs: Tensors
    captured: Captured


class StepGraphs:
    """Step functions by key: eager, or captured once and replayed (module docstring)."""

    def __init__(self, capturer: Capturer | None, *, capture_after: int = CAPTURE_AFTER,
                 max_graphs: int = MAX_GRAPHS, reason: str | None = None) -> None:
        if capture_after < 1 or max_graphs < 1:
            raise ValueError("capture_after and max_graphs must be positive")
        self.capturer = capturer
        self.capture_after, self.max_graphs = capture_after, max_graphs
        self.reason = reason if capturer is None else None  # why steps run eagerly
        self.graphs: OrderedDict[Hashable, _Graph] = OrderedDict()
        self.seen: dict[Hashable, int] = {}
        self.captures = self.replays = self.invalidations = self.evictions = 0
        self.eager_steps = 0

    @classmethod
    def for_device(cls, device: torch.device, graphs: bool | None = None,
                   capturer: Capturer | None = None) -> StepGraphs:
        """The graphs of an engine on ``device``. ``graphs``: True/False forces them on/off;
        ``None`` (auto) is on for CUDA (``wanted``) and with an injected ``capturer`` (tests),
        unless ``ENV_VAR`` turns them off. Forced on where there is no capturer: one warning
        line, then eager steps."""
        if graphs is False or (graphs is None and env_disabled()):
            return cls(None, reason="disabled")
        if capturer is None and device.type == "cuda":  # auto or forced on: wanted()
            capturer = CudaCapturer(device)
        if capturer is None:
            reason = f"CUDA graphs need a CUDA device, not {device.type}"
            if graphs:
                logger.warning("packed engine: %s; eager decode steps", reason)
            return cls(None, reason=reason)
        return cls(capturer)

    @property
    def active(self) -> bool:
        """Whether steps may still be captured or replayed."""
        return self.capturer is not None

    def run(self, key: Hashable, binding: Hashable, fn: StepFn, state: Tensors,
            inputs: Tensors) -> Tensors:
        """``fn(state, inputs)``: eagerly, or by the graph of ``key`` (captured when ``key``
        occurs for the ``capture_after``-th time, or again when ``binding`` changed)."""
        if self.capturer is None:
            self.eager_steps += 1
            return fn(state, inputs)
        graph = self.graphs.get(key)
        if graph is not None and graph.binding != binding:  # a lane grew: stale addresses
            del self.graphs[key]
            self.invalidations += 1
            graph = None
        if graph is None:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] < self.capture_after:
                self.eager_steps += 1
                return fn(state, inputs)
            return self._capture(key, binding, fn, state, inputs)
        self.graphs.move_to_end(key)
        return self._replay(graph, inputs)

    def _capture(self, key: Hashable, binding: Hashable, fn: StepFn, state: Tensors,
                 inputs: Tensors) -> Tensors:
        assert self.capturer is not None
        outputs = self.capturer.warm(fn, state, inputs)
        static = tuple(tensor.clone() for tensor in inputs)
        try:
            captured = self.capturer.capture(fn, state, static)
        except Exception as error:  # any failure: eager from now on, with one warning
            self._give_up(error)
            self.eager_steps += 1
            return outputs
        graph = _Graph(binding=binding, inputs=static, captured=captured)
        self.graphs[key] = graph
        self.captures += 1
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
            self.evictions += 1
        return self._replay(graph, inputs)

    def _replay(self, graph: _Graph, inputs: Tensors) -> Tensors:
        for static, given in zip(graph.inputs, inputs, strict=True):
            static.copy_(given)
        graph.captured.replay()
        self.replays += 1
        return tuple(tensor.clone() for tensor in graph.captured.outputs)

    def _give_up(self, error: Exception) -> None:
        lines = str(error).strip().splitlines()
        self.reason = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
        logger.warning("packed engine: CUDA graph capture failed (%s); eager decode steps for "
                       "the rest of this run", self.reason)
        self.capturer = None
        self.graphs.clear()
