"""The privacy certificate: what was released, what it cost, and the (epsilon, delta) it gives.

``build_certificate`` compresses the ledger into a JSON document a privacy engineer (or
``verify_output``) can re-check from public parameters alone:

* ``mechanisms.sequential``: each release outside a parallel group, one entry per ledger key;
* ``mechanisms.parallel_groups``: per group with releases (the clusters of the build's
  mode; a group declared but never released in is left out) its ``max_overlap`` L and, per
  partition (one cluster), its releases grouped by identical (stage, mechanism, parameters)
  with a ``count`` and the ``rho_each`` of one of them (R=500 x T=70 token draws would
  otherwise be 35,000 entries); entries of approximately zCDP mechanisms also carry their
  re-derived ``delta`` (sequential) or ``delta_each`` (grouped);
* ``composition``: sequential releases add; a parallel group costs the sum of its L most
  expensive partitions (exactly ``Ledger.total_rho``); ``delta_approx_total`` composes the
  approximate deltas of the releases the same way (``Ledger.total_delta``; 0 when every
  mechanism is zCDP, e.g. partition selection makes it positive);
* ``guarantee``: the PLAN's worst case (``basis: "plan"``, format 2): rho and delta_approx
  compose every release the plan allows (``plan.events``: the sequential releases and L full
  clusters of its parallel group, the corpus ledger's charge), delta_approx-approximately
  rho-zCDP (Bun & Steinke 2016, Def. 8.1) and its (epsilon, delta) under the named
  conversion, epsilon being that of rho at ``delta_conversion`` = delta - delta_approx (the
  stated delta is the total); the other conversions and dp-accounting's RDP accountant as a
  cross-check, at the same delta. Beside it, never a guarantee: ``rho_realised``,
  ``delta_approx_realised`` and ``epsilon_realised``, the cost of the releases that ran
  (``composition``), and ``reserved``, the difference: planned releases that did not run (a
  facts build with fewer than L clusters, a cluster the token writer never sampled) are
  reserved at their planned cost, as the token mode charges the draws of a cluster that
  stops early. The same build could have released them, so the guarantee cannot be less
  (issue 58: 5 notes released one cluster at L = 2, and a format 1 certificate stated
  epsilon 5.758 where the mechanism's is 9.970). Without a plan (hand-made certificates
  only) the guarantee is the releases' cost, ``basis: "releases"``, and verify reports it;
* ``public_data``: every public list that shapes a document's terms, keywords or n-grams
  (``accounting.public_data``): its source and the sha256 of what the build read;
* identities of the model and embedder (names and weight sha256, never paths) and of the
  vocabulary, the output files' sha256, the public configuration, package version and time;
  ``signing.sign_document`` adds an Ed25519 signature.

Nothing in it is a function of the private input beyond the charged releases: no document
count (under add/remove neighbouring an exact count is not DP) and no fingerprint of the
input (a keyed hash of the exact input lets whoever holds its key test a guess of the whole
input; the build keeps it operator-side, in its summary and state). A seeded build's
certificate says ``seeded: true`` and ``for_release: false`` but never the seed: the seed
regenerates the whole noise stream, and with it the exact values under the noise.

``verify_output`` re-derives every rho and approximate delta from the mechanism parameters
(``costs``), the composition, and every epsilon (``conversions``); a certificate without
``delta_approx_total`` (older builds) counts as delta_approx 0. The guarantee must be the
plan's (re-planned from the config) and at least the realised cost; a format 1 certificate
(its epsilon the releases' cost) verifies only where that equals the plan's. The public lists
named are hashed again from the installed packages and files. It checks the signature and
every file hash, and returns the list of problems (empty when all is well) without raising.
It does not take the certificate's word for what should have been released: it plans the
build again from the public ``config`` (``planner.request_from_options``, the rule the build
planned by, and ``plan_budget``), reports a recorded plan that differs or is missing, and
checks the releases against that plan's own list of them (``plan.events``): each planned
release present exactly once at its planned mechanism, noise and sensitivity, each cluster
holding exactly its planned releases, nothing unplanned, and a charged cluster behind every
text of the corpus. Under-charges (a release missing, drawn outside the ledger or recorded
at other parameters) and over-charges (charged twice, unplanned) are both reported.
``runbooks/privacy-model.md`` says what this proves and what it cannot.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any, TypeGuard

import numpy as np

from dpsynrag.accounting.composition import (
    Node,
    ParallelGroup,
    Repeated,
    Sequential,
    compose,
    leaves,
)
from dpsynrag.accounting.conversions import (
    CONVERSION_REFERENCES,
    MAX_EPSILON,
    Conversion,
    epsilon_for,
)
from dpsynrag.accounting.dp_accounting_check import cross_check
from dpsynrag.accounting.ledger import Ledger, Release
from dpsynrag.accounting.mechanisms import (
    ExponentialThreshold,
    GaussianNoise,
    Mechanism,
    PartitionSelection,
    TokenSoftmax,
    from_record,
)
from dpsynrag.accounting.planner import (
    CLUSTERS_GROUP,
    FACT_CLUSTERS_GROUP,
    FactsBudgetPlan,
    plan_budget,
    plan_from_dict,
    request_from_options,
)
from dpsynrag.accounting.public_data import check_public_data, public_data
from dpsynrag.accounting.signing import (
    SignatureError,
    SigningKeyError,
    load_public_key,
    verify_signature,
)
from dpsynrag.io.output_files import (
    CERTIFICATE_FILE,
    CORPUS_FILE,
    MANIFEST_FILE,
    REQUIRED_OUTPUT_FILES,
    sha256_file,
)

CERTIFICATE_FORMAT = "dpsynrag-certificate"
#: 2: the guarantee is the plan's worst case, the realised cost beside it (issue 58);
#: 1: the guarantee was the cost of the releases that ran (verified where it is the plan's).
CERTIFICATE_FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (1, 2)
GUARANTEE_BASIS_PLAN = (
    "the plan: every release the plan allows at its planned parameters, L full clusters of "
    "its parallel group included (the corpus ledger's charge), whether or not they ran; a "
    "planned release that did not run is reserved (counted, never drawn), as the token mode "
    "charges the draws of a cluster that stops early")
GUARANTEE_BASIS_RELEASES = (
    "the releases that ran: no plan was recorded, so this is a cost, not a guarantee")
GUARANTEE_BASIS_EXCEEDED = (
    "the releases cost more than the plan (a build of wrong code): each of rho and "
    "delta_approx is the larger of the plan's and the releases'; not a guarantee verify "
    "accepts")
RESERVED_NOTE = (
    "the plan's worst case less the releases that ran: planned releases the same build could "
    "have made (fewer than max_overlap clusters released, draws not made), counted in the "
    "guarantee, never drawn")
NEIGHBOURING = ("add or remove one privacy unit (default one record; --unit-column groups "
                "records)")
COMPOSITION_RULE = (
    "zCDP: releases outside parallel groups add up (sequential, adaptive composition); a "
    "parallel group whose privacy units each touch at most max_overlap of its partitions "
    "costs the sum of its max_overlap most expensive partitions; a partition costs the sum "
    "of its releases; groups and sequential releases add up")
NOT_CHARGED = (
    "Ingest only bounds each privacy unit to one document. Stage (b) assigns each document to "
    "at most L clusters by a rule of that document and the released keywords alone (covered "
    "by the parallel group's max_overlap). Stage (e) self-filter, the output files and every "
    "later query are post-processing of released values.")
NOT_CHARGED_FACTS = (
    "Ingest only bounds each privacy unit to one document. Each document's keywords (a) and "
    "terms or phrases (f1) are a rule of that document and public data alone. Stage (f2) "
    "assigns each document to at most L clusters by a rule of that document and released "
    "values (covered by the fact clusters' max_overlap). Fact selection and the notes (f3), "
    "the output files and every later query are post-processing of released values.")
COMPOSITION_RULE_DELTA = (
    "approximate zCDP (Bun & Steinke 2016, Def. 8.1): approximate deltas compose like rho "
    "(sequential releases add; a parallel group costs the sum of its max_overlap largest "
    "partition deltas); delta_approx-approximately rho-zCDP is (epsilon(rho, delta'), "
    "delta_approx + delta')-DP for every delta' > 0")
SEEDED_NOTICE = "not for release: noise was drawn from a seeded, reproducible source (tests)"
REL_TOL = 1e-9
# RDP orders for the dp-accounting cross-check: fine enough that its epsilon is within a
# fraction of a percent of the exact CKS optimum.
_CROSS_CHECK_ORDERS = tuple(float(1.0 + 10.0 ** (e / 100.0)) for e in range(-300, 301))

__all__ = [
    "CERTIFICATE_FORMAT",
    "CERTIFICATE_FORMAT_VERSION",
    "SEEDED_PROBLEM",
    "build_certificate",
    "dp_accounting_epsilon",
    "load_certificate",
    "planned_cost",
    "verify_output",
    "write_certificate",
]


# ---------------------------------------------------------------------- building
def _jsonable(value: Any) -> Any:
    """JSON round trip (what a reader will see): Paths and enums as strings, numpy as Python."""
    def default(obj: Any) -> Any:
        if isinstance(obj, PurePath):
            return str(obj)
        if isinstance(obj, enum.Enum):
            return obj.value
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
        if isinstance(obj, set | frozenset):
            return sorted(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON serialisable")

    return json.loads(json.dumps(value, default=default, allow_nan=False))


def _entry_key(release: Release) -> tuple[str, str, str, float, str]:
    return (release.stage, release.mechanism,
            json.dumps(release.params, sort_keys=True, separators=(",", ":")),
            float(release.sensitivity), release.sensitivity_norm)


def _partition_node(entries: list[tuple[Mechanism, int]]) -> Sequential:
    """One partition's releases (mechanism, count) as a composition node."""
    return Sequential(tuple(Repeated(event, count) for event, count in entries))


