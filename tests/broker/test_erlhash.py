"""Erlang's phash2 and the consistent-hash exchange's jump hash, reproduced: values an
Erlang/OTP 25 VM gave (erlang:phash2/1; rand:seed_s(exs1024, {H,H,H}) and the jump hash of
rabbit_exchange_type_consistent_hash), and header fields decoded to the terms RabbitMQ
3.10.8's rabbit_binary_parser gives. Where ``erl`` is installed (RabbitMQ's), the slow
tests compare seeded random terms and header fields with it directly."""

from __future__ import annotations

import glob
import math
import random
import shutil
import struct
import subprocess

import pytest

from leveret.broker.exchanges.consistent_hash import _erlang_field
from leveret.broker.exchanges.erlhash import (
    Atom,
    Exs1024,
    jump_consistent_hash,
    make_hash2,
    phash2,
)
from leveret.protocol import table

A = Atom
UNDEFINED = Atom("undefined")

PHASH2 = [
    (b"", 13708901),
    (b"a", 112802447),
    (b"abc", 98228475),
    (b"key-1", 5452885),
    (b"hello world, this is long", 86224811),
    (b"0123456789ab", 115360506),
    (b"0123456789abc", 67923675),
    (Atom("undefined"), 45914356),
    ((Atom("longstr"), b"abc"), 101716503),
    ((Atom("signedint"), 5), 40839585),
    ((Atom("signedint"), -5), 39932925),
    ((Atom("bool"), True), 32030443),
    # floats: the IEEE bits, -0.0 as 0.0
    (0.0, 20875736),
    (-0.0, 20875736),
    (1.5, 10380315),
    (-1.5, 13753666),
    (1e300, 119088650),
    (-2.2250738585072014e-308, 19782771),
    (5e-324, 107647591),
    (1.100000023841858, 76667693),  # the single 1.1 widened
    (3.4028234663852886e38, 88365680),
    # integers beyond 28 bits hash as bignums (64-bit digits)
    (1 << 27, 12354923),
    (-(1 << 27) - 1, 76739502),
    ((1 << 27) - 1, 112602999),
    (-(1 << 27), 69672967),
    (1 << 40, 13893919),
    (-(1 << 40), 48180921),
    ((1 << 64) - 1, 53435350),
    (-(1 << 63), 126213383),
    (1 << 64, 103122609),
    (1 << 100, 126219984),
    # lists: runs of 0..255 go in four at a time, then the empty list
    ([], 113427502),
    (([],), 30249041),
    ([0, 255], 46818295),
    ([1, 2, 3], 25788620),
    ([1, 2, 3, 4], 90049352),
    ([1, 2, 3, 4, 5], 66056394),
    ([256, 1], 111460725),
    ([1, A("a"), 2, 3], 73260087),
    ([b"a", []], 70137265),
    ([[]], 96416884),
    # header values as RabbitMQ's table_lookup returns them
    ((A("float"), 1.100000023841858), 56379829),
    ((A("double"), -0.0), 28702447),
    ((A("double"), 0.0), 28702447),
    ((A("double"), -2.5), 29892421),
    ((A("decimal"), (2, 12345)), 108016153),
    ((A("decimal"), (2, 4294967291)), 31571464),
    ((A("table"), []), 80606520),
    ((A("array"), []), 86211673),
    ((A("table"), [(b"a", A("float"), 1.5)]), 79980035),
    ((A("array"), [(A("longstr"), b"x"), (A("void"), UNDEFINED), (A("bool"), True)]), 118524119),
    (
        (
            A("table"),
            [
                (b"n", A("table"), []),
                (
                    b"arr",
                    A("array"),
                    [(A("double"), -2.5), (A("void"), UNDEFINED), (A("decimal"), (2, 4294967291))],
                ),
                (b"t", A("timestamp"), 1 << 63),
            ],
        ),
        1742816,
    ),
    ((A("long"), -(1 << 63)), 112631110),
    ((A("timestamp"), (1 << 64) - 1), 132064098),
    ((A("unsignedint"), 4294967295), 24982162),
]


def _f(value: float) -> bytes:
    return b"f" + struct.pack(">f", value)


def _d(value: float) -> bytes:
    return b"d" + struct.pack(">d", value)


def _decimal(scale: int, value: int) -> bytes:
    return b"D" + struct.pack(">Bi", scale, value)  # pika's: the value signed


