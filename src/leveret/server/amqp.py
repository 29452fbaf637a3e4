"""The asyncio.Protocol that joins a socket, a sans-IO :class:`ServerConnection` and a
broker :class:`Session`.

Bytes read go into the connection; its events are pulled one at a time and handed to the
session, which answers through the connection's ``send_*`` methods. Writes are coalesced:
the connection's output is flushed once per event-loop tick.

Flow control pulls no further events while the connection is held (credit flow) or
blocked (a resource alarm): what the peer sent waits in the buffer, reading from the
socket pauses, and the heartbeat monitor pauses with it, as RabbitMQ's reader does.

Every ending closes the TCP connection gracefully, never with a reset: after answering a
client's connection.close the socket stays open, its input read and dropped, until the
client closes its side (or a timeout), so that frames still in flight never meet a closed
socket."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pamqp import commands

from leveret.broker.ports import Traffic
from leveret.broker.session import Session
from leveret.protocol import errors, spec
from leveret.protocol.connection import ServerConnection, State
from leveret.protocol.errors import AMQPError
from leveret.protocol.events import (
    NEED_DATA,
    AccessRequestReceived,
    ChannelCloseOkReceived,
    ChannelCloseReceived,
    ChannelOpenReceived,
    ConnectionCloseOkReceived,
    ConnectionCloseReceived,
    ConnectionFailed,
    HeaderReceived,
    MethodReceived,
    OpenReceived,
    PublishReceived,
    StartOkReceived,
    TuneOkReceived,
    UnsupportedProtocol,
    UpdateSecretReceived,
)
from leveret.server.state import CLOSING_TIMEOUT, PLAIN_LISTENER, Listener, ServerState
from leveret.server.tls import connection_details, login_name, peer_certificate

log = logging.getLogger(__name__)

# Deliveries buffered in one turn of the loop are written out once they reach this many
# body bytes, so that a consumer draining a large backlog meets the transport's
# high-water mark (pause_writing: no credit) instead of the whole backlog being
# serialized in memory before the first write.
FLUSH_BYTES = 1024 * 1024


class AMQPProtocol(asyncio.Protocol):
    def __init__(self, state: ServerState, listener: Listener = PLAIN_LISTENER) -> None:
        self.state = state
        self.listener = listener
        self.loop = asyncio.get_running_loop()
        limits = state.limits
        self.conn = ServerConnection(limits.frame_max, limits.channel_max, limits.heartbeat)
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self.traffic = Traffic()
        self._flush_scheduled = False
        self._unflushed = 0  # body bytes of deliveries not yet written
        self._last_recv = time.monotonic()
        self._last_send = time.monotonic()
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._timer: asyncio.TimerHandle | None = None  # handshake, close grace, ending
        self._ending = False  # the TCP connection is being ended
        self._peer_done = False  # the peer closed its side
        self.blocked = False  # reading paused by a resource alarm
        self.held = False  # reading paused by credit flow (a consumer it feeds is congested)
        self.published_since_check = False

    # ------------------------------------------------------------- Output port
    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

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
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

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
        if self.conn.state in (State.CLOSING, State.CLOSED, State.CLOSE_RECEIVED):
            return
        log.info("closing connection %s: %s", self.name, error.reply_text)
        self.conn.send_close(error)
        self._schedule()
        self._set_timer(self.state.limits.close_grace, self._close_ok_missed)

    # ---------------------------------------------------------------- transport
    @property
    def name(self) -> str:
        if self.transport is None:
            return "?"
        peer = self.transport.get_extra_info("peername")
        local = self.transport.get_extra_info("sockname")
        if peer and local:
            return f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"
        return "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence no isinstance check
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(  # type: ignore[attr-defined]
            high=4 * 1024 * 1024, low=1024 * 1024
        )
        self.traffic.pending = transport.get_write_buffer_size  # type: ignore[attr-defined]
        slots = self.listener.slots
        if slots.full():
            # As RabbitMQ's listener at connection_max: not served until a place frees;
            # what the client sends waits unread, and its handshake clock has not started.
            transport.pause_reading()  # type: ignore[attr-defined]
            self._waiting = True
            slots.waiting.append(self)
            return
        self.admit()

    _waiting = False

    def admit(self) -> None:
        """Serve this connection: count it, start its handshake clock, read it."""
        if self.transport is None:
            return
        was_waiting = self._waiting
        self._waiting = False
        self.listener.slots.active += 1
        self.state.connections.add(self)
        self._set_timer(self.state.limits.handshake_timeout, self._handshake_timeout)
        if was_waiting:
            self.transport.resume_reading()
            self.loop.call_soon(self._resume)  # what it sent while it waited

    def _set_timer(self, delay: float, callback: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, callback)

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.conn.state is not State.OPEN and not self._ending:
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
        self._flush_scheduled = False
        self._unflushed = 0
        data = self.conn.data_to_send()
        transport = self.transport
        if transport is None:
            return
        if data:
            transport.write(data)
            self._last_send = time.monotonic()
            traffic = self.traffic
            traffic.send_oct += len(data)
            traffic.send_cnt += 1

    def pause_writing(self) -> None:
        if self.session is not None:
            self.session.set_writable(False)

    def resume_writing(self) -> None:
        if self.session is not None:
            self.session.set_writable(True)

    def eof_received(self) -> bool:
        """The peer closed its side: we finish ours once our output is flushed."""
        self._peer_done = True
        if self.session is not None:
            self.session.close()
        self._flush()
        return False  # the transport closes itself after flushing

    def connection_lost(self, exc: Exception | None) -> None:
        state = self.state
        slots = self.listener.slots
        if self._waiting:
            self._waiting = False
            slots.waiting.remove(self)
        elif self in state.connections:
            state.connections.discard(self)
            slots.active -= 1
            while slots.waiting and not slots.full():
                slots.waiting.pop(0).admit()
        for handle in (self._heartbeat_handle, self._timer):
            if handle is not None:
                handle.cancel()
        self._heartbeat_handle = self._timer = None
        self.transport = None
        if self.session is not None:
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
        if self._ending or self.transport is None:
            return
        self._ending = True
        self.held = self.blocked = False  # what the peer still sends is read, and dropped
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        self._flush()
        transport = self.transport
        if not wait_for_peer or self._peer_done:
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
        if self.session is not None:
            self.session.close()
        self._end(wait_for_peer=False)

    # -------------------------------------------------------------------- input
    def data_received(self, data: bytes) -> None:
        self._last_recv = time.monotonic()
        traffic = self.traffic
        traffic.recv_oct += len(data)
        traffic.recv_cnt += 1
        # While the connection drains after a close, input is still read: a further
        # connection.close gets its close-ok; everything else is dropped.
        self.conn.receive_data(data)
        if self._waiting:
            # not served yet (connection_max): keep it, unread, until admitted (uvloop may
            # read once even though reading was paused in connection_made)
            if self.transport is not None:
                self.transport.pause_reading()
            return
        self._process()

    def _process(self) -> None:
        """Pull events and act on each, until none is buffered or flow control stops."""
        conn = self.conn
        session = self.session
        next_event = conn.next_event
        if not (self.held or self.blocked or self.transport is None):
            while True:
                event = next_event()
                kind = type(event)
                if kind is PublishReceived:
                    if session is None:
                        continue
                    self.published_since_check = True
                    session.publish(*event)  # type: ignore[misc]
                    if session.held_by:
                        self.held = True
                        break
                    if self.state.alarms and not self.blocked:
                        # RabbitMQ's "blocking": a publisher is blocked at its publish
                        self.set_blocked(True, _alarm_reason(self.state.alarms))
                        break
                elif kind is MethodReceived:
                    if session is not None:
                        received: MethodReceived = event  # type: ignore[assignment]
                        session.handle(received.channel, received.method)
                elif event is NEED_DATA:
                    break
                else:
                    self._control(event)
                    session = self.session
                    if self.held or self.blocked or self.transport is None:
                        break
        if self.held or self.blocked:
            self._update_reading()
        if session is not None and (session.pending_confirms or self.published_since_check):
            # what this batch published is made durable (one fsync, one stream chunk)
            # before its confirms go out and before stream consumers see it
            self.published_since_check = False
            self.state.sync()
            session.flush_confirms()
        if conn.has_output():
            if self._ending:
                self._flush()
            else:
                self._schedule()
        if conn.closed:
            self._end(wait_for_peer=conn.state is State.DRAINING)

    def _control(self, event: Any) -> None:
        """A connection or channel event, by its handler in :data:`_CONTROL`."""
        _CONTROL[type(event)](self, event)

    def _channel_open(self, event: ChannelOpenReceived) -> None:
        session = self.session
        refused = session.channel_opened(event.channel) if session is not None else None
        if refused is not None:
            # a user's channel limit: the connection goes, as rabbit_reader ends it
            session.close()  # type: ignore[union-attr]
            self.close_connection(refused)
        else:
            self.conn.send_channel_open_ok(event.channel)

    def _channel_close(self, event: ChannelCloseReceived) -> None:
        if self.session is not None:
            self.session.channel_closed(event.channel)
        self.conn.send_channel_close_ok(event.channel)

    def _channel_close_ok(self, event: ChannelCloseOkReceived) -> None:
        if self.session is not None:
            self.session.channel_closed(event.channel)

    def _access_request(self, event: AccessRequestReceived) -> None:
        self.conn.send_access_request_ok(event.channel)  # RabbitMQ answers ticket 1

    def _update_secret(self, event: UpdateSecretReceived) -> None:
        # As RabbitMQ with its internal users: their state cannot expire, so
        # rabbit_access_control:update_state accepts any new secret as it is.
        self.conn.send_update_secret_ok()

    def _header(self, event: HeaderReceived) -> None:
        self.conn.send_start(
            self.state.broker.server_properties(), mechanisms=" ".join(self._mechanisms())
        )

    def _unsupported_protocol(self, event: UnsupportedProtocol) -> None:
        self.conn.send_protocol_header()

    def _tune_ok(self, event: TuneOkReceived) -> None:
        session = self.session
        if session is not None:
            session.frame_max = event.frame_max
            session.channel_max = event.channel_max
            session.heartbeat = event.heartbeat
        self._start_heartbeats(event.heartbeat)

    def _open(self, event: OpenReceived) -> None:
        session = self.session
        assert session is not None
        err = session.open_vhost(event.virtual_host)
        if err is not None:
            self.close_connection(err.with_method(*spec.method_ids(commands.Connection.Open)))
        else:
            self.conn.send_open_ok()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _connection_close(self, event: ConnectionCloseReceived) -> None:
        if self.session is not None:
            self.session.close()
        self.conn.send_close_ok()

    def _connection_close_ok(self, event: ConnectionCloseOkReceived) -> None:
        if self.session is not None:
            self.session.close()

    def _connection_failed(self, event: ConnectionFailed) -> None:
        log.info("protocol error from %s: %s", self.name, event.error.reply_text)
        if self.session is not None:
            self.session.close()
        if event.reply:
            self.close_connection(event.error)
        else:
            self.conn.drop()

    def _start_ok(self, event: StartOkReceived) -> None:
        assert self.transport is not None
        peer = self.transport.get_extra_info("peername")
        local = self.transport.get_extra_info("sockname")
        broker = self.state.broker
        session = Session(broker, self, peer, local, self.traffic)
        external = None
        if event.mechanism == "EXTERNAL":
            cert = peer_certificate(self.transport)
            if cert is not None:
                external = login_name(cert, self.state.cert_login_from)
        err = session.authenticate(
            event.mechanism,
            event.response,
            event.client_properties,
            offered=self._mechanisms(),
            external_name=external,
        )
        if err is not None:
            broker.unregister(session)
            if err.code == spec.ACCESS_REFUSED and session.capability(
                "authentication_failure_close"
            ):
                self.close_connection(err)  # RabbitMQ names no method here
            else:
                # As RabbitMQ: a client that cannot read the reason just loses the socket,
                # and so does one naming a mechanism that is unknown or not offered (an
                # error before tune ends the connection without a word).
                log.info("login failed from %s: %s", self.name, err.reply_text)
                self.conn.drop()
            return
        session.transport_details = connection_details(self.transport)
        self.session = session
        session.on_released = self._released
        self.conn.send_tune()

    def _mechanisms(self) -> tuple[str, ...]:
        """What connection.start offers here, in RabbitMQ's order (by name): EXTERNAL only
        on a TLS listener that verifies client certificates."""
        listener = self.listener
        # (RabbitMQ lists them in its registry's order, which varies between starts)
        return tuple(
            sorted(
                m
                for m in self.state.mechanisms
                if m != "EXTERNAL" or (listener.tls and listener.verify_peer)
            )
        )

    def _released(self) -> None:
        """Credit came back: read again, and handle what waited in the buffer."""
        self.held = False
        self._update_reading()
        if not self.blocked:
            self.loop.call_soon(self._resume)

    def _resume(self) -> None:
        if self.transport is not None and not self._ending:
            self._process()

    def _update_reading(self) -> None:
        if self.transport is None or self._ending:
            return
        if self.held or self.blocked:
            self.transport.pause_reading()
        else:
            self._last_recv = time.monotonic()  # the heartbeat monitor resumes now
            self.transport.resume_reading()

    # --------------------------------------------------------------- heartbeats
    def _start_heartbeats(self, interval: int) -> None:
        if self._heartbeat_handle is not None:
            self._heartbeat_handle.cancel()
            self._heartbeat_handle = None
        if interval > 0:
            self._heartbeat_handle = self.loop.call_later(
                interval / 2, self._heartbeat_tick, interval
            )

    def _heartbeat_tick(self, interval: int) -> None:
        if self.transport is None or self._ending:
            return
        now = time.monotonic()
        if self.held or self.blocked:
            # As RabbitMQ: a connection we stopped reading is not expected to be heard.
            self._last_recv = now
        elif now - self._last_recv > 2 * interval:
            # as rabbit_reader words it, at its level
            log.error(
                "closing AMQP connection (%s):\nmissed heartbeats from client, timeout: %ds",
                self.name,
                interval,
            )
            if self.session is not None:
                self.session.close()
            self.conn.drop()
            self._end(wait_for_peer=False)
            return
        if now - self._last_send >= interval / 2:
            self.conn.send_heartbeat()
            self._flush()
        self._heartbeat_handle = self.loop.call_later(interval / 2, self._heartbeat_tick, interval)

    # ------------------------------------------------------- resource alarms
    def set_blocked(self, blocked: bool, reason: str) -> None:
        if blocked == self.blocked or self.transport is None or self._ending:
            return
        self.blocked = blocked
        if self.session is not None:
            self.session.blocked = blocked  # shown as the connection's state
        if self.session is not None and self.session.capability("connection.blocked"):
            if blocked:
                self.send_method(0, commands.Connection.Blocked(reason=reason))
            else:
                self.send_method(0, commands.Connection.Unblocked())
        self._update_reading()
        if not blocked and not self.held:
            self.loop.call_soon(self._resume)

    def shutdown(self, reason: str) -> None:
        """Broker shutdown: connection.close 320 to the client."""
        if self.transport is None or self._ending:
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


#: The connection's and channels' own events (not a channel's methods, which the session
#: dispatches), each to its handler.
_CONTROL: dict[type, Callable[[AMQPProtocol, Any], None]] = {
    HeaderReceived: AMQPProtocol._header,
    UnsupportedProtocol: AMQPProtocol._unsupported_protocol,
    StartOkReceived: AMQPProtocol._start_ok,
    TuneOkReceived: AMQPProtocol._tune_ok,
    OpenReceived: AMQPProtocol._open,
    ChannelOpenReceived: AMQPProtocol._channel_open,
    ChannelCloseReceived: AMQPProtocol._channel_close,
    ChannelCloseOkReceived: AMQPProtocol._channel_close_ok,
    AccessRequestReceived: AMQPProtocol._access_request,
    UpdateSecretReceived: AMQPProtocol._update_secret,
    ConnectionCloseReceived: AMQPProtocol._connection_close,
    ConnectionCloseOkReceived: AMQPProtocol._connection_close_ok,
    ConnectionFailed: AMQPProtocol._connection_failed,
}
