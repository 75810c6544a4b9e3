"""``--span-weights weighted``: a document's m spans weigh floor(S / sqrt(m)) each in its
clusters' histograms. The weights are checked on the summed arrays (l2 <= S per document and
cluster), adding or removing one document changes only its own cells by its own weights, the
plan keeps rho and records S, the certificate checks it, and the Beam path releases what the
local path releases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_beam_ngrams import _build, _ledger_rows

from dpsynrag.accounting.certificate import verify_output
from dpsynrag.accounting.contributions import ContributionError, weighted_cells
from dpsynrag.accounting.partition_threshold import contribution_weight
from dpsynrag.accounting.planner import SPAN_WEIGHT_SCALE
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.facts.fact_clusters import fact_charge, sparse_fact_counts
from dpsynrag.pipeline import beam_ngrams
from dpsynrag.pipeline.build import make_plan
from dpsynrag.pipeline.config import ConfigError, make_config

OPTIONS = {"generate": "facts", "unit_column": "unit", "seed": 11, "epsilon": 10.0,
           "workers": 2, "span_weights": "weighted"}


def test_weighted_cells_sum_each_units_weight_and_refuse_more_than_the_l2_bound() -> None:
    units = [0, 0, 1, 2, 2, 2]
    cells = [1, 3, 3, 0, 1, 3]  # one row of width 4
    weights = [5, 9, 4]
    distinct, sums = weighted_cells(units, cells, weights, 4, row_size=4, max_per_row=3,
                                    scale=9, what="test")
    assert distinct.tolist() == [0, 1, 3]
    assert sums.tolist() == [4, 5 + 4, 5 + 9 + 4]
    assert sums.dtype == np.int64
    # unit 0 holds 2 cells of weight 7: 2 * 49 = 98 > 81
    with pytest.raises(ContributionError, match="l2 bound"):
        weighted_cells([0, 0], [0, 1], [7], 4, row_size=4, max_per_row=3, scale=9,
                       what="test")
    with pytest.raises(ContributionError, match="outside"):
        weighted_cells([0], [0], [10], 4, row_size=4, max_per_row=3, scale=9, what="test")
    with pytest.raises(ContributionError, match="twice"):
        weighted_cells([0, 0], [2, 2], [1], 4, row_size=4, max_per_row=3, scale=9,
                       what="test")


def _random_items(rng: np.random.Generator, n_docs: int, domain: list[str],
                  cap: int) -> list[list[str]]:
    return [list(rng.choice(domain, size=int(rng.integers(0, cap + 1)), replace=False))
            for _ in range(n_docs)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_removing_one_document_changes_only_its_own_cells_by_its_weights(seed: int) -> None:
    rng = np.random.default_rng(seed)
    domain = [f"span {i}" for i in range(40)]
    cap, scale, n_rows = 8, SPAN_WEIGHT_SCALE, 6
    items = _random_items(rng, 30, domain, cap)
    clusters = [sorted(int(d) for d in rng.choice(30, size=12, replace=False))
                for _ in range(n_rows)]
    full = sparse_fact_counts(clusters, items, domain, cap, max_overlap=n_rows,
                              weight_scale=scale).to_dense()
    gone = int(rng.integers(0, 30))
    # the neighbour without document ``gone``: every other document keeps its index
    without = [[d for d in members if d != gone] for members in clusters]
    rest = sparse_fact_counts(without, items, domain, cap, max_overlap=n_rows,
                              weight_scale=scale).to_dense()
    difference = full - rest
    weight = contribution_weight(max(len(items[gone]), 1), scale)
    own = np.zeros_like(difference)
    for r, members in enumerate(clusters):
        if gone in members:
            for span in items[gone]:
                own[r, domain.index(span)] = weight
    assert (difference == own).all()
    for row in difference:  # l2 <= S in every cluster
        assert float(np.sqrt((row.astype(float) ** 2).sum())) <= scale
    # the weights are floor(S / sqrt(m)): a short document weighs more, never past S
    assert contribution_weight(1, scale) == scale
    assert contribution_weight(32, scale) == math.floor(scale / math.sqrt(32))


def test_the_plan_keeps_rho_records_the_scale_and_charges_it() -> None:
    uniform = make_plan(make_config(None, {"generate": "facts", "span_weights": "uniform"}))
    weighted = make_plan(make_config(None, {"generate": "facts"}))  # the default
    assert weighted.rho_total == uniform.rho_total and weighted.rho_C == uniform.rho_C
    assert weighted.span_weight_scale == SPAN_WEIGHT_SCALE
    assert weighted.span_sensitivity == SPAN_WEIGHT_SCALE
    # rho_C = L S^2 / (2 sigma_C^2): sigma_C in weight units, S / sqrt(K_e + K_s) times the
    # uniform one
    ratio = SPAN_WEIGHT_SCALE / math.sqrt(uniform.K_e + uniform.K_s)
    assert weighted.sigma_C == pytest.approx(uniform.sigma_C * ratio, rel=1e-12)
    assert "span_weight_scale" not in uniform.as_dict()
    assert weighted.as_dict()["span_weight_scale"] == SPAN_WEIGHT_SCALE
    charge = fact_charge(0, sigma=weighted.sigma_C, max_items=32, domain=["a"],
                         weight_scale=SPAN_WEIGHT_SCALE)
    assert charge.params["l2_sensitivity"] == SPAN_WEIGHT_SCALE
    assert charge.params["weight_scale"] == SPAN_WEIGHT_SCALE
    assert charge.rho == pytest.approx(weighted.rho_C_per_cluster, rel=1e-12)
    with pytest.raises(ConfigError, match="--span-weights"):
        make_config(None, {"generate": "facts", "span_weights": "sqrt"})
    # a uniform build records what builds made before the option recorded
    assert "span_weights" not in make_config(
        None, {"generate": "facts", "span_weights": "uniform"}).released_options()
    assert make_config(None, {"generate": "facts"}).released_options()["span_weights"] == \
        "weighted"


def test_weighted_span_histograms_on_beam_release_what_the_local_build_releases(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(beam_ngrams, "BATCH_DOCUMENTS", 200)
    notes = write_clinic_dataset(tmp_path / "data", n_notes=600, n_diseases=6,
                                 seed=5)["notes"]
    local = _build(notes, tmp_path, "local", OPTIONS)
    beam = _build(notes, tmp_path, "beam", OPTIONS)
    rows = _ledger_rows(tmp_path / "state-local")
    facts = [json.loads(row[3]) for row in rows if row[0].endswith("/facts")]
    assert facts and all(p["weight_scale"] == SPAN_WEIGHT_SCALE
                         and p["l2_sensitivity"] == SPAN_WEIGHT_SCALE for p in facts)
    assert _ledger_rows(tmp_path / "state-beam") == rows
    assert beam.epsilon == local.epsilon and beam.clusters == local.clusters > 0
    texts = {r: pq.read_table(tmp_path / f"out-{r}" / "corpus.parquet").column("text")
             .to_pylist() for r in ("local", "beam")}
    assert texts["beam"] == texts["local"] and texts["local"]
    for runner in ("local", "beam"):
        assert verify_output(tmp_path / f"out-{runner}", tmp_path / "key.pem.pub",
                             allow_seeded=True) == []
    # a certificate whose histograms claim the uniform sensitivity fails verify
    certificate = tmp_path / "out-local" / "certificate.json"
    record = json.loads(certificate.read_text())
    record["plan"].pop("span_weight_scale")
    certificate.write_text(json.dumps(record))
    assert verify_output(tmp_path / "out-local", tmp_path / "key.pem.pub",
                         allow_seeded=True) != []

