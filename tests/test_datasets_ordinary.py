"""Tests of dpsynrag.eval.datasets_ordinary: the ``conditions`` and ``films`` generators,
whose answers are ordinary words."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from dpsynrag.eval.datasets import _english_or_plural, load_qa_jsonl
from dpsynrag.eval.datasets_ordinary import (
    CONDITION_TEMPLATES,
    CONDITIONS,
    FILM_TEMPLATES,
    PLOT_ELEMENTS,
    make_conditions_dataset,
    make_films_dataset,
    make_ordinary_dataset,
    min_notes,
    shared_words,
    write_conditions_dataset,
    write_films_dataset,
    zipf_counts,
)
from dpsynrag.eval.metrics import contains_answer
from dpsynrag.eval.template_files import PLACEHOLDERS, TemplateFileError, load_template_set
from dpsynrag.eval.template_set import TemplateSet
from dpsynrag.io.reader import read_documents

REPO = Path(__file__).resolve().parents[1]
#: The template sets of past measurements: one folder per variant, one TOML file per kind.
SETS = REPO / "benchmarks" / "sets"
#: Every variant but the built-in dev set, as the folder lists them.
FILE_VARIANTS = tuple(sorted(d.name for d in SETS.iterdir() if d.is_dir()))
VARIANTS = ("dev", *FILE_VARIANTS)
WRITERS = {"conditions": write_conditions_dataset, "films": write_films_dataset}


def _read_set(kind: str, variant: str) -> TemplateSet:
    """The test's own reading of a set (tomllib, not the package's loader): an oracle."""
    if variant == "dev":
        return CONDITION_TEMPLATES if kind == "conditions" else FILM_TEMPLATES
    raw = tomllib.loads((SETS / variant / f"{kind}.toml").read_text(encoding="utf-8"))
    return TemplateSet(notes=tuple(raw["notes"]), queries=tuple(raw["queries"]))


def _file(kind: str, variant: str) -> Path:
    return SETS / variant / f"{kind}.toml"


TEMPLATES = {kind: {v: _read_set(kind, v) for v in VARIANTS} for kind in ("conditions", "films")}
LAY = {phrase: lay for phrase, lay in PLOT_ELEMENTS}
#: The variants written for one blind measurement each (every variant but dev and heldout).
BLIND_VARIANTS = tuple(v for v in FILE_VARIANTS if v != "heldout")
#: The blind variants from ``unseen`` on (all but the first two, ``fresh`` and ``final``).
LATER_VARIANTS = tuple(v for v in BLIND_VARIANTS if v not in ("fresh", "final"))


@pytest.fixture(scope="module")
def conditions():
    return make_conditions_dataset(n_notes=4000, seed=0)


@pytest.fixture(scope="module")
def films():
    return make_films_dataset(n_notes=4000, seed=0)


def _answers(data) -> list:
    """(answer, rank, n_notes, lay paraphrase pairs) per condition or film."""
    if data.kind == "conditions":
        lay = {c[0]: [pair for _, pair in c[2]] for c in CONDITIONS}
        return [(c.name, c.rank, c.n_notes, lay[c.name]) for c in data.conditions]
    return [(f.title, f.rank, f.n_notes, [LAY[p] for p in f.plot]) for f in data.films]


@functools.cache
def _regex(template: str) -> re.Pattern[str]:
    """A template's pattern, compiled once (re's own cache holds fewer than the variants)."""
    parts = re.split(r"\{\w+\}", template)
    return re.compile("(.+?)".join(re.escape(p) for p in parts) + r"\Z", re.DOTALL)


def _matches(text: str, templates: tuple[str, ...]) -> bool:
    return any(_regex(t).match(text) for t in templates)


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_same_seed_same_bytes_different_seed_different(tmp_path: Path, kind: str) -> None:
    write = WRITERS[kind]
    a = write(tmp_path / "a", n_notes=300, seed=5)
    b = write(tmp_path / "b", n_notes=300, seed=5)
    c = write(tmp_path / "c", n_notes=300, seed=6)
    assert set(a) == {"notes", "queries", kind}
    for key in a:
        assert a[key].read_bytes() == b[key].read_bytes()
        assert a[key].read_bytes() != c[key].read_bytes()


@pytest.mark.parametrize("make", [make_conditions_dataset, make_films_dataset])
@pytest.mark.parametrize("n_notes,n_queries", [(4000, None), (1000, 7), (200, 100), (41, 0),
                                               (12, None)])
def test_sizes_and_minimum_counts(make, n_notes: int, n_queries: int | None) -> None:
    data = make(n_notes=n_notes, n_queries=n_queries, seed=3)
    answers = _answers(data)
    assert len(answers) == 40
    assert len(data.notes) == n_notes == sum(n for _, _, n, _ in answers)
    present = sum(n > 0 for _, _, n, _ in answers)
    assert len(data.queries) == (present if n_queries is None else n_queries)
    if n_notes >= 40:
        assert min(n for _, _, n, _ in answers) >= min(min_notes(n_notes), n_notes // 40)
    assert len({n.id for n in data.notes}) == len({n.unit for n in data.notes}) == n_notes
    assert len({q.id for q in data.queries}) == len(data.queries)


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_zipf_counts_at_4000_notes(kind: str, conditions, films) -> None:
    data = conditions if kind == "conditions" else films
    answers = _answers(data)
    counts = [n for _, _, n, _ in answers]
    assert 13 <= min(counts) <= 17
    assert max(counts) >= 150
    assert sorted(r for _, r, _, _ in answers) == list(range(1, 41))
    by_rank = [n for _, _, n, _ in sorted(answers, key=lambda a: a[1])]
    assert by_rank == sorted(by_rank, reverse=True) == zipf_counts(4000, 40)
    assert by_rank[0] >= 3 * by_rank[9] and by_rank[9] >= 5 * by_rank[39]  # a steep head
    # the seed shuffles which answer is frequent
    other = make_ordinary_dataset(kind, n_notes=400, seed=1)
    assert [r for _, r, _, _ in _answers(other)] != [r for _, r, _, _ in answers]


@pytest.mark.parametrize("n_notes", [1, 39, 40, 41, 100, 599, 2000, 4000, 10_000])
def test_zipf_counts_properties(n_notes: int) -> None:
    counts = zipf_counts(n_notes, 40)
    assert sum(counts) == n_notes and len(counts) == 40
    assert counts == sorted(counts, reverse=True)
    if n_notes >= 40:
        assert min(counts) == min(min_notes(n_notes), n_notes // 40)
    assert min_notes(4000) == 15 and min_notes(200) == 1


@pytest.mark.parametrize("kind", ["conditions", "films"])
@pytest.mark.parametrize("variant", ["dev", *FILE_VARIANTS])
def test_queries_never_give_the_answer_away(kind: str, variant: str) -> None:
    templates = None if variant == "dev" else _file(kind, variant)
    data = make_ordinary_dataset(kind, n_notes=600, n_queries=200, seed=2, templates=templates)
    answers = [a for a, _, _, _ in _answers(data)]
    for q in data.queries:
        assert q.answer.lower() not in q.question.lower()
        assert not shared_words(q.question, q.answer), q.question
        assert not any(contains_answer(q.question, a) for a in answers), q.question


def test_lay_paraphrases_share_no_word_with_the_answer(conditions, films) -> None:
    for data in (conditions, films):
        for answer, _, _, lay in _answers(data):
            for pair in lay:
                assert len(pair) == 2
                for phrase in pair:
                    assert not shared_words(phrase, answer), (answer, phrase)
    assert shared_words("Bell's palsy", "the bells rang") == {"bell"}  # the check is strict


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_answers_verbatim_in_their_notes_and_only_there(kind: str, conditions, films) -> None:
    data = conditions if kind == "conditions" else films
    answers = [a for a, _, _, _ in _answers(data)]
    for note in data.notes:
        assert note.answer in note.text  # exact case: the answer as written in the notes
        assert note.person in note.text
        assert [a for a in answers if contains_answer(note.text, a)] == [note.answer]


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_person_names_unique(kind: str, conditions, films) -> None:
    data = conditions if kind == "conditions" else films
    persons = [n.person for n in data.notes]
    assert len(set(persons)) == len(persons)
    unit = "patient-" if kind == "conditions" else "viewer-"
    assert all(n.unit.startswith(unit) for n in data.notes)
    holders: dict[str, set[str]] = {}
    for n in data.notes:
        holders.setdefault(n.answer, set()).add(n.person)
    for q in data.queries:
        assert q.patient in holders[q.answer]
        assert not any(p in q.question for p in persons)  # askers are fresh names


def test_condition_table() -> None:
    names = [c[0] for c in CONDITIONS]
    assert len(names) == len(set(names)) == 40
    assert sum(bool(re.search(r"[A-Z0-9]", n)) for n in names) >= 6
    assert sum(" " in n for n in names) >= 15
    for _name, treatment, symptoms in CONDITIONS:
        assert treatment and 3 <= len(symptoms) <= 4
        for clinical, lay in symptoms:
            assert clinical and all(lay) and clinical not in lay
    phrases = [s for c in CONDITIONS for s, _ in c[2]]
    assert len(phrases) == len(set(phrases))
    notes = make_conditions_dataset(n_notes=100).notes  # every condition has a note
    flu = [n.text for n in notes if n.answer == "influenza"]
    lyme = [n.text for n in notes if n.answer == "Lyme disease"]
    assert flu and all("influenza" in t and "Influenza" not in t for t in flu)
    assert lyme and all("Lyme disease" in t for t in lyme)


def test_film_titles_are_ordinary_words(films) -> None:
    titles = [f.title for f in films.films]
    assert len(set(titles)) == 40
    for title in titles:
        assert all(t.isdigit() or (t[0].isupper() and _english_or_plural(t.lower()))
                   for t in title.split()), title
        assert not any(contains_answer(title, t) for t in titles if t != title)
    assert sum(any(t.isdigit() for t in title.split()) for title in titles) >= 3
    assert all(len(f.plot) == 3 and f.genre and f.director for f in films.films)
    assert len({tuple(sorted(f.plot)) for f in films.films}) == 40
    for seed in range(1, 6):  # other seeds make other, equally valid titles
        other = make_films_dataset(n_notes=50, seed=seed)
        assert len({f.title for f in other.films}) == 40


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_template_variants_are_separate(kind: str) -> None:
    sets = TEMPLATES[kind]
    assert len(sets["dev"].notes) >= 8
    assert len(sets["heldout"].notes) >= 4 and len(sets["heldout"].queries) >= 4
    assert len(sets["fresh"].notes) >= 6 and len(sets["fresh"].queries) >= 5
    assert len(sets["final"].notes) >= 8 and len(sets["final"].queries) >= 6
    for variant in LATER_VARIANTS:  # unseen and after
        assert len(sets[variant].notes) >= 10 and len(sets[variant].queries) >= 8, variant
    for a in VARIANTS:
        for b in VARIANTS:
            if a < b:
                assert not set(sets[a].notes) & set(sets[b].notes), (a, b)
                assert not set(sets[a].queries) & set(sets[b].queries), (a, b)
    made = {"dev": make_ordinary_dataset(kind, n_notes=300, seed=4),
            "heldout": make_ordinary_dataset(kind, n_notes=300, seed=4,
                                             templates=SETS / "heldout"),
            **{variant: make_ordinary_dataset(kind, n_notes=300, n_queries=60, seed=4,
                                              templates=_file(kind, variant))
               for variant in BLIND_VARIANTS}}
    for variant, data in made.items():
        own = sets[variant]
        others = [sets[v] for v in VARIANTS if v != variant]
        recorded = "dev" if variant == "dev" else _file(kind, variant).as_posix()
        assert data.templates == recorded  # a folder given: its <kind>.toml recorded
        assert data.describe()["templates"] == recorded and "heldout" not in data.describe()
        answers = [a for a, _, _, _ in _answers(data)]
        for n in data.notes:
            assert _matches(n.text, own.notes), n.text
            assert n.answer in n.text and n.person in n.text, n.text  # verbatim, only its own
            assert [a for a in answers if contains_answer(n.text, a)] == [n.answer], n.text
            assert not any(_matches(n.text, o.notes) for o in others), n.text
        for q in data.queries:
            assert _matches(q.question, own.queries), q.question
            assert not any(_matches(q.question, o.queries) for o in others), q.question
        used = Counter(next(t for t in own.notes if _regex(t).match(n.text))
                       for n in data.notes)
        assert len(used) == len(own.notes)  # every note template is used
    for variant in BLIND_VARIANTS:  # every query template is used
        assert {next(t for t in sets[variant].queries if _regex(t).match(q.question))
                for q in made[variant].queries} == set(sets[variant].queries)


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_a_folder_names_its_kinds_file_and_dev_is_the_built_in_set(tmp_path: Path,
                                                                    kind: str) -> None:
    write = WRITERS[kind]
    a = write(tmp_path / "a", n_notes=120, seed=3, templates=SETS / "heldout")
    b = write(tmp_path / "b", n_notes=120, seed=3, templates=_file(kind, "heldout"))
    c = write(tmp_path / "c", n_notes=120, seed=3, templates=str(_file(kind, "heldout")))
    for key in a:
        assert a[key].read_bytes() == b[key].read_bytes() == c[key].read_bytes()
    dev = make_ordinary_dataset(kind, n_notes=120, seed=3)
    assert dev == make_ordinary_dataset(kind, n_notes=120, seed=3, templates="dev")
    assert dev.templates == "dev"
    with pytest.raises(TemplateFileError, match="no such file"):
        make_ordinary_dataset(kind, n_notes=120, templates=tmp_path / "new.toml")
    with pytest.raises(TemplateFileError, match="no such file"):
        make_ordinary_dataset(kind, n_notes=120, templates=tmp_path)  # no <kind>.toml in it


#: sha256 of notes.jsonl + queries.jsonl of two sets at --notes 300, seed 0, written while the
#: templates lived in Python modules of the package: the TOML files make the same bytes.
BEFORE_THE_FILES = {
    ("films", "blind11"): "87dc2b86831e141813bf02d14f0e615a782f676d4a14ad740e900c97f1a06057",
    ("conditions", "heldout"):
        "3cf0c6a5f60b61d43e8e62888850e850e1729132fd6e99a0d3cd45fee254ba77",
}


@pytest.mark.parametrize(("kind", "variant"), sorted(BEFORE_THE_FILES))
def test_a_template_file_makes_the_set_it_made_before_it_was_a_file(
        tmp_path: Path, kind: str, variant: str) -> None:
    paths = WRITERS[kind](tmp_path, n_notes=300, seed=0, templates=SETS / variant)
    digest = hashlib.sha256(paths["notes"].read_bytes() + paths["queries"].read_bytes())
    assert digest.hexdigest() == BEFORE_THE_FILES[kind, variant]


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_every_set_loads_and_its_placeholders_are_those_the_generator_fills(
        tmp_path: Path, kind: str) -> None:
    """Each file passes the loader's checks and holds exactly what tomllib reads; a file with
    every placeholder the loader allows generates notes and queries with all of them filled
    (the loader's table is the generator's)."""
    for variant in FILE_VARIANTS:
        loaded = load_template_set(SETS / variant, kind)
        assert (loaded.notes, loaded.queries) == (TEMPLATES[kind][variant].notes,
                                                  TEMPLATES[kind][variant].queries)
        assert loaded.description and "\n" not in loaded.description
    for template_set in TEMPLATES[kind].values():  # the built-in set too
        for part in ("notes", "queries"):
            required, allowed = PLACEHOLDERS[kind][part]
            for template in getattr(template_set, part):
                names = set(re.findall(r"\{(\w+)\}", template))
                assert set(required) <= names <= set(allowed), template
    every = {part: " ".join(f"<{n}={{{n}}}>" for n in allowed) + " {{literal}}"
             for part, (_, allowed) in PLACEHOLDERS[kind].items()}
    (tmp_path / f"{kind}.toml").write_text(
        f"description = \"every placeholder\"\nnotes = [{json.dumps(every['notes'])}]\n"
        f"queries = [{json.dumps(every['queries'])}]\n", encoding="utf-8")
    data = make_ordinary_dataset(kind, n_notes=50, n_queries=10, seed=1, templates=tmp_path)
    for text in [n.text for n in data.notes] + [q.question for q in data.queries]:
        assert "{literal}" in text and not re.search(r"\{(?!literal\})", text), text
        assert "=>" not in text  # every placeholder got a value


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_files_readable(tmp_path: Path, kind: str) -> None:
    paths = WRITERS[kind](tmp_path, n_notes=120, seed=7)
    notes = [json.loads(line) for line in paths["notes"].read_text().splitlines()]
    assert all(set(n) == {"id", "text", "unit"} for n in notes)
    docs = read_documents(paths["notes"], unit_column="unit")
    assert docs.ids == [n["id"] for n in notes] and docs.texts == [n["text"] for n in notes]
    items = load_qa_jsonl(paths["queries"])
    rows = [json.loads(line) for line in paths["queries"].read_text().splitlines()]
    assert all(set(r) == {"id", "question", "answer", "patient"} for r in rows)
    assert [i.answer for i in items] == [r["answer"] for r in rows]
    assert all(i.patient for i in items)
    described = json.loads(paths[kind].read_text())
    assert described["n_notes"] == 120 and len(described[kind]) == 40
    assert sum(a["n_notes"] for a in described[kind]) == 120


def test_invalid_arguments() -> None:
    for make in (make_conditions_dataset, make_films_dataset):
        with pytest.raises(ValueError):
            make(n_notes=0)
        with pytest.raises(ValueError):
            make(n_notes=10, n_queries=-1)
    with pytest.raises(ValueError):
        make_ordinary_dataset("clinic")


def test_dataset_command(tmp_path: Path, capsys) -> None:
    from dpsynrag.cli import main

    assert main(["dataset", "conditions", "-o", str(tmp_path / "c"), "--notes", "200"]) == 0
    expected = write_conditions_dataset(tmp_path / "ref", n_notes=200, seed=0)
    for key, path in expected.items():
        assert (tmp_path / "c" / path.name).read_bytes() == path.read_bytes(), key
    assert "conditions.json" in capsys.readouterr().out
    assert main(["dataset", "films", "-o", str(tmp_path / "f"), "--notes", "60", "--seed",
                 "2", "--templates", str(SETS / "heldout"), "--queries", "5"]) == 0
    ref = write_films_dataset(tmp_path / "fref", n_notes=60, seed=2, templates=SETS / "heldout",
                              n_queries=5)
    for path in ref.values():
        assert (tmp_path / "f" / path.name).read_bytes() == path.read_bytes()
    capsys.readouterr()
    for kind, named in (("films", "films.toml"), ("clinic", "<kind>.toml")):
        # --heldout is gone: one line that says what to write instead
        assert main(["dataset", kind, "-o", str(tmp_path / "x"), "--heldout"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["dpsynrag: error: --heldout is gone: use --templates "
                       f"benchmarks/sets/heldout/{named}"]
        assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_dataset_command_reads_a_template_file_or_folder(tmp_path: Path, kind: str,
                                                         capsys) -> None:
    from dpsynrag.cli import main

    for variant in BLIND_VARIANTS:
        out = tmp_path / variant
        assert main(["dataset", kind, "-o", str(out / "f"), "--notes", "80", "--seed", "11",
                     "--templates", str(_file(kind, variant))]) == 0
        ref = WRITERS[kind](out / "ref", n_notes=80, seed=11, templates=SETS / variant)
        for path in ref.values():
            assert (out / "f" / path.name).read_bytes() == path.read_bytes()
        described = json.loads((out / "f" / f"{kind}.json").read_text())
        assert described["templates"] == _file(kind, variant).as_posix()
    capsys.readouterr()
    assert main(["dataset", "clinic", "-o", str(tmp_path / "x"), "--templates",
                 str(SETS / "fresh")]) == 2
    assert capsys.readouterr().err.strip() == ("dpsynrag: error: --templates applies to "
                                               "conditions and films only")
    assert not (tmp_path / "x").exists()


def _bad_files(kind: str) -> list[tuple[str, str]]:
    """(file content, the problem the one-line error names) for a ``kind`` template file."""
    answer, slot = ("condition", "symptoms") if kind == "conditions" else ("title", "plot")
    note, query = f'"{{name}} has {{{answer}}}"', f'"What is {{{slot}}}?"'
    return [
        ("description = 'x'\nnotes = [", "not TOML (Invalid value (at end of document))"),
        (f"description = 'x'\nnotes = [{note}]\n", "missing key 'queries'"),
        (f"notes = [{note}]\nqueries = [{query}]\n", "missing key 'description'"),
        (f"description = 'x'\nnotes = []\nqueries = [{query}]\n", "notes is empty"),
        (f"description = 'x'\nnotes = {note}\nqueries = [{query}]\n",
         "notes must be a list of strings"),
        (f"description = 'x'\nnotes = [{note}, '{{name}} was seen']\nqueries = [{query}]\n",
         f"notes, template 2: no {{{answer}}} (every {kind} note template needs {{name}}, "
         f"{{{answer}}})"),
        (f"description = 'x'\nnotes = [{note}]\nqueries = ['What is it?']\n",
         f"queries, template 1: no {{{slot}}}"),
        (f"description = 'x'\nnotes = ['{{name}} {{{answer}}} {{patient}}']\n"
         f"queries = [{query}]\n", "notes, template 1: unknown placeholder {patient}"),
        (f"description = 'x'\nnotes = ['{{name}} {{{answer}}} {{']\nqueries = [{query}]\n",
         "notes, template 1: not a template"),
        (f"description = 'x'\nnote = [{note}]\nnotes = [{note}]\nqueries = [{query}]\n",
         "unknown key 'note'"),
    ]


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_a_bad_template_file_is_one_line_naming_the_file_and_the_problem(
        tmp_path: Path, kind: str, capsys) -> None:
    from dpsynrag.cli import main

    bad = tmp_path / "bad.toml"
    for content, problem in _bad_files(kind):
        bad.write_text(content, encoding="utf-8")
        assert main(["dataset", kind, "-o", str(tmp_path / "x"), "--templates", str(bad)]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in captured.err, captured.err
        assert err[0].startswith(f"dpsynrag: error: --templates {bad}: "), err[0]
        assert problem in err[0], (problem, err[0])
        assert not (tmp_path / "x").exists()
        with pytest.raises(TemplateFileError):
            load_template_set(bad, kind)
    # a folder without the kind's file: the file it looked for
    assert main(["dataset", kind, "-o", str(tmp_path / "x"), "--templates",
                 str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"dpsynrag: error: --templates {tmp_path / f'{kind}.toml'}: no such file")


def test_an_old_variant_name_points_to_its_file(tmp_path: Path, monkeypatch, capsys) -> None:
    from dpsynrag.cli import main

    monkeypatch.chdir(REPO)
    assert main(["dataset", "films", "-o", str(tmp_path / "x"), "--templates", "blind11"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dpsynrag: error: --templates blind11: no such file (the template sets are files "
        "now: --templates benchmarks/sets/blind11/films.toml)")


def test_a_template_set_whose_queries_give_the_answer_away_is_refused(tmp_path: Path,
                                                                      capsys) -> None:
    from dpsynrag.cli import main

    (tmp_path / "conditions.toml").write_text(
        "description = 'x'\nnotes = ['{name}: {condition}']\n"
        "queries = ['Is {symptoms} influenza?']\n", encoding="utf-8")
    assert main(["dataset", "conditions", "-o", str(tmp_path / "x"), "--notes", "60",
                 "--templates", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"dpsynrag: error: --templates {tmp_path / 'conditions.toml'}: query for "), err


def test_dataset_help_names_the_template_files(capsys) -> None:
    from dpsynrag.cli import main

    with pytest.raises(SystemExit):
        main(["dataset", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--templates PATH" in text and "--heldout" not in text
    assert "a TOML file (description, notes, queries) or a folder holding <kind>.toml" in text
    assert "default dev, the built-in set to tune on" in text
    assert "benchmarks/sets/" in text


def test_eval_harness_generates_the_kinds(tmp_path: Path) -> None:
    from dpsynrag.eval.harness import EvalSettings, load_data

    for kind in ("conditions", "films"):
        data = load_data(EvalSettings(dataset=kind, n_notes=100, seed=1, n_queries=10),
                         tmp_path / kind)
        ref = make_ordinary_dataset(kind, n_notes=100, seed=1, n_queries=10)
        assert data.notes == [n.text for n in ref.notes]
        assert data.questions == [q.question for q in ref.queries]
        assert data.answers == [q.answer for q in ref.queries]
        assert data.names == sorted(n.person for n in ref.notes)
        assert data.description["name"] == kind
        assert len(data.attack_questions) == len(set(data.answers))
        assert data.notes_path == tmp_path / kind / "data" / "notes.jsonl"


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_a_set_reports_the_command_that_makes_it_and_whether_it_still_does(
        tmp_path: Path, kind: str, monkeypatch, capsys) -> None:
    """An eval report names the ``dpsynrag dataset`` command of a generated set; running that
    command writes the same files, and a set edited since is reported as not reproduced."""
    import shlex

    from dpsynrag.cli import main
    from dpsynrag.eval.datasets_ordinary import generation_recipe

    monkeypatch.chdir(REPO)  # the template file's path is recorded as given, here relative
    assert main(["dataset", kind, "-o", str(tmp_path / "set"), "--notes", "120",
                 "--queries", "44", "--seed", "9", "--templates", "benchmarks/sets/blind9"]) == 0
    recipe = generation_recipe(tmp_path / "set", kind)
    assert recipe == {"command": f"dpsynrag dataset {kind} --templates "
                                 f"benchmarks/sets/blind9/{kind}.toml --notes 120 "
                                 f"--queries 44 --seed 9", "reproduced": True}
    assert main([*shlex.split(recipe["command"])[1:], "-o", str(tmp_path / "again")]) == 0
    for name in ("notes.jsonl", "queries.jsonl", f"{kind}.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "set" / name).read_bytes()
    capsys.readouterr()
    # a set written while the sets were modules names its variant: the command names its file
    described = tmp_path / "set" / f"{kind}.json"
    header = json.loads(described.read_text(encoding="utf-8"))
    described.write_text(json.dumps({**header, "templates": "blind9", "heldout": False}),
                         encoding="utf-8")
    assert generation_recipe(tmp_path / "set", kind) == recipe
    monkeypatch.chdir(tmp_path)  # where no benchmarks/sets lies: the old command, not made
    assert generation_recipe(tmp_path / "set", kind) == {
        "command": recipe["command"].replace(f"benchmarks/sets/blind9/{kind}.toml", "blind9"),
        "reproduced": False}
    monkeypatch.chdir(REPO)
    described.write_text(json.dumps(header), encoding="utf-8")
    notes = tmp_path / "set" / "notes.jsonl"
    lines = notes.read_text(encoding="utf-8").splitlines(keepends=True)
    notes.write_text("".join(lines[:-1]), encoding="utf-8")  # one note removed
    assert generation_recipe(tmp_path / "set", kind) == {**recipe, "reproduced": False}
    assert generation_recipe(tmp_path / "set", "films" if kind == "conditions" else
                             "conditions") is None  # no description of that kind
    (tmp_path / "set" / f"{kind}.json").write_text('{"generator": "elsewhere/v9"}')
    assert generation_recipe(tmp_path / "set", kind) is None


def test_a_set_made_from_a_template_file_edited_since_is_not_reproduced(tmp_path: Path) -> None:
    from dpsynrag.eval.datasets_ordinary import generation_recipe

    mine = tmp_path / "films.toml"
    mine.write_bytes(_file("films", "blind10").read_bytes())
    write_films_dataset(tmp_path / "set", n_notes=90, n_queries=20, seed=1, templates=mine)
    assert generation_recipe(tmp_path / "set", "films") == {
        "command": f"dpsynrag dataset films --templates {mine.as_posix()} --notes 90 "
                   "--queries 20 --seed 1", "reproduced": True}
    raw = tomllib.loads(mine.read_text(encoding="utf-8"))
    mine.write_text(f"description = 'x'\nnotes = {json.dumps(raw['notes'][1:])}\n"
                    f"queries = {json.dumps(raw['queries'])}\n", encoding="utf-8")
    assert generation_recipe(tmp_path / "set", "films")["reproduced"] is False
