"""RabbitMQ 4.2's own expectations of its message conversions, ported: each test names the
case of ``deps/rabbit/test/mc_unit_SUITE.erl`` (tag v4.2.9) it comes from. "amqpl" is
AMQP 0-9-1 there, "amqp" AMQP 1.0: a message published over AMQP 1.0 is parsed
(:func:`amqp10_message.parse`) and its AMQP 0-9-1 view read; one published over AMQP
0-9-1 is delivered to an AMQP 1.0 consumer (:func:`amqp10_delivery.delivery`)."""

from __future__ import annotations

import datetime
import os
import uuid

import pytest
from pamqp import commands

from leveret.broker import amqp10_delivery, amqp10_message
from leveret.broker.amqp10_message import Amqp10Error
from leveret.broker.message import Message
from leveret.protocol import properties as props091
from leveret.protocol import table
from leveret.protocol.amqp10 import types
from tests.broker.amqp10_helpers import (
    amap,
    annotations,
    application,
    data,
    field_list,
    header,
    properties,
    sections,
    typed_headers,
)


def _091(exchange: str, key: str, props: commands.Basic.Properties, body: bytes) -> Message:
    return Message.build(exchange, key, body, props)


def _bare(payload: bytes) -> bytes:
    """What follows the header and message annotations RabbitMQ puts in front."""
    s = amqp10_message.read_sections(payload)
    return payload[s.bare_at :]


def test_mc_util_uuid_to_urn_roundtrip() -> None:
    """mc_util_uuid_to_urn_roundtrip: a uuid's urn string, and back."""
    raw = bytes([88, 184, 103, 176, 129, 81, 31, 86, 27, 212, 115, 34, 152, 7, 253, 96])
    payload = properties(message_id=("uuid", raw)) + data(b"data")
    parsed = amqp10_message.parse(payload)
    urn = "urn:uuid:58b867b0-8151-1f56-1bd4-73229807fd60"
    assert props091.decode(parsed.properties).message_id == urn
    plain = Message.from_parts("x", "k", parsed.properties, parsed.body)
    out = sections(amqp10_delivery.delivery(plain))
    assert field_list(out[0x73])[0] == ("uuid", raw)


def test_amqpl_defaults() -> None:
    """amqpl_defaults: no properties: not persistent, no priority, timestamp, ids, ttl."""
    out = sections(
        amqp10_delivery.delivery(_091("exch", "apple", commands.Basic.Properties(), b"data"))
    )
    assert field_list(out[0x70]) == [
        ("bool", False),
        ("null", None),
        ("null", None),
        ("bool", True),
        ("uint", 0),
    ]
    assert 0x73 not in out  # every property undefined: the section is left out
    assert 0x74 not in out
    assert amap(out[0x72]) == {
        "x-exchange": ("string", "exch"),
        "x-routing-key": ("string", "apple"),
    }
    assert out["body"] == [(0x75, ("binary", b"data"))]


def test_amqpl_table_x_header() -> None:
    """amqpl_table_x_header: an x- table header as a map with symbol keys; a table that
    is not an x- header has no place in application properties."""
    tbl = {"type": "apple", "count": 99}
    props = commands.Basic.Properties(headers={"x-fruit": tbl, "fruit": tbl})
    out = sections(amqp10_delivery.delivery(_091("exch", "apple", props, b"data")))
    assert amap(out[0x72])["x-fruit"] == (
        "map",
        [(("symbol", "type"), ("string", "apple")), (("symbol", "count"), ("byte", 99))],
    )
    assert 0x74 not in out


def test_amqpl_table_x_header_array_of_tbls() -> None:
    """amqpl_table_x_header_array_of_tbls: an array of tables as a list of maps."""
    raw = table.table([("type", table.longstr("apple")), ("count", table.long(99))])
    raw2 = table.table([("type", table.longstr("orange")), ("count", table.long(45))])
    props = table.with_headers(b"\x00\x00", [("x-fruit", table.array([raw, raw2]))])
    out = sections(amqp10_delivery.delivery(Message.from_parts("exch", "apple", props, b"data")))
    assert amap(out[0x72])["x-fruit"] == (
        "list",
        [
            (
                "map",
                [(("symbol", "type"), ("string", "apple")), (("symbol", "count"), ("long", 99))],
            ),
            (
                "map",
                [(("symbol", "type"), ("string", "orange")), (("symbol", "count"), ("long", 45))],
            ),
        ],
    )


