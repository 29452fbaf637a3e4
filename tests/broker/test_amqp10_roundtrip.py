"""Round trips, as RabbitMQ 4.2 makes them: a message published over AMQP 1.0 and
delivered over AMQP 1.0 keeps its bare message byte for byte, its annotations and its
header's durable/priority/ttl; one published over AMQP 0-9-1, delivered over AMQP 1.0 and
published again over AMQP 1.0, reaches an AMQP 0-9-1 consumer with what RabbitMQ keeps
(written out here as its own model). And whatever bytes a transfer carries, parsing them
either works or raises the error RabbitMQ answers with, never another exception."""

from __future__ import annotations

import struct
import urllib.parse

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.broker import amqp10_delivery, amqp10_message
from leveret.broker.amqp10_message import Amqp10Error
from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from tests.broker.amqp10_helpers import sections
from tests.support.tiers import examples

_text = st.text(st.characters(min_codepoint=1, max_codepoint=0x2FF), max_size=12)
_key = st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), min_size=1, max_size=8)
_simple: st.SearchStrategy[Value] = st.one_of(
    _text.map(lambda s: ("string", s)),
    _text.map(lambda s: ("symbol", s.encode("ascii", "ignore").decode())),
    st.binary(max_size=12).map(lambda b: ("binary", b)),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: ("long", n)),
    st.integers(0, 2**64 - 1).map(lambda n: ("ulong", n)),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: ("int", n)),
    st.integers(0, 255).map(lambda n: ("ubyte", n)),
    st.integers(-128, 127).map(lambda n: ("byte", n)),
    st.booleans().map(lambda b: ("bool", b)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: ("double", f)),
    st.integers(-(2**62), 2**62).map(lambda n: ("timestamp", n)),
    st.binary(min_size=16, max_size=16).map(lambda b: ("uuid", b)),
    st.just(("null", None)),
)
_value = st.recursive(
    _simple,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: ("list", items)),
        st.lists(st.tuples(_text.map(lambda s: ("string", s)), inner), max_size=3).map(
            lambda pairs: ("map", pairs)
        ),
    ),
    max_leaves=6,
)
_id = st.one_of(
    _text.map(lambda s: ("string", s)),
    st.integers(0, 2**64 - 1).map(lambda n: ("ulong", n)),
    st.binary(min_size=16, max_size=16).map(lambda b: ("uuid", b)),
    st.binary(max_size=20).map(lambda b: ("binary", b)),
)


def _maybe(strategy: st.SearchStrategy[Value]) -> st.SearchStrategy[Value]:
    return st.one_of(st.just(("null", None)), strategy)


@st.composite
def _amqp10_payload(draw: st.DrawFn) -> tuple[bytes, bytes, list[Value] | None, list]:
    out = b""
    head = None
    if draw(st.booleans()):
        head = [
            draw(_maybe(st.booleans().map(lambda b: ("bool", b)))),
            draw(_maybe(st.integers(0, 255).map(lambda n: ("ubyte", n)))),
            draw(_maybe(st.integers(0, 2**32 - 1).map(lambda n: ("uint", n)))),
        ]
        out += types.section(0x70, ("list", head))
    ma = draw(st.lists(st.tuples(_key.map(lambda k: "x-opt-" + k), _value), max_size=4))
    if ma or draw(st.booleans()):
        out += types.section(0x72, ("map", [(("symbol", k), v) for k, v in ma]))
    bare = b""
    if draw(st.booleans()):
        fields = [
            draw(_maybe(_id)),
            draw(_maybe(st.binary(max_size=10).map(lambda b: ("binary", b)))),
            draw(_maybe(_text.map(lambda s: ("string", s)))),
            draw(_maybe(_text.map(lambda s: ("string", s)))),
            draw(_maybe(_text.map(lambda s: ("string", s)))),
            draw(_maybe(_id)),
            draw(_maybe(st.just(("symbol", "text/plain")))),
            ("null", None),
            ("null", None),
            draw(_maybe(st.integers(-(2**62), 2**62).map(lambda n: ("timestamp", n)))),
            draw(_maybe(_text.map(lambda s: ("string", s)))),
        ]
        bare += types.section(0x73, ("list", fields))
    if draw(st.booleans()):
        ap = draw(st.lists(st.tuples(_key, _simple), max_size=4))
        bare += types.section(0x74, ("map", [(("string", k), v) for k, v in ap]))
    body = draw(
        st.one_of(
            st.lists(st.binary(max_size=300), min_size=1, max_size=3).map(
                lambda parts: b"".join(types.section(0x75, ("binary", p)) for p in parts)
            ),
            _value.map(lambda v: types.section(0x77, v)),
            st.lists(st.lists(_simple, max_size=2), min_size=1, max_size=2).map(
                lambda seqs: b"".join(types.section(0x76, ("list", s)) for s in seqs)
            ),
        )
    )
    bare += body
    return out + bare, bare, head, ma


