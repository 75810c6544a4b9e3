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
    parser.add_argument("--templates", metavar="PATH", default=None,
                        help="'conditions' and 'films' only: the note and query templates, a "
                             "TOML file (description, notes, queries) or a folder holding "
                             "<kind>.toml; default dev, the built-in set to tune on. The sets "
                             "of past measurements lie in the repository's benchmarks/sets/ "
                             "(e.g. --templates benchmarks/sets/heldout/films.toml)")
    # gone: a one-line error that names the file to use instead
    parser.add_argument("--heldout", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(handler=run_dataset)


def _kind_file(kind: str) -> str:
    return f"{kind}.toml" if kind in ("conditions", "films") else "<kind>.toml"


def run_dataset(args: argparse.Namespace) -> int:
    """Write the dataset and print the paths of its files."""
    # the generators import the evaluation package (numpy, scipy): only when generating
    from dpsynrag.eval.datasets import write_clinic_dataset, write_support_dataset
    from dpsynrag.eval.datasets_ordinary import (
        DEV_TEMPLATES,
        ORDINARY_KINDS,
        make_ordinary_dataset,
        resolve_templates,
        save_dataset,
    )
    from dpsynrag.eval.template_files import TemplateFileError

    if args.heldout:
        raise CliError("--heldout is gone: use --templates "
                       f"benchmarks/sets/heldout/{_kind_file(args.kind)}")
    if args.templates is not None and args.kind not in ORDINARY_KINDS:
        raise CliError(f"--templates applies to {' and '.join(ORDINARY_KINDS)} only")
    if args.kind in ORDINARY_KINDS:
        try:
            recorded, _ = resolve_templates(args.kind, args.templates)
        except TemplateFileError as error:
            raise CliError(f"--templates {error}{_hint(args.templates, args.kind)}") from None
        try:
            data = make_ordinary_dataset(args.kind, n_notes=args.notes or 4000,
                                         n_queries=args.queries, seed=args.seed,
                                         templates=args.templates)
        except RuntimeError as error:
            # the generator's own checks (no query gives its answer away): a set from a file
            # can fail them; the built-in one never does (a failure there is a bug)
            if recorded == DEV_TEMPLATES:
                raise
            raise CliError(f"--templates {recorded}: {error}") from None
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


def _hint(templates: str | None, kind: str) -> str:
    """Where a bare variant name of the old ``--templates NAME`` lives now, if it does."""
    moved = Path("benchmarks", "sets", str(templates), f"{kind}.toml")
    if templates and "/" not in templates and not Path(templates).exists() and moved.is_file():
        return f" (the template sets are files now: --templates {moved.as_posix()})"
    return ""
