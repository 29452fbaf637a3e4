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
"""

from __future__ import annotations

import re
import struct
import urllib.parse
import uuid
from dataclasses import dataclass, field

from leveret.broker import amqp10_values as av
from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.amqp10 import definitions as defs
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from leveret.protocol.binary import U32, U64

AMQP10_TYPE = "amqp-1.0"  # mc_amqpl's ?AMQP10_TYPE: an AMQP-encoded AMQP 0-9-1 body
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
PROPERTIES, APPLICATION_PROPERTIES = 0x73, 0x74
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x75, 0x76, 0x77, 0x78
_NAMES = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}
_BODY = frozenset((DATA, AMQP_SEQUENCE, AMQP_VALUE))
# Message annotations that are RabbitMQ's own: not turned into AMQP 0-9-1 headers.
_INTERNAL = frozenset(("x-routing-key", "x-exchange", "x-death"))
_CACHE_SIZE = 4096


class Amqp10Error(Exception):
    """What RabbitMQ 4.2 answers a message with: an AMQP 1.0 error condition and
    description. ``ends_session``: RabbitMQ ends the session (its session process fails
    on the message) rather than detaching the link; for those, ``description`` is the
    first line of what it sends (the reason; its stack trace is left out)."""

    def __init__(self, condition: str, description: str, ends_session: bool = False) -> None:
        super().__init__(description)
        self.condition = types.Symbol(condition)
        self.description = description
        self.ends_session = ends_session

    @property
    def error(self) -> defs.Error:
        return defs.Error(self.condition, self.description)


def _crash(reason: str) -> Amqp10Error:
    return Amqp10Error(defs.INTERNAL_ERROR, reason, ends_session=True)


def size_error(size: int, max_size: int) -> Amqp10Error:
    """A message over a link's max-message-size (either way): a link error."""
    return Amqp10Error(
        defs.MESSAGE_SIZE_EXCEEDED,
        f"message size ({size} bytes) > maximum message size ({max_size} bytes)",
    )


def user_id_error(user_id: bytes | None, username: str, impersonator: bool) -> Amqp10Error | None:
    """rabbit_access_control:check_user_id: a user-id other than the authenticated user's
    (unless the user is tagged impersonator) detaches the link."""
    if user_id is None or impersonator or user_id == username.encode():
        return None
    claimed = user_id.decode("utf-8", "replace")
    return Amqp10Error(
        defs.UNAUTHORIZED_ACCESS,
        f"user_id property set to '{claimed}' but authenticated user was '{username}'",
    )


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
        m = Amqp10Message(
            self.exchange,
            self.routing_key,
            self.exchange_and_key,
            properties,
            self.body,
            self.annotations,
            self.annotations_raw,
            self.bare,
            self.born,
            self.born_header,
        )
        m.cc = self.cc
        return m

    def with_route(
        self, exchange: str, routing_keys: tuple[str, ...], properties: bytes | None = None
    ) -> Message:
        base = Message.build(exchange, routing_keys[0], self.body)
        m = Amqp10Message(
            base.exchange,
            base.routing_key,
            base.exchange_and_key,
            self.properties if properties is None else properties,
            self.body,
            self.annotations,
            self.annotations_raw,
            self.bare,
            self.born,
            self.born_header,
        )
        m.cc = routing_keys[1:]
        return m


@dataclass(slots=True)
class Parsed:
    """A transfer's payload as RabbitMQ 4.2 reads it, before it is routed: ``to`` and
    ``subject`` (text, or None when absent or of another type), ``cc`` (the routing keys
    of an ``x-cc`` annotation) or ``cc_error`` (the invalid-field error RabbitMQ gives a
    malformed one when it routes), ``user_id`` (a binary user-id, to check against the
    user), ``durable``; then the AMQP 0-9-1 view and what is kept."""

    to: str | None
    subject: str | None
    cc: tuple[str, ...]
    cc_error: Amqp10Error | None
    user_id: bytes | None
    durable: bool
    properties: bytes
    body: bytes
    annotations: tuple[tuple[str, Value], ...]
    annotations_raw: bytes
    bare: bytes
    header: tuple[bool, int | None, int | None]

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
def parse(payload: bytes) -> Parsed:
    """A transfer's payload (its sections, as bytes) read as RabbitMQ 4.2 reads it.
    Raises :class:`Amqp10Error`: decode-error "message has no body" (the link is
    detached), or for a section RabbitMQ cannot take an internal-error that ends the
    session."""
    s = read_sections(payload)
    if s.body_at < 0:
        raise Amqp10Error(defs.DECODE_ERROR, "message has no body")
    return _convert(payload, s)


