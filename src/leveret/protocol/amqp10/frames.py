"""AMQP 1.0 framing (part 2.3): the 8-byte protocol headers, the frame header, empty
frames (heartbeats), and the transfer frames of the delivery path, spliced from pieces.

A frame is ``size (u32) | doff (u8, 4-byte words, >= 2) | type (0 AMQP, 1 SASL) |
channel (u16)``, an extended header of ``doff * 4 - 8`` bytes (ignored), and the body.
"""

from __future__ import annotations

import struct
from enum import Enum

from leveret.protocol.amqp10.definitions import Composite, encode_composite

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
HEADER_SIZE = 8

FRAME_AMQP = 0
FRAME_SASL = 1
FRAME_HEADER_SIZE = 8
# "the minimum max-frame-size is 512" (2.7.1); RabbitMQ's name for it
MIN_MAX_FRAME_SIZE = 512
# RabbitMQ's defaults: frame_max 131072, session_max_per_connection 64 (channel-max 63),
# link_max_per_session 256 (handle-max 255), max_incoming_window 400, heartbeat 60 s
DEFAULT_MAX_FRAME_SIZE = 131072
DEFAULT_CHANNEL_MAX = 63
DEFAULT_HANDLE_MAX = 255
UINT_MAX = 0xFFFF_FFFF

HEARTBEAT = b"\x00\x00\x00\x08\x02\x00\x00\x00"  # an empty AMQP frame on channel 0

_head = struct.Struct(">IBBH")
pack_head = _head.pack
unpack_head = _head.unpack_from


class Protocol(Enum):
    """What an 8-byte protocol header asks for."""

    SASL = "sasl"  # AMQP 1.0 with its SASL layer first
    AMQP = "amqp"  # AMQP 1.0 without SASL (RabbitMQ 4 refuses it)
    TLS = "tls"  # AMQP 1.0's in-band TLS layer (not offered)
    AMQP_0_9_1 = "amqp0-9-1"
    OTHER = "other"


def detect(header: bytes) -> Protocol:
    """The protocol an 8-byte header names (for the listener that serves them all)."""
    if header == SASL_HEADER:
        return Protocol.SASL
    if header == AMQP_HEADER:
        return Protocol.AMQP
    if header == TLS_HEADER:
        return Protocol.TLS
    if header == b"AMQP\x00\x00\x09\x01":
        return Protocol.AMQP_0_9_1
    return Protocol.OTHER


def frame(channel: int, body: bytes, frame_type: int = FRAME_AMQP) -> bytes:
    """One frame with a 2-word header."""
    return pack_head(FRAME_HEADER_SIZE + len(body), 2, frame_type, channel) + body


def performative_frame(
    channel: int, performative: Composite, frame_type: int = FRAME_AMQP
) -> bytes:
    return frame(channel, encode_composite(performative), frame_type)


# --------------------------------------------------------------- transfer frames
# A transfer's fields as the delivery path writes them: handle and delivery-id as uint
# (0x70), the tag as vbin8, message-format 0 (0x43), settled, and more when true.
_TRANSFER_DESCRIPTOR = b"\x00\x53\x14"
_uint = struct.Struct(">BI").pack  # 0x70 and the value


def _small_uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"
    if value < 256:
        return bytes((0x52, value))
    return _uint(0x70, value)


# A settled disposition of a field-less outcome, the hot path of publisher outcomes
_DISPOSITION_DESCRIPTOR = b"\x00\x53\x15"
_TRUE, _FALSE, _NULL = b"\x56\x01", b"\x56\x00", b"\x40"
OUTCOME_BYTES = {"accepted": b"\x00\x53\x24\x45", "released": b"\x00\x53\x26\x45"}


