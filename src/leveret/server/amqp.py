"""The asyncio.Protocol that joins a socket, a sans-IO :class:`ServerConnection` and a
broker :class:`Session`.

Writes are coalesced: every send appends to the connection's buffer and the buffer is
flushed once per event-loop tick."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from leveret.broker.session import Session
from leveret.protocol import errors, spec
from leveret.protocol.connection import ServerConnection, State
from leveret.protocol.errors import AMQPError
from leveret.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    ConnectionCloseOkReceived,
    ConnectionCloseReceived,
    ConnectionFailed,
    MethodReceived,
    OpenReceived,
    PublishReceived,
    StartOkReceived,
    TuneOkReceived,
)

if TYPE_CHECKING:
    from leveret.server.app import Server

log = logging.getLogger(__name__)

CLOSE_GRACE = 1.0  # seconds to wait for close-ok before dropping the socket
HANDSHAKE_TIMEOUT = 10.0


class AMQPProtocol(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = server.loop
        self.conn = ServerConnection(
            server.broker.server_properties(),
            frame_max=server.config.frame_max,
            channel_max=server.config.channel_max,
            heartbeat=server.config.heartbeat,
        )
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self._flush_scheduled = False
        self._last_recv = time.monotonic()
        self._last_send = time.monotonic()
        self._heartbeat_handle: asyncio.TimerHandle | None = None
        self._close_handle: asyncio.TimerHandle | None = None
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
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def send_basic_ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self.conn.send_basic_ack(channel, delivery_tag, multiple)
        self._schedule()

    def close_channel(self, channel: int, error: AMQPError) -> None:
        log.info("closing channel %d of %s: %s", channel, self.name, error.reply_text)
        self.conn.close_channel(channel, error)
        self._schedule()

    def close_connection(self, error: AMQPError) -> None:
        log.info("closing connection %s: %s", self.name, error.reply_text)
        self.conn.fail(error)
        self._flush()
        self._drop_later()

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
        self.server.protocols.add(self)
        self._heartbeat_handle = self.loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_timeout)

    def _handshake_timeout(self) -> None:
        if self.conn.state is not State.OPEN and self.transport is not None:
            log.info("handshake timed out for %s", self.name)
            self.transport.close()

    def _flush(self) -> None:
        self._flush_scheduled = False
        data = self.conn.data_to_send()
        transport = self.transport
        if transport is None:
            return
        if data:
            transport.write(data)
            self._last_send = time.monotonic()
        if self.conn.close_after_flush:
            transport.close()

    def _drop_later(self) -> None:
        if self._close_handle is None and self.transport is not None:
            self._close_handle = self.loop.call_later(CLOSE_GRACE, self.transport.close)

    def pause_writing(self) -> None:
        if self.session is not None:
            self.session.set_writable(False)

    def resume_writing(self) -> None:
        if self.session is not None:
            self.session.set_writable(True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.protocols.discard(self)
        for handle in (self._heartbeat_handle, self._close_handle):
            if handle is not None:
                handle.cancel()
        self.transport = None
        if self.session is not None:
            self.session.close()
        self.conn.state = State.CLOSED
        self.server.after_batch()

    # -------------------------------------------------------------------- input
    def data_received(self, data: bytes) -> None:
        self._last_recv = time.monotonic()
        self._handle(self.conn.receive_data(data))
        # The connection stopped early so that its own replies keep request order: the
        # events before them are handled now, so it can go on.
        while self.conn.input_pending and self.transport is not None:
            self._handle(self.conn.receive_data(b""))

    def _handle(self, events: list[Any]) -> None:
        session = self.session
        for event in events:
            if type(event) is PublishReceived:
                if session is not None:
                    self.published_since_check = True
                    session.publish(
                        event.channel,
                        event.exchange,
                        event.routing_key,
                        event.mandatory,
                        event.immediate,
                        event.exchange_and_key,
                        event.properties,
                        event.body,
                    )
            elif type(event) is MethodReceived:
                if session is not None:
                    session.handle(event.channel, event.method)
            else:
                self._control(event)
                session = self.session
        if session is not None and session.held_by and not self.held:
            self.held = True
            self._update_reading()
        if session is not None and (session.pending_confirms or self.published_since_check):
            # what this batch published is made durable (one fsync, one stream chunk)
            # before its confirms go out and before stream consumers see it
            self.published_since_check = False
            self.server.after_batch()
            session.flush_confirms()
        if self.conn.has_output() or self.conn.close_after_flush:
            self._schedule()

    def _control(self, event: Any) -> None:
        conn = self.conn
        if isinstance(event, ChannelOpened):
            if self.session is not None:
                self.session.channel_opened(event.channel)
        elif isinstance(event, ChannelClosed):
            if self.session is not None:
                self.session.channel_closed(event.channel)
        elif isinstance(event, StartOkReceived):
            self._start_ok(event)
        elif isinstance(event, TuneOkReceived):
            if self.session is not None:
                self.session.frame_max = event.frame_max
                self.session.channel_max = event.channel_max
                self.session.heartbeat = event.heartbeat
            self._start_heartbeats(event.heartbeat)
        elif isinstance(event, OpenReceived):
            assert self.session is not None
            err = self.session.open_vhost(event.virtual_host)
            if err is not None:
                self.close_connection(err.with_method(spec.CONNECTION, 40))
            else:
                conn.send_open_ok()
        elif isinstance(event, (ConnectionCloseReceived, ConnectionCloseOkReceived)):
            if self.session is not None:
                self.session.close()
        elif isinstance(event, ConnectionFailed):
            log.info("protocol error from %s: %s", self.name, event.error.reply_text)
            if self.session is not None:
                self.session.close()
            self._drop_later()

    def _start_ok(self, event: StartOkReceived) -> None:
        assert self.transport is not None
        peer = self.transport.get_extra_info("peername")
        local = self.transport.get_extra_info("sockname")
        session = Session(self.server.broker, self, peer, local)
        err = session.authenticate(event.mechanism, event.response, event.client_properties)
        if err is not None:
            self.server.broker.unregister(session)
            if err.code == spec.ACCESS_REFUSED and session.capability(
                "authentication_failure_close"
            ):
                self.close_connection(err)  # RabbitMQ names no method here
            elif err.code == spec.ACCESS_REFUSED:
                # As RabbitMQ: a client that cannot read the reason just loses the socket.
                self.conn.close_after_flush = True
                self._schedule()
            else:
                self.close_connection(err.with_method(spec.CONNECTION, 11))
            return
        self.session = session
        session.on_released = self._released
        session.on_close_requested = lambda: self.close_connection(
            errors.error(spec.CONNECTION_FORCED, "closed via management")
        )
        self.conn.send_tune()

    def _released(self) -> None:
        self.held = False
        self._update_reading()

    def _update_reading(self) -> None:
        if self.transport is None:
            return
        if self.held or self.blocked:
            self.transport.pause_reading()
        else:
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
        if self.transport is None:
            return
        now = time.monotonic()
        if now - self._last_recv > 2 * interval:
            log.warning("missed heartbeats from %s, closing TCP connection", self.name)
            if self.session is not None:
                self.session.close()
            self.transport.abort()
            return
        if now - self._last_send >= interval / 2:
            self.conn.send_heartbeat()
            self._flush()
        self._heartbeat_handle = self.loop.call_later(interval / 2, self._heartbeat_tick, interval)

    # ------------------------------------------------------- resource alarms
    def set_blocked(self, blocked: bool, reason: str) -> None:
        from pamqp import commands

        if blocked == self.blocked or self.transport is None:
            return
        self.blocked = blocked
        if self.session is not None and self.session.capability("connection.blocked"):
            if blocked:
                self.send_method(0, commands.Connection.Blocked(reason=reason))
            else:
                self.send_method(0, commands.Connection.Unblocked())
        self._update_reading()

    def shutdown(self, reason: str) -> None:
        """Broker shutdown: connection.close 320 to the client."""
        if self.transport is None:
            return
        if self.conn.state is State.OPEN:
            self.close_connection(
                errors.error(
                    spec.CONNECTION_FORCED,
                    f"broker forced connection closure with reason '{reason}'",
                )
            )
        else:
            self.transport.close()
