"""``dpsynrag show``: what a built corpus holds, read from its output directory alone.

The output directory holds no private data (the hand-off: texts released through the
mechanisms, their index, the manifest and the signed certificate), so everything this command
prints is public. It reads the directory the way ``dpsynrag.handoff`` loads it, and checks the
certificate with the code of ``dpsynrag verify``.

Exit codes: 0 shown (a certificate that does not verify is shown as such: ``dpsynrag verify``
is the check that fails); 2 a missing directory, a directory that is not a corpus, or a corpus
a build is writing now.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.display import format_epsilon
from dpsynrag.io.output_files import CERTIFICATE_FILE, MANIFEST_FILE
from dpsynrag.pipeline.state import output_lock_path

if TYPE_CHECKING:
    from dpsynrag.handoff import LoadedCorpus

__all__ = ["add_parser", "check_corpus_dir", "load_corpus_dir", "run_show"]



def add_parser(subparsers: Any) -> None:
    """Add ``show`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "show", help="summarise a built corpus: texts, mode, epsilon, signature, embedder, files",
        description="Summarise a build-corpus output directory: how many synthetic texts, the "
                    "generation mode, the certificate's epsilon and delta and whether its "
                    "signature, file hashes and epsilon verify (as 'dpsynrag verify' checks "
                    "them, against the key embedded in the certificate unless --public-key), "
                    "the embedder of the index, the files, and the first N texts. Reads only "
                    "the output directory, which holds no private data.",
        epilog="Example: dpsynrag show demo-output/corpus --n 5")
    parser.add_argument("out_dir", type=Path, metavar="OUT",
                        help="a build-corpus output directory")
    parser.add_argument("--n", type=int, default=10, metavar="N",
                        help="texts to print (default 10; 0 for none)")
    parser.add_argument("--sample", action="store_true",
                        help="print N texts spread evenly over the corpus instead of the first N")
    parser.add_argument("--public-key", type=Path,
                        help="trusted public key (PEM) to check the signature against")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=run_show)


# ---------------------------------------------------------------------- the directory
def _build_lock_held(out_dir: Path) -> bool:
    """True while a build holds the output lock of ``out_dir``
    (``dpsynrag.pipeline.state.OutputLock``, flock-ed exclusively while the build may write
    OUT). Probed with a shared non-blocking lock, released at once; a missing or unreadable
    lock file means no build holds it."""
    try:
        handle = open(output_lock_path(out_dir))  # noqa: SIM115 - closed below; never created
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        handle.close()  # releases the probe's lock too
    return False


def check_corpus_dir(out_dir: Path) -> None:
    """Refuse, in one line (exit 2), a missing directory, a directory without a corpus
    manifest, or an output directory a build is writing now."""
    if _build_lock_held(out_dir):
        raise CliError(f"{out_dir}: a build is writing this corpus now; run this again when "
                       "it has finished", ExitCode.BAD_INPUT)
    if not out_dir.exists():
        raise CliError(f"{out_dir}: no such directory", ExitCode.BAD_INPUT)
    if not out_dir.is_dir():
        raise CliError(f"{out_dir}: not a directory (give a build-corpus output directory)",
                       ExitCode.BAD_INPUT)
    if not (out_dir / MANIFEST_FILE).is_file():
        raise CliError(f"{out_dir}: not a dpsynrag corpus (no {MANIFEST_FILE}; give the "
                       "directory build-corpus wrote with -o)", ExitCode.BAD_INPUT)


def load_corpus_dir(out_dir: Path, *, allow_seeded: bool = False,
                    check_hashes: bool = True) -> LoadedCorpus:
    """The corpus in ``out_dir``, loaded and checked as the hand-off loads it; every problem
    is one line (exit 2). A corpus without kept rows loads (the caller says so)."""
    check_corpus_dir(out_dir)  # before the imports: a wrong path is refused at once
    # faiss, pyarrow and numpy: only once a corpus is read
    from dpsynrag.handoff import CorpusIntegrityError, EmptyCorpusWarning, load_corpus

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyCorpusWarning)
            return load_corpus(out_dir, allow_seeded=allow_seeded, check_hashes=check_hashes)
    except CorpusIntegrityError as error:
        raise CliError(f"not a usable corpus: {error}", ExitCode.BAD_INPUT) from None


def _read_certificate(out_dir: Path) -> dict[str, Any]:
    try:
        value = json.loads((out_dir / CERTIFICATE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _mode(config: Mapping[str, Any]) -> str | None:
    """The generation mode the certificate's released config names (facts, tokens)."""
    mode = config.get("generate")
    if not isinstance(mode, str):
        return None
    writer = config.get("writer")
    if mode == "facts" and isinstance(writer, str) and writer != "template":
        return f"facts (writer: {writer})"
    return mode


def sample_rows(total: int, n: int, spread: bool) -> list[int]:
    """The first ``n`` row numbers of ``total``, or ``n`` spread evenly over them (the first
    and the last included)."""
    n = max(0, min(n, total))
    if not spread or n <= 1 or n == total:
        return list(range(n))
    return sorted({round(i * (total - 1) / (n - 1)) for i in range(n)})


def summarise(out_dir: Path, n: int, *, spread: bool = False,
              public_key: Path | None = None) -> dict[str, Any]:
    """The public summary of a corpus directory (what ``show --json`` prints)."""
    loaded = load_corpus_dir(out_dir, allow_seeded=True, check_hashes=False)
    # the certificate check loads scipy and cryptography: only once a corpus is found
    from dpsynrag.accounting.certificate import verify_output

    problems = verify_output(out_dir, public_key, allow_seeded=True)  # seeded: said below
    certificate = _read_certificate(out_dir)
    guarantee = _mapping(certificate.get("guarantee"))
    config = _mapping(certificate.get("config"))
    embedder = _mapping(loaded.manifest.get("embedder"))
    columns = loaded.table.select(["id", "text", "kept"]).to_pydict()
    rows = sample_rows(loaded.table.num_rows, n, spread)
    files = sorted(p for p in out_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    seeded = certificate.get("seeded") is not False  # unknown counts as seeded
    return {
        "directory": str(out_dir),
        "texts": loaded.table.num_rows,
        "kept": int(loaded.kept_mask().sum()),
        "mode": _mode(config),
        "certificate": {
            "present": bool(certificate),
            "epsilon": _number(guarantee.get("epsilon")),
            "delta": _number(guarantee.get("delta")),
            "conversion": guarantee.get("conversion"),
            "verified": bool(certificate) and not problems,
            "trusted_key": public_key is not None,
            "problems": problems,
            "seeded": seeded,
            "created_at": certificate.get("created_at"),
            "package_version": certificate.get("package_version"),
        },
        "embedder": {"name": embedder.get("name"), "dimension": embedder.get("dimension"),
                     "sha256": embedder.get("sha256"), "metric": loaded.manifest.get("metric")},
        "files": {p.name: p.stat().st_size for p in files},
        "shown": "sample" if spread else "first",
        "sample": [{"row": r, "id": str(columns["id"][r]), "text": str(columns["text"][r]),
                    "kept": bool(columns["kept"][r])} for r in rows],
    }


# ---------------------------------------------------------------------- text output
def _size(n_bytes: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("kB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


def _certificate_line(cert: Mapping[str, Any]) -> str:
    if not cert["present"]:
        return "none (no readable certificate.json: no privacy claim to check)"
    epsilon = "?" if cert["epsilon"] is None else format_epsilon(cert["epsilon"])
    claim = f"epsilon {epsilon}, delta {cert['delta']:g}" if cert["delta"] is not None \
        else f"epsilon {epsilon}"
    if cert["conversion"]:
        claim += f" ({cert['conversion']})"
    if cert["verified"]:
        key = "trusted key" if cert["trusted_key"] else "embedded key: integrity only"
        status = f"signature, file hashes and epsilon verify ({key})"
    else:
        problems = cert["problems"]
        more = f" (and {len(problems) - 1} more; see 'dpsynrag verify')" \
            if len(problems) > 1 else ""
        status = f"DOES NOT VERIFY: {problems[0] if problems else 'unknown'}{more}"
    seeded = "; SEEDED: tests only, not for release" if cert["seeded"] else ""
    return f"{claim}; {status}{seeded}"


def print_summary(summary: Mapping[str, Any]) -> None:
    """The summary for people to read."""
    cert, embedder = summary["certificate"], summary["embedder"]
    kept = summary["kept"]
    texts = summary["texts"]
    print(f"corpus:      {summary['directory']}")
    print(f"texts:       {texts}" + ("" if kept == texts else
                                     f" ({kept} kept by the self-filter: searched)"))
    print(f"mode:        {summary['mode'] or 'unknown (no certificate)'}")
    print(f"certificate: {_certificate_line(cert)}")
    if cert.get("created_at"):
        print(f"built:       {cert['created_at']} by dpsynrag {cert.get('package_version')}")
    print(f"embedder:    {embedder['name']} ({embedder['dimension']} dimensions, "
          f"{embedder['metric']})")
    files = ", ".join(f"{name} ({_size(size)})" for name, size in summary["files"].items())
    print(f"files:       {files}")
    sample = summary["sample"]
    if sample:
        which = "spread over the corpus" if summary["shown"] == "sample" else "first"
        print(f"\n{len(sample)} of {texts} texts ({which}):")
        width = max(len(item["id"]) for item in sample)
        for item in sample:
            flag = "" if item["kept"] else " [not kept]"
            print(f"  {item['id']:<{width}}  {' '.join(item['text'].split())}{flag}")
    if kept == 0:
        print(f"\nnote: no text was kept by the self-filter; 'dpsynrag search "
              f"{summary['directory']}' finds nothing", file=sys.stderr)


def run_show(args: argparse.Namespace) -> int:
    """Print the summary of ``args.out_dir``."""
    if args.n < 0:
        raise CliError(f"--n must be 0 or more, got {args.n}")
    summary = summarise(args.out_dir, args.n, spread=args.sample, public_key=args.public_key)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print_summary(summary)
    return ExitCode.OK

