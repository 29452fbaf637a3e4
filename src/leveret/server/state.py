"""What a connection's protocol needs from the server, and nothing more: the broker, the
limits it offers, the live connections, the alarms in effect, and how to make what was
published durable. The server owns one; every :class:`~leveret.server.edge.Edge`
receives it (as uvicorn's protocols receive a ``ServerState``), so the protocol never
imports the server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from leveret.broker.broker import BrokerCore
from leveret.protocol import spec

CLOSING_TIMEOUT = 30.0  # most seconds to wait for a peer to end its side (rabbit_reader)


class Admission(Protocol):
    """A connection waiting for a place under connection_max."""

    def admit(self) -> None: ...


class LiveConnection(Protocol):
    """A connection as the server drives it from outside: alarms and shutdown."""

    def alarm_raised(self) -> None: ...

    def set_blocked(self, blocked: bool, reason: str) -> None: ...

    def shutdown(self, reason: str) -> None: ...

    def abort(self) -> None: ...


@dataclass(eq=False, slots=True)
class Slots:
    """A listener's places under connection_max (RabbitMQ's is per listener: Ranch's
    max_connections with one connection supervisor): who holds one, who waits."""

    limit: int | None = None
    active: int = 0
    waiting: list[Admission] = field(default_factory=list)

    def full(self) -> bool:
        return self.limit is not None and self.active >= self.limit


@dataclass(frozen=True, slots=True)
class Listener:
    """What a connection knows of the listener that accepted it."""

    protocol: str = "amqp"  # RabbitMQ's listener names: amqp, amqp/ssl, stream, stream/ssl
    tls: bool = False
    verify_peer: bool = False  # the listener asks for client certificates and checks them
    slots: Slots = field(default_factory=Slots)


PLAIN_LISTENER = Listener()


@dataclass(frozen=True, slots=True)
class Limits:
    """What the server offers each connection, and how long it waits."""

    frame_max: int = spec.DEFAULT_FRAME_MAX
    channel_max: int = spec.DEFAULT_CHANNEL_MAX
    heartbeat: int = spec.DEFAULT_HEARTBEAT
    handshake_timeout: float = 10.0
    # the smallest frame_max a client may ask for in tune-ok (RabbitMQ's ?FRAME_MIN_SIZE)
    frame_min: int = spec.FRAME_MIN_SIZE
    # after our connection.close: how long to wait for the peer's close-ok
    close_grace: float = 1.0


def _durable_now() -> int:
    return 0


def _at_once(generation: int, callback: Callable[[int], None]) -> None:
    callback(generation)


@dataclass(slots=True)
class ServerState:
    broker: BrokerCore
    limits: Limits
    sync: Callable[[], None]  # make buffered store writes durable now (the loop waits)
    # group commit (leveret.server.commit): after a batch, write what it stored and start
    # its fsync; the generation its confirms wait for (0: durable already) ...
    commit: Callable[[], int] = _durable_now
    # ... and be called back with the durable generation once that one is on disk
    when_durable: Callable[[int, Callable[[int], None]], None] = _at_once
    connections: set[LiveConnection] = field(default_factory=set)
    alarms: set[str] = field(default_factory=set)  # resources in alarm: "memory", "disk"
    # SASL mechanisms enabled (EXTERNAL is offered only where the listener verifies peers)
    mechanisms: tuple[str, ...] = ("AMQPLAIN", "PLAIN")
    cert_login_from: str = "common_name"  # what a client certificate logs in as
    # AMQP 1.0 on the AMQP listeners, chosen by the protocol header (RabbitMQ 4's core, or
    # 3.10's rabbitmq_amqp1_0 plugin)
    amqp10: bool = False

    @property
    def blocking(self) -> bool:
        return bool(self.alarms)
