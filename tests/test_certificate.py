"""The certificate: built from the ledger, signed, verified; every tampering is reported."""

from __future__ import annotations

import copy
import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from declared_noise import as_drawn

from dpsynrag.accounting import Charge, Ledger, epsilon_for, secure_rng
from dpsynrag.accounting.certificate import (
    NO_PLAN,
    SEEDED_PROBLEM,
    build_certificate,
    dp_accounting_epsilon,
    load_certificate,
    verify_output,
    write_certificate,
)
from dpsynrag.accounting.costs import token_rho
from dpsynrag.accounting.signing import (
    SignatureError,
    SigningKeyError,
    canonical_json,
    default_key_path,
    ensure_default_key,
    find_public_key,
    fingerprint,
    format_fingerprint,
    generate_keypair,
    load_private_key,
    load_public_key,
    public_key_path_for,
    sign_document,
    verify_signature,
)
from dpsynrag.io.output_files import output_file_hashes
from dpsynrag.transforms.emit import write_output
from dpsynrag.transforms.retrieval import retrieval_rho, retrieve_cluster

DELTA = 1e-3
SIGMA_H = 7.0710678118654755
SIGMA_MU = 7.45
EPS_THETA = 0.4
CLIP, TEMP, T = 0.1057, 1.0, 4
L = 2
PLAN = {"L": L, "T": T, "rho_total": 3.0, "sigma_h": SIGMA_H, "sigma_mu": SIGMA_MU,
        "eps_theta": EPS_THETA, "c_over_tau": CLIP / TEMP}


class FakeEmbedder:
    name = "fake"
    dimension = 4

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.array([[len(t) + 1.0, 1.0, (i % 3) + 0.5, 2.0] for i, t in enumerate(texts)],
                        dtype=np.float32)


def token_charge(r: int, tokens: int | None = None) -> Charge:
    params = {"clip": CLIP, "temperature": TEMP}
    if tokens is not None:
        params["tokens"] = tokens
    return Charge("d-prediction", "token_softmax", params, CLIP, "linf", group="clusters",
                  partition=f"cluster/{r:05d}")


def build_ledger(seed: int | None = 3, reserve: bool = True) -> Ledger:
    ledger = Ledger(rng=secure_rng(seed))
    hist = Charge("a-histogram", "discrete_gaussian",
                  {"sigma": SIGMA_H, "l2_sensitivity": math.sqrt(10)}, math.sqrt(10), "l2")
    ledger.release("histogram", hist, as_drawn(hist, np.zeros(6, dtype=np.int64)))
    ledger.declare_parallel_group("clusters", L, "each document in at most L clusters")
    rs = np.random.default_rng(0)
    for r, stop in ((0, None), (1, 2), (2, None)):
        emb = rs.standard_normal((5 + r, 8))
        retrieve_cluster(ledger, r, emb, sigma_mu=SIGMA_MU, eps_theta=EPS_THETA, k=3)
        made = T if stop is None else stop
        for n in range(made):
            ledger.release(f"cluster/{r:05d}/token/{n:03d}", token_charge(r), lambda rng: 7)
        if made < T and reserve:
            ledger.release(f"cluster/{r:05d}/token-reserve", token_charge(r, T - made),
                           lambda rng: None)
    return ledger


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "signing_key.pem"
    generate_keypair(path)
    return path


def make_output(tmp_path: Path, key: Path, ledger: Ledger | None = None,
                plan: dict | None = None) -> Path:
    ledger = build_ledger(seed=None) if ledger is None else ledger
    out = tmp_path / "out"
    out.mkdir()
    write_output(out, texts=["a b", "c", "d e f"], cluster_keywords=["x", "y", "z"],
                 kept=[True, False, True], token_counts=[4, 2, 4], embedder=FakeEmbedder())
    cert = build_certificate(
        ledger, delta=DELTA, conversion="bun-steinke", plan=PLAN if plan is None else plan,
        model_identity={"name": "tiny", "sha256": "11" * 32},
        embedder_identity={"name": "fake", "sha256": "22" * 32},
        vocabulary_sha256="33" * 32,
        output_files=output_file_hashes(out), seeded=False, package_version="0.1.0",
        created_at="2025-01-01T00:00:00+00:00",
        config={"state_dir": Path("/tmp/state"), "K": 10, "conversion": "bun-steinke"})
    write_certificate(out, sign_document(cert, load_private_key(key)))
    return out


