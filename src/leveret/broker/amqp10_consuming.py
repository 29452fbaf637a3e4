"""The consuming half of an AMQP 1.0 connection (RabbitMQ 4.2's outgoing links): a
consumer's attach to a queue, its deliveries under the link's credit, the client's
dispositions, and the link's end (its unsettled messages back to the queue)."""

from __future__ import annotations

from typing import Any

from leveret.broker import amqp10_addresses as addresses
from leveret.broker import operations
from leveret.broker.amqp10_common import Amqp10Base, LinkError, LinkSession, condition
from leveret.broker.amqp10_links import ConsumerLink, LinkConsumer
from leveret.broker.entry import Entry
from leveret.broker.events import ConsumerCreated, ConsumerDeleted
from leveret.broker.queues import Queue
from leveret.broker.queues.stream_amqp10 import to_amqp10
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10 import events as ev
from leveret.protocol.errors import AMQPError


class Consuming(Amqp10Base):
    """Links on which the client receives."""

    def _attach_consumer(self, session: LinkSession, handle: int, attach: Any) -> None:
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
            if owner is not None and owner is not self.info:
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

    def link_credit(self, channel: int, handle: int) -> int:
        return self.conn.link(channel, handle).credit

    def send_delivery(
        self, link: ConsumerLink, consumer: Any, queue: Queue, entry: Entry, tag: bytes
    ) -> None:
        message = entry.message
        payload = to_amqp10(message.exchange, message.routing_key, message.properties, message.body)
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
                session.figures.ack += len(entries)
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
