"""What a stream-protocol connection's own frames mean, from the peer properties to the
close: the handshake (peer properties, SASL through :mod:`leveret.broker.login`, tune,
open), the close in either direction and a peer's protocol errors. A part of
:class:`~leveret.broker.stream_session.StreamSession`, as
:mod:`leveret.broker.connection_events` is of the AMQP 0-9-1 session: replies go out
through the sans-IO connection of the session's endpoint, and what a frame starts or stops
at the socket (heartbeats, the handshake's clock) is told to its edge."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from leveret.broker import login
from leveret.broker.broker import BrokerCore
from leveret.broker.events import ConnectionAuthorized, UserAuthenticated
from leveret.broker.ports import ChunkRef, Endpoint
from leveret.broker.users import Permission, User
from leveret.broker.vhost import VirtualHost
from leveret.protocol.stream import encode
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.connection import ServerConnection
from leveret.protocol.stream.spec import Code

log = logging.getLogger(__name__)


class StreamEdge(Protocol):
    """The server's side of a stream client's socket, as its session sees it."""

    def send(self, data: bytes) -> None: ...

    def send_chunk(
        self, subscription_id: int, chunk: ChunkRef, committed: int | None = None
    ) -> None:
        """A Deliver frame around a stored osiris chunk, its bytes taken from the file
        as they are (sendfile where the socket allows); of version 2 with the id of the
        stream's ``committed`` chunk."""
        ...

    def writable(self) -> bool:
        """False while the socket does not drain: deliveries wait."""
        ...

    def force_close(self, reason: str) -> None:
        """Management (or a deleted vhost) ends the connection."""
        ...

    def start_heartbeats(self, interval: int) -> None: ...

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay`` seconds."""
        ...

    def opened(self) -> None:
        """The open response went out: the handshake's clock stops."""
        ...


#: a stream client's endpoint
StreamEndpoint = Endpoint[ServerConnection, StreamEdge]

# What a stream connection counts for rabbitmq_prometheus's rabbitmq_global_* series
# (protocol="stream"): the commands answered with each error code.
STREAM_ERRORS: dict[int, str] = {
    Code.STREAM_DOES_NOT_EXIST: "stream_does_not_exist",
    Code.SUBSCRIPTION_ID_ALREADY_EXISTS: "subscription_id_already_exists",
    Code.SUBSCRIPTION_ID_DOES_NOT_EXIST: "subscription_id_does_not_exist",
    Code.STREAM_ALREADY_EXISTS: "stream_already_exists",
    Code.STREAM_NOT_AVAILABLE: "stream_not_available",
    Code.SASL_MECHANISM_NOT_SUPPORTED: "sasl_mechanism_not_supported",
    Code.AUTHENTICATION_FAILURE: "authentication_failure",
    Code.SASL_ERROR: "sasl_error",
    Code.SASL_CHALLENGE: "sasl_challenge",
    Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK: "sasl_authentication_failure_loopback",
    Code.VIRTUAL_HOST_ACCESS_FAILURE: "vhost_access_failure",
    Code.UNKNOWN_FRAME: "unknown_frame",
    Code.FRAME_TOO_LARGE: "frame_too_large",
    Code.INTERNAL_ERROR: "internal_error",
    Code.ACCESS_REFUSED: "access_refused",
    Code.PRECONDITION_FAILED: "precondition_failed",
    Code.PUBLISHER_DOES_NOT_EXIST: "publisher_does_not_exist",
}


def count_error(broker: BrokerCore, code: int) -> None:
    """One command answered with ``code`` (rabbit_global_counters' protocol counters)."""
    name = STREAM_ERRORS.get(code)
    if name is not None:
        broker.stream_counters[f"stream_error_{name}"] += 1


