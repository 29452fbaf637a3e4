"""A message published over AMQP 0-9-1 as RabbitMQ 4.2 turns it into AMQP 1.0
(mc_amqpl:convert_to(mc_amqp, ...)), everything but RabbitMQ's own annotations and the
header's per-delivery fields (:mod:`leveret.broker.amqp10_delivery` adds those).

- header: ``durable`` (delivery-mode 2), ``ttl`` (expiration), ``priority``;
- message annotations: ``x-basic-type`` (the type), then the ``x-`` headers (any type:
  tables as maps with symbol keys, arrays as lists) and ``CC`` (an array) as ``x-cc``,
  in the headers' order; an ``x-death`` history (see amqp10_delivery) apart;
- properties: message-id and correlation-id (a ``urn:uuid:`` string as a uuid), user-id
  (binary), reply-to as ``/queues/<name>`` (percent-encoded but for unreserved
  characters), content-type and content-encoding (symbols), creation-time (the timestamp
  in ms), group-id (app-id); the section left out when none is set;
- application properties: the other headers but arrays and tables (and decimals, which
  RabbitMQ fails to convert), string keys;
- the body: one data section; for a message typed ``amqp-1.0``, the sections its body
  holds (re-encoded as RabbitMQ decodes and encodes them).

Property bytes are read in one pass; what depends on the headers and the type (the
annotations, the application properties) is converted once for each distinct bytes and
kept, the properties section (message-ids differ message by message) is written each
time.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from leveret.broker import amqp10_values as av
from leveret.broker.amqp10_sections import remember
from leveret.protocol import table
from leveret.protocol.amqp10 import types
from leveret.protocol.binary import U32, U64

Annotation = tuple[str, bytes]  # key (an x- symbol) and its encoded value
_AMQP10_TYPE = b"amqp-1.0"
_URN = re.compile(
    rb"urn:uuid:([0-9a-fA-F]{8})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{12})"
)
_NULL = b"\x40"


class Props091:
    """Content-header property bytes read in one pass as RabbitMQ holds them: short
    strings as bytes, the headers table as its bytes (length included)."""

    __slots__ = (
        "app_id",
        "content_encoding",
        "content_type",
        "correlation_id",
        "delivery_mode",
        "expiration",
        "headers_raw",
        "message_id",
        "priority",
        "reply_to",
        "timestamp",
        "type",
        "user_id",
    )

    def __init__(self, raw: bytes) -> None:
        flags = raw[0] << 8 | raw[1]
        pos = 2
        self.content_type, pos = _short(raw, pos, flags & 0x8000)
        self.content_encoding, pos = _short(raw, pos, flags & 0x4000)
        self.headers_raw: bytes | None = None
        if flags & 0x2000:
            end = pos + 4 + U32.unpack_from(raw, pos)[0]
            self.headers_raw = raw[pos:end]
            pos = end
        self.delivery_mode: int | None = None
        if flags & 0x1000:
            self.delivery_mode = raw[pos]
            pos += 1
        self.priority: int | None = None
        if flags & 0x0800:
            self.priority = raw[pos]
            pos += 1
        self.correlation_id, pos = _short(raw, pos, flags & 0x0400)
        self.reply_to, pos = _short(raw, pos, flags & 0x0200)
        self.expiration, pos = _short(raw, pos, flags & 0x0100)
        self.message_id, pos = _short(raw, pos, flags & 0x0080)
        self.timestamp: int | None = None
        if flags & 0x0040:
            self.timestamp = U64.unpack_from(raw, pos)[0]
            pos += 8
        self.type, pos = _short(raw, pos, flags & 0x0020)
        self.user_id, pos = _short(raw, pos, flags & 0x0010)
        self.app_id, pos = _short(raw, pos, flags & 0x0008)

    @property
    def ttl(self) -> int | None:
        e = self.expiration
        return int(e) if isinstance(e, bytes) and e.isdigit() else None


def _short(raw: bytes, pos: int, present: int) -> tuple[bytes | None, int]:
    if not present:
        return None, pos
    end = pos + 1 + raw[pos]
    return raw[pos + 1 : end], end


@dataclass(slots=True)
class HeadersView:
    """What the headers table and the type give: the message annotations (encoded), the
    death history (an encoded ``x-opt-deaths``, or None) and the application-properties
    section."""

    annotations: list[Annotation]
    deaths: bytes | None
    application: bytes


_VIEWS: dict[tuple[bytes | None, bytes | None], HeadersView] = {}


def headers_view(headers_raw: bytes | None, msg_type: bytes | None) -> HeadersView:
    key = (headers_raw, msg_type)
    got = _VIEWS.get(key)
    if got is not None:
        return got
    ma: list[Annotation] = []
    if msg_type is not None:
        ma.append(("x-basic-type", av.string(msg_type)))
    deaths = None
    application: list[bytes] = []
    fields = table.parse_table(headers_raw)[0] if headers_raw is not None else []
    for name, value in fields:
        if name == "x-death" and deaths is None:
            deaths = av.deaths_annotation(value)
            if deaths is not None:
                continue
        if name.startswith("x-"):
            converted = av.from_091(value)
            if converted is not None:
                ma.append((name, av.encode(converted)))
        elif name == "CC" and value[:1] == b"A":
            converted = av.from_091(value)
            if converted is not None:
                ma.append(("x-cc", av.encode(converted)))
        elif value[:1] not in (b"A", b"F"):
            converted = av.from_091(value)
            if converted is not None:
                application += (av.string(name), av.encode(converted))
    section = b""
    if application:
        section = b"\x00\x53\x74" + av.compound(0xC1, application, len(application))
    got = HeadersView(ma, deaths, section)
    remember(_VIEWS, key, got)
    return got


def properties_section(p: Props091) -> bytes:
    """The properties section (empty when no property maps to one)."""
    fields = [
        _id(p.message_id),
        _NULL if p.user_id is None else av.encode(("binary", p.user_id)),
        _NULL,
        _NULL,
        _reply_address(p.reply_to),
        _id(p.correlation_id),
        _NULL if p.content_type is None else av.encode(("symbol", p.content_type)),
        _NULL if p.content_encoding is None else av.encode(("symbol", p.content_encoding)),
        _NULL,
        # Timestamp * 1000 written as a signed 64-bit: its low 64 bits
        _NULL if p.timestamp is None else b"\x83" + U64.pack(p.timestamp * 1000 % 2**64),
        _NULL if p.app_id is None else av.string(p.app_id),
    ]
    while fields and fields[-1] == _NULL:
        fields.pop()
    if not fields:
        return b""
    return b"\x00\x53\x73" + av.compound(0xC0, fields, len(fields))


def body_sections(p: Props091, body: bytes) -> bytes:
    """The body: one data section, or, typed ``amqp-1.0``, the sections it holds
    (re-encoded); as data when it holds none (RabbitMQ fails on those)."""
    if p.type == _AMQP10_TYPE:
        try:
            sections = types.sections(body)
        except types.DecodeError:
            sections = []
        if sections:
            return b"".join(av.section(code, value) for code, value in sections)
    return data_section(body)


def data_section(body: bytes) -> bytes:
    """One data section holding ``body``."""
    n = len(body)
    if n < 256:
        return b"\x00Su\xa0" + bytes((n,)) + body
    return b"\x00Su\xb0" + U32.pack(n) + body


def _id(value: bytes | None) -> bytes:
    """A message or correlation id: a ``urn:uuid:`` string as the uuid, else the string."""
    if value is None:
        return _NULL
    if value.startswith(b"urn:uuid:"):
        match = _URN.fullmatch(value)
        if match:
            return b"\x98" + bytes.fromhex("".join(g.decode() for g in match.groups()))
    n = len(value)
    return bytes((0xA1, n)) + value  # a short string: under 256 bytes


def _reply_address(value: bytes | None) -> bytes:
    """reply-to as an address: ``/queues/`` and the name, percent-encoded but for
    unreserved characters (uri_string:quote)."""
    if value is None:
        return _NULL
    return av.string(b"/queues/" + urllib.parse.quote_from_bytes(value, safe="").encode())


__all__ = [
    "Annotation",
    "HeadersView",
    "Props091",
    "body_sections",
    "data_section",
    "headers_view",
    "properties_section",
]