def _normal(value: Value) -> Value:
    """A value as it decodes after RabbitMQ re-encodes it."""
    kind, v = value
    if kind == "list":
        return ("list", [_normal(i) for i in v])
    if kind == "map":
        return ("map", [(_normal(k), _normal(x)) for k, x in v])
    return value


@settings(max_examples=examples(300))
@given(_amqp10_payload(), _text, _text)
def test_amqp10_to_amqp10(case: tuple, exchange: str, key: str) -> None:
    payload, bare, head, ma = case
    message = amqp10_message.parse(payload).message(exchange, key)
    out = amqp10_delivery.delivery(message)
    s = amqp10_message.read_sections(out)
    assert out[s.bare_at :] == bare
    assert s.annotations == [(k, _normal(v)) for k, v in ma if k not in ("x-exchange",)] + [
        ("x-exchange", ("string", exchange)),
        ("x-routing-key", ("string", key)),
    ]
    durable, priority, ttl = ((head or []) + [("null", None)] * 3)[:3]
    assert s.header is not None
    assert s.header[0] == ("bool", durable == ("bool", True))
    assert s.header[1] == priority
    assert s.header[2] == ttl


# ---------------------------------------------------------------- AMQP 0-9-1
_FIELD = st.one_of(
    _text.map(lambda s: table.longstr(s)),
    st.binary(max_size=10).map(lambda b: table.longstr(b)),
    st.binary(max_size=10).map(lambda b: b"x" + struct.pack(">I", len(b)) + b),
    st.integers(-(2**63), 2**63 - 1).map(table.long),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: b"I" + struct.pack(">i", n)),
    st.integers(0, 2**32 - 1).map(lambda n: b"i" + struct.pack(">I", n)),
    st.integers(-128, 127).map(lambda n: b"b" + struct.pack(">b", n)),
    st.integers(0, 255).map(lambda n: b"B" + bytes((n,))),
    st.integers(-(2**15), 2**15 - 1).map(lambda n: b"s" + struct.pack(">h", n)),
    st.integers(0, 2**16 - 1).map(lambda n: b"u" + struct.pack(">H", n)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: b"d" + struct.pack(">d", f)),
    st.booleans().map(lambda b: b"t" + bytes((b,))),
    st.integers(0, 2**50).map(table.timestamp),
    st.just(b"V"),
)
_FIELDS = st.recursive(
    _FIELD,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(table.array),
        st.lists(st.tuples(_key, inner), max_size=3, unique_by=lambda f: f[0]).map(table.table),
    ),
    max_leaves=5,
)
_short = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30).map(str.encode)


def _kept(field: bytes) -> bytes:
    """A header value as it comes back: a binary as a long string, recursively."""
    if field[:1] == b"x":
        return b"S" + field[1:]
    if field[:1] == b"A":
        return table.array([_kept(e) for e in table.array_elements(field) or []])
    if field[:1] == b"F":
        return table.table([(k, _kept(v)) for k, v in table.table_fields(field) or []])
    return field


_OWN_ANNOTATIONS = (
    "x-exchange", "x-routing-key", "x-death", "x-opt-deaths", "x-basic-type", "x-cc",
    "x-delivery-count", "x-stream-offset", "x-opt-rabbitmq-received-time",
)  # fmt: skip


