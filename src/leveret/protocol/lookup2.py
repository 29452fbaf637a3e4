"""Bob Jenkins' lookup2 hash, as the Erlang runtime's ``make_hash2`` (``erlang:phash2``)
mixes terms with it: the one copy both of its users share, the consistent-hash exchange's
term hash (:mod:`leveret.broker.exchanges.erlhash`) and a stream chunk's Bloom filter
(:mod:`leveret.protocol.stream.bloom`). It lives at the lowest layer so that both may
import it. Words are unsigned 32-bit integers; bytes are read little-endian, 12 at a time."""

from __future__ import annotations

M32 = 0xFFFFFFFF
#: The golden ratio, lookup2's starting value; make_hash2's other constants are its
#: multiples mod 2^32.
GOLDEN = 0x9E3779B9

# each round of mix: how far a, b and c are shifted (right, left, right)
_ROUNDS = ((13, 8, 13), (12, 16, 5), (3, 10, 15))


def mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    """lookup2's ``mix(a, b, c)`` of three 32-bit words."""
    for ra, lb, rc in _ROUNDS:
        a = ((a - b - c) & M32) ^ (c >> ra)
        b = ((b - c - a) & M32) ^ ((a << lb) & M32)
        c = ((c - a - b) & M32) ^ (b >> rc)
    return a, b, c


def block_hash(data: bytes, initval: int) -> int:
    """lookup2's hash of ``data``, starting from ``initval``."""
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
    if len(tail) > 8:  # the first byte of c is the length: bytes 8..10 go in above it
        c = (c + (int.from_bytes(tail[8:], "little") << 8)) & M32
    if len(tail) > 4:
        b = (b + int.from_bytes(tail[4:8], "little")) & M32
    if tail:
        a = (a + int.from_bytes(tail[:4], "little")) & M32
    return mix(a, b, c)[2]