def _amqpl_amqp_bin_amqpl_props() -> bytes:
    string5k = b"x" * 5000
    fields = [
        ("a-stream-offset", table.long(99)),
        ("a-string", table.longstr("a string")),
        ("a-very-long-string", table.longstr(string5k)),
        ("a-bool", b"t\x00"),
        ("a-unsignedbyte", b"B\x01"),
        ("a-unsignedshort", b"u\x00\x01"),
        ("a-unsignedint", b"i\x00\x00\x00\x01"),
        ("a-signedint", b"I\x00\x00\x00\x01"),
        ("a-timestamp", table.timestamp(1)),
        ("a-double", b"d" + bytes.fromhex("3ff0000000000000")),
        ("a-float", b"f" + bytes.fromhex("3f800000")),
        ("a-void", b"V"),
        ("a-binary", b"x\x00\x00\x00\x04data"),
        ("a-array", table.array([table.long(1), table.long(2)])),
        ("x-stream-filter", table.longstr("apple")),
    ]
    props = commands.Basic.Properties(
        content_type="text/plain",
        content_encoding="gzip",
        delivery_mode=2,
        priority=98,
        correlation_id="corr",
        reply_to="reply/to",
        expiration="1",
        message_id="msg-id",
        timestamp=datetime.datetime.fromtimestamp(99, datetime.UTC),
        message_type="45",
        user_id="banana",
        app_id="rmq",
    )
    raw = props091.encode_properties(props)
    return table.with_headers(raw, fields)


def test_amqpl_amqp_bin_amqpl() -> None:
    """amqpl_amqp_bin_amqpl: AMQP 0-9-1 to AMQP 1.0 (as delivered) and back."""
    raw = _amqpl_amqp_bin_amqpl_props()
    payload = amqp10_delivery.delivery(Message.from_parts("exch", "apple", raw, b"data"))
    out = sections(payload)
    assert field_list(out[0x70])[:3] == [("bool", True), ("ubyte", 98), ("uint", 1)]
    p = field_list(out[0x73])
    assert p[7] == ("symbol", "gzip")
    assert p[6] == ("symbol", "text/plain")
    assert p[4] == ("string", "/queues/reply%2Fto")
    assert p[9] == ("timestamp", 99000)
    assert p[1] == ("binary", b"banana")
    assert p[10] == ("string", "rmq")
    ap = amap(out[0x74])
    assert ap["a-stream-offset"] == ("long", 99)
    assert ap["a-string"] == ("string", "a string")
    # a very long string is not scanned for UTF-8: a binary
    assert ap["a-very-long-string"] == ("binary", b"x" * 5000)
    assert ap["a-bool"] == ("bool", False)
    assert ap["a-unsignedbyte"] == ("ubyte", 1)
    assert ap["a-unsignedshort"] == ("ushort", 1)
    assert ap["a-unsignedint"] == ("uint", 1)
    assert ap["a-signedint"] == ("int", 1)
    assert ap["a-timestamp"] == ("timestamp", 1000)
    assert ap["a-double"] == ("double", 1.0)
    assert ap["a-float"] == ("float", 1.0)
    assert ap["a-void"] == ("null", None)
    assert ap["a-binary"] == ("binary", b"data")
    assert "x-stream-filter" not in ap  # x- headers do not go into app props
    assert "a-array" not in ap  # arrays are not converted
    ma = amap(out[0x72])
    assert ma["x-basic-type"] == ("string", "45")  # the type is now an annotation
    assert ma["x-stream-filter"] == ("string", "apple")
    assert ma["x-exchange"] == ("string", "exch")
    assert ma["x-routing-key"] == ("string", "apple")

    back = amqp10_message.parse(payload)
    p2 = props091.decode(back.properties)
    assert p2.priority == 98
    assert p2.delivery_mode == 2
    assert p2.timestamp == datetime.datetime.fromtimestamp(99, datetime.UTC)
    assert p2.correlation_id == "corr"
    assert p2.message_id == "msg-id"
    assert p2.expiration == "1"
    assert p2.reply_to == "reply/to"
    assert p2.message_type == "45"
    headers = typed_headers(back.properties)
    assert headers["x-stream-filter"] == ("longstr", "apple")
    # the routing headers' values are kept, but the array's (a binary comes back as a
    # long string: to_091({binary, V}) is a longstr)
    original = typed_headers(raw)
    del original["a-array"]
    assert headers.pop("a-binary") == ("longstr", "data")
    assert original.pop("a-binary") == ("binary", b"data")
    assert headers == original


