"""How a RabbitMQ 3.10 stream turns AMQP 0-9-1 messages into the AMQP 1.0 messages its
stream protocol delivers (rabbit_msg_record), as measured on RabbitMQ 3.10.8:

- message annotations: ``x-routing-key``, ``x-exchange``, then ``x-basic-priority``,
  ``x-basic-delivery-mode`` (ubyte) and ``x-basic-expiration`` when set;
- properties (only when one of them is set): message-id, user-id (binary), reply-to,
  correlation-id, content-type and content-encoding (symbols), creation-time (the
  timestamp, in ms), the other fields null;
- application properties: ``x-basic-type``, ``x-basic-app-id``, then the headers;
- one data section, the body.

The way back to AMQP 0-9-1 is in :mod:`stream_amqp091`."""

from __future__ import annotations

import datetime
import struct
from typing import Any

from pamqp import commands

from leveret.protocol import properties as props091
from leveret.protocol.binary import I8 as _I8
from leveret.protocol.binary import I32 as _I32
from leveret.protocol.binary import I64 as _I64
from leveret.protocol.binary import U32 as _U32
from leveret.protocol.binary import U64 as _U64
from leveret.protocol.stream import amqp10
from leveret.protocol.stream.amqp10 import Value


def _str(v: str) -> Value:
    return ("string", v)


def _sym(v: str) -> Value:
    return ("symbol", v)


def _header_value(v: Any) -> Value | None:
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v) if -(2**31) <= v < 2**31 else ("long", v)
    if isinstance(v, float):
        return ("double", v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, (bytes, bytearray)):
        return ("binary", bytes(v))
    if isinstance(v, datetime.datetime):
        return ("timestamp", int(v.timestamp() * 1000))
    if v is None:
        return ("null", None)
    return None  # tables and arrays have no place in application properties


# Everything of a converted message but its data section depends on the exchange, the
# routing key and the property bytes only: publishers repeat them, so the sections before
# the body are kept by those (bounded; cleared when full). The way back is in
# stream_amqp091.
_CACHE_SIZE = 4096
_PREFIXES: dict[tuple[str, str, bytes], bytes] = {}
_EMPTY_DATA = b"\x00Su\xa0\x00"


def to_amqp10(exchange: str, routing_key: str, properties: bytes, body: bytes) -> bytes:
    """An AMQP 0-9-1 message as RabbitMQ 3.10 stores it in a stream (AMQP 1.0), spliced
    from the property bytes."""
    key = (exchange, routing_key, bytes(properties))
    prefix = _PREFIXES.get(key)
    if prefix is None:
        prefix = _convert(exchange, routing_key, key[2], b"")[: -len(_EMPTY_DATA)]
        if len(_PREFIXES) >= _CACHE_SIZE:
            _PREFIXES.clear()
        _PREFIXES[key] = prefix
    n = len(body)
    if n < 256:
        return b"".join((prefix, b"\x00Su\xa0", bytes((n,)), body))
    return b"".join((prefix, b"\x00Su\xb0", _U32.pack(n), body))


def _convert(exchange: str, routing_key: str, properties: bytes, body: bytes) -> bytes:
    try:
        return _splice(exchange.encode(), routing_key.encode(), properties, body)
    except (_Unusual, IndexError, struct.error):
        return _to_amqp10_decoded(exchange, routing_key, properties, body)


class _Unusual(Exception):
    """Property bytes the splicer leaves to the general conversion."""


def _vbin(code8: int, raw: bytes) -> bytes:
    n = len(raw)
    if n < 256:
        return bytes((code8, n)) + raw
    return bytes((code8 | 0x10,)) + _U32.pack(n) + raw


def _compound(code8: int, count: int, parts: list[bytes]) -> bytes:
    """A list (0xC0) or map (0xC1) of already-encoded items."""
    body = b"".join(parts)
    if len(body) + 1 < 256 and count < 256:
        return bytes((code8, len(body) + 1, count)) + body
    return bytes((code8 | 0x10,)) + _LIST32.pack(len(body) + 4, count) + body


