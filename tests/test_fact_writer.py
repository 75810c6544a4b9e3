"""Fact mode step 5: selection by a public rule on released counts, the false-fact threshold,
dropped clusters, the note template, and the check that every kept fact is in its note.

All tests are exact (deterministic); the end-to-end test uses ``secure_rng(5)``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace

import numpy as np
import pytest

from dpsynrag.accounting import Ledger, secure_rng
from dpsynrag.eval.metrics import verbatim_spans
from dpsynrag.facts.fact_clusters import (
    anchor_clusters,
    fact_domain,
    release_fact_histograms,
)
from dpsynrag.facts.fact_writer import (
    TEXTS_PER_CLUSTER,
    ClusterFacts,
    FactRule,
    absolute_threshold,
    display_order,
    display_phrase,
    distinct_views,
    keyword_shares,
    missing_facts,
    note_names,
    note_views,
    select_facts,
    write_note,
    write_notes,
)


def _tail(sigma: float, c: int) -> float:
    """P(N_Z(0, sigma^2) >= c) by direct summation in Python floats (independent reference)."""
    span = int(60 * sigma) + 20
    weights = {x: math.exp(-x * x / (2 * sigma * sigma)) for x in range(-span, span + 1)}
    total = math.fsum(weights.values())
    return math.fsum(w for x, w in weights.items() if x >= c) / total


@pytest.mark.parametrize(("sigma", "size", "target"), [(1.0, 10, 0.05), (3.0, 2000, 0.05),
                                                       (7.5, 500, 0.5), (0.5, 1, 0.01)])
def test_absolute_threshold_bounds_the_expected_false_facts(sigma: float, size: int,
                                                            target: float) -> None:
    c = absolute_threshold(sigma, size, target)
    assert c >= 1
    assert size * _tail(sigma, c) <= target
    if c > 1:
        assert size * _tail(sigma, c - 1) > target  # the smallest such c
    assert absolute_threshold(sigma, size * 10, target) >= c


DOMAIN = ["cough", "e-4471", "familial feshukia", "fever", "grenaethix", "rash", "timeout"]
PHRASES = {"e-4471", "familial feshukia", "grenaethix"}


def _row(**counts: int) -> list[int]:
    return [counts.get(item.replace("-", "_").replace(" ", "_"), 0) for item in DOMAIN]


def test_selection_follows_the_public_rule() -> None:
    sigma = 1.0
    c_abs = absolute_threshold(sigma, len(DOMAIN), 0.05)
    noisy = np.array([
        # anchor familial feshukia, support 40: cut = max(c_abs, 0.25 * 40) = 10
        _row(familial_feshukia=40, grenaethix=10, fever=25, cough=9, rash=10, e_4471=-3),
        # anchor e-4471, support 12: cut = max(c_abs, 3) = c_abs
        _row(e_4471=12, timeout=c_abs, fever=c_abs - 1),
    ], dtype=np.int64)
    rule = FactRule(frac=0.25, frac_phrases=0.25, false_facts=0.05)
    facts = select_facts(noisy, DOMAIN, ["familial feshukia", "e-4471"], PHRASES, sigma, rule)
    first, second = facts
    assert first == ClusterFacts(0, "familial feshukia", 40, ("grenaethix",), ("fever", "rash"))
    assert second == ClusterFacts(1, "e-4471", 12, (), ("timeout",))
    # related phrases need frac_phrases x support (default 0.5: 20 here), keywords frac
    default = select_facts(noisy, DOMAIN, ["familial feshukia", "e-4471"], PHRASES, sigma,
                           FactRule(frac=0.25, false_facts=0.05))
    assert default[0] == ClusterFacts(0, "familial feshukia", 40, (), ("fever", "rash"))
    capped = select_facts(noisy, DOMAIN, ["familial feshukia", "e-4471"], PHRASES, sigma,
                          FactRule(frac=0.25, max_keywords=1, false_facts=0.05))
    assert capped[0] is not None and capped[0].keywords == ("fever",)  # most frequent first


def test_clusters_below_support_or_without_facts_are_dropped() -> None:
    sigma = 2.0
    c_abs = absolute_threshold(sigma, len(DOMAIN), FactRule().false_facts)
    noisy = np.array([
        _row(grenaethix=c_abs - 1, fever=50),     # support below c_abs: dropped
        _row(grenaethix=30, fever=2),             # supported, but no fact passes: dropped
        _row(grenaethix=30, fever=20),            # kept
        _row(grenaethix=19, fever=20),            # below an explicit min_support of 20
    ], dtype=np.int64)
    anchors = ["grenaethix"] * 4
    rules_16 = FactRule(min_facts=1, require_keywords=True)
    facts = select_facts(noisy, DOMAIN, anchors, PHRASES, sigma, rules_16)
    assert facts[0] is None and facts[1] is None
    assert facts[2] is not None and facts[2].keywords == ("fever",)
    assert facts[3] is not None
    strict = select_facts(noisy, DOMAIN, anchors, PHRASES, sigma,
                          FactRule(min_support=20, min_facts=1, require_keywords=True))
    assert strict[3] is None and strict[2] is not None
    # the default (facts rules 17): a supported cluster without a fact is kept, bare
    lenient = select_facts(noisy, DOMAIN, anchors, PHRASES, sigma)
    assert lenient[0] is None
    assert lenient[1] == ClusterFacts(1, "grenaethix", 30, (), ())
    assert write_notes(facts) == ["Reported: fever. Grenaethix."] * 2
    # a cluster whose only facts are phrases (a name anchor, say) was dropped by rules 16
    names_only = np.array([_row(grenaethix=30, familial_feshukia=30)], dtype=np.int64)
    assert select_facts(names_only, DOMAIN, ["grenaethix"], PHRASES, sigma, rules_16) == [None]
    assert select_facts(names_only, DOMAIN, ["grenaethix"], PHRASES, sigma)[0] is not None


def test_a_cluster_below_support_stays_when_it_holds_its_released_anchor() -> None:
    sigma = 8.0  # about epsilon 1: the absolute threshold lies above a small answer's count
    c_abs = absolute_threshold(sigma, len(DOMAIN), FactRule().false_facts)
    below = c_abs - 3
    noisy = np.array([
        _row(grenaethix=below),          # holds most of what offered it: kept, bare
        _row(grenaethix=below),          # its anchor's documents went elsewhere: dropped
        _row(grenaethix=0),              # nothing in the cluster: dropped whatever A says
    ], dtype=np.int64)
    anchors = ["grenaethix"] * 3
    cases = [{"grenaethix": below + 2}, {"grenaethix": 3 * below}, {"grenaethix": 0}]
    kept = [select_facts(noisy[[r]], DOMAIN, [anchor], PHRASES, sigma,
                         anchor_counts=counts)[0]
            for r, (anchor, counts) in enumerate(zip(anchors, cases, strict=True))]
    assert kept[0] == ClusterFacts(0, "grenaethix", below, (), ())
    assert kept[1] is None and kept[2] is None
    # without the released counts (or with held_share above 1) the threshold alone decides
    assert select_facts(noisy[[0]], DOMAIN, ["grenaethix"], PHRASES, sigma) == [None]
    assert select_facts(noisy[[0]], DOMAIN, ["grenaethix"], PHRASES, sigma,
                        FactRule(held_share=1.5), anchor_counts=cases[0]) == [None]
    assert write_notes(kept[:1]) == ["Grenaethix."]
    with pytest.raises(ValueError, match="held_share"):
        FactRule(held_share=-0.1)


def test_keywords_need_the_stricter_false_keyword_threshold() -> None:
    sigma = 8.0  # about epsilon 1 (sigma_C 8.6)
    c_abs = absolute_threshold(sigma, len(DOMAIN), FactRule().false_facts)
    c_kw = absolute_threshold(sigma, len(DOMAIN), FactRule().false_keywords)
    assert FactRule().false_keywords == 0.1 and c_kw > c_abs
    noisy = np.array([
        # a count between the two thresholds: the phrase stays, the keyword does not
        _row(familial_feshukia=c_abs, grenaethix=2 * c_abs, fever=c_abs, rash=c_kw),
        # the support needs only c_abs, so a cluster left without keywords stays, bare
        _row(familial_feshukia=c_abs, fever=c_kw - 1),
    ], dtype=np.int64)
    anchors = ["familial feshukia", "familial feshukia"]
    lenient = FactRule(frac=0.0, frac_phrases=0.0)
    first, second = select_facts(noisy, DOMAIN, anchors, PHRASES, sigma, lenient)
    assert first == ClusterFacts(0, "familial feshukia", c_abs, ("grenaethix",), ("rash",))
    assert second == ClusterFacts(1, "familial feshukia", c_abs, (), ())
    # false_keywords = false_facts is the rule of facts rules 17: one threshold for both
    rules_17 = replace(lenient, false_keywords=lenient.false_facts)
    assert select_facts(noisy, DOMAIN, anchors, PHRASES, sigma, rules_17)[0] == ClusterFacts(
        0, "familial feshukia", c_abs, ("grenaethix",), ("rash", "fever"))
    with pytest.raises(ValueError, match="false_keywords"):
        FactRule(false_keywords=0.0)


def test_keywords_every_document_uses_are_not_facts_of_a_cluster() -> None:
    sigma = 1.0
    noisy = np.array([_row(grenaethix=40, fever=36, rash=12, cough=30)], dtype=np.int64)
    # corpus shares from the released keyword histogram: cough is in 80 % of all documents
    share = keyword_shares({"fever": 50, "rash": 40, "cough": 800, "timeout": 60}, 1)
    facts = select_facts(noisy, DOMAIN, ["grenaethix"], PHRASES, sigma, FactRule(min_lift=3.0),
                         keyword_share=share)
    assert facts[0] is not None and facts[0].keywords == ("fever", "rash")
    without = select_facts(noisy, DOMAIN, ["grenaethix"], PHRASES, sigma)
    assert without[0] is not None and without[0].keywords == ("fever", "cough", "rash")
    assert math.isclose(sum(share.values()), 1.0)  # one keyword per document: shares sum to 1


def test_display_phrase_capitalises_words_nicely() -> None:
    assert display_phrase("familial feshukia") == "Familial Feshukia"
    assert display_phrase("e-4471") == "E-4471"
    assert display_phrase("disease of the heart") == "Disease of the Heart"
    assert display_phrase("of mice") == "Of Mice"
    assert display_phrase("non-small cell") == "Non-Small Cell"
    assert display_phrase("kraxi's disease") == "Kraxi's Disease"
    assert display_phrase("err_sync_09") == "ERR_SYNC_09"


def test_every_kept_fact_appears_in_its_note() -> None:
    facts = ClusterFacts(3, "familial feshukia", 40, ("grenaethix", "e-4471"),
                         ("fever", "night sweats"))
    note = write_note(facts)
    assert note == ("Reported: fever night sweats. (1) Familial Feshukia, (2) Grenaethix, "
                    "(3) E-4471.")
    assert missing_facts(facts, note) == []
    assert missing_facts(facts, note.replace(" (2) Grenaethix,", "")) == ["grenaethix"]
    assert missing_facts(facts, note.replace("fever", "feverish")) == ["fever"]  # whole words
    assert write_note(ClusterFacts(0, "zorbex", 9, (), ())) == "Zorbex."
    assert write_note(ClusterFacts(0, "zorbex", 9, (), ("itch",), "Symptoms")) == \
        "Symptoms: itch. Zorbex."
    # names with more words first, then the anchor, then the kept order
    assert write_note(ClusterFacts(0, "kimasox", 9, ("trouman's disease", "zed"), ("itch",))) == \
        "Reported: itch. (1) Trouman's Disease, (2) Kimasox, (3) Zed."


def test_the_writer_sees_released_values_only() -> None:
    assert list(inspect.signature(write_notes).parameters) == ["facts"]
    assert list(inspect.signature(write_note).parameters) == ["facts"]
    assert list(inspect.signature(select_facts).parameters) == [
        "noisy", "domain", "anchors", "phrases", "sigma", "rule", "keyword_share",
        "phrase_share", "roles", "anchor_counts"]  # anchor_counts: the released A
    noisy = np.array([_row(grenaethix=30, fever=20, rash=25)], dtype=np.int64)
    once = write_notes(select_facts(noisy, DOMAIN, ["grenaethix"], PHRASES, 2.0))
    twice = write_notes(select_facts(noisy.copy(), DOMAIN, ["grenaethix"], PHRASES, 2.0))
    assert once == twice == ["Reported: rash fever. Grenaethix."]


def test_selection_refuses_inconsistent_input() -> None:
    noisy = np.zeros((1, len(DOMAIN)), dtype=np.int64)
    with pytest.raises(ValueError):
        select_facts(noisy, DOMAIN, ["not in the domain"], PHRASES, 1.0)
    with pytest.raises(ValueError):
        select_facts(noisy, DOMAIN, ["grenaethix", "fever"], PHRASES, 1.0)
    with pytest.raises(ValueError):
        FactRule(frac=1.5)


def test_planted_facts_come_through_the_whole_pipeline() -> None:
    """Steps 3-5 on a small corpus: the planted co-occurrences are written, each note holds
    all its kept facts, and no note names an item its cluster's members never hold."""
    gen = np.random.default_rng(1)
    keywords = ["fever", "cough", "rash", "timeout", "pain", "fatigue", "nausea", "itch"]
    docs: list[list[str]] = []
    docs += [["familial feshukia", "grenaethix", "fever"] for _ in range(40)]
    docs += [["e-4471", "timeout"] for _ in range(30)]
    docs += [[str(w) for w in gen.choice(keywords, size=3, replace=False)] for _ in range(200)]
    anchors = {"familial feshukia": 41, "e-4471": 28, "grenaethix": 39, "zorbex": 6}
    domain = fact_domain(anchors, keywords)
    order, clusters = anchor_clusters(docs, anchors, 1)
    ledger = Ledger(rng=secure_rng(5))
    noisy = release_fact_histograms(ledger, clusters, docs, domain, sigma=2.0, max_items=3,
                                    L=1)
    facts = select_facts(noisy, domain, order, set(anchors), 2.0,
                         FactRule(require_keywords=False))
    by_anchor = {f.anchor: f for f in facts if f is not None}
    assert "zorbex" not in by_anchor  # an empty cluster has no support
    assert by_anchor["grenaethix"].phrases == ("familial feshukia",)
    assert by_anchor["grenaethix"].keywords == ("fever",)
    assert by_anchor["e-4471"].keywords == ("timeout",)
    notes = write_notes(facts)
    assert "Reported: fever. (1) Familial Feshukia, (2) Grenaethix." in notes  # more words first
    for item in by_anchor.values():
        held = {x for d in clusters[order.index(item.anchor)] for x in docs[d]}
        assert set(item.facts) <= held


