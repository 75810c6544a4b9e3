"""The certificate states the plan's epsilon as its guarantee, the realised cost beside it
(issue 58, item 1): a facts build of 5 notes releases fewer than L clusters, and the same
build could have released L of them, so its guarantee is the plan's (and the corpus ledger's
charge), never the cost of the releases that ran."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_facts_build import _build

from dpsynrag.accounting.certificate import (
    CERTIFICATE_FORMAT_VERSION,
    load_certificate,
    verify_output,
    write_certificate,
)
from dpsynrag.accounting.conversions import epsilon_for
from dpsynrag.accounting.corpus_ledger import CorpusLedger
from dpsynrag.accounting.explain import explain_certificate
from dpsynrag.accounting.signing import load_private_key, sign_document
from dpsynrag.cli import main
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.pipeline.build import make_plan


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    """A facts build (L = 2, epsilon 10) of 5 clinic notes: (its directory, config, summary)."""
    tmp = tmp_path_factory.mktemp("five-notes")
    notes = write_clinic_dataset(tmp / "data", n_notes=5, n_diseases=2, seed=5)["notes"]
    config, summary = _build(notes, tmp)
    return tmp, config, summary


def _resign(tmp: Path, out: Path, change: Any) -> None:
    cert = load_certificate(out / "certificate.json")
    change(cert)
    cert.pop("signature", None)
    write_certificate(out, sign_document(cert, load_private_key(tmp / "key.pem")))


def _copy(tmp: Path, name: str) -> Path:
    import shutil

    out = tmp / name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tmp / "out", out)
    return out


def test_a_build_of_5_notes_states_the_plans_epsilon(five: tuple[Path, Any, Any]) -> None:
    tmp, config, summary = five
    out = tmp / "out"
    assert verify_output(out, tmp / "key.pem.pub") == []
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["format_version"] == CERTIFICATE_FORMAT_VERSION == 2
    g = cert["guarantee"]
    plan = make_plan(config)
    # the guarantee: the plan's rho at delta - delta_A, 9.970 at epsilon 10 (the phrase
    # release's actual delta_A is below the delta_phrases the plan reserved for it)
    assert g["basis"] == "plan"
    assert math.isclose(g["rho"], plan.rho_total, rel_tol=1e-9)
    assert math.isclose(g["delta_approx"], plan.delta_A, rel_tol=1e-9)
    assert math.isclose(g["epsilon"], epsilon_for(plan.rho_total, config.delta - plan.delta_A,
                                                  config.conversion), rel_tol=1e-9)
    assert 9.9 < g["epsilon"] <= config.epsilon
    # the releases that ran: one cluster of L = 2, so less, and named as realised
    assert g["reserved"]["partitions_released"] < config.L == g["reserved"]["max_overlap"]
    assert g["reserved"]["partitions_reserved"] >= 1
    assert math.isclose(g["rho_realised"], summary.rho_spent, rel_tol=1e-12)
    assert math.isclose(g["epsilon_realised"], summary.epsilon, rel_tol=1e-12)
    assert g["epsilon_realised"] < g["epsilon"] - 1
    assert math.isclose(g["reserved"]["rho"], g["rho"] - g["rho_realised"], rel_tol=1e-9)
    # the corpus ledger was charged the plan: the guarantee is what it holds
    with CorpusLedger(tmp / "corpus.sqlite") as corpus:
        [entry] = corpus.entries()
    assert math.isclose(entry.rho, g["rho"], rel_tol=1e-9)


def test_verify_refuses_the_realised_cost_stated_as_the_guarantee(
        five: tuple[Path, Any, Any]) -> None:
    """The certificate this build wrote before issue 58: epsilon = the releases' cost."""
    tmp, _config, _summary = five
    out = _copy(tmp, "understated")

    def understate(cert: dict[str, Any]) -> None:
        g = cert["guarantee"]
        for name in ("rho", "epsilon", "delta_approx"):
            g[name] = g[f"{name}_realised"]
        g["basis"] = "releases"

    _resign(tmp, out, understate)
    problems = verify_output(out, tmp / "key.pem.pub")
    assert any("basis 'releases', not 'plan'" in p for p in problems), problems
    assert any(p.startswith("guarantee: rho") and "the plan gives" in p for p in problems)
    assert any(p.startswith("guarantee: epsilon ") for p in problems), problems