_LIST32 = struct.Struct(">II")
_SYM = {name: _vbin(0xA3, name.encode()) for name in (
    "x-routing-key", "x-exchange", "x-basic-priority", "x-basic-delivery-mode",
    "x-basic-expiration",
)}  # fmt: skip
_TYPE_KEY = _vbin(0xA1, b"x-basic-type")
_APP_ID_KEY = _vbin(0xA1, b"x-basic-app-id")
_NULL = b"\x40"
_SECTION = {code: bytes((0x00, 0x53, code)) for code in (0x72, 0x73, 0x74, 0x75)}


def _int(v: int) -> bytes:
    return b"\x54" + _I8.pack(v) if -128 <= v <= 127 else b"\x71" + _I32.pack(v)


def _long(v: int) -> bytes:
    return b"\x55" + _I8.pack(v) if -128 <= v <= 127 else b"\x81" + _I64.pack(v)


def _header(raw: bytes, pos: int) -> tuple[bytes | None, int]:
    """One AMQP 0-9-1 field value at ``pos`` as AMQP 1.0 (None: no place for it)."""
    tag = raw[pos]
    pos += 1
    if tag == 0x53:  # S
        (n,) = _U32.unpack_from(raw, pos)
        return _vbin(0xA1, raw[pos + 4 : pos + 4 + n]), pos + 4 + n
    if tag == 0x49:  # I
        return _int(_I32.unpack_from(raw, pos)[0]), pos + 4
    if tag == 0x6C:  # l
        return _long(_I64.unpack_from(raw, pos)[0]), pos + 8
    if tag == 0x74:  # t
        return (b"\x56\x01" if raw[pos] else b"\x56\x00"), pos + 1
    if tag == 0x78:  # x
        (n,) = _U32.unpack_from(raw, pos)
        return _vbin(0xA0, raw[pos + 4 : pos + 4 + n]), pos + 4 + n
    if tag == 0x54:  # T
        return b"\x83" + _I64.pack(_U64.unpack_from(raw, pos)[0] * 1000), pos + 8
    if tag == 0x56:  # V
        return _NULL, pos
    if tag in (0x46, 0x41):  # F, A: dropped, as RabbitMQ 3.10
        (n,) = _U32.unpack_from(raw, pos)
        return None, pos + 4 + n
    raise _Unusual  # b B s u i f d D: the general conversion


def _short(raw: bytes, pos: int) -> tuple[bytes, int]:
    n = raw[pos]
    return raw[pos + 1 : pos + 1 + n], pos + 1 + n


