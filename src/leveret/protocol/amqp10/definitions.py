"""AMQP 1.0 composite types that performatives carry: the error, delivery states and
outcomes, and the source and target termini; the error conditions; the enumerations
(role, settle modes, terminus durability and expiry) and the field codec every composite
type shares.

A composite (or a performative) is one table: a class made by :func:`composite` with its
descriptor code and name, whose annotated fields, in order, are its list. An annotation
names the field's wire type (``Uint``, ``Sym``, ``Symbols`` ...; ``| None``: the field
may be null, otherwise it is mandatory) and its default is the field's. From them the
decorator derives ``FIELDS`` (name and wire type of each) and ``MANDATORY``, which one
codec serves: :func:`encode_composite` writes a described list with its trailing nulls
left off (as RabbitMQ and Proton do); :func:`decode_fields` checks and converts a decoded
list, field by field, and raises :class:`DecodeError` on a wrong type or a missing
mandatory field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, ClassVar, TypeAlias, TypeVar, dataclass_transform

from leveret.protocol.amqp10.types import (
    Array,
    DecodeError,
    Described,
    Symbol,
    Typed,
    encode_plain,
)

# ------------------------------------------------------------------ conditions
# amqp-error
INTERNAL_ERROR = Symbol("amqp:internal-error")
NOT_FOUND = Symbol("amqp:not-found")
UNAUTHORIZED_ACCESS = Symbol("amqp:unauthorized-access")
DECODE_ERROR = Symbol("amqp:decode-error")
RESOURCE_LIMIT_EXCEEDED = Symbol("amqp:resource-limit-exceeded")
NOT_ALLOWED = Symbol("amqp:not-allowed")
INVALID_FIELD = Symbol("amqp:invalid-field")
NOT_IMPLEMENTED = Symbol("amqp:not-implemented")
RESOURCE_LOCKED = Symbol("amqp:resource-locked")
PRECONDITION_FAILED = Symbol("amqp:precondition-failed")
RESOURCE_DELETED = Symbol("amqp:resource-deleted")
ILLEGAL_STATE = Symbol("amqp:illegal-state")
FRAME_SIZE_TOO_SMALL = Symbol("amqp:frame-size-too-small")
# connection-error
CONNECTION_FORCED = Symbol("amqp:connection:forced")
FRAMING_ERROR = Symbol("amqp:connection:framing-error")
CONNECTION_REDIRECT = Symbol("amqp:connection:redirect")
# session-error
WINDOW_VIOLATION = Symbol("amqp:session:window-violation")
ERRANT_LINK = Symbol("amqp:session:errant-link")
HANDLE_IN_USE = Symbol("amqp:session:handle-in-use")
UNATTACHED_HANDLE = Symbol("amqp:session:unattached-handle")
# link-error
DETACH_FORCED = Symbol("amqp:link:detach-forced")
TRANSFER_LIMIT_EXCEEDED = Symbol("amqp:link:transfer-limit-exceeded")
MESSAGE_SIZE_EXCEEDED = Symbol("amqp:link:message-size-exceeded")
LINK_REDIRECT = Symbol("amqp:link:redirect")
STOLEN = Symbol("amqp:link:stolen")


# Enumerations (numbers on the wire; a link endpoint's role is a boolean)
Role = IntEnum("Role", [("SENDER", 0), ("RECEIVER", 1)])
SenderSettleMode = IntEnum("SenderSettleMode", [("UNSETTLED", 0), ("SETTLED", 1), ("MIXED", 2)])
ReceiverSettleMode = IntEnum("ReceiverSettleMode", [("FIRST", 0), ("SECOND", 1)])
TerminusDurability = IntEnum(
    "TerminusDurability", [("NONE", 0), ("CONFIGURATION", 1), ("UNSETTLED_STATE", 2)]
)
SaslCode = IntEnum(
    "SaslCode", [("OK", 0), ("AUTH", 1), ("SYS", 2), ("SYS_PERM", 3), ("SYS_TEMP", 4)]
)

# Expiry policies (symbols)
LINK_DETACH = Symbol("link-detach")
SESSION_END = Symbol("session-end")
CONNECTION_CLOSE = Symbol("connection-close")
NEVER = Symbol("never")


# ----------------------------------------------------------------- field codec
# Wire types of fields: a primitive's name, "symbols" (a multiple symbol: one or an
# array), "fields" (a map keyed by symbols), "map", "any", or "composite" (a described
# value of a type in COMPOSITES, or one of its own). A composite's annotations name them
# with the aliases below (see _WIRE_KINDS); "| None" marks a field that may be null.
Ubyte: TypeAlias = int
Ushort: TypeAlias = int
Uint: TypeAlias = int
Ulong: TypeAlias = int
Sym: TypeAlias = str  # a symbol (decoded as types.Symbol, a str)
Symbols: TypeAlias = tuple[str, ...]  # a multiple symbol: one, or an array of them
Fields: TypeAlias = dict[Any, Any]  # a map keyed by symbols
Map: TypeAlias = dict[Any, Any]
_INT_RANGE = {
    "ubyte": (0, 0xFF),
    "ushort": (0, 0xFFFF),
    "uint": (0, 0xFFFF_FFFF),
    "ulong": (0, 0xFFFF_FFFF_FFFF_FFFF),
}


def _check(kind: str, value: Any, name: str) -> Any:
    """A decoded field's value converted to its Python form, or DecodeError."""
    if value is None:
        return None
    if kind in _INT_RANGE:
        low, high = _INT_RANGE[kind]
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
    elif kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "string":
        if isinstance(value, str) and not isinstance(value, Symbol):
            return value
    elif kind == "symbol":
        if isinstance(value, Symbol):
            return value
    elif kind == "binary":
        if isinstance(value, bytes):
            return value
    elif kind == "symbols":
        if isinstance(value, Symbol):
            return (value,)
        if isinstance(value, Array) and all(isinstance(v, Symbol) for v in value.items):
            return value.items
    elif kind in ("fields", "map"):
        if isinstance(value, dict):
            return value
    elif kind == "composite":
        if isinstance(value, Described):
            composite = COMPOSITES.get(value.descriptor)
            if composite is not None and isinstance(value.value, list):
                return composite.from_list(value.value)
            return value  # a composite of another kind (a filter, say): kept as it came
    elif kind == "any":
        return value
    raise DecodeError(f"field '{name}' is not of type {kind}: {value!r}")


