"""One AMQP 1.0 connection's view of the broker (RabbitMQ 4.2's rabbit_amqp_reader and the
rabbit_amqp_session processes of its sessions, after the bytes): who it is, its vhost, its
sessions and their links, and the meaning of each frame.

It answers through the sans-IO connection of its endpoint; the edge flushes once per batch
of events. What a publisher sends unsettled is confirmed (the ``accepted`` outcome) once
it is on disk: the server calls :meth:`Amqp10Session.flush_confirms` after the batch's
sync, as for AMQP 0-9-1's confirms."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from leveret.broker import amqp10_addresses as addresses
from leveret.broker import login, names, operations
from leveret.broker.amqp10_links import MAX_LINK_CREDIT, ConsumerLink, LinkConsumer, PublisherLink
from leveret.broker.broker import BrokerCore
from leveret.broker.entry import Entry
from leveret.broker.events import (
    ConnectionAuthorized,
    ConsumerCreated,
    ConsumerDeleted,
    UserAuthenticated,
)
from leveret.broker.message import Message
from leveret.broker.operations import Actor
from leveret.broker.ports import Endpoint, FlowHolder, Traffic, WriteStalls
from leveret.broker.queues import Queue
from leveret.broker.queues.stream_amqp091 import to_amqp091
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.broker.users import Permission, User
from leveret.broker.vhost import VirtualHost
from leveret.protocol import spec
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.amqp10.server import ServerConnection
from leveret.protocol.amqp10.types import Symbol
from leveret.protocol.errors import AMQPError

log = logging.getLogger(__name__)

#: RabbitMQ 4.2's session incoming window, and when it is opened again
INCOMING_WINDOW = 400
#: the highest link handle a session takes (RabbitMQ 4.2's link_max_per_session - 1)
HANDLE_MAX = 255
#: sessions per connection (session_max_per_connection 64: channel-max 63)
CHANNEL_MAX = 63
#: the capabilities RabbitMQ 4's open offers
CAPABILITIES = ("LINK_PAIR_V1_0", "ANONYMOUS-RELAY")
#: the AMQP error codes of the broker's operations, as AMQP 1.0 conditions
_CONDITIONS = {
    spec.ACCESS_REFUSED: d.UNAUTHORIZED_ACCESS,
    spec.NOT_FOUND: d.NOT_FOUND,
    spec.RESOURCE_LOCKED: d.RESOURCE_LOCKED,
    spec.PRECONDITION_FAILED: d.PRECONDITION_FAILED,
    spec.NOT_ALLOWED: d.NOT_ALLOWED,
}


def condition(error: AMQPError) -> d.Error:
    """An operation's AMQP 0-9-1 error as an AMQP 1.0 one: the condition of its code,
    its text without the ``NOT_FOUND - `` prefix."""
    text = error.reply_text
    _, sep, rest = text.partition(" - ")
    return d.Error(_CONDITIONS.get(error.code, d.INTERNAL_ERROR), rest if sep else text)


class LinkError(Exception):
    """A link is refused or fails: it is detached with ``error``."""

    def __init__(self, error: d.Error) -> None:
        super().__init__(error.description)
        self.error = error


class Amqp10Edge(Protocol):
    """The server's side of an AMQP 1.0 client's socket, as its session sees it."""

    def schedule(self) -> None:
        """Output waits in the connection: flush it at the end of this turn."""
        ...

    def start_heartbeats(self, interval: int, send_every: float | None = None) -> None: ...

    def opened(self) -> None: ...

    def force_close(self, reason: str) -> None: ...


Amqp10Endpoint = Endpoint[ServerConnection, Amqp10Edge]


@dataclass(eq=False)
class _Session:
    """One AMQP 1.0 session: its links by handle, and what it sent unsettled."""

    channel: int
    publishers: dict[int, PublisherLink] = field(default_factory=dict)
    consumers: dict[int, ConsumerLink] = field(default_factory=dict)
    # delivery-id -> (link, queue, entry) of what a consumer has not settled
    unsettled: dict[int, tuple[ConsumerLink, Queue, Entry]] = field(default_factory=dict)
    # delivery-ids of publishes to confirm once they are on disk
    confirms: list[int] = field(default_factory=list)
    received: int = 0  # transfers since the incoming window was last opened


class Amqp10Session:
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
        self.broker = broker
        self.endpoint = endpoint
        self.conn = endpoint.connection
        self.peer = peer
        self.local = local
        self.traffic = traffic
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.id = broker.next_connection_id()
        self.connected_at = int(time.time() * 1000)
        self.auth_mechanism = ""
        self.user: User | None = None
        self._refusal: login.Refusal | None = None  # a loopback user, refused at open
        self.vhost = ""
        self.vhost_obj: VirtualHost | None = None
        self.permission: Permission | None = None
        self.container_id = ""
        self.client_properties: dict[str, Any] = {}
        self.transport_details: dict[str, Any] = dict(endpoint.details)
        self.sessions: dict[int, _Session] = {}
        self.registered = False
        self.closed = False
        self.blocked = False
        # credit flow, as an AMQP 0-9-1 connection (FlowHolder)
        self.writable = True
        self.held_by: set[FlowHolder] = set()
        self.holding: set[FlowHolder] = set()
        self.needs_sync = False

    # ------------------------------------------------------ as others see it
    @property
    def name(self) -> str:
        return names.connection_name(self.peer, self.local)

    @property
    def username(self) -> str:
        return self.user.name if self.user is not None else ""

    @property
    def channel_count(self) -> int:
        return len(self.sessions)

    @property
    def actor(self) -> Actor:
        assert self.user is not None
        return Actor(self.user.name, self.permission, self)

    def force_close(self, reason: str) -> None:
        if not self.conn.closed and not self.conn.closing:
            self.conn.send_close(d.Error(d.CONNECTION_FORCED, reason))
            self.endpoint.edge.schedule()
        self.close()

    # -------------------------------------------------------------- the table
    def handle(self, event: ev.Event) -> None:
        """A frame of the connection, by its handler."""
        handler = _EVENTS[type(event)]
        try:
            handler(self, event)
        except LinkError as exc:  # a transfer's link fails
            self._detach(getattr(event, "channel", 0), getattr(event, "handle", 0), exc.error)

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
        access = login.vhost_access(self.broker, user, vhost)
        if isinstance(access, AMQPError):
            return condition(access)
        if idle is not None and 0 < idle < 1000:
            return d.Error(
                d.NOT_ALLOWED, f"idle-time-out ({idle} ms) < minimum idle-time-out (1000 ms)"
            )
        self.vhost = vhost
        self.vhost_obj, self.permission = access
        self.broker.register(self)
        self.registered = True
        self.broker.observers.emit(UserAuthenticated(self))
        self.broker.observers.emit(ConnectionAuthorized(self))
        return None

    def _server_properties(self) -> dict[Any, Any]:
        props = {
            Symbol(k): str(v)
            for k, v in sorted(self.broker.server_properties().items())
            if k != "capabilities"
        }
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
        self.sessions[e.channel] = _Session(e.channel)
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
        session = self.sessions.pop(channel, None)
        if session is None:
            return
        for link in list(session.consumers.values()):
            self._drop_consumer(session, link)

    # ---------------------------------------------------------------- links
    def _attach(self, e: ev.AttachReceived) -> None:
        attach = e.attach
        session = self.sessions[e.channel]
        if attach.role:  # the client receives: we send, from a queue
            self._attach_consumer(session, e.handle, attach)
        else:
            self._attach_publisher(session, e.handle, attach)

    def _refuse_attach(self, channel: int, handle: int, attach: Any, error: d.Error) -> None:
        """As RabbitMQ: an attach with a null terminus on our side, then the detach."""
        self.conn.send_attach(
            channel,
            handle,
            source=attach.source if attach.role else None,
            target=None if attach.role else attach.target,
        )
        self.conn.send_detach(channel, handle, True, error)

    def _attach_publisher(self, session: _Session, handle: int, attach: Any) -> None:
        target = attach.target
        address = target.address if isinstance(target, d.Target) else None
        vhost = self.vhost_obj
        assert vhost is not None
        try:
            dest = addresses.target(address)
            exchange = None
            if dest.exchange is not None:
                name = dest.exchange
                operations.check_access(vhost, self.actor, "write", "exchange", name)
                exchange = vhost.exchanges.get(name)
                if exchange is None:
                    raise LinkError(
                        d.Error(d.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost.name}'")
                    )
                if exchange.internal:
                    raise LinkError(
                        d.Error(
                            d.UNAUTHORIZED_ACCESS,
                            f"forbidden to publish to internal exchange '{name}' in vhost "
                            f"'{vhost.name}'",
                        )
                    )
                if dest.queue is not None and dest.queue not in vhost.queues:
                    raise LinkError(
                        d.Error(d.NOT_FOUND, f"no queue '{dest.queue}' in vhost '{vhost.name}'")
                    )
        except addresses.BadAddress as exc:
            return self._refuse_attach(session.channel, handle, attach, exc.error)
        except AMQPError as exc:
            return self._refuse_attach(session.channel, handle, attach, condition(exc))
        except LinkError as exc:
            return self._refuse_attach(session.channel, handle, attach, exc.error)
        settled = attach.snd_settle_mode == d.SenderSettleMode.SETTLED
        max_size = vhost.max_message_size
        link = PublisherLink(
            session.channel, handle, attach.name, address, exchange, dest.routing_key,
            settled, max_size,
        )  # fmt: skip
        session.publishers[handle] = link
        self.conn.send_attach(
            session.channel,
            handle,
            source=attach.source,
            target=target,
            snd_settle_mode=attach.snd_settle_mode,
            rcv_settle_mode=d.ReceiverSettleMode.FIRST,
            max_message_size=max_size,
        )
        self.conn.grant_credit(session.channel, handle, MAX_LINK_CREDIT)

    def _attach_consumer(self, session: _Session, handle: int, attach: Any) -> None:
        source = attach.source
        address = source.address if isinstance(source, d.Source) else None
        vhost = self.vhost_obj
        assert vhost is not None
        try:
            origin = addresses.source(address)
            if origin.queue is None:
                raise addresses.BadAddress(
                    d.Error(d.NOT_IMPLEMENTED, f"source address {address!r} is not supported yet")
                )
            operations.check_access(vhost, self.actor, "read", "queue", origin.queue)
            queue = vhost.queues.get(origin.queue)
            if queue is None:
                raise LinkError(
                    d.Error(d.NOT_FOUND, f"no queue '{origin.queue}' in vhost '{vhost.name}'")
                )
            owner = queue.exclusive_owner
            if owner is not None and owner is not self:
                raise LinkError(
                    d.Error(
                        d.RESOURCE_LOCKED,
                        f"cannot obtain exclusive access to locked queue '{queue.name}' in "
                        f"vhost '{vhost.name}'",
                    )
                )
        except addresses.BadAddress as exc:
            return self._refuse_attach(session.channel, handle, attach, exc.error)
        except AMQPError as exc:
            return self._refuse_attach(session.channel, handle, attach, condition(exc))
        except LinkError as exc:
            return self._refuse_attach(session.channel, handle, attach, exc.error)
        settled = attach.snd_settle_mode == d.SenderSettleMode.SETTLED
        link = ConsumerLink(
            self, session.channel, handle, attach.name, address or "", queue, settled
        )
        consumer = LinkConsumer(f"ctag-{handle}", queue, link, settled, False, 0, {})
        link.consumer = consumer
        session.consumers[handle] = link
        self.conn.send_attach(
            session.channel,
            handle,
            source=source,
            target=attach.target,
            snd_settle_mode=d.SenderSettleMode.SETTLED if settled else d.SenderSettleMode.UNSETTLED,
            rcv_settle_mode=attach.rcv_settle_mode,
            initial_delivery_count=0,
            max_message_size=attach.max_message_size,
        )
        queue.add_consumer(consumer)
        vhost.observers.emit(ConsumerCreated(consumer))

    def _detach(self, channel: int, handle: int, error: d.Error | None) -> None:
        session = self.sessions.get(channel)
        if session is None:
            return
        session.publishers.pop(handle, None)
        link = session.consumers.get(handle)
        if link is not None:
            self._drop_consumer(session, link)
        self.conn.send_detach(channel, handle, True, error)

    def _detached(self, e: ev.DetachReceived) -> None:
        session = self.sessions.get(e.channel)
        if session is not None:
            session.publishers.pop(e.handle, None)
            link = session.consumers.get(e.handle)
            if link is not None:
                self._drop_consumer(session, link)
        if not e.complete:
            self.conn.send_detach(e.channel, e.handle, e.closed)

    def _link_failed(self, e: ev.LinkFailed) -> None:
        self._detach(e.channel, e.handle, e.error)

    def _drop_consumer(self, session: _Session, link: ConsumerLink) -> None:
        """A consumer's link goes: what it has not settled goes back to its queue."""
        session.consumers.pop(link.handle, None)
        link.closed = True
        queue = link.queue
        consumer = link.consumer
        if consumer is not None:
            queue.remove_consumer(consumer)
            assert self.vhost_obj is not None
            self.vhost_obj.observers.emit(ConsumerDeleted(consumer))
        back = [(did, e) for did, (lk, q, e) in session.unsettled.items() if lk is link]
        for did, _ in back:
            del session.unsettled[did]
        if back:
            queue.requeue([e for _, e in back])
            queue.dispatch()

    def queue_gone(self, link: ConsumerLink) -> None:
        """The queue a consumer reads was deleted: its link is detached (RabbitMQ 4:
        amqp:resource-deleted)."""
        session = self.sessions.get(link.channel)
        if session is None or link.closed:
            return
        link.consumer = None  # the queue dropped it already
        vhost = self.vhost
        self._drop_consumer(session, link)
        self.conn.send_detach(
            link.channel,
            link.handle,
            True,
            d.Error(d.RESOURCE_DELETED, f"queue '{link.queue.name}' in vhost '{vhost}' deleted"),
        )
        self.endpoint.edge.schedule()

    # ------------------------------------------------------------- publishing
    def _transfer(self, e: ev.TransferReceived) -> None:
        session = self.sessions[e.channel]
        link = session.publishers.get(e.handle)
        if link is None:
            raise LinkError(d.Error(d.NOT_IMPLEMENTED, "transfers on this link are not supported"))
        if len(e.payload) > link.max_message_size:
            raise LinkError(
                d.Error(
                    d.MESSAGE_SIZE_EXCEEDED,
                    f"message size ({len(e.payload)} bytes) > maximum message size "
                    f"({link.max_message_size} bytes)",
                )
            )
        vhost = self.vhost_obj
        assert vhost is not None
        exchange = link.exchange
        routing_key = link.routing_key
        try:
            _, properties, body = to_amqp091(e.payload, "")
        except ValueError:
            raise LinkError(d.Error(d.DECODE_ERROR, "message has no body")) from None
        if exchange is None or routing_key is addresses.SUBJECT:
            raise LinkError(
                d.Error(
                    d.NOT_IMPLEMENTED,
                    "routing by the message's 'to' or subject is not supported yet",
                )
            )
        assert isinstance(routing_key, str)
        message = Message.from_parts(exchange.name, routing_key, properties, body)
        try:
            exchange, message = operations.authorize_publish(
                vhost, self.actor, exchange.name, message
            )
        except AMQPError as exc:
            raise LinkError(condition(exc)) from None
        result = vhost.publish_to(exchange, message, False)
        link.published += 1
        if result.congested:
            for holder in result.congested:
                holder.hold(self)
        if not e.settled:
            if not result.routed:
                self.conn.send_disposition(e.channel, True, e.delivery_id, state=d.RELEASED)
            elif result.refused:
                self.conn.send_disposition(e.channel, True, e.delivery_id, state=d.Rejected())
            else:
                session.confirms.append(e.delivery_id)
                self.needs_sync = True
        self._credit_publisher(session, link)

    def _credit_publisher(self, session: _Session, link: PublisherLink) -> None:
        """Credit again once half is used (and the session's window with it)."""
        own = self.conn.link(session.channel, link.handle)
        if own.credit <= MAX_LINK_CREDIT // 2 and len(session.confirms) < MAX_LINK_CREDIT:
            self.conn.grant_credit(session.channel, link.handle, MAX_LINK_CREDIT)
        session.received += 1
        if session.received >= INCOMING_WINDOW // 2 and not self.blocked:
            session.received = 0
            self.conn.send_session_flow(session.channel, INCOMING_WINDOW)

    def flush_confirms(self) -> None:
        """What was published is on disk: the ``accepted`` outcomes go out, a range at a
        time."""
        self.needs_sync = False
        for channel, session in self.sessions.items():
            ids = session.confirms
            if not ids:
                continue
            session.confirms = []
            first = last = ids[0]
            for did in ids[1:]:
                if did == (last + 1) & 0xFFFF_FFFF:
                    last = did
                    continue
                self.conn.send_disposition(channel, True, first, last, state=d.ACCEPTED)
                first = last = did
            self.conn.send_disposition(channel, True, first, last, state=d.ACCEPTED)

    @property
    def pending_confirms(self) -> bool:
        return self.needs_sync

    # -------------------------------------------------------------- consuming
    def link_credit(self, channel: int, handle: int) -> int:
        return self.conn.link(channel, handle).credit

    def send_delivery(
        self, link: ConsumerLink, consumer: Any, queue: Queue, entry: Entry, tag: bytes
    ) -> None:
        message = entry.message
        payload = to_amqp10(message.exchange, message.routing_key, message.properties, message.body)
        delivery_id = self.conn.send_transfer(link.channel, link.handle, payload, tag, link.settled)
        if not link.settled:
            consumer.unacked += 1
            self.sessions[link.channel].unsettled[delivery_id] = (link, queue, entry)
        self.endpoint.edge.schedule()

    def _flow(self, e: ev.FlowReceived) -> None:
        if e.handle is None:
            return  # the session's window: the connection sends what waited
        session = self.sessions.get(e.channel)
        link = session.consumers.get(e.handle) if session is not None else None
        if link is None:
            if e.echo and session is not None and e.handle in session.publishers:
                self.conn.send_link_flow(e.channel, e.handle)
            return
        link.queue.dispatch()
        own = self.conn.link(e.channel, e.handle)
        if e.drain and own.credit > 0:
            self.conn.drained(e.channel, e.handle, 0)
        elif e.echo:
            self.conn.send_link_flow(e.channel, e.handle)

    def _disposition(self, e: ev.DispositionReceived) -> None:
        if not e.role:
            return  # the client's sender settling what we received: nothing waits on it
        session = self.sessions.get(e.channel)
        if session is None:
            return
        by_queue: dict[Queue, list[Entry]] = {}
        last = e.last
        did = e.first
        while True:
            held = session.unsettled.pop(did, None)
            if held is not None:
                link, queue, entry = held
                if link.consumer is not None:
                    link.consumer.unacked -= 1
                by_queue.setdefault(queue, []).append(entry)
            if did == last:
                break
            did = (did + 1) & 0xFFFF_FFFF
        state = e.state
        for queue, entries in by_queue.items():
            if isinstance(state, d.Accepted):
                queue.ack(entries)
            elif isinstance(state, d.Rejected) or (
                isinstance(state, d.Modified) and state.undeliverable_here
            ):
                queue.reject(entries, False)
            else:  # released, modified: back to the queue
                queue.reject(entries, True)
            queue.dispatch()
        if not e.settled:
            self.conn.send_disposition(e.channel, False, e.first, e.last, True, state)

    def _aborted(self, e: ev.TransferAborted) -> None:
        pass  # what came of it is dropped

    # ---------------------------------------------------------- flow control
    def set_writable(self, writable: bool) -> None:
        if writable == self.writable:
            return
        self.writable = writable
        WriteStalls.count += -1 if writable else 1
        if writable:
            for session in self.sessions.values():
                for link in session.consumers.values():
                    link.queue.dispatch()
            self._release_held()

    def hold(self, publisher: FlowHolder) -> None:
        self.holding.add(publisher)
        publisher.held_by.add(self)

    def _release_held(self) -> None:
        holding, self.holding = self.holding, set()
        for publisher in holding:
            publisher.held_by.discard(self)
            if not publisher.held_by:
                released: Callable[[], None] | None = getattr(publisher, "released", None)
                if released is not None:
                    released()

    def set_blocked(self, blocked: bool, reason: str) -> None:
        """A resource alarm: RabbitMQ 4 stops granting publishers credit; here the socket
        is not read, and the session's window is not opened again."""
        self.blocked = blocked

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for channel in list(self.sessions):
            self._end_session(channel)
        self._release_held()
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