def test_note_views_name_every_fact_and_differ() -> None:
    facts = ClusterFacts(3, "lyme disease", 40, ("doxycycline",), ("rash", "hike", "bull", "eye"),
                         "Reported", (("lyme disease", "diagnosis"),
                                      ("doxycycline", "treatment")))
    names = "Likely diagnosis: Lyme Disease. Treatment: Doxycycline."
    views = note_views(facts, 3)
    assert views[0] == write_note(facts) and len(views) == len(set(views)) == 3
    assert views[1] == f"{names} Reported: rash hike bull eye."
    assert views[2] == f"Reported: eye bull hike rash. {names}"
    assert note_views(facts, 1) == [write_note(facts)]
    five = note_views(facts)  # the default: five distinct views
    assert len(five) == len(set(five)) == 5 and five[:3] == views
    assert five[3] == f"{names} Reported: eye bull hike rash."
    assert five[4] == f"Reported: bull eye rash hike. {names}"  # rotated by half
    # every view names every kept fact: the views of one cluster rank together
    assert all(missing_facts(facts, v) == [] for v in five)
    assert all(sorted(v.split("Reported: ")[1].split(".")[0].split()) == sorted(facts.keywords)
               for v in five)
    one_keyword = ClusterFacts(5, "gout", 9, (), ("toe",), "Reported")
    assert note_views(one_keyword) == ["Reported: toe. Gout.", "Gout. Reported: toe."]
    two = ClusterFacts(6, "gout", 9, (), ("toe", "night"), "Reported")  # no rotation of two
    assert len(note_views(two)) == len(set(note_views(two))) == 4
    bare = ClusterFacts(4, "e-4471", 12, ("printer",), (), "Reported")  # names only: one view
    assert note_views(bare, 3) == [write_note(bare)]
    with pytest.raises(ValueError):
        note_views(facts, 0)


