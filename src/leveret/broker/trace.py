"""Firehose tracing, as rabbit_trace: while tracing is on in a vhost, every message
published there is copied to ``amq.rabbitmq.trace`` with the routing key
``publish.<exchange>``, and every delivery (to a consumer or ``basic.get``) with
``deliver.<queue>``; the copy's headers say who, where and how, and its body is the
message's."""

from __future__ import annotations

import struct
from typing import NamedTuple

from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.frames import BASIC_PROPERTIES
from leveret.protocol.table import Field

TRACE_EXCHANGE = "amq.rabbitmq.trace"
_HEADERS_ONLY = b"\x20\x00"  # property flags: headers (0x2000) and nothing else
_i32 = struct.Struct(">i")

# The P_basic record's field names where rabbit_trace's differ from the method table's.
_RECORD_NAMES = {"message_type": "type"}


def signedint(value: int) -> bytes:
    """An Erlang ``signedint`` field: 32 bits, wrapped as RabbitMQ's encoder wraps."""
    return b"I" + _i32.pack((value + 2**31) % 2**32 - 2**31)


def message_fields(message: Message, node: str) -> list[Field]:
    """rabbit_trace:msg_to_table: the exchange, every routing key, the properties that are
    set (a table stays a table, integers are signedints, the rest long strings), and the
    node."""
    raw = message.properties
    spans = table.property_spans(raw)
    properties: list[Field] = []
    for flag, name, kind in reversed(BASIC_PROPERTIES):  # rabbit_trace lists them backwards
        span = spans.get(flag)
        if span is None:
            continue
        start, end = span
        if kind == "table":
            value = b"F" + raw[start:end]
        elif kind == "shortstr":
            value = table.longstr(raw[start + 1 : end])
        else:  # octet or timestamp
            value = signedint(int.from_bytes(raw[start:end], "big"))
        properties.append((_RECORD_NAMES.get(name, name), value))
    return [
        ("exchange_name", table.longstr(message.exchange)),
        ("routing_keys", table.array([table.longstr(k) for k in message.routing_keys])),
        ("properties", table.table(properties)),
        ("node", table.longstr(node)),
    ]


class Tap(NamedTuple):
    """Who published, for the firehose trace: the connection's name, the channel, the
    user."""

    connection: str
    channel: int
    user: str


def _tap_fields(vhost: str, tap: Tap) -> list[Field]:
    return [
        ("vhost", table.longstr(vhost)),
        ("connection", table.longstr(tap.connection)),
        ("channel", signedint(tap.channel)),
        ("user", table.longstr(tap.user)),
    ]


def publish_trace(
    message: Message, queues: list[str], vhost: str, tap: Tap, node: str
) -> Message | None:
    """The trace of a publish (None for a message published to the trace exchange)."""
    routed = table.array([table.longstr(q) for q in sorted(set(queues))])
    extra = [*_tap_fields(vhost, tap), ("routed_queues", routed)]
    return _trace("publish." + message.exchange, message, node, extra)


def deliver_trace(
    message: Message, queue: str, redelivered: bool, vhost: str, tap: Tap, node: str
) -> Message | None:
    """The trace of a delivery (None for a message published to the trace exchange)."""
    extra = [("redelivered", signedint(1 if redelivered else 0)), *_tap_fields(vhost, tap)]
    return _trace("deliver." + queue, message, node, extra)


def _trace(routing_key: str, message: Message, node: str, extra: list[Field]) -> Message | None:
    if message.exchange == TRACE_EXCHANGE:
        return None  # the trace exchange's own messages are not traced
    properties = _HEADERS_ONLY + table.encode_table([*message_fields(message, node), *extra])
    return Message.from_parts(TRACE_EXCHANGE, routing_key, properties, message.body)
