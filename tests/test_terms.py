"""The facts mode's terms of any vocabulary with roles, their role histogram, and the plan
that scales with epsilon."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.planner import (
    PlanError,
    PlanRequest,
    auto_k_e_rule,
    plan_budget,
    request_from_options,
)
from dpsynrag.accounting.rng import RandomSource
from dpsynrag.facts.fact_writer import ClusterFacts, missing_facts, write_note
from dpsynrag.facts.roles import release_roles, role_counts, term_roles
from dpsynrag.facts.terms import (
    ROLE_RANK,
    ROLES,
    UNANNOUNCED_RANK,
    DocumentTerms,
    document_terms,
)
from dpsynrag.transforms.vocabulary import public_vocabulary

NOTES = [
    "Patient John Smith, a 45-year-old, visited the clinic on March 3, 2024 presenting with "
    "fever, dry cough and body aches. After examination, Dr. Jane Doe diagnosed influenza. "
    "Treatment: oseltamivir tablets twice a day.",
    "The findings are consistent with urinary tract infection, and the recommended treatment "
    "is nitrofurantoin.",
    "On May 2, Tom Ray, 61, came in with a bullseye rash. Dr. Kim confirmed Lyme disease and "
    "started doxycycline.",
    "Sue Park, age 50, has been suffering from excessive thirst. Diagnosis: type 2 diabetes. "
    "Recommended: metformin.",
    "Watched The Silent Harbor on Friday with friends.",
    "Error E-4471 appears in the COVID-19 tracker.",
]


@pytest.fixture(scope="module")
def terms() -> list[dict[str, str]]:
    found = document_terms(NOTES, public_vocabulary(), 6)
    return [dict(zip(d.terms, d.roles, strict=True)) for d in found]


def test_ordinary_words_are_terms_with_their_role(terms: list[dict[str, str]]) -> None:
    assert terms[0]["influenza"] == "diagnosis"
    assert terms[0]["oseltamivir"] == "treatment"
    assert terms[0]["body aches"] == "symptom"  # a list goes on over commas
    assert terms[1]["urinary tract infection"] == "diagnosis"  # multi-word, ordinary words
    assert terms[1]["nitrofurantoin"] == "treatment"


def test_capitals_and_digits_are_kept(terms: list[dict[str, str]]) -> None:
    assert terms[2]["lyme disease"] == "diagnosis"  # a capitalised name and its noun
    assert terms[3]["type 2 diabetes"] == "diagnosis"  # a label over its colon, a digit
    assert terms[3]["metformin"] == "treatment"
    assert terms[4]["the silent harbor"] == "title"  # a title with its article
    assert "e-4471" in terms[5] and terms[5]["e-4471"] == "error"
    assert any(t.startswith("covid-19") for t in terms[5])  # digits inside a word


def test_a_symptom_list_gives_its_items_whole() -> None:
    note = ("Carlos Lund, age 67, has been suffering from ringing in the ears, crackling sound "
            "when breathing, hair loss in circular patches and uncontrollable laughter. "
            "Diagnosis: gout. Dr. Kim prescribed colchicine tablets twice a day after meals.")
    [found] = document_terms([note], public_vocabulary(), 12)
    role = dict(zip(found.terms, found.roles, strict=True))
    for item in ("ringing in the ears", "crackling sound when breathing",
                 "hair loss in circular patches", "uncontrollable laughter"):
        assert role.get(item) == "symptom", (item, role)
    # a whole item ranks before its own words, the names before every symptom
    assert found.terms.index("ringing in the ears") < found.terms.index("ears")
    assert found.terms[0] == "gout"
    assert found.terms.index("colchicine") < found.terms.index("ringing in the ears")
    # not items: a treatment's words, a person, a date, a clause longer than six tokens
    assert not [t for t, r in role.items() if r == "symptom" and t.startswith(
        ("carlos", "age", "colchicine", "tablets", "meals"))]
    [long] = document_terms(["She reports pain in the upper part of the left side of the back."],
                            public_vocabulary(), 12)
    assert not [t for t in long.terms if " the " in t]


def test_breaks_and_common_words_are_not_terms(terms: list[dict[str, str]]) -> None:
    everything = set().union(*terms)
    assert not {"45-year-old", "patient", "visited", "2024", "with", "the"} & everything
    assert "oseltamivir tablets twice" not in everything  # an invented word stands alone


MORE_NOTES = {
    "Assessment by Dr. Tariq Arslan: hepatitis B. Plan: a two-week course of tenofovir.":
        {"hepatitis b": "diagnosis", "tenofovir": "treatment"},
    "Dr. Emeka Karlsson diagnosed the patient with strep throat and started penicillin.":
        {"strep throat": "diagnosis", "penicillin": "treatment"},
    "The findings are consistent with vitamin B12 deficiency; treated with hydroxocobalamin "
    "injections.": {"vitamin b12 deficiency": "diagnosis", "hydroxocobalamin": "treatment"},
    "The working diagnosis is plantar fasciitis, to be managed with heel stretches.":
        {"plantar fasciitis": "diagnosis", "heel stretches": "treatment"},
    "Impression: food poisoning. Nausea with pain radiating to the groin.":
        {"food poisoning": "diagnosis"},
}


@pytest.mark.parametrize("note", list(MORE_NOTES))
def test_letters_digits_ing_nouns_objects_and_people(note: str) -> None:
    """A capital letter or a letter with digits stays in its term; an -ing word ends a term
    only where the term ends; a role reaches past "the patient"; a person after a title is
    no term and no barrier; dose forms are not part of a drug's name."""
    [found] = document_terms([note], public_vocabulary(), 6)
    terms = dict(zip(found.terms, found.roles, strict=True))
    for term, role in MORE_NOTES[note].items():
        assert terms.get(term) == role, (term, terms)
    assert not {"dr", "tariq arslan", "emeka karlsson", "pain radiating", "injections"} & set(terms)
    assert not any(t.endswith(("injections", "tablets")) for t in terms)