def test_amqpl_cc_amqp_bin_amqpl() -> None:
    """amqpl_cc_amqp_bin_amqpl: a CC header as x-cc, and back as the same header."""
    cc = [("CC", table.array([table.longstr("q1"), table.longstr("q2")]))]
    raw = table.with_headers(b"\x00\x00", cc)
    payload = amqp10_delivery.delivery(Message.from_parts("exch", "apple", raw, b"data"))
    ma = amap(sections(payload)[0x72])
    assert ma["x-exchange"] == ("string", "exch")
    assert ma["x-routing-key"] == ("string", "apple")
    assert ma["x-cc"] == ("list", [("string", "q1"), ("string", "q2")])
    back = amqp10_message.parse(payload)
    assert back.cc == ("q1", "q2")
    assert table.headers(back.properties) == cc


def test_amqp_amqpl_amqp_uuid_correlation_id() -> None:
    """amqp_amqpl_amqp_uuid_correlation_id: uuid ids survive AMQP 0-9-1 (as urn strings):
    the bare message comes back byte for byte."""
    raw = os.urandom(16)
    bare_in = properties(correlation_id=("uuid", raw), message_id=("uuid", raw)) + data(b"data")
    parsed = amqp10_message.parse(bare_in)
    # as the AMQP 0-9-1 view alone (a message that lost its AMQP 1.0 form)
    plain = Message.from_parts("x", "k", parsed.properties, parsed.body)
    assert _bare(amqp10_delivery.delivery(plain)) == bare_in
    # and as itself
    assert _bare(amqp10_delivery.delivery(parsed.message("x", "k"))) == bare_in


def _amqp_amqpl_payload() -> bytes:
    ma = annotations(
        [
            ("x-stream-filter", ("string", "apple")),
            ("x-list", ("list", [("string", "l")])),
            ("x-map", ("map", [(("string", "k"), ("string", "v"))])),
            ("x-array", ("array", [("string", "a")])),
        ]
    )
    p = properties(
        content_type=("symbol", "ctype"),
        content_encoding=("symbol", "cenc"),
        message_id=("string", "msg-id"),
        correlation_id=("string", "corr-id"),
        user_id=("binary", b"user-id"),
        reply_to=("string", "reply-to"),
        group_id=("string", "group-id"),
        creation_time=("timestamp", 10000),
    )
    ap = application(
        [
            ("long", ("long", 5)),
            ("ulong", ("ulong", 5)),
            ("utf8", ("string", "a-string")),
            ("binary", ("binary", b"data")),
            ("symbol", ("symbol", "symbol")),
            ("ubyte", ("ubyte", 255)),
            ("short", ("short", 2)),
            ("ushort", ("ushort", 3)),
            ("uint", ("uint", 4)),
            ("int", ("int", 4)),
            ("double", ("double", 5.0)),
            ("float", ("float", 6.0)),
            ("timestamp", ("timestamp", 7000)),
            ("byte", ("byte", -128)),
            ("boolean", ("bool", True)),
            ("boolean2", ("bool", False)),
            ("null", ("null", None)),
        ]
    )
    return header(durable=True, priority=3, ttl=20000) + ma + p + ap + data(b"data")


