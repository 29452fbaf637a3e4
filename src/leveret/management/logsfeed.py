"""What the dashboard's Logs view sends a browser: one delivery as the JSON it gets (the
record as every reader reads it, and the message's own fields), and the bounded buffers it
goes through (the oldest dropped first, counted)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from leveret.logs.amqp import PROPERTY_NAMES
from leveret.logs.reading import Envelope, read
from leveret.logs.record import BROKER_EVENT_EXCHANGE, SEVERITIES

CLIENT_BUFFER = 2000
CLIENT_BUFFER_BYTES = 4 * 1024 * 1024
#: a record's text fields are cut to this for the view (a log line is rarely longer)
MAX_FIELD_CHARS = 16 * 1024

# the headers and the timestamp are shown apart; nobody sets cluster_id
_PROPERTIES = tuple(n for n in PROPERTY_NAMES if n not in ("headers", "timestamp", "cluster_id"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def record_of(
    body: bytes,
    routing_key: str,
    exchange: str,
    redelivered: bool,
    props: Any,
    seq: int,
    arrival_ms: int | None = None,
) -> bytes:
    """One delivery as the JSON the browser gets: the record as every reader reads it
    (:func:`leveret.logs.reading.read`: a record, a broker event, plain text, or a malformed
    body kept whole as ``_corrupt``) and the message's own fields. ``arrival_ms``: the
    broker's arrival time when the tap knows it (a stream chunk's, for the history)."""
    content_type = getattr(props, "content_type", None)
    stamp: Any = getattr(props, "timestamp", None)
    epoch = int(stamp.timestamp()) if stamp is not None and hasattr(stamp, "timestamp") else None
    headers = getattr(props, "headers", None)
    envelope = Envelope(routing_key, exchange, content_type, headers, epoch, arrival_ms)
    doc: dict[str, Any] = read(body, envelope).to_dict()
    cut = False
    for key in ("message", "exc", "_corrupt"):
        value = doc.get(key)
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            doc[key] = value[:MAX_FIELD_CHARS]
            cut = True
    if "extra" in doc:
        extra = json.dumps(doc["extra"], default=str)
        if len(extra) > MAX_FIELD_CHARS:
            doc["extra"] = {"_cut": extra[:MAX_FIELD_CHARS]}
            cut = True
    if cut:
        doc["_cut"] = True  # the view shows a cut record; the message itself is untouched
    properties: dict[str, Any] = {}
    for name in _PROPERTIES:
        value = getattr(props, name, None)
        if value not in (None, ""):
            properties[name] = _jsonable(value)
    if epoch is not None:
        properties["timestamp"] = epoch
    if headers:
        properties["headers"] = _jsonable(headers)
    doc["_seq"] = seq
    doc["_received"] = int(time.time() * 1000)
    doc["_message"] = {
        "exchange": exchange,
        "routing_key": routing_key,
        "redelivered": redelivered,
        "payload_bytes": len(body),
        "properties": properties,
    }
    doc["_plain"] = not (
        exchange == BROKER_EVENT_EXCHANGE or content_type == "application/json" or body[:1] == b"{"
    )
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str).encode()


class Ring:
    """Encoded records, newest last, bounded by count and bytes: the oldest go first."""

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size
        self.items: deque[bytes] = deque()
        self.bytes = 0
        self.dropped = 0

    def push(self, record: bytes) -> None:
        self.items.append(record)
        self.bytes += len(record)
        while len(self.items) > self.count or (self.bytes > self.size and len(self.items) > 1):
            self.bytes -= len(self.items.popleft())
            self.dropped += 1

    def take(self) -> list[bytes]:
        out = list(self.items)
        self.items.clear()
        self.bytes = 0
        return out

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.items)


@dataclass(eq=False)
class Subscriber:
    """One browser: a bounded buffer of encoded records, the oldest dropped first."""

    buffer: Ring = field(default_factory=lambda: Ring(CLIENT_BUFFER, CLIENT_BUFFER_BYTES))
    broker_dropped_base: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    @property
    def dropped(self) -> int:
        return self.buffer.dropped

    def offer(self, record: bytes) -> None:
        self.buffer.push(record)
        self.wake.set()

    def take(self) -> list[bytes]:
        self.wake.clear()
        return self.buffer.take()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


def severity_of(record: bytes) -> str:
    # the severity is the second field of every record document (see Record.to_dict)
    start = record.find(b'"severity":"')
    if start < 0:
        return "info"
    start += 12
    end = record.find(b'"', start)
    word = record[start:end].decode("utf-8", "replace").lower()
    return word if word in SEVERITIES else "info"
