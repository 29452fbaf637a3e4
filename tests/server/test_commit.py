"""Group commit (leveret.server.commit): generations, one fsync at a time in a thread,
confirms released in order, the synchronous form taking over, and a failing fsync
confirming nothing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from leveret.server.commit import Committer
from leveret.store.messages import FsyncJob


class Disk:
    """Fake message-store writes: each ``write`` hands out what was "appended" since the
    last one as a job; a job blocks on ``gate`` until the test opens it."""

    def __init__(self) -> None:
        self.appended: list[str] = []
        self.synced: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def write(self) -> FsyncJob | None:
        if not self.appended:
            return None
        job = Job(self, self.appended)
        self.appended = []
        return job


class Job(FsyncJob):
    def __init__(self, disk: Disk, items: list[str]) -> None:
        super().__init__([], [])
        self.disk = disk
        self.items = list(items)

    def merge(self, later: FsyncJob) -> None:
        assert isinstance(later, Job)
        self.items.extend(later.items)

    def run(self) -> None:
        self.disk.gate.wait(10)
        if self.disk.fail:
            raise OSError(5, "Input/output error")
        self.disk.synced.extend(self.items)


async def settle(committer: Committer, durable: int) -> None:
    for _ in range(500):
        if committer.durable >= durable:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not durable to {durable}: {committer.durable}")


def test_without_a_loop_a_commit_is_durable_when_it_returns() -> None:
    disk = Disk()
    committer = Committer(disk.write)
    assert committer.commit() == 0  # nothing written
    disk.appended.append("a")
    assert committer.commit() == 0
    assert disk.synced == ["a"]


def test_batches_wait_in_order_and_share_the_next_fsync() -> None:
    async def run() -> None:
        disk = Disk()
        committer = Committer(disk.write)
        committer.start(asyncio.get_running_loop())
        released: list[tuple[str, int]] = []
        disk.gate.clear()  # the first fsync hangs until the gate opens
        disk.appended.append("a")
        first = committer.commit()
        committer.when_durable(first, lambda d: released.append(("a", d)))
        disk.appended.append("b")
        second = committer.commit()
        committer.when_durable(second, lambda d: released.append(("b", d)))
        disk.appended.append("c")
        third = committer.commit()
        committer.when_durable(third, lambda d: released.append(("c", d)))
        # a batch that wrote nothing waits for the last one written (confirms in order)
        assert committer.commit() == third
        assert (first, second, third) == (1, 2, 3)
        await asyncio.sleep(0.05)
        assert released == [] and disk.synced == []
        disk.gate.set()
        await settle(committer, 3)
        # b and c went in one fsync (group commit), after a
        assert disk.synced == ["a", "b", "c"]
        assert released == [("a", 1), ("b", 3), ("c", 3)]
        assert committer.commit() == 0
        committer.close()

    asyncio.run(run())


def test_sync_takes_over_the_fsync_in_flight_and_the_rest() -> None:
    async def run() -> None:
        disk = Disk()
        committer = Committer(disk.write)
        committer.start(asyncio.get_running_loop())
        released: list[int] = []
        disk.gate.clear()
        disk.appended.append("a")
        committer.when_durable(committer.commit(), released.append)
        disk.appended.append("b")
        committer.when_durable(committer.commit(), released.append)
        disk.appended.append("c")  # not even committed yet
        threading.Timer(0.05, disk.gate.set).start()
        committer.sync()
        assert disk.synced == ["a", "b", "c"]
        assert committer.durable == committer.written == 3
        assert released == [3, 3]
        await asyncio.sleep(0.05)  # the thread's own completion comes late: no effect
        assert released == [3, 3]
        committer.close()

    asyncio.run(run())


def test_a_failing_fsync_confirms_nothing_until_one_works() -> None:
    async def run() -> None:
        disk = Disk()
        committer = Committer(disk.write)
        committer.start(asyncio.get_running_loop())
        released: list[int] = []
        disk.fail = True
        disk.appended.append("a")
        committer.when_durable(committer.commit(), released.append)
        await asyncio.sleep(0.1)
        assert released == [] and committer.durable == 0
        with pytest.raises(OSError):
            committer.sync()
        assert released == []
        disk.fail = False
        disk.appended.append("b")
        committer.when_durable(committer.commit(), released.append)
        await settle(committer, 2)
        assert disk.synced == ["a", "b"]  # a was tried again, with b
        assert released == [2, 2]
        committer.close()

    asyncio.run(run())
