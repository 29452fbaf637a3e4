"""The AMQP 1.0 type system (OASIS AMQP 1.0 part 1): the project's one codec for it.

Two views of the same encoding:

- **Tagged** (:func:`decode`, :func:`encode`): a value is a ``(type name, value)`` pair, so
  an encoder gives it back with the same type: ``null bool ubyte ushort uint ulong byte
  short int long float double decimal32 decimal64 decimal128 char timestamp uuid binary
  string symbol list map array described``. Stream messages (osiris chunks) and every
  message section use it: a message read and written again keeps its types.
- **Plain** (:func:`decode_plain`, :func:`encode_plain`): Python values, for performatives
  and the maps they carry. Integers of every width decode to ``int``, a symbol to
  :class:`Symbol`, a described value to :class:`Described`, a timestamp to
  :class:`Timestamp`, an array to :class:`Array`; encoding picks the type from the Python
  value, and :class:`Typed` names one where Python cannot (``Typed("uint", 5)``).

Encoding picks the most compact form, as RabbitMQ's and Proton's encoders do. A malformed
or truncated value raises :class:`DecodeError`, never another exception.

A message is a sequence of described sections (header 0x70, delivery annotations 0x71,
message annotations 0x72, properties 0x73, application properties 0x74, data 0x75,
amqp-sequence 0x76, amqp-value 0x77, footer 0x78).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
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

# Fixed-width codes: type name and layout.
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
# Opaque fixed-width codes: decimals (kept as their bytes) and uuid.
_OPAQUE = {0x74: ("decimal32", 4), 0x84: ("decimal64", 8), 0x94: ("decimal128", 16)}
# Each type's widest code, for encoding (the compact forms are picked first).
_WIDE = {
    "ubyte": 0x50,
    "ushort": 0x60,
    "uint": 0x70,
    "ulong": 0x80,
    "byte": 0x51,
    "short": 0x61,
    "int": 0x71,
    "long": 0x81,
    "float": 0x72,
    "double": 0x82,
    "timestamp": 0x83,
    "char": 0x73,
}
_VARIABLE = {0xA0: "binary", 0xB0: "binary", 0xA1: "string", 0xB1: "string"}
_VARIABLE |= {0xA3: "symbol", 0xB3: "symbol"}
_SMALL_CODE = {"binary": 0xA0, "string": 0xA1, "symbol": 0xA3}
# An element type's constructor inside an array (arrays use one code for every element).
_ARRAY_CODE = {"bool": 0x56, "binary": 0xB0, "string": 0xB1, "symbol": 0xB3} | _WIDE
_ARRAY_CODE |= {"uuid": 0x98, "list": 0xD0, "map": 0xD1, "array": 0xF0, "null": 0x40}
_ARRAY_CODE |= {name: code for code, (name, _width) in _OPAQUE.items()}
_DECIMALS = frozenset(name for name, _width in _OPAQUE.values())
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_U32_2 = struct.Struct(">II")
_unpack_u32 = _U32.unpack_from
_unpack_u32_2 = _U32_2.unpack_from


class DecodeError(ValueError):
    """Bytes that are not a well-formed AMQP 1.0 value."""


# ===================================================================== tagged view
def decode(data: bytes | memoryview, pos: int = 0) -> tuple[Value, int]:
    """One value at ``pos`` as a ``(type name, value)`` pair; returns it and the position
    after it."""
    try:
        return _decode(data, pos, None)
    except (IndexError, struct.error, UnicodeDecodeError, RecursionError) as exc:
        raise DecodeError("truncated or malformed AMQP 1.0 value") from exc


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


def _decode(data: bytes | memoryview, pos: int, code: int | None) -> tuple[Value, int]:
    """One value; ``code`` is an array's element constructor (the value has none)."""
    if code is None:
        code = data[pos]
        pos += 1
    if code == 0x00:
        descriptor, pos = _decode(data, pos, None)
        value, pos = _decode(data, pos, None)
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
        raw = bytes(data[pos : pos + 16])
        if len(raw) != 16:
            raise DecodeError("truncated AMQP 1.0 value")
        return ("uuid", raw), pos + 16
    opaque = _OPAQUE.get(code)
    if opaque is not None:
        name, width = opaque
        raw = bytes(data[pos : pos + width])
        if len(raw) != width:
            raise DecodeError("truncated AMQP 1.0 value")
        return (name, raw), pos + width
    kind = _VARIABLE.get(code)
    if kind is not None:
        if code & 0x10:
            (n,) = _unpack_u32(data, pos)
            pos += 4
        else:
            n = data[pos]
            pos += 1
        raw = bytes(data[pos : pos + n])
        if len(raw) != n:
            raise DecodeError("truncated AMQP 1.0 value")
        pos += n
        if kind == "binary":
            return ("binary", raw), pos
        return (kind, raw.decode()), pos
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code & 0x10:
            _size, count = _unpack_u32_2(data, pos)
            pos += 8
        else:
            count = data[pos + 1]
            pos += 2
        if count > len(data) - pos:  # every item takes at least one byte
            raise DecodeError("truncated AMQP 1.0 value")
        items = []
        for _ in range(count):
            item, pos = _decode(data, pos, None)
            items.append(item)
        if code in (0xC0, 0xD0):
            return ("list", items), pos
        if count % 2:
            raise DecodeError("a map with an odd number of items")
        return ("map", list(zip(items[::2], items[1::2], strict=True))), pos
    if code in (0xE0, 0xF0):
        if code == 0xF0:
            _size, count = _unpack_u32_2(data, pos)
            pos += 8
        else:
            count = data[pos + 1]
            pos += 2
        element = data[pos]
        pos += 1
        array_descriptor: Value | None = None
        if element == 0x00:  # an array of described values: one descriptor for all
            array_descriptor, pos = _decode(data, pos, None)
            element = data[pos]
            pos += 1
        if element in _ZERO_WIDTH:
            # elements that take no bytes: a few bytes could claim 2**32 of them, so no
            # more than the data has bytes (a bomb refused, never expanded)
            if count > len(data):
                raise DecodeError(f"an array of {count} elements in {len(data)} bytes")
        elif count > len(data) - pos:
            raise DecodeError("truncated AMQP 1.0 value")
        items = []
        for _ in range(count):
            item, pos = _decode(data, pos, element)
            if array_descriptor is not None:
                item = ("described", (array_descriptor, item))
            items.append(item)
        return ("array", items), pos
    raise DecodeError(f"unknown AMQP 1.0 type code {code:#x}")


