"""``dpsynrag dataset``: write a fictitious evaluation or demo dataset."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import ExitCode
from dpsynrag.cli.options import positive_int

__all__ = ["add_parser", "run_dataset"]


def add_parser(subparsers: Any) -> None:
    """Add ``dataset`` to the ``dpsynrag`` subcommands."""
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
    """Write the dataset and print the paths of its files."""
    # the generators import the evaluation package (numpy, scipy): only when generating
    from dpsynrag.eval.datasets import write_clinic_dataset, write_support_dataset

    if args.kind == "support":
        paths = write_support_dataset(args.out, n_tickets=args.notes, n_issues=args.diseases,
                                      seed=args.seed, n_queries=args.queries)
    else:
        paths = write_clinic_dataset(args.out, n_notes=args.notes, n_diseases=args.diseases,
                                     n_queries=args.queries, seed=args.seed)
    for name, path in sorted(paths.items()):
        print(f"{name}: {path}")
    return ExitCode.OK

