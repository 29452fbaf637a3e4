"""Messages as RabbitMQ 4.2 delivers them to AMQP 1.0 consumers, the annotations a
delivery carries (quorum queues' counts, streams' offsets, ``modified`` outcomes, dead-
lettering), and the sections RabbitMQ refuses. Cases from RabbitMQ's own tests name them
(``deps/rabbit/test/amqp_client_SUITE.erl``, v4.2.9); the rest cite the source they read."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from leveret.broker import amqp10_delivery, amqp10_message, deadletter
from leveret.broker.amqp10_delivery import SettleOp, settle_op
from leveret.broker.amqp10_message import Amqp10Error, Amqp10Message
from leveret.broker.interceptors import Interceptors
from leveret.broker.message import Message
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.protocol import properties as props091
from leveret.protocol import table
from leveret.protocol.amqp10 import definitions as defs
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

_PUBLISHED = (
    header(durable=True, priority=5, ttl=60000)
    + types.section(0x71, ("map", [(("symbol", "x-opt-da"), ("long", 1))]))
    + annotations([("x-opt-mine", ("string", "kept")), ("x-exchange", ("string", "theirs"))])
    + properties(message_id=("string", "m1"), to=("string", "/queues/q"), subject=("string", "s"))
    + application([("k", ("long", 7))])
    + data(b"body")
)


def header_section(
    durable: bool, priority: int | None, ttl: int | None, first_acquirer: bool, deliveries: int
) -> list[tuple[str, Any]]:
    """The fields of a header section as ``field_list`` reads them (None: null)."""
    return [
        ("bool", durable),
        ("null", None) if priority is None else ("ubyte", priority),
        ("null", None) if ttl is None else ("uint", ttl),
        ("bool", first_acquirer),
        ("uint", deliveries),
    ]


def _published() -> Amqp10Message:
    return amqp10_message.parse(_PUBLISHED).message("amq.direct", "key")


def _bare(payload: bytes) -> bytes:
    return payload[amqp10_message.read_sections(payload).bare_at :]


def test_published_over_amqp10_keeps_its_bare_message_and_annotations() -> None:
    """mc_amqp:protocol_state(#v1{}): a header from the annotations, the message's own
    annotations with RabbitMQ's upserted (x-exchange replaced where it stands), the bare
    message as published; delivery annotations are dropped."""
    out = amqp10_delivery.delivery(_published())
    assert _bare(out) == _PUBLISHED[_PUBLISHED.index(b"\x00Ss") :]
    s = sections(out)
    assert field_list(s[0x70]) == header_section(True, 5, 60000, True, 0)
    assert s[0x72][1] == [
        (("symbol", "x-opt-mine"), ("string", "kept")),
        (("symbol", "x-exchange"), ("string", "amq.direct")),
        (("symbol", "x-routing-key"), ("string", "key")),
    ]
    assert 0x71 not in s


def test_routing_information() -> None:
    """What the session routes by: 'to' (anonymous terminus), 'subject' (v1 addresses),
    durability (for confirms)."""
    parsed = amqp10_message.parse(_PUBLISHED)
    assert (parsed.to, parsed.subject, parsed.durable) == ("/queues/q", "s", True)
    assert _published().persistent
    bare = amqp10_message.parse(data(b"x"))
    assert (bare.to, bare.subject, bare.durable, bare.cc) == (None, None, False, ())
    assert not bare.message("", "q").persistent
    assert props091.decode(bare.properties).delivery_mode is None


def test_durable_false_is_delivery_mode_1() -> None:
    """mc_amqpl:convert_from: header durable false -> delivery-mode 1."""
    parsed = amqp10_message.parse(header(durable=False) + data(b"x"))
    assert props091.decode(parsed.properties).delivery_mode == 1


def test_redelivery_and_delivery_count() -> None:
    """update_header_from_anns: first-acquirer only when not redelivered, delivery-count
    0 and no deaths."""
    m = _published()
    assert field_list(sections(amqp10_delivery.delivery(m, redelivered=True))[0x70])[3:] == [
        ("bool", False),
        ("uint", 0),
    ]
    got = field_list(sections(amqp10_delivery.delivery(m, delivery_count=2))[0x70])
    assert got[3:] == [("bool", False), ("uint", 2)]
    plain = Message.build("e", "k", b"b")
    got = field_list(sections(amqp10_delivery.delivery(plain, redelivered=True))[0x70])
    assert got[3:] == [("bool", False), ("uint", 0)]


def test_modified_quorum_queue_annotations() -> None:
    """modified_quorum_queue: annotations of modified outcomes stay with the message and
    reach AMQP 1.0 consumers as they were given (lists, maps and arrays too), AMQP 0-9-1
    consumers only the simple ones (x-other long 99, x-delivery-count long 5)."""
    op = settle_op(
        defs.Modified(
            True,
            False,
            {
                types.Symbol("x-opt-requeued-by"): types.Array("string", ("receiver 1",)),
                types.Symbol("x-opt-requeue-reason"): ["reason 1"],
                types.Symbol("x-other"): 99,
            },
        )
    )
    assert op.kind == "modify" and op.delivery_failed and not op.undeliverable_here
    assert op.annotations is not None
    anns = dict(op.annotations) | {"x-delivery-count": 5}
    m = _published()
    ma = amap(
        sections(amqp10_delivery.delivery(m, redelivered=True, delivery_count=1, annotations=anns))[
            0x72
        ]
    )
    assert ma["x-opt-requeued-by"] == ("array", [("string", "receiver 1")])
    assert ma["x-opt-requeue-reason"] == ("list", [("string", "reason 1")])
    assert ma["x-other"] == ("long", 99)
    assert ma["x-delivery-count"] == ("long", 5)
    headers = typed_headers(amqp10_delivery.annotation_headers(m.properties, anns))
    assert headers["x-other"] == ("long", 99)
    assert headers["x-delivery-count"] == ("long", 5)
    assert "x-opt-requeued-by" not in headers and "x-opt-requeue-reason" not in headers


def test_settle_ops() -> None:
    """settle_op_from_outcome: accepted complete, rejected discard, released requeue,
    modified with its defaults (false, false, no annotations)."""
    assert settle_op(defs.ACCEPTED) == SettleOp("complete")
    assert settle_op(defs.Rejected()) == SettleOp("discard")
    assert settle_op(defs.RELEASED) == SettleOp("requeue")
    assert settle_op(defs.Modified()) == SettleOp("modify", False, False, {})
    with pytest.raises(Amqp10Error) as info:
        settle_op(defs.Received(0, 0))
    assert info.value.condition == "amqp:invalid-field"
    assert info.value.description == (
        "Unrecognised state: {'v1_0.received',{uint,0},{ulong,0}} in DISPOSITION"
    )


def test_modified_annotations_only_x_symbols() -> None:
    """rabbit_amqp_session: a modified outcome's annotation keys must be x- symbols (its
    session fails on another: internal-error); values are unwrapped."""
    with pytest.raises(Amqp10Error) as info:
        amqp10_delivery.modified_annotations({"x-not-a-symbol": 1})
    assert info.value.ends_session and info.value.condition == "amqp:internal-error"
    with pytest.raises(Amqp10Error):
        amqp10_delivery.modified_annotations({types.Symbol("opt-key"): 1})
    got = amqp10_delivery.modified_annotations(
        {types.Symbol("x-a"): types.Symbol("s"), types.Symbol("x-b"): types.Timestamp(5)}
    )
    assert got == {"x-a": "s", "x-b": 5}


def test_annotation_headers_sorts_and_wins() -> None:
    """mc_amqpl:protocol_state: annotations as headers, then every header sorted by key,
    the annotation winning over a header of the same key."""
    raw = table.with_headers(b"\x00\x00", [("z", table.longstr("1")), ("x-a", table.long(1))])
    got = amqp10_delivery.annotation_headers(raw, {"x-a": 2, "x-b": "two", "x-c": True})
    assert table.headers(got) == [
        ("x-a", table.long(2)),
        ("x-b", table.longstr("two")),
        ("x-c", b"t\x01"),
        ("z", table.longstr("1")),
    ]
    assert amqp10_delivery.annotation_headers(raw, {"x-l": ("list", [])}) == raw


def test_dead_lettered_amqp10_message() -> None:
    """A message published over AMQP 1.0 and dead-lettered: x-opt-deaths as in
    amqp_client_SUITE (dead_letter_headers_exchange: queue, reason, count, first-time,
    last-time, exchange, routing-keys), the first death's x- annotations, the DLX's
    exchange and key, first-acquirer false, the TTL gone; the bare message unchanged."""
    m = _published()
    dead = deadletter.dead_lettered(m, "q1", "expired", "dlx", None, now_s=1700000000)
    assert isinstance(dead, Amqp10Message)
    assert dead.bare == m.bare
    out = amqp10_delivery.delivery(dead)
    s = sections(out)
    assert field_list(s[0x70]) == header_section(True, 5, None, False, 0)
    ma = amap(s[0x72])
    assert ma["x-exchange"] == ("string", "dlx")
    assert ma["x-routing-key"] == ("string", "key")
    assert ma["x-first-death-queue"] == ("string", "q1")
    assert ma["x-first-death-reason"] == ("string", "expired")
    assert ma["x-first-death-exchange"] == ("string", "amq.direct")
    deaths = ma["x-opt-deaths"]
    assert deaths[0] == "array"
    assert [item[1] for item in deaths[1]] == [
        [
            (("symbol", "ttl"), ("uint", 60000)),
            (("symbol", "queue"), ("string", "q1")),
            (("symbol", "reason"), ("symbol", "expired")),
            (("symbol", "count"), ("ulong", 1)),
            (("symbol", "first-time"), ("timestamp", 1700000000000)),
            (("symbol", "last-time"), ("timestamp", 1700000000000)),
            (("symbol", "exchange"), ("string", "amq.direct")),
            (("symbol", "routing-keys"), ("array", [("string", "key")])),
        ]
    ]
    assert "x-death" not in ma
    assert _bare(out) == m.bare


def test_dead_lettered_amqp091_message() -> None:
    """The same for a message published over AMQP 0-9-1: its x-death history as
    x-opt-deaths (without ttl when it had none)."""
    m = Message.build("ex", "rk", b"b", commands.Basic.Properties(delivery_mode=2))
    dead = deadletter.dead_lettered(m, "q1", "rejected", "", "dead", now_s=5)
    s = sections(amqp10_delivery.delivery(dead))
    ma = amap(s[0x72])
    assert field_list(s[0x70])[3] == ("bool", False)
    assert ma["x-routing-key"] == ("string", "dead")
    assert "x-death" not in ma
    (death,) = ma["x-opt-deaths"][1]
    assert dict((k[1], v) for k, v in death[1])["routing-keys"] == ("array", [("string", "rk")])


def test_x_opt_deaths_become_x_death() -> None:
    """mc_amqpl:convert_from_amqp_deaths: an AMQP 1.0 message's x-opt-deaths as the
    x-death header of AMQP 0-9-1 consumers (and back again)."""
    m = Message.build("ex", "rk", b"b")
    dead = deadletter.dead_lettered(m, "q1", "maxlen", "dlx", None, now_s=7)
    delivered = amqp10_delivery.delivery(dead)
    back = amqp10_message.parse(delivered)
    assert table.lookup(table.headers(back.properties) or [], "x-death") == table.lookup(
        table.headers(dead.properties) or [], "x-death"
    )


def test_interceptor_headers_become_annotations() -> None:
    """Headers the broker adds to a message published over AMQP 1.0 (RabbitMQ 4.2 keeps
    them as annotations): timestamp_in_ms as x-opt-rabbitmq-received-time, x-routed-by."""
    m = _published()
    stamped = Interceptors(set_header_timestamp=False, set_header_routing_node=False).intercept(
        m, "rabbit@h"
    )
    assert isinstance(stamped, Amqp10Message)
    ma = amap(sections(amqp10_delivery.delivery(stamped))[0x72])
    assert ma["x-opt-rabbitmq-received-time"][0] == "timestamp"
    assert ma["x-routed-by"] == ("string", "rabbit@h")
    assert "k" not in ma and "x-opt-da" not in ma


def test_stream_delivery_of_a_stored_amqp091_message() -> None:
    """rabbit_stream_queue:entry_to_msg then protocol_state: a RabbitMQ 3.10 stream entry
    (an AMQP 0-9-1 message) keeps its annotations, gets durable from
    x-basic-delivery-mode, and x-stream-offset."""
    raw = props091.encode_properties(commands.Basic.Properties(delivery_mode=2, message_id="i"))
    entry = to_amqp10("ex", "rk", raw, b"body")
    out = amqp10_delivery.stream_delivery(entry, 42, "s1")
    s = sections(out)
    assert field_list(s[0x70]) == header_section(True, None, None, True, 0)
    ma = amap(s[0x72])
    assert ma["x-routing-key"] == ("string", "rk")
    assert ma["x-exchange"] == ("string", "ex")
    assert ma["x-basic-delivery-mode"] == ("ubyte", 2)
    assert ma["x-stream-offset"] == ("long", 42)
    assert _bare(out) == _bare(entry)


def test_stream_delivery_without_annotations() -> None:
    """A stream entry without annotations: x-exchange "" and the stream's name as
    x-routing-key (entry_to_msg's annotations)."""
    entry = header(durable=False, priority=1) + data(b"b")
    s = sections(amqp10_delivery.stream_delivery(entry, 0, "s1"))
    assert field_list(s[0x70]) == header_section(False, 1, None, True, 0)
    assert s[0x72][1] == [
        (("symbol", "x-exchange"), ("string", "")),
        (("symbol", "x-routing-key"), ("string", "s1")),
        (("symbol", "x-stream-offset"), ("long", 0)),
    ]


@pytest.mark.parametrize(
    ("value", "keys", "error"),
    [
        (("list", [("string", "q1"), ("string", "q2")]), ("q1", "q2"), None),
        (("string", "q1"), (), "bad value for 'x-cc' message-annotation: {utf8,<<\"q1\">>}"),
        (
            ("list", [("symbol", "q1")]),
            (),
            "bad value for 'x-cc' message-annotation: {list,[{symbol,<<\"q1\">>}]}",
        ),
    ],
)
def test_x_cc(value: types.Value, keys: tuple[str, ...], error: str | None) -> None:
    """rabbit_amqp_session:lookup_routing_key: x-cc is a list of strings; anything else
    is refused with invalid-field when the message is routed."""
    parsed = amqp10_message.parse(annotations([("x-cc", value)]) + data(b"x"))
    assert parsed.cc == keys
    if error is None:
        assert parsed.cc_error is None
        assert parsed.message("e", "k").routing_keys == ("k", *keys)
    else:
        assert parsed.cc_error is not None
        assert parsed.cc_error.condition == "amqp:invalid-field"
        assert parsed.cc_error.description == error


@pytest.mark.parametrize(
    ("payload", "description"),
    [
        (
            annotations([("opt-key", ("long", 1))]) + data(b"x"),
            '{reserved_annotation_key,{symbol,<<"opt-key">>}}',
        ),
        (
            types.section(0x72, ("map", [(("ulong", 5), ("long", 1))])) + data(b"x"),
            "{reserved_annotation_key,{ulong,5}}",
        ),
        (
            types.section(0x71, ("map", [(("string", "x-a"), ("long", 1))])) + data(b"x"),
            '{reserved_annotation_key,{utf8,<<"x-a">>}}',
        ),
        (types.section(0x78, ("map", [])) + data(b"x"), "function_clause"),
        (types.section(0x79, ("list", [])) + data(b"x"), "function_clause"),
        (b"\x40" + data(b"x"), "function_clause"),
        (types.section(0x70, ("list", [("bool", True)] * 6)) + data(b"x"), "function_clause"),
        (application([]) + properties() + data(b"x"), "badarg"),
        (properties() + properties() + data(b"x"), "badarg"),
    ],
    ids=[
        "annotation key not x-",
        "ulong annotation key",
        "string delivery-annotation key",
        "footer before the body",
        "unknown section",
        "not a section",
        "header of 6 fields",
        "properties after application-properties",
        "two properties",
    ],
)
def test_sections_rabbitmq_refuses(payload: bytes, description: str) -> None:
    """Sections RabbitMQ's parser or mc_amqp cannot take: its session process fails and
    ends the session with amqp:internal-error (the description is the reason's term)."""
    with pytest.raises(Amqp10Error) as info:
        amqp10_message.parse(payload)
    assert info.value.condition == "amqp:internal-error"
    assert info.value.ends_session
    assert info.value.description == description


def test_truncated_section_is_refused() -> None:
    with pytest.raises(Amqp10Error) as info:
        amqp10_message.parse(properties(message_id=("string", "abc"))[:-2] + data(b"x"))
    assert info.value.condition == "amqp:internal-error" and info.value.ends_session


def test_the_body_is_not_checked() -> None:
    """In server mode RabbitMQ's parser stops at the body: a malformed body (or footer) is
    taken, kept whole, and given to AMQP 0-9-1 consumers as it came, typed amqp-1.0."""
    payload = properties(message_id=("string", "m")) + b"\x00\x53\x75\xa0\xff\x01"
    parsed = amqp10_message.parse(payload)
    assert parsed.body == b"\x00\x53\x75\xa0\xff\x01"
    assert props091.decode(parsed.properties).message_type == "amqp-1.0"
    assert parsed.bare == payload


def test_amqp_value_body() -> None:
    """A body that is not data sections: its sections and footer, as published, typed
    amqp-1.0 (mc_amqpl's ?AMQP10_TYPE)."""
    body = types.section(0x77, ("string", "v")) + types.section(0x78, ("map", []))
    parsed = amqp10_message.parse(body)
    assert parsed.body == body
    assert props091.decode(parsed.properties).message_type == "amqp-1.0"


def test_errors_of_the_session() -> None:
    """rabbit_amqp_session's texts for a message over max-message-size and a user-id
    that is not the user's."""
    assert amqp10_message.size_error(10, 5).description == (
        "message size (10 bytes) > maximum message size (5 bytes)"
    )
    assert amqp10_message.size_error(10, 5).condition == "amqp:link:message-size-exceeded"
    err = amqp10_message.user_id_error(b"bob", "guest", False)
    assert err is not None and err.condition == "amqp:unauthorized-access"
    assert err.description == "user_id property set to 'bob' but authenticated user was 'guest'"
    assert amqp10_message.user_id_error(b"bob", "guest", True) is None
    assert amqp10_message.user_id_error(b"guest", "guest", False) is None


def test_reply_to_addresses() -> None:
    """A reply-to of /queues/<name> is the name, URL-decoded; one that does not decode is
    dropped; any other text is kept as it is."""
    for reply_to, expected in [
        ("/queues/reply%2Fto", "reply/to"),
        ("/queues/bad%zz", None),
        ("/exchanges/amq.direct", "/exchanges/amq.direct"),
    ]:
        parsed = amqp10_message.parse(properties(reply_to=("string", reply_to)) + data(b"x"))
        assert props091.decode(parsed.properties).reply_to == expected


def test_keeps_its_form_through_the_broker() -> None:
    """with_properties (interceptors, quorum counts), with_route (dead-lettering) keep the
    AMQP 1.0 form; keyed (asking an exchange about a CC key) need not."""
    m = _published()
    assert isinstance(m.with_properties(m.properties), Amqp10Message)
    routed = m.with_route("x", ("a", "b"))
    assert isinstance(routed, Amqp10Message)
    assert routed.routing_keys == ("a", "b") and routed.bare == m.bare


def test_bytes_as_rabbitmq_writes_them() -> None:
    """amqp10_binary_generator's choices: booleans RabbitMQ sets are 0x41/0x42, a uint 0
    is 0x43, strings and lists in their short forms."""
    out = amqp10_delivery.delivery(Message.build("ex", "rk", b"hi"))
    assert out == (
        b"\x00\x53\x70\xc0\x06\x05\x42\x40\x40\x41\x43"
        + b"\x00\x53\x72\xc1\x24\x04"
        + b"\xa3\x0ax-exchange\xa1\x02ex"
        + b"\xa3\x0dx-routing-key\xa1\x02rk"
        + b"\x00\x53\x75\xa0\x02hi"
    )


def test_restored_from_a_store() -> None:
    """What a store keeps (origin) gives the message back as published, dead-lettered or
    not: the same deliveries."""
    for m in (_published(), deadletter.dead_lettered(_published(), "q", "expired", "d", None, 9)):
        assert isinstance(m, Amqp10Message)
        back = amqp10_message.restored(m.exchange_and_key, m.properties, m.body, m.origin())
        assert isinstance(back, Amqp10Message)
        assert amqp10_delivery.delivery(back) == amqp10_delivery.delivery(m)
        assert back.born_header == m.born_header


def test_payload_of_any_bytes_type() -> None:
    """A payload as a bytearray or memoryview (a client's encoder, a frame buffer) reads
    as its bytes."""
    want = amqp10_message.parse(_PUBLISHED)
    for payload in (bytearray(_PUBLISHED), memoryview(_PUBLISHED)):
        got = amqp10_message.parse(payload)  # type: ignore[arg-type]
        assert (got.properties, got.bare) == (want.properties, want.bare)
