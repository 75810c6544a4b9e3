"""Lexicon packs: the word lists, cue tables and role tables of the terms mode, as data.

A *pack* is a folder of TOML files of one shape (after spaCy's ``lang/xx/`` folders and
Presidio's recognizers with their context words): ``pack.toml`` names the pack, its language
and version and the file of each *kind*; each kind's file holds the entries ``SCHEMA`` lists
for it, nothing else:

* ``roles``: ``roles`` (the roles in their public rank order), ``naming``, ``items``,
  ``described``;
* ``cues``: ``[cues]`` (one table cue -> role; a cue verb's third-person form is derived
  by ``facts.terms.cue_form``), ``[purpose]``, ``[passive]``, ``noun_cues``,
  ``saying_verbs``, ``encounter_words``, ``episode_words``;
* ``breaks``: the words that end a term (status words, adverbs, verb forms, dates, dose
  forms, ...);
* ``grammar``: function words and marks (prepositions, pronouns, list joiners, ...);
* ``names``: honorifics, family words, the glue and articles of a name;
* ``shapes``: word endings (drug stems, units, British spellings) and the alphabet.

The built-in English pack is ``dpsynrag/resources/packs/en`` (``builtin_pack_root``);
``facts.terms`` reads its lists from it (``BUILTIN_PACK``). ``load_pack`` checks a pack
against ``SCHEMA`` and refuses a bad one with a ``PackError`` of one line naming the file
and the entry ("…/cues.toml: cues.diagnosed: 'diagnosiss' is not a role of roles.toml").
Packs are public data written by hand, never derived from documents; the certificate names
the pack files with their sha256 (``accounting.public_data``: ``lexicon_pack``).
"""

from __future__ import annotations

import functools
import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, NoReturn

from dpsynrag.accounting.public_data import LEXICON_PACK, files_sha256, pack_root

__all__ = ["BUILTIN_PACK", "PACK_FILE", "RULE_ROLES", "SCHEMA", "Entry", "Pack", "PackError",
           "builtin_pack", "builtin_pack_root", "load_pack"]

#: The pack's own file: its name, language, version, description and ``[files]``.
PACK_FILE = "pack.toml"
#: The pack ``--facts-items terms`` reads (the one its certificate names).
BUILTIN_PACK = LEXICON_PACK
#: The roles the terms rule names in its code (``facts.terms``: a drug's treatment role, a
#: visit's diagnosis, a title's check): every pack's ``roles`` holds them.
RULE_ROLES = ("diagnosis", "title", "treatment")

WORDS, SEQUENCE, TABLE, TEXT = "words", "sequence", "table", "text"


@dataclass(frozen=True)
class Entry:
    """One entry of a pack file: its shape (``WORDS``: distinct strings, order kept but not
    meaningful; ``SEQUENCE``: distinct strings in a meaningful order; ``TABLE``: string ->
    string; ``TEXT``: one string), whether its strings keep their case (``cased``) or are
    marks (``marks``: punctuation, no letter needed), and what its values or keys must be:
    ``values`` "roles" (a role of ``roles.roles``) or "roles or none" (also ""), ``within``
    a (kind, entry) whose strings or table keys hold every string or key of this one;
    ``prose``: a table's values are display text (any case, spaces allowed: a note's
    labels)."""

    shape: str
    cased: bool = False
    marks: bool = False
    values: str | None = None
    within: tuple[str, str] | None = None
    prose: bool = False


#: Every kind's file and its entries (a pack holds exactly these).
SCHEMA: dict[str, dict[str, Entry]] = {
    "roles": {
        "roles": Entry(SEQUENCE),
        "naming": Entry(WORDS, within=("roles", "roles")),
        "items": Entry(WORDS, within=("roles", "roles")),
        "described": Entry(TEXT, values="roles"),
        "labels": Entry(TABLE, prose=True, within=("roles", "roles")),
        "unnamed_label": Entry(TEXT),
        "details_label": Entry(TEXT),
        "other_label": Entry(TEXT),
    },
    "cues": {
        "cues": Entry(TABLE, values="roles"),
        "purpose": Entry(TABLE, values="roles", within=("cues", "cues")),
        "passive": Entry(TABLE, values="roles or none"),
        "noun_cues": Entry(WORDS, within=("cues", "cues")),
        "saying_verbs": Entry(WORDS),
        "encounter_words": Entry(WORDS),
        "episode_words": Entry(WORDS),
    },
    "breaks": {name: Entry(WORDS) for name in (
        "status_words", "filler_words", "time_breaks", "clinical_shorthand", "adverbs",
        "irregular_verbs", "report_verbs", "months", "days", "form_words")},
    "grammar": {
        **{name: Entry(WORDS) for name in (
            "said_glue", "possessive_verbs", "list_joiners", "list_articles",
            "subject_pronouns", "object_prepositions", "prepositions", "purpose_prepositions",
            "passive_auxiliaries", "item_glue", "contraction_tails", "negated_contractions")},
        "letter_words": Entry(WORDS, cased=True),
        "label_marks": Entry(SEQUENCE, marks=True),
        "clause_dashes": Entry(WORDS, marks=True),
    },
    "names": {
        "honorifics": Entry(WORDS),
        "kin_words": Entry(WORDS),
        "name_glue": Entry(WORDS),
        "name_articles": Entry(SEQUENCE),
    },
    "shapes": {
        "drug_stems": Entry(SEQUENCE),
        "measure_units": Entry(SEQUENCE),
        "alphabet": Entry(TEXT),
        "british_endings": Entry(TABLE),
    },
}

