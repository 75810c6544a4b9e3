"""A certificate in plain language (``dpsynrag verify --explain``), for whoever signs off a
corpus: who is protected, by which (epsilon, delta), what was released, from which models,
when, and by which key. It reads the certificate only (public values); it never judges its
validity: ``verify`` does, and the caller says what it found.

Only the plan's epsilon is stated as a guarantee (``guarantee.basis == "plan"``; a format 1
certificate's epsilon where verify found it the plan's). The realised cost
(``epsilon_realised``, the releases that ran) is named beside it as not a guarantee: fewer
clusters than L can be released, and the same build could have released them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from dpsynrag.display import format_epsilon

# What each mechanism of the ledger is, in a few words (mechanism name -> description).
MECHANISM_WORDS = {
    "discrete_gaussian": "counts with exact discrete Gaussian noise",
    "gaussian": "a sum with Gaussian noise",
    "exponential_threshold": "a similarity threshold chosen by the exponential mechanism",
    "token_softmax": "tokens sampled from clipped, aggregated next-token scores",
    "partition_selection": "phrases released only when their noisy count passes a threshold",
    "laplace": "values with Laplace noise",
}

STAGE_WORDS = {
    "a-histogram": "keyword histogram",
    "c-noisy-sum": "cluster centres",
    "c-threshold": "retrieval thresholds",
    "d-prediction": "synthetic text, token by token",
    "f-phrases": "terms or open-vocabulary phrases (names, codes)",
    "f-roles": "the role of each released term (diagnosis, treatment, ...)",
    "f-facts": "each cluster's fact counts",
    "f-writer": "each cluster's note rewritten token by token (public-difference sampler)",
}


def _releases(certificate: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(stage, mechanism, count) for every kind of release, in certificate order."""
    seen: dict[tuple[str, str], int] = {}
    mechanisms = certificate.get("mechanisms") or {}
    for item in mechanisms.get("sequential") or []:
        key = (str(item.get("stage", "?")), str(item.get("mechanism", "?")))
        seen[key] = seen.get(key, 0) + 1
    for group in mechanisms.get("parallel_groups") or []:
        for part in group.get("partitions") or []:
            for item in part.get("releases") or []:
                key = (str(item.get("stage", "?")), str(item.get("mechanism", "?")))
                seen[key] = seen.get(key, 0) + int(item.get("count", 1))
    return [(stage, mechanism, count) for (stage, mechanism), count in seen.items()]


def _unit_sentence(config: Mapping[str, Any]) -> str:
    column = config.get("unit_column")
    if column:
        rule = config.get("unit_bound", "pick")
        how = ("one of its records is kept" if rule == "pick"
               else "its records are joined into one document")
        return (f"one privacy unit: all the input records that share a value of the column "
                f"{column!r} (a person, say); {how} before anything is computed")
    return ("one input record (no unit column was given: a person with several records is "
            "protected only record by record)")


def _guarantee_sentence(epsilon: float, delta: float) -> str:
    """Approximate DP as its definition reads: for neighbouring inputs D, D' (one unit's
    records in one, not in the other) and every set S of outputs,
    P[M(D) in S] <= e^epsilon * P[M(D') in S] + delta. delta is an additive term of that
    bound for every S, not a probability with which the bound does not hold (that reading
    is a different, stronger notion). The factor is computed from the displayed epsilon,
    which ``format_epsilon`` rounds up, so it never understates the loss."""
    shown = format_epsilon(epsilon)
    factor = (f"= {math.exp(float(shown)):.3g}" if float(shown) < 700 else "(over 1e+300)")
    return (f"Guarantee: ({shown}, {delta:g})-differential privacy: for any two inputs D "
            f"and D' that differ in one privacy unit (its records in one and not in the "
            f"other) and every set S of possible outputs, "
            f"P[M(D) in S] <= e^{shown} x P[M(D') in S] + {delta:g}, where M(D) is what the "
            f"build releases from input D. So no outcome of the build, nor anything later "
            f"computed from the corpus alone, is more than e^{shown} {factor} times as likely "
            f"with a unit's records as without them, or the other way round, beyond an "
            f"additive {delta:g}.")


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _states_the_plan(certificate: Mapping[str, Any], verified: bool) -> bool:
    """Whether the certificate's epsilon is the plan's (the only one stated as a guarantee):
    format 2 says so (``basis: "plan"``); a format 1 certificate's epsilon is the cost of the
    releases that ran, the plan's only where verify found them equal (``verified``)."""
    guarantee = certificate.get("guarantee") or {}
    if certificate.get("format_version") == 1 and "basis" not in guarantee:
        return verified
    return guarantee.get("basis") == "plan"


