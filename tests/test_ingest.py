"""The Beam ingest: parity with the in-process reader, bounding, bad rows, determinism."""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynrag.io.errors import InputError
from dpsynrag.io.ids import content_id
from dpsynrag.io.reader import read_documents
from dpsynrag.io.units import bound_one_unit, bound_units, unit_rank
from dpsynrag.pipeline.beam_ingest import run_ingest
from dpsynrag.transforms.ingest import IngestSettings

WORDS = ["fever", "cough", "naïve", "café", "Zürich", "漢字", "🙂", "rash", "ache", "nausea",
         "dizzy", "pain", "renal", "ﬁbrosis", "e\u0301clair"]  # the last one is NFD


def _text(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 40))]
    text = " ".join(words)
    if rng.random() < 0.1:
        text = "  " + text.replace(" ", "\t ", 3) + "  \n\n\n\nend"
    return text


def _corpus(n: int, seed: int = 7) -> tuple[list[list[dict]], list[list[bytes]], dict[str, int]]:
    """Valid records split over 4 files, and the same files with bad rows interleaved.

    Returns (valid records per file, dirty raw lines per file, bad rows injected per kind).
    Records reusing an earlier id with another text are valid (issue 13.1: a shared id drops
    no record); ``injected["shared id"]`` counts them.
    """
    rng = random.Random(seed)
    files: list[list[dict]] = [[], [], [], []]
    for i in range(n):
        record = {"id": f"doc-{i:06d}", "unit": f"u{rng.randrange(n // 3)}",
                  "text": _text(rng)}
        roll = rng.random()
        if roll < 0.01:
            record["text"] = "   "  # empty after normalisation
        elif roll < 0.015:
            record["text"] = "long " * 500  # over max_chars=2000
        files[i % 4].append(record)
    dirty: list[list[bytes]] = [[], [], [], []]
    injected = {"malformed JSON": 0, "bad id": 0, "bad text": 0, "bad encoding": 0,
                "shared id": 0, "not a JSON object": 0}
    valid: list[list[dict]] = [[], [], [], []]
    for f, records in enumerate(files):
        for j, record in enumerate(records):
            valid[f].append(record)
            dirty[f].append(json.dumps(record, ensure_ascii=rng.random() < 0.5).encode() + b"\n")
            roll = rng.random()
            if roll < 0.004:
                dirty[f].append(b'{"id": "x", "text": \n')
                injected["malformed JSON"] += 1
            elif roll < 0.008:
                dirty[f].append(json.dumps({"id": ["a"], "unit": "u1", "text": "t"}).encode()
                                + b"\n")
                injected["bad id"] += 1
            elif roll < 0.012:
                dirty[f].append(json.dumps({"id": f"num-{f}-{j}", "unit": "u1", "text": 5})
                                .encode() + b"\n")
                injected["bad text"] += 1
            elif roll < 0.016 and f in (0, 1, 3):  # not in the UTF-16 file
                dirty[f].append(b'{"id": "latin-%d-%d", "unit": "u2", "text": "caf\xe9"}\n'
                                % (f, j))
                injected["bad encoding"] += 1
            elif roll < 0.020 and j > 0:
                earlier = dict(records[rng.randrange(j)], text=f"a different text {j % 3}")
                dirty[f].append(json.dumps(earlier).encode() + b"\n")
                valid[f].append(earlier)
                injected["shared id"] += 1
            elif roll < 0.022 and j > 0:  # an exact copy: one document with the original
                copy = dict(records[rng.randrange(j)])
                dirty[f].append(json.dumps(copy).encode() + b"\n")
                valid[f].append(copy)
            elif roll < 0.024:
                dirty[f].append(b"[1, 2]\n")
                injected["not a JSON object"] += 1
            elif roll < 0.03:
                dirty[f].append(b"\n")  # blank lines are not records
    return valid, dirty, injected


def _write_dirty(directory: Path, dirty: list[list[bytes]]) -> None:
    directory.mkdir()
    (directory / "a.jsonl").write_bytes(b"".join(dirty[0]))
    (directory / "b.jsonl").write_bytes(codecs.BOM_UTF8 + b"".join(dirty[1]))
    text = b"".join(dirty[2]).decode("utf-8")
    (directory / "c.jsonl").write_bytes(text.encode("utf-16"))  # with its BOM
    (directory / "d.jsonl").write_bytes(b"".join(line.replace(b"\n", b"\r\n")
                                                 for line in dirty[3]))


BIG = 8_000  # records of the module's corpus: about 2,500 documents, every kind of bad row


