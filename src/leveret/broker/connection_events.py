"""What a client connection's own events mean, from the protocol header to the close: the
handshake (connection.start, tune, open), channels opening and closing, updated secrets,
the close in either direction and a peer's protocol errors. A part of
:class:`~leveret.broker.session.Session`: its replies go out through the sans-IO
connection of the session's :class:`~leveret.broker.ports.Endpoint`, and what an event
starts or stops at the socket (heartbeats, the handshake's clock) is told to its edge."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from pamqp import commands as C

from leveret.broker.broker import BrokerCore
from leveret.broker.ports import AMQPEndpoint, Output
from leveret.protocol import events as ev
from leveret.protocol import spec
from leveret.protocol.errors import AMQPError

log = logging.getLogger(__name__)


class _Session(Protocol):
    """What the events' handlers use of the session they are part of."""

    broker: BrokerCore
    output: Output
    endpoint: AMQPEndpoint | None
    frame_max: int
    channel_max: int
    heartbeat: int
    blocked: bool

    @property
    def name(self) -> str: ...

    @property
    def _link(self) -> AMQPEndpoint: ...

    def capability(self, name: str) -> bool: ...

    def authenticate(
        self,
        mechanism: str,
        response: bytes,
        client_properties: dict[str, Any],
        offered: tuple[str, ...] = ...,
        external_name: str | None = None,
    ) -> AMQPError | None: ...

    def open_vhost(self, vhost: str) -> AMQPError | None: ...

    def channel_opened(self, number: int) -> AMQPError | None: ...

    def channel_closed(self, number: int) -> None: ...

    def close(self) -> None: ...


class ConnectionEvents:
    """The session's table of the connection's events (a channel's methods are in
    :meth:`Session.handle <leveret.broker.session.Session.handle>`)."""

    def event(self: _Session, event: ev.Event) -> None:
        """A connection or channel event (a channel's methods go to :meth:`handle`)."""
        _EVENTS[type(event)](self, event)

    @property
    def _link(self: _Session) -> AMQPEndpoint:
        assert self.endpoint is not None, "only a session with an endpoint gets events"
        return self.endpoint

    def _header(self: _Session, event: ev.HeaderReceived) -> None:
        link = self._link
        mechanisms = " ".join(link.mechanisms)
        link.connection.send_start(self.broker.server_properties(), mechanisms=mechanisms)

    def _unsupported_protocol(self: _Session, event: ev.UnsupportedProtocol) -> None:
        self._link.connection.send_protocol_header()

    def _start_ok(self: _Session, event: ev.StartOkReceived) -> None:
        link = self._link
        external = link.certificate()[0] if event.mechanism == "EXTERNAL" else None
        err = self.authenticate(
            event.mechanism, event.response, event.client_properties, link.mechanisms, external
        )
        if err is None:
            link.connection.send_tune()
            return
        self.close()
        if err.code == spec.ACCESS_REFUSED and self.capability("authentication_failure_close"):
            self.output.close_connection(err)  # RabbitMQ names no method here
        else:
            # As RabbitMQ: a client that cannot read the reason just loses the socket, and
            # so does one naming a mechanism that is unknown or not offered (an error
            # before tune ends the connection without a word).
            log.info("login failed from %s: %s", self.name, err.reply_text)
            link.connection.drop()

    def _tune_ok(self: _Session, event: ev.TuneOkReceived) -> None:
        self.frame_max = event.frame_max
        self.channel_max = event.channel_max
        self.heartbeat = event.heartbeat
        self._link.edge.start_heartbeats(event.heartbeat)

    def _open(self: _Session, event: ev.OpenReceived) -> None:
        err = self.open_vhost(event.virtual_host)
        if err is not None:
            self.output.close_connection(err.with_method(*spec.method_ids(C.Connection.Open)))
            return
        self._link.connection.send_open_ok()
        self._link.edge.opened()

    def _channel_open(self: _Session, event: ev.ChannelOpenReceived) -> None:
        refused = self.channel_opened(event.channel)
        if refused is not None:
            # a user's channel limit: the connection goes, as rabbit_reader ends it
            self.close()
            self.output.close_connection(refused)
        else:
            self._link.connection.send_channel_open_ok(event.channel)

    def _channel_close(self: _Session, event: ev.ChannelCloseReceived) -> None:
        self.channel_closed(event.channel)
        self._link.connection.send_channel_close_ok(event.channel)

    def _channel_close_ok(self: _Session, event: ev.ChannelCloseOkReceived) -> None:
        self.channel_closed(event.channel)

    def _access_request(self: _Session, event: ev.AccessRequestReceived) -> None:
        self._link.connection.send_access_request_ok(event.channel)  # RabbitMQ: ticket 1

    def _update_secret(self: _Session, event: ev.UpdateSecretReceived) -> None:
        # As RabbitMQ with its internal users: their state cannot expire, so
        # rabbit_access_control:update_state accepts any new secret as it is.
        self._link.connection.send_update_secret_ok()

    def _connection_close(self: _Session, event: ev.ConnectionCloseReceived) -> None:
        self.close()
        self._link.connection.send_close_ok()

    def _connection_close_ok(self: _Session, event: ev.ConnectionCloseOkReceived) -> None:
        self.close()

    def _connection_failed(self: _Session, event: ev.ConnectionFailed) -> None:
        log.info("protocol error from %s: %s", self.name, event.error.reply_text)
        self.close()
        if event.reply:
            self.output.close_connection(event.error)
        else:
            self._link.connection.drop()

    def set_blocked(self: _Session, blocked: bool, reason: str) -> None:
        """A resource alarm blocks this publisher, or no longer does: its state shows it,
        and a client that understands connection.blocked is told."""
        self.blocked = blocked
        if self.capability("connection.blocked"):
            told = C.Connection.Blocked(reason=reason) if blocked else C.Connection.Unblocked()
            self.output.send_method(0, told)


#: What each connection or channel event means, by its handler.
_EVENTS: dict[type, Callable[[Any, Any], None]] = {
    ev.HeaderReceived: ConnectionEvents._header,
    ev.UnsupportedProtocol: ConnectionEvents._unsupported_protocol,
    ev.StartOkReceived: ConnectionEvents._start_ok,
    ev.TuneOkReceived: ConnectionEvents._tune_ok,
    ev.OpenReceived: ConnectionEvents._open,
    ev.ChannelOpenReceived: ConnectionEvents._channel_open,
    ev.ChannelCloseReceived: ConnectionEvents._channel_close,
    ev.ChannelCloseOkReceived: ConnectionEvents._channel_close_ok,
    ev.AccessRequestReceived: ConnectionEvents._access_request,
    ev.UpdateSecretReceived: ConnectionEvents._update_secret,
    ev.ConnectionCloseReceived: ConnectionEvents._connection_close,
    ev.ConnectionCloseOkReceived: ConnectionEvents._connection_close_ok,
    ev.ConnectionFailed: ConnectionEvents._connection_failed,
}
