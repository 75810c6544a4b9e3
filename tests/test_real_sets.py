"""benchmarks/real_sets/make_sets.py on tiny fixtures generated here (never the real data)."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "real_sets" / "make_sets.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_real_sets_make_sets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ms = _load()


def _git_repo(root: Path, files: dict[str, bytes]) -> str:
    """A git repository at ``root`` holding ``files`` in one commit; returns the commit."""
    root.mkdir(parents=True, exist_ok=True)

    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True).stdout

    git("init", "-q")
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "fixture")
    return git("rev-parse", "HEAD").decode().strip()


# ---------------------------------------------------------------------------------------------
# MovieLens


@pytest.mark.parametrize(("raw", "shown"), [
    ("Matrix, The (1999)", "The Matrix (1999)"),
    ("Godfather, The (1972)", "The Godfather (1972)"),
    ("Star Wars: Episode IV - A New Hope (1977)", "Star Wars: Episode IV - A New Hope (1977)"),
    ("Princess Bride, The (1987)", "The Princess Bride (1987)"),
    ("Christmas Story, A (1983)", "A Christmas Story (1983)"),
    ("City of Lost Children, The (Cité des enfants perdus, La) (1995)",
     "The City of Lost Children (Cité des enfants perdus, La) (1995)"),
    ("Back to the Future (1985)", "Back to the Future (1985)"),
    ("Independence Day (ID4) (1996)", "Independence Day (ID4) (1996)"),
])
def test_title_moves_a_trailing_article_and_keeps_the_year(raw: str, shown: str) -> None:
    assert ms.display_title(raw) == shown


ML1M_USERS = "\n".join([
    "1::M::35::7::55117", "2::F::25::4::02460", "3::M::18::12::55455", "4::F::45::0::02139",
    "5::M::25::20::10001", "6::F::56::13::90210",
]) + "\n"
ML1M_MOVIES = (
    "1::Matrix, The (1999)::Action|Sci-Fi|Thriller\n"
    "2::Star Wars: Episode IV - A New Hope (1977)::Action|Adventure|Fantasy|Sci-Fi\n"
    "3::Godfather, The (1972)::Action|Crime|Drama\n"
    "4::Princess Bride, The (1987)::Action|Adventure|Comedy|Romance\n"
)


def _ml1m_ratings() -> str:
    rows = []
    for user in range(1, 7):
        for movie in range(1, 5):
            rating = 5 if (user + movie) % 2 == 0 else 4 if movie != 4 else 2
            rows.append(f"{user}::{movie}::{rating}::97830{user}{movie}00")
    return "\n".join(rows) + "\n"


@pytest.fixture()
def ml1m_source(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "ml"
    commit = _git_repo(root, {"ml-1m/users.dat": ML1M_USERS.encode(),
                              "ml-1m/movies.dat": ML1M_MOVIES.encode(),
                              "ml-1m/ratings.dat": _ml1m_ratings().encode()})
    return root, commit


def test_movielens_renders_profiles_with_verbatim_titles(ml1m_source: tuple[Path, str]) -> None:
    root, commit = ml1m_source
    raw = ms.read_movielens(ms.GitSource(root, commit))
    assert raw.layout == "ml-1m" and len(raw.users) == 6 and len(raw.ratings) == 24
    real = ms.render_movielens(raw, n_queries=2)
    assert len(real.notes) == 4 and len(real.queries) == 2
    texts = "\n".join(n.text for n in real.notes)
    assert "Matrix, The" not in texts and "Godfather, The" not in texts
    assert "The Matrix (1999)" in texts and "The Godfather (1972)" in texts
    assert "Star Wars: Episode IV - A New Hope (1977)" in texts
    units = {n.unit for n in real.notes}
    assert len(units) == 4  # distinct pseudonyms
    for note in real.notes:
        profile, preference, liked = note.text.split("\n")
        assert profile.startswith(f"{note.unit} is a ") and profile.endswith(".")
        assert preference.startswith(("He mostly enjoys", "She mostly enjoys"))
        assert liked.startswith(("In particular, he likes ", "In particular, she likes "))
    assert ms.profile_sentence("Logan Butler", raw.users["1"]) \
        == "Logan Butler is a 35-year-old male executive."
    assert ms.profile_sentence("This user", raw.users["4"]) == "This user is a 45-year-old female."
    by_id = {n.id: n for n in real.notes}
    if "ml-1" in by_id:  # user 1: age code 35, male, occupation 7
        assert "is a 35-year-old male executive." in by_id["ml-1"].text
    for q in real.queries:
        assert q.question.startswith("This user is a ")
        assert q.question.endswith("What movie is recommended for this user?")
        assert not any(a.casefold() in q.question.casefold() for a in q.answers)
        assert q.patient in units
        assert all(a in [ms.display_title(t) for t in raw.titles.values()] for a in q.answers)
    ms.check_set(real)


def test_movielens_favourites_are_the_highest_rated_among_the_top_titles(
        ml1m_source: tuple[Path, str]) -> None:
    root, commit = ml1m_source
    raw = ms.read_movielens(ms.GitSource(root, commit))
    real = ms.render_movielens(raw, n_queries=2)
    for q in real.queries:
        user = q.id.rsplit("-", 1)[1].lstrip("0")
        mine = {m: r for u, m, r, _ in raw.ratings if u == user}
        liked = [ms.display_title(raw.titles[m]) for m, r in mine.items() if r >= ms.LIKE_MIN]
        assert sorted(q.answers) == sorted(liked)
        ratings = [mine[next(m for m, t in raw.titles.items() if ms.display_title(t) == a)]
                   for a in q.answers]
        assert ratings == sorted(ratings, reverse=True)  # best first


def test_pseudonyms_are_deterministic_and_distinct() -> None:
    users = [ms.MovieUser(str(i), "M" if i % 2 else "F", "25", None) for i in range(1, 200)]
    first, again = ms.pseudonyms(users), ms.pseudonyms(list(reversed(users)))
    assert first == again and len(set(first.values())) == len(users)


def test_movielens_ml100k_layout(tmp_path: Path) -> None:
    flags = ["0"] * 19
    flags[1] = "1"  # Action
    items = "".join(f"{i}|{t}|01-Jan-1995||http://x|{'|'.join(flags)}\n"
                    for i, t in ((1, "Usual Suspects, The (1995)"), (2, "Fargo (1996)")))
    users = "1|24|M|technician|85711\n2|53|F|other|94043\n3|23|M|writer|32067\n"
    data = "".join(f"{u}\t{m}\t5\t8812{u}{m}\n" for u in (1, 2, 3) for m in (1, 2))
    root = tmp_path / "ml100k"
    commit = _git_repo(root, {"ml-100k/u.user": users.encode(), "ml-100k/u.item": items.encode(),
                              "ml-100k/u.data": data.encode()})
    raw = ms.read_movielens(ms.GitSource(root, commit))
    assert raw.layout == "ml-100k"
    real = ms.render_movielens(raw, n_queries=1)
    texts = "\n".join(n.text for n in real.notes)
    assert "The Usual Suspects (1995)" in texts and "action films" in texts
    assert "is a 53-year-old female.\n" in texts or "is a 24-year-old male technician." in texts


# ---------------------------------------------------------------------------------------------
# the set layout: split, files, rules


def _toy_set() -> Any:
    notes = [ms.Note(f"n{i}", f"note {i} about answer{i % 3}", f"u{i}") for i in range(9)]
    queries = [ms.Query(f"q{i}", f"question {i}?", [f"answer{i % 3}"]) for i in range(10)]
    return ms.RealSet("toy", notes, queries, {"repository": "r", "commit": "c"})


def test_write_set_splits_queries_disjointly_and_repeats_the_notes(tmp_path: Path) -> None:
    real = _toy_set()
    stats = ms.write_set(real, tmp_path / "toy")
    tune = [json.loads(x) for x in (tmp_path / "toy/tune/queries.jsonl").read_text().splitlines()]
    report = [json.loads(x)
              for x in (tmp_path / "toy/report/queries.jsonl").read_text().splitlines()]
    assert {q["id"] for q in tune}.isdisjoint({q["id"] for q in report})
    assert {q["id"] for q in tune} | {q["id"] for q in report} == {f"q{i}" for i in range(10)}
    assert len(tune) == 5 and len(report) == 5
    assert all(q["answer"] == q["answers"][0] for q in tune + report)
    assert (tmp_path / "toy/tune/notes.jsonl").read_bytes() \
        == (tmp_path / "toy/report/notes.jsonl").read_bytes()
    note = json.loads((tmp_path / "toy/tune/notes.jsonl").read_text().splitlines()[0])
    assert set(note) == {"id", "text", "unit"}
    source = json.loads((tmp_path / "toy/SOURCE.json").read_text())
    assert source["repository"] == "r" and source["statistics"]["notes"] == 9
    assert stats["tune_queries"] == 5 and stats["answers_held_by_ge_40_notes"] == 0
    # the split is a fixed function of the queries
    again = ms.split_queries(real.queries)
    assert [q.id for q in again[0]] == [q["id"] for q in tune]


def test_check_set_refuses_a_query_that_holds_its_answer() -> None:
    real = _toy_set()
    real.queries.append(ms.Query("leak", "Is it Answer1?", ["answer1"]))
    with pytest.raises(ms.SetError, match="contains its answer"):
        ms.check_set(real)


def test_check_set_refuses_an_answer_no_note_holds() -> None:
    real = _toy_set()
    real.queries.append(ms.Query("orphan", "question?", ["nowhere"]))
    with pytest.raises(ms.SetError, match="no note holds"):
        ms.check_set(real)


def test_git_source_reads_the_commit_not_the_work_tree(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    commit = _git_repo(root, {"a.txt": b"committed\n"})
    (root / "a.txt").write_bytes(b"edited after the commit\n")
    src = ms.GitSource(root, commit)
    assert src.read("a.txt") == b"committed\n"
    assert src.files() == {"a.txt": len(b"committed\n")}
    with pytest.raises(ms.SetError, match="not in this git directory"):
        ms.GitSource(root, "0" * 40)


# ---------------------------------------------------------------------------------------------
# mtsamples, CFPB, SearchQA


def _page(specialty: str, name: str, description: str, body: str) -> str:
    return (f"<html><body><H1> <b>Sample Type / Medical Specialty: </b> {specialty}<br>\n"
            f"<b>Sample Name:</b> {name} </H1>\n<b> Description: </b> {description}<br>\n"
            "(Medical Transcription Sample Report)<br>\n<hr>\n"
            f"{body}\n<br><Br>\n<!-- Ezoic - MTSam Sample Bottom --></body></html>")


def test_mtsamples_page_parsing() -> None:
    page = _page("Neurology", "Headache Consult", "Chronic headaches &amp; dizziness.",
                 "<B>HISTORY:</B>  The patient reports headaches.<br><br><B>PLAN:</B> MRI.")
    parsed = ms.parse_sample_page(page, "https://x/sample.asp?type=1")
    assert parsed is not None
    assert parsed.specialty == "Neurology" and parsed.name == "Headache Consult"
    assert parsed.description == "Chronic headaches & dizziness."
    assert parsed.text == "HISTORY: The patient reports headaches.\nPLAN: MRI."
    assert ms.parse_sample_page("<html>no sample</html>", "u") is None


def test_mtsamples_reads_gzipped_cached_pages(tmp_path: Path) -> None:
    files: dict[str, bytes] = {}
    for i in range(3):
        key = f".scrapy/httpcache/mt/0{i}/{i:040d}"
        url = f"https://www.mtsamples.com/site/pages/sample.asp?type=5&sample={i}"
        files[f"{key}/meta"] = repr({"url": url, "status": 200}).encode()
        files[f"{key}/response_body"] = gzip.compress(
            _page("Urology", f"Case {i}", f"Description {i}.", f"Report {i} text.").encode())
    files[".scrapy/httpcache/mt/09/x/meta"] = repr({"url": "https://x/browse.asp",
                                                    "status": 200}).encode()
    files[".scrapy/httpcache/mt/09/x/response_body"] = b"<html></html>"
    root = tmp_path / "mt"
    commit = _git_repo(root, files)
    pages, counts = ms.read_mtsamples(ms.GitSource(root, commit))
    assert [p.name for p in pages] == ["Case 0", "Case 1", "Case 2"]
    assert counts == {"cached responses": 4, "sample pages": 3}


def test_mtsamples_render_holds_answers_out_of_queries() -> None:
    specs = ["Cardiology", "Dermatology", "Orthopedic"]
    pages = [ms.Transcription(f"https://x/{i}", specs[i % 3], f"Sample {i}",
                              f"Description of case {i}.",
                              f"REPORT: finding {i} of the {['heart', 'skin', 'knee'][i % 3]}.")
             for i in range(30)]
    pages.append(ms.Transcription("https://x/dup", "Surgery", "Sample 0", "Description of case 0.",
                                  pages[0].text))  # cross-listed under a second specialty
    real = ms.render_mtsamples(pages, n_queries=6)
    assert len(real.notes) + len(real.queries) == 30
    assert any("Medical specialties: Cardiology; Surgery." in n.text for n in real.notes) or any(
        q.answers == ["Surgery", "Cardiology"] for q in real.queries)
    for q in real.queries:
        assert q.question.endswith("Which medical specialty does this transcription belong to?")
        assert not any(a.casefold() in q.question.casefold() for a in q.answers)
    ms.check_set(real)


def test_cfpb_render_from_a_csv(tmp_path: Path) -> None:
    header = ("Date received,Product,Sub-product,Issue,Sub-issue,Consumer complaint narrative,"
              "Company,State,Complaint ID\n")
    issues = ["Incorrect information on your report", "Attempts to collect debt not owed"]
    rows = "".join(
        f'2020/1/1,Debt collection,Other debt,{issues[i % 2]},,"I was contacted about a debt '
        f'{i} that XXXX says I owe. Please help.",ACME INC.,MN,{1000 + i}\n' for i in range(20))
    rows += "2020/1/1,Mortgage,,Other,,,BANK,MN,999\n"  # no narrative: left out
    root = tmp_path / "cfpb"
    commit = _git_repo(root, {"complaints_sample.csv": (header + rows).encode()})
    data = ms.read_cfpb(ms.GitSource(root, commit))
    real = ms.render_cfpb(data, n_queries=4)
    assert len(real.queries) == 4 and len(real.notes) == 16
    assert real.notes[0].text.startswith("Product: Debt collection.\nSub-product: Other debt.\n")
    assert "Company: ACME INC.\n" in real.notes[0].text  # one full stop, not two
    for q in real.queries:
        assert q.answers[0] in issues
        assert q.question.endswith("Which issue does this complaint concern?")
    ms.check_set(real)


def test_searchqa_render_keeps_questions_their_snippets_answer() -> None:
    def item(k: int, answer: str, holding: int) -> dict[str, object]:
        results = [{"snippet": f"snippet {j} says {answer if j < holding else 'something'}",
                    "title": f"Title {j}", "url": f"http://site{j}.example/{k}"}
                   for j in range(8)]
        return {"id": str(k), "question": f"This clue {k} names it", "answer": answer,
                "search_results": results}

    real = ms.render_searchqa([item(1, "Nevada", 6), item(2, "Ohio", 2)])
    assert [q.answers for q in real.queries] == [["Nevada"]]
    assert len(real.notes) == 16 and real.notes[0].text.startswith("Title 0\nsnippet 0")
    ms.check_set(real)


# ---------------------------------------------------------------------------------------------
# news (AG News layout): generated rows, no real news


def test_clean_news_decodes_the_corpus_escapes() -> None:
    raw = ('Acme #39;s  quot;plan quot; costs  #36;5\\billion &lt;b&gt;bold&lt;/b&gt; '
           '&lt;ACME.O&gt; now  #151; then \\$7 and Foo  amp; Bar &lt;/B')
    assert ms.clean_news(raw) == ('Acme\'s "plan" costs $5 billion bold <ACME.O> now — then $7 '
                                  'and Foo & Bar')
    assert ms.clean_news("ranked #1; ok") == "ranked #1; ok"  # no control characters


def test_capitalised_runs_skip_sentence_starts_and_designators() -> None:
    text = ("Shares of Quorvex Corp. rose after Blentaro Vale said so. Then Zint fell, and "
            "\"Big Title\" ran; Quorvex's unit - Zint too: Molvane Deep Sea Blue Ocean Group.")
    assert ms.capitalised_runs(text) == ["Quorvex", "Blentaro Vale", "Quorvex"]


ENTITIES = ("Quorvex", "Blentaro Vale", "Zintara")


def _news_rows() -> list[tuple[str, str, str]]:
    rows = []
    for k, name in enumerate(ENTITIES):
        for i in range(24):
            title = f"{name} update {i} (Wirefeed)" if i % 3 == 0 else f"Market note {k}-{i}"
            desc = (f"Analysts said {name} #39;s figure {i} for group {k} grew on Monday, "
                    f"according to Wirefeed.")
            if i == 5:
                desc += f" A {name.split()[0]}ian unit also reported."  # inside a longer word
            if name == "Blentaro Vale" and i == 7:
                desc += " Vale itself declined to comment."  # a word of the answer stays
            rows.append((str(k + 1), title, desc))
    rows.append(("1", "Quiet day", "Nothing said about anyone on Monday, according to Wirefeed."))
    return rows


@pytest.fixture()
def news_source(tmp_path: Path) -> tuple[Path, str]:
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(_news_rows())
    root = tmp_path / "agnews"
    commit = _git_repo(root, {"ag_news_csv/test.csv": buffer.getvalue().encode()})
    return root, commit


def test_news_render_masks_answers_and_holds_queries_out(news_source: tuple[Path, str],
                                                         tmp_path: Path) -> None:
    root, commit = news_source
    items = ms.read_agnews(ms.GitSource(root, commit))
    assert len(items) == 73 and items[0].row == 1
    assert items[0].text.startswith("Quorvex update 0 (Wirefeed). Analysts said Quorvex's")
    real = ms.render_news(items, n_queries=9, min_support=8, max_support=200, min_proposals=2)
    answers = {q.answers[0] for q in real.queries}
    assert answers == set(ENTITIES)
    dropped = real.source["candidates_dropped"]
    assert dropped["Monday"] == "a weekday or month" and dropped["Wirefeed"] == "a byline source"
    assert len(real.queries) == 9
    note_ids = {n.id for n in real.notes}
    assert len(note_ids) == len(real.notes) and all(n.unit == n.id for n in real.notes)
    by_row = {it.row: it for it in items}
    for q in real.queries:
        row = int(q.id.rsplit("-", 1)[1])
        assert by_row[row].id not in note_ids  # a held-out note is never a note
        assert q.question.endswith(" Who or what is meant by 'this name'?")
        assert "this name" in q.question
        answer = q.answers[0]
        assert answer.casefold() not in q.question.casefold()
        assert q.question.removesuffix(ms.NEWS_QUESTION).replace("this name", answer) \
            == by_row[row].text  # masking replaced exactly the answer
        assert "ian unit" not in q.question and "Vale itself" not in q.question
    assert len(real.notes) + len(real.queries) == len(items)
    for answer, n in ms.holders(real.notes, answers).items():
        assert n >= 8 and real.source["answers"][answer]["notes_holding"] == n
    ms.check_set(real)
    ms.write_set(real, tmp_path / "news")
    parts = {part: [json.loads(x) for x in
                    (tmp_path / "news" / part / "queries.jsonl").read_text().splitlines()]
             for part in ("tune", "report")}
    tune_ids, report_ids = ({q["id"] for q in parts[p]} for p in ("tune", "report"))
    assert tune_ids.isdisjoint(report_ids) and len(tune_ids | report_ids) == 9
    written = [json.loads(x)["id"]
               for x in (tmp_path / "news/report/notes.jsonl").read_text().splitlines()]
    assert set(written) == note_ids


def test_news_answer_that_notes_would_hold_too_rarely_gives_queries_back(
        news_source: tuple[Path, str]) -> None:
    root, commit = news_source
    items = ms.read_agnews(ms.GitSource(root, commit))
    real = ms.render_news(items, n_queries=60, min_support=20, max_support=200, min_proposals=2)
    for answer, n in ms.holders(real.notes, {q.answers[0] for q in real.queries}).items():
        assert n >= 20, answer
    assert 0 < len(real.queries) < 60
