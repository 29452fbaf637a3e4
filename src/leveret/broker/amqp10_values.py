"""AMQP 1.0 values as RabbitMQ 4.2's message container handles them: encoded with its
generator's choices, turned into AMQP 0-9-1 field values and back (mc_amqpl's
``to_091``/``from_091``), printed as its errors print them, and the death history
(``x-opt-deaths`` against the ``x-death`` header).

Values are the tagged view of :mod:`leveret.protocol.amqp10.types`, ``(type name,
value)``, with one addition: ``("boolean", b)``, a boolean RabbitMQ encodes as 0x56 (what
it converts from AMQP 0-9-1), beside ``("bool", b)``, which it encodes as 0x41/0x42 (what
its parser gives back, whatever the wire had). A ``("string", bytes)`` is text RabbitMQ
took as it came (it may not be UTF-8: a binary annotation it "infers" to be a string).
AMQP 0-9-1 field values are their wire bytes, type tag first (:mod:`leveret.protocol.table`).
"""

from __future__ import annotations

import math
import struct
from typing import Any

from leveret.broker.erlterms import binary_term, erlang_float
from leveret.protocol import table
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Value
from leveret.protocol.binary import I8, I16, I32, I64, U16, U32, U64
from leveret.protocol.spec import field_end

_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_II = struct.Struct(">II")
NULL: Value = ("null", None)
# rabbit_binary_parser: a long string longer than this is not scanned for UTF-8
UTF8_SCAN_LIMIT = 4096


# ------------------------------------------------------------------- encoding
def encode(value: Value) -> bytes:
    """A value as amqp10_binary_generator writes it: the compact forms the project's codec
    also picks, bare 0x41/0x42 booleans, a list or map in its short form only below 255
    items and 256 bytes."""
    kind, v = value
    if kind == "bool":
        return b"\x41" if v else b"\x42"
    if kind == "boolean":
        return b"\x56\x01" if v else b"\x56\x00"
    if kind == "string" and isinstance(v, bytes):
        return _vbin(0xA1, v)
    if kind == "symbol" and isinstance(v, bytes):
        return _vbin(0xA3, v)
    if kind == "list":
        if not v:
            return b"\x45"
        return compound(0xC0, [encode(item) for item in v], len(v))
    if kind == "map":
        parts = []
        for key, item in v:
            parts.append(encode(key))
            parts.append(encode(item))
        return compound(0xC1, parts, len(parts))
    if kind == "described":
        descriptor, inner = v
        return b"\x00" + encode(descriptor) + encode(inner)
    if kind == "float" and not math.isfinite(v):
        return b"\x72" + _F32.pack(v)
    return types.encode(value)


def compound(code8: int, parts: list[bytes], count: int) -> bytes:
    """A list (0xC0) or map (0xC1) around its already-encoded items."""
    body = b"".join(parts)
    if count < 255 and len(body) + 1 < 256:
        return bytes((code8, len(body) + 1, count)) + body
    return bytes((code8 | 0x10,)) + _II.pack(len(body) + 4, count) + body


def _vbin(code8: int, raw: bytes) -> bytes:
    if len(raw) < 256:
        return bytes((code8, len(raw))) + raw
    return bytes((code8 | 0x10,)) + U32.pack(len(raw)) + raw


def symbol(name: str) -> bytes:
    """A symbol's encoding."""
    return _vbin(0xA3, name.encode())


def string(text: str | bytes) -> bytes:
    """A string's encoding (bytes as they are)."""
    return _vbin(0xA1, text.encode() if isinstance(text, str) else text)


def section(code: int, value: Value) -> bytes:
    """A described section: ``0x00 0x53 code`` and its value."""
    return bytes((0x00, 0x53, code)) + encode(value)