# Codes whose values take no bytes (an array of them may be longer than its bytes)
_ZERO_WIDTH = frozenset((0x40, 0x41, 0x42, 0x43, 0x44, 0x45))


def encode(value: Value) -> bytes:
    """A ``(type name, value)`` pair in its most compact encoding."""
    kind = value[0]
    v: Any = value[1]
    if kind == "null" or v is None:
        return b"\x40"
    if kind == "bool":
        return b"\x56\x01" if v else b"\x56\x00"
    if kind == "string" or kind == "symbol" or kind == "binary":
        raw: bytes = bytes(v) if kind == "binary" else v.encode()
        small = _SMALL_CODE[kind]
        if len(raw) < 256:
            return bytes((small, len(raw))) + raw
        return bytes((small | 0x10,)) + _U32.pack(len(raw)) + raw
    if kind in ("int", "long") and -128 <= v <= 127:
        return bytes((0x54 if kind == "int" else 0x55,)) + struct.pack(">b", v)
    if kind in ("uint", "ulong") and 0 <= v <= 255:
        if v == 0:
            return b"\x43" if kind == "uint" else b"\x44"
        return bytes((0x52 if kind == "uint" else 0x53,)) + _U8.pack(v)
    wide = _WIDE.get(kind)
    if wide is not None:
        return bytes((wide,)) + _FIXED[wide][1].pack(v)
    if kind == "uuid":
        return b"\x98" + bytes(v)
    if kind in _DECIMALS:
        return bytes((_ARRAY_CODE[kind],)) + bytes(v)
    if kind == "described":
        descriptor, inner = v
        return b"\x00" + encode(descriptor) + encode(inner)
    if kind in ("list", "map"):
        items = v if kind == "list" else [x for pair in v for x in pair]
        if kind == "list" and not items:
            return b"\x45"
        body = b"".join(encode(i) for i in items)
        return _compound(0xC0 if kind == "list" else 0xC1, body, len(items))
    if kind == "array":
        return _tagged_array(v)
    raise ValueError(f"cannot encode AMQP 1.0 {kind}")


