"""``dpsynrag keygen | verify | ledger show | ledger cap | dataset``: the operator's and auditor's
tools."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dpsynrag.display import format_epsilon


class ToolError(Exception):
    """One line for the user and an exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# ---------------------------------------------------------------------- keygen
def add_keygen_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "keygen", help="create an Ed25519 key pair for signing build certificates",
        description="Write an Ed25519 private key (PEM, mode 0600) and its public key (.pub). "
                    "Give the private key to 'build-corpus --signing-key' and the public key to "
                    "whoever runs 'dpsynrag verify --public-key'.")
    parser.add_argument("private_key", type=Path, metavar="PRIVATE_KEY",
                        help="where to write the private key, e.g. keys/dpsynrag.pem")
    parser.add_argument("--public-key", type=Path,
                        help="where to write the public key (default PRIVATE_KEY.pub)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    parser.set_defaults(handler=run_keygen)


def run_keygen(args: argparse.Namespace) -> int:
    from dpsynrag.accounting.signing import generate_keypair

    public = args.public_key or args.private_key.with_name(args.private_key.name + ".pub")
    try:
        fingerprint = generate_keypair(args.private_key, public, force=args.force)
    except FileExistsError as error:
        raise ToolError(f"{error.filename or args.private_key}: exists; pass --force to "
                        "overwrite", 2) from None
    print(f"private key: {args.private_key} (0600)\npublic key:  {public}\n"
          f"fingerprint: {fingerprint}")
    return 0


# ---------------------------------------------------------------------- verify
def add_verify_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify", help="check a built corpus: signature, file hashes and the epsilon claim",
        description="Re-derive every mechanism's rho from its recorded parameters, recompose "
                    "them, convert to (epsilon, delta), check every file's sha256 and the "
                    "Ed25519 signature. Exit 0 when everything holds; else print each problem "
                    "and exit 1. A seeded build (--seed, tests only) always fails: its noise "
                    "is reproducible, so it carries no guarantee.")
    parser.add_argument("out_dir", type=Path, metavar="OUT", help="a build-corpus output "
                        "directory")
    parser.add_argument("--public-key", type=Path, help="trusted public key (PEM); without it "
                        "the key embedded in the certificate is used (integrity only)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--explain", action="store_true",
                        help="also print the certificate in plain language: who is protected, "
                             "epsilon and delta, what was released, which models, when, by "
                             "which key")
    parser.add_argument("--allow-seeded", action="store_true",
                        help="TESTS ONLY: do not fail a seeded build (its noise is "
                             "reproducible; it is never for release)")
    parser.set_defaults(handler=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    from dpsynrag.accounting.certificate import verify_output
    from dpsynrag.io.output_files import CERTIFICATE_FILE

    if not args.out_dir.is_dir():
        raise ToolError(f"{args.out_dir}: not a directory", 2)
    problems = verify_output(args.out_dir, args.public_key, allow_seeded=args.allow_seeded)
    certificate = _read_json(args.out_dir / CERTIFICATE_FILE)
    if not isinstance(certificate, dict):
        certificate = {}
    guarantee = certificate.get("guarantee", {})
    seeded = certificate.get("seeded") is not False  # unknown counts as seeded
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems, "guarantee": guarantee,
                          "seeded": seeded}, indent=2, sort_keys=True))
    elif problems:
        for problem in problems:
            print(f"FAILED: {problem}", file=sys.stderr)
    else:
        trust = "trusted key" if args.public_key else "embedded key (integrity only)"
        note = " SEEDED, NOT FOR RELEASE (--allow-seeded)" if seeded else ""
        print(f"OK: signature ({trust}), file hashes and epsilon re-derived: "
              f"epsilon={_epsilon_text(guarantee.get('epsilon'))} delta={guarantee.get('delta')} "
              f"({guarantee.get('conversion')}){note}")
    if args.explain and not args.json:
        from dpsynrag.accounting.explain import explain_certificate

        trust = "trusted key" if args.public_key else "embedded key: integrity only"
        print(explain_certificate(certificate, verified=not problems, trust=trust))
    return 0 if not problems else 1


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


