"""The AMQP 1.0 type system, as far as stream messages need it: a message is a sequence
of described sections (header 0x70, delivery annotations 0x71, message annotations 0x72,
properties 0x73, application properties 0x74, data 0x75, amqp-sequence 0x76, amqp-value
0x77, footer 0x78).

Values decode to ``(type name, value)`` pairs so that an encoder can give them back with
the same type: ``null bool ubyte ushort uint ulong byte short int long float double
timestamp uuid binary string symbol list map array described``. Encoding picks the most
compact form, as RabbitMQ's encoder does."""

from __future__ import annotations

import struct
from typing import Any

Value = tuple[str, Any]

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

_FIXED: dict[int, tuple[str, struct.Struct]] = {
    0x50: ("ubyte", struct.Struct(">B")),
    0x60: ("ushort", struct.Struct(">H")),
    0x70: ("uint", struct.Struct(">I")),
    0x52: ("uint", struct.Struct(">B")),
    0x80: ("ulong", struct.Struct(">Q")),
    0x53: ("ulong", struct.Struct(">B")),
    0x51: ("byte", struct.Struct(">b")),
    0x61: ("short", struct.Struct(">h")),
    0x71: ("int", struct.Struct(">i")),
    0x54: ("int", struct.Struct(">b")),
    0x81: ("long", struct.Struct(">q")),
    0x55: ("long", struct.Struct(">b")),
    0x72: ("float", struct.Struct(">f")),
    0x82: ("double", struct.Struct(">d")),
    0x83: ("timestamp", struct.Struct(">q")),
    0x73: ("char", struct.Struct(">I")),
}
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")


class DecodeError(ValueError):
    pass


def decode(data: bytes | memoryview, pos: int = 0) -> tuple[Value, int]:
    """One value at ``pos``; returns it and the position after it."""
    try:
        return _decode(data, pos)
    except (IndexError, struct.error) as exc:
        raise DecodeError("truncated AMQP 1.0 value") from exc


def value_end(data: bytes, pos: int) -> int:
    """Where the value at ``pos`` ends, read from its constructor and size alone: lists,
    maps, binaries, strings and symbols by their size, null and the empty list; -1 for
    any other value (the fast readers of sections decode those). No check that what the
    size spans is well formed."""
    c = data[pos]
    if c == 0xC0 or c == 0xC1 or c == 0xA0 or c == 0xA1 or c == 0xA3:
        return pos + 2 + data[pos + 1]
    if c == 0xD0 or c == 0xD1 or c == 0xB0 or c == 0xB1 or c == 0xB3:
        return pos + 5 + int(_U32.unpack_from(data, pos + 1)[0])
    if c == 0x40 or c == 0x45:
        return pos + 1
    return -1


