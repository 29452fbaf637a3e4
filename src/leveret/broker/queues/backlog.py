"""Credit flow on a queue's backlog: a publisher waits while the messages it put in a
queue wait for consumers that are taking them, so that a saturating publisher cannot keep
more in flight than the consumers take at once.

RabbitMQ gets this from its processes: a queue handles its consumers' acks before
publishes (``prioritise_cast``: acks at 4, ``notify_sent`` biased towards consumers,
publishes at 0), and a channel may have only so many messages unprocessed at a queue
(``credit_flow``, 400 then 200 at a time) before its reader stops reading the socket.
So under load a publisher runs at the pace of the consumers it feeds, and little waits
in between. Leveret's queues take a message at once, in one thread, so nothing slowed a
publisher there but its consumers' sockets; a queue's backlog grew and shrank at random
under a saturating publisher, and every message waited behind it.

The rule here, per queue:

- A publish that leaves more than :data:`HOLD_AT` messages waiting, while its consumers
  have deliveries out (their acks will give credit back), holds its publisher: its
  socket is not read until the backlog is down to :data:`RELEASE_AT` (or the queue has
  no consumers any more, is purged or deleted).
- A publisher never waits on a queue it consumes from itself (its acks are what the
  queue waits for), nor while any of its consumers has deliveries out: its acks come in
  on the socket a hold stops reading, and other queues may wait for them. Two
  connections that each publish to the queue the other consumes would otherwise hold
  each other until the patience ran out, at every backlog.
- Consumers that do not drain (they stopped acking, or ack slowly) must not stop a
  publisher as RabbitMQ would not stop it: the edge gives up a hold after a short patience
  (:meth:`BacklogFlow.give_up`); the queue then holds no one until its backlog is down to
  :data:`RELEASE_AT` again, and grows meanwhile as RabbitMQ's would.

What a client sees is only when its publishes are read; every frame stays as it was.
While held, its connection shows ``flow`` in the management API, as RabbitMQ's does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.broker.ports import FlowHolder

#: ready messages past which a publish holds its publisher (the consumers have their
#: prefetch out already: what waits beyond this is only latency)
HOLD_AT = 200
#: ready messages at or below which the held publishers are let go
RELEASE_AT = 100


class Consuming(Protocol):
    """A consumer, as far as backlog flow sees it."""

    @property
    def holder(self) -> FlowHolder:
        """The connection it delivers to."""
        ...


class BacklogFlow:
    """One queue's side of backlog credit flow: the publishers it holds back (a
    :class:`~leveret.broker.ports.FlowHolder`, as a congested connection is)."""

    __slots__ = ("_consumers", "held_by", "holding", "stalled")

    writable = False  # (a FlowHolder's; a queue's backlog is never "writable")

    def __init__(self, consumers: Sequence[Consuming]) -> None:
        self._consumers = consumers
        self.held_by: set[FlowHolder] = set()  # (never held itself)
        self.holding: set[FlowHolder] = set()
        # its consumers did not drain in time: no holds until the backlog is down
        self.stalled = False

    def hold(self, publisher: FlowHolder) -> None:
        """Hold ``publisher`` back until the backlog drains, unless it consumes here or
        has deliveries out."""
        for consumer in self._consumers:
            if consumer.holder is publisher:
                return
        if publisher.awaits_settlements():
            return
        self.holding.add(publisher)
        publisher.held_by.add(self)

    def drained(self) -> None:
        """The backlog is down to :data:`RELEASE_AT` (or there is no one to drain it):
        the held publishers go on, and holds may start again."""
        self.stalled = False
        if self.holding:
            self.release()

    def give_up(self) -> None:
        """A publisher waited past its patience: the consumers are not draining. Let
        everyone go, and hold no one until the backlog is down."""
        self.stalled = True
        self.release()

    def awaits_settlements(self) -> bool:
        """(A FlowHolder's; a queue's backlog is never a publisher.)"""
        return False

    def release(self) -> None:
        release_held(self)


class Holding(Protocol):
    """What holds publishers back: a congested connection, or a queue's backlog."""

    holding: set[FlowHolder]


def release_held(holder: Holding) -> None:
    """``holder`` lets go of the publishers it holds; one that nothing holds any more
    reads again (its ``released``, when it has one)."""
    holding, holder.holding = holder.holding, set()
    for publisher in holding:
        publisher.held_by.discard(holder)
        if not publisher.held_by:
            released: Callable[[], None] | None = getattr(publisher, "released", None)
            if released is not None:
                released()


def give_up_holds(publisher: FlowHolder) -> None:
    """``publisher`` waited on queues' backlogs past its patience: those queues let it
    (and every other publisher they hold) go; a congested connection holding it still
    does."""
    for holder in list(publisher.held_by):
        if isinstance(holder, BacklogFlow):
            holder.give_up()
