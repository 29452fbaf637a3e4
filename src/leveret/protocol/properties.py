"""basic's content-header properties as RabbitMQ reads them.

RabbitMQ decodes every published message's properties (rabbit_framing's
``decode_properties``): the two low bits of the flags word are ignored (no continuation
word is read), each property present is read in turn, nothing may be left over, and a
``headers`` table must parse (rabbit_binary_parser: known type tags, floats that are
numbers). What fails crashes the channel, and its connection is closed with
INTERNAL_ERROR. Short strings are bytes to RabbitMQ: they need not be UTF-8, and are
decoded here with ``surrogateescape`` so that encoding them again gives the same bytes."""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

from pamqp import commands, encode

from leveret.protocol.frames import BASIC_PROPERTIES, FIXED_FIELD_SIZES

# Floats are read apart: RabbitMQ refuses a NaN or an infinity.
_FIXED = {tag: size for tag, size in FIXED_FIELD_SIZES.items() if tag not in "fd"}
_SIZED = frozenset("SFAx")
_u32 = struct.Struct(">I").unpack_from
_u64 = struct.Struct(">Q").unpack_from

# Property bytes already found acceptable: publishers repeat theirs (the hot path looks
# here before it calls verdict).
ACCEPTED: dict[bytes, None] = {}
_ACCEPTED_CACHE_SIZE = 4096
MALFORMED = -1


def verdict(raw: bytes) -> int | None:
    """What RabbitMQ makes of these property bytes (flags and property list) at publish:
    None when it takes them, :data:`MALFORMED` when it cannot decode them (its channel
    crashes), or the delivery mode when that is neither 1 nor 2 (it refuses the
    message)."""
    if raw in ACCEPTED:
        return None
    got = _check(raw)
    if got is None and len(raw) <= 256:
        if len(ACCEPTED) >= _ACCEPTED_CACHE_SIZE:
            ACCEPTED.clear()
        ACCEPTED[raw] = None
    return got


def valid(raw: bytes) -> bool:
    """Whether RabbitMQ decodes these property bytes."""
    return verdict(raw) != MALFORMED


def _check(raw: bytes) -> int | None:
    if len(raw) < 2:
        return MALFORMED
    flags = raw[0] << 8 | raw[1]
    pos, end = 2, len(raw)
    mode = None
    try:
        for flag, _, kind in BASIC_PROPERTIES:
            if not flags & flag:
                continue
            if kind == "shortstr":
                pos += 1 + raw[pos]
            elif kind == "octet":
                if flag == 0x1000 and raw[pos] not in (1, 2):
                    mode = raw[pos]
                pos += 1
            elif kind == "timestamp":
                pos += 8
            else:
                size = _u32(raw, pos)[0]
                if not _table_ok(raw, pos + 4, pos + 4 + size):
                    return MALFORMED
                pos += 4 + size
            if pos > end:
                return MALFORMED
    except (IndexError, struct.error):
        return MALFORMED
    return mode if pos == end else MALFORMED


def _value_end(raw: bytes, pos: int, end: int) -> int:
    """Where the field value whose tag is at ``pos`` ends; -1 if RabbitMQ cannot read it."""
    tag = chr(raw[pos])
    pos += 1
    size = _FIXED.get(tag)
    if size is not None:
        return pos + size
    if tag == "d":
        return -1 if (_u64(raw, pos)[0] >> 52) & 0x7FF == 0x7FF else pos + 8
    if tag == "f":
        return -1 if (_u32(raw, pos)[0] >> 23) & 0xFF == 0xFF else pos + 4
    if tag in _SIZED:
        n: int = _u32(raw, pos)[0]
        start, stop = pos + 4, pos + 4 + n
        if stop > end:
            return -1
        if tag == "F" and not _table_ok(raw, start, stop):
            return -1
        if tag == "A" and not _array_ok(raw, start, stop):
            return -1
        return stop
    return -1


def _table_ok(raw: bytes, pos: int, end: int) -> bool:
    if end > len(raw):
        return False
    while pos < end:
        pos += 1 + raw[pos]
        if pos >= end:
            return False
        pos = _value_end(raw, pos, end)
        if pos < 0 or pos > end:
            return False
    return pos == end


def _array_ok(raw: bytes, pos: int, end: int) -> bool:
    while pos < end:
        pos = _value_end(raw, pos, end)
        if pos < 0 or pos > end:
            return False
    return pos == end


# ----------------------------------------------------------------------- decoding
def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _stamp(seconds: int) -> datetime.datetime | int:
    try:
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return seconds  # beyond what a datetime holds: the number itself


