"""Prompts of the query-time mechanisms (all public).

They match the RAG prompts (:mod:`dpsynrag.prompts.rag`): one numbered context passage, the
question, an instruction. The no-context prompt is exactly the non-RAG baseline's
(:func:`dpsynrag.prompts.rag.no_context_prompt`; DP-KSA's fallback must be identical to it).
"""

from __future__ import annotations

from collections.abc import Iterable

from dpsynrag.prompts.rag import answer_prompt
from dpsynrag.prompts.templates import PLACEHOLDER

__all__ = [
    "collapse",
    "document_prompt",
    "keyword_prompt",
    "sanitize_question",
    "single_document_prompt",
]


def sanitize_question(question: str) -> str:
    """Strip the question and neutralise the engine's placeholder inside it."""
    return str(question).strip().replace(PLACEHOLDER, "(document)")


def collapse(text: str) -> str:
    """Whitespace collapsed to single spaces, as the RAG prompt shows passages."""
    return " ".join(str(text).split())


def document_prompt(question: str, instruction: str) -> str:
    """One-document answer prompt with the engine's ``{document}`` placeholder left in it."""
    return answer_prompt(question, [PLACEHOLDER], instruction=instruction)


def single_document_prompt(question: str, document: str, instruction: str) -> str:
    """The same prompt with the document filled in (DP-KSA's per-document answers)."""
    return answer_prompt(question, [collapse(document)], instruction=instruction)


def keyword_prompt(question: str, keywords: Iterable[str], instruction: str) -> str:
    """DP-KSA's final prompt: the question and the released keywords (alphabetical)."""
    words = ", ".join(sorted(keywords))
    return (f"Question: {question.strip()}\nKeywords that may help: {words}\n"
            f"{instruction.strip()}")