def _wire(kind: str, value: Any) -> Any:
    """A field's Python value in the form encode_plain writes as ``kind``."""
    if value is None:
        return None
    if kind in _INT_RANGE:
        return Typed(kind, int(value))
    if kind == "bool":
        return bool(value)
    if kind == "symbol":
        return Symbol(value)
    if kind == "symbols":
        items = tuple(Symbol(v) for v in value)
        return Array("symbol", items)
    if kind == "fields":
        return {Symbol(k) if isinstance(k, str) else k: v for k, v in value.items()}
    if kind == "composite":
        return value.described() if isinstance(value, Composite) else value
    if kind == "binary":
        return bytes(value)
    return value


class Composite:
    """Base of every composite type and performative: made by :func:`composite`, which
    reads ``FIELDS`` and ``MANDATORY`` from the dataclass's annotations."""

    __slots__ = ()
    DESCRIPTOR: ClassVar[int]
    NAME: ClassVar[str]
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]
    MANDATORY: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def from_list(cls, values: list[Any]) -> Any:
        return cls(*decode_fields(cls, values))

    def wire_values(self) -> list[Any]:
        return [_wire(kind, getattr(self, name)) for name, kind in self.FIELDS]

    def described(self) -> Described:
        values = self.wire_values()
        while values and values[-1] is None:
            values.pop()
        return Described(self.DESCRIPTOR, values)


# An annotation's type name -> the field's wire type ("Any" and composite types: a
# described value; see _check)
_WIRE_KINDS = {
    "Ubyte": "ubyte",
    "Ushort": "ushort",
    "Uint": "uint",
    "Ulong": "ulong",
    "bool": "bool",
    "str": "string",
    "Sym": "symbol",
    "bytes": "binary",
    "Symbols": "symbols",
    "Fields": "fields",
    "Map": "map",
    "Any": "composite",
    "Error": "composite",
}
_C = TypeVar("_C", bound=Composite)


@dataclass_transform(frozen_default=True)
def composite(
    descriptor: int, name: str, registry: dict[int | str, type[Composite]]
) -> Callable[[type[_C]], type[_C]]:
    """The class decorator of a composite type: a frozen slotted dataclass whose fields,
    in order, are the composite's list (those with ``metadata={"wire": False}`` are not
    on the wire), registered in ``registry`` under its code and symbolic descriptor."""

    def make(cls: type[_C]) -> type[_C]:
        made = dataclass(frozen=True, slots=True)(cls)
        wire = [f for f in fields(made) if f.metadata.get("wire", True)]  # type: ignore[arg-type]
        annotations = [str(f.type) for f in wire]
        made.DESCRIPTOR = descriptor
        made.NAME = name
        made.FIELDS = tuple(
            (f.name, _WIRE_KINDS[a.removesuffix(" | None")])
            for f, a in zip(wire, annotations, strict=True)
        )
        made.MANDATORY = frozenset(
            f.name
            for f, a in zip(wire, annotations, strict=True)
            if not a.endswith(" | None") and a != "Any"
        )
        registry[descriptor] = made
        registry[f"amqp:{name}:list"] = made
        return made

    return make