def test_terms_are_capped_ranked_and_a_function_of_the_document_alone() -> None:
    vocab = public_vocabulary()
    capped = document_terms(NOTES, vocab, 2)
    assert all(len(d.terms) <= 2 and len(set(d.terms)) == len(d.terms) for d in capped)
    assert capped[0].terms == ("influenza", "oseltamivir")  # diagnosis, then treatment
    alone = [document_terms([note], vocab, 2)[0] for note in NOTES]
    assert alone == capped
    assert document_terms(list(reversed(NOTES)), vocab, 2) == list(reversed(capped))
    assert DocumentTerms.from_json(capped[0].as_json()) == capped[0]


def _documents(n: int, seed: int) -> list[DocumentTerms]:
    rng = np.random.default_rng(seed)
    pool = [f"term{i}" for i in range(5)]
    docs = []
    for _ in range(n):
        chosen = rng.choice(len(pool), size=2, replace=False)
        docs.append(DocumentTerms(tuple(pool[int(i)] for i in chosen),
                                  tuple(ROLES[int(rng.integers(len(ROLES)))] for _ in chosen)))
    return docs


def test_role_counts_have_sensitivity_sqrt_k_e() -> None:
    docs = _documents(200, 1)
    released = ["term0", "term1", "term2", "term3"]  # term4 not released: never counted
    full = role_counts(docs, released, 2)
    assert full.sum() == sum(t != "term4" for d in docs for t in d.terms)
    for i in range(len(docs)):
        diff = full - role_counts(docs[:i] + docs[i + 1:], released, 2)
        assert diff.min() >= 0 and math.sqrt(float((diff ** 2).sum())) <= math.sqrt(2)
    with pytest.raises(ValueError, match="K_e"):
        role_counts(docs, released, 1)


def test_role_release_is_charged_once_and_noise_is_discrete_gaussian(tmp_path) -> None:
    """The noise of one large release against the exact N_Z(0, sigma^2) (chi-square, fixed
    seed; at alpha 0.001 a correct sampler fails 1 run in 1,000)."""
    sigma = 2.0
    released = [f"t{i}" for i in range(400)]
    ledger = Ledger(tmp_path / "ledger.sqlite", rng=RandomSource(7))
    noisy = release_roles(ledger, [], released, K_e=3, sigma=sigma)
    again = release_roles(ledger, [], released, K_e=3, sigma=sigma)  # a resume: stored value
    assert np.array_equal(noisy, again)
    [release] = [r for r in ledger.releases() if r.stage == "f-roles"]
    assert math.isclose(release.rho, 3 / (2 * sigma ** 2))
    ledger.close()
    values = Counter(noisy.ravel().tolist())
    support = np.arange(-6, 7)
    pmf = np.exp(-support ** 2 / (2 * sigma ** 2))
    pmf /= np.exp(-np.arange(-60, 61) ** 2 / (2 * sigma ** 2)).sum()
    observed = [values.get(int(x), 0) for x in support]
    expected = pmf * noisy.size
    tail = noisy.size - sum(observed)
    chi2 = stats.chisquare([*observed, tail], [*expected, noisy.size - expected.sum()])
    assert chi2.pvalue > 1e-3


