"""Field tables and basic properties edited as wire bytes.

RabbitMQ keeps a message's headers as typed values and re-encodes exactly what it
changed: a header sent as a signed 32-bit integer stays one, an array element sent as
bytes stays bytes. Decoding into Python values and encoding back (pamqp) would lose those
types and re-sort the keys, so the broker edits headers here instead: a table is a list
of ``(key, value)`` where ``value`` is the field's encoded bytes, type tag first."""

from __future__ import annotations

import struct
from typing import Any

from leveret.protocol.frames import BASIC_PROPERTIES
from leveret.protocol.spec import HEADERS_FLAG, decode_field, field_end, headers_start

Field = tuple[str, bytes]  # key, encoded value (type tag, then the value's bytes)

_u32 = struct.Struct(">I")
_i64 = struct.Struct(">q")
_u64 = struct.Struct(">Q")

# The size of a basic property that has a fixed one, by its type.
_PROPERTY_SIZES = {"octet": 1, "timestamp": 8}

REPLY_TO_FLAG = 0x0200
EXPIRATION_FLAG = 0x0100
_TIMESTAMP = 0x0040


# ------------------------------------------------------------------ values
def longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return b"S" + _u32.pack(len(raw)) + raw


def long(value: int) -> bytes:
    return b"l" + _i64.pack(value)


def timestamp(seconds: int) -> bytes:
    return b"T" + _u64.pack(seconds)


def array(elements: list[bytes]) -> bytes:
    body = b"".join(elements)
    return b"A" + _u32.pack(len(body)) + body


def table(fields: list[Field]) -> bytes:
    return b"F" + encode_table(fields)


def encode_table(fields: list[Field]) -> bytes:
    """A field table (with its length) from its fields, in their order."""
    body = b"".join(_field(key, value) for key, value in fields)
    return _u32.pack(len(body)) + body


def _field(key: str, value: bytes) -> bytes:
    raw = key.encode()
    return bytes((len(raw),)) + raw + value


def decode(value: bytes) -> Any:
    """A field's value as Python (strings as str, numbers as int...)."""
    return decode_field(value)


def text(value: bytes) -> str | None:
    """A long-string field's text, or None when the field is of another type."""
    if value[:1] != b"S":
        return None
    (n,) = _u32.unpack_from(value, 1)
    return value[5 : 5 + n].decode("utf-8", "replace")


def long_value(value: bytes) -> int | None:
    """An integer field's value (any integer type), or None."""
    if value[:1] in (b"b", b"B", b"s", b"u", b"I", b"i", b"l", b"L"):
        result = decode_field(value)
        return int(result) if isinstance(result, int) else None
    return None


# ------------------------------------------------------------------ tables
def parse_table(raw: bytes, pos: int = 0) -> tuple[list[Field], int]:
    """The fields of the table whose 4-byte length is at ``raw[pos]``, and where it
    ends; ValueError (or IndexError, struct.error) if malformed."""
    (length,) = _u32.unpack_from(raw, pos)
    end = pos + 4 + length
    if end > len(raw):
        raise ValueError("table overruns its buffer")
    fields: list[Field] = []
    p = pos + 4
    while p < end:
        klen = raw[p]
        key = raw[p + 1 : p + 1 + klen].decode("utf-8", "replace")
        value = p + 1 + klen
        nxt = field_end(raw, value)
        fields.append((key, bytes(raw[value:nxt])))
        p = nxt
    if p != end:
        raise ValueError("fields overrun their table")
    return fields, end


def table_fields(value: bytes) -> list[Field] | None:
    """The fields of a table value (``F...``), or None for another type."""
    if value[:1] != b"F":
        return None
    return parse_table(value, 1)[0]


def array_elements(value: bytes) -> list[bytes] | None:
    """The encoded elements of an array value (``A...``), or None for another type."""
    if value[:1] != b"A":
        return None
    (length,) = _u32.unpack_from(value, 1)
    end = 5 + length
    out: list[bytes] = []
    p = 5
    while p < end:
        nxt = field_end(value, p)
        out.append(value[p:nxt])
        p = nxt
    return out


def lookup(fields: list[Field], key: str) -> bytes | None:
    for k, v in fields:
        if k == key:
            return v
    return None


def store(fields: list[Field], key: str, value: bytes) -> list[Field]:
    """RabbitMQ's set_table_value: replace the key's value (or add it), then sort the
    table by key."""
    out = [(k, v) for k, v in fields if k != key]
    out.append((key, value))
    return sort(out)


def sort(fields: list[Field]) -> list[Field]:
    """Fields by key, as Erlang orders binaries (bytewise); stable for equal keys."""
    return sorted(fields, key=lambda f: f[0].encode())


