"""Write real-text development sets (issue 57) from public repositories that hold real data.

Each subcommand reads raw files from a local git directory (a bare mirror or a clone; with no
``--source`` it clones the pinned repository into ``.data/raw/``), checks that the pinned
commit is there, reads every file AT that commit (``git show COMMIT:PATH``, never the work
tree) and writes into an ignored folder::

    OUT/tune/notes.jsonl     the private notes (id, text, unit)
    OUT/tune/queries.jsonl   one half of the queries (id, question, answer, answers[, patient])
    OUT/report/notes.jsonl   the same notes
    OUT/report/queries.jsonl the other half
    OUT/SOURCE.json          repository, commit, paths, licence as the source states it,
                             row counts, what was rendered how, statistics

The raw data is never committed; only this script is. Sets:

- ``movielens``  MovieLens ratings rendered as user profiles (DP-SynRAG, Mori et al., App. C.2)
- ``mtsamples``  human-written medical transcriptions (mtsamples.com pages) with their specialty
- ``cfpb``       consumer complaints to the CFPB (narratives) with the issue they concern
- ``news``       AG News snippets (title, description) with the named entities they hold
- ``searchqa``   web-search snippets per question in the SearchQA crawler's json layout

Run ``python benchmarks/real_sets/make_sets.py SET --help``.
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import html
import io
import itertools
import json
import random
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / ".data"
SPLIT_SEED = 57  # the fixed seed of every tune/report split (issue 57)
HELD_BY = 40  # the paper's SearchQA rule: an answer at least 40 units hold
TOKEN_RE = re.compile(r"\w+|[^\w\s]")


class SetError(Exception):
    """A source that cannot be read as the pinned set expects."""


# ---------------------------------------------------------------------------------------------
# sources: a git directory at a pinned commit


@dataclass(frozen=True)
class Pinned:
    """A public repository at a fixed commit."""

    repo: str  # owner/name on GitHub
    commit: str


class GitSource:
    """Read files of one commit of a local git directory (bare or a work tree's ``.git``)."""

    def __init__(self, path: Path, commit: str) -> None:
        path = Path(path)
        git_dir = path / ".git" if (path / ".git").exists() else path
        self.git_dir = git_dir
        self.commit = commit
        probe = self._git("cat-file", "-t", f"{commit}^{{commit}}", check=False)
        if probe.returncode != 0 or probe.stdout.strip() != b"commit":
            raise SetError(f"{path}: commit {commit} is not in this git directory")

    def _git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        result = subprocess.run(["git", f"--git-dir={self.git_dir}", *args],
                                capture_output=True, check=False)
        if check and result.returncode != 0:
            raise SetError(f"git {' '.join(args)}: {result.stderr.decode(errors='replace')}")
        return result

    def files(self) -> dict[str, int]:
        """Every path of the commit with its size in bytes (-1 where the blob is absent)."""
        out = self._git("ls-tree", "-r", "-l", "-z", self.commit).stdout.decode()
        sizes: dict[str, int] = {}
        for entry in filter(None, out.split("\0")):
            meta, path = entry.split("\t", 1)
            size = meta.split()[3]
            sizes[path] = int(size) if size.isdigit() else -1
        return sizes

    def read(self, path: str) -> bytes:
        result = self._git("cat-file", "blob", f"{self.commit}:{path}", check=False)
        if result.returncode != 0:
            raise SetError(f"{path} at {self.commit}: not readable (absent from this copy: "
                           f"{result.stderr.decode(errors='replace').strip()})")
        return result.stdout

    def readable(self, path: str) -> bool:
        return self._git("cat-file", "-e", f"{self.commit}:{path}", check=False).returncode == 0


def open_source(pinned: Pinned, source: Path | None, commit: str | None) -> GitSource:
    """The pinned commit from ``source``, or from a clone under ``.data/raw/`` made here."""
    commit = commit or pinned.commit
    if source is None:
        source = DATA_DIR / "raw" / pinned.repo.replace("/", "+")
        if not source.exists():
            source.parent.mkdir(parents=True, exist_ok=True)
            url = f"https://github.com/{pinned.repo}.git"
            subprocess.run(["git", "clone", "--no-checkout", url, str(source)], check=True)
    return GitSource(source, commit)


# ---------------------------------------------------------------------------------------------
# the set layout


@dataclass
class Note:
    id: str
    text: str
    unit: str


@dataclass
class Query:
    id: str
    question: str
    answers: list[str]  # every accepted answer; answers[0] is written as ``answer``
    patient: str | None = None

    def record(self) -> dict[str, Any]:
        row: dict[str, Any] = {"id": self.id, "question": self.question,
                               "answer": self.answers[0], "answers": self.answers}
        if self.patient is not None:
            row["patient"] = self.patient
        return row


@dataclass
class RealSet:
    name: str
    notes: list[Note]
    queries: list[Query]
    source: dict[str, Any] = field(default_factory=dict)


def full_stop(text: str) -> str:
    """``text`` ending in a full stop (no second one where it already ends in one)."""
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def tokens(text: str) -> int:
    return len(TOKEN_RE.findall(text))


def contains(text: str, answer: str) -> bool:
    return answer.casefold() in text.casefold()


def holders(notes: Sequence[Note], answers: Iterable[str]) -> dict[str, int]:
    """How many notes hold each answer string (case-insensitive substring)."""
    folded = [n.text.casefold() for n in notes]
    return {a: sum(a.casefold() in t for t in folded) for a in sorted(set(answers))}


def split_queries(queries: Sequence[Query], seed: int = SPLIT_SEED
                  ) -> tuple[list[Query], list[Query]]:
    """Shuffle by the fixed seed: the first half is ``tune``, the rest ``report``."""
    order = list(queries)
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    return order[:half], order[half:]


def check_set(real: RealSet) -> None:
    """The rules of every set: unique ids, no query holds an answer, every answer is held."""
    ids = [n.id for n in real.notes]
    if len(set(ids)) != len(ids):
        raise SetError(f"{real.name}: duplicate note ids")
    qids = [q.id for q in real.queries]
    if len(set(qids)) != len(qids):
        raise SetError(f"{real.name}: duplicate query ids")
    for q in real.queries:
        if not q.answers or any(not a.strip() for a in q.answers):
            raise SetError(f"{real.name}: query {q.id} has an empty answer")
        leaked = [a for a in q.answers if contains(q.question, a)]
        if leaked:
            raise SetError(f"{real.name}: query {q.id} contains its answer")
    held = holders(real.notes, [q.answers[0] for q in real.queries])
    missing = [a for a, n in held.items() if n == 0]
    if missing:
        raise SetError(f"{real.name}: {len(missing)} answers no note holds")


def statistics(real: RealSet) -> dict[str, Any]:
    held = holders(real.notes, [a for q in real.queries for a in q.answers])
    first = [q.answers[0] for q in real.queries]
    return {
        "notes": len(real.notes),
        "queries": len(real.queries),
        "mean_tokens_per_note": round(sum(tokens(n.text) for n in real.notes)
                                      / max(1, len(real.notes)), 1),
        "token_rule": "regex \\w+|[^\\w\\s] (words, numbers and punctuation marks)",
        "distinct_answers": len(set(first)),
        f"answers_held_by_ge_{HELD_BY}_notes": sum(held[a] >= HELD_BY for a in set(first)),
        f"queries_whose_answer_ge_{HELD_BY}_notes_hold": sum(held[a] >= HELD_BY for a in first),
        "median_notes_holding_a_query_answer": sorted(held[a] for a in first)[len(first) // 2]
        if first else 0,
    }


#: each set's reader prompt (``reader.json`` in both halves, read by ``dpsynrag eval``): what
#: the reader is asked after the question, and the public start of its reply
READERS: dict[str, dict[str, str]] = {
    "movielens": {"instruction": "Answer with the title of one film only, with its year.",
                  "answer_prefix": "The answer is"},
    "mtsamples": {"instruction": "Answer with the name of the medical specialty only.",
                  "answer_prefix": "The answer is"},
    "cfpb": {"instruction": "Answer with the name of the issue only.",
             "answer_prefix": "The answer is"},
    "news": {"instruction": "Answer with the missing name only.",
             "answer_prefix": "The answer is"},
    "searchqa": {"instruction": "Answer with a short phrase only.",
                 "answer_prefix": "The answer is"},
}


def write_set(real: RealSet, out: Path) -> dict[str, Any]:
    """Write ``tune/``, ``report/`` (each with ``reader.json`` where ``READERS`` has the
    set) and ``SOURCE.json``; return the statistics."""
    check_set(real)
    tune, report = split_queries(real.queries)
    stats = statistics(real)
    stats["tune_queries"], stats["report_queries"] = len(tune), len(report)
    stats["split"] = f"random.Random({SPLIT_SEED}).shuffle of the queries; first half tune"
    for part, queries in (("tune", tune), ("report", report)):
        folder = out / part
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "notes.jsonl").open("w", encoding="utf-8") as handle:
            for n in real.notes:
                handle.write(json.dumps({"id": n.id, "text": n.text, "unit": n.unit},
                                        ensure_ascii=False) + "\n")
        with (folder / "queries.jsonl").open("w", encoding="utf-8") as handle:
            for q in queries:
                handle.write(json.dumps(q.record(), ensure_ascii=False) + "\n")
        if real.name in READERS:
            (folder / "reader.json").write_text(json.dumps(READERS[real.name], indent=2) + "\n",
                                                encoding="utf-8")
    source = dict(real.source)
    source["set"] = real.name
    source["statistics"] = stats
    notes_sha = hashlib.sha256((out / "tune" / "notes.jsonl").read_bytes()).hexdigest()
    source["notes_sha256"] = notes_sha
    (out / "SOURCE.json").write_text(json.dumps(source, indent=2, ensure_ascii=False) + "\n",
                                     encoding="utf-8")
    return stats


def sample(items: Sequence[Any], k: int, seed: int) -> list[Any]:
    """``k`` items drawn without replacement by a seeded shuffle, in their original order."""
    if k >= len(items):
        return list(items)
    chosen = set(random.Random(seed).sample(range(len(items)), k))
    return [x for i, x in enumerate(items) if i in chosen]


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a sentence end (else a word end)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = max(head.rfind(". "), head.rfind(".\n"))
    if cut >= limit // 2:
        return head[:cut + 1]
    space = head.rfind(" ")
    return head[:space] if space > 0 else head


def patient_for(answer: str, units_by_answer: dict[str, list[str]], k: int) -> str | None:
    """A note unit that holds ``answer`` (cycling), the name whose appearance is a leak."""
    pool = units_by_answer.get(answer)
    return pool[k % len(pool)] if pool else None


# ---------------------------------------------------------------------------------------------
# MovieLens


MOVIELENS = Pinned("Devsart/SparkCourse", "521b9a38199b9234755c49d295b2a88aef0a724e")
TOP_TITLES = 30  # the paper restricts to the 30 most-rated titles
FAVOURITES = 10  # "their top-10 rated movies" among those 30
LIKE_MIN = 4  # a favourite is rated at least 4 of 5

# ML-1M's occupation codes (ml-1m/README) and ML-100K's words, as a profile writes them;
# None: not written ("other", "none", "not specified").
ML1M_OCCUPATIONS: dict[str, str | None] = {
    "0": None, "1": "educator", "2": "artist", "3": "clerical worker",
    "4": "college student", "5": "customer service worker", "6": "health care worker",
    "7": "executive", "8": "farmer", "9": "homemaker", "10": "K-12 student", "11": "lawyer",
    "12": "programmer", "13": "retiree", "14": "salesperson", "15": "scientist",
    "16": "self-employed worker", "17": "engineer", "18": "craftsman",
    "19": "unemployed person", "20": "writer",
}
ML100K_OCCUPATIONS: dict[str, str | None] = {
    "administrator": "administrator", "artist": "artist", "doctor": "doctor",
    "educator": "educator", "engineer": "engineer", "entertainment": "entertainment worker",
    "executive": "executive", "healthcare": "health care worker", "homemaker": "homemaker",
    "lawyer": "lawyer", "librarian": "librarian", "marketing": "marketing professional",
    "none": None, "other": None, "programmer": "programmer", "retired": "retiree",
    "salesman": "salesperson", "scientist": "scientist", "student": "student",
    "technician": "technician", "writer": "writer",
}
ML100K_GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime",
                 "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery",
                 "Romance", "Sci-Fi", "Thriller", "War", "Western")