def test_verify_refuses_a_realised_cost_that_is_wrong(five: tuple[Path, Any, Any]) -> None:
    tmp, _config, _summary = five
    out = _copy(tmp, "realised")

    def wrong(cert: dict[str, Any]) -> None:
        cert["guarantee"]["rho_realised"] *= 0.5
        cert["guarantee"]["epsilon_realised"] *= 0.5

    _resign(tmp, out, wrong)
    problems = verify_output(out, tmp / "key.pem.pub")
    assert any(p.startswith("guarantee: rho_realised") for p in problems), problems
    assert any(p.startswith("guarantee: epsilon_realised") for p in problems), problems


def _as_format_1(cert: dict[str, Any]) -> None:
    """What the build wrote before this change: format 1, epsilon the releases' cost."""
    g = cert["guarantee"]
    for name in ("rho", "epsilon", "delta_approx"):
        g[name] = g.pop(f"{name}_realised")
    g["delta_conversion"] = g["delta"] - g["delta_approx"]
    g["epsilon_other_conversions"] = {
        name: epsilon_for(g["rho"], g["delta_conversion"], name)
        for name in g["epsilon_other_conversions"]}
    for name in ("basis", "basis_explained", "reserved", "cross_check"):
        g.pop(name)
    cert["format_version"] = 1


def test_a_format_1_certificate_below_the_plan_fails_with_one_line(
        five: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
    tmp, _config, _summary = five
    out = _copy(tmp, "format1")
    _resign(tmp, out, _as_format_1)
    problems = verify_output(out, tmp / "key.pem.pub")
    assert len(problems) == 1 and "format 1 certificate states epsilon" in problems[0]
    assert "below the plan's" in problems[0]
    # --explain states no guarantee for it: its epsilon is not the plan's
    assert main(["verify", str(out), "--public-key", str(tmp / "key.pem.pub"),
                 "--explain"]) == 1
    text = capsys.readouterr().out
    assert "Guarantee: NONE STATED" in text and "e^5.7" not in text


def test_an_unknown_format_version_is_one_line(five: tuple[Path, Any, Any]) -> None:
    tmp, _config, _summary = five
    out = _copy(tmp, "format3")
    _resign(tmp, out, lambda cert: cert.update(format_version=3))
    problems = verify_output(out, tmp / "key.pem.pub")
    assert problems == ["certificate: unknown format 'dpsynrag-certificate' version 3"]


def test_verify_and_explain_say_which_epsilon_is_which(
        five: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
    tmp, _config, _summary = five
    out = tmp / "out"
    cert = load_certificate(out / "certificate.json")
    g = cert["guarantee"]
    assert main(["verify", str(out), "--public-key", str(tmp / "key.pem.pub"),
                 "--explain"]) == 0
    text = capsys.readouterr().out
    from dpsynrag.display import format_epsilon

    shown, realised = format_epsilon(g["epsilon"]), format_epsilon(g["epsilon_realised"])
    [ok] = [line for line in text.splitlines() if line.startswith("OK:")]
    assert f"epsilon={shown}" in ok and "the plan's guarantee" in ok
    assert f"epsilon_realised={realised} (the releases that ran, not a guarantee)" in ok
    [guarantee] = [line for line in text.splitlines() if line.startswith("Guarantee:")]
    assert f"({shown}, 0.001)-differential privacy" in guarantee and realised not in guarantee
    [line] = [line for line in text.splitlines() if line.startswith("Realised cost")]
    assert "(not a guarantee)" in line and f"epsilon_realised {realised}" in line
    assert "never epsilon_realised" in line and "reserved at their planned cost" in line
    assert f"e^{realised}" not in text  # the realised cost is never stated as a bound
    # the explanation reads the certificate alone: the same words without verify
    alone = explain_certificate(cert, verified=True, trust="trusted key")
    assert guarantee in alone.splitlines() and line in alone.splitlines()
