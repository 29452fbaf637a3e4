"""The two Erlang functions RabbitMQ's consistent-hash exchange picks a bucket with, so
that a key lands in the same bucket as on RabbitMQ: ``erlang:phash2/1`` (ERTS's
``make_hash2``, for the terms the exchange can be given to hash) and the jump consistent
hash it draws from ``rand``'s ``exs1024`` generator seeded with that hash.

Erlang terms are written as Python values: ``bytes`` (or ``str``, taken as UTF-8) for a
binary, :class:`Atom` for an atom (``True``/``False`` for ``true``/``false``), ``int`` for
an integer of any size, ``float`` for a float (finite: Erlang has no NaN or infinity),
``tuple`` for a tuple and ``list`` for a proper list (``[]`` is the empty list).

Written from the published algorithms (Bob Jenkins' lookup2 block hash as ERTS mixes
terms with it, hashpjw for atom names, xorshift1024* / xorshift64* as OTP's rand seeds
and steps them) and checked against a running Erlang VM (OTP 25) in the tests."""

from __future__ import annotations

import math
import struct

from leveret.protocol.lookup2 import GOLDEN as HCONST
from leveret.protocol.lookup2 import M32, block_hash, mix

M64 = 0xFFFFFFFFFFFFFFFF
# HCONST is the golden ratio; the others are its multiples mod 2^32
HCONST_2 = 0x3C6EF372
HCONST_3 = 0xDAA66D2B
HCONST_4 = 0x78DDE6E4
HCONST_9 = 0x8FF34781
HCONST_10 = 0x2E2AC13A
HCONST_11 = 0xCC623AF3
HCONST_12 = 0x6A99B4AC
HCONST_13 = 0x08D12E65
_NIL_FIRST = 3468870702  # the empty list's hash when nothing was hashed before it
_NIL_TAG = 2  # the empty list's type number, mixed in after other terms
_PHASH2_RANGE = 1 << 27
_DOUBLE = struct.Struct("<d")


class Atom(str):
    """An Erlang atom (a plain ``str`` stands for a binary)."""


class _Rest:
    """The rest of a list still to hash: ``items[start:]``, then the empty list."""

    __slots__ = ("items", "start")

    def __init__(self, items: list[object], start: int) -> None:
        self.items = items
        self.start = start


def _uint32_hash(value: int, const: int, hash_: int) -> int:
    a = (const + (value & M32)) & M32
    b = const & M32
    return mix(a, b, hash_)[2]


def _uint32_hash_2(x: int, y: int, const: int, hash_: int) -> int:
    a = (const + (x & M32)) & M32
    b = (const + (y & M32)) & M32
    return mix(a, b, hash_)[2]


def atom_hash(name: str) -> int:
    """hashpjw over the atom's name (ERTS's atom table hash)."""
    h = 0
    for v in name.encode("latin-1", "replace"):
        h = ((h << 4) + v) & M32
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
            h ^= g
    return h


def _integer(value: int, hash_: int) -> int:
    if -(1 << 27) <= value < (1 << 27):
        if value < 0:
            hash_ = _uint32_hash(-value, HCONST, hash_)  # negatives are mixed twice
        return _uint32_hash(value & M32, HCONST, hash_)
    # beyond 28 bits: as a bignum, its magnitude's 64-bit digits from the least
    # significant, each as two 32-bit halves (low, high)
    const, t = (HCONST_10, -value) if value < 0 else (HCONST_11, value)
    while True:
        hash_ = _uint32_hash_2(t & M32, (t >> 32) & M32, const, hash_)
        t >>= 64
        if not t:
            return hash_


def _float(value: float, hash_: int) -> int:
    if not math.isfinite(value):
        raise TypeError(f"{value!r} is not an Erlang float")
    if value == 0.0:
        value = 0.0  # -0.0 hashes as 0.0
    bits = int.from_bytes(_DOUBLE.pack(value), "little")
    return _uint32_hash_2(bits >> 32, bits & M32, HCONST_12, hash_)


