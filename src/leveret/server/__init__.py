"""The asyncio edge: listener, the adapter that feeds sans-IO connections into broker
sessions, heartbeats, flow control, start-up and shutdown."""

from __future__ import annotations