_META = ("name", "language", "version", "description")


class PackError(ValueError):
    """A pack that is not of the pack shape: one line naming the file and the entry."""


@dataclass(frozen=True)
class Pack:
    """A loaded, checked pack: its identity and each kind's entries."""

    name: str
    language: str
    version: str
    description: str
    #: where it was read from (a path, or ``dpsynrag/resources/packs/NAME``)
    source: str
    #: file name -> sha256 of the bytes read (``pack.toml`` and each kind's file)
    file_sha256: Mapping[str, str]
    entries: Mapping[str, Mapping[str, Any]] = field(repr=False)

    @property
    def sha256(self) -> str:
        """One hash of the whole pack: sha256 of its ``sha256  file`` lines, sorted (the
        certificate's ``public_data.lexicon_pack.sha256``)."""
        return files_sha256(self.file_sha256)

    def words(self, kind: str, name: str) -> frozenset[str]:
        return frozenset(self._get(kind, name, (WORDS, SEQUENCE)))

    def sequence(self, kind: str, name: str) -> tuple[str, ...]:
        return tuple(self._get(kind, name, (SEQUENCE, WORDS)))

    def table(self, kind: str, name: str) -> dict[str, str]:
        return dict(self._get(kind, name, (TABLE,)))

    def text(self, kind: str, name: str) -> str:
        return str(self._get(kind, name, (TEXT,)))

    def _get(self, kind: str, name: str, shapes: tuple[str, ...]) -> Any:
        entry = SCHEMA[kind][name]  # KeyError: no such entry in the pack shape (a bug)
        if entry.shape not in shapes:
            raise TypeError(f"pack entry {kind}.{name} is a {entry.shape}, not a {shapes[0]}")
        return self.entries[kind][name]


def builtin_pack_root(name: str = BUILTIN_PACK) -> Traversable:
    """The folder of a pack shipped with the package (``dpsynrag/resources/packs/NAME``)."""
    return pack_root(name)


@functools.cache
def builtin_pack(name: str = BUILTIN_PACK) -> Pack:
    """A pack shipped with the package, loaded and checked once."""
    return load_pack(builtin_pack_root(name), source=f"dpsynrag/resources/packs/{name}")


def load_pack(root: Traversable | Path | str, *, source: str | None = None) -> Pack:
    """Read and check the pack in folder ``root`` (module docstring); ``source`` is how
    messages and the certificate name the folder (default: ``root`` itself)."""
    folder: Traversable = Path(root) if isinstance(root, str) else root
    where = source if source is not None else str(root)
    hashes: dict[str, str] = {}
    meta = _read(folder, where, PACK_FILE, hashes)
    for key in _META:
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            _fail(where, PACK_FILE, key, "missing or not a non-empty string")
    files = meta.get("files")
    if not isinstance(files, dict):
        _fail(where, PACK_FILE, "files", "missing or not a table (kind = file name)")
    for key in meta:
        if key not in (*_META, "files"):
            _fail(where, PACK_FILE, key, "unknown entry")
    for kind in files:
        if kind not in SCHEMA:
            _fail(where, PACK_FILE, f"files.{kind}", f"unknown kind (kinds: {', '.join(SCHEMA)})")
    entries: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    for kind in SCHEMA:
        name = files.get(kind)
        if not isinstance(name, str) or not name.endswith(".toml") or "/" in name \
                or "\\" in name or name.startswith(".") or name == PACK_FILE:
            _fail(where, PACK_FILE, f"files.{kind}", "missing or not a file name of this "
                  "folder ending in .toml")
        if name in names.values():
            _fail(where, PACK_FILE, f"files.{kind}", f"{name} is named twice")
        names[kind] = name
        entries[kind] = _read(folder, where, name, hashes)
    for kind, schema in SCHEMA.items():
        data = entries[kind]
        for key in data:
            if key not in schema:
                _fail(where, names[kind], key, "unknown entry")
        for key, entry in schema.items():
            if key not in data:
                _fail(where, names[kind], key, "missing entry")
            data[key] = _checked(where, names[kind], key, entry, data[key])
    _check_references(where, names, entries)
    return Pack(name=meta["name"], language=meta["language"], version=meta["version"],
                description=meta["description"], source=where, file_sha256=hashes,
                entries=entries)


