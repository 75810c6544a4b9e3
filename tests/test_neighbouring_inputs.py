"""Issue 13.1 (readers): neighbouring inputs change only the added or removed unit's document.

Without an id column ids used to be ``row-<n>`` (positions), and they decided which record a
unit keeps (``pick``, ``concat``) and which of two records sharing an id survives. Removing
one unit shifted every later id: measured, 37 of the other 49 units changed their document;
an added record whose id collided with another unit's record evicted that record. These tests
run the neighbouring-dataset experiment on the in-process reader and on the Beam ingest.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from dpsynrag.io.documents import InputDocuments
from dpsynrag.io.reader import read_documents
from dpsynrag.io.units import bound_units
from dpsynrag.pipeline.beam_ingest import run_ingest
from dpsynrag.transforms.ingest import IngestSettings

UNITS, PER_UNIT, MAX_CHARS = 50, 3, 120
REMOVED = "p00"  # the first unit: every later position shifts when it goes
WORDS = ["fever", "cough", "rash", "ache", "nausea", "dizzy", "pain", "renal", "fibrosis"]


def _records(with_ids: bool = False) -> list[dict[str, str]]:
    """50 units × 3 records, interleaved, distinct texts of 30 to 70 characters."""
    rng = random.Random(13)
    records = []
    for j in range(PER_UNIT):
        for u in range(UNITS):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9)))
            record = {"unit": f"p{u:02d}", "text": f"note {u}.{j}: {words}"}
            if with_ids:
                record["id"] = f"n{u:02d}-{j}"
            records.append(record)
    return records


def _write(path: Path, records: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _kept(docs: InputDocuments) -> dict[str, str]:
    """Unit -> the text of its one document."""
    assert len(set(docs.units)) == len(docs.units)
    return dict(zip(docs.units, docs.texts, strict=True))


def _inline(path: Path, rule: str) -> dict[str, str]:
    docs = read_documents(path, unit_column="unit", max_chars=MAX_CHARS)
    return _kept(bound_units(docs, rule, MAX_CHARS))


def _beam(path: Path, out: Path, rule: str) -> dict[str, str]:
    settings = IngestSettings(unit_column="unit", unit_bound=rule, max_chars=MAX_CHARS)
    run_ingest(path, out, settings, shards=2, on_bad_row="skip")
    return _kept(read_documents(out, unit_column="unit", max_chars=None))


def _changed(before: dict[str, str], after: dict[str, str], left_out: str) -> list[str]:
    """Units other than ``left_out`` whose document differs (or vanished)."""
    return sorted(u for u in before if u != left_out and after.get(u) != before[u])


def _intruder(records: list[dict[str, str]], path: Path) -> tuple[list[dict[str, str]], str]:
    """The records (written at ``path``) with one added record, first in the input, reusing
    the id of the record that unit p07 keeps with ``pick`` (so evicting it would show)."""
    kept = _inline(path, "pick")["p07"]
    victim = next(r for r in records if r["unit"] == "p07" and r["text"] == kept)
    added = {"id": victim["id"], "unit": "intruder", "text": "an added note: fever rash"}
    return [added, *records], victim["id"]


def _pairs(docs: InputDocuments) -> list[tuple[str, str]]:
    return sorted(zip(docs.units, docs.texts, strict=True))


@pytest.mark.parametrize("rule", ["pick", "concat"])
def test_item1_removing_one_unit_changes_no_other_units_document_in_process(
        tmp_path: Path, rule: str) -> None:
    records = _records()
    full = _inline(_write(tmp_path / "full.jsonl", records), rule)
    rest = _inline(_write(tmp_path / "rest.jsonl",
                          [r for r in records if r["unit"] != REMOVED]), rule)
    assert len(full) == UNITS and len(rest) == UNITS - 1 and REMOVED not in rest
    assert _changed(full, rest, REMOVED) == []
    if rule == "concat":  # the bound is exercised: some units do not fit all three records
        assert any(text.count("\n\n") < PER_UNIT - 1 for text in full.values())


def test_item1_a_colliding_id_removes_no_other_units_record_in_process(tmp_path: Path) -> None:
    records = _records(with_ids=True)
    path = _write(tmp_path / "before.jsonl", records)
    with_added, shared = _intruder(records, path)
    before = read_documents(path, unit_column="unit")
    after = read_documents(_write(tmp_path / "after.jsonl", with_added), unit_column="unit")
    assert len(after) == len(before) + 1 and len(set(after.ids)) == len(after)
    assert sorted(set(_pairs(after)) - set(_pairs(before))) == [
        ("intruder", "an added note: fever rash")]
    assert set(_pairs(before)) <= set(_pairs(after))  # every earlier record is still there
    assert shared not in after.ids  # the shared id was made unique for both records
    for rule in ("pick", "concat"):
        kept_before = _kept(bound_units(before, rule, MAX_CHARS))
        kept_after = _kept(bound_units(after, rule, MAX_CHARS))
        assert _changed(kept_before, kept_after, "intruder") == []


def test_item1_without_units_removing_one_record_changes_no_other_document_in_process(
        tmp_path: Path) -> None:
    texts = [r["text"] for r in _records()]
    full = read_documents(_write(tmp_path / "full.jsonl", [{"text": t} for t in texts]))
    rest = read_documents(_write(tmp_path / "rest.jsonl", [{"text": t} for t in texts[1:]]))
    before = dict(zip(full.texts, full.ids, strict=True))
    after = dict(zip(rest.texts, rest.ids, strict=True))
    assert len(after) == len(texts) - 1 and texts[0] not in after
    assert [t for t in after if before[t] != after[t]] == []


def test_item1_neighbouring_inputs_in_the_beam_ingest(tmp_path: Path) -> None:
    """The same three experiments through Beam (one test: Beam starts in seconds)."""
    records = _records()
    full_path = _write(tmp_path / "full.jsonl", records)
    rest_path = _write(tmp_path / "rest.jsonl", [r for r in records if r["unit"] != REMOVED])
    for rule in ("pick", "concat"):
        full = _beam(full_path, tmp_path / f"full-{rule}", rule)
        rest = _beam(rest_path, tmp_path / f"rest-{rule}", rule)
        assert len(full) == UNITS and len(rest) == UNITS - 1
        assert _changed(full, rest, REMOVED) == []
        assert full == _inline(full_path, rule)  # parity with the in-process reader

    with_ids = _records(with_ids=True)
    ids_path = _write(tmp_path / "ids.jsonl", with_ids)
    with_added, _shared = _intruder(with_ids, ids_path)
    before = _beam(ids_path, tmp_path / "ids", "pick")
    after = _beam(_write(tmp_path / "added.jsonl", with_added), tmp_path / "added", "pick")
    assert after.pop("intruder") == "an added note: fever rash"
    assert after == before

    texts = [r["text"] for r in records]
    ids = {}
    for name, kept in (("all", texts), ("one-less", texts[1:])):
        run_ingest(_write(tmp_path / f"{name}.jsonl", [{"text": t} for t in kept]),
                   tmp_path / f"out-{name}", shards=2)
        docs = read_documents(tmp_path / f"out-{name}", unit_column="unit", max_chars=None)
        ids[name] = dict(zip(docs.texts, docs.ids, strict=True))
    assert len(ids["one-less"]) == len(texts) - 1
    assert [t for t, i in ids["one-less"].items() if ids["all"][t] != i] == []
