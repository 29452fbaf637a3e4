"""The asyncio.Protocol that joins a socket, a sans-IO :class:`ServerConnection` and a
broker :class:`Session`. It does I/O only (uvicorn's shape): read, write, schedule.

Bytes read go into the connection; its events are pulled one at a time and handed to the
session, whose table says what each means, from the protocol header to the close; it
answers through the connection's ``send_*`` methods. Writes are coalesced: the
connection's output is flushed once per event-loop tick.

One :class:`Phase` tells where the socket is in its life. :class:`FlowControl` pulls no
further events while the connection is held (credit flow) or blocked (a resource alarm):
what the peer sent waits in the buffer, reading from the socket pauses, and the heartbeat
monitor pauses with it, as RabbitMQ's reader does.

Every ending closes the TCP connection gracefully, never with a reset: after answering a
client's connection.close the socket stays open, its input read and dropped, until the
client closes its side (or a timeout), so that frames still in flight never meet a closed
socket."""

from __future__ import annotations

import asyncio
import logging
import time
from enum import Enum, auto
from functools import partial
from typing import Any

from leveret.broker.ports import Endpoint, Traffic
from leveret.broker.session import Session
from leveret.protocol import errors, spec
from leveret.protocol.connection import ServerConnection, State
from leveret.protocol.errors import AMQPError
from leveret.protocol.events import NEED_DATA, MethodReceived, PublishReceived
from leveret.server.flow import FlowControl, Heartbeats, take_transport
from leveret.server.state import CLOSING_TIMEOUT, PLAIN_LISTENER, Listener, ServerState
from leveret.server.tls import (
    certificate_login,
    connection_details,
    connection_name,
    offered_mechanisms,
)

log = logging.getLogger(__name__)

# Deliveries buffered in one turn of the loop are written out once they reach this many
# body bytes, so that a consumer draining a large backlog meets the transport's
# high-water mark (pause_writing: no credit) instead of the whole backlog being
# serialized in memory before the first write.
FLUSH_BYTES = 1024 * 1024


class Phase(Enum):
    """Where a client's socket is in its life (the AMQP conversation's own states are
    the sans-IO connection's)."""

    WAITING = auto()  # accepted at connection_max: not served, not read, until a place frees
    SERVING = auto()  # the conversation runs, from the protocol header to its close
    PEER_DONE = auto()  # the peer ended its side: ours ends once our output is flushed
    ENDING = auto()  # the conversation is over: the TCP connection is being ended
    LOST = auto()  # the transport is gone


_OVER = frozenset((Phase.ENDING, Phase.LOST))


