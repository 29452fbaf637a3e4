"""AMQP 0-9-1 messages as a stream gives them to the stream protocol (AMQP 1.0), and
back: the spliced conversion agrees with the general one, and the way back keeps what
RabbitMQ keeps."""

from __future__ import annotations

import datetime
import struct

from hypothesis import example, given
from hypothesis import strategies as st
from pamqp import commands

from leveret.broker.queues.stream_amqp091 import to_amqp091
from leveret.broker.queues.stream_amqp10 import _to_amqp10_decoded, to_amqp10
from leveret.broker.queues.stream_properties import as_stored_in_a_stream
from leveret.protocol import properties as props091
from leveret.protocol.spec import add_header

_short = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=20)
_header_values = st.one_of(
    _short,
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.binary(max_size=20),
    st.none(),
    st.datetimes(
        min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(2100, 1, 1)
    ).map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC)),
    st.dictionaries(_short, st.integers(0, 9), max_size=2),
)


def _wire(value: object) -> bytes:
    """A header value with the tag RabbitMQ's clients use (I for 32-bit ints, l else)."""
    if isinstance(value, bool):
        return b"t" + bytes((value,))
    if isinstance(value, int):
        return (
            b"I" + struct.pack(">i", value)
            if -(2**31) <= value < 2**31
            else (b"l" + struct.pack(">q", value))
        )
    if isinstance(value, bytes):
        return b"x" + struct.pack(">I", len(value)) + value
    if value is None:
        return b"V"
    if isinstance(value, datetime.datetime):
        return b"T" + struct.pack(">Q", int(value.timestamp()))
    return props091.encode_value(value)


@st.composite
def properties(draw: st.DrawFn) -> bytes:
    p = commands.Basic.Properties()
    for name in (
        "content_type",
        "content_encoding",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "message_type",
        "user_id",
        "app_id",
    ):
        setattr(p, name, draw(st.none() | _short))
    p.delivery_mode = draw(st.none() | st.sampled_from([1, 2]))
    p.priority = draw(st.none() | st.integers(0, 9))
    p.timestamp = draw(st.none() | st.integers(0, 2**32))
    raw = props091.encode_properties(p)
    headers = draw(st.none() | st.dictionaries(_short, _header_values, max_size=4))
    if headers is None:
        return raw
    table = b"".join(bytes((len(k.encode()),)) + k.encode() + _wire(v) for k, v in headers.items())
    flags = int.from_bytes(raw[:2], "big") | 0x2000
    # headers come third, after content-type and content-encoding
    pos = 2
    for bit in (0x8000, 0x4000):
        if flags & bit:
            pos += 1 + raw[pos]
    return flags.to_bytes(2, "big") + raw[2:pos] + struct.pack(">I", len(table)) + table + raw[pos:]


@given(properties(), st.binary(max_size=300), _short, _short)
def test_the_splice_agrees_with_the_general_conversion(
    raw: bytes, body: bytes, exchange: str, key: str
) -> None:
    assert to_amqp10(exchange, key, raw, body) == _to_amqp10_decoded(exchange, key, raw, body)


@given(properties(), st.binary(max_size=300), _short, _short)
# a body ending with the bytes of an empty data section came back empty (found by
# hypothesis: the fast path took the body's tail for the message's data section)
@example(b"\x00\x00", b"\x00Su\xa0\x00", "", "")
def test_stored_and_read_back_over_amqp091_as_rabbitmq_gives_it(
    raw: bytes, body: bytes, exchange: str, key: str
) -> None:
    """Published over AMQP 0-9-1, stored as AMQP 1.0, read over AMQP 0-9-1: the property
    bytes are what RabbitMQ 3.10 gives back (headers keep their types; tables, arrays and
    the cluster-id are gone), the exchange and routing key are the published ones."""
    exchange_and_key, back, body_back = to_amqp091(to_amqp10(exchange, key, raw, body), "s")
    e, k = exchange.encode()[:255], key.encode()[:255]
    assert exchange_and_key == bytes((len(e),)) + e + bytes((len(k),)) + k
    assert body_back == body
    # (an empty header table comes back as none: both with x-stream-offset are the same)
    offset = b"l" + bytes(8)
    assert add_header(back, "x-stream-offset", offset) == add_header(
        as_stored_in_a_stream(raw), "x-stream-offset", offset
    )


def test_stream_protocol_ids_and_header_types_over_amqp091() -> None:
    """rabbit_msg_record:to_amqp091: a ulong message id as text with its type in a
    header, application properties typed by width, annotations for the routing."""
    from leveret.protocol.stream import amqp10

    message = (
        amqp10.section(
            amqp10.PROPERTIES,
            (
                "list",
                [
                    ("ulong", 42),
                    ("null", None),
                    ("null", None),
                    ("null", None),
                    ("null", None),
                    ("string", "c"),
                ],
            ),
        )
        + amqp10.section(
            amqp10.APPLICATION_PROPERTIES,
            (
                "map",
                [
                    (("string", "s"), ("short", -2)),
                    (("string", "u"), ("uint", 7)),
                    (("string", "y"), ("symbol", "dropped")),
                ],
            ),
        )
        + amqp10.section(amqp10.DATA, ("binary", b"body"))
    )
    exchange_and_key, props, body = to_amqp091(message, "str")
    assert (exchange_and_key, body) == (b"\x00\x03str", b"body")
    table = b"\x11x-message-id-typeS\x00\x00\x00\x05ulong\x01ss\xff\xfe\x01ui\x00\x00\x00\x07"
    assert props == (b"\x24\x80" + struct.pack(">I", len(table)) + table + b"\x01c" + b"\x0242")


_tricky_bodies = st.one_of(
    st.binary(max_size=600),
    st.binary(max_size=20).map(lambda b: b + b"\x00Su\xa0\x02xy"),
    st.binary(max_size=20).map(lambda b: b + b"\x00Su\xb0\x00\x00\x00\x01z"),
)


@given(properties(), _tricky_bodies)
def test_the_cached_way_back_agrees_with_the_general_one(raw: bytes, body: bytes) -> None:
    from leveret.broker.queues.stream_amqp091 import _to_amqp091

    message = to_amqp10("ex", "rk", raw, body)
    assert to_amqp091(message, "s") == _to_amqp091(message, "s")
    assert to_amqp091(message, "s")[2] == body
