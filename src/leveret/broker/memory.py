"""How much of the ready messages' bodies the classic queues keep in memory.

RabbitMQ's classic queues keep messages in memory until the node's memory use reaches
``vm_memory_high_watermark_paging_ratio`` of the high watermark; then they page message
bodies to disk (rabbit_memory_monitor). Leveret's queues count the bodies they hold in
memory into one :class:`MemoryBudget`; a queue whose message would take the count past
the limit pages what it holds beyond a small head (see
:mod:`leveret.broker.queues.paging`). The server's memory monitor moves the limit from
measurements of the process's resident memory, and under pressure asks the queues
holding the most to page first (:func:`release`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True)
class MemoryBudget:
    """Bytes of ready message bodies all classic queues together keep in memory
    (``used``), and how many they may keep before paging (``limit``)."""

    limit: int = sys.maxsize
    used: int = 0


class HoldsMemory(Protocol):
    """A queue that can page what it holds in memory."""

    @property
    def ram_bytes(self) -> int:
        """Bytes of ready message bodies it holds in memory now."""
        ...

    def page_out(self) -> int:
        """Page what it holds beyond its head; the bytes it released."""
        ...


def release(budget: MemoryBudget, queues: Iterable[HoldsMemory]) -> int:
    """Page queues out, those holding the most first, until the budget's use is within
    its limit; the bytes released."""
    released = 0
    if budget.used <= budget.limit:
        return 0
    for q in sorted(queues, key=lambda q: -q.ram_bytes):
        if budget.used <= budget.limit or q.ram_bytes == 0:
            break
        released += q.page_out()
    return released