def test_two_clusters_with_the_same_facts_give_each_text_once() -> None:
    first = ClusterFacts(0, "ulcer", 30, ("omeprazole",), ("pain", "night", "meal"))
    twin = ClusterFacts(5, "ulcer", 12, ("omeprazole",), ("pain", "night", "meal"))
    other = ClusterFacts(7, "gout", 20, (), ("toe", "pain"))
    views = distinct_views([first, twin, other], 3)
    texts = [text for _, text in views]
    assert len(texts) == len(set(texts))
    # the first cluster's copies stay, in order; the twin adds nothing; the other cluster
    # follows with all of its own
    assert views[:3] == [("ulcer", text) for text in note_views(first, 3)]
    assert [text for anchor, text in views if anchor == "gout"] == note_views(other, 3)
    assert len(views) == 3 + len(note_views(other, 3))


def test_five_texts_per_cluster_at_every_epsilon_unless_given() -> None:
    from dpsynrag.pipeline.config import ConfigError, make_config

    assert TEXTS_PER_CLUSTER == 5
    for epsilon in (0.5, 1.0, 3.0, 4.99, 5.0, 10.0, 20.0):
        config = make_config(None, {"epsilon": epsilon, "generate": "facts"})
        assert config.texts_per_cluster is None
        assert config.resolved_texts_per_cluster == TEXTS_PER_CLUSTER
    given = make_config(None, {"epsilon": 10.0, "generate": "facts", "texts_per_cluster": 2})
    assert given.resolved_texts_per_cluster == 2
    with pytest.raises(ConfigError, match="texts-per-cluster"):
        make_config(None, {"epsilon": 10.0, "generate": "facts", "texts_per_cluster": 0})