def dp_accounting_epsilon(rho: float, delta: float) -> float | None:
    """epsilon of rho-zCDP from dp-accounting's RDP accountant (None if it is not installed)."""
    try:
        from dp_accounting import dp_event
        from dp_accounting.rdp import rdp_privacy_accountant
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(_CROSS_CHECK_ORDERS))
    accountant.compose(dp_event.ZCDpEvent(float(rho)))
    return float(accountant.get_epsilon(float(delta)))


def _mechanisms(ledger: Ledger) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                         dict[str, Any]]:
    """(sequential entries, parallel-group entries, composition) from the ledger."""
    sequential: list[dict[str, Any]] = []
    partitions: dict[str, dict[str, dict[tuple[str, str, str, float, str],
                                         tuple[Mechanism, dict[str, Any]]]]] = {}
    seq_nodes: list[Mechanism] = []
    groups = ledger.parallel_groups()
    for release in ledger.releases():
        event = release.event
        delta = event.cost.delta
        if release.group is None:
            sequential.append({
                "key": release.key, "stage": release.stage, "mechanism": release.mechanism,
                "params": release.params, "sensitivity": release.sensitivity,
                "sensitivity_norm": release.sensitivity_norm, "rho": event.cost.rho,
                **({"delta": delta} if delta else {})})
            seq_nodes.append(event)
            continue
        entries = partitions.setdefault(release.group, {}).setdefault(release.partition or "",
                                                                      {})
        found = entries.get(_entry_key(release))
        if found is None:
            entries[_entry_key(release)] = (event, {
                "stage": release.stage, "mechanism": release.mechanism,
                "params": release.params, "sensitivity": release.sensitivity,
                "sensitivity_norm": release.sensitivity_norm, "count": 1,
                "rho_each": event.cost.rho, **({"delta_each": delta} if delta else {})})
        else:
            found[1]["count"] += 1
    group_entries: list[dict[str, Any]] = []
    group_rho: dict[str, Any] = {}
    group_nodes: list[Node] = []
    for name in sorted(groups):
        if name not in partitions:  # declared, never released in (a facts build's "clusters")
            continue
        group = groups[name]
        parts = []
        part_nodes = []
        for part_name in sorted(partitions.get(name, {})):
            found_entries = list(partitions[name][part_name].values())
            node = _partition_node([(ev, e["count"]) for ev, e in found_entries])
            releases = [e for _, e in found_entries]
            parts.append({"partition": part_name, "rho": compose(node).rho,
                          "releases": releases})
            part_nodes.append(node)
        group_node = ParallelGroup(group.max_overlap, tuple(part_nodes), name)
        group_nodes.append(group_node)
        cost = compose(group_node)
        rho, delta = cost.rho, cost.delta
        group_entries.append({"name": name, "max_overlap": group.max_overlap,
                              "description": group.description, "rho": rho,
                              "partitions": parts, **({"delta": delta} if delta else {})})
        group_rho[name] = {"max_overlap": group.max_overlap, "partitions": len(parts),
                           "rho": rho, **({"delta": delta} if delta else {})}
    rho_sequential = compose(Sequential(tuple(seq_nodes))).rho
    total = compose(Sequential((*seq_nodes, *group_nodes)))
    rho_total = ledger.total_rho()
    if not math.isclose(total.rho, rho_total, rel_tol=REL_TOL, abs_tol=1e-15):
        raise RuntimeError("the certificate's composition disagrees with the ledger's total")
    delta_total = total.delta
    if not math.isclose(delta_total, ledger.total_delta(), rel_tol=REL_TOL, abs_tol=1e-300):
        raise RuntimeError("the certificate's approximate delta disagrees with the ledger's")
    composition = {"rule": COMPOSITION_RULE, "rho_sequential": rho_sequential,
                   "parallel_groups": group_rho, "rho_total": rho_total,
                   "delta_approx_total": delta_total}
    if delta_total:
        composition["rule_delta"] = COMPOSITION_RULE_DELTA
    return sequential, group_entries, composition


def _epsilons(rho: float, delta: float, conversion: Conversion,
              delta_approx: float) -> tuple[float, float, dict[str, float]]:
    """(delta_conversion, epsilon, the other conversions' epsilons) of rho at delta -
    delta_approx (``ValueError`` when delta_approx is not below delta)."""
    if not delta_approx < delta:
        raise ValueError(f"the releases' approximate delta {delta_approx:.3g} is not below the "
                         f"stated delta {delta:g}: no (epsilon, delta) guarantee")
    at = delta - delta_approx
    others = {c.value: epsilon_for(rho, at, c) for c in Conversion if c is not conversion}
    return at, epsilon_for(rho, at, conversion), others


def _guarantee(rho: float, delta: float, conversion: Conversion,
               delta_approx: float = 0.0, *, realised: tuple[float, float] | None = None,
               reserved: Mapping[str, Any] | None = None,
               basis: str = "plan") -> dict[str, Any]:
    """rho (and delta_approx) converted to (epsilon, delta): epsilon at delta - delta_approx.

    ``realised`` (rho, delta_approx) of the releases that ran, when (rho, delta_approx) is the
    plan's worst case: the guarantee's basis is then the plan and the realised cost is stated
    beside it; without it the basis is the releases themselves (no plan). ``basis``
    "exceeds-plan": the releases cost more than the plan (wrong code), and (rho,
    delta_approx) is the larger of each."""
    at, epsilon, others = _epsilons(rho, delta, conversion, delta_approx)
    definition = "rho-zCDP, converted to (epsilon, delta)-differential privacy"
    if delta_approx:
        definition = ("delta_approx-approximately rho-zCDP (Bun & Steinke 2016, Def. 8.1), "
                      "converted to (epsilon, delta)-differential privacy with epsilon of rho "
                      "at delta_conversion = delta - delta_approx")
    guarantee: dict[str, Any] = {
        "basis": basis if realised is not None else "releases",
        "basis_explained": GUARANTEE_BASIS_RELEASES if realised is None
        else GUARANTEE_BASIS_EXCEEDED if basis == "exceeds-plan" else GUARANTEE_BASIS_PLAN,
        "definition": definition,
        "rho": rho,
        "epsilon": epsilon,
        "delta": delta,
        "delta_approx": delta_approx,
        "delta_conversion": at,
        "conversion": conversion.value,
        "conversion_reference": CONVERSION_REFERENCES[conversion],
        "epsilon_other_conversions": others,
        "neighbouring": NEIGHBOURING,
    }
    real_rho, real_delta = realised if realised is not None else (rho, delta_approx)
    _at, real_epsilon, _others = _epsilons(real_rho, delta, conversion, real_delta)
    guarantee.update({"rho_realised": real_rho, "delta_approx_realised": real_delta,
                      "epsilon_realised": real_epsilon})
    if realised is not None:
        guarantee["reserved"] = {"note": RESERVED_NOTE, "rho": rho - real_rho,
                                 "delta_approx": delta_approx - real_delta,
                                 **dict(reserved or {})}
    cross = dp_accounting_epsilon(rho, at) if rho > 0 else 0.0
    if cross is not None:
        guarantee["cross_check"] = {
            "tool": "dp-accounting RdpAccountant(ZCDpEvent(rho))",
            "orders": "1 + 10^(e/100), e = -300..300",
            "epsilon": cross,
        }
    return guarantee


