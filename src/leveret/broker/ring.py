"""A queue's consumers, and who gets its next message: consumer priorities, round-robin
among the consumers of the top priority, a single active consumer, and credit. Every
queue type keeps its consumers in one (a stream, whose consumers each read on their own,
only for who they are).

- :class:`ConsumerRing` keeps its consumers in the order they subscribed, as
  ``rabbit_fifo`` (quorum queues) does: with a single active consumer, the next one is
  the earliest subscribed.
- :class:`PriorityRing` keeps them highest priority first (in subscription order within
  a priority), as ``rabbit_queue_consumers`` (classic queues) does: the next single
  active consumer is the highest priority one, then the earliest.

Either way a message goes to a consumer of the top priority that has credit, in turn;
when none of them has, to the first (in priority order) of the others that has."""

from __future__ import annotations

from collections.abc import Callable
from operator import methodcaller
from typing import Generic, Protocol, TypeVar

__all__ = ["ConsumerRing", "Member", "PriorityRing"]


class Member(Protocol):
    """A consumer, as far as its ring sees it."""

    priority: int
    no_ack: bool
    prefetch: int
    unacked: int

    def has_credit(self) -> bool: ...


M = TypeVar("M", bound=Member)

_has_credit: Callable[[Member], bool] = methodcaller("has_credit")


def _by_priority(member: Member) -> int:
    return -member.priority


class ConsumerRing(Generic[M]):
    """Consumers in subscription order (rabbit_fifo's)."""

    __slots__ = ("_rr", "active", "can_take", "members", "single_active", "top")

    def __init__(self, single_active: bool = False, default_prefetch: int = 0) -> None:
        """``single_active``: x-single-active-consumer. ``default_prefetch``: how many
        unacknowledged messages a consumer without a prefetch of its own takes (0: no
        bound but its channel's)."""
        self.members: list[M] = []
        self.single_active = single_active
        # with a single active consumer, the one that gets messages now
        self.active: M | None = None
        self.top = 0  # the highest priority of any member
        self._rr = 0  # where the round-robin resumes, an index into members
        self.can_take: Callable[[M], bool] = (
            _has_credit if not default_prefetch else _bounded(default_prefetch)
        )

    def _insert(self, member: M) -> None:
        self.members.append(member)

    def _others(self) -> list[M]:
        """The members, highest priority first (subscription order within one)."""
        return sorted(self.members, key=_by_priority)

    # ------------------------------------------------------------- membership
    def add(self, member: M) -> None:
        """A consumer subscribes: with a single active consumer and none active yet, it
        is the active one."""
        self._insert(member)
        self.top = member.priority if len(self.members) == 1 else max(self.top, member.priority)
        if self.single_active and self.active is None:
            self.active = member

    def remove(self, member: M) -> bool:
        """A consumer goes; whether it was the active one (another, if any, is active
        now and may take what waits)."""
        members = self.members
        if member in members:
            members.remove(member)
            self.top = max(c.priority for c in members) if members else 0
        if member is not self.active:
            return False
        self.active = members[0] if members else None
        return True

    def clear(self) -> list[M]:
        """Every consumer goes at once (the queue is deleted); who they were."""
        members = list(self.members)
        self.members.clear()
        self.active = None
        self.top = 0
        return members

    def __len__(self) -> int:
        return len(self.members)

    # -------------------------------------------------------------- selection
    def any_credit(self) -> bool:
        """Whether any consumer can take a message now (which one is :meth:`next`'s to
        say)."""
        can_take = self.can_take
        return any(can_take(c) for c in self.members)

    def next(self) -> M | None:
        """The consumer that gets the next message, or None when none can take it."""
        can_take = self.can_take
        if self.single_active:
            active = self.active
            return active if active is not None and can_take(active) else None
        members = self.members
        n = len(members)
        if n == 1:
            c = members[0]
            return c if can_take(c) else None
        top = self.top
        rr = self._rr
        for i in range(n):
            idx = (rr + i) % n
            c = members[idx]
            if c.priority == top and can_take(c):
                self._rr = idx + 1
                return c
        if n:
            # no consumer of the top priority can take it: the lower priorities can
            for c in self._others():
                if c.priority != top and can_take(c):
                    return c
        return None


class PriorityRing(ConsumerRing[M]):
    """Consumers highest priority first (rabbit_queue_consumers')."""

    __slots__ = ()

    def _insert(self, member: M) -> None:
        members = self.members
        members.append(member)
        members.sort(key=_by_priority)

    def _others(self) -> list[M]:
        return self.members  # in priority order already


def _bounded(limit: int) -> Callable[[Member], bool]:
    """Credit with a bound for consumers without a prefetch (rabbit_quorum_queue's)."""

    def can_take(c: Member) -> bool:
        if not c.has_credit():
            return False
        return c.no_ack or bool(c.prefetch) or c.unacked < limit

    return can_take