def infer(value: Any) -> Value:
    """mc_util:infer_type: an annotation's Erlang value as an AMQP 1.0 one: text and
    binaries as strings, integers as longs, booleans as booleans, a tagged value as it
    is."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int):
        return ("long", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (bytes, bytearray)):
        return ("string", bytes(value))
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value
    raise ValueError(f"no AMQP 1.0 type for {value!r}")


def is_as_is(value: Value) -> bool:
    """A value RabbitMQ's parser keeps as its bytes (``as_is``): a decimal, a NaN or an
    infinite float or double. Conversions to AMQP 0-9-1 leave these out."""
    kind, v = value
    if kind in ("decimal32", "decimal64", "decimal128"):
        return True
    return kind in ("float", "double") and not math.isfinite(v)


# ----------------------------------------------------------- AMQP 0-9-1 side
def utf8_text(raw: bytes, limit: int | None = UTF8_SCAN_LIMIT) -> str | None:
    """mc_util:is_utf8_no_null(_limited): the text of UTF-8 bytes without NUL (None for
    other bytes, and for any longer than ``limit``)."""
    if limit is not None and len(raw) > limit:
        return None
    if b"\x00" in raw:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def from_091(field: bytes) -> Value | None:
    """mc_amqpl:from_091: an AMQP 0-9-1 field value (tag first) as AMQP 1.0. None for a
    type RabbitMQ has no conversion for (a decimal: its conversion crashes)."""
    tag = field[0]
    if tag == 0x53:  # S
        (n,) = U32.unpack_from(field, 1)
        raw = field[5 : 5 + n]
        text = utf8_text(raw)
        return ("string", text) if text is not None else ("binary", bytes(raw))
    if tag == 0x6C:  # l
        return ("long", I64.unpack_from(field, 1)[0])
    if tag == 0x49:  # I
        return ("int", I32.unpack_from(field, 1)[0])
    if tag == 0x74:  # t
        return ("boolean", field[1] != 0)
    if tag == 0x78:  # x
        (n,) = U32.unpack_from(field, 1)
        return ("binary", bytes(field[5 : 5 + n]))
    if tag == 0x54:  # T
        return ("timestamp", U64.unpack_from(field, 1)[0] * 1000)
    if tag == 0x56:  # V
        return NULL
    if tag == 0x42:  # B
        return ("ubyte", field[1])
    if tag == 0x62:  # b
        return ("byte", I8.unpack_from(field, 1)[0])
    if tag == 0x73:  # s
        return ("short", I16.unpack_from(field, 1)[0])
    if tag == 0x75:  # u
        return ("ushort", U16.unpack_from(field, 1)[0])
    if tag == 0x69:  # i
        return ("uint", U32.unpack_from(field, 1)[0])
    if tag == 0x64:  # d
        return ("double", _F64.unpack_from(field, 1)[0])
    if tag == 0x66:  # f
        return ("float", _F32.unpack_from(field, 1)[0])
    if tag == 0x41:  # A
        items = []
        for element in table.array_elements(field) or []:
            item = from_091(element)
            if item is not None:
                items.append(item)
        return ("list", items)
    if tag == 0x46:  # F
        pairs = []
        for key, element in table.table_fields(field) or []:
            item = from_091(element)
            if item is not None:
                pairs.append((("symbol", key), item))
        return ("map", pairs)
    return None


def _long(n: int) -> bytes:
    return b"l" + I64.pack(((n + 2**63) % 2**64) - 2**63)


def ms_to_s(ms: int) -> int:
    """Erlang's ``div``: truncated toward zero."""
    return ms // 1000 if ms >= 0 else -((-ms) // 1000)


def to_091(value: Value) -> bytes | None:
    """mc_amqpl:to_091: an AMQP 1.0 value as an AMQP 0-9-1 field value; None where
    RabbitMQ leaves it out (``as_is`` values) or has no conversion (a char, a uuid, a
    described value: its conversion crashes)."""
    kind, v = value
    if kind in ("string", "symbol"):
        return table.longstr(v)
    if kind == "binary":
        return table.longstr(bytes(v))
    if kind in ("long", "ulong"):
        return _long(v)
    if kind in ("bool", "boolean"):
        return b"t\x01" if v else b"t\x00"
    if kind == "null":
        return b"V"
    if kind == "int":
        return b"I" + I32.pack(v)
    if kind == "uint":
        return b"i" + U32.pack(v)
    if kind == "byte":
        return b"b" + I8.pack(v)
    if kind == "ubyte":
        return b"B" + bytes((v,))
    if kind == "short":
        return b"s" + I16.pack(v)
    if kind == "ushort":
        return b"u" + U16.pack(v)
    if kind == "timestamp":
        return b"T" + U64.pack(ms_to_s(v) % 2**64)
    if is_as_is(value):
        return None
    if kind == "double":
        return b"d" + _F64.pack(v)
    if kind == "float":
        return b"f" + _F32.pack(v)
    if kind in ("list", "array"):
        elements = [e for e in map(to_091, v) if e is not None]
        return table.array(elements)
    if kind == "map":
        fields = []
        for key, item in v:
            name = key_text(key)
            encoded = to_091(item)
            if name is not None and encoded is not None:
                fields.append((name, encoded))
        return table.table(fields)
    return None


def key_text(key: Value) -> str | None:
    """A map key as an AMQP 0-9-1 table key (strings and symbols; None for others)."""
    kind, v = key
    if kind in ("string", "symbol") and isinstance(v, str) and len(v.encode()) < 256:
        return v
    return None


