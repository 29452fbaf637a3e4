"""AMQP 0-9-1 constants, reply codes and method codec.

Method argument types come from pamqp's generated spec classes; encoding goes through
:func:`encode_method`, which skips pamqp's client-side name validation (RabbitMQ accepts
any UTF-8 name up to 255 bytes, so the server must be able to echo one back).
"""

from __future__ import annotations

import inspect
import struct
from typing import Any, TypeVar

from pamqp import commands, encode
from pamqp.base import Frame as Method

from leveret.protocol import frames, properties

__all__ = ["Method", "commands"]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = frames.METHOD
FRAME_HEADER = frames.HEADER
FRAME_BODY = frames.BODY
FRAME_HEARTBEAT = frames.HEARTBEAT
FRAME_END = frames.END
FRAME_END_BYTE = frames.END_BYTE
FRAME_HEAD_SIZE = 7  # type (1), channel (2), payload size (4)
FRAME_OVERHEAD = FRAME_HEAD_SIZE + 1  # and the frame-end octet
FRAME_MIN_SIZE = 4096
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

# What the server offers in connection.tune unless configured otherwise: RabbitMQ 3.10's
# defaults. The one place these numbers live.
DEFAULT_FRAME_MAX = 131072
DEFAULT_CHANNEL_MAX = 2047
DEFAULT_HEARTBEAT = 60
# RabbitMQ's max_message_size default (128 MiB).
DEFAULT_MAX_MESSAGE_SIZE = 134217728

# Reply codes (AMQP 0-9-1 section 1.2 plus RabbitMQ's names)
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

REPLY_NAMES = {
    REPLY_SUCCESS: "OK",
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}

SOFT_ERRORS = frozenset(
    {
        CONTENT_TOO_LARGE,
        NO_ROUTE,
        NO_CONSUMERS,
        ACCESS_REFUSED,
        NOT_FOUND,
        RESOURCE_LOCKED,
        PRECONDITION_FAILED,
    }
)
HARD_ERRORS = frozenset(REPLY_NAMES) - SOFT_ERRORS - {REPLY_SUCCESS}

# Class and method ids used on the hot path and in error replies.
CONNECTION = 10
CHANNEL = 20
EXCHANGE = 40
QUEUE = 50
BASIC = 60
CONFIRM = 85
TX = 90

# Method indices (class id << 16 | method id) that the connection treats specially.
CONNECTION_START_OK_INDEX = commands.Connection.StartOk.index
CONNECTION_TUNE_OK_INDEX = commands.Connection.TuneOk.index
CONNECTION_OPEN_INDEX = commands.Connection.Open.index
CONNECTION_CLOSE_INDEX = commands.Connection.Close.index
CONNECTION_CLOSE_OK_INDEX = commands.Connection.CloseOk.index
CONNECTION_BLOCKED_INDEX = commands.Connection.Blocked.index
CONNECTION_UNBLOCKED_INDEX = commands.Connection.Unblocked.index
CONNECTION_UPDATE_SECRET_INDEX = commands.Connection.UpdateSecret.index
CONNECTION_UPDATE_SECRET_OK_INDEX = commands.Connection.UpdateSecretOk.index
CHANNEL_OPEN_INDEX = commands.Channel.Open.index
CHANNEL_CLOSE_INDEX = commands.Channel.Close.index
CHANNEL_CLOSE_OK_INDEX = commands.Channel.CloseOk.index
# access.request is deprecated and gone from pamqp's spec; RabbitMQ still answers it.
ACCESS_REQUEST_INDEX = 0x001E000A
ACCESS_REQUEST_OK_PAYLOAD = b"\x00\x1e\x00\x0b\x00\x01"  # access.request-ok, ticket 1
BASIC_PUBLISH_INDEX = commands.Basic.Publish.index
BASIC_DELIVER_INDEX = commands.Basic.Deliver.index
BASIC_ACK_INDEX = commands.Basic.Ack.index

_METHODS: dict[int, type[Method]] = commands.INDEX_MAPPING


def method_ids(method: Method | type[Method]) -> tuple[int, int]:
    index = method.index
    return index >> 16, index & 0xFFFF


def method_class(index: int) -> type[Method] | None:
    return _METHODS.get(index)


_pack_index = struct.Struct(">I").pack