def planned_cost(plan: Any, config: Mapping[str, Any]) -> tuple[float, float] | None:
    """(rho, delta_approx) of the plan's worst case, the guarantee a build states: every
    release of ``plan.events`` (the sequential releases and L full clusters of the parallel
    group; what the corpus ledger is charged). A plan recorded without all its fields (older
    builds, hand-made certificates) gives its ``rho_total`` and ``delta_A`` (0 when absent);
    None without a plan or a numeric ``rho_total``.

    The token draws' rho is (c/tau)^2 / 2 whatever the clip c, so a config without a clip
    (older builds; a facts build's template writer) is planned at c = 1."""
    if not isinstance(plan, Mapping) or not plan:
        return None
    solved = plan_from_dict(plan)
    if solved is not None:
        clip = _recorded_clip(config)
        try:
            cost = compose(solved.events(clip if clip is not None and clip > 0 else 1.0))
        except (TypeError, ValueError):
            cost = None
        if cost is not None:
            return float(cost.rho), float(cost.delta)
    rho, delta = plan.get("rho_total"), plan.get("delta_A", 0.0)
    if not _is_number(rho) or not _is_number(delta):
        return None
    return float(rho), float(delta)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def _reserved_clusters(plan: Mapping[str, Any], composition: Mapping[str, Any]) -> dict[str, Any]:
    """How many partitions of the plan's parallel group were released, against its L."""
    name = FACT_CLUSTERS_GROUP if plan.get("generate") == "facts" else CLUSTERS_GROUP
    groups = composition.get("parallel_groups")
    released = groups.get(name, {}).get("partitions", 0) if isinstance(groups, dict) else 0
    overlap = plan.get("L")
    if not (isinstance(overlap, int) and not isinstance(overlap, bool)):
        return {}
    return {"group": name, "max_overlap": overlap, "partitions_released": released,
            "partitions_reserved": max(0, overlap - released)}


def build_certificate(
    ledger: Ledger,
    *,
    delta: float,
    conversion: str,
    plan: Mapping[str, Any],
    model_identity: Mapping[str, Any],
    embedder_identity: Mapping[str, Any],
    vocabulary_sha256: str,
    output_files: Mapping[str, str],
    seeded: bool,
    package_version: str,
    created_at: str | None = None,
    config: Mapping[str, Any],
) -> dict[str, Any]:
    """The unsigned certificate of a build (sign it with ``signing.sign_document``).

    ``output_files`` maps file names in the output directory to their sha256 (include
    ``manifest.json``; ``io.output_files.output_file_hashes`` computes them). ``config`` must hold
    public settings only (no seed, no paths: ``ValueError`` if it holds a ``seed``).
    ``seeded`` is also set when the ledger saw a seeded random source. ``ValueError`` if the
    releases' approximate delta (``Ledger.total_delta``) is not below ``delta``.
    """
    conv = Conversion(conversion)
    if not (0 < delta < 1):
        raise ValueError("delta must lie strictly between 0 and 1")
    if not isinstance(vocabulary_sha256, str) or not vocabulary_sha256:
        raise ValueError("vocabulary_sha256 must be a non-empty string")
    for name in output_files:
        if not _plain_name(name):
            raise ValueError(f"output file name {name!r} is not a plain file name")
    if "seed" in config:
        raise ValueError("the released config must not hold the seed (it regenerates the "
                         "noise)")
    sequential, group_entries, composition = _mechanisms(ledger)
    is_seeded = bool(seeded) or ledger.seeded
    realised = (composition["rho_total"], composition["delta_approx_total"])
    planned = planned_cost(plan, config)
    if planned is None:  # no plan: only hand-made certificates (verify reports it)
        guarantee = _guarantee(realised[0], float(delta), conv, realised[1])
    elif realised[0] > planned[0] * (1 + REL_TOL) + 1e-15 \
            or realised[1] > planned[1] * (1 + REL_TOL) + 1e-300:
        # wrong code spent more than its plan: never state less than either (verify fails it)
        guarantee = _guarantee(max(realised[0], planned[0]), float(delta), conv,
                               max(realised[1], planned[1]), realised=realised,
                               reserved=_reserved_clusters(plan, composition),
                               basis="exceeds-plan")
    else:
        guarantee = _guarantee(planned[0], float(delta), conv, planned[1], realised=realised,
                               reserved=_reserved_clusters(plan, composition))
    certificate: dict[str, Any] = {
        "format": CERTIFICATE_FORMAT,
        "format_version": CERTIFICATE_FORMAT_VERSION,
        "package": "dpsynrag",
        "package_version": package_version,
        "created_at": created_at or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seeded": is_seeded,
        "for_release": not is_seeded,
        "guarantee": guarantee,
        "composition": composition,
        "mechanisms": {"sequential": sequential, "parallel_groups": group_entries},
        "not_charged": NOT_CHARGED_FACTS if plan.get("generate") == "facts" else NOT_CHARGED,
        "ledger_rho_budget": ledger.rho_budget,
        "plan": dict(plan),
        "models": {"llm": dict(model_identity), "embedder": dict(embedder_identity)},
        "vocabulary_sha256": vocabulary_sha256,
        "public_data": public_data(config),
        "output_files": dict(sorted(output_files.items())),
        "config": dict(config),
    }
    if is_seeded:
        certificate["notice"] = SEEDED_NOTICE
    result: dict[str, Any] = _jsonable(certificate)
    return result


def write_certificate(out_dir: Path, certificate: Mapping[str, Any]) -> Path:
    """Write ``certificate.json`` (pretty-printed; the signature covers canonical JSON)."""
    path = Path(out_dir) / CERTIFICATE_FILE
    path.write_text(json.dumps(certificate, indent=2, sort_keys=True, ensure_ascii=False,
                               allow_nan=False) + "\n", encoding="utf-8")
    return path


def load_certificate(path: Path) -> dict[str, Any]:
    """Read a certificate file (``ValueError`` if it is not a JSON object)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("the certificate is not a JSON object")
    return doc


# ---------------------------------------------------------------------- verification
def _plain_name(name: Any) -> bool:
    return (isinstance(name, str) and bool(name) and name not in (".", "..")
            and "/" not in name and "\\" not in name and "\x00" not in name)


def _close(a: Any, b: Any) -> bool:
    return (isinstance(a, int | float) and isinstance(b, int | float)
            and not isinstance(a, bool) and not isinstance(b, bool)
            and math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-15))


def _read_json(path: Path, what: str, problems: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        problems.append(f"{what}: {path.name} is missing")
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        problems.append(f"{what}: {path.name} is not valid JSON ({type(error).__name__})")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{what}: {path.name} is not a JSON object")
        return None
    return doc


def _check_hashes(out_dir: Path, files: Any, source: str, problems: list[str]) -> None:
    if not isinstance(files, dict):
        problems.append(f"{source}: the file list is missing or malformed")
        return
    for name, expected in sorted(files.items()):
        if isinstance(expected, dict):  # manifest entries are {"sha256", "bytes"}
            expected = expected.get("sha256")
        if not _plain_name(name):
            problems.append(f"{source}: {name!r} is not a plain file name")
            continue
        path = out_dir / name
        if not path.is_file():
            problems.append(f"{source}: {name} is missing")
            continue
        if not isinstance(expected, str) or sha256_file(path) != expected:
            problems.append(f"{source}: {name} does not match its recorded sha256")


def _check_entry(entry: Any, what: str, rho_field: str,
                 problems: list[str]) -> Mechanism | None:
    """Re-derive one mechanism entry's rho and sensitivity; return its typed mechanism."""
    try:
        mechanism, params = entry["mechanism"], entry["params"]
        event = from_record(mechanism, params)
        rho = event.cost.rho
        norm, sensitivity = event.norm, event.sensitivity()
        recorded = entry[rho_field]
    except (KeyError, TypeError, ValueError) as error:
        problems.append(f"{what}: malformed mechanism entry ({error})")
        return None
    if not _close(recorded, rho):
        problems.append(f"{what}: recorded {rho_field} {recorded!r} but {mechanism} with these "
                        f"parameters costs {rho!r}")
    if entry.get("sensitivity_norm") != norm or not _close(entry.get("sensitivity"),
                                                           sensitivity):
        problems.append(f"{what}: recorded sensitivity {entry.get('sensitivity_norm')!r} "
                        f"{entry.get('sensitivity')!r} but {mechanism} is calibrated to "
                        f"{norm} {sensitivity!r}")
    return event