def test_amqp_amqpl() -> None:
    """amqp_amqpl: every property and application-property type."""
    parsed = amqp10_message.parse(_amqp_amqpl_payload())
    assert parsed.durable
    p = props091.decode(parsed.properties)
    assert p.user_id == "user-id"  # valid UTF-8 short string
    assert p.reply_to == "reply-to"
    assert p.content_type == "ctype"
    assert p.content_encoding == "cenc"
    assert p.app_id == "group-id"
    assert p.timestamp == datetime.datetime.fromtimestamp(10, datetime.UTC)
    assert p.delivery_mode == 2
    assert p.priority == 3
    assert p.expiration == "20000"
    assert p.message_id == "msg-id"
    h = typed_headers(parsed.properties)
    # each application property as the header of the 0-9-1 type it converts to
    converted = {
        "x-stream-filter": ("longstr", "apple"),
        "x-list": ("array", ["l"]),
        "x-map": ("table", {"k": "v"}),
        "x-array": ("array", ["a"]),
        "long": ("long", 5),
        "ulong": ("long", 5),
        "utf8": ("longstr", "a-string"),
        "binary": ("longstr", "data"),
        "symbol": ("longstr", "symbol"),
        "ubyte": ("unsignedbyte", 255),
        "short": ("short", 2),
        "ushort": ("unsignedshort", 3),
        "uint": ("unsignedint", 4),
        "int": ("signedint", 4),
        "double": ("double", 5.0),
        "float": ("float", 6.0),
    }
    assert {k: h[k] for k in converted} == converted
    assert h["timestamp"][0] == "timestamp"
    assert table.headers(parsed.properties) is not None
    assert dict(table.headers(parsed.properties) or [])["timestamp"] == table.timestamp(7)
    assert h["byte"] == ("byte", -128)
    assert h["boolean"] == ("bool", True)
    assert h["boolean2"] == ("bool", False)
    assert h["null"] == ("void", None)
    # RabbitMQ 4.2 gives an AMQP 0-9-1 consumer its headers sorted by key
    keys = [k for k, _v in table.headers(parsed.properties) or []]
    assert keys == sorted(keys, key=str.encode)


def test_amqp_amqpl_message_id_ulong() -> None:
    """amqp_amqpl_message_id_ulong: a ulong id as its decimal text."""
    payload = properties(message_id=("ulong", 9876789), correlation_id=("ulong", 9876789)) + data(
        b"d"
    )
    p = props091.decode(amqp10_message.parse(payload).properties)
    assert p.message_id == "9876789"
    assert p.correlation_id == "9876789"


def test_amqp_amqpl_amqp_message_id_uuid() -> None:
    """amqp_amqpl_amqp_message_id_uuid: urn text one way, the same bare message back."""
    raw = os.urandom(16)
    urn = "urn:uuid:" + str(uuid.UUID(bytes=raw))
    bare_in = properties(message_id=("uuid", raw), correlation_id=("uuid", raw)) + data(b"data")
    parsed = amqp10_message.parse(bare_in)
    p = props091.decode(parsed.properties)
    assert (p.message_id, p.correlation_id) == (urn, urn)
    plain = Message.from_parts("x", "k", parsed.properties, parsed.body)
    assert _bare(amqp10_delivery.delivery(plain)) == bare_in


def test_amqp_amqpl_message_id_large() -> None:
    """amqp_amqpl_message_id_large: text of 256 bytes or more as a header."""
    orig = "hi" * 256
    payload = properties(message_id=("string", orig), correlation_id=("string", orig)) + data(b"d")
    raw = amqp10_message.parse(payload).properties
    p = props091.decode(raw)
    assert p.message_id is None and p.correlation_id is None
    h = typed_headers(raw)
    assert h["x-message-id"] == ("longstr", orig)
    assert h["x-correlation-id"] == ("longstr", orig)


def test_amqp_amqpl_message_id_binary() -> None:
    """amqp_amqpl_message_id_binary: a binary id as a binary header."""
    orig = os.urandom(128)
    payload = properties(message_id=("binary", orig), correlation_id=("binary", orig)) + data(b"d")
    raw = amqp10_message.parse(payload).properties
    p = props091.decode(raw)
    assert p.message_id is None and p.correlation_id is None
    h = dict(table.headers(raw) or [])
    assert h["x-message-id"] == b"x" + len(orig).to_bytes(4, "big") + orig
    assert h["x-correlation-id"] == b"x" + len(orig).to_bytes(4, "big") + orig