def _shards(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob("*.parquet"))}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """BIG records with duplicate units, shared ids, bad rows and four encodings."""
    root = tmp_path_factory.mktemp("ingest")
    files, dirty, injected = _corpus(BIG)
    _write_dirty(root / "dirty", dirty)
    clean = root / "clean.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for records in files for r in records),
                     encoding="utf-8")
    settings = IngestSettings(unit_column="unit", max_chars=2000)
    report = run_ingest(root / "dirty", root / "shards", settings, on_bad_row="skip")
    return {"root": root, "clean": clean, "injected": injected, "report": report,
            "settings": settings}


@pytest.mark.slow
def test_beam_ingest_equals_the_in_process_reader_on_the_valid_records(big: dict) -> None:
    """Bad rows dropped, every encoding read: exactly the in-process reader's documents."""
    unbounded = read_documents(big["clean"], unit_column="unit", max_chars=2000)
    expected = bound_units(unbounded)
    got = read_documents(big["root"] / "shards", unit_column="unit", max_chars=None)
    assert len(got) == len(expected) > BIG // 4
    assert sorted(zip(got.ids, got.texts, got.units, strict=True)) == sorted(
        zip(expected.ids, expected.texts, expected.units, strict=True))
    report = big["report"]
    assert report.skipped == expected.skipped  # empty, too_long, duplicate, unit_bound agree
    assert report.skipped["unit_bound"] > BIG // 4 and report.skipped["empty"] > 0
    bad = {k: v for k, v in big["injected"].items() if v and k != "shared id"}
    assert report.bad_rows_by_kind == bad and report.bad_rows == sum(bad.values())
    shared = big["injected"]["shared id"]
    assert shared > 0 and report.ids_made_unique == sum("~dup-" in i for i in unbounded.ids)
    assert report.ids_made_unique > shared and report.skipped["duplicate"] > 0
    assert report.documents == len(expected) and report.files == 4


@pytest.mark.slow
def test_beam_ingest_is_deterministic_across_runs_and_parallelism(big: dict) -> None:
    again = big["root"] / "again"
    # multi_threading is run as multi_processing (beam_ingest._pipeline_options): Beam's
    # threaded workers corrupted bundles under load ("Invalid PaneInfoEncoding: 9")
    run_ingest(big["root"] / "dirty", again, big["settings"], on_bad_row="skip",
               beam_options=["--direct_num_workers=2", "--direct_running_mode=multi_threading"])
    first = _shards(big["root"] / "shards")
    assert len(first) == 4 and first == _shards(again)


def test_threaded_direct_workers_run_as_processes() -> None:
    from apache_beam.options.pipeline_options import DirectOptions

    from dpsynrag.pipeline.beam_ingest import _pipeline_options

    _, options = _pipeline_options("direct", ["--direct_num_workers=2",
                                              "--direct_running_mode=multi_threading"])
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    _, single = _pipeline_options("direct", ["--direct_running_mode=multi_threading"])
    assert single.view_as(DirectOptions).direct_running_mode == "multi_threading"  # 1 worker


@pytest.mark.slow
def test_the_report_and_shards_hold_no_bad_row_content(big: dict) -> None:
    report_text = (big["root"] / "shards" / "_ingest" / "report.json").read_text()
    report = json.loads(report_text)
    assert len(report["first_bad_rows"]) == 20
    assert all(set(row) == {"file", "where", "problem"} for row in report["first_bad_rows"])
    for secret in ("a different text", "caf", "latin-", "num-"):
        assert secret not in report_text
    assert oct((big["root"] / "shards").stat().st_mode & 0o777) == "0o700"


def test_a_bad_row_fails_by_default_naming_file_and_line_and_leaves_nothing(tmp_path) -> None:
    source = tmp_path / "notes.jsonl"
    source.write_text('{"id": "1", "text": "fine"}\n\n{"id": "2", "text": 3}\n'
                      '{"id": "3", "text": "x"\n', encoding="utf-8")
    with pytest.raises(InputError) as error:
        run_ingest(source, tmp_path / "out")
    message = str(error.value)
    assert message.startswith(f"{source}: line 3: text is a number, expected a string")
    assert "2 bad rows in all" in message and "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.jsonl"]  # no out, no temp


def test_csv_bad_rows_fallback_encoding_and_multiline_fields(tmp_path) -> None:
    source = tmp_path / "notes.csv"
    source.write_bytes(b'id,unit,text\n1,a,"two\nlines"\n2,b,extra,field\n3,c,caf\xe9\n'
                       b"4,d,plain\n")
    with pytest.raises(InputError, match=r"line 4: row has 4 fields, the header has 3"):
        run_ingest(source, tmp_path / "out", IngestSettings(unit_column="unit"))
    report = run_ingest(source, tmp_path / "out", IngestSettings(unit_column="unit"),
                        on_bad_row="skip")
    assert report.bad_rows_by_kind == {"bad encoding": 1, "wrong number of CSV fields": 1}
    docs = read_documents(tmp_path / "out", unit_column="unit")
    assert sorted(zip(docs.ids, docs.texts, strict=True)) == [("1", "two\nlines"), ("4", "plain")]
    settings = IngestSettings(unit_column="unit", fallback_encoding="cp1252")
    report = run_ingest(source, tmp_path / "fallback", settings, on_bad_row="skip")
    docs = read_documents(tmp_path / "fallback", unit_column="unit")
    assert report.decoded_with_fallback == 1 and "café" in docs.texts


