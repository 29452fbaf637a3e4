"""Classic queues: ready messages, consumers with round-robin dispatch, requeue in
original order, and the RabbitMQ queue arguments Leveret implements (TTL, length limits,
dead-lettering, expiry, priorities)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from leveret.broker.message import Message

if TYPE_CHECKING:
    from leveret.broker.consumer import Consumer


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Entry:
    """A message in one queue."""

    __slots__ = (
        "delivery_count",
        "expires_at",
        "message",
        "priority",
        "redelivered",
        "seq",
        "store_id",
    )

    def __init__(self, message: Message, seq: int, expires_at: int = 0) -> None:
        self.message = message
        self.seq = seq
        self.redelivered = False
        self.expires_at = expires_at
        self.delivery_count = 0
        self.store_id = 0
        self.priority = 0  # only a queue with x-max-priority sets it


def _order(entry: Entry) -> tuple[int, int]:
    """Where an entry stands in ``ready``: higher priority first, then publish order."""
    return (-entry.priority, entry.seq)


class Queue:
    kind = "queue"
    is_stream = False

    def __init__(
        self,
        name: str,
        vhost: str,
        durable: bool = False,
        exclusive_owner: Any = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: dict[str, Any] = arguments.copy() if arguments else {}
        self.ready: deque[Entry] = deque()
        self.ready_bytes = 0
        self.unacked = 0
        self.consumers: list[Consumer] = []
        self._rr = 0
        self._seq = 0
        self.deleted = False
        self.had_consumers = False
        # counters for management and metrics
        self.published = 0
        self.delivered = 0
        self.acked = 0
        self.redelivered_count = 0
        self.last_used = now_ms()
        a = self.arguments
        self.message_ttl: int | None = _int(a.get("x-message-ttl"))
        self.max_length: int | None = _int(a.get("x-max-length"))
        self.max_length_bytes: int | None = _int(a.get("x-max-length-bytes"))
        overflow = a.get("x-overflow", "drop-head")
        self.overflow = overflow.decode() if isinstance(overflow, bytes) else str(overflow)
        self.expires: int | None = _int(a.get("x-expires"))
        dlx = a.get("x-dead-letter-exchange")
        self.dead_letter_exchange: str | None = (
            dlx.decode() if isinstance(dlx, bytes) else dlx if dlx is not None else None
        )
        dlk = a.get("x-dead-letter-routing-key")
        self.dead_letter_routing_key: str | None = (
            dlk.decode() if isinstance(dlk, bytes) else dlk if dlk is not None else None
        )
        # x-max-priority: ready is kept highest priority first, FIFO within a priority,
        # as RabbitMQ's priority queue (one sub-queue per priority 0..max).
        max_priority = _int(a.get("x-max-priority"))
        self.max_priority: int | None = (
            min(max_priority, 255) if max_priority is not None and max_priority >= 0 else None
        )
        # Set by the vhost: dead-letter a message (reason) and persist hooks.
        self.dead_letter: Callable[[Queue, Entry, str], None] | None = None
        # No length limit, no TTL and no priorities: enqueue can take its short path.
        self._plain = (
            self.max_length is None
            and self.max_length_bytes is None
            and self.message_ttl is None
            and self.max_priority is None
        )
        self.on_removed: Callable[[Queue, Entry], None] | None = None
        self.persist: Callable[[Queue, Entry], None] | None = None

    # ---------------------------------------------------------------- publishing
    def is_full(self, extra_bytes: int = 0) -> bool:
        if self.max_length is not None and len(self.ready) >= self.max_length:
            return True
        return (
            self.max_length_bytes is not None
            and self.ready_bytes + extra_bytes > self.max_length_bytes
        )

    def enqueue(self, message: Message) -> bool:
        """Add a message; False when the queue refuses it (x-overflow reject-publish)."""
        if self._plain and self.persist is None and not message.properties[0] & 0x01:
            # The hot path: no limits, no TTL, nothing to persist.
            self._seq += 1
            self.published += 1
            entry = Entry(message, self._seq)
            consumers = self.consumers
            if consumers and not self.ready:
                consumer = consumers[0] if len(consumers) == 1 else self._next_consumer()
                if consumer is not None and consumer.has_credit():
                    consumer.channel.deliver(consumer, self, entry)
                    return True
            # No dispatch here: a consumer with credit would have drained the backlog
            # already (every credit change dispatches), so none can take it now.
            self.ready.append(entry)
            self.ready_bytes += len(message.body)
            return True
        return self._enqueue_checked(message)

    def _enqueue_checked(self, message: Message) -> bool:
        if (
            (self.max_length is not None or self.max_length_bytes is not None)
            and self.is_full(len(message.body))
        ) and self.overflow != "drop-head":
            if self.overflow == "reject-publish-dlx" and self.dead_letter is not None:
                self.dead_letter(self, Entry(message, 0), "maxlen")
            return False
        self._seq += 1
        self.published += 1
        entry = Entry(message, self._seq)
        if self.max_priority is not None:
            entry.priority = self._priority_of(message)
        if self.message_ttl is not None:
            if self.message_ttl == 0 and (
                self.ready or not any(c.has_credit() for c in self.consumers)
            ):
                # TTL 0: delivered now or never
                if self.dead_letter is not None:
                    self.dead_letter(self, entry, "expired")
                return True
            entry.expires_at = now_ms() + self.message_ttl
        expiration = _per_message_ttl(message)
        if expiration is not None:
            at = now_ms() + expiration
            entry.expires_at = min(entry.expires_at, at) if entry.expires_at else at
        if self.persist is not None:
            self.persist(self, entry)
        if self.consumers and not self.ready:
            consumer = self._next_consumer()
            if consumer is not None:
                consumer.deliver(self, entry)
                return True
        self._append(entry)
        self.ready_bytes += len(message.body)
        if self.max_length is not None or self.max_length_bytes is not None:
            self._drop_head_overflow()
        if self.consumers:
            self.dispatch()
        return True

    def _priority_of(self, message: Message) -> int:
        """A message's priority in this queue: none is 0, above the maximum is the maximum."""
        assert self.max_priority is not None
        if len(message.properties) < 2 or not message.properties[0] & 0x08:  # flag 0x0800
            return 0
        priority = message.props.priority or 0
        return min(priority, self.max_priority)

    def _append(self, entry: Entry) -> None:
        """Add to ``ready`` behind every entry of the same or a higher priority."""
        ready = self.ready
        if not ready or ready[-1].priority >= entry.priority:
            ready.append(entry)
            return
        i = len(ready) - 1
        while i > 0 and ready[i - 1].priority < entry.priority:
            i -= 1
        ready.insert(i, entry)

    def _drop_head_overflow(self) -> None:
        while self.ready and (
            (self.max_length is not None and len(self.ready) > self.max_length)
            or (self.max_length_bytes is not None and self.ready_bytes > self.max_length_bytes)
        ):
            entry = self._pop()
            self._removed(entry)
            if self.dead_letter is not None:
                self.dead_letter(self, entry, "maxlen")

    def _pop(self) -> Entry:
        entry = self.ready.popleft()
        self.ready_bytes -= len(entry.message.body)
        return entry

    def _removed(self, entry: Entry) -> None:
        if self.on_removed is not None:
            self.on_removed(self, entry)

    # ---------------------------------------------------------------- consuming
    def _next_consumer(self) -> Consumer | None:
        consumers = self.consumers
        n = len(consumers)
        if n == 1:
            c = consumers[0]
            return c if c.has_credit() else None
        top = consumers[0].priority
        for i in range(n):
            idx = (self._rr + i) % n
            c = consumers[idx]
            if c.priority != top:
                continue
            if c.has_credit():
                self._rr = idx + 1
                return c
        # no consumer of the top priority can take it: fall back to lower priorities
        for c in consumers:
            if c.priority != top and c.has_credit():
                return c
        return None

    def dispatch(self) -> None:
        """Push ready messages to consumers while any has credit."""
        ready = self.ready
        while ready and self.consumers:
            entry = ready[0]
            if entry.expires_at and entry.expires_at <= now_ms():
                self._expire_head()
                continue
            consumer = self._next_consumer()
            if consumer is None:
                return
            self._pop()
            consumer.deliver(self, entry)

    def _expire_head(self) -> None:
        entry = self._pop()
        self._removed(entry)
        if self.dead_letter is not None:
            self.dead_letter(self, entry, "expired")

    def expire(self) -> None:
        """Drop expired messages from the head (RabbitMQ only expires at the head)."""
        t = now_ms()
        while self.ready and self.ready[0].expires_at and self.ready[0].expires_at <= t:
            self._expire_head()

    def get(self) -> Entry | None:
        self.expire()
        if not self.ready:
            return None
        self.last_used = now_ms()
        return self._pop()

    def add_consumer(self, consumer: Consumer) -> None:
        self.had_consumers = True
        self.last_used = now_ms()
        self.consumers.append(consumer)
        self.consumers.sort(key=lambda c: -c.priority)
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.last_used = now_ms()

    # ---------------------------------------------------------------- settling
    def settled(self, entry: Entry) -> None:
        """A delivered message was acked (or dropped by reject without requeue)."""
        self.unacked -= 1
        self._removed(entry)

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put messages back where they were, marked redelivered."""
        back = list(entries)
        if not back:
            return
        for e in back:
            e.redelivered = True
            self.unacked -= 1
            self.ready_bytes += len(e.message.body)
        self.redelivered_count += len(back)
        if self.deleted:
            return
        back.sort(key=_order)
        if not self.ready or _order(back[-1]) < _order(self.ready[0]):
            self.ready.extendleft(reversed(back))
        else:
            merged = sorted([*back, *self.ready], key=_order)
            self.ready = deque(merged)
        self.dispatch()

    def purge(self) -> int:
        count = len(self.ready)
        for entry in self.ready:
            self._removed(entry)
        self.ready.clear()
        self.ready_bytes = 0
        return count

    @property
    def message_count(self) -> int:
        return len(self.ready)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def restore(self, message: Message, redelivered: bool = False) -> Entry:
        """Reload a message from the store at start-up."""
        self._seq += 1
        entry = Entry(message, self._seq)
        entry.redelivered = redelivered
        if self.max_priority is not None:
            entry.priority = self._priority_of(message)
        self._append(entry)
        self.ready_bytes += len(message.body)
        return entry

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} in {self.vhost!r}>"


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _per_message_ttl(message: Message) -> int | None:
    raw = message.properties
    if len(raw) < 2 or not raw[0] & 0x01:  # the expiration flag, 0x0100
        return None
    expiration = message.props.expiration
    if expiration is None or expiration == "":
        return None
    try:
        return max(0, int(expiration))
    except ValueError:
        return None
