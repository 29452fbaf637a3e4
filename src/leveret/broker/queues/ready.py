"""A classic queue's ready messages, in the store its declaration picks when it is made:

- :class:`FifoReady`: in memory, in publish order;
- :class:`PriorityReady` (``x-max-priority``): in memory, highest priority first and in
  publish order within a priority, as RabbitMQ's priority queue (one sub-queue per
  priority 0..max);
- :class:`~leveret.broker.queues.paging.PagedReady` (the queue has somewhere to page
  to): in publish order, what memory cannot hold on disk; lazy or not, by argument or by
  policy, on a live queue.

Every store keeps its first messages in memory in ``head`` (a deque the queue reads
directly: "no ready message" is ``not head``), and counts the body bytes of all it
holds in ``bytes``."""

from __future__ import annotations

import sys
from collections import deque
from typing import TYPE_CHECKING

from leveret.broker.entry import Entry

if TYPE_CHECKING:
    from leveret.broker.message import Message
    from leveret.broker.ports import Pager

_PRIORITY_FLAG = 0x08  # byte 0 of the property flags: priority (0x0800)


def order(entry: Entry) -> tuple[int, int]:
    """Where an entry stands among the ready ones: higher priority first, then publish
    order."""
    return (-entry.priority, entry.seq)


class FifoReady:
    """Ready messages in memory, in publish order."""

    __slots__ = ("bytes", "head")

    lazy = False  # only a store that pages can be lazy

    def __init__(self) -> None:
        self.head: deque[Entry] = deque()
        self.bytes = 0  # body bytes of every ready message

    def append(self, entry: Entry) -> None:
        """A ready message at the end of the queue."""
        self.bytes += len(entry.message.body)
        self.head.append(entry)

    def popleft(self) -> Entry:
        """The message at the head leaves the store."""
        entry = self.head.popleft()
        self.bytes -= len(entry.message.body)
        return entry

    def requeue(self, back: list[Entry], size: int) -> None:
        """Messages (``size`` body bytes) come back where they stood, by :func:`order`."""
        self.bytes += size
        back.sort(key=order)
        head = self.head
        if not head or order(back[-1]) < order(head[0]):
            head.extendleft(reversed(back))
        else:
            # Only the head can hold messages older than a delivered one: whatever is
            # paged or in the tail came after everything delivered so far.
            merged = sorted([*back, *head], key=order)
            head.clear()
            head.extend(merged)

    def __len__(self) -> int:
        return len(self.head)

    def clear(self) -> list[int]:
        """Everything ready goes (purge): the store ids of persistent messages that were
        not in the head (the head's are the queue's to forget)."""
        self.head.clear()
        self.bytes = 0
        return []

    def close(self) -> None:
        """The queue is deleted."""
        self.clear()

    # ---------------------------------------------------------------- memory
    def set_lazy(self, lazy: bool) -> None:
        """x-queue-mode changed: a store that does not page stays as it is."""

    @property
    def ram_bytes(self) -> int:
        """Body bytes held in memory."""
        return self.bytes

    def ram_figures(self) -> tuple[int, int]:
        """Messages held in memory, and their body bytes."""
        return len(self.head), self.bytes

    def page_out(self) -> int:
        """Memory is short: the bytes paging released (none, here)."""
        return 0

    def persistent_figures(self) -> tuple[int, int]:
        """Messages kept in the queue's message store, and their body bytes."""
        count = size = 0
        for e in self.head:
            if e.store_id:
                count += 1
                size += len(e.message.body)
        return count, size


class PriorityReady(FifoReady):
    """Ready messages in memory, highest priority first (x-max-priority)."""

    __slots__ = ("max_priority",)

    def __init__(self, max_priority: int, pager: Pager | None = None) -> None:
        """``pager``: what the queue kept from before a restart, read back in whole
        (a priority queue does not page)."""
        super().__init__()
        self.max_priority = max_priority
        if pager is not None:
            for entry in pager.read(sys.maxsize):
                entry.priority = self.priority_of(entry.message)
                self.append(entry)
            pager.close()

    def priority_of(self, message: Message) -> int:
        """A message's priority here: none is 0, above the maximum is the maximum."""
        if len(message.properties) < 2 or not message.properties[0] & _PRIORITY_FLAG:
            return 0
        priority = message.props.priority or 0
        return min(priority, self.max_priority)

    def append(self, entry: Entry) -> None:
        """Behind every entry of the same or a higher priority."""
        self.bytes += len(entry.message.body)
        head = self.head
        if not head or head[-1].priority >= entry.priority:
            head.append(entry)
            return
        i = len(head) - 1
        while i > 0 and head[i - 1].priority < entry.priority:
            i -= 1
        head.insert(i, entry)
