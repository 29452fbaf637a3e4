"""A message as RabbitMQ 4.2 delivers it to an AMQP 1.0 consumer: the bytes of its
sections (mc:convert(mc_amqp, ...) then mc_amqp:protocol_state, called from
rabbit_amqp_session's delivery).

- **Header**: ``durable`` (delivery-mode 2), ``priority``, ``ttl`` (expiration),
  ``first-acquirer`` (neither redelivered, nor delivered before by a quorum queue's
  count, nor dead-lettered) and ``delivery-count``.
- **Message annotations**: a message an AMQP 1.0 client published keeps its own; one
  published over AMQP 0-9-1 gets ``x-basic-type`` (its type), its ``x-`` headers and ``CC``
  as ``x-cc``. Then RabbitMQ's: ``x-exchange``, ``x-routing-key`` (the first routing key),
  ``x-opt-deaths`` (the death history, from the ``x-death`` header), and each annotation
  the delivery carries (``x-delivery-count`` from a quorum queue, ``x-stream-offset`` from
  a stream, what a consumer's ``modified`` outcome added, headers the broker added to a
  message published over AMQP 1.0: ``timestamp_in_ms`` as ``x-opt-rabbitmq-received-
  time``), each replacing an annotation of the same key where it stands, or appended.
  RabbitMQ adds its own in the order of an Erlang map's keys: undefined between
  ``x-exchange``, ``x-routing-key`` and ``x-opt-deaths`` (atoms, OTP 26), then the others
  by key; map order carries no meaning in AMQP 1.0.
- **The bare message**: a message published over AMQP 1.0 keeps its own, byte for byte
  (properties, application properties, body, footer). One published over AMQP 0-9-1 gets
  properties (message-id and correlation-id, a ``urn:uuid:`` one as a uuid; user-id;
  reply-to as ``/queues/<quoted name>``; content-type and content-encoding as symbols;
  creation-time from the timestamp in ms; group-id from app-id), application properties
  (its other headers but arrays and tables) and one data section, its body; a body typed
  ``amqp-1.0`` is its sections.

The death history: this broker records deaths in the ``x-death`` header (as RabbitMQ
3.10 does); an ``x-death`` array of tables in dead-lettering's shape is taken as the
message's history and delivered as ``x-opt-deaths`` (RabbitMQ 4.2 keeps deaths beside the
message, and gives a client-set ``x-death`` header as an ``x-death`` annotation).
"""

from __future__ import annotations

import re
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leveret.broker import amqp10_values as av
from leveret.broker.amqp10_message import (
    AMQP10_TYPE,
    DATA,
    Amqp10Error,
    Amqp10Message,
    read_sections,
)
from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.amqp10 import definitions as defs
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from leveret.protocol.binary import I64, U32, U64

_CACHE_SIZE = 4096
_URN = re.compile(
    rb"urn:uuid:([0-9a-fA-F]{8})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{4})-([0-9a-fA-F]{12})"
)
_MA = b"\x00\x53\x72"
_SYM = {name: av.symbol(name) for name in (
    "x-exchange", "x-routing-key", "x-opt-deaths", "x-basic-type", "x-cc",
    "x-opt-rabbitmq-received-time", "x-delivery-count", "x-stream-offset",
)}  # fmt: skip
Annotation = tuple[str, bytes]  # key (an x- symbol) and its encoded value


# ------------------------------------------------------------------- the API
def delivery(
    message: Message,
    *,
    redelivered: bool = False,
    delivery_count: int = 0,
    annotations: Mapping[str, Any] | None = None,
) -> bytes:
    """The sections an AMQP 1.0 consumer receives for ``message``: ``redelivered`` as
    the queue says, ``delivery_count`` the header's count (a quorum queue's count of
    failed deliveries; 0 elsewhere), ``annotations`` what this delivery carries (mc
    annotations: ``x-`` keys, ``timestamp_in_ms``; values int, bool, str or bytes, or
    tagged AMQP 1.0 values)."""
    if isinstance(message, Amqp10Message):
        return _from_amqp10(message, redelivered, delivery_count, annotations)
    return _from_amqp091(message, redelivered, delivery_count, annotations)


