"""A stream's AMQP 1.0 messages read back over AMQP 0-9-1: the spliced conversion gives
the bytes the general one gives (then the x-stream-offset header), for every shape of
message, those it takes itself and those it leaves to the general one."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.broker.queues import stream_amqp091
from leveret.broker.queues.stream_amqp091 import _to_amqp091, to_amqp091
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.protocol.spec import add_header
from leveret.protocol.stream import amqp10
from leveret.protocol.stream.amqp10 import Value

_text = st.text(max_size=20) | st.text(min_size=250, max_size=300)
_bin = st.binary(max_size=20) | st.binary(min_size=250, max_size=300)
_values = st.one_of(
    st.just(("null", None)),
    st.tuples(st.just("bool"), st.booleans()),
    st.tuples(st.just("ubyte"), st.integers(0, 255)),
    st.tuples(st.just("ushort"), st.integers(0, 2**16 - 1)),
    st.tuples(st.just("uint"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("ulong"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("byte"), st.integers(-128, 127)),
    st.tuples(st.just("short"), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(st.just("int"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("long"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("double"), st.floats(allow_nan=False)),
    st.tuples(st.just("timestamp"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("uuid"), st.binary(min_size=16, max_size=16)),
    st.tuples(st.just("binary"), _bin),
    st.tuples(st.just("string"), _text),
    st.tuples(st.just("symbol"), _text),
)
# what publishers put in the properties: mostly text, nulls and timestamps
_field = st.one_of(
    st.just(("null", None)),
    st.tuples(st.sampled_from(["string", "symbol"]), _text),
    st.tuples(st.just("binary"), _bin),
    st.tuples(st.just("timestamp"), st.integers(-(2**63), 2**63 - 1)),
    _values,
)
# the thirteen fields, each null, text, binary or a timestamp: what the splice reads (ids
# as text, as AMQP 0-9-1 publishers give them; other ids are the general conversion's)
_short_text = st.tuples(st.sampled_from(["string", "symbol"]), st.text(max_size=20))
_usual_field = st.one_of(
    st.just(("null", None)),
    st.tuples(st.sampled_from(["string", "symbol"]), _text),
    st.tuples(st.just("binary"), _bin),
    st.tuples(st.just("timestamp"), st.integers(-(2**63), 2**63 - 1)),
)
_id = st.just(("null", None)) | _short_text
_usual_properties = st.tuples(
    *(_id, _usual_field, _usual_field, _usual_field, _usual_field, _id),
    *(_usual_field,) * 7,
).map(lambda v: ("list", list(v)))
_annotation_keys = st.sampled_from(
    [
        *("x-routing-key", "x-exchange", "x-basic-priority", "x-basic-delivery-mode"),
        *("x-basic-expiration", "x-opt-other"),
    ]
)
_app_keys = st.sampled_from(["x-basic-type", "x-basic-app-id", "h", "k"]) | _text


def _map(keys: st.SearchStrategy[str], kind: str) -> st.SearchStrategy[Value]:
    pairs = st.lists(st.tuples(keys.map(lambda k: (kind, k)), _values), max_size=5)
    return pairs.map(lambda p: ("map", p))


_sections = {
    amqp10.HEADER: st.lists(_values, max_size=5).map(lambda v: ("list", v)),
    amqp10.DELIVERY_ANNOTATIONS: _map(_annotation_keys, "symbol"),
    amqp10.MESSAGE_ANNOTATIONS: _map(_annotation_keys, "symbol") | _values,
    amqp10.PROPERTIES: st.one_of(
        _usual_properties, st.lists(_field, max_size=14).map(lambda v: ("list", v)), _values
    ),
    amqp10.APPLICATION_PROPERTIES: _map(_app_keys, "string") | _values,
    amqp10.DATA: st.tuples(st.just("binary"), _bin) | _values,
    amqp10.AMQP_VALUE: _values,
    amqp10.FOOTER: _map(_annotation_keys, "symbol"),
}


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    """Mostly the usual shape (annotations, properties, application properties, one data
    section, each maybe absent), else any sections in any order."""
    if draw(st.booleans()):
        codes = [
            code
            for code in (
                *(amqp10.MESSAGE_ANNOTATIONS, amqp10.PROPERTIES),
                *(amqp10.APPLICATION_PROPERTIES, amqp10.DATA),
            )
            if draw(st.integers(0, 4))
        ]
    else:
        codes = draw(st.lists(st.sampled_from(sorted(_sections)), max_size=6))
    return b"".join(amqp10.section(code, draw(_sections[code])) for code in codes)


def _general(message: bytes, stream: str, offset: int | None) -> Any:
    try:
        exchange_and_key, properties, body = _to_amqp091(message, stream)
    except ValueError:
        return ValueError
    if offset is not None:
        properties = add_header(properties, "x-stream-offset", b"l" + struct.pack(">q", offset))
    return exchange_and_key, properties, body


def _spliced(message: bytes, stream: str, offset: int | None) -> Any:
    try:
        return to_amqp091(message, stream, offset)
    except ValueError:
        return ValueError


_offsets = st.none() | st.integers(0, 2**63 - 1)


@given(messages(), _offsets)
def test_the_spliced_way_back_gives_the_general_conversions_bytes(
    message: bytes, offset: int | None
) -> None:
    expected = _general(message, "s", offset)
    assert _spliced(message, "s", offset) == expected
    assert _spliced(message, "s", offset) == expected  # kept the second time
    assert _spliced(message, "other", offset) == _general(message, "other", offset)


@pytest.mark.parametrize(
    "message",
    [
        b"\x00Ss\xc0\x04\x01\xa1\x01\xff",  # a message-id that is not UTF-8
        b"\x00Ss\xc0\x04\x02\x40\xa1\x01\xe9",  # a user-id that is not UTF-8
        b"\x00Ss\xc0\x05\x03\x40\x40\xa1\x01\xe9",  # nor a "to" that has no place
        b"\x00Sr\xc1\x03\x02\xa3\x00",  # a map cut short
        b"\x00Sr\xc1\x02\x02\xa3\x00\x40",  # a map whose size is short of its count
        b"\x00Su\xa0\x05ab",  # a body cut short
        b"\x00Su\xa0\x00\x00Su\xa0\x01x",  # two data sections: the last is the body
        b"\x00Ss\x45\x00Su\xa0\x00",  # an empty properties list
    ],
)
def test_odd_messages_as_the_general_conversion(message: bytes) -> None:
    assert _spliced(message, "s", 7) == _general(message, "s", 7)
    assert _spliced(message, "s", 7) == _general(message, "s", 7)


@given(_usual_properties, _offsets)
def test_each_properties_field_as_the_general_conversion(
    properties: Value, offset: int | None
) -> None:
    """Ids, users, types and timestamps (negative ones too) in each of the fields."""
    message = (
        to_amqp10("ex", "rk", b"\x18\x00\x02", b"")[:-5]  # delivery mode 2: annotations
        + amqp10.section(amqp10.PROPERTIES, properties)
        + amqp10.section(amqp10.DATA, ("binary", b"body"))
    )
    assert _spliced(message, "s", offset) == _general(message, "s", offset)


@given(messages(), st.data())
def test_damaged_messages_as_the_general_conversion(message: bytes, data: st.DataObject) -> None:
    """Cut short, a byte changed or a size that lies: the same bytes or the same error."""
    if message and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(message) - 1))
        message = message[:at] + bytes((data.draw(st.integers(0, 255)),)) + message[at + 1 :]
    message = message[: data.draw(st.integers(0, len(message)))]
    assert _spliced(message, "s", 7) == _general(message, "s", 7)
    assert _spliced(message, "s", None) == _general(message, "s", None)


def _published(message_id: str, **more: Any) -> bytes:
    """A message a pika publisher's properties give: its own id, content type, maybe more."""
    from pamqp import commands

    from leveret.protocol import properties as props091

    p = commands.Basic.Properties(message_id=message_id, content_type="application/json")
    for name, value in more.items():
        setattr(p, name, value)
    return to_amqp10("logs", "app.info", props091.encode_properties(p), b'{"m": 1}')