def edit(out: Path, change, key: Path | None = None) -> None:
    """Apply ``change`` to the certificate; re-sign it with ``key`` if given."""
    cert = load_certificate(out / "certificate.json")
    change(cert)
    if key is not None:
        cert = sign_document(cert, load_private_key(key))
    write_certificate(out, cert)


# ---------------------------------------------------------------------- building
def test_certificate_content(tmp_path: Path, key: Path) -> None:
    ledger = build_ledger()
    out = make_output(tmp_path, key, ledger)
    cert = load_certificate(out / "certificate.json")
    rho_hist = 10 / (2 * SIGMA_H**2)
    per_cluster_full = retrieval_rho(SIGMA_MU, EPS_THETA) + T * token_rho(CLIP, TEMP)
    expected = rho_hist + L * per_cluster_full  # cluster 1 is charged T tokens too
    assert cert["composition"]["rho_total"] == ledger.total_rho()
    assert cert["composition"]["rho_total"] == pytest.approx(expected, rel=1e-12)
    assert cert["composition"]["rho_sequential"] == pytest.approx(rho_hist, rel=1e-12)
    assert cert["composition"]["parallel_groups"]["clusters"]["max_overlap"] == L
    g = cert["guarantee"]
    # the guarantee is the plan's (this hand-made plan records only its rho_total); the
    # releases' cost is stated beside it, and the difference is reserved
    assert g["basis"] == "plan" and g["rho"] == PLAN["rho_total"]
    assert g["rho_realised"] == cert["composition"]["rho_total"] < g["rho"]
    assert g["epsilon"] == epsilon_for(g["rho"], DELTA, "bun-steinke")
    assert g["epsilon_realised"] == epsilon_for(g["rho_realised"], DELTA, "bun-steinke")
    assert g["reserved"]["rho"] == pytest.approx(g["rho"] - g["rho_realised"], rel=1e-12)
    assert g["conversion"] == "bun-steinke" and "Bun" in g["conversion_reference"]
    assert g["epsilon_other_conversions"]["cks"] < g["epsilon"]
    assert g["cross_check"]["epsilon"] == pytest.approx(epsilon_for(g["rho"], DELTA, "cks"),
                                                         rel=1e-3)
    assert g["delta"] == DELTA and "add or remove" in g["neighbouring"]
    assert cert["seeded"] is True and cert["for_release"] is False  # the ledger was seeded
    assert "not for release" in cert["notice"]
    assert cert["config"]["state_dir"] == "/tmp/state"
    assert set(cert["output_files"]) == {"corpus.parquet", "index.faiss", "manifest.json"}
    assert "input_fingerprint" not in cert  # operator-side only (summary and state)

    [hist] = cert["mechanisms"]["sequential"]
    assert hist["key"] == "histogram" and hist["mechanism"] == "discrete_gaussian"
    assert hist["rho"] == pytest.approx(rho_hist, rel=1e-15)
    [group] = cert["mechanisms"]["parallel_groups"]
    assert group["name"] == "clusters" and group["max_overlap"] == L
    parts = {p["partition"]: p for p in group["partitions"]}
    assert list(parts) == ["cluster/00000", "cluster/00001", "cluster/00002"]
    summary = {(e["stage"], json.dumps(e["params"], sort_keys=True)): e["count"]
               for e in parts["cluster/00001"]["releases"]}
    assert summary == {
        ("c-noisy-sum", json.dumps({"grid_bits": 24, "l2_sensitivity": 1.0,
                                    "sigma": SIGMA_MU})): 1,
        ("c-threshold", json.dumps({"epsilon": EPS_THETA, "hi": 1.0, "k": 3, "lo": 0.0})): 1,
        ("d-prediction", json.dumps({"clip": CLIP, "temperature": TEMP})): 2,
        ("d-prediction", json.dumps({"clip": CLIP, "temperature": TEMP, "tokens": 2})): 1,
    }
    for part in parts.values():
        assert part["rho"] == pytest.approx(per_cluster_full, rel=1e-12)
    # the signed text is the canonical JSON of what is on disk
    verify_signature(cert, load_public_key(public_key_path_for(key)))


