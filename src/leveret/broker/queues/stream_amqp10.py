"""How a RabbitMQ 3.10 stream turns AMQP 0-9-1 messages into the AMQP 1.0 messages its
stream protocol delivers, and back (rabbit_msg_record), as measured on RabbitMQ 3.10.8:

- message annotations: ``x-routing-key``, ``x-exchange``, then ``x-basic-priority``,
  ``x-basic-delivery-mode`` (ubyte) and ``x-basic-expiration`` when set;
- properties (only when one of them is set): message-id, user-id (binary), reply-to,
  correlation-id, content-type and content-encoding (symbols), creation-time (the
  timestamp, in ms), the other fields null;
- application properties: ``x-basic-type``, ``x-basic-app-id``, then the headers;
- one data section, the body.

Back to AMQP 0-9-1, a message published over the stream protocol has exchange ``""`` and
the stream's name as routing key unless its annotations say otherwise; subject and
group-id have no place and are dropped."""

from __future__ import annotations

import base64
import datetime
import struct
from typing import Any

from pamqp import commands

from leveret.protocol import properties as props091
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
# the body are kept by those (bounded; cleared when full), both ways.
_CACHE_SIZE = 4096
_PREFIXES: dict[tuple[str, str, bytes], bytes] = {}
_BACK: dict[tuple[bytes, str], tuple[bytes, bytes]] = {}
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


_U32 = struct.Struct(">I")
_LIST32 = struct.Struct(">II")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
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


# AMQP 1.0 application-property types and the AMQP 0-9-1 field types RabbitMQ 3.10 gives
# them back as (rabbit_msg_record:to_091): every type keeps its width and sign.
_TO_091: dict[str, Any] = {
    "string": lambda v: b"S" + _U32.pack(len(v.encode())) + v.encode(),
    "long": lambda v: b"l" + _I64.pack(v),
    "byte": lambda v: b"b" + _I8.pack(v),
    "ubyte": lambda v: b"B" + bytes((v,)),
    "short": lambda v: b"s" + _I16.pack(v),
    "ushort": lambda v: b"u" + _U16.pack(v),
    "uint": lambda v: b"i" + _U32.pack(v),
    "int": lambda v: b"I" + _I32.pack(v),
    "double": lambda v: b"d" + _F64.pack(v),
    "float": lambda v: b"f" + _F32.pack(v),
    "timestamp": lambda v: b"T" + _U64.pack(_ms_to_s(v) & 0xFFFFFFFFFFFFFFFF),
    "binary": lambda v: b"x" + _U32.pack(len(v)) + v,
    "bool": lambda v: b"t\x01" if v else b"t\x00",
    "null": lambda v: b"V",
}


def _ms_to_s(ms: int) -> int:
    """Erlang's ``div``: truncated toward zero."""
    return ms // 1000 if ms >= 0 else -((-ms) // 1000)


def _short091(v: str | bytes) -> bytes:
    raw = (v.encode() if isinstance(v, str) else v)[:255]
    return bytes((len(raw),)) + raw


def _message_id(value: Value, type_key: str, headers: list[bytes]) -> bytes | None:
    """A message or correlation id as AMQP 0-9-1 carries it (rabbit_msg_record:
    message_id): numbers, uuids and binaries as text with a header naming their type;
    text over 256 bytes as a header instead."""
    kind, v = value
    if kind == "null":
        return None
    key = _short091(type_key)
    if kind == "ulong":
        headers.insert(0, key + b"S\x00\x00\x00\x05ulong")
        return str(v).encode()
    if kind == "uuid":
        headers.insert(0, key + b"S\x00\x00\x00\x04uuid")
        h = bytes(v).hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode()
    if kind == "binary":
        encoded = base64.b64encode(v)
        if len(encoded) > 256:
            headers.insert(0, _short091(type_key[:-5]) + b"x" + _U32.pack(len(v)) + v)
            return None
        headers.insert(0, key + b"S\x00\x00\x00\x06binary")
        return encoded
    if kind in ("string", "symbol"):
        raw: bytes = v.encode()
        if len(raw) > 256:
            headers.insert(0, _short091(type_key[:-5]) + b"S" + _U32.pack(len(raw)) + raw)
            return None
        return raw
    return str(v).encode()