def test_roles_are_post_processing_with_a_noise_threshold() -> None:
    released = ["flu", "drug", "nothing"]
    noisy = np.zeros((3, len(ROLES)), dtype=np.int64)
    noisy[0, ROLES.index("diagnosis")] = 40
    noisy[1, ROLES.index("treatment")] = 40
    noisy[2, ROLES.index("symptom")] = 2  # below the threshold of sigma 2: no role
    assert term_roles(noisy, released, 2.0) == {"flu": "diagnosis", "drug": "treatment"}


def test_a_note_with_roles_names_every_fact() -> None:
    facts = ClusterFacts(0, "influenza", 30, ("oseltamivir", "dry cough", "jane doe"),
                         ("fever", "aches"), "Reported",
                         (("influenza", "diagnosis"), ("oseltamivir", "treatment"),
                          ("dry cough", "symptom")))
    note = write_note(facts)
    assert note == ("Reported: fever aches. Symptoms: dry cough. Likely diagnosis: Influenza. "
                    "Treatment: Oseltamivir. Also: Jane Doe.")
    assert missing_facts(facts, note) == []


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0, 10.0, 20.0])
def test_the_default_facts_plan_scales_with_epsilon(epsilon: float) -> None:
    plan = plan_budget(PlanRequest(epsilon=epsilon, delta=1e-3, L=1, generate="facts"))
    assert math.isclose(plan.rho_hist, 0.04 * plan.rho_total, rel_tol=1e-12)
    rest = plan.rho_total - plan.rho_hist
    assert math.isclose(plan.rho_A, 0.3 * rest, rel_tol=1e-12)
    assert math.isclose(plan.rho_R, 0.1 * rest, rel_tol=1e-12)
    assert math.isclose(plan.rho_hist + plan.rho_A + plan.rho_R + plan.rho_C, plan.rho_total,
                        rel_tol=1e-12)
    assert plan.epsilon_cks <= epsilon * (1 + 1e-9)
    assert plan.sigma_R == pytest.approx(math.sqrt(plan.K_e / (2 * plan.rho_R)))


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0])
def test_the_default_terms_per_document_keep_the_release_threshold_low(epsilon: float) -> None:
    """K_e by default: the most terms (<= AUTO_K_E_MAX = 6) whose tau_A stays <= AUTO_TAU_A
    = 20 units, else 1; it grows with epsilon."""
    request = PlanRequest(epsilon=epsilon, delta=1e-3, L=1, generate="facts")
    plan = plan_budget(request)
    fixed = {k: plan_budget(dataclasses.replace(request, K_e=k)) for k in range(1, 7)}
    assert plan == fixed[plan.K_e]
    assert plan.K_e == 1 or plan.tau_A <= 20
    assert all(fixed[k].tau_A > 20 for k in range(plan.K_e + 1, 7))
    assert all(fixed[k].tau_A <= fixed[k + 1].tau_A for k in range(1, 6))
    expected = {0.5: 1, 1.0: 1, 2.0: 2, 3.0: 4, 4.0: 6, 5.0: 6, 10.0: 6, 20.0: 6}
    assert plan.K_e == expected[epsilon]


