"""Tests of the in-process reader (dpsynrag.io): formats, errors without private text, units."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynrag.io.documents import SKIP_REASONS, InputDocuments
from dpsynrag.io.errors import InputError
from dpsynrag.io.fingerprint import input_fingerprint
from dpsynrag.io.ids import content_id, content_key
from dpsynrag.io.reader import read_documents
from dpsynrag.io.text import normalise_text
from dpsynrag.io.units import bound_units

SECRET = "Zebulon Quartermaine has hepatic frobnosis"  # must never appear in an error

ROWS = [
    {"id": "a", "text": "First note, with a comma and \"quotes\".", "unit": "p1"},
    {"id": "b/c", "text": "Second note\nspans two lines — café naïve.", "unit": "p2"},
    {"id": "d", "text": "Third   note\twith  odd   spacing. ", "unit": "p1"},
    {"id": "e", "text": SECRET, "unit": "p3"},
]


def write_jsonl(path: Path, rows: list[dict], raw_lines: list[str] | None = None) -> Path:
    lines = [json.dumps(r, ensure_ascii=False) for r in rows] + (raw_lines or [])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_txt_dir(path: Path, rows: list[dict]) -> Path:
    for row in rows:
        file = path / f"{row['id']}.txt"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(row["text"] + "\n", encoding="utf-8")
    return path


def assert_one_line_without_secret(error: InputError, *fragments: str) -> None:
    message = str(error)
    assert "\n" not in message
    assert SECRET not in message
    assert "frobnosis" not in message and "Zebulon" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# ------------------------------------------------------------------ formats
def test_four_formats_give_the_same_documents(tmp_path: Path) -> None:
    rows = sorted(ROWS, key=lambda r: r["id"])
    txt_dir = tmp_path / "txt"
    txt_dir.mkdir()
    results = {
        "jsonl": read_documents(write_jsonl(tmp_path / "in.jsonl", rows)),
        "csv": read_documents(write_csv(tmp_path / "in.csv", rows)),
        "parquet": read_documents(write_parquet(tmp_path / "in.parquet", rows)),
        "txt": read_documents(write_txt_dir(txt_dir, rows)),
    }
    expected_texts = [normalise_text(r["text"]) for r in rows]
    for source, docs in results.items():
        assert docs.source == source
        assert docs.ids == ["a", "b/c", "d", "e"]
        assert docs.texts == expected_texts
        assert docs.units == docs.ids
        assert docs.skipped == dict.fromkeys(SKIP_REASONS, 0)
    assert results["jsonl"].texts[1] == "Second note\nspans two lines — café naïve."
    assert results["jsonl"].texts[2] == "Third\tnote\twith\todd\tspacing."


def test_parquet_directory_and_units(tmp_path: Path) -> None:
    folder = tmp_path / "pq"
    (folder / "part=1").mkdir(parents=True)
    write_parquet(folder / "part=1" / "b.parquet", ROWS[2:])
    write_parquet(folder / "a.parquet", ROWS[:2])
    (folder / "_SUCCESS").write_text("")
    docs = read_documents(folder, unit_column="unit")
    assert docs.ids == ["a", "b/c", "d", "e"]
    assert docs.units == ["p1", "p2", "p1", "p3"]
    write_parquet(folder / "c.parquet", [{"text": "no id here", "unit": "p9"}])
    assert_one_line_without_secret(error_of(folder), "c.parquet", "some Parquet files")


def test_csv_keeps_string_ids_and_multiline_quotes(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b'\xef\xbb\xbfid,text\r\n007,"line one\r\nline two, quoted ""x"""\r\n'
                     b"8,plain\r\n")
    docs = read_documents(path)
    assert docs.ids == ["007", "8"]
    assert docs.texts == ['line one\nline two, quoted "x"', "plain"]


