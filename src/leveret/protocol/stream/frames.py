"""Frame bodies to events and back. Most commands are a flat list of typed fields, so one
schema per key drives both directions; Publish and Subscribe, whose layouts vary, have
their own code. Client frames are decoded here (the server's side) and encoded (the
client's side); server frames, both ways, are in :mod:`leveret.protocol.stream.encode`,
on the same field types and the same decoder (:func:`decode_frame`)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

from leveret.protocol.binary import I16, I32, I64, U8, U16, U32, U64
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.chunk import SUB_BATCH, sub_batch
from leveret.protocol.stream.spec import RESPONSE, VERSION_1, VERSION_2, Key, OffsetType

_HEAD = struct.Struct(">HH")


class FrameError(ValueError):
    """A frame that does not parse as its key says."""


def _number(layout: struct.Struct) -> Callable[[Reader], int]:
    """The reader of a number laid out as ``layout``."""
    unpack, size = layout.unpack_from, layout.size

    def read(self: Reader) -> int:
        try:
            (value,) = unpack(self.data, self.pos)
        except struct.error as exc:
            raise FrameError("frame too short") from exc
        self.pos += size
        return int(value)

    return read


class Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    u8 = _number(U8)
    u16 = _number(U16)
    i16 = _number(I16)
    u32 = _number(U32)
    i32 = _number(I32)
    u64 = _number(U64)
    i64 = _number(I64)

    def raw(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise FrameError("frame too short")
        out = bytes(self.data[self.pos : end])
        self.pos = end
        return out

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            return ""
        try:
            return self.raw(n).decode()
        except UnicodeDecodeError as exc:
            raise FrameError("a string is not UTF-8") from exc

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self.raw(n)

    def strings(self) -> tuple[str, ...]:
        return tuple(self.string() for _ in range(self._count()))

    def map(self) -> dict[str, str]:
        # (a dict display reads each key before its value)
        return {self.string(): self.string() for _ in range(self._count())}

    def map_if_any(self) -> dict[str, str]:
        """A map, or none at all (empty) when the frame ends here."""
        return self.map() if self.pos < len(self.data) else {}

    def bytes_if_any(self) -> bytes:
        return self.bytes_() if self.pos < len(self.data) else b""

    def u64s(self) -> list[int]:
        return [self.u64() for _ in range(self._count())]

    def errors(self) -> list[tuple[int, int]]:
        return [(self.u64(), self.u16()) for _ in range(self._count())]

    def brokers(self) -> list[tuple[int, str, int]]:
        return [(self.u16(), self.string(), self.u32()) for _ in range(self._count())]

    def versions(self) -> list[tuple[int, int, int]]:
        return [(self.u16(), self.u16(), self.u16()) for _ in range(self._count())]

    def int_map(self) -> dict[str, int]:
        return {self.string(): self.i64() for _ in range(self._count())}

    def streams_metadata(self) -> list[tuple[str, int, int, list[int]]]:
        out = []
        for _ in range(self._count()):
            name, code, leader = self.string(), self.u16(), self.u16()
            out.append((name, code, leader, [self.u16() for _ in range(self._count())]))
        return out

    def rest(self) -> bytes:
        return self.raw(len(self.data) - self.pos)

    def _count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.data) - self.pos:  # every item takes at least a byte
            raise FrameError("bad array length")
        return n

    def end(self) -> None:
        if self.pos != len(self.data):
            raise FrameError("trailing bytes in frame")


def string(s: str) -> bytes:
    raw = s.encode()
    return U16.pack(len(raw)) + raw


def bytes_field(b: bytes) -> bytes:
    return I32.pack(len(b)) + b


def strings(items: tuple[str, ...] | list[str]) -> bytes:
    return I32.pack(len(items)) + b"".join(string(s) for s in items)


def mapping(m: dict[str, str]) -> bytes:
    return I32.pack(len(m)) + b"".join(string(k) + string(v) for k, v in m.items())


def _u64s(items: list[int]) -> bytes:
    # one pack for the lot: a publish confirm carries an id per message
    return struct.pack(f">i{len(items)}Q", len(items), *items)


def _errors(items: list[tuple[int, int]]) -> bytes:
    return I32.pack(len(items)) + b"".join(U64.pack(i) + U16.pack(c) for i, c in items)


def _brokers(items: list[tuple[int, str, int]]) -> bytes:
    return I32.pack(len(items)) + b"".join(
        U16.pack(ref) + string(host) + U32.pack(port) for ref, host, port in items
    )


def _versions(items: list[tuple[int, int, int]]) -> bytes:
    return I32.pack(len(items)) + b"".join(_VERSION.pack(*v) for v in items)


def _int_map(m: dict[str, int]) -> bytes:
    return I32.pack(len(m)) + b"".join(string(k) + I64.pack(v) for k, v in m.items())


_VERSION = struct.Struct(">HHH")


def _streams_metadata(items: list[tuple[str, int, int, list[int]]]) -> bytes:
    parts = [I32.pack(len(items))]
    for name, code, leader, replicas in items:
        parts += (string(name), U16.pack(code), U16.pack(leader), I32.pack(len(replicas)))
        parts += [U16.pack(r) for r in replicas]
    return b"".join(parts)


#: Frame layouts by key: the event class and the types of its fields, in order.
Schemas = dict[int, tuple[type[Any], tuple[str, ...]]]

_READ: dict[str, Callable[[Reader], Any]] = {
    "u8": Reader.u8,
    "u16": Reader.u16,
    "i16": Reader.i16,
    "u32": Reader.u32,
    "u64": Reader.u64,
    "str": Reader.string,
    "bytes": Reader.bytes_,
    "strs": Reader.strings,
    "map": Reader.map,
    "map?": Reader.map_if_any,
    "bytes?": Reader.bytes_if_any,
    "u64s": Reader.u64s,
    "errors": Reader.errors,
    "brokers": Reader.brokers,
    "streams": Reader.streams_metadata,
    "versions": Reader.versions,
    "int_map": Reader.int_map,
    "rest": Reader.rest,
}
_WRITE: dict[str, Callable[[Any], bytes]] = {
    "u8": U8.pack,
    "u16": U16.pack,
    "i16": I16.pack,
    "u32": U32.pack,
    "u64": U64.pack,
    "str": string,
    "bytes": bytes_field,
    "strs": strings,
    "map": mapping,
    "map?": lambda m: mapping(m) if m else b"",
    "bytes?": lambda b: bytes_field(b) if b else b"",
    "u64s": _u64s,
    "errors": _errors,
    "brokers": _brokers,
    "streams": _streams_metadata,
    "versions": _versions,
    "int_map": _int_map,
    "rest": bytes,
}

# Client commands that are a flat list of fields, in the dataclass's field order.
_SCHEMAS: Schemas = {
    Key.PEER_PROPERTIES: (ev.PeerProperties, ("u32", "map")),
    Key.SASL_HANDSHAKE: (ev.SaslHandshake, ("u32",)),
    Key.SASL_AUTHENTICATE: (ev.SaslAuthenticate, ("u32", "str", "bytes")),
    Key.TUNE | RESPONSE: (ev.Tune, ("u32", "u32")),
    Key.OPEN: (ev.Open, ("u32", "str")),
    Key.CLOSE: (ev.Close, ("u32", "u16", "str")),
    Key.CLOSE | RESPONSE: (ev.CloseResponse, ("u32", "u16")),
    Key.HEARTBEAT: (ev.Heartbeat, ()),
    Key.METADATA: (ev.Metadata, ("u32", "strs")),
    Key.CREATE: (ev.Create, ("u32", "str", "map")),
    Key.DELETE: (ev.Delete, ("u32", "str")),
    Key.DECLARE_PUBLISHER: (ev.DeclarePublisher, ("u32", "u8", "str", "str")),
    Key.QUERY_PUBLISHER_SEQUENCE: (ev.QueryPublisherSequence, ("u32", "str", "str")),
    Key.DELETE_PUBLISHER: (ev.DeletePublisher, ("u32", "u8")),
    Key.CREDIT: (ev.Credit, ("u8", "u16")),
    Key.UNSUBSCRIBE: (ev.Unsubscribe, ("u32", "u8")),
    Key.STORE_OFFSET: (ev.StoreOffset, ("str", "str", "u64")),
    Key.QUERY_OFFSET: (ev.QueryOffset, ("u32", "str", "str")),
    Key.ROUTE: (ev.Route, ("u32", "str", "str")),
    Key.PARTITIONS: (ev.Partitions, ("u32", "str")),
    # RabbitMQ 3.11-3.13's
    Key.EXCHANGE_COMMAND_VERSIONS: (ev.ExchangeCommandVersions, ("u32", "versions")),
    Key.STREAM_STATS: (ev.StreamStats, ("u32", "str")),
    Key.CREATE_SUPER_STREAM: (ev.CreateSuperStream, ("u32", "str", "strs", "strs", "map")),
    Key.DELETE_SUPER_STREAM: (ev.DeleteSuperStream, ("u32", "str")),
}
# The client answers our tune with a tune frame; clients send it with the request key
# (rstream, the Java client) or the response key: both are taken.
_SCHEMAS[Key.TUNE] = _SCHEMAS[Key.TUNE | RESPONSE]
_KEYS: dict[type[Any], int] = {cls: key for key, (cls, _) in _SCHEMAS.items()}
_KEYS[ev.Tune] = Key.TUNE


#: The (key, version) pairs of a version other than 1 that a layout exists for: Publish
#: and Deliver's version 2 (RabbitMQ 3.13).
VERSIONS_2 = frozenset(((Key.PUBLISH, VERSION_2), (Key.DELIVER, VERSION_2)))


def decode_frame(
    frame: bytes | memoryview,
    schemas: Schemas,
    special: Callable[[int, int, Reader], Any] | None = None,
) -> Any:
    """One frame (without its size prefix) as the event its key's schema gives, or
    ``special`` (key, version, reader: for the keys whose layout varies; None: not one of
    them). Unknown keys and versions give
    :class:`~leveret.protocol.stream.events.UnknownFrame`; bad fields raise FrameError."""
    if len(frame) < 4:
        raise FrameError("frame too short")
    key, version = _HEAD.unpack_from(frame)
    if version != VERSION_1 and (key, version) not in VERSIONS_2:
        return ev.UnknownFrame(key, version)
    r = Reader(frame, 4)
    schema = schemas.get(key) if version == VERSION_1 else None
    if schema is not None:
        cls, fields = schema
        event = cls(*[_READ[f](r) for f in fields])
    elif special is None or (event := special(key, version, r)) is None:
        return ev.UnknownFrame(key, version)
    r.end()
    return event


def write_fields(fields: tuple[str, ...], values: Iterable[Any]) -> bytes:
    """Values laid out as the field types of a schema say."""
    return b"".join(_WRITE[f](v) for f, v in zip(fields, values, strict=True))


def decode(frame: bytes | memoryview) -> ev.Event:
    """A client's frame (without its size prefix) as an event (see :func:`decode_frame`)."""
    event: ev.Event = decode_frame(frame, _SCHEMAS, _decode_varying)
    return event


