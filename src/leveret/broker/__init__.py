"""The broker's domain: messages, exchanges, queues, consumers, users. Synchronous; no
asyncio and no sockets. Storage is reached only through the Protocols in ``ports``."""

from __future__ import annotations