def test_content_ids_when_id_absent_or_disabled(tmp_path: Path) -> None:
    """Issue 13.1: without an id column the id is a hash of the record's content, not its
    position (``row-<n>`` used to shift when an earlier record was added or removed)."""
    rows = [{"text": "x one"}, {"text": ""}, {"text": "x three"}]
    expected = ["doc-" + content_key("", t).hex()[:32] for t in ("x one", "x three")]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    docs = read_documents(path)
    assert docs.ids == expected == [content_id(None, "x one"), content_id(None, "x three")]
    assert docs.units == docs.ids
    assert read_documents(write_jsonl(tmp_path / "later.jsonl", rows[1:])).ids == expected[1:]
    docs = read_documents(write_jsonl(tmp_path / "ids.jsonl", ROWS), id_column=None)
    assert docs.ids == [content_id(None, normalise_text(r["text"])) for r in ROWS]
    for writer, name in ((write_csv, "in.csv"), (write_parquet, "in.parquet")):
        docs = read_documents(writer(tmp_path / name, rows))
        assert docs.ids == expected
    units = read_documents(write_jsonl(tmp_path / "units.jsonl", ROWS), id_column=None,
                           unit_column="unit")
    assert units.ids == [content_id(r["unit"], normalise_text(r["text"])) for r in ROWS]
    assert units.units == [r["unit"] for r in ROWS]


def test_identical_records_without_ids_are_one_document(tmp_path: Path) -> None:
    """Records sharing a content id are identical (unit and text): either copy is the same
    document, so they become one, counted as skipped "duplicate"."""
    rows = [{"text": "same", "unit": "p"}, {"text": "same ", "unit": "p"},
            {"text": "same", "unit": "q"}, {"text": "other", "unit": "p"}]
    docs = read_documents(write_jsonl(tmp_path / "in.jsonl", rows), unit_column="unit")
    assert docs.texts == ["same", "same", "other"] and docs.units == ["p", "q", "p"]
    assert len(set(docs.ids)) == 3 and docs.skipped["duplicate"] == 1
    plain = read_documents(write_jsonl(tmp_path / "plain.jsonl", rows))
    assert plain.texts == ["same", "other"] and plain.skipped["duplicate"] == 2


def test_normalisation() -> None:
    raw = "  Cafe\u0301\u00a0 au\tlait\r\nline  \r\n\n\n\nnext\x00para  "
    assert normalise_text(raw) == "Café\tau\tlait\nline\n\nnext para"
    # a run of two or more, or holding a tab, is one tab (a record's column break)
    assert normalise_text("Seven Doors \t Pavel Haddad\t\t\n4\t\u00a05") == \
        "Seven Doors\tPavel Haddad\n4\t5"
    assert normalise_text("l1\u2028l2\x85l3\rl4\x0bx\u3000\ufeffy") == "l1\nl2\nl3\nl4 x\ty"
    assert normalise_text("a   b  \n \n\n  c") == "a\tb\n\n\tc"  # leading indent kept
    assert normalise_text("plain text.") == "plain text."


def test_integer_ids_in_jsonl_and_parquet(tmp_path: Path) -> None:
    rows = [{"id": 1, "text": "one"}, {"id": 2, "text": "two"}]
    assert read_documents(write_jsonl(tmp_path / "a.jsonl", rows)).ids == ["1", "2"]
    assert read_documents(write_parquet(tmp_path / "a.parquet", rows)).ids == ["1", "2"]


