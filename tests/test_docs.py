"""The documentation's shape: a short front-door README, links that resolve, no issue numbers.

* ``README.md`` stays at most 10,000 bytes: everything else belongs in ``docs/``.
* Every relative markdown link in ``README.md``, ``CHANGELOG.md``, ``docs/*.md``,
  ``docs/decisions/*.md`` and ``runbooks/*.md`` points at an existing file or directory; a
  ``#anchor`` into a markdown file must name one of its headings (GitHub's slugs). Links
  inside code blocks and code spans are not links.
* ``README.md``, ``CHANGELOG.md``, ``docs/*.md`` and ``docs/decisions/*.md`` carry no tracker
  references ("issue 14", "(issue-5)", "#28"): a reader outside the tracker cannot follow
  them; say what is meant in words.
* ``docs/evaluation.md`` stays a guide of at most 300 lines: the history of the rules is in
  ``CHANGELOG.md`` and ``docs/decisions/``.

The checkers are tested on small inputs first, so a checker that finds nothing is caught.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
README_MAX_BYTES = 10_000
CHANGELOG = REPO / "CHANGELOG.md"
EVALUATION_MAX_LINES = 300

DOCS = sorted((REPO / "docs").glob("*.md"))
DECISIONS = sorted((REPO / "docs" / "decisions").glob("*.md"))
RUNBOOKS = sorted((REPO / "runbooks").glob("*.md"))
LINKED_PAGES = [README, CHANGELOG, *DOCS, *DECISIONS, *RUNBOOKS]
NO_ISSUE_PAGES = [README, CHANGELOG, *DOCS, *DECISIONS]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) or ![alt](target), target without spaces, optional "title"
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_ISSUE = re.compile(r"\bissues?[\s-]*(?:no\.?\s*)?#?\d+", re.IGNORECASE)
_HASH_NUMBER = re.compile(r"(?<![\w&/])#\d+\b")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks, code spans blanked."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a markdown text, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """``page:line: target (why)`` for every relative link of ``page`` that does not resolve."""
    text = page.read_text(encoding="utf-8")
    problems = []
    for number, line in _prose_lines(text):
        for match in _LINK.finditer(line):
            target = match.group(1)
            if _SCHEME.match(target) or target.startswith("//"):
                continue  # http:, https:, mailto: ... are not checked here
            path_part, _, anchor = target.partition("#")
            where = f"{page.relative_to(REPO) if page.is_relative_to(REPO) else page}:{number}"
            resolved = (page.parent / path_part).resolve() if path_part else page
            if not resolved.exists():
                problems.append(f"{where}: {target} (no such file)")
                continue
            checkable = anchor and resolved.is_file() and resolved.suffix == ".md"
            if checkable and anchor not in anchors(resolved.read_text(encoding="utf-8")):
                problems.append(f"{where}: {target} (no heading with anchor #{anchor})")
    return problems


def issue_references(text: str) -> list[str]:
    """Every tracker reference in the prose of a markdown text, as ``line: match``."""
    found = []
    for number, line in _prose_lines(text):
        without_targets = re.sub(r"\]\([^)]*\)", "]()", line)  # #anchors are not issues
        for pattern in (_ISSUE, _HASH_NUMBER):
            found += [f"{number}: {m.group(0)}" for m in pattern.finditer(without_targets)]
    return found


# ------------------------------------------------------------------ the checkers themselves
def test_slug_follows_github_anchors() -> None:
    assert slug("Planning a budget: `dpsynrag budget`") == "planning-a-budget-dpsynrag-budget"
    assert slug("Fail before spending, and `--dry-run`") == "fail-before-spending-and---dry-run"
    assert slug("9. From zCDP to (ε, δ): Bun–Steinke and CKS") == (
        "9-from-zcdp-to-ε-δ-bunsteinke-and-cks")
    assert slug("The accounting API (`dpsynrag.accounting`)") == (
        "the-accounting-api-dpsynragaccounting")
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_link_checker_reports_missing_files_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md) [ok](other.md#a-section) [ok](#page) [ok](https://example.org/x.md)\n"
        "[gone](missing.md) [bad anchor](other.md#no-such-section) [self](#nowhere)\n"
        "`[in a code span](missing-too.md)`\n"
        "```\n[in a code block](missing-three.md)\n```\n",
        encoding="utf-8")
    problems = broken_links(page)
    assert len(problems) == 3, problems
    assert "missing.md (no such file)" in problems[0]
    assert "#no-such-section" in problems[1]
    assert "#nowhere" in problems[2]


@pytest.mark.parametrize("text", ["see issue 14", "(Issue 15)", "the issue-5 closing note",
                                  "fixed in #28", "issues #3"])
def test_issue_pattern_catches_tracker_references(text: str) -> None:
    assert issue_references(text), text


@pytest.mark.parametrize("text", ["[Purpose](#1-purpose)", "[x](design.md#2-architecture)",
                                  "no issue in the paper", "`grep '#1'`", "&#39;"])
def test_issue_pattern_ignores_anchors_and_prose(text: str) -> None:
    assert not issue_references(text), text


# ------------------------------------------------------------------ the repository's docs
def test_readme_is_a_front_door_of_at_most_10000_bytes() -> None:
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes, over {README_MAX_BYTES}: move detail into docs/")


@pytest.mark.parametrize("pages", [DOCS, DECISIONS], ids=["docs", "docs/decisions"])
def test_docs_pages_exist_and_are_indexed(pages: list[Path]) -> None:
    assert pages
    index_page = pages[0].parent / "README.md"
    index = index_page.read_text(encoding="utf-8")
    missing = [p.name for p in pages if p.name != "README.md" and f"({p.name})" not in index]
    assert not missing, f"{index_page.relative_to(REPO)} does not list {missing}"


def test_the_evaluation_page_is_a_guide() -> None:
    lines = (REPO / "docs" / "evaluation.md").read_text(encoding="utf-8").count("\n")
    assert lines <= EVALUATION_MAX_LINES, (
        f"docs/evaluation.md has {lines} lines: history goes to CHANGELOG.md or docs/decisions/")


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", NO_ISSUE_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_docs_carry_no_issue_numbers(page: Path) -> None:
    found = issue_references(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(REPO)} names tracker issues: {found}"