def _check_entry_delta(entry: dict[str, Any], event: Mechanism, what: str, delta_field: str,
                       problems: list[str]) -> None:
    """Compare one entry's recorded approximate delta with its mechanism's.

    An entry without ``delta_field`` records 0 (older certificates, zCDP mechanisms).
    """
    delta = event.cost.delta
    recorded = entry.get(delta_field, 0.0)
    if not _close(recorded, delta):
        problems.append(f"{what}: recorded {delta_field} {recorded!r} but {entry['mechanism']} "
                        f"with these parameters has approximate delta {delta!r}")


def _check_accounting(cert: dict[str, Any], problems: list[str]) -> None:
    mechanisms = cert.get("mechanisms")
    composition = cert.get("composition")
    guarantee = cert.get("guarantee")
    if not isinstance(mechanisms, dict) or not isinstance(composition, dict) \
            or not isinstance(guarantee, dict):
        problems.append("certificate: mechanisms, composition or guarantee is missing")
        return
    sequential = mechanisms.get("sequential")
    groups = mechanisms.get("parallel_groups")
    if not isinstance(sequential, list) or not isinstance(groups, list):
        problems.append("certificate: the mechanism lists are malformed")
        return
    seq_nodes: list[Node] = []
    for i, entry in enumerate(sequential):
        key = entry.get("key", i) if isinstance(entry, dict) else i
        event = _check_entry(entry, f"mechanism {key}", "rho", problems)
        if event is not None:
            seq_nodes.append(event)
            _check_entry_delta(entry, event, f"mechanism {key}", "delta", problems)
    seq_cost = compose(Sequential(tuple(seq_nodes)))
    rho_sequential = seq_cost.rho
    if not _close(composition.get("rho_sequential"), rho_sequential):
        problems.append(f"composition: rho_sequential {composition.get('rho_sequential')!r} "
                        f"but the sequential mechanisms add up to {rho_sequential!r}")
    recorded_groups = composition.get("parallel_groups")
    if not isinstance(recorded_groups, dict):
        recorded_groups = {}
        problems.append("composition: parallel_groups is missing or malformed")
    group_nodes: list[Node] = []
    group_names: list[str] = []
    seen = set()
    for group in groups:
        try:
            name, overlap, parts = group["name"], group["max_overlap"], group["partitions"]
            if not (isinstance(overlap, int) and not isinstance(overlap, bool) and overlap >= 1):
                raise ValueError("max_overlap must be a positive integer")
            if not isinstance(parts, list):
                raise TypeError("partitions must be a list")
        except (KeyError, TypeError, ValueError) as error:
            problems.append(f"parallel group: malformed ({error})")
            continue
        seen.add(name)
        part_nodes: list[Node] = []
        for part in parts:
            try:
                part_name, releases = part["partition"], part["releases"]
            except (KeyError, TypeError):
                problems.append(f"group {name}: malformed partition")
                continue
            entries: list[tuple[Mechanism, int]] = []
            for entry in releases:
                what = f"group {name} {part_name} {entry.get('stage', '?')}" \
                    if isinstance(entry, dict) else f"group {name} {part_name}"
                event = _check_entry(entry, what, "rho_each", problems)
                count = entry.get("count") if isinstance(entry, dict) else None
                if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
                    problems.append(f"{what}: count must be a positive integer")
                    continue
                if event is not None:
                    entries.append((event, count))
                    _check_entry_delta(entry, event, what, "delta_each", problems)
            node = _partition_node(entries)
            part_rho = compose(node).rho
            if not _close(part.get("rho"), part_rho):
                problems.append(f"group {name} {part_name}: rho {part.get('rho')!r} but its "
                                f"releases add up to {part_rho!r}")
            part_nodes.append(node)
        group_node = ParallelGroup(overlap, tuple(part_nodes), str(name))
        group_nodes.append(group_node)
        group_names.append(str(name))
        cost = compose(group_node)
        rho = cost.rho
        recorded = recorded_groups.get(name)
        if not _close(group.get("rho"), rho) or not isinstance(recorded, dict) \
                or not _close(recorded.get("rho"), rho) or recorded.get("max_overlap") != overlap:
            problems.append(f"group {name}: recorded rho does not equal the sum of its "
                            f"{overlap} most expensive partitions ({rho!r})")
        delta = cost.delta
        if not _close(group.get("delta", 0.0), delta) or (
                isinstance(recorded, dict) and not _close(recorded.get("delta", 0.0), delta)):
            problems.append(f"group {name}: recorded delta does not equal the sum of its "
                            f"{overlap} largest partition deltas ({delta!r})")
    for name in set(recorded_groups) - seen:
        problems.append(f"composition: group {name} has no mechanism entries")
    total = compose(Sequential((*seq_nodes, *group_nodes)))
    rho_total = total.rho
    _check_mechanisms_cross(Sequential((*seq_nodes, *group_nodes)), problems)
    if not _close(composition.get("rho_total"), rho_total):
        problems.append(f"composition: rho_total {composition.get('rho_total')!r} but the "
                        f"mechanisms compose to {rho_total!r}")
    delta_approx = total.delta
    if not _close(composition.get("delta_approx_total", 0.0), delta_approx):
        problems.append(f"composition: delta_approx_total "
                        f"{composition.get('delta_approx_total', 0.0)!r} but the mechanisms' "
                        f"approximate deltas compose to {delta_approx!r}")
    config = cert.get("config")
    config = config if isinstance(config, dict) else {}
    plan = _plan_to_check(cert.get("plan"), config, problems)
    planned = planned_cost(plan, config) if plan is not None else None
    if cert.get("format_version") == 1:
        _check_guarantee(guarantee, rho_total, delta_approx, problems)
        _check_format1_epsilon(guarantee, planned, problems)
    else:
        _check_guarantee_basis(guarantee, planned, rho_total, delta_approx, problems)
    if plan is not None:
        _check_plan(plan, rho_total, sequential, groups, problems)
        _check_plan_events(plan, config, dict(zip(group_names, group_nodes, strict=True)),
                           problems)
        _check_planned_releases(plan, config, sequential, groups, problems)


NO_PLAN = ("certificate: no plan recorded, so no release can be checked against its planned "
           "noise and sensitivity, and its epsilon is only the cost of the releases that ran, "
           "not a guarantee")


def _plan_to_check(recorded: Any, config: dict[str, Any],
                   problems: list[str]) -> dict[str, Any] | None:
    """The plan the releases are checked against: the planner's own plan for the public
    ``config`` the certificate records (``planner.request_from_options``, the rule the build
    planned by, then ``plan_budget``), not what the certificate says it planned; the recorded
    plan only when the config lacks a planning option (an older build). A missing or empty
    recorded plan is a problem, and so is any field of it that differs from the planner's."""
    derived = _replanned(config, recorded, problems)
    if not isinstance(recorded, dict) or not recorded:
        problems.append(NO_PLAN)
        return derived
    if derived is None:
        return recorded
    for name in sorted(set(recorded) & set(derived)):
        if not _same_value(recorded[name], derived[name]):
            problems.append(f"plan: the recorded {name} {recorded[name]!r} is not the "
                            f"planner's {derived[name]!r} for the certificate's config")
    return derived


def _replanned(config: dict[str, Any], recorded: Any,
               problems: list[str]) -> dict[str, Any] | None:
    """``plan_budget`` of the certificate's config (None when it lacks a planning option).
    The token plan's ``vocab_size`` (the model's; it only sizes ``consensus_rows``) is taken
    from the recorded plan; an epsilon above the bound is planned here and reported by the
    guarantee check."""
    vocab = recorded.get("vocab_size") if isinstance(recorded, dict) else None
    sized = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab >= 2 \
        else None
    try:
        request = request_from_options(config, vocab_size=sized, allow_large_epsilon=True)
        if request is None:
            return None
        derived: dict[str, Any] = _jsonable(plan_budget(request).as_dict())
    except (TypeError, ValueError) as error:  # PlanError is a ValueError
        problems.append(f"plan: the certificate's config cannot be planned ({error})")
        return None
    return derived


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and not isinstance(a, bool):
        return _close(a, b)
    return bool(a == b)


