"""The quorum queue's log: recovery order, torn tails, and freeing settled segments."""

from __future__ import annotations

from pathlib import Path

from leveret.broker.message import Message
from leveret.broker.ports import DEAD_LETTERED, OUT, READY, RETURNED
from leveret.store import quorum
from leveret.store.quorum import QuorumLog


def msg(n: int, size: int = 10) -> Message:
    return Message.build("", "q", str(n).encode().ljust(size, b"."))


def test_recovery_order_and_states(tmp_path: Path) -> None:
    log = QuorumLog(tmp_path)
    ids = [log.append(msg(i)) for i in range(7)]
    log.sync()
    log.settle(ids[0])
    log.checked_out(ids[1])
    log.checked_out(ids[2])
    log.returned(ids[2], 1)  # out, then returned to the front
    log.checked_out(ids[3])
    log.settle(ids[4])
    requeued = log.append(msg(4), count=2)  # requeued to the back with its count
    log.dead_lettered(ids[5], "delivery_limit")
    log.sync()
    log.close()
    got = QuorumLog(tmp_path).recover()
    assert [(r.message.body[:1], r.state, r.count) for r in got] == [
        (b"5", DEAD_LETTERED, None),
        (b"2", RETURNED, 1),
        (b"1", OUT, None),
        (b"3", OUT, None),
        (b"6", READY, None),
        (b"4", READY, 2),
    ]
    assert got[0].reason == "delivery_limit"
    assert got[-1].id == requeued
    # recovery compacted the state log: the same again
    again = QuorumLog(tmp_path).recover()
    assert [(r.id, r.state, r.count, r.reason) for r in again] == [
        (r.id, r.state, r.count, r.reason) for r in got
    ]


def test_unsynced_writes_are_not_there_and_torn_tails_are_cut(tmp_path: Path) -> None:
    log = QuorumLog(tmp_path)
    kept = log.append(msg(1))
    log.sync()
    log.append(msg(2))  # never synced: lost, as a crash would lose it
    log.settle(kept)  # likewise
    log._pending.clear()
    log.log._pending.clear()
    log.close()
    with open(tmp_path / "state.log", "ab") as f:
        f.write(b"S\x00\x00")  # half a record
    with open(next((tmp_path / "log").glob("*.seg")), "ab") as f:
        f.write(b"\x00" * 7)  # half a record header
    got = QuorumLog(tmp_path).recover()
    assert [(r.id, r.message.body[:1], r.state) for r in got] == [(kept, b"1", READY)]


def test_settled_segments_are_deleted(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.setattr(quorum, "SEGMENT_BYTES", 1000)  # type: ignore[attr-defined]
    log = QuorumLog(tmp_path)
    ids = []
    for i in range(40):
        ids.append(log.append(msg(i, 100)))
        log.sync()
    segments = len(list((tmp_path / "log").glob("*.seg")))
    assert segments > 3
    for mid in ids[:30]:
        log.settle(mid)
    log.release(ids[30])
    log.sync()
    assert len(list((tmp_path / "log").glob("*.seg"))) < segments
    log.close()
    got = QuorumLog(tmp_path).recover()
    assert [r.id for r in got] == ids[30:]
