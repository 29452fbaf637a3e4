"""A message a RabbitMQ 3.10 stream holds (AMQP 1.0, see :mod:`stream_amqp10`) as it
delivers it over AMQP 0-9-1 (rabbit_stream_queue:binary_to_msg,
rabbit_msg_record:to_amqp091), as measured on RabbitMQ 3.10.8.

A message published over the stream protocol has exchange ``""`` and the stream's name as
routing key unless its annotations say otherwise; subject and group-id have no place and
are dropped.

:func:`_to_amqp091` is the general conversion, through decoded sections. :func:`to_amqp091`
gives the same bytes at a cost that does not depend on messages repeating: the sections
other than the properties and the data (annotations, application properties, which
publishers repeat) are converted once for each distinct bytes and kept; the properties
list, whose message-id, correlation-id and timestamp differ from message to message, is
read in place; the AMQP 0-9-1 property fields are merged in flag order. What it does not
expect goes to the general conversion."""

from __future__ import annotations

import base64
import struct
from typing import Any

from leveret.protocol.binary import I8 as _I8
from leveret.protocol.binary import I16 as _I16
from leveret.protocol.binary import I32 as _I32
from leveret.protocol.binary import I64 as _I64
from leveret.protocol.binary import U16 as _U16
from leveret.protocol.binary import U32 as _U32
from leveret.protocol.binary import U64 as _U64
from leveret.protocol.spec import add_header
from leveret.protocol.stream import amqp10
from leveret.protocol.stream.amqp10 import Value

_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")


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


# The kept conversions of the sections other than the properties and the data, by their
# bytes and the stream (bounded; cleared when full): the exchange and key, the property
# flags they set, the headers table, the delivery-mode and priority octets, and the
# expiration, type and app-id short strings; None for sections the general conversion
# must see.
_Kept = tuple[bytes, int, bytes, bytes, bytes, bytes, bytes]
_CACHE_SIZE = 4096
_KEPT: dict[tuple[bytes, str], _Kept | None] = {}
_MISSING: Any = object()
_OFFSET_KEY = b"\x0fx-stream-offsetl"
_MASK64 = 0xFFFFFFFFFFFFFFFF
# The widths of the AMQP 1.0 fixed-size values (after the type code) a properties field
# may hold in a place AMQP 0-9-1 has no use for.
_WIDTH = {code: s.size for code, (_, s) in amqp10._FIXED.items()} | {
    0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x56: 1, 0x98: 16,
}  # fmt: skip
# Properties fields that become AMQP 0-9-1 short strings: message-id, user-id, reply-to,
# correlation-id, content-type, content-encoding.
_TEXT_FIELDS = frozenset((0, 1, 4, 5, 6, 7))
_NO_FIELDS: tuple[Any, ...] = (None,) * 7


def to_amqp091(
    message: bytes, stream: str, offset: int | None = None
) -> tuple[bytes, bytes, bytes]:
    """A stored AMQP 1.0 message as RabbitMQ 3.10 delivers it over AMQP 0-9-1, the same
    bytes as :func:`_to_amqp091` gives: the exchange and key as short strings, the property
    bytes and the body. With ``offset``, the properties end their headers with
    ``x-stream-offset`` (a long), as a stream's consumers get them. Raises ValueError for
    bytes that are not an AMQP 1.0 message."""
    try:
        out = _spliced(message, stream, offset)
    except (IndexError, struct.error, UnicodeDecodeError):
        out = None
    if out is not None:
        return out
    exchange_and_key, properties, body = _to_amqp091(message, stream)
    if offset is not None:
        properties = add_header(properties, "x-stream-offset", b"l" + _I64.pack(offset))
    return exchange_and_key, properties, body