def _compound(small: int, body: bytes, count: int) -> bytes:
    """A list (0xC0) or map (0xC1) around its encoded items, in 8 or 32-bit form."""
    if len(body) + 1 < 256 and count < 256:
        return bytes((small, len(body) + 1, count)) + body
    return bytes((small | 0x10,)) + _U32_2.pack(len(body) + 4, count) + body


def _tagged_array(items: list[Value]) -> bytes:
    if not items:
        return b"\xe0\x02\x00\x40"  # an empty array of nulls
    kind = items[0][0]
    prefix = b""
    if kind == "described":
        descriptor = items[0][1][0]
        prefix = b"\x00" + encode(descriptor)
        items = [item[1][1] for item in items]
        kind = items[0][0]
    if any(item[0] != kind for item in items):
        raise ValueError("an AMQP 1.0 array holds values of one type")
    body = b"".join(_element(kind, item[1]) for item in items)
    return _array(prefix + bytes((_ARRAY_CODE[kind],)), body, len(items))


def _element(kind: str, v: Any) -> bytes:
    """An array element: its value in the array constructor's (widest) form."""
    if kind == "null":
        return b""
    if kind == "bool":
        return b"\x01" if v else b"\x00"
    wide = _WIDE.get(kind)
    if wide is not None:
        return _FIXED[wide][1].pack(v)
    if kind == "uuid" or kind in _DECIMALS:
        return bytes(v)
    return _wide_form((kind, v))


def _wide_form(item: Value) -> bytes:
    """A variable-width value's 32-bit form without its constructor (array elements)."""
    kind, v = item
    if kind in ("binary", "string", "symbol"):
        raw = bytes(v) if kind == "binary" else v.encode()
        return _U32.pack(len(raw)) + raw
    if kind == "array":
        return _array_payload(_tagged_array(v))
    items = v if kind == "list" else [x for pair in v for x in pair]
    body = b"".join(encode(i) for i in items)
    return _U32_2.pack(len(body) + 4, len(items)) + body


def _array_payload(encoded: bytes) -> bytes:
    """An array's encoding in 32-bit form, without its 0xF0 constructor."""
    if encoded[0] == 0xF0:
        return encoded[1:]
    count = encoded[2]
    rest = encoded[3:]
    return _U32_2.pack(len(rest) + 4, count) + rest


def _array(constructor: bytes, body: bytes, count: int) -> bytes:
    size = len(constructor) + len(body) + 1
    if size < 256 and count < 256:
        return bytes((0xE0, size, count)) + constructor + body
    return b"\xf0" + _U32_2.pack(size + 3, count) + constructor + body


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


# ====================================================================== plain view
class Symbol(str):
    """An AMQP symbol (an ASCII name), as distinct from a string."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP timestamp: milliseconds since the Unix epoch."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Described:
    """A described value: a descriptor (a code or a symbolic name) and the value."""

    descriptor: int | str
    value: Any


@dataclass(frozen=True, slots=True)
class Typed:
    """A value with its AMQP type named, where the Python type does not say it
    (``Typed("uint", 5)``, ``Typed("decimal64", raw)``)."""

    kind: str
    value: Any


@dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: values of one type (``kind``, a type name as in the tagged view)."""

    kind: str
    items: tuple[Any, ...]