# how a genre reads in a sentence
GENRE_WORDS = {"Children's": "children's", "Film-Noir": "film noir", "Sci-Fi": "science fiction",
               "unknown": ""}

# Pseudonyms: the most common given names in the US Social Security Administration's lists of
# popular baby names (1960s-1990s) and the most common surnames of the US Census 2010.
FIRST_NAMES_M = (
    "James", "John", "Robert", "Michael", "William", "David", "Richard", "Joseph", "Thomas",
    "Charles", "Christopher", "Daniel", "Matthew", "Anthony", "Mark", "Donald", "Steven",
    "Paul", "Andrew", "Joshua", "Kenneth", "Kevin", "Brian", "George", "Timothy", "Ronald",
    "Edward", "Jason", "Jeffrey", "Ryan", "Jacob", "Gary", "Nicholas", "Eric", "Jonathan",
    "Stephen", "Larry", "Justin", "Scott", "Brandon", "Benjamin", "Samuel", "Gregory",
    "Alexander", "Frank", "Patrick", "Raymond", "Jack", "Dennis", "Jerry", "Tyler", "Aaron",
    "Jose", "Adam", "Nathan", "Henry", "Douglas", "Zachary", "Peter", "Kyle", "Ethan",
    "Walter", "Noah", "Jeremy", "Christian", "Keith", "Roger", "Terry", "Gerald", "Harold",
    "Sean", "Austin", "Carl", "Arthur", "Lawrence", "Dylan", "Jesse", "Jordan", "Bryan",
    "Billy",
)
FIRST_NAMES_F = (
    "Mary", "Patricia", "Jennifer", "Linda", "Elizabeth", "Barbara", "Susan", "Jessica",
    "Sarah", "Karen", "Lisa", "Nancy", "Betty", "Margaret", "Sandra", "Ashley", "Kimberly",
    "Emily", "Donna", "Michelle", "Carol", "Amanda", "Dorothy", "Melissa", "Deborah",
    "Stephanie", "Rebecca", "Sharon", "Laura", "Cynthia", "Kathleen", "Amy", "Angela",
    "Shirley", "Anna", "Brenda", "Pamela", "Emma", "Nicole", "Helen", "Samantha", "Katherine",
    "Christine", "Debra", "Rachel", "Carolyn", "Janet", "Catherine", "Maria", "Heather",
    "Diane", "Ruth", "Julie", "Olivia", "Joyce", "Virginia", "Victoria", "Kelly", "Lauren",
    "Christina", "Joan", "Evelyn", "Judith", "Megan", "Andrea", "Cheryl", "Hannah", "Jacqueline",
    "Martha", "Gloria", "Teresa", "Ann", "Sara", "Madison", "Frances", "Kathryn", "Janice",
    "Jean", "Abigail", "Alice",
)
SURNAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
    "Martinez", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor",
    "Moore", "Jackson", "Martin", "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez",
    "Clark", "Ramirez", "Lewis", "Robinson", "Walker", "Young", "Allen", "King", "Wright",
    "Scott", "Torres", "Nguyen", "Hill", "Flores", "Green", "Adams", "Nelson", "Baker", "Hall",
    "Rivera", "Campbell", "Mitchell", "Carter", "Roberts", "Gomez", "Phillips", "Evans",
    "Turner", "Diaz", "Parker", "Cruz", "Edwards", "Collins", "Reyes", "Stewart", "Morris",
    "Morales", "Murphy", "Cook", "Rogers", "Gutierrez", "Ortiz", "Morgan", "Cooper", "Peterson",
    "Bailey", "Reed", "Kelly", "Howard", "Ramos", "Kim", "Cox", "Ward", "Richardson", "Watson",
    "Brooks", "Chavez", "Wood", "James", "Bennett", "Gray", "Mendoza", "Ruiz", "Hughes", "Price",
    "Alvarez", "Castillo", "Sanders", "Patel", "Myers", "Long", "Ross", "Foster", "Jimenez",
)
PSEUDONYM_SEED = 1957