# ------------------------------------------------------------- Erlang's ~tp
_ERLANG_NAME = {"string": "utf8", "bool": "boolean"}


def term(value: Value) -> str:
    """A tagged value as Erlang's ``~tp`` prints RabbitMQ's term for it, on one line."""
    kind, v = value
    if kind in ("bool", "boolean"):
        return "true" if v else "false"
    if kind == "null":
        return "null"
    name = _ERLANG_NAME.get(kind, kind)
    if kind in ("string", "symbol", "binary", "uuid"):
        raw = v.encode() if isinstance(v, str) else bytes(v)
        return "{" + f"{name},{_binary(raw)}" + "}"
    if kind in ("float", "double"):
        if not math.isfinite(v):
            code = 0x72 if kind == "float" else 0x82
            packed = (_F32 if kind == "float" else _F64).pack(v)
            return "{" + f"as_is,{code},{_binary(packed)}" + "}"
        return "{" + f"{name},{erlang_float(v)}" + "}"
    if kind in ("decimal32", "decimal64", "decimal128"):
        code = {"decimal32": 0x74, "decimal64": 0x84, "decimal128": 0x94}[kind]
        return "{" + f"as_is,{code},{_binary(bytes(v))}" + "}"
    if kind == "list":
        return "{list,[" + ",".join(term(item) for item in v) + "]}"
    if kind == "map":
        inner = ",".join("{" + f"{term(k)},{term(x)}" + "}" for k, x in v)
        return "{map,[" + inner + "]}"
    if kind == "array":
        element = _ERLANG_NAME.get(v[0][0], v[0][0]) if v else "null"
        return "{array," + element + ",[" + ",".join(term(item) for item in v) + "]}"
    if kind == "described":
        descriptor, inner_value = v
        return "{" + f"described,{term(descriptor)},{term(inner_value)}" + "}"
    return "{" + f"{name},{v}" + "}"


def _binary(raw: bytes) -> str:
    if raw and all(32 <= b <= 126 for b in raw):
        return binary_term(raw)
    text = utf8_text(raw, None)
    if text and text.isprintable():
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{escaped}"/utf8>>'
    return binary_term(raw).replace("\n", "").replace("  ", "")


# ------------------------------------------------------------- death history
_DEATH_KEYS = ("queue", "reason", "count", "first-time", "last-time", "exchange", "routing-keys")


def deaths_annotation(x_death: bytes) -> bytes | None:
    """An ``x-death`` header (an array of tables, as dead-lettering writes it) as RabbitMQ
    4.2's ``x-opt-deaths`` annotation, encoded (mc_amqp:encode_deaths): an array of maps,
    most recent first. None when the header is not such an array."""
    elements = table.array_elements(x_death)
    if not elements:
        return None
    maps = []
    for element in elements:
        fields = table.table_fields(element)
        if fields is None:
            return None
        got = {k: v for k, v in fields}
        queue, reason, exchange = (
            table.text(got.get(k, b"")) for k in ("queue", "reason", "exchange")
        )
        count = table.long_value(got.get("count", b""))
        time = got.get("time", b"")
        keys = table.array_elements(got.get("routing-keys", b"")) or []
        if queue is None or reason is None or exchange is None or count is None:
            return None
        if time[:1] != b"T":
            return None
        ms = U64.unpack_from(time, 1)[0] * 1000
        rkeys = [k for k in map(table.text, keys) if k is not None]
        parts = [
            symbol("queue"),
            string(queue),
            symbol("reason"),
            symbol(reason),
            symbol("count"),
            encode(("ulong", count)),
            symbol("first-time"),
            b"\x83" + I64.pack(ms),
            symbol("last-time"),
            b"\x83" + I64.pack(ms),
            symbol("exchange"),
            string(exchange),
            symbol("routing-keys"),
            _string_array(rkeys),
        ]
        ttl = got.get("original-expiration")
        ttl_text = table.text(ttl) if ttl is not None else None
        if ttl_text is not None and ttl_text.isdigit():
            parts[:0] = [symbol("ttl"), encode(("uint", int(ttl_text)))]
        maps.append(_wide_map(parts))
    body = b"\xd1" + b"".join(maps)
    return _array_of(body, len(maps))


def _string_array(items: list[str]) -> bytes:
    """``{array, utf8, [...]}`` as RabbitMQ's generator writes it."""
    body = b"\xb1" + b"".join(U32.pack(len(raw)) + raw for raw in (i.encode() for i in items))
    return _array_of(body, len(items))


def _array_of(body: bytes, count: int) -> bytes:
    """An array around its constructor and elements (short form below 255 and 256)."""
    if count < 255 and len(body) + 1 < 256:
        return bytes((0xE0, len(body) + 1, count)) + body
    return b"\xf0" + _II.pack(len(body) + 4, count) + body