# ------------------------------------------------------------------ skips
def test_skips_are_counted(tmp_path: Path) -> None:
    rows = [
        {"id": "1", "text": "   \n\t "},
        {"id": "2", "text": None},
        {"id": "3", "text": "ok document"},
        {"id": "4", "text": "x" * 50},
        {"id": "5", "text": "tiny"},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    docs = read_documents(path, max_chars=20, min_chars=5)
    assert docs.ids == ["3"]
    assert docs.skipped == {"empty": 2, "too_short": 1, "too_long": 1, "duplicate": 0,
                            "unit_bound": 0}
    parquet = read_documents(write_parquet(tmp_path / "in.parquet", rows), max_chars=20,
                             min_chars=5)
    assert parquet.skipped == docs.skipped
    unlimited = read_documents(path, max_chars=None)
    assert unlimited.ids == ["3", "4", "5"]


# ------------------------------------------------------------------ errors
def error_of(path: Path, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        read_documents(path, **kwargs)
    return info.value


def test_error_empty_file_and_no_documents(tmp_path: Path) -> None:
    for name in ("empty.jsonl", "empty.csv"):
        path = tmp_path / name
        path.write_text("")
        assert_one_line_without_secret(error_of(path), name)
    header_only = tmp_path / "header.csv"
    header_only.write_text("id,text\n")
    assert_one_line_without_secret(error_of(header_only), "header.csv", "no documents")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n \n")
    assert_one_line_without_secret(error_of(blank), "blank.jsonl", "no documents")
    all_skipped = write_jsonl(tmp_path / "skipped.jsonl", [{"text": " "}])
    assert_one_line_without_secret(error_of(all_skipped), "skipped.jsonl", "skipped")
    empty_dir = tmp_path / "d"
    empty_dir.mkdir()
    assert_one_line_without_secret(error_of(empty_dir), "no documents")


def test_error_missing_text_column_lists_columns(tmp_path: Path) -> None:
    rows = [{"id": "1", "body": SECRET}]
    for writer, name, where in ((write_jsonl, "m.jsonl", "line 1"),
                                (write_csv, "m.csv", "line 1"),
                                (write_parquet, "m.parquet", "")):
        error = error_of(writer(tmp_path / name, rows))
        assert_one_line_without_secret(error, name, where, "'text'", "'body'", "'id'")


def test_error_explicit_id_or_unit_column_missing(tmp_path: Path) -> None:
    rows = [{"text": SECRET}]
    for writer, name in ((write_jsonl, "m.jsonl"), (write_csv, "m.csv"),
                         (write_parquet, "m.parquet")):
        path = writer(tmp_path / name, rows)
        assert read_documents(path, id_column="id").ids == [content_id(None, SECRET)]  # absent
        assert_one_line_without_secret(error_of(path, id_column="doc"), name,
                                       "id column 'doc'")
        assert_one_line_without_secret(error_of(path, unit_column="person"), name, "'person'")


def test_error_malformed_json_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", ROWS[:2], raw_lines=['{"id": "z", "text": "'
                                                                    + SECRET + '"'])
    assert_one_line_without_secret(error_of(path), "bad.jsonl", "line 3", "malformed JSON")
    # json says "Unterminated string starting at": the column follows it once ("at at" before)
    open_string = tmp_path / "open.jsonl"
    for line, problem in (('{"id": "z", "text": "' + SECRET,
                           "Unterminated string starting at column 21"),
                          ('{"id": "z", "text": "' + SECRET + '\n',
                           "Invalid control character at column")):
        open_string.write_text(line)
        error = error_of(open_string)
        assert_one_line_without_secret(error, "open.jsonl", "line 1",
                                       f"malformed JSON: {problem}")
        assert "at at" not in str(error)
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"id": "1", "text": SECRET}]))
    assert_one_line_without_secret(error_of(array), "array.json", "line 1", "JSON object")
    scalar = write_jsonl(tmp_path / "scalar.jsonl", [], raw_lines=[json.dumps(SECRET)])
    assert_one_line_without_secret(error_of(scalar), "scalar.jsonl", "line 1", "a string")


def test_error_non_utf8(tmp_path: Path) -> None:
    good = json.dumps({"id": "1", "text": "fine"}).encode() + b"\n"
    bad = b'{"id": "2", "text": "' + SECRET.encode("latin-1") + b'\xe9"}\n'
    path = tmp_path / "latin.jsonl"
    path.write_bytes(good + bad)
    error = error_of(path)
    offset = len(good) + bad.index(b"\xe9")
    assert_one_line_without_secret(error, "latin.jsonl", "line 2", "UTF-8", f"offset {offset}")
    csv_path = tmp_path / "latin.csv"
    csv_path.write_bytes(b"id,text\n1,fine\n2," + SECRET.encode() + b"\xe9\n")
    assert_one_line_without_secret(error_of(csv_path), "latin.csv", "line 3", "UTF-8")
    folder = tmp_path / "txt"
    folder.mkdir()
    (folder / "ok.txt").write_text("fine")
    (folder / "bad.txt").write_bytes(SECRET.encode() + b"\xff")
    assert_one_line_without_secret(error_of(folder), "bad.txt", "UTF-8",
                                   f"offset {len(SECRET)}")


