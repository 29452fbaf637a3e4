"""One client connection's view of the broker: authentication, its vhost, its channels,
and the meaning of every event and method it sends, from the protocol header to the close.
Errors are raised as AMQPError anywhere below and turned into channel.close or
connection.close in :meth:`Session.handle`.

The connection's own events (the handshake, channels opening and closing, the close) are
answered through the sans-IO connection of the session's :class:`Endpoint`; what the
channels' methods produce goes out through its :class:`Output`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

from leveret.broker import errors as rabbit
from leveret.broker import login, names, operations
from leveret.broker.broker import BrokerCore
from leveret.broker.channel import (
    CONFIRMED,
    DROPPED,
    PUBLISHED,
    RETURNED,
    Channel,
    Settle,
    TxPublish,
)
from leveret.broker.connection_events import ConnectionEvents
from leveret.broker.events import (
    ChannelClosed,
    ChannelOpened,
    ConnectionAuthorized,
    ConnectionClosed,
    UserAuthenticated,
)
from leveret.broker.message import Message
from leveret.broker.operations import Actor, BindingRequest, authorize_publish
from leveret.broker.ports import WriteStalls
from leveret.broker.queues import Queue
from leveret.broker.queues.backlog import give_up_holds, release_held
from leveret.broker.reply_to import REPLY_PREFIX, REPLY_QUEUE
from leveret.broker.routing import ROUTED, PublishResult
from leveret.broker.users import Permission, User
from leveret.broker.vhost import VirtualHost
from leveret.protocol import errors, spec
from leveret.protocol.errors import AMQPError
from leveret.protocol.spec import Method

if TYPE_CHECKING:
    from leveret.broker.ports import AMQPEndpoint, FlowHolder, Output, Traffic

log = logging.getLogger(__name__)

C = commands


class Session(names.NamedConnection, ConnectionEvents):
    def __init__(
        self,
        broker: BrokerCore,
        output: Output,
        peer: tuple[str, int] | None = None,
        local: tuple[str, int] | None = None,
        traffic: Traffic | None = None,
        endpoint: AMQPEndpoint | None = None,
    ) -> None:
        """``endpoint``: the socket's connection, edge and facts, for a session that
        answers a real connection's events (in-process callers drive it by method)."""
        self.broker = broker
        self.traffic = traffic  # the socket's figures, when there is a socket
        self.output = output
        self.endpoint = endpoint
        self.peer = peer
        self.local = local
        self.id = 0  # the broker's number for it, from its start-ok (or its end) on
        self.user: User | None = None
        self._username = ""
        self.vhost = ""
        self.vhost_obj: VirtualHost = None  # type: ignore[assignment]
        self.permission: Permission | None = None
        # who this connection's operations act as, once its vhost is open
        self.actor = Actor("", None, self, strips_names=True)
        self.client_properties: dict[str, Any] = {}
        self.channels: dict[int, Channel] = {}
        self.writable = True
        self.pending_confirms: set[Channel] = set()
        self.waiting_confirms: set[Channel] = set()  # for the store's fsync (group commit)
        self.exclusive_queues: list[Queue] = []
        self.closed = False
        self.connected_at = 0
        self.frame_max = spec.DEFAULT_FRAME_MAX
        self.channel_max = spec.DEFAULT_CHANNEL_MAX
        self.heartbeat = spec.DEFAULT_HEARTBEAT
        self.auth_mechanism = ""
        # What the transport says of the connection for management (TLS: protocol, suite,
        # client certificate), shown as RabbitMQ shows it.
        self.transport_details: dict[str, Any] = dict(endpoint.details) if endpoint else {}
        # Credit flow: connections whose congestion holds this publisher back, and the
        # publishers this session holds back; the edge reads again once released.
        self.held_by: set[FlowHolder] = set()
        self.holding: set[FlowHolder] = set()
        self.blocked = False  # a resource alarm stopped reading its publishes
        # queues whose consumers got credit back from a run of acks, dispatched when
        # the run is over (:meth:`ack`, :meth:`dispatch_settled`)
        self.settled: dict[Queue, None] = {}
        # counters for management
        self.recv_publish = 0
        self.send_deliver = 0
        self.closed_channel_confirms = 0  # confirms sent on channels since closed
        self.returned_unroutable = 0
        self.dropped_unroutable = 0

    # ------------------------------------------------------------ handshake
    def capability(self, name: str) -> bool:
        caps = self.client_properties.get("capabilities")
        return isinstance(caps, dict) and bool(caps.get(name))

    def authenticate(
        self,
        mechanism: str,
        response: bytes,
        client_properties: dict[str, Any],
        offered: tuple[str, ...] = ("AMQPLAIN", "PLAIN"),
        external_name: str | None = None,
    ) -> AMQPError | None:
        """Check the credentials in connection.start-ok. None when accepted. From here on
        the broker knows of the connection, logged in or not.

        ``offered``: the mechanisms connection.start listed on this connection;
        ``external_name``: who the client's TLS certificate says it is (EXTERNAL)."""
        if not self.id:
            self.id = self.broker.next_connection_id()
            self.connected_at = int(time.time() * 1000)
            self.broker.register(self)
        self.client_properties = client_properties
        self.auth_mechanism = mechanism
        address = self.peer[0] if self.peer else None
        user = login.counted(
            self.broker,
            "amqp091",
            address or "",
            login.check(self.broker, mechanism, response, offered, address, external_name),
        )
        if isinstance(user, login.Refusal):
            return login.amqp_refusal(self.broker, self, user)
        self.user = user
        self._username = user.name
        self.broker.observers.emit(UserAuthenticated(self))
        return None

    def open_vhost(self, vhost: str) -> AMQPError | None:
        assert self.user is not None
        access = login.vhost_access(self.broker, self.user, vhost)
        if isinstance(access, AMQPError):
            return access
        self.vhost = vhost
        self.vhost_obj, self.permission = access
        self.actor = Actor(self.user.name, self.permission, self, strips_names=True)
        self.broker.observers.emit(ConnectionAuthorized(self))
        return None

    @property
    def username(self) -> str:
        return self._username

    # -------------------------------------------------------------- channels
    @property
    def channel_count(self) -> int:
        return len(self.channels)

    def channel_opened(self, number: int) -> AMQPError | None:
        """A channel opens, unless its user has as many as its limit allows: then the
        connection is refused the channel (rabbit_reader:create_channel). None if open."""
        limit = self.broker.user_limit(self._username, "max-channels")
        if limit is not None and self.broker.user_channels(self._username) >= limit:
            # 4.x drops the parentheses (v4.2.9 rabbit_reader.erl:1022-1026)
            shown = limit if self.broker.compat.v4 else f"({limit})"
            return errors.not_allowed(
                f"number of channels opened for user '{self._username}' has reached the "
                f"maximum allowed user limit of {shown}"
            )
        ch = self.channels[number] = Channel(self, number)
        self.broker.observers.emit(ChannelOpened(ch))
        return None

    def channel_closed(self, number: int) -> None:
        ch = self.channels.pop(number, None)
        if ch is not None:
            self.closed_channel_confirms += ch.confirmed
            if ch.reply is not None:
                self.broker.replies.unregister(ch.cancel_replies())
            ch.close()
            self.broker.observers.emit(ChannelClosed(ch))

    def handle(self, number: int, method: Method) -> None:
        ch = self.channels.get(number)
        if ch is None:
            return
        handler = _METHODS.get(type(method))
        self.broker.actor = self._username  # who performs what the events tell of
        try:
            if handler is None:
                raise errors.not_implemented(f"method {method.name} is not supported")
            handler(self, ch, method)
        except AMQPError as exc:
            self.fail(number, exc.with_method(*spec.method_ids(method)))
        finally:
            self.broker.actor = ""

    def fail(self, number: int, exc: AMQPError) -> None:
        if exc.is_hard:
            self.output.close_connection(exc)
            self.close()
        else:
            self.output.close_channel(number, exc)
            self.channel_closed(number)

    def flush_confirms(self) -> None:
        for ch in list(self.pending_confirms):
            ch.flush_confirms()

    def defer_confirms(self, generation: int) -> None:
        """This batch's confirms go out once the store's ``generation`` is durable
        (:meth:`release_confirms`), after those that wait already."""
        pending = self.pending_confirms
        for ch in pending:
            ch.defer_confirms(generation)
        self.waiting_confirms.update(pending)
        pending.clear()

    def release_confirms(self, durable: int) -> None:
        """The store is durable up to generation ``durable``: what waited for it goes out."""
        for ch in list(self.waiting_confirms):
            if ch.release_confirms(durable):
                self.waiting_confirms.discard(ch)

    def set_writable(self, writable: bool) -> None:
        if WriteStalls.turn(self, writable) and writable:
            for ch in list(self.channels.values()):
                ch.kick()
            release_held(self)  # publishers of any protocol read again

    def hold(self, publisher: FlowHolder) -> None:
        """Credit flow: ``publisher`` feeds this session's consumers faster than this
        session's socket drains, so it waits until this session drains again."""
        self.holding.add(publisher)
        publisher.held_by.add(self)

    def awaits_settlements(self) -> bool:
        return any(ch.unacked for ch in self.channels.values())

    def released(self) -> None:
        if self.endpoint is not None:
            self.endpoint.edge.released()

    def give_up_holds(self) -> None:
        give_up_holds(self)

    def force_close(self, reason: str) -> None:
        self.output.close_connection(errors.error(spec.CONNECTION_FORCED, reason))
        self.close()

    def close(self) -> None:
        """The connection is gone (or going): channels close, exclusive queues go."""
        if self.closed:
            return
        self.closed = True
        for number in list(self.channels):
            self.channel_closed(number)
        for queue in self.exclusive_queues:
            if not queue.deleted:
                self.vhost_obj.remove_queue(queue)
        self.exclusive_queues.clear()
        release_held(self)
        for holder in self.held_by:
            holding: set[FlowHolder] | None = getattr(holder, "holding", None)
            if holding is not None:  # a connection or a queue's backlog
                holding.discard(self)
        self.held_by.clear()
        if not self.writable:  # it stalls no one any more
            self.writable = True
            WriteStalls.count -= 1
        if self.id or self.endpoint is None:
            self.broker.unregister(self)
        else:
            # rabbit_reader tells of (and counts) every connection it read, whatever it
            # got to: one that sent nothing, or only its protocol header, too
            self.id = self.broker.next_connection_id()
            self.broker.observers.emit(ConnectionClosed(self))

    # ------------------------------------------------------------ permissions
    def check(self, what: str, kind: str, name: str) -> None:
        operations.check_access(self.vhost_obj, self.actor, what, kind, name)

    def _queue_for(self, ch: Channel, name: str) -> str:
        if name == "":
            if not ch.last_declared_queue:
                raise errors.not_found("no previously declared queue")
            return ch.last_declared_queue
        return name

    def _reply(self, ch: Channel, nowait: bool, method: Method) -> None:
        if not nowait:
            self.output.send_method(ch.number, method)

    # -------------------------------------------------------------- exchange
    def _exchange_declare(self, ch: Channel, m: C.Exchange.Declare) -> None:
        operations.declare_exchange(self.vhost_obj, self.actor, m)
        self._reply(ch, m.nowait, C.Exchange.DeclareOk())

    def _exchange_delete(self, ch: Channel, m: C.Exchange.Delete) -> None:
        operations.delete_exchange(self.vhost_obj, self.actor, m)
        self._reply(ch, m.nowait, C.Exchange.DeleteOk())

    def _exchange_bind(self, ch: Channel, m: C.Exchange.Bind) -> None:
        request = BindingRequest(
            m.source, "exchange", m.destination, m.routing_key, spec.arguments(m)
        )
        operations.bind(self.vhost_obj, self.actor, request)
        self._reply(ch, m.nowait, C.Exchange.BindOk())

    def _exchange_unbind(self, ch: Channel, m: C.Exchange.Unbind) -> None:
        request = BindingRequest(
            m.source, "exchange", m.destination, m.routing_key, spec.arguments(m)
        )
        operations.unbind(self.vhost_obj, self.actor, request)
        self._reply(ch, m.nowait, C.Exchange.UnbindOk())

    # ----------------------------------------------------------------- queue
    def _queue_declare(self, ch: Channel, m: C.Queue.Declare) -> None:
        name = self.actor.name(m.queue)
        if name.startswith(REPLY_QUEUE):
            self._declare_reply_queue(ch, m, name)
            return
        q, created, message_count = operations.declare_queue(self.vhost_obj, self.actor, m)
        if created and q.exclusive_owner is self:
            self.exclusive_queues.append(q)
        ch.last_declared_queue = q.name
        self._reply(
            ch,
            m.nowait,
            spec.reply(
                C.Queue.DeclareOk,
                queue=q.name,
                message_count=message_count,
                consumer_count=q.consumer_count,
            ),
        )

    def _queue_bind(self, ch: Channel, m: C.Queue.Bind) -> None:
        queue = self._queue_for(ch, m.queue)
        key = m.routing_key if (m.routing_key or m.queue) else queue
        request = BindingRequest(m.exchange, "queue", queue, key, spec.arguments(m))
        operations.bind(self.vhost_obj, self.actor, request)
        self._reply(ch, m.nowait, C.Queue.BindOk())

    def _queue_unbind(self, ch: Channel, m: C.Queue.Unbind) -> None:
        queue = self._queue_for(ch, m.queue)
        key = m.routing_key if (m.routing_key or m.queue) else queue
        request = BindingRequest(m.exchange, "queue", queue, key, spec.arguments(m))
        operations.unbind(self.vhost_obj, self.actor, request)
        self.output.send_method(ch.number, C.Queue.UnbindOk())

    def _queue_purge(self, ch: Channel, m: C.Queue.Purge) -> None:
        name = self._queue_for(ch, m.queue)
        count = operations.purge_queue(self.vhost_obj, self.actor, name)
        self._reply(ch, m.nowait, C.Queue.PurgeOk(message_count=count))

    def _queue_delete(self, ch: Channel, m: C.Queue.Delete) -> None:
        def reply(q: Queue | None) -> None:
            count = 0 if q is None else q.message_count
            self._reply(ch, m.nowait, C.Queue.DeleteOk(message_count=count))

        m.queue = self._queue_for(ch, m.queue)  # the shortcut expanded, as rabbit_channel does
        q = operations.delete_queue(self.vhost_obj, self.actor, m, before=reply)
        if q is None:
            reply(None)
        elif q in self.exclusive_queues:
            self.exclusive_queues.remove(q)

    # ----------------------------------------------------------------- basic
    def _basic_qos(self, ch: Channel, m: C.Basic.Qos) -> None:
        """basic.qos. RabbitMQ 4's deprecated feature global_qos: when the configuration
        denies it, global=true is taken as global=false (v4.2.9 rabbit_channel.erl:
        1516-1554)."""
        if m.prefetch_size:
            raise errors.not_implemented(f"prefetch_size!=0 ({m.prefetch_size})")
        compat = self.broker.compat
        if m.global_ and (not compat.v4 or compat.is_permitted("global_qos")):
            ch.global_prefetch = m.prefetch_count
            ch.kick()
        else:
            ch.consumer_prefetch = m.prefetch_count
        self.output.send_method(ch.number, C.Basic.QosOk())

    def _basic_consume(self, ch: Channel, m: C.Basic.Consume) -> None:
        if m.consumer_tag in ch.consumers:
            raise errors.not_allowed(f"attempt to reuse consumer tag '{m.consumer_tag}'")
        name = self._queue_for(ch, m.queue)
        if name == REPLY_QUEUE:
            self._consume_replies(ch, m)
            return
        q = operations.open_queue(self.vhost_obj, self.actor, name)
        args = spec.arguments(m)
        start = q.consumer_start(m.no_ack, ch.consumer_prefetch, args, ch.global_prefetch)
        consumer = ch.consume(q, m.consumer_tag, m.no_ack, m.exclusive, args)
        self._reply(ch, m.nowait, C.Basic.ConsumeOk(consumer_tag=consumer.tag))
        ch.start_consumer(consumer, start)

    def _consume_replies(self, ch: Channel, m: C.Basic.Consume) -> None:
        """Direct reply-to: the channel's one no-ack consumer of its replies (RabbitMQ
        checks no permission here: the replies are the channel's own)."""
        if not m.no_ack:
            raise errors.precondition_failed("reply consumer cannot acknowledge")
        if ch.reply is not None:
            raise errors.precondition_failed("reply consumer already set")
        tag = m.consumer_tag or names.consumer_tag()
        ch.consume_replies(tag, self.broker.replies.register(ch))
        self._reply(ch, m.nowait, C.Basic.ConsumeOk(consumer_tag=tag))

    def _declare_reply_queue(self, ch: Channel, m: C.Queue.Declare, name: str) -> None:
        """Every declare of a reply-to name is passive, as RabbitMQ: it exists while its
        channel consumes (the pseudo-queue itself always does), with one consumer."""
        if name == REPLY_QUEUE:
            found = True
        elif name.startswith(REPLY_PREFIX):
            target = self.broker.replies.resolve(name)
            if target is ch:
                raise errors.Crash()  # RabbitMQ's channel process calls itself
            found = target is not None
        else:
            found = False
        if not found:
            raise rabbit.no_queue(name, self.vhost)
        ch.last_declared_queue = name
        ok = C.Queue.DeclareOk(queue=REPLY_QUEUE, message_count=0, consumer_count=1)
        ok.queue = name  # base64 characters pamqp's name check would refuse
        self._reply(ch, m.nowait, ok)

    def _basic_cancel(self, ch: Channel, m: C.Basic.Cancel) -> None:
        if ch.reply is not None and ch.reply[0] == m.consumer_tag:
            self.broker.replies.unregister(ch.cancel_replies())
            self._reply(ch, m.nowait, C.Basic.CancelOk(consumer_tag=m.consumer_tag))
            return
        ch.cancel(m.consumer_tag or "")
        self._reply(ch, m.nowait, C.Basic.CancelOk(consumer_tag=m.consumer_tag))

    def _basic_get(self, ch: Channel, m: C.Basic.Get) -> None:
        name = self._queue_for(ch, m.queue)
        ch.get(operations.open_queue(self.vhost_obj, self.actor, name), m.no_ack)

    def _basic_ack(self, ch: Channel, m: C.Basic.Ack) -> None:
        ch.settle(Settle.ACK, m.delivery_tag, m.multiple, False)

    def ack(self, number: int, m: C.Basic.Ack) -> None:
        """basic.ack, the per-message method, as :meth:`handle` would take it, except
        that the queues it gives credit back to dispatch at :meth:`dispatch_settled`,
        which the caller runs before anything else of the connection's is handled."""
        ch = self.channels.get(number)
        if ch is None:
            return
        if ch.tx or ch.global_prefetch:
            self.dispatch_settled()
            self.handle(number, m)
            return
        try:
            ch.ack(m.delivery_tag, m.multiple, self.settled)
        except AMQPError as exc:
            self.dispatch_settled()
            self.fail(number, exc.with_method(*spec.method_ids(m)))

    def dispatch_settled(self) -> None:
        """The queues a run of acks gave credit back to push what waits."""
        settled = self.settled
        while settled:
            queue = next(iter(settled))
            del settled[queue]
            if not queue.deleted:
                queue.dispatch()

    def _basic_nack(self, ch: Channel, m: C.Basic.Nack) -> None:
        ch.settle(Settle.NACK, m.delivery_tag, m.multiple, m.requeue)

    def _basic_reject(self, ch: Channel, m: C.Basic.Reject) -> None:
        ch.settle(Settle.REJECT, m.delivery_tag or 0, False, m.requeue)

    def _basic_recover_async(self, ch: Channel, m: C.Basic.RecoverAsync) -> None:
        if not m.requeue:
            raise errors.not_implemented("requeue=false")
        ch.recover()

    def _basic_recover(self, ch: Channel, m: C.Basic.Recover) -> None:
        if not m.requeue:
            raise errors.not_implemented("requeue=false")
        ch.recover()
        self.output.send_method(ch.number, C.Basic.RecoverOk())

    def _channel_flow(self, ch: Channel, m: C.Channel.Flow) -> None:
        if not m.active:
            raise errors.not_implemented("active=false")
        self.output.send_method(ch.number, C.Channel.FlowOk(active=True))

    def _confirm_select(self, ch: Channel, m: C.Confirm.Select) -> None:
        ch.confirm_select()
        self._reply(ch, m.nowait, C.Confirm.SelectOk())

    def _tx_select(self, ch: Channel, m: C.Tx.Select) -> None:
        ch.tx_select()
        self.output.send_method(ch.number, C.Tx.SelectOk())

    def _tx_commit(self, ch: Channel, m: C.Tx.Commit) -> None:
        vhost = self.vhost_obj
        refused = False

        def deliver(publish: TxPublish) -> bool:
            nonlocal refused
            # to the queues it was routed to when published, those that still exist
            exchange, message, mandatory, names = publish
            routed = vhost.queues_named(names)
            result = vhost.publish_to(exchange, message, mandatory, routed=routed)
            refused = refused or result.refused
            return self._published(ch, message, result, seq=0)

        if not ch.tx_commit(deliver):
            return
        if refused:
            # a queue refused a publish (x-overflow reject-publish): RabbitMQ's commit,
            # which waits for the queues to confirm, fails once the rest is applied
            raise errors.precondition_failed("partial tx completion")
        self.output.send_method(ch.number, C.Tx.CommitOk())

    def _tx_rollback(self, ch: Channel, m: C.Tx.Rollback) -> None:
        ch.tx_rollback()
        self.output.send_method(ch.number, C.Tx.RollbackOk())

    # --------------------------------------------------------------- publish
    def publish(
        self,
        number: int,
        exchange_name: str,
        routing_key: str,
        mandatory: bool,
        immediate: bool,
        exchange_and_key: bytes,
        properties: bytes,
        body: bytes,
    ) -> None:
        ch = self.channels.get(number)
        if ch is None:
            return
        message = Message(exchange_name, routing_key, exchange_and_key, properties, body)
        vhost = self.vhost_obj
        try:
            if immediate:
                raise errors.not_implemented("immediate=true")
            # VirtualHost.publish's two halves, called apart: a transaction routes now
            # and delivers at the commit
            reply_suffix = ch.reply[1] if ch.reply is not None else None
            exchange, message = authorize_publish(
                vhost, self.actor, exchange_name, message, reply_suffix
            )
        except AMQPError as exc:
            self.fail(number, exc.with_method(*spec.method_ids(C.Basic.Publish)))
            return
        self.recv_publish += 1
        ch.published += 1
        counts = ch.by_exchange.get(exchange_name)
        if counts is None:
            counts = ch.by_exchange[exchange_name] = [0, 0, 0, 0]
        counts[PUBLISHED] += 1
        seq = 0
        if ch.confirm:
            ch.publish_seq += 1
            seq = ch.publish_seq
        try:
            if ch.tx:
                names = vhost.route_names(exchange, message, ch.tap)
                ch.tx_publishes.append((exchange, message, mandatory, names))
                return
            result = vhost.publish_to(
                exchange, message, mandatory, ch.tap if vhost.tracing else None
            )
        except AMQPError as exc:  # a reply address RabbitMQ's channel fails to decode
            self.fail(number, exc.with_method(*spec.method_ids(C.Basic.Publish)))
            return
        if result is ROUTED:  # the common answer, taken without a call
            if seq:  # ch.confirmed_ok(seq), inline
                ch.confirm_upto = seq
                ch.confirmed += 1
                self.pending_confirms.add(ch)
                counts[CONFIRMED] += 1
        else:
            self._published(ch, message, result, seq)

    def _published(self, ch: Channel, message: Message, result: PublishResult, seq: int) -> bool:
        """Answer what became of a publish: return, confirm or nack; hold this publisher
        back behind congested consumers. False when the publish ended the connection."""
        for holder in result.congested:
            if holder is not self:
                holder.hold(self)
        if not result.routed:
            counts = ch.exchange_counts(message.exchange)
            if result.returned:
                counts[RETURNED] += 1
                self.returned_unroutable += 1
            else:
                counts[DROPPED] += 1
                self.dropped_unroutable += 1
        if result.unstorable:
            # RabbitMQ 3.10 delivers to the other queues, then its channel crashes
            # converting the decimal header for the stream: the connection goes with 541
            self.fail(ch.number, errors.error(spec.INTERNAL_ERROR, ""))
            return False
        if result.returned:
            self.output.send_content(
                ch.number,
                spec.reply(
                    C.Basic.Return,
                    reply_code=spec.NO_ROUTE,
                    reply_text="NO_ROUTE",
                    exchange=message.exchange,
                    routing_key=message.routing_key,
                ),
                message.properties,
                message.body,
            )
        if seq:
            if result.refused:
                if self.endpoint is not None and (ch.confirm_upto or ch in self.waiting_confirms):
                    # the acks before the nack go out first, and only once on disk
                    self.endpoint.edge.sync_confirms()
                ch.confirmed_fail(seq)
            else:
                ch.confirmed_ok(seq)
                ch.exchange_counts(message.exchange)[CONFIRMED] += 1
        return True