def _params_of(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's ``params`` when it is a JSON object, else {} (a malformed entry)."""
    params = entry.get("params")
    return params if isinstance(params, dict) else {}


def _plan_number(plan: dict[str, Any], name: str) -> float | None:
    value = plan.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _check_plan(plan: dict[str, Any], rho_total: float, sequential: list[Any],
                groups: list[Any], problems: list[str]) -> None:
    """The releases follow the recorded plan (keys of ``BudgetPlan`` that are present).

    Catches pipeline bugs the arithmetic cannot: a cluster charged fewer than T tokens (the
    worst case must be paid, EOS or not), a noise scale other than planned, overspending.
    """
    planned = _plan_number(plan, "rho_total")
    if planned is not None and rho_total > planned * (1 + REL_TOL) + 1e-15:
        problems.append(f"plan: the releases cost rho {rho_total!r}, more than the planned "
                        f"{planned!r}")
    sigma_h = _plan_number(plan, "sigma_h") or None  # 0: a plan without the histogram
    # the keyword histogram: K words per document (K_s in the facts mode), l2 sqrt(K)
    width = _plan_number(plan, "K_s" if plan.get("generate") == "facts" else "K")
    histograms = [e for e in sequential if isinstance(e, dict) and e.get("key") == "histogram"]
    if sigma_h is not None and len(histograms) != 1:
        problems.append(f"plan: {len(histograms)} keyword histogram releases, the plan has one")
    for entry in histograms:
        params = _params_of(entry)
        if sigma_h is not None and not _close(params.get("sigma"), sigma_h):
            problems.append("plan: the histogram's sigma is not the planned sigma_h")
        if width is not None and not _close(params.get("l2_sensitivity"), math.sqrt(width)):
            problems.append("plan: the histogram's sensitivity is not sqrt of the planned "
                            "keywords per document")
    if plan.get("generate") == "facts":
        _check_facts_plan(plan, sequential, groups, problems)
    clusters = [g for g in groups if isinstance(g, dict) and g.get("name") == "clusters"]
    for group in clusters:
        planned_l = plan.get("L")
        if planned_l is not None and group.get("max_overlap") != planned_l:
            problems.append(f"plan: L is {planned_l!r} but the clusters group declares "
                            f"max_overlap {group.get('max_overlap')!r}")
        expected = {"c-noisy-sum": ("sigma", _plan_number(plan, "sigma_mu")),
                    "c-threshold": ("epsilon", _plan_number(plan, "eps_theta"))}
        tokens_planned = plan.get("T")
        ratio = _plan_number(plan, "c_over_tau")
        for part in group.get("partitions", []):
            name = part.get("partition") if isinstance(part, dict) else None
            releases = [e for e in (part.get("releases", []) if isinstance(part, dict) else [])
                        if isinstance(e, dict)]
            tokens = 0
            for entry in releases:
                params = _params_of(entry)
                stage, count = entry.get("stage"), entry.get("count", 0)
                if stage in expected:
                    field, value = expected[stage]
                    if value is not None and not _close(params.get(field), value):
                        problems.append(f"plan: {name} {stage} {field} is not the planned one")
                if entry.get("mechanism") == "token_softmax":
                    each = params.get("tokens", 1)
                    if isinstance(each, int) and isinstance(count, int):
                        tokens += each * count
                    clip, temp = params.get("clip"), params.get("temperature")
                    if ratio is not None and isinstance(clip, int | float) \
                            and isinstance(temp, int | float) and temp > 0 \
                            and not _close(clip / temp, ratio):
                        problems.append(f"plan: {name} token c/tau is not the planned one")
            if isinstance(tokens_planned, int) and tokens != tokens_planned:
                problems.append(f"plan: {name} is charged {tokens} token draws, not T = "
                                f"{tokens_planned} (the worst case must be charged)")


def _check_mechanisms_cross(tree: Sequential, problems: list[str]) -> None:
    """Each distinct mechanism's rho against dp-accounting's, where it has an event."""
    distinct = {leaf.mechanism for leaf in leaves(tree)}
    for event in sorted(distinct, key=repr):
        for check in cross_check(event):
            if not check.agrees():
                problems.append(f"cross-check: {check.mechanism} costs rho {check.rho!r} here but "
                                f"{check.dp_accounting_rho!r} by dp-accounting")


def _check_plan_events(plan_record: dict[str, Any], config: dict[str, Any],
                       groups: dict[str, Node], problems: list[str]) -> None:
    """The releases against the plan's own description of the build (``plan.events``).

    The plan's mechanisms must compose to its ``rho_total``; every partition of the plan's
    parallel group must cost no more than the planned cluster, and, in the token mode, exactly
    as much (every cluster pays the worst case: all T draws, EOS or not); the group must
    declare the plan's L. A plan recorded without all its fields (older builds) is skipped.
    """
    plan = plan_from_dict(plan_record)
    if plan is None:
        return
    clip = _recorded_clip(config)
    if not isinstance(plan, FactsBudgetPlan) and clip is None:
        return  # a token plan's draws need the recorded clip
    try:
        planned = plan.events(clip) if isinstance(plan, FactsBudgetPlan) \
            else plan.events(clip or 0.0)
    except ValueError as error:
        problems.append(f"plan: its mechanisms are not valid ({error})")
        return
    if not _close(compose(planned).rho, plan.rho_total):
        problems.append(f"plan: its mechanisms compose to rho {compose(planned).rho!r}, not its "
                        f"rho_total {plan.rho_total!r}")
    group = planned.children[-1]
    if not isinstance(group, ParallelGroup):
        return
    cluster = compose(group.partitions[0])
    recorded = groups.get(group.name)
    if not isinstance(recorded, ParallelGroup):
        return
    if recorded.max_overlap != group.max_overlap:
        problems.append(f"plan: L is {group.max_overlap} but group {group.name} declares "
                        f"max_overlap {recorded.max_overlap}")
    exact = group.name == CLUSTERS_GROUP
    for i, part in enumerate(recorded.partitions):
        cost = compose(part)
        over = cost.rho > cluster.rho * (1 + REL_TOL) + 1e-15 \
            or cost.delta > cluster.delta * (1 + REL_TOL) + 1e-300
        if over or (exact and not (_close(cost.rho, cluster.rho)
                                   and _close(cost.delta, cluster.delta))):
            problems.append(f"plan: partition {i} of group {group.name} costs rho "
                            f"{cost.rho!r}, the planned cluster {cluster.rho!r}")


def _check_facts_plan(plan: dict[str, Any], sequential: list[Any], groups: list[Any],
                      problems: list[str]) -> None:
    """A facts build: the phrase release and the clusters' histograms use the planned noise."""
    expected = {"sigma": _plan_number(plan, "sigma_A"), "threshold": _plan_number(plan, "tau_A"),
                "max_items": _plan_number(plan, "K_e")}
    planned_delta = _plan_number(plan, "delta_phrases")
    lengths = plan.get("ngram_lengths")
    lengths = lengths if isinstance(lengths, list) else []
    ngrams = bool(lengths)
    # a facts build releases its phrases once, or once per n-gram level
    levels = len(lengths) if ngrams else 1
    if planned_delta is not None:
        planned_delta /= levels
    selections = [e for e in sequential
                  if isinstance(e, dict) and e.get("mechanism") == "partition_selection"]
    if len(selections) != levels:
        problems.append(f"plan: {len(selections)} phrase releases, the facts plan has "
                        f"{levels}")
    if ngrams:  # n-gram levels: one sigma, each level its own cap and threshold
        expected.pop("threshold")
        expected.pop("max_items")
        # weighted contributions: every level at the plan's weight scale W (None: uniform)
        scale = plan.get("ngram_weight_scale") or None
        if any(_params_of(e).get("weight_scale") != scale for e in selections):
            problems.append("plan: an n-gram level's weight_scale is not the planned one")
        planned = sorted(zip(plan.get("ngram_items") or [], plan.get("ngram_thresholds") or [],
                             strict=False))
        found = sorted((_params_of(e).get("max_items"), _params_of(e).get("threshold"))
                       for e in selections)
        if found != planned:
            problems.append("plan: the n-gram levels' caps and thresholds are not the "
                            "planned ones")
    for entry in selections:
        params = _params_of(entry)
        for field, value in expected.items():
            if value is not None and not _close(params.get(field), value):
                problems.append(f"plan: the phrase release's {field} is not the planned one")
        recorded = entry.get("delta")
        if planned_delta is not None and isinstance(recorded, int | float) \
                and recorded > planned_delta * (1 + REL_TOL):
            problems.append("plan: the phrase release's delta is over the planned delta_phrases")
    _check_writer_tokens(plan, groups, problems)
    _check_roles(plan, sequential, problems)
    # The clusters' fact histograms: discrete Gaussian releases of sensitivity sqrt(K_e + K_s),
    # or the plan's span weight scale S with weighted span counts.
    sigma_c = _plan_number(plan, "sigma_C")
    k_e, k_s = _plan_number(plan, "K_e"), _plan_number(plan, "K_s")
    if sigma_c is None or k_e is None or k_s is None:
        return
    span_scale = _plan_number(plan, "span_weight_scale")
    expected_l2 = float(span_scale) if span_scale else math.sqrt(k_e + k_s)
    expected_name = "the plan's span_weight_scale" if span_scale else "sqrt(K_e + K_s)"
    for group in groups:
        # the facts build releases its fact histograms in the "fact-clusters" group
        if not isinstance(group, dict) or group.get("name") not in (CLUSTERS_GROUP,
                                                                     FACT_CLUSTERS_GROUP):
            continue
        for part in group.get("partitions", []):
            for entry in part.get("releases", []) if isinstance(part, dict) else []:
                entry_params = entry.get("params") if isinstance(entry, dict) else None
                if not isinstance(entry_params, dict) \
                        or entry.get("mechanism") != "discrete_gaussian":
                    continue
                if not _close(entry_params.get("l2_sensitivity"), expected_l2) \
                        or entry_params.get("weight_scale") != (int(span_scale) if span_scale
                                                                else None):
                    problems.append(f"plan: {part.get('partition')} fact histogram sensitivity "
                                    f"is not {expected_name}")
                if not _close(entry_params.get("sigma"), sigma_c):
                    problems.append(f"plan: {part.get('partition')} fact histogram sigma is not "
                                    "the planned sigma_C")


def _check_roles(plan: dict[str, Any], sequential: list[Any], problems: list[str]) -> None:
    """A facts build with terms: the role histogram is charged at the planned sigma_R with
    sensitivity sqrt(K_e), exactly once when the plan has roles and never otherwise."""
    sigma_r, k_e = _plan_number(plan, "sigma_R"), _plan_number(plan, "K_e")
    releases = [e for e in sequential if isinstance(e, dict) and e.get("stage") == "f-roles"]
    if not sigma_r:
        if releases:
            problems.append("plan: a role histogram was released but the plan has none")
        return
    if not releases:
        problems.append("plan: the planned role histogram was not released through the ledger "
                        "(missing: its noise drawn outside the ledger is not charged)")
    if len(releases) > 1:
        problems.append("plan: the role histogram was released more than once")
    for entry in releases:
        params = _params_of(entry)
        if not _close(params.get("sigma"), sigma_r):
            problems.append("plan: the role histogram's sigma is not the planned sigma_R")
        if k_e is not None and not _close(params.get("l2_sensitivity"), math.sqrt(k_e)):
            problems.append("plan: the role histogram's sensitivity is not sqrt(K_e)")


def _check_writer_tokens(plan: dict[str, Any], groups: list[Any], problems: list[str]) -> None:
    """A facts build with ``--writer tokens``: every fact cluster that the writer sampled is
    charged exactly T draws at the planned c/tau; a build without it has no draws there."""
    tokens_planned = plan.get("T") if plan.get("writer") == "tokens" else 0
    ratio = _plan_number(plan, "c_over_tau")
    for group in groups:
        if not isinstance(group, dict) or group.get("name") != "fact-clusters":
            continue
        for part in group.get("partitions", []):
            if not isinstance(part, dict):
                continue
            tokens = 0
            for entry in part.get("releases", []):
                if not isinstance(entry, dict) or entry.get("mechanism") != "token_softmax":
                    continue
                params = _params_of(entry)
                each, count = params.get("tokens", 1), entry.get("count", 0)
                if isinstance(each, int) and isinstance(count, int):
                    tokens += each * count
                clip, temp = params.get("clip"), params.get("temperature")
                if ratio and isinstance(clip, int | float) and isinstance(temp, int | float) \
                        and temp > 0 and not _close(clip / temp, ratio):
                    problems.append(f"plan: {part.get('partition')} writer c/tau is not the "
                                    "planned one")
            if tokens and tokens != tokens_planned:
                problems.append(f"plan: {part.get('partition')} is charged {tokens} writer "
                                f"token draws, not T = {tokens_planned} (the worst case must "
                                "be charged)")


def _check_planned_releases(plan_record: dict[str, Any], config: dict[str, Any],
                            sequential: list[Any], groups: list[Any],
                            problems: list[str]) -> None:
    """Every release against the plan's own list of them (``plan.events``, derived from the
    public config by the planner): each planned sequential release (keyword histogram; phrase
    release and role histogram in the facts mode) present exactly once with its planned
    mechanism, noise and sensitivity and nothing else outside the plan's parallel group; in
    that group each partition holds exactly the planned cluster's releases (the token mode:
    its noisy sum, threshold and T draws; the facts mode: its fact histogram, and T writer
    draws or none); no other group releases anything. Missing or mis-calibrated releases
    (under-charged) and duplicated or unplanned ones (over-charged) are reported alike.
    A plan recorded without all its fields (older builds) is skipped."""
    plan = plan_from_dict(plan_record)
    if plan is None:
        return
    clip = _recorded_clip(config)
    try:
        if isinstance(plan, FactsBudgetPlan):
            facts = True
            events = plan.events(clip)  # the token writer's draws need the clip
        elif clip is None:
            return  # the draws' clip is a public option an older certificate may lack
        else:
            facts = False
            events = plan.events(clip)
    except ValueError:  # an invalid plan, or a writer plan without the clip: reported
        return          # by _check_plan_events, or an older certificate
    *planned_sequential, group = events.children
    planned = [(_planned_label(leaf.mechanism, i, facts, False), leaf.mechanism, _units(
        leaf.mechanism, leaf.count)) for i, leaf in enumerate(leaves(Sequential(tuple(
            planned_sequential))))]
    recorded = []
    for entry in sequential:
        event = _event_of(entry)
        if event is not None:
            recorded.append((f"release {entry.get('key')!r}", event, _units(event, 1)))
    _tally(planned, recorded, "", problems)
    if not isinstance(group, ParallelGroup) or not group.partitions:
        return
    cluster = [(_planned_label(leaf.mechanism, i, facts, True), leaf.mechanism,
                _units(leaf.mechanism, leaf.count))
               for i, leaf in enumerate(leaves(group.partitions[0]))]
    optional = frozenset({"writer token draws"}) if facts else frozenset()
    names = {group.name, CLUSTERS_GROUP} if facts else {group.name}
    for entry in groups:
        if not isinstance(entry, dict):
            continue
        parts = entry.get("partitions")
        parts = parts if isinstance(parts, list) else []
        if entry.get("name") not in names:
            if parts:
                problems.append(f"plan: parallel group {entry.get('name')!r} is not in the "
                                f"plan ({len(parts)} partitions of unplanned releases)")
            continue
        for part in parts:
            if not isinstance(part, dict):
                continue
            found = []
            for release in part.get("releases", []) or []:
                event = _event_of(release)
                count = release.get("count") if isinstance(release, dict) else None
                if event is not None and isinstance(count, int) and not isinstance(count,
                                                                                   bool):
                    found.append((f"{release.get('stage')} release", event,
                                  _units(event, count)))
            _tally(cluster, found, f"{entry.get('name')} {part.get('partition')}: ", problems,
                   optional)


def _planned_label(event: Mechanism, position: int, facts: bool, in_cluster: bool) -> str:
    """What a planned release is, in words (for the problems verify reports)."""
    if in_cluster:
        if isinstance(event, TokenSoftmax):
            return "writer token draws" if facts else "token draws"
        if isinstance(event, ExponentialThreshold):
            return "similarity threshold"
        return "fact histogram" if facts else "noisy sum"
    if isinstance(event, PartitionSelection):
        return "phrase release"
    return "keyword histogram" if position == 0 else "role histogram"


def _event_of(entry: Any) -> Mechanism | None:
    """An entry's typed mechanism, None when malformed (reported by ``_check_entry``)."""
    if not isinstance(entry, dict):
        return None
    try:
        return from_record(entry.get("mechanism"), entry.get("params"))
    except (TypeError, ValueError):
        return None


def _units(event: Mechanism, count: int) -> int:
    """How many planned units ``count`` releases of ``event`` are: token draws for the token
    sampler (a reservation holds several), releases otherwise."""
    if isinstance(event, TokenSoftmax):
        return count * (event.tokens if isinstance(event.tokens, int) else 1)
    return count


def _same_mechanism(a: Mechanism, b: Mechanism) -> bool:
    """Whether ``a`` is released with the parameters of ``b``: the same mechanism (Gaussian
    noise drawn on the fixed-point grid counts as the discrete Gaussian it is) and the same
    cost parameters; a token record's ``tokens`` is counted, not compared."""
    if isinstance(a, GaussianNoise) and isinstance(b, GaussianNoise):
        return _close(a.sigma, b.sigma) and _close(a.l2_sensitivity, b.l2_sensitivity)
    if type(a) is not type(b):
        return False
    return all(_same_value(getattr(a, name), getattr(b, name)) for name in _cost_fields(a)
               if name != "tokens")


def _cost_fields(event: Mechanism) -> list[str]:
    """The fields a mechanism's cost reads (not ``info``)."""
    return [field.name for field in dataclasses.fields(event) if field.name != "info"]


def _describe(event: Mechanism) -> str:
    values = [(name, getattr(event, name)) for name in _cost_fields(event)
              if getattr(event, name) is not None]
    return ", ".join(f"{name} {value:.6g}" if isinstance(value, float) else f"{name} {value}"
                     for name, value in values)


def _tally(planned: list[tuple[str, Mechanism, int]],
           recorded: list[tuple[str, Mechanism, int]], where: str, problems: list[str],
           optional: frozenset[str] = frozenset()) -> None:
    """Match ``recorded`` (label, mechanism, units) against ``planned``: every recorded
    release must be a planned one and every planned one charged its planned units (a label
    in ``optional`` may also be absent altogether)."""
    got = [0] * len(planned)
    for label, event, units in recorded:
        for i, (_name, want, _units_planned) in enumerate(planned):
            if _same_mechanism(event, want):
                got[i] += units
                break
        else:
            problems.append(f"plan: {where}{label} ({event.name}: {_describe(event)}) is not a "
                            "planned release: unplanned (over-charged) or charged at other "
                            "parameters than planned")
    for (label, want, units), n in zip(planned, got, strict=True):
        if n == units or (n == 0 and label in optional):
            continue
        if n < units:
            problems.append(f"plan: {where}the planned {label} ({want.name}: "
                            f"{_describe(want)}) is charged {n} of {units} times: "
                            "under-charged (missing, drawn outside the ledger or charged at "
                            "other parameters)")
        else:
            problems.append(f"plan: {where}the planned {label} ({want.name}: "
                            f"{_describe(want)}) is charged {n} times, the plan has {units}: "
                            "over-charged (charged twice)")


def _check_guarantee_basis(guarantee: dict[str, Any], planned: tuple[float, float] | None,
                           rho_total: float, delta_approx: float,
                           problems: list[str]) -> None:
    """A format 2 guarantee: the plan's worst case (``planned``, from the plan verify
    re-derives), at least the realised cost (``rho_total``, ``delta_approx``: the recorded
    releases), which is stated beside it and checked, with the reservation between them.
    Without a plan (reported as NO_PLAN) the guarantee can only be the releases' cost."""
    basis = guarantee.get("basis")
    if planned is None:
        if basis != "releases":
            problems.append(f"guarantee: basis {basis!r} but no plan can be derived: the "
                            "stated epsilon can only be the cost of the releases that ran")
        _check_guarantee(guarantee, rho_total, delta_approx, problems, source="the releases")
    else:
        if basis != "plan":
            problems.append(f"guarantee: basis {basis!r}, not 'plan': a certificate's epsilon "
                            "must be the plan's worst case, not the cost of the releases that "
                            "ran (it is lower when fewer than L clusters are released)")
        plan_rho, plan_delta = planned
        _check_guarantee(guarantee, plan_rho, plan_delta, problems, source="the plan")
        if rho_total > plan_rho * (1 + REL_TOL) + 1e-15 \
                or delta_approx > plan_delta * (1 + REL_TOL) + 1e-300:
            problems.append(f"guarantee: the releases cost rho {rho_total!r} (approximate "
                            f"delta {delta_approx!r}), more than the plan's guarantee "
                            f"{plan_rho!r} ({plan_delta!r}): over-charged")
        reserved = guarantee.get("reserved")
        if not isinstance(reserved, dict) or not _close(reserved.get("rho"),
                                                        plan_rho - rho_total) \
                or not _close(reserved.get("delta_approx"), plan_delta - delta_approx):
            problems.append("guarantee: reserved is not the plan's rho and approximate delta "
                            "less the releases' (missing or wrong)")
    if not _close(guarantee.get("rho_realised"), rho_total):
        problems.append(f"guarantee: rho_realised {guarantee.get('rho_realised')!r} but the "
                        f"releases compose to {rho_total!r}")
    if not _close(guarantee.get("delta_approx_realised"), delta_approx):
        problems.append(f"guarantee: delta_approx_realised "
                        f"{guarantee.get('delta_approx_realised')!r} but the releases' "
                        f"approximate deltas compose to {delta_approx!r}")
    try:
        delta = float(guarantee["delta"])
        conversion = Conversion(guarantee["conversion"])
        realised = epsilon_for(rho_total, delta - delta_approx, conversion) \
            if delta_approx < delta else None
    except (KeyError, TypeError, ValueError):
        return  # reported by _check_guarantee
    if realised is not None and not _close(guarantee.get("epsilon_realised"), realised):
        problems.append(f"guarantee: epsilon_realised {guarantee.get('epsilon_realised')!r} "
                        f"but the releases' rho {rho_total!r} gives {realised!r}")


def _check_format1_epsilon(guarantee: dict[str, Any], planned: tuple[float, float] | None,
                           problems: list[str]) -> None:
    """A format 1 certificate states the cost of the releases that ran as its epsilon: it
    verifies only where that is the plan's (the same build could have released the rest)."""
    if planned is None:
        return
    try:
        delta = float(guarantee["delta"])
        conversion = Conversion(guarantee["conversion"])
        epsilon = epsilon_for(planned[0], delta - planned[1], conversion)
    except (KeyError, TypeError, ValueError):
        return  # reported by _check_guarantee
    stated = guarantee.get("epsilon")
    if _is_number(stated) and not _close(stated, epsilon) and float(stated) < epsilon:
        problems.append(f"guarantee: this format 1 certificate states epsilon {stated!r}, the "
                        f"cost of the releases that ran, below the plan's {epsilon!r}: the "
                        "build's guarantee is the plan's (the same build could have released "
                        "every planned cluster); rebuild to get a certificate that states it")


def _check_guarantee(guarantee: dict[str, Any], rho_total: float, delta_approx: float,
                     problems: list[str], source: str = "the composition") -> None:
    """epsilon (and the others) recomputed from rho at delta - delta_approx (re-derived)."""
    if not _close(guarantee.get("rho"), rho_total):
        problems.append(f"guarantee: rho {guarantee.get('rho')!r} but {source} gives "
                        f"{rho_total!r}")
    try:
        delta = float(guarantee["delta"])
        conversion = Conversion(guarantee["conversion"])
    except (KeyError, TypeError, ValueError) as error:
        problems.append(f"guarantee: malformed delta or conversion ({error})")
        return
    if not delta_approx < delta:
        problems.append(f"guarantee: the releases' approximate delta {delta_approx!r} is not "
                        f"below the stated delta {delta!r}: no (epsilon, delta) guarantee")
        return
    at = delta - delta_approx
    try:
        epsilon = epsilon_for(rho_total, at, conversion)
    except (TypeError, ValueError) as error:
        problems.append(f"guarantee: malformed delta ({error})")
        return
    if not _close(guarantee.get("delta_approx", 0.0), delta_approx):
        problems.append(f"guarantee: delta_approx {guarantee.get('delta_approx', 0.0)!r} but "
                        f"{source} gives approximate delta {delta_approx!r}")
    if "delta_conversion" in guarantee and not _close(guarantee["delta_conversion"], at):
        problems.append(f"guarantee: delta_conversion {guarantee['delta_conversion']!r} but "
                        f"delta - delta_approx is {at!r}")
    if not _close(guarantee.get("epsilon"), epsilon):
        problems.append(f"guarantee: epsilon {guarantee.get('epsilon')!r} but rho {rho_total!r} "
                        f"at delta {at!r} gives {epsilon!r} ({conversion.value})")
    if epsilon > MAX_EPSILON:
        problems.append(f"guarantee: epsilon {epsilon:.4g} is above {MAX_EPSILON:g}, where "
                        "differential privacy promises nothing useful: a measurement build, "
                        "not for release")
    if guarantee.get("conversion_reference") != CONVERSION_REFERENCES[conversion]:
        problems.append("guarantee: the conversion reference does not name the conversion")
    others = guarantee.get("epsilon_other_conversions")
    if not isinstance(others, dict):
        problems.append("guarantee: epsilon_other_conversions is missing")
    else:
        for name, value in others.items():
            try:
                expected = epsilon_for(rho_total, at, name)
            except ValueError:
                problems.append(f"guarantee: unknown conversion {name!r}")
                continue
            if not _close(value, expected):
                problems.append(f"guarantee: epsilon under {name} is {value!r}, recomputed "
                                f"{expected!r}")
    cross = guarantee.get("cross_check")
    if isinstance(cross, dict):
        cross_expected = dp_accounting_epsilon(rho_total, at) if rho_total > 0 else 0.0
        if cross_expected is not None and not _close(cross.get("epsilon"), cross_expected):
            problems.append(f"guarantee: dp-accounting cross-check {cross.get('epsilon')!r}, "
                            f"recomputed {cross_expected!r}")


SEEDED_PROBLEM = ("certificate: seeded build: its noise came from a reproducible seed, so "
                  "it carries no privacy guarantee (tests only; not for release)")


def verify_output(out_dir: Path, public_key_path: Path | None = None, *,
                  allow_seeded: bool = False) -> list[str]:
    """Every problem found in an output directory; an empty list means it verified.

    A seeded build (``seeded: true``) is a problem unless ``allow_seeded`` (tests only): its
    noise is reproducible, so it carries no guarantee whatever its accounting says.

    Checks the Ed25519 signature (against ``public_key_path`` when given, else only against
    the key embedded in the certificate: integrity, not authorship), every file hash in the
    certificate and the manifest, every mechanism's rho and sensitivity re-derived from its
    parameters, the composition, and each epsilon. Never raises for a bad directory.
    """
    out = Path(out_dir)
    problems: list[str] = []
    if not out.is_dir():
        return [f"{out}: not a directory"]
    cert = _read_json(out / CERTIFICATE_FILE, "certificate", problems)
    if cert is None:
        return problems
    trusted = None
    if public_key_path is not None:
        try:
            trusted = load_public_key(Path(public_key_path))
        except SigningKeyError as error:
            problems.append(f"trusted key: {error}")
    try:
        verify_signature(cert, trusted)
    except SignatureError as error:
        problems.append(f"signature: {error}")
    if public_key_path is not None and trusted is None:
        problems.append("signature: not checked against a trusted key (it could not be read)")
    if cert.get("format") != CERTIFICATE_FORMAT \
            or cert.get("format_version") not in READABLE_FORMAT_VERSIONS:
        problems.append(f"certificate: unknown format {cert.get('format')!r} version "
                        f"{cert.get('format_version')!r}")
    if not isinstance(cert.get("seeded"), bool) or cert.get("for_release") != (
            not cert.get("seeded")):
        problems.append("certificate: seeded / for_release are missing or inconsistent")
    elif cert["seeded"] and not allow_seeded:
        problems.append(SEEDED_PROBLEM)
    files = cert.get("output_files")
    if isinstance(files, dict):
        for name in REQUIRED_OUTPUT_FILES:
            if name not in files:
                problems.append(f"certificate: {name} is not covered by the certificate")
    _check_hashes(out, files, "certificate", problems)
    manifest = _read_json(out / MANIFEST_FILE, "manifest", problems)
    if manifest is not None:
        _check_hashes(out, manifest.get("files"), "manifest", problems)
    try:
        _check_accounting(cert, problems)
        _check_coverage(out, cert, manifest, problems)
        config = cert.get("config")
        problems.extend(check_public_data(cert.get("public_data"),
                                          config if isinstance(config, dict) else {},
                                          required=cert.get("format_version") != 1))
    except Exception as error:  # a malformed certificate must be reported, never crash
        problems.append(f"certificate: malformed accounting ({type(error).__name__}: {error})")
    return problems


def _check_coverage(out: Path, cert: dict[str, Any], manifest: dict[str, Any] | None,
                    problems: list[str]) -> None:
    """Every text of the corpus comes from a charged cluster: the token mode writes one text
    per cluster (at least as many clusters charged as texts); the facts mode writes the notes
    of clusters whose fact histograms were released (at least as many charged as distinct
    ``cluster_keyword`` anchors in the corpus) and, with the token writer, one text per
    cluster it sampled (at least as many charged writer draws as texts). A cluster whose
    releases were drawn outside the ledger is missing from the certificate and caught here."""
    plan, config = cert.get("plan"), cert.get("config")
    plan = plan if isinstance(plan, dict) else {}
    config = config if isinstance(config, dict) else {}
    mechanisms = cert.get("mechanisms")
    groups = mechanisms.get("parallel_groups") if isinstance(mechanisms, dict) else None
    rows = manifest.get("rows") if isinstance(manifest, dict) else None
    if not isinstance(groups, list) or not isinstance(rows, int) or isinstance(rows, bool):
        return
    facts = (plan.get("generate") or config.get("generate")) == "facts"
    names = (CLUSTERS_GROUP, FACT_CLUSTERS_GROUP) if facts else (CLUSTERS_GROUP,)
    charged = {"any": 0, "discrete_gaussian": 0, "token_softmax": 0}
    for group in groups:
        if not isinstance(group, dict) or group.get("name") not in names:
            continue
        for part in group.get("partitions") or []:
            kinds = {r.get("mechanism") for r in (part.get("releases") or [])
                     if isinstance(r, dict)} if isinstance(part, dict) else set()
            charged["any"] += bool(kinds)
            for kind in ("discrete_gaussian", "token_softmax"):
                charged[kind] += kind in kinds
    if not facts:
        if rows > charged["any"]:
            problems.append(f"coverage: the corpus holds {rows} texts, one per cluster, but "
                            f"{charged['any']} clusters are charged: a cluster's releases "
                            "were drawn outside the ledger")
        return
    if (plan.get("writer") or config.get("writer")) == "tokens" \
            and rows > charged["token_softmax"]:
        problems.append(f"coverage: the corpus holds {rows} written texts but "
                        f"{charged['token_softmax']} clusters are charged writer draws: a "
                        "cluster's draws were made outside the ledger")
    anchors = _corpus_anchors(out)
    if anchors is not None and anchors > charged["discrete_gaussian"]:
        problems.append(f"coverage: the corpus holds notes of {anchors} clusters but "
                        f"{charged['discrete_gaussian']} fact histograms are charged: a "
                        "cluster's facts were released outside the ledger")


def _corpus_anchors(out: Path) -> int | None:
    """The number of distinct ``cluster_keyword`` values of the corpus (None if unreadable:
    the file checks report it)."""
    path = out / CORPUS_FILE
    if not path.is_file():
        return None
    import pyarrow.parquet as pq  # loaded for a facts corpus only

    try:
        column = pq.read_table(path, columns=["cluster_keyword"]).column("cluster_keyword")
    except (OSError, KeyError, ValueError):
        return None
    return len({value for value in column.to_pylist() if value is not None})


def _recorded_clip(config: Mapping[str, Any]) -> float | None:
    """The config's clip c as a number, or None where it is missing or not a number."""
    recorded = config.get("clip")
    return float(recorded) if isinstance(recorded, int | float) \
        and not isinstance(recorded, bool) else None
