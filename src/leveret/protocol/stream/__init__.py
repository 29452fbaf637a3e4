"""Sans-IO RabbitMQ stream protocol (the one RabbitMQ 3.10 serves on port 5552): bytes in,
events out; commands in, bytes out.

Frames are big-endian: ``u32 size | u16 key | u16 version | fields``; a response sets the
key's top bit. Nothing here touches a socket, asyncio or another part of Leveret.
"""

from __future__ import annotations