def _fail(where: str, file: str, entry: str, problem: str) -> NoReturn:
    message = f"{where.rstrip('/')}/{file}: {entry}: {problem}"
    raise PackError(" ".join(message.split()))  # one line


def _read(folder: Traversable, where: str, name: str, hashes: dict[str, str]) -> dict[str, Any]:
    try:
        data = folder.joinpath(name).read_bytes()
    except OSError as error:
        _fail(where, name, "(file)", f"cannot be read ({type(error).__name__})")
    hashes[name] = hashlib.sha256(data).hexdigest()
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        _fail(where, name, "(file)", "not UTF-8")
    except tomllib.TOMLDecodeError as error:
        _fail(where, name, "(file)", f"not TOML: {error}")
    raise AssertionError("unreachable")  # pragma: no cover


def _string_problem(value: object, entry: Entry) -> str | None:
    if not isinstance(value, str) or not value:
        return "not a non-empty string"
    if any(c.isspace() for c in value):
        return f"{value!r} holds a space (one word a string)"
    if not entry.cased and value != value.lower():
        return f"{value!r} is not lowercase"
    if not entry.marks and not any(c.isalpha() for c in value):
        return f"{value!r} holds no letter"
    return None


def _checked(where: str, file: str, key: str, entry: Entry, value: Any) -> Any:
    if entry.shape == TEXT:
        if not isinstance(value, str) or not value:
            _fail(where, file, key, "not a non-empty string")
        return value
    if entry.shape == TABLE:
        if not isinstance(value, dict):
            _fail(where, file, key, "not a table")
        for name, item in value.items():
            problem = _string_problem(name, entry)
            if problem is not None:
                _fail(where, file, f"{key}.{name}", f"key {problem}")
            if not isinstance(item, str) or (entry.prose and not item.strip()):
                _fail(where, file, f"{key}.{name}", "value not a non-empty string")
            if entry.prose:
                continue
            if entry.values is None and _string_problem(item, entry) is not None:
                _fail(where, file, f"{key}.{name}", f"value {_string_problem(item, entry)}")
        return dict(value)
    if not isinstance(value, list):
        _fail(where, file, key, "not a list of strings")
    seen: set[str] = set()
    for k, item in enumerate(value):
        problem = _string_problem(item, entry)
        if problem is not None:
            _fail(where, file, f"{key}[{k}]", problem)
        if item in seen:
            _fail(where, file, f"{key}[{k}]", f"{item!r} is listed twice")
        seen.add(item)
    return tuple(value)


def _check_references(where: str, names: Mapping[str, str],
                      entries: Mapping[str, Mapping[str, Any]]) -> None:
    """Roles named anywhere are roles of ``roles.roles``; ``within`` entries hold only what
    the entry they name holds; the rule's own roles are there."""
    roles = entries["roles"]["roles"]
    if not roles:
        _fail(where, names["roles"], "roles", "no role")
    for role in RULE_ROLES:
        if role not in roles:
            _fail(where, names["roles"], "roles", f"{role!r} is missing (the terms rule names "
                  f"{', '.join(RULE_ROLES)})")
    for kind, schema in SCHEMA.items():
        for key, entry in schema.items():
            value = entries[kind][key]
            if entry.values is not None:
                allowed = set(roles) | ({""} if entry.values == "roles or none" else set())
                items = value.items() if isinstance(value, dict) else [(None, value)]
                for name, role in items:
                    if role not in allowed:
                        label = key if name is None else f"{key}.{name}"
                        _fail(where, names[kind], label, f"{role!r} is not a role of "
                              f"{names['roles']}")
            if entry.within is not None:
                other_kind, other_key = entry.within
                known = entries[other_kind][other_key]
                for name in value:
                    if name not in known:
                        label = f"{key}.{name}" if isinstance(value, dict) else key
                        _fail(where, names[kind], label, f"{name!r} is not in "
                              f"{names[other_kind]}'s {other_key}")
