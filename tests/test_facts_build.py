"""``build-corpus --generate facts`` end to end (issue 14): plan, releases, certificate, verify,
corpus ledger, resume, and what the corpus holds (released facts, never a patient's name)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_build import HashEmbedder

from dpsynrag.accounting.certificate import verify_output
from dpsynrag.accounting.corpus_ledger import BudgetRefusedError, CorpusLedger
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.eval.datasets import make_clinic_dataset, write_clinic_dataset
from dpsynrag.facts.fact_writer import TEXTS_PER_CLUSTER, _mentions
from dpsynrag.pipeline.build import make_plan, run_build
from dpsynrag.pipeline.config import ConfigError, make_config
from dpsynrag.pipeline.runners import LocalRunner

# the English lexicon pack's build (the default is n-grams: tests/test_ngram_build.py)
FACTS = {"generate": "facts", "facts_items": "terms", "L": 2, "runner": "local",
         "unit_column": "unit", "epsilon": 10.0}
N_NOTES, N_DISEASES, DATA_SEED = 600, 8, 5


class NoLLM:
    """Facts mode never calls the language model: any use fails the test."""

    def __getattr__(self, name: str):
        raise AssertionError(f"facts mode used the language model ({name})")


@pytest.fixture(scope="module")
def clinic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clinic-facts")
    return write_clinic_dataset(out, n_notes=N_NOTES, n_diseases=N_DISEASES,
                                seed=DATA_SEED)["notes"]


def _build(notes: Path, tmp: Path, name: str = "out", **options):
    config = make_config(None, {**FACTS, **options})
    key = tmp / "key.pem"
    if not key.exists():
        generate_keypair(key, tmp / "key.pem.pub")
    summary = run_build(notes, tmp / name, config, state_dir=tmp / f"state-{name}",
                        signing_key=key, runner=LocalRunner(NoLLM(), HashEmbedder()),
                        corpus_ledger=tmp / "corpus.sqlite", force=True)
    return config, summary


def test_facts_build_spends_the_plan_and_verifies(clinic: Path, tmp_path: Path) -> None:
    config, summary = _build(clinic, tmp_path)
    plan = make_plan(config)
    out = tmp_path / "out"
    assert verify_output(out, tmp_path / "key.pem.pub") == []
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["seeded"] is False
    # rho: histogram + phrases + L x one cluster's fact histogram, to the last digit
    assert math.isclose(summary.rho_spent, plan.rho_total, rel_tol=1e-12)
    guarantee = cert["guarantee"]
    assert 0 < guarantee["delta_approx"] <= plan.delta_phrases
    assert guarantee["epsilon"] <= config.epsilon * (1 + 1e-12)
    assert math.isclose(summary.epsilon, guarantee["epsilon"], rel_tol=1e-12)
    ledger = Ledger(tmp_path / "state-out" / "ledger.sqlite")
    stages = {r.stage for r in ledger.releases()}
    ledger.close()
    assert stages == {"a-histogram", "f-phrases", "f-roles", "f-facts"}
    # the corpus ledger was charged the same rho and the phrase release's delta
    with CorpusLedger(tmp_path / "corpus.sqlite") as corpus:
        [entry] = corpus.entries()
        assert math.isclose(entry.rho, summary.rho_spent, rel_tol=1e-12)
        assert 0 < entry.delta <= plan.delta_phrases
        assert corpus.privacy_unit is not None and "unit" in corpus.privacy_unit
    # the first charge came with the default lifetime cap: twice this build's epsilon, at
    # its delta (issue 16); the summary shows the lifetime spend against it
    assert summary.corpus_ledger == str(tmp_path / "corpus.sqlite")
    assert summary.lifetime_cap_epsilon == 2 * config.epsilon
    assert summary.lifetime_delta == config.delta
    assert math.isclose(summary.lifetime_epsilon, summary.epsilon, rel_tol=1e-9)
    _, second = _build(clinic, tmp_path, name="again")  # another build of the same corpus
    assert 1.3 * summary.lifetime_epsilon < second.lifetime_epsilon <= 2 * config.epsilon
    with pytest.raises(BudgetRefusedError):  # a third does not fit: refused before spending
        _build(clinic, tmp_path, name="third")
    assert not (tmp_path / "third").exists()


def test_facts_corpus_names_diseases_and_no_patient(clinic: Path, tmp_path: Path) -> None:
    _build(clinic, tmp_path)
    texts = [row["text"] for row in pq.read_table(tmp_path / "out" / "corpus.parquet")
             .to_pylist() if row["kept"]]
    assert texts
    dataset = make_clinic_dataset(n_notes=N_NOTES, n_diseases=N_DISEASES, seed=DATA_SEED)
    common = [d for d in dataset.diseases if d.n_notes >= 60]
    assert common
    joined = "\n".join(texts).lower()
    found = [d.name for d in common if d.name.lower() in joined]
    assert len(found) >= len(common) - 1, (found, [d.name for d in common])
    patients = {note.patient.lower() for note in dataset.notes}
    assert not [p for p in patients if p in joined]


def test_each_kept_cluster_gets_its_views_and_one_text_on_request(clinic: Path,
                                                                  tmp_path: Path) -> None:
    _build(clinic, tmp_path)
    rows = pq.read_table(tmp_path / "out" / "corpus.parquet").to_pylist()
    per_cluster = Counter(row["cluster_keyword"] for row in rows)
    assert max(per_cluster.values()) == TEXTS_PER_CLUSTER and min(per_cluster.values()) >= 1
    assert len({row["text"] for row in rows}) == len(rows)  # no two texts alike
    _build(clinic, tmp_path, name="one", texts_per_cluster=1)
    single = pq.read_table(tmp_path / "one" / "corpus.parquet").to_pylist()
    assert single and set(Counter(row["cluster_keyword"] for row in single).values()) == {1}
    # at every epsilon a cluster's texts hold the same keywords (they rank together)
    assert _keyword_sets(rows) and all(len(sets) == 1 for sets in _keyword_sets(rows).values())
    low = tmp_path / "low"
    low.mkdir()
    _build(clinic, low, epsilon=3.0)
    agreeing = _keyword_sets(pq.read_table(low / "out" / "corpus.parquet").to_pylist())
    assert agreeing and all(len(sets) == 1 for sets in agreeing.values())
    low_rows = pq.read_table(low / "out" / "corpus.parquet").to_pylist()
    assert max(Counter(row["cluster_keyword"] for row in low_rows).values()) == \
        TEXTS_PER_CLUSTER


def _keyword_sets(rows: list[dict]) -> dict[str, set[tuple[str, ...]]]:
    """Per cluster, the distinct sets of keywords of its texts (texts without keywords left
    out)."""
    sets: dict[str, set[tuple[str, ...]]] = {}
    for row in rows:
        _, sep, rest = row["text"].partition("Reported: ")
        if sep:
            words = tuple(sorted(rest.split(".")[0].split()))
            sets.setdefault(row["cluster_keyword"], set()).add(words)
    return sets


def test_a_resumed_facts_build_draws_nothing_new(clinic: Path, tmp_path: Path) -> None:
    _, first = _build(clinic, tmp_path, "same")
    texts = pq.read_table(tmp_path / "same" / "corpus.parquet").column("text").to_pylist()
    _, again = _build(clinic, tmp_path, "same")
    assert again.resumed and math.isclose(again.rho_spent, first.rho_spent, rel_tol=1e-15)
    assert pq.read_table(tmp_path / "same" / "corpus.parquet").column(
        "text").to_pylist() == texts


def test_facts_mode_defaults_to_one_cluster_per_document_and_keeps_token_defaults() -> None:
    assert make_config(None, {}).generate == "facts"  # the default mode, by measurement
    assert make_config(None, {}).L == 1 and make_config(None, {}).K_e is None  # the plan's
    assert make_config(None, {}).facts_items == "ngrams"  # no word list by default
    terms = {"facts_items": "terms"}
    assert make_plan(make_config(None, terms)).K_e == 6  # at epsilon 10
    assert make_plan(make_config(None, {**terms, "epsilon": 1.0})).K_e == 1
    assert make_plan(make_config(None, {**terms, "epsilon": 1.0, "K_e": 3})).K_e == 3
    assert make_config(None, {"generate": "facts", "L": 3}).L == 3
    tokens = make_config(None, {"generate": "tokens"})
    assert tokens.L == 5  # the paper's Table 6 for the token mode
    # token builds keep their fingerprint: facts options are not part of it
    assert "K_e" not in tokens.released_options() and "generate" not in tokens.released_options()
    assert make_config(None, {"generate": "tokens", "K_e": 7}).fingerprint() == \
        tokens.fingerprint()
    assert make_config(None, {}).fingerprint() != tokens.fingerprint()


@pytest.mark.parametrize("option", [{"T": 32}, {"K": 10}, {"R": 40}, {"k": 20},
                                    {"eps_theta": 0.4}, {"rho_mean": 0.009},
                                    {"keywords": "statistical"}, {"no_filter": True}])
def test_a_token_only_option_without_generate_means_a_token_build(option: dict) -> None:
    config = make_config(None, option)
    assert config.generate == "tokens" and config.L == 5
    assert config.fingerprint() == make_config(None, {"generate": "tokens", **option}
                                               ).fingerprint()
    assert make_config(None, {"generate": "facts", **option}).generate == "facts"


def test_a_toml_written_for_the_token_mode_stays_a_token_build(tmp_path: Path) -> None:
    toml = tmp_path / "build.toml"
    toml.write_text("[build]\nepsilon = 10.0\nK = 10\nT = 32\nL = 2\n")
    assert make_config(toml, {}).generate == "tokens"
    assert make_config(toml, {"generate": "facts"}).generate == "facts"  # a flag wins


def test_token_and_facts_options_without_generate_are_refused() -> None:
    with pytest.raises(ConfigError,
                       match="--T apply to --generate tokens and --K-e to --generate facts"):
        make_config(None, {"T": 32, "K_e": 2})
    assert make_config(None, {"T": 32, "K_e": 2, "generate": "tokens"}).generate == "tokens"


def test_token_writer_build_spends_the_plan_and_certifies_t_draws_per_kept_cluster(
        clinic: Path, tmp_path: Path) -> None:
    """Issue 15: --writer tokens adds L T (c/tau)^2 / 2 in the fact clusters' group; every kept
    cluster is charged exactly T draws; verify re-derives it; the texts are the LLM's."""
    from test_build import tiny_llm

    from dpsynrag.facts.fact_clusters import GROUP

    config = make_config(None, {**FACTS, "writer": "tokens", "T": 4, "public_top_k": 5})
    assert config.uses_llm and config.facts_writer_tokens
    key = tmp_path / "key.pem"
    generate_keypair(key, tmp_path / "key.pem.pub")
    summary = run_build(clinic, tmp_path / "out", config, state_dir=tmp_path / "state",
                        signing_key=key, runner=LocalRunner(tiny_llm(), HashEmbedder()),
                        corpus_ledger=tmp_path / "corpus.sqlite", force=True)
    plan = make_plan(config)
    assert plan.writer == "tokens" and plan.T == 4 and plan.rho_tokens > 0
    assert math.isclose(plan.rho_hist + plan.rho_A + plan.rho_R + plan.rho_C + plan.rho_tokens,
                        plan.rho_total, rel_tol=1e-12)
    assert math.isclose(summary.rho_spent, plan.rho_total, rel_tol=1e-12)
    assert verify_output(tmp_path / "out", tmp_path / "key.pem.pub") == []
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite")
    releases = list(ledger.releases())
    ledger.close()
    assert {r.stage for r in releases} == {"a-histogram", "f-phrases", "f-roles", "f-facts",
                                           "f-writer"}
    draws: dict[str, int] = {}
    for r in releases:
        if r.stage == "f-writer":
            assert r.group == GROUP
            draws[r.partition] = draws.get(r.partition, 0) + int(r.params.get("tokens", 1))
    table = pq.read_table(tmp_path / "out" / "corpus.parquet").to_pylist()
    assert len(draws) == len(table) >= config.L and set(draws.values()) == {config.T}
    assert all(not row["text"].startswith("Reported:") for row in table)
    cert = json.loads((tmp_path / "out" / "certificate.json").read_text())
    assert cert["config"]["writer"] == "tokens" and cert["config"]["public_top_k"] == 5
    assert "no language model" not in json.dumps(cert["models"]["llm"])
    from dpsynrag.accounting.explain import explain_certificate

    explained = explain_certificate(cert, verified=True, trust="test")
    assert "rewritten by the language model" in explained and "top-5" in explained
    # a token writer's plan printed by 'dpsynrag budget' has the writer's row
    assert [row[0] for row in plan.stage_rows()][-1] == "(f) token writer"