def _decode(data: bytes | memoryview, pos: int) -> tuple[Value, int]:
    code = data[pos]
    pos += 1
    if code == 0x00:
        descriptor, pos = _decode(data, pos)
        value, pos = _decode(data, pos)
        return ("described", (descriptor, value)), pos
    if code == 0x40:
        return ("null", None), pos
    if code in (0x41, 0x42):
        return ("bool", code == 0x41), pos
    if code == 0x56:
        return ("bool", data[pos] != 0), pos + 1
    if code in (0x43, 0x44):
        return ("uint" if code == 0x43 else "ulong", 0), pos
    if code == 0x45:
        return ("list", []), pos
    fixed = _FIXED.get(code)
    if fixed is not None:
        name, s = fixed
        (v,) = s.unpack_from(data, pos)
        return (name, v), pos + s.size
    if code == 0x98:
        return ("uuid", bytes(data[pos : pos + 16])), pos + 16
    if code in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
        if code & 0x10:
            (n,) = _U32.unpack_from(data, pos)
            pos += 4
        else:
            n = data[pos]
            pos += 1
        raw = bytes(data[pos : pos + n])
        if len(raw) != n:
            raise DecodeError("truncated AMQP 1.0 value")
        pos += n
        if code in (0xA0, 0xB0):
            return ("binary", raw), pos
        return ("string" if code in (0xA1, 0xB1) else "symbol", raw.decode()), pos
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code & 0x10:
            _size, count = struct.unpack_from(">II", data, pos)
            pos += 8
        else:
            count = data[pos + 1]
            pos += 2
        items = []
        for _ in range(count):
            item, pos = _decode(data, pos)
            items.append(item)
        if code in (0xC0, 0xD0):
            return ("list", items), pos
        return ("map", list(zip(items[::2], items[1::2], strict=True))), pos
    if code in (0xE0, 0xF0):
        if code == 0xF0:
            _size, count = struct.unpack_from(">II", data, pos)
            pos += 8
        else:
            count = data[pos + 1]
            pos += 2
        element = data[pos]
        items = []
        for _ in range(count):
            item, pos2 = _decode(bytes((element,)) + bytes(data[pos + 1 :]), 0)
            items.append(item)
            pos += pos2 - 1
        return ("array", items), pos + 1 if count == 0 else pos
    raise DecodeError(f"unknown AMQP 1.0 type code {code:#x}")


def encode(value: Value) -> bytes:
    kind = value[0]
    v: Any = value[1]
    if kind == "null" or v is None:
        return b"\x40"
    if kind == "bool":
        return b"\x56\x01" if v else b"\x56\x00"
    if kind == "string" or kind == "symbol" or kind == "binary":
        raw: bytes = bytes(v) if kind == "binary" else v.encode()
        small = {"binary": 0xA0, "string": 0xA1, "symbol": 0xA3}[kind]
        if len(raw) < 256:
            return bytes((small, len(raw))) + raw
        return bytes((small | 0x10,)) + _U32.pack(len(raw)) + raw
    if kind in ("int", "long") and -128 <= v <= 127:
        return bytes((0x54 if kind == "int" else 0x55,)) + struct.pack(">b", v)
    if kind in ("uint", "ulong") and 0 <= v <= 255:
        if v == 0:
            return b"\x43" if kind == "uint" else b"\x44"
        return bytes((0x52 if kind == "uint" else 0x53,)) + _U8.pack(v)
    for code, (name, s) in _FIXED.items():
        if name == kind and (s.size >= 2 or kind in ("ubyte", "byte")):
            return bytes((code,)) + s.pack(v)
    if kind == "uuid":
        return b"\x98" + bytes(v)
    if kind == "described":
        descriptor, inner = v
        return b"\x00" + encode(descriptor) + encode(inner)
    if kind in ("list", "map"):
        items = v if kind == "list" else [x for pair in v for x in pair]
        body = b"".join(encode(i) for i in items)
        if kind == "list" and not items:
            return b"\x45"
        if len(body) + 1 < 256 and len(items) < 256:
            return bytes((0xC0 if kind == "list" else 0xC1, len(body) + 1, len(items))) + body
        return (
            bytes((0xD0 if kind == "list" else 0xD1,))
            + struct.pack(">II", len(body) + 4, len(items))
            + body
        )
    raise ValueError(f"cannot encode AMQP 1.0 {kind}")


def section(code: int, value: Value) -> bytes:
    """A described section: ``0x00 0x53 code`` and its value."""
    return bytes((0x00, 0x53, code)) + encode(value)


def sections(message: bytes | memoryview) -> list[tuple[int, Value]]:
    """A message's sections in order, as (descriptor code, value)."""
    out = []
    pos = 0
    n = len(message)
    while pos < n:
        value, pos = decode(message, pos)
        if value[0] != "described":
            raise DecodeError("a message section is not described")
        descriptor, inner = value[1]
        if descriptor[0] not in ("ulong", "uint"):
            raise DecodeError("a section descriptor that is not a number")
        out.append((int(descriptor[1]), inner))
    return out
