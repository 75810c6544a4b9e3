"""``dpsynrag ledger show | cap | declare-unit``: inspect a build's privacy ledger or a private
corpus's ledger, and set that corpus's cap.

Exit codes: 0 done; 1 refused (a cap below what is spent, another privacy unit); 2 bad input
or options (no ledger there, a delta too small to convert at).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import open_unit_float, positive_float
from dpsynrag.display import format_epsilon

if TYPE_CHECKING:
    from dpsynrag.accounting.corpus_ledger import CorpusLedger

__all__ = ["add_parser", "ledger_report", "run_ledger_cap", "run_ledger_declare_unit",
           "run_ledger_show"]


def add_parser(subparsers: Any) -> None:
    """Add ``ledger`` and its commands to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "ledger", help="inspect a build's privacy ledger or a private corpus's ledger",
        description="Inspect the privacy ledger in a state directory, or the ledger of a "
                    "private corpus (its builds and query-time spends), and set that corpus's "
                    "cap. Safe while a build or queries run.")
    sub = parser.add_subparsers(title="ledger commands", metavar="COMMAND",
                                parser_class=type(parser))
    show = sub.add_parser(
        "show", help="every release so far and the composed rho, or a corpus's spend and cap",
        description="With --state-dir: print every release of a build (stage, mechanism, rho, "
                    "sha256 of the released value; never the value) and the composed rho. With "
                    "--corpus or --corpus-ledger: print the private corpus's spend (rho, "
                    "approximate delta, epsilon and its conversion), its cap, the epsilon left, "
                    "the number of builds, queries and refused charges, and the spend per "
                    "method.")
    where = show.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir", type=Path, help="the build's state directory")
    _add_corpus_arguments(where)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.add_argument("--delta", type=open_unit_float, default=None,
                      help="also convert to epsilon at this delta (default: the build's, or the "
                           "corpus cap's)")
    show.set_defaults(handler=run_ledger_show)
    cap = sub.add_parser(
        "cap", help="set the (epsilon, delta) cap of a private corpus",
        description="Set or change the cap of a private corpus's ledger (created if missing). "
                    "Every later build or query charge that would take the composed spend past "
                    "the cap is refused before it runs. A cap below what is already spent is "
                    "refused; every change is kept in the ledger's cap history.",
        epilog="Example: dpsynrag ledger cap --corpus notes.jsonl --epsilon 10 --delta 1e-3")
    where = cap.add_mutually_exclusive_group(required=True)
    _add_corpus_arguments(where)
    cap.add_argument("--epsilon", type=positive_float, required=True, help="the cap's epsilon")
    cap.add_argument("--delta", type=open_unit_float, required=True,
                     help="the cap's delta, in (0, 1); the approximate delta of (epsilon, "
                          "delta)-DP mechanisms is spent out of it")
    cap.add_argument("--conversion", choices=["bun-steinke", "cks"], default="bun-steinke",
                     help="zCDP to (epsilon, delta) conversion of the corpus's lifetime spend "
                          "(default: bun-steinke, the paper's; cks is tighter). Builds and "
                          "plans default to cks; each charge is converted by the cap's rule")
    cap.add_argument("--json", action="store_true", help="print the ledger summary as JSON")
    cap.set_defaults(handler=run_ledger_cap)
    unit = sub.add_parser(
        "declare-unit", help="state the privacy unit of a corpus ledger made before units "
                             "were recorded",
        description="A corpus ledger records the privacy unit (record, or a unit column and "
                    "its bounding rule) at its first charge and refuses charges made under "
                    "another unit. A ledger written by an older dpsynrag has charges but no "
                    "recorded unit and refuses every new charge until the operator states the "
                    "unit those charges were made under. Stating the recorded unit again does "
                    "nothing; another unit is refused (exit 1).",
        epilog="Example: dpsynrag ledger declare-unit --corpus notes.jsonl --unit-column "
               "patient --unit-bound pick")
    where = unit.add_mutually_exclusive_group(required=True)
    _add_corpus_arguments(where)
    unit.add_argument("--unit-column", default=None,
                      help="the unit column the earlier builds and queries used (omit: each "
                           "record is its own unit)")
    unit.add_argument("--unit-bound", choices=["pick", "concat"], default="pick",
                      help="how those charges bounded a unit to one document (default: pick)")
    unit.set_defaults(handler=run_ledger_declare_unit)


