"""Command-line entry points: ``dpsynrag`` (tools) and ``build-corpus`` (the build).

Errors print one line (``dpsynrag: error: ...``) and exit non-zero; ``--debug`` shows the
traceback as well.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dpsynrag import __version__

if TYPE_CHECKING:
    from dpsynrag.accounting.planner import PlanRequest

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(Exception):
    """An error worth one line to the user, with an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and no abbreviated options: ``dpsynrag budget --R 48``
    would otherwise be read as ``--R-f 48`` (budget has no ``--R``)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # one line, exit 2, as argparse does, but no usage
        raise CliError(f"{message} (see '{self.prog} --help')")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text!r}")
    return value


def _open_unit_float(text: str) -> float:
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


# ---------------------------------------------------------------------- budget
_TOKENS_ONLY = {"K": "--K", "T": "--T", "eps_theta": "--eps-theta", "rho_mean": "--rho-mean",
                "vocab_size": "--vocab-size"}
_FACTS_ONLY = {"K_e": "--K-e", "K_s": "--K-s", "R_f": "--R-f",
               "delta_phrases": "--delta-phrases", "share_phrases": "--share-phrases",
               "writer": "--writer", "share_tokens": "--share-tokens"}


def _add_budget_parser(subparsers: argparse._SubParsersAction) -> None:
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
                "budget --epsilon 10 --delta 1e-3 (--L 1 and --rho-hist 0.1 by default)"),
    )
    parser.add_argument("--generate", choices=["tokens", "facts"], default=None,
                        help="what the build generates, as in build-corpus: facts (released "
                             "phrases and per-cluster fact histograms; the default) or tokens "
                             "(the paper's private prediction). Without it, a token-only "
                             "option (--K, --T, --eps-theta, --rho-mean, --vocab-size) means "
                             "tokens")
    parser.add_argument("--epsilon", type=_positive_float, required=True,
                        help="target epsilon of the whole build")
    parser.add_argument("--delta", type=_open_unit_float, required=True,
                        help="target delta, in (0, 1)")
    parser.add_argument("--K", type=_positive_int, default=None,
                        metavar="N_KEYWORDS",
                        help="tokens: keywords per document in the histogram (l2 sensitivity "
                             "sqrt(K); default 10, as build-corpus)")
    parser.add_argument("--L", type=_positive_int, default=None,
                        help="maximum clusters per document (overlapping parallel "
                             "composition); default 5 for tokens, 1 for facts, as build-corpus")
    parser.add_argument("--T", type=_positive_int, default=None,
                        metavar="N_TOKENS",
                        help="tokens: tokens generated per cluster (default 70)")
    parser.add_argument("--eps-theta", type=_positive_float, default=None,
                        help="tokens: epsilon of the similarity-threshold exponential "
                             "mechanism (default 0.4)")
    parser.add_argument("--rho-hist", type=_positive_float, default=None,
                        help="zCDP share of the keyword histogram (default 0.1)")
    parser.add_argument("--rho-mean", type=_positive_float, default=None,
                        help="tokens: zCDP share of each cluster's noisy embedding sum "
                             "(Gaussian part of retrieval, before x L; default 0.009)")
    parser.add_argument("--conversion", choices=["bun-steinke", "cks"], default="cks",
                        help="zCDP to (epsilon, delta) conversion (default: cks, Canonne-"
                             "Kamath-Steinke, the tighter; bun-steinke is the paper's)")
    parser.add_argument("--vocab-size", type=_positive_int, default=None,
                        help="tokens: LLM vocabulary size for the consensus estimate (default "
                             "49152, the packaged SmolLM2)")
    parser.add_argument("--K-e", dest="K_e", type=_positive_int, default=None,
                        help="facts: phrases per document (default 2)")
    parser.add_argument("--K-s", dest="K_s", type=_positive_int, default=None,
                        help="facts: keywords per document in the histograms (default 14)")
    parser.add_argument("--R-f", dest="R_f", type=_positive_int, default=None,
                        help="facts: top keywords of the histogram added to the cluster domain "
                             "(default 300)")
    parser.add_argument("--delta-phrases", type=_open_unit_float, default=None,
                        help="facts: approximate delta of the phrase release, below --delta "
                             "(default delta/10)")
    parser.add_argument("--share-phrases", type=_open_unit_float, default=None,
                        help="facts: share of the rho left after the histogram that goes to "
                             "the phrases (default 0.3; the rest to the cluster facts)")
    parser.add_argument("--writer", choices=["template", "tokens"], default=None,
                        help="facts: who writes each cluster's note: the free public template "
                             "(default) or the token writer (T draws per cluster; --T, default "
                             "70, and --share-tokens apply)")
    parser.add_argument("--share-tokens", type=_open_unit_float, default=None,
                        help="facts with --writer tokens: share of the rho left after the "
                             "histogram for the token writer (default 0.3)")
    parser.add_argument("--units", type=_positive_int, default=None, metavar="N",
                        help="a public upper bound on the number of privacy units (people) "
                             "in the corpus: warns when delta > 1/N (a delta that large lets "
                             "a mechanism publish one unit's record outright)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=_run_budget)


def _budget_request(args: argparse.Namespace) -> PlanRequest:
    """The ``PlanRequest`` of the parsed options; ``CliError`` (exit 2) for a wrong mix."""
    from dpsynrag.accounting.planner import DEFAULT_VOCAB_SIZE, PlanRequest
    from dpsynrag.pipeline.config import FACTS_DEFAULT_L, BuildConfig, ConfigError, resolve_generate

    given_options = {name: getattr(args, name) for name in ("generate", *_TOKENS_ONLY,
                                                            *_FACTS_ONLY)
                     if getattr(args, name) is not None}
    try:  # the build's rule: token-only options mean tokens, a mix is refused
        args.generate = resolve_generate(given_options, _TOKENS_ONLY, _FACTS_ONLY)
    except ConfigError as error:
        raise CliError(str(error)) from None
    facts = args.generate == "facts"
    other = _TOKENS_ONLY if facts else _FACTS_ONLY
    writer_tokens = facts and args.writer == "tokens"
    given = [flag for name, flag in other.items() if getattr(args, name) is not None
             and not (writer_tokens and name == "T")]
    if given:
        mode = "tokens" if facts else "facts"
        raise CliError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} only to "
                       f"--generate {mode} (see 'dpsynrag budget --help')")
    if facts:  # build-corpus's facts defaults
        args.L = FACTS_DEFAULT_L if args.L is None else args.L
        args.rho_hist = BuildConfig.rho_hist if args.rho_hist is None else args.rho_hist
    else:  # build-corpus's token defaults (the paper's Table 6)
        for name in ("K", "L", "T", "eps_theta", "rho_hist", "rho_mean"):
            if getattr(args, name) is None:
                setattr(args, name, getattr(BuildConfig, name))
    if facts:
        extra = {name: getattr(args, name) for name in _FACTS_ONLY
                 if getattr(args, name) is not None}
        if writer_tokens:
            extra["T"] = BuildConfig.T if args.T is None else args.T
        return PlanRequest(epsilon=args.epsilon, delta=args.delta, L=args.L,
                           rho_hist=args.rho_hist, conversion=args.conversion,
                           generate="facts", **extra)
    return PlanRequest(
        epsilon=args.epsilon, delta=args.delta, K=args.K, L=args.L, T=args.T,
        eps_theta=args.eps_theta, rho_hist=args.rho_hist, rho_mean=args.rho_mean,
        conversion=args.conversion, vocab_size=args.vocab_size or DEFAULT_VOCAB_SIZE)


