"""The input's keyed fingerprint: did two builds read the same documents?"""

from __future__ import annotations

import hashlib
import hmac

from dpsynrag.io.documents import InputDocuments

__all__ = ["input_fingerprint"]

_FINGERPRINT_DOMAIN = b"dpsynrag/input-fingerprint/v1\x00"


def input_fingerprint(docs: InputDocuments, key: bytes) -> str:
    """HMAC-SHA256 (hex) over the sorted ``(id, sha256(text))`` pairs of ``docs``.

    A keyed hash: an operator holding ``key`` can check that two builds read the same input,
    while the value reveals nothing about the content to anyone without the key. Independent
    of record order; the encoding is length-prefixed, so it is unambiguous.
    """
    if not isinstance(key, bytes | bytearray) or len(key) == 0:
        raise ValueError("key must be non-empty bytes (32 random bytes recommended)")
    pairs = sorted((doc_id.encode("utf-8"), hashlib.sha256(text.encode("utf-8")).digest())
                   for doc_id, text in zip(docs.ids, docs.texts, strict=True))
    mac = hmac.new(bytes(key), _FINGERPRINT_DOMAIN, hashlib.sha256)
    mac.update(len(pairs).to_bytes(8, "big"))
    for doc_id, digest in pairs:
        mac.update(len(doc_id).to_bytes(8, "big"))
        mac.update(doc_id)
        mac.update(digest)
    return mac.hexdigest()
