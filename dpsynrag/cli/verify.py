"""``dpsynrag verify``: check a built corpus's signature, file hashes and epsilon claim.

Exit codes: 0 everything holds; 1 a check failed (each problem is printed); 2 bad options.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.display import format_epsilon

__all__ = ["add_parser", "run_verify"]


def add_parser(subparsers: Any) -> None:
    """Add ``verify`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "verify", help="check a built corpus: signature, file hashes and the epsilon claim",
        description="Re-derive every mechanism's rho from its recorded parameters, recompose "
                    "them, convert to (epsilon, delta), check every file's sha256 and the "
                    "Ed25519 signature. The guarantee (epsilon) must be the plan's worst case, "
                    "re-planned from the certificate's public config, and at least the "
                    "realised cost (epsilon_realised: the releases that ran, lower when fewer "
                    "than L clusters were released); the public lists the certificate names "
                    "(stopwords, name lists, word-frequency prior) must match the installed "
                    "ones. Exit 0 when everything holds; else print each problem and exit 1. "
                    "A seeded build (--seed, tests only) always fails: its noise is "
                    "reproducible, so it carries no guarantee.")
    parser.add_argument("out_dir", type=Path, metavar="OUT", help="a build-corpus output "
                        "directory")
    parser.add_argument("--public-key", type=Path, help="trusted public key (PEM); without it "
                        "the key embedded in the certificate is used (integrity only)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--explain", action="store_true",
                        help="also print the certificate in plain language: who is protected, "
                             "the guarantee (the plan's epsilon and delta) and the realised "
                             "cost beside it, what was released, which models, when, by which "
                             "key")
    parser.add_argument("--allow-seeded", action="store_true",
                        help="TESTS ONLY: do not fail a seeded build (its noise is "
                             "reproducible; it is never for release)")
    parser.set_defaults(handler=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    """Verify ``args.out_dir`` and print the result (problems on stderr)."""
    # the certificate code loads numpy, scipy and cryptography: only when verifying
    from dpsynrag.accounting.certificate import verify_output
    from dpsynrag.io.output_files import CERTIFICATE_FILE

    if not args.out_dir.is_dir():
        raise CliError(f"{args.out_dir}: not a directory", ExitCode.BAD_INPUT)
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
        trust = "trusted key" if args.public_key else "embedded key: integrity only"
        note = " SEEDED, NOT FOR RELEASE (--allow-seeded)" if seeded else ""
        realised = guarantee.get("epsilon_realised")
        beside = (f"; realised cost epsilon_realised={_epsilon_text(realised)} (the releases "
                  "that ran, not a guarantee)" if realised is not None
                  and guarantee.get("basis") == "plan" else "")
        print(f"OK: signature ({trust}), file hashes and epsilon re-derived: "
              f"epsilon={_epsilon_text(guarantee.get('epsilon'))} delta={guarantee.get('delta')} "
              f"({guarantee.get('conversion')}), the plan's guarantee{beside}{note}")
    if args.explain and not args.json:
        from dpsynrag.accounting.explain import explain_certificate  # lazy: as above

        trust = "trusted key" if args.public_key else "embedded key: integrity only"
        print(explain_certificate(certificate, verified=not problems, trust=trust))
    return ExitCode.OK if not problems else ExitCode.FAILURE


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _epsilon_text(value: object) -> str:
    """A certificate's epsilon for display (rounded up), or as found when not a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format_epsilon(float(value))
    return str(value)