def test_content_ids_across_parquet_files_as_in_process(tmp_path) -> None:
    source = tmp_path / "parts"
    source.mkdir()
    for i, texts in enumerate([["a", "b"], ["c"], ["d", "e", "f"]]):
        pq.write_table(pa.table({"text": texts}), source / f"p{i}.parquet")
    run_ingest(source, tmp_path / "out")
    inline = read_documents(source)
    beam = read_documents(tmp_path / "out")
    assert sorted(zip(beam.ids, beam.texts, strict=True)) == sorted(
        zip(inline.ids, inline.texts, strict=True))
    assert sorted(beam.ids) == sorted(content_id(None, t) for t in "abcdef")


def test_text_directory_with_mixed_encodings(tmp_path) -> None:
    source = tmp_path / "notes"
    (source / "ward").mkdir(parents=True)
    (source / "one.txt").write_bytes(codecs.BOM_UTF8 + "naïve\r\nnote".encode())
    (source / "ward" / "two.txt").write_bytes("zwei Zürich".encode("utf-16"))
    (source / "three.txt").write_bytes(b"caf\xe9")
    report = run_ingest(source, tmp_path / "out", on_bad_row="skip")
    docs = read_documents(tmp_path / "out")
    assert dict(zip(docs.ids, docs.texts, strict=True)) == {
        "one": "naïve\nnote", "ward/two": "zwei Zürich"}
    assert report.bad_rows_by_kind == {"bad encoding": 1}
    assert report.first_bad_rows[0]["where"] == "file three.txt"


def test_pick_keeps_the_smallest_hash_and_concat_respects_the_length_bound() -> None:
    records = [("r1", "aaaa"), ("r2", "bbbbbb"), ("r3", "cc")]
    ranks = sorted(records, key=lambda r: unit_rank("u", r[1]))  # by text, not by id
    doc_id, text, used = bound_one_unit("u", records, "pick")
    assert (doc_id, text) == ranks[0] and len(used) == 1
    doc_id, text, used = bound_one_unit("u", records, "concat", max_chars=None)
    assert doc_id == ranks[0][0] and text == "\n\n".join(t for _, t in ranks)
    doc_id, text, used = bound_one_unit("u", records, "concat", max_chars=9)
    assert len(text) <= 9 and text.startswith(ranks[0][1]) and doc_id == ranks[0][0]
    # the choice depends on the unit's own records only, not on their order
    assert bound_one_unit("u", records[::-1], "concat", 9)[:2] == (doc_id, text)


def test_concat_bounding_agrees_between_beam_and_in_process(tmp_path) -> None:
    source = tmp_path / "notes.jsonl"
    rng = random.Random(3)
    source.write_text("".join(json.dumps({"id": f"n{i}", "unit": f"p{rng.randrange(40)}",
                                          "text": _text(rng)}) + "\n" for i in range(300)),
                      encoding="utf-8")
    settings = IngestSettings(unit_column="unit", unit_bound="concat", max_chars=400)
    report = run_ingest(source, tmp_path / "out", settings)
    beam = read_documents(tmp_path / "out", unit_column="unit", max_chars=None)
    inline = bound_units(read_documents(source, unit_column="unit", max_chars=400), "concat", 400)
    assert sorted(zip(beam.ids, beam.texts, beam.units, strict=True)) == sorted(
        zip(inline.ids, inline.texts, inline.units, strict=True))
    assert len(beam) <= 40 and max(map(len, beam.texts)) <= 400
    assert report.skipped["unit_bound"] == 300 - len(beam)


