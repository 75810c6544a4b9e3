"""``build-corpus --facts-items ngrams`` end to end, and the stitching of released spans:
the plan spent and verified, every level one charge, a resume that draws nothing, notes
made of released spans only, and the options checked."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_facts_build import FACTS
from test_facts_build import _build as facts_build

from dpsynrag.accounting.certificate import verify_output
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.facts.ngrams import level_key
from dpsynrag.facts.spans import (
    close_bracket,
    document_spans,
    stitch,
    trim_span,
    windows_released,
)
from dpsynrag.facts.tokens import ngram_tokens, tokenize
from dpsynrag.pipeline.build import make_plan
from dpsynrag.pipeline.config import ConfigError, make_config

NGRAMS = {"facts_items": "ngrams", "ngram_items": (24, 24, 16, 16)}
N_PROFILES = 500
TITLES = ["The Godfather (1972)", "Toy Story (1995)", "Back to the Future (1985)",
          "Star Wars: Episode IV - A New Hope (1977)", "Fargo (1996)"]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(11)
    rows = []
    for i in range(N_PROFILES):
        liked = rng.sample(TITLES, 2)
        rows.append({"id": f"n{i}", "unit": f"u{i}",
                     "text": f"Viewer {i:04d} is {rng.randint(18, 70)} years old. She mostly "
                             f"enjoys drama films. In particular, she likes {liked[0]} and "
                             f"{liked[1]}."})
    path = tmp_path_factory.mktemp("profiles") / "notes.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _build(notes: Path, tmp: Path, name: str = "out", **options):
    """The facts build of ``test_facts_build`` with the n-gram options."""
    return facts_build(notes, tmp, name, **{**NGRAMS, **options})


@pytest.fixture(scope="module")
def built(profiles: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("ngram-build")
    config, summary = _build(profiles, tmp)
    return tmp, config, summary


def test_an_ngram_build_spends_its_plan_verifies_and_keeps_titles_whole(built) -> None:
    tmp_path, config, summary = built
    plan = make_plan(config)
    assert plan.ngram_lengths == (1, 2, 4, 8) and plan.ngram_items == (24, 24, 16, 16)
    out = tmp_path / "out"
    assert verify_output(out, tmp_path / "key.pem.pub", allow_seeded=True) == []
    ledger = Ledger(tmp_path / "state-out" / "ledger.sqlite")
    keys = [r.key for r in ledger.releases()]
    assert [k for k in keys if k.startswith("ngrams/")] == [level_key(n) for n in (1, 2, 4, 8)]
    assert "histogram" not in keys  # no keyword histogram in this mode
    assert summary.rho_spent == pytest.approx(plan.rho_total, rel=1e-9)
    texts = pq.read_table(out / "corpus.parquet").column("text").to_pylist()
    assert texts
    joined = "\n".join(texts)
    assert any(title in joined for title in TITLES), "a title is written whole, year and all"
    assert not any(f"Viewer {i:04d}" in joined for i in range(N_PROFILES))
    from dpsynrag.accounting.certificate import load_certificate
    from dpsynrag.accounting.explain import explain_certificate

    text = explain_certificate(load_certificate(out / "certificate.json"), verified=True,
                               trust="embedded")
    assert "released n-grams" in text and "fixed template" not in text


def test_a_resumed_ngram_build_draws_and_charges_nothing(built, profiles: Path) -> None:
    tmp_path, _, _ = built
    ledger = Ledger(tmp_path / "state-out" / "ledger.sqlite")
    before = [(r.key, r.rho) for r in ledger.releases()]
    first = pq.read_table(tmp_path / "out" / "corpus.parquet").column("text").to_pylist()
    _build(profiles, tmp_path)
    ledger = Ledger(tmp_path / "state-out" / "ledger.sqlite")
    assert [(r.key, r.rho) for r in ledger.releases()] == before
    again = pq.read_table(tmp_path / "out" / "corpus.parquet").column("text").to_pylist()
    assert again == first


def test_a_second_pass_at_one_length_is_its_own_release_and_verifies(
        profiles: Path, tmp_path: Path) -> None:
    """--ngram-lengths 1,1,2: the second pass offers the unigrams the first did not release
    (a document's weight then goes to fewer, rarer ones); its own ledger key and charge."""
    config, summary = _build(profiles, tmp_path, ngram_lengths="1,1,2", ngram_items="24,24,24")
    plan = make_plan(config)
    assert plan.ngram_lengths == (1, 1, 2) and len(plan.ngram_thresholds) == 3
    assert verify_output(tmp_path / "out", tmp_path / "key.pem.pub", allow_seeded=True) == []
    ledger = Ledger(tmp_path / "state-out" / "ledger.sqlite")
    keys = [r.key for r in ledger.releases() if r.key.startswith("ngrams/")]
    assert keys == ["ngrams/01", "ngrams/01-2", "ngrams/02"]
    first, second = (ledger.released_value(k) for k in keys[:2])
    assert first and not set(first) & set(second)  # the second pass releases only new ones
    assert summary.rho_spent == pytest.approx(plan.rho_total, rel=1e-9)


def test_ngram_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="ngram-items"):
        make_config(None, {**FACTS, **NGRAMS, "ngram_items": "8,8"})
    with pytest.raises(ConfigError, match="ngram-lengths"):
        make_config(None, {**FACTS, **NGRAMS, "ngram_lengths": "1,3"})
    with pytest.raises(ConfigError, match="ngram-lengths"):
        make_config(None, {**FACTS, **NGRAMS, "ngram_lengths": "2,1"})
    with pytest.raises(ConfigError, match="ngram-lengths"):
        make_config(None, {**FACTS, **NGRAMS, "ngram_lengths": "one,two"})
    with pytest.raises(ConfigError, match="writer tokens"):
        make_config(None, {**FACTS, **NGRAMS, "writer": "tokens"})
    terms = make_config(None, {**FACTS, **NGRAMS, "facts_items": "terms"})
    assert "ngram_lengths" not in terms.released_options()  # terms builds keep their options


