"""One AMQP 1.0 connection's view of the broker (RabbitMQ 4.2's rabbit_amqp_reader and the
rabbit_amqp_session processes of its sessions, after the bytes): who it is, its vhost, its
sessions and their links, and the meaning of each frame.

This module holds the connection's own part (SASL, open, sessions, detach, flow control
and close) and the table from events to handlers; the links' halves are mixins:
:mod:`leveret.broker.amqp10_publishing` (the client sends) and
:mod:`leveret.broker.amqp10_consuming` (the client receives). It answers through the
sans-IO connection of its endpoint; the edge flushes once per batch of events."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from leveret.broker import amqp10_presence as presence
from leveret.broker import login, names
from leveret.broker.amqp10_common import (
    CAPABILITIES,
    CHANNEL_MAX,
    HANDLE_MAX,
    INCOMING_WINDOW,
    SILENT_CLOSE_DELAY,
    Amqp10Endpoint,
    LinkError,
    LinkSession,
    SessionError,
)
from leveret.broker.amqp10_consuming import Consuming
from leveret.broker.amqp10_linkpair import ManagementLinks, PairSession
from leveret.broker.amqp10_publishing import Publishing
from leveret.broker.broker import BrokerCore
from leveret.broker.ports import FlowHolder, Traffic, WriteStalls
from leveret.broker.queues import Queue
from leveret.broker.queues.backlog import give_up_holds, release_held
from leveret.broker.users import Permission
from leveret.broker.vhost import VirtualHost
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.amqp10.types import Symbol

log = logging.getLogger(__name__)


class Amqp10Session(names.NamedConnection, Publishing, Consuming, ManagementLinks):
    """An AMQP 1.0 connection, from SASL to close."""

    # RabbitMQ 4 lists these connections with this protocol
    protocol: ClassVar[str] = "AMQP 1-0"

    def __init__(
        self,
        broker: BrokerCore,
        endpoint: Amqp10Endpoint,
        peer: tuple[str, int] | None,
        local: tuple[str, int] | None,
        traffic: Traffic | None,
        frame_max: int,
        heartbeat: int,
    ) -> None:
        self.connected(broker.next_connection_id(), peer, local, traffic)
        self.broker = broker
        self.endpoint = endpoint
        self.conn = endpoint.connection
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self._refusal: login.Refusal | None = None  # a loopback user, refused at open
        self.vhost = ""
        self.vhost_obj: VirtualHost | None = None
        self.permission: Permission | None = None
        self.container_id = ""
        self.client_properties: dict[str, Any] = {}
        self.transport_details: dict[str, Any] = dict(endpoint.details)
        self.sessions: dict[int, LinkSession] = {}
        self.registered = False
        self.closed = False
        self.blocked = False
        # credit flow, as an AMQP 0-9-1 connection (FlowHolder)
        self.writable = True
        self.held_by: set[FlowHolder] = set()
        self.holding: set[FlowHolder] = set()
        self.needs_sync = False
        # --- /management link pairs (amqp10_linkpair) ---
        self.link_pairs: dict[int, PairSession] = {}
        self.owned_queues: list[Queue] = []

    # ------------------------------------ as others see it (and NamedConnection)
    @property
    def channel_count(self) -> int:
        return len(self.sessions)

    def force_close(self, reason: str) -> None:
        if not self.conn.closed and not self.conn.closing:
            self.conn.send_close(presence.forced(reason))
            self.endpoint.edge.schedule()
        self.close()

    # -------------------------------------------------------------- the table
    def handle(self, event: ev.Event) -> None:
        """A frame of the connection, by its handler."""
        handler = _EVENTS[type(event)]
        self.broker.actor = self.username  # who performs what the events tell of
        try:
            # --- /management link pairs (amqp10_linkpair): their links' events ---
            if self.link_pairs and self._pair_event(event):
                return
            handler(self, event)
        except LinkError as exc:  # a transfer's link fails
            self._detach(getattr(event, "channel", 0), getattr(event, "handle", 0), exc.error)
        except SessionError as exc:  # the session cannot go on
            self._fail_session(getattr(event, "channel", 0), exc.error)
        finally:
            self.broker.actor = ""

    # ---------------------------------------------------------------- SASL
    def _sasl_header(self, e: ev.SaslHeaderReceived) -> None:
        self.conn.send_sasl_mechanisms(self.endpoint.mechanisms)

    def _unsupported(self, e: ev.UnsupportedProtocol) -> None:
        self.conn.refuse()

    def _sasl_init(self, e: ev.SaslInitReceived) -> None:
        address = self.peer[0] if self.peer else None
        external, refusal = None, login.NO_CERTIFICATE
        if e.mechanism == "EXTERNAL":
            external, refusal = self.endpoint.certificate()
        result = login.check(
            self.broker,
            e.mechanism,
            e.initial_response,
            self.endpoint.mechanisms,
            address,
            external,
            refusal,
        )
        login.counted(self.broker, "amqp10", "", result)
        if isinstance(result, login.Refusal):
            if result.why in (login.Why.UNKNOWN_MECHANISM, login.Why.NOT_OFFERED):
                log.info("AMQP 1.0 login from %s: %s", self.name, result.reason)
                self.conn.drop()  # before our open, RabbitMQ's reader just closes
                return
            self.auth_mechanism = e.mechanism
            if result.why is login.Why.LOOPBACK:
                # RabbitMQ 4 lets SASL succeed and refuses the loopback user at open
                self._refusal = result
                self.user = self.broker.users.users.get(result.username or "")
                self.conn.send_sasl_outcome(d.SaslCode.OK)
                return
            log.warning("AMQP 1.0 login refused from %s: %s", self.name, result.reason)
            login.refused(self.broker, self, result)
            self.conn.send_sasl_outcome(d.SaslCode.AUTH)
            return
        self.auth_mechanism = e.mechanism
        self.user = result
        self.conn.send_sasl_outcome(d.SaslCode.OK)

    def _sasl_response(self, e: ev.SaslResponseReceived) -> None:
        self.conn.send_sasl_outcome(d.SaslCode.AUTH)  # no mechanism here challenges

    def _amqp_header(self, e: ev.AmqpHeaderReceived) -> None:
        self.conn.send_amqp_header()

    # ---------------------------------------------------------------- open
    def _open(self, e: ev.OpenReceived) -> None:
        open_ = e.open
        self.container_id = open_.container_id
        self.client_properties = {str(k): v for k, v in (open_.properties or {}).items()}
        hostname = open_.hostname or ""
        vhost = hostname[len("vhost:") :] if hostname.startswith("vhost:") else "/"
        refused = self._open_refusal(vhost, open_.idle_time_out)
        if refused is not None:
            if self.broker.compat.v4:
                # RabbitMQ 4.2: a handshake error (the connection is not open yet): logged,
                # and the socket closed after a delay, with no close frame
                log.warning("closing AMQP 1.0 connection %s: %s", self.name, refused.description)
                self.endpoint.edge.close_silently(SILENT_CLOSE_DELAY)
            else:
                self.conn.send_close(refused)
            return
        heartbeat = self.heartbeat
        self.conn.send_open(
            self.broker.cluster_name,
            max_frame_size=self.frame_max,
            channel_max=min(
                CHANNEL_MAX, open_.channel_max if open_.channel_max is not None else CHANNEL_MAX
            ),
            idle_time_out=heartbeat * 1000 // 2,
            offered_capabilities=CAPABILITIES,
            properties=self._server_properties(),
        )
        idle = open_.idle_time_out
        self.endpoint.edge.start_heartbeats(heartbeat, idle / 1000 if idle else None)
        self.endpoint.edge.opened()

    def _open_refusal(self, vhost: str, idle: int | None) -> d.Error | None:
        """Why the connection cannot open (RabbitMQ's checks, in its order), or None:
        then it is open on ``vhost``."""
        user = self.user
        assert user is not None
        if self._refusal is not None:
            login.refused(self.broker, self, self._refusal)
            return d.Error(
                d.UNAUTHORIZED_ACCESS, f"user '{user.name}' can only connect via localhost"
            )
        if vhost not in self.broker.vhosts:
            refusal = login.Refusal(
                login.Why.INVALID_CREDENTIALS, self.auth_mechanism, user.name, ""
            )
            login.refused(self.broker, self, refusal)
            return d.Error(
                d.UNAUTHORIZED_ACCESS,
                f"AMQP 1.0 connection failed: virtual host '{vhost}' does not exist",
            )
        access = presence.vhost_access(self, user, vhost)  # limits, by the RabbitMQ
        if isinstance(access, d.Error):
            return access
        if idle is not None and 0 < idle < 1000:
            return d.Error(
                d.NOT_ALLOWED, f"idle-time-out ({idle} ms) < minimum idle-time-out (1000 ms)"
            )
        self.vhost = vhost
        self.vhost_obj, self.permission = access
        self.registered = presence.opened(self)  # registered, told of (by the RabbitMQ)
        return None

    def _server_properties(self) -> dict[Any, Any]:
        """The open's properties (rabbit_amqp_reader:server_properties): the node, then
        the server properties AMQP 0-9-1 has, but its capabilities table. The product is
        RabbitMQ's name here: RabbitMQ's official AMQP 1.0 clients refuse any other
        ("Connection to non-RabbitMQ server detected"); ``information`` names Leveret."""
        props = {
            Symbol(k): str(v)
            for k, v in sorted(self.broker.server_properties().items())
            if k != "capabilities"
        }
        props[Symbol("product")] = "RabbitMQ"
        return {Symbol("node"): self.broker.node_name, **props}

    def _close(self, e: ev.CloseReceived) -> None:
        self.close()
        self.conn.send_close()

    def _failed(self, e: ev.ConnectionFailed) -> None:
        log.info("AMQP 1.0 connection %s failed: %s", self.name, e.error.description)
        self.close()
        if e.reply:
            self.conn.send_close(e.error)
        else:
            self.conn.drop()

    # ------------------------------------------------------------- sessions
    def _begin(self, e: ev.BeginReceived) -> None:
        handle_max = e.begin.handle_max
        session = LinkSession(e.channel)
        refused = presence.begin(self, session)  # RabbitMQ 3.10.8: connected at begin
        if refused is not None:
            self.conn.send_close(refused)
            return
        self.sessions[e.channel] = session
        self.conn.send_begin(
            e.channel,
            incoming_window=INCOMING_WINDOW,
            handle_max=min(HANDLE_MAX, handle_max) if handle_max is not None else HANDLE_MAX,
        )

    def _end(self, e: ev.EndReceived) -> None:
        self._end_session(e.channel)
        if not e.complete:
            self.conn.send_end(e.channel)

    def _session_failed(self, e: ev.SessionFailed) -> None:
        self._end_session(e.channel)
        self.conn.send_end(e.channel, e.error)

    def _end_session(self, channel: int) -> None:
        self._end_pairs(channel)  # --- /management link pairs (amqp10_linkpair) ---
        session = self.sessions.get(channel)
        with presence.internally(self.broker):  # its consumers go with it
            super()._end_session(channel)
        if session is not None:
            presence.ended(self, session)  # --- its direct connection (amqp10_presence) ---

    def end_session(self, channel: int, error: d.Error) -> None:
        """The broker ends a session (RabbitMQ 3.10.8: its direct connection was closed
        from the management API)."""
        if self.conn.closed or self.conn.closing:
            self._end_session(channel)
        else:
            self._fail_session(channel, error)

    # ---------------------------------------------------------------- links
    def _attach(self, e: ev.AttachReceived) -> None:
        attach = e.attach
        session = self.sessions[e.channel]
        # --- /management link pairs (amqp10_linkpair) ---
        if self._attach_pair(e.channel, e.handle, attach):
            return
        with presence.attaching(self, session, e.handle):  # RabbitMQ 3.10.8's channel 2
            if attach.role:  # the client receives: we send, from a queue
                self._attach_consumer(session, e.handle, attach)
            else:
                self._attach_publisher(session, e.handle, attach)

    def _detach(self, channel: int, handle: int, error: d.Error | None) -> None:
        session = self.sessions.get(channel)
        if session is None:
            return
        session.publishers.pop(handle, None)
        self._drop_link(session, handle)
        self.conn.send_detach(channel, handle, True, error)

    def _detached(self, e: ev.DetachReceived) -> None:
        session = self.sessions.get(e.channel)
        if session is not None:
            session.publishers.pop(e.handle, None)
            self._drop_link(session, e.handle)
        if not e.complete:
            self.conn.send_detach(e.channel, e.handle, e.closed)

    def _link_failed(self, e: ev.LinkFailed) -> None:
        self._detach(e.channel, e.handle, e.error)

    # ---------------------------------------------------------- flow control
    def set_writable(self, writable: bool) -> None:
        if WriteStalls.turn(self, writable) and writable:
            for session in self.sessions.values():
                for link in session.consumers.values():
                    link.queue.dispatch()
            release_held(self)

    def hold(self, publisher: FlowHolder) -> None:
        self.holding.add(publisher)
        publisher.held_by.add(self)

    def awaits_settlements(self) -> bool:
        return any(session.unsettled for session in self.sessions.values())

    def released(self) -> None:
        """Credit flow let go of this publisher: its socket is read again."""
        self.endpoint.edge.released()

    def give_up_holds(self) -> None:
        give_up_holds(self)

    def set_blocked(self, blocked: bool, reason: str) -> None:
        """A resource alarm, or its end (RabbitMQ 4.2's conserve_resources): each
        session's incoming window shuts (0, with a margin of a window's worth for the
        transfers already on their way) or opens again, and a flow tells the client."""
        if blocked == self.blocked:
            return
        self.blocked = blocked
        for channel, session in self.sessions.items():
            own = self.conn.session(channel)
            own.window_margin = INCOMING_WINDOW if blocked else 0
            session.received = 0
            self.conn.send_session_flow(channel, 0 if blocked else INCOMING_WINDOW)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        presence.closing(self)  # its reader's close is told of first
        for channel in list(self.sessions):
            self._end_session(channel)
        self._close_pairs()  # --- /management link pairs (amqp10_linkpair) ---
        release_held(self)
        for holder in list(self.held_by):
            holding = getattr(holder, "holding", None)
            if holding is not None:
                holding.discard(self)
        self.held_by.clear()
        if not self.writable:
            self.writable = True
            WriteStalls.count -= 1
        if self.registered:
            self.broker.unregister(self)


_EVENTS: dict[type, Callable[[Amqp10Session, Any], None]] = {
    ev.SaslHeaderReceived: Amqp10Session._sasl_header,
    ev.UnsupportedProtocol: Amqp10Session._unsupported,
    ev.SaslInitReceived: Amqp10Session._sasl_init,
    ev.SaslResponseReceived: Amqp10Session._sasl_response,
    ev.AmqpHeaderReceived: Amqp10Session._amqp_header,
    ev.OpenReceived: Amqp10Session._open,
    ev.CloseReceived: Amqp10Session._close,
    ev.ConnectionFailed: Amqp10Session._failed,
    ev.BeginReceived: Amqp10Session._begin,
    ev.EndReceived: Amqp10Session._end,
    ev.SessionFailed: Amqp10Session._session_failed,
    ev.AttachReceived: Amqp10Session._attach,
    ev.DetachReceived: Amqp10Session._detached,
    ev.LinkFailed: Amqp10Session._link_failed,
    ev.FlowReceived: Amqp10Session._flow,
    ev.TransferReceived: Amqp10Session._transfer,
    ev.TransferAborted: Amqp10Session._aborted,
    ev.DispositionReceived: Amqp10Session._disposition,
}