def decode_fields(cls: type[Composite], values: list[Any]) -> list[Any]:
    """A decoded composite's list checked and converted, padded with nulls."""
    specs = cls.FIELDS
    if len(values) > len(specs):
        values = values[: len(specs)]  # fields of a later version of the spec: ignored
    out = [_check(kind, value, name) for (name, kind), value in zip(specs, values, strict=False)]
    out.extend([None] * (len(specs) - len(out)))
    for index, (name, _kind) in enumerate(specs):
        if out[index] is None and name in cls.MANDATORY:
            raise DecodeError(f"mandatory field '{name}' of {cls.NAME} is missing")
    return out


def encode_composite(value: Composite) -> bytes:
    """A composite as a described list (``0x00 0x53 code`` and the list), trailing nulls
    left off."""
    values = value.wire_values()
    while values and values[-1] is None:
        values.pop()
    head = b"\x00\x53" + bytes((value.DESCRIPTOR,))
    return head + encode_plain(values)


# ---------------------------------------------------------- composites
# Descriptor (code or symbolic name) -> composite type, for decoding described fields.
COMPOSITES: dict[int | str, type[Composite]] = {}


@composite(0x1D, "error", COMPOSITES)
class Error(Composite):
    """An error: a condition, a description, and a map of further information."""

    condition: Sym
    description: str | None = None
    info: Fields | None = None


@composite(0x23, "received", COMPOSITES)
class Received(Composite):
    section_number: Uint
    section_offset: Ulong


@composite(0x24, "accepted", COMPOSITES)
class Accepted(Composite):
    pass


@composite(0x25, "rejected", COMPOSITES)
class Rejected(Composite):
    error: Error | None = None


@composite(0x26, "released", COMPOSITES)
class Released(Composite):
    pass


@composite(0x27, "modified", COMPOSITES)
class Modified(Composite):
    delivery_failed: bool | None = None
    undeliverable_here: bool | None = None
    message_annotations: Fields | None = None


@composite(0x33, "declared", COMPOSITES)
class Declared(Composite):
    """A transaction's declared outcome (transactions: part 4)."""

    txn_id: bytes


@composite(0x34, "transactional-state", COMPOSITES)
class TransactionalState(Composite):
    txn_id: bytes
    outcome: Any = None


DeliveryState = Received | Accepted | Rejected | Released | Modified | Declared | TransactionalState
Outcome = Accepted | Rejected | Released | Modified
ACCEPTED = Accepted()
RELEASED = Released()


@dataclass(frozen=True, slots=True)
class Terminus(Composite):
    """The fields a source and a target begin with."""

    address: str | None = None
    durable: Uint | None = None
    expiry_policy: Sym | None = None
    timeout: Uint | None = None
    dynamic: bool | None = None
    dynamic_node_properties: Fields | None = None


@composite(0x28, "source", COMPOSITES)
class Source(Terminus):
    """The source terminus of a link. ``filter`` maps a filter's name to its value,
    often a :class:`~leveret.protocol.amqp10.types.Described` of its own type
    (``Described(Symbol("apache.org:selector-filter:string"), "a = 1")``)."""

    distribution_mode: Sym | None = None
    filter: Fields | None = None
    default_outcome: Any = None
    outcomes: Symbols | None = None
    capabilities: Symbols | None = None
    # the filter map in the tagged view (types.decode), each value's AMQP type kept where
    # the plain ``filter`` loses it (a uint from a ulong): set on a received attach by
    # performatives.decode_performative; never encoded
    filter_types: Any = field(default=None, compare=False, repr=False, metadata={"wire": False})


@composite(0x29, "target", COMPOSITES)
class Target(Terminus):
    """The target terminus of a link."""

    capabilities: Symbols | None = None


@composite(0x30, "coordinator", COMPOSITES)
class Coordinator(Composite):
    """A transaction coordinator as a link's target (part 4)."""

    capabilities: Symbols | None = None
