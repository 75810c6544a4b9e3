"""The build's configuration: every option of ``build-corpus``, settable in TOML or by flag.

Precedence: defaults (the paper's Table 6) < ``--config build.toml`` < command-line flags.
``BuildConfig.fingerprint()`` hashes the options that change what the build releases; a state
directory refuses a different fingerprint, so a resumed build can never mix two plans.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import tomllib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dpsynrag.accounting.conversions import Conversion
from dpsynrag.accounting.planner import NGRAM_WEIGHTS
from dpsynrag.facts.anchor_choice import ANCHOR_RULES
from dpsynrag.io.records import split_column_list, text_columns
from dpsynrag.pipeline.defaults import DEFAULT_DELTA, DEFAULT_EPSILON

# where each private-prediction token is computed (pipeline/worker.py): --token-sampling
TOKEN_SAMPLING_MODES = ("auto", "host", "device")
FACTS_ITEMS = ("terms", "open", "ngrams")

# Grislain's transform with alpha = 1 maps every logit row into [-0.5, 0.5]: exp(l - max) - 1
# lies in [-1, 0] (-1 where exp underflows in float) and centring halves its range. So
# c = 0.5 is the largest useful clip bound: a larger c rescales nothing, and the temperature
# c / (c/tau) it implies halves the vote margin of an agreeing document at the same epsilon
# (measured: P(consensus token) 0.009 at c = 1 against ~0.8 at c = 0.5 for a 40-row
# cluster). Smaller c is allowed (it downscales).
NATURAL_CLIP = 0.5
# --generate facts: clusters per document when --L is not given (measured with K_e = 2, 3 runs:
# L = 1 against L = 2 gave per-disease recall@10 78.3 vs 74.2 % at epsilon 10 and 64.2 vs
# 60.0 % at epsilon 3 on the clinic set, 85.0 vs 81.7 % and 49.2 vs 40.0 % on the support set:
# one cluster per document halves the histogram's sensitivity^2 and its duplicate notes)
FACTS_DEFAULT_L = 1
# the token mode's rho_hist when --rho-hist is not given (the paper's Table 6)
TOKENS_RHO_HIST = 0.1
#: The version of the facts rules that decide a document's terms and clusters; raise it with
#: any change to them. Builds record it (a facts state of another version is not resumed)
#: and so do eval reports; what each version changed is in CHANGELOG.md.
FACTS_RULES_VERSION = 21


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range."""