_Reader = Callable[[bytes, int], tuple[Any, int]]


def _fixed_reader(s: struct.Struct) -> _Reader:
    unpack = s.unpack_from
    size = s.size

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return unpack(data, pos)[0], pos + size

    return read


def _read_variable(kind: str, wide: bool) -> _Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        if wide:
            (n,) = _unpack_u32(data, pos)
            pos += 4
        else:
            n = data[pos]
            pos += 1
        end = pos + n
        if end > len(data):
            raise DecodeError("truncated AMQP 1.0 value")
        raw = data[pos:end]
        if kind == "binary":
            return raw, end
        if kind == "symbol":
            return Symbol(raw.decode("ascii")), end
        return raw.decode(), end

    return read


def _read_compound(is_map: bool, wide: bool) -> _Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        if wide:
            _size, count = _unpack_u32_2(data, pos)
            pos += 8
        else:
            count = data[pos + 1]
            pos += 2
        if count > len(data) - pos:
            raise DecodeError("truncated AMQP 1.0 value")
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            code = data[pos]
            item, pos = _READERS[code](data, pos + 1)
            append(item)
        if not is_map:
            return items, pos
        if count % 2:
            raise DecodeError("a map with an odd number of items")
        return dict(zip(items[::2], items[1::2], strict=True)), pos

    return read


def _read_array(wide: bool) -> _Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        tagged, pos = _decode(data, pos - 1, None)
        return _untag(tagged), pos

    return read


def _read_described(data: bytes, pos: int) -> tuple[Any, int]:
    descriptor, pos = _READERS[data[pos]](data, pos + 1)
    if not isinstance(descriptor, int | str) or isinstance(descriptor, bool):
        raise DecodeError("a descriptor that is neither a symbol nor a number")
    value, pos = _READERS[data[pos]](data, pos + 1)
    return Described(descriptor, value), pos


def _read_unknown(data: bytes, pos: int) -> tuple[Any, int]:
    raise DecodeError(f"unknown AMQP 1.0 type code {data[pos - 1]:#x}")


def _read_timestamp(data: bytes, pos: int) -> tuple[Any, int]:
    return Timestamp(_TIMESTAMP.unpack_from(data, pos)[0]), pos + 8


def _read_uuid(data: bytes, pos: int) -> tuple[Any, int]:
    if pos + 16 > len(data):
        raise DecodeError("truncated AMQP 1.0 value")
    return uuid.UUID(bytes=bytes(data[pos : pos + 16])), pos + 16


def _read_opaque(kind: str, width: int) -> _Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        if pos + width > len(data):
            raise DecodeError("truncated AMQP 1.0 value")
        return Typed(kind, bytes(data[pos : pos + width])), pos + width

    return read


_TIMESTAMP = struct.Struct(">q")
_READERS: list[_Reader] = [_read_unknown] * 256
for _code, (_name, _s) in _FIXED.items():
    if _name not in ("timestamp", "char"):
        _READERS[_code] = _fixed_reader(_s)
_READERS[0x83] = _read_timestamp


def _read_char(data: Any, pos: int) -> tuple[str, int]:
    """A char: a UTF-32 code point (one that is not is a decode error, not chr's)."""
    (point,) = _unpack_u32(data, pos)
    if point > 0x10FFFF:
        raise DecodeError(f"char {point:#x} is not a Unicode code point")
    return chr(point), pos + 4


