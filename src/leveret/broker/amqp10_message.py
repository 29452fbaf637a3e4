"""A message an AMQP 1.0 client publishes, as RabbitMQ 4.2 takes it in (mc_amqp:init and
rabbit_amqp_session's incoming transfer) and as its AMQP 0-9-1 consumers then see it
(mc_amqpl:convert_from(mc_amqp, ...) and protocol_state, the ``rabbitmq_4.0.0`` path).

:func:`parse` reads a transfer's payload as RabbitMQ's parser does in server mode: the
sections before the body (header, delivery and message annotations, properties,
application properties) are decoded and checked, the body and footer are not. What the
session needs to route comes with it (``to``, ``subject``, ``x-cc``, ``user-id``,
durability); :meth:`Parsed.message` then makes the broker's message for an exchange and a
routing key: an :class:`Amqp10Message`, a :class:`~leveret.broker.message.Message` whose
property bytes and body are those of the AMQP 0-9-1 view (so headers exchanges, TTL,
priority, persistence, dead-lettering and AMQP 0-9-1 consumers work on it unchanged) and
which keeps its message annotations and the bare message (properties to footer) exactly
as published, for its AMQP 1.0 consumers (:mod:`leveret.broker.amqp10_delivery`).

The AMQP 0-9-1 view, as RabbitMQ 4.2 builds it: delivery-mode from ``durable`` (2 or 1;
absent when the header is), priority, expiration from ``ttl``; message-id and
correlation-id as text (a uuid as ``urn:uuid:...``, a ulong in decimal; a binary one, or
text of 256 bytes or more, as an ``x-message-id``/``x-correlation-id`` header instead);
user-id when it is a valid short string; reply-to (``/queues/<name>`` decoded to the
name); content-type, content-encoding; timestamp from creation-time in seconds; app-id from
group-id; type from ``x-basic-type``, or ``amqp-1.0`` for a body that is not data
sections. Headers: the application properties (string keys under 256 bytes; values that
RabbitMQ keeps as their bytes, decimals, NaN and infinities, left out) and the ``x-``
message annotations but ``x-basic-*``, ``x-routing-key``, ``x-exchange`` and ``x-death``
(``x-cc`` as ``CC``, ``x-opt-rabbitmq-received-time`` as ``timestamp_in_ms``,
``x-opt-deaths`` as ``x-death``), sorted by key, the first of equal keys kept. The body:
the data sections' bytes, concatenated, or the body and footer sections as encoded.

Where RabbitMQ's conversion fails (at an AMQP 0-9-1 consumer's delivery: a char, uuid or
described value among the application properties or annotations; a short string of 256
bytes or more; data sections mixed with others; a body that does not decode), the value
is left out here, or the body kept as it came, typed ``amqp-1.0``: the conversion happens
at publish here, and a message is never refused for its AMQP 0-9-1 view.
"""

from __future__ import annotations

import re
import urllib.parse
import uuid
from dataclasses import dataclass

from leveret.broker import amqp10_values as av
from leveret.broker.amqp10_sections import (
    BODY,
    DATA,
    NULL,
    Amqp10Error,
    Sections,
    decode_annotations,
    decode_application,
    decode_header,
    read_sections,
    remember,
    size_error,
    user_id_error,
)
from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.amqp10 import definitions as defs
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from leveret.protocol.binary import U32

__all__ = [
    "AMQP10_TYPE",
    "DATA",
    "Amqp10Error",
    "Amqp10Message",
    "Parsed",
    "Sections",
    "parse",
    "read_sections",
    "restored",
    "size_error",
    "user_id_error",
]

AMQP10_TYPE = "amqp-1.0"  # mc_amqpl's ?AMQP10_TYPE: an AMQP-encoded AMQP 0-9-1 body
# Message annotations that are RabbitMQ's own: not turned into AMQP 0-9-1 headers.
_INTERNAL = frozenset(("x-routing-key", "x-exchange", "x-death"))


