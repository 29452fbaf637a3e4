"""The consuming half of an AMQP 1.0 connection (RabbitMQ 4.2's outgoing links): a
consumer's attach to a queue, its deliveries under the link's credit, the client's
dispositions, and the link's end (its unsettled messages back to the queue)."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

from leveret.broker import amqp10_addresses as addresses
from leveret.broker import names, operations
from leveret.broker.amqp10_common import (
    Amqp10Base,
    LinkError,
    LinkSession,
    SessionError,
    condition,
)
from leveret.broker.amqp10_delivery import delivery, settle_op, stream_delivery
from leveret.broker.amqp10_filters import consumer_spec
from leveret.broker.amqp10_links import ConsumerLink, LinkConsumer, VolatileLink
from leveret.broker.amqp10_message import Amqp10Error, size_error
from leveret.broker.entry import Entry
from leveret.broker.events import (
    ConsumerCreated,
    ConsumerDeleted,
    QueueDeclared,
    QueueDeclaredNew,
)
from leveret.broker.message import Message
from leveret.broker.operations.bindings import BindingRequest, bind
from leveret.broker.queues import Queue
from leveret.broker.queues.stream import StreamQueue
from leveret.broker.queues.stream_filtering import ConsumerFilter, chunk_matcher
from leveret.broker.reply_to import REPLY_PREFIX
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.amqp10.types import Array, Described, Symbol
from leveret.protocol.errors import AMQPError

#: the capabilities of dynamic sources RabbitMQ 4.2 serves
VOLATILE = Symbol("rabbitmq:volatile-queue")
TEMPORARY = Symbol("temporary-queue")
#: the outcomes a consumer may settle with
OUTCOMES = tuple(Symbol(o) for o in ("amqp:accepted:list", "amqp:rejected:list",
                                     "amqp:released:list", "amqp:modified:list"))  # fmt: skip
#: what RabbitMQ 4.2 says of a dynamic node
NODE_PROPERTIES = {
    Symbol("lifetime-policy"): Described(Symbol("amqp:delete-on-close:list"), []),
    Symbol("supported-dist-modes"): Array("symbol", (Symbol("move"),)),
}


#: seconds a link whose credit came with its attach waits for the client's next frame
#: (see Consuming._warm_up). 10 ms was too short on a loaded machine: proton's
#: BlockingReceiver had not yet read the attach reply, read the first transfers with it,
#: and ran its handler inside opening the receiver (the official client's
#: test_stream_read_from_offset_ten, in a full test run).
WARM_UP = 0.05


def _outcomes(source: d.Source) -> tuple[str, ...]:
    """The outcomes a source may use: the client's, if this broker has them all."""
    if source.outcomes is None:
        return OUTCOMES
    unsupported = [o for o in source.outcomes if o not in OUTCOMES]
    if unsupported:
        raise LinkError(d.Error(d.NOT_IMPLEMENTED, f"Outcomes not supported: {unsupported}"))
    return source.outcomes


def _durable(source: Any) -> bool:
    """queue_is_durable: a terminus durability of configuration or unsettled-state."""
    return isinstance(source, d.Source) and bool(source.durable)


def _dynamic_name(container_id: str, link_name: str) -> str:
    """generate_queue_name_dynamic: the container-id and link name when they are short."""
    if len(container_id.encode()) + len(link_name.encode()) < 150:
        return names.generate(f"amq.dyn-{container_id}-{link_name}")
    return names.generate("amq.dyn.gen")


def queue_address(name: str) -> str:
    return "/queues/" + quote(name, safe="")


