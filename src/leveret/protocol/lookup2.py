"""Bob Jenkins' lookup2 hash as ERTS's ``make_hash2`` (``erlang:phash2``) mixes terms
with it: the mix of three 32-bit words and the hash of a block of bytes. The osiris
chunk's Bloom filter (:mod:`leveret.protocol.stream.bloom`) and the consistent-hash
exchange (``leveret.broker.exchanges.erlhash``) both hash with it.

No project imports and no I/O."""

from __future__ import annotations

M32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9  # make_hash2's HCONST: the golden ratio


def mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    """lookup2's ``mix(a, b, c)``, on 32-bit words (unrolled: it runs per 12 bytes)."""
    a = (a - b - c) & M32
    a ^= c >> 13
    b = (b - c - a) & M32
    b ^= (a << 8) & M32
    c = (c - a - b) & M32
    c ^= b >> 13
    a = (a - b - c) & M32
    a ^= c >> 12
    b = (b - c - a) & M32
    b ^= (a << 16) & M32
    c = (c - a - b) & M32
    c ^= b >> 5
    a = (a - b - c) & M32
    a ^= c >> 3
    b = (b - c - a) & M32
    b ^= (a << 10) & M32
    c = (c - a - b) & M32
    c ^= b >> 15
    return a, b, c


def block_hash(data: bytes, initval: int) -> int:
    """lookup2's hash of ``data`` (little-endian words) from ``initval``."""
    a = b = GOLDEN
    c = initval & M32
    n = len(data)
    i = 0
    while n - i >= 12:
        a = (a + int.from_bytes(data[i : i + 4], "little")) & M32
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & M32
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & M32
        a, b, c = mix(a, b, c)
        i += 12
    c = (c + n) & M32
    tail = data[i:]
    if len(tail) > 8:  # the first byte of c is the length's: the tail's 8..10 go above it
        c = (c + (int.from_bytes(tail[8:], "little") << 8)) & M32
    if len(tail) > 4:
        b = (b + int.from_bytes(tail[4:8], "little")) & M32
    if tail:
        a = (a + int.from_bytes(tail[:4], "little")) & M32
    return mix(a, b, c)[2]