@dataclass(slots=True, eq=False, repr=False)
class Amqp10Message(Message):
    """A message published over AMQP 1.0: its AMQP 0-9-1 view (``properties``, ``body``)
    for everything in the broker, and what its AMQP 1.0 consumers get back unchanged:
    ``annotations`` (its message annotations, ``x-`` keys) and ``bare`` (properties,
    application properties, body and footer, byte for byte). ``born`` is the property
    bytes it was published with: headers the broker adds later (dead-lettering,
    interceptors, a quorum queue's delivery count) are told apart by them."""

    annotations: tuple[tuple[str, Value], ...] = ()
    annotations_raw: bytes = b""
    bare: bytes = b""
    born: bytes = b""
    # durable, priority and ttl of the property bytes it was published with
    born_header: tuple[bool, int | None, int | None] = (False, None, None)

    def with_properties(self, properties: bytes) -> Message:
        return self._copy(
            self.exchange, self.routing_key, self.exchange_and_key, properties, self.cc
        )

    def with_route(
        self, exchange: str, routing_keys: tuple[str, ...], properties: bytes | None = None
    ) -> Message:
        base = Message.build(exchange, routing_keys[0], self.body)
        return self._copy(
            base.exchange,
            base.routing_key,
            base.exchange_and_key,
            self.properties if properties is None else properties,
            routing_keys[1:],
        )

    def _copy(
        self,
        exchange: str,
        routing_key: str,
        exchange_and_key: bytes,
        properties: bytes,
        cc: tuple[str, ...],
    ) -> Amqp10Message:
        """A copy with another route and property bytes: the same body, and the same
        annotations, bare message and bytes it was published with."""
        m = Amqp10Message(
            exchange,
            routing_key,
            exchange_and_key,
            properties,
            self.body,
            self.annotations,
            self.annotations_raw,
            self.bare,
            self.born,
            self.born_header,
        )
        m.cc = cc
        return m

    def origin(self) -> bytes:
        """What a store keeps beside the exchange, routing key, property bytes and body
        to give this message back as published (:func:`restored`): its annotations
        section, the property bytes it was published with and its bare message."""
        raw, born = self.annotations_raw, self.born
        return b"".join((U32.pack(len(raw)), raw, U32.pack(len(born)), born, self.bare))


def restored(exchange_and_key: bytes, properties: bytes, body: bytes, origin: bytes) -> Message:
    """A message a store kept with its :meth:`Amqp10Message.origin`."""
    n = U32.unpack_from(origin, 0)[0]
    raw = origin[4 : 4 + n]
    m = U32.unpack_from(origin, 4 + n)[0]
    born = origin[8 + n : 8 + n + m]
    base = Message.stored(exchange_and_key, properties, body)
    ma = _ma_view(raw)
    p = Message.from_parts("", "", born, b"").props
    ttl = int(p.expiration) if p.expiration and p.expiration.isdigit() else None
    return Amqp10Message(
        base.exchange,
        base.routing_key,
        exchange_and_key,
        properties if properties != born else born,
        body,
        ma.annotations,
        raw,
        origin[8 + n + m :],
        born,
        (p.delivery_mode == 2, p.priority, ttl),
    )


