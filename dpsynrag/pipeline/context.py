"""What a build stage receives (``BuildContext``) and what the stages return (``StageResult``).

A stage is a function of its inputs and the context: every noisy value it uses is released by
``context.ledger``, every output it keeps goes through ``context.state.checkpoint``, and the
runner only moves data to the model workers and their deterministic results back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpsynrag.accounting.ledger import Ledger
    from dpsynrag.pipeline.config import BuildConfig
    from dpsynrag.pipeline.runners import Runner
    from dpsynrag.pipeline.state import BuildState

#: a progress factory: (stage description, total) -> context manager yielding advance(n)
ProgressFactory = Callable[[str, int], Any]


@contextmanager
def no_progress(_description: str, _total: int) -> Iterator[Callable[[int], None]]:
    """The silent progress factory."""
    yield lambda _n: None


def _no_log(_message: str) -> None:
    """The silent log."""


@dataclass(frozen=True)
class BuildContext:
    """Everything the stages of one build share.

    ``plan`` is the solved ``BudgetPlan`` (tokens) or ``FactsBudgetPlan`` (facts); ``ledger``
    owns every noise draw; ``state`` stores each stage's output (``BuildState.checkpoint``)
    and its seconds; ``runner`` moves data to the model workers; ``progress`` and ``log``
    show the operator where the build is (never private data).
    """

    config: BuildConfig
    plan: Any
    ledger: Ledger
    state: BuildState
    runner: Runner
    progress: ProgressFactory = no_progress
    log: Callable[[str], None] = _no_log


@dataclass(frozen=True)
class StageResult:
    """What the stages hand to the output writer: one synthetic text per cluster.

    ``tokens[i]`` is the count of released tokens (or words, for template notes) of
    ``texts[i]``, ``kept[i]`` its self-filter verdict, ``cluster_keywords[i]`` the released
    keyword (or anchor) of its cluster; ``clusters`` counts the clusters formed (the facts
    mode writes no text for a cluster whose released facts are dropped).
    """

    texts: list[str]
    tokens: list[int]
    kept: list[bool]
    cluster_keywords: list[str]
    vocabulary_sha256: str
    clusters: int
