"""Stream filtering over AMQP 1.0 with RabbitMQ's official Python client
(rabbitmq-amqp-python-client: its StreamConsumerOptions and StreamFilterOptions encode the
filters), against an in-process Leveret in its RabbitMQ 4.2 mode, over real sockets.

Leveret only: RabbitMQ 4 does not run here (3.10.8 has neither AMQP 1.0 streams filters
nor stream filtering). Each test names the v4.2.9 source it pins."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from rabbitmq_amqp_python_client import (
    Environment,
    OffsetSpecification,
    StreamConsumerOptions,
    StreamSpecification,
)
from rabbitmq_amqp_python_client.entities import MessageProperties, StreamFilterOptions
from rabbitmq_amqp_python_client.options import ReceiverOptionUnsettledWithFilters
from rabbitmq_amqp_python_client.qpid.proton import Message
from rabbitmq_amqp_python_client.qpid.proton._data import Described, symbol
from rabbitmq_amqp_python_client.qpid.proton._exceptions import Timeout

import leveret
from tests.support.mgmt import Api, q


@pytest.fixture(scope="module")
def broker() -> Iterator[leveret.Broker]:
    """RabbitMQ 4.2's mode, streams on disk."""
    with tempfile.TemporaryDirectory() as d:
        b = leveret.Broker(
            data_dir=Path(d), plugins="rabbitmq_amqp1_0", rabbitmq_version="4.2", management=True
        ).start()
        try:
            yield b
        finally:
            b.stop()


@pytest.fixture
def connection(broker: leveret.Broker) -> Iterator[Any]:
    env = Environment(f"amqp://guest:guest@{broker.host}:{broker.port}/")
    c = env.connection()
    c.dial()
    try:
        yield c
    finally:
        c.close()


def _stream(connection: Any, name: str) -> str:
    connection.management().declare_queue(StreamSpecification(name=name))
    return f"/queues/{name}"


def _publish(connection: Any, address: str, messages: list[Message]) -> None:
    """Each message waits for its outcome: one chunk each."""
    publisher = connection.publisher(address)
    for m in messages:
        publisher.publish(m)
    publisher.close()


def _receiver(connection: Any, address: str, options: StreamConsumerOptions) -> Any:
    raw = connection._conn  # the client's BlockingConnection: a receiver without a handler
    return raw.create_receiver(
        address, options=ReceiverOptionUnsettledWithFilters(address, options)
    )


def _echoed(receiver: Any) -> dict[Any, Any]:
    """The filter map of the broker's attach (the filters it put in place)."""
    data = receiver.link.remote_source.filter
    data.rewind()
    if not data.next():
        return {}
    got: dict[Any, Any] = data.get_dict()
    return got


def _drain(receiver: Any, timeout: float = 0.5) -> list[Message]:
    got = []
    while True:
        try:
            m = receiver.receive(timeout=timeout)
        except Timeout:
            return got
        receiver.accept()
        got.append(m)


def _first(filters: StreamFilterOptions) -> StreamConsumerOptions:
    return StreamConsumerOptions(
        offset_specification=OffsetSpecification.first, filter_options=filters
    )


