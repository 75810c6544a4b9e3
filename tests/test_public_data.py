"""Every public list that shapes a document's terms is named and hashed in the certificate,
and verify hashes the installed lists again (issue 58, item 5)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from test_certificate import FakeEmbedder, facts_ledger, facts_plan

from dpsynrag.accounting import public_data
from dpsynrag.accounting.certificate import (
    build_certificate,
    load_certificate,
    verify_output,
    write_certificate,
)
from dpsynrag.accounting.signing import generate_keypair, load_private_key, sign_document
from dpsynrag.io import person_names
from dpsynrag.io.output_files import output_file_hashes, sha256_file
from dpsynrag.transforms.emit import write_output
from dpsynrag.transforms.vocabulary import stopwords

TERMS = {"generate": "facts", "facts_items": "terms", "keywords": "statistical"}


def _output(tmp_path: Path, config: dict) -> tuple[Path, Path]:
    key = tmp_path / "key.pem"
    generate_keypair(key)
    out = tmp_path / "out"
    out.mkdir()
    write_output(out, texts=["a b", "c"], cluster_keywords=["x", "y"], kept=[True, True],
                 token_counts=[2, 1], embedder=FakeEmbedder())
    plan = facts_plan()
    cert = build_certificate(
        facts_ledger(plan), delta=1e-3, conversion="bun-steinke", plan=plan,
        model_identity={"name": "none"}, embedder_identity={"name": "fake"},
        vocabulary_sha256="33" * 32, output_files=output_file_hashes(out), seeded=False,
        package_version="0.1.0", config=config)
    write_certificate(out, sign_document(cert, load_private_key(key)))
    return out, key


def _resign(out: Path, key: Path, change) -> None:
    cert = load_certificate(out / "certificate.json")
    change(cert)
    cert.pop("signature", None)
    write_certificate(out, sign_document(cert, load_private_key(key)))


def test_each_mode_names_the_lists_it_reads() -> None:
    assert public_data.public_lists_for(TERMS) == ["stopwords", "word_frequency_prior",
                                                   "given_names", "surnames", "lexicon_pack"]
    assert public_data.public_lists_for({**TERMS, "facts_items": "open"}) == [
        "stopwords", "word_frequency_prior", "lexicon_pack"]
    assert public_data.public_lists_for({"generate": "facts", "facts_items": "ngrams"}) == [
        "stopwords"]
    assert public_data.public_lists_for({"generate": "tokens", "keywords": "llm"}) == [
        "stopwords"]
    assert public_data.public_lists_for({"generate": "tokens", "keywords": "statistical"}) \
        == ["stopwords", "word_frequency_prior"]


def test_the_certificate_hashes_what_the_terms_read(tmp_path: Path) -> None:
    out, key = _output(tmp_path, TERMS)
    recorded = load_certificate(out / "certificate.json")["public_data"]
    assert set(recorded) == {"stopwords", "word_frequency_prior", "given_names", "surnames",
                             "lexicon_pack"}
    names = "\n".join(sorted(person_names.surnames())).encode()
    assert recorded["surnames"]["sha256"] == hashlib.sha256(names).hexdigest()
    given = "\n".join(sorted(person_names.given_names())).encode()
    assert recorded["given_names"]["sha256"] == hashlib.sha256(given).hexdigest()
    assert recorded["given_names"]["source"].startswith("faker ")
    stop = Path(public_data.__file__).parent.parent / "resources" / "stopwords.txt"
    assert recorded["stopwords"]["sha256"] == sha256_file(stop)
    assert recorded["stopwords"]["source"] == "dpsynrag/resources/stopwords.txt"
    assert "the" in stopwords()  # the list the terms read is that file
    from wordfreq import available_languages

    assert recorded["word_frequency_prior"]["sha256"] == sha256_file(
        Path(available_languages("best")["en"]))
    assert all(entry["shapes"] for entry in recorded.values())
    assert verify_output(out, key.with_name("key.pem.pub")) == []


def test_verify_reports_a_list_that_is_not_the_installed_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, key = _output(tmp_path, TERMS)
    public = key.with_name("key.pem.pub")
    # another Faker's surnames installed here, another stopword file
    monkeypatch.setattr(person_names, "surnames", lambda: frozenset({"smith"}))
    monkeypatch.setattr(public_data, "STOPWORDS_FILE", "__init__.py")
    problems = verify_output(out, public)
    assert len(problems) == 2, problems
    assert problems[0].startswith("public data: stopwords: the installed list")
    assert problems[1].startswith("public data: surnames: the installed list (faker ")
    assert "does not match the build's" in problems[1]
    monkeypatch.undo()
    assert verify_output(out, public) == []


def test_verify_reports_a_list_left_out_or_changed(tmp_path: Path) -> None:
    out, key = _output(tmp_path, TERMS)
    public = key.with_name("key.pem.pub")

    def change(cert: dict) -> None:
        del cert["public_data"]["given_names"]
        cert["public_data"]["surnames"]["sha256"] = "00" * 32
        cert["public_data"]["lexicon"] = {"sha256": "11" * 32}

    _resign(out, key, change)
    problems = verify_output(out, public)
    assert "public data: given_names shapes this build's terms but the certificate does not " \
           "name it" in problems
    assert any(p.startswith("public data: surnames: the installed list") for p in problems)
    assert "public data: unknown public list 'lexicon'" in problems
    _resign(out, key, lambda cert: cert.pop("public_data"))
    assert any("names no public list" in p for p in verify_output(out, public))


def test_the_configs_prior_is_checked_against_the_installed_one(tmp_path: Path) -> None:
    """The word-frequency prior a facts config names (keyword_prior_sha256) is checked too,
    also where a format 1 certificate has no public_data."""
    out, key = _output(tmp_path, {**TERMS, "keyword_prior_sha256": "ab" * 32})
    problems = verify_output(out, key.with_name("key.pem.pub"))
    assert "public data: word_frequency_prior and the config's keyword_prior_sha256 differ" \
        in problems
