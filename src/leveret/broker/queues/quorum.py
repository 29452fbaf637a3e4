"""Quorum queues on one node, as RabbitMQ 3.10.8's ``rabbit_fifo`` state machine behaves
(one member, so the raft log is a local log, fsynced before publisher confirms).

What differs from a classic queue, each as RabbitMQ does it:

- Durable only; exclusive, auto-delete and non-durable declarations are refused, and so
  are the arguments of the other queue types (``check_typed_arguments``).
- Every message has a delivery count. A consumer's first delivery carries no header and
  is not redelivered; after a return it carries ``x-delivery-count`` (the count) and is
  redelivered. ``basic.get`` always adds the header (0 the first time).
- A message a client returns (``basic.nack``/``basic.reject`` with requeue,
  ``basic.recover``) goes to the back of the queue, unless ``x-delivery-limit`` is set:
  then, as when a consumer's channel goes away, it goes to the front, and a message
  returned more often than the limit is dropped or dead-lettered (``delivery_limit``).
- ``x-max-length``/``-bytes`` with ``drop-head`` (the default; ``reject-publish-dlx`` is
  taken as ``drop-head``, with RabbitMQ's warning) or ``reject-publish``, which lets the
  message that crosses the limit in and refuses the ones after it until the queue is
  back under 80 % of the limit.
- ``x-dead-letter-strategy`` ``at-least-once`` (with ``reject-publish``): a dead letter
  stays in the queue, counted against its limits, until every queue it is routed to has
  taken it; otherwise it is retried every ``SETTLE_TIMEOUT_MS``.
- Consumers without a prefetch take at most 2000 unacknowledged messages; a channel's
  global prefetch is refused; the exclusive flag of a consumer is ignored; with a single
  active consumer the next one is the earliest subscribed, and ``basic.get`` is refused.
- Messages that expire (``x-message-ttl``, per-message expiration) leave at the head.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from leveret.broker import dedup
from leveret.broker.arguments import (
    check_credit_argument,
    optional_text,
)
from leveret.broker.compat import RABBITMQ_3_10, RabbitMQ
from leveret.broker.entry import Entry, now_ms
from leveret.broker.message import Message
from leveret.broker.policies import policy_wins, smaller
from leveret.broker.ports import DEAD_LETTERED, OUT, RETURNED
from leveret.broker.queues import quorum4
from leveret.broker.queues.base import (
    MIRRORING_POLICIES,
    Accepted,
    Overflow,
    Queue,
    check_replicated_declaration,
)
from leveret.broker.ring import ConsumerRing
from leveret.protocol import errors, table

if TYPE_CHECKING:
    from leveret.broker.ports import FlowHolder, QuorumStore
    from leveret.broker.queues.base import DeadLetters, Declaration, QueueHome, Subscriber

log = logging.getLogger(__name__)

# The queue arguments a quorum queue takes (rabbit_quorum_queue:capabilities()).
QUORUM_ARGS = frozenset(
    (
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-dead-letter-strategy",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-overflow",
        "x-single-active-consumer",
        "x-queue-type",
        "x-quorum-initial-group-size",
        "x-delivery-limit",
        "x-message-ttl",
        "x-queue-leader-locator",
    )
)
DEFAULT_PREFETCH = 2000  # what a consumer without prefetch gets (rabbit_quorum_queue)
LOW_LIMIT = 0.8  # reject-publish lets publishers in again below this share of the limit
SETTLE_TIMEOUT_MS = 180_000  # at-least-once retry interval (RabbitMQ's default)
_EXPIRATION_FLAG = 0x01  # byte 0 of the property flags: expiration (0x0100)


class Strategy(StrEnum):
    """x-dead-letter-strategy, as it takes effect (rabbit_quorum_queue)."""

    AT_MOST_ONCE = "at-most-once"  # routed once, whatever becomes of it
    AT_LEAST_ONCE = "at-least-once"  # kept until every target queue has taken it


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


class _Msg:
    """A message in the queue: its id in the log, delivery count and expiry."""

    __slots__ = ("count", "expires_at", "id", "message")

    def __init__(self, mid: int, message: Message, count: int | None, expires_at: int) -> None:
        self.id = mid
        self.message = message
        self.count = count  # None until it is first returned
        self.expires_at = expires_at  # 0: never

    @property
    def size(self) -> int:
        return len(self.message.body)


class _Letter:
    """A dead letter waiting for every target queue to take it (at-least-once)."""

    __slots__ = ("msg", "reason", "tried_at")

    def __init__(self, msg: _Msg, reason: str, tried_at: int) -> None:
        self.msg = msg
        self.reason = reason
        self.tried_at = tried_at


class QuorumQueue(Queue):
    keeps_log = True
    type_name = "quorum"
    rabbit_type = "rabbit_quorum_queue"
    # The consumer arguments a quorum queue takes (rabbit_quorum_queue:capabilities()).
    CONSUMER_ARGS = frozenset(("x-priority", "x-credit"))
    # rabbit_quorum_queue:ra_machine_config: the smaller of argument and policy for the
    # limits and the TTL, the policy for overflow and expires, the argument for the
    # dead-letter settings.
    POLICY_RULES = {
        "max-length": smaller,
        "max-length-bytes": smaller,
        "max-in-memory-length": smaller,
        "max-in-memory-bytes": smaller,
        "delivery-limit": smaller,
        "message-ttl": smaller,
        "overflow": policy_wins,
        "expires": policy_wins,
    }
    # rabbit_quorum_queue:capabilities(): a policy holding one of these never applies
    UNSUPPORTED_POLICIES = frozenset(
        (
            "max-priority",
            "queue-mode",
            "single-active-consumer",
            *MIRRORING_POLICIES,
            "max-age",
            "stream-max-segment-size-bytes",
            "initial-cluster-size",
        )
    )

    def __init__(
        self,
        declaration: Declaration,
        dead_letters: DeadLetters | None = None,
        store: QuorumStore | None = None,
        compat: RabbitMQ = RABBITMQ_3_10,
    ) -> None:
        self.compat = compat
        # rabbit_fifo: with a single active consumer the next is the earliest subscribed;
        # a consumer without a prefetch takes DEFAULT_PREFETCH
        single_active = declaration.arguments.get("x-single-active-consumer") is True
        super().__init__(declaration, dead_letters, ConsumerRing(single_active, DEFAULT_PREFETCH))
        self.durable = True
        self._store = store
        self._messages: deque[_Msg] = deque()  # enqueued and requeued, in order
        # RabbitMQ 4: messages of a priority above 4, served two to one (rabbit_fifo_q)
        self._high: deque[_Msg] = deque()
        self._dequeues = 0  # rabbit_fifo_q's dequeue_counter: 0, 1, 2, 0, ...
        self._returns: deque[_Msg] = deque()  # returned: served first
        self._pending: list[_Msg] = []  # enqueued, visible once synced
        self._out: dict[int, _Msg] = {}  # delivered, not settled
        # basic.get deliveries not settled: rabbit_fifo counts each as a consumer
        self._gets: set[int] = set()
        self._dlx: dict[int, _Letter] = {}  # dead letters not yet taken (at-least-once)
        self._ready_bytes = 0
        self._dlx_bytes = 0
        self._blocked = False  # reject-publish: over the limit, publishers refused
        # x-message-deduplication: the identities of the messages in the queue
        self._dedup = dedup.QueueIdentities() if dedup.queue_enabled(self.arguments) else None
        self._next_id = 0  # ids when there is no store
        self._released_at = 0
        self._expires: int | None = None
        self.configure()
        if store is not None:
            self._recover(store)

    def configure(self) -> None:
        """rabbit_quorum_queue:ra_machine_config: the settings from arguments and policies
        (:attr:`POLICY_RULES`), when the queue is made and again when its policies change
        (policy_changed updates the live queue: a lower limit drops from the head, or
        blocks publishers, at once)."""
        setting = self.setting
        self.max_length = _int(setting("max-length"))
        self.max_bytes = _int(setting("max-length-bytes"))
        overflow = Overflow.of(setting("overflow"))
        if overflow is Overflow.REJECT_PUBLISH_DLX:
            log.warning(
                "Invalid overflow strategy <<\"%s\">> for quorum queue: queue '%s' in vhost '%s'",
                overflow.value,
                self.name,
                self.vhost,
            )
            overflow = Overflow.DROP_HEAD
        self.overflow = overflow
        self._configure_delivery_limit()
        self.message_ttl = _int(setting("message-ttl"))
        self._expires = _int(setting("expires"))
        self.dead_letter_exchange = optional_text(setting("dead-letter-exchange"))
        self.dead_letter_routing_key = optional_text(setting("dead-letter-routing-key"))
        self.strategy = self._dead_letter_strategy()
        self._evaluate_limit()

    def _configure_delivery_limit(self) -> None:
        """The delivery limit in force, and whether returns go to the front.

        3.10.8: argument and policy, the smaller; none by default. Any value is taken, as
        RabbitMQ takes it; one that is not an integer never limits (Erlang orders every
        number below every binary), but still makes returns go to the front.

        4.x: :func:`leveret.broker.queues.quorum4.delivery_limit` (20 by default, a
        negative one is none); without a limit returns go to the back of the queue
        (v4.2.9 rabbit_fifo.erl:1036-1063)."""
        if not self.compat.v4:
            limit = self.setting("delivery-limit")
            self._limited = limit is not None
            self.delivery_limit = _int(limit)
            return
        default = self.compat.quorum_delivery_limit or 0
        limit = quorum4.delivery_limit(self.arguments, self.policy, self.operator_policy, default)
        self.delivery_limit = limit
        self._limited = limit is not None

    def _dead_letter_strategy(self) -> Strategy | None:
        """rabbit_quorum_queue:dead_letter_handler: None (no dead-lettering) or the
        strategy."""
        exchange = self.setting("dead-letter-exchange")
        strategy = optional_text(self.setting("dead-letter-strategy"))
        if exchange is None:
            return None
        overflow = self.overflow
        if strategy == Strategy.AT_LEAST_ONCE:
            if overflow is Overflow.REJECT_PUBLISH:
                return Strategy.AT_LEAST_ONCE
            log.warning(
                "Falling back to dead-letter-strategy at-most-once because configured "
                "dead-letter-strategy at-least-once is incompatible with effective overflow "
                "strategy drop-head. To enable dead-letter-strategy at-least-once, set "
                "overflow strategy to reject-publish."
            )
        return Strategy.AT_MOST_ONCE

    # ------------------------------------------------------------ declaration
    @classmethod
    def validate(cls, declaration: Declaration, compat: RabbitMQ = RABBITMQ_3_10) -> None:
        check_replicated_declaration(declaration, QUORUM_ARGS, cls.rabbit_type, compat.v4)

    @classmethod
    def create(cls, declaration: Declaration, home: QueueHome) -> QuorumQueue:
        storage = home.storage
        store = (
            storage.quorum_store(declaration.vhost, declaration.name)
            if storage is not None
            else None
        )
        return cls(declaration, home, store, home.compat)

    @property
    def expires(self) -> int | None:
        return self._expires

    # --------------------------------------------------------------- recovery
    def _recover(self, store: QuorumStore) -> None:
        for r in store.recover():
            msg = _Msg(r.id, r.message, r.count, self._expiry(r.message, r.ts_ms))
            if r.state == DEAD_LETTERED:
                self._dlx[msg.id] = _Letter(msg, r.reason or "rejected", 0)
                self._dlx_bytes += msg.size
            elif r.state == RETURNED:
                self._returns.append(msg)
                self._ready_bytes += msg.size
            elif r.state == OUT:
                # its consumer is gone: returned, as rabbit_fifo's return_all
                self._return_one(msg)
            else:
                self._ready_for(msg).append(msg)
                self._ready_bytes += msg.size

    # ------------------------------------------------------------- publishing
    def _expiry(self, message: Message, ts_ms: int) -> int:
        ttl = self.message_ttl
        props = message.properties
        if len(props) >= 2 and props[0] & _EXPIRATION_FLAG:
            raw = table.short_property(props, table.EXPIRATION_FLAG)
            if raw is not None and raw.isdigit():
                ttl = int(raw) if ttl is None else min(ttl, int(raw))
        return ts_ms + ttl if ttl is not None else 0

    def enqueue(self, message: Message) -> Accepted:
        if self._blocked:
            return Accepted.REFUSED
        if self._dedup is not None and not self._dedup.admit(message):
            return Accepted.YES  # a duplicate: dropped, as accepted
        self.published += 1
        mid = self._store.append(message) if self._store is not None else self._new_id()
        msg = _Msg(mid, message, None, self._expiry(message, now_ms()))
        self._ready_bytes += msg.size
        if self._store is not None:
            self._pending.append(msg)  # visible once on disk
        else:
            self._ready_for(msg).append(msg)
            self.dispatch()
        self._evaluate_limit()
        if self.consumers and (self._messages or self._high):
            return Accepted.BACKLOG  # behind consumers without credit: credit flow
        return Accepted.YES

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def sync(self) -> None:
        """Make what was written durable; then what was enqueued is deliverable."""
        if self._store is None:
            return
        self._store.sync()
        if self._pending:
            for msg in self._pending:
                self._ready_for(msg).append(msg)
            self._pending.clear()
            self.dispatch()
        self._release()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def congested(self) -> FlowHolder | None:
        return self._congested_when(bool(self._ready_count()))

    # ------------------------------------------------------------------ limits
    def _ready_count(self) -> int:
        return len(self._messages) + len(self._high) + len(self._returns) + len(self._pending)

    def _over_limit(self) -> bool:
        if self.max_length is None and self.max_bytes is None:
            return False
        return (
            self.max_length is not None and self._ready_count() + len(self._dlx) > self.max_length
        ) or (self.max_bytes is not None and self._ready_bytes + self._dlx_bytes > self.max_bytes)

    def _below_soft_limit(self) -> bool:
        def below(limit: int | None, value: int) -> bool:
            return limit is None or value <= int(limit * LOW_LIMIT)

        return below(self.max_length, self._ready_count() + len(self._dlx)) and below(
            self.max_bytes, self._ready_bytes + self._dlx_bytes
        )

    def _evaluate_limit(self) -> None:
        """rabbit_fifo:evaluate_limit, after every change."""
        if self.max_length is None and self.max_bytes is None:
            return
        if self._over_limit():
            if self.overflow is Overflow.DROP_HEAD:
                while self._over_limit():
                    msg = self._take()
                    if msg is None:
                        break
                    self._discard(msg, "maxlen")
            else:
                self._blocked = True
        elif self._blocked and self._below_soft_limit():
            self._blocked = False

    # -------------------------------------------------------------- consuming
    def admits(self, exclusive: bool) -> bool:
        return True  # rabbit_quorum_queue ignores the exclusive flag of consumers

    def consumer_start(
        self, no_ack: bool, prefetch: int, arguments: dict[str, Any], global_prefetch: int = 0
    ) -> None:
        self._check_consume_arguments(arguments)
        if global_prefetch:
            raise errors.not_implemented(f"{self.where} does not support global qos")
        check_credit_argument(arguments, self.compat.v4)

    def add_consumer(self, consumer: Subscriber, start: Any = None) -> None:
        self._subscribe(consumer)
        self.dispatch()

    def _take(self) -> _Msg | None:
        """The next message: returned ones first (rabbit_fifo:take_next_msg)."""
        if self._returns:
            msg = self._returns.popleft()
        elif self._high:
            msg = self._take_prioritised()
        elif self._messages:
            self._dequeues = 0 if self._dequeues == 2 else self._dequeues + 1
            msg = self._messages.popleft()
        else:
            return None
        self._ready_bytes -= msg.size
        return msg

    def _head(self) -> _Msg | None:
        if self._returns:
            return self._returns[0]
        if self._high:
            return self._high[0] if self._high_next() else self._messages[0]
        return self._messages[0] if self._messages else None

    def _ready_for(self, msg: _Msg) -> deque[_Msg]:
        """Where an enqueued message waits: RabbitMQ 4 keeps those of a priority above 4
        apart (v4.2.9 rabbit_fifo.erl:2987-2999 priority_tag)."""
        if self.compat.v4 and quorum4.high_priority(msg.message):
            return self._high
        return self._messages

    def _high_next(self) -> bool:
        """rabbit_fifo_q:next at v4.2.9 (rabbit_fifo_q.erl:117-133): the high queue first,
        but every third dequeue the older of the two heads."""
        if not self._messages:
            return True
        return self._dequeues != 2 or self._high[0].id < self._messages[0].id

    def _take_prioritised(self) -> _Msg:
        high = self._high_next()
        self._dequeues = 0 if self._dequeues == 2 else self._dequeues + 1
        return self._high.popleft() if high else self._messages.popleft()

    def _expire_head(self) -> None:
        now = now_ms()
        while (head := self._head()) is not None and head.expires_at and head.expires_at <= now:
            self._take()
            self._discard(head, "expired")

    def dispatch(self) -> None:
        if self.deleted:
            return
        while self.consumers:
            self._expire_head()
            if self._head() is None:
                break
            consumer = self.ring.next()
            if consumer is None:
                break
            msg = self._take()
            assert msg is not None
            entry = Entry(self._outgoing(msg, get=False), msg.id)
            entry.redelivered = msg.count is not None
            self.delivered += 1
            if consumer.no_ack:
                self._settled(msg)
            else:
                self.unacked += 1
                self._out[msg.id] = msg
                if self._store is not None:
                    self._store.checked_out(msg.id)
            consumer.deliver(self, entry)
        self._evaluate_limit()

    def _outgoing(self, msg: _Msg, get: bool) -> Message:
        """The message as delivered: with x-delivery-count once it has been returned,
        always for basic.get in 3.10.8 (rabbit_fifo_client); from 3.12 on, basic.get too
        adds it only once the message was returned (v4.2.9 rabbit_fifo_client.erl:241-258
        add_delivery_count_header: no acquired_count, no header)."""
        if msg.count is None and (not get or self.compat.v4):
            return msg.message
        m = msg.message
        fields = table.store(
            table.headers(m.properties) or [], "x-delivery-count", table.long(msg.count or 0)
        )
        return m.with_properties(table.with_headers(m.properties, fields))

    def get(self, no_ack: bool) -> Entry | None:
        if self.ring.single_active:
            raise errors.resource_locked(
                f"cannot obtain access to locked queue '{self.name}' in vhost '{self.vhost}'. "
                "basic.get operations are not supported by quorum queues with single active "
                "consumer"
            )
        self.last_used = now_ms()
        self._expire_head()
        msg = self._take()
        if msg is None:
            return None
        entry = Entry(self._outgoing(msg, get=True), msg.id)
        entry.redelivered = bool(msg.count)
        self.delivered += 1
        if no_ack:
            self._settled(msg)
        else:
            self.unacked += 1
            self._out[msg.id] = msg
            self._gets.add(msg.id)
            if self._store is not None:
                self._store.checked_out(msg.id)
        self._evaluate_limit()
        return entry

    # --------------------------------------------------------------- settling
    def _settled(self, msg: _Msg) -> None:
        if self._dedup is not None:
            self._dedup.left(msg.message)
        if self._store is not None:
            self._store.settle(msg.id)

    def _discard(self, msg: _Msg, reason: str) -> None:
        """A message leaves the queue for ``reason``: dead-lettered as the strategy says,
        or dropped."""
        if self.strategy is Strategy.AT_LEAST_ONCE:
            if self._store is not None:
                self._store.dead_lettered(msg.id, reason)
            self._dlx[msg.id] = _Letter(msg, reason, 0)
            self._dlx_bytes += msg.size
            self._try_dead_letter(self._dlx[msg.id])
            return
        if self.strategy is Strategy.AT_MOST_ONCE and self.dead_letters is not None:
            self.dead_letters.dead_letter(self, msg.message, reason)
        self._settled(msg)

    def _try_dead_letter(self, letter: _Letter) -> None:
        assert self.dead_letters is not None
        letter.tried_at = now_ms()
        answers = self.dead_letters.dead_letter(self, letter.msg.message, letter.reason)
        if answers and all(a is Accepted.YES for a in answers):
            del self._dlx[letter.msg.id]
            self._dlx_bytes -= letter.msg.size
            self._settled(letter.msg)

    def ack(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            msg = self._out.pop(entry.seq, None)
            self._gets.discard(entry.seq)
            self.unacked -= 1
            self.acked += 1
            if msg is not None:
                self._settled(msg)

    def reject(self, entries: Iterable[Entry], requeue: bool) -> None:
        if requeue:
            self.recovered(entries)
            return
        for entry in entries:
            self.unacked -= 1
            self._gets.discard(entry.seq)
            msg = self._out.pop(entry.seq, None)
            if msg is not None:
                self._discard(msg, "rejected")
        self._evaluate_limit()

    def annotate(self, entries: Iterable[Entry], annotations: Mapping[str, Any]) -> None:
        """rabbit_fifo's incr_msg (v4.2.9): a modified outcome's annotations merge onto the
        message, later ones winning, and go with every later delivery and with it when it
        is dead-lettered. They are kept as mc_amqpl:protocol_state gives them to an AMQP
        0-9-1 consumer, as headers (integers long, strings and binaries longstr, booleans
        bool; other values are left out), which an AMQP 1.0 consumer receives back as
        message annotations, since they were not in the message as published."""
        fields = _annotation_fields(annotations)
        if not fields:
            return
        for entry in entries:
            msg = self._out.get(entry.seq)
            if msg is None:
                continue
            m = msg.message
            merged = table.headers(m.properties) or []
            for key, value in fields:
                merged = table.store(merged, key, value)
            msg.message = m.with_properties(table.with_headers(m.properties, merged))

    def recovered(self, entries: Iterable[Entry]) -> None:
        """The client returns deliveries (nack or reject with requeue, basic.recover):
        without a delivery limit they go to the back of the queue (rabbit_fifo's
        requeue), with one to the front, as returns."""
        back = self._take_out(entries)
        if not back:
            return
        self.redelivered_count += len(back)
        if not self._limited:
            for msg in back:
                count = (msg.count or 0) + 1
                if self._store is not None:
                    self._store.settle(msg.id)
                    msg.id = self._store.append(msg.message, count)
                else:
                    msg.id = self._new_id()
                msg.count = count
                self._messages.append(msg)
                self._ready_bytes += msg.size
        else:
            for msg in back:
                self._return_one(msg)
        self._evaluate_limit()
        self.dispatch()

    def requeue(self, entries: Iterable[Entry]) -> None:
        """The consumer's channel went away: its deliveries return to the front
        (rabbit_fifo's return_all), in the order they went out."""
        back = self._take_out(entries)
        if not back:
            return
        self.redelivered_count += len(back)
        for msg in back:
            self._return_one(msg)
        if self.deleted:
            return
        self._evaluate_limit()
        self.dispatch()

    def _take_out(self, entries: Iterable[Entry]) -> list[_Msg]:
        out = []
        for entry in entries:
            self.unacked -= 1
            self._gets.discard(entry.seq)
            msg = self._out.pop(entry.seq, None)
            if msg is not None:
                out.append(msg)
        return out

    def _return_one(self, msg: _Msg) -> None:
        count = (msg.count or 0) + 1
        msg.count = count
        if self._limited and self.delivery_limit is not None and count > self.delivery_limit:
            self._discard(msg, "delivery_limit")
            return
        if self._store is not None:
            self._store.returned(msg.id, count)
        self._returns.append(msg)
        self._ready_bytes += msg.size

    def _release(self) -> None:
        """Tell the store the oldest message still alive, so it can free the log
        segments before it (at most once a second: it looks at every message out)."""
        store = self._store
        if store is None or now_ms() - self._released_at < 1000:
            return
        self._released_at = now_ms()
        oldest = 1 << 62
        if self._messages:
            oldest = self._messages[0].id  # ids grow from front to back
        if self._high:
            oldest = min(oldest, self._high[0].id)
        if self._pending:
            oldest = min(oldest, self._pending[0].id)
        for ids in (self._out, self._dlx):
            if ids:
                oldest = min(oldest, min(ids))
        if self._returns:
            oldest = min(oldest, min(m.id for m in self._returns))
        store.release(oldest)

    def purge(self) -> int:
        count = self._ready_count()
        for msg in (*self._returns, *self._messages, *self._high, *self._pending):
            self._settled(msg)
        self._returns.clear()
        self._messages.clear()
        self._high.clear()
        self._pending.clear()
        self._ready_bytes = 0
        self._evaluate_limit()
        self._release()
        return count

    def expire(self) -> None:
        """Expired heads leave; dead letters waiting (at-least-once) are tried again."""
        self._expire_head()
        if self._dlx:
            due = now_ms() - SETTLE_TIMEOUT_MS
            for letter in list(self._dlx.values()):
                if letter.tried_at <= due:
                    self._try_dead_letter(letter)
        self._evaluate_limit()

    def delete(self) -> int:
        self.deleted = True
        count = self._ready_count()
        self._returns.clear()
        self._messages.clear()
        self._high.clear()
        self._pending.clear()
        self._out.clear()
        self._gets.clear()
        self._dlx.clear()
        self._ready_bytes = self._dlx_bytes = 0
        if self._store is not None:
            self._store.delete()
        return count

    # ---------------------------------------------------------------- figures
    @property
    def message_count(self) -> int:
        return self._ready_count()

    @property
    def consumer_count(self) -> int:
        return len(self.consumers) + len(self._gets)

    @property
    def ready_bytes(self) -> int:
        return self._ready_bytes

    @property
    def unacked_bytes(self) -> int:
        return sum(m.size for m in self._out.values())

    @property
    def ready_by_kind(self) -> tuple[int, int, int]:
        """Ready messages of a high priority, of a normal one, and returned (RabbitMQ 4's
        messages_ready_high, _normal, _returned)."""
        pending_high = sum(1 for m in self._pending if self._ready_for(m) is self._high)
        high = len(self._high) + pending_high
        normal = len(self._messages) + len(self._pending) - pending_high
        return high, normal, len(self._returns)

    @property
    def dead_lettered_figures(self) -> tuple[int, int]:
        """Messages (and their bytes) waiting to be dead-lettered (at-least-once)."""
        return len(self._dlx), self._dlx_bytes

    @property
    def open_files(self) -> int:
        """Files its log holds open now."""
        return self._store.open_files() if self._store is not None else 0

    def persistent_figures(self) -> tuple[int, int]:
        # rabbit_quorum_queue counts every message it holds as persistent
        total = self._ready_count() + len(self._out) + len(self._dlx)
        return total, self._ready_bytes + self.unacked_bytes + self._dlx_bytes


def _annotation_fields(annotations: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    fields = []
    for key, value in annotations.items():
        if isinstance(value, bool):
            fields.append((key, b"t" + (b"\x01" if value else b"\x00")))
        elif isinstance(value, int):
            fields.append((key, table.long(value)))
        elif isinstance(value, (str, bytes)):
            fields.append((key, table.longstr(value)))
    return fields
