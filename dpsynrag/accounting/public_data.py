"""The public lists that shape a document's terms, keywords or n-grams, named and hashed for
the certificate (issue 58, item 5).

A document's terms are a rule of that document and PUBLIC data alone; the certificate names
each public list the build's mode reads and the sha256 of what it read, so a reviewer can
tell exactly which lists those were, and ``verify`` hashes the installed ones again:

* ``stopwords``: ``dpsynrag/resources/stopwords.txt`` (every mode: it is cut from the public
  vocabulary V, breaks terms and phrases, and marks the n-gram mode's public tokens);
* ``word_frequency_prior``: wordfreq's English list (``available_languages("best")["en"]``,
  the file ``zipf_frequency`` and ``get_frequency_dict`` load): statistical keywords and the
  facts mode's terms and phrases (rarity);
* ``given_names`` and ``surnames``: Faker's person providers, every locale
  (``facts.person_names``): the facts mode's terms tell a person's name from a title of
  ordinary words. Hashed as read: the sorted lowercase names, one a line.

The public vocabulary V itself is the certificate's ``vocabulary_sha256``. Nothing here reads
a document.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = ["PUBLIC_LISTS", "check_public_data", "public_data", "public_lists_for"]

STOPWORDS_FILE = "stopwords.txt"

#: What each list shapes, in words (the certificate's ``shapes``).
PUBLIC_LISTS = {
    "stopwords": "cut from the public vocabulary; break terms and phrases; public tokens of "
                 "the n-gram release",
    "word_frequency_prior": "the rarity of a word: statistical keywords, terms and phrases",
    "given_names": "person names among a document's terms (given names)",
    "surnames": "person names among a document's terms (surnames)",
}


def public_lists_for(config: Mapping[str, Any]) -> list[str]:
    """The names of the public lists a build of ``config`` (its public options) reads."""
    generate = config.get("generate", "tokens")
    names = ["stopwords"]
    items = config.get("facts_items", "terms")
    if (generate == "facts" and items != "ngrams") or config.get("keywords") == "statistical":
        names.append("word_frequency_prior")
    if generate == "facts" and items == "terms":
        names += ["given_names", "surnames"]
    return names


def _sha256_lines(words: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(words)).encode("utf-8")).hexdigest()


def _package(name: str) -> str:
    try:
        return f"{name} {version(name)}"
    except PackageNotFoundError:
        return f"{name} (not installed)"


def _stopwords() -> dict[str, str]:
    data = resources.files("dpsynrag.resources").joinpath(STOPWORDS_FILE).read_bytes()
    return {"source": f"dpsynrag/resources/{STOPWORDS_FILE}",
            "sha256": hashlib.sha256(data).hexdigest()}


def _prior() -> dict[str, str]:
    from wordfreq import available_languages

    from dpsynrag.io.output_files import sha256_file

    return {"source": f"{_package('wordfreq')} zipf_frequency(en), wordlist 'best'",
            "sha256": sha256_file(Path(available_languages("best")["en"]))}


def _names(which: str) -> dict[str, str]:
    from dpsynrag.facts.person_names import given_names, surnames

    names = given_names() if which == "given_names" else surnames()
    return {"source": f"{_package('faker')} person providers, every locale (lowercase, sorted, "
                      "one a line)",
            "sha256": _sha256_lines(names)}


_IDENTITIES: dict[str, Callable[[], dict[str, str]]] = {
    "stopwords": _stopwords,
    "word_frequency_prior": _prior,
    "given_names": lambda: _names("given_names"),
    "surnames": lambda: _names("surnames"),
}


def public_data(config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The certificate's ``public_data``: each list a build of ``config`` reads, with what it
    shapes, its source (package and version, or file) and the sha256 of what was read."""
    return {name: {"shapes": PUBLIC_LISTS[name], **_IDENTITIES[name]()}
            for name in public_lists_for(config)}


def check_public_data(recorded: Any, config: Mapping[str, Any], *,
                      required: bool) -> list[str]:
    """Problems of a certificate's ``public_data`` against the installed lists: a list named
    whose installed content has another sha256, an unknown or malformed entry and, when
    ``required`` (format 2 certificates), a list the build's mode reads that is not named. A
    format 1 certificate has none: only its config's ``keyword_prior_sha256`` is checked."""
    problems: list[str] = []
    entries: dict[str, Any] = {}
    if recorded is None:
        if required:
            problems.append("public data: the certificate names no public list (stopwords, "
                            "word-frequency prior, name lists)")
    elif not isinstance(recorded, dict):
        problems.append("public data: malformed (not an object)")
    else:
        entries = dict(recorded)
    if required:
        for name in public_lists_for(config):
            if name not in entries:
                problems.append(f"public data: {name} shapes this build's terms but the "
                                "certificate does not name it")
    prior = config.get("keyword_prior_sha256")
    if prior is not None and "word_frequency_prior" not in entries:
        entries["word_frequency_prior"] = {"sha256": prior, "source": config.get(
            "keyword_prior")}
    for name, entry in sorted(entries.items()):
        identity = _IDENTITIES.get(name)
        if identity is None:
            problems.append(f"public data: unknown public list {name!r}")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            problems.append(f"public data: {name}: malformed entry")
            continue
        try:
            installed = identity()
        except (ImportError, OSError, KeyError) as error:
            problems.append(f"public data: {name} cannot be checked here ({type(error).__name__}"
                            f"); install the build's packages ({entry.get('source')})")
            continue
        if installed["sha256"] != entry["sha256"]:
            problems.append(f"public data: {name}: the installed list ({installed['source']}) "
                            f"does not match the build's ({entry.get('source')}): sha256 "
                            f"{installed['sha256'][:16]}... here, {entry['sha256'][:16]}... in "
                            "the certificate; verify where the build's packages are installed")
    if prior is not None and isinstance(recorded, dict) \
            and isinstance(recorded.get("word_frequency_prior"), dict) \
            and recorded["word_frequency_prior"].get("sha256") != prior:
        problems.append("public data: word_frequency_prior and the config's "
                        "keyword_prior_sha256 differ")
    return problems