@dataclass(frozen=True)
class BuildConfig:
    """All options of one build; the defaults are DP-SynRAG's Table 6 (Medical Synth)."""

    # input
    # one text column, or several (a tuple) whose non-empty values are joined in order by a
    # blank line; make_config keeps one as a plain string (the fingerprint of a one-column
    # build does not change)
    text_column: str | tuple[str, ...] = "text"
    id_column: str | None = "id"
    unit_column: str | None = None
    max_chars: int = 20_000
    unit_bound: str = "pick"  # how a unit with several records becomes one document
    ingest: str = "inline"  # "inline" (in process) or "beam" (the Beam ingest job)
    beam_runner: str = "direct"
    beam_options: str | None = None
    on_bad_row: str = "fail"  # "skip" drops (and counts) bad rows; beam ingest only
    # privacy target and hyperparameters
    epsilon: float = DEFAULT_EPSILON
    delta: float = DEFAULT_DELTA
    conversion: str = Conversion.CKS.value
    K: int = 10
    R: int = 500
    L: int = 5
    k: int = 80
    T: int = 70
    eps_theta: float = 0.4
    # None: the mode's default, 0.1 for tokens (the paper's Table 6) and, for facts,
    # share_hist x the total rho (the plan scales with epsilon)
    rho_hist: float | None = None
    rho_mean: float = 0.009
    clip: float = NATURAL_CLIP
    # stages
    keywords: str = "llm"
    rephrase_prompt: str | None = None
    response_prefix: str | None = None  # public text every synthetic reply starts with
    keyword_prompt: str | None = None
    filter_prompt: str | None = None
    no_filter: bool = False
    no_retrieval: bool = False  # ablation (paper Table 3): S_r = C_r, no stage (c) releases
    # issue 15: the public-difference token sampler (same rho per token; off = the paper's)
    public_prior: bool = False
    public_top_k: int = 50  # the public top-k of the support
    public_temperature: float = 1.0  # tau_pub: the public prior's temperature
    public_document: str | None = None  # public text in place of {document}; {keyword} allowed
    # generation mode: "facts" (issue 14: released phrases, anchored clusters, one noisy fact
    # histogram per cluster; the default, by measurement) or "tokens" (the paper: private
    # prediction token by token). make_config infers "tokens" from token-only options.
    generate: str = "facts"
    # facts: "terms" (terms of any vocabulary with their roles, facts.terms), "open"
    # (open-vocabulary phrases only, facts.phrases) or "ngrams" (the collection's n-grams,
    # released level by level with no word list, facts.ngrams; notes stitched from spans)
    facts_items: str = "ngrams"
    K_e: int | None = None  # facts: terms (or open phrases) per document; None: the plan's
    # public default (planner.AUTO_K_E_MAX terms while tau_A stays <= AUTO_TAU_A units)
    share_roles: float = 0.1  # facts with terms: share of the rho after the histogram for roles
    share_hist: float = 0.04  # facts: rho_hist = share_hist x rho when --rho-hist is not given
    K_s: int | None = None  # facts: statistical keywords per document (histogram and cluster
    # facts); None: the plan's public default (planner.auto_k_s: up to 14 while sigma_C <= 5)
    R_f: int = 300  # facts: top noisy keywords added to the cluster histograms' domain
    share_phrases: float = 0.3  # facts: share of the rho after the histogram for phrases
    # facts with ngrams: the n-gram lengths released level by level (each at most twice the
    # one before it)
    ngram_lengths: tuple[int, ...] = (1, 2, 4, 8)
    # facts with ngrams: n-grams per document at each level (one per length); (): the
    # planner's default (planner.NGRAM_LEVEL_ITEMS at every level)
    ngram_items: tuple[int, ...] = ()
    # facts with ngrams: the n-gram levels' share of the total rho (the rest: span histograms)
    share_ngrams: float = 0.6
    # facts with ngrams: "uniform" (each chosen n-gram of a document counts 1) or "weighted"
    # (a document's m chosen n-grams weigh 1 / sqrt(m) each: one l2 budget per document)
    ngram_weights: str = "weighted"
    # facts with ngrams: "weighted" (a document's m spans weigh 1 / sqrt(m) each in its
    # clusters' histograms, one l2 budget per document and cluster: planner.SPAN_WEIGHT_SCALE)
    # or "uniform" (each span counts 1, the builds made before the option)
    span_weights: str = "weighted"
    # facts with ngrams: which of its released anchors a document joins first: "nearest" (the
    # public embedder's nearest to its text, facts.anchor_choice) or "rarest" (the released
    # count, anchors of two content tokens first)
    ngram_anchors: str = "rarest"
    delta_phrases: float | None = None  # facts: delta of the phrase release (default delta/10)
    facts_label: str = "Reported"  # facts: lead word of each note ("Symptoms" for clinic notes)
    # facts: "template" (the free public template) or "tokens" (issue 15: each kept cluster's
    # note written by the public-difference token sampler over the cluster's documents, with
    # its released note as the public document; reads T, clip, rephrase_prompt,
    # response_prefix, public_top_k and public_temperature; costs L T (c/tau)^2 / 2)
    writer: str = "template"
    share_tokens: float = 0.3  # facts with --writer tokens: share of the rho after the histogram
    # facts with --writer tokens: each corpus text is the writer's reply followed by the
    # cluster's released template note (post-processing of released values: free)
    writer_keeps_note: bool = False
    # facts, template writer: texts per kept cluster (note_views); None: the default
    # (fact_writer.TEXTS_PER_CLUSTER)
    texts_per_cluster: int | None = None
    allow_large_epsilon: bool = False  # measurement builds above MAX_EPSILON (eval ceilings)
    # facts with --writer tokens: levers of the writer to switch off, comma-separated (the
    # ablation of issue 15; WRITER_LEVERS). Public choices only: the same releases and rho.
    writer_ablate: str = ""
    # models and execution (not part of the fingerprint unless they change the output)
    model: str | None = None
    embedder: str | None = None
    device: str | None = None
    dtype: str | None = None
    seed: int | None = None
    ray_address: str | None = None
    runner: str = "auto"  # "ray", "local", "beam" (n-gram facts), or "auto": resolved_runner
    workers: int | None = None
    batch_rows: int | None = None
    # where each private-prediction token is computed from the ledger's uniform: "host" (the
    # driver, from the relayed votes), "device" (the model worker, exact float64 inverse CDF),
    # "auto" (device on CUDA workers); the same tokens either way (pipeline/worker.py)
    token_sampling: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)

    # options only one generation mode reads
    FACTS_ONLY = ("facts_items", "share_roles", "share_hist", "K_e", "K_s", "R_f",
                  "ngram_lengths", "ngram_items", "share_ngrams", "ngram_weights", "ngram_anchors",
                  "span_weights", "share_phrases", "delta_phrases", "facts_label",
                  "writer", "share_tokens", "writer_keeps_note", "writer_ablate",
                  "texts_per_cluster")
    TOKENS_ONLY = ("K", "R", "k", "T", "eps_theta", "rho_mean", "clip", "keywords",
                   "rephrase_prompt", "response_prefix", "keyword_prompt", "filter_prompt",
                   "no_filter", "no_retrieval", "public_prior", "public_top_k",
                   "public_temperature", "public_document")
    PUBLIC_PRIOR = ("public_prior", "public_top_k", "public_temperature", "public_document")
    # options that only decide where or how fast the build runs, not what it releases
    EXECUTION_ONLY = ("ray_address", "runner", "workers", "batch_rows", "token_sampling",
                      "device", "extra", "allow_large_epsilon",
                      "ingest", "beam_runner", "beam_options", "on_bad_row")

    def validate(self) -> None:
        try:
            text_columns(self.text_column)
        except ValueError as error:
            raise ConfigError(f"--text-column: {error}") from None
        positive_ints = {"K": self.K, "R": self.R, "L": self.L, "k": self.k, "T": self.T,
                         "max_chars": self.max_chars}
        for name, value in positive_ints.items():
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"{_flag(name)} must be a positive integer, got {value!r}")
        if self.rho_hist is not None and not (
                isinstance(self.rho_hist, int | float) and math.isfinite(self.rho_hist)
                and self.rho_hist > 0):
            raise ConfigError(f"--rho-hist must be a finite positive number, got "
                              f"{self.rho_hist!r}")
        if self.facts_items not in FACTS_ITEMS:
            raise ConfigError(f"--facts-items must be one of {', '.join(FACTS_ITEMS)}, got "
                              f"{self.facts_items!r}")
        lengths = self.ngram_lengths
        if not (isinstance(lengths, tuple) and lengths
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                        for n in lengths)
                and all(a <= b <= 2 * a for a, b in itertools.pairwise(lengths))):
            raise ConfigError(f"--ngram-lengths must be non-decreasing positive integers, each at "
                              f"most twice the one before, got {lengths!r}")
        items = self.ngram_items
        if not (isinstance(items, tuple) and all(
                isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in items)
                and len(items) in (0, len(lengths))):
            raise ConfigError(f"--ngram-items must give one positive integer per n-gram "
                              f"length, got {items!r}")
        if self.generate == "facts" and self.facts_items == "ngrams" \
                and self.writer != "template":
            raise ConfigError("--facts-items ngrams (the default) stitches its notes from "
                              "released spans; --writer tokens needs --facts-items terms")
        if self.ngram_weights not in NGRAM_WEIGHTS:
            raise ConfigError(f"--ngram-weights must be one of {', '.join(NGRAM_WEIGHTS)}, "
                              f"got {self.ngram_weights!r}")
        if self.span_weights not in NGRAM_WEIGHTS:
            raise ConfigError(f"--span-weights must be one of {', '.join(NGRAM_WEIGHTS)}, "
                              f"got {self.span_weights!r}")
        if self.ngram_anchors not in ANCHOR_RULES:
            raise ConfigError(f"--ngram-anchors must be one of {', '.join(ANCHOR_RULES)}, "
                              f"got {self.ngram_anchors!r}")
        if not (isinstance(self.share_ngrams, int | float) and 0 < self.share_ngrams < 1):
            raise ConfigError(f"--share-ngrams must lie strictly between 0 and 1, got "
                              f"{self.share_ngrams!r}")
        for name in ("share_roles", "share_hist"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 <= value < 1):
                raise ConfigError(f"{_flag(name)} must lie in [0, 1), got {value!r}")
        for name in ("epsilon", "eps_theta", "rho_mean", "clip"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{_flag(name)} must be a finite positive number, got {value!r}")
        if self.clip > NATURAL_CLIP:
            raise ConfigError(f"--clip {self.clip:g} only wastes budget: the clipping transform's "
                              f"rows span at most [-{NATURAL_CLIP}, {NATURAL_CLIP}], so any "
                              f"c above {NATURAL_CLIP} lowers the usable signal at the same "
                              f"epsilon; use --clip {NATURAL_CLIP} (the default) or less")
        if not (isinstance(self.delta, float | int) and 0 < self.delta < 1):
            raise ConfigError(f"--delta must lie strictly between 0 and 1, got {self.delta!r}")
        if self.conversion not in {c.value for c in Conversion}:
            raise ConfigError(f"--conversion must be one of bun-steinke, cks, got "
                              f"{self.conversion!r}")
        if self.generate not in ("tokens", "facts"):
            raise ConfigError(f"--generate must be 'tokens' or 'facts', got {self.generate!r}")
        for name in ("K_e", "K_s", "R_f", "texts_per_cluster"):
            value = getattr(self, name)
            if name in ("K_e", "K_s", "texts_per_cluster") and value is None:
                continue  # the plan's default; the texts by epsilon
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"{_flag(name)} must be a positive integer, got {value!r}")
        if not (isinstance(self.share_phrases, int | float)
                and 0 < self.share_phrases < 1):
            raise ConfigError(f"--share-phrases must lie strictly between 0 and 1, got "
                              f"{self.share_phrases!r}")
        if self.delta_phrases is not None and not (
                isinstance(self.delta_phrases, int | float)
                and 0 < self.delta_phrases < self.delta):
            raise ConfigError(f"--delta-phrases must lie strictly between 0 and --delta, got "
                              f"{self.delta_phrases!r}")
        if isinstance(self.public_top_k, bool) or not (
                isinstance(self.public_top_k, int) and self.public_top_k >= 1):
            raise ConfigError(f"--public-top-k must be a positive integer, got "
                              f"{self.public_top_k!r}")
        if not (isinstance(self.public_temperature, int | float)
                and math.isfinite(self.public_temperature) and self.public_temperature > 0):
            raise ConfigError(f"--public-temperature must be a finite positive number, got "
                              f"{self.public_temperature!r}")
        defaults = BuildConfig.__dataclass_fields__
        if self.writer not in ("template", "tokens"):
            raise ConfigError(f"--writer must be 'template' or 'tokens', got {self.writer!r}")
        if not (isinstance(self.share_tokens, int | float) and self.share_tokens > 0
                and self.share_phrases + self.share_tokens < 1):
            raise ConfigError(f"--share-tokens must be positive with --share-phrases + "
                              f"--share-tokens below 1, got {self.share_tokens!r}")
        defaults = BuildConfig.__dataclass_fields__
        stray = [_flag(name) for name in self.PUBLIC_PRIOR[1:]
                 if getattr(self, name) != defaults[name].default]
        if self.facts_writer_tokens:
            if self.public_document is not None:
                raise ConfigError("--public-document does not apply to --writer tokens: each "
                                  "cluster's released note is its public document")
            if self.public_prior:
                raise ConfigError("--public-prior is implied by --writer tokens; drop it")
        elif stray and not self.public_prior and self.generate == "tokens":
            raise ConfigError(f"{', '.join(stray)} only apply with --public-prior (the "
                              "public-difference sampler) or --writer tokens; add one or drop "
                              "them")
        if self.public_prior and self.generate != "tokens":
            raise ConfigError("--public-prior applies to --generate tokens (in facts mode use "
                              "--writer tokens)")
        if self.writer == "tokens" and self.generate != "facts":
            raise ConfigError("--writer applies to --generate facts")
        if not isinstance(self.writer_keeps_note, bool):
            raise ConfigError(f"--writer-keeps-note must be true or false, got "
                              f"{self.writer_keeps_note!r}")
        if self.writer_keeps_note and not self.facts_writer_tokens:
            raise ConfigError("--writer-keeps-note applies to --generate facts --writer tokens")
        if self.token_sampling not in TOKEN_SAMPLING_MODES:
            raise ConfigError("--token-sampling must be auto, host or device, got "
                              f"{self.token_sampling!r}")
        if not isinstance(self.writer_ablate, str):
            raise ConfigError(f"--writer-ablate must be a comma-separated list of levers, got "
                              f"{self.writer_ablate!r}")
        unknown = [lever for lever in ablated_levers(self.writer_ablate)
                   if lever not in WRITER_LEVERS]
        if unknown:
            raise ConfigError(f"--writer-ablate: unknown lever {unknown[0]!r}; choose from "
                              f"{', '.join(WRITER_LEVERS)}")
        if self.writer_ablate.strip() and not self.facts_writer_tokens:
            raise ConfigError("--writer-ablate applies to --generate facts --writer tokens")
        if self.keywords not in ("llm", "statistical"):
            raise ConfigError(f"--keywords must be 'llm' or 'statistical', got {self.keywords!r}")
        if self.unit_bound not in ("pick", "concat"):
            raise ConfigError(f"--unit-bound must be 'pick' or 'concat', got {self.unit_bound!r}")
        if self.ingest not in ("inline", "beam"):
            raise ConfigError(f"--ingest must be 'inline' or 'beam', got {self.ingest!r}")
        if self.on_bad_row not in ("fail", "skip"):
            raise ConfigError(f"--on-bad-row must be 'fail' or 'skip', got {self.on_bad_row!r}")
        if self.on_bad_row == "skip" and self.ingest != "beam":
            raise ConfigError("--on-bad-row skip needs --ingest beam (the in-process reader "
                              "stops at the first bad row)")
        if self.runner not in ("auto", "ray", "local", "beam"):
            raise ConfigError(f"--runner must be 'auto', 'ray' or 'local' (or 'beam' for the "
                              f"n-gram facts build), got {self.runner!r}")
        if self.runner == "beam" and not (self.generate == "facts"
                                          and self.facts_items == "ngrams"):
            raise ConfigError("--runner beam runs the n-gram stages of --generate facts "
                              "--facts-items ngrams (the default build) only")
        if self.runner == "beam" and self.ngram_anchors == "nearest":
            raise ConfigError("--runner beam does not embed the documents: use "
                              "--ngram-anchors rarest (the default) or --runner local")
        if self.workers is not None and self.workers < 1:
            raise ConfigError("--workers must be a positive integer")
        for name in ("rephrase_prompt", "filter_prompt"):
            value = getattr(self, name)
            if value is not None and value.count("{document}") != 1:
                raise ConfigError(f"{_flag(name)} must contain the placeholder {{document}} "
                                  "exactly once")
        if self.keyword_prompt is not None and "{document}" not in self.keyword_prompt:
            raise ConfigError("--keyword-prompt must contain the placeholder {document}")

    def released_options(self) -> dict[str, Any]:
        """The options that decide what is released (public; go into the certificate)."""
        skip = set(self.EXECUTION_ONLY)
        if self.generate == "tokens":  # token builds keep the options (and fingerprint) they had
            skip |= {"generate", *self.FACTS_ONLY}
        if not self.public_prior and not self.facts_writer_tokens:  # so do builds without
            skip |= set(self.PUBLIC_PRIOR)                           # the new sampler
        if self.writer == "template":
            skip |= {"writer", "share_tokens"}
        if not self.writer_keeps_note:  # writer builds made before the option keep theirs
            skip.add("writer_keeps_note")
        if not self.writer_ablate.strip():  # as do builds without an ablated lever
            skip.add("writer_ablate")
        if self.facts_items != "ngrams":  # builds of terms and phrases keep their options
            skip |= {"ngram_lengths", "ngram_items", "share_ngrams", "ngram_weights",
                     "ngram_anchors", "span_weights"}
        else:
            if self.ngram_weights == "uniform":  # n-gram builds made before the option
                skip.add("ngram_weights")
            if self.ngram_anchors == "rarest":  # as do those made before this one
                skip.add("ngram_anchors")
            if self.span_weights == "uniform":  # and those made before --span-weights
                skip.add("span_weights")
        options = {k: v for k, v in asdict(self).items() if k not in skip}
        if self.generate == "tokens":  # the resolved value, as token builds recorded it
            options["rho_hist"] = self.tokens_rho_hist
        else:  # the rules the default K_e follows (verify plans an older build by its own)
            options["facts_rules"] = FACTS_RULES_VERSION
        return options

    def fingerprint(self) -> str:
        """The state directory's key: the released options and, for a facts build, the
        version of the facts rules (``FACTS_RULES_VERSION``). A state made by other rules is
        refused, not resumed: the clusters released before an interruption and those after it
        must come from one membership rule, or a document could join more than L clusters."""
        options = self.released_options()
        options.pop("facts_rules", None)  # appended below, as states have always keyed it
        canonical = json.dumps(options, sort_keys=True, separators=(",", ":"))
        if self.generate == "facts":
            canonical += f"|facts-rules:{FACTS_RULES_VERSION}"
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def facts_writer_tokens(self) -> bool:
        """A facts build whose notes the token writer writes (it loads the LLM)."""
        return self.generate == "facts" and self.writer == "tokens"

    @property
    def tokens_rho_hist(self) -> float:
        """The token mode's rho_hist: --rho-hist, else the paper's 0.1."""
        return TOKENS_RHO_HIST if self.rho_hist is None else float(self.rho_hist)

    @property
    def uses_llm(self) -> bool:
        """Whether the build runs the language model (token mode or the token writer)."""
        return self.generate == "tokens" or self.facts_writer_tokens

    @property
    def resolved_texts_per_cluster(self) -> int:
        """``--texts-per-cluster``, or without it the default
        (``facts.fact_writer.TEXTS_PER_CLUSTER``: 5 at every epsilon)."""
        if self.texts_per_cluster is not None:
            return self.texts_per_cluster
        from dpsynrag.facts.fact_writer import TEXTS_PER_CLUSTER

        return TEXTS_PER_CLUSTER

    @property
    def resolved_runner(self) -> str:
        """``--runner auto`` (the default): Ray where the build runs the language model or is
        given a Ray cluster (``--ray-address``, ``RAY_ADDRESS``); otherwise one process (a
        facts build with the template writer only embeds its few texts: a local Ray cluster
        took longer to start, about 10 s, than the whole rest of a small build)."""
        if self.runner != "auto":
            return self.runner
        attached = self.ray_address is not None or bool(os.environ.get("RAY_ADDRESS"))
        return "ray" if self.uses_llm or attached else "local"

    @property
    def seeded(self) -> bool:
        return self.seed is not None


