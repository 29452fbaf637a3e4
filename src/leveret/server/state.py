"""What a connection's protocol needs from the server, and nothing more: the broker, the
limits it offers, the live connections, the alarms in effect, and how to make what was
published durable. The server owns one; every :class:`~leveret.server.amqp.AMQPProtocol`
receives it (as uvicorn's protocols receive a ``ServerState``), so the protocol never
imports the server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from leveret.broker.broker import Broker
from leveret.protocol import spec

CLOSING_TIMEOUT = 30.0  # most seconds to wait for a peer to end its side (rabbit_reader)


class LiveConnection(Protocol):
    """A connection as the server drives it from outside: alarms and shutdown."""

    def set_blocked(self, blocked: bool, reason: str) -> None: ...

    def shutdown(self, reason: str) -> None: ...

    def abort(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """What the server offers each connection, and how long it waits."""

    frame_max: int = spec.DEFAULT_FRAME_MAX
    channel_max: int = spec.DEFAULT_CHANNEL_MAX
    heartbeat: int = spec.DEFAULT_HEARTBEAT
    handshake_timeout: float = 10.0
    # after our connection.close: how long to wait for the peer's close-ok
    close_grace: float = 1.0


@dataclass(slots=True)
class ServerState:
    broker: Broker
    limits: Limits
    sync: Callable[[], None]  # make buffered store writes durable (fsync batching)
    connections: set[LiveConnection] = field(default_factory=set)
    alarms: set[str] = field(default_factory=set)  # resources in alarm: "memory", "disk"

    @property
    def blocking(self) -> bool:
        return bool(self.alarms)