def _splice(exchange: bytes, key: bytes, raw: bytes, body: bytes) -> bytes:
    flags = raw[0] << 8 | raw[1]
    if flags & 0x0005:  # continuation flags, or a cluster-id
        raise _Unusual
    pos = 2
    content_type = content_encoding = correlation_id = reply_to = expiration = None
    message_id = message_type = user_id = app_id = None
    timestamp: int | None = None
    headers: list[bytes] = []
    pairs = 0
    annotations = [
        _SYM["x-routing-key"],
        _vbin(0xA1, key),
        _SYM["x-exchange"],
        _vbin(0xA1, exchange),
    ]
    if flags & 0x8000:
        content_type, pos = _short(raw, pos)
    if flags & 0x4000:
        content_encoding, pos = _short(raw, pos)
    if flags & 0x2000:
        (n,) = _U32.unpack_from(raw, pos)
        end = pos + 4 + n
        pos += 4
        while pos < end:
            name, pos = _short(raw, pos)
            value, pos = _header(raw, pos)
            if value is not None:
                headers += (_vbin(0xA1, name), value)
                pairs += 1
        if pos != end:
            raise _Unusual
    if flags & 0x1000:
        delivery_mode = raw[pos]
        pos += 1
    if flags & 0x0800:
        annotations += (_SYM["x-basic-priority"], b"\x50" + bytes((raw[pos],)))
        pos += 1
    if flags & 0x1000:
        annotations += (_SYM["x-basic-delivery-mode"], b"\x50" + bytes((delivery_mode,)))
    if flags & 0x0400:
        correlation_id, pos = _short(raw, pos)
    if flags & 0x0200:
        reply_to, pos = _short(raw, pos)
    if flags & 0x0100:
        expiration, pos = _short(raw, pos)
        if expiration:
            annotations += (_SYM["x-basic-expiration"], _vbin(0xA1, expiration))
    if flags & 0x0080:
        message_id, pos = _short(raw, pos)
    if flags & 0x0040:
        (timestamp,) = _U64.unpack_from(raw, pos)
        pos += 8
    if flags & 0x0020:
        message_type, pos = _short(raw, pos)
    if flags & 0x0010:
        user_id, pos = _short(raw, pos)
    if flags & 0x0008:
        app_id, pos = _short(raw, pos)
    if pos != len(raw):
        raise _Unusual
    out = [_SECTION[0x72], _compound(0xC1, len(annotations), annotations)]
    fields = (
        _vbin(0xA1, message_id) if message_id else _NULL,
        _vbin(0xA0, user_id) if user_id else _NULL,
        _NULL,
        _NULL,
        _vbin(0xA1, reply_to) if reply_to else _NULL,
        _vbin(0xA1, correlation_id) if correlation_id else _NULL,
        _vbin(0xA3, content_type) if content_type else _NULL,
        _vbin(0xA3, content_encoding) if content_encoding else _NULL,
        _NULL,
        b"\x83" + _I64.pack(timestamp * 1000) if timestamp is not None else _NULL,
        _NULL,
        _NULL,
        _NULL,
    )
    if any(f is not _NULL for f in fields):
        out += (_SECTION[0x73], _compound(0xC0, 13, list(fields)))
    app: list[bytes] = []
    if message_type:
        app += (_TYPE_KEY, _vbin(0xA1, message_type))
    if app_id:
        app += (_APP_ID_KEY, _vbin(0xA1, app_id))
    app += headers
    if app:
        out += (_SECTION[0x74], _compound(0xC1, len(app), app))
    out += (_SECTION[0x75], _vbin(0xA0, body))
    return b"".join(out)


def _to_amqp10_decoded(exchange: str, routing_key: str, properties: bytes, body: bytes) -> bytes:
    """The general conversion, through decoded properties."""
    try:
        p = props091.decode(properties)
    except ValueError:
        p = commands.Basic.Properties()
    annotations: list[tuple[Value, Value]] = [
        (_sym("x-routing-key"), _str(routing_key)),
        (_sym("x-exchange"), _str(exchange)),
    ]
    if p.priority is not None:
        annotations.append((_sym("x-basic-priority"), ("ubyte", p.priority)))
    if p.delivery_mode is not None:
        annotations.append((_sym("x-basic-delivery-mode"), ("ubyte", p.delivery_mode)))
    if p.expiration:
        annotations.append((_sym("x-basic-expiration"), _str(p.expiration)))
    out = [amqp10.section(amqp10.MESSAGE_ANNOTATIONS, ("map", annotations))]
    null: Value = ("null", None)
    stamp = p.timestamp
    fields: list[Value] = [
        _str(p.message_id) if p.message_id else null,
        ("binary", p.user_id.encode()) if p.user_id else null,
        null,
        null,
        _str(p.reply_to) if p.reply_to else null,
        _str(p.correlation_id) if p.correlation_id else null,
        _sym(p.content_type) if p.content_type else null,
        _sym(p.content_encoding) if p.content_encoding else null,
        null,
        (
            ("timestamp", int(stamp.timestamp()) * 1000 if hasattr(stamp, "timestamp") else 0)
            if stamp is not None
            else null
        ),
        null,
        null,
        null,
    ]
    if any(f is not null for f in fields):
        out.append(amqp10.section(amqp10.PROPERTIES, ("list", fields)))
    app: list[tuple[Value, Value]] = []
    if p.message_type:
        app.append((_str("x-basic-type"), _str(p.message_type)))
    if p.app_id:
        app.append((_str("x-basic-app-id"), _str(p.app_id)))
    for k, v in (p.headers or {}).items():
        value = _header_value(v)
        if value is not None:
            app.append((_str(k), value))
    if app:
        out.append(amqp10.section(amqp10.APPLICATION_PROPERTIES, ("map", app)))
    out.append(amqp10.section(amqp10.DATA, ("binary", body)))
    return b"".join(out)
