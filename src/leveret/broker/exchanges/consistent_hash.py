"""``x-consistent-hash``: rabbitmq_consistent_hash_exchange, as RabbitMQ 3.10.8 ships it.

A binding's key is its weight: the destination takes that many buckets of the exchange's
ring, in the order destinations were first bound. A message goes to the one destination
whose bucket the jump consistent hash of its routing key (or of the ``hash-header``
header, or of the ``hash-property`` property) picks. The hash is Erlang's ``phash2`` and
the jump hash draws from Erlang's ``exs1024``, both reproduced, so a key picks the same
bucket as on RabbitMQ.

As RabbitMQ's, a second binding to a destination already on the ring adds no buckets, and
removing any binding of a destination takes all of its buckets off the ring; buckets
further round move down."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from leveret.broker.exchanges.base import Binding, Destination, Exchange
from leveret.broker.exchanges.erlhash import Atom, jump_consistent_hash, phash2
from leveret.protocol import errors, table
from leveret.protocol.spec import decode_field

if TYPE_CHECKING:
    from leveret.broker.message import Message

PROPERTIES = ("correlation_id", "message_id", "timestamp")
_CORRELATION_ID = 0x0400
_MESSAGE_ID = 0x0080
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_UNDEFINED = Atom("undefined")

# RabbitMQ's names of field types (rabbit_binary_parser), for hashing {Type, Value}
_INT_TYPES = {
    b"b": "byte",
    b"B": "unsignedbyte",
    b"s": "short",
    b"u": "unsignedshort",
    b"I": "signedint",
    b"i": "unsignedint",
    b"l": "long",
    b"T": "timestamp",
}


def _text(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _erlang_field(raw: bytes) -> object:
    """A header's wire value as the Erlang term RabbitMQ's table_lookup returns."""
    tag = raw[:1]
    if tag in (b"S", b"x"):
        n = int.from_bytes(raw[1:5], "big")
        return (Atom("longstr" if tag == b"S" else "binary"), raw[5 : 5 + n])
    if tag in _INT_TYPES:
        return (Atom(_INT_TYPES[tag]), int(decode_field(raw)))
    if tag == b"t":
        return (Atom("bool"), Atom("true" if raw[1] else "false"))
    if tag == b"V":
        return (Atom("void"), _UNDEFINED)
    # floats, decimals, tables and arrays: hashed by their wire bytes (RabbitMQ hashes
    # the decoded term; these keys spread evenly but not onto RabbitMQ's buckets)
    return raw


class ConsistentHashExchange(Exchange):
    type_name = "x-consistent-hash"
    description = "Consistent Hashing Exchange"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