_READERS[0x73] = _read_char
_READERS[0x40] = lambda data, pos: (None, pos)
_READERS[0x41] = lambda data, pos: (True, pos)
_READERS[0x42] = lambda data, pos: (False, pos)
_READERS[0x56] = lambda data, pos: (data[pos] != 0, pos + 1)
_READERS[0x43] = lambda data, pos: (0, pos)
_READERS[0x44] = lambda data, pos: (0, pos)
_READERS[0x45] = lambda data, pos: ([], pos)
_READERS[0x98] = _read_uuid
for _code, (_name, _width) in _OPAQUE.items():
    _READERS[_code] = _read_opaque(_name, _width)
for _code, _name in _VARIABLE.items():
    _READERS[_code] = _read_variable(_name, bool(_code & 0x10))
_READERS[0xC0] = _read_compound(False, False)
_READERS[0xD0] = _read_compound(False, True)
_READERS[0xC1] = _read_compound(True, False)
_READERS[0xD1] = _read_compound(True, True)
_READERS[0xE0] = _read_array(False)
_READERS[0xF0] = _read_array(True)
_READERS[0x00] = _read_described


def decode_plain(data: bytes, pos: int = 0) -> tuple[Any, int]:
    """One value at ``pos`` as a Python value; returns it and the position after it."""
    try:
        return _READERS[data[pos]](data, pos + 1)
    except DecodeError:
        raise
    except (IndexError, struct.error, UnicodeDecodeError, RecursionError, TypeError) as exc:
        # (TypeError: an unhashable map key, such as a list)
        raise DecodeError("truncated or malformed AMQP 1.0 value") from exc


def _untag(value: Value) -> Any:
    """A tagged value in the plain view."""
    kind, v = value
    if kind == "symbol":
        return Symbol(v)
    if kind == "timestamp":
        return Timestamp(v)
    if kind == "uuid":
        return uuid.UUID(bytes=v)
    if kind in ("decimal32", "decimal64", "decimal128"):
        return Typed(kind, v)
    if kind == "char":
        if not 0 <= v <= 0x10FFFF:
            raise DecodeError(f"char {v:#x} is not a Unicode code point")
        return chr(v)
    if kind == "list":
        return [_untag(item) for item in v]
    if kind == "map":
        return {_untag(k): _untag(x) for k, x in v}
    if kind == "array":
        return Array(v[0][0] if v else "null", tuple(_untag(item) for item in v))
    if kind == "described":
        descriptor, inner = v
        return Described(_untag(descriptor), _untag(inner))
    return v


def tag(value: Any) -> Value:
    """A Python value in the tagged view (the type its plain encoding picks)."""
    if value is None:
        return ("null", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, Timestamp):
        return ("timestamp", int(value))
    if isinstance(value, int):
        return ("long", value)
    if isinstance(value, float):
        return ("double", value)
    if isinstance(value, Symbol):
        return ("symbol", str(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, bytes | bytearray | memoryview):
        return ("binary", bytes(value))
    if isinstance(value, uuid.UUID):
        return ("uuid", value.bytes)
    if isinstance(value, Typed):
        if value.kind == "char":
            return ("char", ord(value.value))
        return (value.kind, value.value)
    if isinstance(value, Described):
        d = value.descriptor
        descriptor = ("ulong", int(d)) if isinstance(d, int) else ("symbol", str(d))
        return ("described", (descriptor, tag(value.value)))
    if isinstance(value, Array):
        # each item with the array's type, whatever type its Python value would pick
        return ("array", [(value.kind, tag(item)[1]) for item in value.items])
    if isinstance(value, dict):
        return ("map", [(tag(k), tag(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return ("list", [tag(item) for item in value])
    raise ValueError(f"cannot encode {type(value).__name__} as AMQP 1.0")


def encode_plain(value: Any) -> bytes:
    """A Python value in its most compact AMQP encoding: None null, bool boolean, int
    long, float double, str string, :class:`Symbol` symbol, bytes binary, UUID uuid, dict
    map, list list, and :class:`Typed`, :class:`Described`, :class:`Array`,
    :class:`Timestamp` as they say."""
    return encode(tag(value))