def test_unseeded_build_is_for_release(tmp_path: Path) -> None:
    ledger = build_ledger(seed=None)
    cert = build_certificate(
        ledger, delta=DELTA, conversion="cks", plan={}, model_identity={},
        embedder_identity={}, vocabulary_sha256="v",
        output_files={}, seeded=False, package_version="0.1.0", config={})
    assert cert["seeded"] is False and cert["for_release"] is True and "notice" not in cert
    assert cert["guarantee"]["conversion"] == "cks"
    assert set(cert["guarantee"]["epsilon_other_conversions"]) == {"bun-steinke"}
    assert cert["created_at"].endswith("+00:00")


def test_released_config_must_not_hold_the_seed() -> None:
    with pytest.raises(ValueError, match="seed"):
        build_certificate(build_ledger(), delta=DELTA, conversion="cks", plan={},
                          model_identity={}, embedder_identity={}, vocabulary_sha256="v",
                          output_files={}, seeded=True, package_version="0",
                          config={"seed": 3})


def test_seeded_output_fails_verification_unless_allowed(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key, build_ledger(seed=3))
    assert load_certificate(out / "certificate.json")["seeded"] is True
    assert verify_output(out) == [SEEDED_PROBLEM]
    assert verify_output(out, public_key_path_for(key)) == [SEEDED_PROBLEM]
    assert verify_output(out, allow_seeded=True) == []


def test_flipping_seeded_to_false_breaks_the_signature(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key, build_ledger(seed=3))

    def unseed(cert: dict) -> None:
        cert["seeded"], cert["for_release"] = False, True
        cert.pop("notice")

    edit(out, unseed)
    assert any(p.startswith("signature") for p in verify_output(out))


def test_dp_accounting_cross_check_agrees() -> None:
    for rho in (0.01, 0.3, 2.2012):
        ours = epsilon_for(rho, DELTA, "cks")
        theirs = dp_accounting_epsilon(rho, DELTA)
        assert ours <= theirs + 1e-9 and theirs == pytest.approx(ours, rel=1e-3)


# ---------------------------------------------------------------------- verification
def test_verify_ok(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)
    assert verify_output(out) == []
    assert verify_output(out, public_key_path_for(key)) == []


def test_wrong_trusted_key(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)
    other = tmp_path / "other" / "k.pem"
    generate_keypair(other)
    problems = verify_output(out, public_key_path_for(other))
    assert len(problems) == 1 and "trusted key" in problems[0]


def test_tampered_rho_is_reported(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)

    def change(cert: dict) -> None:
        cert["mechanisms"]["sequential"][0]["rho"] *= 0.5

    edit(out, change)  # not re-signed
    problems = verify_output(out)
    assert any(p.startswith("signature:") for p in problems)
    assert any("histogram" in p and "costs" in p for p in problems)


@pytest.mark.parametrize("what", ["param", "rho_each", "count", "overlap", "epsilon",
                                  "rho_total", "sensitivity", "delta_only"])
def test_resigned_tampering_is_still_caught_by_the_arithmetic(tmp_path: Path, key: Path,
                                                              what: str) -> None:
    """Even a forger holding the key cannot change the numbers: they are re-derived."""
    out = make_output(tmp_path, key)

    def change(cert: dict) -> None:
        group = cert["mechanisms"]["parallel_groups"][0]
        first = group["partitions"][0]["releases"]
        if what == "param":
            cert["mechanisms"]["sequential"][0]["params"]["sigma"] = 70.0
        elif what == "rho_each":
            first[-1]["rho_each"] /= 10
        elif what == "count":
            first[-1]["count"] -= 1
        elif what == "overlap":
            group["max_overlap"] = 1
            cert["composition"]["parallel_groups"]["clusters"]["max_overlap"] = 1
        elif what == "epsilon":
            cert["guarantee"]["epsilon"] = 1.0
        elif what == "rho_total":
            cert["composition"]["rho_total"] -= 0.1
            cert["guarantee"]["rho"] -= 0.1
        elif what == "sensitivity":
            first[0]["sensitivity"] = 0.5
        elif what == "delta_only":
            cert["guarantee"]["delta"] = 0.5

    edit(out, change, key=key)
    problems = verify_output(out, public_key_path_for(key))
    assert problems, what
    assert not any(p.startswith("signature:") for p in problems)