def settled_disposition_frame(
    channel: int, role: bool, first: int, last: int | None, outcome: bytes
) -> bytes:
    """The frame of a settled disposition for ``first``..``last`` with an outcome that has
    no fields (``OUTCOME_BYTES``), as encode_composite writes it, without building it."""
    body = b"".join((
        _TRUE if role else _FALSE,
        _small_uint(first),
        _NULL if last is None else _small_uint(last),
        _TRUE,
        outcome,
    ))  # fmt: skip
    # (frame() inlined: one per published message)
    return (
        pack_head(FRAME_HEADER_SIZE + 6 + len(body), 2, FRAME_AMQP, channel)
        + _DISPOSITION_DESCRIPTOR
        + bytes((0xC0, len(body) + 1, 5))
        + body
    )


def transfer_fields(
    handle: int,
    delivery_id: int | None,
    delivery_tag: bytes | None,
    message_format: int | None,
    settled: bool | None,
    more: bool,
    extra: bytes = b"",
    extra_count: int = 0,
) -> bytes:
    """A transfer performative: described list with its fields in order, trailing nulls
    left off (``extra``: encoded fields after ``more``, for the rare transfer that has
    them)."""
    parts = [_small_uint(handle)]
    count = 1
    if delivery_id is not None or delivery_tag is not None or message_format is not None:
        parts.append(b"\x40" if delivery_id is None else _small_uint(delivery_id))
        if delivery_tag is None:
            parts.append(b"\x40")
        else:
            parts.append(bytes((0xA0, len(delivery_tag))) + delivery_tag)
        parts.append(b"\x40" if message_format is None else _small_uint(message_format))
        count = 4
    if settled is not None or more or extra_count:
        while count < 4:
            parts.append(b"\x40")
            count += 1
        parts.append(b"\x40" if settled is None else (b"\x41" if settled else b"\x42"))
        count = 5
        if more or extra_count:
            parts.append(b"\x41" if more else b"\x42")
            count = 6
    if extra_count:
        parts.append(extra)
        count += extra_count
    body = b"".join(parts)
    if len(body) + 1 < 256:
        return _TRANSFER_DESCRIPTOR + bytes((0xC0, len(body) + 1, count)) + body
    return _TRANSFER_DESCRIPTOR + struct.pack(">BII", 0xD0, len(body) + 4, count) + body


def transfer_frames(
    channel: int,
    handle: int,
    delivery_id: int,
    delivery_tag: bytes,
    payload: bytes,
    max_frame_size: int,
    settled: bool | None = None,
    message_format: int = 0,
    extra: bytes = b"",
    extra_count: int = 0,
) -> list[bytes]:
    """A delivery's transfer frames: one when it fits ``max_frame_size``, otherwise the
    first with every field, ``more`` set on all but the last, and continuations with
    the handle only (and ``more``). Returned as pieces to be written in order; each
    frame is two pieces (head and payload slice) so that a window that closes can
    hold back whole frames."""
    fields = transfer_fields(
        handle, delivery_id, delivery_tag, message_format, settled, False, extra, extra_count
    )
    size = FRAME_HEADER_SIZE + len(fields) + len(payload)
    if size <= max_frame_size:
        return [pack_head(size, 2, FRAME_AMQP, channel) + fields + payload]
    frames = []
    view = memoryview(payload)
    first = transfer_fields(
        handle, delivery_id, delivery_tag, message_format, settled, True, extra, extra_count
    )
    more = transfer_fields(handle, None, None, None, None, True)
    last = transfer_fields(handle, None, None, None, None, False)
    room = max_frame_size - FRAME_HEADER_SIZE
    total = len(payload)
    pos = 0
    fields = first
    while True:
        if fields is not first and total - pos <= room - len(last):
            frames.append(
                pack_head(FRAME_HEADER_SIZE + len(last) + total - pos, 2, FRAME_AMQP, channel)
                + last
                + bytes(view[pos:])
            )
            return frames
        piece = bytes(view[pos : pos + room - len(fields)])
        pos += len(piece)
        frames.append(
            pack_head(FRAME_HEADER_SIZE + len(fields) + len(piece), 2, FRAME_AMQP, channel)
            + fields
            + piece
        )
        fields = more
