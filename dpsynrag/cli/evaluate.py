"""``dpsynrag eval``: compare non-RAG, private RAG, DP-Synth and DP-SynRAG on one dataset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import positive_int
from dpsynrag.eval.methods import ALL_METHODS as METHODS

#: The paper's SearchQA rule (``eval.metrics.MIN_SUPPORT``; not imported: the metrics module
#: is loaded only when the evaluation runs). tests/test_eval_answers.py checks they agree.
DEFAULT_MIN_SUPPORT = 40

__all__ = ["add_parser", "run_eval_command"]


def add_parser(subparsers: Any) -> None:
    """Add ``eval`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "eval", help="compare non-RAG, private RAG, DP-Synth and DP-SynRAG on one dataset",
        description="Run the evaluation of DP-SynRAG's Tables 1-2 on this machine: answer "
                    "recall@k, end-to-end accuracy and leakage for each method and epsilon, "
                    "written as REPORT/results.json, results.md and PNG plots. Resumable: "
                    "rerun the same command to skip finished runs. Not a private "
                    "computation: every run is a full build on a ledger of its own, and the "
                    "report holds non-private statistics of the input (private RAG's recall and "
                    "answers); no certificate covers it. Run it on generated or public data, "
                    "not on the private corpus you release.",
        epilog="Example: dpsynrag eval --dataset clinic --notes 600 --diseases 12 --epsilons "
               "1,3,10 --runs 1 --config examples/demo/build.toml -o report/")
    parser.add_argument("-o", "--out", type=Path, required=True, help="report directory")
    parser.add_argument("--dataset", default="clinic",
                        help="'clinic', 'conditions' or 'films' (generated; see 'dpsynrag "
                             "dataset') or a directory with notes.jsonl and queries.jsonl "
                             "(each row 'question' and 'answer' or 'answers', a list: any "
                             "one counts) and optionally reader.json ({\"instruction\": ..., "
                             "\"answer_prefix\": ...}, both optional)")
    parser.add_argument("--notes", type=positive_int, default=2000,
                        help="notes of a generated data set (default 2000)")
    parser.add_argument("--diseases", type=positive_int, default=40,
                        help="clinic diseases (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--epsilons", default="1,3,10", help="comma-separated (default 1,3,10)")
    parser.add_argument("--methods", default="non-rag,rag,dp-synth,dp-synrag",
                        help=f"comma-separated from {', '.join(METHODS)}")
    parser.add_argument("--runs", type=positive_int, default=3,
                        help="repetitions of each randomised method (default 3)")
    parser.add_argument("--top-k", type=positive_int, default=10,
                        help="texts retrieved per query (default 10)")
    parser.add_argument("--reader-k", type=positive_int, default=5,
                        help="of those, the top texts the reader reads (default 5, at most "
                             "--top-k; fewer make a CPU reader run faster on long documents)")
    parser.add_argument("--instruction", default=None,
                        help="what the reader is asked after the question, the same for "
                             "private RAG and every corpus (default: 'Answer with the name of "
                             "the condition only.' for conditions, '... the title of the film "
                             "only.' for films, also for a directory written by 'dpsynrag "
                             "dataset conditions|films'; '... the name of the disease only.' "
                             "otherwise; a dataset folder's reader.json instruction replaces "
                             "these defaults, this option replaces reader.json's)")
    parser.add_argument("--answer-prefix", default=None, metavar="TEXT",
                        help="public text the reader's reply starts with, e.g. 'The answer "
                             "is' (the reply is scored on what follows it; default: the "
                             "dataset folder's reader.json answer_prefix, else none)")
    parser.add_argument("--min-support", type=int, default=DEFAULT_MIN_SUPPORT, metavar="N",
                        help="also report recall@k and accuracy over the queries whose "
                             "answer at least N private notes hold (the paper's SearchQA "
                             f"rule; default {DEFAULT_MIN_SUPPORT})")
    parser.add_argument("--no-end-to-end", action="store_true",
                        help="skip LLM answering (recall@k and corpus leakage only)")
    parser.add_argument("--config", type=Path, help="build TOML for the DP methods")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a build option, e.g. --set R=40 --set T=32")
    parser.add_argument("--queries", type=positive_int, default=None,
                        help="test queries of a generated set (clinic, conditions, films; "
                             "default: one per answer that has a note; more cycle over the "
                             "answers with other wordings, e.g. 160 = four per condition)")
    parser.add_argument("--query-set", action="append", default=[],
                        metavar="METHOD:KEY=VALUE",
                        help="an option of a query-time method, e.g. --query-set "
                             "dp-ksa:ensemble=40 --query-set dp-rag:max_new_tokens=24")
    parser.add_argument("--no-attack", action="store_true",
                        help="skip the attack queries of the query-time methods (they cost "
                             "budget like any query)")
    parser.set_defaults(handler=run_eval_command)


def _parse_value(text: str) -> Any:
    """A ``--set`` value: an int, a float, true/false, else the text."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def run_eval_command(args: argparse.Namespace) -> int:
    """Run the evaluation (resumable) and print where its report is.

    A bad setting (``EvalError``) or build option (``ConfigError``) exits 2 through the
    table of ``cli.errors``."""
    # not at module level: the harness loads numpy and scipy (and, as it runs, the models)
    from dpsynrag.eval.harness import EvalSettings, run_eval

    options: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set expects KEY=VALUE, got {item!r}")
        options[key.strip().replace("-", "_")] = _parse_value(value.strip())
    query_options: dict[str, dict[str, Any]] = {}
    for item in args.query_set:
        method, colon, rest = item.partition(":")
        key, sep, value = rest.partition("=")
        if not (colon and sep):
            raise CliError(f"--query-set expects METHOD:KEY=VALUE, got {item!r}")
        query_options.setdefault(method.strip(), {})[key.strip()] = _parse_value(value.strip())
    try:
        epsilons = [float(e) for e in args.epsilons.split(",") if e.strip()]
    except ValueError:
        raise CliError(f"--epsilons must be numbers, got {args.epsilons!r}") from None
    settings = EvalSettings(
        dataset=args.dataset, n_notes=args.notes, n_diseases=args.diseases, seed=args.seed,
        epsilons=epsilons, methods=[m.strip() for m in args.methods.split(",") if m.strip()],
        runs=args.runs, rag_k=args.top_k, reader_k=args.reader_k,
        end_to_end=not args.no_end_to_end,
        build_config=args.config, build_options=options, n_queries=args.queries,
        query_options=query_options, query_attack=not args.no_attack,
        instruction=args.instruction, answer_prefix=args.answer_prefix,
        min_support=args.min_support)
    run_eval(settings, args.out, progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"report: {args.out / 'results.md'}")
    return ExitCode.OK
