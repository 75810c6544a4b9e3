"""Ed25519 signatures over canonical JSON: who vouches for a certificate, and that it is intact.

The signature covers ``canonical_json(doc without "signature")``: ``json.dumps`` with sorted
keys, no whitespace, UTF-8, no NaN/Infinity. Floats survive a JSON round trip (``repr``), so a
certificate read back from disk re-serialises to the same bytes.

The embedded ``public_key`` lets anyone check *integrity*; only a trusted public key (given
to ``verify_signature``) shows *who* signed, since a forger can re-sign with their own key.

Private keys are PEM (PKCS#8, unencrypted, for unattended nightly builds) with mode 0600 in a
0700 directory; public keys are PEM (SubjectPublicKeyInfo). A fingerprint is the hex sha256 of
the 32 raw public-key bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

CONFIG_ENV = "DPSYNRAG_CONFIG_DIR"
KEY_FILE = "signing_key.pem"
ALGORITHM = "ed25519"
SIGNATURE_FIELD = "signature"

__all__ = [
    "SignatureError",
    "SigningKeyError",
    "canonical_json",
    "default_key_path",
    "ensure_default_key",
    "find_public_key",
    "fingerprint",
    "format_fingerprint",
    "generate_keypair",
    "load_private_key",
    "load_public_key",
    "public_key_path_for",
    "sign_document",
    "verify_signature",
]


class SignatureError(ValueError):
    """A signature is missing, malformed, invalid, or made with an untrusted key."""


class SigningKeyError(RuntimeError):
    """A key file is missing, unreadable, of the wrong type or too widely readable."""


def canonical_json(doc: dict[str, Any]) -> bytes:
    """The signed bytes: ``doc`` without its signature, sorted keys, compact, UTF-8."""
    body = {k: v for k, v in doc.items() if k != SIGNATURE_FIELD}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """Hex sha256 of the raw 32-byte public key."""
    return hashlib.sha256(_raw(public_key)).hexdigest()


def format_fingerprint(value: str, groups: int = 4) -> str:
    """Short display form: the first ``4 * groups`` hex digits in groups of 4 (``ab12:cd34``)."""
    head = value[: 4 * groups]
    return ":".join(head[i:i + 4] for i in range(0, len(head), 4))


def public_key_path_for(private_path: Path) -> Path:
    """Where the public key of ``private_path`` goes: next to it, its name plus ``.pub``
    (``K.pem`` -> ``K.pem.pub``), for ``dpsynrag keygen`` and the default key alike."""
    private_path = Path(private_path)
    return private_path.with_name(private_path.name + ".pub")


def find_public_key(private_path: Path) -> Path | None:
    """The public key file next to ``private_path``: ``K.pem.pub``, else the name the default
    key's public half had before (``K.pub``, the suffix replaced), else None."""
    private_path = Path(private_path).expanduser()
    for public in (public_key_path_for(private_path), private_path.with_suffix(".pub")):
        if public != private_path and public.is_file():
            return public
    return None


def _write_new(path: Path, data: bytes, mode: int, force: bool) -> None:
    """Write ``data`` to ``path`` created with ``mode``; atomic replace only when ``force``."""
    if not force:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # an old temporary file keeps its mode otherwise
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def generate_keypair(private_path: Path, public_path: Path | None = None, *,
                     force: bool = False) -> str:
    """Create an Ed25519 key pair; return its fingerprint.

    The private key is written with mode 0600 (never group/world readable, not even briefly)
    and the public key next to it (``public_key_path_for``) unless ``public_path`` is given.
    Refuses to overwrite an existing file unless ``force``.
    """
    private_path = Path(private_path).expanduser()
    public_path = public_key_path_for(private_path) if public_path is None else \
        Path(public_path).expanduser()
    if public_path == private_path:
        raise ValueError("the public key path must differ from the private key path")
    if not force:
        for path in (private_path, public_path):
            if path.exists():
                raise FileExistsError(f"{path} exists; refusing to overwrite a key (use force)")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    private_path.parent.mkdir(parents=True, exist_ok=True)
    public_path.parent.mkdir(parents=True, exist_ok=True)
    _write_new(private_path, private_pem, 0o600, force)
    _write_new(public_path, public_pem, 0o644, force)
    return fingerprint(key.public_key())