def _add_corpus_arguments(group: Any) -> None:
    """The two ways to name a corpus ledger (one of a mutually exclusive group)."""
    group.add_argument("--corpus", type=Path, metavar="PRIVATE_INPUT",
                       help="the private corpus (its ledger lives in the config directory, "
                            "$DPSYNRAG_CONFIG_DIR/ledgers)")
    group.add_argument("--corpus-ledger", type=Path, metavar="PATH",
                       help="a corpus ledger file, given directly")


def ledger_report(state_dir: Path, delta: float | None = None) -> dict[str, Any]:
    """The ledger's releases and totals, without any released value."""
    # the ledger loads numpy and scipy: only when a ledger is shown
    from dpsynrag.accounting.conversions import Conversion
    from dpsynrag.accounting.ledger import Ledger

    path = state_dir / "ledger.sqlite"
    if not path.exists():
        raise CliError(f"{state_dir}: no ledger.sqlite here; is this a build's state directory?")
    ledger = Ledger(path)
    try:
        releases = ledger.audit_releases()
        target = ledger.target
        source = "--delta"
        if delta is None and target is not None:
            delta, source = target[0], "the build's target"
        report: dict[str, Any] = {
            "releases": releases, "rho_total": ledger.total_rho(),
            "release_count": len(releases), "delta_approx": ledger.total_delta(),
            "target": None if target is None else {"delta": target[0], "conversion": target[1]}}
        if delta is not None:  # converted at delta - delta_approx, as the certificate does
            try:
                report["epsilon"] = {c.value: ledger.epsilon(delta, c) for c in Conversion}
            except ValueError as error:
                raise CliError(f"{error}; give a larger --delta") from None
            report["delta"], report["delta_source"] = delta, source
    finally:
        ledger.close()
    return report


def run_ledger_show(args: argparse.Namespace) -> int:
    """Print a build's ledger (``--state-dir``) or a corpus's ledger."""
    if args.state_dir is None:
        return _show_corpus_ledger(args)
    report = ledger_report(args.state_dir, args.delta)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
        return ExitCode.OK
    from rich.console import Console  # lazy: only the text view draws tables
    from rich.table import Table

    summary: dict[tuple[str, str], list[float]] = {}
    for release in report["releases"]:
        entry = summary.setdefault((release["stage"], release["mechanism"]), [0, 0.0])
        entry[0] += 1
        entry[1] += release["rho"]
    table = Table(title=f"ledger {args.state_dir}")
    for column in ("stage", "mechanism", "releases", "sum of rho (before composition)"):
        table.add_column(column)
    for (stage, mechanism), (count, rho) in sorted(summary.items()):
        table.add_row(stage, mechanism, str(int(count)), f"{rho:.6f}")
    console = Console()
    console.print(table)
    console.print(f"composed rho: {report['rho_total']:.6f}")
    target = (report["target"] or {}).get("conversion")
    for name, eps in report.get("epsilon", {}).items():
        mark = " (the build's conversion)" if name == target else ""
        console.print(f"epsilon at delta={report['delta']:g} ({name}, delta from "
                      f"{report['delta_source']}): {format_epsilon(eps)}{mark}")
    if "epsilon" not in report:
        console.print("epsilon: give --delta (this ledger does not record its build's target)")
    return ExitCode.OK


def _corpus_ledger_path(args: argparse.Namespace) -> tuple[Path, str]:
    """The corpus ledger's path and how to name it in a message."""
    # lazy, as every import of the ledgers here: they load numpy and scipy, and 'dpsynrag
    # --help' imports this module
    from dpsynrag.accounting.corpus_ledger import default_corpus_ledger_path

    if args.corpus_ledger is not None:
        return args.corpus_ledger, str(args.corpus_ledger)
    path = default_corpus_ledger_path(args.corpus)
    return path, f"{args.corpus} (ledger {path})"


def _open_corpus_ledger(args: argparse.Namespace, *, create: bool) -> CorpusLedger:
    """The corpus ledger named by ``--corpus``/``--corpus-ledger``; ``CliError`` (exit 2) when
    it is missing (and not to be created), not a file or cannot be opened."""
    from dpsynrag.accounting.corpus_ledger import CorpusLedger
    from dpsynrag.accounting.ledger import LedgerError

    path, name = _corpus_ledger_path(args)
    if not create and not path.exists():
        raise CliError(f"{name}: no corpus ledger yet; set a cap with 'dpsynrag ledger cap' "
                       "or charge a build or query first")
    if path.exists() and not path.is_file():
        raise CliError(f"{path}: not a file")
    try:
        return CorpusLedger(path, create=create)
    except LedgerError as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"{path}: cannot open the corpus ledger: {error.strerror}") from None