# ---------------------------------------------------------------------- ledger show / cap
def add_ledger_parser(subparsers: Any) -> None:
    from dpsynrag.cli import _open_unit_float, _positive_float  # the shared argument types

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
    show.add_argument("--delta", type=_open_unit_float, default=None,
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
    cap.add_argument("--epsilon", type=_positive_float, required=True, help="the cap's epsilon")
    cap.add_argument("--delta", type=_open_unit_float, required=True,
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
    group.add_argument("--corpus", type=Path, metavar="PRIVATE_INPUT",
                       help="the private corpus (its ledger lives in the config directory, "
                            "$DPSYNRAG_CONFIG_DIR/ledgers)")
    group.add_argument("--corpus-ledger", type=Path, metavar="PATH",
                       help="a corpus ledger file, given directly")


def ledger_report(state_dir: Path, delta: float | None = None) -> dict[str, Any]:
    """The ledger's releases and totals, without any released value."""
    import hashlib
    import sqlite3

    from dpsynrag.accounting.conversions import Conversion
    from dpsynrag.accounting.ledger import Ledger

    path = state_dir / "ledger.sqlite"
    if not path.exists():
        raise ToolError(f"{state_dir}: no ledger.sqlite here; is this a build's state directory?",
                        2)
    uri = f"file:{path}?mode=ro"
    db = sqlite3.connect(uri, uri=True)
    try:
        rows = db.execute("SELECT key, stage, mechanism, params, sensitivity, sensitivity_norm, "
                          "rho, grp, part, value, charged_at FROM releases ORDER BY seq").fetchall()
    finally:
        db.close()
    releases = [{"key": key, "stage": stage, "mechanism": mechanism, "params": json.loads(params),
                 "sensitivity": sensitivity, "sensitivity_norm": norm, "rho": rho, "group": grp,
                 "partition": part, "charged_at": charged_at,
                 "value_sha256": None if value is None else hashlib.sha256(value).hexdigest()}
                for key, stage, mechanism, params, sensitivity, norm, rho, grp, part, value,
                charged_at in rows]
    ledger = Ledger(path)
    try:
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
                raise ToolError(f"{error}; give a larger --delta", 2) from None
            report["delta"], report["delta_source"] = delta, source
    finally:
        ledger.close()
    return report


def run_ledger_show(args: argparse.Namespace) -> int:
    if args.state_dir is None:
        return _show_corpus_ledger(args)
    report = ledger_report(args.state_dir, args.delta)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
        return 0
    from rich.console import Console
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
    return 0


def _corpus_ledger_path(args: argparse.Namespace) -> tuple[Path, str]:
    """The corpus ledger's path and how to name it in a message."""
    from dpsynrag.accounting.corpus_ledger import default_corpus_ledger_path

    if args.corpus_ledger is not None:
        return args.corpus_ledger, str(args.corpus_ledger)
    path = default_corpus_ledger_path(args.corpus)
    return path, f"{args.corpus} (ledger {path})"


def _open_corpus_ledger(args: argparse.Namespace, *, create: bool) -> Any:
    from dpsynrag.accounting.corpus_ledger import CorpusLedger
    from dpsynrag.accounting.ledger import LedgerError

    path, name = _corpus_ledger_path(args)
    if not create and not path.exists():
        raise ToolError(f"{name}: no corpus ledger yet; set a cap with 'dpsynrag ledger cap' "
                        "or charge a build or query first", 2)
    if path.exists() and not path.is_file():
        raise ToolError(f"{path}: not a file", 2)
    try:
        return CorpusLedger(path, create=create)
    except LedgerError as error:
        raise ToolError(str(error), 2) from None
    except OSError as error:
        raise ToolError(f"{path}: cannot open the corpus ledger: {error.strerror}", 2) from None


def run_ledger_cap(args: argparse.Namespace) -> int:
    from dpsynrag.accounting.corpus_ledger import CapError

    with _open_corpus_ledger(args, create=True) as ledger:
        try:
            cap = ledger.set_cap(args.epsilon, args.delta, args.conversion)
        except CapError as error:
            raise ToolError(str(error), 1) from None
        summary = ledger.summary()
    if args.json:
        print(json.dumps(summary, indent=1, sort_keys=True))
        return 0
    spent = summary["spent"]
    print(f"cap of {summary['path']}: epsilon={cap.epsilon:g}, delta={cap.delta:g} "
          f"({cap.conversion}); spent epsilon={_fmt(spent['epsilon'])}, remaining "
          f"epsilon={_fmt(summary['remaining_epsilon'])}")
    return 0


def run_ledger_declare_unit(args: argparse.Namespace) -> int:
    from dpsynrag.accounting.corpus_ledger import (
        PrivacyUnitMismatchError,
        privacy_unit_definition,
    )

    unit = privacy_unit_definition(args.unit_column, args.unit_bound)
    with _open_corpus_ledger(args, create=False) as ledger:
        try:
            ledger.declare_privacy_unit(unit)
        except PrivacyUnitMismatchError as error:
            raise ToolError(str(error), 1) from None
    print(f"privacy unit of {_corpus_ledger_path(args)[1]}: {unit}")
    return 0


def _epsilon_text(value: object) -> str:
    """A certificate's epsilon for display (rounded up), or as found when not a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format_epsilon(float(value))
    return str(value)


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _show_corpus_ledger(args: argparse.Namespace) -> int:
    with _open_corpus_ledger(args, create=False) as ledger:
        summary = ledger.summary(args.delta)
    if args.json:
        print(json.dumps(summary, indent=1, sort_keys=True))
        return 0
    from rich.console import Console
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
    return 0


# ---------------------------------------------------------------------- dataset
def add_dataset_parser(subparsers: Any, positive_int: Any) -> None:
    parser = subparsers.add_parser(
        "dataset", help="write a fictitious evaluation/demo dataset (clinic or support)",
        description="Generate a fictitious corpus, deterministic from --seed: 'clinic' "
                    "(invented diseases, unique patient names, doctor notes and patient "
                    "queries answered by the disease) or 'support' (invented products and "
                    "error codes, unique customer names, support tickets and queries "
                    "answered by the error code). Both write notes.jsonl and queries.jsonl, "
                    "plus diseases.json or issues.json.")
    parser.add_argument("kind", choices=["clinic", "support"], help="dataset to generate")
    parser.add_argument("-o", "--out", type=Path, required=True, help="output directory")
    parser.add_argument("--notes", type=positive_int, default=2000,
                        help="notes, or tickets for 'support' (default 2000)")
    parser.add_argument("--diseases", type=positive_int, default=40,
                        help="diseases, or issues for 'support' (default 40)")
    parser.add_argument("--queries", type=positive_int, default=None,
                        help="queries (default one per disease or issue)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.set_defaults(handler=run_dataset)


def run_dataset(args: argparse.Namespace) -> int:
    from dpsynrag.eval.datasets import write_clinic_dataset, write_support_dataset

    if args.kind == "support":
        paths = write_support_dataset(args.out, n_tickets=args.notes, n_issues=args.diseases,
                                      seed=args.seed, n_queries=args.queries)
    else:
        paths = write_clinic_dataset(args.out, n_notes=args.notes, n_diseases=args.diseases,
                                     n_queries=args.queries, seed=args.seed)
    for name, path in sorted(paths.items()):
        print(f"{name}: {path}")
    return 0


# ---------------------------------------------------------------------- eval
def add_eval_parser(subparsers: Any, positive_int: Any) -> None:
    from dpsynrag.eval.harness import ALL_METHODS as METHODS

    parser = subparsers.add_parser(
        "eval", help="compare non-RAG, private RAG, DP-Synth and DP-SynRAG on one dataset",
        description="Run the evaluation of DP-SynRAG's Tables 1-2 on this machine: answer "
                    "recall@k, end-to-end accuracy and leakage for each method and epsilon, "
                    "written as REPORT/results.json, results.md and PNG plots. Resumable: "
                    "rerun the same command to skip finished runs.",
        epilog="Example: dpsynrag eval --dataset clinic --notes 600 --diseases 12 --epsilons "
               "1,3,10 --runs 1 --config examples/demo/build.toml -o report/")
    parser.add_argument("-o", "--out", type=Path, required=True, help="report directory")
    parser.add_argument("--dataset", default="clinic",
                        help="'clinic' (generated) or a directory with notes.jsonl and "
                             "queries.jsonl")
    parser.add_argument("--notes", type=positive_int, default=2000,
                        help="clinic notes (default 2000)")
    parser.add_argument("--diseases", type=positive_int, default=40,
                        help="clinic diseases (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="clinic generator seed")
    parser.add_argument("--epsilons", default="1,3,10", help="comma-separated (default 1,3,10)")
    parser.add_argument("--methods", default="non-rag,rag,dp-synth,dp-synrag",
                        help=f"comma-separated from {', '.join(METHODS)}")
    parser.add_argument("--runs", type=positive_int, default=3,
                        help="repetitions of each randomised method (default 3)")
    parser.add_argument("--top-k", type=positive_int, default=10,
                        help="texts retrieved per query (default 10)")
    parser.add_argument("--no-end-to-end", action="store_true",
                        help="skip LLM answering (recall@k and corpus leakage only)")
    parser.add_argument("--config", type=Path, help="build TOML for the DP methods")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a build option, e.g. --set R=40 --set T=32")
    parser.add_argument("--queries", type=positive_int, default=None,
                        help="clinic test queries (default: one per disease that has a note)")
    parser.add_argument("--query-set", action="append", default=[],
                        metavar="METHOD:KEY=VALUE",
                        help="an option of a query-time method, e.g. --query-set "
                             "dp-ksa:ensemble=40 --query-set dp-rag:max_new_tokens=24")
    parser.add_argument("--no-attack", action="store_true",
                        help="skip the attack queries of the query-time methods (they cost "
                             "budget like any query)")
    parser.set_defaults(handler=run_eval_command)


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def run_eval_command(args: argparse.Namespace) -> int:
    from dpsynrag.eval.harness import EvalError, EvalSettings, run_eval
    from dpsynrag.pipeline.config import ConfigError

    options: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ToolError(f"--set expects KEY=VALUE, got {item!r}", 2)
        options[key.strip().replace("-", "_")] = _parse_value(value.strip())
    query_options: dict[str, dict[str, Any]] = {}
    for item in args.query_set:
        method, colon, rest = item.partition(":")
        key, sep, value = rest.partition("=")
        if not (colon and sep):
            raise ToolError(f"--query-set expects METHOD:KEY=VALUE, got {item!r}", 2)
        query_options.setdefault(method.strip(), {})[key.strip()] = _parse_value(value.strip())
    try:
        epsilons = [float(e) for e in args.epsilons.split(",") if e.strip()]
    except ValueError:
        raise ToolError(f"--epsilons must be numbers, got {args.epsilons!r}", 2) from None
    settings = EvalSettings(
        dataset=args.dataset, n_notes=args.notes, n_diseases=args.diseases, seed=args.seed,
        epsilons=epsilons, methods=[m.strip() for m in args.methods.split(",") if m.strip()],
        runs=args.runs, rag_k=args.top_k, end_to_end=not args.no_end_to_end,
        build_config=args.config, build_options=options, n_queries=args.queries,
        query_options=query_options, query_attack=not args.no_attack)
    try:
        run_eval(settings, args.out, progress=lambda m: print(m, file=sys.stderr, flush=True))
    except (EvalError, ConfigError) as error:
        raise ToolError(str(error), 2) from error
    print(f"report: {args.out / 'results.md'}")
    return 0
