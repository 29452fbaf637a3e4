"""``x-consistent-hash``: rabbitmq_consistent_hash_exchange, as RabbitMQ 3.10.8 ships it.

A binding's key is its weight: the destination takes that many buckets of the exchange's
ring, in the order destinations were first bound. A message goes to the one destination
whose bucket the jump consistent hash of its routing key (or of the ``hash-header``
header, or of the ``hash-property`` property) picks. The hash is Erlang's ``phash2`` and
the jump hash draws from Erlang's ``exs1024``, both reproduced, so a key picks the same
bucket as on RabbitMQ. A header is hashed as the term RabbitMQ looks it up as: the
``{Type, Value}`` pair its table parser decodes the field to, whatever the field's type
(strings, integers, floats, decimals, booleans, void, and nested tables and arrays).

As RabbitMQ's, a second binding to a destination already on the ring adds no buckets, and
removing any binding of a destination takes all of its buckets off the ring; buckets
further round move down."""

from __future__ import annotations

import math
import re
import struct
from typing import TYPE_CHECKING, Any

from leveret.broker.exchanges.base import Binding, Destination, Exchange
from leveret.broker.exchanges.erlhash import Atom, jump_consistent_hash, phash2
from leveret.protocol import errors, table

if TYPE_CHECKING:
    from leveret.broker.message import Message

PROPERTIES = ("correlation_id", "message_id", "timestamp")
_CORRELATION_ID = 0x0400
_MESSAGE_ID = 0x0080
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_UNDEFINED = Atom("undefined")

# How rabbit_binary_parser decodes each fixed-size field type: layout, type name
_FIXED: dict[int, tuple[struct.Struct, Atom]] = {
    ord(tag): (struct.Struct(layout), Atom(name))
    for tag, layout, name in (
        ("b", ">b", "byte"),
        ("B", ">B", "unsignedbyte"),
        ("s", ">h", "short"),
        ("u", ">H", "unsignedshort"),
        ("I", ">i", "signedint"),
        ("i", ">I", "unsignedint"),
        ("l", ">q", "long"),
        ("L", ">q", "long"),  # as RabbitMQ: signed, as 'l'
        ("T", ">Q", "timestamp"),
        ("f", ">f", "float"),  # widened to a double, as Erlang's floats are
        ("d", ">d", "double"),
        ("D", ">BI", "decimal"),  # {Scale, Value}: the value unsigned, as RabbitMQ
    )
}
_LONGSTR, _BINARY, _TABLE, _ARRAY = (Atom(n) for n in ("longstr", "binary", "table", "array"))
_BOOL, _VOID = Atom("bool"), Atom("void")
_U32 = struct.Struct(">I")


def _text(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _erlang_field(raw: bytes) -> object:
    """A header's wire value (type tag first) as the ``{Type, Value}`` term RabbitMQ's
    table_lookup returns: rabbit_binary_parser's decoding, tables as lists of
    ``{Name, Type, Value}`` and arrays as lists of ``{Type, Value}``, nested alike.
    A value RabbitMQ could not decode (a NaN or infinite float, a malformed table) is
    hashed by its wire bytes."""
    try:
        return _decode(raw)
    except (ValueError, IndexError, struct.error):
        return raw


def _decode(raw: bytes) -> object:
    top: list[object] = []
    # the lists being filled: items, where their bytes end, whether a table (named)
    open_: list[tuple[list[object], int, bool]] = [(top, len(raw), False)]
    pos = 0
    while open_:
        items, end, named = open_[-1]
        if pos >= end:
            if pos > end:
                raise ValueError("field overruns its table or array")
            open_.pop()
            continue
        key: tuple[object, ...] = ()
        if named:
            n = raw[pos]
            key = (raw[pos + 1 : pos + 1 + n],)
            pos += 1 + n
        tag = raw[pos]
        pos += 1
        fixed = _FIXED.get(tag)
        value: object
        if fixed is not None:
            layout, kind = fixed
            values = layout.unpack_from(raw, pos)
            pos += layout.size
            value = values if len(values) > 1 else values[0]
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError("Erlang has no NaN or infinite float")
        elif tag == ord("t"):
            kind, value = _BOOL, raw[pos] != 0
            pos += 1
        elif tag == ord("V"):
            kind, value = _VOID, _UNDEFINED
        elif tag in b"SxFA":
            (n,) = _U32.unpack_from(raw, pos)
            pos += 4
            if pos + n > end:
                raise ValueError("field overruns its table or array")
            if tag in b"FA":
                children: list[object] = []
                items.append((*key, _TABLE if tag == ord("F") else _ARRAY, children))
                open_.append((children, pos + n, tag == ord("F")))
                continue
            kind, value = (_LONGSTR if tag == ord("S") else _BINARY), raw[pos : pos + n]
            pos += n
        else:
            raise ValueError(f"field type {chr(tag)!r}")
        items.append((*key, kind, value))
    if len(top) != 1:
        raise ValueError("not one field value")
    return top[0]


class ConsistentHashExchange(Exchange):
    type_name = "x-consistent-hash"
    description = "Consistent Hashing Exchange"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._ring: list[Destination] = []  # bucket number -> destination
        self._hash_on = self._hash_args()

    def _hash_args(self) -> tuple[str, str] | None:
        """rabbit_exchange_type_consistent_hash:validate and hash_on."""
        header = _text(self.arguments.get("hash-header"))
        prop = _text(self.arguments.get("hash-property"))
        if header is not None and prop is not None:
            raise errors.precondition_failed("hash-header and hash-property are mutually exclusive")
        if prop is not None:
            if prop not in PROPERTIES:
                raise errors.precondition_failed(f"Unsupported property: {prop}")
            return ("property", prop)
        if header is not None:
            return ("header", header)
        return None

    def validate_binding(self, binding: Binding) -> None:
        key = binding.routing_key
        if not _INTEGER.match(key):
            shown = key.replace("\\", "\\\\").replace('"', '\\"')
            raise errors.precondition_failed(f'The binding key must be an integer: <<"{shown}">>')
        if int(key) < 1:
            raise errors.precondition_failed("The binding key must be greater than 0")

    def _index_add(self, binding: Binding) -> None:
        if binding.destination in self._ring:
            return  # as RabbitMQ: a destination on the ring keeps its buckets
        self._ring.extend([binding.destination] * int(binding.routing_key))

    def _index_remove(self, binding: Binding) -> None:
        dest = binding.destination
        self._ring = [d for d in self._ring if d is not dest]

    def buckets(self) -> list[Destination]:
        """The ring: bucket number -> destination."""
        return list(self._ring)

    def _value(self, message: Message) -> object:
        hash_on = self._hash_on
        if hash_on is None:
            return message.routing_key.encode()
        kind, name = hash_on
        props = message.properties
        if kind == "header":
            fields = table.headers(props)
            if fields is None:
                return _UNDEFINED
            raw = table.lookup(fields, name)
            return _UNDEFINED if raw is None else _erlang_field(raw)
        if name == "timestamp":
            ts: Any = message.props.timestamp
            if ts is None:
                return _UNDEFINED
            seconds = int(ts.timestamp()) if hasattr(ts, "timestamp") else int(ts)
            return str(seconds).encode()
        flag = _CORRELATION_ID if name == "correlation_id" else _MESSAGE_ID
        value = table.short_property(props, flag)
        return _UNDEFINED if value is None else value.encode()

    def route(self, message: Message) -> list[Destination]:
        ring = self._ring
        n = len(ring)
        if n == 0:
            return []
        if n == 1:
            return [ring[0]]
        return [ring[jump_consistent_hash(phash2(self._value(message)), n)]]