def _no_guarantee_sentence(certificate: Mapping[str, Any], epsilon: float) -> str:
    guarantee = certificate.get("guarantee") or {}
    basis = guarantee.get("basis")
    shown = format_epsilon(epsilon)
    if basis == "exceeds-plan":
        why = ("the releases cost more than the build's plan (wrong code); the epsilon "
               f"{shown} recorded is the larger of the two, not a guarantee")
    elif basis == "releases":
        why = (f"no plan is recorded, so its epsilon {shown} is only the cost of the releases "
               "that ran; the same build could have released more")
    else:
        why = (f"its epsilon {shown} is the cost of the releases that ran (a format 1 "
               "certificate), not found equal to the plan's")
    return f"Guarantee: NONE STATED: {why}."


def _realised_sentence(guarantee: Mapping[str, Any]) -> str | None:
    """The realised cost beside the plan's guarantee, named as not a guarantee."""
    realised, rho = guarantee.get("epsilon_realised"), guarantee.get("rho_realised")
    if guarantee.get("basis") != "plan" or not _number(realised) or not _number(rho):
        return None
    reserved = guarantee.get("reserved") or {}
    parts = reserved.get("partitions_reserved")
    overlap = reserved.get("max_overlap")
    gap = (f"; {parts} of the L = {overlap} clusters a document can join were not released "
           "and are reserved at their planned cost" if _number(parts) and parts else "")
    return (f"Realised cost (not a guarantee): the releases that ran compose to rho = "
            f"{rho:.4g}, epsilon_realised {format_epsilon(realised)} at the same delta. The "
            f"guarantee above is the plan's epsilon {format_epsilon(guarantee['epsilon'])}: "
            f"the same build could have released every planned cluster{gap}; quote epsilon, "
            "never epsilon_realised.")