def test_changed_file_byte_is_reported(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)
    path = out / "corpus.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    problems = verify_output(out)
    assert any("certificate: corpus.parquet" in p for p in problems)
    assert any("manifest: corpus.parquet" in p for p in problems)


def test_changed_manifest_is_reported(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["rows"] = 99
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert any("manifest.json" in p for p in verify_output(out))


def test_missing_file_is_reported(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)
    (out / "index.faiss").unlink()
    problems = verify_output(out)
    assert any("index.faiss is missing" in p for p in problems)


def test_changed_signature_is_reported(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)

    def change(cert: dict) -> None:
        value = bytearray(__import__("base64").b64decode(cert["signature"]["value"]))
        value[0] ^= 1
        cert["signature"]["value"] = __import__("base64").b64encode(bytes(value)).decode()

    edit(out, change)
    problems = verify_output(out)
    assert problems == ["signature: invalid signature: the document was changed after signing "
                        "(or signed with another key)"]


def test_resigned_by_another_key_passes_only_without_a_trusted_key(tmp_path: Path,
                                                                   key: Path) -> None:
    out = make_output(tmp_path, key)
    forger = tmp_path / "forger" / "k.pem"
    generate_keypair(forger)
    edit(out, lambda cert: None, key=forger)
    assert verify_output(out) == []  # integrity only
    assert any("trusted key" in p for p in verify_output(out, public_key_path_for(key)))


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]", "{}"])
def test_missing_or_malformed_certificate(tmp_path: Path, key: Path, content: str | None) -> None:
    out = make_output(tmp_path, key)
    if content is None:
        (out / "certificate.json").unlink()
    else:
        (out / "certificate.json").write_text(content)
    problems = verify_output(out)
    assert problems and all(isinstance(p, str) for p in problems)


def test_garbage_inside_the_accounting_is_reported_not_raised(tmp_path: Path,
                                                             key: Path) -> None:
    out = make_output(tmp_path, key)

    def change(cert: dict) -> None:
        cert["mechanisms"]["parallel_groups"][0]["partitions"][0]["releases"][0] = "junk"
        cert["mechanisms"]["sequential"].append({"mechanism": "nope"})
        cert["guarantee"]["conversion"] = "magic"

    edit(out, change, key=key)
    problems = verify_output(out)
    assert any("malformed" in p for p in problems)


def test_plan_violations(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)

    def change(cert: dict) -> None:
        cert["plan"] = {"L": 3, "rho_total": 0.01}

    edit(out, change, key=key)
    problems = verify_output(out)
    assert any("planned" in p for p in problems)
    assert any("max_overlap" in p for p in problems)


def test_missing_reserve_charge_is_reported(tmp_path: Path, key: Path) -> None:
    """A cluster that stopped at EOS must still be charged T tokens (plan check)."""
    out = make_output(tmp_path, key, build_ledger(seed=None, reserve=False))
    problems = verify_output(out)
    assert problems == ["plan: cluster/00001 is charged 2 token draws, not T = 4 (the worst "
                        "case must be charged)"]


def test_other_noise_than_planned_is_reported(tmp_path: Path, key: Path) -> None:
    out = make_output(tmp_path, key)

    def change(cert: dict) -> None:
        cert["plan"].update(sigma_mu=1.0, eps_theta=1.0, c_over_tau=1.0, sigma_h=1.0)

    edit(out, change, key=key)
    problems = verify_output(out)
    for text in ("c-noisy-sum sigma", "c-threshold epsilon", "c/tau", "sigma_h"):
        assert any(text in p for p in problems), text


def test_not_a_directory(tmp_path: Path) -> None:
    assert verify_output(tmp_path / "nope") != []


