"""Osiris chunks (what a stream-protocol Deliver frame carries) to the rows of
``format("amqp")``: the chunk's CRC32 checked, its entries walked by the stream codec's
walker (:func:`leveret.protocol.stream.chunk.walk`: simple entries and sub-entry batches,
uncompressed, gzip or zstd, the last through pyarrow), each AMQP 1.0 message cut into
its sections.

A stream fed over AMQP 0-9-1 holds messages of one shape (see RabbitMQ's rabbit_msg_record):
message annotations ``x-routing-key`` and ``x-exchange`` (and the basic priority, delivery
mode and expiration), properties (message id, content type, creation time, ...),
application properties (the headers) and one data section, the body. Annotations and
application properties repeat from message to message, so they are decoded once per
distinct byte string; of the properties only the first field (the message id, different
in every message) is decoded per message, the rest once per distinct byte string. Other
shapes go through the general decoder (:mod:`leveret.protocol.stream.amqp10`).

The bodies of a batch are joined with newlines for :mod:`leveret.spark.logparse`, which
parses them in bulk: the per-message Python work is the section walk alone.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from leveret.logs.reading import TIMESTAMP_HEADER, header_text
from leveret.protocol.stream import amqp10, chunk
from leveret.protocol.stream.encode import CHUNK_AT
from leveret.spark.client import AmqpSourceError
from leveret.spark.logparse import Bodies, Messages, header_times, log_batch
from leveret.spark.schema import ARROW_SCHEMA, PROPERTY_COLUMNS

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_CACHE_MAX = 4096
_TS = pa.timestamp("us", tz="UTC")
#: The AMQP 1.0 properties fields, in order, and the 0-9-1 property each becomes.
_PROPERTY_FIELDS = (
    "message_id",
    "user_id",
    None,  # to
    None,  # subject
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    None,  # absolute-expiry-time
    "timestamp",  # creation-time, ms
    None,
    None,
    None,
)
_ANNOTATIONS = {
    "x-basic-priority": "priority",
    "x-basic-delivery-mode": "delivery_mode",
    "x-basic-expiration": "expiration",
}
_APP_KEYS = {"x-basic-type": "type", "x-basic-app-id": "app_id"}


def _plain(value: amqp10.Value) -> Any:
    kind, v = value
    if kind == "described":
        return _plain(v[1])
    if kind == "list" or kind == "array":
        return [_plain(i) for i in v]
    if kind == "map":
        return {_plain(k): _plain(x) for k, x in v}
    if kind == "timestamp":
        return datetime.fromtimestamp(v / 1000, UTC)
    return v


def _short(b: bytes, p: int) -> tuple[Any, int]:
    """A scalar at ``p``: strings, symbols, binaries and null fast, the rest generally."""
    c = b[p]
    if c == 0x40:
        return None, p + 1
    if c == 0xA1 or c == 0xA3:
        n = b[p + 1]
        return b[p + 2 : p + 2 + n].decode("utf-8", "replace"), p + 2 + n
    if c == 0xB1 or c == 0xB3:
        (n,) = _U32.unpack_from(b, p + 1)
        return b[p + 5 : p + 5 + n].decode("utf-8", "replace"), p + 5 + n
    if c == 0xA0:
        n = b[p + 1]
        return b[p + 2 : p + 2 + n].decode("utf-8", "replace"), p + 2 + n
    if c == 0xB0:
        (n,) = _U32.unpack_from(b, p + 1)
        return b[p + 5 : p + 5 + n].decode("utf-8", "replace"), p + 5 + n
    if c == 0x83:
        return _I64.unpack_from(b, p + 1)[0], p + 9
    value, q = amqp10.decode(b, p)
    v = _plain(value)
    return (None if v is None else str(v)) if not isinstance(v, int) else v, q


def _unzstd(data: bytes, size: int) -> bytes:
    try:
        out: bytes = pa.Codec("zstd").decompress(data, decompressed_size=size).to_pybytes()
    except pa.ArrowException as exc:
        raise ValueError(str(exc)) from None
    return out


#: Sub-entry batch compressions read here: gzip (as every reader) and zstd through
#: pyarrow. Snappy and LZ4 are refused with an error naming the chunk.
_DECOMPRESSORS = {**chunk.DECOMPRESSORS, chunk.ZSTD: _unzstd}


#: What a message's sections other than the body and message id decode to, shared by the
#: messages that have them byte for byte: exchange, routing key, content type, timestamp
#: (ms), the other properties (as ``format("amqp")`` columns) and the headers.
_Shape = tuple[
    str | None,
    str | None,
    str | None,
    int | None,
    dict[str, Any],
    dict[str, Any] | None,
]


class Columns:
    """The rows of a batch, column by column, as chunks are added."""

    def __init__(self, full: bool) -> None:
        self.full = full  # every property and header (message rows), not just what logs need
        self.offsets: list[int] = []
        self.bodies: list[bytes] = []
        self.message_id: list[str | None] = []
        self.shape_of: list[int] = []  # per message, its index in ``shapes``
        self.shapes: list[_Shape] = []
        self._annotations: dict[bytes, tuple[str | None, str | None, dict[str, Any]]] = {}
        self._properties: dict[bytes, dict[str, Any]] = {}
        self._app: dict[bytes, tuple[dict[str, Any], dict[str, Any]]] = {}
        # the fast path's shape: (annotations section, the properties after the message
        # id, application properties section, their decoded values)
        self._fast: tuple[bytes, bytes, bytes, int] | None = None
        self._last: tuple[object, ...] = ()  # what made the last shape (see ``_shape``)
        # (index of its first message, timestamp in ms) of each chunk read: the broker's
        # arrival time of its messages
        self._chunks: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    # ------------------------------------------------------------------ chunks
    def add_chunk(self, frame: bytes, start: int, end: int) -> tuple[int, int]:
        """The records of the chunk in a Deliver frame (at ``CHUNK_AT``) with ``start <= offset <
        end``; returns the chunk's (first offset, offset after its last record)."""
        (magic, ctype, entries, records, ts, _epoch, first, crc, size, _trailer,
         _r) = chunk.HEADER.unpack_from(frame, CHUNK_AT)  # fmt: skip
        if magic >> 4 != chunk.MAGIC:  # osiris 0x50 (RabbitMQ 3.10) or 0x51
            raise AmqpSourceError(f"a Deliver frame holds no osiris chunk ({magic:#x})")
        data = CHUNK_AT + chunk.HEADER_SIZE
        if chunk.data_crc(frame, data, size) != crc:
            raise AmqpSourceError(f"chunk at offset {first}: its CRC32 does not match")
        if ctype != chunk.CHUNK_USER or first >= end or first + records <= start:
            return first, first + records
        self._chunks.append((len(self.offsets), ts))
        try:
            reading = chunk.Reading(start, end, _DECOMPRESSORS)
            chunk.walk(frame, data, entries, first, self.message, reading)
        except chunk.ChunkError as exc:
            raise AmqpSourceError(str(exc)) from None
        return first, first + records

    # ------------------------------------------------------------------ messages
    def message(self, b: bytes, p: int, end: int, offset: int) -> None:
        fast = self._fast
        if fast is not None and b.startswith(fast[0], p):
            # the shape of the message before: the same annotations, properties but the
            # message id and application properties, byte for byte; then the body
            v = p + len(fast[0])
            if b[v] == 0 and b[v + 1] == 0x53 and b[v + 2] == 0x73:
                v += 3
                c = b[v]
                if c == 0xC0:
                    q = v + 2 + b[v + 1]
                    first = v + 3
                elif c == 0xD0:
                    q = v + 5 + int(_U32.unpack_from(b, v + 1)[0])
                    first = v + 9
                else:
                    q = first = -1
                if first >= 0 and b[first] == 0xA1:  # a short string message id
                    n = b[first + 1]
                    rest_at = first + 2 + n
                    rest = fast[1]
                    if rest_at + len(rest) == q and b.startswith(rest, rest_at):
                        app = fast[2]
                        if not app or b.startswith(app, q):
                            d = q + len(app)
                            if b[d] == 0 and b[d + 1] == 0x53 and b[d + 2] == 0x75:
                                c = b[d + 3]
                                if c == 0xA0:
                                    size = b[d + 4]
                                    body = b[d + 5 : d + 5 + size]
                                    stop = d + 5 + size
                                elif c == 0xB0:
                                    size = int(_U32.unpack_from(b, d + 4)[0])
                                    body = b[d + 8 : d + 8 + size]
                                    stop = d + 8 + size
                                else:
                                    stop = -1
                                if stop == end:
                                    self.offsets.append(offset)
                                    self.bodies.append(body)
                                    self.message_id.append(
                                        b[first + 2 : first + 2 + n].decode("utf-8", "replace")
                                    )
                                    self.shape_of.append(fast[3])
                                    return
        self._message(b, p, end, offset)

    def _shape(self, key: tuple[object, ...], make: Any) -> int:
        """The index of the shape ``make()`` builds, made anew only when ``key`` (the
        decoded sections, compared by identity) differs from the last one's."""
        last = self._last
        if len(last) == len(key) and all(a is b for a, b in zip(last, key, strict=True)):
            return len(self.shapes) - 1
        self._last = key
        self.shapes.append(make())
        return len(self.shapes) - 1

    def _message(self, b: bytes, p: int, end: int, offset: int) -> None:
        """A message section by section; one of the usual shape becomes the fast path's."""
        start = p
        ann_end = props_at = rest_at = props_end = app_end = -1
        exchange = key = None
        extra: dict[str, Any] = {}
        props: dict[str, Any] | None = None
        app: tuple[dict[str, Any], dict[str, Any]] | None = None
        message_id = content_type = timestamp = None
        ann: object = None
        body: bytes = b""
        while p < end:
            if b[p] != 0 or b[p + 1] != 0x53:
                self._general(b, p, end, offset)
                return
            code = b[p + 2]
            v = p + 3
            if code == 0x75 or code == 0x77:  # data, amqp-value
                c = b[v]
                if c == 0xA0 or c == 0xA1:
                    n = b[v + 1]
                    body = b[v + 2 : v + 2 + n]
                    p = v + 2 + n
                elif c == 0xB0 or c == 0xB1:
                    (n,) = _U32.unpack_from(b, v + 1)
                    body = b[v + 5 : v + 5 + n]
                    p = v + 5 + n
                else:
                    self._general(b, p, end, offset)
                    return
                continue
            q = amqp10.value_end(b, v)
            if q < 0:
                q = amqp10.decode(b, v)[1]
            if code == 0x72:
                raw = b[v:q]
                got = self._annotations.get(raw)
                if got is None:
                    got = self._decode_annotations(raw)
                exchange, key, extra = got
                ann = got
                if p == start:
                    ann_end = q
            elif code == 0x73:
                c = b[v]
                if c == 0xC0:
                    first = v + 3
                elif c == 0xD0:
                    first = v + 9
                else:
                    first = q
                if first < q:
                    if p == ann_end and b[first] == 0xA1:
                        props_at = p
                    message_id, rest_at = _short(b, first)
                    props_end = q
                    raw = b[rest_at:q]
                    props = self._properties.get(raw)
                    if props is None:
                        props = self._decode_properties(raw)
                    content_type = props.get("content_type")
                    timestamp = props.get("timestamp")
            elif code == 0x74:
                raw = b[v:q]
                app = self._app.get(raw)
                if app is None:
                    app = self._decode_app(raw)
                if p == props_end:
                    app_end = q
            p = q

        def make() -> _Shape:
            merged = {**extra, **(props or {}), **(app[0] if app else {})}
            return (exchange, key, content_type, timestamp, merged, app[1] if app else None)

        shape = self._shape((ann, props, app), make)
        if props_at >= 0 and props is not None:
            self._fast = (
                b[start:ann_end],
                b[rest_at:props_end],
                b[props_end:app_end] if app_end >= 0 else b"",
                shape,
            )
        self.offsets.append(offset)
        self.bodies.append(body)
        self.message_id.append(message_id)
        self.shape_of.append(shape)

    def _general(self, b: bytes, p: int, end: int, offset: int) -> None:
        """A message of another shape: every section through the general decoder."""
        exchange = key = None
        merged: dict[str, Any] = {}
        headers: dict[str, Any] | None = None
        body = b""
        for code, value in amqp10.sections(b[p:end]):
            if code == 0x72:
                exchange, key, extra = self._annotations_of(value)
                merged.update(extra)
            elif code == 0x73:
                fields = _plain(value)
                for name, v in zip(_PROPERTY_FIELDS, fields, strict=False):
                    if name and v is not None:
                        merged[name] = (
                            int(v.timestamp() * 1000)
                            if name == "timestamp"
                            else (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v))
                        )
            elif code == 0x74:
                props, headers = self._app_of(value)
                merged.update(props)
            elif code in (0x75, 0x77):
                v = value[1]
                body = v if isinstance(v, bytes) else str(v).encode()
        self._last = ()  # a shape of its own
        shape: _Shape = (exchange, key, merged.get("content_type"), merged.get("timestamp"),
                         merged, headers)  # fmt: skip
        self.shapes.append(shape)
        self.offsets.append(offset)
        self.bodies.append(body)
        self.message_id.append(merged.get("message_id"))
        self.shape_of.append(len(self.shapes) - 1)

    def _annotations_of(self, value: amqp10.Value) -> tuple[str | None, str | None, dict[str, Any]]:
        table = _plain(value) or {}
        extra = {_ANNOTATIONS[k]: v for k, v in table.items() if k in _ANNOTATIONS}
        return table.get("x-exchange"), table.get("x-routing-key"), extra

    def _decode_annotations(self, raw: bytes) -> tuple[str | None, str | None, dict[str, Any]]:
        got = self._annotations_of(amqp10.decode(raw)[0])
        if len(self._annotations) >= _CACHE_MAX:
            self._annotations.clear()
        self._annotations[raw] = got
        return got

    def _decode_properties(self, raw: bytes) -> dict[str, Any]:
        """Properties fields 2..13 (the message id left out), one after the other."""
        out: dict[str, Any] = {}
        p = 0
        for name in _PROPERTY_FIELDS[1:]:
            if p >= len(raw):
                break
            v, p = _short(raw, p)
            if name and v is not None:
                out[name] = v
        if len(self._properties) >= _CACHE_MAX:
            self._properties.clear()
        self._properties[raw] = out
        return out

    def _app_of(self, value: amqp10.Value) -> tuple[dict[str, Any], dict[str, Any]]:
        table = _plain(value) or {}
        props = {_APP_KEYS[k]: v for k, v in table.items() if k in _APP_KEYS}
        headers = {k: v for k, v in table.items() if k not in _APP_KEYS}
        return props, headers

    def _decode_app(self, raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
        got = self._app_of(amqp10.decode(raw)[0])
        if len(self._app) >= _CACHE_MAX:
            self._app.clear()
        self._app[raw] = got
        return got

    # ------------------------------------------------------------------ batches
    def _offsets(self) -> pa.Array:
        return pa.array(np.array(self.offsets, np.int64), pa.int64())

    def _index(self) -> pa.Array:
        return pa.array(np.array(self.shape_of, np.int32), pa.int32())

    def _column(self, field: int, index: pa.Array, kind: pa.DataType) -> pa.Array:
        """One field of the shapes, per message (taken from the shapes' few values)."""
        return pa.array([s[field] for s in self.shapes], kind).take(index)

    def _timestamps(self, index: pa.Array) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        at = np.asarray(index)
        there = np.array([s[3] is not None for s in self.shapes], np.bool_)[at]
        ms = np.array([s[3] or 0 for s in self.shapes], np.int64)[at]
        return ms, there

    def _arrival(self) -> np.ndarray[Any, Any]:
        """Per message, the timestamp (ms) of the chunk it came in."""
        n = len(self)
        starts = [i for i, _ in self._chunks] + [n]
        counts: np.ndarray[Any, Any] = np.diff(np.array(starts, np.int64))
        return np.repeat(np.array([t for _, t in self._chunks], np.int64), counts)

    def _header_times(self, index: pa.Array) -> tuple[Any, Any]:
        """Per message, its ``timestamp_in_ms`` header (ms) and where it has one."""
        ms, there = header_times(
            [None if s[5] is None else s[5].get(TIMESTAMP_HEADER) for s in self.shapes]
        )
        if ms is None or there is None:
            return None, None
        at = np.asarray(index)
        return ms[at], there[at]

    def _rows_of(self, field: int) -> list[Any]:
        shapes = self.shapes
        return [shapes[i][field] for i in self.shape_of]

    def records(self) -> pa.RecordBatch:
        """The rows parsed as log records (``schema.LOG_SCHEMA``)."""
        n = len(self)
        index = self._index()
        ms, there = self._timestamps(index)
        header_ms, has_header_ms = self._header_times(index)
        exchange = self._column(0, index, pa.string())
        routing_key = self._column(1, index, pa.string())

        def node_of(i: int) -> str | None:
            headers = self.shapes[self.shape_of[i]][5]
            node = None if headers is None else headers.get("node")
            return None if node is None else header_text(node)

        def headers_of(i: int) -> Mapping[str, Any] | None:
            headers: Mapping[str, Any] | None = self.shapes[self.shape_of[i]][5]
            return headers

        msgs = Messages(
            routing_key=routing_key,
            content_type=self._column(2, index, pa.string()),
            timestamp=ms // 1000,  # AMQP 0-9-1 timestamps are whole seconds
            has_timestamp=there,
            bodies=Bodies.join(self.bodies),
            header_ms=header_ms,
            has_header_ms=has_header_ms,
            arrival_ms=self._arrival(),
        )
        kept = {
            "offset": self._offsets(),
            "routing_key": routing_key,
            "redelivered": pa.array(np.zeros(n, np.bool_), pa.bool_()),
            "message_id": pa.array(self.message_id, pa.string()),
        }
        return log_batch(msgs, exchange, node_of, headers_of, kept)

    def messages(self) -> pa.RecordBatch:
        """The message rows (``schema.MESSAGE_SCHEMA``), as the AMQP 0-9-1 reader makes
        them: the headers carry ``x-stream-offset`` as a stream consumer's do."""
        n = len(self)
        index = self._index()
        ms, there = self._timestamps(index)
        cols: dict[str, pa.Array] = {
            "offset": self._offsets(),
            "exchange": self._column(0, index, pa.string()),
            "routing_key": self._column(1, index, pa.string()),
            "redelivered": pa.array(np.zeros(n, np.bool_), pa.bool_()),
        }
        props: list[dict[str, Any]] = self._rows_of(4)
        for name in PROPERTY_COLUMNS:
            if name == "timestamp":
                cols[name] = pa.array((ms // 1000) * 1_000_000, _TS, mask=~there)
            elif name in ("delivery_mode", "priority"):
                cols[name] = pa.array([p.get(name) for p in props], pa.int32())
            elif name == "message_id":
                cols[name] = pa.array(self.message_id, pa.string())
            elif name == "content_type":
                cols[name] = self._column(2, index, pa.string())
            else:
                cols[name] = pa.array(
                    [None if p.get(name) is None else str(p.get(name)) for p in props],
                    pa.string(),
                )
        kind = ARROW_SCHEMA.field("headers").type
        rows = []
        for off, headers in zip(self.offsets, self._rows_of(5), strict=True):
            items = [(str(k), header_text(v)) for k, v in (headers or {}).items()]
            items.append(("x-stream-offset", str(off)))
            rows.append(items)
        cols["headers"] = pa.array(rows, kind)
        cols["body"] = pa.array(self.bodies, pa.binary())
        return pa.RecordBatch.from_arrays([cols[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)


__all__ = ["Columns"]
