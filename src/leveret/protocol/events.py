"""Events the sans-IO connection hands to its owner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import Method


@dataclass(frozen=True, slots=True)
class StartOkReceived:
    client_properties: dict[str, Any]
    mechanism: str
    response: bytes
    locale: str


@dataclass(frozen=True, slots=True)
class TuneOkReceived:
    channel_max: int
    frame_max: int
    heartbeat: int


@dataclass(frozen=True, slots=True)
class OpenReceived:
    virtual_host: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The client closed the channel (we already answered close-ok), or it answered
    the close we sent."""

    channel: int
    by_client: bool


@dataclass(frozen=True, slots=True)
class MethodReceived:
    channel: int
    method: Method


class PublishReceived:
    """A complete basic.publish: method, content header and body.

    ``exchange_and_key`` is the wire encoding of the exchange and routing key
    (two short strings), kept so deliveries can splice it without re-encoding.
    A plain slotted class rather than a frozen dataclass: one is made per message.
    """

    __slots__ = (
        "body",
        "channel",
        "exchange",
        "exchange_and_key",
        "immediate",
        "mandatory",
        "properties",
        "routing_key",
    )

    def __init__(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        mandatory: bool,
        immediate: bool,
        exchange_and_key: bytes,
        properties: bytes,
        body: bytes,
    ) -> None:
        self.channel = channel
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate
        self.exchange_and_key = exchange_and_key
        self.properties = properties
        self.body = body

    def __repr__(self) -> str:
        return (
            f"PublishReceived(channel={self.channel}, exchange={self.exchange!r}, "
            f"routing_key={self.routing_key!r}, body={len(self.body)} bytes)"
        )


@dataclass(frozen=True, slots=True)
class ConnectionCloseReceived:
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(frozen=True, slots=True)
class ConnectionCloseOkReceived:
    pass


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """The peer broke the protocol; connection.close has been queued for it."""

    error: AMQPError


Event = (
    StartOkReceived
    | TuneOkReceived
    | OpenReceived
    | ChannelOpened
    | ChannelClosed
    | MethodReceived
    | PublishReceived
    | ConnectionCloseReceived
    | ConnectionCloseOkReceived
    | ConnectionFailed
)