# ---------------------------------------------------------------------- stitching
def test_stitch_joins_overlaps_drops_contained_spans_and_keeps_order() -> None:
    spans = ["In particular , she likes", "she likes Toy Story ( 1995",
             "Toy Story ( 1995 )", "Story (", "drama films"]
    stitched = stitch(spans, stopwords={"she", "in"})
    assert stitched[0] == ngram_tokens("In particular , she likes Toy Story ( 1995 )")
    assert ngram_tokens("drama films") in stitched
    assert all(ngram_tokens("Story (") != s for s in stitched)


def test_a_weak_overlap_does_not_join_and_allowed_can_refuse() -> None:
    # one shared stopword is no overlap; two tokens are
    assert len(stitch(["cats and the", "the dogs"], stopwords={"the", "and"})) == 2
    assert len(stitch(["cats and the", "and the dogs"], stopwords={"the", "and"})) == 1
    refused = stitch(["a b c d", "c d e f"], allowed=lambda tokens: len(tokens) < 6)
    assert len(refused) == 2


def test_joined_spans_hold_only_released_windows_of_the_longest_length() -> None:
    released = {2: {"a b", "b c", "c d"}, 3: {"a b c", "b c d"}}
    assert windows_released(("a", "b", "c", "d"), released)
    assert not windows_released(("a", "b", "c", "x"), released)
    assert windows_released(("x", "y"), released)  # shorter than the longest length


def test_a_span_left_inside_a_bracket_is_closed_only_where_a_released_ngram_closes_it() -> None:
    released = {1: {"1995"}, 2: {"1995 )", "Story ("},
                4: {"Toy Story ( 1995", "Story ( 1995 )", ") ( 1995 )"}}
    assert close_bracket(ngram_tokens("Toy Story ( 1995"), released) == \
        ngram_tokens("Toy Story ( 1995 )")
    assert close_bracket(ngram_tokens("Heat ( 1996"), released) == ngram_tokens("Heat ( 1996")
    for closed in ("Toy Story ( 1995 )", "Toy Story", "( ID4 ) ( 1995 ) , Heat"):
        assert close_bracket(ngram_tokens(closed), released) == ngram_tokens(closed)
    assert close_bracket(ngram_tokens("Day ( ID4 ) ( 1995"), released)[-1] == ")"
    assert close_bracket(ngram_tokens("Toy Story ( 1995"), {1: {"1995"}}) == \
        ngram_tokens("Toy Story ( 1995")  # no length >= 2 released: nothing to close with