class Consuming(Amqp10Base):
    """Links on which the client receives."""

    def _attach_consumer(self, session: LinkSession, handle: int, attach: Any) -> None:
        source = attach.source
        vhost = self.vhost_obj
        assert vhost is not None
        settled = attach.snd_settle_mode == d.SenderSettleMode.SETTLED
        try:
            dynamic = isinstance(source, d.Source) and bool(source.dynamic)
            if dynamic:
                source = self._dynamic_source(session, handle, attach, source, settled)
                if source is None:  # a volatile queue's link, attached
                    return
            elif isinstance(source, d.Source):
                source = dataclasses.replace(
                    source, default_outcome=d.RELEASED, outcomes=_outcomes(source)
                )
            address = source.address if isinstance(source, d.Source) else None
            origin = addresses.source(address)
            name = self._source_queue(origin, source)
            operations.check_access(vhost, self.actor, "read", "queue", name)
            queue = vhost.queues.get(name)
            if queue is None:
                raise LinkError(d.Error(d.NOT_FOUND, f"no queue '{name}' in vhost '{vhost.name}'"))
            owner = queue.exclusive_owner
            if owner is not None and owner is not self.info:
                raise LinkError(
                    d.Error(
                        d.RESOURCE_LOCKED,
                        f"cannot obtain exclusive access to locked queue '{queue.name}' in "
                        f"vhost '{vhost.name}'",
                    )
                )
        except (addresses.BadAddress, AMQPError, LinkError) as exc:
            return self._refuse_attach(session.channel, handle, attach, exc)
        if isinstance(source, d.Source):
            v4 = self.broker.compat.v4
            spec = consumer_spec(source.filter, attach.properties, source.filter_types, v4)
        else:
            spec = consumer_spec(None, attach.properties)
        start = None
        if isinstance(queue, StreamQueue):
            try:
                start = queue.resolve_offset(spec.arguments.get("x-stream-offset"))
            except AMQPError as exc:
                return self._refuse_attach(session.channel, handle, attach, condition(exc))
        link = ConsumerLink(
            self, session.channel, handle, attach.name, address or "", queue, settled,
            max_message_size=attach.max_message_size or 0, dynamic=dynamic,
        )  # fmt: skip
        priority = spec.arguments.get("x-priority", 0)
        consumer = LinkConsumer(  # RabbitMQ 4.2's tag: the handle (handle_to_ctag)
            str(handle), queue, link, settled, False, 0, spec.arguments, priority
        )
        link.consumer = consumer
        link.filters = spec.listed
        session.consumers[handle] = link
        if isinstance(queue, StreamQueue):
            queue.set_filter(
                consumer, ConsumerFilter(chunk_matcher(spec.arguments), spec.message_filter)
            )
        if isinstance(source, d.Source) and source.filter is not None:
            source = dataclasses.replace(source, filter=spec.filter)
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
        queue.add_consumer(consumer, start)
        vhost.observers.emit(ConsumerCreated(consumer))
        self.endpoint.edge.after_flush(lambda: self._attach_written(link))

    def _attach_written(self, link: ConsumerLink) -> None:
        link.attach_written = True
        self.endpoint.edge.later(WARM_UP, lambda: self._warm_up(link))

    def _warm_up(self, link: ConsumerLink) -> None:
        """The link's credit counts from now on: once the client sent a frame for it after
        its attach reply was written, or ``WARM_UP`` seconds after. A client that grants
        credit with its attach (proton's prefetch does) gets its first transfers in a
        later read than the attach, as from RabbitMQ, whose queue answers credit from
        another process (a quorum queue once its checkout is committed): a blocking
        client (proton's BlockingReceiver, which flows again once the link is open)
        returns from opening its receiver before messages reach its handler."""
        if link.closed or not link.held:
            return
        link.held = False
        flow, link.held_flow = link.held_flow, None
        if flow is not None:
            self._flow(flow)
        else:
            link.queue.dispatch()
        self.endpoint.edge.schedule()

    def _source_queue(self, origin: addresses.Origin, source: Any) -> str:
        """The queue a source address reads (RabbitMQ 4.2's ensure_source): a v1
        ``/queue/Q`` is declared if missing, a v1 ``/exchange/X/key`` or ``/topic/key``
        gets a new ``amq.gen-`` queue bound to it (neither exclusive nor auto-delete, as
        RabbitMQ 4.2 declares them)."""
        vhost = self.vhost_obj
        assert vhost is not None
        durable = _durable(source)
        if origin.queue is not None:
            if origin.declare:
                self._declare_v1(origin.queue, durable)
            return origin.queue
        assert origin.exchange is not None
        if origin.exchange not in vhost.exchanges:
            raise LinkError(
                d.Error(d.NOT_FOUND, f"no exchange '{origin.exchange}' in vhost '{vhost.name}'")
            )
        name = names.queue_name()
        self._declare_v1(name, durable)
        request = BindingRequest(origin.exchange, "queue", name, origin.routing_key)
        bind(vhost, self.actor, request)
        return name

    def _dynamic_source(
        self, session: LinkSession, handle: int, attach: Any, source: d.Source, settled: bool
    ) -> d.Source | None:
        """A dynamic source (ensure_source): RabbitMQ 4.2's volatile queue (direct
        reply-to: the link is attached here, None returned) or a temporary queue (an
        exclusive classic queue of the link's own, deleted when the link goes: its
        source returned)."""
        caps = set(source.capabilities or ())
        if (
            source.address is None
            and VOLATILE in caps
            and source.durable in (None, 0)
            and source.expiry_policy == "link-detach"
            and source.timeout in (None, 0)
            and settled
        ):
            self._attach_volatile(session, handle, attach, source)
            return None
        if source.address is None and TEMPORARY in caps:
            vhost = self.vhost_obj
            assert vhost is not None
            name = _dynamic_name(self.container_id, attach.name)
            operations.check_access(vhost, self.actor, "configure", "queue", name)
            vhost.observers.emit(QueueDeclared(vhost.name, name))
            self._check_queue_limit(vhost, name)
            vhost.declare_queue(name, False, self.info, False, {})
            vhost.observers.emit(QueueDeclaredNew(vhost.name, name))
            return d.Source(
                address=queue_address(name),
                durable=0,
                expiry_policy="link-detach",
                timeout=0,
                dynamic=True,
                dynamic_node_properties=NODE_PROPERTIES,
                distribution_mode="move",
                default_outcome=d.RELEASED,
                outcomes=_outcomes(source),
                capabilities=(TEMPORARY,),
            )
        raise LinkError(d.Error(d.NOT_IMPLEMENTED, "Dynamic source not supported"))

    def _attach_volatile(
        self, session: LinkSession, handle: int, attach: Any, source: d.Source
    ) -> None:
        """Direct reply-to over AMQP 1.0 (rabbit_volatile_queue): a name that routes to
        this link while it lives; what arrives without credit is dropped."""
        vhost = self.vhost_obj
        assert vhost is not None and vhost.replies is not None
        link = VolatileLink(self, session.channel, handle)
        link.suffix = vhost.replies.register(link)
        session.volatile[handle] = link
        name = REPLY_PREFIX + link.suffix
        self.conn.send_attach(
            session.channel,
            handle,
            source=d.Source(
                address=queue_address(name),
                durable=source.durable,
                expiry_policy=source.expiry_policy,
                timeout=0,
                dynamic=True,
                dynamic_node_properties=NODE_PROPERTIES,
                distribution_mode="move",
                capabilities=(VOLATILE,),
            ),
            target=attach.target,
            snd_settle_mode=d.SenderSettleMode.SETTLED,
            rcv_settle_mode=attach.rcv_settle_mode,
            initial_delivery_count=0,
            max_message_size=attach.max_message_size,
        )

    def send_reply(self, link: VolatileLink, message: Message) -> None:
        """A reply to a volatile queue's link: sent settled if it has credit, else
        dropped (RabbitMQ 4.2 counts it)."""
        if link.closed or not self.writable or self.link_credit(link.channel, link.handle) <= 0:
            link.dropped += 1
            return
        self.conn.send_transfer(link.channel, link.handle, delivery(message), link.next_tag(), True)
        self.endpoint.edge.schedule()

    def _drop_link(self, session: LinkSession, handle: int) -> None:
        """A link on which the client received goes (detached, or its session ended)."""
        link = session.consumers.get(handle)
        if link is not None:
            self._drop_consumer(session, link)
        volatile = session.volatile.pop(handle, None)
        if volatile is not None:
            volatile.closed = True
            vhost = self.vhost_obj
            if vhost is not None and vhost.replies is not None:
                vhost.replies.unregister(volatile.suffix)

    def _end_session(self, channel: int) -> None:
        """A session ends: its consumers go, what they had not settled back to the
        queues."""
        session = self.sessions.pop(channel, None)
        if session is None:
            return
        for handle in [*session.consumers, *session.volatile]:
            self._drop_link(session, handle)

    def _fail_session(self, channel: int, error: d.Error) -> None:
        """The session cannot go on (RabbitMQ's protocol_error in a session): it is
        ended with ``error``."""
        if channel in self.sessions:
            self._end_session(channel)
            self.conn.send_end(channel, error)
            self.endpoint.edge.schedule()

    def _drop_consumer(self, session: LinkSession, link: ConsumerLink) -> None:
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
        if link.dynamic and not queue.deleted:  # a temporary queue goes with its link
            assert self.vhost_obj is not None
            self.vhost_obj.remove_queue(queue)
        elif back:
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

    def link_credit(self, channel: int, handle: int) -> int:
        return self.conn.link(channel, handle).credit

    def send_delivery(
        self, link: ConsumerLink, consumer: Any, queue: Queue, entry: Entry, tag: bytes
    ) -> None:
        message = entry.message
        if isinstance(queue, StreamQueue):  # the entry as stored, at its offset
            payload = stream_delivery(message.body, entry.seq, queue.name)
        else:
            payload = delivery(message, redelivered=entry.redelivered)
        limit = link.max_message_size
        if limit and len(payload) > limit:
            # RabbitMQ 4.2 ends the session (an unsettled delivery goes back to the queue;
            # one its link consumes settled is gone, as there)
            if not link.settled:
                consumer.unacked += 1
                self.sessions[link.channel].unsettled[-1] = (link, queue, entry)
            self._fail_session(link.channel, size_error(len(payload), limit).error)
            return
        delivery_id = self.conn.send_transfer(link.channel, link.handle, payload, tag, link.settled)
        self.sessions[link.channel].figures.delivered(entry.redelivered, link.settled)
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
        if link.held:
            link.held_flow = e
            if link.attach_written:
                self._warm_up(link)
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
        try:
            op = settle_op(state)
        except Amqp10Error as exc:
            raise SessionError(exc.error) from None
        for queue, entries in by_queue.items():
            if op.kind == "modify" and op.annotations:
                queue.annotate(entries, op.annotations)
            if op.kind == "complete" or isinstance(queue, StreamQueue):
                queue.ack(entries)  # a stream: any outcome gives the credit back
                if op.kind == "complete":
                    session.figures.ack += len(entries)
            elif op.kind == "discard" or (op.kind == "modify" and op.undeliverable_here):
                queue.reject(entries, False)
            else:  # released, modified: back to the queue
                queue.reject(entries, True)
            queue.dispatch()
        if not e.settled:
            self.conn.send_disposition(e.channel, False, e.first, e.last, True, state)

    def _aborted(self, e: ev.TransferAborted) -> None:
        pass  # what came of it is dropped