def _decode_varying(key: int, version: int, r: Reader) -> ev.Event | None:
    if key == Key.PUBLISH:
        return _decode_publish(r) if version == VERSION_1 else _decode_publish_v2(r)
    if key == Key.SUBSCRIBE:
        return _decode_subscribe(r)
    if key == Key.CONSUMER_UPDATE | RESPONSE:
        return _decode_consumer_update_response(r)
    return None


def _decode_publish(r: Reader) -> ev.Publish:
    publisher_id = r.u8()
    count = r.i32()
    messages: list[tuple[int, bytes]] = []
    batches: list[ev.SubBatch] = []
    data = r.data
    for _ in range(count):
        publishing_id = r.u64()
        if r.pos >= len(data):
            raise FrameError("frame too short")
        if data[r.pos] & 0x80:
            try:
                head, records, uncompressed, size = SUB_BATCH.unpack_from(data, r.pos)
            except struct.error as exc:
                raise FrameError("frame too short") from exc
            r.pos += SUB_BATCH.size
            batches.append(
                ev.SubBatch(publishing_id, (head >> 4) & 0x7, records, uncompressed, r.raw(size))
            )
        else:
            messages.append((publishing_id, r.raw(r.u32())))
    return ev.Publish(publisher_id, messages, batches)


def _decode_publish_v2(r: Reader) -> ev.Publish:
    """Version 2: a filter value (a string, -1 long for none) before each message. A
    sub-entry batch has no layout in it (RabbitMQ 3.13 has none either)."""
    publisher_id = r.u8()
    count = r.i32()
    messages: list[tuple[int, bytes]] = []
    filters: list[bytes | None] = []
    for _ in range(count):
        publishing_id = r.u64()
        n = r.i16()
        filters.append(r.raw(n) if n >= 0 else None)
        size = r.u32()
        if size & 0x80000000:
            raise FrameError("a sub-entry batch in a version 2 publish")
        messages.append((publishing_id, r.raw(size)))
    return ev.Publish(publisher_id, messages, [], filters)


