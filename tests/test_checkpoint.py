"""``BuildState.checkpoint`` (issue 18, section 4): a stage's stored output is read back, never
computed again, so a resumed build redraws no noise; state written in the format of the
builds before it (``<name>.json``, compact JSON) resumes with it; and a whole build run again
on its state directory reads every stage back instead of asking the models again."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_build import SMALL, HashEmbedder
from test_private_prediction import tiny_llm

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.pipeline.build import make_plan, run_build
from dpsynrag.pipeline.config import make_config
from dpsynrag.pipeline.runners import LocalRunner
from dpsynrag.pipeline.state import BuildState


def _plain(value: object) -> object:
    """A released value as comparable Python data (arrays as lists)."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def _never() -> object:
    raise AssertionError("a stored stage output was computed again")


def test_checkpoint_reads_a_stored_output_back_without_computing_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    with BuildState(state_dir, "f" * 64, tmp_path / "out") as state:
        state.save("synthetic", {"texts": ["a released text"], "tokens": [3]})
    # exactly what the builds before checkpoint() wrote: json.dumps of the value
    (state_dir / "selected.json").write_bytes(json.dumps([[0, 2], [1]]).encode())
    with BuildState(state_dir, "f" * 64, tmp_path / "out") as state:
        assert state.checkpoint("synthetic", _never, stage="d_prediction") == {
            "texts": ["a released text"], "tokens": [3]}
        assert state.checkpoint("selected", _never) == [[0, 2], [1]]
        assert set(state.stage_seconds) == {"d_prediction"}  # loading counts as the stage's


def test_checkpoint_computes_once_and_returns_what_a_resumed_build_reads(
        tmp_path: Path) -> None:
    calls: list[int] = []

    def compute() -> list[tuple[int, str]]:
        calls.append(1)
        return [(1, "x"), (2, "y")]

    with BuildState(tmp_path / "state", "f" * 64, tmp_path / "out") as state:
        first = state.checkpoint("clusters", compute, stage="b_clusters")
        assert first == [[1, "x"], [2, "y"]]  # the stored JSON, not the tuples
        assert state.checkpoint("clusters", compute, stage="b_clusters") == first
        assert calls == [1]
        assert list(state.stage_seconds) == ["b_clusters"]
        with state.timed("b_clusters"):
            pass
        assert state.stage_seconds["b_clusters"] >= 0
    path = tmp_path / "state" / "clusters.json"
    assert path.read_bytes() == json.dumps(first).encode()  # the format resume reads
    assert os.stat(path).st_mode & 0o777 == 0o600
    with BuildState(tmp_path / "state", "f" * 64, tmp_path / "out") as state:
        assert state.checkpoint("clusters", _never) == first


class ReadBackOnly:
    """A runner for a build whose stages are all stored: keyword extraction, prediction and
    the self-filter fail the test, and the documents must not be embedded again (the only
    embedding left is the index of the synthetic texts, at emit)."""

    def __init__(self, runner: LocalRunner) -> None:
        self.runner = runner
        self.embedded: list[int] = []

    def __getattr__(self, name: str):
        if name in ("llm_keywords", "predict", "self_filter"):
            raise AssertionError(f"a resumed build computed a stored stage again ({name})")
        return getattr(self.runner, name)

    def embed(self, texts, progress):
        self.embedded.append(len(texts))
        return self.runner.embed(texts, progress)


@pytest.mark.parametrize("options", [
    {**SMALL, "keywords": "llm", "seed": 21},
    {"generate": "facts", "facts_items": "terms", "L": 2, "runner": "local",
     "unit_column": "unit", "epsilon": 10.0, "writer": "tokens", "T": 3, "public_top_k": 5,
     "seed": 22}], ids=["tokens", "facts"])
def test_a_finished_build_run_again_reads_every_stage_back(tmp_path: Path,
                                                           options: dict) -> None:
    data = write_clinic_dataset(tmp_path / "data", n_notes=160, n_diseases=4, seed=11)
    config = make_config(None, options)
    state_dir = tmp_path / "state"

    def build(runner):
        summary = run_build(data["notes"], tmp_path / "out", config, state_dir=state_dir,
                            signing_key=None, runner=runner, corpus_ledger=False, force=True)
        texts = pq.read_table(tmp_path / "out" / "corpus.parquet").column("text").to_pylist()
        with Ledger(state_dir / "ledger.sqlite") as ledger:
            releases = [(r.key, r.rho, _plain(ledger.released_value(r.key)))
                        for r in ledger.releases()]
        return summary, texts, releases

    first, texts, releases = build(LocalRunner(tiny_llm(), HashEmbedder()))
    assert not first.resumed and texts
    assert math.isclose(first.rho_spent, make_plan(config).rho_total, rel_tol=1e-12)
    runner = ReadBackOnly(LocalRunner(tiny_llm(), HashEmbedder()))
    again, texts_again, releases_again = build(runner)
    assert again.resumed
    assert texts_again == texts and releases_again == releases
    assert again.rho_spent == first.rho_spent
    assert runner.embedded == [len(texts)]  # the index of the synthetic texts only
    assert list(again.stage_seconds) == list(first.stage_seconds)