@pytest.mark.parametrize(
    "body",
    [data(b"helloworld"), data(b"hello") + data(b"world")],
    ids=["one data section", "two data sections"],
)
def test_amqp_to_amqpl_data_body(body: bytes) -> None:
    """amqp_to_amqpl_data_body: data sections' bytes, concatenated."""
    parsed = amqp10_message.parse(body)
    assert parsed.body == b"helloworld"
    assert props091.decode(parsed.properties).message_type is None


_BODIES = [
    [(0x75, ("binary", b"helo world"))],
    [(0x75, ("binary", w)) for w in (b"hello", b"brave", b"new", b"world")],
    [(0x77, ("string", "hello world"))],
    [
        (0x76, ("list", [("string", "one"), ("string", "blah")])),
        (0x76, ("list", [("string", "two")])),
    ],
]


@pytest.mark.parametrize("body", _BODIES, ids=["data", "four data", "amqp-value", "sequences"])
def test_amqp_amqpl_amqp_bodies(body: list[tuple[int, types.Value]]) -> None:
    """amqp_amqpl_amqp_bodies: an AMQP 0-9-1 message typed amqp-1.0 whose body is AMQP
    1.0 sections is delivered as those sections."""
    encoded = b"".join(types.section(code, value) for code, value in body)
    props = commands.Basic.Properties(message_type="amqp-1.0")
    out = amqp10_delivery.delivery(_091("ex", "rkey", props, encoded))
    assert sections(out)["body"] == body


def test_amqp_amqpl_unsupported_values_not_converted() -> None:
    """amqp_amqpl_unsupported_values_not_converted: a key of 256 bytes is left out, a
    user-id that is not a valid short string too."""
    long_key = "a" * 256
    ap = application(
        [
            ("area", ("string", "East Sussex")),
            (long_key, ("string", "apple")),
            ("I am a 🐰", ("string", "dog")),
        ]
    )
    payload = properties(user_id=("binary", b"\x00banana")) + ap + data(b"data")
    raw = amqp10_message.parse(payload).properties
    p = props091.decode(raw)
    assert p.user_id is None
    h = typed_headers(raw)
    assert h["area"] == ("longstr", "East Sussex")
    assert long_key not in h


def test_amqp_x_headers() -> None:
    """amqp_x_headers: the message's x- annotations and one the broker set."""
    ma = annotations(
        [
            ("x-stream-filter", ("string", "apple")),
            ("x-list", ("list", [("string", "l")])),
            ("x-map", ("map", [(("string", "k"), ("string", "v"))])),
        ]
    )
    payload = ma + application([("long", ("long", 5))]) + data(b"data")
    msg = amqp10_message.parse(payload).message("exch", "apple")
    out = amqp10_delivery.delivery(msg, annotations={"x-1": ("byte", -2)})
    got = amap(sections(out)[0x72])
    assert got["x-1"] == ("byte", -2)
    assert got["x-list"] == ("list", [("string", "l")])
    assert got["x-map"] == ("map", [(("string", "k"), ("string", "v"))])
    assert got["x-stream-filter"] == ("string", "apple")


def test_amqpl_x_headers() -> None:
    """amqpl_x_headers: x- headers and the delivery's x-delivery-count as annotations."""
    props = table.with_headers(
        b"\x00\x00",
        [
            ("a-string", table.longstr("a string")),
            ("x-1", b"x\x00\x00\x00\x02v1"),
            ("x-stream-filter", table.longstr("apple")),
        ],
    )
    msg = Message.from_parts("exch", "apple", props, b"data")
    got = amap(sections(amqp10_delivery.delivery(msg, annotations={"x-delivery-count": 2}))[0x72])
    assert got["x-1"] == ("binary", b"v1")
    assert got["x-stream-filter"] == ("string", "apple")
    assert got["x-delivery-count"] == ("long", 2)


def test_no_body_is_a_decode_error() -> None:
    """rabbit_amqp_session: mc:init throws missing_amqp_message_body, the link is
    detached with amqp:decode-error."""
    with pytest.raises(Amqp10Error) as info:
        amqp10_message.parse(properties(message_id=("string", "m")))
    assert info.value.condition == "amqp:decode-error"
    assert info.value.description == "message has no body"
    assert not info.value.ends_session
