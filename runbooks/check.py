#!/usr/bin/env python3
"""Run a runbook's ```bash blocks as one procedure and report the first block that fails.

Usage: ``python runbooks/check.py runbooks/NAME.md [--keep] [--verbose] [--timeout S]``.

The convention (runbooks/README.md):

* every ```bash block runs, in order, in ONE ``bash -euo pipefail`` process, so variables
  and the working directory carry from block to block;
* the working directory is a fresh scratch directory holding ``data/notes.jsonl`` (plus
  ``queries.jsonl`` and ``diseases.json``): 120 fictitious-clinic notes, 6 diseases, seed 0,
  from ``dpsynrag dataset clinic``; columns ``id``, ``text``, ``unit``;
* ``<repo>/.venv/bin`` comes first on PATH; ``HOME`` is ``<scratch>/home`` and
  ``DPSYNRAG_CONFIG_DIR`` is ``$HOME/.config/dpsynrag`` (keys and corpus ledgers stay in the
  scratch directory); ``DPSYNRAG_CACHE_DIR`` keeps the caller's model cache (the converted
  model is not rebuilt per runbook); ``HF_HUB_OFFLINE=1``; ``DPSYNRAG_REPO`` is the repository;
* a ```bash block whose preceding non-blank line is ``<!-- not-run: REASON -->`` is skipped
  (the reason must not be empty); other fence languages are never run;
* the whole runbook has a time limit (default 300 s).

Exit status: 0 when every block ran and exited 0, 1 when one failed or timed out, 2 when the
runbook cannot be parsed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TIMEOUT = 300.0
NOTES_COMMAND = ["dpsynrag", "dataset", "clinic", "-o", "data", "--notes", "120",
                 "--diseases", "6", "--seed", "0"]
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})\s*(?P<info>[^`]*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run\s*:(?P<reason>.*?)-->\s*$")
_TAIL_LINES = 200


class RunbookError(Exception):
    """The runbook is malformed (bad marker, unclosed fence)."""


@dataclass
class Block:
    """One ```bash block: its text, where it starts in the .md and whether it is skipped."""

    index: int
    line: int  # 1-based line number of the block's first content line in the .md
    text: str
    skip_reason: str | None = None

    @property
    def first_line(self) -> str:
        """The first non-blank line of the block, for messages."""
        return next((s.strip() for s in self.text.splitlines() if s.strip()), "")


@dataclass
class BlockResult:
    """What happened to one executed block."""

    block: Block
    status: str  # "ok", "failed", "timeout", "not reached"
    output: str = ""
    exit_code: int | None = None
    failed_line: int | None = None  # line in the .md, when bash reported it
    seconds: float | None = None


@dataclass
class RunbookResult:
    """The outcome of one runbook run."""

    path: Path
    scratch: Path
    blocks: list[Block]
    results: list[BlockResult] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # user + system time of the commands bash waited for
    timed_out: bool = False

    @property
    def executed(self) -> list[BlockResult]:
        return [r for r in self.results if r.status != "not reached"]

    @property
    def skipped(self) -> list[Block]:
        return [b for b in self.blocks if b.skip_reason is not None]

    @property
    def ok(self) -> bool:
        runnable = [b for b in self.blocks if b.skip_reason is None]
        return (not self.timed_out and len(self.results) == len(runnable)
                and all(r.status == "ok" for r in self.results))

    @property
    def failure(self) -> BlockResult | None:
        return next((r for r in self.results if r.status != "ok"), None)


def _dedent(line: str, indent: int) -> str:
    """``line`` without the indentation of its (list-item) fence."""
    if line[:indent].strip():
        return line.lstrip()  # less indented than the fence
    return line[indent:]


def parse_blocks(markdown: str) -> list[Block]:
    """Every ```bash block of ``markdown``, with not-run markers applied."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    pending_marker: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _NOT_RUN.match(line)
        if marker:
            reason = marker.group("reason").strip()
            if not reason:
                raise RunbookError(f"line {i + 1}: <!-- not-run: REASON --> needs a reason")
            pending_marker = (i + 1, reason)
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip() and pending_marker is not None:
                raise RunbookError(f"line {pending_marker[0]}: a not-run marker must come right "
                                   "before a ```bash block")
            i += 1
            continue
        indent, ticks = len(fence.group("indent")), fence.group("ticks")
        language = fence.group("info").strip().split(" ")[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{ticks}`*\s*$", lines[j]):
            body.append(_dedent(lines[j], indent))
            j += 1
        if j == len(lines):
            raise RunbookError(f"line {i + 1}: unclosed ``` fence")
        if language == "bash":
            reason = pending_marker[1] if pending_marker else None
            blocks.append(Block(index=len(blocks) + 1, line=i + 2, text="\n".join(body) + "\n",
                                skip_reason=reason))
        elif pending_marker is not None:
            raise RunbookError(f"line {pending_marker[0]}: a not-run marker must come right "
                               "before a ```bash block")
        pending_marker = None
        i = j + 1
    if pending_marker is not None:
        raise RunbookError(f"line {pending_marker[0]}: a not-run marker at the end of the file")
    return blocks


def runbook_env(scratch: Path, repo: Path = REPO, threads: int | None = None) -> dict[str, str]:
    """The environment of a runbook: the repository's venv first, home and config in scratch;
    ``threads`` caps the math libraries' threads (for runbooks run side by side)."""
    env = dict(os.environ)
    if threads is not None:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = str(threads)
    cache = env.get("DPSYNRAG_CACHE_DIR") or str(Path.home() / ".cache" / "dpsynrag")
    home = scratch / "home"
    venv = repo / ".venv"
    for name in ("PYTHONHOME", "PYTHONPATH", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        env.pop(name, None)
    env.update({
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        "VIRTUAL_ENV": str(venv),
        "HOME": str(home),
        "DPSYNRAG_CONFIG_DIR": str(home / ".config" / "dpsynrag"),
        "DPSYNRAG_CACHE_DIR": cache,
        "DPSYNRAG_REPO": str(repo),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def prepare_scratch(scratch: Path, data_source: Path | None = None,
                    repo: Path = REPO) -> None:
    """Create ``scratch/home`` and ``scratch/data`` (copied from ``data_source``, or generated)."""
    (scratch / "home").mkdir(parents=True, exist_ok=True)
    if data_source is not None:
        shutil.copytree(data_source, scratch / "data")
        return
    done = subprocess.run(NOTES_COMMAND, cwd=scratch, env=runbook_env(scratch, repo),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (scratch / "data" / "notes.jsonl").is_file():
        raise RuntimeError(f"{shlex.join(NOTES_COMMAND)} failed ({done.returncode}):\n"
                           f"{done.stdout}{done.stderr}")


WARM_CACHE = ("from dpsynrag.models.cache import converted_gguf\n"
              "from dpsynrag.models.locate import packaged_llm_file\n"
              "converted_gguf(packaged_llm_file())\n")


def warm_model_cache(scratch: Path, repo: Path = REPO) -> None:
    """Convert the packaged model into ``DPSYNRAG_CACHE_DIR`` once (a no-op when it is there),
    so that runbooks started side by side do not each convert it."""
    subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c", WARM_CACHE], cwd=scratch,
                   env=runbook_env(scratch, repo), capture_output=True, check=True)


def _driver(blocks: list[Block], work: Path) -> str:
    """The bash script that sources each block with its output in its own log file."""
    status = shlex.quote(str(work / "status"))
    times = shlex.quote(str(work / "times"))
    parts = ["set -euo pipefail",
             f"trap 'printf \"err %s %s %s\\n\" \"$?\" \"${{BASH_SOURCE[0]:-}}\" \"$LINENO\" "
             f">> {status}' ERR"]
    for block in blocks:
        script = work / f"block{block.index}.sh"
        script.write_text(block.text)
        log = shlex.quote(str(work / f"block{block.index}.log"))
        parts += [f"printf 'start {block.index} %s\\n' \"$(date +%s.%N)\" >> {status}",
                  f"{{ source {shlex.quote(str(script))}; }} > {log} 2>&1 < /dev/null",
                  f"printf 'end {block.index} %s\\n' \"$(date +%s.%N)\" >> {status}"]
    parts.append(f"times > {times}")  # CPU of every command waited for (runs that complete)
    return "\n".join(parts) + "\n"


def _cpu_seconds(times_file: Path) -> float:
    """User + system seconds of the runbook's commands, from bash's ``times`` after the last
    block (0 when the runbook did not complete)."""
    try:
        children = times_file.read_text().splitlines()[1]
    except (OSError, IndexError):
        return 0.0
    total = 0.0
    for value in children.split():  # e.g. "1m2.345s"
        minutes, _, seconds = value.rstrip("s").partition("m")
        try:
            total += float(minutes) * 60 + float(seconds)
        except ValueError:
            return 0.0
    return total


def _kill_group(pgid: int) -> None:
    """Stop whatever the runbook left running (its own process group only)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        time.sleep(0.5)


def run_runbook(path: Path, *, scratch: Path | None = None, data_source: Path | None = None,
                timeout: float = DEFAULT_TIMEOUT, repo: Path = REPO,
                threads: int | None = None) -> RunbookResult:
    """Run ``path``'s bash blocks in ``scratch`` (a new temporary directory by default);
    ``threads`` caps the math libraries' threads of its commands (default: their own)."""
    path = Path(path)
    blocks = parse_blocks(path.read_text(encoding="utf-8"))
    if scratch is None:
        scratch = Path(tempfile.mkdtemp(prefix=f"runbook-{path.stem}-"))
    scratch.mkdir(parents=True, exist_ok=True)
    result = RunbookResult(path=path, scratch=scratch, blocks=blocks)
    runnable = [b for b in blocks if b.skip_reason is None]
    work = Path(tempfile.mkdtemp(prefix=".runbook-", dir=scratch.parent))
    started = time.monotonic()
    try:
        prepare_scratch(scratch, data_source, repo)
        driver = work / "driver.sh"
        driver.write_text(_driver(runnable, work))
        process = subprocess.Popen(["bash", str(driver)], cwd=scratch,
                                   env=runbook_env(scratch, repo, threads),
                                   stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   start_new_session=True)
        try:
            _, driver_err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            result.timed_out = True
            _kill_group(process.pid)
            _, driver_err = process.communicate(timeout=60)
        else:
            _kill_group(process.pid)
        result.seconds = time.monotonic() - started
        result.cpu_seconds = _cpu_seconds(work / "times")
        result.results = _collect(runnable, work, result.timed_out, process.returncode,
                                  driver_err.decode(errors="replace"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _collect(blocks: list[Block], work: Path, timed_out: bool, returncode: int,
             driver_err: str) -> list[BlockResult]:
    """Turn the driver's status file and logs into one result per block."""
    status_path = work / "status"
    events = status_path.read_text().splitlines() if status_path.exists() else []
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    errors: dict[int, tuple[int | None, int | None]] = {}  # block -> (exit code, .sh line)
    current = 0
    for event in events:
        kind, _, rest = event.partition(" ")
        if kind == "start":
            current = int(rest.split()[0])
            starts[current] = float(rest.split()[1])
        elif kind == "end":
            ends[int(rest.split()[0])] = float(rest.split()[1])
        elif kind == "err" and current and current not in errors:
            code, _, where = rest.partition(" ")
            source, _, lineno = where.rpartition(" ")  # the path may hold spaces
            in_block = source.endswith(f"block{current}.sh")
            errors[current] = (int(code) if code.isdigit() else None,
                               int(lineno) if in_block and lineno.isdigit() else None)
    results: list[BlockResult] = []
    for block in blocks:
        log = work / f"block{block.index}.log"
        output = log.read_text(errors="replace") if log.exists() else ""
        if block.index in ends:
            seconds = ends[block.index] - starts[block.index]
            results.append(BlockResult(block, "ok", output, 0, seconds=seconds))
        elif block.index in starts:
            code, line = errors.get(block.index, (returncode, None))
            if driver_err.strip():
                output += f"\n[bash] {driver_err.strip()}"
            results.append(BlockResult(block, "timeout" if timed_out else "failed", output,
                                       None if timed_out else code,
                                       None if line is None else block.line + line - 1))
        else:
            results.append(BlockResult(block, "not reached"))
    return results


def report(result: RunbookResult, verbose: bool = False) -> str:
    """A human-readable account of the run: per-block status, skips, the failure's output."""
    lines = [f"runbook {result.path}: {len(result.executed)} block(s) run, "
             f"{len(result.skipped)} skipped, {result.seconds:.1f} s "
             f"({result.cpu_seconds:.1f} s CPU)"]
    for block in result.skipped:
        lines.append(f"  skipped block at line {block.line} ({block.first_line!r}): "
                     f"{block.skip_reason}")
    for r in result.results:
        took = "" if r.seconds is None else f" ({r.seconds:.1f} s)"
        lines.append(f"  {r.status:<11} block {r.block.index} at line {r.block.line}{took}: "
                     f"{r.block.first_line}")
        if verbose and r.output:
            lines += ["    | " + s for s in r.output.rstrip().splitlines()]
    failure = result.failure
    if failure is not None:
        where = f"line {failure.failed_line}" if failure.failed_line else f"block at line " \
            f"{failure.block.line}"
        why = ("timed out" if failure.status == "timeout"
               else f"exited {failure.exit_code if failure.exit_code is not None else '?'}")
        lines.append(f"FAILED: {result.path}:{failure.block.line}: block {failure.block.index} "
                     f"({failure.block.first_line!r}) {why} at {where}")
        if not verbose:
            tail = failure.output.rstrip().splitlines()[-_TAIL_LINES:]
            lines.append(f"--- output of block {failure.block.index} (last {_TAIL_LINES} lines)")
            lines += tail
            lines.append("---")
    elif not result.executed:
        lines.append("FAILED: no block was executed")
    elif result.ok:
        lines.append("OK")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python runbooks/check.py RUNBOOK.md [--keep] [--verbose] [--timeout S]``."""
    parser = argparse.ArgumentParser(description="Run a runbook's ```bash blocks in a scratch "
                                     "directory (see runbooks/README.md).")
    parser.add_argument("runbook", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every block's output")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"time limit of the whole runbook in seconds (default "
                             f"{DEFAULT_TIMEOUT:g})")
    args = parser.parse_args(argv)
    try:
        result = run_runbook(args.runbook, timeout=args.timeout)
    except (RunbookError, OSError) as error:
        print(f"{args.runbook}: {error}", file=sys.stderr)
        return 2
    print(report(result, args.verbose))
    if args.keep:
        print(f"scratch directory kept: {result.scratch}")
    else:
        shutil.rmtree(result.scratch, ignore_errors=True)
    return 0 if result.ok and result.executed else 1


if __name__ == "__main__":
    sys.exit(main())
