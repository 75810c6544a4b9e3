"""Normalisation of every input text (see :func:`normalise_text`)."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalise_text"]

_HS = "\t\x0b\x0c \xa0\u1680\u2000-\u200a\u202f\u205f\u3000\ufeff"  # horizontal spaces
_HSPACE = re.compile(f"[{_HS}]{{2,}}|[{_HS.replace(' ', '')}]")  # runs of 2+, or not " "
_SPACES = re.compile(r"  +")
_TRAILING = re.compile(r"[ \t]+\n")
_MANY_NEWLINES = re.compile(r"\n(?: ?\n){2,}")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")
_LINE_BREAKS = re.compile(r"\r\n?|[\x85\u2028\u2029]")


def normalise_text(text: str) -> str:
    """NFC, LF newlines, collapsed horizontal whitespace, at most one blank line, stripped.

    CRLF, CR, NEL and the Unicode line/paragraph separators become LF; other control
    characters become spaces; runs of horizontal whitespace (space, tab, NBSP, the Unicode
    spaces, BOM): one character stays one space, a run of two or more or a tab becomes one
    tab (columns of a record exported from a spreadsheet, a billing system or a slide deck
    are parted by a tab or by several spaces, and the facts rules read a tab as a field
    break: ``facts.phrases.scan_tokens``); trailing spaces and tabs of each line are
    removed (leading ones, i.e. indentation, are kept as one tab);
    several blank lines collapse to one (paragraphs carry structure the LLM can use); the
    whole text is stripped.
    """
    text = unicodedata.normalize("NFC", text)
    if not text.replace("\n", "").isprintable():  # fast path: only " " and LF are spaces
        text = _LINE_BREAKS.sub("\n", text)
        text = _CONTROL.sub(" ", text)
        text = _HSPACE.sub(_one_space, text)
    elif "  " in text:
        text = _SPACES.sub("\t", text)
    if " \n" in text or "\t\n" in text:
        text = _TRAILING.sub("\n", text)
    if "\n\n" in text:
        text = _MANY_NEWLINES.sub("\n\n", text)
    return text.strip()


def _one_space(run: re.Match[str]) -> str:
    """One tab for a run of two or more horizontal whitespace characters or a tab, else one
    space."""
    return "\t" if len(run.group()) > 1 or "\t" in run.group() else " "