def encode_method_payload(method: Method) -> bytes:
    """Encode a method's arguments after its class/method index, without validation."""
    out: list[bytes] = [_pack_index(method.index)]
    bits = 0
    nbits = 0
    for name in method.__slots__:
        kind = method.amqp_type(name)
        value: Any = getattr(method, name, 0)
        if kind == "bit":
            if value:
                bits |= 1 << nbits
            nbits += 1
            if nbits == 8:
                out.append(bytes((bits,)))
                bits = nbits = 0
            continue
        if nbits:
            out.append(bytes((bits,)))
            bits = nbits = 0
        # surrogateescape: bytes a client sent that are not UTF-8 go back as they came
        if kind == "shortstr":
            raw = _utf8(value)
            out.append(bytes((len(raw),)) + raw)
        elif kind == "longstr":
            raw = _utf8(value)
            out.append(struct.pack(">I", len(raw)) + raw)
        elif kind == "table":
            out.append(encode_table(value or {}))
        else:
            out.append(encode.by_type(value, kind))
    if nbits:
        out.append(bytes((bits,)))
    return b"".join(out)


def _utf8(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return bytes(value or b"")


def encode_table(table: dict[str, Any]) -> bytes:
    """A field table in the dict's own order (pamqp sorts keys; RabbitMQ's order shows
    in clients that keep wire order, such as amqplib)."""
    parts: list[bytes] = []
    for key, value in table.items():
        raw = key.encode()
        parts.append(bytes((len(raw),)) + raw)
        if isinstance(value, dict):
            parts.append(b"F" + encode_table(value))
        else:
            parts.append(encode.encode_table_value(value))
    body = b"".join(parts)
    return struct.pack(">I", len(body)) + body


_frame_head = frames.HEAD.pack


M = TypeVar("M", bound=Method)


def reply(cls: type[M], **fields: Any) -> M:
    """A method the broker sends, built without pamqp's checks: its name patterns are
    narrower than what RabbitMQ takes (a queue or exchange may have any UTF-8 name, 'café'
    or 'a*b'), and building a declare-ok or get-ok for such a name raised. Every field of
    the method must be given."""
    method = cls.__new__(cls)
    for name in cls.__slots__:
        setattr(method, name, fields[name])
    return method


# A method class's fields and the defaults its constructor gives them (for command()).
_DEFAULTS: dict[type[Method], dict[str, Any]] = {}


def command(cls: type[M], **fields: Any) -> M:
    """A method as a client sends it, built as :func:`decode_method` builds one (without
    pamqp's checks, see :func:`reply`); the fields not given keep the method's defaults.
    The management API acts through these, as RabbitMQ's acts through a channel."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:  # read once a class
        parameters = inspect.signature(cls.__init__).parameters
        defaults = _DEFAULTS[cls] = {n: parameters[n].default for n in cls.__slots__}
    unknown = set(fields).difference(defaults)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    return reply(cls, **(defaults | fields))


def arguments(method: Method) -> dict[str, Any]:
    """A method's arguments table, a copy keeping the wire types it came with."""
    args: dict[str, Any] | None = getattr(method, "arguments", None)
    return args.copy() if args else {}


def method_frame(channel: int, method: Method) -> bytes:
    payload = encode_method_payload(method)
    return _frame_head(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def decode_method(payload: bytes | memoryview) -> Method:
    """Decode a method frame's payload; raises ``KeyError`` for an unknown method and
    ``ValueError``/``struct.error``/``IndexError`` for a malformed one.

    A method's ``arguments`` table comes back as a :class:`TypedTable`, which remembers
    the wire type of each value (RabbitMQ names it in its error texts)."""
    index = int.from_bytes(payload[0:4], "big")
    cls = _METHODS[index]
    method = cls.__new__(cls)
    raw = bytes(payload[4:])
    method.unmarshal(raw)
    arguments = getattr(method, "arguments", None)
    if arguments:
        start = _table_offset(method)
        method.arguments = TypedTable(arguments, table_types(raw, start))  # type: ignore[attr-defined]
    return method


# RabbitMQ's names for the field-table type tags.
TYPE_NAMES = {
    "S": "longstr",
    "b": "byte",
    "B": "unsignedbyte",
    "s": "short",
    "u": "unsignedshort",
    "I": "signedint",
    "i": "unsignedint",
    "l": "long",
    "L": "long",
    "f": "float",
    "d": "double",
    "D": "decimal",
    "T": "timestamp",
    "t": "bool",
    "F": "table",
    "A": "array",
    "x": "binary",
    "V": "void",
}


class TypedTable(dict):  # type: ignore[type-arg]
    """A decoded field table that also knows each top-level value's wire type name."""

    __slots__ = ("types",)

    def __init__(self, values: dict[str, Any], types: dict[str, str] | None = None) -> None:
        super().__init__(values)
        self.types: dict[str, str] = dict(types or {})

    def copy(self) -> TypedTable:
        return TypedTable(self, self.types)


def type_of(table: dict[str, Any], key: str) -> str | None:
    types = getattr(table, "types", None)
    return types.get(key) if types else None


def field_end(raw: bytes, pos: int) -> int:
    """Where the field value whose type tag is at ``raw[pos]`` ends; ValueError if unknown."""
    tag = chr(raw[pos])
    size = frames.FIXED_FIELD_SIZES.get(tag)
    if size is not None:
        return pos + 1 + size
    if tag in "SxAF":
        n: int = struct.unpack_from(">I", raw, pos + 1)[0]
        return pos + 5 + n
    raise ValueError(f"field type {tag!r}")


def table_types(raw: bytes, start: int) -> dict[str, str]:
    """The type name of each top-level value of the field table at ``raw[start:]``."""
    out: dict[str, str] = {}
    (length,) = struct.unpack_from(">I", raw, start)
    pos = start + 4
    end = pos + length
    while pos < end:
        klen = raw[pos]
        key = raw[pos + 1 : pos + 1 + klen].decode("utf-8", "replace")
        pos += 1 + klen
        tag = chr(raw[pos])
        out[key] = TYPE_NAMES.get(tag, tag)
        try:
            pos = field_end(raw, pos)
        except ValueError:
            break
    return out


def _table_offset(method: Method) -> int:
    """Where a method's trailing ``arguments`` table starts in its argument bytes."""
    pos = 0
    in_bits = False
    for name in method.__slots__:
        if name == "arguments":
            return pos
        kind = method.amqp_type(name)
        if kind == "bit":
            if not in_bits:
                pos += 1
                in_bits = True
            continue
        in_bits = False
        if kind == "shortstr":
            pos += 1 + len(str(getattr(method, name) or "").encode())
        else:
            pos += {"short": 2, "long": 4, "longlong": 8, "octet": 1}[kind]
    return pos


def decode_properties(raw: bytes) -> commands.Basic.Properties:
    """Decode a content header's property flags and list (everything after body size),
    as RabbitMQ reads them (see :mod:`leveret.protocol.properties`)."""
    return properties.decode(raw)


def add_header(raw: bytes, key: str, encoded_value: bytes) -> bytes:
    """Content-header property bytes with one more header, every other byte unchanged.

    ``encoded_value`` is the field's type tag and value, e.g. ``b"l" + 8 bytes``."""
    flags = int.from_bytes(raw[:2], "big")
    if flags & 1:  # a second flag word: no basic property needs it, so none is expected
        props = decode_properties(raw)
        headers = dict(props.headers or {})
        headers[key] = decode_field(encoded_value)
        props.headers = headers
        return encode_properties(props)
    pos = headers_start(raw, flags)
    k = key.encode()
    entry = bytes((len(k),)) + k + encoded_value
    if flags & 0x2000:
        (length,) = struct.unpack_from(">I", raw, pos)
        return (
            raw[:2]
            + raw[2:pos]
            + struct.pack(">I", length + len(entry))
            + raw[pos + 4 : pos + 4 + length]
            + entry
            + raw[pos + 4 + length :]
        )
    new_flags = (flags | 0x2000).to_bytes(2, "big")
    return new_flags + raw[2:pos] + struct.pack(">I", len(entry)) + entry + raw[pos:]


# Basic property flags after the headers: which hold short strings, and the sizes of the
# fixed-size ones (AMQP 0-9-1).
PROPERTY_SHORTSTR = frozenset((0x0400, 0x0200, 0x0100, 0x0080, 0x0020, 0x0010, 0x0008, 0x0004))
PROPERTY_SIZE = {0x1000: 1, 0x0800: 1, 0x0040: 8}
HEADERS_FLAG = 0x2000
CLUSTER_ID_FLAG = 0x0004


def headers_start(raw: bytes, flags: int) -> int:
    """Where basic property bytes hold the headers table (or would): after the flags, the
    content-type and the content-encoding (short strings)."""
    pos = 2
    for flag in (0x8000, 0x4000):
        if flags & flag:
            pos += 1 + raw[pos]
    return pos


def headers_entries(raw: bytes, flags: int) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Where the headers table of basic property bytes starts and ends, and its entries as
    ``(start, end, type tag)``; ValueError (or IndexError, struct.error) if malformed."""
    pos = headers_start(raw, flags)
    (length,) = struct.unpack_from(">I", raw, pos)
    end = pos + 4 + length
    entries = []
    p = pos + 4
    while p < end:
        value = p + 1 + raw[p]
        nxt = field_end(raw, value)
        entries.append((p, nxt, raw[value]))
        p = nxt
    if p != end:
        raise ValueError("headers overrun their table")
    return pos, end, entries


def decode_field(encoded_value: bytes) -> Any:
    from pamqp import decode

    return decode.embedded_value(encoded_value)[1]


def encode_properties(props: commands.Basic.Properties) -> bytes:
    return properties.encode_properties(props)