def _spliced(m: bytes, stream: str, offset: int | None) -> tuple[bytes, bytes, bytes] | None:
    """:func:`to_amqp091` for a message of described sections (descriptors as small
    ulongs) of the usual types; None for the general conversion."""
    n = len(m)
    pos = 0
    kept = b""
    fields: tuple[Any, ...] | None = None
    body = b""
    while pos < n:
        if m[pos] or m[pos + 1] != 0x53:
            return None
        code = m[pos + 2]
        at = pos + 3
        if code == 0x75:  # data: the last one is the body
            c = m[at]
            if c == 0xA0:
                pos = at + 2 + m[at + 1]
                body = m[at + 2 : pos]
            elif c == 0xB0:
                pos = at + 5 + _U32.unpack_from(m, at + 1)[0]
                body = m[at + 5 : pos]
            else:
                return None
        elif code == 0x73:  # properties
            if fields is not None:
                return None
            fields, pos = _fields(m, at)
            if fields is None:
                return None
        elif code in (0x70, 0x71, 0x72, 0x74, 0x78):  # kept by their bytes
            end = amqp10.value_end(m, at)
            if end < 0:
                return None
            kept += m[pos:end]
            pos = end
        else:
            return None
    if pos != n:
        return None
    k = _KEPT.get((kept, stream), _MISSING)
    if k is _MISSING:
        k = _keep(kept, stream)
    if k is None:
        return None
    exchange_and_key, flags, table, octets, expiration, basic_type, app_id = k
    mid, user, reply, corr, ct, ce, ts = fields or _NO_FIELDS
    if (mid is not None and len(mid) > 256) or (corr is not None and len(corr) > 256):
        return None  # in a header instead
    out = []
    if ct is not None:
        flags |= 0x8000
        out.append(bytes((len(ct[:255]),)) + ct[:255])
    if ce is not None:
        flags |= 0x4000
        out.append(bytes((len(ce[:255]),)) + ce[:255])
    if offset is not None:
        table += _OFFSET_KEY + _I64.pack(offset)
    if table:
        flags |= 0x2000
        out += (_U32.pack(len(table)), table)
    out.append(octets)
    if corr is not None:
        flags |= 0x0400
        out.append(bytes((len(corr[:255]),)) + corr[:255])
    if reply is not None:
        flags |= 0x0200
        out.append(bytes((len(reply[:255]),)) + reply[:255])
    out.append(expiration)
    if mid is not None:
        flags |= 0x0080
        out.append(bytes((len(mid[:255]),)) + mid[:255])
    if ts is not None:
        flags |= 0x0040
        out.append(_U64.pack((ts // 1000 if ts >= 0 else -(-ts // 1000)) & _MASK64))
    out.append(basic_type)
    if user is not None:
        flags |= 0x0010
        out.append(bytes((len(user[:255]),)) + user[:255])
    out.append(app_id)
    return exchange_and_key, flags.to_bytes(2, "big") + b"".join(out), body


def _fields(m: bytes, at: int) -> tuple[tuple[Any, ...] | None, int]:
    """The properties list at ``at``: message-id, user-id, reply-to, correlation-id,
    content-type, content-encoding (bytes or None) and creation-time (ms or None), and
    where it ends; None for fields the general conversion must see."""
    c = m[at]
    if c == 0xC0:
        count = m[at + 2]
        pos = at + 3
    elif c == 0xD0:
        (count,) = _U32.unpack_from(m, at + 5)
        pos = at + 9
    elif c == 0x45:
        return _NO_FIELDS, at + 1
    else:
        return None, at
    if count > 13:
        return None, at
    f: list[Any] = [None] * 13
    for i in range(count):
        c = m[pos]
        if c == 0x40:
            pos += 1
            continue
        if c == 0xA1 or c == 0xA3 or c == 0xA0:
            end = pos + 2 + m[pos + 1]
            raw = m[pos + 2 : end]
        elif c == 0xB1 or c == 0xB3 or c == 0xB0:
            end = pos + 5 + _U32.unpack_from(m, pos + 1)[0]
            raw = m[pos + 5 : end]
        else:
            width = _WIDTH.get(c)
            if width is None or i in _TEXT_FIELDS:
                return None, at
            if c == 0x83 and i == 9:  # creation-time
                (f[9],) = _I64.unpack_from(m, pos + 1)
            pos += 1 + width
            continue
        if c & 0x0F:  # text: UTF-8, as the general conversion decodes it
            if not raw.isascii():
                raw.decode()
        elif i == 0 or i == 5:  # a binary id: base64 and a header
            return None, at
        if i in _TEXT_FIELDS:
            f[i] = raw
        pos = end
    return (f[0], f[1], f[4], f[5], f[6], f[7], f[9]), pos


def _keep(kept: bytes, stream: str) -> _Kept | None:
    """The conversion of the sections other than the properties and the data, each of
    which must end where its size says (as the general conversion reads them)."""
    entry: _Kept | None = None
    try:
        pos = 0
        while pos < len(kept):
            end = amqp10.value_end(kept, pos + 3)
            if amqp10.decode(kept, pos + 3)[1] != end:
                raise ValueError("a section that does not end where its size says")
            pos = end
        exchange_and_key, p, _ = _to_amqp091(kept, stream)
    except ValueError:
        pass
    else:
        flags = int.from_bytes(p[:2], "big")
        table = b""
        at = 2
        if flags & 0x2000:
            (length,) = _U32.unpack_from(p, 2)
            table = p[6 : 6 + length]
            at = 6 + length
        width = bool(flags & 0x1000) + bool(flags & 0x0800)
        octets = p[at : at + width]
        at += width
        # without a properties section, the flags are of these and the headers only
        shorts = []
        for bit in (0x0100, 0x0020, 0x0008):  # expiration, type, app-id
            raw = p[at : at + 1 + p[at]] if flags & bit else b""
            shorts.append(raw)
            at += len(raw)
        entry = (exchange_and_key, flags & ~0x2000, table, octets, shorts[0], shorts[1], shorts[2])
    if len(_KEPT) >= _CACHE_SIZE:
        _KEPT.clear()
    _KEPT[(kept, stream)] = entry
    return entry


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