def _run_budget(args: argparse.Namespace) -> int:
    from dpsynrag.accounting.planner import FactsBudgetPlan, PlanError, plan_budget

    request = _budget_request(args)
    try:
        plan = plan_budget(request)
    except PlanError as error:
        raise CliError(str(error), EXIT_FAILURE) from error
    warning = delta_warning(args.delta, args.units)
    if args.json:
        document = plan.as_dict()
        if args.units is not None:
            document["delta_warning"] = warning
        print(json.dumps(document, indent=2, sort_keys=True))
        return EXIT_OK
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if isinstance(plan, FactsBudgetPlan):
        from dpsynrag.reporting import print_facts_plan

        print_facts_plan(plan)
    else:
        from dpsynrag.reporting import print_budget_plan

        print_budget_plan(plan)
    return EXIT_OK


def delta_warning(delta: float, units: int | None) -> str | None:
    """A one-line warning when delta exceeds 1/units (None when it does not, or no bound)."""
    if units is None or delta <= 1.0 / units:
        return None
    return (f"delta={delta:g} exceeds 1/N = {1.0 / units:.3g} for the stated bound of {units} "
            "units: a mechanism with this delta may publish one unit's data outright; choose "
            f"delta <= {1.0 / units:.3g} (a common choice is well below 1/N)")


