"""Server frames, both ways: the responses, and the commands a server sends on its own
(tune, close, heartbeat, metadata update, publish confirm and error, deliver). The server
encodes them with the functions here; a client decodes them with :func:`decode_reply`.
One schema per key drives both directions (the field types of
:mod:`leveret.protocol.stream.frames`), as for the client's frames."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from leveret.protocol.stream import events as ev
from leveret.protocol.stream.frames import Reader, Schemas, decode_frame, frame, write_fields
from leveret.protocol.stream.spec import RESPONSE, VERSION_1, VERSION_2, Key

_RESP = struct.Struct(">IH")  # correlation id, response code
_DELIVER_HEAD = struct.Struct(">IHHB")  # size, key, version, subscription id
_DELIVER_V2_HEAD = struct.Struct(">IHHBQ")  # and the committed chunk id
#: Where a Deliver frame's chunk starts in the frame without its size prefix (after the
#: key, the version and the subscription id).
CHUNK_AT = 5
CHUNK_AT_V2 = 13  # a Deliver of version 2: after the committed chunk id

# The server's frames whose layout is a flat list of fields, in the event's field order.
# Every other response (a code alone) is a Response. Route and Partitions are answered
# under the request's key, without the response bit, as RabbitMQ 3.10.8 answers them.
_SCHEMAS: Schemas = {
    Key.PEER_PROPERTIES | RESPONSE: (ev.PeerPropertiesResponse, ("u32", "u16", "map")),
    Key.SASL_HANDSHAKE | RESPONSE: (ev.SaslHandshakeResponse, ("u32", "u16", "strs")),
    # as RabbitMQ: the challenge field is there only when there is a challenge
    Key.SASL_AUTHENTICATE | RESPONSE: (ev.SaslAuthenticateResponse, ("u32", "u16", "bytes?")),
    Key.TUNE: (ev.Tune, ("u32", "u32")),
    # as RabbitMQ: no properties array at all when there are none (a refused open)
    Key.OPEN | RESPONSE: (ev.OpenResponse, ("u32", "u16", "map?")),
    Key.CLOSE: (ev.Close, ("u32", "u16", "str")),
    Key.HEARTBEAT: (ev.Heartbeat, ()),
    Key.METADATA | RESPONSE: (ev.MetadataResponse, ("u32", "brokers", "streams")),
    Key.METADATA_UPDATE: (ev.MetadataUpdate, ("u16", "str")),
    Key.PUBLISH_CONFIRM: (ev.PublishConfirm, ("u8", "u64s")),
    Key.PUBLISH_ERROR: (ev.PublishError, ("u8", "errors")),
    Key.QUERY_PUBLISHER_SEQUENCE | RESPONSE: (
        ev.QueryPublisherSequenceResponse,
        ("u32", "u16", "u64"),
    ),
    Key.QUERY_OFFSET | RESPONSE: (ev.QueryOffsetResponse, ("u32", "u16", "u64")),
    # the one response without a correlation id
    Key.CREDIT | RESPONSE: (ev.CreditResponse, ("u16", "u8")),
    Key.ROUTE: (ev.RouteResponse, ("u32", "u16", "strs")),
    Key.PARTITIONS: (ev.PartitionsResponse, ("u32", "u16", "strs")),
    Key.DELIVER: (ev.Deliver, ("u8", "rest")),
    # RabbitMQ 3.11-3.13's
    Key.CONSUMER_UPDATE: (ev.ConsumerUpdate, ("u32", "u8", "u8")),
    Key.EXCHANGE_COMMAND_VERSIONS | RESPONSE: (
        ev.ExchangeCommandVersionsResponse,
        ("u32", "u16", "versions"),
    ),
    Key.STREAM_STATS | RESPONSE: (ev.StreamStatsResponse, ("u32", "u16", "int_map")),
}
_KEYS: dict[type[Any], int] = {cls: key for key, (cls, _) in _SCHEMAS.items()}
# RabbitMQ 3.13 answers Route and Partitions as any response, with the response bit
_SCHEMAS[Key.ROUTE | RESPONSE] = _SCHEMAS[Key.ROUTE]
_SCHEMAS[Key.PARTITIONS | RESPONSE] = _SCHEMAS[Key.PARTITIONS]


def _encode(key: int, *values: Any) -> bytes:
    return frame(key, write_fields(_SCHEMAS[key][1], values))


def response(key: int, correlation_id: int, code: int) -> bytes:
    """A response with a code alone: the request's key with the response bit, its
    correlation id, the code."""
    return frame(key | RESPONSE, _RESP.pack(correlation_id, code))


def peer_properties(correlation_id: int, code: int, properties: dict[str, str]) -> bytes:
    return _encode(Key.PEER_PROPERTIES | RESPONSE, correlation_id, code, properties)


def sasl_handshake(correlation_id: int, code: int, mechanisms: Iterable[str]) -> bytes:
    return _encode(Key.SASL_HANDSHAKE | RESPONSE, correlation_id, code, list(mechanisms))


def sasl_authenticate(correlation_id: int, code: int, challenge: bytes = b"") -> bytes:
    return _encode(Key.SASL_AUTHENTICATE | RESPONSE, correlation_id, code, challenge)


def tune(frame_max: int, heartbeat: int) -> bytes:
    return _encode(Key.TUNE, frame_max, heartbeat)


def open_response(correlation_id: int, code: int, properties: dict[str, str]) -> bytes:
    return _encode(Key.OPEN | RESPONSE, correlation_id, code, properties)


def close(correlation_id: int, code: int, reason: str) -> bytes:
    return _encode(Key.CLOSE, correlation_id, code, reason)


def heartbeat() -> bytes:
    return _encode(Key.HEARTBEAT)


def metadata(
    correlation_id: int,
    brokers: list[tuple[int, str, int]],
    streams: list[tuple[str, int, int, list[int]]],
) -> bytes:
    """``brokers``: (reference, host, port); ``streams``: (name, code, leader reference,
    replica references). A stream that is not found has code 2 and leader 0xFFFF."""
    return _encode(Key.METADATA | RESPONSE, correlation_id, brokers, streams)


def metadata_update(code: int, stream: str) -> bytes:
    return _encode(Key.METADATA_UPDATE, code, stream)


def publish_confirm(publisher_id: int, publishing_ids: list[int]) -> bytes:
    return _encode(Key.PUBLISH_CONFIRM, publisher_id, publishing_ids)


def publish_error(publisher_id: int, code: int, publishing_ids: list[int]) -> bytes:
    """The same ``code`` for each of ``publishing_ids``."""
    return _encode(Key.PUBLISH_ERROR, publisher_id, [(p, code) for p in publishing_ids])


def query_publisher_sequence(correlation_id: int, code: int, sequence: int) -> bytes:
    return _encode(Key.QUERY_PUBLISHER_SEQUENCE | RESPONSE, correlation_id, code, sequence)


def query_offset(correlation_id: int, code: int, offset: int) -> bytes:
    return _encode(Key.QUERY_OFFSET | RESPONSE, correlation_id, code, offset)


def credit_response(code: int, subscription_id: int) -> bytes:
    return _encode(Key.CREDIT | RESPONSE, code, subscription_id)


def streams_response(
    key: int, correlation_id: int, code: int, names: list[str], response_bit: bool = False
) -> bytes:
    """Route and Partitions: a code, then a list of stream names, under the request's
    key: without the response bit as RabbitMQ 3.10.8 sends them, with it (``response_bit``)
    as RabbitMQ 3.13 does."""
    return frame(
        key | RESPONSE if response_bit else key,
        write_fields(_SCHEMAS[key][1], (correlation_id, code, names)),
    )


def consumer_update(correlation_id: int, subscription_id: int, active: bool) -> bytes:
    """The server's request to a single active consumer's subscription (RabbitMQ 3.11)."""
    return _encode(Key.CONSUMER_UPDATE, correlation_id, subscription_id, int(active))


def exchange_command_versions(
    correlation_id: int, code: int, versions: list[tuple[int, int, int]]
) -> bytes:
    return _encode(Key.EXCHANGE_COMMAND_VERSIONS | RESPONSE, correlation_id, code, versions)


def stream_stats(correlation_id: int, code: int, stats: dict[str, int]) -> bytes:
    return _encode(Key.STREAM_STATS | RESPONSE, correlation_id, code, stats)


def deliver_header(subscription_id: int, chunk_size: int, committed: int | None = None) -> bytes:
    """What goes before an osiris chunk in a Deliver frame: the chunk follows as it is
    (written separately, so stored chunk bytes need no copy). With ``committed`` (the id
    of the stream's last committed chunk), a Deliver of version 2, for a client that asked
    for it: its chunk is at :data:`CHUNK_AT_V2`."""
    if committed is None:
        return _DELIVER_HEAD.pack(chunk_size + CHUNK_AT, Key.DELIVER, VERSION_1, subscription_id)
    return _DELIVER_V2_HEAD.pack(
        chunk_size + CHUNK_AT_V2, Key.DELIVER, VERSION_2, subscription_id, committed
    )


def encode_reply(event: ev.Reply) -> bytes:
    """A server frame as a whole frame (the inverse of :func:`decode_reply`)."""
    if isinstance(event, ev.Response):
        return response(event.key, event.correlation_id, event.code)
    if isinstance(event, ev.UnknownFrame):
        raise ValueError("an unknown frame has no layout")
    if isinstance(event, ev.DeliverV2):
        head = deliver_header(event.subscription_id, len(event.chunk), event.committed_chunk_id)
        return head + event.chunk
    key = _KEYS[type(event)]
    return _encode(key, *[getattr(event, n) for n in event.__dataclass_fields__])


def decode_reply(frame: bytes | memoryview) -> ev.Reply:
    """A server's frame (without its size prefix) as an event: what a client reads.
    Unknown keys and versions give UnknownFrame; bad fields raise FrameError."""
    reply: ev.Reply = decode_frame(frame, _SCHEMAS, _varying)
    return reply


def _varying(key: int, version: int, r: Reader) -> ev.Response | ev.DeliverV2 | None:
    if version == VERSION_2:  # decode_frame takes no other version 2 of a server frame
        return ev.DeliverV2(r.u8(), r.u64(), r.rest()) if key == Key.DELIVER else None
    if not key & RESPONSE:
        return None
    return ev.Response(key & ~RESPONSE, r.u32(), r.u16())


def delivered_to(frame: bytes | memoryview) -> int:
    """The subscription a Deliver frame (without its size prefix) is for, its chunk at
    :data:`CHUNK_AT`; -1 for another frame. What a reader of chunks checks of each frame
    before it walks the chunk in place."""
    if len(frame) >= CHUNK_AT and frame[0] == 0 and frame[1] == Key.DELIVER:
        return frame[4]
    return -1
