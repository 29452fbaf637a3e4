"""AMQP 1.0 performatives (open, begin, attach, flow, transfer, disposition, detach, end,
close) and SASL frames' bodies (mechanisms, init, challenge, response, outcome): one table
each (see :func:`~leveret.protocol.amqp10.definitions.composite`), one codec for all, and
the transfer's fast path (:func:`read_transfer`).

:func:`decode_performative` reads a frame body: the described performative and, after it,
where the payload starts (a transfer's message bytes). Field types are checked; a wrong
type or a missing mandatory field raises :class:`DecodeError`.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

from leveret.protocol.amqp10.definitions import (
    COMPOSITES,
    Composite,
    Error,
    Fields,
    Map,
    Source,
    Sym,
    Symbols,
    Ubyte,
    Uint,
    Ulong,
    Ushort,
    composite,
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

PERFORMATIVES: dict[int | str, type[Composite]] = {}
SASL_FRAMES: dict[int | str, type[Composite]] = {}


@composite(0x10, "open", PERFORMATIVES)
class Open(Composite):
    container_id: str
    hostname: str | None = None
    max_frame_size: Uint | None = None  # none: 4294967295
    channel_max: Ushort | None = None  # none: 65535
    idle_time_out: Uint | None = None  # milliseconds; none or 0: no timeout
    outgoing_locales: Symbols | None = None
    incoming_locales: Symbols | None = None
    offered_capabilities: Symbols | None = None
    desired_capabilities: Symbols | None = None
    properties: Fields | None = None


@composite(0x11, "begin", PERFORMATIVES)
class Begin(Composite):
    remote_channel: Ushort | None
    next_outgoing_id: Uint
    incoming_window: Uint
    outgoing_window: Uint
    handle_max: Uint | None = None  # none: 4294967295
    offered_capabilities: Symbols | None = None
    desired_capabilities: Symbols | None = None
    properties: Fields | None = None


@composite(0x12, "attach", PERFORMATIVES)
class Attach(Composite):
    name: str
    handle: Uint
    role: bool  # False: sender, True: receiver (the attaching endpoint's role)
    snd_settle_mode: Ubyte | None = None  # none: mixed (2)
    rcv_settle_mode: Ubyte | None = None  # none: first (0)
    source: Any = None  # Source, or a described value of another kind
    target: Any = None  # Target, Coordinator, or another described value
    unsettled: Map | None = None
    incomplete_unsettled: bool | None = None
    initial_delivery_count: Uint | None = None
    max_message_size: Ulong | None = None
    offered_capabilities: Symbols | None = None
    desired_capabilities: Symbols | None = None
    properties: Fields | None = None


@composite(0x13, "flow", PERFORMATIVES)
class Flow(Composite):
    next_incoming_id: Uint | None
    incoming_window: Uint
    next_outgoing_id: Uint
    outgoing_window: Uint
    handle: Uint | None = None
    delivery_count: Uint | None = None
    link_credit: Uint | None = None
    available: Uint | None = None
    drain: bool | None = None
    echo: bool | None = None
    properties: Fields | None = None


@composite(0x14, "transfer", PERFORMATIVES)
class Transfer(Composite):
    handle: Uint
    delivery_id: Uint | None = None
    delivery_tag: bytes | None = None
    message_format: Uint | None = None
    settled: bool | None = None
    more: bool | None = None
    rcv_settle_mode: Ubyte | None = None
    state: Any = None
    resume: bool | None = None
    aborted: bool | None = None
    batchable: bool | None = None


@composite(0x15, "disposition", PERFORMATIVES)
class Disposition(Composite):
    role: bool  # the role of the endpoint that sends the disposition
    first: Uint
    last: Uint | None = None
    settled: bool | None = None
    state: Any = None
    batchable: bool | None = None


@composite(0x16, "detach", PERFORMATIVES)
class Detach(Composite):
    handle: Uint
    closed: bool | None = None
    error: Error | None = None


@composite(0x17, "end", PERFORMATIVES)
class End(Composite):
    error: Error | None = None


@composite(0x18, "close", PERFORMATIVES)
class Close(Composite):
    error: Error | None = None


@composite(0x40, "sasl-mechanisms", SASL_FRAMES)
class SaslMechanisms(Composite):
    sasl_server_mechanisms: Symbols


@composite(0x41, "sasl-init", SASL_FRAMES)
class SaslInit(Composite):
    mechanism: Sym
    initial_response: bytes | None = None
    hostname: str | None = None


@composite(0x42, "sasl-challenge", SASL_FRAMES)
class SaslChallenge(Composite):
    challenge: bytes


@composite(0x43, "sasl-response", SASL_FRAMES)
class SaslResponse(Composite):
    response: bytes


@composite(0x44, "sasl-outcome", SASL_FRAMES)
class SaslOutcome(Composite):
    code: Ubyte
    additional_data: bytes | None = None


Performative = Open | Begin | Attach | Flow | Transfer | Disposition | Detach | End | Close
SaslFrame = SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome
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