def test_error_lone_surrogate_names_the_place_not_the_text(tmp_path: Path) -> None:
    """A JSON escape of half a surrogate pair decodes to a str that is not Unicode text: one
    line naming file, line, field and character, for the text, the unit and the id (and a
    second text column); a whole pair is an ordinary character."""
    good = json.dumps({"id": "1", "unit": "u1", "text": "fine"})
    pair = json.dumps({"id": "2", "unit": "u2", "text": "ok \U0001f600 " + SECRET})
    for field in ("text", "unit", "id"):
        row = {"id": "3", "unit": "u3", "text": SECRET}
        row[field] = (SECRET if field == "text" else "x") + "\ud800"
        path = tmp_path / f"{field}.jsonl"
        path.write_text("\n".join([good, pair, json.dumps(row)]) + "\n", encoding="utf-8")
        error = error_of(path, unit_column="unit", id_column="id")
        where = len(SECRET) + 1 if field == "text" else 2
        assert_one_line_without_secret(error, f"{field}.jsonl", "line 3",
                                       f"{field} holds an unpaired surrogate U+D800",
                                       f"character {where}")
    path = tmp_path / "columns.jsonl"
    path.write_text(json.dumps({"id": "1", "subject": "a", "body": "b\udfff"}) + "\n",
                    encoding="utf-8")
    assert_one_line_without_secret(error_of(path, text_column=("subject", "body")),
                                   "line 1", "column 'body'", "U+DFFF")
    path.write_text(pair + "\n", encoding="utf-8")
    assert read_documents(path).texts == ["ok \U0001f600 " + SECRET]


def test_error_text_not_a_string(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "num.jsonl", [{"id": "1", "text": "ok"},
                                                {"id": "2", "text": 42},
                                                {"id": "3", "text": [SECRET]}])
    assert_one_line_without_secret(error_of(path), "num.jsonl", "line 2", "expected a string")
    table = pa.table({"id": ["1"], "text": [7]})
    pq.write_table(table, tmp_path / "num.parquet")
    assert_one_line_without_secret(error_of(tmp_path / "num.parquet"), "num.parquet",
                                   "int64")


def test_duplicate_ids_keep_every_record_with_unique_content_derived_ids(
        tmp_path: Path) -> None:
    """Issue 13.1: a shared id is no error and drops no record: each record of different
    content gets ``<id>~dup-<content key>``, whatever the input order; identical records are
    one. Unique ids stay as they are."""
    rows = [{"id": "1", "text": "one"}, {"id": SECRET, "text": "x"},
            {"id": "3", "text": "three"}, {"id": SECRET, "text": SECRET},
            {"id": "3", "text": "three"}]
    renamed = {t: f"{SECRET}~dup-" + content_key("", t).hex()[:32] for t in ("x", SECRET)}
    for writer, name in ((write_jsonl, "dup.jsonl"), (write_csv, "dup.csv"),
                         (write_parquet, "dup.parquet")):
        docs = read_documents(writer(tmp_path / name, rows))
        assert docs.ids == ["1", renamed["x"], "3", renamed[SECRET]]
        assert docs.texts == ["one", "x", "three", SECRET] and docs.units == docs.ids
        assert docs.skipped["duplicate"] == 1
        backwards = read_documents(writer(tmp_path / f"back-{name}", rows[::-1]))
        assert sorted(zip(backwards.ids, backwards.texts, strict=True)) == sorted(
            zip(docs.ids, docs.texts, strict=True))
    # a suffixed id read again (e.g. ingest's shards) joins its id's group: still unique
    again = write_jsonl(tmp_path / "again.jsonl", [{"id": renamed["x"], "text": "x"},
                                                   {"id": SECRET, "text": "y"}])
    docs = read_documents(again)
    assert len(set(docs.ids)) == 2 and all(i.startswith(f"{SECRET}~dup-") for i in docs.ids)
    assert docs.ids[0] == renamed["x"]  # the same content gets the same suffix again
    single = read_documents(write_jsonl(tmp_path / "one.jsonl", rows[2:3]))
    assert single.ids == ["3"]


def test_error_bad_ids(tmp_path: Path) -> None:
    for value, problem in ((None, "null"), (True, "bool"), (1.5, "float"), ("  ", "empty")):
        path = write_jsonl(tmp_path / "idtype.jsonl", [{"id": value, "text": SECRET}])
        assert_one_line_without_secret(error_of(path), "idtype.jsonl", "line 1", problem)
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [{"text": "one"}, {"id": "2", "text": "t"}])
    assert_one_line_without_secret(error_of(mixed), "mixed.jsonl", "line 2", "line 1")


def test_error_csv_shape(tmp_path: Path) -> None:
    path = tmp_path / "shape.csv"
    path.write_text(f"id,text\n1,ok\n2,{SECRET},extra\n")
    assert_one_line_without_secret(error_of(path), "shape.csv", "line 3", "3 fields")
    quote = tmp_path / "quote.csv"
    quote.write_text(f'id,text\n1,"{SECRET}"x\n')
    assert_one_line_without_secret(error_of(quote), "quote.csv", "line 2", "malformed CSV")


