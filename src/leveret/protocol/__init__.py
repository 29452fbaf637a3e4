"""Sans-IO AMQP 0-9-1: bytes in, events out; commands in, bytes out.

Nothing in this package touches a socket, asyncio or another part of Leveret.
"""

from __future__ import annotations
