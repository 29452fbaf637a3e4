"""Classic queues: ready messages, consumers with round-robin dispatch, requeue in
original order, and the RabbitMQ queue arguments Leveret implements (TTL, length limits,
dead-lettering, expiry, priorities, lazy mode). Ready messages beyond memory are paged
to disk (:mod:`leveret.broker.queues.paging`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from leveret.broker import dedup
from leveret.broker.arguments import (
    check_credit_argument,
    check_queue_arguments,
    optional_text,
)
from leveret.broker.compat import RABBITMQ_3_10, RabbitMQ
from leveret.broker.entry import Entry, now_ms
from leveret.broker.memory import MemoryBudget
from leveret.broker.message import Message
from leveret.broker.policies import smaller
from leveret.broker.queues.backlog import HOLD_AT, RELEASE_AT
from leveret.broker.queues.base import Accepted, Overflow, Queue
from leveret.broker.queues.paging import PagedReady
from leveret.broker.queues.ready import FifoReady, PriorityReady
from leveret.broker.queues.utilisation import ConsumerUse
from leveret.broker.ring import PriorityRing

if TYPE_CHECKING:
    from leveret.broker.ports import FlowHolder, Pager, QueueStore
    from leveret.broker.queues.base import DeadLetters, Declaration, QueueHome, Subscriber

_EXPIRATION_FLAG = 0x01  # byte 0 of the property flags: expiration (0x0100)


_YES = Accepted.YES
_BACKLOG = Accepted.BACKLOG
_REFUSED = Accepted.REFUSED
_HOLD = Accepted.HOLD


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class ClassicQueue(Queue):
    type_name = "classic"
    rabbit_type = "rabbit_classic_queue"
    # The consumer arguments a classic queue takes (rabbit_classic_queue:capabilities()).
    CONSUMER_ARGS = frozenset(("x-cancel-on-ha-failover", "x-priority", "x-credit"))
    # rabbit_amqqueue_process:process_args_policy: the smaller of argument and policy for
    # these, the argument for the others.
    POLICY_RULES = {
        "expires": smaller,
        "message-ttl": smaller,
        "max-length": smaller,
        "max-length-bytes": smaller,
    }
    UNSUPPORTED_POLICIES = frozenset(
        (
            "max-age",
            "stream-max-segment-size-bytes",
            "queue-leader-locator",
            "initial-cluster-size",
            "delivery-limit",
            "dead-letter-strategy",
        )
    )

    def __init__(
        self,
        declaration: Declaration,
        dead_letters: DeadLetters | None = None,
        store: QueueStore | None = None,
        pager: Pager | None = None,
        memory: MemoryBudget | None = None,
    ) -> None:
        single_active = declaration.arguments.get("x-single-active-consumer") is True
        super().__init__(declaration, dead_letters, PriorityRing(single_active))
        self._store = store
        self._seq = 0
        self._next_consumer = self.ring.next
        # whether consumers could take messages at once, over time (consumer_capacity)
        self._use = ConsumerUse()
        # delivered and not yet settled, by sequence number (RabbitMQ's pending acks)
        self._outstanding: dict[int, Entry] = {}
        max_priority = _int(self.arguments.get("x-max-priority"))
        self.max_priority: int | None = (
            min(max_priority, 255) if max_priority is not None and max_priority >= 0 else None
        )
        # The ready messages, in the store the declaration picks: by priority
        # (x-max-priority), paged (the queue has a pager), or in memory in order.
        # ``ready`` is its head: with a pager, more may wait on disk behind it.
        if pager is not None:
            # messages kept from before a restart wait in the pager, numbered 1..count
            self._seq = pager.count
        ready: FifoReady
        self._priorities: PriorityReady | None = None
        if self.max_priority is not None:
            ready = self._priorities = PriorityReady(self.max_priority, pager)
        elif pager is not None:
            ready = PagedReady(pager, memory or MemoryBudget())
        else:
            ready = FifoReady()
        self._ready = ready
        self.ready = ready.head
        self._keep = ready.append  # a ready message at the end of the queue
        self.message_ttl: int | None = None
        self.max_length: int | None = None
        self.max_length_bytes: int | None = None
        self.overflow = Overflow.DROP_HEAD
        # how many messages drop-head overflow took from the head, ever (not a figure
        # RabbitMQ shows: the dashboard's Logs view counts what its own queue dropped)
        self.dropped_head = 0
        self._expires: int | None = None
        self.dead_letter_exchange: str | None = None
        self.dead_letter_routing_key: str | None = None
        self._plain = False
        # x-message-deduplication: the identities of the messages in the queue
        self._dedup = dedup.QueueIdentities() if dedup.queue_enabled(self.arguments) else None
        self.configure()

    @classmethod
    def validate(cls, declaration: Declaration, compat: RabbitMQ = RABBITMQ_3_10) -> None:
        check_queue_arguments(declaration.where, declaration.arguments, compat.v4)

    @classmethod
    def create(cls, declaration: Declaration, home: QueueHome) -> ClassicQueue:
        store = pager = None
        storage = home.storage
        if storage is not None:
            vhost, name = declaration.vhost, declaration.name
            if declaration.durable:
                store = storage.queue_store(vhost, name)
            pager = storage.pager(vhost, name, store)
        return cls(declaration, home, store, pager, home.memory)

    @property
    def expires(self) -> int | None:
        return self._expires

    def configure(self) -> None:
        """Settings from arguments and policies, as rabbit_amqqueue_process's
        process_args_policy takes them, also on a live queue: a lower length limit drops
        from the head at once (with drop-head), a new TTL applies to messages published
        from now on, a new expiry restarts the queue's idle time."""
        setting = self.setting
        self.message_ttl = _int(setting("message-ttl"))
        self.max_length = _int(setting("max-length"))
        self.max_length_bytes = _int(setting("max-length-bytes"))
        self.overflow = Overflow.of(setting("overflow"))
        expires = _int(setting("expires"))
        if expires != self._expires:
            self._expires = expires
            self.last_used = now_ms()
        self.dead_letter_exchange = optional_text(setting("dead-letter-exchange"))
        self.dead_letter_routing_key = optional_text(setting("dead-letter-routing-key"))
        mode = optional_text(setting("queue-mode"))
        if mode is not None:  # RabbitMQ's init_queue_mode keeps the mode when none is set
            self.set_queue_mode(mode)
        # No length limit, no TTL, no priorities, nothing to persist: enqueue can take
        # its short path.
        self._plain = (
            self.max_length is None
            and self.max_length_bytes is None
            and self.message_ttl is None
            and self.max_priority is None
            and self._store is None
            and not self.durable
            and self._dedup is None
        )
        if self.ready:
            if self.overflow is Overflow.DROP_HEAD and (
                self.max_length is not None or self.max_length_bytes is not None
            ):
                self._drop_head_overflow()
            self.expire()

    def consumer_start(
        self, no_ack: bool, prefetch: int, arguments: dict[str, Any], global_prefetch: int = 0
    ) -> None:
        self._check_consume_arguments(arguments)
        check_credit_argument(arguments, self.compat.v4)

    # ---------------------------------------------------------------- publishing
    def is_full(self, extra_bytes: int = 0) -> bool:
        if self.max_length is not None and self.message_count >= self.max_length:
            return True
        return (
            self.max_length_bytes is not None
            and self._ready.bytes + extra_bytes > self.max_length_bytes
        )

    def enqueue(self, message: Message) -> Accepted:
        if self._plain and not message.properties[0] & _EXPIRATION_FLAG:
            # The hot path: no limits, no TTL, nothing to persist.
            self._seq += 1
            self.published += 1
            entry = Entry(message, self._seq)
            consumers = self.consumers
            if consumers:
                if not self.ready:
                    consumer = consumers[0] if len(consumers) == 1 else self._next_consumer()
                    if consumer is not None and consumer.has_credit():
                        entry.delivery_count = 1
                        if consumer.no_ack:
                            self.delivered_no_ack += 1
                        else:
                            self.delivered += 1
                            self.unacked += 1
                            self._outstanding[entry.seq] = entry
                        consumer.deliver(self, entry)
                        return _YES
                # No dispatch here: a consumer with credit would have drained the backlog
                # already (every credit change dispatches), so none can take it now.
                self._keep(entry)
                self._use.inactive()
                if len(self._ready) > HOLD_AT and self.unacked and not self.flow.stalled:
                    return _HOLD  # its publisher waits until the consumers drain it
                return _BACKLOG
            self._keep(entry)
            return _YES
        return self._enqueue_checked(message)

    def _hand(self, consumer: Subscriber, entry: Entry) -> None:
        """Account for a delivery, then give the message to the consumer."""
        entry.delivery_count += 1
        if entry.redelivered:
            self.redelivered_count += 1
        if consumer.no_ack:
            self.delivered_no_ack += 1
            self._forget(entry)
        else:
            self.delivered += 1
            self._out(entry)
        consumer.deliver(self, entry)

    def _out(self, entry: Entry) -> None:
        """A message goes out to be acked: outstanding until it is settled."""
        self.unacked += 1
        self._outstanding[entry.seq] = entry

    def _back(self, entry: Entry) -> None:
        """An outstanding message is settled (acked, rejected or returned)."""
        self.unacked -= 1
        self._outstanding.pop(entry.seq, None)

    def _enqueue_checked(self, message: Message) -> Accepted:
        if (
            (self.max_length is not None or self.max_length_bytes is not None)
            and self.is_full(len(message.body))
        ) and self.overflow is not Overflow.DROP_HEAD:
            if self.overflow is Overflow.REJECT_PUBLISH_DLX:
                self._dead_letter(message, "maxlen")
            return _REFUSED
        if self._dedup is not None and not self._dedup.admit(message):
            return _YES  # a duplicate: dropped, as accepted
        self._seq += 1
        self.published += 1
        entry = Entry(message, self._seq)
        if self._priorities is not None:
            entry.priority = self._priorities.priority_of(message)
        if self.message_ttl is not None:
            if self.message_ttl == 0 and (self.ready or not self.ring.any_credit()):
                # TTL 0: delivered now or never
                if self._dedup is not None:
                    self._dedup.left(message)
                self._dead_letter(message, "expired")
                return _YES
            entry.expires_at = now_ms() + self.message_ttl
        expiration = _per_message_ttl(message)
        if expiration is not None:
            at = now_ms() + expiration
            entry.expires_at = min(entry.expires_at, at) if entry.expires_at else at
        if self._store is not None and message.persistent:
            self._store.add(entry)
        if self.consumers and not self.ready:
            consumer = self._next_consumer()
            if consumer is not None:
                self._hand(consumer, entry)
                return _YES
        self._keep(entry)
        if self.max_length is not None or self.max_length_bytes is not None:
            self._drop_head_overflow()
        if self.consumers:
            self.dispatch()
            if self.ready:
                if len(self._ready) > HOLD_AT and self.unacked and not self.flow.stalled:
                    return _HOLD
                return _BACKLOG
        return _YES

    def congested(self) -> FlowHolder | None:
        return self._congested_when(bool(self.ready))

    def _drop_head_overflow(self) -> None:
        while self.ready and (
            (self.max_length is not None and self.message_count > self.max_length)
            or (self.max_length_bytes is not None and self._ready.bytes > self.max_length_bytes)
        ):
            entry = self._ready.popleft()
            self._forget(entry)
            self.dropped_head += 1
            self._dead_letter(entry.message, "maxlen")

    def _forget(self, entry: Entry) -> None:
        """The message has left the queue for good."""
        if self._dedup is not None:
            self._dedup.left(entry.message)
        if entry.store_id and self._store is not None:
            self._store.remove(entry.store_id)
            entry.store_id = 0

    def _dead_letter(self, message: Message, reason: str) -> None:
        if self.dead_letter_exchange is not None and self.dead_letters is not None:
            self.dead_letters.dead_letter(self, message, reason)

    # ---------------------------------------------------------------- consuming
    def admits(self, exclusive: bool) -> bool:
        # As rabbit_amqqueue_process: a single-active-consumer queue refuses every
        # exclusive consumer, even the first.
        if self.ring.single_active:
            return not exclusive
        return super().admits(exclusive)

    def dispatch(self) -> None:
        ready = self.ready
        use = self._use
        if not use.is_active and self.consumers and self.ring.any_credit():
            use.active()  # a consumer can take messages again (RabbitMQ's unblock)
        while ready and self.consumers:
            entry = ready[0]
            if entry.expires_at and entry.expires_at <= now_ms():
                self._expire_head()
                continue
            consumer = self._next_consumer()
            if consumer is None:
                use.inactive()
                break
            self._ready.popleft()
            self._hand(consumer, entry)
        flow = self.flow
        if (flow.holding or flow.stalled) and len(self._ready) <= RELEASE_AT:
            flow.drained()

    def _expire_head(self) -> None:
        entry = self._ready.popleft()
        self._forget(entry)
        self._dead_letter(entry.message, "expired")

    def expire(self) -> None:
        """Drop expired messages from the head (RabbitMQ only expires at the head)."""
        t = now_ms()
        while self.ready and self.ready[0].expires_at and self.ready[0].expires_at <= t:
            self._expire_head()

    def get(self, no_ack: bool) -> Entry | None:
        self.expire()
        if not self.ready:
            self.got_empty += 1
            return None
        self.last_used = now_ms()
        entry = self._ready.popleft()
        entry.delivery_count += 1
        if entry.redelivered:
            self.redelivered_count += 1
        if no_ack:
            self.got_no_ack += 1
            self._forget(entry)
        else:
            self.got += 1
            self._out(entry)
        return entry

    def add_consumer(self, consumer: Subscriber, start: Any = None) -> None:
        self._subscribe(consumer)
        self._use.active()
        self.dispatch()

    # ---------------------------------------------------------------- settling
    def ack(self, entries: Iterable[Entry]) -> None:
        outstanding = self._outstanding
        forget = self._dedup is not None or self._store is not None
        n = 0
        for entry in entries:
            outstanding.pop(entry.seq, None)
            n += 1
            if forget:
                self._forget(entry)
        self.unacked -= n  # what _back does, once for all
        self.acked += n

    def reject(self, entries: Iterable[Entry], requeue: bool) -> None:
        if requeue:
            self.requeue(entries)
            return
        for entry in entries:
            self._back(entry)
            self._forget(entry)
            self._dead_letter(entry.message, "rejected")

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put messages back where they were, marked redelivered."""
        back = list(entries)
        if not back:
            return
        size = 0
        for e in back:
            e.redelivered = True
            self._back(e)
            size += len(e.message.body)
        if self.deleted:
            return
        self._ready.requeue(back, size)
        self.dispatch()

    def purge(self) -> int:
        count = self.message_count
        self.flow.drained()
        if self._dedup is not None:
            self._dedup.clear()  # as the plugin's purge flushes its cache
        for entry in self.ready:
            self._forget(entry)
        store = self._store
        for store_id in self._ready.clear():
            if store is not None:
                store.remove(store_id)
        return count

    def delete(self) -> int:
        self.deleted = True
        count = self.message_count
        self.flow.drained()
        self._ready.close()
        if self._store is not None:
            self._store.drop()
        return count

    # ---------------------------------------------------------------- paging
    def set_queue_mode(self, mode: str | None) -> None:
        """``default`` or ``lazy`` (None: default), from x-queue-mode or a policy, on a
        live queue: lazy keeps only a read-ahead's worth of bodies in memory (a store
        that does not page stays as it is)."""
        self._ready.set_lazy(mode == "lazy")

    @property
    def queue_mode(self) -> str:
        return "lazy" if self._ready.lazy else "default"

    @property
    def ram_bytes(self) -> int:
        return self._ready.ram_bytes

    def page_out(self) -> int:
        """Memory is short: page what is held beyond the head."""
        return self._ready.page_out()

    # ---------------------------------------------------------------- figures
    @property
    def message_count(self) -> int:
        return len(self._ready)

    @property
    def ready_bytes(self) -> int:
        return self._ready.bytes

    def ram_figures(self) -> tuple[int, int]:
        """Ready messages held in memory, and their body bytes."""
        return self._ready.ram_figures()

    def persistent_figures(self) -> tuple[int, int]:
        """Persistent messages kept by a durable queue (as RabbitMQ counts
        messages_persistent: those its store holds), and their body bytes."""
        if not self.durable:
            return 0, 0
        return self._ready.persistent_figures()

    @property
    def unacked_figures(self) -> tuple[int, int, int]:
        size = count = persistent_size = 0
        for e in self._outstanding.values():
            n = len(e.message.body)
            size += n
            if self.durable and e.message.persistent:
                count += 1
                persistent_size += n
        return size, count, persistent_size

    def head_timestamp(self) -> int | None:
        """As rabbit_variable_queue's head_message_timestamp: the earliest timestamp
        property of the first ready message and the oldest outstanding one."""
        heads = [self.ready[0]] if self.ready else []
        if self._outstanding:
            heads.append(self._outstanding[min(self._outstanding)])
        stamps = [
            int(e.message.props.timestamp.timestamp())
            for e in heads
            if e.message.props.timestamp is not None
        ]
        return min(stamps) if stamps else None

    def consumer_capacity(self) -> float | None:
        return self._use.capacity() if self.consumers else 0.0


def _per_message_ttl(message: Message) -> int | None:
    raw = message.properties
    if len(raw) < 2 or not raw[0] & _EXPIRATION_FLAG:
        return None
    expiration = message.props.expiration
    if expiration is None or expiration == "":
        return None
    try:
        return max(0, int(expiration))
    except ValueError:
        return None
