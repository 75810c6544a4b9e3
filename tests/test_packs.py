"""The terms mode's lexicon pack (issue 57, "the lexicon becomes an optional pack"): every word
list, cue table and role table of ``facts.terms`` is data of one shape, read and checked by
``facts.packs``; a malformed pack is refused in one line naming its file and entry; the
certificate names the pack files with their sha256 and verify hashes them again; and the
terms read from the pack are those of the lexicon that was Python literals before."""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_public_data import TERMS, _output

from dpsynrag.accounting import public_data
from dpsynrag.accounting.certificate import verify_output
from dpsynrag.facts import packs, terms
from dpsynrag.facts.packs import SCHEMA, PackError, builtin_pack, load_pack
from dpsynrag.facts.roles import role_counts, role_priority, term_roles
from dpsynrag.facts.term_choice import CANDIDATES, anchor_terms, first_terms, released_choices
from dpsynrag.facts.terms import cue_of, document_terms
from dpsynrag.transforms.vocabulary import public_vocabulary

PACK_DIR = Path(packs.__file__).parent.parent / "resources" / "packs" / "en"
#: 50 notes of each generated set (``dpsynrag dataset KIND --notes 2000 --seed 0``, the first
#: 50 notes of conditions, films, clinic and support).
NOTES = Path(__file__).parent / "data" / "terms-pack-notes.jsonl"
#: sha256 of ``_terms_record`` over NOTES, computed with the lexicon as Python literals (commit
#: 8f2cd11, before the move to the pack) and unchanged since: the pack is the same lexicon.
TERMS_SHA256 = "85ff77ca40f0253a91ac1127dff5f24ba7c0b2a6d3909436ca83938d0b418fa7"


def _terms_record(texts: list[str]) -> dict[str, Any]:
    """What the terms mode makes of ``texts`` before and after the release, the noise left
    out: candidates, the choice, the role table, roles, anchors and every word's cue."""
    candidates = document_terms(texts, public_vocabulary(), CANDIDATES)
    offered = Counter(t for c in candidates for t in first_terms(c, 6).terms)
    released = {t: n for t, n in sorted(offered.items()) if n >= 3}
    chosen = released_choices(candidates, released, 6)
    table = role_counts(chosen, sorted(released), 6)
    roles = dict(term_roles(table * 8, sorted(released), 1.0))
    again = released_choices(candidates, released, 6, roles)
    words = sorted({w.strip(".,;:()").lower() for t in texts for w in t.split()})
    return {"candidates": [c.as_json() for c in candidates], "table": table.tolist(),
            "roles": roles, "chosen": [c.as_json() for c in again],
            "anchors": [anchor_terms(c, roles) for c in again],
            "priority": role_priority(roles, released), "cues": {w: cue_of(w) for w in words}}


def test_the_terms_of_the_pack_are_those_of_the_literal_lexicon() -> None:
    texts = [json.loads(line)["text"] for line in NOTES.read_text("utf-8").splitlines()]
    assert len(texts) == 200
    record = _terms_record(texts)
    assert record["roles"]  # the fixture exercises the role table
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    assert digest == TERMS_SHA256


def test_the_builtin_pack_loads_and_terms_reads_it() -> None:
    pack = builtin_pack()
    assert (pack.name, pack.language, pack.version) == ("en", "en", "1")
    assert pack.source == "dpsynrag/resources/packs/en"
    assert set(pack.file_sha256) == {"pack.toml", *(f"{kind}.toml" for kind in SCHEMA)}
    for name, digest in pack.file_sha256.items():
        assert hashlib.sha256((PACK_DIR / name).read_bytes()).hexdigest() == digest
    assert terms.PACK is pack
    assert terms.ROLES == pack.sequence("roles", "roles") == (
        "diagnosis", "title", "product", "error", "treatment", "symptom", "credit")
    assert pack.table("cues", "cues") == terms.ROLE_CUES
    assert terms.ROLE_CUES["diagnosed"] == "diagnosis" and len(terms.ROLE_CUES) == 142
    assert terms.cue_of("suspects") == "diagnosis"  # a third-person form, derived by code
    assert pack.words("breaks", "report_verbs") | terms.IRREGULAR_VERBS == terms.REPORT_VERBS
    assert pack.words("breaks", "months") | pack.words("breaks", "days") == terms.DATE_WORDS
    # a folder given as a path loads the same pack
    same = load_pack(PACK_DIR)
    assert same.entries == pack.entries and same.sha256 == pack.sha256


def test_terms_holds_no_word_list_literal() -> None:
    """Knowledge is data: no module-level constant of facts.terms holds a list, set, tuple or
    table of strings written in Python."""
    source = Path(terms.__file__).read_text("utf-8")
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if getattr(target, "id", "") == "__all__":
            continue
        for literal in ast.walk(node.value):
            if isinstance(literal, ast.Dict):
                items = [*literal.keys, *literal.values]
            elif isinstance(literal, ast.List | ast.Set | ast.Tuple):
                items = list(literal.elts)
            else:
                continue
            strings = [n for n in items if isinstance(n, ast.Constant)
                       and isinstance(n.value, str)]
            assert not strings, f"{getattr(target, 'id', '?')} holds a word list"


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "pack"
    shutil.copytree(PACK_DIR, root)
    return root


