"""The Bloom filter an osiris chunk carries since RabbitMQ 3.13 (osiris_bloom, osiris
1.10.3 for RabbitMQ 4.2): what lets a reader with a stream filter skip chunks without
reading them.

A chunk's filter is ``size`` bytes (16 to 255; the stream's ``x-stream-filter-size-bytes``,
16 by default), stored between the chunk's header and its data; the header's byte 44 says
its size (0: no filter). Each distinct filter value of the chunk's messages sets two bits,
``h1 = phash2(value, bits - 1) + 1`` and ``h2 = phash2([value], bits - 1) + 1`` (Erlang's
portable term hash, of the value as a binary and of a list holding it); a message without
a filter value sets bit 0. A chunk none of whose messages has a filter value has no filter.
Bit ``n`` is bit ``7 - n % 8`` of byte ``n // 8`` (the most significant first, as an
Erlang bitstring reads it).

A reader's filter (its values and whether it takes messages without one) matches a
chunk's if any of its values has both bits set, or, taking messages without a value, if bit
0 is set; a chunk without a filter matches only a reader that takes messages without one.
The hashes depend on the filter's size, so a matcher computes them again for each size it
meets. False positives are a Bloom filter's nature: the client filters each message itself.

:func:`phash2` is ``erlang:phash2/2`` of a binary (its make_hash2: Bob Jenkins' lookup2
block hash seeded with a constant for binaries), and :func:`phash2_list` of a one-element
list ``[Binary]``; both were checked against the Erlang runtime (tests/protocol/
test_stream_bloom.py holds the vectors)."""

from __future__ import annotations

from collections.abc import Iterable

from leveret.protocol.lookup2 import M32, block_hash, mix

DEFAULT_SIZE = 16  # bytes
MIN_SIZE = 16
MAX_SIZE = 255

_BINARY = 0x08D12E65  # HCONST_13: a binary's seed (HCONST * 13 mod 2^32)
_NIL = 0x3C6EF372  # HCONST_2: the list's tail ([]) mixed in after its element
_NIL_DEF = 2  # the tag of [] as make_hash2 mixes it
_NIL_ALONE = 3468870702  # make_hash2 of [] after a zero hash


def _hash_binary(value: bytes) -> int:
    return block_hash(value, _BINARY) if value else _BINARY


def phash2(value: bytes, range_: int) -> int:
    """``erlang:phash2(Value, Range)`` of a binary: in ``[0, range_)``."""
    return _hash_binary(value) % range_


def phash2_list(value: bytes, range_: int) -> int:
    """``erlang:phash2([Value], Range)``: the binary, then the list's end, mixed."""
    h = _hash_binary(value)
    h = _NIL_ALONE if h == 0 else mix((_NIL + _NIL_DEF) & M32, _NIL, h)[2]
    return h % range_


def bit_positions(value: bytes, bits: int) -> tuple[int, int]:
    """The two bits ``value`` sets in a filter of ``bits`` bits (osiris_bloom:make_hash);
    a message without a value sets bit 0 (both)."""
    if not value:
        return 0, 0
    return phash2(value, bits - 1) + 1, phash2_list(value, bits - 1) + 1


def build(values: Iterable[bytes | None], size: int = DEFAULT_SIZE) -> bytes:
    """The filter of a chunk whose messages have these filter values (None or empty: no
    value), ``size`` bytes; empty when no message has a value (osiris_bloom:to_binary)."""
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"a filter is {MIN_SIZE} to {MAX_SIZE} bytes, not {size}")
    distinct = {v or b"" for v in values}
    if not distinct - {b""}:
        return b""
    bits = size * 8
    out = bytearray(size)
    for value in distinct:
        for n in bit_positions(value, bits):
            out[n >> 3] |= 0x80 >> (n & 7)
    return bytes(out)


def _is_set(n: int, bloom: bytes | memoryview) -> bool:
    return bool(bloom[n >> 3] & (0x80 >> (n & 7)))


class Matcher:
    """A reader's filter (osiris_bloom's matcher): ``values`` and whether messages without
    a value are wanted. :meth:`matches` says whether a chunk with filter ``bloom`` may hold
    a message the reader wants."""

    __slots__ = ("_hashes", "match_unfiltered", "values")

    def __init__(self, values: Iterable[bytes], match_unfiltered: bool = False) -> None:
        self.values = tuple(values)
        self.match_unfiltered = match_unfiltered
        self._hashes: dict[int, list[tuple[int, int]]] = {}  # by filter size in bits

    def matches(self, bloom: bytes | memoryview) -> bool:
        if not bloom:  # no message of the chunk has a filter value
            return self.match_unfiltered
        bits = len(bloom) * 8
        hashes = self._hashes.get(bits)
        if hashes is None:
            hashes = self._hashes[bits] = [bit_positions(v, bits) for v in self.values]
            if self.match_unfiltered:
                hashes.insert(0, (0, 0))
        return any(_is_set(h1, bloom) and _is_set(h2, bloom) for h1, h2 in hashes)

    def __repr__(self) -> str:
        return f"Matcher({self.values!r}, match_unfiltered={self.match_unfiltered})"