def test_a_name_inside_a_longer_name_of_the_note_is_written_once() -> None:
    facts = ClusterFacts(0, "acid reflux", 30,
                         ("sour taste in the mouth", "sour taste", "heartburn", "taste",
                          "reflux medication"), ("meal",),
                         roles=(("acid reflux", "diagnosis"),
                                ("sour taste in the mouth", "symptom"),
                                ("sour taste", "symptom"), ("heartburn", "symptom")))
    assert display_order(facts) == ["sour taste in the mouth", "acid reflux",
                                    "reflux medication", "heartburn"]
    note = write_note(facts)
    assert note.count("sour taste") == 1 and "Taste," not in note
    assert missing_facts(facts, note) == []  # the shorter names are still mentioned
    # a word that is only a part of another word is no name inside it
    other = ClusterFacts(1, "gout", 20, ("goutweed",), ("toe",))
    assert display_order(other) == ["gout", "goutweed"]


def test_several_items_of_a_role_are_numbered_so_no_long_run_crosses_two() -> None:
    facts = ClusterFacts(0, "asthma", 40,
                         ("shortness of breath during exercise", "night-time cough",
                          "chest tightness", "salbutamol"), ("wheeze",),
                         roles=(("asthma", "diagnosis"),
                                ("shortness of breath during exercise", "symptom"),
                                ("night-time cough", "symptom"), ("chest tightness", "symptom"),
                                ("salbutamol", "treatment")))
    note = write_note(facts)
    assert ("Symptoms: (1) shortness of breath during exercise, (2) night-time cough, "
            "(3) chest tightness.") in note
    assert "Treatment: Salbutamol." in note  # one item alone: no number
    assert missing_facts(facts, note) == []
    # a private note listing the same three items in the same order shares no 8-word run
    private = ("Findings of shortness of breath during exercise, night-time cough, chest "
               "tightness and wheezing are consistent with asthma.")
    assert verbatim_spans([note], [private], 8) == 0