class StreamHandshake:
    """The session's table of the connection's own frames (its commands are in
    :class:`~leveret.broker.stream_session.StreamSession`'s)."""

    # what the handshake uses and sets, on the session
    broker: BrokerCore
    endpoint: StreamEndpoint
    peer: tuple[str, int] | None
    advertised: tuple[str, int]
    client_properties: dict[str, str]
    auth_mechanism: str
    user: User | None
    vhost: str
    vhost_obj: VirtualHost | None
    permission: Permission | None
    registered: bool
    frame_max: int
    heartbeat: int

    @property
    def name(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------- the checks
    def peer_properties(self, properties: dict[str, str]) -> dict[str, str]:
        """The client's properties in, the server's out (as rabbit_stream_reader)."""
        self.client_properties = properties
        props = self.broker.server_properties()
        return {
            k: str(props[k])
            for k in ("product", "version", "cluster_name", "platform", "copyright", "information")
        }

    def authenticate(
        self,
        mechanism: str,
        data: bytes,
        external_name: str | None = None,
        external_refusal: str = login.NO_CERTIFICATE,
    ) -> int:
        """A SASL authenticate: the response code. ``external_name``: who the client's
        TLS certificate says it is (EXTERNAL); ``external_refusal``: why there is no one.

        As rabbit_stream_reader answers :func:`leveret.broker.login.check`: a mechanism
        not offered, and a loopback user from elsewhere, are refused without an event;
        AMQPLAIN bytes it cannot read are a SASL error without one; everything else
        refused is told of as user.authentication.failure, and a login that succeeds as
        user.authentication.success."""
        address = self.peer[0] if self.peer else None
        result = login.counted(
            self.broker,
            "stream",
            address or "",
            login.check(
                self.broker,
                mechanism,
                data,
                self.endpoint.mechanisms,
                address,
                external_name,
                external_refusal,
            ),
        )
        if isinstance(result, login.Refusal):
            code = _refusal_code(self, result)
            count_error(self.broker, code)
            return code
        self.auth_mechanism = mechanism
        self.user = result
        self.broker.observers.emit(UserAuthenticated(self))  # type: ignore[arg-type]
        return Code.OK

    def open(self, vhost: str) -> int:
        if self.user is None:
            return Code.VIRTUAL_HOST_ACCESS_FAILURE
        obj = self.broker.vhosts.get(vhost)
        perm = self.broker.users.permission(self.user.name, vhost)
        if obj is None or perm is None:
            count_error(self.broker, Code.VIRTUAL_HOST_ACCESS_FAILURE)
            return Code.VIRTUAL_HOST_ACCESS_FAILURE
        self.vhost, self.vhost_obj, self.permission = vhost, obj, perm
        # tracked from here on, as rabbit_connection_tracking tracks it (management,
        # connection limits, a deleted vhost closing it)
        self.broker.register(self)  # type: ignore[arg-type]
        self.registered = True
        self.broker.observers.emit(ConnectionAuthorized(self))  # type: ignore[arg-type]
        return Code.OK

    def connection_properties(self) -> dict[str, str]:
        host, port = self.advertised
        return {"advertised_host": host, "advertised_port": str(port)}

    # ------------------------------------------------------------------- frames
    def _peer_properties(self, e: ev.PeerProperties) -> None:
        props = self.peer_properties(e.properties)
        self.endpoint.connection.send(encode.peer_properties(e.correlation_id, Code.OK, props))

    def _sasl_handshake(self, e: ev.SaslHandshake) -> None:
        mechanisms = self.endpoint.mechanisms
        self.endpoint.connection.send(encode.sasl_handshake(e.correlation_id, Code.OK, mechanisms))

    def _sasl_authenticate(self, e: ev.SaslAuthenticate) -> None:
        external, refusal = None, login.NO_CERTIFICATE
        if e.mechanism == "EXTERNAL":
            external, refusal = self.endpoint.certificate()
        code = self.authenticate(e.mechanism, e.data, external, refusal)
        conn = self.endpoint.connection
        conn.send(encode.sasl_authenticate(e.correlation_id, code))
        if code == Code.OK:
            conn.send_tune()
        else:
            conn.drop()  # as RabbitMQ: the connection fails after the answer

    def _tune(self, e: ev.Tune) -> None:
        self.frame_max = e.frame_max
        self.heartbeat = e.heartbeat
        self.endpoint.edge.start_heartbeats(e.heartbeat)

    def _open(self, e: ev.Open) -> None:
        code = self.open(e.virtual_host)
        props = self.connection_properties() if code == Code.OK else {}
        self.endpoint.connection.send_open(e.correlation_id, code, props)
        if code == Code.OK:
            self.endpoint.edge.opened()

    def _close(self, e: ev.Close) -> None:
        self.close()
        self.endpoint.connection.send_close_response(e.correlation_id)

    def _close_response(self, e: ev.CloseResponse) -> None:
        pass  # the connection is closed now: the socket ends after the flush

    def _unknown_frame(self, e: ev.UnknownFrame) -> None:
        log.warning("unknown stream command %#x from %s", e.key, self.name)
        count_error(self.broker, Code.UNKNOWN_FRAME)
        self.endpoint.connection.send_close(Code.UNKNOWN_FRAME, "unknown frame")

    def _frame_too_large(self, e: ev.FrameTooLarge) -> None:
        log.warning("stream frame of %d bytes from %s: too large", e.size, self.name)
        count_error(self.broker, Code.FRAME_TOO_LARGE)
        self.endpoint.connection.send_close(Code.FRAME_TOO_LARGE, "frame too large")

    def _connection_failed(self, e: ev.ConnectionFailed) -> None:
        log.info("stream connection %s failed: %s", self.name, e.reason)


def _refusal_code(session: StreamHandshake, refusal: login.Refusal) -> int:
    """A refused login's response code, told of as rabbit_stream_reader tells of it."""
    why = refusal.why
    if why in (login.Why.UNKNOWN_MECHANISM, login.Why.NOT_OFFERED):
        return Code.SASL_MECHANISM_NOT_SUPPORTED
    session.auth_mechanism = refusal.mechanism  # as RabbitMQ, from here on, refused or not
    if why is login.Why.LOOPBACK:
        log.warning("User '%s' can only connect via localhost", refusal.username)
        return Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK
    if why is login.Why.BAD_RESPONSE:
        if refusal.mechanism != "PLAIN":  # (RabbitMQ's AMQPLAIN fails on what it cannot parse)
            return Code.SASL_ERROR
        login.refused(session.broker, session, refusal)  # type: ignore[arg-type]
        return Code.SASL_ERROR
    if refusal.mechanism == "EXTERNAL":
        log.warning("stream EXTERNAL login refused for %r: %s", refusal.username, refusal.reason)
    else:
        log.warning("stream login refused: %s", refusal.reason)
    login.refused(session.broker, session, refusal)  # type: ignore[arg-type]
    return Code.AUTHENTICATION_FAILURE


#: What each of the connection's own frames means, by its handler.
HANDSHAKE: dict[type, Callable[[Any, Any], None]] = {
    ev.PeerProperties: StreamHandshake._peer_properties,
    ev.SaslHandshake: StreamHandshake._sasl_handshake,
    ev.SaslAuthenticate: StreamHandshake._sasl_authenticate,
    ev.Tune: StreamHandshake._tune,
    ev.Open: StreamHandshake._open,
    ev.Close: StreamHandshake._close,
    ev.CloseResponse: StreamHandshake._close_response,
    ev.UnknownFrame: StreamHandshake._unknown_frame,
    ev.FrameTooLarge: StreamHandshake._frame_too_large,
    ev.ConnectionFailed: StreamHandshake._connection_failed,
}