def stream_delivery(entry: bytes, offset: int, stream: str) -> bytes:
    """A stream's entry (an AMQP 1.0 message as stored) as RabbitMQ 4.2 delivers it to an
    AMQP 1.0 consumer (mc_amqp:init_from_stream, then protocol_state): its stored header
    (or one with ``durable`` from ``x-basic-delivery-mode``), first-acquirer, its
    annotations with ``x-exchange`` ("" unless stored), ``x-routing-key`` (the stream's
    name unless stored) and ``x-stream-offset``, then its bare message as stored."""
    s = read_sections(entry)
    ma = [(k, av.encode(v)) for k, v in s.annotations]
    got: dict[str, Value] = {}
    for k, v in s.annotations:
        got.setdefault(k, v)
    if s.header is not None:
        fields = [av.encode(v) for v in s.header[:3]]
        fields += [b"\x40"] * (3 - len(fields))
        head = _header_section(fields, True, 0)
    else:
        mode = got.get("x-basic-delivery-mode")
        head = _header(mode == ("ubyte", 2), None, None, True, 0)
    exchange = got.get("x-exchange")
    key = got.get("x-routing-key")
    _upsert(
        ma,
        "x-exchange",
        av.encode(exchange) if exchange and exchange[0] == "string" else b"\xa1\x00",
    )
    _upsert(
        ma, "x-routing-key", av.encode(key) if key and key[0] == "string" else av.string(stream)
    )
    _upsert(ma, "x-stream-offset", av.encode(("long", offset)))
    return head + _annotations_section(ma) + entry[s.bare_at :]


@dataclass(frozen=True, slots=True)
class SettleOp:
    """rabbit_amqp_session:settle_op_from_outcome: what a consumer's outcome asks of the
    queue. ``kind``: ``complete`` (accepted), ``discard`` (rejected: dead-lettered or
    dropped), ``requeue`` (released) or ``modify``, with ``delivery_failed``,
    ``undeliverable_here`` and ``annotations`` (``x-`` keys; values as RabbitMQ keeps them:
    int, bool, str, bytes, float, None, or a tagged list, map or array).

    What the queue does with ``modify`` (RabbitMQ 4.2): a classic queue requeues, or
    discards when ``undeliverable_here``, and ignores the rest; a quorum queue returns the
    message (its x-delivery-count + 1; its delivery-count + 1 when ``delivery_failed``)
    with the annotations merged onto it (later ones win, and they stay: they go with its
    next deliveries, over AMQP 0-9-1 too, and with it when it is dead-lettered), or, when
    ``undeliverable_here``, dead-letters it (reason ``rejected``) with the same changes; a
    stream only gives the credit back."""

    kind: str
    delivery_failed: bool = False
    undeliverable_here: bool = False
    annotations: Mapping[str, Any] | None = None


COMPLETE = SettleOp("complete")
DISCARD = SettleOp("discard")
REQUEUE = SettleOp("requeue")


def settle_op(outcome: Any) -> SettleOp:
    """The queue operation for a disposition's outcome (a
    :mod:`~leveret.protocol.amqp10.definitions` outcome). Raises :class:`Amqp10Error`
    for an outcome that is none of the four (invalid-field, ending the session) or a
    ``modified`` whose annotations have a key that is not an ``x-`` symbol (RabbitMQ's
    session fails: internal-error)."""
    if isinstance(outcome, defs.Accepted):
        return COMPLETE
    if isinstance(outcome, defs.Rejected):
        return DISCARD
    if isinstance(outcome, defs.Released):
        return REQUEUE
    if isinstance(outcome, defs.Modified):
        return SettleOp(
            "modify",
            bool(outcome.delivery_failed),
            bool(outcome.undeliverable_here),
            modified_annotations(outcome.message_annotations),
        )
    if isinstance(outcome, defs.Received):
        number, offset = outcome.section_number, outcome.section_offset
        state = f"{{'v1_0.received',{{uint,{number}}},{{ulong,{offset}}}}}"
    else:
        state = repr(outcome)
    raise Amqp10Error(
        defs.INVALID_FIELD, f"Unrecognised state: {state} in DISPOSITION", ends_session=True
    )