def delete(fields: list[Field], key: str) -> list[Field]:
    return [(k, v) for k, v in fields if k != key]


# -------------------------------------------------------------- properties
def property_spans(raw: bytes) -> dict[int, tuple[int, int]]:
    """Where each present basic property's value lies in content-header property bytes
    (after the body size): flag -> (start, end)."""
    flags = int.from_bytes(raw[:2], "big")
    pos = 2
    if flags & 1:  # a continuation word: no basic property uses one
        raise ValueError("unexpected property flag continuation")
    out: dict[int, tuple[int, int]] = {}
    for flag, _, kind in BASIC_PROPERTIES:
        if not flags & flag:
            continue
        start = pos
        if kind == "shortstr":
            pos += 1 + raw[pos]
        elif kind == "table":
            (n,) = _u32.unpack_from(raw, pos)
            pos += 4 + n
        else:
            pos += _PROPERTY_SIZES[kind]
        out[flag] = (start, pos)
    return out


def short_property(raw: bytes, flag: int) -> str | None:
    """A short-string property's value (None when absent)."""
    span = property_spans(raw).get(flag)
    if span is None:
        return None
    start, end = span
    return raw[start + 1 : end].decode("utf-8", "replace")


def with_short_property(raw: bytes, flag: int, value: str | None) -> bytes:
    """Property bytes with one short-string property set (or removed with None), every
    other byte unchanged."""
    if value is None:
        return with_property(raw, flag, None)
    v = value.encode()
    return with_property(raw, flag, bytes((len(v),)) + v)


def timestamp_property(seconds: int) -> bytes:
    """The ``timestamp`` property's encoded value."""
    return _u64.pack(seconds)


def with_property(raw: bytes, flag: int, encoded: bytes | None) -> bytes:
    """Property bytes with one property's encoded value set (or removed with None), every
    other byte unchanged."""
    spans = property_spans(raw)
    flags = int.from_bytes(raw[:2], "big")
    span = spans.get(flag)
    if span is not None:
        start, end = span
    else:
        # where it would go: after the last present property that precedes it
        start = 2
        for f, _, _ in BASIC_PROPERTIES:
            if f == flag:
                break
            if f in spans:
                start = spans[f][1]
        end = start
    new_flags = flags | flag if encoded is not None else flags & ~flag
    return new_flags.to_bytes(2, "big") + raw[2:start] + (encoded or b"") + raw[end:]


def with_absent(raw: bytes, headers: list[Field], seconds: int | None) -> bytes:
    """Property bytes that have no headers table, with ``headers`` added and, when
    ``seconds`` is given and no timestamp is there, the timestamp: one walk over the
    properties before them (the interceptors' common case, a message without headers)."""
    flags = int.from_bytes(raw[:2], "big")
    pos = 2
    if flags & 0x8000:  # content-type
        pos += 1 + raw[pos]
    if flags & 0x4000:  # content-encoding
        pos += 1 + raw[pos]
    table_at = pos
    new_flags = flags | HEADERS_FLAG
    if seconds is None or flags & _TIMESTAMP:
        return new_flags.to_bytes(2, "big") + raw[2:pos] + encode_table(headers) + raw[pos:]
    pos += (flags & 0x1000 != 0) + (flags & 0x0800 != 0)  # delivery-mode, priority
    for flag in (0x0400, 0x0200, 0x0100, 0x0080):  # correlation-id ... message-id
        if flags & flag:
            pos += 1 + raw[pos]
    return b"".join(
        (
            (new_flags | _TIMESTAMP).to_bytes(2, "big"),
            raw[2:table_at],
            encode_table(headers),
            raw[table_at:pos],
            _u64.pack(seconds),
            raw[pos:],
        )
    )


def headers(raw: bytes) -> list[Field] | None:
    """The headers table's fields of property bytes, or None when there is none."""
    flags = int.from_bytes(raw[:2], "big")
    if not flags & HEADERS_FLAG:
        return None
    return parse_table(raw, headers_start(raw, flags))[0]


def with_headers(raw: bytes, fields: list[Field] | None) -> bytes:
    """Property bytes with the headers table replaced (None removes it), every other
    byte unchanged."""
    flags = int.from_bytes(raw[:2], "big")
    pos = headers_start(raw, flags)
    end = pos
    if flags & HEADERS_FLAG:
        (n,) = _u32.unpack_from(raw, pos)
        end = pos + 4 + n
    if fields is None:
        new_flags = flags & ~HEADERS_FLAG
        encoded = b""
    else:
        new_flags = flags | HEADERS_FLAG
        encoded = encode_table(fields)
    return new_flags.to_bytes(2, "big") + raw[2:pos] + encoded + raw[end:]
