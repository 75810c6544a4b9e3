"""Print the questions of a dataset's queries.jsonl with the given ids, one per line.

``make demo`` asks three of the questions ``dpsynrag dataset`` wrote (their answers are in
the same file): ``python examples/demo/questions.py QUERIES.jsonl q-0013 q-0020``.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: questions.py QUERIES.jsonl ID [ID ...]", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        questions = {row["id"]: row["question"] for row in map(json.loads, handle)}
    missing = [qid for qid in argv[1:] if qid not in questions]
    if missing:
        print(f"questions.py: {argv[0]} has no query {', '.join(missing)}", file=sys.stderr)
        return 2
    for qid in argv[1:]:
        print(questions[qid])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