def _decode_consumer_update_response(r: Reader) -> ev.ConsumerUpdateResponse:
    """As rabbit_stream_core parses it: the value after an offset type that has none is
    ignored (rstream always sends 8 bytes of it)."""
    correlation_id, code, kind = r.u32(), r.u16(), r.u16()
    offset = 0
    if kind == OffsetType.OFFSET:
        offset = r.u64()
    elif kind == OffsetType.TIMESTAMP:
        offset = r.i64()
    else:
        r.rest()
    return ev.ConsumerUpdateResponse(correlation_id, code, kind, offset)


def _offset_spec(kind: int, offset: int) -> bytes:
    if kind == OffsetType.OFFSET:
        return U64.pack(offset)
    if kind == OffsetType.TIMESTAMP:
        return I64.pack(offset)
    return b""


def _decode_subscribe(r: Reader) -> ev.Subscribe:
    correlation_id = r.u32()
    subscription_id = r.u8()
    stream = r.string()
    offset_type = r.u16()
    offset = 0
    if offset_type == OffsetType.OFFSET:
        offset = r.u64()
    elif offset_type == OffsetType.TIMESTAMP:
        offset = r.i64()
    credit = r.u16()
    properties = r.map_if_any()
    return ev.Subscribe(
        correlation_id, subscription_id, stream, offset_type, offset, credit, properties
    )


