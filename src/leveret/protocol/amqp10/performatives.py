"""AMQP 1.0 performatives (open, begin, attach, flow, transfer, disposition, detach, end,
close) and SASL frames' bodies (mechanisms, init, challenge, response, outcome), as frozen
dataclasses with their codec.

:func:`decode_performative` reads a frame body: the described performative and, after it,
where the payload starts (a transfer's message bytes). Field types are checked; a wrong
type or a missing mandatory field raises :class:`DecodeError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Any

from leveret.protocol.amqp10.definitions import (
    COMPOSITES,
    Composite,
    Error,
    Source,
    decode_fields,
    encode_composite,
)
from leveret.protocol.amqp10.types import (
    _READERS,
    DecodeError,
    Described,
    decode,
    decode_plain,
)

__all__ = [
    "Attach",
    "Begin",
    "Close",
    "Detach",
    "Disposition",
    "End",
    "Flow",
    "Open",
    "Performative",
    "SaslChallenge",
    "SaslInit",
    "SaslMechanisms",
    "SaslOutcome",
    "SaslResponse",
    "Transfer",
    "decode_performative",
    "encode_performative",
    "read_transfer",
]

_SYMBOLS = "symbols"


@dataclass(frozen=True, slots=True)
class Open(Composite):
    DESCRIPTOR = 0x10
    NAME = "open"
    FIELDS = (
        ("container_id", "string"),
        ("hostname", "string"),
        ("max_frame_size", "uint"),
        ("channel_max", "ushort"),
        ("idle_time_out", "uint"),
        ("outgoing_locales", _SYMBOLS),
        ("incoming_locales", _SYMBOLS),
        ("offered_capabilities", _SYMBOLS),
        ("desired_capabilities", _SYMBOLS),
        ("properties", "fields"),
    )
    MANDATORY = frozenset({"container_id"})

    container_id: str
    hostname: str | None = None
    max_frame_size: int | None = None  # none: 4294967295
    channel_max: int | None = None  # none: 65535
    idle_time_out: int | None = None  # milliseconds; none or 0: no timeout
    outgoing_locales: tuple[str, ...] | None = None
    incoming_locales: tuple[str, ...] | None = None
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@dataclass(frozen=True, slots=True)
class Begin(Composite):
    DESCRIPTOR = 0x11
    NAME = "begin"
    FIELDS = (
        ("remote_channel", "ushort"),
        ("next_outgoing_id", "uint"),
        ("incoming_window", "uint"),
        ("outgoing_window", "uint"),
        ("handle_max", "uint"),
        ("offered_capabilities", _SYMBOLS),
        ("desired_capabilities", _SYMBOLS),
        ("properties", "fields"),
    )
    MANDATORY = frozenset({"next_outgoing_id", "incoming_window", "outgoing_window"})

    remote_channel: int | None
    next_outgoing_id: int
    incoming_window: int
    outgoing_window: int
    handle_max: int | None = None  # none: 4294967295
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@dataclass(frozen=True, slots=True)
class Attach(Composite):
    DESCRIPTOR = 0x12
    NAME = "attach"
    FIELDS = (
        ("name", "string"),
        ("handle", "uint"),
        ("role", "bool"),
        ("snd_settle_mode", "ubyte"),
        ("rcv_settle_mode", "ubyte"),
        ("source", "composite"),
        ("target", "composite"),
        ("unsettled", "map"),
        ("incomplete_unsettled", "bool"),
        ("initial_delivery_count", "uint"),
        ("max_message_size", "ulong"),
        ("offered_capabilities", _SYMBOLS),
        ("desired_capabilities", _SYMBOLS),
        ("properties", "fields"),
    )
    MANDATORY = frozenset({"name", "handle", "role"})

    name: str
    handle: int
    role: bool  # False: sender, True: receiver (the attaching endpoint's role)
    snd_settle_mode: int | None = None  # none: mixed (2)
    rcv_settle_mode: int | None = None  # none: first (0)
    source: Any = None  # Source, or a described value of another kind
    target: Any = None  # Target, Coordinator, or another described value
    unsettled: dict[Any, Any] | None = None
    incomplete_unsettled: bool | None = None
    initial_delivery_count: int | None = None
    max_message_size: int | None = None
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@dataclass(frozen=True, slots=True)
class Flow(Composite):
    DESCRIPTOR = 0x13
    NAME = "flow"
    FIELDS = (
        ("next_incoming_id", "uint"),
        ("incoming_window", "uint"),
        ("next_outgoing_id", "uint"),
        ("outgoing_window", "uint"),
        ("handle", "uint"),
        ("delivery_count", "uint"),
        ("link_credit", "uint"),
        ("available", "uint"),
        ("drain", "bool"),
        ("echo", "bool"),
        ("properties", "fields"),
    )
    MANDATORY = frozenset({"incoming_window", "next_outgoing_id", "outgoing_window"})

    next_incoming_id: int | None
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int
    handle: int | None = None
    delivery_count: int | None = None
    link_credit: int | None = None
    available: int | None = None
    drain: bool | None = None
    echo: bool | None = None
    properties: dict[Any, Any] | None = None


@dataclass(frozen=True, slots=True)
class Transfer(Composite):
    DESCRIPTOR = 0x14
    NAME = "transfer"
    FIELDS = (
        ("handle", "uint"),
        ("delivery_id", "uint"),
        ("delivery_tag", "binary"),
        ("message_format", "uint"),
        ("settled", "bool"),
        ("more", "bool"),
        ("rcv_settle_mode", "ubyte"),
        ("state", "composite"),
        ("resume", "bool"),
        ("aborted", "bool"),
        ("batchable", "bool"),
    )
    MANDATORY = frozenset({"handle"})

    handle: int
    delivery_id: int | None = None
    delivery_tag: bytes | None = None
    message_format: int | None = None
    settled: bool | None = None
    more: bool | None = None
    rcv_settle_mode: int | None = None
    state: Any = None
    resume: bool | None = None
    aborted: bool | None = None
    batchable: bool | None = None


@dataclass(frozen=True, slots=True)
class Disposition(Composite):
    DESCRIPTOR = 0x15
    NAME = "disposition"
    FIELDS = (
        ("role", "bool"),
        ("first", "uint"),
        ("last", "uint"),
        ("settled", "bool"),
        ("state", "composite"),
        ("batchable", "bool"),
    )
    MANDATORY = frozenset({"role", "first"})

    role: bool  # the role of the endpoint that sends the disposition
    first: int
    last: int | None = None
    settled: bool | None = None
    state: Any = None
    batchable: bool | None = None


@dataclass(frozen=True, slots=True)
class Detach(Composite):
    DESCRIPTOR = 0x16
    NAME = "detach"
    FIELDS = (("handle", "uint"), ("closed", "bool"), ("error", "composite"))
    MANDATORY = frozenset({"handle"})

    handle: int
    closed: bool | None = None
    error: Error | None = None


@dataclass(frozen=True, slots=True)
class End(Composite):
    DESCRIPTOR = 0x17
    NAME = "end"
    FIELDS = (("error", "composite"),)

    error: Error | None = None


@dataclass(frozen=True, slots=True)
class Close(Composite):
    DESCRIPTOR = 0x18
    NAME = "close"
    FIELDS = (("error", "composite"),)

    error: Error | None = None


@dataclass(frozen=True, slots=True)
class SaslMechanisms(Composite):
    DESCRIPTOR = 0x40
    NAME = "sasl-mechanisms"
    FIELDS = (("sasl_server_mechanisms", _SYMBOLS),)
    MANDATORY = frozenset({"sasl_server_mechanisms"})

    sasl_server_mechanisms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SaslInit(Composite):
    DESCRIPTOR = 0x41
    NAME = "sasl-init"
    FIELDS = (("mechanism", "symbol"), ("initial_response", "binary"), ("hostname", "string"))
    MANDATORY = frozenset({"mechanism"})

    mechanism: str
    initial_response: bytes | None = None
    hostname: str | None = None


@dataclass(frozen=True, slots=True)
class SaslChallenge(Composite):
    DESCRIPTOR = 0x42
    NAME = "sasl-challenge"
    FIELDS = (("challenge", "binary"),)
    MANDATORY = frozenset({"challenge"})

    challenge: bytes


@dataclass(frozen=True, slots=True)
class SaslResponse(Composite):
    DESCRIPTOR = 0x43
    NAME = "sasl-response"
    FIELDS = (("response", "binary"),)
    MANDATORY = frozenset({"response"})

    response: bytes


@dataclass(frozen=True, slots=True)
class SaslOutcome(Composite):
    DESCRIPTOR = 0x44
    NAME = "sasl-outcome"
    FIELDS = (("code", "ubyte"), ("additional_data", "binary"))
    MANDATORY = frozenset({"code"})

    code: int
    additional_data: bytes | None = None


Performative = Open | Begin | Attach | Flow | Transfer | Disposition | Detach | End | Close
SaslFrame = SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome

PERFORMATIVES: dict[int | str, type[Composite]] = {}
SASL_FRAMES: dict[int | str, type[Composite]] = {}
for _cls in (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close):
    PERFORMATIVES[_cls.DESCRIPTOR] = _cls
    PERFORMATIVES[f"amqp:{_cls.NAME}:list"] = _cls
for _sasl in (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome):
    SASL_FRAMES[_sasl.DESCRIPTOR] = _sasl
    SASL_FRAMES[f"amqp:{_sasl.NAME}:list"] = _sasl
# Performatives are not composites that fields carry
assert not set(PERFORMATIVES) & set(COMPOSITES)

_PERFORMATIVE_CODES = {_cls.DESCRIPTOR for _cls in (Transfer, Flow, Disposition)}


def encode_performative(performative: Composite) -> bytes:
    """A performative or SASL frame body: its described list."""
    return encode_composite(performative)


_U32_2 = struct.Struct(">II").unpack_from


def decode_performative(
    body: bytes, pos: int = 0, table: dict[int | str, type[Composite]] = PERFORMATIVES
) -> tuple[Any, int]:
    """The performative at ``pos`` in a frame body (``table``: :data:`PERFORMATIVES` or
    :data:`SASL_FRAMES`), and where what follows it (the payload) starts."""
    try:
        if body[pos] != 0x00:
            raise DecodeError("a frame body that is not a described performative")
        code = body[pos + 1]
        if code == 0x53:  # smallulong: the descriptor every encoder here uses
            descriptor: Any = body[pos + 2]
            pos += 3
        else:
            descriptor, pos = decode_plain(body, pos + 1)
        cls = table.get(descriptor) if isinstance(descriptor, int | str) else None
        if cls is None:
            raise DecodeError(f"unknown performative {descriptor!r}")
        at = pos
        values, pos = _read_list(body, pos)
    except DecodeError:
        raise
    except (IndexError, struct.error, RecursionError) as exc:
        raise DecodeError("truncated performative") from exc
    except ValueError as exc:  # text that is not UTF-8/ASCII, a char beyond U+10FFFF
        raise DecodeError(f"malformed performative: {exc}") from exc
    performative = cls(*decode_fields(cls, values))
    if isinstance(performative, Attach):
        source = performative.source
        if isinstance(source, Source) and source.filter is not None:
            filter_types = _source_filter_types(body, at)
            source = replace(source, filter_types=filter_types)
            return replace(performative, source=source), pos
    return performative, pos


_U32 = struct.Struct(">I").unpack_from


def read_transfer(
    body: bytes,
) -> tuple[int, int | None, bytes | None, int | None, bool | None, bool | None, int] | None:
    """The hot path's transfer (``0x00 0x53 0x14`` and a list8 of at most six fields:
    handle, delivery-id, delivery-tag, message-format, settled, more), read field by field:
    those six values and where the payload starts, each as :func:`decode_performative`
    reads it. None for any other shape or any irregularity (a field of another type code,
    a mandatory handle left null, a list whose size does not match): the general decoder
    then reads it and raises its errors."""
    if body[:4] != _TRANSFER_LIST8:
        return None
    try:
        end = 5 + body[4]
        count = body[5]
        if count < 1 or count > 6 or end > len(body):
            return None
        # (unrolled: one per published message. A field that runs past the list's end
        # leaves p beyond it, and p only grows: the last check refuses it.)
        code = body[6]
        if code == 0x43:
            handle, p = 0, 7
        elif code == 0x52:
            handle, p = body[7], 8
        elif code == 0x70:
            handle, p = _U32(body, 7)[0], 11
        else:
            return None  # a null handle too: the general decoder's error
        delivery_id = tag = fmt = settled = more = None
        if count > 1:
            code = body[p]
            if code == 0x52:
                delivery_id, p = body[p + 1], p + 2
            elif code == 0x43:
                delivery_id, p = 0, p + 1
            elif code == 0x70:
                delivery_id, p = _U32(body, p + 1)[0], p + 5
            elif code == 0x40:
                p += 1
            else:
                return None
        if count > 2:
            code = body[p]
            if code == 0xA0:
                start = p + 2
                p = start + body[p + 1]
                tag = body[start:p]
            elif code == 0x40:
                p += 1
            else:
                return None
        if count > 3:
            code = body[p]
            if code == 0x43:
                fmt, p = 0, p + 1
            elif code == 0x52:
                fmt, p = body[p + 1], p + 2
            elif code == 0x70:
                fmt, p = _U32(body, p + 1)[0], p + 5
            elif code == 0x40:
                p += 1
            else:
                return None
        if count > 4:
            settled, p = _read_bool(body, p)
            if count > 5:
                more, p = _read_bool(body, p)
    except (IndexError, struct.error, _NotFast):
        return None
    if p != end:
        return None
    return handle, delivery_id, tag, fmt, settled, more, end


class _NotFast(Exception):
    """A field read_transfer leaves to the general decoder."""


def _read_bool(body: bytes, p: int) -> tuple[bool | None, int]:
    code = body[p]
    if code == 0x42:
        return False, p + 1
    if code == 0x41:
        return True, p + 1
    if code == 0x40:
        return None, p + 1
    if code == 0x56:  # a boolean with its byte: any but 0 is true
        return body[p + 1] != 0, p + 2
    raise _NotFast


_TRANSFER_LIST8 = b"\x00\x53\x14\xc0"


def _source_filter_types(body: bytes, at: int) -> Any:
    """The filter map of an attach's source (its list at ``at``) in the tagged view."""
    try:
        fields = decode(body, at)[0][1]
        source = fields[5][1][1][1]  # ("described", (descriptor, ("list", [...])))
        return source[7] if len(source) > 7 else None
    except (DecodeError, IndexError, TypeError):
        return None


def _read_list(body: bytes, pos: int) -> tuple[list[Any], int]:
    """A performative's field list (a list8, list32 or list0)."""
    code = body[pos]
    if code == 0x45:
        return [], pos + 1
    if code == 0xC0:
        size = body[pos + 1]
        count = body[pos + 2]
        start = pos + 3
        end = pos + 2 + size
    elif code == 0xD0:
        size, count = _U32_2(body, pos + 1)
        start = pos + 9
        end = pos + 5 + size
    else:
        raise DecodeError(f"a performative's fields are not a list (type code {code:#x})")
    if end > len(body) or count > end - start:
        raise DecodeError("truncated performative")
    readers = _READERS
    values: list[Any] = []
    append = values.append
    p = start
    for _ in range(count):
        value, p = readers[body[p]](body, p + 1)
        append(value)
    if p != end:
        raise DecodeError("a performative's list size does not match its fields")
    return values, end


def described_value(value: Described) -> Any:
    """A described composite in its dataclass, when it is one this package knows."""
    cls = COMPOSITES.get(value.descriptor)
    if cls is None or not isinstance(value.value, list):
        return value
    return cls.from_list(value.value)
