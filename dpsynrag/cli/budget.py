"""``dpsynrag budget``: plan a build's privacy budget (noise scales, where rho goes) without
building.

Exit codes: 0 planned; 1 no plan exists for these options (e.g. nothing left for private
prediction); 2 bad options.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import (
    open_unit_float,
    option_flags,
    positive_float,
    positive_int,
    unit_float,
)
from dpsynrag.pipeline.defaults import DEFAULT_DELTA, DEFAULT_EPSILON

if TYPE_CHECKING:
    import argparse

    from dpsynrag.accounting.planner import PlanRequest

__all__ = ["add_parser", "delta_warning", "run_budget"]

# The planner's own token-mode option, besides the build's (BuildConfig.TOKENS_ONLY).
_PLANNER_TOKEN_OPTIONS = ("vocab_size",)


def add_parser(subparsers: Any) -> None:
    """Add ``budget`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "budget",
        help="plan a DP-SynRAG privacy budget: noise scales and where rho goes",
        description=(
            "Solve DP-SynRAG's zCDP budget (Theorem 1 with the corrections of "
            "docs/mechanisms.md, section 10): from a target (epsilon, delta), K, L, T, "
            "eps_theta, rho_hist and rho_mean derive sigma_h, "
            "sigma_mu, c/tau and each stage's rho. Refuses a plan that leaves nothing for "
            "private prediction. With --generate facts: from (epsilon, delta), L, rho_hist, "
            "K_e, K_s, delta_phrases and share_phrases derive sigma_h, the phrase release's "
            "sigma_A and threshold tau_A, and the cluster fact histograms' sigma_C."),
        epilog=("Example (the paper's Table 6): dpsynrag budget --epsilon 10 --delta 1e-3 --K 10 "
                "--L 5 --T 70 --eps-theta 0.4 --rho-hist 0.1 --rho-mean 0.009. Facts: dpsynrag "
                "budget --epsilon 10 --delta 1e-3 (--L 1 and --rho-hist 0.04 x the total rho by "
                "default). Without --epsilon and --delta: build-corpus's defaults, "
                f"epsilon {DEFAULT_EPSILON:g} and delta {DEFAULT_DELTA:g}"),
    )
    parser.add_argument("--generate", choices=["tokens", "facts"], default=None,
                        help="what the build generates, as in build-corpus: facts (released "
                             "phrases and per-cluster fact histograms; the default) or tokens "
                             "(the paper's private prediction). Without it, a token-only "
                             "option (--K, --T, --eps-theta, --rho-mean, --vocab-size) means "
                             "tokens")
    parser.add_argument("--epsilon", type=positive_float, default=DEFAULT_EPSILON,
                        help=f"target epsilon of the whole build (default {DEFAULT_EPSILON:g}, "
                             "as build-corpus)")
    parser.add_argument("--delta", type=open_unit_float, default=DEFAULT_DELTA,
                        help=f"target delta, in (0, 1) (default {DEFAULT_DELTA:g}, as "
                             "build-corpus)")
    parser.add_argument("--allow-large-epsilon", action="store_true",
                        help="plan an epsilon above 30 (measurement only: no useful privacy)")
    parser.add_argument("--K", type=positive_int, default=None,
                        metavar="N_KEYWORDS",
                        help="tokens: keywords per document in the histogram (l2 sensitivity "
                             "sqrt(K); default 10, as build-corpus)")
    parser.add_argument("--L", type=positive_int, default=None,
                        help="maximum clusters per document (overlapping parallel "
                             "composition); default 5 for tokens, 1 for facts, as build-corpus")
    parser.add_argument("--T", type=positive_int, default=None,
                        metavar="N_TOKENS",
                        help="tokens: tokens generated per cluster (default 70)")
    parser.add_argument("--eps-theta", type=positive_float, default=None,
                        help="tokens: epsilon of the similarity-threshold exponential "
                             "mechanism (default 0.4)")
    parser.add_argument("--rho-hist", type=positive_float, default=None,
                        help="zCDP of the keyword histogram (default: tokens 0.1; facts "
                             "--share-hist of the total, so the plan scales with epsilon)")
    parser.add_argument("--rho-mean", type=positive_float, default=None,
                        help="tokens: zCDP share of each cluster's noisy embedding sum "
                             "(Gaussian part of retrieval, before x L; default 0.009)")
    parser.add_argument("--conversion", choices=["bun-steinke", "cks"], default="cks",
                        help="zCDP to (epsilon, delta) conversion (default: cks, Canonne-"
                             "Kamath-Steinke, the tighter; bun-steinke is the paper's)")
    parser.add_argument("--vocab-size", type=positive_int, default=None,
                        help="tokens: LLM vocabulary size for the consensus estimate (default "
                             "49152, the packaged SmolLM2)")
    parser.add_argument("--K-e", dest="K_e", type=positive_int, default=None,
                        help="facts: terms per document (default: the most, up to 6, whose "
                             "phrase release's tau_A stays <= 20 units, else 1; with the "
                             "other defaults 1 below epsilon 1.8, 2-5 up to 3.7, 6 from 3.7)")
    parser.add_argument("--share-roles", type=unit_float, default=None,
                        help="facts: share of the rho left after the histogram for the role "
                             "histogram of the terms (default 0.1; 0 releases no roles)")
    parser.add_argument("--share-hist", type=open_unit_float, default=None,
                        help="facts: the keyword histogram's share of the total rho when "
                             "--rho-hist is not given (default 0.04)")
    parser.add_argument("--K-s", dest="K_s", type=positive_int, default=None,
                        help="facts: statistical keywords per document in the histograms "
                             "(default: the most, up to 14, whose cluster fact histograms keep "
                             "sigma_C <= 5, at least 4; with the other defaults 4 below epsilon "
                             "2.5, 6 at 3, 14 from 4.4)")
    parser.add_argument("--R-f", dest="R_f", type=positive_int, default=None,
                        help="facts: top keywords of the histogram added to the cluster domain "
                             "(default 300)")
    parser.add_argument("--delta-phrases", type=open_unit_float, default=None,
                        help="facts: approximate delta of the phrase release, below --delta "
                             "(default delta/10)")
    parser.add_argument("--share-phrases", type=open_unit_float, default=None,
                        help="facts: share of the rho left after the histogram that goes to "
                             "the phrases (default 0.3; the rest to the cluster facts)")
    parser.add_argument("--writer", choices=["template", "tokens"], default=None,
                        help="facts: who writes each cluster's note: the free public template "
                             "(default) or the token writer (T draws per cluster; --T, default "
                             "70, and --share-tokens apply)")
    parser.add_argument("--share-tokens", type=open_unit_float, default=None,
                        help="facts with --writer tokens: share of the rho left after the "
                             "histogram for the token writer (default 0.3)")
    parser.add_argument("--facts-items", choices=["terms", "open", "ngrams"], default=None,
                        help="facts: what a document offers (default ngrams: the n-gram "
                             "levels and span histograms, each level's threshold printed); "
                             "'terms' and 'open' plan the word-list modes")
    parser.add_argument("--ngram-lengths", metavar="N,N,...", default=None,
                        help="facts with ngrams: the n-gram lengths (default 1,2,4,8)")
    parser.add_argument("--ngram-items", metavar="K,K,...", default=None,
                        help="facts with ngrams: n-grams per document at each level "
                             "(default 128 each, 32 with --ngram-weights uniform)")
    parser.add_argument("--share-ngrams", type=open_unit_float, default=None,
                        help="facts with ngrams: the levels' share of rho (default 0.6)")
    parser.add_argument("--ngram-weights", choices=["uniform", "weighted"], default=None,
                        help="facts with ngrams: chosen n-grams weigh 1/sqrt(m) each "
                             "('weighted', default) or count 1 each ('uniform')")
    parser.add_argument("--span-weights", choices=["uniform", "weighted"], default=None,
                        help="facts with ngrams: a document's spans weigh 1/sqrt(m) each "
                             "in its clusters' histograms ('weighted', default) or count 1 "
                             "each ('uniform')")
    parser.add_argument("--units", type=positive_int, default=None, metavar="N",
                        help="a public upper bound on the number of privacy units (people) "
                             "in the corpus: warns when delta > 1/N (a delta that large lets "
                             "a mechanism publish one unit's record outright)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=functools.partial(run_budget, flags=option_flags(parser)))


def _given_flags(flags: Mapping[str, str], names: Collection[str]) -> dict[str, str]:
    """``{dest: --flag}`` of budget's options named in ``names``, in the parser's order."""
    return {name: flag for name, flag in flags.items() if name in names}


def _budget_request(args: argparse.Namespace, flags: Mapping[str, str]) -> PlanRequest:
    """The ``PlanRequest`` of the parsed options; ``CliError`` (exit 2) for a wrong mix.

    ``flags`` are budget's options (``option_flags`` of its parser); the ones only one
    generation mode reads are the build's (``BuildConfig.TOKENS_ONLY`` / ``FACTS_ONLY``) that
    budget has, and the planner's vocabulary size."""
    # lazy: the planner and the build's config load numpy and scipy (see run_budget)
    from dpsynrag.accounting.planner import DEFAULT_VOCAB_SIZE, PlanRequest
    from dpsynrag.pipeline.config import (
        FACTS_DEFAULT_L,
        TOKENS_RHO_HIST,
        BuildConfig,
        resolve_generate,
    )

    tokens_only = _given_flags(flags, {*BuildConfig.TOKENS_ONLY, *_PLANNER_TOKEN_OPTIONS})
    facts_only = _given_flags(flags, BuildConfig.FACTS_ONLY)
    given_options = {name: getattr(args, name) for name in ("generate", *tokens_only,
                                                            *facts_only)
                     if getattr(args, name) is not None}
    # the build's rule: token-only options mean tokens, a mix is refused (ConfigError: exit 2)
    args.generate = resolve_generate(given_options, tokens_only, facts_only)
    facts = args.generate == "facts"
    other = tokens_only if facts else facts_only
    writer_tokens = facts and args.writer == "tokens"
    given = [flag for name, flag in other.items() if getattr(args, name) is not None
             and not (writer_tokens and name == "T")]
    if given:
        mode = "tokens" if facts else "facts"
        raise CliError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} only to "
                       f"--generate {mode} (see 'dpsynrag budget --help')")
    if facts:  # build-corpus's facts defaults
        args.L = FACTS_DEFAULT_L if args.L is None else args.L
        args.rho_hist = 0.0 if args.rho_hist is None else args.rho_hist  # 0: share_hist
    else:  # build-corpus's token defaults (the paper's Table 6)
        for name in ("K", "L", "T", "eps_theta", "rho_mean"):
            if getattr(args, name) is None:
                setattr(args, name, getattr(BuildConfig, name))
        if args.rho_hist is None:
            args.rho_hist = TOKENS_RHO_HIST
    if facts:
        extra = {name: getattr(args, name) for name in facts_only
                 if getattr(args, name) is not None}
        if writer_tokens:
            extra["T"] = BuildConfig.T if args.T is None else args.T
        extra.update(_ngram_request(extra))
        return PlanRequest(epsilon=args.epsilon, delta=args.delta, L=args.L,
                           rho_hist=args.rho_hist, conversion=args.conversion,
                           generate="facts", allow_large_epsilon=args.allow_large_epsilon,
                           **extra)
    return PlanRequest(
        epsilon=args.epsilon, delta=args.delta, K=args.K, L=args.L, T=args.T,
        eps_theta=args.eps_theta, rho_hist=args.rho_hist, rho_mean=args.rho_mean,
        conversion=args.conversion, vocab_size=args.vocab_size or DEFAULT_VOCAB_SIZE,
        allow_large_epsilon=args.allow_large_epsilon)


def _ngram_request(extra: dict[str, Any]) -> dict[str, Any]:
    """The planner's n-gram fields from budget's facts options (as ``make_config`` reads
    the build's); ``extra`` loses ``facts_items`` and the n-gram flags. ``CliError`` (exit 2)
    for an n-gram flag without ``--facts-items ngrams``."""
    from dpsynrag.pipeline.config import BuildConfig, ConfigError, parse_int_list

    items = extra.pop("facts_items", None) or BuildConfig.facts_items
    given = {name: extra.pop(name) for name in ("ngram_lengths", "ngram_items", "share_ngrams",
                                                "ngram_weights", "span_weights")
             if name in extra}
    if items != "ngrams":
        if given:
            raise CliError("--ngram-lengths, --ngram-items, --share-ngrams, --ngram-weights "
                           "and --span-weights apply only to --facts-items ngrams")
        # open phrases release no role histogram (as request_from_options plans a build)
        return {} if items == "terms" else {"share_roles": 0.0}
    try:
        lengths = parse_int_list(given.get("ngram_lengths", BuildConfig.ngram_lengths),
                                 "--ngram-lengths")
        caps = parse_int_list(given.get("ngram_items", ()), "--ngram-items")
    except ConfigError as error:
        raise CliError(str(error)) from None
    fields: dict[str, Any] = {"ngram_lengths": lengths, "ngram_items": caps,
                              "ngram_weights": given.get("ngram_weights",
                                                         BuildConfig.ngram_weights),
                              "span_weights": given.get("span_weights",
                                                        BuildConfig.span_weights)}
    if "share_ngrams" in given:
        fields["share_ngrams"] = given["share_ngrams"]
    return fields


def run_budget(args: argparse.Namespace, flags: Mapping[str, str]) -> int:
    """Print the plan (a table, or JSON with ``--json``)."""
    # planner and reporting pull numpy, scipy and rich: imported when the command runs, so
    # that building the parser (every 'dpsynrag' call, --help included) stays fast
    from dpsynrag.accounting.planner import FactsBudgetPlan, PlanError, plan_budget

    request = _budget_request(args, flags)
    try:
        plan = plan_budget(request)
    except PlanError as error:  # here no plan exists for the options: a failure, not a refusal
        raise CliError(str(error), ExitCode.FAILURE) from error
    warning = delta_warning(args.delta, args.units)
    if args.json:
        document = plan.as_dict()
        if args.units is not None:
            document["delta_warning"] = warning
        print(json.dumps(document, indent=2, sort_keys=True))
        return ExitCode.OK
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if isinstance(plan, FactsBudgetPlan):
        from dpsynrag.reporting import print_facts_plan  # lazy: as above

        print_facts_plan(plan)
    else:
        from dpsynrag.reporting import print_budget_plan  # lazy: as above

        print_budget_plan(plan)
    return ExitCode.OK


def delta_warning(delta: float, units: int | None) -> str | None:
    """A one-line warning when delta exceeds 1/units (None when it does not, or no bound)."""
    if units is None or delta <= 1.0 / units:
        return None
    return (f"delta={delta:g} exceeds 1/N = {1.0 / units:.3g} for the stated bound of {units} "
            "units: a mechanism with this delta may publish one unit's data outright; choose "
            f"delta <= {1.0 / units:.3g} (a common choice is well below 1/N)")
