"""Events the sans-IO connection hands to its owner, one at a time.

An event that asks for an answer names it: the owner answers before it asks for the next
event, so replies keep the order of the requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from leveret.protocol.errors import AMQPError
from leveret.protocol.sansio import NEED_DATA as NEED_DATA
from leveret.protocol.sansio import NeedData as NeedData
from leveret.protocol.spec import Method


@dataclass(frozen=True, slots=True)
class HeaderReceived:
    """A valid protocol header. Answer: ``send_start``."""


@dataclass(frozen=True, slots=True)
class UnsupportedProtocol:
    """A protocol header of another protocol or version. Answer:
    ``send_protocol_header`` (RabbitMQ names the protocol it speaks and hangs up)."""

    header: bytes


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
    """connection.open. Answer: ``send_open_ok`` or ``send_close``."""

    virtual_host: str


@dataclass(frozen=True, slots=True)
class ChannelOpenReceived:
    """channel.open. Answer: ``send_channel_open_ok``."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelCloseReceived:
    """The peer closed a channel. Answer: ``send_channel_close_ok``."""

    channel: int
    reply_code: int
    reply_text: str


@dataclass(frozen=True, slots=True)
class ChannelCloseOkReceived:
    """The peer answered the channel.close we sent; the number is free again."""

    channel: int


@dataclass(frozen=True, slots=True)
class AccessRequestReceived:
    """access.request (deprecated). Answer: ``send_access_request_ok``."""

    channel: int


@dataclass(frozen=True, slots=True)
class UpdateSecretReceived:
    """connection.update-secret. Answer: ``send_update_secret_ok`` or ``send_close``."""

    new_secret: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class MethodReceived:
    channel: int
    method: Method


class PublishReceived(NamedTuple):
    """A complete basic.publish: method, content header and body.

    ``exchange_and_key`` is the wire encoding of the exchange and routing key
    (two short strings), kept so deliveries can splice it without re-encoding.
    A named tuple: one is made per message, in C (``tuple.__new__``), and its owner
    hands it on unpacked (``session.publish(*event)``).
    """

    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    exchange_and_key: bytes
    properties: bytes
    body: bytes

    def __repr__(self) -> str:
        return (
            f"PublishReceived(channel={self.channel}, exchange={self.exchange!r}, "
            f"routing_key={self.routing_key!r}, body={len(self.body)} bytes)"
        )


@dataclass(frozen=True, slots=True)
class ConnectionCloseReceived:
    """The peer closed the connection. Answer: ``send_close_ok``."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(frozen=True, slots=True)
class ConnectionCloseOkReceived:
    pass


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """The peer broke the protocol and nothing more is read.

    ``reply`` says whether RabbitMQ would answer with connection.close (the owner then
    calls ``send_close(error)``) or end the TCP connection without a word (``drop``)."""

    error: AMQPError
    reply: bool


Event = (
    HeaderReceived
    | UnsupportedProtocol
    | StartOkReceived
    | TuneOkReceived
    | OpenReceived
    | ChannelOpenReceived
    | ChannelCloseReceived
    | ChannelCloseOkReceived
    | AccessRequestReceived
    | UpdateSecretReceived
    | MethodReceived
    | PublishReceived
    | ConnectionCloseReceived
    | ConnectionCloseOkReceived
    | ConnectionFailed
)
