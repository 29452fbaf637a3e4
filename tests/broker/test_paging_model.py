"""A stateful model of a classic queue that pages: with a memory budget of nothing and
head, read-ahead and write batch of a few bytes, nearly every message goes to disk and
back. Whatever the order of publishes, gets, acks, requeues, purges, mode changes and
memory pressure, the queue gives back exactly the messages of a plain list model, in the
same order, with the same counts and bytes, and what it says it holds in memory is what
the budget counts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from leveret.broker.entry import Entry
from leveret.broker.memory import MemoryBudget
from leveret.broker.message import Message
from leveret.broker.queues import paging
from leveret.broker.queues.base import Declaration
from leveret.broker.queues.classic import ClassicQueue
from leveret.store.messages import MessageLog
from leveret.store.paging import PageFiles
from leveret.store.setup import QueueMessages
from tests.support.tiers import examples

PERSISTENT = b"\x10\x00\x02"  # delivery-mode 2


class PagingModel(RuleBasedStateMachine):
    durable = False  # a durable queue: persistent messages page by their place in the store

    def __init__(self) -> None:
        super().__init__()
        self._saved = (paging.HEAD_BYTES, paging.READ_AHEAD, paging.WRITE_BATCH)
        paging.HEAD_BYTES, paging.READ_AHEAD, paging.WRITE_BATCH = 25, 30, 40
        self.dir = Path(tempfile.mkdtemp(prefix="paging-model-"))
        self.budget = MemoryBudget(limit=0)
        self.log: MessageLog | None = None
        store = None
        if self.durable:
            self.log = MessageLog(self.dir / "store")
            self.log.recover()
            store = QueueMessages(self.log, self.log.queue_id("/", "q"), None)
        self.queue = ClassicQueue(
            Declaration("q", "/", durable=self.durable),
            store=store,
            pager=PageFiles(self.dir / "pages", "q", self.log),
            memory=self.budget,
        )
        self.model: list[tuple[int, bytes]] = []  # (seq, body) ready, in queue order
        self.held: list[Entry] = []  # delivered, not settled
        self.n = 0
        self.persistent_bodies: set[bytes] = set()

    def teardown(self) -> None:
        paging.HEAD_BYTES, paging.READ_AHEAD, paging.WRITE_BATCH = self._saved
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(size=st.integers(min_value=0, max_value=60), persistent=st.booleans())
    def publish(self, size: int, persistent: bool) -> None:
        self.n += 1
        body = b"%05d" % self.n + b"." * size
        props = PERSISTENT if persistent else b"\x00\x00"
        if persistent:
            self.persistent_bodies.add(body)
        self.queue.enqueue(Message("", "q", b"\x00\x01q", props, body))
        self.model.append((self.queue._seq, body))

    @rule(ack=st.booleans())
    def get(self, ack: bool) -> None:
        entry = self.queue.get(no_ack=ack)
        if not self.model:
            assert entry is None
            return
        assert entry is not None
        assert (entry.seq, entry.message.body) == self.model.pop(0)
        if not ack:
            self.held.append(entry)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), requeue=st.booleans())
    def settle(self, data: st.DataObject, requeue: bool) -> None:
        k = data.draw(st.integers(min_value=1, max_value=len(self.held)))
        picked = data.draw(st.permutations(self.held))[:k]
        for e in picked:
            self.held.remove(e)
        if requeue:
            self.queue.requeue(picked)
            self.model = sorted(self.model + [(e.seq, e.message.body) for e in picked])
        else:
            self.queue.ack(picked)

    @rule()
    def purge(self) -> None:
        assert self.queue.purge() == len(self.model)
        self.model.clear()

    @rule(lazy=st.booleans())
    def mode(self, lazy: bool) -> None:
        self.queue.set_queue_mode("lazy" if lazy else None)
        assert self.queue.queue_mode == ("lazy" if lazy else "default")

    @rule()
    def memory_pressure(self) -> None:
        self.queue.page_out()

    @invariant()
    def figures(self) -> None:
        q = self.queue
        assert q.message_count == len(self.model)
        assert q.ready_bytes == sum(len(b) for _, b in self.model)
        ram_count, ram_bytes = q.ram_figures()
        assert ram_bytes == q.ram_bytes == self.budget.used
        assert ram_count <= len(self.model)
        # nothing waits on disk behind an empty head (the hot path relies on it)
        assert bool(q.ready) == bool(self.model)

    @invariant()
    def memory_stays_small(self) -> None:
        # With no budget, lazy or not, a queue holds a read-ahead at its head and a write
        # batch in its tail (each overshot by at most one message), plus what came back
        # by requeue.
        q = self.queue
        requeued = sum(len(e.message.body) for e in q.ready if e.redelivered)
        assert q.ram_bytes <= paging.READ_AHEAD + paging.WRITE_BATCH + 2 * 65 + requeued

    @invariant()
    def persistent_counted(self) -> None:
        count, size = self.queue.persistent_figures()
        if not self.durable:
            assert (count, size) == (0, 0)
        else:
            assert count == sum(1 for _, b in self.model if self._persistent(b))

    def _persistent(self, body: bytes) -> bool:
        return body in self.persistent_bodies


class DurablePagingModel(PagingModel):
    durable = True


TestPagingModel = PagingModel.TestCase
TestPagingModel.settings = settings(
    max_examples=examples(150), stateful_step_count=50, deadline=None
)
TestDurablePagingModel = DurablePagingModel.TestCase
TestDurablePagingModel.settings = settings(
    max_examples=examples(150), stateful_step_count=50, deadline=None
)
