"""The message store and the paging area: what was added and not removed comes back,
in order, after a reopen, without being loaded into memory; page files give back what
was paged, field by field; emptied segments and read page files are deleted."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from leveret.broker.entry import Entry
from leveret.broker.message import Message
from leveret.store import messages as messages_module
from leveret.store.messages import MessageLog, Recovered
from leveret.store.paging import PageFiles

EK = b"\x02ex\x02rk"


def reopen(log: MessageLog, path: Path) -> tuple[MessageLog, dict[int, Recovered]]:
    log.close()
    again = MessageLog(path)
    return again, again.recover()


def bodies(log: MessageLog, rec: Recovered) -> list[bytes]:
    return [body for _, _, body in log.read(rec.ids, rec.lengths, 0, len(rec.ids))]


def test_log_contract(tmp_path: Path) -> None:
    log = MessageLog(tmp_path)
    log.recover()
    q = log.queue_id("/", "q")
    other = log.queue_id("/", "other")
    v = log.queue_id("v", "q")
    ids = [log.add(q, EK, b"\x00\x00", f"m{i}".encode()) for i in range(6)]
    log.add(other, b"\x00\x05other", b"\x00\x00", b"o")
    log.add(v, b"\x00\x01q", b"\x10\x00\x02", b"v")
    log.remove(q, ids[1])
    log.drop_queue(other)
    log.sync()
    log, found = reopen(log, tmp_path)
    assert log.queues == {q: ("/", "q"), v: ("v", "q")}
    assert log.queue_id("/", "q") == q  # the same queue gets its messages back
    assert bodies(log, found[q]) == [b"m0", b"m2", b"m3", b"m4", b"m5"]
    assert found[q].body_bytes == 10
    ek, props, body = log.read(found[v].ids, found[v].lengths, 0, 1)[0]
    assert (ek, props, body) == (b"\x00\x01q", b"\x10\x00\x02", b"v")
    assert other not in found
    log.close()


def test_unsynced_removals_may_come_back_but_never_lose_added(tmp_path: Path) -> None:
    log = MessageLog(tmp_path)
    log.recover()
    q = log.queue_id("/", "q")
    first = log.add(q, EK, b"\x00\x00", b"a")
    log.add(q, EK, b"\x00\x00", b"b")
    log.sync()
    log.remove(q, first)  # not synced: as after a crash
    log._acks.clear()
    log._writer = None
    again = MessageLog(tmp_path)
    found = again.recover()
    assert bodies(again, found[q]) == [b"a", b"b"]
    again.close()


def test_torn_tail_is_cut(tmp_path: Path) -> None:
    log = MessageLog(tmp_path)
    log.recover()
    q = log.queue_id("/", "q")
    log.add(q, EK, b"\x00\x00", b"whole")
    log.close()
    seg = next(tmp_path.glob("*.seg"))
    with open(seg, "ab") as f:
        f.write(b"A\x00\x00\x00\x01\x00\x06\x00\x00\x00\x02\x00\x00\x10\x00par")
    again = MessageLog(tmp_path)
    found = again.recover()
    assert bodies(again, found[q]) == [b"whole"]
    # appending goes on in a new segment, after the cut
    again.add(q, EK, b"\x00\x00", b"next")
    again.close()
    third = MessageLog(tmp_path)
    assert bodies(third, third.recover()[q]) == [b"whole", b"next"]
    third.close()


def test_emptied_segments_are_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(messages_module, "SEGMENT_BYTES", 1000)
    log = MessageLog(tmp_path)
    log.recover()
    q = log.queue_id("/", "q")
    ids = [log.add(q, EK, b"\x00\x00", b"x" * 300) for _ in range(12)]
    log.sync()
    assert len(list(tmp_path.glob("*.seg"))) == 3  # four records each
    for store_id in ids[:8]:
        log.remove(q, store_id)
    log.sync()
    # the first two segments are empty and gone; the last one is still appended to
    assert len(list(tmp_path.glob("*.seg"))) == 1
    for store_id in ids[8:]:
        log.remove(q, store_id)
    log.sync()
    assert len(list(tmp_path.glob("*.seg"))) == 1
    log.add(q, EK, b"\x00\x00", b"y" * 800)  # rolls over: the emptied one goes
    log.add(q, EK, b"\x00\x00", b"z" * 800)
    log.sync()
    assert len(list(tmp_path.glob("*.seg"))) == 1
    log, found = reopen(log, tmp_path)
    assert bodies(log, found[q]) == [b"y" * 800, b"z" * 800]
    log.drop_queue(q)
    log.add(log.queue_id("/", "new"), EK, b"\x00\x00", b"n")
    log.sync()
    assert len(list(tmp_path.glob("*.seg"))) == 1
    log.close()


def test_earlier_single_file_log_is_converted(tmp_path: Path) -> None:
    def s(raw: str) -> bytes:
        b = raw.encode()
        return struct.pack(">I", len(b)) + b

    def add(mid: int, queue: str, body: bytes) -> bytes:
        payload = (
            struct.pack(">Q", mid)
            + s("/")
            + s(queue)
            + s("ex")
            + s("rk")
            + struct.pack(">I", 2)
            + b"\x00\x00"
            + struct.pack(">I", len(body))
            + body
        )
        return b"A" + struct.pack(">I", len(payload)) + payload

    remove = struct.pack(">Q", 2) + s("/") + s("q")
    (tmp_path / "messages.log").write_bytes(
        add(1, "q", b"one")
        + add(2, "q", b"two")
        + add(3, "q", b"three")
        + b"R"
        + struct.pack(">I", len(remove))
        + remove
    )
    log = MessageLog(tmp_path)
    found = log.recover()
    q = log.queue_id("/", "q")
    assert bodies(log, found[q]) == [b"one", b"three"]
    assert not (tmp_path / "messages.log").exists()
    log, found = reopen(log, tmp_path)
    assert bodies(log, found[q]) == [b"one", b"three"]
    assert log.read(found[q].ids, found[q].lengths, 0, 1)[0][0] == b"\x02ex\x02rk"
    log.close()


def entry(i: int, store_id: int = 0, size: int = 100) -> Entry:
    m = Message("ex", "rk", EK, b"\x00\x00", b"%06d" % i + b"." * (size - 6))
    e = Entry(m, i, expires_at=1000 + i)
    e.store_id = store_id
    e.delivery_count = i % 3
    e.redelivered = bool(i % 2)
    return e


def test_page_files_give_back_what_was_paged(tmp_path: Path) -> None:
    pager = PageFiles(tmp_path / "t", "q")
    assert pager.write([entry(i, store_id=i if i % 4 == 0 else 0) for i in range(1, 101)])
    assert pager.write([entry(i) for i in range(101, 201)])
    assert (pager.count, pager.bytes) == (200, 20000)
    assert pager.persistent == (25, 2500)
    got: list[Entry] = []
    while pager.count:
        chunk = pager.read(1500)
        assert chunk
        got += chunk
    assert [e.seq for e in got] == list(range(1, 201))
    e = got[8]
    assert (e.message.exchange, e.message.routing_key, e.message.exchange_and_key) == (
        "ex",
        "rk",
        EK,
    )
    assert (e.expires_at, e.delivery_count, e.redelivered, e.store_id) == (1009, 0, True, 0)
    assert got[3].store_id == 4
    assert got[150].message.body.startswith(b"000151")
    assert pager.persistent == (0, 0) and pager.bytes == 0
    assert not list((tmp_path / "t").iterdir())  # read files are deleted


def test_a_large_message_and_the_recovered_run_first(tmp_path: Path) -> None:
    log = MessageLog(tmp_path / "s")
    log.recover()
    q = log.queue_id("/", "q")
    for i in range(3):
        log.add(q, EK, b"\x00\x00", b"kept%d" % i)
    log, found = reopen(log, tmp_path / "s")
    pager = PageFiles(tmp_path / "t", "q", log, found[q])
    assert pager.recovered and pager.count == 3
    assert pager.write([entry(4, size=300_000), entry(5)])
    first = pager.read(1)
    assert [(e.seq, e.redelivered, e.message.body) for e in first] == [(1, True, b"kept0")]
    rest = pager.read(10**9)
    assert [e.seq for e in rest] == [2, 3, 4, 5]
    assert len(rest[2].message.body) == 300_000
    assert not pager.recovered
    log.close()


def test_purge_gives_the_store_ids_of_persistent_messages(tmp_path: Path) -> None:
    pager = PageFiles(tmp_path, "q")
    pager.write([entry(1, store_id=11), entry(2), entry(3, store_id=33)])
    pager.write([entry(4, store_id=44)])
    assert [e.seq for e in pager.read(1)] == [1]
    assert sorted(pager.clear()) == [33, 44]
    assert pager.count == 0 and not list(tmp_path.iterdir())


def test_a_full_disk_keeps_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pager = PageFiles(tmp_path, "q")
    assert pager.write([entry(1)])
    real = os.pwrite
    calls = []

    def full(fd: int, data: bytes | memoryview, at: int) -> int:
        calls.append(at)
        if len(calls) == 1:
            return real(fd, bytes(data)[:10], at)  # a short write, then no space
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    assert not pager.write([entry(2), entry(3)])
    monkeypatch.setattr(os, "pwrite", real)
    assert pager.count == 1
    assert pager.write([entry(4)])
    assert [e.seq for e in pager.read(10**6)] == [1, 4]