def explain_certificate(certificate: Mapping[str, Any], *, verified: bool,
                        trust: str) -> str:
    """The plain-language summary of ``certificate``. ``verified`` and ``trust`` are what
    ``verify`` found (a trusted public key, or only the key embedded in the certificate)."""
    guarantee = certificate.get("guarantee") or {}
    config = certificate.get("config") or {}
    models = certificate.get("models") or {}
    signature = certificate.get("signature") or {}
    epsilon = guarantee.get("epsilon")
    delta = guarantee.get("delta")
    lines = []
    state = (f"VERIFIED ({trust})" if verified
             else "NOT VERIFIED: do not rely on anything below")
    lines.append(f"Certificate check: {state}.")
    if certificate.get("seeded") is not False:
        lines.append("SEEDED BUILD: its noise came from a reproducible seed; it has NO privacy "
                     "guarantee and must not be released.")
    lines.append(f"Who is protected: {_unit_sentence(config)}.")
    of_plan = _states_the_plan(certificate, verified)
    if _number(epsilon) and _number(delta):
        if of_plan:
            lines.append(_guarantee_sentence(float(epsilon), float(delta)))
            if certificate.get("format_version") == 1:
                lines.append("(A format 1 certificate: its epsilon is the cost of the releases "
                             "that ran, which verify found equal to the plan's.)")
        else:
            lines.append(_no_guarantee_sentence(certificate, float(epsilon)))
    realised = _realised_sentence(guarantee) if of_plan else None
    if realised:
        lines.append(realised)
    rho = guarantee.get("rho")
    if isinstance(rho, int | float):
        approx = guarantee.get("delta_approx") or 0.0
        part = (f" plus an approximate delta of {approx:.3g} for releasing phrases"
                if approx else "")
        others = ", ".join(f"{name} gives {format_epsilon(value)}" for name, value in
                           (guarantee.get("epsilon_other_conversions") or {}).items())
        cross = (guarantee.get("cross_check") or {}).get("epsilon")
        what = ("the plan's releases (every planned cluster, released or reserved) compose"
                if guarantee.get("basis") == "plan" else "the releases compose")
        lines.append(
            f"How it is derived: {what} to rho = {rho:.4g} zCDP{part}, converted "
            f"with {guarantee.get('conversion')} ({guarantee.get('conversion_reference')})"
            + (f"; {others}" if others else "")
            + (f"; an independent accountant (dp-accounting) gives "
               f"{format_epsilon(cross)}" if isinstance(cross, int | float) else "") + ".")
    released = [f"{STAGE_WORDS.get(stage, stage)}: {MECHANISM_WORDS.get(mechanism, mechanism)}"
                f"{f' (x{count})' if count > 1 else ''}"
                for stage, mechanism, count in _releases(certificate)]
    if released:
        lines.append("What was released (each charged to the ledger): " + "; ".join(released)
                     + ". The corpus files are computed from these releases only.")
    mode = config.get("generate", "tokens")
    llm = models.get("llm") or {}
    if mode == "facts" and config.get("writer") == "tokens":
        lines.append(f"How the texts were written: the released facts of each cluster were "
                     f"rewritten by the language model {llm.get('name', '?')} (sha256 "
                     f"{str(llm.get('sha256', '?'))[:16]}...), each token chosen by a noisy "
                     f"vote of the cluster's documents against the model's reading of the "
                     f"released facts alone (public top-{config.get('public_top_k', '?')} "
                     "tokens); only the noisy choice was kept.")
        if str(config.get("writer_ablate") or "").strip():
            lines.append(f"An ablation build: the writer ran with these levers switched off: "
                         f"{config['writer_ablate']} (public choices; the same releases and "
                         "cost).")
    elif mode == "facts" and config.get("facts_items") == "ngrams":
        lines.append("How the texts were written: each cluster's released n-grams (word runs "
                     "that many units wrote, released level by level) joined where they "
                     "overlap; no language model read a private document.")
    elif mode == "facts":
        lines.append("How the texts were written: from the released facts by a fixed "
                     "template; no language model read a private document.")
    else:
        lines.append(f"How the texts were written: the language model {llm.get('name', '?')} "
                     f"(sha256 {str(llm.get('sha256', '?'))[:16]}...) predicted each token "
                     "from many documents at once; only the noisy choice was kept.")
    embedder = models.get("embedder") or {}
    if embedder:
        lines.append(f"Search vectors: {embedder.get('name', '?')} (dimension "
                     f"{embedder.get('dimension', '?')}), computed on the synthetic texts only.")
    files = ", ".join(sorted((certificate.get("output_files") or {}).keys()))
    lines.append(f"Covered files: {files or 'none listed'} (their sha256 are signed).")
    package = f"{certificate.get('package', 'dpsynrag')} {certificate.get('package_version', '?')}"
    lines.append(f"When and by whom: built {certificate.get('created_at', '?')} by {package}; "
                 f"signed with the Ed25519 key {signature.get('fingerprint', '?')}.")
    lines.append("Not covered: people named in many units' records (a doctor, an agent) can "
                 "appear like any frequent fact; the guarantee is about one unit at a time. "
                 "Every further query of this corpus is free (post-processing).")
    return "\n".join(lines)