def test_ingest_cli_bad_input_is_one_line_exit_2(tmp_path) -> None:
    from dpsynrag.cli import main

    source = tmp_path / "notes.jsonl"
    source.write_bytes(b'{"id": "1", "text": "ok"}\n{"id": "2", "text": "\xff"}\n')
    dpsynrag = Path(sys.executable).with_name("dpsynrag")
    env = {**os.environ, "DPSYNRAG_CONFIG_DIR": str(tmp_path / "config")}
    result = subprocess.run([str(dpsynrag), "ingest", str(source), "-o", str(tmp_path / "out")],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [f"dpsynrag: error: {source}: line 2: not valid UTF-8 (byte offset 47 in "
                      "the file) (--on-bad-row skip drops them)"]
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
    # the same input with --on-bad-row skip (in process: the exit code and report suffice)
    assert main(["ingest", str(source), "-o", str(tmp_path / "out"), "--on-bad-row", "skip",
                 "--report-json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["documents"] == 1


def test_ingest_cli_says_merged_for_concat_and_warns_when_pick_leaves_out_most(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.cli import main

    source = tmp_path / "notes.jsonl"
    source.write_text("".join(json.dumps({"id": str(i), "text": f"visit {i} of a patient",
                                          "unit": f"p{i % 2}"}) + "\n" for i in range(6)))
    report = tmp_path / "report.json"
    assert main(["ingest", str(source), "-o", str(tmp_path / "pick"), "--unit-column", "unit",
                 "--report-json", str(report), "--verbose"]) == 0  # counts: --verbose only
    err = capsys.readouterr().err
    assert "skipped (unit_bound): 4" in err
    warning = ("WARNING: --unit-bound pick kept one record per privacy unit and left out 4 of "
               "the 6 records read (67%; 2 documents kept)")
    assert warning in err and "--unit-bound concat" in err
    assert json.loads(report.read_text())["warnings"][0] in err
    assert main(["ingest", str(source), "-o", str(tmp_path / "concat"), "--unit-column", "unit",
                 "--unit-bound", "concat", "--verbose"]) == 0
    err = capsys.readouterr().err
    assert "merged (unit_bound concat): 4" in err and "WARNING" not in err


def test_several_text_columns_agree_between_beam_and_in_process(tmp_path: Path) -> None:
    """Two text columns, some null or empty, in JSONL, CSV and Parquet: the Beam ingest makes
    the in-process reader's documents (joined in order by a blank line), with its skips."""
    import csv

    rng = random.Random(5)
    rows = []
    for i in range(60):
        roll = rng.random()
        subject = None if roll < 0.15 else "" if roll < 0.25 else _text(rng)[:40]
        body = None if 0.2 < roll < 0.35 else _text(rng)
        rows.append({"id": f"n{i}", "unit": f"p{rng.randrange(20)}", "subject": subject,
                     "body": body})
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with (tmp_path / "t.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    columns = ("body", "subject")
    settings = IngestSettings(text_column=columns, unit_column="unit", max_chars=2000)
    for name in ("t.jsonl", "t.csv", "t.parquet"):
        out = tmp_path / f"out-{name}"
        report = run_ingest(tmp_path / name, out, settings)
        beam = read_documents(out, unit_column="unit", max_chars=None)
        read = read_documents(tmp_path / name, text_column=columns, unit_column="unit",
                              max_chars=2000)
        inline = bound_units(read)
        assert sorted(zip(beam.ids, beam.texts, beam.units, strict=True)) == sorted(
            zip(inline.ids, inline.texts, inline.units, strict=True)), name
        assert report.skipped["empty"] == read.skipped["empty"] > 0, name
        assert any("\n\n" in text for text in beam.texts), name
        assert report.as_dict()["settings"]["text_column"] == columns  # JSON: a list


def test_ingest_and_query_take_text_column_lists(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.cli import main
    from dpsynrag.cli.app import build_parser

    source = tmp_path / "tickets.jsonl"
    source.write_text("".join(json.dumps({"id": str(i), "subject": f"ticket {i}",
                                          "body": f"the body of ticket {i}"}) + "\n"
                              for i in range(3)))
    report = tmp_path / "report.json"
    assert main(["ingest", str(source), "-o", str(tmp_path / "out"), "--text-column",
                 "subject", "--text-column", "body", "--report-json", str(report)]) == 0
    assert json.loads(report.read_text())["settings"]["text_column"] == ["subject", "body"]
    docs = read_documents(tmp_path / "out", max_chars=None)
    assert sorted(docs.texts)[0] == "ticket 0\n\nthe body of ticket 0"
    assert main(["ingest", str(source), "-o", str(tmp_path / "one"), "--text-column", "body",
                 "--report-json", str(report)]) == 0
    assert json.loads(report.read_text())["settings"]["text_column"] == "body"
    assert main(["ingest", str(source), "-o", str(tmp_path / "bad"), "--text-column",
                 "subject,subject"]) == 2
    assert "--text-column: column 'subject' is given twice" in capsys.readouterr().err
    query = ["query", "--corpus", str(source), "--method", "dp-rag", "--epsilon", "1", "q?"]
    parser = build_parser()
    assert parser.parse_args(query).text_column is None  # read as "text"
    assert parser.parse_args([*query, "--text-column", "subject, body"]).text_column == [
        "subject", "body"]
