"""One gzip member (RFC 1952) from deflate pieces compressed earlier and a tail compressed now.

The cluster-state families are most of a scrape (30 MB of text at 50,000 pods, 0.2-0.6 s to compress at level 1
on a busy core); most of them are unchanged from one publication to the next (the pod lines change only for the
pods that changed), while prometheus_client's registry is written afresh on every scrape. A raw deflate stream
(RFC 1951) ended with a sync flush is byte-aligned and not final, and a stream from a fresh compressor refers to
nothing before it, so pieces compressed apart and concatenated are one valid deflate stream (pigz joins its
blocks so): a publication compresses only the parts whose text changed. The member's CRC-32 runs over the
pieces' text in order and continues over the tail (zlib's CRC-32 costs ~10 ms per 30 MB, a small share of
compressing it).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

#: the scrape's compression level: level 1 takes ~50 ms on 30 MB of series on an idle core, gzip's default (9)
#: ~4 times that
LEVEL = 1
#: gzip's header: magic, deflate, no flags, no mtime, no extra flags, OS unknown
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


@dataclass(frozen=True, slots=True)
class Piece:
    """``text`` as raw deflate data ending in a sync flush (another stream may follow it)."""

    text: bytes
    deflated: bytes


def deflate(text: bytes, level: int = LEVEL) -> Piece:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return Piece(text, compressor.compress(text) + compressor.flush(zlib.Z_SYNC_FLUSH))


def reuse(text: bytes, kept: Piece | None, level: int = LEVEL) -> Piece:
    """``kept`` when it holds the same text (the same object: one pointer comparison), else ``text`` compressed."""
    return kept if kept is not None and (kept.text is text or kept.text == text) else deflate(text, level)


@dataclass(frozen=True, slots=True)
class Body:
    """Pieces in the order they are served, with the CRC-32 and length of their text."""

    pieces: tuple[Piece, ...]
    crc: int
    length: int

    @classmethod
    def of(cls, pieces: Sequence[Piece]) -> Body:
        crc = length = 0
        for piece in pieces:
            crc = zlib.crc32(piece.text, crc)
            length += len(piece.text)
        return cls(tuple(pieces), crc, length)

    def text(self) -> bytes:
        return b"".join(piece.text for piece in self.pieces)


def member(body: Body, tail: bytes, level: int = LEVEL) -> bytes:
    """The gzip member of ``body``'s text followed by ``tail``."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    rest = compressor.compress(tail) + compressor.flush(zlib.Z_FINISH)
    trailer = struct.pack("<II", zlib.crc32(tail, body.crc), (body.length + len(tail)) & 0xFFFFFFFF)
    return b"".join((HEADER, *(piece.deflated for piece in body.pieces), rest, trailer))