def run_ledger_cap(args: argparse.Namespace) -> int:
    """Set the corpus ledger's cap and print it with the spend so far."""
    from dpsynrag.accounting.corpus_ledger import CapError

    with _open_corpus_ledger(args, create=True) as ledger:
        try:
            cap = ledger.set_cap(args.epsilon, args.delta, args.conversion)
        except CapError as error:
            raise CliError(str(error), ExitCode.FAILURE) from None
        summary = ledger.summary()
    if args.json:
        print(json.dumps(summary, indent=1, sort_keys=True))
        return ExitCode.OK
    spent = summary["spent"]
    print(f"cap of {summary['path']}: epsilon={cap.epsilon:g}, delta={cap.delta:g} "
          f"({cap.conversion}); spent epsilon={_fmt(spent['epsilon'])}, remaining "
          f"epsilon={_fmt(summary['remaining_epsilon'])}")
    return ExitCode.OK


def run_ledger_declare_unit(args: argparse.Namespace) -> int:
    """Record the privacy unit of a corpus ledger's earlier charges."""
    from dpsynrag.accounting.corpus_ledger import (
        PrivacyUnitMismatchError,
        privacy_unit_definition,
    )

    unit = privacy_unit_definition(args.unit_column, args.unit_bound)
    with _open_corpus_ledger(args, create=False) as ledger:
        try:
            ledger.declare_privacy_unit(unit)
        except PrivacyUnitMismatchError as error:
            raise CliError(str(error), ExitCode.FAILURE) from None
    print(f"privacy unit of {_corpus_ledger_path(args)[1]}: {unit}")
    return ExitCode.OK


def _fmt(value: float | None, digits: int = 4) -> str:
    """A number for display, or ``-`` when there is none."""
    return "-" if value is None else f"{value:.{digits}f}"


def _show_corpus_ledger(args: argparse.Namespace) -> int:
    """Print a corpus ledger's spend, cap, unit and charges (a table, or JSON)."""
    with _open_corpus_ledger(args, create=False) as ledger:
        summary = ledger.summary(args.delta)
    if args.json:
        print(json.dumps(summary, indent=1, sort_keys=True))
        return ExitCode.OK
    from rich.console import Console  # lazy: only the text view draws tables
    from rich.table import Table

    table = Table(title=f"corpus ledger {summary['path']}")
    for column in ("kind", "method", "charges", "rho", "approximate delta"):
        table.add_column(column)
    for row in summary["methods"]:
        table.add_row(row["kind"], row["method"], str(row["charges"]), f"{row['rho']:.6f}",
                      f"{row['delta_approx']:.3g}")
    console = Console()
    console.print(table)
    spent, cap = summary["spent"], summary["cap"]
    console.print(f"spent: rho={spent['rho']:.6f}, approximate delta={spent['delta_approx']:.3g}")
    if spent["delta"] is not None:
        epsilon = format_epsilon(spent["epsilon"])
        console.print(f"epsilon at delta={spent['delta']:g} ({summary['conversion']}): {epsilon}")
    if cap is None:
        console.print("cap: none (every charge is accepted and recorded)")
    else:
        left = f"{_fmt(summary['remaining_epsilon'])} (rho={_fmt(summary['remaining_rho'], 6)})"
        console.print(f"cap: epsilon={cap['epsilon']:g}, delta={cap['delta']:g} "
                      f"({cap['conversion']}); remaining epsilon={left}")
    unit = summary.get("privacy_unit") or "not recorded yet (set at the first charge)"
    console.print(f"privacy unit: {unit}")
    console.print(f"builds: {summary['builds']}, queries: {summary['queries']} (charged but "
                  f"never answered: {summary.get('queries_unused', 0)}), refused charges: "
                  f"{summary['refusals']}")
    for build in summary["build_charges"]:
        console.print(f"  {build['charged_at']}  {build['key']}  rho={build['rho']:.6f}  "
                      f"{build['description']}")
    return ExitCode.OK