def load_private_key(path: Path, *, strict_permissions: bool = True) -> Ed25519PrivateKey:
    """Read a PEM Ed25519 private key; refuse one readable by group or others (POSIX)."""
    path = Path(path).expanduser()
    try:
        info = path.stat()
        data = path.read_bytes()
    except OSError as error:
        raise SigningKeyError(f"{path}: cannot read the signing key: {error.strerror}") from None
    if strict_permissions and os.name == "posix" and stat.S_IMODE(info.st_mode) & 0o077:
        raise SigningKeyError(f"{path}: the signing key is readable by others "
                              f"(mode {stat.S_IMODE(info.st_mode):o}); run chmod 600")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise SigningKeyError(f"{path}: not an unencrypted PEM private key: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path}: not an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """Read an Ed25519 public key: PEM, OpenSSH (``ssh-ed25519 ...``) or base64 raw bytes."""
    path = Path(path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SigningKeyError(f"{path}: cannot read the public key: {error.strerror}") from None
    text = data.strip()
    try:
        if text.startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
        elif text.startswith(b"ssh-ed25519"):
            key = serialization.load_ssh_public_key(text)
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))
    except (ValueError, TypeError) as error:
        raise SigningKeyError(f"{path}: not an Ed25519 public key: {error}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path}: not an Ed25519 public key")
    return key


def default_key_path() -> Path:
    """``$DPSYNRAG_CONFIG_DIR/signing_key.pem``, else ``$XDG_CONFIG_HOME`` or ~/.config."""
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env).expanduser() / KEY_FILE
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "dpsynrag" / KEY_FILE


def ensure_default_key() -> tuple[Ed25519PrivateKey, str, bool]:
    """The default signing key, created on first use: ``(key, fingerprint, created)``.

    The config directory is created with mode 0700. The public key is ``signing_key.pem.pub``
    next to it (a config directory from before keeps its ``signing_key.pub``); one that is
    missing is written again from the private key.
    """
    path = default_key_path()
    created = False
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            generate_keypair(path)
            created = True
        except FileExistsError:  # another process created it meanwhile
            pass
    key = load_private_key(path)
    if find_public_key(path) is None:
        public_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        _write_new(public_key_path_for(path), public_pem, 0o644, force=True)
    return key, fingerprint(key.public_key()), created


def sign_document(doc: dict[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """A copy of ``doc`` with ``"signature"`` over its canonical JSON (an old one is replaced)."""
    public = private_key.public_key()
    signed = {k: v for k, v in doc.items() if k != SIGNATURE_FIELD}
    value = private_key.sign(canonical_json(signed))
    signed[SIGNATURE_FIELD] = {
        "algorithm": ALGORITHM,
        "public_key": base64.b64encode(_raw(public)).decode("ascii"),
        "fingerprint": fingerprint(public),
        "value": base64.b64encode(value).decode("ascii"),
    }
    return signed


def verify_signature(doc: dict[str, Any], public_key: Ed25519PublicKey | None = None) -> None:
    """Check the embedded signature; raise ``SignatureError`` with the reason if it fails.

    With ``public_key`` (the trusted key), the embedded key must be that key: otherwise the
    document could be re-signed by anyone.
    """
    if not isinstance(doc, dict):
        raise SignatureError("the document is not a JSON object")
    sig = doc.get(SIGNATURE_FIELD)
    if not isinstance(sig, dict):
        raise SignatureError("the document is not signed (no signature object)")
    if sig.get("algorithm") != ALGORITHM:
        raise SignatureError(f"unsupported signature algorithm {sig.get('algorithm')!r}")
    try:
        raw = base64.b64decode(str(sig["public_key"]), validate=True)
        value = base64.b64decode(str(sig["value"]), validate=True)
        embedded = Ed25519PublicKey.from_public_bytes(raw)
    except (KeyError, ValueError, TypeError) as error:
        raise SignatureError(f"malformed signature: {type(error).__name__}") from None
    if sig.get("fingerprint") != fingerprint(embedded):
        raise SignatureError("the signature's fingerprint does not match its public key")
    if public_key is not None and _raw(public_key) != raw:
        raise SignatureError(
            f"signed by key {format_fingerprint(fingerprint(embedded))}, not by the trusted key "
            f"{format_fingerprint(fingerprint(public_key))}")
    try:
        message = canonical_json(doc)
    except ValueError as error:
        raise SignatureError(f"the document cannot be serialised canonically: {error}") from None
    try:
        embedded.verify(value, message)
    except InvalidSignature:
        raise SignatureError("invalid signature: the document was changed after signing "
                             "(or signed with another key)") from None
