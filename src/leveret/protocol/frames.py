"""AMQP 0-9-1's frame layout (the specification's section 4.2.3): the frame types, the
end octet and the fixed heads, as ``struct`` layouts; the content header's properties, and
the sizes of the field-table values that have one.

No project imports and no I/O, so that both sides of the wire build on the one layout:
the broker's codec (:mod:`leveret.protocol.spec`, :mod:`leveret.protocol.connection`) and
the Spark source's lean reader (``leveret.spark.wire``), which reaches a broker only over
the network and may import nothing else of this package."""

from __future__ import annotations

import struct

METHOD = 1
HEADER = 2
BODY = 3
HEARTBEAT = 8
END = 0xCE
END_BYTE = bytes((END,))

#: Every frame's head: type, channel, payload size.
HEAD = struct.Struct(">BHI")
#: A method frame's head and the method's index: class id << 16 | method id.
METHOD_HEAD = struct.Struct(">BHII")
#: A content header frame's head, then (class id, weight) skipped, then the body size.
CONTENT_HEAD = struct.Struct(">BHI4xQ")
#: The frame size a peer may always send before tuning (the specification's minimum
#: frame_max is 4096; RabbitMQ's default is 131072, which the reader asks for).
DEFAULT_FRAME_MAX = 131072


#: basic's content-header properties in wire order: the flag bit, pamqp's name, and the
#: value's type (a short string, a field table, an octet or a 64-bit timestamp).
BASIC_PROPERTIES = (
    (0x8000, "content_type", "shortstr"),
    (0x4000, "content_encoding", "shortstr"),
    (0x2000, "headers", "table"),
    (0x1000, "delivery_mode", "octet"),
    (0x0800, "priority", "octet"),
    (0x0400, "correlation_id", "shortstr"),
    (0x0200, "reply_to", "shortstr"),
    (0x0100, "expiration", "shortstr"),
    (0x0080, "message_id", "shortstr"),
    (0x0040, "timestamp", "timestamp"),
    (0x0020, "message_type", "shortstr"),
    (0x0010, "user_id", "shortstr"),
    (0x0008, "app_id", "shortstr"),
    (0x0004, "cluster_id", "shortstr"),
)

#: The field-table value types of a fixed size: type tag -> bytes after the tag.
FIXED_FIELD_SIZES = {
    "t": 1,
    "b": 1,
    "B": 1,
    "s": 2,
    "u": 2,
    "I": 4,
    "i": 4,
    "l": 8,
    "L": 8,
    "f": 4,
    "d": 8,
    "D": 5,
    "T": 8,
    "V": 0,
}


def method_index(class_id: int, method_id: int) -> int:
    """The 32-bit index a method frame's payload starts with."""
    return (class_id << 16) | method_id


BASIC_CONSUME = method_index(60, 20)
BASIC_DELIVER = method_index(60, 60)
BASIC_ACK = method_index(60, 80)
