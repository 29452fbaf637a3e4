"""What a stream-protocol peer sent, one event per frame. A client's commands first (what
a server decodes): one with a ``correlation_id`` is a request, which its owner answers
before taking the next event. Then the server's frames (what a client decodes): the
responses and the commands a server sends on its own. Tune, Close and Heartbeat have one
layout both ways and serve both."""

from __future__ import annotations

from dataclasses import dataclass

from leveret.protocol.sansio import NEED_DATA as NEED_DATA
from leveret.protocol.sansio import NeedData as NeedData


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
    """A tune: the server's proposal, or the client's answer (what it agreed on)."""

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
    arrives as ``(publishing id, None)`` in ``batches`` with its records. ``filters``: a
    version 2 publish's filter value of each message, in the order of ``messages`` (None:
    the message has none); None for version 1."""

    publisher_id: int
    messages: list[tuple[int, bytes]]
    batches: list[SubBatch]
    filters: list[bytes | None] | None = None


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
class ConsumerUpdateResponse:
    """The client's answer to a :class:`ConsumerUpdate`: where the subscription, now
    active, reads from (``offset_type`` NONE: from its own offset specification);
    ``offset``: the offset (OFFSET) or the timestamp in ms (TIMESTAMP)."""

    correlation_id: int
    code: int
    offset_type: int
    offset: int = 0


@dataclass(frozen=True, slots=True)
class ExchangeCommandVersions:
    """The commands a client speaks: ``(key, min version, max version)`` each."""

    correlation_id: int
    versions: list[tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class StreamStats:
    correlation_id: int
    stream: str


@dataclass(frozen=True, slots=True)
class CreateSuperStream:
    correlation_id: int
    name: str
    partitions: tuple[str, ...]
    binding_keys: tuple[str, ...]
    arguments: dict[str, str]


@dataclass(frozen=True, slots=True)
class DeleteSuperStream:
    correlation_id: int
    name: str


# ------------------------------------------------------------------ the server's frames
@dataclass(frozen=True, slots=True)
class Response:
    """A response that carries a code alone (declare publisher, delete publisher,
    subscribe, unsubscribe, create, delete, close): ``key`` is the request's key."""

    key: int
    correlation_id: int
    code: int


@dataclass(frozen=True, slots=True)
class PeerPropertiesResponse:
    correlation_id: int
    code: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class SaslHandshakeResponse:
    correlation_id: int
    code: int
    mechanisms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse:
    """``challenge`` is empty when the frame has none (as RabbitMQ sends it)."""

    correlation_id: int
    code: int
    challenge: bytes


@dataclass(frozen=True, slots=True)
class OpenResponse:
    """``properties`` is empty when the frame has none (a refused open)."""

    correlation_id: int
    code: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """``brokers``: (reference, host, port); ``streams``: (name, code, leader reference,
    replica references)."""

    correlation_id: int
    brokers: list[tuple[int, str, int]]
    streams: list[tuple[str, int, int, list[int]]]


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    code: int
    stream: str


@dataclass(frozen=True, slots=True)
class PublishConfirm:
    publisher_id: int
    publishing_ids: list[int]


@dataclass(frozen=True, slots=True)
class PublishError:
    """``errors``: (publishing id, code) each."""

    publisher_id: int
    errors: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class QueryPublisherSequenceResponse:
    correlation_id: int
    code: int
    sequence: int


@dataclass(frozen=True, slots=True)
class QueryOffsetResponse:
    correlation_id: int
    code: int
    offset: int


@dataclass(frozen=True, slots=True)
class CreditResponse:
    """The one response without a correlation id (a credit for an unknown subscription)."""

    code: int
    subscription_id: int


@dataclass(frozen=True, slots=True)
class RouteResponse:
    correlation_id: int
    code: int
    streams: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PartitionsResponse:
    correlation_id: int
    code: int
    streams: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Deliver:
    """One osiris chunk (header and data, see :mod:`leveret.protocol.stream.chunk`)."""

    subscription_id: int
    chunk: bytes


@dataclass(frozen=True, slots=True)
class DeliverV2:
    """A Deliver of version 2 (a client that asked for it): the chunk, after the id of
    the stream's last committed chunk."""

    subscription_id: int
    committed_chunk_id: int
    chunk: bytes


@dataclass(frozen=True, slots=True)
class ConsumerUpdate:
    """The server's request to a single active consumer's subscription: it becomes
    active (the client answers where to read from) or inactive."""

    correlation_id: int
    subscription_id: int
    active: int  # 1 or 0


@dataclass(frozen=True, slots=True)
class ExchangeCommandVersionsResponse:
    correlation_id: int
    code: int
    versions: list[tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class StreamStatsResponse:
    correlation_id: int
    code: int
    stats: dict[str, int]


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
    | ConsumerUpdateResponse
    | ExchangeCommandVersions
    | StreamStats
    | CreateSuperStream
    | DeleteSuperStream
    | UnknownFrame
    | FrameTooLarge
    | ConnectionFailed
)

Reply = (
    Response
    | PeerPropertiesResponse
    | SaslHandshakeResponse
    | SaslAuthenticateResponse
    | Tune
    | OpenResponse
    | Close
    | Heartbeat
    | MetadataResponse
    | MetadataUpdate
    | PublishConfirm
    | PublishError
    | QueryPublisherSequenceResponse
    | QueryOffsetResponse
    | CreditResponse
    | RouteResponse
    | PartitionsResponse
    | Deliver
    | DeliverV2
    | ConsumerUpdate
    | ExchangeCommandVersionsResponse
    | StreamStatsResponse
    | UnknownFrame
)
"""A server's frame, as a client decodes it."""
