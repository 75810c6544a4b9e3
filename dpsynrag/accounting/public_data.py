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
  (``io.person_names``): the facts mode's terms tell a person's name from a title of
  ordinary words. Hashed as read: the sorted lowercase names, one a line;
* ``lexicon_pack``: the terms mode's lexicon pack, ``dpsynrag/resources/packs/en``
  (``facts.packs``: every word list, cue table and role table of ``facts.terms``; the roles
  a note of a terms or open build writes). Each file is named with its sha256 (``files``:
  ``pack.toml`` and the files it names) and ``sha256`` is the hash of those
  ``sha256  file`` lines, sorted (``files_sha256``); verify names the files that differ.

The public vocabulary V itself is the certificate's ``vocabulary_sha256``. Nothing here reads
a document.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

__all__ = ["LEXICON_PACK", "PUBLIC_LISTS", "check_public_data", "files_sha256", "pack_root",
           "public_data", "public_lists_for"]

STOPWORDS_FILE = "stopwords.txt"
#: The lexicon pack of the terms mode (``facts.packs.BUILTIN_PACK``).
LEXICON_PACK = "en"

#: What each list shapes, in words (the certificate's ``shapes``).
PUBLIC_LISTS = {
    "stopwords": "cut from the public vocabulary; break terms and phrases; public tokens of "
                 "the n-gram release",
    "word_frequency_prior": "the rarity of a word: statistical keywords, terms and phrases",
    "given_names": "person names among a document's terms (given names)",
    "surnames": "person names among a document's terms (surnames)",
    "lexicon_pack": "the terms mode's word lists, cue tables and role tables: a document's "
                    "terms and their roles, the roles a note writes",
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
    if generate == "facts" and items in ("terms", "open"):
        names.append("lexicon_pack")
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
    from dpsynrag.io.person_names import given_names, surnames

    names = given_names() if which == "given_names" else surnames()
    return {"source": f"{_package('faker')} person providers, every locale (lowercase, sorted, "
                      "one a line)",
            "sha256": _sha256_lines(names)}


def pack_root(name: str) -> Traversable:
    """The folder of a lexicon pack shipped with the package (``resources/packs/NAME``)."""
    return resources.files("dpsynrag.resources").joinpath("packs", name)


def files_sha256(file_sha256: Mapping[str, str]) -> str:
    """One hash of a pack's files: the sha256 of its ``sha256  file`` lines, sorted by file
    (as ``sha256sum`` writes them)."""
    lines = "".join(f"{digest}  {name}\n" for name, digest in sorted(file_sha256.items()))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def _lexicon_pack() -> dict[str, Any]:
    """The installed lexicon pack's files, each with its sha256: ``pack.toml`` and the files
    its ``[files]`` names (the pack's checks are ``facts.packs.load_pack``'s)."""
    root = pack_root(LEXICON_PACK)
    meta_bytes = root.joinpath("pack.toml").read_bytes()
    meta = tomllib.loads(meta_bytes.decode("utf-8"))
    files = meta.get("files")
    if not isinstance(files, dict) or not all(isinstance(f, str) for f in files.values()):
        raise ValueError("pack.toml names no files")
    hashes = {"pack.toml": hashlib.sha256(meta_bytes).hexdigest()}
    for name in sorted(set(files.values())):
        hashes[name] = hashlib.sha256(root.joinpath(name).read_bytes()).hexdigest()
    return {"source": f"dpsynrag/resources/packs/{LEXICON_PACK} (pack {meta.get('name')} "
                      f"version {meta.get('version')}, language {meta.get('language')})",
            "sha256": files_sha256(hashes), "files": hashes}


_IDENTITIES: dict[str, Callable[[], dict[str, Any]]] = {
    "stopwords": _stopwords,
    "word_frequency_prior": _prior,
    "given_names": lambda: _names("given_names"),
    "surnames": lambda: _names("surnames"),
    "lexicon_pack": _lexicon_pack,
}


def public_data(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The certificate's ``public_data``: each list a build of ``config`` reads, with what it
    shapes, its source (package and version, or file) and the sha256 of what was read."""
    return {name: {"shapes": PUBLIC_LISTS[name], **_IDENTITIES[name]()}
            for name in public_lists_for(config)}


def _files_differ(installed: Mapping[str, Any], entry: Mapping[str, Any]) -> str:
    """For a pack: the files whose sha256 differs between the installed pack and the
    certificate's entry (", files that differ: cues.toml"); "" for a list of one file."""
    here, there = installed.get("files"), entry.get("files")
    if not isinstance(here, dict) or not isinstance(there, dict):
        return ""
    differ = sorted(name for name in set(here) | set(there)
                    if here.get(name) != there.get(name))
    return f" (files that differ: {', '.join(differ)})" if differ else ""


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
        except (ImportError, OSError, KeyError, ValueError) as error:
            problems.append(f"public data: {name} cannot be checked here ({type(error).__name__}"
                            f"); install the build's packages ({entry.get('source')})")
            continue
        if installed["sha256"] != entry["sha256"]:
            problems.append(f"public data: {name}: the installed list ({installed['source']}) "
                            f"does not match the build's ({entry.get('source')}): sha256 "
                            f"{installed['sha256'][:16]}... here, {entry['sha256'][:16]}... in "
                            f"the certificate{_files_differ(installed, entry)}; verify where "
                            "the build's packages are installed")
    if prior is not None and isinstance(recorded, dict) \
            and isinstance(recorded.get("word_frequency_prior"), dict) \
            and recorded["word_frequency_prior"].get("sha256") != prior:
        problems.append("public data: word_frequency_prior and the config's "
                        "keyword_prior_sha256 differ")
    return problems
