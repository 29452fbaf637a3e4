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

:func:`delivery` with its defaults is also what RabbitMQ 4.2 writes into a stream for a
message (rabbit_stream_queue:stream_message); this broker's streams keep RabbitMQ 3.10's
format (``queues/stream_amqp10``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leveret.broker import amqp10_values as av
from leveret.broker.amqp10_from091 import (
    Annotation,
    Props091,
    body_sections,
    data_section,
    headers_view,
    properties_section,
)
from leveret.broker.amqp10_message import (
    AMQP10_TYPE,
    DATA,
    Amqp10Error,
    Amqp10Message,
    read_sections,
)
from leveret.broker.amqp10_sections import remember
from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.amqp10 import definitions as defs
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from leveret.protocol.binary import I64

_MA = b"\x00\x53\x72"
_SYM = {name: av.symbol(name) for name in (
    "x-exchange", "x-routing-key", "x-opt-deaths", "x-basic-type", "x-cc",
    "x-opt-rabbitmq-received-time", "x-delivery-count", "x-stream-offset",
)}  # fmt: skip


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
        remember(_HEADERS, key, got)
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
    first = not redelivered and count == 0
    if m.properties is m.born:
        durable, priority, ttl = m.born_header
        head = _header(durable, priority, ttl, first, count)
        if not annotations:
            key = (m.annotations_raw, m.exchange_and_key)
            section = _FIRST_MA.get(key)
            if section is None:
                ma = list(_kept(m))
                _rabbit_annotations(ma, m, None, None)
                section = _annotations_section(ma)
                remember(_FIRST_MA, key, section)
            return b"".join((head, section, m.bare))
        ma = list(_kept(m))
        _rabbit_annotations(ma, m, None, annotations)
        return b"".join((head, _annotations_section(ma), m.bare))
    # the broker changed its properties: dead-lettering, interceptors, a queue's count
    p = Props091(m.properties)
    ma = list(_kept(m))
    deaths = None
    extra: dict[str, Any] = {}
    born = dict(table.headers(m.born) or [])
    now = table.parse_table(p.headers_raw)[0] if p.headers_raw is not None else []
    for name, value in now:
        if born.get(name) == value:
            continue
        if name == "x-death":
            deaths = av.deaths_annotation(value)
        elif name == "timestamp_in_ms" and value[:1] == b"l":
            extra[name] = I64.unpack_from(value, 1)[0]
        elif name.startswith("x-"):
            converted = av.from_091(value)
            if converted is not None:
                extra[name] = _simple(converted)
    if annotations:
        extra.update(annotations)
    _rabbit_annotations(ma, m, deaths, extra)
    head = _header(p.delivery_mode == 2, p.priority, p.ttl, first and deaths is None, count)
    return b"".join((head, _annotations_section(ma), m.bare))


def _kept(m: Amqp10Message) -> list[Annotation]:
    """The message's own annotations, encoded."""
    raw = m.annotations_raw
    kept = _AMQP10_MA.get(raw)
    if kept is None:
        kept = [(k, av.encode(v)) for k, v in m.annotations]
        remember(_AMQP10_MA, raw, kept)
    return kept


def _simple(value: Value) -> Any:
    """A header's AMQP 1.0 value as the annotation RabbitMQ would hold for it: text,
    integers and booleans unwrapped (mc_util:infer_type gives them back)."""
    kind, v = value
    if kind in ("string", "long", "boolean"):
        return v
    return value


# ------------------------------------------------ published over AMQP 0-9-1
_FIRST091: dict[tuple[bytes, bytes], bytes] = {}  # whole property bytes that repeat
_MA091: dict[tuple[bytes, bytes | None, bytes | None], bytes] = {}


def _from_amqp091(
    m: Message, redelivered: bool, count: int, annotations: Mapping[str, Any] | None
) -> bytes:
    plain = not redelivered and count == 0 and not annotations
    if plain:
        prefix = _FIRST091.get((m.exchange_and_key, m.properties))
        if prefix is not None:
            return prefix + data_section(m.body)
    p = Props091(m.properties)
    view = headers_view(p.headers_raw, p.type)
    first = not redelivered and count == 0 and view.deaths is None
    head = _header(p.delivery_mode == 2, p.priority, p.ttl, first, count)
    if plain and view.deaths is None:
        key = (m.exchange_and_key, p.headers_raw, p.type)
        section = _MA091.get(key)
        if section is None:
            ma = list(view.annotations)
            _rabbit_annotations(ma, m, None, None)
            section = _annotations_section(ma)
            remember(_MA091, key, section)
    else:
        ma = list(view.annotations)
        _rabbit_annotations(ma, m, view.deaths, annotations)
        section = _annotations_section(ma)
    prefix = b"".join((head, section, properties_section(p), view.application))
    repeats = p.message_id is None and p.timestamp is None and p.type != b"amqp-1.0"
    if plain and view.deaths is None and repeats:  # (amqp-1.0: its body is sections)
        remember(_FIRST091, (m.exchange_and_key, m.properties), prefix)
    return prefix + body_sections(p, m.body)


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