# the token writer's levers (issue 15) that --writer-ablate can switch off, one at a time or
# together: "public-difference" (the paper's clip_c(phi_i) sampler over the whole vocabulary:
# no public prior, so no support, candidates or completion either), "top-k" (the support is
# the whole vocabulary), "public-facts" (the public prompt holds WRITER_NEUTRAL_DOCUMENT, not
# the released note), "candidates" (the next tokens of released facts no longer join the
# support), "trie" (no trie completion) and "slot" (the reply prefix stops before {keyword})
WRITER_LEVERS = ("public-difference", "top-k", "public-facts", "candidates", "trie", "slot")


def ablated_levers(text: str) -> list[str]:
    """The lever names of a ``--writer-ablate`` value (comma-separated; blanks ignored)."""
    return [part.strip() for part in text.split(",") if part.strip()]


_FIELD_NAMES = {f.name for f in fields(BuildConfig)} - {"extra"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def load_toml(path: Path) -> dict[str, Any]:
    """Read a build TOML: top-level keys or a ``[build]`` table, names as flags or fields."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    table = raw.get("build", raw)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [build] must be a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in _FIELD_NAMES:
            raise ConfigError(f"{path}: unknown option {key!r}")
        values[name] = value
    return values


def resolve_generate(values: dict[str, Any], tokens_only: Iterable[str] | None = None,
                     facts_only: Iterable[str] | None = None) -> str:
    """The generation mode of a set of given options: ``generate`` when given; otherwise
    ``tokens`` when a token-only option is given (a config written for the paper's mode keeps
    it), else the default ``facts``. Token-only and facts-only options together without
    ``generate`` are refused (``ConfigError``): the mode is never guessed from a mix.

    ``tokens_only`` / ``facts_only`` name the options of each mode (default: the build's,
    ``BuildConfig.TOKENS_ONLY`` / ``FACTS_ONLY``; ``dpsynrag budget`` passes its own)."""
    if values.get("generate") is not None:
        return str(values["generate"])
    if values.get("writer") == "tokens":  # the facts mode's token writer reads token options
        return "facts"
    tokens_only = BuildConfig.TOKENS_ONLY if tokens_only is None else tokens_only
    facts_only = BuildConfig.FACTS_ONLY if facts_only is None else facts_only
    tokens = [_flag(name) for name in tokens_only if name in values]
    facts = [_flag(name) for name in facts_only if name in values]
    if tokens and facts:
        raise ConfigError(f"token-only and facts-only options together: {', '.join(tokens)} "
                          f"apply to --generate tokens and {', '.join(facts)} to --generate "
                          "facts; say which with --generate")
    return "tokens" if tokens else BuildConfig.generate


def parse_text_column(value: Any) -> str | tuple[str, ...]:
    """``text_column`` as the TOML file gives it, or the flags (``cli.options.ColumnList``,
    a list): a string is one name or a comma-separated list (``"subject, body"``), a list
    holds the names as they are (so a name may hold a comma). One name is kept as a plain
    string, several as a tuple; ``ConfigError`` for none, an empty name in a list, a name
    that is not a string, or one given twice."""
    try:
        if isinstance(value, str):
            names = split_column_list(value)
        elif isinstance(value, list | tuple):
            names = text_columns(value)
        else:
            raise ValueError(f"expected a column name or a list of them, got {value!r}")
        names = text_columns(names)
    except ValueError as error:
        raise ConfigError(f"--text-column: {error}") from None
    return names[0] if len(names) == 1 else names


def parse_int_list(value: Any, flag: str) -> tuple[int, ...]:
    """A list of integers as TOML (a list) or a flag (``"1,2,4,8"``) gives it."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"{flag}: expected a comma-separated list of integers, got {value!r}")
    try:
        return tuple(int(str(item).strip()) for item in items)
    except ValueError:
        raise ConfigError(f"{flag}: expected a comma-separated list of integers, got "
                          f"{value!r}") from None


def make_config(toml_path: Path | None, overrides: dict[str, Any]) -> BuildConfig:
    """Defaults, then the TOML file, then flags (``None`` in ``overrides`` means not given)."""
    values: dict[str, Any] = {}
    if toml_path is not None:
        values.update(load_toml(toml_path))
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(values) - _FIELD_NAMES
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
    floats = ("epsilon", "delta", "eps_theta", "rho_hist", "rho_mean", "clip",
              "share_phrases", "delta_phrases", "public_temperature", "share_tokens",
              "share_roles", "share_hist", "share_ngrams")
    if "text_column" in values:
        values["text_column"] = parse_text_column(values["text_column"])
    for name in ("ngram_lengths", "ngram_items"):
        if name in values:
            values[name] = parse_int_list(values[name], _flag(name))
    for name in floats:
        if name in values and isinstance(values[name], int) and not isinstance(values[name], bool):
            values[name] = float(values[name])
    values["generate"] = resolve_generate(values)
    if values["generate"] == "facts" and "L" not in values:
        values["L"] = FACTS_DEFAULT_L  # one cluster per document: its rarest released phrase
    config = replace(BuildConfig(), **values)
    config.validate()
    return config