def test_token_writer_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="--share-tokens"):
        make_config(None, {**FACTS, "writer": "tokens", "share_phrases": 0.5,
                           "share_tokens": 0.5})
    with pytest.raises(ConfigError, match="--public-document does not apply"):
        make_config(None, {**FACTS, "writer": "tokens", "public_document": "x"})
    with pytest.raises(ConfigError, match="--writer applies to --generate facts"):
        make_config(None, {"generate": "tokens", "writer": "tokens"})
    # --writer tokens alone means facts, even beside token options such as --T
    assert make_config(None, {"writer": "tokens", "T": 8, "facts_items": "terms"}
                       ).generate == "facts"
    # a template facts build keeps its fingerprint: the writer options are not released
    assert "writer" not in make_config(None, FACTS).released_options()


def test_writer_keeps_note_appends_the_released_note_at_no_cost(clinic: Path,
                                                                 tmp_path: Path) -> None:
    """Issue 15: --writer-keeps-note makes each text the writer's reply followed by its
    cluster's template note; the same released values, so the same rho and releases."""
    from test_build import tiny_llm

    options = {**FACTS, "writer": "tokens", "T": 3, "public_top_k": 5, "seed": 7}
    tables, spent, released = [], [], []
    for keeps in (False, True):
        config = make_config(None, {**options, "writer_keeps_note": keeps})
        out = tmp_path / f"out-{keeps}"
        summary = run_build(clinic, out, config, state_dir=tmp_path / f"state-{keeps}",
                            signing_key=None, runner=LocalRunner(tiny_llm(), HashEmbedder()),
                            corpus_ledger=tmp_path / f"corpus-{keeps}.sqlite", force=True)
        ledger = Ledger(tmp_path / f"state-{keeps}" / "ledger.sqlite")
        released.append([(r.key, r.rho, r.partition) for r in ledger.releases()])
        ledger.close()
        spent.append(summary.rho_spent)
        tables.append(pq.read_table(out / "corpus.parquet").to_pylist())
    assert spent[0] == spent[1] and released[0] == released[1]
    replies, combined = tables
    assert len(replies) == len(combined) >= 1
    for reply, row in zip(replies, combined, strict=True):
        assert row["text"].startswith(reply["text"].strip())
        note = row["text"][len(reply["text"].strip()):].strip()
        # the appended note is its cluster's template note: it names the cluster's released
        # anchor as write_notes checks every kept fact (whole words, case-folded)
        assert note and row["cluster_keyword"] == reply["cluster_keyword"]
        assert _mentions(note, row["cluster_keyword"]), note
    assert make_config(None, {**options, "writer_keeps_note": True}).fingerprint() != \
        make_config(None, options).fingerprint()


