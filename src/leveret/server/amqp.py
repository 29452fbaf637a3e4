"""The AMQP 0-9-1 edge: a socket, a sans-IO :class:`ServerConnection` and a broker
:class:`Session` (see :mod:`leveret.server.edge` for what every edge does).

Bytes read go into the connection; its events are pulled one at a time and handed to the
session, whose table says what each means, from the protocol header to the close; it
answers through the connection's ``send_*`` methods. A publisher is held (credit flow)
when a queue it feeds is congested, and blocked at its publish while a resource alarm is
in effect. After a batch of publishes the stores are synced before their confirms go out.
Deliveries buffered in one turn are written out once they reach :data:`FLUSH_BYTES`."""

from __future__ import annotations

import asyncio
import logging

from pamqp.commands import Basic

from leveret.broker.session import Session
from leveret.protocol import errors, spec
from leveret.protocol.amqp10.frames import AMQP_HEADER, SASL_HEADER
from leveret.protocol.connection import ServerConnection, State
from leveret.protocol.errors import AMQPError
from leveret.protocol.events import NEED_DATA, MethodReceived, PublishReceived
from leveret.server.amqp10 import Amqp10Edge
from leveret.server.edge import Edge, Phase
from leveret.server.state import PLAIN_LISTENER, Listener, ServerState

log = logging.getLogger(__name__)

# Deliveries buffered in one turn of the loop are written out once they reach this many
# body bytes, so that a consumer draining a large backlog meets the transport's
# high-water mark (pause_writing: no credit) instead of the whole backlog being
# serialized in memory before the first write.
FLUSH_BYTES = 1024 * 1024
#: the protocol headers of AMQP 1.0 (SASL first, or not)
AMQP10_HEADERS = (SASL_HEADER, AMQP_HEADER)