# a header's wire value -> the term (and its phash2) RabbitMQ 3.10.8's
# rabbit_misc:table_lookup(rabbit_binary_parser:parse_table(...)) gave
FIELDS = [
    (_f(1.1), (A("float"), 1.100000023841858), 56379829),
    (_f(-0.0), (A("float"), -0.0), 98214220),
    (_d(-2.5), (A("double"), -2.5), 29892421),
    (_d(1e300), (A("double"), 1e300), 39779000),
    (_decimal(2, 12345), (A("decimal"), (2, 12345)), 108016153),
    (_decimal(2, -5), (A("decimal"), (2, 4294967291)), 31571464),
    (table.table([]), (A("table"), []), 80606520),
    (table.array([]), (A("array"), []), 86211673),
    (
        table.table(
            [
                ("a", _f(1.5)),
                ("n", table.table([])),
                ("arr", table.array([_d(-2.5), b"V", _decimal(2, -5)])),
                ("s", table.longstr("x")),
            ]
        ),
        (
            A("table"),
            [
                (b"a", A("float"), 1.5),
                (b"n", A("table"), []),
                (
                    b"arr",
                    A("array"),
                    [(A("double"), -2.5), (A("void"), UNDEFINED), (A("decimal"), (2, 4294967291))],
                ),
                (b"s", A("longstr"), b"x"),
            ],
        ),
        4090863,
    ),
    (
        table.array(
            [
                table.longstr("x"),
                b"t\x02",
                b"I" + struct.pack(">i", -7),
                table.array([]),
                table.table([("k", b"V")]),
            ]
        ),
        (
            A("array"),
            [
                (A("longstr"), b"x"),
                (A("bool"), True),
                (A("signedint"), -7),
                (A("array"), []),
                (A("table"), [(b"k", A("void"), UNDEFINED)]),
            ],
        ),
        121815256,
    ),
    (table.timestamp(1_700_000_000), (A("timestamp"), 1_700_000_000), 59280699),
    (b"L" + struct.pack(">q", -1), (A("long"), -1), 45337174),
    (table.long(1 << 62), (A("long"), 1 << 62), 45507489),
    (b"t\x02", (A("bool"), True), 32030443),
]

JUMP = {
    b"": (0, 0, 9, 45),
    b"a": (1, 1, 6, 47),
    b"abc": (1, 1, 5, 88),
    b"key-1": (1, 1, 1, 64),
    b"hello world, this is long": (1, 2, 2, 36),
    b"0123456789ab": (1, 1, 5, 5),
    b"0123456789abc": (1, 2, 7, 58),
}


@pytest.mark.parametrize(("term", "expected"), PHASH2)
def test_phash2(term: object, expected: int) -> None:
    assert phash2(term) == expected


@pytest.mark.parametrize("key", list(JUMP))
def test_jump_consistent_hash(key: bytes) -> None:
    got = tuple(jump_consistent_hash(phash2(key), n) for n in (2, 3, 10, 100))
    assert got == JUMP[key]


def test_exs1024_draws() -> None:
    rng = Exs1024(7, 7, 7)
    assert f"{rng.uniform():.17g} {rng.uniform():.17g}" == (
        "0.37838308512588215 0.98850308901766903"
    )


@pytest.mark.parametrize(("raw", "term", "expected"), FIELDS)
def test_header_fields_as_rabbitmq_decodes_them(raw: bytes, term: object, expected: int) -> None:
    got = _erlang_field(raw)
    assert got == term
    assert _shape(got) == _shape(term)  # atoms stay atoms, booleans booleans
    assert phash2(got) == expected


def _shape(term: object) -> object:
    if isinstance(term, (tuple, list)):
        return [type(term).__name__, *(_shape(t) for t in term)]
    return (type(term).__name__, term)


def test_fields_rabbitmq_cannot_decode_hash_by_their_bytes() -> None:
    for raw in (_d(math.nan), _f(math.inf), table.array([_d(-math.inf)]), b"F\0\0\0\x09\x01k"):
        assert _erlang_field(raw) == raw


def test_deep_nesting() -> None:
    raw = b"V"
    for _ in range(5000):
        raw = table.array([raw])
    term = _erlang_field(raw)
    for _ in range(5000):
        assert isinstance(term, tuple) and term[0] == "array"
        (term,) = term[1]
    assert term == (A("void"), UNDEFINED)
    assert 0 <= phash2(_erlang_field(raw)) < 1 << 27


def test_not_erlang_terms() -> None:
    for term in (math.nan, math.inf, None, {1: 2}):
        with pytest.raises(TypeError):
            phash2(term)


# ------------------------------------------------------------ against erl itself
ERL = shutil.which("erl")
RABBIT_COMMON = sorted(
    glob.glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbit_common-*/ebin")
)
_READ_LINES = (
    'L = fun L(Acc) -> case io:get_line("") of eof -> lists:reverse(Acc); '
    "Line -> L([binary:decode_hex(list_to_binary(string:trim(Line))) | Acc]) end end, "
)