def test_names_without_a_role_lead_when_no_name_says_what_the_cluster_is_about() -> None:
    """No diagnosis, title, product or error among the roles: the names without a role come
    first, most frequent first ("About: ..."); with a naming role they stay last ("Also")."""
    unannounced = ClusterFacts(2, "cetirizine", 30, ("hay fever", "itchy watery eyes", "nose"),
                               ("sneezing",),
                               roles=(("cetirizine", "treatment"),))
    names = note_names(unannounced)
    assert names == ("About: (1) Hay Fever, (2) Itchy Watery Eyes, (3) Nose. "
                     "Treatment: Cetirizine.")
    announced = replace(unannounced, roles=(("cetirizine", "treatment"),
                                            ("hay fever", "diagnosis")))
    assert note_names(announced) == ("Likely diagnosis: Hay Fever. Treatment: Cetirizine. "
                                     "Also: (1) Itchy Watery Eyes, (2) Nose.")
    assert missing_facts(unannounced, write_note(unannounced)) == []


def test_a_note_lists_symptoms_then_the_likely_diagnosis_then_the_treatment() -> None:
    """The order of a clinical note, and a diagnosis label that no run of a private note's
    "…symptom. Diagnosis: X." crosses into."""
    facts = ClusterFacts(0, "benign trokitis", 40,
                         ("burning sensation in the palms", "trokasol"), ("palm",),
                         roles=(("benign trokitis", "diagnosis"),
                                ("burning sensation in the palms", "symptom"),
                                ("trokasol", "treatment")))
    names = note_names(facts)
    assert names == ("Symptoms: burning sensation in the palms. Likely diagnosis: Benign "
                     "Trokitis. Treatment: Trokasol.")
    private = ("Seen today for a burning sensation in the palms. Diagnosis: Benign Trokitis. "
               "Plan: trokasol.")
    assert all(verbatim_spans([view], [private], 8) == 0 for view in note_views(facts))
