"""``verify`` against honest builds of deliberately wrong code: the mutation suite.

Each mutation replaces one real function of the build (a charge recorded too small, a release
drawn outside the ledger, released twice, an unplanned release, the plan left out of the
certificate) and runs a whole build, which signs a certificate that is wrong. ``verify`` must
reject every one of them with the problem that names the fault, re-deriving each sensitivity
and noise scale from the certificate's public config (the planner's own rules), and must
accept the same build run with the code unchanged, in both generation modes.

The builds are small: 120 clinic notes and a public vocabulary cut down to the words those
notes use (a stand-in for the 234k-word list, whose exact noisy histogram alone takes seconds
to draw; the build reads any public vocabulary the same way).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_build import HashEmbedder
from test_facts_build import NoLLM
from test_private_prediction import tiny_llm

from dpsynrag.accounting import ledger as ledger_module
from dpsynrag.accounting.certificate import NO_PLAN, verify_output
from dpsynrag.accounting.contributions import ContributionError
from dpsynrag.accounting.ledger import (
    Charge,
    NoiseMismatchError,
    SamplerCheckError,
    SelectionThresholdError,
)
from dpsynrag.accounting.noise import discrete_gaussian
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.cli.build import main as build_corpus_main
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.pipeline import build, facts_stages, token_stages
from dpsynrag.pipeline.build import BuildSummary, make_plan, run_build
from dpsynrag.pipeline.config import FACTS_RULES_VERSION, BuildConfig, make_config
from dpsynrag.pipeline.runners import LocalRunner
from dpsynrag.transforms.vocabulary import PublicVocabulary, public_vocabulary

# the facts mode of terms, roles and anchored clusters, named: its releases (the phrase
# selection, the role histogram, the fact histograms) are what the facts mutations fault,
# whichever --facts-items is the default
FACTS = {"generate": "facts", "facts_items": "terms", "L": 2, "runner": "local",
         "unit_column": "unit", "epsilon": 10.0}
TOKENS = {"generate": "tokens", "keywords": "statistical", "R": 3, "k": 8, "L": 2, "T": 3,
          "no_filter": True, "runner": "local", "epsilon": 10.0}


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clinic-mutations")
    return write_clinic_dataset(out, n_notes=120, n_diseases=4, seed=5)["notes"]


@pytest.fixture(scope="module")
def small_vocabulary(notes: Path) -> PublicVocabulary:
    """The public vocabulary's words that occur in the notes."""
    used = set(re.findall(r"[a-z]+", notes.read_text(encoding="utf-8").lower()))
    return PublicVocabulary.from_words(w for w in public_vocabulary().words if w in used)


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "key.pem"
    generate_keypair(path, path.with_name("key.pem.pub"))
    return path


@pytest.fixture(autouse=True)
def _small_vocabulary(monkeypatch: pytest.MonkeyPatch,
                      small_vocabulary: PublicVocabulary) -> None:
    for stages in (facts_stages, token_stages):
        monkeypatch.setattr(stages, "public_vocabulary", lambda: small_vocabulary)


def _build(mode: str, notes: Path, tmp: Path, key: Path,
           options: dict[str, Any] | None = None) -> tuple[BuildConfig, BuildSummary]:
    config = make_config(None, {**(FACTS if mode == "facts" else TOKENS), **(options or {})})
    runner = LocalRunner(NoLLM() if mode == "facts" else tiny_llm(), HashEmbedder())
    summary = run_build(notes, tmp / "out", config, state_dir=tmp / "state", signing_key=key,
                        runner=runner, corpus_ledger=False)
    return config, summary


def _verify(tmp: Path, key: Path) -> list[str]:
    return verify_output(tmp / "out", key.with_name("key.pem.pub"))


