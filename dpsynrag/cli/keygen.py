"""``dpsynrag keygen``: an Ed25519 key pair for signing build certificates."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpsynrag.cli.errors import CliError, ExitCode

__all__ = ["add_parser", "run_keygen"]


def add_parser(subparsers: Any) -> None:
    """Add ``keygen`` to the ``dpsynrag`` subcommands."""
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
    """Write the key pair and print its fingerprint."""
    # cryptography loads in a fraction of a second, but only keygen needs it
    from dpsynrag.accounting.signing import generate_keypair, public_key_path_for

    public = args.public_key or public_key_path_for(args.private_key)
    try:
        fingerprint = generate_keypair(args.private_key, public, force=args.force)
    except FileExistsError as error:
        raise CliError(f"{error.filename or args.private_key}: exists; pass --force to "
                       "overwrite", ExitCode.BAD_INPUT) from None
    print(f"private key: {args.private_key} (0600)\npublic key:  {public}\n"
          f"fingerprint: {fingerprint}")
    return ExitCode.OK

