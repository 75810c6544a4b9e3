"""No silent data loss at the output (issue 16): one build at a time per -o, and an output
directory that appears during a build is never deleted without --force."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_build import HashEmbedder
from test_facts_build import NoLLM

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.pipeline.build import BuildError, run_build
from dpsynrag.pipeline.config import make_config
from dpsynrag.pipeline.runners import LocalRunner
from dpsynrag.pipeline.state import OutputLock, StateError


def test_two_builds_cannot_hold_one_output_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputLock(out):
        with pytest.raises(StateError, match="another build is writing this output directory"):
            OutputLock(out)
        OutputLock(tmp_path / "other").close()  # another -o is free
    with OutputLock(out):  # released at exit
        pass


def test_an_output_directory_created_during_the_build_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dpsynrag.pipeline.build as build_module  # the build writes through its write_output

    notes = write_clinic_dataset(tmp_path / "data", n_notes=200, n_diseases=4,
                                 seed=3)["notes"]
    key = tmp_path / "key.pem"
    generate_keypair(key, tmp_path / "key.pem.pub")
    config = make_config(None, {"generate": "facts", "runner": "local", "unit_column": "unit"})
    out = tmp_path / "out"
    real_write = build_module.write_output

    def someone_else_writes_out(partial: Path, **kwargs):
        out.mkdir()
        (out / "theirs.txt").write_text("not ours")
        return real_write(partial, **kwargs)

    def build(force: bool):
        return run_build(notes, out, config, state_dir=tmp_path / "state", signing_key=key,
                         runner=LocalRunner(NoLLM(), HashEmbedder()),
                         corpus_ledger=tmp_path / "corpus.sqlite", force=force)

    monkeypatch.setattr(build_module, "write_output", someone_else_writes_out)
    with pytest.raises(BuildError, match="appeared while the build ran"):
        build(force=False)
    assert (out / "theirs.txt").read_text() == "not ours"
    assert not list(tmp_path.glob(".out.partial-*"))
    with Ledger(tmp_path / "state" / "ledger.sqlite") as ledger:
        spent = ledger.total_rho()
    assert spent > 0
    monkeypatch.setattr(build_module, "write_output", real_write)
    summary = build(force=True)  # the same command with --force: read back, not redrawn
    assert summary.resumed and summary.rho_spent == pytest.approx(spent, rel=1e-12)
    assert (out / "corpus.parquet").exists() and not (out / "theirs.txt").exists()