def frame(key: int, body: bytes, version: int = VERSION_1) -> bytes:
    """A whole frame: size, key, version (1 unless said), body."""
    return U32.pack(len(body) + 4) + _HEAD.pack(key, version) + body


def encode_client(event: ev.Event) -> bytes:
    """A client command as a whole frame (the inverse of :func:`decode`)."""
    if isinstance(event, ev.Publish) and event.filters is not None:
        parts = [U8.pack(event.publisher_id), I32.pack(len(event.messages))]
        for (pid, msg), value in zip(event.messages, event.filters, strict=True):
            head = I16.pack(-1) if value is None else U16.pack(len(value)) + value
            parts += (U64.pack(pid), head, U32.pack(len(msg)), msg)
        return frame(Key.PUBLISH, b"".join(parts), VERSION_2)
    if isinstance(event, ev.ConsumerUpdateResponse):
        return frame(
            Key.CONSUMER_UPDATE | RESPONSE,
            U32.pack(event.correlation_id)
            + U16.pack(event.code)
            + U16.pack(event.offset_type)
            + _offset_spec(event.offset_type, event.offset),
        )
    if isinstance(event, ev.Publish):
        parts = [U8.pack(event.publisher_id), I32.pack(len(event.messages) + len(event.batches))]
        for pid, msg in event.messages:
            parts += (U64.pack(pid), U32.pack(len(msg)), msg)
        for b in event.batches:
            parts += (
                U64.pack(b.publishing_id),
                sub_batch(b.compression, b.records, b.uncompressed_size, b.data),
            )
        return frame(Key.PUBLISH, b"".join(parts))
    if isinstance(event, ev.Subscribe):
        offset = _offset_spec(event.offset_type, event.offset)
        return frame(
            Key.SUBSCRIBE,
            U32.pack(event.correlation_id)
            + U8.pack(event.subscription_id)
            + string(event.stream)
            + U16.pack(event.offset_type)
            + offset
            + U16.pack(event.credit)
            + mapping(event.properties),
        )
    key = _KEYS[type(event)]
    _, fields = _SCHEMAS[key]
    return frame(key, write_fields(fields, [getattr(event, n) for n in event.__dataclass_fields__]))
