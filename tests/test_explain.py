"""`dpsynrag verify --explain`: the certificate in plain language, from public values only."""

from __future__ import annotations

import math

from dpsynrag.accounting.explain import explain_certificate

CERT = {
    "seeded": False, "created_at": "2026-11-23T13:15:30+00:00", "package": "dpsynrag",
    "package_version": "0.1.0", "format_version": 2,
    "guarantee": {"basis": "plan", "epsilon": 9.999999999999998, "delta": 1e-3, "rho": 2.6068,
                  "rho_realised": 1.0937, "epsilon_realised": 5.7583,
                  "reserved": {"max_overlap": 2, "partitions_released": 1,
                               "partitions_reserved": 1},
                  "delta_approx": 7.7e-05, "conversion": "cks",
                  "conversion_reference": "Canonne, Kamath & Steinke 2020",
                  "epsilon_other_conversions": {"bun-steinke": 11.09},
                  "cross_check": {"epsilon": 10.0001}},
    "config": {"generate": "facts", "unit_column": "patient", "unit_bound": "pick"},
    "models": {"llm": {"name": "none"}, "embedder": {"name": "all-MiniLM-L6-v2",
                                                     "dimension": 384}},
    "mechanisms": {
        "sequential": [{"stage": "a-histogram", "mechanism": "discrete_gaussian"},
                       {"stage": "f-phrases", "mechanism": "partition_selection"}],
        "parallel_groups": [{"partitions": [
            {"releases": [{"stage": "f-facts", "mechanism": "discrete_gaussian", "count": 1}]}
            for _ in range(46)]}]},
    "output_files": {"corpus.parquet": "a", "index.faiss": "b", "manifest.json": "c"},
    "signature": {"fingerprint": "a05dea22"},
}


def test_the_explanation_names_unit_guarantee_releases_models_time_and_key() -> None:
    text = explain_certificate(CERT, verified=True, trust="trusted key")
    assert "VERIFIED (trusted key)" in text
    assert "column 'patient'" in text
    assert "(10, 0.001)-differential privacy" in text and "9.99" not in text
    assert f"{math.exp(10):.3g} times" in text
    assert "approximate delta of 7.7e-05" in text and "bun-steinke gives 11.09" in text
    assert "each cluster's fact counts: counts with exact discrete Gaussian noise (x46)" in text
    assert "no language model read a private document" in text
    assert "all-MiniLM-L6-v2" in text and "corpus.parquet, index.faiss, manifest.json" in text
    assert "2026-11-23T13:15:30+00:00" in text and "a05dea22" in text
    assert "SEEDED" not in text


def test_a_failed_or_seeded_certificate_says_so_first() -> None:
    seeded = {**CERT, "seeded": True, "config": {"generate": "tokens"},
              "models": {"llm": {"name": "SmolLM2", "sha256": "b179" * 16}}}
    text = explain_certificate(seeded, verified=False, trust="embedded key")
    lines = text.splitlines()
    assert lines[0].startswith("Certificate check: NOT VERIFIED")
    assert lines[1].startswith("SEEDED BUILD") and "NO privacy guarantee" in lines[1]
    assert "one input record (no unit column was given" in text
    assert "the language model SmolLM2 (sha256 b179b179b179b179...)" in text


def test_the_guarantee_is_stated_as_approximate_dp() -> None:
    """(epsilon, delta)-DP as its definition reads: P[M(D) in S] <= e^epsilon P[M(D') in S] +
    delta for neighbours and every set S of outputs; delta is the additive term, never
    described as a probability with which the guarantee fails (probabilistic DP)."""
    text = explain_certificate(CERT, verified=True, trust="trusted key")
    [line] = [line for line in text.splitlines() if line.startswith("Guarantee:")]
    assert "differ in one privacy unit" in line and "every set S of possible outputs" in line
    assert "P[M(D) in S] <= e^10 x P[M(D') in S] + 0.001" in line
    assert "beyond an additive 0.001" in line and "or the other way round" in line
    assert "probability" not in line.lower() and "except" not in line.lower()
    # the factor never understates: it is e to the displayed (rounded-up) epsilon
    up = explain_certificate(
        {**CERT, "guarantee": {"basis": "plan", "epsilon": 2.00001, "delta": 1e-6}},
        verified=True, trust="trusted key")
    assert "e^2.0001 x P[M(D') in S] + 1e-06" in up
    assert f"e^2.0001 = {math.exp(2.0001):.3g} times" in up
    huge = explain_certificate(
        {**CERT, "guarantee": {"basis": "plan", "epsilon": 1e6, "delta": 1e-6}},
        verified=True, trust="trusted key")
    assert "e^1000000 (over 1e+300) times" in huge and "inf" not in huge


def test_only_the_plans_epsilon_is_stated_as_the_guarantee() -> None:
    """The realised cost (the releases that ran) is named beside the guarantee, never as one;
    a certificate whose epsilon is not the plan's states no guarantee (issue 58)."""
    text = explain_certificate(CERT, verified=True, trust="trusted key")
    lines = text.splitlines()
    [realised] = [line for line in lines if line.startswith("Realised cost")]
    assert "(not a guarantee)" in realised and "epsilon_realised 5.7583" in realised
    assert "the plan's epsilon 10" in realised and "1 of the L = 2 clusters" in realised
    assert "e^5.7583" not in text
    assert "the plan's releases (every planned cluster, released or reserved) compose" in text
    for basis, words in (("releases", "no plan is recorded"),
                         ("exceeds-plan", "cost more than the build's plan")):
        other = {**CERT, "guarantee": {**CERT["guarantee"], "basis": basis}}
        text = explain_certificate(other, verified=False, trust="trusted key")
        [line] = [line for line in text.splitlines() if line.startswith("Guarantee:")]
        assert line.startswith("Guarantee: NONE STATED") and words in line
        assert "e^10" not in text and "Realised cost" not in text
    # format 1: its epsilon is the releases' cost, the plan's only where verify found so
    old = {**CERT, "format_version": 1,
           "guarantee": {"epsilon": 5.7583, "delta": 1e-3, "rho": 1.0937}}
    assert "e^5.7583 x P[M(D') in S]" in explain_certificate(old, verified=True, trust="t")
    failed = explain_certificate(old, verified=False, trust="t")
    assert "Guarantee: NONE STATED" in failed and "format 1" in failed
    assert "e^5.7583" not in failed