# ---------------------------------------------------------------------- the honest builds
def test_a_facts_build_of_the_rules_before_the_option_verifies(
        notes: Path, tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A facts build made before ``facts_rules`` was released (versions 1 and 2) records K_e
    as None and was planned by the default-K_e rule of then (at most 3 terms, tau_A <= 12):
    verify plans it again by that rule, not by today's (which gives 6 at epsilon 10)."""
    released = BuildConfig.released_options

    def before_the_option(self: BuildConfig) -> dict[str, Any]:
        options = released(self)
        options.pop("facts_rules", None)
        return options

    with monkeypatch.context() as mp:
        mp.setattr(BuildConfig, "released_options", before_the_option)
        _build("facts", notes, tmp_path, key)
    cert = json.loads((tmp_path / "out" / "certificate.json").read_text())
    assert "facts_rules" not in cert["config"] and cert["config"]["K_e"] is None
    assert cert["plan"]["K_e"] == 3
    assert _verify(tmp_path, key) == []



@pytest.mark.parametrize("mode", ["facts", "tokens"])
def test_the_honest_build_verifies(mode: str, notes: Path, tmp_path: Path, key: Path) -> None:
    config, summary = _build(mode, notes, tmp_path, key)
    assert _verify(tmp_path, key) == []
    cert = json.loads((tmp_path / "out" / "certificate.json").read_text())
    if mode == "facts":  # the rules its default K_e followed, and that K_e
        assert cert["config"]["facts_rules"] == FACTS_RULES_VERSION
        assert cert["config"]["K_e"] is None and cert["plan"]["K_e"] == 6
    assert summary.rho_spent == pytest.approx(make_plan(config).rho_total, rel=1e-9)
    groups = {g["name"]: len(g["partitions"]) for g in cert["mechanisms"]["parallel_groups"]}
    # the clusters of the build's own mode, and no empty group of the other mode's
    assert groups == ({"fact-clusters": groups["fact-clusters"]} if mode == "facts"
                      else {"clusters": config.R})
    assert all(n > 0 for n in groups.values())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("mode", ["facts", "tokens"])
def test_the_certificate_names_what_the_build_read(mode: str, notes: Path, tmp_path: Path,
                                                   key: Path) -> None:
    """The config names the keyword source and the word-frequency prior (its version and the
    sha256 of its English list); a facts certificate carries no token-mode option, prompt or
    stage (c)/(d) wording, a token certificate keeps them."""
    from importlib.metadata import version

    from wordfreq import available_languages

    _build(mode, notes, tmp_path, key)
    cert = json.loads((tmp_path / "out" / "certificate.json").read_text())
    config = cert["config"]
    assert config["keywords"] == "statistical"
    assert config["keyword_prior"] == f"wordfreq {version('wordfreq')} zipf_frequency(en)"
    assert config["keyword_prior_sha256"] == _sha256(Path(available_languages("best")["en"]))
    token_only = set(BuildConfig.TOKENS_ONLY) - {"keywords"}
    if mode == "facts":
        assert not token_only & set(config)
        assert "prompt_sha256" not in config
        assert "(f2)" in cert["not_charged"] and "Stage (b)" not in cert["not_charged"]
        assert "self-filter" not in cert["not_charged"]
    else:
        assert {"K", "R", "k", "T", "clip", "eps_theta"} <= set(config)
        assert set(config["prompt_sha256"]) == {"rephrase", "keywords", "self_filter"}
        assert "Stage (b)" in cert["not_charged"] and "(f2)" not in cert["not_charged"]


def test_a_token_writer_certificate_keeps_the_options_its_writer_reads() -> None:
    """--writer tokens reads T, the clip, the reply prefix and the public prior's settings,
    and its own prompt: those stay in the facts certificate's config, the rest does not."""
    config = make_config(None, {**FACTS, "writer": "tokens", "T": 5, "public_top_k": 7})
    public = build._public_config(config)
    assert {"T", "clip", "rephrase_prompt", "response_prefix", "public_top_k",
            "public_temperature", "writer", "share_tokens"} <= set(public)
    assert public["T"] == 5 and public["public_top_k"] == 7
    assert not {"K", "R", "k", "eps_theta", "rho_mean", "keyword_prompt", "filter_prompt",
                "no_filter", "no_retrieval", "public_prior", "public_document"} & set(public)
    written = hashlib.sha256(facts_stages.WRITER_PROMPT.encode()).hexdigest()
    assert public["prompt_sha256"] == {"writer": written}
    # the released options (the state directory's fingerprint) are unchanged by this
    assert {"K", "R", "keywords"} <= set(config.released_options())


# ---------------------------------------------------------------------- the mutations
@dataclasses.dataclass(frozen=True)
class Mutation:
    """One deliberate fault: ``apply`` patches the build; ``expected`` are fragments of the
    problems verify must report; ``effect`` is what the signed rho does against the plan's:
    "under" (the certificate understates epsilon), "over" (it charges more than the plan)
    or "same". ``refused``: the build itself stops at the faulty release (the ledger checks
    the noise each draw declares against its charge); verify is then tested on the same build
    with that check switched off, as code that bypassed it would sign."""

    mode: str
    apply: Callable[[pytest.MonkeyPatch], None]
    expected: tuple[str, ...]
    effect: str
    refused: bool = False  # the ledger refuses the draw (its noise is not the charged noise)


def _outside(release: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a stage's release so that its noise is drawn without the ledger (nothing
    charged, nothing recorded): ``release`` gets a random source instead of a ledger."""
    def patched(ledger: Any, *args: Any, **kwargs: Any) -> Any:
        del ledger
        return release(secure_rng(), *args, **kwargs)

    return patched


def _histogram_sensitivity(mp: pytest.MonkeyPatch) -> None:
    """The keyword histogram recorded for K/4 keywords per document."""
    from dpsynrag.transforms import histogram

    real = histogram.histogram_charge
    mp.setattr(histogram, "histogram_charge",
               lambda K, sigma, size: real(max(K // 4, 1), sigma, size))


def _histogram_outside(mp: pytest.MonkeyPatch) -> None:
    """The keyword histogram's noise drawn outside the ledger."""
    from dpsynrag.transforms import histogram

    def release(rng: Any, counts: np.ndarray, *, K: int, sigma: float,
                key: str = "histogram") -> np.ndarray:
        return discrete_gaussian(np.asarray(counts, dtype=np.int64), sigma, rng)

    mp.setattr(histogram, "release_histogram", _outside(release))


def _histogram_twice(mp: pytest.MonkeyPatch) -> None:
    """The keyword histogram released and charged twice (a second key)."""
    from dpsynrag.transforms import histogram

    real = histogram.release_histogram

    def twice(ledger: Any, counts: np.ndarray, **kwargs: Any) -> np.ndarray:
        real(ledger, counts, **{**kwargs, "key": "histogram-again"})
        return real(ledger, counts, **kwargs)

    mp.setattr(histogram, "release_histogram", twice)


def _unplanned_release(mp: pytest.MonkeyPatch) -> None:
    """A noisy document count released through the ledger that no plan has."""
    real = facts_stages.released_top_keywords

    def with_a_count(ledger: Any, doc_keywords: Any, *args: Any, **kwargs: Any) -> Any:
        charge = Charge("a-count", "discrete_gaussian", {"sigma": 10.0, "l2_sensitivity": 1.0},
                        1.0, "l2")
        ledger.release("documents", charge,
                       lambda rng: discrete_gaussian(np.array([len(doc_keywords)]), 10.0, rng))
        return real(ledger, doc_keywords, *args, **kwargs)

    mp.setattr(facts_stages, "released_top_keywords", with_a_count)


def _phrases_outside(mp: pytest.MonkeyPatch) -> None:
    """The phrase partition selection drawn outside the ledger."""
    from dpsynrag.accounting import partition_selection as ps

    def release(rng: Any, key: str, counts: dict[str, int], *, max_items: int, sigma: float,
                delta: float) -> dict[str, int]:
        tau = ps.selection_threshold(sigma, max_items, delta)
        phrases = sorted(counts)
        noisy = discrete_gaussian(np.array([counts[p] for p in phrases]), sigma, rng)
        return {p: int(c) for p, c in zip(phrases, noisy, strict=True) if c >= tau}

    mp.setattr(ps, "release_partitions", _outside(release))


def _phrases_one_item(mp: pytest.MonkeyPatch) -> None:
    """The phrase release calibrated and charged for one term per document (K_e hold one)."""
    from dpsynrag.accounting import partition_selection as ps

    real = ps.release_partitions
    mp.setattr(ps, "release_partitions",
               lambda *args, **kwargs: real(*args, **{**kwargs, "max_items": 1}))


def _roles_outside(mp: pytest.MonkeyPatch) -> None:
    """The role histogram's noise drawn outside the ledger."""
    from dpsynrag.facts.roles import ROLES, role_counts

    def release(rng: Any, documents: Any, released: Any, *, K_e: int,
                sigma: float) -> np.ndarray:
        noisy = discrete_gaussian(role_counts(documents, released, K_e), sigma, rng)
        return np.asarray(noisy, dtype=np.int64).reshape(len(released), len(ROLES))

    mp.setattr(facts_stages, "release_roles", _outside(release))


def _roles_sensitivity(mp: pytest.MonkeyPatch) -> None:
    """The role histogram recorded for one term per document instead of K_e."""
    from dpsynrag.facts import roles

    real = roles.role_charge
    mp.setattr(roles, "role_charge",
               lambda *, sigma, K_e, released: real(sigma=sigma, K_e=1, released=released))


def _facts_sensitivity(mp: pytest.MonkeyPatch) -> None:
    """Each fact histogram recorded at sqrt(K_e) instead of sqrt(K_e + K_s) (drawn as
    planned: only the recorded cost is too small)."""
    from dpsynrag.facts import fact_clusters

    real = fact_clusters.fact_charge
    mp.setattr(fact_clusters, "fact_charge",
               lambda r, *, sigma, max_items, domain, group, fingerprint=None,
               weight_scale=None: real(
                   r, sigma=sigma, max_items=3, domain=domain, group=group,
                   fingerprint=fingerprint, weight_scale=weight_scale))


def _facts_less_noise(mp: pytest.MonkeyPatch) -> None:
    """The fact histograms drawn (and recorded) at half the planned sigma_C."""
    real = facts_stages.release_fact_histograms
    mp.setattr(facts_stages, "release_fact_histograms",
               lambda *args, sigma, **kwargs: real(*args, sigma=sigma / 2, **kwargs))


def _facts_outside(mp: pytest.MonkeyPatch) -> None:
    """Every cluster's fact histogram drawn outside the ledger."""
    from dpsynrag.facts.fact_clusters import fact_counts

    def release(rng: Any, clusters: Any, doc_items: Any, domain: Any, *, sigma: float,
                max_items: int, L: int, progress: Any = None) -> np.ndarray:
        return discrete_gaussian(fact_counts(clusters, doc_items, domain, max_items), sigma,
                                 rng)

    mp.setattr(facts_stages, "release_fact_histograms", _outside(release))


def _facts_twice(mp: pytest.MonkeyPatch) -> None:
    """The first cluster's fact histogram released and charged a second time."""
    from dpsynrag.facts import fact_clusters

    real = facts_stages.release_fact_histograms

    def twice(ledger: Any, clusters: Any, doc_items: Any, domain: Any, *, sigma: float,
              max_items: int, **kwargs: Any) -> np.ndarray:
        noisy = real(ledger, clusters, doc_items, domain, sigma=sigma, max_items=max_items,
                     **kwargs)
        exact = fact_clusters.fact_counts(clusters, doc_items, domain, max_items)[0]
        ledger.release("cluster/00000/facts-again",
                       fact_clusters.fact_charge(0, sigma=sigma, max_items=max_items,
                                                 domain=domain),
                       lambda rng: discrete_gaussian(exact, sigma, rng))
        return noisy

    mp.setattr(facts_stages, "release_fact_histograms", twice)


def _plan_removed(mp: pytest.MonkeyPatch) -> None:
    """The certificate written without the plan."""
    real = build.build_certificate
    mp.setattr(build, "build_certificate", lambda ledger, **kwargs: real(
        ledger, **{**kwargs, "plan": {}}))


def _plan_for_another_epsilon(mp: pytest.MonkeyPatch) -> None:
    """The build planned (and its noise drawn) for twice the config's epsilon; the certificate
    records that plan and the config as given, and its arithmetic is right."""
    real = build.make_plan
    mp.setattr(build, "make_plan", lambda config, vocab_size=None: real(
        dataclasses.replace(config, epsilon=2 * config.epsilon), vocab_size))


def _default_terms_of_other_rules(mp: pytest.MonkeyPatch) -> None:
    """The build planned the default K_e by the rule of the facts rules before version 3
    (at most 3 terms) but records today's ``facts_rules``: its releases follow a plan that the
    rules it names do not make."""
    real = build.make_plan
    mp.setattr(build, "make_plan", lambda config, vocab_size=None: real(
        dataclasses.replace(config, K_e=config.K_e or 3), vocab_size))


def _noisy_sum_sensitivity(mp: pytest.MonkeyPatch) -> None:
    """Stage (c)'s noisy sum recorded at l2 sensitivity 1/2 (drawn as planned)."""
    from dpsynrag.transforms import retrieval

    real = retrieval.mean_charge

    def charge(r: int, sigma_mu: float) -> Charge:
        honest = real(r, sigma_mu)
        return dataclasses.replace(honest, sensitivity=0.5,
                                   params={**honest.params, "l2_sensitivity": 0.5})

    mp.setattr(retrieval, "mean_charge", charge)


def _threshold_epsilon(mp: pytest.MonkeyPatch) -> None:
    """Stage (c)'s threshold EM run at eps_theta, recorded at eps_theta / 2."""
    from dpsynrag.transforms import retrieval

    real = retrieval.threshold_charge
    mp.setattr(retrieval, "threshold_charge",
               lambda r, eps_theta, k: real(r, eps_theta / 2, k))


def _token_temperature(mp: pytest.MonkeyPatch) -> None:
    """Stage (d)'s draws recorded at twice the temperature they are sampled at."""
    from dpsynrag.transforms.prediction_release import PartitionTokenSampler

    real = PartitionTokenSampler._charge

    def charge(self: Any, partition: str, tokens: int | None = None) -> Charge:
        honest = real(self, partition, tokens)
        params = {**honest.params, "temperature": 2 * honest.params["temperature"]}
        return dataclasses.replace(honest, params=params)

    mp.setattr(PartitionTokenSampler, "_charge", charge)


def _last_token_outside(mp: pytest.MonkeyPatch) -> None:
    """Stage (d)'s last step (token T) drawn outside the ledger: T - 1 draws charged."""
    from dpsynrag.transforms.prediction_release import PartitionTokenSampler

    real = PartitionTokenSampler.__call__

    def call(self: Any, votes: np.ndarray, active: list[int]) -> np.ndarray:
        last = [i for i, g in enumerate(active) if self.steps[g] == self.T - 1]
        if not last:
            return real(self, votes, active)
        rest = [i for i in range(len(active)) if i not in last]
        tokens = np.zeros(len(active), dtype=np.int64)
        if rest:
            tokens[rest] = real(self, np.asarray(votes)[rest], [active[i] for i in rest])
        rng = secure_rng()
        for i in last:  # the exact softmax draw, without the ledger
            z = np.asarray(votes[i], dtype=np.float64) / self.temperature
            p = np.exp(z - z.max())
            tokens[i] = int(np.searchsorted(np.cumsum(p / p.sum()), rng.random()))
        self._advance([active[i] for i in last], [int(tokens[i]) for i in last])
        return tokens

    mp.setattr(PartitionTokenSampler, "__call__", call)


MUTATIONS = {
    # facts mode (the default): each charge understated
    "keyword-histogram-sensitivity": Mutation("facts", _histogram_sensitivity, (
        "histogram's sensitivity is not sqrt", "the planned keyword histogram"), "under",
        refused=True),
    "phrase-release-for-one-item": Mutation("facts", _phrases_one_item, (
        "phrase release's max_items is not the planned one", "the planned phrase release"),
        "under"),
    "role-histogram-sensitivity": Mutation("facts", _roles_sensitivity, (
        "role histogram's sensitivity is not sqrt(K_e)", "the planned role histogram"),
        "under",
        refused=True),
    "fact-histogram-sensitivity": Mutation("facts", _facts_sensitivity, (
        "fact histogram sensitivity is not sqrt(K_e + K_s)", "the planned fact histogram"),
        "under",
        refused=True),
    "fact-histogram-less-noise": Mutation("facts", _facts_less_noise, (
        "fact histogram sigma is not the planned sigma_C", "the planned cluster"), "over"),
    # facts mode: each release missing (drawn outside the ledger)
    "keyword-histogram-outside-ledger": Mutation("facts", _histogram_outside, (
        "0 keyword histogram releases", "the planned keyword histogram"), "under"),
    "phrases-outside-ledger": Mutation("facts", _phrases_outside, (
        "0 phrase releases", "the planned phrase release"), "under"),
    "role-histogram-outside-ledger": Mutation("facts", _roles_outside, (
        "the planned role histogram was not released",), "under"),
    "fact-histograms-outside-ledger": Mutation("facts", _facts_outside, (
        "coverage: the corpus holds notes of",), "under"),
    # facts mode: extra and duplicated releases (over-charged), the plan removed
    "keyword-histogram-twice": Mutation("facts", _histogram_twice, (
        "keyword histogram", "over-charged (charged twice)", "more than the planned"), "over"),
    "unplanned-release": Mutation("facts", _unplanned_release, (
        "release 'documents'", "is not a planned release", "more than the planned"), "over"),
    "fact-histogram-twice": Mutation("facts", _facts_twice, (
        "fact histogram", "over-charged (charged twice)", "the planned cluster"), "over"),
    "plan-removed": Mutation("facts", _plan_removed, (NO_PLAN,), "same"),
    "plan-for-another-epsilon": Mutation("facts", _plan_for_another_epsilon, (
        "the recorded epsilon 20.0 is not the planner's 10.0",
        "the recorded sigma_C", "fact histogram sigma is not the planned sigma_C"), "over"),
    "default-terms-of-other-rules": Mutation("facts", _default_terms_of_other_rules, (
        "the recorded K_e 3 is not the planner's 6",
        "phrase release's max_items is not the planned one"), "same"),
    # token mode (the paper's): stage (c) and (d) charges understated, draws not charged
    "noisy-sum-sensitivity": Mutation("tokens", _noisy_sum_sensitivity, (
        "the planned noisy sum", "the planned cluster"), "under",
        refused=True),
    "threshold-epsilon": Mutation("tokens", _threshold_epsilon, (
        "c-threshold epsilon is not the planned one", "the planned similarity threshold"),
        "under"),
    "token-temperature": Mutation("tokens", _token_temperature, (
        "token c/tau is not the planned one", "the planned token draws"), "under"),
    "last-token-outside-ledger": Mutation("tokens", _last_token_outside, (
        "charged 2 token draws, not T = 3", "the planned token draws"), "under"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_verify_rejects_a_build_of_wrong_code(name: str, notes: Path, tmp_path: Path,
                                              key: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """The build runs to the end and signs its certificate (for a fault the ledger refuses,
    once that check is switched off); verify must not pass it."""
    mutation = MUTATIONS[name]
    mutation.apply(monkeypatch)
    if mutation.refused:
        # the ledger stops the build at the release whose noise is not the charged noise:
        # nothing signed, nothing stored for that release
        with pytest.raises(NoiseMismatchError):
            _build(mutation.mode, notes, tmp_path / "refused", key)
        assert not (tmp_path / "refused" / "out" / "certificate.json").exists()
        monkeypatch.setattr(ledger_module, "check_drawn_noise", lambda *args: None)
    config, summary = _build(mutation.mode, notes, tmp_path, key)
    planned = make_plan(config).rho_total
    if mutation.effect == "under":  # the signed certificate understates epsilon
        assert summary.rho_spent < planned * 0.999
    elif mutation.effect == "over":
        assert summary.rho_spent > planned * 1.001
    else:
        assert summary.rho_spent == pytest.approx(planned, rel=1e-9)
    problems = _verify(tmp_path, key)
    # signed by the build and its files intact: only the accounting is wrong
    assert not [p for p in problems if p.startswith(("signature:", "manifest:"))]
    for fragment in mutation.expected:
        assert any(fragment in p for p in problems), (fragment, problems)


def test_the_suite_covers_each_kind_of_fault_in_both_modes() -> None:
    """At least ten mutations: understated charges, missing, extra and duplicated releases,
    the plan removed; the token mode's stages (c) and (d) among them."""
    assert len(MUTATIONS) >= 10
    assert {m.mode for m in MUTATIONS.values()} == {"facts", "tokens"}
    assert {m.effect for m in MUTATIONS.values()} == {"under", "over", "same"}
    # the ledger's noise check stops an understated sensitivity in each mode
    assert {m.mode for m in MUTATIONS.values() if m.refused} == {"facts", "tokens"}


# ---------------------------------------------------------------------- refused by the build
# Four kinds of wrong code that sign a certificate verify cannot fault (issue 58, item 2): each
# records exactly the honest parameters, so the certificate is the honest one, while the
# mechanism's true cost is higher. The build itself must refuse each one before anything is
# written, with a one-line error naming the problem.
def _fact_cluster_cap_above_l(mp: pytest.MonkeyPatch) -> None:
    """The facts mode's membership rule caps a document at L + 1 anchored clusters while the
    group declares L (and the fact histograms are charged for L)."""
    from dpsynrag.facts import fact_clusters

    real = fact_clusters.anchor_clusters
    mp.setattr(facts_stages, "anchor_clusters",
               lambda doc_items, anchors, L, **kwargs: real(doc_items, anchors, L + 1, **kwargs))


def _token_cluster_cap_above_l(mp: pytest.MonkeyPatch) -> None:
    """Stage (b)'s soft clustering caps a document at L + 1 clusters while the group declares
    L (stages (c) and (d) charged for L)."""
    real = token_stages.clusters_of
    mp.setattr(token_stages, "clusters_of",
               lambda doc_keywords, top_words, L: real(doc_keywords, top_words, L + 1))


def _span_cluster_cap_above_l(mp: pytest.MonkeyPatch) -> None:
    """The n-gram mode's clusters (on each document's rarest released spans) cap a document
    at L + 1 clusters while the group declares L."""
    from dpsynrag.facts import fact_clusters, span_corpus

    real = fact_clusters.anchor_clusters
    mp.setattr(span_corpus, "anchor_clusters",
               lambda items, anchors, L, **kwargs: real(items, anchors, L + 1, **kwargs))


def _roles_two_cells_per_term(mp: pytest.MonkeyPatch) -> None:
    """The role histogram fed two cells per term (its role's and the next role's): one
    document adds up to 2 K_e ones while sqrt(K_e) is charged."""
    from dpsynrag.facts import roles

    real = roles.role_cells

    def two_cells(document: Any, row: Any, column: Any) -> list[int]:
        width = len(column)
        return [c for cell in real(document, row, column)
                for c in (cell, cell - cell % width + (cell % width + 1) % width)]

    mp.setattr(roles, "role_cells", two_cells)


def _every_gaussian_at_half_sigma(mp: pytest.MonkeyPatch) -> None:
    """Every discrete Gaussian drawn at sigma / 2 while sigma is declared (to the ledger's
    check) and recorded (in every charge)."""
    from dpsynrag.accounting import noise

    real = noise.discrete_gaussian_noise
    mp.setattr(noise, "discrete_gaussian_noise",
               lambda size, sigma, rng: real(size, sigma / 2, rng))


def _selection_below_threshold(mp: pytest.MonkeyPatch) -> None:
    """Partition selection releasing the noisy counts >= tau_A - 1 while tau_A is recorded:
    the release as it was written before the ledger applied the threshold, its draw keeping
    what it chose through ``Ledger.release``."""
    from dpsynrag.accounting import partition_selection as ps

    def release(ledger: Any, key: str, counts: dict[str, int], *, max_items: int,
                sigma: float, delta: float, stage: str = ps.STAGE) -> dict[str, int]:
        tau = ps.selection_threshold(sigma, max_items, delta)
        charge = Charge(stage=stage, mechanism=ps.MECHANISM,
                        params={"sigma": sigma, "max_items": max_items, "threshold": tau,
                                "delta": float(delta)},
                        sensitivity=max_items ** 0.5, sensitivity_norm="l2")
        phrases = sorted(counts)
        values = np.asarray([counts[p] for p in phrases], dtype=np.int64)

        def draw(rng: Any) -> dict[str, int]:
            noisy = discrete_gaussian(values, sigma, rng, sensitivity=max_items ** 0.5)
            return {p: int(v) for p, v in zip(phrases, noisy, strict=True) if v >= tau - 1}

        return dict(ledger.release(key, charge, draw))

    mp.setattr(ps, "release_partitions", release)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A fault the build refuses: ``error`` is what the build raises, ``message`` a fragment
    of its one-line message (which names the problem)."""

    mode: str
    apply: Callable[[pytest.MonkeyPatch], None]
    error: type[Exception]
    message: str
    options: tuple[tuple[str, Any], ...] = ()  # the build's options, over the mode's


REFUSED_BY_THE_BUILD = {
    # L = 1: most notes hold two released terms, and few hold three (and which terms pass
    # the selection is random)
    "fact-cluster-cap-above-L": Refusal(
        "facts", _fact_cluster_cap_above_l, ContributionError,
        "a unit is in more than L=1 clusters, the overlap its parallel group declares",
        (("L", 1), ("facts_items", "terms"))),
    "span-cluster-cap-above-L": Refusal(
        "facts", _span_cluster_cap_above_l, ContributionError,
        "a unit is in more than L=1 clusters, the overlap its parallel group declares",
        (("L", 1), ("facts_items", "ngrams"))),
    # L = 1: of the three top words, many documents hold two (few hold all three)
    "cluster-cap-above-L": Refusal(
        "tokens", _token_cluster_cap_above_l, ContributionError,
        "a unit is in more than L=1 clusters, the overlap its parallel group declares",
        (("L", 1),)),
    "role-histogram-two-cells-per-term": Refusal(
        "facts", _roles_two_cells_per_term, ContributionError,
        "the role histogram: a unit adds more than 1 ones to one row",
        (("facts_items", "terms"),)),
    "every-gaussian-at-half-sigma": Refusal(  # in the default n-gram mode
        "facts", _every_gaussian_at_half_sigma, SamplerCheckError,
        "the discrete Gaussian sampler does not draw at the sigma",
        (("facts_items", "ngrams"),)),
    "every-gaussian-at-half-sigma-tokens": Refusal(
        "tokens", _every_gaussian_at_half_sigma, SamplerCheckError,
        "the discrete Gaussian sampler does not draw at the sigma"),
    "selection-below-threshold": Refusal(
        "facts", _selection_below_threshold, SelectionThresholdError,
        "goes through Ledger.release_selection", (("facts_items", "terms"),)),
}


def _private_words(notes: Path, vocabulary: PublicVocabulary) -> set[str]:
    """The notes' names (words written only capitalised and in no public list: patients,
    doctors, diseases, drugs) and their runs of three words: none may appear in an error."""
    rows = [json.loads(line)["text"] for line in notes.read_text(encoding="utf-8").splitlines()]
    public = set(vocabulary.words)
    written = [w for text in rows for w in re.findall(r"[\w'-]+", text)]
    lower = {w for w in written if w.islower()}
    private = {w.lower() for w in written
               if w[:1].isupper() and w.lower() not in lower and w.lower() not in public}
    for text in rows:
        words = re.findall(r"[\w'-]+", text.lower())
        private.update(" ".join(words[i:i + 3]) for i in range(len(words) - 2))
    return private


def _complete_outputs(out: Path) -> list[str]:
    """What in ``out`` a reader could take for a built corpus."""
    names = ("certificate.json", "manifest.json", "corpus.parquet", "index.faiss")
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.name in names) \
        if out.exists() else []


@pytest.mark.parametrize("name", sorted(REFUSED_BY_THE_BUILD))
def test_the_build_refuses_wrong_code_that_verify_cannot_see(
        name: str, notes: Path, tmp_path: Path, key: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The build stops at the faulty count, draw or selection, before any output file is
    written: the error's class and message name the problem, and the message holds none of
    the notes' private words."""
    refusal = REFUSED_BY_THE_BUILD[name]
    refusal.apply(monkeypatch)
    with pytest.raises(refusal.error) as error:
        _build(refusal.mode, notes, tmp_path, key, dict(refusal.options))
    message = str(error.value)
    assert refusal.message in message and "\n" not in message
    assert _complete_outputs(tmp_path / "out") == []
    lowered = message.lower()
    assert not [w for w in _private_words(notes, public_vocabulary()) if
                re.search(rf"(?<![\w'-]){re.escape(w)}(?![\w'-])", lowered)]


@pytest.mark.parametrize("name", ["every-gaussian-at-half-sigma", "selection-below-threshold",
                                  "role-histogram-two-cells-per-term"])
def test_build_corpus_says_the_refusal_in_one_line_and_exits_non_zero(
        name: str, notes: Path, tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Through the command line: one line on stderr naming the problem, a non-zero exit,
    no corpus, no manifest and no certificate in the output directory."""
    refusal = REFUSED_BY_THE_BUILD[name]
    monkeypatch.setattr(build, "make_runner",
                        lambda *_a, **_k: LocalRunner(NoLLM(), HashEmbedder()))
    refusal.apply(monkeypatch)
    capsys.readouterr()
    code = build_corpus_main([
        str(notes), "-o", str(tmp_path / "out"), "--runner", "local", "--generate", "facts",
        "--L", "2", "--unit-column", "unit", "--epsilon", "10", "--facts-items", "terms",
        "--state-dir",
        str(tmp_path / "state"), "--corpus-ledger", str(tmp_path / "corpus.sqlite"),
        "--signing-key", str(key), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and err[0].startswith("build-corpus: error: "), err
    assert type(refusal.error).__name__ in err[0] or refusal.error.__name__ in err[0]
    assert refusal.message in err[0]
    assert _complete_outputs(tmp_path / "out") == []


def _unchecked_counts(units: Any, cells: Any, size: int, **_bounds: Any) -> np.ndarray:
    return np.bincount(np.asarray(cells, dtype=np.int64), minlength=size).astype(np.int64)


def _unchecked_cells(units: Any, cells: Any, size: int,
                     **_bounds: Any) -> tuple[np.ndarray, np.ndarray]:
    distinct, counts = np.unique(np.asarray(cells, dtype=np.int64), return_counts=True)
    return distinct.astype(np.int64), counts.astype(np.int64)


def _unchecked_weighted_cells(units: Any, cells: Any, weights: Any, size: int,
                              **_bounds: Any) -> tuple[np.ndarray, np.ndarray]:
    cell = np.asarray(cells, dtype=np.int64)
    per_cell = np.asarray(weights, dtype=np.int64)[np.asarray(units, dtype=np.int64)]
    distinct, inverse = np.unique(cell, return_inverse=True)
    sums = np.zeros(distinct.size, dtype=np.int64)
    np.add.at(sums, inverse.reshape(-1), per_cell)
    return distinct.astype(np.int64), sums


def _unchecked_memberships(clusters: Any, n_units: int, max_overlap: int, *,
                           what: str) -> tuple[np.ndarray, np.ndarray]:
    from dpsynrag.accounting.contributions import membership_pairs

    return membership_pairs(clusters, n_units, max(len(clusters), 1), what=what)


def _counts_unchecked(mp: pytest.MonkeyPatch) -> None:
    from dpsynrag.facts import fact_clusters, roles

    for module in (fact_clusters, roles):
        mp.setattr(module, "bounded_counts", _unchecked_counts)
    mp.setattr(fact_clusters, "bounded_cells", _unchecked_cells)  # the span histograms
    mp.setattr(fact_clusters, "weighted_cells", _unchecked_weighted_cells)  # weighted
    for module in (fact_clusters, token_stages):
        mp.setattr(module, "membership_pairs", _unchecked_memberships)


CHECKS_OFF: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "fact-cluster-cap-above-L": _counts_unchecked,
    "cluster-cap-above-L": _counts_unchecked,
    "span-cluster-cap-above-L": _counts_unchecked,
    "role-histogram-two-cells-per-term": _counts_unchecked,
    "every-gaussian-at-half-sigma": lambda mp: mp.setattr(
        ledger_module, "check_sampler", lambda *args: None),
    "every-gaussian-at-half-sigma-tokens": lambda mp: mp.setattr(
        ledger_module, "check_sampler", lambda *args: None),
    "selection-below-threshold": lambda mp: mp.setattr(
        ledger_module, "_check_selected", lambda *args: None),
}


@pytest.mark.parametrize("name", sorted(REFUSED_BY_THE_BUILD))
def test_with_its_check_switched_off_the_wrong_build_signs_its_certificate(
        name: str, notes: Path, tmp_path: Path, key: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each refusal comes from its own check: with that one switched off, the same wrong
    build runs to the end and signs a certificate of the honest parameters (which is why the
    build must refuse it: verify reads only the certificate)."""
    refusal = REFUSED_BY_THE_BUILD[name]
    refusal.apply(monkeypatch)
    CHECKS_OFF[name](monkeypatch)
    config, summary = _build(refusal.mode, notes, tmp_path, key, dict(refusal.options))
    assert (tmp_path / "out" / "certificate.json").is_file()
    assert summary.rho_spent == pytest.approx(make_plan(config).rho_total, rel=1e-9)


def test_the_refusals_cover_the_four_kinds_of_issue_58() -> None:
    """A membership cap, a cell count, the sampler's scale and a selection threshold; the
    membership cap and the sampler in both modes."""
    kinds = {r.error for r in REFUSED_BY_THE_BUILD.values()}
    assert kinds == {ContributionError, SamplerCheckError, SelectionThresholdError}
    caps = [r.mode for n, r in REFUSED_BY_THE_BUILD.items() if "cap-above-L" in n]
    assert sorted(caps) == ["facts", "facts", "tokens"]
    assert set(CHECKS_OFF) == set(REFUSED_BY_THE_BUILD)
