"""Decoding the bytes of a text input file: the one decoder of every text format.

UTF-8, always strictly, a UTF-8 byte-order mark dropped. With :attr:`Decoding.utf16` a file
that starts with a UTF-16 byte-order mark is UTF-16; with :attr:`Decoding.fallback` (e.g.
``cp1252``) a line, or a whole ``.txt`` file, that is not valid UTF-8 is decoded with that
encoding instead (unknown bytes replaced). A problem names a byte offset, never the bytes.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, cast

__all__ = ["STRICT_UTF8", "Decoded", "Decoding", "decode_whole", "decoded_lines"]

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


@dataclass(frozen=True)
class Decoding:
    """How text files are decoded (public options): UTF-16 after its mark, a fallback."""

    fallback: str | None = None
    utf16: bool = False


STRICT_UTF8 = Decoding()
"""UTF-8 only (a byte-order mark dropped): ``build-corpus``'s in-process reader."""


@dataclass(frozen=True)
class Decoded:
    """One decoded line (1-based ``number``; -1: the rest of the file cannot be decoded) or
    a whole file (``number`` 1). ``problem`` is set when it is not valid; ``fallback`` when
    the fallback encoding decoded it."""

    number: int
    text: str
    problem: str | None = None
    fallback: bool = False


def _bom(head: bytes, decoding: Decoding) -> tuple[str | None, int]:
    """The encoding a byte-order mark announces and how many bytes to drop before UTF-8."""
    for bom, encoding in _BOMS:
        if head.startswith(bom) and (encoding == "utf-8" or decoding.utf16):
            return encoding, (len(bom) if encoding == "utf-8" else 0)
    return None, 0


def decoded_lines(handle: BinaryIO, decoding: Decoding, *, keep_bad: bool) -> Iterator[Decoded]:
    """Lines of a text file (terminators kept), decoded per the module docstring.

    A line that is not valid UTF-8 (and no fallback) comes with ``problem`` set and, when
    ``keep_bad``, its text decoded with ``surrogateescape`` (for the CSV parser to go on).
    """
    # a stream that can peek: the handle itself (a buffered file), else a buffer around it
    stream = cast(io.BufferedReader, handle if hasattr(handle, "peek")
                  else io.BufferedReader(cast(io.RawIOBase, handle)))
    encoding, skip = _bom(stream.peek(4)[:4], decoding)
    if encoding == "utf-16":
        text = io.TextIOWrapper(stream, encoding="utf-16", newline="")
        try:
            for number, line in enumerate(text, start=1):
                yield Decoded(number, line)
        except UnicodeDecodeError:
            yield Decoded(-1, "", "not valid UTF-16 after its byte-order mark")
        return
    stream.read(skip)
    offset = skip
    for number, raw in enumerate(stream, start=1):
        try:
            yield Decoded(number, raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            if decoding.fallback is not None:
                yield Decoded(number, raw.decode(decoding.fallback, errors="replace"),
                              fallback=True)
            else:
                yield Decoded(number, raw.decode("utf-8", "surrogateescape") if keep_bad else "",
                              f"not valid UTF-8 (byte offset {offset + error.start} in the file)")
        offset += len(raw)


def decode_whole(data: bytes, decoding: Decoding) -> Decoded:
    """A whole file's text (a ``.txt`` document), or its problem."""
    encoding, skip = _bom(data[:4], decoding)
    try:
        return Decoded(1, data[skip:].decode(encoding or "utf-8"))
    except UnicodeDecodeError as error:
        if decoding.fallback is None or encoding == "utf-16":
            return Decoded(1, "", f"not valid {(encoding or 'utf-8').upper()} "
                                  f"(byte offset {error.start + skip})")
        return Decoded(1, data.decode(decoding.fallback, errors="replace"), fallback=True)