# ---------------------------------------------------------------------- keys and signatures
def test_key_files(tmp_path: Path) -> None:
    path = tmp_path / "k" / "signing_key.pem"
    fp = generate_keypair(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    public = path.with_name("signing_key.pem.pub")  # keygen's name: <key>.pub, next to it
    assert public_key_path_for(path) == public and find_public_key(path) == public
    assert public.is_file() and not path.with_suffix(".pub").exists()
    assert fingerprint(load_public_key(public)) == fp == fingerprint(
        load_private_key(path).public_key())
    assert len(fp) == 64 and format_fingerprint(fp) == ":".join(fp[i:i + 4]
                                                                 for i in (0, 4, 8, 12))
    with pytest.raises(FileExistsError):
        generate_keypair(path)
    assert generate_keypair(path, force=True) != fp
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_private_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    generate_keypair(path)
    os.chmod(path, 0o644)
    with pytest.raises(SigningKeyError):
        load_private_key(path)
    load_private_key(path, strict_permissions=False)


def test_bad_key_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("hello")
    os.chmod(bad, 0o600)
    with pytest.raises(SigningKeyError):
        load_private_key(bad)
    with pytest.raises(SigningKeyError):
        load_public_key(bad)
    with pytest.raises(SigningKeyError):
        load_private_key(tmp_path / "missing.pem")


def test_public_key_formats(tmp_path: Path) -> None:
    import base64

    from cryptography.hazmat.primitives import serialization

    path = tmp_path / "k.pem"
    generate_keypair(path)
    key = load_private_key(path).public_key()
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    (tmp_path / "raw.txt").write_text(base64.b64encode(raw).decode() + "\n")
    ssh = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    (tmp_path / "id.pub").write_bytes(ssh + b" comment\n")
    for name in ("raw.txt", "id.pub"):
        assert fingerprint(load_public_key(tmp_path / name)) == fingerprint(key)


def test_default_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cfg" / "dpsynrag"
    monkeypatch.setenv("DPSYNRAG_CONFIG_DIR", str(config))
    assert default_key_path() == config / "signing_key.pem"
    key, fp, created = ensure_default_key()
    assert created and fp == fingerprint(key.public_key())
    assert stat.S_IMODE(config.stat().st_mode) == 0o700
    assert stat.S_IMODE((config / "signing_key.pem").stat().st_mode) == 0o600
    _, fp2, created2 = ensure_default_key()
    assert not created2 and fp2 == fp
    # its public key has keygen's name; a config dir from before keeps its signing_key.pub
    public = config / "signing_key.pem.pub"
    assert fingerprint(load_public_key(public)) == fp
    assert find_public_key(config / "signing_key.pem") == public
    public.rename(config / "signing_key.pub")
    assert ensure_default_key()[1] == fp
    assert find_public_key(config / "signing_key.pem") == config / "signing_key.pub"
    assert not public.exists()
    (config / "signing_key.pub").unlink()  # a missing public key is written again
    assert ensure_default_key()[1] == fp
    assert fingerprint(load_public_key(public)) == fp
    monkeypatch.delenv("DPSYNRAG_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_key_path() == tmp_path / "xdg" / "dpsynrag" / "signing_key.pem"


def test_sign_and_verify_documents(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    generate_keypair(path)
    key = load_private_key(path)
    doc = {"b": [1, 2.5, "é"], "a": {"z": None, "y": True}, "signature": "old"}
    signed = sign_document(doc, key)
    assert "signature" not in json.loads(canonical_json(signed))
    assert set(signed["signature"]) == {"algorithm", "public_key", "fingerprint", "value"}
    verify_signature(signed)
    verify_signature(json.loads(json.dumps(signed, indent=3)), key.public_key())
    for mutate in (lambda d: d["b"].append(3), lambda d: d.__setitem__("c", 1),
                   lambda d: d["signature"].__setitem__("fingerprint", "00"),
                   lambda d: d["signature"].__setitem__("algorithm", "rsa"),
                   lambda d: d["signature"].__setitem__("public_key", "!!"),
                   lambda d: d.pop("signature")):
        bad = copy.deepcopy(signed)
        mutate(bad)
        with pytest.raises(SignatureError):
            verify_signature(bad)
    with pytest.raises(SignatureError):
        verify_signature(["not", "a", "dict"])  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [None, 3])
def test_verify_cli_reports_seeded_and_fails_a_seeded_build(
        tmp_path: Path, key: Path, seed: int | None, capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.cli import main

    out = make_output(tmp_path, key, build_ledger(seed=seed))
    code = main(["verify", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["seeded"] is (seed is not None)
    assert report["ok"] is (seed is None) and code == (0 if seed is None else 1)
    assert main(["verify", str(out), "--allow-seeded"]) == 0
    printed = capsys.readouterr().out
    assert ("SEEDED" in printed) is (seed is not None)
    assert printed.startswith("OK: signature (embedded key: integrity only), ")


# ---------------------------------------------------------------------- approximate delta
def facts_plan() -> dict:
    from dpsynrag.accounting.planner import PlanRequest, plan_budget

    return plan_budget(PlanRequest(epsilon=10.0, delta=DELTA, L=L, rho_hist=0.1,
                                   conversion="bun-steinke", generate="facts")).as_dict()


def facts_ledger(plan: dict, seed: int | None = None, sigma_r: float | None = None) -> Ledger:
    """What a facts build charges: histogram, one phrase release, the role histogram (at
    ``sigma_r``, default the plan's), L-overlapping fact counts."""
    from dpsynrag.accounting.partition_selection import release_partitions
    from dpsynrag.facts.roles import release_roles

    ledger = Ledger(rng=secure_rng(seed))
    k_s, k_e = plan["K_s"], plan["K_e"]
    hist = Charge("a-histogram", "discrete_gaussian",
                  {"sigma": plan["sigma_h"], "l2_sensitivity": math.sqrt(k_s), "K": k_s,
                   "size": 6}, math.sqrt(k_s), "l2")
    ledger.release("histogram", hist, as_drawn(hist, np.zeros(6, dtype=np.int64)))
    release_partitions(ledger, "phrases", {"fever of unknown origin": 30, "rare drug": 1},
                       max_items=k_e, sigma=plan["sigma_A"], delta=plan["delta_phrases"])
    release_roles(ledger, [], ["fever of unknown origin"], K_e=k_e,
                  sigma=plan["sigma_R"] if sigma_r is None else sigma_r)
    ledger.declare_parallel_group("fact-clusters", L, "each document in at most L clusters")
    sens = math.sqrt(k_e + k_s)
    for r in range(3):
        facts = Charge("f-facts", "discrete_gaussian",
                       {"sigma": plan["sigma_C"], "l2_sensitivity": sens}, sens, "l2",
                       group="fact-clusters", partition=f"cluster/{r:05d}")
        ledger.release(f"cluster/{r:05d}/facts", facts, as_drawn(facts, [0, 1]))
    return ledger


def test_facts_certificate_converts_rho_at_delta_minus_delta_approx(tmp_path: Path,
                                                                    key: Path) -> None:
    plan = facts_plan()
    ledger = facts_ledger(plan)
    out = make_output(tmp_path, key, ledger, plan)
    cert = load_certificate(out / "certificate.json")
    approx = ledger.total_delta()
    assert 0 < approx <= plan["delta_phrases"]
    assert cert["composition"]["delta_approx_total"] == approx
    assert cert["composition"]["rho_total"] == pytest.approx(plan["rho_total"], rel=1e-12)
    g = cert["guarantee"]
    assert g["delta"] == DELTA and g["delta_approx"] == approx
    assert g["delta_conversion"] == DELTA - approx
    assert g["epsilon"] == epsilon_for(g["rho"], DELTA - approx, "bun-steinke")
    assert g["epsilon"] > epsilon_for(g["rho"], DELTA, "bun-steinke")
    assert g["epsilon"] <= 10.0 * (1 + 1e-12)  # the plan converted at delta - delta_phrases
    assert g["epsilon_other_conversions"]["cks"] == epsilon_for(g["rho"], DELTA - approx, "cks")
    assert "approximately" in g["definition"]
    [phrases] = [e for e in cert["mechanisms"]["sequential"] if e["key"] == "phrases"]
    assert phrases["delta"] == approx and phrases["params"]["threshold"] == plan["tau_A"]
    hist = cert["mechanisms"]["sequential"][0]
    assert "delta" not in hist
    assert verify_output(out, public_key_path_for(key)) == []


def test_a_role_histogram_under_the_planned_noise_is_reported(tmp_path: Path,
                                                              key: Path) -> None:
    """A build that drew the role histogram with less noise than planned (it would
    under-charge nothing, but the certificate would not be the plan's) fails verify."""
    plan = facts_plan()
    out = make_output(tmp_path, key, facts_ledger(plan, sigma_r=plan["sigma_R"] / 2), plan)
    problems = verify_output(out, public_key_path_for(key))
    assert any("role histogram's sigma" in p for p in problems), problems


@pytest.mark.parametrize("what", ["understated_delta", "threshold_down", "threshold_up",
                                  "entry_delta", "no_delta_approx_total", "epsilon_at_delta",
                                  "delta_conversion", "guarantee_delta_approx"])
def test_tampered_approximate_delta_is_reported(tmp_path: Path, key: Path, what: str) -> None:
    plan = facts_plan()
    out = make_output(tmp_path, key, facts_ledger(plan), plan)

    def change(cert: dict) -> None:
        [entry] = [e for e in cert["mechanisms"]["sequential"] if e["key"] == "phrases"]
        g = cert["guarantee"]
        if what == "understated_delta":
            entry["params"]["delta"] = entry["delta"] / 2
        elif what == "threshold_down":
            entry["params"]["threshold"] -= 1
        elif what == "threshold_up":
            entry["params"]["threshold"] += 1
        elif what == "entry_delta":
            entry["delta"] /= 2
        elif what == "no_delta_approx_total":
            del cert["composition"]["delta_approx_total"]
        elif what == "epsilon_at_delta":  # a forger pretending the delta is free
            g["epsilon"] = epsilon_for(g["rho"], DELTA, "bun-steinke")
            g["delta_approx"], g["delta_conversion"] = 0.0, DELTA
        elif what == "delta_conversion":
            g["delta_conversion"] = DELTA
        elif what == "guarantee_delta_approx":
            g["delta_approx"] = 0.0

    edit(out, change, key=key)
    problems = verify_output(out, public_key_path_for(key))
    assert problems, what
    assert not any(p.startswith("signature:") for p in problems)
    if what in ("understated_delta", "threshold_down"):
        assert any("smaller" in p for p in problems)
    if what == "threshold_up":
        assert any("approximate delta" in p for p in problems)


def test_grouped_partition_selection_composes_its_largest_deltas(tmp_path: Path,
                                                                 key: Path) -> None:
    from dpsynrag.accounting.partition_selection import selection_threshold

    ledger = Ledger()
    ledger.declare_parallel_group("clusters", L, "each document in at most L clusters")
    deltas = []
    for r, delta in ((0, 1e-6), (1, 1e-5), (2, 1e-4)):
        params = {"sigma": 2.0, "max_items": 2, "delta": delta,
                  "threshold": selection_threshold(2.0, 2, delta)}
        charge = Charge("f-phrases", "partition_selection", params, math.sqrt(2), "l2",
                        group="clusters", partition=f"cluster/{r:05d}")
        deltas.append(charge.delta)
        ledger.release(f"cluster/{r:05d}/phrases", charge, as_drawn(charge, {}))
    top = sorted(deltas, reverse=True)[:L]
    assert ledger.total_delta() == pytest.approx(sum(top), rel=1e-15)
    out = make_output(tmp_path, key, ledger, plan={})
    cert = load_certificate(out / "certificate.json")
    assert cert["composition"]["delta_approx_total"] == pytest.approx(sum(top), rel=1e-15)
    assert cert["composition"]["parallel_groups"]["clusters"]["delta"] == pytest.approx(
        sum(top), rel=1e-15)
    entries = [p["releases"][0] for p in cert["mechanisms"]["parallel_groups"][0]["partitions"]]
    assert [e["delta_each"] for e in entries] == deltas
    assert verify_output(out) == [NO_PLAN]  # the arithmetic holds; an empty plan is no plan

    def change(cert: dict) -> None:
        cert["mechanisms"]["parallel_groups"][0]["partitions"][2]["releases"][0][
            "delta_each"] /= 10

    edit(out, change, key=key)
    problems = verify_output(out)
    assert any("delta_each" in p for p in problems)


def test_older_certificate_without_the_delta_fields_still_verifies(tmp_path: Path,
                                                                   key: Path) -> None:
    out = make_output(tmp_path, key)
    cert = load_certificate(out / "certificate.json")
    assert cert["composition"]["delta_approx_total"] == 0.0
    assert cert["guarantee"]["delta_approx"] == 0.0
    assert cert["guarantee"]["delta_conversion"] == DELTA

    def strip(cert: dict) -> None:
        del cert["composition"]["delta_approx_total"]
        del cert["guarantee"]["delta_approx"]
        del cert["guarantee"]["delta_conversion"]

    edit(out, strip, key=key)
    assert verify_output(out, public_key_path_for(key)) == []


def test_a_facts_certificate_lists_its_own_stages_only(tmp_path: Path, key: Path) -> None:
    """A group declared but never released in (a facts build's token-mode "clusters") is not
    listed; what is not charged is said in the facts mode's stages."""
    from dpsynrag.accounting.certificate import NOT_CHARGED, NOT_CHARGED_FACTS

    plan = facts_plan()
    ledger = facts_ledger(plan)
    ledger.declare_parallel_group("unused", 1, "declared, never released in")
    out = make_output(tmp_path, key, ledger, plan)
    cert = load_certificate(out / "certificate.json")
    assert [g["name"] for g in cert["mechanisms"]["parallel_groups"]] == ["fact-clusters"]
    assert set(cert["composition"]["parallel_groups"]) == {"fact-clusters"}
    assert cert["not_charged"] == NOT_CHARGED_FACTS != NOT_CHARGED
    assert verify_output(out, public_key_path_for(key)) == []
    (tmp_path / "tokens").mkdir()
    token = load_certificate(make_output(tmp_path / "tokens", key) / "certificate.json")
    assert token["not_charged"] == NOT_CHARGED


def test_no_certificate_when_the_approximate_delta_reaches_delta() -> None:
    ledger = facts_ledger(facts_plan())
    with pytest.raises(ValueError, match="approximate delta"):
        build_certificate(ledger, delta=ledger.total_delta(), conversion="cks", plan={},
                          model_identity={}, embedder_identity={}, vocabulary_sha256="v",
                          output_files={}, seeded=False, package_version="0", config={})


def test_facts_plan_violations_are_reported(tmp_path: Path, key: Path) -> None:
    plan = facts_plan()
    out = make_output(tmp_path, key, facts_ledger(plan), plan)

    def change(cert: dict) -> None:
        cert["plan"].update(sigma_A=cert["plan"]["sigma_A"] * 2, tau_A=3,
                            sigma_C=cert["plan"]["sigma_C"] / 2, delta_phrases=1e-9)

    edit(out, change, key=key)
    problems = verify_output(out)
    for text in ("phrase release's sigma", "phrase release's threshold",
                 "over the planned delta_phrases", "sigma_C"):
        assert any(text in p for p in problems), text


# ---------------------------------------------------------------------- older builds
OLD_BUILD = Path(__file__).parent / "data" / "certificate-d08ac16"


def test_a_certificate_written_by_d08ac16_still_verifies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A token build made by commit d08ac16 (200 fictitious notes, R 3, T 3, statistical
    keywords, no filter) with its public key: verify re-derives its epsilon with today's code;
    a changed byte in its corpus fails the file hashes."""
    import shutil

    from dpsynrag.cli import main

    out = tmp_path / "corpus"
    shutil.copytree(OLD_BUILD, out)
    key = out / "signing-key.pub"
    assert main(["verify", str(out), "--public-key", str(key), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and not report["seeded"]
    data = bytearray((out / "corpus.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (out / "corpus.parquet").write_bytes(bytes(data))
    assert main(["verify", str(out), "--public-key", str(key)]) != 0