def _wide_map(parts: list[bytes]) -> bytes:
    """A map as an array element (its 32-bit form without the constructor)."""
    body = b"".join(parts)
    return _II.pack(len(body) + 4, len(parts)) + body


def x_death_header(deaths: Value) -> bytes | None:
    """mc_amqpl:convert_from_amqp_deaths: an ``x-opt-deaths`` annotation as the
    ``x-death`` header (an array of tables); None when it is not an array of maps of
    RabbitMQ's shape (RabbitMQ drops another type, and crashes on another shape)."""
    kind, items = deaths
    if kind != "array":
        return None
    tables = []
    for item in items:
        if item[0] != "map":
            return None
        pairs = [(k, v) for k, v in item[1]]
        ttl = None
        if pairs and pairs[0][0] == ("symbol", "ttl") and pairs[0][1][0] == "uint":
            ttl = pairs[0][1][1]
            pairs = pairs[1:]
        if [k for k, _v in pairs] != [("symbol", name) for name in _DEATH_KEYS]:
            return None
        values = [v for _k, v in pairs]
        wanted = ("string", "symbol", "ulong", "timestamp", "timestamp", "string", "array")
        if [v[0] for v in values] != list(wanted):
            return None
        queue, reason, count, first, _last, exchange, keys = (v[1] for v in values)
        if any(k[0] != "string" for k in keys):
            return None
        fields: list[table.Field] = [
            ("count", _long(count)),
            ("reason", table.longstr(reason)),
            ("queue", table.longstr(queue)),
            ("time", b"T" + U64.pack(ms_to_s(first) % 2**64)),
            ("exchange", table.longstr(exchange)),
            ("routing-keys", table.array([table.longstr(k[1]) for k in keys])),
        ]
        if ttl is not None:
            fields.insert(0, ("original-expiration", table.longstr(str(ttl))))
        tables.append(table.table(fields))
    return table.array(tables)


def fields_of(raw: bytes, start: int, end: int) -> list[tuple[str, bytes]]:
    """The fields of a table body ``raw[start:end]``."""
    out = []
    p = start
    while p < end:
        n = raw[p]
        key = raw[p + 1 : p + 1 + n].decode("utf-8", "surrogateescape")
        nxt = field_end(raw, p + 1 + n)
        out.append((key, bytes(raw[p + 1 + n : nxt])))
        p = nxt
    return out


# ------------------------------------------------- AMQP 0-9-1 property bytes
def sorted_fields(fields: list[table.Field]) -> list[table.Field]:
    """Headers as RabbitMQ 4.2 sends them: sorted by key, the first of equal keys kept."""
    if not fields:
        return []
    ordered = sorted(fields, key=lambda f: f[0].encode())
    out = [ordered[0]]
    for f in ordered[1:]:
        if f[0] != out[-1][0]:
            out.append(f)
    return out


def encode_properties(
    content_type: bytes | None,
    content_encoding: bytes | None,
    headers: bytes | None,
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
    """Content-header property bytes (flags, then each property present, in order;
    ``headers``: the encoded table)."""
    flags = 0
    out: list[bytes] = []
    if content_type is not None:
        flags = 0x8000
        out.append(bytes((len(content_type),)) + content_type)
    if content_encoding is not None:
        flags |= 0x4000
        out.append(bytes((len(content_encoding),)) + content_encoding)
    if headers is not None:
        flags |= 0x2000
        out.append(headers)
    if delivery_mode is not None:
        flags |= 0x1000
        out.append(bytes((delivery_mode,)))
    if priority is not None:
        flags |= 0x0800
        out.append(bytes((priority,)))
    if correlation_id is not None:
        flags |= 0x0400
        out.append(bytes((len(correlation_id),)) + correlation_id)
    if reply_to is not None:
        flags |= 0x0200
        out.append(bytes((len(reply_to),)) + reply_to)
    if expiration is not None:
        flags |= 0x0100
        out.append(bytes((len(expiration),)) + expiration)
    if message_id is not None:
        flags |= 0x0080
        out.append(bytes((len(message_id),)) + message_id)
    if timestamp is not None:
        flags |= 0x0040
        out.append(U64.pack(timestamp % 2**64))
    if msg_type is not None:
        flags |= 0x0020
        out.append(bytes((len(msg_type),)) + msg_type)
    if user_id is not None:
        flags |= 0x0010
        out.append(bytes((len(user_id),)) + user_id)
    if app_id is not None:
        flags |= 0x0008
        out.append(bytes((len(app_id),)) + app_id)
    return flags.to_bytes(2, "big") + b"".join(out)