def make_hash2(term: object) -> int:
    """ERTS make_hash2 for binaries, atoms, integers, floats, tuples and proper lists
    (see the module's docstring for how they are written)."""
    hash_ = 0
    stack: list[object] = [term]
    while stack:
        term = stack.pop()
        if isinstance(term, list):
            term = _Rest(term, 0)
        if isinstance(term, _Rest):
            # a run of small integers 0..255 (a string) goes in four bytes at a time,
            # big-endian; the first other element is hashed on its own, then the rest
            # of the list (a new run); the empty list ends it
            items, i = term.items, term.start
            n = len(items)
            packed = count = 0
            while i < n:
                item = items[i]
                if type(item) is not int or not 0 <= item <= 255:
                    break
                packed = ((packed << 8) | item) & M32
                i += 1
                count += 1
                if count == 4:
                    hash_ = _uint32_hash(packed, HCONST_4, hash_)
                    packed = count = 0
            if count:
                hash_ = _uint32_hash(packed, HCONST_4, hash_)
            if i < n:
                stack.append(_Rest(items, i + 1))
                stack.append(items[i])
            else:
                hash_ = _NIL_FIRST if hash_ == 0 else _uint32_hash(_NIL_TAG, HCONST_2, hash_)
            continue
        if isinstance(term, Atom):
            h = atom_hash(str(term))
            hash_ = h if hash_ == 0 else _uint32_hash(h, HCONST_3, hash_)
        elif isinstance(term, bool):
            stack.append(Atom("true" if term else "false"))
        elif isinstance(term, int):
            hash_ = _integer(term, hash_)
        elif isinstance(term, float):
            hash_ = _float(term, hash_)
        elif isinstance(term, (str, bytes, bytearray, memoryview)):
            data = term.encode() if isinstance(term, str) else bytes(term)
            con = (HCONST_13 + hash_) & M32
            hash_ = block_hash(data, con) if data else con
        elif isinstance(term, tuple):
            hash_ = _uint32_hash(len(term), HCONST_9, hash_)
            stack.extend(reversed(term))
        else:
            raise TypeError(f"cannot hash {term!r} as Erlang would")
    return hash_


def phash2(term: object) -> int:
    """erlang:phash2/1."""
    return make_hash2(term) % _PHASH2_RANGE


class Exs1024:
    """rand's exs1024 (xorshift1024*), seeded from a triple as ``rand:seed_s``."""

    __slots__ = ("_p", "_s")

    def __init__(self, a1: int, a2: int, a3: int) -> None:
        mask21 = (1 << 21) - 1
        b1 = (((a1 & mask21) + 1) * 2097131) & mask21
        b2 = (((a2 & mask21) + 1) * 2097133) & mask21
        b3 = (((a3 & mask21) + 1) * 2097143) & mask21
        r = (b1 << 43) | (b2 << 22) | (b3 << 1) | 1
        out: list[int] = []
        for _ in range(16):
            r ^= r >> 12
            r ^= (r << 25) & M64
            r ^= r >> 27
            out.append((r * 2685821657736338717) & M64)
        # rand keeps the list newest first: [X16, ..., X1]
        self._s = out[::-1]
        self._p = 0

    def next(self) -> int:
        s = self._s
        p = self._p
        s0 = s[p]
        p = (p + 1) & 15
        s1 = s[p]
        s1 ^= (s1 << 31) & M64
        s1 ^= s1 >> 11
        s0 ^= s0 >> 30
        s[p] = s0 ^ s1
        self._p = p
        return (s[p] * 1181783497276652981) & M64

    def uniform(self) -> float:
        """A float in [0, 1]: the 64-bit value over 2^64, as rand's exs1024 handler."""
        return self.next() / 18446744073709551616.0


def jump_consistent_hash(key: int, buckets: int) -> int:
    """rabbit_exchange_type_consistent_hash:jump_consistent_hash/2 for an integer key."""
    if buckets == 1:
        return 0
    rng = Exs1024(key, key, key)
    b, j = -1, 0
    while j < buckets:
        b = j
        r = rng.uniform()
        j = int((b + 1) / r) if r > 0 else buckets
    return b
