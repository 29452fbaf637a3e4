"""The interface every queue type implements (classic and stream now, quorum next), as
RabbitMQ's ``rabbit_queue_type``: callers never ask which type a queue is, they call it.

A queue sees its consumers through :class:`Subscriber` and sends dead letters through
:class:`DeadLetters`; both are handed to it, never looked up through another object."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from leveret.broker.arguments import check_consume_arguments, check_typed_arguments, text
from leveret.broker.compat import RABBITMQ_3_10, RabbitMQ
from leveret.broker.entry import Entry, now_ms
from leveret.broker.message import Message
from leveret.broker.policies import Governed, Rule, arg_wins, resolve
from leveret.broker.queues.backlog import BacklogFlow
from leveret.broker.ring import ConsumerRing
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.memory import MemoryBudget
    from leveret.broker.ports import ConnectionInfo, FlowHolder, Storage


class Subscriber(Protocol):
    """A consumer, as its queue sees it."""

    tag: str
    priority: int
    exclusive: bool
    no_ack: bool
    prefetch: int
    unacked: int
    arguments: dict[str, Any]

    @property
    def reads_stored(self) -> bool:
        """Whether it takes a stream's entries as stored (AMQP 1.0 links convert them
        themselves) rather than as AMQP 0-9-1 messages."""
        ...

    @property
    def holder(self) -> FlowHolder:
        """The connection whose socket it delivers to (for credit flow)."""
        ...

    def has_credit(self) -> bool: ...

    def credit(self) -> int:
        """How many more deliveries it takes now."""
        ...

    def deliver(self, queue: Queue, entry: Entry) -> None: ...

    def cancelled(self) -> None:
        """The queue went away under it (a server-side cancel)."""
        ...


class DeadLetters(Protocol):
    """Where a queue's dead letters go: its vhost, which routes them on."""

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> list[Accepted]:
        """Route a dead letter through the queue's dead-letter exchange; what each queue
        it reached answered."""
        ...


class QueueHome(DeadLetters, Protocol):
    """Where a queue is made (its vhost): what it keeps on disk and in memory, and where
    its dead letters go."""

    @property
    def storage(self) -> Storage | None:
        """What keeps queue contents on disk (None: nothing is kept)."""
        ...

    @property
    def memory(self) -> MemoryBudget:
        """The memory budget classic queues page against."""
        ...

    @property
    def compat(self) -> RabbitMQ:
        """The RabbitMQ the broker behaves as."""
        ...


@dataclass(frozen=True, slots=True)
class Declaration:
    """What a queue.declare asks for, as a queue type validates and creates it."""

    name: str
    vhost: str
    durable: bool = False
    exclusive_owner: ConnectionInfo | None = None
    auto_delete: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def where(self) -> str:
        """The queue as RabbitMQ names it in its error texts."""
        return f"queue '{self.name}' in vhost '{self.vhost}'"


def check_replicated_declaration(
    declaration: Declaration, type_args: frozenset[str], rabbit_type: str, v4: bool = False
) -> None:
    """What RabbitMQ refuses a quorum queue or stream declaration with: its arguments
    first (rabbit_amqqueue, ``type_args`` the ones the type takes), then the properties
    such a queue cannot have, in that order."""
    d = declaration
    check_typed_arguments(d.where, d.arguments, type_args, rabbit_type, v4)
    if d.auto_delete:
        raise errors.precondition_failed(f"invalid property 'auto-delete' for {d.where}")
    if d.exclusive:
        raise errors.precondition_failed(f"invalid property 'exclusive-owner' for {d.where}")
    if not d.durable:
        raise errors.precondition_failed(f"invalid property 'non-durable' for {d.where}")


class Overflow(StrEnum):
    """x-overflow: what a queue does at its length limit (the value as RabbitMQ spells
    it)."""

    DROP_HEAD = "drop-head"  # the oldest messages go (dead-lettered)
    REJECT_PUBLISH = "reject-publish"  # new messages are refused (nacked)
    REJECT_PUBLISH_DLX = "reject-publish-dlx"  # refused, and dead-lettered

    @classmethod
    def of(cls, value: Any) -> Overflow:
        """The mode a setting names (None: the default, drop-head). Declarations and
        policies are checked before they get here; a value that still names no mode
        refuses new messages without dead-lettering them, as one that is not drop-head
        always did."""
        if not value:
            return cls.DROP_HEAD
        try:
            return cls(text(value))
        except ValueError:
            return cls.REJECT_PUBLISH


class Accepted(Enum):
    """What a queue did with a published message."""

    YES = 0
    # taken, and waiting behind consumers that have no credit: the publisher may have to
    # wait for their connection (credit flow, see Queue.congested)
    BACKLOG = 1
    REFUSED = 2  # a length limit with x-overflow reject-publish: the publisher gets a nack
    UNSTORABLE = 3  # RabbitMQ's stream cannot store it: the publishing connection closes
    # taken, behind a backlog its consumers are draining: the publisher waits until they
    # have (backlog credit flow, see Queue.flow and leveret.broker.queues.backlog)
    HOLD = 4