def test_filter_values_skip_the_chunks_without_them(connection: Any) -> None:
    """rabbit_amqp_session:parse_filters (rabbitmq:stream-filter, rabbitmq:stream-match-
    unfiltered: x-stream-filter, x-stream-match-unfiltered), rabbit_stream_queue:
    filter_spec and stream_message (the x-stream-filter-value annotation), osiris_bloom:
    the chunks whose filter lacks the values are not read; match-unfiltered adds those
    without a value."""
    address = _stream(connection, "f-values")
    _publish(
        connection,
        address,
        [Message(body=b"a", annotations={"x-stream-filter-value": "apple"}) for _ in range(3)]
        + [Message(body=b"b", annotations={"x-stream-filter-value": "banana"}) for _ in range(3)]
        + [Message(body=b"n") for _ in range(3)],
    )
    r = _receiver(connection, address, _first(StreamFilterOptions(values=["banana"])))
    got = _drain(r)
    assert [m.annotations["x-stream-offset"] for m in got] == [3, 4, 5]
    assert all(m.annotations["x-stream-filter-value"] == "banana" for m in got)
    assert set(_echoed(r)) == {
        symbol("rabbitmq:stream-offset-spec"),
        symbol("rabbitmq:stream-filter"),
    }
    r.close()
    both = StreamFilterOptions(values=["banana"], match_unfiltered=True)
    r = _receiver(connection, address, _first(both))
    assert [m.annotations["x-stream-offset"] for m in _drain(r)] == [3, 4, 5, 6, 7, 8]
    assert symbol("rabbitmq:stream-match-unfiltered") in _echoed(r)
    r.close()


def test_filter_values_of_amqp091_publishers(connection: Any, broker: leveret.Broker) -> None:
    """rabbit_stream_queue:stream_message at v4.2.9: the filter value is the message's
    x-stream-filter-value x-header, which an AMQP 0-9-1 publisher sets as a header."""
    address = _stream(connection, "f-091")
    params = pika.ConnectionParameters(broker.host, broker.port)
    with pika.BlockingConnection(params) as c:
        ch = c.channel()
        ch.confirm_delivery()  # one chunk per message
        for value in ("red", "blue", "red"):
            props = pika.BasicProperties(headers={"x-stream-filter-value": value})
            ch.basic_publish("", "f-091", value.encode(), props)
    r = _receiver(connection, address, _first(StreamFilterOptions(values=["red"])))
    assert [bytes(m.body) for m in _drain(r)] == [b"red", b"red"]
    r.close()


def test_property_filters_pass_the_messages_whose_properties_match(connection: Any) -> None:
    """rabbit_amqp_filter_prop:parse and eval at v4.2.9: every field of an
    amqp:properties-filter must match (subject and group-id here) and every key of an
    amqp:application-properties-filter (&p: a prefix); both kinds at once, each echoed."""
    address = _stream(connection, "f-props")
    _publish(
        connection,
        address,
        [
            Message(
                body=f"m{i}".encode(),
                subject=f"important_{i}",
                group_id=f"group_{i % 2}",
                application_properties={"key": f"value_{i}"},
            )
            for i in range(12)
        ],
    )
    filters = StreamFilterOptions(
        message_properties=MessageProperties(subject="&p:important_1", group_id="group_1"),
        application_properties={"key": "&s:1"},
    )
    r = _receiver(connection, address, _first(filters))
    got = _drain(r)
    assert [m.subject for m in got] == ["important_1", "important_11"]
    assert got[0].group_id == "group_1"  # the message as published (4.2 keeps it)
    assert got[0].application_properties == {"key": "value_1"}
    echoed = _echoed(r)
    assert echoed[symbol("amqp:properties-filter")] == Described(
        symbol("amqp:properties-filter"),
        {symbol("subject"): "&p:important_1", symbol("group-id"): "group_1"},
    )
    assert symbol("amqp:application-properties-filter") in echoed
    r.close()


def test_a_property_filter_4_2_cannot_take_is_left_out(connection: Any) -> None:
    """rabbit_amqp_filter_prop:parse_string_modifier_prefix at v4.2.9: a reference value
    starting with '&' but no known modifier makes the filter unusable; parse_filters
    leaves it out of the attach's filter map and every message comes."""
    address = _stream(connection, "f-bad-prop")
    _publish(connection, address, [Message(body=b"x", subject="s") for _ in range(2)])
    bad = StreamFilterOptions(message_properties=MessageProperties(subject="&x:s"))
    r = _receiver(connection, address, _first(bad))
    assert len(_drain(r)) == 2
    assert set(_echoed(r)) == {symbol("rabbitmq:stream-offset-spec")}
    r.close()