@st.composite
def _amqp091(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Property bytes and what RabbitMQ 4.2 gives back of them after the round trip."""
    got: dict[int, bytes] = {}
    back: dict[int, bytes] = {}

    def short(flag: int, value: bytes, kept: bytes | None = None) -> None:
        got[flag] = bytes((len(value),)) + value
        if kept is not None:
            back[flag] = bytes((len(kept),)) + kept

    for flag in (0x8000, 0x4000, 0x0020, 0x0008):  # content-type/-encoding, type, app-id
        if draw(st.booleans()):
            v = draw(_short)
            short(flag, v, v)
    headers = draw(
        st.lists(
            st.tuples(
                # not the names of the broker's own annotations (which it sets on every
                # message, or, for x-cc, makes of a CC header and back): a header of one of
                # those names does not come back as it went
                st.one_of(_key, _key.map(lambda k: "x-" + k)).filter(
                    lambda k: k not in _OWN_ANNOTATIONS
                ),
                _FIELDS,
            ),
            max_size=5,
            unique_by=lambda f: f[0],
        )
    )
    if draw(st.booleans()):
        headers.append(("CC", table.array([table.longstr(draw(_key))])))
    if headers:
        got[0x2000] = table.encode_table(headers)
        kept = [
            (k, _kept(v))
            for k, v in headers
            if k.startswith("x-") or k == "CC" or v[:1] not in b"AF"
        ]
        if kept:
            back[0x2000] = table.encode_table(sorted(kept, key=lambda f: f[0].encode()))
    mode = draw(st.sampled_from([None, 1, 2]))
    if mode is not None:
        got[0x1000] = bytes((mode,))
    back[0x1000] = bytes((2 if mode == 2 else 1,))  # durable false comes back as mode 1
    if draw(st.booleans()):
        got[0x0800] = back[0x0800] = bytes((draw(st.integers(0, 255)),))
    for flag in (0x0400, 0x0080):  # correlation-id, message-id
        if draw(st.booleans()):
            v = draw(st.one_of(_short, st.uuids().map(lambda u: f"urn:uuid:{u}".upper().encode())))
            # an upper-case URN: prefix is not a urn: text both ways
            short(flag, v, v)
    if draw(st.booleans()):
        v = draw(_short)
        quoted = b"/queues/" + urllib.parse.quote_from_bytes(v, safe="").encode()
        short(0x0200, v, v if len(quoted) < 256 else None)
    if draw(st.booleans()):
        n = draw(st.integers(0, 2**31))
        short(0x0100, str(n).encode(), str(n).encode())
    if draw(st.booleans()):
        got[0x0040] = back[0x0040] = struct.pack(">Q", draw(st.integers(0, 2**40)))
    if draw(st.booleans()):
        v = draw(_short)
        short(0x0010, v, v)

    def encode(values: dict[int, bytes]) -> bytes:
        flags = sum(values)
        return flags.to_bytes(2, "big") + b"".join(values[f] for f in sorted(values, reverse=True))

    return encode(got), encode(back)


@settings(max_examples=examples(300))
@given(_amqp091(), st.binary(max_size=300), _text, _text)
def test_amqp091_to_amqp10_and_back(
    case: tuple[bytes, bytes], body: bytes, exchange: str, key: str
) -> None:
    props, expected = case
    out = amqp10_delivery.delivery(Message.from_parts(exchange, key, props, body))
    assert sections(out)["body"] == [(0x75, ("binary", body))]
    again = amqp10_message.parse(out)
    assert again.body == body
    assert again.properties == expected


def test_urn_ids_come_back_in_lower_case() -> None:
    """A urn:uuid id becomes a uuid, and its text comes back as RabbitMQ prints one."""
    raw = b"\x00\x80\x15urn:uuid:" + b"58B867B0-8151-1F56-1BD4-73229807FD60"
    raw = raw[:2] + bytes((len(raw) - 3,)) + raw[3:]
    again = amqp10_message.parse(amqp10_delivery.delivery(Message.from_parts("", "q", raw, b"")))
    assert (
        table.short_property(again.properties, 0x0080)
        == "urn:uuid:58b867b0-8151-1f56-1bd4-73229807fd60"
    )


# -------------------------------------------------------------------- fuzzing
@settings(max_examples=examples(500))
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_are_refused(payload: bytes) -> None:
    try:
        parsed = amqp10_message.parse(payload)
    except Amqp10Error as exc:
        assert exc.condition in ("amqp:decode-error", "amqp:internal-error")
        return
    amqp10_delivery.delivery(parsed.message("e", "k"))


@settings(max_examples=examples(300))
@given(_amqp10_payload(), st.integers(0, 199), st.integers(0, 255))
def test_corrupted_messages_parse_or_are_refused(case: tuple, at: int, byte: int) -> None:
    payload = bytearray(case[0])
    if payload:
        payload[at % len(payload)] = byte
    try:
        parsed = amqp10_message.parse(bytes(payload))
    except Amqp10Error:
        return
    out = amqp10_delivery.delivery(parsed.message("e", "k"))
    assert out.endswith(parsed.bare)
