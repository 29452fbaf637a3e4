"""Whole numbers as the wire formats here lay them out, big-endian (network byte order):
AMQP 0-9-1, AMQP 1.0 and RabbitMQ's stream protocol alike. One ``struct`` layout each,
named by signedness and width.

No project imports and no I/O."""

from __future__ import annotations

import struct

U8 = struct.Struct(">B")
I8 = struct.Struct(">b")
U16 = struct.Struct(">H")
I16 = struct.Struct(">h")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")
