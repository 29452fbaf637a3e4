"""AMQP 1.0 composite types that performatives carry: the error, delivery states and
outcomes, and the source and target termini; the error conditions; the enumerations
(role, settle modes, terminus durability and expiry) and the field codec every composite
type shares.

A composite is a frozen dataclass with a ``DESCRIPTOR`` code and ``FIELDS``, the wire
type of each field in order. :func:`encode_composite` writes it as a described list with
its trailing nulls left off (as RabbitMQ and Proton do); :func:`decode_fields` checks and
converts a decoded list, field by field, and raises :class:`DecodeError` on a wrong type or
a missing mandatory field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar

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


class Role(IntEnum):
    """A link endpoint's role (a boolean on the wire)."""

    SENDER = 0
    RECEIVER = 1


class SenderSettleMode(IntEnum):
    UNSETTLED = 0
    SETTLED = 1
    MIXED = 2


class ReceiverSettleMode(IntEnum):
    FIRST = 0
    SECOND = 1


class TerminusDurability(IntEnum):
    NONE = 0
    CONFIGURATION = 1
    UNSETTLED_STATE = 2


class SaslCode(IntEnum):
    OK = 0
    AUTH = 1
    SYS = 2
    SYS_PERM = 3
    SYS_TEMP = 4


# Expiry policies (symbols)
LINK_DETACH = Symbol("link-detach")
SESSION_END = Symbol("session-end")
CONNECTION_CLOSE = Symbol("connection-close")
NEVER = Symbol("never")


# ----------------------------------------------------------------- field codec
# Wire types of fields: a primitive's name, "symbols" (a multiple symbol: one or an
# array), "fields" (a map keyed by symbols), "map", "any", or "composite" (a described
# value of a type in COMPOSITES, or one of its own).
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
    """Base of every composite type and performative."""

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
@dataclass(frozen=True, slots=True)
class Error(Composite):
    """An error: a condition, a description, and a map of further information."""

    DESCRIPTOR = 0x1D
    NAME = "error"
    FIELDS = (("condition", "symbol"), ("description", "string"), ("info", "fields"))
    MANDATORY = frozenset({"condition"})

    condition: str
    description: str | None = None
    info: dict[Any, Any] | None = None


@dataclass(frozen=True, slots=True)
class Received(Composite):
    DESCRIPTOR = 0x23
    NAME = "received"
    FIELDS = (("section_number", "uint"), ("section_offset", "ulong"))
    MANDATORY = frozenset({"section_number", "section_offset"})

    section_number: int
    section_offset: int


@dataclass(frozen=True, slots=True)
class Accepted(Composite):
    DESCRIPTOR = 0x24
    NAME = "accepted"
    FIELDS = ()


@dataclass(frozen=True, slots=True)
class Rejected(Composite):
    DESCRIPTOR = 0x25
    NAME = "rejected"
    FIELDS = (("error", "composite"),)

    error: Error | None = None


@dataclass(frozen=True, slots=True)
class Released(Composite):
    DESCRIPTOR = 0x26
    NAME = "released"
    FIELDS = ()


@dataclass(frozen=True, slots=True)
class Modified(Composite):
    DESCRIPTOR = 0x27
    NAME = "modified"
    FIELDS = (
        ("delivery_failed", "bool"),
        ("undeliverable_here", "bool"),
        ("message_annotations", "fields"),
    )

    delivery_failed: bool | None = None
    undeliverable_here: bool | None = None
    message_annotations: dict[Any, Any] | None = None


@dataclass(frozen=True, slots=True)
class Declared(Composite):
    """A transaction's declared outcome (transactions: part 4)."""

    DESCRIPTOR = 0x33
    NAME = "declared"
    FIELDS = (("txn_id", "binary"),)
    MANDATORY = frozenset({"txn_id"})

    txn_id: bytes


@dataclass(frozen=True, slots=True)
class TransactionalState(Composite):
    DESCRIPTOR = 0x34
    NAME = "transactional-state"
    FIELDS = (("txn_id", "binary"), ("outcome", "composite"))
    MANDATORY = frozenset({"txn_id"})

    txn_id: bytes
    outcome: Any = None


DeliveryState = Received | Accepted | Rejected | Released | Modified | Declared | TransactionalState
Outcome = Accepted | Rejected | Released | Modified
ACCEPTED = Accepted()
RELEASED = Released()


@dataclass(frozen=True, slots=True)
class Source(Composite):
    """The source terminus of a link. ``filter`` maps a filter's name to its value,
    often a :class:`~leveret.protocol.amqp10.types.Described` of its own type
    (``Described(Symbol("apache.org:selector-filter:string"), "a = 1")``)."""

    DESCRIPTOR = 0x28
    NAME = "source"
    FIELDS = (
        ("address", "string"),
        ("durable", "uint"),
        ("expiry_policy", "symbol"),
        ("timeout", "uint"),
        ("dynamic", "bool"),
        ("dynamic_node_properties", "fields"),
        ("distribution_mode", "symbol"),
        ("filter", "fields"),
        ("default_outcome", "composite"),
        ("outcomes", "symbols"),
        ("capabilities", "symbols"),
    )

    address: str | None = None
    durable: int | None = None
    expiry_policy: str | None = None
    timeout: int | None = None
    dynamic: bool | None = None
    dynamic_node_properties: dict[Any, Any] | None = None
    distribution_mode: str | None = None
    filter: dict[Any, Any] | None = None
    default_outcome: Any = None
    outcomes: tuple[str, ...] | None = None
    capabilities: tuple[str, ...] | None = None
    # the filter map in the tagged view (types.decode), each value's AMQP type kept where
    # the plain ``filter`` loses it (a uint from a ulong): set on a received attach by
    # performatives.decode_performative; never encoded
    filter_types: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Target(Composite):
    """The target terminus of a link."""

    DESCRIPTOR = 0x29
    NAME = "target"
    FIELDS = (
        ("address", "string"),
        ("durable", "uint"),
        ("expiry_policy", "symbol"),
        ("timeout", "uint"),
        ("dynamic", "bool"),
        ("dynamic_node_properties", "fields"),
        ("capabilities", "symbols"),
    )

    address: str | None = None
    durable: int | None = None
    expiry_policy: str | None = None
    timeout: int | None = None
    dynamic: bool | None = None
    dynamic_node_properties: dict[Any, Any] | None = None
    capabilities: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Coordinator(Composite):
    """A transaction coordinator as a link's target (part 4)."""

    DESCRIPTOR = 0x30
    NAME = "coordinator"
    FIELDS = (("capabilities", "symbols"),)

    capabilities: tuple[str, ...] | None = field(default=None)


# Descriptor (code or symbolic name) -> composite type, for decoding described fields.
COMPOSITES: dict[int | str, type[Composite]] = {}
for _cls in (
    Error,
    Received,
    Accepted,
    Rejected,
    Released,
    Modified,
    Declared,
    TransactionalState,
    Source,
    Target,
    Coordinator,
):
    COMPOSITES[_cls.DESCRIPTOR] = _cls
    COMPOSITES[f"amqp:{_cls.NAME}:list"] = _cls
