"""``dpsynrag query``: answer questions from the PRIVATE corpus with a query-time DP mechanism.

Each question is charged to the private corpus's ledger before anything private is computed,
and its mechanism consumes that charge's receipt (once) before it reads the corpus; the answer
is a DP release and is printed. Nothing else derived from the corpus (retrieved documents,
scores, counts, thresholds) is ever printed or logged.

The privacy unit is the build's: ``--unit-column``/``--unit-bound``/``--max-chars`` bound each
unit to one document by the same rule, and the ledger refuses a query about another unit than
its earlier charges (a person-level and a record-level guarantee do not compose). A ledger
without a cap is refused unless ``--no-cap`` says so explicitly; both checks run before the
models load or the corpus is read.
Exit codes: 0 all answered, 1 failure, 2 bad input or options (no cap, another privacy unit),
3 refused by the ledger's cap (questions before the refusal were charged and are answered).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import ColumnList, positive_float, positive_int
from dpsynrag.display import format_epsilon

__all__ = ["add_parser", "run_query"]


def add_parser(subparsers: Any) -> None:
    """Add ``query`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "query", help="answer questions from a private corpus with DP-RAG, DP-KSA or "
                      "(Sparse)VoteRAG, charged to the corpus ledger",
        description=(
            "Answer questions directly from the PRIVATE documents with a query-time "
            "differentially private mechanism. Unlike a synthetic corpus, every question costs "
            "privacy budget: it is charged in full to the corpus ledger (see 'dpsynrag ledger "
            "cap' and 'dpsynrag ledger show --corpus') BEFORE any private computation, and "
            "refused if the ledger's cap cannot afford it. The ledger must have a cap (or "
            "pass --no-cap), and every charge to one ledger must protect the same privacy "
            "unit: give the same --unit-column / --unit-bound / --max-chars as the corpus's "
            "builds."),
        epilog=("Example: dpsynrag query --corpus notes.jsonl --method dp-rag --epsilon 10 "
                "\"I have a rash and a fever. What is my disease?\""))
    parser.add_argument("questions", nargs="*", metavar="QUESTION", help="question text(s)")
    parser.add_argument("--corpus", type=Path, required=True,
                        help="the private documents (JSONL, Parquet, CSV or a .txt directory)")
    parser.add_argument("--method", required=True,
                        choices=["dp-rag", "dp-ksa", "sparse-vote", "vote"],
                        help="dp-rag (Grislain), dp-ksa (Tang et al.), sparse-vote / vote "
                             "(Koga et al.)")
    parser.add_argument("--epsilon", type=positive_float, required=True,
                        help="epsilon of EACH query (the ledger composes them)")
    parser.add_argument("--delta", type=positive_float, default=None,
                        help="delta of each query (default: 1e-3 dp-rag, 1e-4 others)")
    parser.add_argument("--questions-file", type=Path, default=None,
                        help="a text file with one question per line (added to QUESTION)")
    parser.add_argument("--corpus-ledger", "--ledger", dest="ledger", type=Path, default=None,
                        help="the corpus ledger, as in build-corpus and 'dpsynrag ledger' "
                             "(default: derived from --corpus in the config dir, as 'dpsynrag "
                             "ledger show --corpus' finds it; --ledger is the old name)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=None,
                        help="answer length cap (dp-rag: tokens charged; vote: public cap)")
    parser.add_argument("--instruction", default=None,
                        help="instruction after the question (default 'Answer briefly.')")
    parser.add_argument("--text-column", action=ColumnList, metavar="NAME[,NAME...]",
                        help="default: text; several columns (repeated or comma-separated) "
                             "are joined as the build joins them")
    parser.add_argument("--id-column", default="id", help="document labels (content-derived "
                        "doc-... without one); tie-breaks and voters read each document's text, "
                        "never its id")
    parser.add_argument("--unit-column", default=None,
                        help="column grouping records of one privacy unit (e.g. a patient), "
                             "bounded to one document per unit as the build does (default: "
                             "one record = one unit); must match the ledger's earlier charges")
    parser.add_argument("--unit-bound", choices=["pick", "concat"], default="pick",
                        help="how a unit with several records becomes one document: pick one "
                             "record by a hash of the unit's own records (default), or "
                             "concatenate them up to --max-chars (as the build)")
    parser.add_argument("--max-chars", type=positive_int, default=20000,
                        help="skip longer documents; the concat bound (default 20000, as the "
                             "build)")
    parser.add_argument("--no-cap", action="store_true",
                        help="accept charging a corpus ledger that has no cap (its total is "
                             "then unbounded); without it such a ledger is refused: set a cap "
                             "with 'dpsynrag ledger cap'")
    parser.add_argument("--model", default=None, help="local LLM (default: packaged)")
    parser.add_argument("--embedder", default=None, help="local embedder (default: packaged)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a mechanism option, e.g. --set top_p=0.05 --set voters=40")
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    parser.set_defaults(handler=run_query)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The mechanism's options: ``--set`` values (JSON where they parse) and the shortcuts."""
    options: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    if args.max_new_tokens is not None:
        key = "max_new_tokens" if args.method == "dp-rag" else \
            "final_tokens" if args.method == "dp-ksa" else "max_tokens"
        options[key] = args.max_new_tokens
    if args.instruction is not None:
        options["instruction"] = args.instruction
    return options


def run_query(args: argparse.Namespace) -> int:
    """Charge and answer the questions; print the answers and the corpus ledger's total.

    A bad corpus (``InputError``, ``QueryInputError``) exits 2 through the table of
    ``cli.errors``; a ledger that refuses the queries before any charge (no cap, another
    privacy unit) exits 2 as well, as bad options."""
    # lazy: the query service loads torch, transformers and the embedder
    from dpsynrag.accounting.ledger import LedgerError
    from dpsynrag.query.service import QueryService, make_settings

    questions = [q for q in args.questions if q.strip()]
    if args.questions_file is not None:
        try:
            lines = args.questions_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise CliError(f"{args.questions_file}: cannot read: {type(error).__name__}"
                           ) from None
        questions.extend(line.strip() for line in lines if line.strip())
    if not questions:
        raise CliError("no question given (QUESTION arguments or --questions-file)")
    try:
        make_settings(args.method, args.epsilon, args.delta, **_options(args))
    except (TypeError, ValueError) as error:
        raise CliError(f"--method {args.method}: {error}") from None
    if not args.corpus.exists():
        raise CliError(f"{args.corpus}: no such file or directory")
    try:
        service = QueryService.open(
            args.corpus, ledger=args.ledger, model=args.model, embedder=args.embedder,
            text_column=args.text_column or "text", id_column=args.id_column or None,
            unit_column=args.unit_column or None, unit_bound=args.unit_bound,
            max_chars=args.max_chars, allow_no_cap=args.no_cap)
    except LedgerError as error:  # a ledger that cannot be opened or read
        raise CliError(str(error)) from None
    try:
        result = service.ask(questions, method=args.method, epsilon=args.epsilon,
                             delta=args.delta, **_options(args))
    except LedgerError as error:  # no cap or another unit, raised before anything is charged
        raise CliError(str(error)) from None
    assert service.ledger is not None
    spent = service.ledger.spent()
    if spent.epsilon is None:  # no cap: report at the usual delta plus the queries' deltas
        spent = service.ledger.spent(delta=spent.delta_approx + 1e-3)
    for question, reply in zip(questions, result.answers, strict=True):
        if args.json:
            print(json.dumps({"question": question, "answer": reply,
                              "refused": reply is None}))
        elif reply is not None:
            print(f"Q: {question}\nA: {reply}\n")
    summary = (f"{result.charged} quer{'y' if result.charged == 1 else 'ies'} charged at "
               f"epsilon {args.epsilon:g} each; corpus ledger total epsilon "
               f"{format_epsilon(spent.epsilon)} at delta {spent.delta:.3g} ({spent.conversion})")
    print(summary, file=sys.stderr)
    if result.refused:
        print(f"dpsynrag: refused {result.refused} question(s): {result.refusal_message}",
              file=sys.stderr)
        return ExitCode.REFUSED
    return ExitCode.OK