# ---------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dpsynrag",
        description="dpsynrag: differentially private synthetic RAG corpora (DP-SynRAG).",
    )
    parser.add_argument("--version", action="version", version=f"dpsynrag {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show full tracebacks on errors (they may contain local paths)")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND",
                                       parser_class=_Parser)
    subparsers.add_parser(
        "build", add_help=False,
        help="build a synthetic corpus: the same command as build-corpus (see 'dpsynrag "
             "build --help')")
    _add_budget_parser(subparsers)
    from dpsynrag.pipeline import cli_tools

    cli_tools.add_keygen_parser(subparsers)
    cli_tools.add_verify_parser(subparsers)
    cli_tools.add_ledger_parser(subparsers)
    cli_tools.add_dataset_parser(subparsers, _positive_int)
    from dpsynrag.pipeline.cli_ingest import add_ingest_parser

    add_ingest_parser(subparsers, _positive_int)
    cli_tools.add_eval_parser(subparsers, _positive_int)
    from dpsynrag.query.cli import add_query_parser

    add_query_parser(subparsers, _positive_float, _positive_int)
    return parser


def _run(handler: Callable[[], int], prog: str, debug: bool) -> int:
    try:
        return handler()
    except CliError as error:
        if debug:
            raise
        print(f"{prog}: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # one line, never a traceback, unless --debug
        if debug:
            raise
        print(f"{prog}: error: {type(error).__name__}: {error} (rerun with --debug for the "
              "traceback)", file=sys.stderr)
        return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((i for i, arg in enumerate(argv) if arg != "--debug"), None)
    if command is not None and argv[command] == "build":  # dpsynrag build == build-corpus
        return build_corpus_main(argv[:command] + argv[command + 1:], prog="dpsynrag build")
    debug = "--debug" in argv
    parser = build_parser()

    def handler() -> int:
        args = parser.parse_args(argv)
        if not hasattr(args, "handler"):
            parser.print_help()
            return EXIT_USAGE
        from dpsynrag.pipeline.cli_tools import ToolError

        try:
            return args.handler(args)
        except ToolError as error:
            raise CliError(str(error), error.exit_code) from error

    return _run(handler, "dpsynrag", debug)


def _types() -> dict[str, Callable]:
    return {"positive_float": _positive_float, "open_unit_float": _open_unit_float,
            "positive_int": _positive_int}


def _build_error_code(error: BaseException) -> int | None:
    """Exit code of a known build failure (see ``pipeline.cli_build``), else None."""
    from dpsynrag.accounting.ledger import BudgetExceededError, ReleaseMismatchError
    from dpsynrag.accounting.planner import PlanError
    from dpsynrag.accounting.signing import SigningKeyError
    from dpsynrag.io.errors import InputError
    from dpsynrag.pipeline import cli_build
    from dpsynrag.pipeline.build import BuildError
    from dpsynrag.pipeline.config import ConfigError
    from dpsynrag.pipeline.preflight import PreflightError
    from dpsynrag.pipeline.state import StateError

    if isinstance(error, PlanError | BudgetExceededError):
        return cli_build.EXIT_BUDGET
    if isinstance(error, InputError | ConfigError | BuildError | StateError |
                  ReleaseMismatchError | PreflightError | SigningKeyError):
        return cli_build.EXIT_BAD_INPUT
    return None


def build_corpus_main(argv: Sequence[str] | None = None, prog: str = "build-corpus") -> int:
    """``build-corpus`` (also ``dpsynrag build``): the DP-SynRAG build (see
    ``dpsynrag.pipeline``)."""
    import signal

    from dpsynrag.pipeline import cli_build

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _Parser(
        prog=prog,
        description=("Build a differentially private synthetic RAG corpus (DP-SynRAG) from "
                     "private documents: keywords -> noisy histogram -> soft clusters -> noisy "
                     "retrieval -> private prediction -> self-filter -> corpus.parquet, "
                     "index.faiss, manifest.json and a signed certificate.json. Resumable: "
                     "after a crash, run the same command again."),
        epilog=cli_build._EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dpsynrag {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    cli_build.add_build_arguments(parser, _types())

    def on_sigterm(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    def handler() -> int:
        args = parser.parse_args(argv)
        previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            return cli_build.run_build_command(args)
        except KeyboardInterrupt:
            raise CliError("interrupted; run the same command again to resume (nothing is "
                           "spent twice)", cli_build.EXIT_INTERRUPTED) from None
        except Exception as error:
            code = _build_error_code(error)
            if code is None:
                raise
            raise CliError(str(error), code) from error
        finally:
            signal.signal(signal.SIGTERM, previous)

    return _run(handler, prog, "--debug" in argv)


if __name__ == "__main__":
    sys.exit(main())
