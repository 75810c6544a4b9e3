"""``build-corpus --runner beam`` (``pipeline.beam_ngrams``): the default n-gram facts build
with its per-document work and counts on Apache Beam releases exactly what the local build
releases under the same seed (every ledger row, value and certificate epsilon, the corpus),
resumes without drawing or charging, leaves no private scratch behind, and lets no private
text out of a worker's error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_build import HashEmbedder
from test_facts_build import NoLLM

from dpsynrag.accounting.certificate import verify_output
from dpsynrag.accounting.contributions import ContributionError
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.facts.ngrams import level_key
from dpsynrag.pipeline import beam_ngrams
from dpsynrag.pipeline.beam_ngrams import BeamStageError
from dpsynrag.pipeline.build import make_plan, run_build
from dpsynrag.pipeline.config import ConfigError, make_config
from dpsynrag.pipeline.runners import LocalRunner

N_NOTES, N_DISEASES, DATA_SEED = 1200, 12, 4
BATCH = 250  # 5 batches: counts combined across batches, shards and the two workers
OPTIONS = {"generate": "facts", "unit_column": "unit", "seed": 7, "epsilon": 10.0,
           "workers": 2}


@pytest.fixture(autouse=True)
def _config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))


def _build(notes: Path, tmp: Path, runner: str, options: dict[str, Any] | None = None) -> Any:
    config = make_config(None, {**(OPTIONS if options is None else options), "runner": runner})
    key = tmp / "key.pem"
    if not key.exists():
        generate_keypair(key, tmp / "key.pem.pub")
    return run_build(notes, tmp / f"out-{runner}", config, state_dir=tmp / f"state-{runner}",
                     signing_key=key, runner=LocalRunner(NoLLM(), HashEmbedder()),
                     corpus_ledger=False, force=True)


def _ledger_rows(state: Path) -> list[tuple[Any, ...]]:
    ledger = Ledger(state / "ledger.sqlite")
    try:
        return [(r.key, r.stage, r.mechanism, json.dumps(r.params, sort_keys=True), r.rho,
                 r.group, r.partition, repr(ledger.released_value(r.key)))
                for r in ledger.releases()]
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("beam-ngrams")
    notes = write_clinic_dataset(tmp / "data", n_notes=N_NOTES, n_diseases=N_DISEASES,
                                 seed=DATA_SEED)["notes"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp / "config"))
        patch.setattr(beam_ngrams, "BATCH_DOCUMENTS", BATCH)
        local = _build(notes, tmp, "local")
        beam = _build(notes, tmp, "beam")
        before = _ledger_rows(tmp / "state-beam")
        again = _build(notes, tmp, "beam")  # a rerun of the same build: resumes
    return {"tmp": tmp, "notes": notes, "local": local, "beam": beam, "again": again,
            "before_resume": before}


def _texts(out: Path) -> list[str]:
    return pq.read_table(out / "corpus.parquet").column("text").to_pylist()


def test_beam_releases_exactly_what_the_local_build_releases(builds: dict[str, Any]) -> None:
    tmp = builds["tmp"]
    local_rows = _ledger_rows(tmp / "state-local")
    beam_rows = builds["before_resume"]
    keys = [row[0] for row in beam_rows]
    config = make_config(None, {**OPTIONS, "runner": "beam"})
    plan = make_plan(config)
    assert [k for k in keys if k.startswith("ngrams/")] == [level_key(n)
                                                           for n in plan.ngram_lengths]
    assert any(k.endswith("/facts") for k in keys), "span histograms were released"
    assert beam_rows == local_rows  # keys, charges, rho and every released value
    assert builds["beam"].epsilon == builds["local"].epsilon
    assert builds["beam"].rho_spent == builds["local"].rho_spent
    assert builds["beam"].clusters == builds["local"].clusters > 0
    cert = {r: json.loads((tmp / f"out-{r}" / "certificate.json").read_text())
            for r in ("local", "beam")}
    assert cert["beam"]["guarantee"] == cert["local"]["guarantee"]
    assert _texts(tmp / "out-beam") == _texts(tmp / "out-local")
    assert verify_output(tmp / "out-beam", tmp / "key.pem.pub", allow_seeded=True) == []


def test_a_rerun_beam_build_draws_and_charges_nothing(builds: dict[str, Any]) -> None:
    tmp = builds["tmp"]
    assert builds["again"].resumed
    assert _ledger_rows(tmp / "state-beam") == builds["before_resume"]
    assert builds["again"].rho_spent == builds["beam"].rho_spent
    assert _texts(tmp / "out-beam") == _texts(tmp / "out-local")


def test_no_private_scratch_is_left_and_the_worker_log_holds_no_text(
        builds: dict[str, Any]) -> None:
    state = builds["tmp"] / "state-beam"
    assert not (state / beam_ngrams.SCRATCH).exists()
    log = state / f"{beam_ngrams.SCRATCH}-workers.log"
    assert log.stat().st_mode & 0o077 == 0
    text = log.read_text(encoding="utf-8", errors="replace")
    words = set()
    for line in builds["notes"].read_text(encoding="utf-8").splitlines()[:200]:
        words |= {w for w in json.loads(line)["text"].split() if len(w) > 7 and w.isalpha()}
    assert words and not [w for w in words if w in text]


def test_runner_beam_is_for_the_ngram_facts_build_only() -> None:
    with pytest.raises(ConfigError, match="--runner beam"):
        make_config(None, {**OPTIONS, "runner": "beam", "facts_items": "terms"})
    with pytest.raises(ConfigError, match="--runner beam"):
        make_config(None, {"generate": "tokens", "runner": "beam"})
    assert make_config(None, {**OPTIONS, "runner": "beam"}).resolved_runner == "beam"


# ---------------------------------------------------------------------- errors
def _secret_failure(_line: str) -> list[Any]:
    raise KeyError("Hypothetical Patient Zelda Quartermaine")


def _bound_failure(_line: str) -> list[Any]:
    raise ContributionError("the fact histograms: a unit touches more than 2 rows")


def test_guarded_worker_errors_keep_the_type_and_public_bounds_only() -> None:
    with pytest.raises(BeamStageError) as caught:
        beam_ngrams._guarded("tokenize", _secret_failure)("x")
    assert "KeyError" in str(caught.value) and "Zelda" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    with pytest.raises(BeamStageError, match="touches more than 2 rows"):
        beam_ngrams._guarded("span histograms", _bound_failure)("x")


@pytest.mark.parametrize("failure, expected", [(_secret_failure, "KeyError"),
                                               (_bound_failure, "more than 2 rows")])
def test_a_failing_pass_is_one_line_without_private_text(tmp_path: Path, failure: Any,
                                                         expected: str) -> None:
    scratch = tmp_path / "scratch"
    (scratch / "input").mkdir(parents=True)
    (scratch / "input" / "part-00000").write_text('["Zelda Quartermaine"]\n')
    passes = beam_ngrams._Passes(scratch, "direct", [], 1, tmp_path / "log")
    beam = passes.beam

    def build(pipeline: Any) -> None:
        _ = (pipeline | beam.io.ReadFromText(passes.pattern("input"))
             | beam.FlatMap(beam_ngrams._guarded("tokenize", failure)))

    with pytest.raises(BeamStageError) as caught:
        passes.run("tokenize", build)
    message = str(caught.value)
    assert expected in message and "Zelda" not in message and "\n" not in message


def test_cell_parts_merge_to_the_same_sums_in_any_grouping() -> None:
    """The span-histogram combine sums int64 array parts: any grouping and order of the
    parts (Beam's partial combines) gives the sums of one pass over every cell."""
    import numpy as np

    gen = np.random.default_rng(5)
    parts = [(gen.integers(0, 50, size=n), gen.integers(1, 4, size=n)) for n in (0, 7, 30, 12)]
    expected: dict[int, int] = {}
    for cells, values in parts:
        for c, v in zip(cells.tolist(), values.tolist(), strict=True):
            expected[c] = expected.get(c, 0) + v
    whole = beam_ngrams.merge_cell_parts(parts)
    nested = beam_ngrams.merge_cell_parts([beam_ngrams.merge_cell_parts(parts[2:]),
                                           beam_ngrams.merge_cell_parts(parts[:2][::-1])])
    for cells, values in (whole, nested):
        assert cells.tolist() == sorted(expected)
        assert values.tolist() == [expected[c] for c in sorted(expected)]
    empty = beam_ngrams.merge_cell_parts([])
    assert empty[0].size == 0 and empty[1].size == 0


def test_combined_parts_read_back_in_any_order_as_one_sparse_table() -> None:
    """The driver reads the combined parts (one per block of clusters, in whatever order the
    runner wrote them) into the table that the cells say, sorted or not."""
    import numpy as np

    n_rows, width = 6, 5
    gen = np.random.default_rng(11)
    dense = gen.integers(0, 3, size=(n_rows, width)) * (gen.random((n_rows, width)) < 0.5)
    dense[:, 0] = 1  # every block holds a cell
    span = beam_ngrams.ROWS_PER_KEY * width
    n_rows = 3 * beam_ngrams.ROWS_PER_KEY
    dense = np.repeat(dense, beam_ngrams.ROWS_PER_KEY // 2, axis=0)
    flat = np.flatnonzero(dense.reshape(-1))
    blocks = flat // span
    parts = [(int(b), (flat[blocks == b] - b * span).tolist(),
              dense.reshape(-1)[flat[blocks == b]].tolist()) for b in np.unique(blocks)]
    assert len(parts) == 3
    for order in (parts, parts[::-1], [parts[1], parts[0], parts[2]]):
        table = beam_ngrams._read_cells(iter([*order, (7, [], [])]), n_rows, width)
        assert table.to_dense().tolist() == dense.tolist()
    with pytest.raises(ValueError):  # a block twice: the combine did not run
        beam_ngrams._read_cells(iter([parts[0], parts[0]]), n_rows, width)


def test_merged_sums_are_int64_and_a_wide_domain_gets_smaller_blocks() -> None:
    """A merged part holds int32 cells and int32 sums, int64 sums where one passes 2^31, so
    no number of documents overflows a sum (the Beam path refuses no size of input); a
    domain too wide for blocks of ROWS_PER_KEY clusters gets fewer clusters a block, so
    every block-local cell fits int32; only a domain wider than int32 itself is refused."""
    import numpy as np

    limit = beam_ngrams.PART_LIMIT
    small = beam_ngrams.merge_cell_parts([(np.array([5, 1, 5]), np.array([1, 2, 3]))])
    assert small[0].dtype == np.int32 and small[1].dtype == np.int32
    assert small[0].tolist() == [1, 5] and small[1].tolist() == [2, 4]
    parts = beam_ngrams.merge_cell_parts([small, (np.array([5]), np.array([limit]))])
    assert parts[0].dtype == np.int32 and parts[1].dtype == np.int64
    assert parts[0].tolist() == [1, 5] and parts[1].tolist() == [2, limit + 4]
    table = beam_ngrams._read_cells(iter([(0, parts[0].tolist(), parts[1].tolist())]), 1,
                                    1000)
    assert table.to_dense()[0, [1, 5]].tolist() == [2, limit + 4]
    assert beam_ngrams.block_rows(1000) == beam_ngrams.ROWS_PER_KEY
    wide = 2**31 // beam_ngrams.ROWS_PER_KEY + 1
    rows = beam_ngrams.block_rows(wide)
    assert 1 <= rows < beam_ngrams.ROWS_PER_KEY
    assert beam_ngrams.block_span(wide) == rows * wide
    assert beam_ngrams.block_span(wide) - 1 <= limit < (rows + 1) * wide - 1
    assert beam_ngrams.block_rows(limit + 1) == 1
    with pytest.raises(ValueError, match="too wide"):
        beam_ngrams.block_span(limit + 2)