def test_writer_keeps_note_is_checked() -> None:
    with pytest.raises(ConfigError, match="--writer-keeps-note applies"):
        make_config(None, {**FACTS, "writer_keeps_note": True})
    with pytest.raises(ConfigError, match="true or false"):
        make_config(None, {**FACTS, "writer": "tokens", "writer_keeps_note": "yes"})
    # writer builds made before the option keep their fingerprint
    plain = make_config(None, {**FACTS, "writer": "tokens"})
    assert "writer_keeps_note" not in plain.released_options()


@pytest.mark.parametrize("levers", ["public-difference", "slot",
                                    "top-k,public-facts,candidates,trie"])
def test_writer_ablation_keeps_the_releases_and_rho(clinic: Path, tmp_path: Path,
                                                    levers: str) -> None:
    """Issue 15's ablation: switching a lever of the writer off is a public choice: the same
    ledger keys, partitions and rho as the full writer; only the texts may change."""
    from test_build import tiny_llm

    options = {**FACTS, "writer": "tokens", "T": 3, "public_top_k": 5, "seed": 11,
               "response_prefix": "Diagnosis: {keyword}. Symptoms:"}
    tables, released, spent = [], [], []
    for ablate in ("", levers):
        config = make_config(None, {**options, "writer_ablate": ablate})
        tag = "full" if not ablate else "ablated"
        summary = run_build(clinic, tmp_path / f"out-{tag}", config,
                            state_dir=tmp_path / f"state-{tag}", signing_key=None,
                            runner=LocalRunner(tiny_llm(), HashEmbedder()),
                            corpus_ledger=tmp_path / f"corpus-{tag}.sqlite", force=True)
        ledger = Ledger(tmp_path / f"state-{tag}" / "ledger.sqlite")
        released.append([(r.key, r.rho, r.partition) for r in ledger.releases()])
        ledger.close()
        spent.append(summary.rho_spent)
        tables.append(pq.read_table(tmp_path / f"out-{tag}" / "corpus.parquet").to_pylist())
    assert spent[0] == spent[1]
    # the same releases before the writer, and the same rho per cluster in it (a cluster that
    # draws EOS early is charged its unstarted draws as one reserve: same total)
    assert [r for r in released[0] if "/token" not in r[0]] == \
        [r for r in released[1] if "/token" not in r[0]]
    per_cluster: list[dict[str, float]] = [{}, {}]
    for totals, rows in zip(per_cluster, released, strict=True):
        for key, rho, partition in rows:
            if "/token" in key:
                totals[partition] = totals.get(partition, 0.0) + rho
    assert per_cluster[0].keys() == per_cluster[1].keys() and all(
        math.isclose(per_cluster[0][p], per_cluster[1][p], rel_tol=1e-12) for p in per_cluster[0])
    assert len(tables[0]) == len(tables[1]) >= 1
    cert = json.loads((tmp_path / "out-ablated" / "certificate.json").read_text())
    assert cert["config"]["writer_ablate"] == levers
    from dpsynrag.accounting.explain import explain_certificate

    assert f"levers switched off: {levers}" in explain_certificate(cert, verified=True,
                                                                   trust="test")


