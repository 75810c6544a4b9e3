"""The RAG answer prompts: numbered context passages, the question, an instruction.

The evaluation's RAG and non-RAG baselines use them, and the query-time mechanisms build on
them (:mod:`dpsynrag.prompts.query`) so that a mechanism's answers differ from plain RAG only
by the mechanism.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_INSTRUCTION", "answer_prompt", "no_context_prompt"]

DEFAULT_INSTRUCTION = "Answer with the name of the disease only."


def _context_block(contexts: Sequence[str]) -> str:
    return "\n".join(f"[{i}] {' '.join(str(c).split())}" for i, c in enumerate(contexts, 1))


def answer_prompt(question: str, contexts: Sequence[str], *,
                  instruction: str = DEFAULT_INSTRUCTION) -> str:
    """The user message: numbered context passages, then the question and ``instruction``.

    Whitespace inside each passage is collapsed to single spaces. With no contexts this is
    :func:`no_context_prompt`.
    """
    if isinstance(contexts, str):
        raise TypeError("contexts must be a sequence of passages, not a string")
    if not contexts:
        return no_context_prompt(question, instruction=instruction)
    return (f"Context:\n{_context_block(contexts)}\n\n"
            f"Question: {question.strip()}\n{instruction.strip()}")


def no_context_prompt(question: str, instruction: str = DEFAULT_INSTRUCTION) -> str:
    """The user message without retrieval: the question and ``instruction``."""
    return f"Question: {question.strip()}\n{instruction.strip()}"