def modified_annotations(annotations: Mapping[Any, Any] | None) -> dict[str, Any]:
    """A ``modified`` outcome's message-annotations (the plain view) as RabbitMQ keeps
    them (unwrap_simple_type): simple values unwrapped (symbols and strings as text, a
    timestamp as its integer, a uuid as its bytes), lists, maps and arrays tagged."""
    out: dict[str, Any] = {}
    for key, value in (annotations or {}).items():
        if not isinstance(key, types.Symbol) or not key.startswith("x-"):
            raise Amqp10Error(defs.INTERNAL_ERROR, "function_clause", ends_session=True)
        if isinstance(value, uuid.UUID):
            out[str(key)] = value.bytes
        elif isinstance(value, (list, dict, types.Array, types.Described, types.Typed)):
            out[str(key)] = types.tag(value)
        elif isinstance(value, str):
            out[str(key)] = str(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            out[str(key)] = int(value)
        else:
            out[str(key)] = value
    return out


def annotation_headers(properties: bytes, annotations: Mapping[str, Any]) -> bytes:
    """AMQP 0-9-1 property bytes with a delivery's annotations as headers, as RabbitMQ
    4.2's mc_amqpl:protocol_state adds them: ``x-`` keys (and ``timestamp_in_ms``) with an
    integer (as a long), text or bytes (a long string) or boolean value; the others
    (floats, lists, maps) left out. Then every header is sorted by key, the annotation
    winning over a header of the same key."""
    added: list[table.Field] = []
    for key, value in annotations.items():
        if not (key.startswith("x-") or key == "timestamp_in_ms"):
            continue
        if isinstance(value, bool):
            if key != "timestamp_in_ms":
                added.append((key, b"t\x01" if value else b"t\x00"))
        elif isinstance(value, int):
            added.append((key, table.long(value)))
        elif isinstance(value, (str, bytes)) and key != "timestamp_in_ms":
            added.append((key, table.longstr(value)))
    if not added:
        return properties
    fields = added + (table.headers(properties) or [])
    ordered = sorted(fields, key=lambda f: f[0].encode())
    out = [ordered[0]]
    for f in ordered[1:]:
        if f[0] != out[-1][0]:
            out.append(f)
    return table.with_headers(properties, out)


# ------------------------------------------------------- common: header and MA
_HEADERS: dict[tuple[bool, int | None, int | None, bool, int], bytes] = {}


def _header(durable: bool, priority: int | None, ttl: int | None, first: bool, count: int) -> bytes:
    key = (durable, priority, ttl, first, count)
    got = _HEADERS.get(key)
    if got is None:
        fields = [
            b"\x41" if durable else b"\x42",
            b"\x40" if priority is None else av.encode(("ubyte", priority)),
            b"\x40" if ttl is None else av.encode(("uint", ttl)),
        ]
        got = _header_section(fields, first, count)
        if len(_HEADERS) >= _CACHE_SIZE:
            _HEADERS.clear()
        _HEADERS[key] = got
    return got


def _header_section(fields: list[bytes], first: bool, count: int) -> bytes:
    parts = [*fields, b"\x41" if first else b"\x42", av.encode(("uint", count))]
    return b"\x00\x53\x70" + av.compound(0xC0, parts, 5)


def _upsert(ma: list[Annotation], key: str, encoded: bytes) -> None:
    """lists:keystore: replace the annotation where it stands, or append it."""
    for i, (k, _v) in enumerate(ma):
        if k == key:
            ma[i] = (key, encoded)
            return
    ma.append((key, encoded))


def _annotations_section(ma: list[Annotation]) -> bytes:
    if not ma:
        return b""
    parts = []
    for key, encoded in ma:
        parts.append(_SYM.get(key) or av.symbol(key))
        parts.append(encoded)
    return _MA + av.compound(0xC1, parts, len(parts))


def _rabbit_annotations(
    ma: list[Annotation],
    message: Message,
    deaths: bytes | None,
    annotations: Mapping[str, Any] | None,
) -> None:
    """protocol_state_message_annotations: RabbitMQ's own, then the delivery's (keys in
    order)."""
    _upsert(ma, "x-exchange", av.string(message.exchange))
    _upsert(ma, "x-routing-key", av.string(message.routing_key))
    if deaths is not None:
        _upsert(ma, "x-opt-deaths", deaths)
    if annotations:
        for key in sorted(annotations, key=str.encode):
            value = annotations[key]
            if key == "timestamp_in_ms" and isinstance(value, int):
                _upsert(ma, "x-opt-rabbitmq-received-time", b"\x83" + I64.pack(value))
            elif key.startswith("x-") and value is not None:
                _upsert(ma, key, av.encode(_infer(value)))


def _infer(value: Any) -> Value:
    """mc_util:infer_type, and a type for what RabbitMQ cannot infer (its delivery fails
    on a float: a double here)."""
    if isinstance(value, float):
        return ("double", value)
    return av.infer(value)


# ------------------------------------------------ published over AMQP 1.0
_AMQP10_MA: dict[bytes, list[Annotation]] = {}
_FIRST_MA: dict[tuple[bytes, bytes], bytes] = {}


def _from_amqp10(
    m: Amqp10Message, redelivered: bool, count: int, annotations: Mapping[str, Any] | None
) -> bytes:
    if m.properties is m.born and not annotations:
        key = (m.annotations_raw, m.exchange_and_key)
        section = _FIRST_MA.get(key)
        if section is None:
            ma = list(_kept(m))
            _rabbit_annotations(ma, m, None, None)
            section = _annotations_section(ma)
            if len(_FIRST_MA) >= _CACHE_SIZE:
                _FIRST_MA.clear()
            _FIRST_MA[key] = section
        durable, priority, ttl = m.born_header
        first = not redelivered and count == 0
        return b"".join((_header(durable, priority, ttl, first, count), section, m.bare))
    return _amqp10_prefix(m, redelivered, count, annotations) + m.bare


def _kept(m: Amqp10Message) -> list[Annotation]:
    """The message's own annotations, encoded."""
    raw = m.annotations_raw
    kept = _AMQP10_MA.get(raw)
    if kept is None:
        kept = [(k, av.encode(v)) for k, v in m.annotations]
        if len(_AMQP10_MA) >= _CACHE_SIZE:
            _AMQP10_MA.clear()
        _AMQP10_MA[raw] = kept
    return kept


def _amqp10_prefix(
    m: Amqp10Message, redelivered: bool, count: int, annotations: Mapping[str, Any] | None
) -> bytes:
    p = _Props091(m.properties)
    ma = list(_kept(m))
    deaths = None
    extra: dict[str, Any] = {}
    if m.properties is not m.born:  # what the broker added since it was published
        born = dict(table.headers(m.born) or [])
        for key, value in p.headers or []:
            if born.get(key) == value:
                continue
            if key == "x-death":
                deaths = av.deaths_annotation(value)
            elif key == "timestamp_in_ms" and value[:1] == b"l":
                extra[key] = I64.unpack_from(value, 1)[0]
            elif key.startswith("x-"):
                converted = av.from_091(value)
                if converted is not None:
                    extra[key] = _simple(converted)
    if annotations:
        extra.update(annotations)
    _rabbit_annotations(ma, m, deaths, extra)
    first = not redelivered and count == 0 and deaths is None
    head = _header(p.delivery_mode == 2, p.priority, p.ttl, first, count)
    return head + _annotations_section(ma)


def _simple(value: Value) -> Any:
    """A header's AMQP 1.0 value as the annotation RabbitMQ would hold for it: text,
    integers and booleans unwrapped (mc_util:infer_type gives them back)."""
    kind, v = value
    if kind in ("string", "long", "boolean"):
        return v
    return value


# ------------------------------------------------ published over AMQP 0-9-1
class _Props091:
    """Content-header property bytes read as RabbitMQ holds them (short strings as
    bytes)."""

    __slots__ = (
        "app_id",
        "content_encoding",
        "content_type",
        "correlation_id",
        "delivery_mode",
        "expiration",
        "headers",
        "message_id",
        "priority",
        "reply_to",
        "timestamp",
        "ttl",
        "type",
        "user_id",
    )

    def __init__(self, raw: bytes) -> None:
        spans = table.property_spans(raw)

        def short(flag: int) -> bytes | None:
            span = spans.get(flag)
            return None if span is None else raw[span[0] + 1 : span[1]]

        def octet(flag: int) -> int | None:
            span = spans.get(flag)
            return None if span is None else raw[span[0]]

        self.content_type = short(0x8000)
        self.content_encoding = short(0x4000)
        self.headers = table.headers(raw)
        self.delivery_mode = octet(0x1000)
        self.priority = octet(0x0800)
        self.correlation_id = short(0x0400)
        self.reply_to = short(0x0200)
        self.expiration = short(0x0100)
        self.message_id = short(0x0080)
        span = spans.get(0x0040)
        self.timestamp = None if span is None else U64.unpack_from(raw, span[0])[0]
        self.type = short(0x0020)
        self.user_id = short(0x0010)
        self.app_id = short(0x0008)
        self.ttl = None
        if self.expiration is not None and self.expiration.isdigit():
            self.ttl = int(self.expiration)


@dataclass(slots=True)
class _Converted:
    """What depends only on a message's exchange, routing key and property bytes."""

    durable: bool
    priority: int | None
    ttl: int | None
    ma: list[Annotation]
    deaths: bytes | None
    tail: bytes  # properties and application-properties sections
    amqp_body: bool
    first: bytes | None = None  # header, annotations and tail of a plain first delivery


_CONVERTED: dict[tuple[bytes, bytes], _Converted] = {}


def _from_amqp091(
    m: Message, redelivered: bool, count: int, annotations: Mapping[str, Any] | None
) -> bytes:
    key = (m.exchange_and_key, m.properties)
    c = _CONVERTED.get(key)
    if c is None:
        c = _convert091(m)
        if len(_CONVERTED) >= _CACHE_SIZE:
            _CONVERTED.clear()
        _CONVERTED[key] = c
    body = _body_sections(m.body) if c.amqp_body else None
    if body is None:
        n = len(m.body)
        head = b"\x00Su\xa0" + bytes((n,)) if n < 256 else b"\x00Su\xb0" + U32.pack(n)
        body = head + m.body
    if not redelivered and count == 0 and not annotations and c.deaths is None:
        if c.first is None:
            c.first = _prefix091(c, m, True, 0, None)
        return c.first + body
    first = not redelivered and count == 0 and c.deaths is None
    return _prefix091(c, m, first, count, annotations) + body


def _prefix091(
    c: _Converted, m: Message, first: bool, count: int, annotations: Mapping[str, Any] | None
) -> bytes:
    ma = list(c.ma)
    _rabbit_annotations(ma, m, c.deaths, annotations)
    return _header(c.durable, c.priority, c.ttl, first, count) + _annotations_section(ma) + c.tail


def _body_sections(body: bytes) -> bytes | None:
    """A body typed ``amqp-1.0``: its sections, re-encoded as RabbitMQ decodes and encodes
    them; None when it is not sections (RabbitMQ fails on those: sent as data here)."""
    try:
        sections = types.sections(body)
    except types.DecodeError:
        return None
    if not sections:
        return None
    return b"".join(av.section(code, value) for code, value in sections)


def _convert091(m: Message) -> _Converted:
    """mc_amqpl:convert_to(mc_amqp, ...): everything but the body."""
    p = _Props091(m.properties)
    headers = p.headers or []
    ma: list[Annotation] = []
    if p.type is not None:
        ma.append(("x-basic-type", av.string(p.type)))
    deaths = None
    application: list[bytes] = []
    for key, value in headers:
        if key == "x-death":
            deaths = av.deaths_annotation(value)
            if deaths is not None:
                continue
        if key.startswith("x-"):
            converted = av.from_091(value)
            if converted is not None:
                ma.append((key, av.encode(converted)))
        elif key == "CC" and value[:1] == b"A":
            converted = av.from_091(value)
            if converted is not None:
                ma.append(("x-cc", av.encode(converted)))
        elif value[:1] not in (b"A", b"F"):
            converted = av.from_091(value)
            if converted is not None:
                application += (av.string(key), av.encode(converted))
    fields = [
        _id(p.message_id),
        b"\x40" if p.user_id is None else av.encode(("binary", p.user_id)),
        b"\x40",
        b"\x40",
        _reply_address(p.reply_to),
        _id(p.correlation_id),
        b"\x40" if p.content_type is None else av.encode(("symbol", p.content_type)),
        b"\x40" if p.content_encoding is None else av.encode(("symbol", p.content_encoding)),
        b"\x40",
        b"\x40" if p.timestamp is None else b"\x83" + I64.pack(_signed(p.timestamp) * 1000),
        b"\x40" if p.app_id is None else av.string(p.app_id),
    ]
    while fields and fields[-1] == b"\x40":
        fields.pop()
    tail = b""
    if fields:
        tail = b"\x00\x53\x73" + av.compound(0xC0, fields, len(fields))
    if application:
        tail += b"\x00\x53\x74" + av.compound(0xC1, application, len(application))
    return _Converted(
        durable=p.delivery_mode == 2,
        priority=p.priority,
        ttl=p.ttl,
        ma=ma,
        deaths=deaths,
        tail=tail,
        amqp_body=p.type == AMQP10_TYPE.encode(),
    )


def _signed(n: int) -> int:
    return n - 2**64 if n >= 2**63 else n


def _id(value: bytes | None) -> bytes:
    """A message or correlation id: a ``urn:uuid:`` string as the uuid, else the string."""
    if value is None:
        return b"\x40"
    match = _URN.fullmatch(value)
    if match:
        return b"\x98" + bytes.fromhex("".join(g.decode() for g in match.groups()))
    return av.string(value)


def _reply_address(value: bytes | None) -> bytes:
    """reply-to as an address: ``/queues/`` and the name, percent-encoded but for
    unreserved characters (uri_string:quote)."""
    if value is None:
        return b"\x40"
    return av.string(b"/queues/" + urllib.parse.quote_from_bytes(value, safe="").encode())


__all__ = [
    "AMQP10_TYPE",
    "COMPLETE",
    "DATA",
    "DISCARD",
    "REQUEUE",
    "SettleOp",
    "annotation_headers",
    "delivery",
    "modified_annotations",
    "settle_op",
    "stream_delivery",
]
