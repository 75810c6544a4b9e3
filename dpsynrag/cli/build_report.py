"""What ``build-corpus`` shows: progress bars, the plan's warning and the final summary."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpsynrag.display import format_epsilon
from dpsynrag.io.documents import skip_label

__all__ = ["STATE_SUMMARY_FILE", "check_private_text_location", "counts_note", "plan_warning",
           "print_summary", "progress_factory", "with_guarantee", "write_private_text"]


#: The default progress bar: a percentage and the elapsed time, never a count (a bar's total
#: is often the number of documents, which is not differentially private).
COUNT_FREE_BAR = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}]"


def progress_factory(quiet: bool, verbose: bool = False) -> Callable[[str, int], Any]:
    """The build's progress bars: a context manager per stage, on stderr.

    ``quiet``: none. ``verbose``: tqdm's bars with counts, rates and ETA. Otherwise bars only
    on a terminal, with a percentage and the elapsed time and no count; none when stderr is a
    file or a pipe (a scheduled build's log), where the bars' successive percentages of a
    known chunk size would tell the number of documents."""
    from tqdm import tqdm  # lazy: only a build draws progress bars

    disable = quiet or not (verbose or sys.stderr.isatty())

    @contextmanager
    def factory(description: str, total: int) -> Iterator[Callable[[int], None]]:
        bar = tqdm(total=total, desc=description, file=sys.stderr, disable=disable,
                   dynamic_ncols=True, leave=True,
                   bar_format=None if verbose else COUNT_FREE_BAR)
        try:
            yield bar.update
        finally:
            bar.close()

    return factory


def plan_warning(config: Any) -> str | None:
    """Why the plan cannot give useful token texts, from public values only, or None: in
    token mode a token wins only when about ``consensus_rows`` rows of a cluster agree, and a
    cluster holds at most ``k`` rows."""
    from dpsynrag.pipeline.build import make_plan  # lazy: the build loads numpy and scipy

    if config.generate != "tokens":
        return None
    plan = make_plan(config)
    if config.k >= plan.consensus_rows:
        return None
    return (f"clusters hold at most --k {config.k} rows but a token needs about "
            f"{plan.consensus_rows} agreeing rows at this plan ('dpsynrag budget'): expect "
            "texts of random tokens; raise --k or --epsilon, or lower --T or --L")


def check_private_text_location(path: Path, option: str) -> str | None:
    """Why ``path`` cannot be written by :func:`write_private_text` (one line naming it and
    the ``option`` that set it), or None: checked before a build spends anything, so that its
    summary is not lost after the build."""
    from dpsynrag.pipeline.preflight import probe_write

    parent = path.expanduser().absolute().parent
    if path.is_dir():
        return f"{path}: is a directory; give {option} a file name"
    if not parent.is_dir():
        return f"{parent}: no such directory for {option}; create it or choose another path"
    try:
        probe_write(parent)
    except OSError as error:
        return f"{parent}: cannot write {option} here ({error.strerror or error})"
    return None


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600, also when it existed).

    The summary is operator-side: it holds exact counts and the input's keyed hash, which
    are not differentially private."""
    import os

    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


STATE_SUMMARY_FILE = "summary.json"


def counts_note(location: Path | None) -> str:
    """Where a build's exact input counts are, in words (no count): the private summary file
    the build wrote, or that none was kept."""
    if location is None:
        return ("not kept (--purge-state deleted the state directory; --summary-json FILE "
                "keeps them, --verbose prints them)")
    return f"in {location} (private)"


def print_summary(summary: dict[str, Any], *, verbose: bool = False,
                  counts_at: Path | None = None) -> None:
    """The summary table of a finished build, on stderr.

    The exact input counts (records read, documents used, each skip reason) are not
    differentially private: only ``verbose`` prints them; by default a row says where they
    are (``counts_at``, the private summary file; see :func:`counts_note`). ``summary``'s
    ``epsilon`` is the certificate's guarantee (the plan's) and ``epsilon_realised`` the cost
    of the releases that ran, when the caller adds it."""
    from rich.console import Console  # lazy: only a finished build prints a table
    from rich.table import Table

    console = Console(stderr=True)
    table = Table(title="build-corpus summary", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    if verbose:
        records = summary["documents_in"] + sum(summary["skipped"].values())
        table.add_row("records read", str(records))
        table.add_row("documents used (one per privacy unit)", str(summary["documents_in"]))
        for reason, count in sorted(summary["skipped"].items()):
            table.add_row(skip_label(reason, summary.get("unit_bound")), str(count))
    else:
        table.add_row("input counts (records, documents, skips)", counts_note(counts_at))
    table.add_row("clusters / synthetic texts", str(summary["synthetic_texts"]))
    table.add_row("kept by the self-filter", str(summary["kept_texts"]))
    realised = summary.get("epsilon_realised")
    if summary.get("rho_guarantee") is not None:
        table.add_row("rho of the plan (zCDP, the guarantee)", f"{summary['rho_guarantee']:.4f}")
    table.add_row("rho spent (zCDP, the releases that ran)", f"{summary['rho_spent']:.4f}")
    what = "epsilon (the plan's: the guarantee)" if realised is not None else "epsilon"
    table.add_row(f"{what} at delta={summary['delta']:g} ({summary['conversion']})",
                  format_epsilon(summary["epsilon"]))
    for name, value in summary["epsilon_other"].items():
        table.add_row(f"epsilon ({name})", format_epsilon(value))
    if realised is not None:
        table.add_row("epsilon_realised (the releases that ran; not a guarantee)",
                      format_epsilon(realised))
    if summary.get("lifetime_epsilon") is not None:
        cap = summary.get("lifetime_cap_epsilon")
        table.add_row("corpus lifetime epsilon", format_epsilon(summary["lifetime_epsilon"])
                      + (f" of cap {format_epsilon(cap)}" if cap is not None else " (no cap)"))
        table.add_row("  (all builds and queries, at delta)", f"{summary['lifetime_delta']:.3g}")
    for stage, secs in summary["stage_seconds"].items():
        table.add_row(f"wall time {stage}", f"{secs:.1f} s")
    table.add_row("resumed", "yes" if summary["resumed"] else "no")
    if summary["seeded"]:
        table.add_row("seeded", "YES: not for release")
    key_note = " (new key)" if summary["signing_key_created"] else ""
    table.add_row("signing key", summary["signing_key_fingerprint"] + key_note)
    public_key = summary.get("signing_public_key")
    table.add_row("public key (verify --public-key)",
                  public_key or "no KEY.pub next to the signing key")
    table.add_row("output", summary["out_dir"])
    console.print(table)


def with_guarantee(summary: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """``summary`` (``BuildSummary.as_dict``) with the certificate's guarantee: ``epsilon``,
    ``epsilon_other`` and ``rho_guarantee`` the plan's (what ``certificate.json`` states),
    ``epsilon_realised`` the build's own figure (the releases that ran). Unchanged when the
    certificate cannot be read (it was just written: only a bug)."""
    import json

    from dpsynrag.io.output_files import CERTIFICATE_FILE

    try:
        guarantee = json.loads((out_dir / CERTIFICATE_FILE).read_text(encoding="utf-8"))[
            "guarantee"]
        epsilon, rho = float(guarantee["epsilon"]), float(guarantee["rho"])
        others = {str(k): float(v) for k, v in guarantee["epsilon_other_conversions"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return summary
    return {**summary, "epsilon": epsilon, "epsilon_other": others, "rho_guarantee": rho,
            "epsilon_realised": summary["epsilon"],
            "epsilon_other_realised": summary["epsilon_other"]}
