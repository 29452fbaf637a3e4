"""What a stream-protocol peer sent, one event per frame. An event with a
``correlation_id`` is a request: its owner answers it before taking the next event."""

from __future__ import annotations

from dataclasses import dataclass


class NeedData:
    """No complete frame is buffered: feed more bytes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


@dataclass(frozen=True, slots=True)
class PeerProperties:
    correlation_id: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class SaslHandshake:
    correlation_id: int


@dataclass(frozen=True, slots=True)
class SaslAuthenticate:
    correlation_id: int
    mechanism: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Tune:
    """The client's tune (its answer to ours): what it agreed on."""

    frame_max: int
    heartbeat: int


@dataclass(frozen=True, slots=True)
class Open:
    correlation_id: int
    virtual_host: str


@dataclass(frozen=True, slots=True)
class Close:
    correlation_id: int
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class CloseResponse:
    correlation_id: int
    code: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


@dataclass(frozen=True, slots=True)
class Metadata:
    correlation_id: int
    streams: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Create:
    correlation_id: int
    stream: str
    arguments: dict[str, str]


@dataclass(frozen=True, slots=True)
class Delete:
    correlation_id: int
    stream: str


@dataclass(frozen=True, slots=True)
class DeclarePublisher:
    correlation_id: int
    publisher_id: int
    reference: str
    stream: str


@dataclass(frozen=True, slots=True)
class Publish:
    """Messages, each ``(publishing id, AMQP 1.0 message bytes)``. A sub-entry batch
    arrives as ``(publishing id, None)`` in ``batches`` with its records."""

    publisher_id: int
    messages: list[tuple[int, bytes]]
    batches: list[SubBatch]


@dataclass(frozen=True, slots=True)
class SubBatch:
    publishing_id: int
    compression: int
    records: int
    uncompressed_size: int
    data: bytes


@dataclass(frozen=True, slots=True)
class QueryPublisherSequence:
    correlation_id: int
    reference: str
    stream: str


@dataclass(frozen=True, slots=True)
class DeletePublisher:
    correlation_id: int
    publisher_id: int


@dataclass(frozen=True, slots=True)
class Subscribe:
    correlation_id: int
    subscription_id: int
    stream: str
    offset_type: int
    offset: int  # the offset (OFFSET) or the timestamp in ms (TIMESTAMP); 0 otherwise
    credit: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class Credit:
    subscription_id: int
    credit: int


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    correlation_id: int
    subscription_id: int


@dataclass(frozen=True, slots=True)
class StoreOffset:
    reference: str
    stream: str
    offset: int


@dataclass(frozen=True, slots=True)
class QueryOffset:
    correlation_id: int
    reference: str
    stream: str


@dataclass(frozen=True, slots=True)
class Route:
    correlation_id: int
    routing_key: str
    super_stream: str


@dataclass(frozen=True, slots=True)
class Partitions:
    correlation_id: int
    super_stream: str


@dataclass(frozen=True, slots=True)
class UnknownFrame:
    """A frame of a command this side does not take (or cannot parse)."""

    key: int
    version: int


@dataclass(frozen=True, slots=True)
class FrameTooLarge:
    """A frame larger than the negotiated frame_max: its bytes were not read."""

    size: int


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """The peer broke the handshake (a command out of turn, a frame that does not parse
    before the connection is open): the connection is over, without a word, as RabbitMQ
    ends it."""

    reason: str


Event = (
    PeerProperties
    | SaslHandshake
    | SaslAuthenticate
    | Tune
    | Open
    | Close
    | CloseResponse
    | Heartbeat
    | Metadata
    | Create
    | Delete
    | DeclarePublisher
    | Publish
    | QueryPublisherSequence
    | DeletePublisher
    | Subscribe
    | Credit
    | Unsubscribe
    | StoreOffset
    | QueryOffset
    | Route
    | Partitions
    | UnknownFrame
    | FrameTooLarge
    | ConnectionFailed
)