@given(
    st.text(max_size=40),
    st.none() | st.text(max_size=40),
    st.none() | st.integers(0, 2**40),
    st.none() | st.text(max_size=10),
    st.none() | st.sampled_from([1, 2]),
    st.none() | st.dictionaries(st.text(max_size=5), st.integers(0, 9), max_size=3),
)
def test_distinct_ids_are_spliced_not_left_to_the_general_conversion(
    message_id: str,
    correlation_id: str | None,
    timestamp: int | None,
    user_id: str | None,
    delivery_mode: int | None,
    headers: dict[str, int] | None,
) -> None:
    """Whatever varies from message to message (ids, timestamp, user), each message is
    converted in place: the cost does not depend on messages repeating."""
    message = _published(
        message_id,
        correlation_id=correlation_id,
        timestamp=timestamp,
        user_id=user_id,
        delivery_mode=delivery_mode,
        headers=headers,
        app_id="app",
        message_type="log",
    )
    spliced = stream_amqp091._spliced(message, "s", 3)
    assert spliced is not None
    assert spliced == _general(message, "s", 3)


def test_ids_the_general_conversion_carries_in_headers() -> None:
    """A ulong, uuid or binary id, or text over 256 bytes: a header names its type (or
    carries it), as rabbit_msg_record:to_amqp091."""
    for value in (
        ("ulong", 42),
        ("uuid", uuid.UUID(int=7).bytes),
        ("binary", b"\x01\x02"),
        ("binary", bytes(300)),
        ("string", "x" * 256),
        ("string", "x" * 257),
    ):
        for fields in ([value], [("null", None)] * 5 + [value]):  # message-id, correlation-id
            message = amqp10.section(amqp10.PROPERTIES, ("list", fields)) + amqp10.section(
                amqp10.DATA, ("binary", b"b")
            )
            assert to_amqp091(message, "s", 1) == _general(message, "s", 1)
