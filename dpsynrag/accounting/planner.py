"""The budget planner: from a target (epsilon, delta) to every noise scale of a DP-SynRAG build.

DP-SynRAG's cost (Theorem 1, with the corrections of docs/mechanisms.md, section 10) is

    rho = K / (2 sigma_h^2)                                   histogram, l2 sensitivity sqrt(K)
        + L * ( eps_theta^2 / 8 + 1 / (2 sigma_mu^2)          retrieval: threshold EM + noisy sum
                + T (c / tau)^2 / 2 )                         prediction: T softmax draws

The planner fixes rho from (epsilon, delta) and the named conversion, takes rho_hist,
rho_mean (= 1 / (2 sigma_mu^2), the Gaussian part of retrieval) and eps_theta as given shares,
and solves for sigma_h, sigma_mu and c / tau. Everything here is a public parameter.

The "facts" generation mode (``PlanRequest(generate="facts")``, ``plan_facts``) pays per
released fact instead of per token:

    rho = K_s / (2 sigma_h^2)                      keyword histogram (stage a), sqrt(K_s)
        + K_e / (2 sigma_A^2)                      phrase partition selection, sqrt(K_e),
                                                   delta_A-approximate (delta_A <= delta_phrases)
        + K_e / (2 sigma_R^2)                      role histogram (terms mode, share_roles > 0):
                                                   one (term, role) pair per term, sqrt(K_e)
        + L (K_e + K_s) / (2 sigma_C^2)            per-cluster fact histograms: each document
                                                   adds <= K_e + K_s items to each of <= L
                                                   clusters (overlapping parallel composition)

rho comes from (epsilon, delta - delta_phrases): approximate zCDP with delta_A <= delta_phrases
is (epsilon(rho, delta - delta_phrases), delta)-DP. rho_hist, when not given (0), is
``share_hist`` x rho (so the default plan scales with epsilon and is never refused for its own
defaults). What rho_hist leaves is split ``share_phrases`` to the phrases, ``share_roles`` to
the role histogram and the rest to the clusters; the phrase threshold is
``partition_selection.selection_threshold(sigma_A, K_e, delta_phrases)``.

With ``writer="tokens"`` (issue 15: each cluster's note written by the public-difference token
sampler over the cluster's documents, its released facts in the public prompt) a share
``share_tokens`` of what rho_hist leaves pays

        + L T (c / tau)^2 / 2                      T softmax draws per cluster, in the same
                                                   parallel group as the fact histograms

and the cluster facts get 1 - share_phrases - share_tokens of it.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields, replace
from typing import Any, Self

from dpsynrag.accounting.composition import ParallelGroup, Repeated, Sequential
from dpsynrag.accounting.conversions import (
    CONVERSION_REFERENCES,
    MAX_EPSILON,
    Conversion,
    epsilon_for,
    rho_for,
)
from dpsynrag.accounting.mechanisms import (
    DiscreteGaussian,
    ExponentialThreshold,
    Mechanism,
    PartitionSelection,
    TokenSoftmax,
    exponential_rho,
)

#: The build's parallel groups (their names are public): the token mode's soft clusters and
#: the facts mode's anchored clusters (``transforms.retrieval.GROUP``, ``fact_clusters.GROUP``).
CLUSTERS_GROUP = "clusters"
FACT_CLUSTERS_GROUP = "fact-clusters"


def _from_dict(cls: type[Any], record: Mapping[str, Any]) -> Any:
    """``cls(**record)`` over the fields of ``cls`` (extra keys ignored), or None when a
    field without a default is missing (an older plan record)."""
    kwargs: dict[str, Any] = {}
    for field in fields(cls):
        if field.name in record:
            kwargs[field.name] = record[field.name]
        elif field.default is MISSING:
            return None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError):
        return None

DEFAULT_VOCAB_SIZE = 49_152  # SmolLM2's tokenizer, the packaged model


class PlanError(ValueError):
    """The requested plan is impossible or ill-formed."""


GENERATE_MODES = ("tokens", "facts")


@dataclass(frozen=True)
class PlanRequest:
    """A planning request. ``generate="tokens"`` (the paper's) needs K, L, T, eps_theta,
    rho_hist and rho_mean (0 means unset and is refused); ``generate="facts"`` needs L and
    rho_hist and reads K_e, K_s, R_f, delta_phrases and share_phrases; there K, when set, must
    equal K_s (the keyword histogram's width) and T, eps_theta, rho_mean, vocab_size and
    retrieval are not used.
    """

    epsilon: float
    delta: float
    K: int = 0
    L: int = 0
    T: int = 0
    eps_theta: float = 0.0
    rho_hist: float = 0.0
    rho_mean: float = 0.0
    conversion: Conversion = Conversion.CKS
    vocab_size: int = DEFAULT_VOCAB_SIZE
    retrieval: bool = True  # False: the "w/o retrieval" ablation, S_r = C_r, stage (c) free
    generate: str = "tokens"
    K_e: int = 0  # facts: terms per document (partition selection's max_items; 0: auto_k_e)
    facts_rules: int | None = None  # facts: the rules version K_e = 0 follows (None: today's)
    K_s: int = 0  # facts: keywords per document in the histograms (0: auto_k_s)
    R_f: int = 300  # facts: top keywords of the stage-(a) histogram added to the cluster domain
    delta_phrases: float | None = None  # facts: delta of the phrase release (None: delta / 10)
    share_phrases: float = 0.3  # facts: share of rho_total - rho_hist for the phrases
    writer: str = "template"  # facts: "template" (free) or "tokens" (T draws per cluster)
    share_tokens: float = 0.3  # facts with writer="tokens": share for the token writer
    share_roles: float = 0.1  # facts: share of rho_total - rho_hist for the role histogram
    share_hist: float = 0.04  # facts: rho_hist = share_hist x rho_total when rho_hist is 0
    # facts with n-grams (``facts.ngrams``): the released lengths; () for terms and phrases
    ngram_lengths: tuple[int, ...] = ()
    # facts with n-grams: each level's cap of n-grams per document; () for the default
    ngram_items: tuple[int, ...] = ()
    share_ngrams: float = 0.6  # facts with n-grams: share of rho for the n-gram levels
    # facts with n-grams: each document's chosen n-grams count 1 ("uniform") or share one
    # l2 budget, floor(W / sqrt(m)) each ("weighted"; ``accounting.weighted_selection``)
    ngram_weights: str = "uniform"
    # facts with n-grams: each document's spans in its clusters' histograms count 1
    # ("uniform") or share one l2 budget per cluster, floor(S / sqrt(m)) each ("weighted")
    span_weights: str = "uniform"
    allow_large_epsilon: bool = False  # measurement only: epsilon above MAX_EPSILON

    def validate(self) -> None:
        _finite_positive(self.epsilon, "--epsilon")
        if self.epsilon > MAX_EPSILON and not self.allow_large_epsilon:
            raise PlanError(f"--epsilon {self.epsilon:g} is above {MAX_EPSILON:g}, where "
                            "differential privacy promises nothing useful; for a measurement "
                            "build pass --allow-large-epsilon (verify then reports it as not "
                            "for release)")
        if not (0 < self.delta < 1):
            raise PlanError(f"--delta must lie strictly between 0 and 1, got {self.delta!r}")
        if self.generate not in GENERATE_MODES:
            raise PlanError(f"--generate must be one of {', '.join(GENERATE_MODES)}, got "
                            f"{self.generate!r}")
        if self.generate == "facts":
            self._validate_facts()
            return
        for name, value in (("--K", self.K), ("--L", self.L), ("--T", self.T),
                            ("--vocab-size", self.vocab_size)):
            if not (isinstance(value, int) and value >= 1):
                raise PlanError(f"{name} must be a positive integer, got {value!r}")
        if self.vocab_size < 2:
            raise PlanError("--vocab-size must be at least 2")
        _finite_positive(self.eps_theta, "--eps-theta")
        _finite_positive(self.rho_hist, "--rho-hist")
        _finite_positive(self.rho_mean, "--rho-mean")

    def _validate_facts(self) -> None:
        if self.ngram_lengths:
            self._validate_ngrams()
        for name, value in (("--L", self.L), ("--K-e", self.K_e or 1), ("--K-s", self.K_s or 1),
                            ("--R-f", self.R_f)):
            if isinstance(value, bool) or not (isinstance(value, int) and value >= 1):
                raise PlanError(f"{name} must be a positive integer, got {value!r}")
        if self.K not in (0, self.K_s):
            raise PlanError(f"in facts mode the keyword histogram takes K_s={self.K_s} keywords "
                            f"per document; K={self.K!r} differs (leave K unset or equal)")
        if self.rho_hist != 0:
            _finite_positive(self.rho_hist, "--rho-hist")
        if not (isinstance(self.share_hist, int | float) and 0 < self.share_hist < 1):
            raise PlanError(f"--share-hist must lie strictly between 0 and 1, got "
                            f"{self.share_hist!r}")
        roles = self.share_roles
        if not (isinstance(roles, int | float) and math.isfinite(roles) and 0 <= roles < 1):
            raise PlanError(f"--share-roles must lie in [0, 1), got {roles!r}")
        phrases = self.phrase_delta()
        if not (isinstance(phrases, int | float) and math.isfinite(phrases)
                and 0 < phrases < self.delta):
            raise PlanError(f"--delta-phrases must lie strictly between 0 and --delta "
                            f"({self.delta:g}), got {phrases!r}")
        share = self.share_phrases
        if not (isinstance(share, int | float) and math.isfinite(share) and 0 < share < 1):
            raise PlanError(f"--share-phrases must lie strictly between 0 and 1, got {share!r}")
        if self.writer not in ("template", "tokens"):
            raise PlanError(f"--writer must be 'template' or 'tokens', got {self.writer!r}")
        if share + roles >= 1:
            raise PlanError(f"--share-phrases + --share-roles must stay below 1, got {share!r} "
                            f"and {roles!r}")
        if self.writer == "tokens":
            tokens = self.share_tokens
            if not (isinstance(tokens, int | float) and math.isfinite(tokens)
                    and tokens > 0 and share + tokens + roles < 1):
                raise PlanError(f"--share-tokens must be positive with --share-phrases + "
                                f"--share-tokens below 1, got {tokens!r} and {share!r}")
            if not (isinstance(self.T, int) and not isinstance(self.T, bool) and self.T >= 1):
                raise PlanError(f"--T must be a positive integer, got {self.T!r}")

    def _validate_ngrams(self) -> None:
        lengths = self.ngram_lengths
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in lengths) \
                or any(b < a or b > 2 * a for a, b in itertools.pairwise(lengths)):
            raise PlanError(f"--ngram-lengths must be non-decreasing positive integers, each at "
                            f"most twice the one before, got {list(lengths)!r}")
        if not (isinstance(self.share_ngrams, int | float) and 0 < self.share_ngrams < 1):
            raise PlanError(f"--share-ngrams must lie strictly between 0 and 1, got "
                            f"{self.share_ngrams!r}")
        items = self.ngram_items
        if items and (len(items) != len(lengths) or not all(
                isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in items)):
            raise PlanError(f"--ngram-items must give one positive integer per n-gram length "
                            f"({len(lengths)}), got {list(items)!r}")
        if self.ngram_weights not in NGRAM_WEIGHTS:
            raise PlanError(f"--ngram-weights must be one of {', '.join(NGRAM_WEIGHTS)}, got "
                            f"{self.ngram_weights!r}")
        if self.span_weights not in NGRAM_WEIGHTS:
            raise PlanError(f"--span-weights must be one of {', '.join(NGRAM_WEIGHTS)}, got "
                            f"{self.span_weights!r}")
        if self.writer != "template":
            raise PlanError("--facts-items ngrams writes its notes by stitching released spans; "
                            "--writer tokens does not apply")

    def phrase_delta(self) -> float:
        """delta_phrases, defaulting to delta / 10."""
        return self.delta / 10.0 if self.delta_phrases is None else self.delta_phrases


@dataclass(frozen=True)
class BudgetPlan:
    """A solved plan. ``rho_retrieval`` and ``rho_prediction`` are per cluster (before x L)."""

    epsilon: float
    delta: float
    conversion: str
    conversion_reference: str
    K: int
    L: int
    T: int
    rho_total: float
    rho_hist: float
    sigma_h: float
    eps_theta: float
    rho_threshold: float
    rho_mean: float
    sigma_mu: float
    rho_retrieval: float
    rho_prediction: float
    rho_per_token: float
    c_over_tau: float
    epsilon_per_token: float
    rho_clusters_total: float
    epsilon_bun_steinke: float
    epsilon_cks: float
    vocab_size: int
    consensus_rows: int
    generate: str = "tokens"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Self | None:
        """The plan of ``as_dict`` (a certificate's ``plan``), or None if fields are missing."""
        plan: Self | None = _from_dict(cls, record)
        return plan

    def cluster_events(self, clip: float) -> Sequential:
        """What one cluster releases (token mode): the threshold EM and the noisy sum (unless
        retrieval is off), then T token draws at c/tau with clip ``clip``."""
        retrieval: tuple[Mechanism, ...] = ()
        if self.rho_retrieval > 0:
            retrieval = (DiscreteGaussian(sigma=self.sigma_mu, l2_sensitivity=1.0),
                         ExponentialThreshold(epsilon=self.eps_theta))
        tokens = TokenSoftmax(clip=clip, temperature=clip / self.c_over_tau, tokens=self.T)
        return Sequential((*retrieval, Repeated(tokens, 1)))

    def events(self, clip: float) -> Sequential:
        """The whole build, once: the keyword histogram, then the clusters as a parallel group
        of overlap L holding L copies of one cluster (every cluster has the same parameters, so
        its L most expensive partitions cost L times one). The noisy sum is described as the
        discrete Gaussian it is drawn as (the build ledger records it as ``gaussian`` on the
        fixed-point grid; same rho)."""
        histogram = DiscreteGaussian(sigma=self.sigma_h, l2_sensitivity=math.sqrt(self.K))
        cluster = self.cluster_events(clip)
        return Sequential((Repeated(histogram, 1),
                           ParallelGroup(self.L, (cluster,) * self.L, CLUSTERS_GROUP)))

    def stage_rows(self) -> list[tuple[str, str, float, float]]:
        """(stage, mechanism and noise, rho per cluster or NaN, rho after composition)."""
        return [
            ("(a) histogram", f"discrete Gauss. σ_h={self.sigma_h:.4f}", math.nan,
             self.rho_hist),
            ("(c) noisy sum", f"Gaussian σ_μ={self.sigma_mu:.4f}", self.rho_mean,
             self.L * self.rho_mean),
            ("(c) threshold", f"exp. mech. ε_θ={self.eps_theta:g}", self.rho_threshold,
             self.L * self.rho_threshold),
            ("(d) prediction", f"{self.T} draws, c/τ={self.c_over_tau:.4f}",
             self.rho_prediction, self.L * self.rho_prediction),
        ]


def _finite_positive(value: float, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise PlanError(f"{name} must be a finite positive number, got {value!r}")


@dataclass(frozen=True)
class FactsBudgetPlan:
    """A solved facts plan (module docstring). ``rho_C`` is after x L; ``delta_A`` is the
    phrase release's actual approximate delta (<= ``delta_phrases``), ``docs_to_release`` the
    number of documents sharing a phrase for it to be released with probability about 1/2
    (= ``tau_A``). Epsilons are of ``rho_total`` at ``delta_conversion`` = delta -
    delta_phrases.
    """

    generate: str
    epsilon: float
    delta: float
    conversion: str
    conversion_reference: str
    L: int
    K_e: int
    K_s: int
    R_f: int
    share_phrases: float
    rho_total: float
    delta_phrases: float
    delta_conversion: float
    rho_hist: float
    sigma_h: float
    rho_A: float
    sigma_A: float
    tau_A: int
    delta_A: float
    docs_to_release: int
    rho_C: float
    rho_C_per_cluster: float
    sigma_C: float
    epsilon_bun_steinke: float
    epsilon_cks: float
    writer: str = "template"
    T: int = 0  # writer="tokens": draws per cluster
    share_tokens: float = 0.0
    rho_tokens: float = 0.0  # after x L
    rho_per_token: float = 0.0
    c_over_tau: float = 0.0
    share_roles: float = 0.0  # the role histogram (terms with roles); 0: none
    rho_R: float = 0.0
    sigma_R: float = 0.0
    # --facts-items ngrams: the lengths released level by level, level j a partition
    # selection at sigma_A, max_items ngram_items[j], threshold ngram_thresholds[j] and
    # delta_phrases / levels; () otherwise (tau_A is then the largest threshold)
    ngram_lengths: tuple[int, ...] = ()
    ngram_items: tuple[int, ...] = ()
    ngram_thresholds: tuple[int, ...] = ()
    # --ngram-weights weighted: W, each document's chosen n-grams weigh floor(W / sqrt(m))
    # and sigma_A, the thresholds are in weight units; 0 for uniform counts (left out of the
    # record, so a uniform plan's certificate is what it was)
    ngram_weight_scale: int = 0
    # --span-weights weighted: S, each document's m spans in a cluster weigh
    # floor(S / sqrt(m)) and sigma_C is in weight units (l2 sensitivity S per cluster); 0 for
    # uniform counts (left out of the record, so a uniform plan's certificate is unchanged)
    span_weight_scale: int = 0

    WRITER_FIELDS = ("writer", "T", "share_tokens", "rho_tokens", "rho_per_token", "c_over_tau")
    ROLE_FIELDS = ("share_roles", "rho_R", "sigma_R")

    def as_dict(self) -> dict[str, object]:
        """The plan's fields; a template-writer plan leaves out the token writer's (so its
        certificate is what it was, and no token check applies to it)."""
        record = asdict(self)
        if self.writer == "template":
            for name in self.WRITER_FIELDS:
                record.pop(name)
        if not self.share_roles:
            for name in self.ROLE_FIELDS:
                record.pop(name)
        for name in self.NGRAM_FIELDS:
            if self.ngram_lengths:
                record[name] = list(getattr(self, name))
            else:
                record.pop(name)
        if not self.ngram_weight_scale:
            record.pop("ngram_weight_scale")
        if not self.span_weight_scale:
            record.pop("span_weight_scale")
        return record

    NGRAM_FIELDS = ("ngram_lengths", "ngram_items", "ngram_thresholds")

    def __post_init__(self) -> None:
        for name in self.NGRAM_FIELDS:  # a record read back from JSON holds lists
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def span_sensitivity(self) -> float:
        """The l2 sensitivity of one cluster's histogram: sqrt(K_e + K_s), or S with weighted
        span counts (``span_weight_scale``)."""
        return float(self.span_weight_scale) if self.span_weight_scale \
            else math.sqrt(self.K_e + self.K_s)

    @property
    def level_delta(self) -> float:
        """The delta asked of each phrase release: delta_phrases over the n-gram levels
        (one release without n-grams)."""
        return self.delta_phrases / max(1, len(self.ngram_lengths))

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Self | None:
        """The plan of ``as_dict`` (a certificate's ``plan``), or None if fields are missing."""
        plan: Self | None = _from_dict(cls, record)
        return plan

    def cluster_events(self, clip: float | None = None) -> Sequential:
        """What one fact cluster releases: its fact histogram, then (``writer="tokens"``, which
        needs ``clip``) T token draws at c/tau."""
        facts = DiscreteGaussian(sigma=self.sigma_C, l2_sensitivity=self.span_sensitivity)
        if self.writer != "tokens":
            return Sequential((Repeated(facts, 1),))
        if clip is None:
            raise ValueError("a plan with writer='tokens' needs the clip of its token draws")
        tokens = TokenSoftmax(clip=clip, temperature=clip / self.c_over_tau, tokens=self.T)
        return Sequential((Repeated(facts, 1), Repeated(tokens, 1)))

    def events(self, clip: float | None = None) -> Sequential:
        """The whole facts build, once: the keyword histogram, the phrase partition selection,
        then the fact clusters as a parallel group of overlap L holding L copies of one
        cluster (see ``BudgetPlan.events``)."""
        cluster = self.cluster_events(clip)
        if self.ngram_lengths:  # no keyword histogram: one partition selection per level
            # levels of one cap share their threshold: one entry with their count
            same = Counter(zip(self.ngram_items, self.ngram_thresholds, strict=True))
            scale = self.ngram_weight_scale or None
            levels = tuple(Repeated(PartitionSelection(sigma=self.sigma_A, max_items=k,
                                                       threshold=t, delta=self.level_delta,
                                                       weight_scale=scale),
                                    count) for (k, t), count in sorted(same.items()))
            return Sequential((*levels, ParallelGroup(self.L, (cluster,) * self.L,
                                                      FACT_CLUSTERS_GROUP)))
        histogram = DiscreteGaussian(sigma=self.sigma_h, l2_sensitivity=math.sqrt(self.K_s))
        phrases = PartitionSelection(sigma=self.sigma_A, max_items=self.K_e,
                                     threshold=self.tau_A, delta=self.delta_phrases)
        roles = (Repeated(DiscreteGaussian(sigma=self.sigma_R,
                                           l2_sensitivity=math.sqrt(self.K_e)), 1),
                 ) if self.share_roles else ()
        return Sequential((Repeated(histogram, 1), Repeated(phrases, 1), *roles,
                           ParallelGroup(self.L, (cluster,) * self.L, FACT_CLUSTERS_GROUP)))

    def stage_rows(self) -> list[tuple[str, str, float, float]]:
        """(stage, mechanism and noise, rho per cluster or NaN, rho after composition)."""
        writer = [("(f) token writer", f"{self.T} draws, c/τ={self.c_over_tau:.4f}",
                   self.rho_tokens / self.L, self.rho_tokens)] if self.writer == "tokens" else []
        return [*self._fact_rows(), *writer]

    def _fact_rows(self) -> list[tuple[str, str, float, float]]:
        if self.ngram_lengths:
            lengths = ",".join(str(n) for n in self.ngram_lengths)
            return [
                ("(f) n-grams", f"{len(self.ngram_lengths)} partition sel. (lengths {lengths}"
                 + (f", weights W={self.ngram_weight_scale}/√m" if self.ngram_weight_scale
                    else "") + ") "
                 f"σ_A={self.sigma_A:.4f}, τ={','.join(map(str, self.ngram_thresholds))}, "
                 f"K={','.join(map(str, self.ngram_items))}", math.nan, self.rho_A),
                ("(f) cluster spans", f"discrete Gauss. σ_C={self.sigma_C:.4f}, "
                 f"K_e+K_s={self.K_e + self.K_s}"
                 + (f", weights S={self.span_weight_scale}/√m" if self.span_weight_scale
                    else ""), self.rho_C_per_cluster, self.rho_C),
            ]
        return [
            ("(a) keyword histogram", f"discrete Gauss. σ_h={self.sigma_h:.4f}, K_s={self.K_s}",
             math.nan, self.rho_hist),
            ("(f) phrases", f"partition sel. σ_A={self.sigma_A:.4f}, τ_A={self.tau_A}, "
             f"K_e={self.K_e}", math.nan, self.rho_A),
            *([("(f) roles", f"discrete Gauss. σ_R={self.sigma_R:.4f}, K_e={self.K_e}",
                math.nan, self.rho_R)] if self.share_roles else []),
            ("(f) cluster facts", f"discrete Gauss. σ_C={self.sigma_C:.4f}, "
             f"K_e+K_s={self.K_e + self.K_s}", self.rho_C_per_cluster, self.rho_C),
        ]


def plan_from_dict(record: Mapping[str, Any]) -> BudgetPlan | FactsBudgetPlan | None:
    """The plan recorded by ``as_dict`` (e.g. in a certificate), or None when fields are
    missing (a plan recorded by an older version)."""
    if record.get("generate") == "facts":
        return FactsBudgetPlan.from_dict(record)
    return BudgetPlan.from_dict(record)


#: K_e = 0 (the default) asks for the most terms per document, at most AUTO_K_E_MAX, whose
#: release threshold tau_A stays at or below AUTO_TAU_A units (else 1): more terms per
#: document cost sqrt(K_e) in the phrase release's noise, and at low epsilon a threshold
#: that grows past a few dozen units loses every answer held by fewer (measured: K_e = 1
#: named 20 and 23 of 40 answers at epsilon 1 where K_e = 3 named 13 and 20). More terms
#: per document make the corpus carry over to wording the role lexicon does not know: a
#: note that no cue announces offers its first terms by the public prior (names, drugs),
#: and the term it is about is counted only when it offers several (measured with the
#: lexicon emptied, epsilon 10, recall@10 of the conditions and films sets: 0.66 and 0.33
#: with K_e = 3, 0.86 and 0.74 with K_e = 6; at epsilon 3, conditions: 0.18 with K_e = 1,
#: 0.48 with K_e = 4; with the lexicon, recall stayed within a run's spread).
AUTO_K_E_MAX = 6
AUTO_TAU_A = 20.0
#: The default-K_e rule (AUTO_K_E_MAX, AUTO_TAU_A) of each version of the facts rules
#: (``pipeline.config.FACTS_RULES_VERSION``, recorded as the released option ``facts_rules``):
#: a version uses the entry of the highest key at or below it. A certificate that records
#: K_e as None was planned by the rule of its version, so ``verify`` plans it again by that
#: rule, not today's; one without ``facts_rules`` predates the option (versions 1 and 2).
AUTO_K_E_RULES: dict[int, tuple[int, float]] = {1: (3, 12.0), 3: (AUTO_K_E_MAX, AUTO_TAU_A)}
#: The facts-rules version a released config without ``facts_rules`` was built by.
FACTS_RULES_BEFORE_OPTION = 2


def auto_k_e_rule(facts_rules: int | None) -> tuple[int, float]:
    """(most terms per document, highest release threshold tau_A) of the default K_e under
    version ``facts_rules`` of the facts rules (None: today's)."""
    if facts_rules is None:
        return AUTO_K_E_MAX, AUTO_TAU_A
    known = [version for version in AUTO_K_E_RULES if version <= facts_rules]
    if not known:
        raise PlanError(f"facts rules version {facts_rules!r} has no default-K_e rule")
    return AUTO_K_E_RULES[max(known)]


#: K_s = 0 (the default) asks for the most keywords per document, at most AUTO_K_S_MAX, whose
#: cluster fact histograms keep sigma_C at or below AUTO_SIGMA_C, and never fewer than
#: AUTO_K_S_MIN. Each document adds K_e + K_s items to a cluster's histogram, so sigma_C grows
#: with sqrt(K_e + K_s), and a keyword is kept only where its noisy count clears about three
#: sigma_C (``facts.fact_writer.absolute_threshold``): at low epsilon, fourteen keywords per
#: document put that bar above what any answer of a few dozen documents can reach, and its
#: cluster is written as a bare name (or dropped), while fewer keywords per document, the
#: rarest of each (``transforms.keywords.statistical_keywords``), still hold what the
#: cluster's documents share. The keyword histogram (sigma_h ~ sqrt(K_s)) gains the same way.
#: Measured (160 queries, 3 runs; docs/evaluation.md, facts rules 9): at epsilon 1, K_s = 4
#: raised recall@10 on blind7 films from 0.39 to 0.46 and on the three other sets too; at
#: epsilon 3, four cost films recall (0.62 -> 0.55), so the bar sigma_C <= 5 keeps 6 there.
#: A function of the public plan parameters alone.
AUTO_K_S_MAX = 14
AUTO_K_S_MIN = 4
AUTO_SIGMA_C = 5.0
#: The first facts-rules version whose configs leave K_s to the plan (recorded as None);
#: before it every build recorded K_s = AUTO_K_S_MAX, the fixed default then.
AUTO_K_S_FROM_RULES = 9


def auto_k_s(K_e: int, L: int, rho_c: float, facts_rules: int | None = None) -> int:
    """The default keywords per document (module comment above ``AUTO_K_S_MAX``): the most,
    up to AUTO_K_S_MAX and at least AUTO_K_S_MIN, with sigma_C = sqrt(L (K_e + K_s) /
    (2 rho_c)) <= AUTO_SIGMA_C; AUTO_K_S_MAX under facts rules before AUTO_K_S_FROM_RULES."""
    if facts_rules is not None and facts_rules < AUTO_K_S_FROM_RULES:
        return AUTO_K_S_MAX
    most = math.floor(AUTO_SIGMA_C ** 2 * 2.0 * rho_c / L + 1e-9) - K_e
    return max(AUTO_K_S_MIN, min(AUTO_K_S_MAX, most))


#: The released options (``BuildConfig.released_options()``, a certificate's ``config``) that
#: ``request_from_options`` reads, per generation mode; the others have defaults there.
TOKENS_PLAN_OPTIONS = ("epsilon", "delta", "conversion", "K", "L", "T", "eps_theta",
                       "rho_hist", "rho_mean")
FACTS_PLAN_OPTIONS = ("epsilon", "delta", "conversion", "L", "K_s", "R_f", "share_phrases",
                      "share_hist", "facts_items", "share_roles")


def request_from_options(options: Mapping[str, Any], *, vocab_size: int | None = None,
                         allow_large_epsilon: bool = False) -> PlanRequest | None:
    """The planning request of a build's released options: the one rule by which a build is
    planned (``pipeline.build.make_plan``) and by which ``verify`` plans it again from the
    ``config`` its certificate records. None when an option the plan reads is missing (a
    certificate written before the option existed).

    A token build records no ``generate`` and its resolved ``rho_hist``; a facts build records
    ``rho_hist`` and ``K_e`` as None when the plan chooses them, leaves ``writer`` and
    ``share_tokens`` out with the template writer, and reads ``share_roles`` only for terms.
    A facts config's ``facts_rules`` (the version of the facts rules, whose default K_e the
    plan follows: ``auto_k_e_rule``) is read when present; without it, the build predates the
    option (``FACTS_RULES_BEFORE_OPTION``).
    ``vocab_size`` (the model's; it only sizes ``consensus_rows``) and ``allow_large_epsilon``
    are not release options.
    """
    generate = options.get("generate", "tokens")
    needed = FACTS_PLAN_OPTIONS if generate == "facts" else TOKENS_PLAN_OPTIONS
    if any(name not in options for name in needed):
        return None
    common: dict[str, Any] = {
        "epsilon": options["epsilon"], "delta": options["delta"], "L": options["L"],
        "conversion": Conversion(options["conversion"]),
        "allow_large_epsilon": allow_large_epsilon}
    if generate == "facts":
        writer = options.get("writer", "template")
        tokens: dict[str, Any] = {"writer": writer}
        if writer != "template":
            tokens.update(share_tokens=options.get("share_tokens"), T=options.get("T"))
        return PlanRequest(
            **common, generate="facts", rho_hist=options.get("rho_hist") or 0.0,
            share_hist=options["share_hist"],
            share_roles=options["share_roles"] if options["facts_items"] == "terms" else 0.0,
            ngram_lengths=tuple(options.get("ngram_lengths") or ())
            if options["facts_items"] == "ngrams" else (),
            ngram_items=tuple(options.get("ngram_items") or ())
            if options["facts_items"] == "ngrams" else (),
            # an n-gram build recorded before --share-ngrams gave its levels share_phrases
            share_ngrams=options.get("share_ngrams", options["share_phrases"]),
            ngram_weights=options.get("ngram_weights", "uniform"),
            span_weights=options.get("span_weights", "uniform"),
            K_e=options.get("K_e") or 0, K_s=options.get("K_s") or 0, R_f=options["R_f"],
            facts_rules=options.get("facts_rules", FACTS_RULES_BEFORE_OPTION),
            delta_phrases=options.get("delta_phrases"),
            share_phrases=options["share_phrases"], **tokens)
    sized: dict[str, Any] = {"vocab_size": vocab_size} if vocab_size else {}
    return PlanRequest(
        **common, K=options["K"], T=options["T"], eps_theta=options["eps_theta"],
        rho_hist=options["rho_hist"], rho_mean=options["rho_mean"],
        retrieval=not options.get("no_retrieval", False), **sized)


def plan_facts(request: PlanRequest) -> FactsBudgetPlan:
    """Solve the facts-mode budget (module docstring); ``PlanError`` if it is impossible.
    ``K_e = 0`` resolves to the public default of the request's facts rules
    (``auto_k_e_rule``; today ``AUTO_K_E_MAX``, ``AUTO_TAU_A``): a function of the request
    alone."""
    if request.ngram_lengths:
        return plan_ngrams(request)
    if request.K_e == 0:
        most, highest_tau = auto_k_e_rule(request.facts_rules)
        for k_e in range(most, 0, -1):
            plan = plan_facts(replace(request, K_e=k_e))
            if plan.tau_A <= highest_tau or k_e == 1:
                return plan
    from dpsynrag.accounting.partition_threshold import (  # mpmath: loaded for facts only
        partition_selection_delta,
        selection_threshold,
    )

    if request.generate != "facts":
        raise PlanError("plan_facts needs a request with generate='facts'")
    request.validate()
    conversion = Conversion(request.conversion)
    delta_phrases = float(request.phrase_delta())
    delta_conversion = request.delta - delta_phrases
    rho_total = rho_for(request.epsilon, delta_conversion, conversion)
    # rho_hist 0 (unset): a share of the total, so the plan scales with epsilon
    rho_hist = request.rho_hist or request.share_hist * rho_total
    rest = rho_total - rho_hist
    if rest <= 0:
        raise PlanError(
            f"impossible plan: epsilon={request.epsilon:g} at delta={request.delta:g} "
            f"(delta_phrases={delta_phrases:g}, {conversion.value}) allows rho={rho_total:.4f}, "
            f"but the keyword histogram alone takes rho={rho_hist:.4f}; nothing is left "
            "for the phrases and the cluster facts. Lower --rho-hist or raise --epsilon")
    rho_a = request.share_phrases * rest
    rho_tokens = request.share_tokens * rest if request.writer == "tokens" else 0.0
    rho_r = request.share_roles * rest
    rho_c = rest - rho_a - rho_tokens - rho_r
    rho_per_token = rho_tokens / (request.L * request.T) if rho_tokens else 0.0
    sigma_a = math.sqrt(request.K_e / (2.0 * rho_a))
    tau_a = selection_threshold(sigma_a, request.K_e, delta_phrases)
    # K_s = 0 resolves to the public default (auto_k_s): a function of the request alone
    k_s = request.K_s or auto_k_s(request.K_e, request.L, rho_c, request.facts_rules)
    return FactsBudgetPlan(
        generate="facts",
        epsilon=request.epsilon,
        delta=request.delta,
        conversion=conversion.value,
        conversion_reference=CONVERSION_REFERENCES[conversion],
        L=request.L,
        K_e=request.K_e,
        K_s=k_s,
        R_f=request.R_f,
        share_phrases=float(request.share_phrases),
        rho_total=rho_total,
        delta_phrases=delta_phrases,
        delta_conversion=delta_conversion,
        rho_hist=rho_hist,
        sigma_h=math.sqrt(k_s / (2.0 * rho_hist)),
        rho_A=rho_a,
        sigma_A=sigma_a,
        tau_A=tau_a,
        delta_A=partition_selection_delta(sigma_a, request.K_e, tau_a),
        docs_to_release=tau_a,
        rho_C=rho_c,
        rho_C_per_cluster=rho_c / request.L,
        sigma_C=math.sqrt(request.L * (request.K_e + k_s) / (2.0 * rho_c)),
        epsilon_bun_steinke=epsilon_for(rho_total, delta_conversion, Conversion.BUN_STEINKE),
        epsilon_cks=epsilon_for(rho_total, delta_conversion, Conversion.CKS),
        writer=request.writer,
        T=request.T if request.writer == "tokens" else 0,
        share_tokens=float(request.share_tokens) if request.writer == "tokens" else 0.0,
        rho_tokens=rho_tokens,
        rho_per_token=rho_per_token,
        c_over_tau=math.sqrt(2.0 * rho_per_token),
        share_roles=float(request.share_roles),
        rho_R=rho_r,
        sigma_R=math.sqrt(request.K_e / (2.0 * rho_r)) if rho_r else 0.0,
    )


#: --facts-items ngrams: n-grams each document offers per level when --ngram-items is not
#: given (public; measured on the real development sets' tune halves at epsilon 10: 32
#: against 16 kept 0.96 against 0.76 of private recall on MovieLens profiles, long texts
#: need more)
NGRAM_LEVEL_ITEMS = 32
#: --ngram-weights weighted: the per-level cap when --ngram-items is not given (a document
#: with m <= 128 candidates weighs 1 / sqrt(m) on each, so the cap costs nothing in noise)
NGRAM_LEVEL_ITEMS_WEIGHTED = 128
#: --ngram-weights: how a document's chosen n-grams are counted (``PlanRequest``); also
#: the choices of --span-weights
NGRAM_WEIGHTS = ("uniform", "weighted")
#: --span-weights weighted: S, a document's m spans weigh floor(S / sqrt(m)) in a cluster's
#: histogram (45 at the cap of 32 spans, 256 for one span; within 1 % of S / sqrt(m) up to
#: 32). A cell's sum is at most S times the documents (--runner beam sums them as int64)
SPAN_WEIGHT_SCALE = 256
#: --facts-items ngrams: spans per document in the cluster histograms, K_e + K_s (public)
NGRAM_DEFAULT_K_E = 16
#: --facts-items ngrams: spans per document in the cluster histograms beyond K_e (K_e + K_s)
NGRAM_DEFAULT_K_S = 16


def plan_ngrams(request: PlanRequest) -> FactsBudgetPlan:
    """The facts plan with n-grams (``facts.ngrams``): no keyword histogram; a share
    ``share_ngrams`` of rho (recorded as the plan's ``share_phrases``) for the
    J = len(ngram_lengths) levels, level j a partition selection of K_j = ``ngram_items[j]``
    n-grams per document (default ``NGRAM_LEVEL_ITEMS``) at one sigma_A and
    delta_phrases / J; the rest of rho for the clusters' span histograms, each document
    adding <= K_e + K_s spans to each of <= L clusters:

        rho = sum_j K_j / (2 sigma_A^2) + L (K_e + K_s) / (2 sigma_C^2)

    With ``ngram_weights="weighted"`` each level's l2 sensitivity is W (a document's m
    chosen n-grams weigh floor(W / sqrt(m)), default cap ``NGRAM_LEVEL_ITEMS_WEIGHTED``),
    sigma_A and the thresholds are in weight units and rho_A = J W^2 / (2 sigma_A^2).
    """
    from dpsynrag.accounting.partition_threshold import (  # mpmath: loaded for facts only
        contribution_weight,
        partition_selection_delta,
        selection_threshold,
        weighted_selection_delta,
        weighted_selection_threshold,
    )
    from dpsynrag.accounting.weighted_selection import DEFAULT_WEIGHT_SCALE

    request = replace(request, K_e=request.K_e or NGRAM_DEFAULT_K_E,
                      K_s=request.K_s or NGRAM_DEFAULT_K_S, rho_hist=0.0)
    request.validate()
    levels = len(request.ngram_lengths)
    weighted = request.ngram_weights == "weighted"
    default_items = NGRAM_LEVEL_ITEMS_WEIGHTED if weighted else NGRAM_LEVEL_ITEMS
    items = tuple(request.ngram_items) or (default_items,) * levels
    conversion = Conversion(request.conversion)
    delta_phrases = float(request.phrase_delta())
    delta_conversion = request.delta - delta_phrases
    rho_total = rho_for(request.epsilon, delta_conversion, conversion)
    rho_a = request.share_ngrams * rho_total
    rho_c = rho_total - rho_a
    level_delta = delta_phrases / levels
    # --span-weights weighted: a document's m spans weigh floor(S / sqrt(m)) in each cluster
    span_scale = SPAN_WEIGHT_SCALE if request.span_weights == "weighted" else 0
    if weighted:  # each level has l2 sensitivity W: rho_A = J W^2 / (2 sigma_A^2)
        scale = DEFAULT_WEIGHT_SCALE
        sigma_a = scale * math.sqrt(levels / (2.0 * rho_a))
        thresholds = tuple(weighted_selection_threshold(sigma_a, k, scale, level_delta)
                           for k in items)
        delta_a = sum(weighted_selection_delta(sigma_a, k, scale, t)
                      for k, t in zip(items, thresholds, strict=True))
        # about this many documents of K_j candidates each carry an n-gram past its threshold
        to_release = max(math.ceil(t / contribution_weight(k, scale))
                         for k, t in zip(items, thresholds, strict=True))
    else:
        scale = 0
        sigma_a = math.sqrt(sum(items) / (2.0 * rho_a))
        thresholds = tuple(selection_threshold(sigma_a, k, level_delta) for k in items)
        delta_a = sum(partition_selection_delta(sigma_a, k, t)
                      for k, t in zip(items, thresholds, strict=True))
        to_release = max(thresholds)
    return FactsBudgetPlan(
        generate="facts", epsilon=request.epsilon, delta=request.delta,
        conversion=conversion.value, conversion_reference=CONVERSION_REFERENCES[conversion],
        L=request.L, K_e=request.K_e, K_s=request.K_s, R_f=request.R_f,
        share_phrases=float(request.share_ngrams), rho_total=rho_total,
        delta_phrases=delta_phrases, delta_conversion=delta_conversion,
        rho_hist=0.0, sigma_h=0.0, rho_A=rho_a, sigma_A=sigma_a, tau_A=max(thresholds),
        delta_A=delta_a, docs_to_release=to_release, rho_C=rho_c,
        rho_C_per_cluster=rho_c / request.L,
        # rho_C = L s^2 / (2 sigma_C^2), s the l2 sensitivity of a cluster's histogram
        sigma_C=span_scale * math.sqrt(request.L / (2.0 * rho_c)) if span_scale
        else math.sqrt(request.L * (request.K_e + request.K_s) / (2.0 * rho_c)),
        epsilon_bun_steinke=epsilon_for(rho_total, delta_conversion, Conversion.BUN_STEINKE),
        epsilon_cks=epsilon_for(rho_total, delta_conversion, Conversion.CKS),
        ngram_lengths=tuple(request.ngram_lengths), ngram_items=items,
        ngram_thresholds=thresholds, ngram_weight_scale=scale, span_weight_scale=span_scale)


def plan_budget(request: PlanRequest) -> BudgetPlan | FactsBudgetPlan:
    """Solve the budget of ``request.generate``: a ``BudgetPlan`` for tokens (the paper's),
    a ``FactsBudgetPlan`` for facts (``plan_facts``). Raises ``PlanError`` when impossible
    (tokens: nothing left for prediction)."""
    if request.generate == "facts":
        return plan_facts(request)
    request.validate()
    conversion = Conversion(request.conversion)
    rho_total = rho_for(request.epsilon, request.delta, conversion)
    rho_threshold = exponential_rho(request.eps_theta) if request.retrieval else 0.0
    rho_mean = request.rho_mean if request.retrieval else 0.0
    rho_retrieval = rho_threshold + rho_mean
    rho_clusters_total = rho_total - request.rho_hist
    rho_prediction = rho_clusters_total / request.L - rho_retrieval
    if rho_prediction <= 0:
        spent = request.rho_hist + request.L * rho_retrieval
        raise PlanError(
            f"impossible plan: epsilon={request.epsilon:g} at delta={request.delta:g} "
            f"({conversion.value}) allows rho={rho_total:.4f}, but the histogram and L x "
            f"retrieval already take rho={spent:.4f}; nothing is left for private prediction. "
            "Lower --rho-hist, --rho-mean, --eps-theta or --L, or raise --epsilon")
    rho_per_token = rho_prediction / request.T
    c_over_tau = math.sqrt(2.0 * rho_per_token)
    epsilon_per_token = 2.0 * c_over_tau
    return BudgetPlan(
        epsilon=request.epsilon,
        delta=request.delta,
        conversion=conversion.value,
        conversion_reference=CONVERSION_REFERENCES[conversion],
        K=request.K,
        L=request.L,
        T=request.T,
        rho_total=rho_total,
        rho_hist=request.rho_hist,
        sigma_h=math.sqrt(request.K / (2.0 * request.rho_hist)),
        eps_theta=request.eps_theta,
        rho_threshold=rho_threshold,
        rho_mean=rho_mean,
        sigma_mu=math.sqrt(1.0 / (2.0 * request.rho_mean)) if request.retrieval else 0.0,
        rho_retrieval=rho_retrieval,
        rho_prediction=rho_prediction,
        rho_per_token=rho_per_token,
        c_over_tau=c_over_tau,
        epsilon_per_token=epsilon_per_token,
        rho_clusters_total=rho_clusters_total,
        epsilon_bun_steinke=epsilon_for(rho_total, request.delta, Conversion.BUN_STEINKE),
        epsilon_cks=epsilon_for(rho_total, request.delta, Conversion.CKS),
        vocab_size=request.vocab_size,
        consensus_rows=consensus_rows(c_over_tau, request.vocab_size),
    )


def consensus_rows(c_over_tau: float, vocab_size: int) -> int:
    """Rows that must agree before a token beats the rest of the vocabulary.

    The agreed token scores +n c/tau against -n c/tau for each of the |V| - 1 others, so its
    probability passes 1/2 once 2 n c/tau >= ln(|V| - 1): n = ceil(ln(|V| - 1) / (2 c/tau)).
    """
    return math.ceil(math.log(vocab_size - 1) / (2.0 * c_over_tau))