def to_amqp091(message: bytes, stream: str) -> tuple[bytes, bytes, bytes]:
    """A stored AMQP 1.0 message as RabbitMQ 3.10 delivers it over AMQP 0-9-1 (see
    :func:`_to_amqp091`): the exchange and key as short strings, the property bytes and the
    body. A message that ends with its one data section is converted by the sections
    before it, which are mostly the same from message to message."""
    at = message.rfind(b"\x00Su")
    end = len(message)
    if at >= 0 and at + 5 <= end:
        code = message[at + 3]
        if code == 0xA0 and message[at + 4] == end - at - 5:
            body = message[at + 5 :]
        elif (
            code == 0xB0 and at + 8 <= end and _U32.unpack_from(message, at + 4)[0] == end - at - 8
        ):
            body = message[at + 8 :]
        else:
            return _to_amqp091(message, stream)
        key = (message[:at], stream)
        hit = _BACK.get(key)
        if hit is None:
            try:
                # the sections before it must end where it starts: a body that ends with
                # the bytes of a data section ("\x00Su\xa0\x00") is found by rfind first,
                # inside the real one, whose header the prefix then cuts short
                for _ in amqp10.sections(key[0]):
                    pass
                exchange_and_key, properties, _ = _to_amqp091(key[0] + _EMPTY_DATA, stream)
            except ValueError:  # the last "data section" was not one
                return _to_amqp091(message, stream)
            hit = (exchange_and_key, properties)
            if len(_BACK) >= _CACHE_SIZE:
                _BACK.clear()
            _BACK[key] = hit
        return hit[0], hit[1], body
    return _to_amqp091(message, stream)


def _to_amqp091(message: bytes, stream: str) -> tuple[bytes, bytes, bytes]:
    """A stored AMQP 1.0 message as RabbitMQ 3.10 delivers it from a stream over AMQP
    0-9-1 (rabbit_stream_queue:binary_to_msg, rabbit_msg_record:to_amqp091): the exchange
    and routing key as short strings, the content-header property bytes, the body.

    The exchange and routing key come from the ``x-exchange`` and ``x-routing-key``
    annotations (``""`` and the stream's name without them), priority, delivery mode and
    expiration from ``x-basic-*`` annotations, type and app-id from ``x-basic-*``
    application properties; the other application properties are the headers, each
    with the AMQP 0-9-1 type of its AMQP 1.0 type. Raises ValueError for bytes that are
    not an AMQP 1.0 message."""
    exchange = b""
    key = stream.encode()
    annotations: dict[str, Any] = {}
    fields: list[Value] = []
    app: list[tuple[Value, Value]] = []
    body = b""
    for code, value in amqp10.sections(message):
        if code == amqp10.MESSAGE_ANNOTATIONS and value[0] == "map":
            for k, v in value[1]:
                name = k[1]
                if name not in annotations:
                    annotations[name] = v
        elif code == amqp10.PROPERTIES and value[0] == "list":
            fields = list(value[1])
        elif code == amqp10.APPLICATION_PROPERTIES and value[0] == "map":
            app = list(value[1])
        elif code == amqp10.DATA and value[0] == "binary":
            body = value[1]  # as RabbitMQ: the last data section
        elif code == amqp10.AMQP_VALUE and value[0] in ("binary", "string"):
            v = value[1]
            body = v if isinstance(v, bytes) else v.encode()
    ex = annotations.get("x-exchange")
    if ex is not None and ex[0] in ("string", "symbol"):
        exchange = ex[1].encode()
    rk = annotations.get("x-routing-key")
    if rk is not None and rk[0] in ("string", "symbol"):
        key = rk[1].encode()
    basic_type = app_id = None
    headers: list[bytes] = []
    for k, v in app:
        name = str(k[1])
        if name == "x-basic-type" and basic_type is None:
            basic_type = v[1]
            continue
        if name == "x-basic-app-id" and app_id is None:
            app_id = v[1]
            continue
        encode = _TO_091.get(v[0])
        if encode is not None:
            headers.append(_short091(name) + encode(v[1]))
    f = fields + [("null", None)] * (13 - len(fields))
    message_id = _message_id(f[0], "x-message-id-type", headers)
    correlation_id = _message_id(f[5], "x-correlation-id-type", headers)
    flags = 0
    out: list[bytes] = []

    def short(bit: int, value: Any) -> None:
        nonlocal flags
        if value is not None:
            flags |= bit
            out.append(_short091(value if isinstance(value, (str, bytes)) else str(value)))

    def octet(bit: int, value: Value | None) -> None:
        nonlocal flags
        if value is not None and isinstance(value[1], int):
            flags |= bit
            out.append(bytes((value[1] & 0xFF,)))

    short(0x8000, f[6][1])  # content-type
    short(0x4000, f[7][1])  # content-encoding
    if headers:
        flags |= 0x2000
        table = b"".join(headers)
        out.append(_U32.pack(len(table)) + table)
    octet(0x1000, annotations.get("x-basic-delivery-mode"))
    octet(0x0800, annotations.get("x-basic-priority"))
    short(0x0400, correlation_id)
    short(0x0200, f[4][1])  # reply-to
    expiration = annotations.get("x-basic-expiration")
    short(0x0100, expiration[1] if expiration is not None else None)
    short(0x0080, message_id)
    if f[9][0] == "timestamp":
        flags |= 0x0040
        out.append(_U64.pack(_ms_to_s(f[9][1]) & 0xFFFFFFFFFFFFFFFF))
    short(0x0020, basic_type)
    short(0x0010, f[1][1])  # user-id
    short(0x0008, app_id)
    properties = flags.to_bytes(2, "big") + b"".join(out)
    exchange, key = exchange[:255], key[:255]
    return bytes((len(exchange),)) + exchange + bytes((len(key),)) + key, properties, body