def test_error_unsupported_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "in.xlsx"
    path.write_text(SECRET)
    assert_one_line_without_secret(error_of(path), "in.xlsx", "unsupported", ".xlsx")
    assert_one_line_without_secret(error_of(tmp_path / "nope.jsonl"), "nope.jsonl",
                                   "does not exist")
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_text("x")
    write_parquet(folder / "b.parquet", ROWS)
    assert_one_line_without_secret(error_of(folder), "both")
    broken = tmp_path / "broken.parquet"
    broken.write_text(SECRET)
    assert_one_line_without_secret(error_of(broken), "broken.parquet", "Parquet")


def test_error_unit_column_with_txt_dir(tmp_path: Path) -> None:
    folder = write_txt_dir(tmp_path, ROWS[:1])
    assert_one_line_without_secret(error_of(folder, unit_column="unit"), "unit_column")


# ------------------------------------------------------------------ units
def make_docs(records: list[tuple[str, str]]) -> InputDocuments:
    return InputDocuments(ids=[r[0] for r in records], texts=[f"text of {r[0]}" for r in records],
                          units=[r[1] for r in records], source="jsonl")


def test_bound_units_one_per_unit_deterministic_and_order_free() -> None:
    records = [(f"doc{i}", f"person{i % 7}") for i in range(60)]
    docs = make_docs(records)
    bounded = bound_units(docs)
    assert sorted(bounded.units) == sorted(set(docs.units))
    assert bounded.skipped["unit_bound"] == 60 - 7
    assert docs.skipped["unit_bound"] == 0  # input unchanged
    assert [docs.ids.index(i) for i in bounded.ids] == sorted(docs.ids.index(i)
                                                              for i in bounded.ids)
    kept = set(bounded.ids)
    rng = random.Random(3)
    for _ in range(5):
        shuffled = records[:]
        rng.shuffle(shuffled)
        assert set(bound_units(make_docs(shuffled)).ids) == kept
    # independent of other units' records, and of the ids (issue 13.1: ranked by text)
    other = make_docs([r for r in records if r[1] != "person3"])
    assert set(bound_units(other).ids) == {i for i, r in zip(bounded.ids, bounded.units,
                                                            strict=True) if r != "person3"}
    renamed = make_docs(records)
    renamed.ids = [f"new-{i}" for i in range(60)]
    assert set(bound_units(renamed).texts) == set(bounded.texts)


def test_bound_units_keeps_single_record_units() -> None:
    docs = make_docs([("a", "a"), ("b", "b")])
    assert bound_units(docs).ids == ["a", "b"]
    assert bound_units(docs).skipped["unit_bound"] == 0


# ------------------------------------------------------------------ fingerprint
def test_input_fingerprint() -> None:
    docs = make_docs([("a", "u"), ("b", "v")])
    key = b"k" * 32
    fingerprint = input_fingerprint(docs, key)
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    reordered = make_docs([("b", "v"), ("a", "u")])
    assert input_fingerprint(reordered, key) == fingerprint
    assert input_fingerprint(docs, b"j" * 32) != fingerprint
    changed = make_docs([("a", "u"), ("b", "v")])
    changed.texts[1] += "!"
    assert input_fingerprint(changed, key) != fingerprint
    with pytest.raises(ValueError):
        input_fingerprint(docs, b"")


def test_an_input_of_only_over_long_documents_names_max_chars(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": "word " * 40}) + "\n"
                            for i in range(3)))
    with pytest.raises(InputError, match=r"every record was skipped \(too_long\); raise "
                                         r"--max-chars \(now 50\)") as caught:
        read_documents(path, max_chars=50)
    assert "3" not in str(caught.value).replace(str(path), "")  # no count of private records


def test_a_directory_with_records_files_beside_its_txt_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A note about a rash and a fever.")
    (tmp_path / "b.txt").write_text("A note about a cough.")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "tickets.jsonl").write_text(json.dumps({"text": SECRET}) + "\n")
    with pytest.raises(InputError, match=r"directory holds sub/tickets.jsonl, which a "
                                         r"directory input would not read") as caught:
        read_documents(tmp_path)
    assert SECRET not in str(caught.value)
    (tmp_path / "sub" / "more.csv").write_text("text\nx\n")
    with pytest.raises(InputError, match=r"sub/more.csv and 1 more"):
        read_documents(tmp_path)
    for name in ("sub/more.csv", "sub/tickets.jsonl"):
        (tmp_path / name).unlink()
    assert len(read_documents(tmp_path)) == 2  # .txt files only: read as before