#: What each channel method means, by its handler.
_METHODS: dict[type[Method], Callable[[Session, Channel, Any], None]] = {
    C.Exchange.Declare: Session._exchange_declare,
    C.Exchange.Delete: Session._exchange_delete,
    C.Exchange.Bind: Session._exchange_bind,
    C.Exchange.Unbind: Session._exchange_unbind,
    C.Queue.Declare: Session._queue_declare,
    C.Queue.Bind: Session._queue_bind,
    C.Queue.Unbind: Session._queue_unbind,
    C.Queue.Purge: Session._queue_purge,
    C.Queue.Delete: Session._queue_delete,
    C.Basic.Qos: Session._basic_qos,
    C.Basic.Consume: Session._basic_consume,
    C.Basic.Cancel: Session._basic_cancel,
    C.Basic.Get: Session._basic_get,
    C.Basic.Ack: Session._basic_ack,
    C.Basic.Nack: Session._basic_nack,
    C.Basic.Reject: Session._basic_reject,
    C.Basic.Recover: Session._basic_recover,
    C.Basic.RecoverAsync: Session._basic_recover_async,
    C.Channel.Flow: Session._channel_flow,
    C.Confirm.Select: Session._confirm_select,
    C.Tx.Select: Session._tx_select,
    C.Tx.Commit: Session._tx_commit,
    C.Tx.Rollback: Session._tx_rollback,
}
