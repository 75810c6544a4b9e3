"""Tests of dpsynrag.eval.datasets_ordinary: the ``conditions`` and ``films`` generators,
whose answers are ordinary words."""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from dpsynrag.eval.datasets import _english_or_plural, load_qa_jsonl
from dpsynrag.eval.datasets_ordinary import (
    CONDITION_TEMPLATES,
    CONDITION_TEMPLATES_FRESH,
    CONDITION_TEMPLATES_HELDOUT,
    CONDITIONS,
    FILM_TEMPLATES,
    FILM_TEMPLATES_FRESH,
    FILM_TEMPLATES_HELDOUT,
    PLOT_ELEMENTS,
    TEMPLATE_VARIANTS,
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
from dpsynrag.eval.templates_blind6 import CONDITION_TEMPLATES_BLIND6, FILM_TEMPLATES_BLIND6
from dpsynrag.eval.templates_blind7 import CONDITION_TEMPLATES_BLIND7, FILM_TEMPLATES_BLIND7
from dpsynrag.eval.templates_blind8 import CONDITION_TEMPLATES_BLIND8, FILM_TEMPLATES_BLIND8
from dpsynrag.eval.templates_blind9 import CONDITION_TEMPLATES_BLIND9, FILM_TEMPLATES_BLIND9
from dpsynrag.eval.templates_blind10 import CONDITION_TEMPLATES_BLIND10, FILM_TEMPLATES_BLIND10
from dpsynrag.eval.templates_blind11 import CONDITION_TEMPLATES_BLIND11, FILM_TEMPLATES_BLIND11
from dpsynrag.eval.templates_final import CONDITION_TEMPLATES_FINAL, FILM_TEMPLATES_FINAL
from dpsynrag.eval.templates_unseen import CONDITION_TEMPLATES_UNSEEN, FILM_TEMPLATES_UNSEEN
from dpsynrag.io.reader import read_documents

WRITERS = {"conditions": write_conditions_dataset, "films": write_films_dataset}
TEMPLATES = {"conditions": {"dev": CONDITION_TEMPLATES, "heldout": CONDITION_TEMPLATES_HELDOUT,
                            "fresh": CONDITION_TEMPLATES_FRESH,
                            "final": CONDITION_TEMPLATES_FINAL,
                            "unseen": CONDITION_TEMPLATES_UNSEEN,
                            "blind6": CONDITION_TEMPLATES_BLIND6,
                            "blind7": CONDITION_TEMPLATES_BLIND7,
                            "blind8": CONDITION_TEMPLATES_BLIND8,
                            "blind9": CONDITION_TEMPLATES_BLIND9,
                            "blind10": CONDITION_TEMPLATES_BLIND10,
                            "blind11": CONDITION_TEMPLATES_BLIND11},
             "films": {"dev": FILM_TEMPLATES, "heldout": FILM_TEMPLATES_HELDOUT,
                       "fresh": FILM_TEMPLATES_FRESH, "final": FILM_TEMPLATES_FINAL,
                       "unseen": FILM_TEMPLATES_UNSEEN, "blind6": FILM_TEMPLATES_BLIND6,
                       "blind7": FILM_TEMPLATES_BLIND7, "blind8": FILM_TEMPLATES_BLIND8,
                       "blind9": FILM_TEMPLATES_BLIND9, "blind10": FILM_TEMPLATES_BLIND10,
                       "blind11": FILM_TEMPLATES_BLIND11}}
LAY = {phrase: lay for phrase, lay in PLOT_ELEMENTS}
#: The variants written for one blind measurement each (every variant but dev and heldout).
BLIND_VARIANTS = tuple(v for v in TEMPLATE_VARIANTS if v not in ("dev", "heldout"))


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
@pytest.mark.parametrize("variant", [{}, {"heldout": True}, {"templates": "heldout"},
                                     *({"templates": v} for v in BLIND_VARIANTS)])
def test_queries_never_give_the_answer_away(kind: str, variant: dict) -> None:
    data = make_ordinary_dataset(kind, n_notes=600, n_queries=200, seed=2, **variant)
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
    for variant in BLIND_VARIANTS[2:]:  # unseen and after
        assert len(sets[variant].notes) >= 10 and len(sets[variant].queries) >= 8, variant
    for a in TEMPLATE_VARIANTS:
        for b in TEMPLATE_VARIANTS:
            if a < b:
                assert not set(sets[a].notes) & set(sets[b].notes), (a, b)
                assert not set(sets[a].queries) & set(sets[b].queries), (a, b)
    made = {"dev": make_ordinary_dataset(kind, n_notes=300, seed=4),
            "heldout": make_ordinary_dataset(kind, n_notes=300, seed=4, heldout=True),
            **{variant: make_ordinary_dataset(kind, n_notes=300, n_queries=60, seed=4,
                                              templates=variant)
               for variant in BLIND_VARIANTS}}
    for variant, data in made.items():
        own = sets[variant]
        others = [sets[v] for v in TEMPLATE_VARIANTS if v != variant]
        assert data.templates == variant and data.heldout == (variant == "heldout")
        assert data.describe()["templates"] == variant
        assert data.describe()["heldout"] is (variant == "heldout")
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
def test_heldout_flag_is_the_heldout_variant(tmp_path: Path, kind: str) -> None:
    write = WRITERS[kind]
    a = write(tmp_path / "a", n_notes=120, seed=3, heldout=True)
    b = write(tmp_path / "b", n_notes=120, seed=3, templates="heldout")
    c = write(tmp_path / "c", n_notes=120, seed=3, heldout=True, templates="heldout")
    for key in a:
        assert a[key].read_bytes() == b[key].read_bytes() == c[key].read_bytes()
    dev = make_ordinary_dataset(kind, n_notes=120, seed=3)
    assert dev == make_ordinary_dataset(kind, n_notes=120, seed=3, templates="dev")
    assert dev.templates == "dev" and not dev.heldout
    with pytest.raises(ValueError, match="contradicts"):
        make_ordinary_dataset(kind, n_notes=120, heldout=True, templates="fresh")
    with pytest.raises(ValueError, match="templates must be one of"):
        make_ordinary_dataset(kind, n_notes=120, templates="new")


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
                 "2", "--heldout", "--queries", "5"]) == 0
    ref = write_films_dataset(tmp_path / "fref", n_notes=60, seed=2, heldout=True, n_queries=5)
    for path in ref.values():
        assert (tmp_path / "f" / path.name).read_bytes() == path.read_bytes()
    assert main(["dataset", "clinic", "-o", str(tmp_path / "x"), "--heldout"]) != 0
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("kind", ["conditions", "films"])
def test_dataset_command_fresh_templates(tmp_path: Path, kind: str, capsys) -> None:
    from dpsynrag.cli import main

    for variant in BLIND_VARIANTS:
        out = tmp_path / variant
        assert main(["dataset", kind, "-o", str(out / "f"), "--notes", "80", "--seed", "11",
                     "--templates", variant]) == 0
        ref = WRITERS[kind](out / "ref", n_notes=80, seed=11, templates=variant)
        for path in ref.values():
            assert (out / "f" / path.name).read_bytes() == path.read_bytes()
        described = json.loads((out / "f" / f"{kind}.json").read_text())
        assert described["templates"] == variant and described["heldout"] is False
    assert main(["dataset", kind, "-o", str(tmp_path / "h"), "--notes", "80",
                 "--templates", "heldout", "--heldout"]) == 0
    assert json.loads((tmp_path / "h" / f"{kind}.json").read_text())["templates"] == "heldout"
    capsys.readouterr()
    assert main(["dataset", kind, "-o", str(tmp_path / "x"), "--templates", "fresh",
                 "--heldout"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --heldout contradicts --templates fresh" in err[0]
    assert main(["dataset", "clinic", "-o", str(tmp_path / "x"), "--templates", "fresh"]) == 2
    assert not (tmp_path / "x").exists()


def test_dataset_help_says_fresh_is_for_a_final_measurement(capsys) -> None:
    from dpsynrag.cli import main

    with pytest.raises(SystemExit):
        main(["dataset", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("--templates {dev,heldout,fresh,final,unseen,blind6,blind7,blind8,blind9,"
            "blind10,blind11}") in text
    assert "fresh: templates kept unread for a final measurement only" in text
    assert "final: another such unread set" in text
    assert "unseen: a fifth set, measured blind once and read since" in text
    assert "blind6: a sixth set, measured blind once and read since" in text
    assert "blind7: a seventh set, measured blind once and read since" in text
    assert "blind8: an eighth set, measured blind once and read since" in text
    assert "blind9: a ninth set, measured blind once (its conditions read since)" in text
    assert "blind10: a tenth set, measured blind once and read since" in text
    assert "blind11: an eleventh set, measured blind and not read" in text


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
        tmp_path: Path, kind: str, capsys) -> None:
    """An eval report names the ``dpsynrag dataset`` command of a generated set; running that
    command writes the same files, and a set edited since is reported as not reproduced."""
    import shlex

    from dpsynrag.cli import main
    from dpsynrag.eval.datasets_ordinary import generation_recipe

    assert main(["dataset", kind, "-o", str(tmp_path / "set"), "--notes", "120",
                 "--queries", "44", "--seed", "9", "--templates", "blind9"]) == 0
    recipe = generation_recipe(tmp_path / "set", kind)
    assert recipe == {"command": f"dpsynrag dataset {kind} --templates blind9 --notes 120 "
                                 f"--queries 44 --seed 9", "reproduced": True}
    assert main([*shlex.split(recipe["command"])[1:], "-o", str(tmp_path / "again")]) == 0
    for name in ("notes.jsonl", "queries.jsonl", f"{kind}.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "set" / name).read_bytes()
    capsys.readouterr()
    notes = tmp_path / "set" / "notes.jsonl"
    lines = notes.read_text(encoding="utf-8").splitlines(keepends=True)
    notes.write_text("".join(lines[:-1]), encoding="utf-8")  # one note removed
    assert generation_recipe(tmp_path / "set", kind) == {**recipe, "reproduced": False}
    assert generation_recipe(tmp_path / "set", "films" if kind == "conditions" else
                             "conditions") is None  # no description of that kind
    (tmp_path / "set" / f"{kind}.json").write_text('{"generator": "elsewhere/v9"}')
    assert generation_recipe(tmp_path / "set", kind) is None