#: The policy keys of classic queue mirroring: no other queue type takes them.
MIRRORING_POLICIES = (
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-master-locator",
)


class Queue(Governed):
    """State every queue type has, and the operations each type implements."""

    kind = "queue"  # what a binding points at
    type_name: ClassVar[str] = ""  # x-queue-type
    rabbit_type: ClassVar[str] = ""  # RabbitMQ's module name, in its error texts
    # The queue keeps a log of its own, which sync() makes durable with every batch.
    keeps_log: ClassVar[bool] = False
    # How the type settles a key both its x- argument and a policy set (the Resolve of
    # rabbit_queue_type_util:args_policy_lookup in each type's module); unnamed keys:
    # the argument wins.
    POLICY_RULES: ClassVar[dict[str, Rule]] = {}
    # Policy keys the type does not take: a policy holding one never applies to it
    # (unsupported_policies of the type's capabilities()).
    UNSUPPORTED_POLICIES: ClassVar[frozenset[str]] = frozenset()
    # The consumer arguments the type takes; those of other types are refused
    # (rabbit_amqqueue:check_consume_arguments).
    CONSUMER_ARGS: ClassVar[frozenset[str]] = frozenset()
    # the RabbitMQ the broker behaves as (its vhost sets it once the queue is made)
    compat: RabbitMQ = RABBITMQ_3_10

    def __init__(
        self,
        declaration: Declaration,
        dead_letters: DeadLetters | None = None,
        ring: ConsumerRing[Subscriber] | None = None,
    ) -> None:
        self.name = declaration.name
        self.vhost = declaration.vhost
        self.durable = declaration.durable
        self.exclusive_owner = declaration.exclusive_owner
        self.auto_delete = declaration.auto_delete
        self.arguments: dict[str, Any] = declaration.arguments.copy()
        self.dead_letters = dead_letters
        # x-dead-letter-exchange / -routing-key, for the types that dead-letter
        self.dead_letter_exchange: str | None = None
        self.dead_letter_routing_key: str | None = None
        # who consumes, and who gets the next message (priorities, round-robin, single
        # active consumer, credit); ``consumers`` is its list, in its order
        self.ring: ConsumerRing[Subscriber] = ring if ring is not None else ConsumerRing()
        self.consumers: list[Subscriber] = self.ring.members
        # the publishers its backlog holds back (credit flow)
        self.flow = BacklogFlow(self.consumers)
        self.unacked = 0
        self.deleted = False
        self.had_consumers = False
        self.last_used = now_ms()
        # the policy and operator policy that apply (VirtualHost.apply_policies sets them)
        self.policy = None
        self.operator_policy = None
        # counters for management and metrics
        self.published = 0
        self.delivered = 0  # to consumers that ack
        self.delivered_no_ack = 0  # to consumers that do not
        self.got = 0  # basic.get that must be acked
        self.got_no_ack = 0
        self.got_empty = 0  # basic.get on an empty queue
        self.acked = 0
        self.redelivered_count = 0

    # ------------------------------------------------------------ declaration
    @classmethod
    def validate(cls, declaration: Declaration, compat: RabbitMQ = RABBITMQ_3_10) -> None:
        """Raise what RabbitMQ (the one ``compat`` says) refuses a declaration of this type
        with."""

    @classmethod
    def create(cls, declaration: Declaration, home: QueueHome) -> Queue:
        """A new queue of this type, with what it keeps on disk if ``home`` keeps it."""
        raise NotImplementedError

    @property
    def where(self) -> str:
        """The queue as RabbitMQ names it in its error texts."""
        return f"queue '{self.name}' in vhost '{self.vhost}'"

    @property
    def expires(self) -> int | None:
        """x-expires: milliseconds unused before the queue goes."""
        return None

    # --------------------------------------------------------------- settings
    def setting(self, key: str) -> Any:
        """What the queue acts on for a policy key (``max-length``...): its ``x-``
        argument, its policies' value, or, when both are there, its type's rule."""
        return resolve(
            key,
            self.arguments,
            self.policy,
            self.operator_policy,
            self.POLICY_RULES.get(key, arg_wins),
        )

    def declare_ok_count(self, arguments: dict[str, Any]) -> int:
        """The message count of queue.declare-ok."""
        return self.message_count

    # ------------------------------------------------------------- publishing
    def enqueue(self, message: Message) -> Accepted:
        raise NotImplementedError

    def congested(self) -> FlowHolder | None:
        """The consuming connection that cannot drain while messages wait here, if any:
        its publishers are held back until it drains (credit flow)."""
        return None

    def sync(self) -> None:
        """Make what was enqueued since the last call durable and deliverable."""

    def close(self) -> None:
        """The broker stops: close what the queue keeps open on disk."""

    # -------------------------------------------------------------- consuming
    def consumer_start(
        self, no_ack: bool, prefetch: int, arguments: dict[str, Any], global_prefetch: int = 0
    ) -> Any:
        """Check a basic.consume on this queue (``prefetch`` the consumer's, and the
        channel's global one); what the consumer starts from."""
        return None

    def _check_consume_arguments(self, arguments: dict[str, Any]) -> None:
        """A basic.consume's arguments, as the queue's type takes them (CONSUMER_ARGS)."""
        v4 = self.compat.v4
        check_consume_arguments(self.where, arguments, self.CONSUMER_ARGS, self.rabbit_type, v4)

    def admits(self, exclusive: bool) -> bool:
        """Whether a consumer (exclusive or not) may subscribe now: an exclusive consumer
        only to a queue without consumers, nobody beside an exclusive one."""
        return not (self.consumers and (exclusive or any(c.exclusive for c in self.consumers)))

    @property
    def single_active_consumer_on(self) -> bool:
        """x-single-active-consumer: one consumer gets messages, the others wait."""
        return self.ring.single_active

    @property
    def active_consumer(self) -> Subscriber | None:
        """With a single active consumer, the one that gets messages now."""
        return self.ring.active

    def add_consumer(self, consumer: Subscriber, start: Any = None) -> None:
        raise NotImplementedError

    def _subscribe(self, consumer: Subscriber) -> None:
        """A consumer joins the ring (what every type does first in add_consumer)."""
        self.had_consumers = True
        self.last_used = now_ms()
        self.ring.add(consumer)

    def remove_consumer(self, consumer: Subscriber) -> None:
        self.last_used = now_ms()
        if self.ring.remove(consumer):
            self.dispatch()  # another consumer became the single active one
        if not self.consumers:
            self.flow.drained()  # no one left to drain the backlog: publishers go on

    def _congested_when(self, waiting: bool) -> FlowHolder | None:
        """:meth:`congested` for a queue that hands each message to one consumer: the
        first consumer's connection, when messages are ``waiting`` and it cannot drain."""
        if waiting and self.consumers:
            holder = self.consumers[0].holder
            if not holder.writable:
                return holder
        return None

    def dispatch(self) -> None:
        """Push to consumers while any has credit."""

    def get(self, no_ack: bool) -> Entry | None:
        """basic.get: the next message, or None when there is none. With ``no_ack`` it is
        gone now, otherwise it waits for its ack. (A queue accounts for what leaves it, to
        consumers too, before it hands it over.)"""
        raise NotImplementedError

    # --------------------------------------------------------------- settling
    def check_reject(self) -> None:
        """Raise if basic.nack / basic.reject cannot settle this queue's messages."""

    def ack(self, entries: Iterable[Entry]) -> None:
        raise NotImplementedError

    def reject(self, entries: Iterable[Entry], requeue: bool) -> None:
        """Rejected (or nacked): back in the queue, or gone and dead-lettered."""
        raise NotImplementedError

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Outstanding deliveries come back: their channel closed."""
        raise NotImplementedError

    def annotate(self, entries: Iterable[Entry], annotations: Mapping[str, Any]) -> None:
        """An AMQP 1.0 ``modified`` outcome's annotations for outstanding deliveries,
        before they are returned or rejected. Only a quorum queue keeps them (RabbitMQ
        4.2's rabbit_classic_queue:settle turns modify into requeue or discard, and a
        stream ignores outcomes)."""

    def recovered(self, entries: Iterable[Entry]) -> None:
        """The client hands outstanding deliveries back (basic.recover)."""
        self.requeue(entries)

    def purge(self) -> int:
        raise NotImplementedError

    def expire(self) -> None:
        """Drop what expired."""

    def delete(self) -> int:
        """The queue is being deleted: drop its contents; how many messages were ready."""
        self.deleted = True
        return 0

    # ---------------------------------------------------------------- figures
    @property
    def message_count(self) -> int:
        return 0

    @property
    def ready_bytes(self) -> int:
        return 0

    def persistent_figures(self) -> tuple[int, int]:
        """How many ready messages are persistent, and their body bytes."""
        return 0, 0

    def ram_figures(self) -> tuple[int, int]:
        """How many ready messages are held in memory, and their body bytes (the rest
        is paged out to disk)."""
        return self.message_count, self.ready_bytes

    # ---------------------------------------------------------------- memory
    @property
    def ram_bytes(self) -> int:
        """Bytes of ready message bodies held in memory that paging could release."""
        return 0

    def page_out(self) -> int:
        """Memory is short: page ready messages to disk; the bytes released."""
        return 0

    @property
    def dead_lettered_figures(self) -> tuple[int, int]:
        """Messages (and their body bytes) waiting to be dead-lettered (at-least-once)."""
        return 0, 0

    @property
    def unacked_figures(self) -> tuple[int, int, int]:
        """Delivered and not settled: body bytes, persistent messages, their bytes (a
        type that does not keep what it delivered has none to count)."""
        return 0, 0, 0

    def head_timestamp(self) -> int | None:
        """The timestamp property (seconds) of the message at the head, if it has one."""
        return None

    def consumer_capacity(self) -> float | None:
        """The share of recent time the queue could hand messages to its consumers at
        once (None: the type does not measure it)."""
        return None

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} in {self.vhost!r}>"