def test_sql_filter_expressions(connection: Any) -> None:
    """rabbit_amqp_filter_sql:parse and eval at v4.2.9 (the expression of the client's own
    test_stream_filter_sql): LIKE, properties.reply_to, an application property; the
    filter echoed under its name sql-filter."""
    address = _stream(connection, "f-sql")
    _publish(connection, address, [Message(body=f"no{i}".encode()) for i in range(5)])
    _publish(
        connection,
        address,
        [
            Message(
                body=b"yes",
                subject="something_in_the_filter",
                reply_to="the_reply_to",
                application_properties={"a_key": "a_value", "n": 7},
            )
        ],
    )
    sql = (
        "properties.subject LIKE '%in_the_filter%' AND properties.reply_to = 'the_reply_to' "
        "AND a_key = 'a_value' AND n * 2 > 13.5 AND header.priority = 4"
    )
    r = _receiver(connection, address, _first(StreamFilterOptions(sql=sql)))
    got = _drain(r)
    assert [bytes(m.body) for m in got] == [b"yes"]
    echoed = _echoed(r)
    assert echoed[symbol("sql-filter")] == Described(symbol("amqp:sql-filter"), sql)
    r.close()


def test_a_sql_expression_4_2_refuses_is_left_out(connection: Any) -> None:
    """rabbit_amqp_filter_sql:parse at v4.2.9 returns error for what does not scan (a
    lower-case keyword is an unsupported identifier): parse_filters leaves the filter out
    of the attach's answer, and the link reads every message."""
    address = _stream(connection, "f-bad-sql")
    _publish(connection, address, [Message(body=b"x") for _ in range(3)])
    r = _receiver(connection, address, _first(StreamFilterOptions(sql="a = 1 and b = 2")))
    assert len(_drain(r)) == 3
    assert symbol("sql-filter") not in _echoed(r)
    r.close()


def test_sql_and_property_filters_exclude_each_other(connection: Any) -> None:
    """rabbit_amqp_session:parse_filters at v4.2.9 folds the map from its end
    (lists:foldr): of a SQL filter and a property filter, the later in the map is put in
    place, the other left out."""
    address = _stream(connection, "f-excl")
    _publish(connection, address, [Message(body=b"x", subject=f"s{i}") for i in range(3)])
    filters = StreamFilterOptions(
        message_properties=MessageProperties(subject="s0"), sql="properties.subject = 's2'"
    )
    # the client puts the properties filter first, the SQL filter after it
    r = _receiver(connection, address, _first(filters))
    assert [m.subject for m in _drain(r)] == ["s2"]
    echoed = _echoed(r)
    assert symbol("sql-filter") in echoed
    assert symbol("amqp:properties-filter") not in echoed
    r.close()


def test_the_management_api_lists_the_filters_in_place(
    connection: Any, broker: leveret.Broker
) -> None:
    """rabbit_amqp_session at v4.2.9: a session's outgoing link lists its filters in place
    (info_outgoing_link, format_filter: name, descriptor, value; a map as key/value
    pairs), and its consumer the arguments its attach made (parse_filters' ConsumerArgs,
    given to rabbit_stream_queue:consume and rabbit_core_metrics:consumer_created)."""
    address = _stream(connection, "f-mgmt")
    filters = StreamFilterOptions(
        values=["a"], match_unfiltered=True, message_properties=MessageProperties(subject="s")
    )
    r = _receiver(connection, address, _first(filters))
    api = Api(broker.management_url)
    rows = [c for c in api.get("/api/consumers") if c["queue"]["name"] == "f-mgmt"]
    assert [c["arguments"] for c in rows] == [
        {"x-stream-offset": "first", "x-stream-filter": ["a"], "x-stream-match-unfiltered": True}
    ]
    links = [
        link
        for conn in api.get("/api/connections")
        if conn["protocol"] == "AMQP 1-0"
        for session in api.get(f"/api/connections/{q(str(conn['name']))}/sessions")
        for link in session["outgoing_links"]
        if link["queue_name"] == "f-mgmt"
    ]
    assert [link["filter"] for link in links] == [
        [
            {"name": "rabbitmq:stream-offset-spec", "descriptor": "rabbitmq:stream-offset-spec",
             "value": "first"},
            {"name": "rabbitmq:stream-filter", "descriptor": "rabbitmq:stream-filter",
             "value": ["a"]},
            {"name": "rabbitmq:stream-match-unfiltered",
             "descriptor": "rabbitmq:stream-match-unfiltered", "value": True},
            {"name": "amqp:properties-filter", "descriptor": "amqp:properties-filter",
             "value": [{"key": "subject", "value": "s"}]},
        ]
    ]  # fmt: skip
    r.close()