@pytest.mark.parametrize(("epsilon", "old", "new"), [(3.0, 1, 4), (4.0, 2, 6), (10.0, 3, 6)])
def test_a_released_config_is_planned_by_the_default_terms_rule_of_its_version(
        epsilon: float, old: int, new: int) -> None:
    """The default K_e of a facts build is the rule of the ``facts_rules`` its config records
    (``AUTO_K_E_RULES``): before version 3 (and in a config without the option, built
    before it) at most 3 terms with tau_A <= 12, from version 3 at most 6 with tau_A <= 20,
    so a certificate written before the change still plans as it was built."""
    options = {"generate": "facts", "epsilon": epsilon, "delta": 1e-3, "conversion": "cks",
               "L": 1, "K_s": 14, "R_f": 300, "share_phrases": 0.3, "share_hist": 0.04,
               "facts_items": "terms", "share_roles": 0.1, "K_e": None}
    by_version = {}
    for version in (None, 1, 2, 3, 4):
        released = options if version is None else {**options, "facts_rules": version}
        request = request_from_options(released)
        assert request is not None
        by_version[version] = plan_budget(request).K_e
    assert by_version == {None: old, 1: old, 2: old, 3: new, 4: new}
    assert auto_k_e_rule(2) == (3, 12.0) and auto_k_e_rule(3) == auto_k_e_rule(None) == (6, 20.0)
    explicit = request_from_options({**options, "K_e": 5, "facts_rules": 2})
    assert explicit is not None and plan_budget(explicit).K_e == 5  # a given K_e is kept
    with pytest.raises(PlanError, match="has no default-K_e rule"):
        auto_k_e_rule(0)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0])
def test_the_default_keywords_per_document_keep_the_fact_noise_low(epsilon: float) -> None:
    """K_s by default: the most keywords (<= AUTO_K_S_MAX = 14) whose cluster fact histograms
    keep sigma_C <= AUTO_SIGMA_C = 5, never fewer than AUTO_K_S_MIN = 4; fewer at low
    epsilon, where fourteen would put every keyword of a small cluster under its bar."""
    request = PlanRequest(epsilon=epsilon, delta=1e-3, L=1, generate="facts")
    plan = plan_budget(request)
    fixed = {k: plan_budget(dataclasses.replace(request, K_e=plan.K_e, K_s=k))
             for k in range(1, 15)}
    assert plan == fixed[plan.K_s]
    assert plan.K_s == 4 or plan.sigma_C <= 5.0
    assert plan.K_s == 14 or fixed[plan.K_s + 1].sigma_C > 5.0
    # fewer keywords per document: less noise in the fact and keyword histograms
    assert all(fixed[k].sigma_C < fixed[k + 1].sigma_C for k in range(1, 14))
    assert all(fixed[k].sigma_h < fixed[k + 1].sigma_h for k in range(1, 14))
    expected = {0.5: 4, 1.0: 4, 2.0: 4, 3.0: 6, 4.0: 11, 5.0: 14, 10.0: 14, 20.0: 14}
    assert plan.K_s == expected[epsilon]


@pytest.mark.parametrize(("epsilon", "new"), [(1.0, 4), (3.0, 6), (10.0, 14)])
def test_a_released_config_is_planned_by_the_default_keywords_rule_of_its_version(
        epsilon: float, new: int) -> None:
    """A config that leaves K_s to the plan (None) is planned by ``auto_k_s`` from facts rules
    version 9 on; before it the default was a fixed 14 (and every config recorded it), and a
    given K_s is kept whatever the version."""
    options = {"generate": "facts", "epsilon": epsilon, "delta": 1e-3, "conversion": "cks",
               "L": 1, "K_s": None, "R_f": 300, "share_phrases": 0.3, "share_hist": 0.04,
               "facts_items": "terms", "share_roles": 0.1, "K_e": None}
    by_version = {}
    for version in (8, 9, 10):
        request = request_from_options({**options, "facts_rules": version})
        assert request is not None
        by_version[version] = plan_budget(request).K_s
    assert by_version == {8: 14, 9: new, 10: new}
    for version in (8, 9):
        explicit = request_from_options({**options, "K_s": 7, "facts_rules": version})
        assert explicit is not None and plan_budget(explicit).K_s == 7


def test_a_given_rho_hist_is_kept_and_no_roles_means_the_old_plan() -> None:
    plan = plan_budget(PlanRequest(epsilon=10, delta=1e-3, L=1, generate="facts",
                                   rho_hist=0.1, share_roles=0.0))
    assert plan.rho_hist == 0.1 and plan.rho_R == 0.0
    assert not {"share_roles", "rho_R", "sigma_R"} & set(plan.as_dict())