@dataclass(slots=True)
class Sections:
    """The sections before a message's body, decoded and checked as RabbitMQ's parser
    does in server mode (mc_amqp:init): the header's fields, the message annotations (and
    their section's bytes), the properties' fields, the application properties; where the
    bare message starts, where the body starts (-1: none) and its first section's
    code."""

    header: list[Value] | None = None
    annotations: list[tuple[str, Value]] = field(default_factory=list)
    annotations_raw: bytes = b""
    properties: list[Value] | None = None
    application: list[tuple[Value, Value]] = field(default_factory=list)
    bare_at: int = -1
    body_at: int = -1
    body_code: int = 0


def read_sections(payload: bytes) -> Sections:
    """A message's sections up to its body (see :class:`Sections`); raises
    :class:`Amqp10Error` (internal-error, ending the session) for one RabbitMQ cannot
    take."""
    s = Sections()
    pos = 0
    n = len(payload)
    try:
        while pos < n:
            start = pos
            if payload[pos] != 0x00:
                raise _crash("function_clause")
            code, pos = _descriptor(payload, pos + 1)
            if code in _BODY:
                s.body_at = start
                s.body_code = code
                break
            value, pos = types.decode(payload, pos)
            kind, v = value
            if code == HEADER:
                if kind != "list" or len(v) > 5:
                    raise _crash("function_clause")
                s.header = v
            elif code in (DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS):
                if kind != "map":
                    raise _crash("function_clause")
                checked = _annotations(v)
                if code == MESSAGE_ANNOTATIONS:
                    s.annotations = checked
                    s.annotations_raw = payload[start:pos]
            elif code == PROPERTIES:
                if kind != "list" or len(v) > 13 or s.bare_at >= 0:
                    raise _crash("function_clause" if kind == "list" else "badarg")
                s.properties = v
                s.bare_at = start
            elif code == APPLICATION_PROPERTIES:
                if kind != "map":
                    raise _crash("function_clause")
                s.application = v
                if s.bare_at < 0:
                    s.bare_at = start
            else:  # a footer before the body, or a section RabbitMQ does not know
                raise _crash("function_clause")
    except types.DecodeError as exc:
        raise _crash(f"{{badmatch,{exc}}}") from None
    except (IndexError, struct.error):
        raise _crash("function_clause") from None
    if s.bare_at < 0:
        s.bare_at = s.body_at
    return s


def _descriptor(payload: bytes, pos: int) -> tuple[int, int]:
    """A section's descriptor code (a ulong, or a symbolic name) and where its value
    starts."""
    code = payload[pos]
    if code == 0x53:
        return payload[pos + 1], pos + 2
    value, after = types.decode(payload, pos)
    kind, v = value
    if kind == "ulong":
        return int(v), after
    if kind == "symbol" and v in _NAMES:
        return _NAMES[v], after
    raise _crash("function_clause")


def _annotations(pairs: list[tuple[Value, Value]]) -> list[tuple[str, Value]]:
    """amqp10_framing:decode_annotations: every key an ``x-`` symbol."""
    out = []
    for key, value in pairs:
        if key[0] != "symbol" or not key[1].startswith("x-"):
            raise _crash(f"{{reserved_annotation_key,{av.term(key)}}}")
        out.append((key[1], value))
    return out


