"""Template sets read from TOML files: ``dpsynrag dataset conditions|films --templates PATH``.

The ``conditions`` and ``films`` generators (:mod:`dpsynrag.eval.datasets_ordinary`) build in
one set of note and query templates each, the development set ``dev``. Any other set is a
file of one generator's templates::

    description = "what the set is for, in one line"
    notes = ["{name}, {age}: {symptoms} ... {condition} ... Dr {doctor} ... {treatment}", ...]
    queries = ["I have {symptoms}. What is it?", ...]

``PATH`` names the file, or a folder holding ``<kind>.toml``. The sets of past measurements
lie outside the package, in the repository's ``benchmarks/sets/<variant>/`` (its README.md).

A file is checked whole before anything is generated: the three keys and no other, lists
of strings that are not empty, and in every template only the placeholders its generator
fills (:data:`PLACEHOLDERS`), those it needs among them (a note names its unit's person and
holds its answer; a query describes the symptoms or the plot). A bad file raises
:class:`TemplateFileError`, one line naming the file and the problem.
"""

from __future__ import annotations

import string
import tomllib
from pathlib import Path

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["PLACEHOLDERS", "TemplateFileError", "load_template_set", "template_file"]

#: kind -> "notes" or "queries" -> (the placeholders every template must hold, all those the
#: generator fills). The generators of :mod:`dpsynrag.eval.datasets_ordinary` fill exactly
#: these (tests/test_datasets_ordinary.py checks every set against them).
PLACEHOLDERS: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "conditions": {
        "notes": (("name", "condition"),
                  ("name", "age", "date", "symptoms", "doctor", "condition", "treatment")),
        "queries": (("symptoms",), ("symptoms", "asker")),
    },
    "films": {
        "notes": (("name", "title"),
                  ("name", "title", "date", "genre", "plot", "director", "stars")),
        "queries": (("plot",), ("plot", "asker", "genre")),
    },
}
_KEYS = ("description", "notes", "queries")


class TemplateFileError(ValueError):
    """A template file that cannot be read or would not make a valid set: ``"<file>:
    <problem>"``, one line."""


def template_file(path: str | Path, kind: str) -> Path:
    """The file that ``path`` names for ``kind``: ``<kind>.toml`` in it when it is a folder,
    else ``path`` itself."""
    given = Path(path)
    return given / f"{kind}.toml" if given.is_dir() else given


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _braced(names: tuple[str, ...]) -> str:
    return ", ".join(f"{{{n}}}" for n in names)


def _check_template(template: str, kind: str, part: str) -> str | None:
    """The problem of one template, or None."""
    required, allowed = PLACEHOLDERS[kind][part]
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion
                  in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        return f"not a template ({_one_line(error)}; write a literal brace as {{{{ or }}}})"
    for name, spec, conversion in fields:
        if name not in allowed:
            return (f"unknown placeholder {{{name}}} ({kind} {part} are filled with "
                    f"{_braced(allowed)})")
        if spec or conversion:
            return f"placeholder {{{name}}} has a format; write it bare"
    missing = tuple(n for n in required if n not in {name for name, _, _ in fields})
    if missing:
        return (f"no {_braced(missing)} (every {kind} {part[:-1]} template needs "
                f"{_braced(required)})")
    return None


def load_template_set(path: str | Path, kind: str) -> TemplateSet:
    """The note and query templates of the ``kind`` generator in the TOML file ``path`` (or
    ``<kind>.toml`` in the folder ``path``), checked as the module docstring says."""
    if kind not in PLACEHOLDERS:
        raise ValueError(f"kind must be one of {', '.join(PLACEHOLDERS)}")
    file = template_file(path, kind)

    def bad(problem: str) -> TemplateFileError:
        return TemplateFileError(f"{file}: {problem}")

    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise bad("no such file") from None
    except UnicodeDecodeError:
        raise bad("not UTF-8 text") from None
    except OSError as error:
        raise bad(_one_line(error.strerror or error)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise bad(f"not TOML ({_one_line(error)})") from None
    for key in data:
        if key not in _KEYS:
            raise bad(f"unknown key {key!r} (a template file holds {', '.join(_KEYS)})")
    for key in _KEYS:
        if key not in data:
            raise bad(f"missing key {key!r}")
    description = data["description"]
    if not isinstance(description, str) or not description.strip():
        raise bad("description must be a string that says what the set is for")
    parts: dict[str, tuple[str, ...]] = {}
    for part in ("notes", "queries"):
        value = data[part]
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise bad(f"{part} must be a list of strings")
        if not value:
            raise bad(f"{part} is empty")
        for number, template in enumerate(value, start=1):
            problem = _check_template(template, kind, part)
            if problem:
                raise bad(f"{part}, template {number}: {problem}")
        parts[part] = tuple(value)
    return TemplateSet(notes=parts["notes"], queries=parts["queries"],
                       description=description)