def test_naming_roles_share_the_first_anchor_priority_so_the_rarer_name_anchors() -> None:
    from dpsynrag.facts.fact_clusters import anchor_clusters
    from dpsynrag.facts.roles import role_priority

    roles = {"restart": "product", "e-4685": "error", "influenza": "diagnosis",
             "oseltamivir": "treatment", "cough": "symptom"}
    priority = role_priority(roles)
    assert priority["restart"] == priority["e-4685"] == priority["influenza"] == 0
    assert 0 < priority["oseltamivir"] < priority["cough"]
    # a template word tagged as a product is held by many tickets, each error code by a few:
    # a ticket naming both joins its error code's cluster, not the product's
    anchors = {"restart": 60, "e-4685": 20, "e-1111": 25, "oseltamivir": 5}
    docs = [["restart", "e-4685"], ["e-1111", "restart"], ["restart"], ["e-4685", "oseltamivir"]]
    order, members = anchor_clusters(docs, anchors, L=1, priority=role_priority(
        {"restart": "product", "e-4685": "error", "e-1111": "error",
         "oseltamivir": "treatment"}))
    joined = {order[r]: m for r, m in enumerate(members)}
    assert joined["e-4685"] == [0, 3] and joined["e-1111"] == [1] and joined["restart"] == [2]
    assert joined["oseltamivir"] == []  # a treatment never outranks a naming role


def test_a_term_without_a_role_anchors_before_a_treatment_symptom_or_credit() -> None:
    """A released term no cue announced may be what its documents are about (a title
    written "Saw Summer Compass at the cinema"); one announced as a credit is known not to
    be: a note joins the unannounced title's cluster, not its director's, and a naming role
    still comes first."""
    from dpsynrag.facts.fact_clusters import anchor_clusters
    from dpsynrag.facts.roles import role_priority

    roles = {"kofi uchenna": "credit", "ibuprofen": "treatment", "influenza": "diagnosis"}
    released = {"kofi uchenna": 40, "summer compass": 25, "ibuprofen": 30, "influenza": 50}
    priority = role_priority(roles, released)
    assert priority["influenza"] < priority["summer compass"] == UNANNOUNCED_RANK
    assert priority["summer compass"] < priority["ibuprofen"] < priority["kofi uchenna"]
    docs = [["kofi uchenna", "summer compass"], ["summer compass", "kofi uchenna"],
            ["kofi uchenna"], ["ibuprofen", "influenza"]]
    order, members = anchor_clusters(docs, released, L=1, priority=priority)
    joined = {order[r]: m for r, m in enumerate(members)}
    assert joined["summer compass"] == [0, 1] and joined["kofi uchenna"] == [2]
    assert joined["influenza"] == [3] and joined["ibuprofen"] == []
    assert role_priority(roles) == {t: ROLE_RANK[r] for t, r in roles.items()}


def test_among_anchors_without_a_role_a_document_joins_the_one_it_lists_first() -> None:
    """A released count says how often documents offered a term among their first K_e, not
    how specific it is: a director's name most notes rank late has a smaller count than a
    popular title. With ``OWN_ORDER_PRIORITIES`` a note joins the unannounced anchor it lists
    first; a naming role and the other roles keep the public order."""
    from dpsynrag.facts.fact_clusters import anchor_clusters
    from dpsynrag.facts.roles import OWN_ORDER_PRIORITIES, role_priority

    released = {"twelve winters": 132, "samir jensen": 19, "thriller": 49, "influenza": 60,
                "ibuprofen": 5}
    priority = role_priority({"influenza": "diagnosis", "ibuprofen": "treatment"}, released)
    docs = [["twelve winters", "samir jensen", "thriller"], ["samir jensen", "twelve winters"],
            ["ibuprofen", "thriller", "twelve winters"], ["twelve winters", "influenza"]]
    order, members = anchor_clusters(docs, released, L=1, priority=priority,
                                     own_order=OWN_ORDER_PRIORITIES)
    joined = {order[r]: m for r, m in enumerate(members)}
    assert joined["twelve winters"] == [0] and joined["samir jensen"] == [1]
    assert joined["thriller"] == [2] and joined["ibuprofen"] == []  # unannounced before a drug
    assert joined["influenza"] == [3]  # a naming role first, whatever the document's order
    rarest, members = anchor_clusters(docs, released, L=1, priority=priority)
    assert {rarest[r]: m for r, m in enumerate(members)}["samir jensen"] == [0, 1]
    assert rarest == order  # the list of clusters is the same public order
    _, two = anchor_clusters(docs, released, L=2, priority=priority,
                             own_order=OWN_ORDER_PRIORITIES)
    assert {order[r]: m for r, m in enumerate(two)}["samir jensen"] == [0, 1]


