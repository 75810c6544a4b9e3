"""A ``.txt`` file is one document; its id is its path relative to the input directory.

The id is that path with POSIX separators and without the ``.txt`` suffix. ``text_column``
and ``id_column`` do not apply.
"""

from __future__ import annotations

from dpsynrag.io.decoding import Decoding, decode_whole
from dpsynrag.io.records import BadRow, RawRecord

__all__ = ["SUFFIX", "read_txt"]

SUFFIX = ".txt"


def read_txt(data: bytes, file: str, relative: str, decoding: Decoding) -> RawRecord | BadRow:
    """The one record of a ``.txt`` file's bytes (``relative``: its path in the input)."""
    where = f"file {relative}"
    decoded = decode_whole(data, decoding)
    if decoded.problem is not None:
        return BadRow(where, decoded.problem)
    doc_id = relative[:-len(SUFFIX)] if relative.lower().endswith(SUFFIX) else relative
    return RawRecord(file, where, decoded.text, doc_id, None, decoded.fallback)