def _erl(expression: str, inputs: list[bytes], *args: str) -> list[int]:
    """``expression`` (of ``B``, one input) in erl for each input, as integers."""
    assert ERL is not None
    prog = _READ_LINES + f'[io:format("~b~n", [{expression}]) || B <- L([])], halt().'
    out = subprocess.run(
        [ERL, "-noshell", *args, "-eval", prog],
        input="".join(b.hex() + "\n" for b in inputs),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [int(x) for x in out.split()]


def _etf(term: object) -> bytes:
    """The term in Erlang's external term format (term_to_binary)."""
    return b"\x83" + _etf_body(term)


def _etf_body(t: object) -> bytes:
    if isinstance(t, (Atom, bool)):
        name = (t if isinstance(t, Atom) else str(t).lower()).encode()
        return b"w" + bytes((len(name),)) + name  # SMALL_ATOM_UTF8_EXT
    if isinstance(t, int):
        if 0 <= t <= 255:
            return b"a" + bytes((t,))
        mag = abs(t)
        digits = mag.to_bytes((mag.bit_length() + 7) // 8, "little")
        return b"n" + bytes((len(digits), t < 0)) + digits  # SMALL_BIG_EXT
    if isinstance(t, float):
        return b"F" + struct.pack(">d", t)
    if isinstance(t, bytes):
        return b"m" + struct.pack(">I", len(t)) + t
    if isinstance(t, tuple):
        return b"h" + bytes((len(t),)) + b"".join(_etf_body(x) for x in t)
    if isinstance(t, list):
        if not t:
            return b"j"
        return b"l" + struct.pack(">I", len(t)) + b"".join(_etf_body(x) for x in t) + b"j"
    raise TypeError(t)


def _random_float(rnd: random.Random) -> float:
    while True:
        kind = rnd.randrange(3)
        if kind == 0:
            value = struct.unpack(">d", rnd.randbytes(8))[0]
        elif kind == 1:
            value = struct.unpack(">f", rnd.randbytes(4))[0]
        else:
            value = rnd.choice([0.0, -0.0, 1.0, -1.0, 0.1, 1e300, -5e-324, 123.456])
        if math.isfinite(value):
            return float(value)


def _random_int(rnd: random.Random) -> int:
    kind = rnd.randrange(4)
    if kind == 0:
        return rnd.randrange(256)
    if kind == 1:
        return rnd.randrange(-(1 << 27), 1 << 27)
    if kind == 2:
        return rnd.choice([1 << 27, -(1 << 27) - 1, (1 << 59) - 1, -(1 << 59), (1 << 64) - 1])
    return rnd.randrange(-(1 << rnd.randrange(1, 200)), 1 << rnd.randrange(1, 200))


def _random_term(rnd: random.Random, depth: int = 0) -> object:
    kind = rnd.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return _random_int(rnd)
    if kind == 1:
        return _random_float(rnd)
    if kind == 2:
        return rnd.randbytes(rnd.randrange(30))
    if kind == 3:
        return rnd.choice([UNDEFINED, A("table"), A("longstr"), True, False])
    if kind == 4:  # a list with runs of bytes
        head = [rnd.randrange(256) for _ in range(rnd.randrange(10))]
        tail = [rnd.randrange(256) for _ in range(rnd.randrange(6))]
        return [*head, *([_random_term(rnd, depth + 1)] if rnd.random() < 0.5 else []), *tail]
    if kind == 5:
        return [_random_term(rnd, depth + 1) for _ in range(rnd.randrange(5))]
    return tuple(_random_term(rnd, depth + 1) for _ in range(rnd.randrange(5)))


def _random_field(rnd: random.Random, depth: int = 0) -> bytes:
    tag = rnd.choice("bBsuIilLTfdDtVSxFA" if depth < 3 else "bBsuIilLTfdDtVSx")
    sizes = {"b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "l": 8, "L": 8, "T": 8, "D": 5}
    if tag in sizes:
        return tag.encode() + rnd.randbytes(sizes[tag])
    if tag in "fd":
        while True:  # any finite value's bits (RabbitMQ cannot decode NaN or infinity)
            raw = tag.encode() + rnd.randbytes(4 if tag == "f" else 8)
            if math.isfinite(struct.unpack(">" + tag, raw[1:])[0]):
                return raw
    if tag == "t":
        return b"t" + bytes((rnd.choice([0, 1, 2, 255]),))
    if tag == "V":
        return b"V"
    if tag in "Sx":
        body = rnd.randbytes(rnd.randrange(20))
        return tag.encode() + struct.pack(">I", len(body)) + body
    n = rnd.choice([0, 1, 2, 4])
    if tag == "F":
        return table.table([(f"k{i}", _random_field(rnd, depth + 1)) for i in range(n)])
    return table.array([_random_field(rnd, depth + 1) for _ in range(n)])


@pytest.mark.slow
@pytest.mark.skipif(ERL is None, reason="needs erl")
def test_random_terms_against_erl() -> None:
    rnd = random.Random(25)
    terms = [_random_term(rnd) for _ in range(1000)]
    expected = _erl("erlang:phash2(binary_to_term(B), 1 bsl 32)", [_etf(t) for t in terms])
    assert [make_hash2(t) for t in terms] == expected


@pytest.mark.slow
@pytest.mark.skipif(ERL is None or not RABBIT_COMMON, reason="needs erl and RabbitMQ")
def test_random_header_fields_against_rabbitmq_parser() -> None:
    rnd = random.Random(3108)
    fields = [_random_field(rnd) for _ in range(1000)]
    lookup = (
        "erlang:phash2(rabbit_misc:table_lookup("
        'rabbit_binary_parser:parse_table(<<1, "h", B/binary>>), <<"h">>))'
    )
    expected = _erl(lookup, fields, "-pa", RABBIT_COMMON[-1])
    assert [phash2(_erlang_field(f)) for f in fields] == expected
