"""The packaged prompt templates (``dpsynrag/prompts/<name>.txt``) and their placeholder."""

from __future__ import annotations

from importlib import resources

__all__ = ["PLACEHOLDER", "load_prompt"]

PLACEHOLDER = "{document}"
"""Where a template takes its one document (replaced verbatim, never by ``str.format``)."""


def load_prompt(name: str) -> str:
    """A packaged prompt template as text; the file's final newline is not part of it.

    ``ValueError`` for a name that is not a plain prompt name or not packaged.
    """
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"not a prompt name: {name!r}")
    try:
        text = resources.files("dpsynrag.prompts").joinpath(f"{name}.txt").read_text("utf-8")
    except FileNotFoundError:
        raise ValueError(f"no packaged prompt named {name!r}") from None
    return text[:-1] if text.endswith("\n") else text