def test_writer_inputs_switch_each_lever_off() -> None:
    """What each lever of --writer-ablate changes in the writer's public inputs."""
    from dpsynrag.facts.fact_writer import ClusterFacts
    from dpsynrag.pipeline.facts_stages import ALL_TOKENS, WRITER_NEUTRAL_DOCUMENT, writer_inputs

    written = [ClusterFacts(cluster=3, anchor="cough", support=9, phrases=("Brel Fever",),
                            keywords=("fever",))]
    notes = ["Symptoms: fever. Brel Fever."]
    base = {**FACTS, "writer": "tokens", "public_top_k": 7,
            "response_prefix": "Diagnosis: {keyword}. Symptoms:"}

    def inputs(levers: str) -> tuple[list[str], Any]:
        return writer_inputs(make_config(None, {**base, "writer_ablate": levers}), written,
                             notes)

    prefixes, full = inputs("")
    assert prefixes == ["Diagnosis: Brel Fever. Symptoms:"] and full is not None
    assert (full.documents, full.top_k, full.candidate_support, full.trie_completion) == \
        (notes, 7, True, True)
    assert list(full.candidates[0]) == ["Brel Fever", "Cough", "fever"]
    assert inputs("slot")[0] == ["Diagnosis:"] and inputs("slot")[1] == full
    assert inputs("public-difference") == (prefixes, None)
    assert inputs("top-k")[1].top_k == ALL_TOKENS
    assert inputs("public-facts")[1].documents == [WRITER_NEUTRAL_DOCUMENT]
    assert inputs("candidates")[1].candidate_support is False
    assert inputs("trie")[1].trie_completion is False
    both = inputs("trie,candidates")[1]
    assert not both.trie_completion and not both.candidate_support and both.top_k == 7