def _edit(root: Path, name: str, old: str, new: str) -> None:
    path = root / name
    text = path.read_text("utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), "utf-8")


MALFORMED: list[tuple[str, str, str, str, str]] = [
    # file, old text, new text, the entry named, the problem
    ("cues.toml", 'diagnosed = "diagnosis"', 'diagnosed = "diagnosiss"', "cues.diagnosed",
     "'diagnosiss' is not a role of roles.toml"),
    ("cues.toml", 'diagnosed = "diagnosis"', 'diagnosed "diagnosis"', "(file)", "not TOML: "),
    ("breaks.toml", "status_words = [", "statuswords = [", "statuswords", "unknown entry"),
    ("names.toml", "honorifics = [", "# honorifics = [\nhonorifics_ = [", "honorifics_",
     "unknown entry"),
    ("breaks.toml", '"active", ', '"active", "active", ', "status_words[1]",
     "'active' is listed twice"),
    ("grammar.toml", '"with", ', '"With", ', "object_prepositions[0]", "'With' is not lowercase"),
    ("grammar.toml", '"with", ', '"with it", ', "object_prepositions[0]", "holds a space"),
    ("roles.toml", '"title", ', "", "roles", "'title' is missing"),
    ("cues.toml", '"film", ', '"flim", ', "noun_cues", "'flim' is not in cues.toml's cues"),
    ("roles.toml", 'described = "symptom"', 'described = ["symptom"]', "described",
     "not a non-empty string"),
    ("roles.toml", 'title = "Title"', 'titel = "Title"', "labels.titel",
     "'titel' is not in roles.toml's roles"),
    ("roles.toml", 'diagnosis = "Likely diagnosis"', 'diagnosis = " "', "labels.diagnosis",
     "value not a non-empty string"),
    ("pack.toml", 'shapes = "shapes.toml"\n', "", "files.shapes", "missing"),
    ("pack.toml", 'shapes = "shapes.toml"', 'shapes = "../shapes.toml"', "files.shapes",
     "not a file name of this folder"),
    ("pack.toml", 'version = "1"\n', "", "version", "missing"),
]


@pytest.mark.parametrize(("name", "old", "new", "entry", "problem"), MALFORMED,
                         ids=[f"{m[0]}:{m[3]}" for m in MALFORMED])
def test_a_malformed_pack_is_refused_in_one_line(tmp_path: Path, name: str, old: str,
                                                 new: str, entry: str, problem: str) -> None:
    root = _copy(tmp_path)
    _edit(root, name, old, new)
    with pytest.raises(PackError) as caught:
        load_pack(root)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{root}/{name}: {entry}: "), message
    assert problem in message, message


def test_a_missing_pack_file_is_refused(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "grammar.toml").unlink()
    with pytest.raises(PackError, match=r"/grammar\.toml: \(file\): cannot be read"):
        load_pack(root)


def _pack_at(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Install the pack in ``root`` as the built-in one, as public_data finds it."""
    monkeypatch.setattr(public_data, "pack_root", lambda name: root)


def test_the_certificate_names_and_hashes_the_pack_files(tmp_path: Path) -> None:
    out, key = _output(tmp_path, TERMS)
    from dpsynrag.accounting.certificate import load_certificate

    entry = load_certificate(out / "certificate.json")["public_data"]["lexicon_pack"]
    pack = builtin_pack()
    assert entry["sha256"] == pack.sha256
    assert entry["files"] == dict(pack.file_sha256)
    assert entry["source"] == "dpsynrag/resources/packs/en (pack en version 1, language en)"
    assert entry["shapes"]
    lines = "".join(f"{digest}  {name}\n" for name, digest in sorted(entry["files"].items()))
    assert entry["sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert verify_output(out, key.with_name("key.pem.pub")) == []
    # the default n-gram build reads no pack
    assert "lexicon_pack" not in public_data.public_data(
        {"generate": "facts", "facts_items": "ngrams"})


@pytest.mark.parametrize("change", [
    lambda root: _edit(root, "cues.toml", 'diagnosed = "diagnosis"', 'diagnosed = "symptom"'),
    lambda root: _edit(root, "cues.toml", "# diagnosis\n", "# diagnosis (a comment)\n"),
], ids=["a cue's role", "a comment"])
def test_the_pack_hash_changes_when_a_pack_file_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Callable[[Path], None]) -> None:
    out, key = _output(tmp_path, TERMS)
    public = key.with_name("key.pem.pub")
    root = _copy(tmp_path)
    _pack_at(monkeypatch, root)
    before = public_data.public_data(TERMS)["lexicon_pack"]
    assert before["sha256"] == builtin_pack().sha256
    assert verify_output(out, public) == []
    change(root)
    after = public_data.public_data(TERMS)["lexicon_pack"]
    assert after["sha256"] != before["sha256"]
    assert [n for n in after["files"] if after["files"][n] != before["files"][n]] == [
        "cues.toml"]
    problems = verify_output(out, public)
    assert len(problems) == 1, problems
    assert problems[0].startswith("public data: lexicon_pack: the installed list "
                                  "(dpsynrag/resources/packs/en ")
    assert "(files that differ: cues.toml)" in problems[0]
    monkeypatch.undo()
    assert verify_output(out, public) == []


def test_the_pack_files_are_package_data() -> None:
    """pyproject.toml's package-data puts every pack file in the wheel."""
    import tomllib
    from fnmatch import fnmatch

    pyproject = Path(__file__).parent.parent / "pyproject.toml"
    globs = tomllib.loads(pyproject.read_text("utf-8"))["tool"]["setuptools"]["package-data"][
        "dpsynrag"]
    package = PACK_DIR.parent.parent.parent
    files = sorted(p.relative_to(package).as_posix() for p in PACK_DIR.iterdir())
    assert files and all(any(fnmatch(f, g) for g in globs) for f in files), files