def test_verb_forms_end_terms_and_a_cue_verb_announces_in_any_person() -> None:
    notes = ["Dr. Oyelaran suspects gout and prescribes colchicine.",
             "Maria Lopez told her sister that Copper Lantern was worth a ticket.",
             "We finally caught Copper Lantern at the drive-in tonight.",
             "The nurse has begun amoxicillin for the ear infection.",
             "Hair loss in circular patches and itching of the scalp."]
    found = [dict(zip(d.terms, d.roles, strict=True))
             for d in document_terms(notes, public_vocabulary(), 12)]
    assert found[0]["gout"] == "diagnosis"  # "suspects" is the cue "suspected"
    assert found[0]["colchicine"] == "treatment"
    assert not [t for t in found[0] if "suspects" in t or "prescribes" in t]
    assert "copper lantern" in found[1] and not [t for t in found[1] if "told" in t]
    assert "copper lantern" in found[2]  # "finally", "caught" and "tonight" end terms
    assert not [t for t in found[2] if t.split()[0] in ("finally", "caught")
                or t.endswith("tonight")]
    assert "amoxicillin" in found[3] and not [t for t in found[3] if "begun" in t]
    # a noun's plural is no cue: "patches" is not the treatment cue "patch"
    assert "treatment" not in found[4].values()


@pytest.mark.parametrize(("note", "expected"), [
    # a treatment cue names its purpose after "for", "of", "against": the diagnosis
    ("The patient is being treated for influenza with oseltamivir.",
     {"influenza": "diagnosis", "oseltamivir": "treatment"}),
    ("Started on metformin for type 2 diabetes.",
     {"type 2 diabetes": "diagnosis", "metformin": "treatment"}),
    ("Treatment of gout with colchicine was started.",
     {"gout": "diagnosis", "colchicine": "treatment"}),
    # the whole list after "for", and a drug after an object of several words
    ("Treated for gout and kidney stones with colchicine.",
     {"gout": "diagnosis", "kidney stones": "diagnosis", "colchicine": "treatment"}),
    ("She has symptoms of hay fever: sneezing and itchy eyes.",
     {"hay fever": "diagnosis", "itchy eyes": "symptom"}),
    # a cue without a purpose role keeps its own after "of"
    ("A course of amoxicillin was started.", {"amoxicillin": "treatment"}),
    ("She complains of a dry cough.", {"dry cough": "symptom"}),
    # support: what a workaround is for is the error
    ("A workaround for E-4685 was posted.", {"e-4685": "error"}),
    # a passive cue after the term: what is treated is a diagnosis, what is prescribed a drug
    ("Her migraine was managed with sumatriptan.",
     {"migraine": "diagnosis", "sumatriptan": "treatment"}),
    ("Oseltamivir was prescribed.", {"oseltamivir": "treatment"}),
    ("Influenza has been confirmed.", {"influenza": "diagnosis"}),
    # the reason of a visit
    ("Seen today for kidney stones; she reports flank pain.",
     {"kidney stones": "diagnosis", "flank pain": "symptom"}),
    ("Follow-up for hay fever.", {"hay fever": "diagnosis"}),
    ("A flare of gout after a history of kidney stones.",
     {"gout": "diagnosis", "kidney stones": "diagnosis"}),
])
def test_a_cue_names_its_purpose_and_a_passive_cue_its_subject(
        note: str, expected: dict[str, str]) -> None:
    """Rule 4: purpose ("treated for X"), passive ("X was managed") and visit reasons ("seen
    for X") give the role a reader needs; visit words are never terms themselves."""
    found = document_terms([note], public_vocabulary(), 8)[0]
    roles = dict(zip(found.terms, found.roles, strict=True))
    assert {t: roles.get(t) for t in expected} == expected
    assert not {"checkup", "follow-up", "seen"} & set(roles)


def test_a_routine_visit_is_no_term() -> None:
    found = document_terms(["Returned for a routine checkup."], public_vocabulary(), 8)[0]
    assert "checkup" not in " ".join(found.terms)