@dataclass(frozen=True, slots=True)
class _Prefix:
    """What a payload's sections before its body give :class:`Parsed` (all of it but the
    body and the bare message, which starts at ``bare_at``), for a body of data sections."""

    to: str | None
    subject: str | None
    cc: tuple[str, ...]
    cc_error: Amqp10Error | None
    user_id: bytes | None
    durable: bool
    properties: bytes
    annotations: tuple[tuple[str, Value], ...]
    annotations_raw: bytes
    bare_at: int
    header: tuple[bool, int | None, int | None]

    def parsed(self, payload: bytes, body: bytes) -> Parsed:
        return Parsed(
            self.to, self.subject, self.cc, self.cc_error, self.user_id, self.durable,
            self.properties, self.annotations, self.annotations_raw, self.bare_at,
            self.header, body, payload[self.bare_at :],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Parsed(_Prefix):
    """A transfer's payload as RabbitMQ 4.2 reads it, before it is routed: ``to`` and
    ``subject`` (text, or None when absent or of another type), ``cc`` (the routing keys
    of an ``x-cc`` annotation) or ``cc_error`` (the invalid-field error RabbitMQ gives a
    malformed one when it routes), ``user_id`` (a binary user-id, to check against the
    user), ``durable``; then the AMQP 0-9-1 view and what is kept, the body and the bare
    message."""

    body: bytes
    bare: bytes

    def message(self, exchange: str, routing_key: str) -> Amqp10Message:
        """The message as published to ``exchange`` with ``routing_key`` (and the x-cc
        keys)."""
        ex = exchange.encode()
        rk = routing_key.encode()
        m = Amqp10Message(
            exchange,
            routing_key,
            bytes((len(ex),)) + ex + bytes((len(rk),)) + rk,
            self.properties,
            self.body,
            self.annotations,
            self.annotations_raw,
            self.bare,
            self.properties,
            self.header,
        )
        m.cc = self.cc
        return m


# --------------------------------------------------------------------- parsing
# The last prefix parsed (its bytes up to the body, and what they give). Publishers
# repeat their header, annotations and properties message after message: when a payload
# starts with these bytes and its body starts right after them, parsing them again gives
# the same (parse is a function of the bytes), so only the body is read.
_last: tuple[bytes, _Prefix] | None = None


def parse(payload: bytes) -> Parsed:
    """A transfer's payload (its sections, as bytes) read as RabbitMQ 4.2 reads it.
    Raises :class:`Amqp10Error`: decode-error "message has no body" (the link is
    detached), or for a section RabbitMQ cannot take an internal-error that ends the
    session."""
    global _last
    if type(payload) is not bytes:
        payload = bytes(payload)
    last = _last
    if last is not None:
        prefix, got = last
        at = len(prefix)
        # read_sections reads the same sections up to ``at`` and stops at a body there
        if (
            len(payload) > at + 2
            and payload[at] == 0x00
            and payload[at + 1] == 0x53
            and payload[at + 2] in BODY
            and payload.startswith(prefix)
        ):
            body, body_type = _body(payload, at, payload[at + 2])
            if body_type is None:
                return got.parsed(payload, body)
    s = read_sections(payload)
    if s.body_at < 0:
        raise Amqp10Error(defs.DECODE_ERROR, "message has no body")
    ma = _ma_view(s.annotations_raw)
    mode, priority, expiration, born = _header_view(s.header_raw, s.annotations_raw, ma)
    p = _props_view(s.properties_raw, s.properties)
    body, body_type = _body(payload, s.body_at, s.body_code)
    msg_type = _AMQP10_TYPE if body_type else ma.basic_type
    if p.id_headers:
        fields = [*ma.headers, *p.id_headers, *_app_view(s.application_raw)]
        headers = table.encode_table(av.sorted_fields(fields)) if fields else None
    else:
        headers = _headers_table(s.annotations_raw, s.application_raw, ma)
    properties = av.encode_properties(
        p.content_type,
        p.content_encoding,
        headers,
        mode,
        priority,
        p.correlation_id,
        p.reply_to,
        expiration,
        p.message_id,
        p.timestamp,
        msg_type,
        p.valid_user,
        p.app_id,
    )
    if body_type is None and p.message_id is None and p.correlation_id is None:
        # (a message-id or correlation-id differs message by message: not kept)
        got = _Prefix(
            p.to, p.subject, ma.cc, ma.cc_error, p.user_id, mode == 2, properties,
            ma.annotations, s.annotations_raw, s.bare_at, born,
        )  # fmt: skip
        _last = (payload[: s.body_at], got)
        return got.parsed(payload, body)
    return Parsed(
        p.to, p.subject, ma.cc, ma.cc_error, p.user_id, mode == 2, properties,
        ma.annotations, s.annotations_raw, s.bare_at, born, body, payload[s.bare_at :],
    )  # fmt: skip


# ------------------------------------------------------------ the 0-9-1 view
@dataclass(slots=True)
class _MA:
    """What message annotations give the AMQP 0-9-1 view and the routing."""

    annotations: tuple[tuple[str, Value], ...]
    first: dict[str, Value]  # amqp10_map_get: the first of equal keys
    headers: list[table.Field]
    basic_type: bytes | None
    cc: tuple[str, ...]
    cc_error: Amqp10Error | None


_NO_MA = _MA((), {}, [], None, (), None)
_MAS: dict[bytes, _MA] = {}


def _ma_view(raw: bytes) -> _MA:
    if not raw:
        return _NO_MA
    got = _MAS.get(raw)
    if got is not None:
        return got
    annotations = decode_annotations(raw)
    first: dict[str, Value] = {}
    for key, value in annotations:
        first.setdefault(key, value)
    cc: tuple[str, ...] = ()
    cc_error = None
    x_cc = first.get("x-cc")
    if x_cc is not None:
        if x_cc[0] == "list" and all(item[0] == "string" for item in x_cc[1]):
            cc = tuple(item[1] for item in x_cc[1])
        else:
            cc_error = Amqp10Error(
                defs.INVALID_FIELD, f"bad value for 'x-cc' message-annotation: {av.term(x_cc)}"
            )
    headers: list[table.Field] = []
    for key, value in annotations:
        if key == "x-cc":
            encoded = av.to_091(value)
            if encoded is not None:
                headers.append(("CC", encoded))
        elif key == "x-opt-rabbitmq-received-time" and value[0] == "timestamp":
            headers.append(("timestamp_in_ms", table.long(value[1])))
        elif key == "x-opt-deaths":
            deaths = av.x_death_header(value)
            if deaths is not None:
                headers.append(("x-death", deaths))
        elif av.is_as_is(value) or len(key.encode()) >= 256:
            continue
        elif not key.startswith("x-basic-") and key not in _INTERNAL:
            encoded = av.to_091(value)
            if encoded is not None:
                headers.append((key, encoded))
    got = _MA(
        tuple(annotations),
        first,
        headers,
        _short(first.get("x-basic-type"), any_text=True),
        cc,
        cc_error,
    )
    remember(_MAS, raw, got)
    return got


_HeaderView = tuple[int | None, int | None, bytes | None, tuple[bool, int | None, int | None]]
_HEADER_VIEWS: dict[tuple[bytes | None, bytes], _HeaderView] = {}


def _header_view(raw: bytes | None, ma_raw: bytes, ma: _MA) -> _HeaderView:
    """delivery-mode, priority and expiration (from the header, else from the
    ``x-basic-*`` annotations), and the header an AMQP 1.0 consumer gets back."""
    key = (raw, ma_raw)
    got = _HEADER_VIEWS.get(key)
    if got is not None:
        return got
    hdr = [] if raw is None else decode_header(raw)
    durable = _field(hdr, 0)
    priority = _field(hdr, 1)
    ttl = _field(hdr, 2)
    if durable is not None and durable[0] in ("bool", "boolean"):
        mode: int | None = 2 if durable[1] else 1
    else:
        mode = _unwrap_int(ma.first.get("x-basic-delivery-mode"))
    if priority is not None:
        prio = _unwrap_int(priority)
    else:
        prio = _unwrap_int(ma.first.get("x-basic-priority"))
    if ttl is not None and isinstance(ttl[1], int) and not isinstance(ttl[1], bool):
        expiration: bytes | None = str(ttl[1]).encode()
    else:
        expiration = _short(ma.first.get("x-basic-expiration"), any_text=True)
    seconds = int(expiration) if expiration is not None and expiration.isdigit() else None
    got = (mode, prio, expiration, (mode == 2, prio, seconds))
    remember(_HEADER_VIEWS, key, got)
    return got


_APPS: dict[bytes, list[table.Field]] = {}


def _app_view(raw: bytes | None) -> list[table.Field]:
    """Application properties as headers: string keys under 256 bytes, values RabbitMQ
    converts."""
    if raw is None:
        return []
    got = _APPS.get(raw)
    if got is None:
        got = []
        for key, value in decode_application(raw):
            if key[0] != "string" or len(key[1].encode()) >= 256 or av.is_as_is(value):
                continue
            encoded = av.to_091(value)
            if encoded is not None:
                got.append((key[1], encoded))
        remember(_APPS, raw, got)
    return got


_TABLES: dict[tuple[bytes, bytes | None], bytes | None] = {}


def _headers_table(ma_raw: bytes, app_raw: bytes | None, ma: _MA) -> bytes | None:
    key = (ma_raw, app_raw)
    if key in _TABLES:
        return _TABLES[key]
    fields = ma.headers + _app_view(app_raw)
    got = table.encode_table(av.sorted_fields(fields)) if fields else None
    remember(_TABLES, key, got)
    return got


@dataclass(slots=True)
class _P:
    """What the properties give the AMQP 0-9-1 view and the session."""

    message_id: bytes | None = None
    correlation_id: bytes | None = None
    id_headers: tuple[table.Field, ...] = ()
    user_id: bytes | None = None
    valid_user: bytes | None = None
    reply_to: bytes | None = None
    content_type: bytes | None = None
    content_encoding: bytes | None = None
    timestamp: int | None = None
    app_id: bytes | None = None
    to: str | None = None
    subject: str | None = None


_NO_PROPERTIES = _P()
_PROPS: dict[bytes, _P] = {}


_NULLS = [NULL] * 13


def _props_view(raw: bytes | None, fields: list[Value] | None) -> _P:
    if raw is None or fields is None:
        return _NO_PROPERTIES
    got = _PROPS.get(raw)  # publishers that send no ids repeat theirs
    if got is not None:
        return got
    f = fields + _NULLS[len(fields) :]
    mid, user, to, subject, reply_to, corr, ctype, cenc, _expiry, creation, group = f[:11]
    message_id, id_header = _message_id(mid, "x-message-id")
    correlation_id, corr_header = _message_id(corr, "x-correlation-id")
    if id_header is None and corr_header is None:
        id_headers: tuple[table.Field, ...] = ()
    else:
        id_headers = tuple(h for h in (corr_header, id_header) if h is not None)
    # user-id: a binary, checked against the user; any text is taken for AMQP 0-9-1
    # (unwrap) when it is a valid short string
    user_id = bytes(user[1]) if user[0] == "binary" else None
    valid = _short(user, any_text=True)
    if valid is not None and av.utf8_text(valid, 255) is None:
        valid = None
    # the timestamp: creation-time in seconds (RabbitMQ's timestamp annotation is set
    # from a creation-time of type timestamp only)
    timestamp = av.ms_to_s(creation[1]) if creation[0] == "timestamp" else None
    got = _P(
        message_id,
        correlation_id,
        id_headers,
        user_id,
        valid,
        None if reply_to[0] == "null" else _reply_to(reply_to),
        None if ctype[0] == "null" else _short(ctype, any_text=True),
        None if cenc[0] == "null" else _short(cenc, any_text=True),
        timestamp,
        None if group[0] == "null" else _short(group),
        to[1] if to[0] == "string" else None,
        subject[1] if subject[0] == "string" else None,
    )
    if mid[0] == "null" and corr[0] == "null":  # others differ message by message
        remember(_PROPS, raw, got)
    return got


def _field(fields: list[Value], index: int) -> Value | None:
    """A list field, None when absent or null."""
    if index < len(fields) and fields[index][0] != "null":
        return fields[index]
    return None


def _unwrap_int(value: Value | None) -> int | None:
    """An octet property's value from a tagged one (mc_amqpl's unwrap)."""
    if value is None or isinstance(value[1], bool) or not isinstance(value[1], int):
        return None
    v = value[1]
    return v if 0 <= v <= 255 else None


def _short(value: Value | None, any_text: bool = False) -> bytes | None:
    """A short-string property from a tagged value: a string (mc_amqpl's
    unwrap_shortstr) or, with ``any_text``, any value RabbitMQ takes as its bytes
    (unwrap: a symbol or a binary too); None when absent or 256 bytes or longer."""
    if value is None:
        return None
    kind, v = value
    if kind == "string" or (any_text and kind == "symbol"):
        raw = v.encode() if isinstance(v, str) else bytes(v)
    elif any_text and kind == "binary":
        raw = bytes(v)
    else:
        return None
    return raw if len(raw) < 256 else None


def _message_id(value: Value | None, header: str) -> tuple[bytes | None, table.Field | None]:
    """mc_amqpl:message_id: a message or correlation id as the property, or as a header
    when the property cannot hold it."""
    if value is None:
        return None, None
    kind, v = value
    if kind == "string":
        raw = v.encode()
        if len(raw) < 256:
            return raw, None
        return None, (header, table.longstr(raw))
    if kind == "uuid":
        return ("urn:uuid:" + str(uuid.UUID(bytes=bytes(v)))).encode(), None
    if kind == "ulong":
        return str(v).encode(), None
    if kind == "binary":
        raw = bytes(v)
        return None, (header, b"x" + U32.pack(len(raw)) + raw)
    if kind == "string":
        raw = v.encode()
        if len(raw) < 256:
            return raw, None
        return None, (header, table.longstr(raw))
    return None, None  # another type: RabbitMQ's conversion crashes


def _reply_to(value: Value | None) -> bytes | None:
    """A reply-to address: ``/queues/<name>`` as the (URL-decoded) name, any other
    string as it is; None for a name that does not decode."""
    raw = _short(value)
    if raw is None or not raw.startswith(b"/queues/"):
        return raw
    quoted = raw[8:]
    if _BAD_ESCAPE.search(quoted):
        return None
    return urllib.parse.unquote_to_bytes(quoted)


_BAD_ESCAPE = re.compile(rb"%(?![0-9a-fA-F]{2})")


_AMQP10_TYPE = AMQP10_TYPE.encode()


def _body(payload: bytes, at: int, code: int) -> tuple[bytes, str | None]:
    """The AMQP 0-9-1 body: one data section's bytes (the common case, read in place),
    several data sections concatenated (a footer left out), or, when the last body
    section is not data, the body and footer sections as encoded, typed ``amqp-1.0``."""
    n = len(payload)
    if code == DATA and at + 5 <= n and payload[at + 1] == 0x53:
        tag = payload[at + 3]
        if tag == 0xA0 and at + 5 + payload[at + 4] == n:
            return payload[at + 5 :], None
        if tag == 0xB0 and at + 8 <= n and at + 8 + U32.unpack_from(payload, at + 4)[0] == n:
            return payload[at + 8 :], None
    if code != DATA:  # mc_amqp keeps the encoded body and footer as they came
        return payload[at:], AMQP10_TYPE
    try:  # decoded, and converted section by section (mc_amqpl:convert_from)
        body = [(c, v) for c, v in types.sections(payload[at:]) if c in BODY]
    except types.DecodeError:
        return payload[at:], AMQP10_TYPE  # RabbitMQ fails on these: kept as they are
    if body and body[-1][0] == DATA:
        if all(c == DATA and v[0] == "binary" for c, v in body):
            return b"".join(v[1] for _c, v in body), None
        return payload[at:], AMQP10_TYPE  # RabbitMQ fails on these too
    return b"".join(av.section(c, v) for c, v in body), AMQP10_TYPE


# ------------------------------------------------------------ property bytes
