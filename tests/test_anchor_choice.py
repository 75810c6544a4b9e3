"""The nearest anchor rule (facts.anchor_choice): a document joins the released anchor its
text is nearest to, and no other document's clusters depend on it."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynrag.facts.anchor_choice import nearest_first
from dpsynrag.facts.span_corpus import SpanSettings, cluster_members, span_corpus
from dpsynrag.pipeline.config import BuildConfig, ConfigError

TOPICS = {"gout": 0, "flu": 1, "doctor": 2, "fever": 1}


def fake_embed(texts: list[str]) -> np.ndarray:
    """A public stand-in embedder: a text's vector counts its topic words (other words a
    tenth each, on one axis of their own), unit norm."""
    rows = np.zeros((len(texts), len(TOPICS) + 1), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            topic = TOPICS.get(word.strip(".,"))
            rows[i, len(TOPICS) if topic is None else topic] += 0.1 if topic is None else 1.0
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def test_the_anchor_nearest_the_text_comes_first() -> None:
    texts = ["doctor saw gout gout gout, red toe", "flu flu doctor fever"]
    items = [["doctor", "red toe", "gout"], ["doctor", "flu", "fever"]]
    anchors = {"doctor": 5, "gout": 30, "flu": 40}
    ordered = nearest_first(texts, items, anchors, fake_embed)
    assert ordered[0] == ["gout", "doctor", "red toe"]  # held anchors first, nearest first
    assert ordered[1] == ["flu", "doctor", "fever"]  # then the other items in their order


def test_a_document_without_anchors_keeps_its_items() -> None:
    assert nearest_first(["a b"], [["x", "y"]], {"gout": 3}, fake_embed) == [["x", "y"]]
    assert nearest_first(["a b"], [["x"]], {}, fake_embed) == [["x"]]
    with pytest.raises(ValueError, match="one item list per document"):
        nearest_first(["a", "b"], [["x"]], {}, fake_embed)


def test_nearest_puts_each_document_in_its_topic_cluster_rarest_in_the_rarest() -> None:
    texts = ["gout gout doctor", "gout doctor gout", "flu flu doctor"]
    items = [["doctor", "gout"], ["doctor", "gout"], ["doctor", "flu"]]
    anchors = {"doctor": 3, "gout": 20, "flu": 20}
    near = SpanSettings((1,), (8,), cluster_cap=8, L=1, anchor_rule="nearest")
    order, members = cluster_members(texts, items, anchors, near, frozenset(), fake_embed)
    clusters = dict(zip(order, members, strict=True))
    assert clusters == {"doctor": [], "gout": [0, 1], "flu": [2]}
    rare = SpanSettings((1,), (8,), cluster_cap=8, L=1, anchor_rule="rarest")
    order, members = cluster_members(texts, items, anchors, rare, frozenset(), None)
    assert dict(zip(order, members, strict=True))["doctor"] == [0, 1, 2]


def test_removing_a_document_changes_no_other_documents_clusters() -> None:
    """The neighbouring-input property the histograms' sensitivity rests on: with the
    released anchors fixed, the clusters of every other document are the same with and
    without document d."""
    rng = np.random.default_rng(7)
    words = ["gout", "flu", "doctor", "toe", "fever"]
    texts = [" ".join(rng.choice(words, size=5)) for _ in range(40)]
    items = [sorted(set(t.split())) for t in texts]
    anchors = {"gout": 9, "flu": 11, "doctor": 4, "toe": 7}
    settings = SpanSettings((1,), (8,), cluster_cap=8, L=2, anchor_rule="nearest")

    def clusters_of(keep: list[int]) -> dict[int, set[str]]:
        order, members = cluster_members([texts[i] for i in keep], [items[i] for i in keep],
                                         anchors, settings, frozenset(), fake_embed)
        held: dict[int, set[str]] = {i: set() for i in keep}
        for anchor, group in zip(order, members, strict=True):
            for local in group:
                held[keep[local]].add(anchor)
        return held

    everyone = clusters_of(list(range(40)))
    assert all(len(c) <= 2 for c in everyone.values())
    for d in (0, 17, 39):
        without = clusters_of([i for i in range(40) if i != d])
        assert without == {i: c for i, c in everyone.items() if i != d}


def test_the_nearest_rule_needs_an_embedder() -> None:
    settings = SpanSettings((1,), (8,), cluster_cap=8, L=1, anchor_rule="nearest")
    with pytest.raises(ValueError, match="embedder"):
        span_corpus(["a"], settings, releases=None, stop=frozenset())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="anchor_rule"):
        SpanSettings((1,), (8,), cluster_cap=8, L=1, anchor_rule="closest")


def test_the_option_is_checked_and_released() -> None:
    with pytest.raises(ConfigError, match="--ngram-anchors"):
        BuildConfig(epsilon=3.0, ngram_anchors="closest").validate()
    nearest = BuildConfig(epsilon=3.0, ngram_anchors="nearest")
    assert nearest.released_options()["ngram_anchors"] == "nearest"
    # the default, as builds made before the option recorded it: no key, same fingerprint
    assert "ngram_anchors" not in BuildConfig(epsilon=3.0).released_options()
    with pytest.raises(ConfigError, match="--ngram-anchors rarest"):
        BuildConfig(epsilon=3.0, ngram_anchors="nearest", runner="beam").validate()


def test_span_corpus_runs_the_nearest_rule_end_to_end() -> None:
    from dpsynrag.facts.ngrams import level_keys
    from dpsynrag.facts.span_releases import ExactReleases

    texts = ([f"Patient {i} has gout in the toe ." for i in range(6)]
             + [f"Patient {i} has flu with fever ." for i in range(6)])
    settings = SpanSettings((1, 2), (32, 32), cluster_cap=8, L=1, anchor_rule="nearest")
    releases = ExactReleases(dict.fromkeys(level_keys((1, 2)), 3))
    corpus = span_corpus(texts, settings, releases,  # type: ignore[arg-type]
                         stop=frozenset({"has", "in", "the", "with"}), embed=fake_embed)
    assert corpus.clusters >= 2
    notes = {note.anchor: note.text for note in corpus.notes}
    assert any("gout" in text for text in notes.values())
    assert all(not ("gout" in text and "flu" in text) for text in notes.values())
