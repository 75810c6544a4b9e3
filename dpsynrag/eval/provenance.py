"""Which code an evaluation ran: recorded in every run's result and in the report.

A report is only as good as the claim of which rules it measured. Python imports the
package from the first entry of ``sys.path`` that holds it, and ``python -c`` puts the
working directory first: an evaluation started inside one checkout with ``PYTHONPATH``
naming another runs the first one's code. So the record names the package directory that
was actually imported, its git commit where it is a checkout, and whether that checkout's
package files differ from the commit (uncommitted edits: the commit alone does not name
the code).

Privacy: public facts about the code only; nothing here reads data.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dpsynrag
from dpsynrag.pipeline.config import FACTS_RULES_VERSION

__all__ = ["code_provenance", "describe_code"]

_GIT_TIMEOUT_S = 10


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                              text=True, timeout=_GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_provenance() -> dict[str, Any]:
    """The imported package: its directory, version, facts rules version and, where it lies
    in a git checkout, the commit and whether its files there differ from it."""
    package = Path(dpsynrag.__file__).resolve().parent
    record: dict[str, Any] = {"package_dir": str(package), "version": dpsynrag.__version__,
                              "facts_rules": FACTS_RULES_VERSION}
    commit = _git(package, "rev-parse", "HEAD")
    if commit:
        status = _git(package, "status", "--porcelain", "--untracked-files=no", "--", ".")
        record["git_commit"] = commit
        record["git_dirty"] = None if status is None else bool(status)
    return record


def describe_code(records: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """One line per distinct code record among a report's runs (runs without one: older
    reports), most frequent first: "commit abc1234 (clean), facts rules 16, <dir>: 9 runs"."""
    counts: Counter[str] = Counter()
    for record in records:
        if not record:
            line = "not recorded (a run from before the record)"
        else:
            commit = record.get("git_commit")
            if commit:
                dirty = record.get("git_dirty")
                state = ("with uncommitted edits" if dirty is True
                         else "clean" if dirty is False else "edits unknown")
                where = f"commit {str(commit)[:12]} ({state})"
            else:
                where = "no git checkout"
            line = (f"{where}, facts rules {record.get('facts_rules')}, "
                    f"version {record.get('version')}, {record.get('package_dir')}")
        counts[line] += 1
    return [f"{line}: {n} run{'s' if n != 1 else ''}"
            for line, n in counts.most_common()]
