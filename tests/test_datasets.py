"""Tests of dpsynrag.eval.datasets: the fictitious-clinic and support-ticket generators and
the QA loader."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from dpsynrag.eval.datasets import (
    SUPPORT_SYMPTOMS,
    SYMPTOMS,
    DatasetError,
    QAItem,
    is_english_word,
    load_qa_jsonl,
    make_clinic_dataset,
    make_support_dataset,
    write_clinic_dataset,
    write_support_dataset,
)
from dpsynrag.io.errors import InputError
from dpsynrag.io.reader import read_documents

GENERIC_TOKENS = {"syndrome", "fever", "disease", "acute", "chronic", "familial", "benign",
                  "juvenile", "migrating"}


@pytest.fixture(scope="module")
def clinic():
    return make_clinic_dataset(n_notes=2000, n_diseases=40, seed=0)


def test_same_seed_same_bytes_different_seed_different(tmp_path: Path) -> None:
    a = write_clinic_dataset(tmp_path / "a", n_notes=300, n_diseases=20, seed=5)
    b = write_clinic_dataset(tmp_path / "b", n_notes=300, n_diseases=20, seed=5)
    c = write_clinic_dataset(tmp_path / "c", n_notes=300, n_diseases=20, seed=6)
    assert set(a) == {"notes", "queries", "diseases"}
    for key in a:
        assert a[key].read_bytes() == b[key].read_bytes()
        assert a[key].read_bytes() != c[key].read_bytes()


def test_sizes_are_exact() -> None:
    for n_notes, n_diseases, n_queries, revisit in ((2000, 40, None, 0.0), (57, 13, 100, 0.0),
                                                    (500, 30, 7, 0.3), (40, 40, 0, 0.5)):
        data = make_clinic_dataset(n_notes=n_notes, n_diseases=n_diseases, n_queries=n_queries,
                                   seed=1, revisit_fraction=revisit)
        assert len(data.notes) == n_notes
        assert len(data.diseases) == n_diseases
        assert len(data.queries) == (n_diseases if n_queries is None else n_queries)
        assert sum(d.n_notes for d in data.diseases) == n_notes
        assert all(d.n_notes >= 1 for d in data.diseases)  # n_notes >= n_diseases
        assert len({n.id for n in data.notes}) == n_notes
        assert len({q.id for q in data.queries}) == len(data.queries)


def test_written_files_have_the_documented_fields(tmp_path: Path) -> None:
    paths = write_clinic_dataset(tmp_path, n_notes=50, n_diseases=10, seed=2)
    notes = [json.loads(line) for line in paths["notes"].read_text().splitlines()]
    queries = [json.loads(line) for line in paths["queries"].read_text().splitlines()]
    described = json.loads(paths["diseases"].read_text())
    assert all(set(n) == {"id", "text", "unit"} for n in notes)
    assert all(set(q) == {"id", "question", "answer", "patient", "disease"} for q in queries)
    assert all(q["answer"] == q["disease"] for q in queries)
    assert described["n_notes"] == 50 and len(described["diseases"]) == 10
    assert set(described["diseases"][0]) == {"name", "symptoms", "treatment", "frequency",
                                             "n_notes"}
    # the notes are a valid private input, the queries a valid evaluation set
    docs = read_documents(paths["notes"], unit_column="unit")
    assert docs.ids == [n["id"] for n in notes] and docs.texts == [n["text"] for n in notes]
    assert [q.answer for q in load_qa_jsonl(paths["queries"])] == [q["answer"] for q in queries]


def test_names_unique_and_diseases_not_english(clinic) -> None:
    names = [d.name for d in clinic.diseases]
    assert len({n.lower() for n in names}) == len(names)
    invented = set()
    for name in names:
        tokens = re.split(r"[ \-]", name)
        assert len(tokens) >= 2, name
        assert not is_english_word(name) and not is_english_word(name.replace(" ", ""))
        for token in tokens:
            if token.lower() not in GENERIC_TOKENS:
                assert not is_english_word(token), (name, token)
                assert token not in invented, token
                invented.add(token)
    unit_to_patient = {}
    for note in clinic.notes:
        assert unit_to_patient.setdefault(note.unit, note.patient) == note.patient
    assert len(set(unit_to_patient.values())) == len(unit_to_patient) == len(clinic.notes)
    askers = {m.group(1) for q in clinic.queries
              for m in [re.search(r"(?:I am|I'm|My name is) ([A-Z][^.]*?)(?:\.| and)",
                                  q.question)] if m}
    assert askers and not askers & set(unit_to_patient.values())


def test_symptom_sets_are_unique_with_three_or_four(clinic) -> None:
    sets = [frozenset(d.symptoms) for d in clinic.diseases]
    assert len(set(sets)) == len(sets)
    assert all(3 <= len(s) <= 4 for s in sets)
    treatments = [d.treatment for d in clinic.diseases]
    assert len(set(treatments)) == len(treatments)


def test_symptom_table() -> None:
    clinical = [s for s, _ in SYMPTOMS]
    assert len(set(clinical)) == len(clinical) >= 60
    for phrase, paraphrases in SYMPTOMS:
        assert len(paraphrases) == 2 and len(set(paraphrases)) == 2
        for text in (phrase, *paraphrases):
            assert "," not in text, text  # lists are joined with commas
            assert text == text.strip() and text[0].islower()
        assert phrase not in paraphrases


def test_frequencies_are_dirichlet_like(clinic) -> None:
    freqs = [d.frequency for d in clinic.diseases]
    n = len(freqs)
    assert sum(freqs) == pytest.approx(1.0)
    assert min(freqs) < 1 / (4 * n)  # some diseases are rare
    assert max(freqs) > 2 / n
    extra = len(clinic.notes) - n  # one note per disease, the rest Multinomial(p)
    for disease in clinic.diseases:
        expected = extra * disease.frequency
        assert abs(disease.n_notes - 1 - expected) < 5 * expected**0.5 + 2


def test_queries_answer_diseases_present_in_notes(clinic) -> None:
    patients_of = defaultdict(set)
    for note in clinic.notes:
        patients_of[note.disease].add(note.patient)
    assert [q.answer for q in clinic.queries] == [d.name for d in clinic.diseases]
    by_name = {d.name: d for d in clinic.diseases}
    for query in clinic.queries:
        assert query.answer in patients_of
        assert query.patient in patients_of[query.answer]
        assert query.answer not in query.question
        for phrase in by_name[query.answer].symptoms:  # symptoms in other words
            assert phrase not in query.question
        assert query.question.endswith("?")


def test_queries_cycle_with_new_wording() -> None:
    data = make_clinic_dataset(n_notes=400, n_diseases=10, n_queries=30, seed=3)
    by_disease = defaultdict(list)
    for query in data.queries:
        by_disease[query.answer].append(query)
    assert all(len(qs) == 3 for qs in by_disease.values())
    for qs in by_disease.values():
        assert len({q.question for q in qs}) == 3
        assert len({q.patient for q in qs}) > 1 or min(
            d.n_notes for d in data.diseases if d.name == qs[0].answer) == 1


def test_fewer_notes_than_diseases() -> None:
    data = make_clinic_dataset(n_notes=5, n_diseases=20, seed=4)
    present = {n.disease for n in data.notes}
    assert len(data.notes) == 5 and len(data.diseases) == 20
    assert len(data.queries) == len(present)
    assert {q.answer for q in data.queries} == present


def test_notes_name_patient_and_disease(clinic) -> None:
    for note in clinic.notes:
        assert note.patient in note.text
        assert note.disease in note.text
        assert "Dr. " in note.text
        assert re.search(r"\b\d{2}\b", note.text)  # an age
    prefixes = {note.text[:12] for note in clinic.notes}
    assert len({p.split()[0] for p in prefixes}) >= 4  # several templates


def test_revisits_share_unit_patient_and_disease() -> None:
    data = make_clinic_dataset(n_notes=300, n_diseases=15, seed=7, revisit_fraction=0.25)
    by_unit = defaultdict(list)
    for note in data.notes:
        by_unit[note.unit].append(note)
    assert len(by_unit) == 300 - 75
    for notes in by_unit.values():
        assert len({(n.patient, n.disease) for n in notes}) == 1
    assert sum(len(v) > 1 for v in by_unit.values()) > 10


def test_invalid_arguments() -> None:
    for kwargs in ({"n_notes": 0}, {"n_diseases": 0}, {"n_queries": -1},
                   {"revisit_fraction": 1.0}):
        with pytest.raises(ValueError):
            make_clinic_dataset(**kwargs)


# ------------------------------------------------------------------ loader
def test_load_qa_jsonl_optional_fields(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": " Q1? ", "answer": "A1"}\n\n'
                    '{"id": 7, "question": "Q2?", "answer": "A2", "patient": "P", "x": 1}\n')
    assert load_qa_jsonl(path) == [QAItem("line-1", "Q1?", "A1", None),
                                   QAItem("7", "Q2?", "A2", "P")]


@pytest.mark.parametrize(("content", "where", "problem"), [
    (b'{"question": "q", "answer": "a"}\n{"question": "q"\n', "line 2", "malformed JSON"),
    (b'{"question": "q', "line 1", "Unterminated string starting at column 14"),  # one "at"
    (b'{"question": "q\n', "line 1", "Invalid control character at column 16"),
    (b'{"question": "q"}\n', "line 1", "'answer'"),
    (b'{"question": 3, "answer": "a"}\n', "line 1", "'question'"),
    (b'{"question": "q", "answer": "  "}\n', "line 1", "'answer'"),
    (b'["q", "a"]\n', "line 1", "JSON object"),
    (b'{"id": "x", "question": "q", "answer": "a"}\n{"id": "x", "question": "r", "answer": "b"}'
     b'\n', "line 2", "line 1"),
    (b'{"id": true, "question": "q", "answer": "a"}\n', "line 1", "'id'"),
    (b'{"question": "q", "answer": "a", "patient": 5}\n', "line 1", "'patient'"),
    (b'{"question": "q", "answer": "a"}\n{"question": "\xff", "answer": "a"}\n', "line 2",
     "UTF-8"),
    (b"\n\n", None, "no questions"),
])
def test_load_qa_jsonl_errors(tmp_path: Path, content: bytes, where: str | None,
                              problem: str) -> None:
    path = tmp_path / "eval-set.jsonl"
    path.write_bytes(content)
    with pytest.raises(DatasetError) as info:
        load_qa_jsonl(path)
    message = str(info.value)
    assert isinstance(info.value, InputError)
    assert "\n" not in message and "eval-set.jsonl" in message and problem in message
    if where:
        assert where in message


def test_load_qa_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nothing\.jsonl"):
        load_qa_jsonl(tmp_path / "nothing.jsonl")


# ------------------------------------------------------------------ support tickets
@pytest.fixture(scope="module")
def support():
    return make_support_dataset(n_tickets=2000, n_issues=40, seed=0)


def test_support_same_seed_same_bytes_different_seed_different(tmp_path: Path) -> None:
    a = write_support_dataset(tmp_path / "a", n_tickets=300, n_issues=20, seed=5)
    b = write_support_dataset(tmp_path / "b", n_tickets=300, n_issues=20, seed=5)
    c = write_support_dataset(tmp_path / "c", n_tickets=300, n_issues=20, seed=6)
    assert set(a) == {"notes", "queries", "issues"}
    for key in a:
        assert a[key].read_bytes() == b[key].read_bytes()
        assert a[key].read_bytes() != c[key].read_bytes()


def test_support_files_have_the_clinic_layout(tmp_path: Path) -> None:
    paths = write_support_dataset(tmp_path, n_tickets=60, n_issues=10, seed=2)
    notes = [json.loads(line) for line in paths["notes"].read_text().splitlines()]
    queries = [json.loads(line) for line in paths["queries"].read_text().splitlines()]
    described = json.loads(paths["issues"].read_text())
    assert all(set(n) == {"id", "text", "unit"} for n in notes)
    assert all(set(q) == {"id", "question", "answer", "patient", "disease"} for q in queries)
    issues = {i["name"]: i for i in described["issues"]}
    assert all(issues[q["disease"]]["code"] == q["answer"] for q in queries)
    assert described["n_notes"] == 60 and len(issues) == 10 and described["answer"] == "code"
    assert set(described["issues"][0]) == {"name", "product", "code", "symptoms", "fix",
                                           "frequency", "n_notes"}
    docs = read_documents(paths["notes"], unit_column="unit")
    assert docs.ids == [n["id"] for n in notes] and docs.texts == [n["text"] for n in notes]
    items = load_qa_jsonl(paths["queries"])
    assert [(q.answer, q.patient) for q in items] == [(q["answer"], q["patient"])
                                                      for q in queries]


def test_support_sizes_and_units(support) -> None:
    assert len(support.tickets) == 2000 and len(support.issues) == 40
    assert len(support.queries) == 40  # one per issue (all have tickets)
    assert sum(i.n_notes for i in support.issues) == 2000
    assert all(i.n_notes >= 1 for i in support.issues)
    assert len({t.id for t in support.tickets}) == len({t.unit for t in support.tickets}) == 2000
    small = make_support_dataset(n_tickets=5, n_issues=20, n_queries=12, seed=4)
    present = {t.issue for t in small.tickets}
    assert len(small.tickets) == 5 and len(small.queries) == 12
    assert {q.answer for q in small.queries} == {i.code for i in small.issues
                                                  if i.name in present}


def test_support_customers_unique_and_never_agents_or_askers(support) -> None:
    customers = [t.customer for t in support.tickets]
    assert len(set(customers)) == len(customers)
    for ticket in support.tickets:
        assert ticket.customer in ticket.text
    agents = {m.group(1) for t in support.tickets
              for m in [re.search(r"(?:Agent|by|from|given by) ([A-Z]\S+(?: [A-Z]\.)? [A-Z]"
                                  r"[a-z]+)(?:[ :,]|$)", t.text)] if m} - set(customers)
    assert 2 <= len(agents) <= 8
    askers = {m.group(1) for q in support.queries
              for m in [re.search(r"(?:I'm|My name is|Hello,) ([A-Z][^.]*?)(?:\.| and| here)",
                                  q.question)] if m}
    assert askers and not askers & set(customers)


def test_support_issue_names_products_and_codes(support) -> None:
    products = [i.product for i in support.issues]
    codes = [i.code for i in support.issues]
    assert len({p.lower() for p in products}) == len(products)
    assert len(set(codes)) == len(codes)
    assert all(not is_english_word(p) for p in products)
    assert any(p.islower() and p.isalpha() for p in products)  # plain lowercase
    assert any(any(c.isdigit() for c in p) for p in products)  # with digits
    assert any(re.search(r"[a-z][A-Z]", p) for p in products)  # camelCase
    assert all(re.fullmatch(r"E-\d{4}|0x[0-9A-F]{8}|ERR_[A-Z]+_\d\d|[A-Z]{2}\d{3}", c)
               for c in codes)
    assert len({re.sub(r"\d", "9", c)[:3] for c in codes}) >= 3  # several code shapes
    assert len({frozenset(i.symptoms) for i in support.issues}) == 40
    assert all(2 <= len(i.symptoms) <= 3 for i in support.issues)
    by_name = {i.name: i for i in support.issues}
    for ticket in support.tickets[:300]:
        issue = by_name[ticket.issue]
        assert issue.product in ticket.text and issue.code in ticket.text
        assert issue.fix in ticket.text
        assert all(symptom in ticket.text for symptom in issue.symptoms)
    assert len({t.text.split()[0] for t in support.tickets}) >= 4  # several templates


def test_support_frequencies_are_skewed(support) -> None:
    counts = sorted(i.n_notes for i in support.issues)
    assert sum(i.frequency for i in support.issues) == pytest.approx(1.0)
    assert counts[-1] >= 8 * counts[len(counts) // 2]  # a Zipf head (measured 501 vs 25)
    assert sum(c < 15 for c in counts) >= 3  # and rare issues (measured 8 below 15)
    extra = len(support.tickets) - len(support.issues)
    for issue in support.issues:
        expected = extra * issue.frequency
        assert abs(issue.n_notes - 1 - expected) < 5 * expected**0.5 + 2


def test_support_queries_paraphrase_without_the_answer(support) -> None:
    by_code = {i.code: i for i in support.issues}
    for query in support.queries:
        issue = by_code[query.answer]
        assert query.answer.lower() not in query.question.lower()
        assert issue.product.lower() not in query.question.lower()
        for symptom in issue.symptoms:
            assert symptom not in query.question
        assert query.question.endswith("?")
        assert query.patient in {t.customer for t in support.tickets if t.issue == issue.name}
    cycled = make_support_dataset(n_tickets=300, n_issues=10, n_queries=30, seed=3)
    by_answer = defaultdict(list)
    for query in cycled.queries:
        by_answer[query.answer].append(query.question)
    assert all(len(set(qs)) == 3 for qs in by_answer.values())


def test_support_symptom_table() -> None:
    ticket_phrases = [s for s, _ in SUPPORT_SYMPTOMS]
    assert len(set(ticket_phrases)) == len(ticket_phrases) >= 40
    for phrase, paraphrases in SUPPORT_SYMPTOMS:
        assert len(set(paraphrases)) == 2 and phrase not in paraphrases
        for text in (phrase, *paraphrases):
            assert "," not in text and text == text.strip() and text[0].islower(), text


def test_support_invalid_arguments() -> None:
    for kwargs in ({"n_tickets": 0}, {"n_issues": 0}, {"n_queries": -1}, {"n_issues": 1001}):
        with pytest.raises(ValueError):
            make_support_dataset(**kwargs)


def test_dataset_command_writes_both_kinds(tmp_path: Path, capsys) -> None:
    from dpsynrag.cli import main

    assert main(["dataset", "support", "-o", str(tmp_path / "s"), "--notes", "40",
                 "--diseases", "6", "--seed", "1"]) == 0
    expected = write_support_dataset(tmp_path / "ref", n_tickets=40, n_issues=6, seed=1)
    for key, path in expected.items():
        assert (tmp_path / "s" / path.name).read_bytes() == path.read_bytes(), key
    assert main(["dataset", "clinic", "-o", str(tmp_path / "c"), "--notes", "40",
                 "--diseases", "6"]) == 0
    clinic_ref = write_clinic_dataset(tmp_path / "cref", n_notes=40, n_diseases=6, seed=0)
    for path in clinic_ref.values():
        assert (tmp_path / "c" / path.name).read_bytes() == path.read_bytes()
    assert "issues.json" in capsys.readouterr().out


def test_person_names_stay_unique_past_the_one_initial_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A collection larger than the lists' first + last (+ one initial) names takes two
    initials from then on; names before that point are drawn as they always were."""
    from dpsynrag.eval import datasets

    monkeypatch.setattr(datasets, "_FIRST_NAMES", ["Ana", "Ben"])
    monkeypatch.setattr(datasets, "_LAST_NAMES", ["Roe", "Doe"])
    names = datasets._Names(np.random.default_rng(0))
    drawn = [names.new() for _ in range(400)]  # 4 + 4 x 26 = 108 with one initial at most
    assert len(set(drawn)) == 400 and names.crowded
    assert all(name.count(".") <= 1 for name in drawn[:100])
    assert sum(name.count(".") == 2 for name in drawn) >= 400 - 108