@dataclass(frozen=True)
class MovieUser:
    id: str
    gender: str  # "M" or "F"
    age: str
    occupation: str | None


@dataclass
class MovieLensRaw:
    layout: str  # "ml-1m" or "ml-100k"
    users: dict[str, MovieUser]
    titles: dict[str, str]  # movie id -> title as the source writes it
    genres: dict[str, list[str]]
    ratings: list[tuple[str, str, int, int]]  # user, movie, rating, timestamp
    paths: list[str]


def display_title(raw: str) -> str:
    """A title as movies.dat writes it with a trailing article moved back to the front:
    ``Matrix, The (1999)`` -> ``The Matrix (1999)``; the year and everything else verbatim."""
    match = re.fullmatch(r"(.*), (The|A|An|L'|Le|La|Les|Il|Das|Der|Die|El|Los|Las)"
                         r"( \(.*\))?( \(\d{4}\))", raw.strip())
    if match is None:
        return raw.strip()
    body, article, aka, year = match.groups()
    joiner = "" if article.endswith("'") else " "
    return f"{article}{joiner}{body}{aka or ''}{year}"


def parse_ml1m(src: GitSource, root: str) -> MovieLensRaw:
    def lines(name: str) -> list[list[str]]:
        text = src.read(f"{root}/{name}").decode("latin-1")
        return [ln.split("::") for ln in text.splitlines() if ln.strip()]

    users = {u[0]: MovieUser(u[0], u[1], u[2], ML1M_OCCUPATIONS.get(u[3]))
             for u in lines("users.dat")}
    titles, genres = {}, {}
    for m in lines("movies.dat"):
        titles[m[0]], genres[m[0]] = m[1], m[2].split("|")
    ratings = [(r[0], r[1], int(r[2]), int(r[3])) for r in lines("ratings.dat")]
    return MovieLensRaw("ml-1m", users, titles, genres, ratings,
                        [f"{root}/{n}" for n in ("users.dat", "movies.dat", "ratings.dat")])


def parse_ml100k(src: GitSource, root: str) -> MovieLensRaw:
    def lines(name: str, sep: str) -> list[list[str]]:
        text = src.read(f"{root}/{name}").decode("latin-1")
        return [ln.split(sep) for ln in text.splitlines() if ln.strip()]

    users = {u[0]: MovieUser(u[0], u[2], u[1], ML100K_OCCUPATIONS.get(u[3]))
             for u in lines("u.user", "|")}
    titles, genres = {}, {}
    for m in lines("u.item", "|"):
        titles[m[0]] = m[1]
        genres[m[0]] = [g for g, flag in zip(ML100K_GENRES, m[5:24], strict=False)
                        if flag == "1"]
    ratings = [(r[0], r[1], int(r[2]), int(r[3])) for r in lines("u.data", "\t")]
    return MovieLensRaw("ml-100k", users, titles, genres, ratings,
                        [f"{root}/{n}" for n in ("u.user", "u.item", "u.data")])


def read_movielens(src: GitSource, layout: str = "auto") -> MovieLensRaw:
    files = src.files()
    candidates: list[tuple[str, str]] = []
    for path in files:
        name = path.rsplit("/", 1)[-1]
        root = path.rsplit("/", 1)[0] if "/" in path else ""
        if name == "ratings.dat" and f"{root}/users.dat".lstrip("/") in files:
            candidates.append(("ml-1m", root))
        if name == "u.data" and f"{root}/u.user".lstrip("/") in files:
            candidates.append(("ml-100k", root))
    candidates.sort(key=lambda c: c[0] != "ml-1m")  # ML-1M first where it is whole
    for kind, root in candidates:
        if layout not in ("auto", kind):
            continue
        data = "ratings.dat" if kind == "ml-1m" else "u.data"
        if not src.readable(f"{root}/{data}".lstrip("/")):
            continue  # listed but absent (a copy that lacks its largest files)
        parse = parse_ml1m if kind == "ml-1m" else parse_ml100k
        return parse(src, root)
    raise SetError("no readable MovieLens ratings (ml-1m/ratings.dat or ml-100k/u.data)")


def pseudonyms(users: Sequence[MovieUser], seed: int = PSEUDONYM_SEED) -> dict[str, str]:
    """A distinct given name + surname per user from the public lists, by a seeded shuffle."""
    out: dict[str, str] = {}
    for gender, firsts in (("M", FIRST_NAMES_M), ("F", FIRST_NAMES_F)):
        pool = [f"{f} {s}" for f in firsts for s in SURNAMES]
        random.Random(f"{seed}-{gender}").shuffle(pool)
        members = sorted((u for u in users if u.gender == gender), key=lambda u: int(u.id))
        if len(members) > len(pool):
            raise SetError(f"{len(members)} users of gender {gender}: more than the "
                           f"{len(pool)} pseudonyms")
        out.update({u.id: pool[i] for i, u in enumerate(members)})
    return out