def _value(raw: bytes, pos: int) -> tuple[Any, int]:
    tag = chr(raw[pos])
    pos += 1
    if tag == "S":
        n = _u32(raw, pos)[0]
        data = raw[pos + 4 : pos + 4 + n]
        try:
            return data.decode("utf-8"), pos + 4 + n
        except UnicodeDecodeError:
            return bytes(data), pos + 4 + n
    if tag == "x":
        n = _u32(raw, pos)[0]
        return bytearray(raw[pos + 4 : pos + 4 + n]), pos + 4 + n
    if tag == "F":
        n = _u32(raw, pos)[0]
        return _table(raw, pos + 4, pos + 4 + n), pos + 4 + n
    if tag == "A":
        n = _u32(raw, pos)[0]
        items, p, stop = [], pos + 4, pos + 4 + n
        while p < stop:
            item, p = _value(raw, p)
            items.append(item)
        return items, stop
    if tag == "T":
        return _stamp(_u64(raw, pos)[0]), pos + 8
    if tag == "t":
        return raw[pos] != 0, pos + 1
    if tag == "V":
        return None, pos
    if tag == "D":
        scale, value = struct.unpack_from(">Bi", raw, pos)
        return decimal.Decimal(value).scaleb(-scale), pos + 5
    fmt = {
        "b": ">b",
        "B": ">B",
        "s": ">h",
        "u": ">H",
        "I": ">i",
        "i": ">I",
        "l": ">q",
        "L": ">q",
        "f": ">f",
        "d": ">d",
    }[tag]
    (number,) = struct.unpack_from(fmt, raw, pos)
    return number, pos + struct.calcsize(fmt)


def _table(raw: bytes, pos: int, end: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    while pos < end:
        n = raw[pos]
        key = _text(raw[pos + 1 : pos + 1 + n])
        out[key], pos = _value(raw, pos + 1 + n)
    return out


def decode(raw: bytes) -> commands.Basic.Properties:
    """The properties of bytes :func:`valid` accepts (ValueError for others)."""
    if not valid(raw):
        raise ValueError("malformed content-header properties")
    props = commands.Basic.Properties.__new__(commands.Basic.Properties)
    flags = raw[0] << 8 | raw[1]
    pos = 2
    for flag, name, kind in BASIC_PROPERTIES:
        value: Any = None
        if flags & flag:
            if kind == "shortstr":
                n = raw[pos]
                value = _text(raw[pos + 1 : pos + 1 + n])
                pos += 1 + n
            elif kind == "octet":
                value = raw[pos]
                pos += 1
            elif kind == "timestamp":
                value = _stamp(_u64(raw, pos)[0])
                pos += 8
            else:
                n = _u32(raw, pos)[0]
                value = _table(raw, pos + 4, pos + 4 + n)
                pos += 4 + n
        setattr(props, name, value)
    return props


# ----------------------------------------------------------------------- encoding
def _short(value: str) -> bytes:
    data = value.encode("utf-8", "surrogateescape")[:255]
    return bytes((len(data),)) + data


def encode_value(value: Any) -> bytes:
    """A field value with its type tag, for any value :func:`decode` gives."""
    if isinstance(value, bytes):
        return b"S" + struct.pack(">I", len(value)) + value
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogateescape")
        return b"S" + struct.pack(">I", len(data)) + data
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, list):
        data = b"".join(encode_value(v) for v in value)
        return b"A" + struct.pack(">I", len(data)) + data
    return bytes(encode.encode_table_value(value))


def encode_table(table: dict[str, Any]) -> bytes:
    data = b"".join(_short(str(k)) + encode_value(v) for k, v in table.items())
    return struct.pack(">I", len(data)) + data


def encode_properties(props: commands.Basic.Properties) -> bytes:
    """Property bytes for ``props``; what pamqp would refuse (a delivery mode other than
    1 or 2, a cluster-id, bytes that are not UTF-8) is encoded as it is."""
    flags = 0
    out: list[bytes] = []
    for flag, name, kind in BASIC_PROPERTIES:
        value = getattr(props, name, None)
        if value is None or (kind == "shortstr" and value == ""):
            continue
        flags |= flag
        if kind == "shortstr":
            out.append(_short(str(value)))
        elif kind == "octet":
            out.append(bytes((int(value) & 0xFF,)))
        elif kind == "timestamp":
            seconds = int(value.timestamp()) if hasattr(value, "timestamp") else int(value)
            out.append(struct.pack(">Q", seconds & 0xFFFFFFFFFFFFFFFF))
        else:
            out.append(encode_table(value))
    return struct.pack(">H", flags) + b"".join(out)
