"""Group commit: the event loop writes what a batch of publishes stored, a thread makes it
durable (fsync), and the batch's publisher confirms go out when it is, while the loop goes
on serving everyone else.

An fsync blocked the loop for every batch before: under a saturating publisher of
persistent messages, half of the broker's time went to waiting for the disk, with
consumers and other publishers waiting too. Now one fsync runs at a time in a thread of
its own; what is written while it runs waits for the next one, which covers all of it
(one fsync for many batches). Each write that has something to make durable is a
*generation*; a batch's confirms wait for the generation of its writes, or for the one in
flight when it wrote nothing (confirms go out in order: a later batch never overtakes an
earlier one). The promise is RabbitMQ's: a confirmed persistent message is on disk.

:meth:`Committer.sync` is the synchronous form (the loop waits): the housekeeping tick,
the other protocols' confirms, a nack that must follow the acks before it, shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from leveret.store.messages import FsyncJob as Job

log = logging.getLogger(__name__)


class Committer:
    """Generations of writes and which of them are durable; one fsync at a time."""

    def __init__(self, write: Callable[[], Job | None]) -> None:
        """``write``: write what is buffered; the job that makes it durable (None: no
        new writes to make durable)."""
        self._write = write
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.written = 0  # the last generation handed out
        self.durable = 0  # every generation up to this one is on disk
        self._next: Job | None = None  # written while an fsync runs: the next one's
        self._next_gen = 0
        self._running: Future[None] | None = None
        self._running_job: Job | None = None
        self._waiters: deque[tuple[int, Callable[[int], None]]] = deque()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="leveret-fsync")

    def commit(self) -> int:
        """After a batch: write, and start making it durable. The generation the batch's
        confirms wait for; 0 when everything written is durable already."""
        self._take(self._write())
        if self._running is None and self._next is not None:
            if self._pool is None:  # not started (tests drive it without a loop)
                self.sync()
                return 0
            self._start()
        return self.written if self.written > self.durable else 0

    def when_durable(self, generation: int, callback: Callable[[int], None]) -> None:
        """Call ``callback(durable)`` once ``generation`` is on disk (now, if it is)."""
        if generation <= self.durable:
            callback(self.durable)
        else:
            self._waiters.append((generation, callback))

    def sync(self) -> None:
        """Everything written so far is durable when this returns: the loop waits for
        the fsync in flight, then does the rest itself. Raises what a failing disk
        raises (and nothing more is confirmed until an fsync works)."""
        self._take(self._write())
        running, job = self._running, self._running_job
        self._running = self._running_job = None  # taken over: its _done is ignored
        if running is not None and job is not None:
            try:
                running.result()
            except OSError:
                self._put_back(job)
        job, self._next = self._next, None
        if job is not None:
            try:
                job.run()
            except OSError:
                self._put_back(job)
                raise
        self._durable_to(self.written)

    def close(self) -> None:
        """The server stops: wait for the fsync in flight, run no more."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -------------------------------------------------------------- internals
    def _take(self, job: Job | None) -> None:
        if job is None:
            return
        self.written += 1
        if self._next is None:
            self._next = job
        else:
            self._next.merge(job)
        self._next_gen = self.written

    def _put_back(self, job: Job) -> None:
        """A job that failed runs again with the next one."""
        if self._next is not None:
            job.merge(self._next)
        self._next = job

    def _start(self) -> None:
        assert self._pool is not None and self._loop is not None and self._next is not None
        job, self._next = self._next, None
        gen = self._next_gen
        loop = self._loop
        future = self._pool.submit(job.run)
        self._running, self._running_job = future, job

        def done(_: Future[None]) -> None:
            loop.call_soon_threadsafe(self._done, future, job, gen)

        future.add_done_callback(done)

    def _done(self, future: Future[None], job: Job, gen: int) -> None:
        if future is not self._running:
            return  # sync() took over while it ran
        self._running = self._running_job = None
        exc = future.exception()
        if exc is not None:
            log.error("cannot make the message store durable (fsync): %s", exc)
            self._put_back(job)  # tried again with the next batch; nothing confirmed till then
            return
        self._durable_to(gen)
        if self._next is not None:
            self._start()

    def _durable_to(self, gen: int) -> None:
        if gen <= self.durable:
            return
        self.durable = gen
        waiters = self._waiters
        while waiters and waiters[0][0] <= gen:
            waiters.popleft()[1](gen)
