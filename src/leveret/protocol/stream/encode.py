"""Server frames: responses, and the commands a server sends on its own (tune, close,
heartbeat, metadata update, publish confirm and error, deliver)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from leveret.protocol.stream.frames import frame, mapping, string, strings
from leveret.protocol.stream.spec import RESPONSE, VERSION_1, Key

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_RESP = struct.Struct(">IH")  # correlation id, response code
_DELIVER_HEAD = struct.Struct(">IHHB")  # size, key, version, subscription id


def response(key: int, correlation_id: int, code: int, extra: bytes = b"") -> bytes:
    """A response: the request's key with the response bit, its correlation id, a code."""
    return frame(key | RESPONSE, _RESP.pack(correlation_id, code) + extra)


def peer_properties(correlation_id: int, code: int, properties: dict[str, str]) -> bytes:
    return response(Key.PEER_PROPERTIES, correlation_id, code, mapping(properties))


def sasl_handshake(correlation_id: int, code: int, mechanisms: Iterable[str]) -> bytes:
    return response(Key.SASL_HANDSHAKE, correlation_id, code, strings(list(mechanisms)))


def sasl_authenticate(correlation_id: int, code: int, challenge: bytes = b"") -> bytes:
    # as RabbitMQ: the challenge field is there only when there is a challenge
    extra = _U32.pack(len(challenge)) + challenge if challenge else b""
    return response(Key.SASL_AUTHENTICATE, correlation_id, code, extra)


def tune(frame_max: int, heartbeat: int) -> bytes:
    return frame(Key.TUNE, _U32.pack(frame_max) + _U32.pack(heartbeat))


def open_response(correlation_id: int, code: int, properties: dict[str, str]) -> bytes:
    # as RabbitMQ: no properties array at all when there are none (a refused open)
    return response(Key.OPEN, correlation_id, code, mapping(properties) if properties else b"")


def close(correlation_id: int, code: int, reason: str) -> bytes:
    return frame(Key.CLOSE, _RESP.pack(correlation_id, code) + string(reason))


def heartbeat() -> bytes:
    return frame(Key.HEARTBEAT, b"")


def metadata(
    correlation_id: int,
    brokers: list[tuple[int, str, int]],
    streams: list[tuple[str, int, int, list[int]]],
) -> bytes:
    """``brokers``: (reference, host, port); ``streams``: (name, code, leader reference,
    replica references). A stream that is not found has code 2 and leader 0xFFFF."""
    parts = [_U32.pack(correlation_id), _U32.pack(len(brokers))]
    for ref, host, port in brokers:
        parts += (_U16.pack(ref), string(host), _U32.pack(port))
    parts.append(_U32.pack(len(streams)))
    for name, code, leader, replicas in streams:
        parts += (string(name), _U16.pack(code), _U16.pack(leader), _U32.pack(len(replicas)))
        parts += [_U16.pack(r) for r in replicas]
    return frame(Key.METADATA | RESPONSE, b"".join(parts))


def metadata_update(code: int, stream: str) -> bytes:
    return frame(Key.METADATA_UPDATE, _U16.pack(code) + string(stream))


def publish_confirm(publisher_id: int, publishing_ids: list[int]) -> bytes:
    return frame(
        Key.PUBLISH_CONFIRM,
        bytes((publisher_id,))
        + _U32.pack(len(publishing_ids))
        + b"".join(_U64.pack(p) for p in publishing_ids),
    )


def publish_error(publisher_id: int, code: int, publishing_ids: list[int]) -> bytes:
    c = _U16.pack(code)
    return frame(
        Key.PUBLISH_ERROR,
        bytes((publisher_id,))
        + _U32.pack(len(publishing_ids))
        + b"".join(_U64.pack(p) + c for p in publishing_ids),
    )


def query_publisher_sequence(correlation_id: int, code: int, sequence: int) -> bytes:
    return response(Key.QUERY_PUBLISHER_SEQUENCE, correlation_id, code, _U64.pack(sequence))


def query_offset(correlation_id: int, code: int, offset: int) -> bytes:
    return response(Key.QUERY_OFFSET, correlation_id, code, _U64.pack(offset))


def credit_response(code: int, subscription_id: int) -> bytes:
    # the one response without a correlation id
    return frame(Key.CREDIT | RESPONSE, _U16.pack(code) + bytes((subscription_id,)))


def streams_response(key: int, correlation_id: int, code: int, names: list[str]) -> bytes:
    """Route and Partitions: a code, then a list of stream names. RabbitMQ 3.10.8 sends
    these two responses under the request's key, without the response bit, and so does
    this."""
    return frame(key, _RESP.pack(correlation_id, code) + strings(names))


def deliver_header(subscription_id: int, chunk_size: int) -> bytes:
    """What goes before an osiris chunk in a Deliver frame: the chunk follows as it is
    (written separately, so stored chunk bytes need no copy)."""
    return _DELIVER_HEAD.pack(chunk_size + 5, Key.DELIVER, VERSION_1, subscription_id)
