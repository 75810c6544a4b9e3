#!/usr/bin/env python3
"""Would a model rewrite of the n-gram notes keep what they say? A probe of the optional writer.

Usage: ``.venv/bin/python benchmarks/writer_probe.py SAMPLES [SAMPLES ...] [--model PATH]
[--output FILE]``. ``SAMPLES``: the ``samples-eps10.md`` files of ``dpsynrag eval`` reports
(``benchmarks/sample_notes.py``): ten texts of an ε = 10 build each, the DP release, so
reading them costs nothing. Each note's spans (its parts between " … ") go to the model
(default: the packaged SmolLM2-135M-Instruct; any local causal LM with a chat template,
e.g. on a GPU), which is asked for one paragraph that uses every span exactly as written.
A rewrite is post-processing of released values, so it would be free; it is worth keeping
only where every span survives verbatim and nothing is added that the note does not say.

Measured per note: whether every span survives verbatim, the share of spans that do, and
the parenthesised years the rewrite writes that the note does not hold (a title that was
not released: the model's own knowledge or invention). Writes JSON (default
``benchmarks/results/writer_probe.json``) and prints one line per set.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from dpsynrag.models.greedy import answer_questions
from dpsynrag.models.lazy import LazyModels

PROMPT = ("Write one short paragraph that uses every phrase below exactly as written, in this "
          "order, adding only a few linking words. Phrases:\n")
SEPARATOR = " … "
YEAR = re.compile(r"\((1[89]\d\d|20\d\d)\)")
ITEM = re.compile(r"^\d+\. (.*)$")


def read_samples(path: Path) -> list[list[str]]:
    """The spans of each numbered note of a samples file."""
    notes = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = ITEM.match(line.strip())
        if match:
            notes.append([s.strip() for s in match.group(1).split(SEPARATOR) if s.strip()])
    return notes


def probe(spans: list[str], rewrite: str) -> dict[str, Any]:
    kept = sum(span in rewrite for span in spans)
    note = SEPARATOR.join(spans)
    added = sorted(set(YEAR.findall(rewrite)) - set(YEAR.findall(note)))
    return {"spans": len(spans), "kept": kept, "all_kept": kept == len(spans),
            "added_years": added, "rewrite": rewrite}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("samples", nargs="+", type=Path)
    parser.add_argument("--model", help="a local causal LM (default: the packaged SmolLM2)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--output", type=Path,
                        default=Path("benchmarks/results/writer_probe.json"))
    args = parser.parse_args(argv)
    llm = LazyModels(args.model, None, None, None).llm
    sets = []
    for path in args.samples:
        notes = read_samples(path)
        if not notes:
            print(f"{path}: no numbered notes", file=sys.stderr)
            return 2
        started = time.monotonic()
        prompts = [PROMPT + "\n".join(f"- {s}" for s in spans) for spans in notes]
        rewrites = answer_questions(llm, prompts, max_new_tokens=args.max_new_tokens)
        seconds = time.monotonic() - started
        rows = [probe(spans, rewrite) for spans, rewrite in zip(notes, rewrites, strict=True)]
        result = {
            "samples": str(path), "notes": len(rows),
            "notes_all_spans_kept": sum(bool(r["all_kept"]) for r in rows),
            "span_share_kept": round(sum(r["kept"] for r in rows)
                                     / max(1, sum(r["spans"] for r in rows)), 3),
            "notes_with_added_years": sum(bool(r["added_years"]) for r in rows),
            "seconds_per_note": round(seconds / len(rows), 2), "rows": rows}
        sets.append(result)
        print(f"{path}: {result['notes_all_spans_kept']}/{len(rows)} notes keep every span, "
              f"{result['span_share_kept']:.0%} of spans kept, "
              f"{result['notes_with_added_years']} add a year, "
              f"{result['seconds_per_note']} s a note")
    out = {"benchmark": "writer_probe", "model": args.model or "packaged SmolLM2-135M-Instruct",
           "device": str(llm.device), "prompt": PROMPT, "sets": sets}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n",
                           encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