def join_words(items: Sequence[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


def profile_sentence(subject: str, user: MovieUser) -> str:
    gender = "male" if user.gender == "M" else "female"
    tail = f" {user.occupation}" if user.occupation else ""
    return f"{subject} is a {user.age}-year-old {gender}{tail}."


def preference_sentence(user: MovieUser, favourite_genres: Counter[str]) -> str:
    """One plain sentence naming the genres of a user's favourites, most frequent first."""
    pronoun = "He" if user.gender == "M" else "She"
    ranked = sorted(favourite_genres.items(), key=lambda kv: (-kv[1], kv[0]))
    words = [GENRE_WORDS.get(g, g.lower()) for g, _ in ranked]
    words = [w for w in words if w][:4]
    if not words:
        return f"{pronoun} enjoys popular films."
    return f"{pronoun} mostly enjoys {join_words(words)} films."


def render_movielens(raw: MovieLensRaw, n_queries: int | None = None, seed: int = SPLIT_SEED,
                     max_notes: int = 4000) -> RealSet:
    counts = Counter(m for _, m, _, _ in raw.ratings)
    top = sorted(counts, key=lambda m: (-counts[m], int(m)))[:TOP_TITLES]
    popularity = {m: i for i, m in enumerate(top)}
    per_user: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for u, m, r, t in raw.ratings:
        if m in popularity and u in raw.users:
            per_user[u].append((m, r, t))
    favourites: dict[str, list[str]] = {}
    for u, rows in per_user.items():
        liked = sorted((row for row in rows if row[1] >= LIKE_MIN),
                       key=lambda row: (-row[1], popularity[row[0]]))
        if liked:
            favourites[u] = [m for m, _, _ in liked[:FAVOURITES]]
    names = pseudonyms(list(raw.users.values()))
    user_ids = sorted(favourites, key=int)
    if n_queries is None:
        n_queries = min(500, len(user_ids) // 3)
    held_out = set(sample(user_ids, n_queries, seed))
    note_ids = [u for u in user_ids if u not in held_out]
    note_ids = sample(note_ids, max_notes, seed + 1)

    def title(m: str) -> str:
        return display_title(raw.titles[m])

    def sentences(u: str) -> tuple[str, str]:
        user = raw.users[u]
        genres = Counter(g for m in favourites[u] for g in raw.genres[m])
        return profile_sentence(names[u], user), preference_sentence(user, genres)

    notes: list[Note] = []
    units_by_title: dict[str, list[str]] = defaultdict(list)
    width = len(str(max(int(u) for u in raw.users)))
    for u in note_ids:
        profile, preference = sentences(u)
        pronoun = "he" if raw.users[u].gender == "M" else "she"
        liked_titles = join_words([title(m) for m in favourites[u]])
        text = f"{profile}\n{preference}\nIn particular, {pronoun} likes {liked_titles}."
        notes.append(Note(f"ml-{int(u):0{width}d}", text, names[u]))
        for m in favourites[u]:
            units_by_title[title(m)].append(names[u])
    queries: list[Query] = []
    for k, u in enumerate(sorted(held_out, key=int)):
        user = raw.users[u]
        _, preference = sentences(u)
        profile = profile_sentence("This user", user)
        question = f"{profile} {preference} What movie is recommended for this user?"
        answers = [title(m) for m in favourites[u]]
        queries.append(Query(f"ml-q-{int(u):0{width}d}", question, answers,
                             patient_for(answers[0], units_by_title, k)))
    return RealSet("movielens", notes, queries, {
        "rendering": (
            f"{raw.layout}: the {TOP_TITLES} most-rated titles; a user's favourites are their "
            f"titles among those rated >= {LIKE_MIN}, highest rating first (ties: more-rated "
            f"title first), at most {FAVOURITES}; users with no favourite are dropped. A note: "
            "'<pseudonym> is a <age>-year-old <male|female> <occupation>.' (age as the source "
            "writes it: ML-1M's age-bracket code, ML-100K's age), '<He|She> mostly enjoys "
            "<up to 4 genres of the favourites, most frequent first> films.', 'In particular, "
            "<he|she> likes <favourites>.' with titles verbatim from the source except a "
            "trailing article moved to the front ('Matrix, The (1999)' -> 'The Matrix "
            "(1999)'). A query: 'This user is ...' + the preference sentence + 'What movie is "
            "recommended for this user?'; answers = all the held-out user's favourites. "
            "Pseudonyms: a distinct US SSA given name + US Census 2010 surname per user "
            f"(seeded shuffle {PSEUDONYM_SEED}); the note's unit and the queries' patient."),
        "rows": {"users": len(raw.users), "movies": len(raw.titles),
                 "ratings": len(raw.ratings), "users_with_a_favourite": len(user_ids),
                 "held_out_users": len(held_out), "note_users": len(notes)},
        "top_titles": [title(m) for m in top],
        "paths": raw.paths,
        "layout": raw.layout,
    })


# ---------------------------------------------------------------------------------------------
# mtsamples (medical transcription samples, pages cached by a scrapy crawl)


MTSAMPLES = Pinned("terrah27/spider_mtsamples.com", "7794f006f0a38e1747596a07f9b55987d6add8fd")
MT_NOTE_CHARS = 1800
MT_QUERY_CHARS = 500
MT_QUERIES = 400


@dataclass(frozen=True)
class Transcription:
    url: str
    specialty: str
    name: str
    description: str
    text: str


def _strip_tags(fragment: str) -> str:
    fragment = re.sub(r"(?i)<br\s*/?>", "\n", fragment)
    fragment = re.sub(r"<[^>]+>", " ", fragment)
    fragment = html.unescape(fragment).replace("\xa0", " ")
    lines = [re.sub(r"[ \t]+", " ", ln).strip() for ln in fragment.split("\n")]
    return "\n".join(ln for ln in lines if ln)


def parse_sample_page(page: str, url: str) -> Transcription | None:
    """One mtsamples.com sample page -> its specialty, name, description and report text."""
    head = re.search(r"(?is)Medical Specialty:\s*</b>(.*?)<br>\s*<b>Sample Name:\s*</b>(.*?)"
                     r"</H1>\s*<b>\s*Description:\s*</b>(.*?)<br>", page)
    body = re.search(r"(?is)\(Medical Transcription Sample Report\)\s*<br>\s*<hr>(.*?)"
                     r"(?:<!--\s*Ezoic|<div|<B>Keywords:)", page)
    if head is None or body is None:
        return None
    specialty, name, description = (_strip_tags(x).replace("\n", " ") for x in head.groups())
    text = _strip_tags(body.group(1))
    if not (specialty and name and text):
        return None
    return Transcription(url, specialty, name, description, text)


def read_mtsamples(src: GitSource) -> tuple[list[Transcription], dict[str, int]]:
    files = src.files()
    metas = sorted(p for p in files if p.startswith(".scrapy/httpcache/") and p.endswith("/meta"))
    pages: list[Transcription] = []
    counts = Counter[str]()
    for meta_path in metas:
        counts["cached responses"] += 1
        meta = ast.literal_eval(src.read(meta_path).decode("utf-8"))
        url = str(meta.get("url", ""))
        if "/sample.asp" not in url or int(meta.get("status", 0)) != 200:
            continue
        counts["sample pages"] += 1
        body = src.read(meta_path[: -len("meta")] + "response_body")
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        parsed = parse_sample_page(body.decode("utf-8", errors="replace"), url)
        if parsed is None:
            counts["unparsed sample pages"] += 1
            continue
        pages.append(parsed)
    return pages, dict(counts)


def render_mtsamples(pages: Sequence[Transcription], n_queries: int = MT_QUERIES,
                     seed: int = SPLIT_SEED, max_notes: int = 4000,
                     counts: dict[str, int] | None = None) -> RealSet:
    # a report cross-listed under several specialties is one note holding all of them
    by_text: dict[str, list[Transcription]] = defaultdict(list)
    for p in pages:
        by_text[re.sub(r"\s+", " ", p.text).strip()].append(p)
    cases = []
    for _text, group in sorted(by_text.items(), key=lambda kv: min(p.url for p in kv[1])):
        first = min(group, key=lambda p: p.url)
        specialties = sorted({p.specialty for p in group})
        cases.append((first, specialties))
    spec_count = Counter(s for _, specs in cases for s in specs)

    def answers_of(specs: list[str]) -> list[str]:  # the most specific (rarest) first
        return sorted(specs, key=lambda s: (spec_count[s], s))

    def question_of(case: Transcription) -> str:
        text = clip(case.text.replace("\n", " "), MT_QUERY_CHARS)
        return (f"{case.description} {text}\nWhich medical specialty does this "
                "transcription belong to?")

    eligible = [i for i, (case, specs) in enumerate(cases)
                if not any(contains(question_of(case), s) for s in specs)
                and spec_count[answers_of(specs)[0]] >= 3]
    held = set(sample(eligible, n_queries, seed))
    note_idx = sample([i for i in range(len(cases)) if i not in held], max_notes, seed + 1)
    notes: list[Note] = []
    units_by_spec: dict[str, list[str]] = defaultdict(list)
    for i in note_idx:
        case, specs = cases[i]
        label = "Medical specialty" if len(specs) == 1 else "Medical specialties"
        text = (f"{label}: {full_stop('; '.join(specs))}\nSample name: {full_stop(case.name)}\n"
                f"Description: {case.description}\n{clip(case.text, MT_NOTE_CHARS)}")
        unit = f"mts-{hashlib.sha1(case.url.encode()).hexdigest()[:10]}"
        notes.append(Note(unit, text, unit))
        for s in specs:
            units_by_spec[s].append(unit)
    queries = []
    for i in sorted(held):
        case, specs = cases[i]
        answers = [a for a in answers_of(specs) if units_by_spec.get(a)]
        if not answers:
            continue
        qid = f"mts-q-{hashlib.sha1(case.url.encode()).hexdigest()[:10]}"
        queries.append(Query(qid, question_of(case), answers))
    return RealSet("mtsamples", notes, queries, {
        "rendering": (
            "Each mtsamples.com sample page cached by the crawl (gzip HTML) is parsed into "
            "specialty, sample name, description and report text (HTML tags dropped, <br> as "
            "line breaks); a report cross-listed under several specialties is one case holding "
            f"all of them. A note: 'Medical specialty: <specialties>.', 'Sample name: ...', "
            f"'Description: ...' and the report cut to {MT_NOTE_CHARS} characters at a sentence "
            f"end. A query: a held-out case's description + its report cut to {MT_QUERY_CHARS} "
            "characters + 'Which medical specialty does this transcription belong to?'; answers "
            "= its specialties, the rarest first; cases whose query text holds a specialty "
            "name are never queries. Notes carry no person names: unit = a hash of the page "
            "address, no 'patient'."),
        "rows": {**(counts or {}), "parsed pages": len(pages), "distinct reports": len(cases),
                 "held_out_cases": len(held), "note_cases": len(notes)},
        "specialties": dict(sorted(spec_count.items())),
        "paths": [".scrapy/httpcache/mt/*/*/{meta,response_body}"],
    })


# ---------------------------------------------------------------------------------------------
# CFPB consumer complaints


CFPB = Pinned("ZiyuYan9/consumer_complaints", "ecece4d9228ad0198cd175e59e355a768ebd385b")
CFPB_PATH = "complaints_sample.csv"
CFPB_NOTE_CHARS = 2000
CFPB_QUERY_CHARS = 1200
CFPB_QUERIES = 300
NARRATIVE = "Consumer complaint narrative"


def read_cfpb(src: GitSource, path: str = CFPB_PATH) -> list[dict[str, str]]:
    text = src.read(path).decode("utf-8-sig", errors="replace")
    rows = list(csv.DictReader(io.StringIO(text)))
    if rows and NARRATIVE not in rows[0]:
        raise SetError(f"{path}: no column {NARRATIVE!r}")
    return rows


def render_cfpb(rows: Sequence[dict[str, str]], n_queries: int = CFPB_QUERIES,
                seed: int = SPLIT_SEED, max_notes: int = 4000) -> RealSet:
    cases = [r for r in rows if r.get(NARRATIVE, "").strip() and r.get("Issue", "").strip()]
    cases.sort(key=lambda r: r.get("Complaint ID", ""))
    issue_count = Counter(r["Issue"].strip() for r in cases)

    def narrative(r: dict[str, str], limit: int) -> str:
        lines = [re.sub(r"\s+", " ", ln).strip() for ln in r[NARRATIVE].splitlines()]
        return clip("\n".join(ln for ln in lines if ln), limit)

    def question_of(r: dict[str, str]) -> str:
        return f"{narrative(r, CFPB_QUERY_CHARS)}\nWhich issue does this complaint concern?"

    eligible = [i for i, r in enumerate(cases) if issue_count[r["Issue"].strip()] >= 5
                and not contains(question_of(r), r["Issue"].strip())]
    held = set(sample(eligible, n_queries, seed))
    note_idx = sample([i for i in range(len(cases)) if i not in held], max_notes, seed + 1)
    notes: list[Note] = []
    units_by_issue: dict[str, list[str]] = defaultdict(list)
    for i in note_idx:
        r = cases[i]
        fields = [("Product", r.get("Product", "")), ("Sub-product", r.get("Sub-product", "")),
                  ("Issue", r["Issue"]), ("Sub-issue", r.get("Sub-issue", "")),
                  ("Company", r.get("Company", ""))]
        head = "\n".join(f"{k}: {full_stop(v)}" for k, v in fields if v.strip())
        unit = f"cfpb-{r.get('Complaint ID', i)}"
        notes.append(Note(unit, f"{head}\nComplaint: {narrative(r, CFPB_NOTE_CHARS)}", unit))
        units_by_issue[r["Issue"].strip()].append(unit)
    queries = []
    for i in sorted(held):
        r = cases[i]
        issue = r["Issue"].strip()
        if units_by_issue.get(issue):
            queries.append(Query(f"cfpb-q-{r.get('Complaint ID', i)}", question_of(r), [issue]))
    return RealSet("cfpb", notes, queries, {
        "rendering": (
            "Rows of the CFPB consumer complaint export that carry a consumer narrative "
            "(redactions 'XXXX' as published). A note: 'Product: ...', 'Sub-product: ...', "
            "'Issue: ...', 'Sub-issue: ...', 'Company: ...' (empty fields left out) and "
            f"'Complaint: <narrative cut to {CFPB_NOTE_CHARS} characters at a sentence end>'. "
            f"A query: a held-out narrative cut to {CFPB_QUERY_CHARS} characters + 'Which issue "
            "does this complaint concern?'; answer = its Issue (only issues >= 5 complaints "
            "file; never a narrative that writes its issue). Unit = the complaint id; no "
            "person names, no 'patient'."),
        "rows": {"rows": len(rows), "with_narrative_and_issue": len(cases),
                 "held_out": len(held), "notes": len(notes)},
        "issues": dict(sorted(issue_count.items())),
        "paths": [CFPB_PATH],
    })


# ---------------------------------------------------------------------------------------------
# SearchQA-shaped web snippets (the json one file per question the SearchQA crawler writes)


SEARCHQA: Pinned | None = None  # no public repository here holds the crawl; see README
SQA_MIN_SNIPPETS_WITH_ANSWER = 5


def read_searchqa(src: GitSource, under: str) -> list[dict[str, Any]]:
    """Every ``*.json`` under ``under`` holding ``question``, ``answer`` and ``search_results``
    (each with a ``snippet``), the layout of nyu-dl/dl4ir-searchQA's crawler."""
    items = []
    for path in sorted(src.files()):
        if not (path.startswith(under.rstrip("/") + "/") and path.endswith(".json")):
            continue
        try:
            obj = json.loads(src.read(path).decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict) and {"question", "answer", "search_results"} <= obj.keys():
            obj["_path"] = path
            items.append(obj)
    return items


def render_searchqa(items: Sequence[dict[str, Any]], seed: int = SPLIT_SEED,
                    max_notes: int = 4000) -> RealSet:
    """One note per snippet (unit = the snippet's page address); one query per question whose
    answer at least ``SQA_MIN_SNIPPETS_WITH_ANSWER`` of its snippets hold."""
    notes: list[Note] = []
    queries: list[Query] = []
    for k, item in enumerate(sorted(items, key=lambda x: str(x.get("id", x.get("_path"))))):
        answer = str(item["answer"]).strip()
        question = str(item["question"]).strip()
        snippets = [r for r in item["search_results"] if str(r.get("snippet") or "").strip()]
        for j, r in enumerate(snippets):
            title = str(r.get("title") or "").strip()
            text = f"{title}\n{str(r['snippet']).strip()}" if title else str(r["snippet"])
            unit = str(r.get("url") or f"sqa-{k}-{j}")
            notes.append(Note(f"sqa-{k:05d}-{j:03d}", text, unit))
        if not answer or contains(question, answer):
            continue
        if sum(contains(str(r["snippet"]), answer) for r in snippets) \
                < SQA_MIN_SNIPPETS_WITH_ANSWER:
            continue
        queries.append(Query(f"sqa-q-{k:05d}", f"Question: {question}", [answer]))
    notes = sample(notes, max_notes, seed + 1)
    return RealSet("searchqa", notes, queries, {
        "rendering": ("One note per search snippet ('<title>\\n<snippet>') of every question, "
                      "unit = its page address; a query 'Question: <Jeopardy clue>' with the "
                      "answer, kept "
                      f"where >= {SQA_MIN_SNIPPETS_WITH_ANSWER} of its snippets hold it."),
        "rows": {"questions": len(items), "queries": len(queries), "notes": len(notes)},
    })


# ---------------------------------------------------------------------------------------------
# AG News: real news snippets, named entities as answers (a stand-in for SearchQA's shape)


AGNEWS = Pinned("little-aztl/NLP-LogLinear", "3e85ebdaf3517971c200b9090148cece77e2683c")
AGNEWS_PATH = "ag_news_csv/test.csv"  # AG's News Topic Classification Dataset, test split
AGNEWS_README = "ag_news_csv/readme.txt"
AGNEWS_CLASSES = "ag_news_csv/classes.txt"
NEWS_QUERIES = 300
NEWS_MAX_ANSWERS = 150
NEWS_MIN_SUPPORT = HELD_BY  # an answer at least 40 notes hold ...
NEWS_MAX_SUPPORT = 400  # ... and at most 400, so that it is not trivial
NEWS_BIN_EDGES = (1.0, 1.5, 2.5, 5.0, 10.0)  # x min support: 40-60, 60-100, 100-200, 200-400
NEWS_MIN_PROPOSALS = 5  # the rule must propose a candidate in at least 5 descriptions
NEWS_MAX_PER_ANSWER = 6  # held-out notes (queries) per answer at most
NEWS_MASK = "this name"
NEWS_QUESTION = " Who or what is meant by 'this name'?"

# The corpus writes HTML entities with the '&' turned into a space (' #39;', ' quot;'), some
# with it kept ('&lt;'); a backslash stands for a line break, or escapes '$' and '"'.
NEWS_ENTITY_RE = re.compile(r"(?:&|\s)?(?<![A-Za-z0-9])(?:#(\d{2,5})|(quot|amp|lt|gt|hellip|"
                            r"nbsp|apos|mdash|ndash));")
NEWS_TAG_RE = re.compile(r"</?(?:a|b|i|p|br|em|strong|font|nobr|img|span|div|u)\b[^<>]*(?:>|$)",
                         re.IGNORECASE)
WEEKDAYS_MONTHS = frozenset({
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January",
    "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept",
    "Oct", "Nov", "Dec"})
# abbreviations of common nouns, never a name
COMMON_ABBREVIATIONS = frozenset({"CEO", "CFO", "COO", "CTO", "GDP", "IPO", "DVD", "CD", "PC",
                                  "TV", "DNA", "MP3", "ERP", "RBI", "ERA"})
COMPANY_DESIGNATORS = frozenset({"Inc", "Corp", "Co", "Ltd", "Plc", "PLC", "LLC"})
CAP_WORD = r"[A-Z][a-z]+(?:[A-Z][a-z]+)*(?:-[A-Z][a-z]+)*|[A-Z]{2,}"
CAP_TOKEN_RE = re.compile(rf"([\"“‘'(\[]*)({CAP_WORD})((?:'s|’s)?)([^\w\s]*)")


def clean_news(text: str) -> str:
    """AG News text with its HTML entities decoded (' #39;s' -> "'s", ' quot;' -> '"',
    ' #36;' -> '$', '&lt;' -> '<'), HTML tags dropped (ticker symbols like '<MSFT.O>' kept),
    backslash line breaks as spaces and whitespace runs as one space; verbatim otherwise."""

    def entity(m: re.Match[str]) -> str:
        if m[1] is not None:
            code = int(m[1])
            return html.unescape(f"&#{code};") if code >= 32 else m[0]
        return html.unescape(f"&{m[2]};")

    text = NEWS_ENTITY_RE.sub(entity, text)
    text = NEWS_TAG_RE.sub(" ", text)
    text = re.sub(r"\\+(?=[$\"'])", "", text)
    text = re.sub(r"\\+", " ", text)
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class NewsItem:
    row: int  # 1-based line of the csv
    label: str  # class index 1-4
    title: str
    description: str

    @property
    def id(self) -> str:
        return f"agnews-test-{self.row:04d}"

    @property
    def text(self) -> str:
        return f"{full_stop(self.title)} {self.description}" if self.description \
            else full_stop(self.title)


def read_agnews(src: GitSource, path: str = AGNEWS_PATH) -> list[NewsItem]:
    text = src.read(path).decode("utf-8", errors="replace")
    items = []
    for k, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if len(row) != 3:
            raise SetError(f"{path}: line {k} has {len(row)} fields, not 3")
        if k == 1 and not row[0].strip().isdigit():
            continue  # a header some copies add
        items.append(NewsItem(k, row[0].strip(), clean_news(row[1]), clean_news(row[2])))
    return items


def capitalised_runs(description: str) -> list[str]:
    """Maximal runs of 1-4 capitalised words (``Microsoft``, ``Yasser Arafat``, ``NASA``) that
    do not start a sentence or clause (the text's start, after '.', '!', '?', ':', a dash, or an
    opening quote or bracket), with a trailing company designator (Inc, Corp, Co, ...) cut."""
    out: list[str] = []
    run: list[str] = []
    skip = True  # the next capitalised word starts a sentence or clause
    run_initial = False

    def close() -> None:
        nonlocal run
        words = list(run)
        while words and words[-1] in COMPANY_DESIGNATORS:
            words.pop()
        if words and not run_initial and len(run) <= 4:
            out.append(" ".join(words))
        run = []

    for token in description.split():
        m = CAP_TOKEN_RE.fullmatch(token)
        if m is None:
            if run:
                close()
            skip = token in {"-", "--", "—", "–"} or bool(re.search(r"[.!?:][\"”')\]]*$",
                                                                     token))
            continue
        opening, word, possessive, closing = m.groups()
        if opening and run:
            close()
        if not run:
            run_initial = skip or bool(opening)
        run.append(word)
        skip = False
        if possessive or closing:
            close()
            skip = bool(re.search(r"[.!?:]", closing)) or closing in {"-", "--"}
    if run:
        close()
    return out


@dataclass
class NewsAnswer:
    name: str
    proposals: int  # descriptions in which the rule proposes it
    support: int  # notes (all rows) that hold it: case-insensitive substring
    word_support: int  # ... as a whole word
    lowercase_share: float  # of its whole-word occurrences in descriptions, all lowercase


def news_candidates(items: Sequence[NewsItem], min_support: int = NEWS_MIN_SUPPORT,
                    max_support: int = NEWS_MAX_SUPPORT,
                    min_proposals: int = NEWS_MIN_PROPOSALS) -> tuple[list[NewsAnswer],
                                                                      dict[str, str]]:
    """The named-entity answers the rule proposes, and why each other candidate was dropped.

    Kept: proposed in >= ``min_proposals`` descriptions; at least 3 characters; no weekday or
    month; not a byline source (a title's trailing '(AP)', '(Reuters)', ... seen twice); not a
    common-noun abbreviation ('CEO'); a single word that is not a common given name (the SSA
    lists above) nor followed ('United') or preceded ('Arafat') by another capitalised word in
    >= 75% of its occurrences; all lowercase in <= 10% of its whole-word occurrences ('Web');
    held by between ``min_support`` and ``max_support`` notes, no more than twice as many as
    hold it as a whole word ('Cisco' in 'San Francisco'); where one kept name is a whole-word
    part of another ('Bush', 'President Bush'), the more often proposed one."""
    proposals: Counter[str] = Counter()
    for item in items:
        proposals.update(set(capitalised_runs(item.description)))
    bylines = Counter(m[1] for item in items
                      if (m := re.search(r"\(([^()]+)\)$", item.title)) is not None)
    byline_names = {b for b, n in bylines.items() if n >= 2}
    given = {n.casefold() for n in (*FIRST_NAMES_M, *FIRST_NAMES_F)}
    descriptions = "\n".join(item.description for item in items)
    designators = "|".join(sorted(COMPANY_DESIGNATORS))
    folded = [item.text.casefold() for item in items]
    dropped: dict[str, str] = {}
    kept: list[NewsAnswer] = []
    for name, proposed in sorted(proposals.items(), key=lambda kv: (-kv[1], kv[0])):
        if proposed < min_proposals:
            continue
        words = name.split()
        reason = None
        if len(name) < 3:
            reason = "shorter than 3 characters"
        elif any(w in WEEKDAYS_MONTHS for w in words):
            reason = "a weekday or month"
        elif name in COMMON_ABBREVIATIONS:
            reason = "a common-noun abbreviation"
        elif name in byline_names:
            reason = "a byline source"
        elif len(words) == 1 and name.casefold() in given:
            reason = "a given name alone"
        if reason:
            dropped[name] = reason
            continue
        folded_name = name.casefold()
        support = sum(folded_name in t for t in folded)
        if not min_support <= support <= max_support:
            continue
        whole = re.compile(rf"(?<!\w){re.escape(folded_name)}(?!\w)")
        word_support = sum(bool(whole.search(t)) for t in folded)
        found = re.findall(rf"(?<!\w){re.escape(name)}(?!\w)", descriptions, re.IGNORECASE)
        lower = sum(f == name.lower() for f in found) / max(1, len(found))
        if support > 2 * word_support:
            reason = "mostly inside longer words"
        elif lower > 0.10:
            reason = "mostly written in lowercase (a common word)"
        elif len(words) == 1:
            exact = list(re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", descriptions))
            followed = sum(bool(re.match(rf" (?!(?:{designators})\b)(?:{CAP_WORD})\b",
                                         descriptions[m.end():m.end() + 40])) for m in exact)
            preceded = sum(bool(re.search(rf"(?<![.!?:-] )(?<!^)\b(?:{CAP_WORD}) $",
                                          descriptions[max(0, m.start() - 40):m.start()]))
                           for m in exact)
            if exact and followed >= 0.75 * len(exact):
                reason = "mostly the first word of a longer name"
            elif exact and preceded >= 0.75 * len(exact):
                reason = "mostly the last word of a longer name"
        if reason:
            dropped[name] = reason
            continue
        kept.append(NewsAnswer(name, proposed, support, word_support, round(lower, 3)))
    final: list[NewsAnswer] = []
    for a in kept:  # most proposed first
        clash = next((b for b in final if re.search(rf"(?<!\w){re.escape(a.name)}(?!\w)", b.name)
                      or re.search(rf"(?<!\w){re.escape(b.name)}(?!\w)", a.name)), None)
        if clash is not None:
            dropped[a.name] = f"a whole-word part of, or holding, {clash.name!r}"
            continue
        final.append(a)
    return final, dropped


def mask_answer(text: str, answer: str) -> str | None:
    """``text`` with every occurrence of ``answer`` (any case) as ``this name``, or None where
    an occurrence is part of a longer word or a word of the answer stays in the text."""
    occurrences = len(re.findall(re.escape(answer), text, re.IGNORECASE))
    whole = re.compile(rf"(?<!\w){re.escape(answer)}(?!\w)", re.IGNORECASE)
    if occurrences == 0 or len(whole.findall(text)) != occurrences:
        return None
    masked = whole.sub(NEWS_MASK, text)
    words = answer.split()
    if len(words) > 1 and any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", masked)
                              for w in words if len(w) >= 3):
        return None
    return None if contains(masked, answer) else masked


def support_bin(support: int, min_support: int) -> str:
    edges = [round(min_support * e) for e in NEWS_BIN_EDGES]
    for lo, hi in itertools.pairwise(edges):
        if lo <= support < hi or (hi == edges[-1] and support == hi):
            return f"{lo}-{hi}"
    return "outside"


def render_news(items: Sequence[NewsItem], n_queries: int = NEWS_QUERIES,
                seed: int = SPLIT_SEED, max_notes: int | None = None,
                min_support: int = NEWS_MIN_SUPPORT, max_support: int = NEWS_MAX_SUPPORT,
                max_answers: int = NEWS_MAX_ANSWERS, min_proposals: int = NEWS_MIN_PROPOSALS,
                max_per_answer: int = NEWS_MAX_PER_ANSWER) -> RealSet:
    """One note per news item ('<title>. <description>', unit = its csv line); the rule's
    named entities as answers; a query per held-out item that holds its answer, the answer
    masked as 'this name' (held-out items are never notes)."""
    answers, dropped = news_candidates(items, min_support, max_support, min_proposals)
    bins: dict[str, list[NewsAnswer]] = defaultdict(list)
    for a in answers:
        bins[support_bin(a.support, min_support)].append(a)
    if len(answers) > max_answers:  # the same number from every bin, where it has them
        quota = -(-max_answers // len(bins))
        answers = [a for b in sorted(bins) for a in sample(bins[b], quota, seed)][:max_answers]
    texts = [item.text for item in items]
    duplicated = {t for t, n in Counter(it.description for it in items).items() if n > 1}
    pools: dict[str, list[tuple[int, str]]] = {}
    for a in answers:
        pool = [(i, q) for i, item in enumerate(items) if item.description not in duplicated
                and (q := mask_answer(texts[i], a.name)) is not None]
        random.Random(f"{seed}:{a.name}").shuffle(pool)
        pools[a.name] = pool
    order = [a.name for a in answers]
    random.Random(seed).shuffle(order)
    chosen: dict[str, list[tuple[int, str]]] = {name: [] for name in order}
    full: set[str] = set()  # answers that can give no more held-out notes
    while True:
        # deal round robin, one more query per answer a round, up to n_queries in all
        used = {i for qs in chosen.values() for i, _ in qs}
        for rnd in range(max_per_answer):
            for name in order:
                if len(used) >= n_queries or name in full or len(chosen[name]) > rnd:
                    continue
                nxt = next(((i, q) for i, q in pools[name] if i not in used), None)
                if nxt is not None:
                    chosen[name].append(nxt)
                    used.add(nxt[0])
        # notes: the rest (sampled where max_notes says); an answer the notes hold fewer
        # than min_support times gives its queries back one by one (and takes no more), one
        # held more than max_support times all of them.
        gave_back = False
        while True:
            used = {i for qs in chosen.values() for i, _ in qs}
            rest = [i for i in range(len(items)) if i not in used]
            note_idx = sample(rest, max_notes, seed + 1) if max_notes else rest
            held = holders([Note("", texts[i], "") for i in note_idx], order)
            changed = False
            for name in order:
                if chosen[name] and held[name] < min_support:
                    chosen[name].pop()
                    full.add(name)
                    changed = True
                elif chosen[name] and held[name] > max_support:
                    chosen[name] = []
                    full.add(name)
                    changed = True
            if not changed:
                break
            gave_back = True
        if not gave_back:
            break
    notes = [Note(items[i].id, texts[i], items[i].id) for i in note_idx]
    queries = [Query(f"agnews-q-{items[i].row:04d}", q + NEWS_QUESTION, [name])
               for name in order for i, q in chosen[name]]
    queries.sort(key=lambda q: q.id)
    final = {name: held[name] for name in order if chosen[name]}
    per_bin = Counter(support_bin(n, min_support) for n in final.values())
    info = {a.name: {"notes_holding": final[a.name], "queries": len(chosen[a.name]),
                     "proposals": a.proposals, "bin": support_bin(final[a.name], min_support)}
            for a in answers if a.name in final}
    return RealSet("news", notes, queries, {
        "rendering": (
            "One note per AG News item: '<title>. <description>' (HTML entities the corpus "
            "writes with the '&' as a space, ' #39;' ' quot;' ' #36;' '&lt;', decoded; HTML "
            "tags dropped, ticker symbols like '<MSFT.O>' kept; a backslash, the corpus's line "
            "break, as a space, or dropped before '$' and '\"'; whitespace runs as one space; "
            "otherwise verbatim), unit = id = its line in test.csv. The class label is not "
            f"written. A query: a held-out item's note text with every occurrence of its answer "
            f"(any case) replaced by '{NEWS_MASK}', followed by '{NEWS_QUESTION.strip()}'; an "
            "item is a query only where every occurrence is a whole word and no word of a "
            "multi-word answer stays; items whose description another item repeats are never "
            f"queries. Queries are dealt round robin over the answers (at most "
            f"{max_per_answer} each, {n_queries} in all); held-out items are never notes."),
        "answer_rule": (
            "Candidates: maximal runs of 1-4 capitalised words (Xxx, CamelCase, ALLCAPS) in "
            "the descriptions that do not start a sentence or clause (text start, after . ! ? "
            ": or a dash, or after an opening quote or bracket), a trailing company designator "
            "(Inc, Corp, Co, Ltd, Plc, LLC) cut. Kept: proposed in >= "
            f"{min_proposals} descriptions; >= 3 characters; no weekday or month word; not a "
            "byline source (a title's trailing '(...)' seen twice: AP, Reuters, AFP, ...); a "
            "single word neither a common given name (SSA lists in make_sets.py) nor followed "
            "by another capitalised word in >= 75% of its occurrences; all lowercase in <= 10% "
            "of its whole-word occurrences; held by "
            f"{min_support}-{max_support} notes (case-insensitive substring), at most twice "
            "the notes holding it as a whole word; of two kept names where one is a whole-word "
            "part of the other, the more often proposed. All that remain are answers (at most "
            f"{max_answers}, the same number per support bin); an answer that the final notes "
            f"hold fewer than {min_support} times gives back queries until it is held "
            f"{min_support} times or has none (then it is not in the set)."),
        "rows": {"items": len(items), "held_out_queries": len(queries), "notes": len(notes),
                 "rows_not_used": len(items) - len(queries) - len(notes),
                 "classes": dict(sorted(Counter(it.label for it in items).items()))},
        "answers_per_support_bin": dict(sorted(per_bin.items(),
                                               key=lambda kv: int(kv[0].split("-")[0]))),
        "answers": info,
        "candidates_dropped": dict(sorted(dropped.items())),
        "paths": [AGNEWS_PATH],
    })


# ---------------------------------------------------------------------------------------------
# command line


def _source_record(pinned: Pinned, src: GitSource, licence: str) -> dict[str, Any]:
    return {"repository": f"https://github.com/{pinned.repo}", "commit": src.commit,
            "licence": licence}


def cmd_movielens(args: argparse.Namespace) -> RealSet:
    pinned = MOVIELENS
    src = open_source(pinned, args.source, args.commit)
    raw = read_movielens(src, args.layout)
    real = render_movielens(raw, n_queries=args.queries)
    readme = next((p for p in (f"{raw.paths[0].rsplit('/', 1)[0]}/README",) if src.readable(p)),
                  None)
    licence = ("as ml-100k/README states it (SUMMARY & USAGE LICENSE): research use only; no "
               "endorsement; acknowledge Harper & Konstan 2015; no redistribution without "
               "permission; no commercial use without permission. The repository states no "
               "licence of its own.")
    if readme:
        head = src.read(readme).decode("latin-1")
        if "may not redistribute" not in head:
            licence = "see " + readme
    real.source = {**_source_record(pinned, src, licence), **real.source}
    return real


def cmd_mtsamples(args: argparse.Namespace) -> RealSet:
    src = open_source(MTSAMPLES, args.source, args.commit)
    pages, counts = read_mtsamples(src)
    real = render_mtsamples(pages, n_queries=args.queries, counts=counts)
    licence = ("The repository states no licence (its README: 'A web scraper to collect data "
               "from mtsamples.com ... To create a dataset of medical transcriptions for use "
               "with natural language processing'). The pages are mtsamples.com's "
               "transcription samples (cached 2018-10-14), offered there as sample reports.")
    real.source = {**_source_record(MTSAMPLES, src, licence), **real.source}
    return real


def cmd_cfpb(args: argparse.Namespace) -> RealSet:
    src = open_source(CFPB, args.source, args.commit)
    real = render_cfpb(read_cfpb(src), n_queries=args.queries)
    licence = ("The repository states no licence. The rows are the US Consumer Financial "
               "Protection Bureau's public Consumer Complaint Database export (narratives "
               "published with the consumer's consent, personal details redacted 'XXXX'), a "
               "US government publication.")
    real.source = {**_source_record(CFPB, src, licence), **real.source}
    return real


def cmd_news(args: argparse.Namespace) -> RealSet:
    src = open_source(AGNEWS, args.source, args.commit)
    items = read_agnews(src)
    real = render_news(items, n_queries=args.queries, max_notes=args.max_notes,
                       max_answers=args.answers)
    quote = "research purposes"
    licence = ("as ag_news_csv/readme.txt (AG's News Topic Classification Dataset, version 3, "
               "Xiang Zhang) states it: AG's corpus 'is provided by the academic community for "
               "research purposes in data mining (clustering, classification, etc), information "
               "retrieval (ranking, search, etc), xml, data compression, data streaming, and any "
               "other non-commercial activity' (http://www.di.unipi.it/~gulli/"
               "AG_corpus_of_news_articles.html); the topic dataset is from Zhang, Zhao & LeCun, "
               "NIPS 2015. The repository's LICENSE (MIT, 2024) is for its own code and does "
               "not relicense the data.")
    if src.readable(AGNEWS_README):
        readme = src.read(AGNEWS_README).decode("utf-8", errors="replace")
        if quote not in readme:
            licence = "see " + AGNEWS_README
    classes = (src.read(AGNEWS_CLASSES).decode().split() if src.readable(AGNEWS_CLASSES)
               else [])
    real.source = {**_source_record(AGNEWS, src, licence), **real.source,
                   "class_names": classes,
                   "corpus": ("AG News (Zhang et al. 2015) test split: 7,600 news items "
                              "(title, description) from AG's corpus, gathered from more than "
                              "2,000 news sources by the ComeToMyHead news search engine "
                              "(2004-2005)")}
    return real


def cmd_searchqa(args: argparse.Namespace) -> RealSet:
    if args.source is None or args.repo is None or args.commit is None:
        raise SetError("searchqa needs --source, --repo and --commit: no public repository "
                       "found here holds SearchQA's crawled json (see README)")
    pinned = Pinned(args.repo, args.commit)
    src = open_source(pinned, args.source, args.commit)
    real = render_searchqa(read_searchqa(src, args.under))
    real.source = {**_source_record(pinned, src, args.licence), **real.source}
    return real


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], RealSet], Pinned | None, str]] = {
    "movielens": (cmd_movielens, MOVIELENS, "MovieLens ratings rendered as user profiles"),
    "mtsamples": (cmd_mtsamples, MTSAMPLES, "medical transcriptions with their specialty"),
    "cfpb": (cmd_cfpb, CFPB, "consumer complaint narratives with their issue"),
    "news": (cmd_news, AGNEWS, "AG News snippets with the named entities they hold"),
    "searchqa": (cmd_searchqa, SEARCHQA, "SearchQA crawler json: web snippets per question"),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="set", required=True)
    for name, (_, pinned, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        pin = f"{pinned.repo} @ {pinned.commit}" if pinned else "no pinned repository"
        p.add_argument("--source", type=Path, default=None,
                       help=f"a local git dir (bare mirror or clone) of {pin}; default: clone "
                            "it into .data/raw/")
        p.add_argument("--commit", default=None, help="the commit to read (default: pinned)")
        p.add_argument("--out", type=Path, default=DATA_DIR / "sets" / name)
        p.add_argument("--queries", type=int, default=None,
                       help="held-out queries (default: the set's own)")
        if name == "movielens":
            p.add_argument("--layout", choices=("auto", "ml-1m", "ml-100k"), default="auto")
        if name == "news":
            p.add_argument("--max-notes", type=int, default=None,
                           help="sample the notes down to this many (default: keep all, so "
                                "that answers keep >= 40 notes)")
            p.add_argument("--answers", type=int, default=NEWS_MAX_ANSWERS,
                           help="answers at most (the same number per support bin)")
        if name == "searchqa":
            p.add_argument("--repo", default=None, help="owner/name, for SOURCE.json")
            p.add_argument("--under", default=".", help="folder holding the json files")
            p.add_argument("--licence", default="as the repository states it")
    args = parser.parse_args(argv)
    if args.queries is None:
        args.queries = {"mtsamples": MT_QUERIES, "cfpb": CFPB_QUERIES,
                        "news": NEWS_QUERIES}.get(args.set)
    try:
        real = COMMANDS[args.set][0](args)
        stats = write_set(real, args.out)
    except SetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps({"out": str(args.out), **stats}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