def test_a_closed_bracket_writes_no_unreleased_window_of_the_longest_length() -> None:
    """The bracket is appended only where the closed span's last window of the longest
    length is released too: "Story ( 1995 )" is not a released 4-gram here."""
    released = {1: {"1995"}, 2: {"1995 )"}, 4: {"Toy Story ( 1995"}}
    span = ngram_tokens("Toy Story ( 1995")
    assert close_bracket(span, released) == span
    released[4] = {"Toy Story ( 1995", "Story ( 1995 )"}
    assert close_bracket(span, released) == (*span, ")")


@pytest.mark.parametrize(("span", "trimmed"), [
    ("1981 ) , The Godfather ( 1972 )", "The Godfather ( 1972 )"),  # a year before it
    ("( 1996 ) , The Empire Strikes Back", "The Empire Strikes Back"),
    (") , ( 1996 ) , The Rock", "The Rock"),
    (") , Jerry Maguire ( 1996 ) , The", "Jerry Maguire ( 1996 )"),  # loose ends
    ("Toy Story ( 1995 )", "Toy Story ( 1995 )"),
    ("gout ) , fever", "gout ) , fever"),  # a word is never cut
    ("( gout ) , fever", "( gout ) , fever"),
    ("( 1996 )", ""),  # no word left: a bare year says nothing
    ("1991", ""),
    ("aged 62", "aged 62"),
])
def test_a_span_loses_the_tail_of_an_item_it_does_not_hold(span: str, trimmed: str) -> None:
    stop = {"the", "and", "a", "of"}
    assert " ".join(trim_span(ngram_tokens(span), stop)) == trimmed


def test_document_spans_are_the_maximal_released_spans() -> None:
    tokens = tokenize("She likes Toy Story (1995) a lot")
    released = {1: {"Toy": 40, "Story": 40}, 2: {"Toy Story": 40, "likes Toy": 30},
                4: {"Toy Story ( 1995": 35}}
    fresh, overlapping = document_spans(tokens, released)
    assert fresh[0] == "Toy Story ( 1995" and overlapping == []
    assert "likes Toy" in fresh and "Toy Story" not in fresh and "Toy" not in fresh


def test_windows_of_one_shared_run_come_after_the_documents_other_spans() -> None:
    """Eight 4-gram windows of one 11-token run: every other one is fresh (half of it new),
    the windows between (3/4 inside fresh ones) follow the document's other spans; with a
    share of 0 every maximal span is fresh."""
    run = [f"w{i}" for i in range(11)]
    tokens = [*run, "x", "gout", "y"]
    released = {1: {t: 40 for t in tokens}, 4: {" ".join(run[i:i + 4]): 40 for i in range(8)}}
    fresh, overlapping = document_spans(tokens, released)
    assert fresh == ["w0 w1 w2 w3", "w2 w3 w4 w5", "w4 w5 w6 w7", "w6 w7 w8 w9", "x", "gout",
                     "y"]
    assert overlapping == ["w1 w2 w3 w4", "w3 w4 w5 w6", "w5 w6 w7 w8", "w7 w8 w9 w10"]
    everything, none = document_spans(tokens, released, fresh_share=0.0)
    assert none == [] and set(everything) == set(fresh) | set(overlapping)


def test_a_nearest_anchor_build_verifies_and_records_its_rule(
        profiles: Path, tmp_path: Path) -> None:
    """--ngram-anchors nearest: the same releases and rho, the rule in the certificate."""
    from dpsynrag.accounting.certificate import load_certificate

    config, summary = _build(profiles, tmp_path, ngram_anchors="nearest")
    assert summary.rho_spent == pytest.approx(make_plan(config).rho_total, rel=1e-9)
    out = tmp_path / "out"
    assert verify_output(out, tmp_path / "key.pem.pub", allow_seeded=True) == []
    certificate = load_certificate(out / "certificate.json")
    assert certificate["config"]["ngram_anchors"] == "nearest"
    assert pq.read_table(out / "corpus.parquet").num_rows > 0
