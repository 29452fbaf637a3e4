"""A classic queue's ready messages beyond memory, as RabbitMQ's classic queues page
them (rabbit_variable_queue's q4 / delta / q1, simplified).

The ready messages are, in order::

    head (in memory) -> paged (a Pager, on disk) -> tail (in memory)

in a :class:`PagedReady`, the ready store of a classic queue that has a pager.

- While nothing is paged, every ready message is in the head, as before paging existed.
- A queue pages when its mode is lazy, or when the memory budget of all queues is spent
  (:mod:`leveret.broker.memory`): it keeps the first :data:`HEAD_BYTES` of its head and
  writes the rest to its pager. From then on, new messages gather in the tail and go to
  the pager :data:`WRITE_BATCH` bytes at a time, so that what is in memory stays small
  whatever the backlog.
- When the head empties, the next :data:`READ_AHEAD` bytes are read back in one
  sequential read; when the pager is empty the tail joins the head and the queue holds
  everything in memory again.

Invariant the classic queue's hot path relies on: whenever anything is paged or in the
tail, the head is not empty. So "no ready message" is still ``not queue.ready`` (the
head), and a message is delivered straight to a consumer only when nothing waits before
it.

The in-flight (delivered, unacknowledged) messages are not paged, as in RabbitMQ."""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

from leveret.broker.entry import Entry
from leveret.broker.queues.ready import FifoReady

if TYPE_CHECKING:
    from leveret.broker.memory import MemoryBudget
    from leveret.broker.ports import Pager

log = logging.getLogger(__name__)

HEAD_BYTES = 1 << 20  # what a paging queue keeps at its head (a read-ahead's worth)
READ_AHEAD = 1 << 20  # bytes read back from disk at a time
WRITE_BATCH = 1 << 20  # tail bytes written to disk at a time


class PagedReady(FifoReady):
    """A classic queue's ready messages: its head, the paged part and the tail; and the
    bytes of them held in memory."""

    __slots__ = (
        "budget",
        "head_bytes",
        "lazy",
        "pager",
        "spilled",
        "tail",
        "tail_bytes",
    )

    def __init__(self, pager: Pager, budget: MemoryBudget, lazy: bool = False) -> None:
        """``pager`` holds what the queue kept from before a restart, if anything."""
        super().__init__()
        self.pager = pager
        self.budget = budget
        self.lazy = lazy
        self.head_bytes = 0
        self.tail: deque[Entry] = deque()
        self.tail_bytes = 0
        # something is paged or in the tail: new messages go behind it
        self.spilled = pager.count > 0
        if self.spilled:
            self.refill()
        self.bytes = self.head_bytes + pager.bytes

    # ------------------------------------------------------------- adding
    def append(self, entry: Entry) -> None:
        """A ready message at the end of the queue: in the head, or behind what is
        paged."""
        size = len(entry.message.body)
        self.bytes += size
        budget = self.budget
        budget.used += size
        if self.spilled:
            self.tail.append(entry)
            self.tail_bytes += size
            if self.tail_bytes >= WRITE_BATCH:
                self._write_tail()
            return
        self.head.append(entry)
        self.head_bytes += size
        if self.head_bytes > HEAD_BYTES and (self.lazy or budget.used > budget.limit):
            self.page_out()

    def requeue(self, back: list[Entry], size: int) -> None:
        """Messages of ``size`` bytes came back to the head."""
        super().requeue(back, size)
        self.head_bytes += size
        self.budget.used += size

    def popleft(self) -> Entry:
        """The message at the head leaves; when the head is empty, the next messages
        come back from disk (what cannot be read back is no longer counted)."""
        entry = self.head.popleft()
        size = len(entry.message.body)
        self.bytes -= size
        self.head_bytes -= size
        self.budget.used -= size
        if not self.head and self.spilled:
            self.bytes -= self.refill()
        return entry

    def __len__(self) -> int:
        return len(self.head) + self.pager.count + len(self.tail)

    # ------------------------------------------------------------- paging
    def page_out(self) -> int:
        """Write what is held beyond the head to disk; the bytes released."""
        if self.spilled:
            return self._write_tail()
        ready = self.head
        moved: list[Entry] = []
        size = 0
        head = self.head_bytes
        while len(ready) > 1 and head - size > HEAD_BYTES:
            entry = ready.pop()
            moved.append(entry)
            size += len(entry.message.body)
        if not moved:
            return 0
        moved.reverse()
        if not self.pager.write(moved):
            ready.extend(moved)
            return 0
        self.head_bytes -= size
        self.budget.used -= size
        self.spilled = True
        return size

    def _write_tail(self) -> int:
        if not self.tail:
            return 0
        entries = list(self.tail)
        if not self.pager.write(entries):
            return 0  # the disk is full: the tail stays in memory
        size = self.tail_bytes
        self.tail.clear()
        self.tail_bytes = 0
        self.budget.used -= size
        return size

    def refill(self) -> int:
        """The head ran dry: read the next messages back. Returns the bytes of paged
        messages that could not be read back (lost to a damaged page file), which the
        queue no longer counts."""
        pager = self.pager
        lost = 0
        if pager.count:
            before = pager.bytes
            entries = pager.read(READ_AHEAD)
            size = 0
            for entry in entries:
                size += len(entry.message.body)
            self.head.extend(entries)
            self.head_bytes += size
            self.budget.used += size
            lost = before - pager.bytes - size
        if not pager.count:
            # the rest is in memory: the queue holds everything there again
            self.head.extend(self.tail)
            self.head_bytes += self.tail_bytes
            self.tail.clear()
            self.tail_bytes = 0
            self.spilled = False
        return lost

    def set_lazy(self, lazy: bool) -> None:
        """x-queue-mode changed on a live queue (argument or policy)."""
        self.lazy = lazy
        if lazy:
            self.page_out()

    # ------------------------------------------------------------- emptying
    def clear(self) -> list[int]:
        ids = self.pager.clear()
        ids.extend(e.store_id for e in self.tail if e.store_id)
        self._empty()
        return ids

    def close(self) -> None:
        self._empty()
        self.pager.close()

    def _empty(self) -> None:
        """What is held in memory goes, and what the budget counted of it."""
        self.head.clear()
        self.bytes = 0
        self.budget.used -= self.head_bytes + self.tail_bytes
        self.head_bytes = 0
        self.tail.clear()
        self.tail_bytes = 0
        self.spilled = False

    # ------------------------------------------------------------- figures
    @property
    def ram_bytes(self) -> int:
        return self.head_bytes + self.tail_bytes

    def ram_figures(self) -> tuple[int, int]:
        return len(self.head) + len(self.tail), self.ram_bytes

    def persistent_figures(self) -> tuple[int, int]:
        count, size = super().persistent_figures()
        more, more_size = self.pager.persistent
        count += more
        size += more_size
        for e in self.tail:
            if e.store_id:
                count += 1
                size += len(e.message.body)
        return count, size
