"""The AMQP 1.0 edge: a socket, a sans-IO AMQP 1.0
:class:`~leveret.protocol.amqp10.server.ServerConnection` and a broker
:class:`~leveret.broker.amqp10_session.Amqp10Session` (see :mod:`leveret.server.edge` for
what every edge does). The AMQP listener hands a socket over to it when the protocol
header is AMQP 1.0's, as RabbitMQ 4 chooses by the header. Every frame goes to the
session's table; after a batch of publishes the stores are synced before their ``accepted``
outcomes go out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from leveret.broker.amqp10_session import Amqp10Session
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10.events import NeedData
from leveret.protocol.amqp10.server import ServerConnection
from leveret.protocol.amqp10.states import State
from leveret.server.edge import OVER, Edge, Phase, address
from leveret.server.state import PLAIN_LISTENER, Listener, ServerState

log = logging.getLogger(__name__)


class Amqp10Edge(Edge):
    protocol_name = "AMQP 1.0"
    conn: ServerConnection
    session: Amqp10Session

    def __init__(self, state: ServerState, listener: Listener = PLAIN_LISTENER) -> None:
        super().__init__(state, listener)
        self.conn = ServerConnection(state.limits.frame_max)
        self.silenced = False  # refused at its open: read no more, close after a delay

    def greet(self, transport: asyncio.BaseTransport) -> None:
        limits = self.state.limits
        self.session = Amqp10Session(
            self.state.broker,
            self.endpoint(transport),
            address(transport.get_extra_info("peername")),
            address(transport.get_extra_info("sockname")),
            self.traffic,
            limits.frame_max,
            limits.heartbeat,
        )

    def closing_timeout(self) -> int:
        return self.state.limits.heartbeat

    @property
    def open(self) -> bool:
        return self.conn.state is State.OPEN

    def opened(self) -> None:
        self.stop_timer()

    def force_close(self, reason: str) -> None:
        self.session.force_close(reason)

    def after_flush(self, callback: Callable[[], None]) -> None:
        self.flush()
        self.loop.call_soon(callback)

    def close_silently(self, delay: float) -> None:
        self.silenced = True
        self.set_timer(delay, self.drop)

    def alarm_raised(self) -> None:
        """RabbitMQ 4: each session's incoming window closes (a flow says so); the socket
        goes on being read, so consumers settle and heartbeats flow."""
        if self.phase not in OVER and self.open:
            self.session.set_blocked(True, "")
            self.flush()

    def set_blocked(self, blocked: bool, reason: str) -> None:
        """The alarms cleared: the windows open again."""
        if self.phase not in OVER and self.open:
            self.session.set_blocked(blocked, reason)
            self.flush()

    def writing_paused(self, paused: bool) -> None:
        self.session.set_writable(not paused)

    def process(self) -> None:
        conn = self.conn
        session = self.session
        flow = self.flow
        # (SERVING by identity first: an enum's hash is a Python call in 3.11)
        while not (
            flow.held
            or flow.blocked
            or (self.phase is not Phase.SERVING and self.phase in OVER)
            or self.silenced
        ):
            try:
                event = conn.next_event()
            except Exception:
                # a fault of ours in reading the input: this connection ends, alone
                log.exception("AMQP 1.0 connection %s failed reading its input", self.name)
                self.drop()
                return
            if isinstance(event, NeedData):
                break
            try:
                session.handle(event)
            except Exception:
                # a fault of ours: this connection ends, no other is touched
                log.exception("AMQP 1.0 connection %s failed on %r", self.name, event)
                if not conn.closed and not conn.closing:
                    conn.send_close(d.Error(d.INTERNAL_ERROR, "internal error"))
                break
            if session.held_by:
                self.hold()
                break
            if self.state.alarms and not session.blocked:
                session.set_blocked(True, "")
        if session.needs_sync:
            self.confirm_when_durable(session)  # outcomes once on disk
        if conn.has_output():
            self.flush()
        if conn.closed:
            self.end(wait_for_peer=False)

    def closing(self, reason: str) -> None:
        """Broker shutdown: a close with RabbitMQ's condition and text."""
        self.conn.send_close(
            d.Error(d.CONNECTION_FORCED, f"broker forced connection closure with reason '{reason}'")
        )
        self.flush()
        self.session.close()
