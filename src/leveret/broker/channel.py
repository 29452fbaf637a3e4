"""One AMQP channel's delivery state: consumers, outstanding deliveries and their acks,
prefetch, publisher confirms and transactions. It sees its connection as a
:class:`ChannelHost` and settles through the queues' own ack / reject."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from enum import StrEnum
from itertools import takewhile
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from pamqp import commands

from leveret.broker import names
from leveret.broker.consumer import UNLIMITED, Consumer
from leveret.broker.entry import Entry, now_ms
from leveret.broker.events import ConsumerCreated, ConsumerDeleted
from leveret.broker.message import Message
from leveret.broker.ports import ConnectionInfo, FlowHolder
from leveret.broker.queues.base import Queue
from leveret.broker.trace import Tap
from leveret.protocol import errors, spec

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.ports import Output
    from leveret.broker.vhost import VirtualHost


class ChannelHost(FlowHolder, ConnectionInfo, Protocol):
    """The connection a channel belongs to, as the channel sees it."""

    output: Output
    pending_confirms: set[Channel]

    @property
    def vhost_obj(self) -> VirtualHost: ...

    def capability(self, name: str) -> bool: ...


# The per-queue counters of a channel
DELIVER_ACK, DELIVER, GET_ACK, GET, GET_EMPTY, REDELIVER, ACK = range(7)
# and its per-exchange ones
PUBLISHED, CONFIRMED, RETURNED, DROPPED = range(4)


# A transaction's publish: the exchange, the message, mandatory, and the names of the
# queues it was routed to when it was published
TxPublish = tuple["Exchange", Message, bool, list[str]]
# A transaction's ack, nack or reject: its kind, requeue, and the (tag, delivery) pairs
# it took off the unacked list


class Settle(StrEnum):
    """How a client settles a delivery (the method's name)."""

    ACK = "ack"  # basic.ack: done with
    NACK = "nack"  # basic.nack: returned or dropped, several at once
    REJECT = "reject"  # basic.reject: returned or dropped, one


_ACK = Settle.ACK

TxSettle = tuple[Settle, bool, list[tuple[int, "Delivery"]]]


class Delivery(NamedTuple):
    """A message out on this channel, waiting for its ack. A named tuple: one is made
    per delivery, in C (``tuple.__new__``)."""

    queue: Queue
    entry: Entry
    consumer: Consumer | None
    at: int  # when it went out (now_ms): the consumer timeout counts from here


_new_delivery: Callable[[type[Delivery], tuple[Any, ...]], Delivery] = tuple.__new__


class Channel:
    def __init__(self, host: ChannelHost, number: int) -> None:
        self.host = host
        self.number = number
        self.out = host.output
        self.consumers: dict[str, Consumer] = {}
        self.unacked: OrderedDict[int, Delivery] = OrderedDict()
        self.next_tag = 1
        self.consumer_prefetch = 0  # basic.qos global=false: for consumers made later
        self.global_prefetch = 0  # basic.qos global=true: across the channel
        self.confirm = False
        self.publish_seq = 0
        self.confirm_upto = 0  # highest seq waiting to be acked (coalesced per batch)
        # (store generation, highest seq) of batches whose confirms wait for an fsync
        self.confirm_waits: deque[tuple[int, int]] = deque()
        self.settled_upto = 0  # highest seq acked or nacked to the client
        self.tx = False
        self.tx_publishes: list[TxPublish] = []
        self.tx_settles: list[TxSettle] = []
        self.tx_held = 0  # deliveries the transaction's settles took, not yet committed
        self.last_declared_queue = ""
        # direct reply-to: the consumer tag (and its wire form) and the address suffix
        self.reply: tuple[str, str, bytes] | None = None
        self.closed = False
        # counters for management
        self.published = 0
        self.confirmed = 0
        # per queue: [DELIVER_ACK, DELIVER, GET_ACK, GET, GET_EMPTY, REDELIVER, ACK];
        # per exchange: [PUBLISHED, CONFIRMED, RETURNED, DROPPED] (rabbitmq_prometheus's
        # per-object series are by channel and queue, and by channel and exchange)
        self.by_queue: dict[Queue, list[int]] = {}
        self.by_exchange: dict[str, list[int]] = {}

    # ---------------------------------------------------------------- delivery
    @property
    def holder(self) -> FlowHolder:
        return self.host

    @property
    def connection(self) -> ConnectionInfo:
        return self.host

    @property
    def writable(self) -> bool:
        return self.host.writable and not self.closed

    def can_deliver(self) -> bool:
        if not self.host.writable or self.closed:
            return False
        # what a transaction settled counts until it commits (RabbitMQ's limiter hears
        # of the acks then)
        return not self.global_prefetch or len(self.unacked) + self.tx_held < self.global_prefetch

    def credit(self) -> int:
        if not self.host.writable or self.closed:
            return 0
        if not self.global_prefetch:
            return UNLIMITED
        return self.global_prefetch - len(self.unacked) - self.tx_held

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        tag = self.next_tag
        self.next_tag = tag + 1
        counts = self.by_queue.get(queue)
        if counts is None:
            counts = self.by_queue[queue] = [0, 0, 0, 0, 0, 0, 0]
        if consumer.no_ack:
            counts[DELIVER] += 1
        else:
            counts[DELIVER_ACK] += 1
            consumer.unacked += 1
            self.unacked[tag] = _new_delivery(Delivery, (queue, entry, consumer, now_ms()))
        if entry.redelivered:
            counts[REDELIVER] += 1
        m = entry.message
        self.out.send_deliver(
            self.number,
            consumer.tag_wire,
            tag,
            entry.redelivered,
            m.exchange_and_key,
            m.properties,
            m.body,
        )
        if self.host.vhost_obj.tracing:
            self._trace(queue, entry)

    def consume(
        self, queue: Queue, tag: str, no_ack: bool, exclusive: bool, arguments: dict[str, Any]
    ) -> Consumer:
        if tag in self.consumers:
            raise errors.not_allowed(f"attempt to reuse consumer tag '{tag}'")
        if not queue.admits(exclusive):
            raise errors.access_refused(
                f"queue '{queue.name}' in vhost '{queue.vhost}' in exclusive use"
            )
        priority = arguments.get("x-priority", 0)  # its type was checked by the queue
        consumer = Consumer(
            tag or names.consumer_tag(),
            queue,
            self,
            no_ack,
            exclusive,
            self.consumer_prefetch,
            arguments,
            priority,
        )
        self.consumers[consumer.tag] = consumer
        return consumer

    def start_consumer(self, consumer: Consumer, start: Any = None) -> None:
        """Attach after consume-ok went out, so no delivery overtakes it."""
        consumer.queue.add_consumer(consumer, start)
        self.host.vhost_obj.observers.emit(ConsumerCreated(consumer))

    def cancel(self, tag: str) -> Consumer | None:
        consumer = self.consumers.pop(tag, None)
        if consumer is None:
            return None
        queue = consumer.queue
        queue.remove_consumer(consumer)
        self.host.vhost_obj.observers.emit(ConsumerDeleted(consumer))
        if queue.auto_delete and not queue.consumers and not queue.deleted:
            self.host.vhost_obj.remove_queue(queue)
        return consumer

    def consume_replies(self, tag: str, suffix: str) -> None:
        raw = tag.encode()
        self.reply = (tag, suffix, bytes((len(raw),)) + raw)

    def cancel_replies(self) -> str:
        """Stop consuming replies; the address suffix that named this channel."""
        assert self.reply is not None
        suffix = self.reply[1]
        self.reply = None
        return suffix

    def deliver_reply(self, message: Message) -> None:
        """A reply to this channel's address, as RabbitMQ delivers one: no ack expected,
        never redelivered, and the channel's next delivery tag, which it does not use up."""
        if self.closed or self.reply is None:
            return
        self.out.send_deliver(
            self.number,
            self.reply[2],
            self.next_tag,
            False,
            message.exchange_and_key,
            message.properties,
            message.body,
        )

    def consumer_cancelled_by_server(self, consumer: Consumer) -> None:
        """The queue went away: tell a client that asked for cancel notifications."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.host.capability("consumer_cancel_notify") and not self.closed:
            self.out.send_method(
                self.number, commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True)
            )

    def get(self, queue: Queue, no_ack: bool) -> bool:
        entry = queue.get(no_ack)
        counts = self.by_queue.get(queue)
        if counts is None:
            counts = self.by_queue[queue] = [0, 0, 0, 0, 0, 0, 0]
        if entry is None:
            counts[GET_EMPTY] += 1
            self.out.send_method(self.number, commands.Basic.GetEmpty())
            return False
        tag = self.next_tag
        self.next_tag = tag + 1
        if no_ack:
            counts[GET] += 1
        else:
            counts[GET_ACK] += 1
            self.unacked[tag] = Delivery(queue, entry, None, now_ms())
        if entry.redelivered:
            counts[REDELIVER] += 1
        m = entry.message
        self.out.send_content(
            self.number,
            spec.reply(
                commands.Basic.GetOk,
                delivery_tag=tag,
                redelivered=entry.redelivered,
                exchange=m.exchange,
                routing_key=m.routing_key,
                message_count=queue.message_count,
            ),
            m.properties,
            m.body,
        )
        if self.host.vhost_obj.tracing:
            self._trace(queue, entry)
        return True

    @property
    def tap(self) -> Tap:
        """Who this channel is, in traces."""
        return Tap(self.host.name, self.number, self.host.username)

    def _trace(self, queue: Queue, entry: Entry) -> None:
        self.host.vhost_obj.trace_delivery(queue.name, entry.message, entry.redelivered, self.tap)

    # ----------------------------------------------------------------- settling
    def _collect(self, tag: int, multiple: bool) -> list[Delivery]:
        """Take what an ack/nack/reject of ``tag`` settles off the unacked list
        (rabbit_channel:collect_acks)."""
        unacked = self.unacked
        if multiple and tag == 0:
            out = list(unacked.values())
            unacked.clear()
            return out
        if tag not in unacked:
            raise errors.precondition_failed(f"unknown delivery tag {tag}")
        if not multiple:
            return [unacked.pop(tag)]
        # tags are in delivery order: those up to ``tag`` are at the front
        pop = unacked.pop
        return [pop(t) for t in list(takewhile(tag.__ge__, unacked))]

    def _collect_tagged(self, tag: int, multiple: bool) -> list[tuple[int, Delivery]]:
        """:meth:`_collect` for a transaction, keeping the tags for a rollback."""
        unacked = self.unacked
        if multiple and tag == 0:
            tags = list(unacked)
        elif tag not in unacked:
            raise errors.precondition_failed(f"unknown delivery tag {tag}")
        elif multiple:
            tags = list(takewhile(tag.__ge__, unacked))
        else:
            tags = [tag]
        return [(t, unacked.pop(t)) for t in tags]

    def _covered(self, tag: int, multiple: bool) -> list[Delivery]:
        """The deliveries an ack/nack/reject of ``tag`` would settle, left in place."""
        if multiple:
            return [d for t, d in self.unacked.items() if tag == 0 or t <= tag]
        d = self.unacked.get(tag)
        return [d] if d is not None else []

    def settle(self, kind: Settle, tag: int, multiple: bool, requeue: bool) -> None:
        """ack, nack or reject. In a transaction, what it settles leaves the unacked list
        at once, as in RabbitMQ (settling a tag twice is an unknown tag), and the queues
        hear of it at the commit; a rollback puts it back."""
        if kind is not _ACK:
            for d in self._covered(tag, multiple):
                d.queue.check_reject()
        if self.tx:
            taken = self._collect_tagged(tag, multiple)
            self.tx_settles.append((kind, requeue, taken))
            self.tx_held += len(taken)
            return
        self._apply(kind, self._collect(tag, multiple), requeue)

    def ack(self, tag: int, multiple: bool, settled: dict[Queue, None]) -> None:
        """basic.ack outside a transaction and without a global prefetch (the common
        case): the queues hear of it now; those whose consumers got credit back are
        added to ``settled``, to dispatch once a run of acks is over (one dispatch of
        many messages instead of one per ack; nothing a client sees depends on when,
        between two acks of one read, a queue dispatches)."""
        deliveries = self._collect(tag, multiple)
        if len(deliveries) == 1:  # the per-message ack
            d = deliveries[0]
            queue = d.queue
            consumer = d.consumer
            if consumer is not None:
                consumer.unacked -= 1
            counts = self.by_queue.get(queue)
            if counts is not None:
                counts[ACK] += 1
            queue.ack((d.entry,))
            settled[queue] = None
            return
        by_queue: dict[Queue, list[Entry]] = {}
        for d in deliveries:
            consumer = d.consumer
            if consumer is not None:
                consumer.unacked -= 1
            entries = by_queue.get(d.queue)
            if entries is None:
                entries = by_queue[d.queue] = []
            entries.append(d.entry)
        for queue, entries in by_queue.items():
            counts = self.by_queue.get(queue)
            if counts is not None:
                counts[ACK] += len(entries)
            queue.ack(entries)
            settled[queue] = None

    def _apply(self, kind: Settle, deliveries: list[Delivery], requeue: bool) -> None:
        """Settle ``deliveries`` with their queues."""
        by_queue: dict[Queue, list[Entry]] = {}
        last: Queue | None = None
        entries: list[Entry] = []
        for d in deliveries:
            consumer = d.consumer
            if consumer is not None:
                consumer.unacked -= 1
            if d.queue is not last:
                last = d.queue
                entries = by_queue.setdefault(last, [])
            entries.append(d.entry)
        for queue, entries in by_queue.items():
            if kind is _ACK:
                counts = self.by_queue.get(queue)
                if counts is not None:
                    counts[ACK] += len(entries)
                queue.ack(entries)
            else:
                queue.reject(entries, requeue)
            queue.dispatch()
        if deliveries and self.global_prefetch:
            self.kick()

    def kick(self) -> None:
        """Credit came back on this channel: let its queues push again."""
        seen: set[int] = set()
        for consumer in list(self.consumers.values()):
            q = consumer.queue
            if id(q) not in seen:
                seen.add(id(q))
                q.dispatch()

    def recover(self) -> None:
        """basic.recover requeue=true: everything outstanding goes back."""
        deliveries = list(self.unacked.values())
        self.unacked.clear()
        self._requeue(deliveries, by_client=True)

    def _requeue(self, deliveries: list[Delivery], by_client: bool = False) -> None:
        by_queue: dict[Queue, list[Entry]] = {}
        for d in deliveries:
            if d.consumer is not None:
                d.consumer.unacked -= 1
            by_queue.setdefault(d.queue, []).append(d.entry)
        for queue, entries in by_queue.items():
            if by_client:
                queue.recovered(entries)
            else:
                queue.requeue(entries)

    # ---------------------------------------------------------- confirms and tx
    def confirm_select(self) -> None:
        if self.tx:
            raise errors.precondition_failed("cannot switch from tx to confirm mode")
        self.confirm = True

    def tx_select(self) -> None:
        if self.confirm:
            raise errors.precondition_failed("cannot switch from confirm to tx mode")
        self.tx = True

    def tx_commit(self, deliver: Callable[[TxPublish], bool]) -> bool:
        """Commit as RabbitMQ does: the publishes first, each through ``deliver``, then
        the settlements. ``deliver`` answers False when a publish ended the connection:
        the commit stops there (and the settlements not applied are requeued with the
        channel's other outstanding deliveries when it closes)."""
        if not self.tx:
            raise errors.precondition_failed("channel is not transactional")
        publishes, self.tx_publishes = self.tx_publishes, []
        for publish in publishes:
            if not deliver(publish):
                return False
        settles, self.tx_settles = self.tx_settles, []
        self.tx_held = 0
        for kind, requeue, taken in settles:
            self._apply(kind, [d for _, d in taken], requeue)
        return True

    def tx_rollback(self) -> None:
        """Forget the publishes; what the settlements took goes back on the unacked
        list, in delivery-tag order."""
        if not self.tx:
            raise errors.precondition_failed("channel is not transactional")
        self.tx_publishes.clear()
        if self.tx_settles:
            back = self._take_held()
            unacked = self.unacked
            merged = sorted([*unacked.items(), *back], key=_tag)
            unacked.clear()
            unacked.update(merged)

    @property
    def acks_uncommitted(self) -> int:
        """The deliveries the transaction acked (RabbitMQ counts no nack or reject)."""
        return sum(len(taken) for kind, _, taken in self.tx_settles if kind is _ACK)

    def _take_held(self) -> list[tuple[int, Delivery]]:
        held = [pair for _, _, taken in self.tx_settles for pair in taken]
        self.tx_settles = []
        self.tx_held = 0
        return held

    def confirmed_ok(self, seq: int) -> None:
        self.confirm_upto = seq
        self.confirmed += 1
        self.host.pending_confirms.add(self)

    def confirmed_fail(self, seq: int) -> None:
        self.flush_confirms(upto=seq - 1)
        self.out.send_method(self.number, commands.Basic.Nack(delivery_tag=seq, multiple=False))
        self.settled_upto = max(self.settled_upto, seq)

    def exchange_counts(self, exchange: str) -> list[int]:
        """The counters of publishes to ``exchange`` on this channel."""
        counts = self.by_exchange.get(exchange)
        if counts is None:
            counts = self.by_exchange[exchange] = [0, 0, 0, 0]
        return counts

    def total(self, index: int) -> int:
        """One per-queue counter summed over the queues."""
        return sum(c[index] for c in self.by_queue.values())

    def exchange_total(self, index: int) -> int:
        return sum(c[index] for c in self.by_exchange.values())

    @property
    def unconfirmed(self) -> int:
        """Publishes in confirm mode not yet acked or nacked to the client (confirms go
        out in order, coalesced once per batch)."""
        return self.publish_seq - self.settled_upto

    def defer_confirms(self, generation: int) -> None:
        """The confirms gathered since the last flush wait for the store's
        ``generation`` to be durable."""
        if self.confirm_upto:
            self.confirm_waits.append((generation, self.confirm_upto))
            self.confirm_upto = 0

    def release_confirms(self, durable: int) -> bool:
        """The store is durable up to generation ``durable``: one basic.ack(multiple) for
        the confirms that waited for it. True when none waits any more."""
        waits = self.confirm_waits
        upto = 0
        while waits and waits[0][0] <= durable:
            upto = waits.popleft()[1]
        if upto and not self.closed:
            self.out.send_basic_ack(self.number, upto, True)
            self.settled_upto = max(self.settled_upto, upto)
        return not waits

    def flush_confirms(self, upto: int | None = None) -> None:
        """Send one basic.ack(multiple) for every confirm gathered since the last flush."""
        target = self.confirm_upto if upto is None else min(upto, self.confirm_upto)
        if target and not self.closed:
            self.out.send_basic_ack(self.number, target, True)
            self.settled_upto = max(self.settled_upto, target)
        if upto is None or target == self.confirm_upto:
            self.confirm_upto = 0
            self.host.pending_confirms.discard(self)

    # ------------------------------------------------------------------- close
    def close(self) -> None:
        """The channel is gone: requeue what is outstanding, drop consumers."""
        if self.closed:
            return
        self.closed = True
        self.host.pending_confirms.discard(self)
        for tag in list(self.consumers):
            self.cancel(tag)
        if self.tx_settles:  # settled in a transaction never committed: back too
            held = sorted([*self.unacked.items(), *self._take_held()], key=_tag)
            deliveries = [d for _, d in held]
        else:
            deliveries = list(self.unacked.values())
        self.unacked.clear()
        self._requeue(deliveries)


def _tag(pair: tuple[int, Delivery]) -> int:
    return pair[0]
