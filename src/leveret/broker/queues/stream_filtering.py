"""Streams in RabbitMQ 4.2's mode: what a stream stores of a message, with its filter
value, and what a filtering consumer reads (rabbit_stream_queue at v4.2.9).

A message is stored as RabbitMQ 4.2 stores it (stream_message: ``mc:convert(mc_amqp,
Msg)``, then its protocol state): one published over AMQP 1.0 as it came, its header,
its message annotations with ``x-exchange`` and ``x-routing-key``, and its bare message
byte for byte; one published over AMQP 0-9-1 converted as RabbitMQ 3.10 does (Leveret's
conversion; 4.2's differs in where it puts ``x-`` headers). Its filter value (the chunk's
Bloom filter) is the ``x-stream-filter-value`` message annotation of an AMQP 1.0 message,
or the header of that name of an AMQP 0-9-1 one, when it is a string.

A consumer's filters (:class:`ConsumerFilter`): the values of its ``x-stream-filter``
(and ``x-stream-match-unfiltered``), which skip whole chunks by their Bloom filter, as
osiris's reader does, and an AMQP 1.0 consumer's property or SQL filter expressions,
evaluated on each message of the chunks read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from leveret.broker.amqp10_delivery import delivery
from leveret.broker.amqp10_message import Amqp10Error, Amqp10Message, parse
from leveret.broker.message import Message
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.protocol.binary import I64
from leveret.protocol.spec import add_header
from leveret.protocol.stream.bloom import Matcher

FILTER_VALUE = "x-stream-filter-value"
_FILTER_VALUE_BYTES = FILTER_VALUE.encode()
#: how many messages that do not match (or chunks skipped) one turn reads past before
#: it stops for the next tick (rabbit_stream_queue pauses after ?UNMATCHED_THRESHOLD)
SCAN_BUDGET = 20_000


class MessageMatcher(Protocol):
    def matches(self, entry: bytes) -> bool:
        """Whether a stored message passes."""
        ...


@dataclass(frozen=True, slots=True)
class ConsumerFilter:
    """A stream consumer's filters: ``chunks`` (None: every chunk), ``messages`` (None:
    every message of the chunks read)."""

    chunks: Matcher | None = None
    messages: MessageMatcher | None = None


def chunk_matcher(arguments: dict[str, Any]) -> Matcher | None:
    """rabbit_stream_queue:filter_spec: the Bloom filter matcher of a consumer's
    ``x-stream-filter`` (a string, or a list whose strings count) and
    ``x-stream-match-unfiltered``; None without filter values (match-unfiltered alone
    filters nothing)."""
    wanted = arguments.get("x-stream-filter")
    if isinstance(wanted, (str, bytes)):
        wanted = [wanted]
    if not isinstance(wanted, list):
        return None
    values = [v.encode() if isinstance(v, str) else bytes(v) for v in wanted
              if isinstance(v, (str, bytes))]  # fmt: skip
    if not values:
        return None
    return Matcher(values, arguments.get("x-stream-match-unfiltered") is True)


def stream_record(message: Message) -> tuple[bytes, bytes | None]:
    """What a stream stores of ``message`` in RabbitMQ 4.2's mode, and its filter value."""
    if isinstance(message, Amqp10Message):
        value = None
        for key, v in message.annotations:
            if key == FILTER_VALUE:
                if v[0] == "string":
                    value = v[1].encode()
                break
        return delivery(message), value
    stored = to_amqp10(message.exchange, message.routing_key, message.properties, message.body)
    value = None
    if _FILTER_VALUE_BYTES in message.properties:  # a header's name: decode them
        header = message.headers.get(FILTER_VALUE)
        if isinstance(header, str):
            value = header.encode()
        elif isinstance(header, bytes):
            try:
                header.decode()  # a longstr that is UTF-8: 4.2 makes it a utf8 value
                value = header
            except UnicodeDecodeError:
                value = None
    return stored, value


_HEADER_SECTION = b"\x00\x53\x70"


def amqp091_view(entry: bytes, stream: str, offset: int) -> tuple[bytes, bytes, bytes] | None:
    """A stored message that has a header section (one an AMQP 1.0 client published, as
    this mode stores it; Leveret's own conversion of AMQP 0-9-1 messages writes none) as
    RabbitMQ 4.2 delivers it to an AMQP 0-9-1 consumer (mc_amqpl's conversion from
    mc_amqp: delivery-mode from ``durable``, priority, the ``x-`` annotations among the
    headers), its exchange and routing key those stored, ``x-stream-offset`` added; None
    for the others (RabbitMQ 3.10's conversion back)."""
    if not entry.startswith(_HEADER_SECTION):
        return None
    try:
        parsed = parse(entry)
    except Amqp10Error:
        return None
    exchange, key = "", stream
    for name, value in parsed.annotations:
        if name == "x-exchange" and value[0] == "string":
            exchange = value[1]
        elif name == "x-routing-key" and value[0] == "string":
            key = value[1]
    message = parsed.message(exchange, key)
    properties = add_header(message.properties, "x-stream-offset", b"l" + I64.pack(offset))
    return message.exchange_and_key, properties, message.body