# ------------------------------------------------------------------ several text columns
TICKETS = [
    {"id": "t1", "subject": "Printer jams", "body": "It  jams on page two.",
     "resolution": "Replaced the roller."},
    {"id": "t2", "subject": "", "body": "VPN drops hourly.", "resolution": None},
    {"id": "t3", "subject": "Login fails", "body": None, "resolution": "  "},
    {"id": "t4", "subject": None, "body": " ", "resolution": ""},
]
WRITERS = ((write_jsonl, "t.jsonl", "line 1"), (write_csv, "t.csv", "line 1"),
           (write_parquet, "t.parquet", ""))


def test_several_text_columns_are_joined_in_order_by_a_blank_line(tmp_path: Path) -> None:
    """Each format: the non-empty values in the columns' order, "\\n\\n" between them (kept by
    normalise_text); a null, empty or blank column is left out; all of them: skip "empty"."""
    for writer, name, _ in WRITERS:
        path = writer(tmp_path / name, TICKETS)
        docs = read_documents(path, text_column=("subject", "body", "resolution"))
        assert docs.ids == ["t1", "t2", "t3"], name
        assert docs.texts == ["Printer jams\n\nIt\tjams on page two.\n\nReplaced the roller.",
                              "VPN drops hourly.", "Login fails"], name
        assert docs.skipped["empty"] == 1, name
        reverse = read_documents(path, text_column=["resolution", "subject"])
        assert reverse.texts == ["Replaced the roller.\n\nPrinter jams", "Login fails"], name
        assert reverse.skipped["empty"] == 2, name


def test_several_text_columns_missing_or_not_a_string_name_the_column(tmp_path: Path) -> None:
    rows = [{"id": "1", "subject": SECRET, "text": SECRET}]
    for writer, name, where in WRITERS:
        error = error_of(writer(tmp_path / name, rows), text_column=("subject", "body"))
        assert_one_line_without_secret(error, name, where, "missing text column 'body'",
                                       "'subject'")
    path = write_jsonl(tmp_path / "num.jsonl", [{"subject": "ok", "body": "fine"},
                                                {"subject": SECRET, "body": 42}])
    assert_one_line_without_secret(error_of(path, text_column=("subject", "body")),
                                   "num.jsonl", "line 2", "text is a number in column 'body'",
                                   "expected a string")
    # a record without the second column is an error, not an empty value (null is one)
    sparse = write_jsonl(tmp_path / "sparse.jsonl", [{"subject": "ok", "body": None},
                                                     {"subject": SECRET}])
    assert_one_line_without_secret(error_of(sparse, text_column=("subject", "body")),
                                   "sparse.jsonl", "line 2", "missing text column 'body'")
    pq.write_table(pa.table({"subject": ["a"], "body": [7]}), tmp_path / "num.parquet")
    assert_one_line_without_secret(error_of(tmp_path / "num.parquet",
                                            text_column=("subject", "body")),
                                   "num.parquet", "text column 'body' has type int64")
    with pytest.raises(ValueError, match="'body' is given twice"):
        read_documents(path, text_column=("body", "subject", "body"))


def test_one_text_column_keeps_its_documents_and_content_ids(tmp_path: Path) -> None:
    """One column reads exactly as before: its content-derived id is ``doc-`` + 32 hex of
    sha256(unit ‖ 0 ‖ sha256(normalised text)), whether given as a name or a list of one; and
    a record whose other text columns are empty gets the id its one text would get."""
    import hashlib

    text = "  Fever and   a rash.  "
    path = write_jsonl(tmp_path / "one.jsonl", [{"text": text, "more": ""}])
    inner = hashlib.sha256(b"Fever and\ta rash.").digest()  # "   " is a column break
    expected = "doc-" + hashlib.sha256(b"\x00" + inner).hexdigest()[:32]
    for column in ("text", ["text"], ("text", "more"), ("more", "text")):
        docs = read_documents(path, text_column=column)
        assert (docs.ids, docs.texts) == ([expected], ["Fever and\ta rash."]), column
    # a name with a comma is one column name here (only the CLI and TOML strings split)
    commas = write_csv(tmp_path / "commas.csv", [{"a,b": "value", "a": "x", "b": "y"}])
    assert read_documents(commas, text_column="a,b").texts == ["value"]
