"""``dpsynrag dataset``: write a fictitious evaluation or demo dataset."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import positive_int

__all__ = ["add_parser", "run_dataset"]


def add_parser(subparsers: Any) -> None:
    """Add ``dataset`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "dataset", help="write a fictitious evaluation/demo dataset (clinic, support, "
                        "conditions or films)",
        description="Generate a fictitious corpus, deterministic from --seed: 'clinic' "
                    "(invented diseases, unique patient names, doctor notes and patient "
                    "queries answered by the disease), 'support' (invented products and "
                    "error codes, unique customer names, support tickets and queries "
                    "answered by the error code), 'conditions' (40 real conditions with "
                    "ordinary names, doctor notes, queries answered by the condition) or "
                    "'films' (40 invented titles of ordinary words, viewer notes, queries "
                    "answered by the title). All write notes.jsonl and queries.jsonl, plus "
                    "diseases.json, issues.json, conditions.json or films.json.")
    parser.add_argument("kind", choices=["clinic", "support", "conditions", "films"],
                        help="dataset to generate")
    parser.add_argument("-o", "--out", type=Path, required=True, help="output directory")
    parser.add_argument("--notes", type=positive_int, default=None,
                        help="notes, or tickets for 'support' (default 2000; 4000 for "
                             "'conditions' and 'films')")
    parser.add_argument("--diseases", type=positive_int, default=40,
                        help="diseases, or issues for 'support' (default 40; ignored by "
                             "'conditions' and 'films', which have 40)")
    parser.add_argument("--queries", type=positive_int, default=None,
                        help="queries (default one per disease, issue, condition or film)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--templates", choices=["dev", "heldout", "fresh", "final", "unseen",
                                                "blind6", "blind7", "blind8", "blind9",
                                                "blind10", "blind11"],
                        default=None,
                        help="'conditions' and 'films' only: the note and query templates "
                             "(default dev, the set to tune on); heldout: the older held-out "
                             "set; fresh: templates kept unread for a final measurement only, "
                             "never for tuning; final: another such unread set; unseen: a "
                             "fifth set, measured blind once and read since; blind6: a sixth "
                             "set, measured blind once and read since; blind7: a seventh "
                             "set, measured blind once and read since; blind8: an eighth "
                             "set, measured blind once and read since; blind9: a ninth set, "
                             "measured blind once (its conditions read since); blind10: a "
                             "tenth set, measured blind once and read since; blind11: an "
                             "eleventh set, measured blind and not read")
    parser.add_argument("--heldout", action="store_true",
                        help="'conditions' and 'films' only: the same as --templates heldout")
    parser.set_defaults(handler=run_dataset)


def run_dataset(args: argparse.Namespace) -> int:
    """Write the dataset and print the paths of its files."""
    # the generators import the evaluation package (numpy, scipy): only when generating
    from dpsynrag.eval.datasets import write_clinic_dataset, write_support_dataset
    from dpsynrag.eval.datasets_ordinary import ORDINARY_KINDS, make_ordinary_dataset, save_dataset

    if args.heldout and args.templates not in (None, "heldout"):
        raise CliError(f"--heldout contradicts --templates {args.templates}: give one of them")
    for given, option in ((args.heldout, "--heldout"), (args.templates, "--templates")):
        if given and args.kind not in ORDINARY_KINDS:
            raise CliError(f"{option} applies to {' and '.join(ORDINARY_KINDS)} only")
    if args.kind in ORDINARY_KINDS:
        data = make_ordinary_dataset(args.kind, n_notes=args.notes or 4000,
                                     n_queries=args.queries, seed=args.seed,
                                     heldout=args.heldout, templates=args.templates)
        paths = save_dataset(data, args.out)
    elif args.kind == "support":
        paths = write_support_dataset(args.out, n_tickets=args.notes or 2000,
                                      n_issues=args.diseases, seed=args.seed,
                                      n_queries=args.queries)
    else:
        paths = write_clinic_dataset(args.out, n_notes=args.notes or 2000,
                                     n_diseases=args.diseases, n_queries=args.queries,
                                     seed=args.seed)
    for name, path in sorted(paths.items()):
        print(f"{name}: {path}")
    return ExitCode.OK