def test_writer_ablate_is_checked() -> None:
    with pytest.raises(ConfigError, match="unknown lever 'nope'"):
        make_config(None, {**FACTS, "writer": "tokens", "writer_ablate": "trie,nope"})
    with pytest.raises(ConfigError, match="--writer-ablate applies"):
        make_config(None, {**FACTS, "writer_ablate": "trie"})
    with pytest.raises(ConfigError, match="comma-separated"):
        make_config(None, {**FACTS, "writer": "tokens", "writer_ablate": ["trie"]})
    plain = make_config(None, {**FACTS, "writer": "tokens"})
    assert "writer_ablate" not in plain.released_options()  # older writer builds keep theirs
    ablated = make_config(None, {**FACTS, "writer": "tokens", "writer_ablate": "slot"})
    assert ablated.fingerprint() != plain.fingerprint()


def test_writer_ablate_help_names_every_lever() -> None:
    import argparse

    from dpsynrag.cli.build_args import add_build_arguments
    from dpsynrag.pipeline.config import WRITER_LEVERS

    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    (action,) = [a for a in parser._actions if a.dest == "writer_ablate"]
    assert action.help is not None and "--writer-ablate" in parser.format_help()
    for lever in WRITER_LEVERS:
        assert lever in action.help


def _spent(tmp: Path) -> int:
    ledger_path = tmp / "corpus.sqlite"
    if not ledger_path.exists():
        return 0
    with CorpusLedger(ledger_path) as corpus:
        return len(corpus.entries())