# ------------------------------------------------------------ the 0-9-1 view
def _convert(payload: bytes, s: Sections) -> Parsed:
    header, annotations, props, app = s.header, s.annotations, s.properties, s.application
    ma: dict[str, Value] = {}
    for key, value in annotations:
        ma.setdefault(key, value)  # amqp10_map_get: the first of equal keys
    hdr = header or []
    durable = _field(hdr, 0)
    priority = _field(hdr, 1)
    ttl = _field(hdr, 2)
    delivery_mode = None
    if durable is not None and durable[0] in ("bool", "boolean"):
        delivery_mode = 2 if durable[1] else 1
    else:
        delivery_mode = _unwrap_int(ma.get("x-basic-delivery-mode"))
    prio = (
        _unwrap_int(priority) if priority is not None else _unwrap_int(ma.get("x-basic-priority"))
    )
    expiration: bytes | None = None
    if ttl is not None and isinstance(ttl[1], int) and not isinstance(ttl[1], bool):
        expiration = str(ttl[1]).encode()
    else:
        expiration = _short(ma.get("x-basic-expiration"), any_text=True)
    body, body_type = _body(payload, s.body_at, s.body_code)
    msg_type = body_type.encode() if body_type else _short(ma.get("x-basic-type"), any_text=True)

    x_headers: list[table.Field] = []
    cc: tuple[str, ...] = ()
    cc_error = None
    x_cc = ma.get("x-cc")
    if x_cc is not None:
        if x_cc[0] == "list" and all(item[0] == "string" for item in x_cc[1]):
            cc = tuple(item[1] for item in x_cc[1])
        else:
            cc_error = Amqp10Error(
                defs.INVALID_FIELD, f"bad value for 'x-cc' message-annotation: {av.term(x_cc)}"
            )
    for key, value in annotations:
        if key == "x-cc":
            encoded = av.to_091(value)
            if encoded is not None:
                x_headers.append(("CC", encoded))
            continue
        if key == "x-opt-rabbitmq-received-time" and value[0] == "timestamp":
            x_headers.append(("timestamp_in_ms", table.long(value[1])))
            continue
        if key == "x-opt-deaths":
            deaths = av.x_death_header(value)
            if deaths is not None:
                x_headers.append(("x-death", deaths))
            continue
        if av.is_as_is(value) or len(key.encode()) >= 256:
            continue
        if key.startswith("x-basic-") or key in _INTERNAL:
            continue
        encoded = av.to_091(value)
        if encoded is not None:
            x_headers.append((key, encoded))
    p = props or []
    message_id, id_header = _message_id(_field(p, 0), "x-message-id")
    correlation_id, corr_header = _message_id(_field(p, 5), "x-correlation-id")
    headers = x_headers
    if corr_header is not None:
        headers.append(corr_header)
    if id_header is not None:
        headers.append(id_header)
    for app_key, value in app:
        if app_key[0] != "string" or len(app_key[1].encode()) >= 256 or av.is_as_is(value):
            continue
        encoded = av.to_091(value)
        if encoded is not None:
            headers.append((app_key[1], encoded))
    user = _field(p, 1)
    user_id = bytes(user[1]) if user is not None and user[0] == "binary" else None
    valid_user = user_id if user_id is not None and av.utf8_text(user_id, 255) is not None else None
    creation = _field(p, 9)
    timestamp = None
    if creation is not None and isinstance(creation[1], int):  # unwrap: ms div 1000
        timestamp = creation[1]
        if creation[0] == "timestamp":
            timestamp = av.ms_to_s(timestamp)
    properties = _encode_properties(
        content_type=_short(_field(p, 6), any_text=True),
        content_encoding=_short(_field(p, 7), any_text=True),
        headers=_sorted(headers),
        delivery_mode=delivery_mode,
        priority=prio,
        correlation_id=correlation_id,
        reply_to=_reply_to(_field(p, 4)),
        expiration=expiration,
        message_id=message_id,
        timestamp=timestamp,
        msg_type=msg_type,
        user_id=valid_user,
        app_id=_short(_field(p, 10)),
    )
    to = _field(p, 2)
    subject = _field(p, 3)
    return Parsed(
        to=to[1] if to is not None and to[0] == "string" else None,
        subject=subject[1] if subject is not None and subject[0] == "string" else None,
        cc=cc,
        cc_error=cc_error,
        user_id=user_id,
        durable=delivery_mode == 2,
        properties=properties,
        body=body,
        annotations=tuple(annotations),
        annotations_raw=s.annotations_raw,
        bare=payload[s.bare_at :],
        header=(
            delivery_mode == 2,
            prio,
            int(expiration) if expiration is not None and expiration.isdigit() else None,
        ),
    )


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


