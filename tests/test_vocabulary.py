"""The public vocabulary: the english-words web2 list read as an NLTK words corpus, minus the
project's stopwords; sorted, stable, cached, and rebuilt when its cache is damaged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dpsynrag.transforms.vocabulary import (
    PublicVocabulary,
    load_public_vocabulary,
    public_vocabulary,
    stopwords,
)


@pytest.fixture(scope="module")
def vocab() -> PublicVocabulary:
    return public_vocabulary()


def test_stopword_list_is_clean() -> None:
    words = stopwords()
    assert 150 <= len(words) <= 400
    assert {"the", "and", "of", "which", "would", "x"} <= words
    assert all(w.isascii() and w.isalpha() and w.islower() for w in words)
    assert not {"patient", "fever", "movie", "court"} & words


def test_vocabulary_is_sorted_unique_and_indexed(vocab: PublicVocabulary) -> None:
    assert 200_000 < len(vocab) < 240_000
    assert list(vocab.words) == sorted(set(vocab.words))
    assert all(vocab.index[w] == i for i, w in enumerate(vocab.words))
    assert len(vocab.index) == len(vocab)
    assert all(w.isascii() and w.isalpha() and w.islower() for w in vocab.words)


def test_vocabulary_excludes_stopwords(vocab: PublicVocabulary) -> None:
    assert not stopwords() & set(vocab.words)
    for word in ("the", "and", "which", "a", "z"):
        assert word not in vocab
    for word in ("patient", "fever", "hypertension", "insulin", "movie", "titanic"):
        assert word in vocab


def test_digest_names_the_word_list(vocab: PublicVocabulary) -> None:
    expected = hashlib.sha256("\n".join(vocab.words).encode()).hexdigest()
    assert vocab.sha256 == expected
    assert public_vocabulary() is vocab  # cached per process


def test_cold_build_matches_and_is_reused(tmp_path: Path, vocab: PublicVocabulary) -> None:
    cold = load_public_vocabulary(tmp_path)
    assert cold.sha256 == vocab.sha256 and cold.words == vocab.words
    (entry,) = (tmp_path / "vocabulary").iterdir()
    corpus = entry / "corpora" / "words" / "en"
    manifest = json.loads((entry / "dpsynrag_vocabulary.json").read_text())
    assert manifest["file_sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert not [p for p in (tmp_path / "vocabulary").iterdir() if p.name.endswith(".partial")]
    mtime = corpus.stat().st_mtime_ns
    assert load_public_vocabulary(tmp_path).sha256 == vocab.sha256
    assert corpus.stat().st_mtime_ns == mtime  # read, not rebuilt


def test_damaged_cache_is_rebuilt(tmp_path: Path, vocab: PublicVocabulary) -> None:
    load_public_vocabulary(tmp_path)
    (entry,) = (tmp_path / "vocabulary").iterdir()
    corpus = entry / "corpora" / "words" / "en"
    corpus.write_text("privatename\n")
    assert load_public_vocabulary(tmp_path).sha256 == vocab.sha256


def test_from_words_for_custom_vocabularies() -> None:
    small = PublicVocabulary.from_words(["fever", "cough", "fever"])
    assert small.words == ("cough", "fever") and len(small) == 2
    assert "cough" in small and "rash" not in small and small.index["fever"] == 1
    with pytest.raises(ValueError):
        PublicVocabulary.from_words(["Fever"])