class AMQPProtocol(asyncio.Protocol):
    def __init__(self, state: ServerState, listener: Listener = PLAIN_LISTENER) -> None:
        self.state = state
        self.listener = listener
        self.loop = asyncio.get_running_loop()
        limits = state.limits
        self.conn = ServerConnection(limits.frame_max, limits.channel_max, limits.heartbeat)
        self.phase = Phase.WAITING
        self.transport: asyncio.Transport | None = None
        self.traffic = Traffic()
        # made with the transport, in connection_made
        self.session: Session
        self.flow: FlowControl
        self._heartbeats: Heartbeats
        self._flush_handle: asyncio.Handle | None = None
        self._unflushed = 0  # body bytes of deliveries not yet written
        self._timer: asyncio.TimerHandle | None = None  # handshake, close grace, ending

    # ------------------------------------------------------------- Output port
    def _schedule(self) -> None:
        if self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self._flush)

    def send_method(self, channel: int, method: spec.Method) -> None:
        self.conn.send_method(channel, method)
        self._schedule()

    def send_content(
        self, channel: int, method: spec.Method, properties: bytes, body: bytes
    ) -> None:
        self.conn.send_content(channel, method, properties, body)
        self._schedule()

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
            self._flush()
        elif self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self._flush)

    def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self.conn.send_basic_ack(channel, delivery_tag, multiple)
        self._schedule()

    def close_channel(self, channel: int, error: AMQPError) -> None:
        log.info("closing channel %d of %s: %s", channel, self.name, error.reply_text)
        self.conn.send_channel_close(channel, error)
        self._schedule()

    def close_connection(self, error: AMQPError) -> None:
        """connection.close to the peer; the TCP connection ends at its close-ok, or after
        the grace period."""
        if self.conn.closing:
            return
        log.info("closing connection %s: %s", self.name, error.reply_text)
        self.conn.send_close(error)
        self._schedule()
        self._set_timer(self.state.limits.close_grace, self._close_ok_missed)

    # --------------------------------------------------------------- Edge port
    def start_heartbeats(self, interval: int) -> None:
        self._heartbeats.start(interval)

    def opened(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def released(self) -> None:
        """Credit came back: read again, and handle what waited in the buffer."""
        if self.phase not in _OVER and self.flow.release():
            self.loop.call_soon(self._resume)

    # ---------------------------------------------------------------- transport
    @property
    def name(self) -> str:
        return connection_name(self.transport)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.flow = flow = take_transport(transport, self.traffic)
        self._heartbeats = Heartbeats(self.loop, flow, self._send_heartbeat, self._silent)
        listener = self.listener
        endpoint = Endpoint(
            self.conn,
            self,
            offered_mechanisms(self.state.mechanisms, listener.tls and listener.verify_peer),
            connection_details(transport),
            partial(certificate_login, transport, self.state.cert_login_from),
        )
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.session = Session(self.state.broker, self, peer, local, self.traffic, endpoint)
        slots = listener.slots
        if slots.full():
            # As RabbitMQ's listener at connection_max: not served until a place frees;
            # what the client sends waits unread, and its handshake clock has not started.
            transport.pause_reading()  # type: ignore[attr-defined]
            slots.waiting.append(self)
            return
        self._serve()

    def admit(self) -> None:
        """A place freed under connection_max: serve this connection, and read what it
        sent while it waited."""
        if self.phase is not Phase.WAITING or self.transport is None:
            return
        self._serve()
        self.transport.resume_reading()
        self.loop.call_soon(self._resume)

    def _serve(self) -> None:
        """Count it, start its handshake clock, read it."""
        self.phase = Phase.SERVING
        self.listener.slots.active += 1
        self.state.connections.add(self)
        self._set_timer(self.state.limits.handshake_timeout, self._handshake_timeout)

    def _set_timer(self, delay: float, callback: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, callback)

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.conn.state is not State.OPEN and self.phase not in _OVER:
            log.info("handshake timed out for %s", self.name)
            self._drop()

    def _close_ok_missed(self) -> None:
        """Our connection.close had no close-ok within the grace period: end our side and
        give the peer time to end its side, reading and dropping what it still sends."""
        self._timer = None
        if self.conn.state is State.CLOSING:
            self.conn.drop()
            self._end(wait_for_peer=True, eof=True)

    def _flush(self) -> None:
        self._flush_handle = None
        self._unflushed = 0
        data = self.conn.data_to_send()
        transport = self.transport
        if transport is None:
            return
        if data:
            transport.write(data)
            self.flow.sent = time.monotonic()
            traffic = self.traffic
            traffic.send_oct += len(data)
            traffic.send_cnt += 1

    def pause_writing(self) -> None:
        self.session.set_writable(False)

    def resume_writing(self) -> None:
        self.session.set_writable(True)

    def eof_received(self) -> bool:
        """The peer closed its side: we finish ours once our output is flushed."""
        if self.phase is Phase.SERVING:
            self.phase = Phase.PEER_DONE
        self.session.close()
        self._flush()
        return False  # the transport closes itself after flushing

    def connection_lost(self, exc: Exception | None) -> None:
        state = self.state
        slots = self.listener.slots
        if self.phase is Phase.WAITING:
            slots.waiting.remove(self)
        elif self in state.connections:
            state.connections.discard(self)
            slots.active -= 1
            while slots.waiting and not slots.full():
                slots.waiting.pop(0).admit()
        self.phase = Phase.LOST
        self._heartbeats.stop()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport = None
        self.session.close()
        self.conn.connection_lost()
        self.state.sync()

    def abort(self) -> None:
        """End at once (shutdown, after the grace period)."""
        if self.transport is not None:
            self._flush()
            self.transport.close()

    # ------------------------------------------------------------------- ending
    def _end(self, wait_for_peer: bool, eof: bool = False) -> None:
        """The AMQP conversation is over: flush what is left, then end the TCP
        connection gracefully. With ``wait_for_peer`` the socket stays open, its input
        dropped, until the peer closes its side (or a timeout): closing a socket with
        unread input would send the peer a reset instead of an end-of-file."""
        transport = self.transport
        if self.phase in _OVER or transport is None:
            return
        peer_done = self.phase is Phase.PEER_DONE
        self.phase = Phase.ENDING
        self.flow.stop()  # what the peer still sends is read, and dropped
        self._heartbeats.stop()
        self._flush()
        if not wait_for_peer or peer_done:
            transport.close()
            return
        if eof and transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()  # input is read and dropped until the peer's end
        timeout = self.conn.heartbeat if 0 < self.conn.heartbeat < CLOSING_TIMEOUT else None
        self._set_timer(timeout or CLOSING_TIMEOUT, transport.close)

    def _drop(self) -> None:
        """End without a word, as RabbitMQ does for some handshake errors."""
        self.conn.drop()
        self.session.close()
        self._end(wait_for_peer=False)

    # -------------------------------------------------------------------- input
    def data_received(self, data: bytes) -> None:
        self.flow.heard = time.monotonic()
        traffic = self.traffic
        traffic.recv_oct += len(data)
        traffic.recv_cnt += 1
        # While the connection drains after a close, input is still read: a further
        # connection.close gets its close-ok; everything else is dropped.
        self.conn.receive_data(data)
        if self.phase is Phase.WAITING:
            # not served yet (connection_max): keep it, unread, until admitted (uvloop may
            # read once even though reading was paused in connection_made)
            if self.transport is not None:
                self.transport.pause_reading()
            return
        self._process()

    def _process(self) -> None:
        """Pull events and hand each to the session, until none is buffered or flow
        control stops."""
        conn = self.conn
        session = self.session
        flow = self.flow
        next_event = conn.next_event
        published = False
        if not (flow.held or flow.blocked or self.transport is None):
            while True:
                event = next_event()
                kind = type(event)
                if kind is PublishReceived:
                    published = True
                    session.publish(*event)  # type: ignore[misc]
                    if session.held_by:
                        flow.hold()
                        break
                    if self.state.alarms and not flow.blocked:
                        # RabbitMQ's "blocking": a publisher is blocked at its publish
                        self.set_blocked(True, _alarm_reason(self.state.alarms))
                        break
                elif kind is MethodReceived:
                    received: MethodReceived = event  # type: ignore[assignment]
                    session.handle(received.channel, received.method)
                elif event is NEED_DATA:
                    break
                else:
                    session.event(event)  # type: ignore[arg-type]
                    if flow.held or flow.blocked or self.transport is None:
                        break
        if published or session.pending_confirms:
            # what this batch published is made durable (one fsync, one stream chunk)
            # before its confirms go out and before stream consumers see it
            self.state.sync()
            session.flush_confirms()
        if conn.has_output():
            if self.phase is Phase.ENDING:
                self._flush()
            else:
                self._schedule()
        if conn.closed:
            self._end(wait_for_peer=conn.state is State.DRAINING)

    def _resume(self) -> None:
        if self.phase not in _OVER:
            self._process()

    # --------------------------------------------------------------- heartbeats
    def _send_heartbeat(self) -> None:
        self.conn.send_heartbeat()
        self._flush()

    def _silent(self, interval: int) -> None:
        # as rabbit_reader words it, at its level
        log.error(
            "closing AMQP connection (%s):\nmissed heartbeats from client, timeout: %ds",
            self.name,
            interval,
        )
        self._drop()

    # ------------------------------------------------------- resource alarms
    def set_blocked(self, blocked: bool, reason: str) -> None:
        if blocked == self.flow.blocked or self.phase in _OVER:
            return
        self.flow.block(blocked)
        self.session.set_blocked(blocked, reason)  # its state, and the client is told
        if not blocked and not self.flow.held:
            self.loop.call_soon(self._resume)

    def shutdown(self, reason: str) -> None:
        """Broker shutdown: connection.close 320 to the client."""
        if self.phase in _OVER:
            return
        if self.conn.state is State.OPEN:
            self.close_connection(
                errors.error(
                    spec.CONNECTION_FORCED,
                    f"broker forced connection closure with reason '{reason}'",
                )
            )
        else:
            self._drop()


def _alarm_reason(alarms: set[str]) -> str:
    """connection.blocked's reason, as RabbitMQ words it."""
    return "low on disk" if "disk" in alarms and "memory" not in alarms else "low on memory"
