"""The public vocabulary V of the keyword histogram (DP-SynRAG stage a).

V is the ``web2`` English word list shipped by the ``english-words`` package (the same Unix
word list as NLTK's ``words`` corpus), lowercased and alphabetic, laid out once as an NLTK
``words`` corpus in the cache (``<cache root>/vocabulary/<key>/corpora/words/en``) and read
back through ``nltk.corpus.reader.WordListCorpusReader``, minus the project's stopword list
(``dpsynrag/resources/stopwords.txt``). Nothing is ever downloaded.

V is public by construction: it depends only on an installed package and a file kept in this
project, never on the private documents. Its ``sha256`` (of the newline-joined sorted words)
goes into the certificate, so a verifier can tell exactly which V a histogram was over.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dpsynrag.io.paths import cache_root

#: Bump when the on-disk layout or the word selection changes.
VOCABULARY_FORMAT = 1
SOURCES = ("web2",)
_MANIFEST = "dpsynrag_vocabulary.json"


@dataclass(frozen=True, eq=False)
class PublicVocabulary:
    """The public keyword vocabulary: sorted unique words, their positions, and a digest.

    Equality and hashing are by identity (the cached instance is shared); compare ``sha256``
    to compare contents.
    """

    words: tuple[str, ...]
    index: dict[str, int]
    sha256: str

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def __iter__(self) -> Iterator[str]:
        return iter(self.words)

    @classmethod
    def from_words(cls, words: Iterable[str]) -> PublicVocabulary:
        """A vocabulary over ``words`` (deduplicated and sorted). Tests and custom V only."""
        ordered = tuple(sorted(set(words)))
        for word in ordered:
            if not (isinstance(word, str) and word.isascii() and word.isalpha()
                    and word.islower()):
                raise ValueError("vocabulary words must be lowercase ASCII letters")
        digest = hashlib.sha256("\n".join(ordered).encode()).hexdigest()
        return cls(words=ordered, index={w: i for i, w in enumerate(ordered)}, sha256=digest)


@functools.lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """The project's English stopword list (public; one word a line, ``#`` comments), read
    once per process."""
    text = resources.files("dpsynrag.resources").joinpath("stopwords.txt").read_text("utf-8")
    words = (line.split("#", 1)[0].strip().lower() for line in text.splitlines())
    return frozenset(w for w in words if w)


@functools.lru_cache(maxsize=1)
def public_vocabulary() -> PublicVocabulary:
    """The public vocabulary, built once per cache and loaded once per process."""
    return load_public_vocabulary()


def load_public_vocabulary(cache_dir: str | os.PathLike[str] | None = None) -> PublicVocabulary:
    """Build (first time) and read the NLTK ``words`` corpus, minus the stopwords. Uncached."""
    corpus_root = _words_corpus(cache_dir)
    import nltk.data
    from nltk.corpus.reader import WordListCorpusReader

    # NLTK (>= 3.9.3) refuses to read outside its data roots: register this corpus's root,
    # which holds nothing but the public word list written by _words_corpus.
    data_root = str(corpus_root.parent.parent)
    if data_root not in nltk.data.path:
        nltk.data.path.append(data_root)
    reader = WordListCorpusReader(str(corpus_root), ["en"], encoding="utf-8")
    excluded = stopwords()
    words = {w for w in reader.words("en") if w not in excluded}
    return PublicVocabulary.from_words(words)


def _source_key() -> tuple[str, dict[str, object]]:
    spec: dict[str, object] = {
        "format": VOCABULARY_FORMAT,
        "package": "english-words",
        "version": importlib.metadata.version("english-words"),
        "sources": list(SOURCES),
        "lower": True,
        "alpha": True,
    }
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]
    return key, spec


def _words_corpus(cache_dir: str | os.PathLike[str] | None) -> Path:
    """The ``corpora/words`` directory holding ``en``; written once, verified on every read."""
    key, spec = _source_key()
    base = cache_root(cache_dir) / "vocabulary"
    target = base / key
    corpus = target / "corpora" / "words"
    if _valid(target):
        return corpus
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{key[:12]}-", suffix=".partial"))
    except OSError:
        # An unwritable cache: build into a private temporary directory for this process.
        tmp = Path(tempfile.mkdtemp(prefix="dpsynrag-vocabulary-"))
        _write_corpus(tmp, spec)
        return tmp / "corpora" / "words"
    try:
        _write_corpus(tmp, spec)
        with contextlib.suppress(OSError):
            if target.exists() and not _valid(target):
                shutil.rmtree(target)  # a damaged cache entry: replace it
        try:
            os.rename(tmp, target)
        except OSError:
            if not _valid(target):  # another process may have finished the same build first
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return corpus


def _write_corpus(directory: Path, spec: dict[str, object]) -> None:
    from english_words import get_english_words_set

    words: set[str] = set()
    for source in SOURCES:
        words |= get_english_words_set([source], lower=True, alpha=True)
    ordered = sorted(w for w in words if w.isascii() and w.isalpha())
    payload = ("\n".join(ordered) + "\n").encode("utf-8")
    corpus = directory / "corpora" / "words"
    corpus.mkdir(parents=True)
    (corpus / "en").write_bytes(payload)
    (corpus / "README").write_text(
        "Public English word list (english-words package, web2), one word a line, written by "
        "dpsynrag. Not derived from any private data.\n")
    manifest = dict(spec, file_sha256=hashlib.sha256(payload).hexdigest(), words=len(ordered))
    (directory / _MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))


def _valid(target: Path) -> bool:
    """True if ``target`` holds a complete corpus whose bytes match its manifest."""
    try:
        manifest = json.loads((target / _MANIFEST).read_text())
        payload = (target / "corpora" / "words" / "en").read_bytes()
    except (OSError, ValueError):
        return False
    return manifest.get("file_sha256") == hashlib.sha256(payload).hexdigest()