class AMQPEdge(Edge):
    """An AMQP 0-9-1 client's socket."""

    conn: ServerConnection
    session: Session

    def __init__(self, state: ServerState, listener: Listener = PLAIN_LISTENER) -> None:
        super().__init__(state, listener)
        limits = state.limits
        self.conn = ServerConnection(
            limits.frame_max, limits.channel_max, limits.heartbeat, limits.frame_min
        )
        self._unflushed = 0  # body bytes of deliveries not yet written
        # the first bytes, until the protocol header says which AMQP this is (None: known)
        self._header: bytes | None = b"" if state.amqp10 else None

    # ------------------------------------------------------------- Output port
    def send_method(self, channel: int, method: spec.Method) -> None:
        self.conn.send_method(channel, method)
        self.schedule()

    def send_content(
        self, channel: int, method: spec.Method, properties: bytes, body: bytes
    ) -> None:
        self.conn.send_content(channel, method, properties, body)
        self.schedule()

    def send_deliver(
        self,
        channel: int,
        consumer_tag: bytes,
        delivery_tag: int,
        redelivered: bool,
        exchange_and_key: bytes,
        properties: bytes,
        body: bytes,
    ) -> None:
        self.conn.send_deliver(
            channel, consumer_tag, delivery_tag, redelivered, exchange_and_key, properties, body
        )
        self._unflushed += len(body)
        if self._unflushed >= FLUSH_BYTES:
            self.flush()
        elif self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self.flush)

    def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self.conn.send_basic_ack(channel, delivery_tag, multiple)
        self.schedule()

    def close_channel(self, channel: int, error: AMQPError) -> None:
        log.info("closing channel %d of %s: %s", channel, self.name, error.reply_text)
        self.conn.send_channel_close(channel, error)
        self.schedule()

    def close_connection(self, error: AMQPError) -> None:
        """connection.close to the peer; the TCP connection ends at its close-ok, or after
        the grace period."""
        if self.conn.closing:
            return
        log.info("closing connection %s: %s", self.name, error.reply_text)
        self.conn.send_close(error)
        self.schedule()
        self.set_timer(self.state.limits.close_grace, self._close_ok_missed)

    # --------------------------------------------------------------- Edge port
    def opened(self) -> None:
        self.stop_timer()

    def sync_confirms(self) -> None:
        """Everything published is made durable now (the loop waits) and the confirms
        that waited for it go out first: a nack is about to follow them."""
        self.state.sync()

    # ---------------------------------------------------------------- the edge
    def data_received(self, data: bytes) -> None:
        if self._header is not None:
            head = self._header + data
            if self.phase is Phase.WAITING:
                # not served yet (connection_max): its protocol is chosen once admitted
                self._header = head
                if self.transport is not None:
                    self.transport.pause_reading()
                return
            if len(head) < 8 and b"AMQP".startswith(head[:4]):
                self._header = head  # not yet the whole header
                return
            self._header = None
            if head[:8] in AMQP10_HEADERS and self.phase is Phase.SERVING:
                # AMQP 1.0, chosen by its header, as RabbitMQ 4 does on its AMQP port
                self.hand_over(Amqp10Edge(self.state, self.listener), head)
                return
            data = head
        super().data_received(data)

    def admit(self) -> None:
        """Served at last: what it sent while it waited chooses its protocol."""
        super().admit()
        if self._header and self.phase is Phase.SERVING:
            head, self._header = self._header, b""
            self.data_received(head)

    def greet(self, transport: asyncio.BaseTransport) -> None:
        endpoint = self.endpoint(transport)
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.session = Session(self.state.broker, self, peer, local, self.traffic, endpoint)

    @property
    def open(self) -> bool:
        return self.conn.state is State.OPEN

    def flush(self) -> None:
        self._unflushed = 0
        super().flush()

    def writing_paused(self, paused: bool) -> None:
        self.session.set_writable(not paused)

    def lost(self) -> None:
        self.conn.connection_lost()

    def _close_ok_missed(self) -> None:
        """Our connection.close had no close-ok within the grace period: end our side and
        give the peer time to end its side, reading and dropping what it still sends."""
        self._timer = None
        if self.conn.state is State.CLOSING:
            self.conn.drop()
            self.end(wait_for_peer=True, eof=True)

    def process(self) -> None:
        conn = self.conn
        session = self.session
        flow = self.flow
        next_event = conn.next_event
        settled = session.settled  # queues a run of acks gave credit back to
        published = False
        if not (flow.held or flow.blocked or self.transport is None):
            while True:
                event = next_event()
                kind = type(event)
                if kind is MethodReceived:
                    received: MethodReceived = event  # type: ignore[assignment]
                    if type(received.method) is Basic.Ack:
                        session.ack(received.channel, received.method)
                        continue
                    if settled:
                        session.dispatch_settled()
                    session.handle(received.channel, received.method)
                    continue
                if settled:
                    session.dispatch_settled()
                if kind is PublishReceived:
                    published = True
                    session.publish(*event)  # type: ignore[misc]
                    if session.held_by:
                        self.hold()
                        break
                    if self.state.alarms and not flow.blocked:
                        # RabbitMQ's "blocking": a publisher is blocked at its publish
                        self.set_blocked(True, _alarm_reason(self.state.alarms))
                        break
                elif event is NEED_DATA:
                    break
                else:
                    session.event(event)  # type: ignore[arg-type]
                    if flow.held or flow.blocked or self.transport is None:
                        break
        if published or session.pending_confirms:
            # what this batch published is made durable (one stream chunk; the message
            # store's fsync in a thread, group commit) before its confirms go out and
            # before stream consumers see it
            self.confirm_when_durable(session)
        if conn.has_output():
            if self.phase is Phase.ENDING:
                self.flush()
            else:
                self.schedule()
        if conn.closed:
            self.end(wait_for_peer=conn.state is State.DRAINING)

    def closing(self, reason: str) -> None:
        """Broker shutdown: connection.close 320 to the client."""
        self.close_connection(
            errors.error(
                spec.CONNECTION_FORCED, f"broker forced connection closure with reason '{reason}'"
            )
        )


def _alarm_reason(alarms: set[str]) -> str:
    """connection.blocked's reason, as RabbitMQ words it."""
    return "low on disk" if "disk" in alarms and "memory" not in alarms else "low on memory"