def test_an_output_path_that_cannot_take_the_corpus_is_refused_before_spending(
        clinic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynrag.pipeline.build import BuildError

    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(BuildError, match=r"not a directory.*nothing was spent"):
        _build(clinic, tmp_path, name="a-file")
    assert _spent(tmp_path) == 0
    (tmp_path / "mounted").mkdir()
    monkeypatch.setattr("os.path.ismount", lambda p: Path(p).name == "mounted")
    with pytest.raises(BuildError, match=r"mount point.*mounted/corpus.*nothing was spent"):
        _build(clinic, tmp_path, name="mounted")
    assert _spent(tmp_path) == 0


def test_a_failed_write_after_the_spend_says_how_to_finish_without_spending_again(
        clinic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    from dpsynrag.pipeline.build import BuildError

    real_replace = os.replace

    def busy(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        if Path(dst).name == "out":  # the corpus's rename into place only
            raise OSError(errno.EBUSY, "Device or resource busy")
        real_replace(src, dst)

    monkeypatch.setattr("os.replace", busy)
    with pytest.raises(BuildError, match=r"budget is spent.*--state-dir .*state-out -o NEW_OUT"):
        _build(clinic, tmp_path)
    assert _spent(tmp_path) == 1 and not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.partial-*"))  # no half-written corpus left
    monkeypatch.setattr("os.replace", real_replace)
    config = make_config(None, FACTS)
    summary = run_build(clinic, tmp_path / "elsewhere", config, state_dir=tmp_path / "state-out",
                        signing_key=tmp_path / "key.pem",
                        runner=LocalRunner(NoLLM(), HashEmbedder()),
                        corpus_ledger=tmp_path / "corpus.sqlite", force=True)
    assert summary.resumed and _spent(tmp_path) == 1  # written, not charged twice
    assert verify_output(tmp_path / "elsewhere", tmp_path / "key.pem.pub") == []


def test_a_measurement_build_above_the_epsilon_bound_does_not_verify(clinic: Path,
                                                                     tmp_path: Path) -> None:
    _build(clinic, tmp_path, epsilon=40.0, allow_large_epsilon=True)
    problems = verify_output(tmp_path / "out", tmp_path / "key.pem.pub")
    assert [p for p in problems if "above 30" in p and "not for release" in p] == problems


def test_a_facts_state_made_by_other_facts_rules_is_not_resumed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dpsynrag.pipeline.config as config_module

    before = make_config(None, {}).fingerprint()
    tokens = make_config(None, {"generate": "tokens"}).fingerprint()
    monkeypatch.setattr(config_module, "FACTS_RULES_VERSION",
                        config_module.FACTS_RULES_VERSION + 1)
    assert make_config(None, {}).fingerprint() != before
    assert make_config(None, {"generate": "tokens"}).fingerprint() == tokens