def _sorted(fields: list[table.Field]) -> list[table.Field] | None:
    """Headers as RabbitMQ 4.2 sends them: sorted by key, the first of equal keys kept;
    None for none."""
    if not fields:
        return None
    ordered = sorted(fields, key=lambda f: f[0].encode())
    out = [ordered[0]]
    for f in ordered[1:]:
        if f[0] != out[-1][0]:
            out.append(f)
    return out


def _body(payload: bytes, at: int, code: int) -> tuple[bytes, str | None]:
    """The AMQP 0-9-1 body: one data section's bytes (the common case, read in place),
    several data sections concatenated (a footer left out), or, when the last body
    section is not data, the body and footer sections as encoded, typed ``amqp-1.0``."""
    n = len(payload)
    if code == DATA and payload[at + 1] == 0x53:
        tag = payload[at + 3]
        if tag == 0xA0 and at + 5 + payload[at + 4] == n:
            return payload[at + 5 :], None
        if tag == 0xB0 and at + 8 <= n and at + 8 + U32.unpack_from(payload, at + 4)[0] == n:
            return payload[at + 8 :], None
    if code != DATA:  # mc_amqp keeps the encoded body and footer as they came
        return payload[at:], AMQP10_TYPE
    try:  # decoded, and converted section by section (mc_amqpl:convert_from)
        body = [(c, v) for c, v in types.sections(payload[at:]) if c in _BODY]
    except types.DecodeError:
        return payload[at:], AMQP10_TYPE  # RabbitMQ fails on these: kept as they are
    if body and body[-1][0] == DATA:
        if all(c == DATA and v[0] == "binary" for c, v in body):
            return b"".join(v[1] for _c, v in body), None
        return payload[at:], AMQP10_TYPE  # RabbitMQ fails on these too
    return b"".join(av.section(c, v) for c, v in body), AMQP10_TYPE


# ------------------------------------------------------------ property bytes
_OCTET = struct.Struct(">B")


def _encode_properties(
    *,
    content_type: bytes | None,
    content_encoding: bytes | None,
    headers: list[table.Field] | None,
    delivery_mode: int | None,
    priority: int | None,
    correlation_id: bytes | None,
    reply_to: bytes | None,
    expiration: bytes | None,
    message_id: bytes | None,
    timestamp: int | None,
    msg_type: bytes | None,
    user_id: bytes | None,
    app_id: bytes | None,
) -> bytes:
    """Content-header property bytes (flags, then each property present, in order)."""
    flags = 0
    out: list[bytes] = []
    if content_type is not None:
        flags |= 0x8000
        out.append(bytes((len(content_type),)) + content_type)
    if content_encoding is not None:
        flags |= 0x4000
        out.append(bytes((len(content_encoding),)) + content_encoding)
    if headers is not None:
        flags |= 0x2000
        out.append(table.encode_table(headers))
    if delivery_mode is not None:
        flags |= 0x1000
        out.append(_OCTET.pack(delivery_mode))
    if priority is not None:
        flags |= 0x0800
        out.append(_OCTET.pack(priority))
    for flag, value in ((0x0400, correlation_id), (0x0200, reply_to), (0x0100, expiration)):
        if value is not None:
            flags |= flag
            out.append(bytes((len(value),)) + value)
    if message_id is not None:
        flags |= 0x0080
        out.append(bytes((len(message_id),)) + message_id)
    if timestamp is not None:
        flags |= 0x0040
        out.append(U64.pack(timestamp % 2**64))
    for flag, value in ((0x0020, msg_type), (0x0010, user_id), (0x0008, app_id)):
        if value is not None:
            flags |= flag
            out.append(bytes((len(value),)) + value)
    return flags.to_bytes(2, "big") + b"".join(out)