def test_a_long_scan_pauses_and_goes_on(
    connection: Any, broker: leveret.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rabbit_stream_queue:stream_entries at v4.2.9 pauses a consumer's filtering after
    ?UNMATCHED_THRESHOLD messages passed over, to go on after its mailbox: here after
    SCAN_BUDGET (made 5), at the broker's next tick; what matches further on still comes,
    and nothing passed over is delivered. The messages come from AMQP 0-9-1 (headers as
    application properties, as stored)."""
    monkeypatch.setattr("leveret.broker.queues.stream.SCAN_BUDGET", 5)
    address = _stream(connection, "f-scan")
    params = pika.ConnectionParameters(broker.host, broker.port)
    with pika.BlockingConnection(params) as c:
        ch = c.channel()
        for i in range(40):
            props = pika.BasicProperties(headers={"n": i})
            ch.basic_publish("", "f-scan", str(i).encode(), props)
    r = _receiver(connection, address, _first(StreamFilterOptions(sql="n % 13 = 12")))
    # the receiver sends no flow while it waits: the first comes by the ticks alone
    first = r.receive(timeout=5)
    r.accept()
    assert bytes(first.body) == b"12"
    assert [bytes(m.body) for m in _drain(r, timeout=1.0)] == [b"25", b"38"]
    r.close()


def test_a_stream_keeps_an_amqp10_message_as_published(
    connection: Any, broker: leveret.Broker
) -> None:
    """rabbit_stream_queue:stream_message at v4.2.9 stores mc_amqp's protocol state (the
    annotations, with x-exchange and x-routing-key, and the bare message as published):
    an AMQP 1.0 consumer gets subject and annotations back; an AMQP 0-9-1 consumer gets
    mc_amqpl's conversion of it (delivery-mode from durable, priority, the x- annotations
    and application properties as headers) with x-stream-offset."""
    address = _stream(connection, "f-kept")
    message = Message(
        body=b"hello",
        subject="subj",
        durable=True,
        priority=3,
        application_properties={"k": "v"},
        annotations={"x-foo": "bar"},
    )
    _publish(connection, address, [message])
    r = _receiver(connection, address, _first(StreamFilterOptions(sql="TRUE")))
    (got,) = _drain(r)
    assert (got.subject, got.priority, got.annotations["x-foo"]) == ("subj", 3, "bar")
    r.close()
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=1)
        method, props, body = None, None, b""

        def take(ch_: Any, m: Any, p: Any, b: bytes) -> None:
            nonlocal method, props, body
            method, props, body = m, p, b

        ch.basic_consume("f-kept", take, arguments={"x-stream-offset": "first"})
        for _ in range(50):
            if method is not None:
                break
            c.process_data_events(time_limit=0.1)
    assert body == b"hello" and method is not None and props is not None
    assert (method.exchange, method.routing_key) == ("", "f-kept")
    assert (props.delivery_mode, props.priority) == (2, 3)
    assert props.headers == {"k": "v", "x-foo": "bar", "x-stream-offset": 0}
